/* Clients that come, go and die at any instant, and marking with bounded
 * mark stacks: mark-stack overflow and remark by owners, by the
 * daemon for orphans, and for owners that die; a crash matrix that kills a
 * client in every phase of a cycle and while it holds a remark request;
 * and spawn-burn, serial and 8 at once, with cycles back to back.  The
 * verifier is on throughout, every structure's contents are checked, and
 * no wait is unbounded (Note [Test handshakes]). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mutator.h"
#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "wire.h"
#include "check_main.h"

static struct daemon_proc D;

/* The smallest mark stack: every graph below overflows it. */
static void start_with(const char *extra)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "verify = true\nmark_stack_limit = 4K\n%s",
             extra ? extra : "");
    harness_start(&D, harness_default_config("@SOCK@", buf));
}

static void nap_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Read one byte from FD within the bound; false on time-out or EOF. */
static bool read_byte(int fd, char *out)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, HARNESS_WAIT_MS) == 1 && read(fd, out, 1) == 1;
}

/* ---- roles: the client processes, this binary run again ----
 * Every client process is this test binary executed anew with
 * LIFECYCLE_ROLE set (main() runs the role instead of the suite), as a
 * real client would start: a child that only forked would inherit the
 * test's libheapd threads' state, which ThreadSanitizer cannot follow
 * (a new thread reusing a dead parent thread's id). */

extern char **environ;

/* Pipes are close-on-exec: a role keeps only the ends it is given
 * (KEEP, -1 for none), so that closing an end here is an EOF there. */
static void cloexec_pipe(int fds[2])
{
    ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
}

static pid_t spawn_role(const char *role, const int keep[3], const char *fmt,
                        ...) __attribute__((format(printf, 3, 4)));

static pid_t spawn_role(const char *role, const int keep[3], const char *fmt,
                        ...)
{
    char r[64], a[128], sock[160], *envp[256];
    size_t n = 0;
    va_list ap;
    snprintf(r, sizeof r, "LIFECYCLE_ROLE=%s", role);
    va_start(ap, fmt);
    int len = snprintf(a, sizeof a, "LIFECYCLE_ARG=");
    vsnprintf(a + len, sizeof a - (size_t)len, fmt, ap);
    va_end(ap);
    snprintf(sock, sizeof sock, "LIFECYCLE_SOCK=%s", D.sock);
    for (char **e = environ; *e && n < 250; e++)
        if (strncmp(*e, "LIFECYCLE_", 10) != 0)
            envp[n++] = *e;
    envp[n++] = r;
    envp[n++] = a;
    envp[n++] = sock;
    envp[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        for (int k = 0; k < 3; k++)
            if (keep[k] >= 0)
                fcntl(keep[k], F_SETFD, 0);
        execle("/proc/self/exe", "test_lifecycle", (char *)NULL, envp);
        _exit(127);
    }
    return pid;
}

/* ---- a cycle driver: cycles back to back from a control connection ---- */

struct driver {
    pid_t pid;
    int stop;            /* closing it stops the driver */
    int ticks;           /* a byte per completed cycle */
    unsigned long cycles;
};

static void role_driver(int stop, int ticks)
{
    heapd_client *c;
    heapd_connect_opts o = {.socket_path = D.sock,
                            .flags = HEAPD_CONNECT_CONTROL};
    if (heapd_connect(&c, &o) != 0)
        _exit(1);
    for (;;) {
        struct pollfd p = {.fd = stop, .events = POLLIN};
        if (poll(&p, 1, 0) != 0)
            break;
        if (heapd_request_collect(c, HEAPD_COLLECT_WAIT) != 0)
            _exit(2);
        if (write(ticks, "c", 1) != 1)
            _exit(3);
    }
    heapd_disconnect(c);
    _exit(0);
}

static void driver_start(struct driver *dr)
{
    int stop[2], ticks[2];
    cloexec_pipe(stop);
    cloexec_pipe(ticks);
    dr->cycles = 0;
    dr->pid = spawn_role("driver", (int[3]){stop[0], ticks[1], -1}, "%d %d",
                         stop[0], ticks[1]);
    close(stop[0]);
    close(ticks[1]);
    dr->stop = stop[1];
    dr->ticks = ticks[0];
}

