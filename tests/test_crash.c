/* heapd killed at any instant (Note [The live table] and Note [Recovering
 * the segment table] in daemon/, Note [Recovery cycles], Note [Resuming
 * clients]): while KIDS processes mutate tables that global roots hold,
 * read each other's, and a further one connects and leaves in a loop, a
 * watcher process SIGKILLs heapd at a chosen moment of its cycle (idle, a
 * snapshot being asked, marking, a final sync being asked, sweeping) or
 * after a random delay.  Each kill is followed by a restart that must
 * recover the heap, and the processes live through every kill: each
 * resumes at every restart, none sees an error or a damaged node, every
 * table is whole (each entry a node whose check word matches), no cycle
 * finds a verifier failure, and the segments in use do not grow.  The
 * recovery time of each restart is printed as a distribution.
 *
 * CRASH_KILLS (default 10) sets the number of kills and CRASH_SEED the
 * random seed (printed); the test case "restarts" is the clean-restart
 * torture (CRASH_RESTARTS, below).  scripts/torture runs the long forms,
 * each case alone (CK_RUN_CASE).
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "mutator.h"
#include "check_main.h"

static struct daemon_proc D;

#define KIDS 4
#define ENTRIES 256
#define MAGIC 0x6372617368746573ull

struct node {
    uint64_t index, version, check;
};

static uint64_t node_check(uint64_t index, uint64_t version)
{
    return (index * 0x9e3779b97f4a7c15ull) ^ (version + MAGIC);
}

static bool node_ok(const struct node *n, uint64_t index)
{
    return n->index == index && n->check == node_check(index, n->version);
}

/* A kid's exit codes. */
enum kid_exit {
    KID_GONE = 0,       /* the daemon went away: what a kill does */
    KID_DONE = 1,       /* told to stop (the restart torture) */
    KID_ATTACH = 10,    /* could not connect or attach at its start */
    KID_NO_TABLE,       /* its table's global is missing */
    KID_BAD_NODE,       /* a node it read was damaged */
    KID_NO_MOMENT,      /* the watcher never saw its moment */
};

static const char *kid_exit_name(int st)
{
    if (WIFSIGNALED(st))
        return strsignal(WTERMSIG(st));
    switch (WEXITSTATUS(st)) {
    case KID_GONE: return "saw the daemon go";
    case KID_DONE: return "was told to stop";
    case KID_ATTACH: return "could not connect or attach";
    case KID_NO_TABLE: return "found no table";
    case KID_BAD_NODE: return "read a damaged node";
    case KID_NO_MOMENT: return "never saw its moment";
    default: return "an unknown exit code";
    }
}

/* The moments a watcher kills heapd at. */
enum moment {
    AT_IDLE,
    AT_SNAPSHOT,    /* a snapshot stop is asked */
    AT_MARK,        /* marking, no stop asked */
    AT_FINAL_SYNC,  /* a final sync stop is asked */
    AT_SWEEP,
    AT_RANDOM,      /* after a random delay: grants, connects, anything */
    AT_COUNT,
};

static const char *const moment_names[AT_COUNT] = {
    "idle", "snapshot", "mark", "final sync", "sweep", "random"};

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void table_name(char *buf, size_t n, int k)
{
    snprintf(buf, n, "table%d", k);
}

/* RESUME: the kid reconnects and resumes across restarts and kills (Note
 * [Resuming clients]), as the mutating kids do; the watcher, which ends
 * with its kill, does not. */
static void kid_attach(heapd_client **c, heapd_mutator **m, bool resume)
{
    heapd_connect_opts o = {.socket_path = D.sock,
                            .flags = resume ? 0 : HEAPD_CONNECT_NO_RECONNECT};
    if (heapd_connect(c, &o) != 0 || heapd_attach(*c, m) != 0)
        _exit(KID_ATTACH);
}

/* Set in a kid of the restart torture: the test's word to stop, which
 * comes on this descriptor. */
static int kid_done_fd = -1;

static bool told_to_stop(void)
{
    struct pollfd p = {.fd = kid_done_fd, .events = POLLIN};
    return kid_done_fd >= 0 && poll(&p, 1, 0) > 0;
}

/* Kid K: replace random entries of its table by new nodes, read random
 * entries of the next kid's table, make garbage, ask for cycles; until
 * the daemon is gone, or (the restart torture) until told to stop. */
