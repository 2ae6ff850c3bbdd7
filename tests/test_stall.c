/* Stalls (Note [Stalls] in daemon/stall.c, Note [Parking a stop] in
 * daemon/gc/safepoint.c), against a real heapd with the verifier on: a
 * mutator that is SIGSTOPped, that stops while it holds its
 * stack-marking handshake, whose client never answers a remark request,
 * that loops without a safepoint, or that clears the stop word heapd
 * sets in its slot is named in the log; the other
 * clients keep allocating meanwhile; and stall_action ends it: kill
 * through a pidfd that never hits a reused pid, evict, or wait.  Where a
 * test checks what happens during a stall, heapd is held from ending it
 * until the test has seen it (Note [Holding stall actions for tests] in
 * daemon/stall.c). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "futex.h"
#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "mutator.h"
#include "check_main.h"

static struct daemon_proc D;

#define WARN_MS 200
#define LIST 1000          /* nodes the worker keeps alive and checks */
#define GARBAGE 4096       /* bytes of each object the worker drops */

/* What the forked processes tell the test, in shared memory. */
struct shared {
    _Atomic uint64_t allocs;      /* worker: objects allocated */
    _Atomic uint64_t bytes;
    _Atomic int enomem;           /* it met ENOMEM (wait policy) */
    char enomem_msg[512];
    _Atomic int go;               /* test: 1 allocate again, 2 finish */
    _Atomic int list_ok;          /* worker: its list was intact */
};
static struct shared *S;

/* While this file exists heapd's stall_timeout ends no stall (Note
 * [Holding stall actions for tests] in daemon/stall.c). */
static char hold[64];

static void hold_action(void)
{
    int fd = open(hold, O_WRONLY | O_CREAT, 0600);
    ck_assert_msg(fd >= 0, "%s: %s", hold, strerror(errno));
    close(fd);
}

static void let_heapd_act(void)
{
    ck_assert_int_eq(unlink(hold), 0);
}

static void start_as(uid_t uid, const char *action, const char *timeout,
                     const char *extra)
{
    char buf[512];
    snprintf(buf, sizeof buf,
             "verify = true\nstall_warn = %dms\nstall_timeout = %s\n"
             "stall_action = %s\n%s", WARN_MS, timeout, action,
             extra ? extra : "");
    S = mmap(NULL, sizeof *S, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(S != MAP_FAILED);
    memset(S, 0, sizeof *S);
    snprintf(hold, sizeof hold, "/tmp/heapd-stall-hold-%d", (int)getpid());
    unlink(hold);
    setenv("HEAPD_TEST_HOLD_STALL_ACTION", hold, 1);
    harness_start_as(&D, harness_default_config("@SOCK@", buf), "heapd.log",
                     uid);
    unsetenv("HEAPD_TEST_HOLD_STALL_ACTION");
}

static void start(const char *action, const char *timeout,
                  const char *extra)
{
    start_as(0, action, timeout, extra);
}

/* ---- the healthy worker ---- */

struct node {
    void *next;
    uint64_t index, check;
};

static bool list_intact(heapd_mutator *m, size_t slot)
{
    uint64_t n = 0;
    for (struct node *p = heapd_root_get(m, slot); p; p = p->next, n++)
        if (p->index != LIST - 1 - n ||
            p->check != (p->index ^ 0x5ca1ab1eu))
            return false;
    return n == LIST;
}

/* Allocate garbage until told to finish, keeping LIST nodes alive; on
 * ENOMEM, say so and wait (blocked) to be told to try again. */
static void worker(heapd_mutator *m)
{
    size_t slot = heapd_root_push(m, NULL);
    for (uint64_t i = 0; i < LIST; i++) {
        struct node *n = heapd_alloc(m, 1, 2 * sizeof(uint64_t));
        if (!n)
            _exit(2);
        n->index = i;
        n->check = i ^ 0x5ca1ab1eu;
        heapd_write(m, n, &n->next, heapd_root_get(m, slot));
        heapd_root_set(m, slot, n);
    }
    while (atomic_load(&S->go) != 2) {
        void *g = heapd_alloc(m, 0, GARBAGE);
        if (!g) {
            if (errno != ENOMEM)
                _exit(3);
            snprintf(S->enomem_msg, sizeof S->enomem_msg, "%s",
                     heapd_last_error());
            atomic_store(&S->enomem, 1);
            heapd_blocking_enter(m);
            while (atomic_load(&S->go) == 0)
                usleep(1000);
            heapd_blocking_leave(m);
            atomic_store(&S->go, atomic_load(&S->go) == 2 ? 2 : 0);
            continue;
        }
        atomic_fetch_add(&S->allocs, 1);
        atomic_fetch_add(&S->bytes, GARBAGE);
        heapd_safepoint(m);
    }
    atomic_store(&S->list_ok, list_intact(m, slot));
}

static pid_t fork_worker(void)
{
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        heapd_client *c;
        heapd_mutator *m;
        harness_attach(&D, &c, &m);
        worker(m);
        heapd_detach(m);
        heapd_disconnect(c);
        _exit(0);
    }
    return kid;
}

