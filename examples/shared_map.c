/* heapd-shared-map: worker processes share one hash map in a heapd heap.
 *
 * The parent forks N workers.  Each connects to heapd itself, after the
 * fork (a client is never used across fork), attaches a mutator and finds
 * the map by its global name "demo.map": the first worker creates it with
 * heapd_global_once, the others wait for it and get the same object at the
 * same address.  The map is a table object of MAP_BUCKETS reference fields;
 * each bucket is a chain of entry objects (next, key, value) and keys and
 * values are string objects.  The workers replace values all the time, so
 * old values become garbage, and heapd collects it while they work.
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
 * if --young: the map's new strings and entries are born in its nursery,
 * and each is published, i.e. copied into the shared heap, when it is
 * stored into the map), makes the same map under the global "bench.map",
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
 * The example follows Note [Client GC discipline] in heapd.h: what was
 * reachable from a root at a mutator's last safepoint stays valid until its
 * next one.  Entries are never unlinked, so the table (a global) and every
 * entry stay reachable for good, and C pointers to them are safe at any
 * time.  A new string or entry is held in a C local only until the next
 * safepoint: either it is stored into the map (heapd_write / heapd_cas)
 * before that, or it is pushed on the root stack (which stores the root
 * before its safepoint) and stays there until it is stored.  Roots are
 * popped only after the store, because heapd_root_pop is a safepoint too.
 * scripts/demo runs heapd with verify = true, which checks after every
 * cycle that everything reachable is allocated and logs what is not (as
 * verify_failures), and the map checks here would see a damaged string: a
 * demo run of about 100 cycles and 12 million updates shows neither.
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

#define MAP_NAME "demo.map"
#define MAP_BUCKETS 64
#define MAP_KEYS 256            /* shared keys "k000" .. "k255" */
#define MAX_WORKERS 8           /* each also owns a key "worker-N" */
#define BATCH 2000              /* updates between two looks at the parent */
#define PACE_MS 2               /* then a pause, so the demo shares the CPU */
#define STR_MAX 64              /* longest string object, with its NUL */
#define START_TIMEOUT_S 20      /* bounded waits of the parent */
#define CRASH_TIMEOUT_S 10
#define STOP_TIMEOUT_S 20

/* An entry of a bucket's chain: three reference fields, no raw bytes. */
struct entry {
    void *next;     /* the next entry of the chain, or NULL */
    void *key;      /* a string object, never changed */
    void *value;    /* a string object, replaced with heapd_write */
};
#define ENTRY_NREFS 3

/* ---- the map ---- */

/* Reference fields are written by other processes: load them with acquire
 * (heapd_write stores with release), so what they point to is seen
 * initialised. */
static void *load_ref(void **field)
{
    return __atomic_load_n(field, __ATOMIC_ACQUIRE);
}

static unsigned bucket_of(const char *key)
{
    uint32_t h = 2166136261u;           /* FNV-1a */

    for (; *key; key++)
        h = (h ^ (unsigned char)*key) * 16777619u;
    return h % MAP_BUCKETS;
}

/* A new string object holding S.  Only a C local refers to it: the caller
 * roots or stores it before its next safepoint. */
static void *string_new(heapd_mutator *m, const char *s)
{
    size_t n = strlen(s) + 1;
    void *obj = heapd_alloc(m, 0, n);

    if (obj)
        memcpy(heapd_bytes(obj), s, n);
    return obj;
}

static struct entry *chain_find(struct entry *e, const char *key)
{
    for (; e; e = load_ref(&e->next))
        if (strcmp(heapd_bytes(load_ref(&e->key)), key) == 0)
            return e;
    return NULL;
}

/* heapd_global_once's initialiser: the table goes from heapd_alloc straight
 * into the global, with no safepoint in between. */
static void *map_create(heapd_mutator *m, void *arg)
{
    void *table = heapd_alloc(m, MAP_BUCKETS, 0);

    if (table)
        *(bool *)arg = true;
    return table;
}

/* Set KEY to a new string VAL.  Returns 0, or -errno with a message on
 * stderr.  See Note [Shared map GC discipline]. */