static void mutate(int k, uint64_t seed, int ready)
{
    heapd_client *c;
    heapd_mutator *m;
    char name[32];
    kid_attach(&c, &m, kid_done_fd >= 0);
    table_name(name, sizeof name, k);
    void **mine = heapd_global_get(m, name);
    table_name(name, sizeof name, (k + 1) % KIDS);
    void **next = heapd_global_get(m, name);
    if (!mine || !next || heapd_root_push(m, mine) == (size_t)-1 ||
        heapd_root_push(m, next) == (size_t)-1)
        _exit(KID_NO_TABLE);
    if (write(ready, "r", 1) != 1)
        _exit(KID_GONE);
    uint64_t s = seed * 2 + 1;
    for (uint64_t n = 0;; n++) {
        uint64_t i = rng_next(&s) % ENTRIES;
        const struct node *old = mine[i];
        if (!old || !node_ok(old, i))
            _exit(KID_BAD_NODE);
        uint64_t version = old->version + 1;
        struct node *fresh = heapd_alloc(m, 0, sizeof *fresh);
        if (!fresh)
            _exit(KID_GONE);
        fresh->index = i;
        fresh->version = version;
        fresh->check = node_check(i, version);
        heapd_write(m, mine, &mine[i], fresh);
        /* no safepoint between the load and the look (Note [Stop the
         * world]): what the other kid replaces meanwhile stays */
        uint64_t j = rng_next(&s) % ENTRIES;
        const struct node *theirs = next[j];
        if (!theirs || !node_ok(theirs, j))
            _exit(KID_BAD_NODE);
        if (!heapd_alloc(m, 1, 8 * (rng_next(&s) % 64)))
            _exit(KID_GONE);
        if (n % 4096 == 4095 && heapd_collect(m, 0) != 0)
            _exit(KID_GONE);
        if (n % 1024 == 1023 && told_to_stop()) {
            heapd_detach(m);
            heapd_disconnect(c);
            _exit(KID_DONE);
        }
    }
}

/* Connect, attach, allocate a little, leave; again and again, while
 * heapd is down too, until told to stop. */
static void connector(int ready)
{
    if (write(ready, "r", 1) != 1)
        _exit(KID_GONE);
    for (;;) {
        heapd_client *c;
        heapd_mutator *m;
        heapd_connect_opts o = {.socket_path = D.sock};
        if (told_to_stop())
            _exit(KID_DONE);
        if (heapd_connect(&c, &o) != 0) {
            /* heapd is down: it comes back; leave the cores to it */
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (heapd_attach(c, &m) == 0) {
            for (int i = 0; i < 64; i++)
                if (!heapd_alloc(m, 2, 16))
                    break;
            heapd_detach(m);
        }
        heapd_disconnect(c);
    }
}

static bool at_moment(enum moment at, const heapd_mutator *m,
                      const struct layout_control *ctl)
{
    uint32_t ph = atomic_load(&ctl->phase);
    uint32_t stop = atomic_load(&m->slot->stop_request);
    switch (at) {
    case AT_IDLE: return stop == 0 && ph == LAYOUT_PHASE_IDLE;
    case AT_SNAPSHOT: return stop != 0 && layout_stop_is_snapshot(stop);
    case AT_MARK: return stop == 0 && ph == LAYOUT_PHASE_MARK;
    case AT_FINAL_SYNC: return stop != 0 && !layout_stop_is_snapshot(stop);
    case AT_SWEEP: return ph == LAYOUT_PHASE_SWEEP;
    default: return false;
    }
}

/* Kill the daemon (PID) at moment AT, or DELAY_US after starting for
 * AT_RANDOM.  In a blocking region throughout: it holds up no stop, and
 * sees every stop word its slot is asked. */
static void watcher(enum moment at, pid_t pid, unsigned delay_us, int ready)
{
    heapd_client *c;
    heapd_mutator *m;
    kid_attach(&c, &m, false);
    const struct layout_control *ctl = heapd_heap_base(c);
    heapd_blocking_enter(m);
    if (write(ready, "r", 1) != 1)
        _exit(KID_GONE);
    if (at == AT_RANDOM) {
        struct timespec ts = {0, (long)delay_us * 1000};
        nanosleep(&ts, NULL); /* the instant is the point, not a wait */
        kill(pid, SIGKILL);
        _exit(KID_GONE);
    }
    /* bounded by the test's wait for this kid */
    while (!at_moment(at, m, ctl))
        if (agent_is_closed(&c->agent))
            _exit(KID_NO_MOMENT);
    kill(pid, SIGKILL);
    _exit(KID_GONE);
}

/* Fork a kid running BODY and wait for its ready byte. */
static pid_t fork_kid(void (*body)(int k, uint64_t seed, int ready), int k,
                      uint64_t seed)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        close(p[0]);
        body(k, seed, p[1]);
        _exit(KID_GONE);
    }
    close(p[1]);
    char r;
    ssize_t got = read(p[0], &r, 1);
    close(p[0]);
    if (got != 1) {
        int st = harness_wait_pid(kid, HARNESS_WAIT_MS);
        ck_abort_msg("kid %d died before it was ready: %s", k,
                     st == -1 ? "did not end" : kid_exit_name(st));
    }
    return kid;
}