/* ---- the stalled ones ---- */

enum victim {
    V_LOOP,        /* polls now and then: the test SIGSTOPs it */
    V_HANDSHAKE,   /* stops itself holding its stack-marking handshake */
    V_REMARK,      /* stops answering once it holds a remark request */
    V_BUSY,        /* a C loop without safepoints */
    V_FORGE,       /* clears the stop word heapd sets in its slot */
};

/* Acknowledge the stop under way, as a safepoint does, and wait for its
 * release; but never service a remark request, which only a safepoint
 * does: a request for a segment this process allocates in then waits
 * for ever (Note [Remark requests] in client/remark.c).  heapd_safepoint
 * would answer a request that comes while it waits in a stop: marking
 * the global fan overflows as soon as the snapshot's stop is released,
 * and a victim slow to wake (a loaded machine, ThreadSanitizer) could
 * answer every cycle's request there.  Its C stack's capture stays the
 * one of its last safepoint: its fan is a global's. */
static void take_stop_only(heapd_mutator *m)
{
    uint32_t gen = atomic_load(&m->slot->stop_request);
    if (gen == 0)
        return;
    atomic_store(&m->slot->status, LAYOUT_STATUS(gen, LAYOUT_MUT_RUNNING));
    futex_wake_all(&m->slot->status);
    while (atomic_load(&m->slot->stop_request) == gen)
        usleep(1000);
}

/* Every child and leaf of FAN (N children) is in a current segment of
 * M, where only M's safepoint can answer a remark request. */
static bool fan_in_current_segments(heapd_mutator *m, void **fan, size_t n)
{
    const heapd_client *c = m->c;
    for (size_t i = 0; i < 2 * n; i++) {
        void *p = i < n ? fan[i] : ((void **)fan[i - n])[0];
        uint64_t s = ((uintptr_t)p - (uintptr_t)c->base) >> c->seg_shift;
        bool cur = false;
        for (unsigned k = 0; k < LAYOUT_NCLASSES && !cur; k++)
            cur = m->cur[k].index == s;
        if (!cur)
            return false;
    }
    return true;
}

/* V_REMARK's fan, a global's: small enough that every child and leaf
 * stays in a segment the victim allocates in (one per class), so every
 * request it gets waits for its safepoint; wide enough to overflow a 4K
 * mark stack (512 entries).  A request that comes while the victim waits
 * in a blocking region (the global's set, a grant) gives those segments
 * back (Note [Remark requests] in client/remark.c); heapd then rescans
 * them itself every cycle and no request ever waits (1650 cycles without
 * a remark stall, once, under ThreadSanitizer; every time, with a 2 s
 * blocking region after the global's set).  So it is built again until
 * its blocks are in its current segments. */
#define FAN_TRIES 100
static void build_victim_fan(heapd_mutator *m)
{
    size_t fs = heapd_root_push(m, NULL);
    for (int t = 0; t < FAN_TRIES; t++) {
        void **fan = harness_build_fan(m, fs, 3000, 0x51);
        if (!fan || heapd_global_set(m, "victim", fan) != 0) {
            fprintf(stderr, "victim: %s\n", heapd_last_error());
            _exit(3);
        }
        if (fan_in_current_segments(m, fan, 3000))
            return;
    }
    fprintf(stderr, "victim: its fan was given back %d times\n", FAN_TRIES);
    _exit(4);
}