static int map_put(heapd_mutator *m, void **table, const char *key,
                   const char *val, const char *who)
{
    void **head = &table[bucket_of(key)];
    size_t base = heapd_root_depth(m);
    struct entry *e, *found;
    void *v, *k, *first;
    const char *what;
    int rc = 0;

    if (!(v = string_new(m, val))) {
        what = "heapd_alloc (value)";
        goto fail;
    }
    /* an existing key: V is stored before any safepoint, and the value it
     * replaces is garbage from now on */
    if ((found = chain_find(load_ref(head), key))) {
        heapd_write(m, found, &found->value, v);
        return 0;
    }
    /* a new key: V, K and the entry are rooted while the entry is built
     * and linked */
    if (heapd_root_push(m, v) == (size_t)-1) {
        what = "heapd_root_push";
        goto fail;
    }
    if (!(k = string_new(m, key))) {
        what = "heapd_alloc (key)";
        goto fail;
    }
    if (heapd_root_push(m, k) == (size_t)-1) {
        what = "heapd_root_push";
        goto fail;
    }
    if (!(e = heapd_alloc(m, ENTRY_NREFS, 0))) {
        what = "heapd_alloc (entry)";
        goto fail;
    }
    if (heapd_root_push(m, e) == (size_t)-1) {
        what = "heapd_root_push";
        goto fail;
    }
    /* for a young mutator (--bench --young) V and K may have moved at the
     * allocations since they were rooted: read them back (Note [Young
     * objects, for the program] in heapd.h); for any other, a no-op */
    v = heapd_root_get(m, base);
    k = heapd_root_get(m, base + 1);
    /* entries are only ever added at a chain's head, so a failed CAS
     * means "look again" */
    heapd_write(m, e, &e->key, k);
    heapd_write(m, e, &e->value, v);
    for (;;) {
        first = load_ref(head);
        if ((found = chain_find(first, key))) {
            /* another worker added KEY meanwhile; E becomes garbage */
            heapd_write(m, found, &found->value, v);
            break;
        }
        heapd_write(m, e, &e->next, first);
        if (heapd_cas(m, table, head, first, e))
            break;
    }
    goto out;
fail:
    rc = -errno;
    fprintf(stderr, "%s: %s failed for key %s: %s\n", who, what, key,
            strerror(errno));
out:
    /* everything rooted here is stored in the map (or garbage) by now */
    heapd_root_pop(m, heapd_root_depth(m) - base);
    return rc;
}

/* ---- checking the map ---- */

struct map_report {
    unsigned keys;                      /* expected keys found */
    unsigned expected;                  /* MAP_KEYS + the workers' keys */
    char progress[MAX_WORKERS][STR_MAX];/* the "worker-N" values */
    char problem[200];                  /* the first problem, "" if none */
};

static bool in_heap(heapd_client *c, const void *p)
{
    uintptr_t b = (uintptr_t)heapd_heap_base(c), a = (uintptr_t)p;

    return a % 8 == 0 && a > b && a < b + heapd_heap_size(c);
}

/* The text of string object S, or NULL if S is not one. */
static const char *string_text(heapd_client *c, void *s)
{
    const char *b;
    size_t n;

    if (!in_heap(c, s) || heapd_nrefs(s) != 0)
        return NULL;
    n = heapd_nbytes(s);
    b = heapd_bytes(s);
    if (n < 2 || n > STR_MAX || memchr(b, '\0', n) != b + n - 1)
        return NULL;
    return b;
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

/* Walk every chain of TABLE (no safepoint meanwhile) and check it: each
 * entry well-formed and in the right bucket, each expected key there once,
 * no other key.  Returns true if all is well; R says what was found. */
static bool map_check(heapd_client *c, void **table, int workers,
                      struct map_report *r)
{
    bool seen[MAP_KEYS + MAX_WORKERS] = { false };

    memset(r, 0, sizeof *r);
    r->expected = MAP_KEYS + (unsigned)workers;
    for (unsigned b = 0; b < MAP_BUCKETS && !r->problem[0]; b++) {
        unsigned len = 0;
        for (struct entry *e = load_ref(&table[b]); e;
             e = load_ref(&e->next)) {
            const char *key, *val;
            int idx;

            if (!in_heap(c, e) || heapd_nrefs(e) != ENTRY_NREFS) {
                snprintf(r->problem, sizeof r->problem, "bucket %u: entry "
                         "%u at %p is not an entry object", b, len, (void *)e);
                break;
            }
            if (++len > MAP_KEYS + MAX_WORKERS) {
                snprintf(r->problem, sizeof r->problem, "bucket %u: the "
                         "chain is longer than the number of keys", b);
                break;
            }
            key = string_text(c, load_ref(&e->key));
            val = string_text(c, load_ref(&e->value));
            idx = key ? key_index(key) : -1;
            if (idx < 0 || bucket_of(key) != b) {
                snprintf(r->problem, sizeof r->problem, "bucket %u: "
                         "unexpected or damaged key at %p", b, (void *)e);
                break;
            }
            if (seen[idx]) {
                snprintf(r->problem, sizeof r->problem, "key %s is in the "
                         "map twice", key);
                break;
            }
            seen[idx] = true;
            if (!val || !value_ok(idx, key, val, workers)) {
                snprintf(r->problem, sizeof r->problem, "key %s: the value "
                         "is missing or not well-formed", key);
                break;
            }
            if (idx < MAP_KEYS + workers)
                r->keys++;
            if (idx >= MAP_KEYS)
                snprintf(r->progress[idx - MAP_KEYS], STR_MAX, "%s", val);
        }
    }
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
static int put_progress(heapd_mutator *m, void **table, const struct worker *w,
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
    void **table;
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

    if (!map_check(c, table, w->workers, &r)) {
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
    void **table;
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
    if (!map_check(c, table, workers, &r)) {
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
    void **table;
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
            /* no safepoint until the next update: the entry and its value
             * stay valid (Note [Shared map GC discipline]) */
            struct entry *e = chain_find(load_ref(&table[bucket_of(key)]),
                                         key);
            if (!e) {
                fprintf(stderr, "bench: key %s is missing from the map\n",
                        key);
                goto out;
            }
            found_bytes += strlen(heapd_bytes(load_ref(&e->value)));
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
    if (!map_check(c, table, 1, &r)) {
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

    printf("phase 1: %d worker processes share a hash map in the heap "
           "(%d buckets, %d keys + one per worker)\n", workers, MAP_BUCKETS,
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