static enum moment round_moment;
static unsigned round_delay_us;
static pid_t round_daemon;

static void mutate_body(int k, uint64_t seed, int ready)
{
    mutate(k, seed, ready);
}

static void connector_body(int k, uint64_t seed, int ready)
{
    (void)k;
    (void)seed;
    connector(ready);
}

static void watcher_body(int k, uint64_t seed, int ready)
{
    (void)k;
    (void)seed;
    watcher(round_moment, round_daemon, round_delay_us, ready);
}

/* Every table is whole; returns the segments in use after two cycles. */
static uint64_t check_tables(void)
{
    heapd_client *c;
    heapd_mutator *m;
    char name[32];
    harness_attach(&D, &c, &m);
    for (int k = 0; k < KIDS; k++) {
        table_name(name, sizeof name, k);
        void **tab = heapd_global_get(m, name);
        ck_assert_msg(tab != NULL, "global '%s' is gone", name);
        for (uint64_t i = 0; i < ENTRIES; i++) {
            const struct node *n = tab[i];
            ck_assert_msg(n && node_ok(n, i), "%s[%llu] is damaged", name,
                          (unsigned long long)i);
        }
    }
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t st = harness_stats(c);
    heapd_detach(m);
    heapd_disconnect(c);
    ck_assert_msg(st.verify_failures == 0, "%llu verifier failures",
                  (unsigned long long)st.verify_failures);
    return st.segments_owned + st.segments_filled + st.segments_large;
}

