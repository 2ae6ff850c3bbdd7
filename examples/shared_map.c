/* heapd-shared-map: worker processes share one hash map in a heapd heap.
 *
 * The parent forks N workers.  Each connects to heapd itself, after the
 * fork (a client is never used across fork), attaches a mutator and finds
 * the map by its global name "demo.map": the first worker creates it with
 * heapd_global_once, the others wait for it and get the same object at the
 * same address.  The map is libheapd's concurrent hash map
 * (heapd_collections.h), keys and values are its strings.  The workers
 * replace values all the time, so old values become garbage, and heapd
 * collects it while they work.
 *
 *   phase 1  all workers update the map; the parent prints heapd_stats
 *   phase 2  the parent SIGKILLs one worker in the middle of its updates;
 *            the others go on
 *   phase 3  the survivors stop and each checks the map; the parent runs
 *            two collections and checks it again: every key is there once,
 *            with a well-formed value (the killed worker's last ones too)
 *
 *   heapd-shared-map [--socket PATH] [--workers N] [--seconds S]
 *
 * Exit status 0 if every check passed, 1 otherwise.
 *
 * Benchmark mode (scripts/bench runs it, docs/benchmarks.md reports it):
 *
 *   heapd-shared-map --bench [--young] [--ops N] [--socket PATH]
 *
 * One process, no fork: it attaches one mutator (with HEAPD_MUTATOR_YOUNG
 * if --young: the map's new strings and entries are born young, and each
 * is published, i.e. made shared where it is, when it is stored into the
 * map), makes the same map under the global "bench.map",
 * puts every key, then times N operations (default 5000000) on random
 * keys: 20 % updates (map_put of a new value string, the old one becomes
 * garbage) and 80 % lookups (find the entry, read its value string).  It
 * prints
 *   RESULT map impl=heapd|heapd_young ops=N updates=U total_ms=..
 *          ops_per_s=.. cycles=.. pause_max_ns=.. minor_collections=.. ...
 * and then checks the map as the demo does (exit status 1 if damaged).
 *
 * Note [Shared map GC discipline]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * The example follows Note [Client GC discipline] in heapd.h: what a
 * local of an attached thread points to stays alive.  The map is a
 * global's target; a new value string is handed straight to
 * heapd_map_put_str; a value a lookup returns is held in a local while it
 * is used, even when another worker replaces it meanwhile: the map's
 * Note [Shared map] says why that is safe.  The parent prints, at the
 * end, what C stack words alone kept (conservative_roots,
 * conservative_bytes_retained).  scripts/demo runs heapd with
 * verify = true, which checks after every cycle that everything reachable
 * is allocated and logs what is not (as verify_failures), and the map
 * checks here would see a damaged string: a demo run of about 100 cycles
 * and 12 million updates shows neither.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "heapd.h"
#include "heapd_collections.h"

#define MAP_NAME "demo.map"
#define MAP_KEYS 256            /* shared keys "k000" .. "k255" */
#define MAX_WORKERS 8           /* each also owns a key "worker-N" */
#define BATCH 2000              /* updates between two looks at the parent */
#define PACE_MS 2               /* then a pause, so the demo shares the CPU */
#define STR_MAX 64              /* longest string object, with its NUL */
#define START_TIMEOUT_S 20      /* bounded waits of the parent */
#define CRASH_TIMEOUT_S 10
#define STOP_TIMEOUT_S 20

/* ---- the map ---- */

/* heapd_global_once's initialiser: the map goes from heapd_map_new
 * straight into the global, with no safepoint in between. */
static void *map_create(heapd_mutator *m, void *arg)
{
    void *map = heapd_map_new(m, HEAPD_MAP_STR, MAP_KEYS + MAX_WORKERS);

    if (map)
        *(bool *)arg = true;
    return map;
}

/* Set KEY to a new string VAL.  Returns 0, or -errno with a message on
 * stderr.  See Note [Shared map GC discipline]. */
static int map_put(heapd_mutator *m, void *map, const char *key,
                   const char *val, const char *who)
{
    const char *what = "heapd_str_new (value)";
    void *v = heapd_str_new(m, val, strlen(val));
    int rc = v ? 0 : -errno;

    if (v) {
        what = "heapd_map_put_str";
        rc = heapd_map_put_str(m, map, key, strlen(key), v, 0);
    }
    if (rc >= 0)
        return 0;
    fprintf(stderr, "%s: %s failed for key %s: %s\n", who, what, key,
            heapd_last_error());
    return rc;
}