static void victim(heapd_mutator *m, enum victim v, int ready)
{
    volatile uint64_t spin = 0;
    if (v == V_REMARK)
        build_victim_fan(m);
    if (write(ready, "r", 1) != 1)
        _exit(10);
    close(ready);
    for (;;) {
        switch (v) {
        case V_LOOP:
            break;
        case V_HANDSHAKE:
            /* Note [Stack marking handshake]: take it, as the barrier
             * does before its first root change, and stop with it */
            if (atomic_load(&m->ctl->phase) == LAYOUT_PHASE_MARK) {
                uint32_t e = atomic_load(&m->ctl->epoch);
                atomic_store(&m->slot->stack_marking, e);
                atomic_store(&m->slot->stack_marked, 0);
                raise(SIGSTOP);
            }
            break;
        case V_REMARK:
            for (;;) {
                take_stop_only(m);
                usleep(1000);
            }
        case V_BUSY:
            for (;;)
                spin++;
        case V_FORGE:
            /* its own memory (Note [Client control memory]): it only
             * stalls itself */
            atomic_store(&m->slot->stop_request, 0);
            break;
        }
        heapd_safepoint(m);
        usleep(1000);
    }
}

/* A process that attaches and plays V; its stderr goes to ERR_PATH
 * (NULL: the test's). */
static pid_t fork_victim(enum victim v, const char *err_path)
{
    int ready[2];
    char r;
    ck_assert_int_eq(pipe(ready), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        if (err_path) {
            int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd < 0 || dup2(fd, 2) < 0)
                _exit(9);
        }
        heapd_client *c;
        heapd_mutator *m;
        close(ready[0]);
        harness_attach(&D, &c, &m);
        victim(m, v, ready[1]);
    }
    close(ready[1]);
    ck_assert_msg(read(ready[0], &r, 1) == 1, "the victim died before it "
                  "was ready (its stderr says why)");
    close(ready[0]);
    return kid;
}

/* SIGSTOP PID and wait until it is stopped. */
static void stop_it(pid_t pid)
{
    int st;
    ck_assert_int_eq(kill(pid, SIGSTOP), 0);
    ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
}

/* ---- waiting ---- */

struct logged {
    const char *a, *b;
};

static bool log_has(void *arg, char *seen, size_t n)
{
    const struct logged *w = arg;
    bool a = harness_log_contains(&D, w->a);
    bool b = !w->b || harness_log_contains(&D, w->b);
    snprintf(seen, n, "'%s' %s, '%s' %s", w->a, a ? "logged" : "not logged",
             w->b ? w->b : "-", b ? "logged" : "not logged");
    return a && b;
}

/* The log names PID's stall (with the advice). */
static void wait_named(pid_t pid, const char *what)
{
    char want[64];
    snprintf(want, sizeof want, "pid %d,", (int)pid);
    struct logged w = {want, what};
    harness_wait_until(log_has, &w, "heapd's log to name the stalled pid");
    ck_assert(harness_log_contains(&D, "heapd_blocking_enter"));
}

struct progress {
    uint64_t from;
    pid_t victim;
};

static bool worker_moved(void *arg, char *seen, size_t n)
{
    const struct progress *p = arg;
    uint64_t a = atomic_load(&S->allocs);
    snprintf(seen, n, "%llu allocations since the stall was named",
             (unsigned long long)(a - p->from));
    return a - p->from >= 1000;
}

/* While VICTIM stalls (not yet ended), the worker allocates. */
static void worker_allocates_during_stall(pid_t victim)
{
    struct progress p = {atomic_load(&S->allocs), victim};
    harness_wait_until(worker_moved, &p, "the worker to allocate while "
                       "the stall lasts");
    int st;
    ck_assert_msg(waitpid(victim, &st, WNOHANG | WUNTRACED) != victim ||
                      WIFSTOPPED(st),
                  "the stalled process was gone before the worker "
                  "allocated: the worker was frozen by the stall");
}