/* Cycles the driver has completed so far. */
static unsigned long driver_cycles(struct driver *dr)
{
    char buf[256];
    struct pollfd p = {.fd = dr->ticks, .events = POLLIN};
    while (poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) {
        ssize_t n = read(dr->ticks, buf, sizeof buf);
        if (n <= 0)
            break;
        dr->cycles += (unsigned long)n;
    }
    return dr->cycles;
}

static void driver_stop(struct driver *dr)
{
    close(dr->stop);
    harness_wait_ok(dr->pid, "the cycle driver");
    close(dr->ticks);
}

/* Run N cycles from a fresh control connection. */
static void cycles(unsigned n)
{
    heapd_client *c = harness_control(&D);
    for (unsigned i = 0; i < n; i++)
        ck_assert_msg(heapd_request_collect(c, HEAPD_COLLECT_WAIT) == 0,
                      "collect: %s", heapd_last_error());
    heapd_disconnect(c);
}

/* ---- fans: graphs wide enough to overflow any small mark stack ---- */

#define FAN 20000

/* A large array of N children; child i holds (i, MAGIC) and points to a
 * leaf holding i * 7 + MAGIC.  Rooted in root slot SLOT of M.  NULL if an
 * allocation fails.  (No ck_assert here: client processes run it too.) */
/* Start the daemon, attach a mutator, and root a fan of N children. */
static void **start_with_fan(heapd_client **c, heapd_mutator **m, size_t n,
                             uint64_t magic)
{
    start_with(NULL);
    /* precise: the tests drop the fan's root and expect it to die, with
     * FAN still in a local (Note [C locals are roots]) */
    harness_attach_precise(&D, c, m);
    size_t slot = heapd_root_push(*m, NULL);
    void **fan = harness_build_fan(*m, slot, n, magic);
    ck_assert_ptr_nonnull(fan);
    return fan;
}

/* A role's connection and mutator, or exit 10. */
static void role_attach(heapd_client **c, heapd_mutator **m)
{
    heapd_connect_opts o = {.socket_path = D.sock};
    if (heapd_connect(c, &o) != 0 || heapd_attach(*c, m) != 0)
        _exit(10);
}

/* Children of FAN (N of them) whose contents are right. */
static size_t check_fan(void **fan, size_t n, uint64_t magic)
{
    size_t ok = 0;
    if (!fan || heapd_nrefs(fan) != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        void **ch = fan[i];
        if (!ch || heapd_nrefs(ch) != 1 || heapd_nbytes(ch) != 16)
            continue;
        uint64_t *b = heapd_bytes(ch);
        uint64_t *leaf = ch[0];
        ok += b[0] == i && b[1] == magic && leaf && *leaf == i * 7 + magic;
    }
    return ok;
}

/* ---- mark-stack overflow ---- */

enum crash_at { AT_IDLE, AT_SNAPSHOT, AT_MARK, AT_FINAL_SYNC, AT_SWEEP,
                AT_REMARK, AT_COUNT };
static void victim(enum crash_at at, int ready, int in);

/* A client that builds a fan, publishes it, and leaves gracefully. */
static void role_orphan(void)
{
    heapd_client *kc;
    heapd_mutator *km;
    role_attach(&kc, &km);
    size_t ks = heapd_root_push(km, NULL);
    void **kf = harness_build_fan(km, ks, FAN, 0x0f);
    int rc = kf ? heapd_global_set(km, "orphan", kf) : -1;
    heapd_detach(km);
    heapd_disconnect(kc);
    _exit(rc == 0 ? 0 : 1);
}

struct blocked_owner {
    heapd_client *c;
    int go[2];           /* the test writes: check and leave */
    int ready[2];        /* the thread writes: built, then checked */
    size_t ok;
};

/* A second mutator of the test's client: builds a fan, then sits in a
 * blocking region, so its segments are the agent's to give back. */