/* ---- checking the map ---- */

struct map_report {
    unsigned keys;                      /* expected keys found */
    unsigned expected;                  /* MAP_KEYS + the workers' keys */
    char progress[MAX_WORKERS][STR_MAX];/* the "worker-N" values */
    char problem[200];                  /* the first problem, "" if none */
};

/* The text of string S, or NULL if S is not one. */
static const char *string_text(void *s)
{
    if (!heapd_is_str(s) || heapd_str_len(s) < 1 ||
        heapd_str_len(s) >= STR_MAX ||
        strlen(heapd_str_data(s)) != heapd_str_len(s))
        return NULL;
    return heapd_str_data(s);
}

/* KEY's index in report order: "kNNN", then "worker-N"; -1 if unknown.
 * A key of a worker N >= WORKERS is left from an earlier run with more
 * workers (the global outlives the processes). */
static int key_index(const char *key)
{
    unsigned i;
    int end = 0;

    if (sscanf(key, "k%3u%n", &i, &end) == 1 && !key[end] && end == 4 &&
        i < MAP_KEYS)
        return (int)i;
    if (sscanf(key, "worker-%u%n", &i, &end) == 1 && !key[end] &&
        i < MAX_WORKERS)
        return MAP_KEYS + (int)i;
    return -1;
}

/* Whether VAL is well-formed for key number IDX: "KEY by worker-W #SEQ"
 * for a shared key, "pid P, SEQ updates" for a worker's own. */
static bool value_ok(int idx, const char *key, const char *val, int workers)
{
    unsigned w, pid;
    uint64_t seq;
    size_t klen = strlen(key);
    int end = 0;

    if (idx >= MAP_KEYS)
        return sscanf(val, "pid %u, %" SCNu64 " updates%n", &pid, &seq,
                      &end) == 2 && !val[end];
    if (strncmp(val, key, klen) != 0)
        return false;
    return sscanf(val + klen, " by worker-%u #%" SCNu64 "%n", &w, &seq,
                  &end) == 2 && !val[klen + end] && w < (unsigned)workers;
}

/* Check MAP: its invariants (heapd_map_verify), then every entry, by
 * iteration: each well-formed, each expected key there once, no other
 * key.  Returns true if all is well; R says what was found. */
static bool map_check(heapd_mutator *m, void *map, int workers,
                      struct map_report *r)
{
    bool seen[MAP_KEYS + MAX_WORKERS] = { false };
    heapd_map_iter it;
    void *k, *v;
    int n;

    memset(r, 0, sizeof *r);
    r->expected = MAP_KEYS + (unsigned)workers;
    if ((n = heapd_map_verify(map)) < 0) {
        snprintf(r->problem, sizeof r->problem, "%s", heapd_last_error());
        return false;
    }
    if ((n = heapd_map_iter_begin(m, map, &it)) < 0) {
        snprintf(r->problem, sizeof r->problem, "heapd_map_iter_begin: %s",
                 heapd_last_error());
        return false;
    }
    while (heapd_map_iter_next(&it, &k, &v)) {
        const char *key = string_text(k), *val = string_text(v);
        int idx = key ? key_index(key) : -1;

        if (idx < 0) {
            snprintf(r->problem, sizeof r->problem, "an unexpected or "
                     "damaged key at %p", k);
            break;
        }
        if (seen[idx]) {
            snprintf(r->problem, sizeof r->problem, "key %s is in the map "
                     "twice", key);
            break;
        }
        seen[idx] = true;
        if (!val || !value_ok(idx, key, val, workers)) {
            snprintf(r->problem, sizeof r->problem, "key %s: the value is "
                     "missing or not well-formed", key);
            break;
        }
        if (idx < MAP_KEYS + workers)
            r->keys++;
        if (idx >= MAP_KEYS)
            snprintf(r->progress[idx - MAP_KEYS], STR_MAX, "%s", val);
    }
    heapd_map_iter_end(&it);
    if (!r->problem[0] && r->keys != r->expected)
        snprintf(r->problem, sizeof r->problem, "%u of %u keys missing",
                 r->expected - r->keys, r->expected);
    return !r->problem[0];
}