static void expect_killed(pid_t pid)
{
    int st = harness_wait_pid(pid, HARNESS_WAIT_MS);
    ck_assert_msg(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                  "the stalled process was not killed (status %#x)", st);
}

/* PID has not exited (it may be stopped). */
static bool alive(pid_t pid)
{
    int st;
    return waitpid(pid, &st, WNOHANG) == 0;
}

struct collecting {
    heapd_client *ctl;
    const char *what;
};

/* Ask for a cycle on every look, until the log says WHAT; what the
 * cycles did meanwhile, should it never say so (did marking overflow,
 * and were the segments to rescan sent to their owners or rescanned by
 * heapd itself). */
static bool cycles_until_logged(void *arg, char *seen, size_t n)
{
    struct collecting *cl = arg;
    ck_assert_int_eq(heapd_request_collect(cl->ctl, 0), 0);
    heapd_stats_t st = harness_stats(cl->ctl);
    snprintf(seen, n, "'%s' not logged; %" PRIu64 " cycles, %" PRIu64
             " mark overflows, %" PRIu64 " segments sent to their owners "
             "to rescan, %" PRIu64 " rescanned by heapd", cl->what,
             st.cycles_completed, st.mark_overflows, st.remark_requests,
             st.remark_global);
    return harness_log_contains(&D, cl->what);
}

/* Stop the worker; it checks its list and leaves. */
static void finish_worker(pid_t w)
{
    atomic_store(&S->go, 2);
    harness_wait_ok(w, "the worker");
    ck_assert_msg(atomic_load(&S->list_ok), "the worker's list changed");
}

/* Every client gone and two cycles later, nothing is held any more. */
static void expect_baseline(heapd_client *ctl)
{
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t st = harness_stats(ctl);
    ck_assert_uint_eq(st.segments_owned, 0);
    ck_assert_uint_eq(st.segments_filled, 0);
    ck_assert_uint_eq(st.segments_large, 0);
    ck_assert_uint_eq(st.segments_fenced, 0);
    harness_expect_healthy(&D);
}

/* heapctl ARGS, which must succeed, contains every one of WANT. */
static void heapctl_shows(const char *args, const char *const *want)
{
    char cmd[512], out[16384];
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' %s 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock, args);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "heapctl %s: status %#x: %s", args, st, out);
    for (; *want; want++)
        ck_assert_msg(strstr(out, *want), "heapctl %s does not show '%s':\n%s",
                      args, *want, out);
}

/* ---- kill ---- */

static void killed_case(enum victim v, const char *what, const char *extra)
{
    start("kill", "3s", extra);
    hold_action();
    pid_t w = fork_worker();
    pid_t vk = fork_victim(v, NULL);
    if (v == V_LOOP) {
        stop_it(vk);
    }
    /* the last fork is done: the test's own client may start threads */
    heapd_client *ctl = harness_control(&D);
    ck_assert_int_eq(heapd_request_collect(ctl, 0), 0);
    if (v == V_REMARK) {
        /* every cycle overflows; one comes when the victim holds a
         * request */
        struct collecting cl = {ctl, what};
        harness_wait_until(cycles_until_logged, &cl, "a remark stall");
    }
    wait_named(vk, what);
    if (v == V_HANDSHAKE) {
        char pid[32];
        snprintf(pid, sizeof pid, "%d", (int)vk);
        heapctl_shows("clients", (const char *[]){pid, "STALLED",
                      "stack-marking handshake", NULL});
        heapctl_shows("clients --json", (const char *[]){
                      "\"state\":\"stalled\"", "\"stalled_on\":\"handshake\"",
                      NULL});
    }
    worker_allocates_during_stall(vk);
    let_heapd_act();
    expect_killed(vk);
    heapd_stats_t s = harness_stats(ctl);
    ck_assert_uint_ge(s.stalls, 1);
    ck_assert_uint_eq(s.stalls_killed, 1);
    ck_assert_uint_eq(s.clients_evicted, 0);
    finish_worker(w);
    if (v == V_REMARK) { /* its fan is a global's */
        heapd_client *c;
        heapd_mutator *m;
        harness_attach(&D, &c, &m);
        ck_assert_int_eq(heapd_global_delete(m, "victim"), 0);
        heapd_detach(m);
        heapd_disconnect(c);
    }
    expect_baseline(ctl);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}