static void *blocked_owner_main(void *arg)
{
    struct blocked_owner *bo = arg;
    heapd_mutator *m;
    char ch;
    ck_assert_int_eq(heapd_attach(bo->c, &m), 0);
    size_t slot = heapd_root_push(m, NULL);
    void **fan = harness_build_fan(m, slot, FAN, 0xb10c);
    ck_assert_ptr_nonnull(fan);
    heapd_blocking_enter(m);
    ck_assert_int_eq(write(bo->ready[1], "b", 1), 1);
    ck_assert(read_byte(bo->go[0], &ch));
    heapd_blocking_leave(m);
    bo->ok = check_fan(fan, FAN, 0xb10c);
    heapd_detach(m);
    ck_assert_int_eq(write(bo->ready[1], "c", 1), 1);
    return NULL;
}

/* The test's own mutator while the driver runs cycles: it polls, and
 * kills the dying owner once that holds a remark request. */
struct polling_owner {
    heapd_mutator *m;
    struct driver *dr;
    int in;              /* the dying owner's "I hold a request" */
    pid_t dying;
    bool killed;
    unsigned long cycles;
};

static bool poll_through_cycles(void *arg, char *seen, size_t seen_len)
{
    struct polling_owner *po = arg;
    heapd_safepoint(po->m);
    struct pollfd p = {.fd = po->in, .events = POLLIN};
    if (!po->killed && poll(&p, 1, 0) == 1) {
        kill(po->dying, SIGKILL);
        po->killed = true;
    }
    unsigned long n = driver_cycles(po->dr);
    snprintf(seen, seen_len, "%lu of %lu cycles", n, po->cycles);
    return n >= po->cycles;
}

/* A tiny mark_stack_limit: every cycle overflows and remarks.  The fans
 * live in segments of a mutator that keeps polling (its owner rescans
 * them), of a blocked mutator (the agent gives them back), of a client
 * that disconnected (orphans: the daemon rescans them), and of a client
 * that dies while it holds remark requests it never answers. */