/* ---- workers ---- */

struct worker {
    int id, workers;
    const char *sock;
    int ready_fd;   /* write one byte when the map holds all our keys */
    int stop_fd;    /* readable (EOF) when the parent says stop */
};

static heapd_client *connect_as(const char *sock, const char *name)
{
    heapd_connect_opts o = { .socket_path = sock, .client_name = name };
    heapd_client *c = NULL;
    int rc = heapd_connect(&c, &o);

    if (rc < 0)
        fprintf(stderr, "%s: cannot connect to heapd: %s\n", name,
                heapd_last_error());
    return c;
}

/* Put the worker's own key, "worker-N" = "pid P, SEQ updates". */
static int put_progress(heapd_mutator *m, void *table, const struct worker *w,
                        uint64_t seq, const char *name)
{
    char key[24], val[STR_MAX];

    snprintf(key, sizeof key, "worker-%d", w->id);
    snprintf(val, sizeof val, "pid %d, %" PRIu64 " updates", (int)getpid(),
             seq);
    return map_put(m, table, key, val, name);
}

static int worker_main(const struct worker *w)
{
    char name[32], key[24], val[STR_MAX];
    struct pollfd stop = { .fd = w->stop_fd, .events = POLLIN };
    unsigned seed = (unsigned)getpid() * 2654435761u;
    struct map_report r;
    heapd_client *c;
    heapd_mutator *m = NULL;
    void *table;
    uint64_t seq = 0;
    bool created = false;
    int rc = 1, err;

    snprintf(name, sizeof name, "worker-%d", w->id);
    if (!(c = connect_as(w->sock, name)))
        return 1;
    if ((err = heapd_attach(c, &m)) < 0) {
        fprintf(stderr, "%s: heapd_attach: %s\n", name, heapd_last_error());
        goto out;
    }
    /* the table is a global's target, so this C pointer stays valid: see
     * Note [Shared map GC discipline] */
    if (!(table = heapd_global_once(m, MAP_NAME, map_create, &created))) {
        fprintf(stderr, "%s: heapd_global_once(\"%s\"): %s\n", name,
                MAP_NAME, strerror(errno));
        goto out;
    }
    printf("  %s (pid %d): map \"%s\" at %p, %s\n", name, (int)getpid(),
           MAP_NAME, (void *)table, created ? "created it" : "found it");
    fflush(stdout);

    /* every shared key once, then our own: the map has them all before
     * the parent starts the clock */
    for (unsigned i = 0; i < MAP_KEYS; i++) {
        snprintf(key, sizeof key, "k%03u", i);
        snprintf(val, sizeof val, "%s by worker-%d #%" PRIu64, key, w->id,
                 ++seq);
        if (map_put(m, table, key, val, name) < 0)
            goto out;
    }
    if (put_progress(m, table, w, seq, name) < 0)
        goto out;
    if (write(w->ready_fd, "r", 1) != 1) {
        fprintf(stderr, "%s: cannot tell the parent: %s\n", name,
                strerror(errno));
        goto out;
    }

    for (;;) {
        for (int i = 0; i < BATCH; i++) {
            snprintf(key, sizeof key, "k%03u", (unsigned)rand_r(&seed) %
                     MAP_KEYS);
            snprintf(val, sizeof val, "%s by worker-%d #%" PRIu64, key,
                     w->id, ++seq);
            if (map_put(m, table, key, val, name) < 0)
                goto out;
        }
        if (put_progress(m, table, w, seq, name) < 0)
            goto out;
        /* waiting: in a blocking region, never holding up a collection */
        heapd_blocking_enter(m);
        err = poll(&stop, 1, PACE_MS);
        heapd_blocking_leave(m);
        if (err > 0)
            break;
        if (err < 0 && errno != EINTR) {
            fprintf(stderr, "%s: poll: %s\n", name, strerror(errno));
            goto out;
        }
    }

    if (!map_check(m, table, w->workers, &r)) {
        printf("  %s: FAILED: %s\n", name, r.problem);
        goto out;
    }
    printf("  %s: stopped after %" PRIu64 " updates; checked the map: "
           "%u/%u keys, every value well-formed\n", name, seq, r.keys,
           r.expected);
    rc = 0;
out:
    fflush(stdout);
    heapd_detach(m);
    heapd_disconnect(c);
    return rc;
}