START_TEST(sigstopped_client_is_killed)
{
    killed_case(V_LOOP, "has not acknowledged the", NULL);
}
END_TEST

START_TEST(client_stopped_holding_its_handshake_is_killed)
{
    killed_case(V_HANDSHAKE, "stack-marking handshake", NULL);
}
END_TEST

START_TEST(client_that_never_answers_a_remark_is_killed)
{
    killed_case(V_REMARK, "has not answered a remark request",
                "mark_stack_limit = 4K\n");
}
END_TEST

START_TEST(busy_loop_is_warned_and_killed)
{
    killed_case(V_BUSY, "heapd_safepoint", NULL);
}
END_TEST

/* ---- wait: only named; the others run until a limit ---- */

static bool worker_enomem(void *arg, char *seen, size_t n)
{
    (void)arg;
    snprintf(seen, n, "%llu bytes allocated, no ENOMEM yet",
             (unsigned long long)atomic_load(&S->bytes));
    return atomic_load(&S->enomem) != 0;
}

START_TEST(wait_lets_the_others_allocate_until_the_heap_is_full)
{
    start("wait", "0", "max_client_bytes = 48M\n");
    pid_t w = fork_worker();
    pid_t vk = fork_victim(V_LOOP, NULL);
    uint64_t from = atomic_load(&S->bytes);
    stop_it(vk);
    heapd_client *ctl = harness_control(&D);
    ck_assert_int_eq(heapd_request_collect(ctl, 0), 0);
    wait_named(vk, "has not acknowledged the");
    harness_wait_until(worker_enomem, NULL, "the worker to fill the heap");
    /* unpaced: paced, it would have waited after two budgets (8 MiB)
     * from the stalled cycle's start */
    ck_assert_uint_ge(atomic_load(&S->bytes) - from, 32u << 20);
    ck_assert_msg(strstr(S->enomem_msg, "max_client_bytes"),
                  "ENOMEM says '%s', not max_client_bytes", S->enomem_msg);
    /* the quota, not the heap: max_size is 1G */
    ck_assert_uint_lt(atomic_load(&S->bytes) - from, 512u << 20);
    ck_assert(alive(vk));
    /* the stall ends: the cycle finishes and the garbage goes */
    ck_assert_int_eq(kill(vk, SIGCONT), 0);
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    uint64_t before = atomic_load(&S->allocs);
    atomic_store(&S->enomem, 0);
    atomic_store(&S->go, 1);
    struct progress p = {before, vk};
    harness_wait_until(worker_moved, &p, "the worker to allocate again");
    heapd_stats_t s = harness_stats(ctl);
    ck_assert_uint_eq(s.stalls_killed + s.clients_evicted, 0);
    finish_worker(w);
    kill(vk, SIGKILL);
    harness_wait_pid(vk, HARNESS_WAIT_MS);
    expect_baseline(ctl);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

/* ---- evict ---- */

static bool file_has(const char *path, const char *text)
{
    char buf[4096] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strstr(buf, text) != NULL;
}

/* SIGCONT evicted process PID: it dies of SIGABRT at its next heapd call,
 * and its stderr (ERR) says it was evicted. */
static void continue_into_abort(pid_t pid, const char *err)
{
    int st;
    ck_assert_int_eq(kill(pid, SIGCONT), 0);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
                  "the evicted process ended with status %#x, not SIGABRT",
                  st);
    ck_assert_msg(file_has(err, "evicted"), "its stderr does not say it "
                  "was evicted");
}