START_TEST(mark_stack_overflow_remarks)
{
    enum { CYCLES = 12 };
    heapd_client *c;
    heapd_mutator *m;
    void **fan = start_with_fan(&c, &m, FAN, 0xa11);

    /* an orphan: a client that built its fan, published it, and left */
    heapd_blocking_enter(m);
    harness_wait_ok(spawn_role("orphan", (int[3]){-1, -1, -1}, "-"),
                    "the orphan's client");
    /* an owner that stops answering once it holds a remark request, and
     * is killed while marking waits for it */
    int ready[2], in[2];
    char ch;
    cloexec_pipe(ready);
    cloexec_pipe(in);
    pid_t dying = spawn_role("victim", (int[3]){ready[1], in[1], -1},
                             "%d %d %d", AT_REMARK, ready[1], in[1]);
    close(ready[1]);
    close(in[1]);
    ck_assert_msg(read_byte(ready[0], &ch), "the dying owner did not start");
    struct driver dr;
    driver_start(&dr);
    /* the last fork is done: now a second thread may start */
    struct blocked_owner bo = {.c = c};
    pthread_t bt;
    cloexec_pipe(bo.go);
    cloexec_pipe(bo.ready);
    ck_assert_int_eq(pthread_create(&bt, NULL, blocked_owner_main, &bo), 0);
    ck_assert(read_byte(bo.ready[0], &ch));
    heapd_blocking_leave(m);

    /* this mutator polls: its requests are rescanned here */
    struct polling_owner po = {.m = m, .dr = &dr, .in = in[0],
                               .dying = dying, .cycles = CYCLES};
    harness_wait_until(poll_through_cycles, &po,
                       "the driver's cycles while the owner polls");
    heapd_blocking_enter(m);
    driver_stop(&dr);
    if (!po.killed)
        kill(dying, SIGKILL);
    harness_wait_pid(dying, HARNESS_WAIT_MS);
    heapd_blocking_leave(m);

    ck_assert_int_eq(write(bo.go[1], "g", 1), 1);
    ck_assert(read_byte(bo.ready[0], &ch));
    pthread_join(bt, NULL);

    heapd_stats_t st = harness_stats(c);
    ck_assert_msg(st.mark_overflows >= CYCLES && st.remark_global >= CYCLES &&
                  st.remark_requests >= 1,
                  "%llu cycles: %llu overflows, %llu remarked by the daemon, "
                  "%llu asked of owners",
                  (unsigned long long)st.cycles_completed,
                  (unsigned long long)st.mark_overflows,
                  (unsigned long long)st.remark_global,
                  (unsigned long long)st.remark_requests);
    ck_assert_uint_eq(st.clients_crashed, 1);
    ck_assert_uint_ge(st.segments_orphaned, 1);
    ck_assert_uint_eq(check_fan(fan, FAN, 0xa11), FAN);
    ck_assert_uint_eq(bo.ok, FAN);
    ck_assert_uint_eq(check_fan(heapd_global_get(m, "orphan"), FAN, 0x0f),
                      FAN);
    ck_assert_uint_eq(check_fan(heapd_global_get(m, "victim"), FAN, 0x51),
                      FAN);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- the crash matrix ---- */

static const char *const crash_names[AT_COUNT] = {
    "idle", "snapshot", "mark", "final sync", "sweep", "remark"};

/* Has the daemon reached the moment AT asks for?  Read by the victim
 * itself, before it polls, so that it never acknowledges the stop it is
 * to die in. */
static bool at_moment(enum crash_at at, heapd_mutator *m,
                      const struct layout_control *ctl)
{
    uint32_t ph = atomic_load(&ctl->phase);
    uint32_t stop = atomic_load(&m->slot->stop_request);
    switch (at) {
    case AT_IDLE: return true;
    case AT_SNAPSHOT: return stop != 0 && ph == LAYOUT_PHASE_IDLE;
    case AT_MARK: return stop == 0 && ph == LAYOUT_PHASE_MARK;
    case AT_FINAL_SYNC: return stop != 0 && ph == LAYOUT_PHASE_MARK;
    case AT_SWEEP: return ph == LAYOUT_PHASE_SWEEP;
    case AT_REMARK: return atomic_load(&m->remark_pending) != 0;
    default: return false;
    }
}

/* A client that dies (is killed) at the moment AT, never acknowledging
 * or answering anything from then on. */
static void victim(enum crash_at at, int ready, int in)
{
    heapd_client *c;
    heapd_mutator *m;
    role_attach(&c, &m);
    const struct layout_control *ctl = heapd_heap_base(c);
    /* garbage once it dies: a chain of small objects and a large one */
    size_t slot = heapd_root_push(m, NULL);
    for (int i = 0; i < 3000; i++) {
        void **o = heapd_alloc(m, 1, 40);
        if (!o)
            _exit(2);
        heapd_write(m, o, &o[0], heapd_root_get(m, slot));
        heapd_root_set(m, slot, o);
    }
    heapd_root_push(m, heapd_alloc(m, 0, 1 << 20));
    if (at == AT_REMARK) {
        size_t fs = heapd_root_push(m, NULL);
        void **fan = harness_build_fan(m, fs, FAN, 0x51);
        if (!fan || heapd_global_set(m, "victim", fan) != 0)
            _exit(3);
    }
    if (write(ready, "r", 1) != 1)
        _exit(4);
    for (;;) {
        if (at_moment(at, m, ctl)) {
            if (at == AT_MARK)
                heapd_root_push(m, NULL); /* a stack barrier, mid-mark */
            if (write(in, "i", 1) != 1)
                _exit(5);
            for (;;)
                pause(); /* never acknowledges or answers again */
        }
        heapd_safepoint(m);
    }
}

static uint64_t segments_in_use(const heapd_stats_t *st)
{
    return st->segments_owned + st->segments_filled + st->segments_large;
}

START_TEST(crash_matrix)
{
    enum crash_at at = (enum crash_at)_i;
    heapd_client *c;
    heapd_mutator *m;
    void **fan = start_with_fan(&c, &m, 3000, 0x5u);
    /* from here this mutator waits: it holds up no stop, and its
     * segments flagged for remark are the agent's (Note [Remark
     * requests]) */
    heapd_blocking_enter(m);
    cycles(2);
    heapd_stats_t base = harness_stats(c);

    int ready[2], in[2];
    cloexec_pipe(ready);
    cloexec_pipe(in);
    pid_t kid = spawn_role("victim", (int[3]){ready[1], in[1], -1},
                           "%d %d %d", at, ready[1], in[1]);
    close(ready[1]);
    close(in[1]);
    char ch;
    ck_assert_msg(read_byte(ready[0], &ch), "the victim did not start");
    struct driver dr;
    bool driving = at != AT_IDLE;
    if (driving)
        driver_start(&dr);
    ck_assert_msg(read_byte(in[0], &ch), "the victim never saw the %s",
                  crash_names[at]);
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    /* the daemon notices the close: the victim's mutator goes */
    harness_wait_stat(&D, c, mutators, ==, 1);
    if (driving)
        driver_stop(&dr);
    if (at == AT_REMARK) {
        heapd_blocking_leave(m);
        ck_assert_uint_eq(check_fan(heapd_global_get(m, "victim"), FAN,
                                    0x51), FAN);
        heapd_global_set(m, "victim", NULL);
        heapd_blocking_enter(m);
    }
    /* the cycle after the one it died in frees what it allocated */
    cycles(2);
    heapd_stats_t st = harness_stats(c);
    ck_assert_uint_eq(st.clients_crashed, 1);
    ck_assert_msg(segments_in_use(&st) == segments_in_use(&base) &&
                  st.segments_orphaned >= 1,
                  "killed at %s: %llu segments in use (%llu before), "
                  "%llu orphaned", crash_names[at],
                  (unsigned long long)segments_in_use(&st),
                  (unsigned long long)segments_in_use(&base),
                  (unsigned long long)st.segments_orphaned);
    if (at == AT_REMARK)
        ck_assert_uint_ge(st.remark_requests, 1);
    heapd_blocking_leave(m);
    ck_assert_uint_eq(check_fan(fan, 3000, 0x5u), 3000);
    /* every orphan is freed or adopted once nothing in it lives: the
     * victim may have refilled holes of segments this client's agent gave
     * back for remark (Note [Reuse before growth]), which hold this
     * client's fan and stay orphans while it lives */
    heapd_root_pop(m, heapd_root_depth(m));
    heapd_blocking_enter(m);
    cycles(2);
    st = harness_stats(c);
    ck_assert_msg(st.segments_orphaned == st.segments_adopted,
                  "killed at %s: %llu orphaned, %llu adopted once every "
                  "object died", crash_names[at],
                  (unsigned long long)st.segments_orphaned,
                  (unsigned long long)st.segments_adopted);
    heapd_blocking_leave(m);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- spawn-burn ---- */

#define BOARD 2048      /* slots of the shared board: wider than the stack */
#define LIST 16
#define ROUNDS 20       /* rounds of a child that leaves gracefully */
#define BURN_MS 3000

static uint64_t node_sum(uint64_t pid, uint64_t seq)
{
    return (pid * 0x9e3779b97f4a7c15ull) ^ (seq << 8);
}

/* Entries of the list at L that are wrong (0 for a good list). */
static int check_list(void **l)
{
    int bad = 0, n = 0;
    for (; l; l = l[0], n++) {
        if (n > LIST || heapd_nrefs(l) != 1 || heapd_nbytes(l) != 32)
            return bad + 1;
        uint64_t *b = heapd_bytes(l);
        bad += b[0] != 0xb0a4d || b[3] != node_sum(b[1], b[2]);
    }
    return bad;
}

static void burn_child(bool graceful)
{
    heapd_client *c;
    heapd_mutator *m;
    role_attach(&c, &m);
    void **board = heapd_global_get(m, "board");
    if (!board)
        _exit(11);
    uint64_t pid = (uint64_t)getpid();
    unsigned seed = (unsigned)pid;
    size_t slot = heapd_root_push(m, NULL);
    for (uint64_t seq = 0; !graceful || seq < ROUNDS; seq++) {
        for (int k = 0; k < LIST; k++) {
            void **n = heapd_alloc(m, 1, 32);
            if (!n)
                _exit(12);
            heapd_write(m, n, &n[0], heapd_root_get(m, slot));
            uint64_t *b = heapd_bytes(n);
            b[0] = 0xb0a4d;
            b[1] = pid;
            b[2] = seq;
            b[3] = node_sum(pid, seq);
            heapd_root_set(m, slot, n);
        }
        size_t idx = (size_t)rand_r(&seed) % BOARD;
        heapd_write(m, board, &board[idx], heapd_root_get(m, slot));
        heapd_root_set(m, slot, NULL);
        if (check_list(board[(size_t)rand_r(&seed) % BOARD]) != 0)
            _exit(3); /* another process's list is damaged */
    }
    heapd_detach(m);
    heapd_disconnect(c);
    _exit(0);
}

struct kid {
    pid_t pid;
    bool graceful;
    int64_t kill_at;      /* ms; killed ones */
};

struct burn {
    unsigned at_once;
    struct kid kids[8];
    unsigned live, spawned, killed, left;
    unsigned seed;
};

/* Kill the kids whose instant has come and reap those that ended: a kid
 * that leaves gracefully exits 0, one that is killed dies of SIGKILL. */
static void burn_reap(struct burn *b)
{
    for (unsigned k = 0; k < b->at_once; k++) {
        struct kid *kd = &b->kids[k];
        if (kd->pid == 0)
            continue;
        if (!kd->graceful && harness_now_ms() >= kd->kill_at)
            kill(kd->pid, SIGKILL);
        int status;
        pid_t r = waitpid(kd->pid, &status, WNOHANG);
        ck_assert_int_ge(r, 0);
        if (r == 0)
            continue;
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
            !kd->graceful)
            b->killed++;
        else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
            b->left++;
        else
            ck_abort_msg("a child exited with status 0x%x (3: it found "
                         "another process's list damaged)", status);
        kd->pid = 0;
        b->live--;
    }
}

static bool burn_all_reaped(void *arg, char *seen, size_t seen_len)
{
    struct burn *b = arg;
    burn_reap(b);
    snprintf(seen, seen_len, "%u of %u children still running", b->live,
             b->spawned);
    return b->live == 0;
}

/* Spawn children for BURN_MS (and at least one of each kind), AT_ONCE at
 * a time, every other one killed at a random instant, while cycles run
 * back to back. */
static void spawn_burn(unsigned at_once)
{
    start_with(NULL);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    void **board = heapd_alloc(m, BOARD, 0);
    ck_assert_ptr_nonnull(board);
    ck_assert_int_eq(heapd_global_set(m, "board", board), 0);
    heapd_blocking_enter(m);

    struct driver dr;
    driver_start(&dr);
    struct burn b = {.at_once = at_once, .seed = 12345};
    int64_t end = harness_now_ms() + BURN_MS;
    /* a workload of BURN_MS, not a wait: how many children it runs is
     * whatever the machine manages, at least the two kinds */
    while (harness_now_ms() < end || b.spawned < 2) {
        for (unsigned k = 0; k < at_once; k++) {
            struct kid *kd = &b.kids[k];
            if (kd->pid != 0)
                continue;
            kd->graceful = b.spawned % 2 == 0;
            kd->kill_at = harness_now_ms() + (int64_t)(rand_r(&b.seed) % 40);
            kd->pid = spawn_role("burn", (int[3]){-1, -1, -1}, "%d",
                                 kd->graceful);
            b.spawned++;
            b.live++;
        }
        burn_reap(&b);
        nap_ms(1);
    }
    harness_wait_until(burn_all_reaped, &b,
                       "the last children to leave or be killed");
    driver_stop(&dr);
    cycles(2);
    heapd_blocking_leave(m);
    int damaged = 0, lists = 0;
    for (size_t i = 0; i < BOARD; i++) {
        lists += board[i] != NULL;
        damaged += check_list(board[i]);
    }
    ck_assert_int_eq(damaged, 0);
    ck_assert_int_gt(lists, 0);
    heapd_stats_t st = harness_stats(c);
    /* every other child left (burn_reap checked each one's end); one that
     * left said goodbye, so only killed ones count as crashed, and those
     * only if killed after their hello, which depends on how fast they
     * started */
    fprintf(stderr, "spawn_burn(%u): %u children: %u left, %u killed; %llu "
            "crashed; %llu cycles\n", at_once, b.spawned, b.left, b.killed,
            (unsigned long long)st.clients_crashed,
            (unsigned long long)st.cycles_completed);
    ck_assert_msg(st.clients_crashed <= b.killed,
                  "%llu clients crashed, but only %u children were killed "
                  "(%u left gracefully)",
                  (unsigned long long)st.clients_crashed, b.killed, b.left);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}

START_TEST(spawn_burn_serial)
{
    spawn_burn(1);
}
END_TEST

START_TEST(spawn_burn_parallel)
{
    spawn_burn(8);
}
END_TEST

/* ---- bad input ---- */


static void send_remark_done(int fd, uint32_t *rescanned, size_t nr,
                             uint32_t *released, size_t nl)
{
    Heapd__RemarkDone rd = HEAPD__REMARK_DONE__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    rd.n_rescanned = nr;
    rd.rescanned = rescanned;
    rd.n_released = nl;
    rd.released = released;
    env.body_case = HEAPD__ENVELOPE__BODY_REMARK_DONE;
    env.remark_done = &rd;
    harness_send_env(fd, &env);
}

static Heapd__Envelope *ask(int fd, uint64_t seq, Heapd__Envelope *env)
{
    env->seq = seq;
    harness_send_env(fd, env);
    Heapd__Envelope *r = harness_read_env(fd, NULL);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->seq, seq);
    return r;
}