/* ---- the parent ---- */

static pid_t pids[MAX_WORKERS];
static bool alive[MAX_WORKERS];
/* heapd's counters are since it started: the crash's share is the
 * difference from just before the kill */
static uint64_t orphaned_before, adopted_before;

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, ms % 1000 * 1000000L };

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static double mib(uint64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

/* Reap workers that exited; false (with a message) if one did unasked. */
static bool workers_running(int workers)
{
    bool ok = true;
    int st;

    for (int i = 0; i < workers; i++) {
        if (!alive[i] || waitpid(pids[i], &st, WNOHANG) != pids[i])
            continue;
        alive[i] = false;
        ok = false;
        if (WIFEXITED(st))
            fprintf(stderr, "worker-%d (pid %d) exited early with status "
                    "%d; its messages are above\n", i, (int)pids[i],
                    WEXITSTATUS(st));
        else
            fprintf(stderr, "worker-%d (pid %d) died of signal %d\n", i,
                    (int)pids[i], WTERMSIG(st));
    }
    return ok;
}

/* Wait for WORKERS ready bytes on FD, at most START_TIMEOUT_S. */
static bool wait_ready(int fd, int workers)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    int got = 0;
    char b;

    for (int ms = 0; got < workers; ms += 100) {
        if (!workers_running(workers))
            return false;
        if (ms >= START_TIMEOUT_S * 1000) {
            fprintf(stderr, "only %d of %d workers were ready after %d s; "
                    "is heapd overloaded? see its log\n", got, workers,
                    START_TIMEOUT_S);
            return false;
        }
        if (poll(&p, 1, 100) > 0 && read(fd, &b, 1) == 1)
            got++;
    }
    return true;
}

/* Print one line of statistics; keeps the largest committed size in
 * *COMMITTED_MAX. */
static bool sample(heapd_client *c, double t, uint64_t *committed_max)
{
    heapd_stats_t st;

    if (heapd_stats(c, &st) < 0) {
        fprintf(stderr, "heapd_stats: %s\n", heapd_last_error());
        return false;
    }
    if (st.heap_committed_bytes > *committed_max)
        *committed_max = st.heap_committed_bytes;
    printf("  %4.1fs  cycles %4" PRIu64 "  allocated %6.1f MiB  live %5.2f "
           "MiB  committed %5.2f MiB\n", t, st.cycles_completed,
           mib(st.bytes_allocated), mib(st.live_bytes),
           mib(st.heap_committed_bytes));
    fflush(stdout);
    return true;
}

/* Run for SECONDS, printing statistics every second. */
static bool run_phase(heapd_client *c, int workers, int seconds, double *t,
                      uint64_t *committed_max)
{
    for (int s = 0; s < seconds; s++) {
        sleep_ms(1000);
        *t += 1.0;
        if (!workers_running(workers) || !sample(c, *t, committed_max))
            return false;
    }
    return true;
}

/* SIGKILL the last worker and wait until heapd has counted the crash. */
static bool kill_one(heapd_client *c, int victim)
{
    heapd_stats_t st;
    uint64_t before;
    int status;

    if (heapd_stats(c, &st) < 0) {
        fprintf(stderr, "heapd_stats: %s\n", heapd_last_error());
        return false;
    }
    before = st.clients_crashed;
    orphaned_before = st.segments_orphaned;
    adopted_before = st.segments_adopted;
    printf("phase 2: SIGKILL worker-%d (pid %d) in the middle of its "
           "updates; the others go on\n", victim, (int)pids[victim]);
    fflush(stdout);
    if (kill(pids[victim], SIGKILL) < 0 ||
        waitpid(pids[victim], &status, 0) != pids[victim]) {
        fprintf(stderr, "cannot kill worker-%d: %s\n", victim,
                strerror(errno));
        return false;
    }
    alive[victim] = false;
    for (int ms = 0; ; ms += 10) {
        if (heapd_stats(c, &st) < 0) {
            fprintf(stderr, "heapd_stats: %s\n", heapd_last_error());
            return false;
        }
        if (st.clients_crashed > before)
            break;
        if (ms >= CRASH_TIMEOUT_S * 1000) {
            fprintf(stderr, "heapd did not count the killed worker as "
                    "crashed within %d s; see its log\n", CRASH_TIMEOUT_S);
            return false;
        }
        sleep_ms(10);
    }
    printf("  heapd cleaned up after it: clients_crashed %" PRIu64
           ", segments orphaned %" PRIu64 "\n", st.clients_crashed,
           st.segments_orphaned - orphaned_before);
    return true;
}