START_TEST(evicted_process_aborts_at_its_next_call)
{
    char err[300];
    start("evict", "1s", NULL);
    snprintf(err, sizeof err, "%s/victim.err", D.dir);
    pid_t w = fork_worker();
    pid_t vk = fork_victim(V_LOOP, err);
    stop_it(vk);
    heapd_client *ctl = harness_control(&D);
    ck_assert_int_eq(heapd_request_collect(ctl, 0), 0);
    wait_named(vk, "has not acknowledged the");
    harness_wait_stat(&D, ctl, clients_evicted, ==, 1);
    /* fenced while it lives */
    ck_assert_uint_gt(harness_stats(ctl).segments_fenced, 0);
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    continue_into_abort(vk, err);
    harness_wait_stat(&D, ctl, segments_fenced, ==, 0);
    heapd_stats_t s = harness_stats(ctl);
    ck_assert_uint_eq(s.stalls_killed, 0);
    finish_worker(w);
    expect_baseline(ctl);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

/* A heapd that may not signal its client (another user's process)
 * evicts it instead of killing it. */
START_TEST(kill_not_allowed_falls_back_to_evict)
{
    char err[300];
    ck_assert_msg(getuid() == 0, "this test needs root: it runs heapd as "
                  "nobody and the client as root");
    start_as(65534, "kill", "1s", NULL);
    snprintf(err, sizeof err, "%s/victim.err", D.dir);
    pid_t vk = fork_victim(V_LOOP, err);
    stop_it(vk);
    heapd_client *ctl = harness_control(&D);
    ck_assert_int_eq(heapd_request_collect(ctl, 0), 0);
    harness_wait_stat(&D, ctl, clients_evicted, ==, 1);
    ck_assert_uint_eq(harness_stats(ctl).stalls_killed, 0);
    ck_assert_msg(harness_log_contains(&D, "may not kill it"),
                  "heapd's log does not say why it evicted");
    continue_into_abort(vk, err);
    harness_wait_stat(&D, ctl, segments_fenced, ==, 0);
    expect_baseline(ctl);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

/* ---- the pidfd guard ---- */

/* A client whose process exits while a child of its holds the
 * connection: its slot stalls every stop, and its pid is free. */
static void holder_of_a_dead_client(int out)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    pid_t holder = fork();
    if (holder == 0) {
        for (;;)
            pause(); /* keeps the socket open */
    }
    if (write(out, &holder, sizeof holder) != sizeof holder)
        _exit(2);
    _exit(0); /* its slot stays RUNNING */
}

/* Fork a process whose pid is PID (ns_last_pid; root only), which waits
 * for a byte on *IN and then exits 7.  Returns -1 if the pid was taken.
 * Any fork on the machine between the write and ours takes the pid
 * first: with the other suites running beside it, 100 tries once all
 * lost (CI), so it tries FORK_WITH_PID_TRIES times. */
#define FORK_WITH_PID_TRIES 5000
static pid_t fork_with_pid(pid_t pid, int *in)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    for (int tries = 0; tries < FORK_WITH_PID_TRIES; tries++) {
        FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");
        ck_assert_msg(f != NULL, "cannot write ns_last_pid (%s): the pidfd "
                      "guard test needs root", strerror(errno));
        fprintf(f, "%d", (int)pid - 1);
        fclose(f);
        pid_t k = fork();
        ck_assert_int_ge(k, 0);
        if (k == 0) {
            char b;
            if (getpid() != pid)
                _exit(0);
            close(p[1]);
            _exit(read(p[0], &b, 1) == 1 ? 7 : 8);
        }
        if (k == pid) {
            close(p[0]);
            *in = p[1];
            return k;
        }
        waitpid(k, NULL, 0);
    }
    return -1;
}