/* Remark answers nobody asked for, from mutator and control clients,
 * during a cycle and between cycles, are counted and ignored. */
START_TEST(unasked_remark_answers_are_ignored)
{
    heapd_client *c;
    heapd_mutator *m;
    void **fan = start_with_fan(&c, &m, FAN, 0xbad);
    heapd_blocking_enter(m);
    heapd_stats_t before = harness_stats(c);

    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    uint32_t junk[] = {0, 1, 200, 0x7fffffff, UINT32_MAX};
    send_remark_done(fd, junk, 5, junk + 2, 3);
    /* and while cycles overflow and remark */
    struct driver dr;
    driver_start(&dr);
    for (int i = 0; i < 50; i++)
        send_remark_done(fd, junk + 2, 1, junk + 2, 1);
    Heapd__StatsRequest sr = HEAPD__STATS_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.body_case = HEAPD__ENVELOPE__BODY_STATS_REQUEST;
    env.stats_request = &sr;
    Heapd__Envelope *r = ask(fd, 3, &env);
    ck_assert_int_eq(r->body_case, HEAPD__ENVELOPE__BODY_STATS_REPLY);
    heapd__envelope__free_unpacked(r, NULL);
    driver_stop(&dr);
    close(fd);

    /* a control client has no heap to answer for */
    int cfd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    send_remark_done(cfd, junk, 2, NULL, 0);
    r = ask(cfd, 4, &env);
    ck_assert_int_eq(r->body_case, HEAPD__ENVELOPE__BODY_STATS_REPLY);
    heapd__envelope__free_unpacked(r, NULL);
    close(cfd);

    heapd_stats_t st = harness_stats(c);
    ck_assert_uint_ge(st.frames_rejected, before.frames_rejected + 5 + 3 + 2);
    heapd_blocking_leave(m);
    ck_assert_uint_eq(check_fan(fan, FAN, 0xbad), FAN);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* Goodbye is answered, and anything after it refused; a client that said
 * goodbye has not crashed. */
START_TEST(goodbye_is_answered_and_final)
{
    heapd_client *c;
    heapd_mutator *m;
    void **fan = start_with_fan(&c, &m, FAN, 0xbad);
    heapd_blocking_enter(m);
    heapd_stats_t before = harness_stats(c);

    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    Heapd__Goodbye gb = HEAPD__GOODBYE__INIT;
    Heapd__Envelope bye = HEAPD__ENVELOPE__INIT;
    bye.body_case = HEAPD__ENVELOPE__BODY_GOODBYE;
    bye.goodbye = &gb;
    Heapd__Envelope *r = ask(fd, 9, &bye);
    ck_assert_int_eq(r->body_case, HEAPD__ENVELOPE__BODY_GOODBYE);
    heapd__envelope__free_unpacked(r, NULL);
    Heapd__StatsRequest sr = HEAPD__STATS_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.body_case = HEAPD__ENVELOPE__BODY_STATS_REQUEST;
    env.stats_request = &sr;
    env.seq = 10;
    harness_send_env(fd, &env);
    r = harness_read_env(fd, NULL);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->body_case, HEAPD__ENVELOPE__BODY_ERROR);
    ck_assert_msg(strstr(r->error->message, "after goodbye"), "message: %s",
                  r->error->message);
    heapd__envelope__free_unpacked(r, NULL);
    ck_assert(harness_wait_eof(fd));
    close(fd);

    heapd_stats_t st = harness_stats(c);
    ck_assert_uint_ge(st.frames_rejected, before.frames_rejected + 1);
    ck_assert_uint_eq(st.clients_crashed, 0);
    heapd_blocking_leave(m);
    ck_assert_uint_eq(check_fan(fan, FAN, 0xbad), FAN);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* A client whose connection is gone (here: the daemon was killed) stops
 * allocating at its next safepoint: the daemon orphans what it held and
 * may give it to others (Note [Remark requests]). */
START_TEST(closed_connection_stops_allocation)
{
    start_with(NULL);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    for (int i = 0; i < 1000; i++)
        ck_assert_ptr_nonnull(heapd_alloc(m, 1, 24)); /* a current segment */
    kill(D.pid, SIGKILL);
    harness_wait_pid(D.pid, HARNESS_WAIT_MS);
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(c, &st), HEAPD_ECLOSED); /* noticed */
    errno = 0;
    ck_assert_ptr_null(heapd_alloc(m, 1, 24));
    ck_assert_int_ne(errno, 0);
    ck_assert_ptr_null(heapd_alloc(m, 0, 1 << 20));
    heapd_detach(m);
    heapd_disconnect(c);
    unlink(D.sock);
}
END_TEST