static void make_tables(void)
{
    heapd_client *c;
    heapd_mutator *m;
    char name[32];
    harness_attach(&D, &c, &m);
    for (int k = 0; k < KIDS; k++) {
        size_t slot = heapd_root_push(m, heapd_alloc(m, ENTRIES, 0));
        ck_assert_uint_ne(slot, (size_t)-1);
        for (uint64_t i = 0; i < ENTRIES; i++) {
            struct node *n = heapd_alloc(m, 0, sizeof *n);
            ck_assert_ptr_nonnull(n);
            n->index = i;
            n->version = 0;
            n->check = node_check(i, 0);
            void **tab = heapd_root_get(m, slot);
            heapd_write(m, tab, &tab[i], n);
        }
        table_name(name, sizeof name, k);
        ck_assert_int_eq(heapd_global_set(m, name, heapd_root_get(m, slot)),
                         0);
        heapd_root_pop(m, 1);
    }
    heapd_detach(m);
    heapd_disconnect(c);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static unsigned env_unsigned(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    return v && *v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

/* Until heapd says WANT clients resumed (a bounded wait); ROUND, WHAT
 * for the message. */
static void wait_resumed(uint64_t want, unsigned round, const char *what)
{
    uint64_t got = 0;
    for (int64_t until = harness_now_ms() + HARNESS_WAIT_MS; harness_now_ms() < until;) {
        got = harness_daemon_stats(&D).clients_resumed;
        if (got >= want)
            return;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    { char cmd[600]; snprintf(cmd, sizeof cmd, "grep -E 'kept|resumed|orphaned|recovered|ready|warn|error|did not' %s | tail -40 >&2", D.log); system(cmd); }
    ck_abort_msg("%s %u: %llu of %llu resumes came within %d ms", what,
                 round, (unsigned long long)got, (unsigned long long)want,
                 HARNESS_WAIT_MS);
}

/* Tell the kids to stop and wait for each to end as told. */
static void stop_kids(int done, const pid_t *kids, int n, const char *what)
{
    ck_assert_int_eq(write(done, "d", 1), 1);
    close(done);
    for (int k = 0; k < n; k++) {
        int st = harness_wait_pid(kids[k], HARNESS_WAIT_MS);
        ck_assert_msg(st != -1, "%s: kid %d did not end within %d ms", what,
                      k, HARNESS_WAIT_MS);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == KID_DONE,
                      "%s: kid %d %s", what, k, kid_exit_name(st));
    }
}

START_TEST(kills_at_every_moment)
{
    unsigned kills = env_unsigned("CRASH_KILLS", 10);
    ck_assert_msg(kills > 0, "CRASH_KILLS must be at least 1");
    uint64_t seed = env_unsigned("CRASH_SEED", (unsigned)time(NULL));
    uint64_t *recovery = calloc(kills, sizeof *recovery);
    unsigned seen[AT_COUNT] = {0};
    pid_t kids[KIDS + 1];
    int done[2];
    ck_assert_ptr_nonnull(recovery);
    fprintf(stderr, "crash: %u kills, CRASH_SEED=%llu\n", kills,
            (unsigned long long)seed);

    harness_start_logged(&D, harness_default_config("@SOCK@",
                                                    "verify = true\n"),
                         "heapd.log");
    make_tables();
    uint64_t in_use_first = check_tables();
    uint64_t s = seed | 1;
    /* the kids live through every kill: Note [Resuming clients] */
    ck_assert_int_eq(pipe(done), 0);
    kid_done_fd = done[0];
    for (int k = 0; k < KIDS; k++)
        kids[k] = fork_kid(mutate_body, k, rng_next(&s));
    kids[KIDS] = fork_kid(connector_body, KIDS, 0);
    kid_done_fd = -1;
    close(done[0]);
    for (unsigned r = 0; r < kills; r++) {
        round_moment = (enum moment)(r % AT_COUNT);
        round_delay_us = (unsigned)(rng_next(&s) % 200000);
        round_daemon = D.pid;
        pid_t w = fork_kid(watcher_body, KIDS + 1, 0);
        int st = harness_wait_pid(w, HARNESS_WAIT_MS);
        ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == KID_GONE,
                      "round %u (%s): the watcher %s", r,
                      moment_names[round_moment],
                      st == -1 ? "did not end" : kid_exit_name(st));
        harness_kill(&D); /* the watcher's kill: reap it, keep the store */
        seen[round_moment]++;
        for (int k = 0; k < KIDS; k++)
            ck_assert_msg(waitpid(kids[k], NULL, WNOHANG) == 0,
                          "round %u (%s): kid %d ended while heapd was down",
                          r, moment_names[round_moment], k);
        harness_restart(&D);
        ck_assert_msg(!harness_log_contains(&D, "not recovered"),
                      "round %u (%s): heapd did not recover the heap", r,
                      moment_names[round_moment]);
        wait_resumed((uint64_t)KIDS * (r + 1), r, "kill");
        /* the two verifying cycles (Note [Recovery cycles]) are over
         * once two cycles asked for from now are */
        heapd_client *ctl = harness_control(&D);
        ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
        ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
        heapd_stats_t hs = harness_stats(ctl);
        heapd_disconnect(ctl);
        ck_assert_uint_eq(hs.crashes_recovered, r + 1);
        ck_assert_uint_eq(hs.verify_failures, 0);
        recovery[r] = hs.recovery_ns;
    }
    stop_kids(done[1], kids, KIDS + 1, "after the kills");
    heapd_stats_t st = harness_daemon_stats(&D);
    /* the watchers, gone before each restart, and at most one of the
     * connector's clients a kill: one heapd welcomed but the connector
     * never heard of (killed mid-connect) is kept, never resumes, and
     * leaves after reconnect_timeout; nobody else */
    ck_assert_msg(st.clients_crashed <= 2 * (uint64_t)kills,
                  "%llu clients crashed in %u kills",
                  (unsigned long long)st.clients_crashed, kills);
    uint64_t in_use = check_tables();
    /* what the kids made is garbage once they are gone: what is in use
     * comes back to what the tables hold, give or take the segments a
     * size class spreads over */
    ck_assert_msg(in_use <= 2 * in_use_first + 8,
                  "%llu segments in use, %llu before the kills: segments "
                  "leak across kills", (unsigned long long)in_use,
                  (unsigned long long)in_use_first);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);

    qsort(recovery, kills, sizeof *recovery, cmp_u64);
    fprintf(stderr, "crash: %u kills (", kills);
    for (int a = 0; a < AT_COUNT; a++)
        fprintf(stderr, "%s%s %u", a ? ", " : "", moment_names[a], seen[a]);
    fprintf(stderr, "); recovery time min %.2f ms, median %.2f ms, p90 "
            "%.2f ms, max %.2f ms; %llu clients resumed, 0 errors\n",
            recovery[0] / 1e6, recovery[kills / 2] / 1e6,
            recovery[kills * 9 / 10] / 1e6, recovery[kills - 1] / 1e6,
            (unsigned long long)st.clients_resumed);
    free(recovery);
}
END_TEST