START_TEST(a_reused_pid_is_never_signalled)
{
    int pp[2], st;
    pid_t holder;
    start("kill", "1s", NULL);
    ck_assert_int_eq(pipe(pp), 0);
    pid_t dead = fork();
    ck_assert_int_ge(dead, 0);
    if (dead == 0)
        holder_of_a_dead_client(pp[1]);
    ck_assert_int_eq(read(pp[0], &holder, sizeof holder), sizeof holder);
    ck_assert_int_eq(waitpid(dead, &st, 0), dead);
    int in = -1;
    pid_t reuser = fork_with_pid(dead, &in);
    ck_assert_msg(reuser == dead, "could not give pid %d to a new process",
                  (int)dead);
    heapd_client *ctl = harness_control(&D);
    ck_assert_int_eq(heapd_request_collect(ctl, 0), 0);
    /* the kill through the dead client's pidfd fails: evicted instead */
    harness_wait_stat(&D, ctl, clients_evicted, ==, 1);
    ck_assert_uint_eq(harness_stats(ctl).stalls_killed, 0);
    ck_assert_msg(waitpid(reuser, &st, WNOHANG) == 0,
                  "the process that reused pid %d was signalled",
                  (int)dead);
    ck_assert_int_eq(write(in, "x", 1), 1);
    ck_assert_int_eq(waitpid(reuser, &st, 0), reuser);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 7,
                  "the process that reused the pid ended with %#x", st);
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    kill(holder, SIGKILL);
    expect_baseline(ctl);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

struct watched {
    heapd_client *ctl;
    pid_t pid;
};

/* heapctl clients shows the client of process PID with no mutator
 * stalled. */
static bool let_go(void *arg, char *seen, size_t n)
{
    const struct watched *w = arg;
    heapd_client_info *ci;
    size_t count;
    bool found = false, stalled = false;
    ck_assert_int_eq(heapd_clients(w->ctl, &ci, &count), 0);
    for (size_t i = 0; i < count; i++) {
        if (ci[i].pid != w->pid || ci[i].control)
            continue;
        found = true;
        for (size_t k = 0; k < ci[i].mutator_count; k++)
            stalled |= ci[i].mutators[k].state == HEAPD_MUTATOR_STALLED;
    }
    heapd_clients_free(ci);
    snprintf(seen, n, "pid %d: %s", (int)w->pid,
             !found ? "no client" : stalled ? "stalled" : "let go");
    return found && !stalled;
}

/* Two stalled; the one that gets going again is let go at once, and only
 * the other is killed (Note [Parking a stop]). */
START_TEST(only_the_client_still_stalled_is_killed)
{
    start("kill", "3s", NULL);
    hold_action();
    pid_t w = fork_worker();
    pid_t v1 = fork_victim(V_LOOP, NULL), v2 = fork_victim(V_LOOP, NULL);
    stop_it(v1);
    stop_it(v2);
    heapd_client *ctl = harness_control(&D);
    ck_assert_int_eq(heapd_request_collect(ctl, 0), 0);
    wait_named(v1, "has not acknowledged the");
    wait_named(v2, "has not acknowledged the");
    ck_assert_int_eq(kill(v1, SIGCONT), 0);
    harness_wait_until(let_go, &(struct watched){ctl, v1},
                       "the client continued to be let go");
    let_heapd_act();
    expect_killed(v2);
    ck_assert_msg(alive(v1), "the client that went on was killed too");
    ck_assert_uint_eq(harness_stats(ctl).stalls_killed, 1);
    kill(v1, SIGKILL);
    harness_wait_pid(v1, HARNESS_WAIT_MS);
    finish_worker(w);
    expect_baseline(ctl);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(client_that_clears_its_stop_word_is_killed)
{
    killed_case(V_FORGE, "has not acknowledged the", NULL);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("stall");
    TCase *t = tcase_create("kill");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, sigstopped_client_is_killed);
    tcase_add_test(t, client_stopped_holding_its_handshake_is_killed);
    tcase_add_test(t, client_that_never_answers_a_remark_is_killed);
    tcase_add_test(t, busy_loop_is_warned_and_killed);
    tcase_add_test(t, client_that_clears_its_stop_word_is_killed);
    tcase_add_test(t, only_the_client_still_stalled_is_killed);
    tcase_add_test(t, a_reused_pid_is_never_signalled);
    suite_add_tcase(s, t);
    t = tcase_create("policies");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, wait_lets_the_others_allocate_until_the_heap_is_full);
    tcase_add_test(t, evicted_process_aborts_at_its_next_call);
    tcase_add_test(t, kill_not_allowed_falls_back_to_evict);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