/* Close the stop pipe and wait for the survivors to exit 0. */
static bool stop_workers(int workers, int *stop_fd)
{
    bool ok = true;
    int st;

    close(*stop_fd);
    *stop_fd = -1;
    for (int i = 0; i < workers; i++) {
        for (int ms = 0; alive[i]; ms += 10) {
            if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
                alive[i] = false;
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                    fprintf(stderr, "worker-%d failed; its messages are "
                            "above\n", i);
                    ok = false;
                }
            } else if (ms >= STOP_TIMEOUT_S * 1000) {
                fprintf(stderr, "worker-%d (pid %d) did not stop within "
                        "%d s\n", i, (int)pids[i], STOP_TIMEOUT_S);
                return false;
            } else {
                sleep_ms(10);
            }
        }
    }
    return ok;
}

/* After the workers: collect twice, then check the map ourselves. */
static bool final_check(heapd_client *c, int workers, int victim)
{
    struct map_report r;
    heapd_mutator *m = NULL;
    heapd_stats_t st;
    void *table;
    bool ok = false;
    int err;

    if ((err = heapd_attach(c, &m)) < 0) {
        fprintf(stderr, "parent: heapd_attach: %s\n", heapd_last_error());
        return false;
    }
    for (int i = 0; i < 2; i++)
        if ((err = heapd_collect(m, HEAPD_COLLECT_WAIT)) < 0) {
            fprintf(stderr, "parent: heapd_collect: %s\n",
                    heapd_last_error());
            goto out;
        }
    /* not a safepoint; the map is checked before the next one */
    if (!(table = heapd_global_get(m, MAP_NAME))) {
        fprintf(stderr, "parent: global \"%s\" is not set\n", MAP_NAME);
        goto out;
    }
    if (!map_check(m, table, workers, &r)) {
        printf("  parent: FAILED: %s\n", r.problem);
        goto out;
    }
    printf("  parent, after 2 more collections: %u/%u keys, every value "
           "well-formed\n"
           "  the killed worker's own key survived: worker-%d = \"%s\"\n",
           r.keys, r.expected, victim, r.progress[victim]);
    if (heapd_stats(c, &st) < 0) {
        fprintf(stderr, "heapd_stats: %s\n", heapd_last_error());
        goto out;
    }
    printf("  segments orphaned by the crash: %" PRIu64 "; adopted since "
           "(swept free or reused): %" PRIu64 "\n",
           st.segments_orphaned - orphaned_before,
           st.segments_adopted - adopted_before);
    if (st.verify_failures) {
        printf("  FAILED: heapd's verifier found %" PRIu64 " problems; "
               "see its log\n", st.verify_failures);
        goto out;
    }
    ok = true;
out:
    heapd_detach(m);
    return ok;
}

/* ---- benchmark mode ---- */

#define BENCH_MAP_NAME "bench.map"
#define BENCH_UPDATE_PERCENT 20