/* The restart torture: CRASH_RESTARTS (default 10) clean restarts of
 * heapd while KIDS processes mutate, read each other's tables and
 * allocate; each kid stays connected throughout (Note [Resuming clients],
 * Note [Reconnecting]): none may see an error, every table stays whole,
 * no verifier failure, no segment growth, every kid is resumed at every
 * restart, and every restart takes the heap back as its clean stop
 * sealed it. */
START_TEST(restarts_under_load)
{
    unsigned restarts = env_unsigned("CRASH_RESTARTS", 10);
    uint64_t seed = env_unsigned("CRASH_SEED", (unsigned)time(NULL));
    uint64_t s = seed | 1;
    pid_t kids[KIDS];
    int done[2];
    fprintf(stderr, "crash: %u restarts, CRASH_SEED=%llu\n", restarts,
            (unsigned long long)seed);

    harness_start_logged(&D, harness_default_config("@SOCK@",
                                                    "verify = true\n"),
                         "heapd.log");
    make_tables();
    uint64_t in_use_first = check_tables();
    ck_assert_int_eq(pipe(done), 0);
    kid_done_fd = done[0];
    for (int k = 0; k < KIDS; k++)
        kids[k] = fork_kid(mutate_body, k, rng_next(&s));
    kid_done_fd = -1;
    close(done[0]);
    for (unsigned r = 0; r < restarts; r++) {
        harness_stop_clean(&D);
        for (int k = 0; k < KIDS; k++)
            ck_assert_msg(waitpid(kids[k], NULL, WNOHANG) == 0,
                          "restart %u: kid %d ended while heapd was down",
                          r, k);
        harness_restart(&D);
        ck_assert_msg(!harness_log_contains(&D, "not recovered"),
                      "restart %u: heapd did not recover the heap", r);
        /* every kid comes back before the next restart */
        wait_resumed((uint64_t)KIDS * (r + 1), r, "restart");
    }
    stop_kids(done[1], kids, KIDS, "after the restarts");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.restarts_survived, restarts);
    /* every table was sealed and proved so (Note [The live table]) */
    ck_assert_uint_eq(st.crashes_recovered, 0);
    ck_assert_uint_eq(st.clients_crashed, 0);
    ck_assert_msg(st.clients_resumed >= (uint64_t)KIDS * restarts,
                  "%llu clients resumed in %u restarts of %d kids",
                  (unsigned long long)st.clients_resumed, restarts, KIDS);
    uint64_t in_use = check_tables();
    ck_assert_msg(in_use <= 2 * in_use_first + 8,
                  "%llu segments in use, %llu before the restarts: segments "
                  "leak across restarts", (unsigned long long)in_use,
                  (unsigned long long)in_use_first);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
    fprintf(stderr, "crash: %u restarts under %d mutating processes: "
            "%llu clients resumed, 0 errors\n", restarts, KIDS,
            (unsigned long long)st.clients_resumed);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("crash");
    TCase *t = tcase_create("kills");
    tcase_set_timeout(t, 1800);
    tcase_add_test(t, kills_at_every_moment);
    suite_add_tcase(s, t);
    t = tcase_create("restarts"); /* scripts/torture runs each alone */
    tcase_set_timeout(t, 1800);
    tcase_add_test(t, restarts_under_load);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