static Suite *lifecycle_suite(void)
{
    Suite *s = suite_create("lifecycle");
    TCase *t = tcase_create("remark");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, mark_stack_overflow_remarks);
    tcase_add_test(t, unasked_remark_answers_are_ignored);
    tcase_add_test(t, goodbye_is_answered_and_final);
    tcase_add_test(t, closed_connection_stops_allocation);
    tcase_add_loop_test(t, crash_matrix, 0, AT_COUNT);
    suite_add_tcase(s, t);
    t = tcase_create("spawn-burn");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, spawn_burn_serial);
    tcase_add_test(t, spawn_burn_parallel);
    suite_add_tcase(s, t);
    return s;
}

/* A client process: LIFECYCLE_ROLE, with LIFECYCLE_ARG, against the
 * daemon at LIFECYCLE_SOCK (see spawn_role). */
static int run_role(const char *role)
{
    const char *arg = getenv("LIFECYCLE_ARG");
    const char *sock = getenv("LIFECYCLE_SOCK");
    int x = 0, y = 0, z = 0;
    if (!arg || !sock)
        return 120;
    snprintf(D.sock, sizeof D.sock, "%s", sock);
    if (strcmp(role, "driver") == 0 && sscanf(arg, "%d %d", &x, &y) == 2)
        role_driver(x, y);
    else if (strcmp(role, "orphan") == 0)
        role_orphan();
    else if (strcmp(role, "victim") == 0 &&
             sscanf(arg, "%d %d %d", &x, &y, &z) == 3)
        victim((enum crash_at)x, y, z);
    else if (strcmp(role, "burn") == 0 && sscanf(arg, "%d", &x) == 1)
        burn_child(x != 0);
    return 121;
}

int main(void)
{
    const char *role = getenv("LIFECYCLE_ROLE");
    if (role)
        return run_role(role);
    return check_main(lifecycle_suite());
}