static uint64_t bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* --bench: see the top of the file.  Returns the exit status. */
static int bench_main(const char *sock, bool young, uint64_t ops)
{
    const char *name = young ? "heapd_young" : "heapd";
    heapd_mutator_opts mo = { .flags = young ? HEAPD_MUTATOR_YOUNG : 0 };
    /* the map's check wants worker-0's own key: this process is worker 0
     * of 1 */
    struct worker self = { .id = 0, .workers = 1 };
    char key[24], val[STR_MAX];
    unsigned seed = 12345;
    uint64_t seq = 0, updates = 0, found_bytes = 0, t0, t1;
    heapd_stats_t st0, st1;
    heapd_young_stats ys;
    struct map_report r;
    heapd_mutator *m = NULL;
    heapd_client *c;
    bool created = false;
    void *table;
    int rc = 1, err;

    if (!(c = connect_as(sock, "shared-map bench")))
        return 1;
    if ((err = heapd_attach_opts(c, &mo, &m)) < 0) {
        fprintf(stderr, "bench: heapd_attach_opts: %s\n", heapd_last_error());
        goto out;
    }
    /* the table is a global's target (published if young): a C pointer to
     * it stays valid, Note [Shared map GC discipline] */
    if (!(table = heapd_global_once(m, BENCH_MAP_NAME, map_create,
                                    &created))) {
        fprintf(stderr, "bench: heapd_global_once(\"%s\"): %s\n",
                BENCH_MAP_NAME, strerror(errno));
        goto out;
    }
    for (unsigned i = 0; i < MAP_KEYS; i++) {
        snprintf(key, sizeof key, "k%03u", i);
        snprintf(val, sizeof val, "%s by worker-0 #%" PRIu64, key, ++seq);
        if (map_put(m, table, key, val, "bench") < 0)
            goto out;
    }
    heapd_blocking_enter(m);
    err = heapd_stats(c, &st0);
    heapd_blocking_leave(m);
    if (err < 0) {
        fprintf(stderr, "bench: heapd_stats: %s\n", heapd_last_error());
        goto out;
    }

    t0 = bench_now_ns();
    for (uint64_t i = 0; i < ops; i++) {
        unsigned x = (unsigned)rand_r(&seed);
        unsigned k = x % MAP_KEYS;
        snprintf(key, sizeof key, "k%03u", k);
        if ((x / MAP_KEYS) % 100 < BENCH_UPDATE_PERCENT) {
            snprintf(val, sizeof val, "%s by worker-0 #%" PRIu64, key, ++seq);
            if (map_put(m, table, key, val, "bench") < 0)
                goto out;
            updates++;
        } else {
            /* no safepoint until the next update: the value stays valid
             * (Note [Shared map GC discipline]) */
            void *v = heapd_map_get_str(m, table, key, strlen(key));
            if (!v) {
                fprintf(stderr, "bench: key %s is missing from the map\n",
                        key);
                goto out;
            }
            found_bytes += heapd_str_len(v);
        }
    }
    t1 = bench_now_ns();

    heapd_young_stats_get(m, &ys);
    heapd_blocking_enter(m);
    err = heapd_stats(c, &st1);
    heapd_blocking_leave(m);
    if (err < 0) {
        fprintf(stderr, "bench: heapd_stats: %s\n", heapd_last_error());
        goto out;
    }
    printf("RESULT map impl=%s ops=%" PRIu64 " updates=%" PRIu64
           " total_ms=%.1f ops_per_s=%.0f cycles=%" PRIu64
           " pause_max_ns=%" PRIu64 " pause_total_ns=%" PRIu64
           " bytes_allocated=%" PRIu64 " minor_collections=%" PRIu64
           " minor_pause_max_ns=%" PRIu64 " minor_pause_p99_ns=%" PRIu64
           " promoted_age_bytes=%" PRIu64 " promoted_published_bytes=%"
           PRIu64 " value_bytes_read=%" PRIu64 "\n",
           name, ops, updates, (t1 - t0) / 1e6,
           (double)ops * 1e9 / (double)(t1 - t0),
           st1.cycles_completed - st0.cycles_completed, st1.pause_max_ns,
           st1.pause_total_ns - st0.pause_total_ns,
           st1.bytes_allocated - st0.bytes_allocated, ys.minor_collections,
           ys.minor_pause_max_ns, ys.minor_pause_p99_ns,
           ys.promoted_age_bytes, ys.promoted_published_bytes, found_bytes);

    /* not timed: the demo's own check of the map */
    if (put_progress(m, table, &self, seq, "bench") < 0)
        goto out;
    if (!map_check(m, table, 1, &r)) {
        printf("bench: FAILED: %s\n", r.problem);
        goto out;
    }
    printf("bench: checked the map: %u/%u keys, every value well-formed\n",
           r.keys, r.expected);
    rc = 0;
out:
    fflush(stdout);
    heapd_detach(m);
    heapd_disconnect(c);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: heapd-shared-map [--socket PATH] [--workers N] "
               "[--seconds S]\n"
               "       heapd-shared-map --bench [--young] [--ops N] "
               "[--socket PATH]\n"
               "  --workers  worker processes, 2..%d (default 4)\n"
               "  --seconds  length of phases 1 and 2 (default 3)\n"
               "  --bench    one process, timed map operations (20 %% "
               "updates)\n"
               "  --young    --bench with a young generation\n"
               "  --ops      --bench's operations (default 5000000)\n",
            MAX_WORKERS);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "socket", required_argument, NULL, 's' },
        { "workers", required_argument, NULL, 'w' },
        { "seconds", required_argument, NULL, 't' },
        { "bench", no_argument, NULL, 'b' },
        { "young", no_argument, NULL, 'y' },
        { "ops", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *sock = NULL;
    int workers = 4, seconds = 3, opt, ready[2], stop[2], victim;
    uint64_t committed_max[2] = { 0, 0 };
    heapd_client *c = NULL;
    heapd_stats_t st;
    double t = 0;
    bool ok = false, bench = false, young = false;
    uint64_t ops = 5000000;
    char *end;

    while ((opt = getopt_long(argc, argv, "s:w:t:h", opts, NULL)) != -1) {
        switch (opt) {
        case 's': sock = optarg; break;
        case 'w': workers = atoi(optarg); break;
        case 't': seconds = atoi(optarg); break;
        case 'b': bench = true; break;
        case 'y': young = true; break;
        case 'o':
            errno = 0;
            ops = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || ops == 0) {
                fprintf(stderr, "--ops: expected a positive count, got "
                        "\"%s\"\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind == argc && bench)
        return bench_main(sock, young, ops);
    if (optind != argc || young || workers < 2 || workers > MAX_WORKERS ||
        seconds < 1 || seconds > 10) {
        usage(stderr);
        return 2;
    }
    victim = workers - 1;
    if (pipe(ready) < 0 || pipe(stop) < 0) {
        perror("pipe");
        return 1;
    }

    printf("phase 1: %d worker processes share a concurrent hash map "
           "(heapd_map) in the heap: %d keys + one per worker\n", workers,
           MAP_KEYS);
    fflush(stdout);
    /* every fork before the parent connects: a client is never used
     * across fork */
    for (int i = 0; i < workers; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            goto out;
        }
        if (pid == 0) {
            struct worker w = { i, workers, sock, ready[1], stop[0] };
            close(ready[0]);
            close(stop[1]);
            _exit(worker_main(&w));
        }
        pids[i] = pid;
        alive[i] = true;
    }
    close(ready[1]);
    close(stop[0]);
    if (!wait_ready(ready[0], workers))
        goto out;
    if (!(c = connect_as(sock, "shared-map parent")))
        goto out;
    if (!sample(c, t, &committed_max[0]) ||
        !run_phase(c, workers, seconds, &t, &committed_max[0]))
        goto out;

    if (!kill_one(c, victim) ||
        !run_phase(c, workers, seconds, &t, &committed_max[1]))
        goto out;

    printf("phase 3: the survivors stop and check the map\n");
    fflush(stdout);
    if (!stop_workers(workers, &stop[1]) || !final_check(c, workers, victim))
        goto out;
    if (heapd_stats(c, &st) < 0) {
        fprintf(stderr, "heapd_stats: %s\n", heapd_last_error());
        goto out;
    }
    printf("memory: %.0f MiB allocated since heapd started; committed at "
           "most %.2f MiB in phase 1, %.2f MiB in phase 2, %.2f MiB now\n",
           mib(st.bytes_allocated), mib(committed_max[0]),
           mib(committed_max[1]), mib(st.heap_committed_bytes));
    printf("C stack words kept %" PRIu64 " objects the precise roots had not "
           "reached, at most %.2f MiB marked from them on, over %" PRIu64
           " cycles\n", st.conservative_roots,
           mib(st.conservative_bytes_retained), st.cycles_completed);
    ok = true;
out:
    for (int i = 0; i < workers; i++)
        if (alive[i]) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
        }
    heapd_disconnect(c);
    printf(ok ? "OK: no process lost anything\n" : "FAILED\n");
    return ok ? 0 : 1;
}
