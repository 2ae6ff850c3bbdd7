/* Clients of a daemon that dies: heapd is SIGKILLed while a client's
 * mutator waits on it (in a stop, for another process's heapd_global_once,
 * in a write barrier with a full ring), and the mutator must be released
 * and fail its next calls (Note [A dead daemon] in client/mutator.c).
 *
 * The client processes are forked before the test process makes any
 * connection of its own, so that no libheapd thread is copied into them.
 * Each waits at a point the test can see from outside: its main thread
 * asleep in futex(2) on the word it reported (/proc/PID/syscall), so the
 * daemon is killed only once the wait has begun (Note [Test handshakes]).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "barrier.h"
#include "client.h"
#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "mutator.h"
#include "check_main.h"

static struct daemon_proc D;

/* ---- what a kid reports, and how it ends ---- */

/* A kid's exit codes: 0 when every check after the release held. */
enum kid_exit {
    KID_OK = 0,
    KID_ATTACH = 10,     /* could not connect or attach */
    KID_PIPE,            /* the test's pipe broke */
    KID_SETUP,           /* an allocation or root before the kill failed */
    KID_ALLOC,           /* heapd_alloc did not fail with EPIPE */
    KID_ALLOC_LARGE,     /* the same for a large object */
    KID_ROOT_PUSH,       /* heapd_root_push did not fail with EPIPE */
    KID_COLLECT,         /* heapd_collect did not return HEAPD_ECLOSED */
    KID_GLOBAL_SET,      /* heapd_global_set did not return HEAPD_ECLOSED */
    KID_ONCE,            /* heapd_global_once did not fail with EPIPE */
    KID_INIT_RAN,        /* the waiter ran INIT: the entry was released */
    KID_NO_STOP,         /* the stop never came */
};

static const char *kid_exit_name(int status)
{
    if (!WIFEXITED(status))
        return "killed by a signal";
    switch (WEXITSTATUS(status)) {
    case KID_OK: return "ok";
    case KID_ATTACH: return "could not connect or attach";
    case KID_PIPE: return "the pipe to the test broke";
    case KID_SETUP: return "setting up before the kill failed";
    case KID_ALLOC: return "heapd_alloc did not fail with EPIPE";
    case KID_ALLOC_LARGE: return "a large heapd_alloc did not fail with EPIPE";
    case KID_ROOT_PUSH: return "heapd_root_push did not fail with EPIPE";
    case KID_COLLECT: return "heapd_collect did not return HEAPD_ECLOSED";
    case KID_GLOBAL_SET: return "heapd_global_set did not return "
                                "HEAPD_ECLOSED";
    case KID_ONCE: return "heapd_global_once did not fail with EPIPE";
    case KID_INIT_RAN: return "the waiter ran init itself";
    case KID_NO_STOP: return "the stop it waited for never came";
    default: return "an unknown exit code";
    }
}

static void kid_attach(heapd_client **c, heapd_mutator **m)
{
    /* what a client does once its connection is closed for good (Note
     * [A dead daemon]); reconnecting is test_restart's */
    heapd_connect_opts o = {.socket_path = D.sock,
                            .flags = HEAPD_CONNECT_NO_RECONNECT};
    if (heapd_connect(c, &o) != 0 || heapd_attach(*c, m) != 0)
        _exit(KID_ATTACH);
}

static void kid_send(int fd, const void *p, size_t n)
{
    if (write(fd, p, n) != (ssize_t)n)
        _exit(KID_PIPE);
}

static void kid_recv(int fd, char want)
{
    char ch;
    if (read(fd, &ch, 1) != 1 || ch != want)
        _exit(KID_PIPE);
}

/* The checks after the release: every call that needs the daemon fails at
 * once, with HEAPD_ECLOSED or errno EPIPE, and none hangs. */
static void kid_expect_orphaned(heapd_mutator *m)
{
    heapd_safepoint(m); /* returns: nothing to wait for */
    errno = 0;
    if (heapd_alloc(m, 1, 24) != NULL || errno != EPIPE)
        _exit(KID_ALLOC);
    errno = 0;
    if (heapd_alloc(m, 0, 1 << 20) != NULL || errno != EPIPE)
        _exit(KID_ALLOC_LARGE);
    errno = 0;
    if (heapd_root_push(m, NULL) != (size_t)-1 || errno != EPIPE)
        _exit(KID_ROOT_PUSH);
    if (heapd_collect(m, 0) != HEAPD_ECLOSED)
        _exit(KID_COLLECT);
    if (heapd_global_set(m, "orphaned", NULL) != HEAPD_ECLOSED)
        _exit(KID_GLOBAL_SET);
    heapd_blocking_enter(m);
    heapd_blocking_leave(m);
    heapd_root_pop(m, 1);
    heapd_detach(m);
}

/* ---- waiting for a kid to be asleep on a word ---- */

struct asleep {
    pid_t pid;
    uintptr_t lo, hi; /* the futex word is in [lo, hi) */
};

/* PID's main thread is in futex(2) on a word in [lo, hi). */
static bool is_asleep(void *arg, char *seen, size_t seen_len)
{
    const struct asleep *a = arg;
    char path[64], line[256] = "";
    int st;
    if (waitpid(a->pid, &st, WNOHANG) == a->pid)
        ck_abort_msg("the kid exited before it waited: %s (exit %d)",
                     kid_exit_name(st), WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    snprintf(path, sizeof path, "/proc/%d/task/%d/syscall", (int)a->pid,
             (int)a->pid);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s: %s (the kid died?)", path,
                  strerror(errno));
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    snprintf(seen, seen_len, "%s", got ? line : "(nothing)");
    long nr;
    uintptr_t word;
    if (sscanf(line, "%ld %" SCNxPTR, &nr, &word) != 2)
        return false;
    return nr == SYS_futex && word >= a->lo && word < a->hi;
}

static void wait_asleep(pid_t pid, uintptr_t lo, uintptr_t hi,
                        const char *what)
{
    struct asleep a = {.pid = pid, .lo = lo, .hi = hi};
    harness_wait_until(is_asleep, &a, what);
}

/* Read a word's address from a kid, within the bound. */
static uintptr_t read_addr(int fd, const char *who)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    uintptr_t v = 0;
    ck_assert_msg(poll(&p, 1, HARNESS_WAIT_MS) == 1 &&
                      read(fd, &v, sizeof v) == (ssize_t)sizeof v,
                  "%s did not report the word it waits on", who);
    return v;
}

static void read_tag(int fd, char want, const char *what)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char ch = 0;
    ck_assert_msg(poll(&p, 1, HARNESS_WAIT_MS) == 1 && read(fd, &ch, 1) == 1 &&
                      ch == want,
                  "waited %d ms for %s", HARNESS_WAIT_MS, what);
}

static void kill_daemon(void)
{
    ck_assert_int_eq(kill(D.pid, SIGKILL), 0);
    ck_assert_msg(harness_wait_pid(D.pid, HARNESS_WAIT_MS) != -1,
                  "the SIGKILLed heapd did not exit");
    unlink(D.sock);
}

static void expect_released(pid_t kid, const char *who)
{
    int st = harness_wait_pid(kid, HARNESS_WAIT_MS);
    ck_assert_msg(st != -1, "%s still waits on heapd %d ms after heapd was "
                  "killed", who, HARNESS_WAIT_MS);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == KID_OK,
                  "%s, released: %s (exit %d)", who, kid_exit_name(st),
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static void end_kid(pid_t kid)
{
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
}

/* ---- a mutator stopped in a pause ---- */

/* Acknowledges a snapshot that another mutator holds open, and waits for
 * its release; reports the stop word first. */
static void stopped_kid(int out)
{
    heapd_client *c;
    heapd_mutator *m;
    kid_attach(&c, &m);
    _Atomic uint32_t *stop = &m->slot->stop_request;
    uintptr_t addr = (uintptr_t)stop;
    kid_send(out, &addr, sizeof addr);
    /* the daemon answers at once; the cycle's snapshot then waits for the
     * holder, which never reaches a safepoint */
    if (heapd_collect(m, 0) != 0)
        _exit(KID_SETUP);
    while (atomic_load(stop) == 0) {
        if (agent_is_closed(&c->agent))
            _exit(KID_NO_STOP);
        heapd_safepoint(m);
    }
    /* the stop is under way and cannot end while the holder runs: this
     * returns only once the connection is gone (perhaps at once, if the
     * safepoint above took it already) */
    heapd_safepoint(m);
    kid_expect_orphaned(m);
    _exit(KID_OK);
}

START_TEST(stopped_mutator_is_released)
{
    harness_start(&D, harness_default_config("@SOCK@", "verify = true\n"));
    pid_t holder = harness_fork_mutator(&D, NULL, NULL);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        close(p[0]);
        stopped_kid(p[1]);
    }
    close(p[1]);
    uintptr_t stop = read_addr(p[0], "the stopped mutator");
    wait_asleep(kid, stop, stop + 1,
                "the mutator to sleep on the stop word (its main thread in "
                "futex(2) on it)");
    kill_daemon();
    expect_released(kid, "the mutator stopped in a pause");
    end_kid(holder);
    close(p[0]);
}
END_TEST

/* ---- a mutator waiting for another process's heapd_global_once ---- */

/* The initialiser's INIT: says so, then waits (blocked) until killed. */
static void *slow_init(heapd_mutator *m, void *arg)
{
    int out = *(int *)arg;
    heapd_blocking_enter(m);
    kid_send(out, "i", 1);
    for (;;)
        pause();
    return NULL;
}

static void initialiser_kid(int out)
{
    heapd_client *c;
    heapd_mutator *m;
    kid_attach(&c, &m);
    heapd_global_once(m, "slow", slow_init, &out);
    _exit(KID_SETUP); /* slow_init never returns */
}

static void *must_not_init(heapd_mutator *m, void *arg)
{
    (void)m;
    (void)arg;
    _exit(KID_INIT_RAN);
}

static void once_waiter_kid(int out)
{
    heapd_client *c;
    heapd_mutator *m;
    kid_attach(&c, &m);
    struct layout_global *tab = m->ctl->globals;
    uintptr_t range[2] = {(uintptr_t)&tab[0],
                          (uintptr_t)&tab[LAYOUT_MAX_GLOBALS]};
    kid_send(out, range, sizeof range);
    errno = 0;
    if (heapd_global_once(m, "slow", must_not_init, NULL) != NULL ||
        errno != EPIPE)
        _exit(KID_ONCE);
    kid_expect_orphaned(m);
    _exit(KID_OK);
}

START_TEST(once_waiter_is_released)
{
    harness_start(&D, harness_default_config("@SOCK@", "verify = true\n"));
    int pi[2], pw[2];
    ck_assert_int_eq(pipe(pi), 0);
    pid_t init = fork();
    ck_assert_int_ge(init, 0);
    if (init == 0) {
        close(pi[0]);
        initialiser_kid(pi[1]);
    }
    close(pi[1]);
    read_tag(pi[0], 'i', "the initialiser to run INIT");
    ck_assert_int_eq(pipe(pw), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        close(pw[0]);
        close(pi[0]);
        once_waiter_kid(pw[1]);
    }
    close(pw[1]);
    uintptr_t lo = read_addr(pw[0], "the waiter");
    uintptr_t hi = read_addr(pw[0], "the waiter");
    wait_asleep(kid, lo, hi,
                "the waiter to sleep on the global's wake word (its main "
                "thread in futex(2) on a word of the globals table)");
    kill_daemon();
    expect_released(kid, "the mutator waiting in heapd_global_once");
    end_kid(init);
    close(pi[0]);
    close(pw[0]);
}
END_TEST

/* ---- a mutator waiting in a write barrier, its ring full ---- */

/* Every thread of PID is stopped (SIGSTOP has taken effect). */
static bool all_stopped(void *arg, char *seen, size_t seen_len)
{
    pid_t pid = *(pid_t *)arg;
    char path[300], line[512];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *dir = opendir(path);
    ck_assert_msg(dir != NULL, "cannot list %s: %s", path, strerror(errno));
    bool stopped = true;
    size_t used = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pid,
                 e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* a thread that has just exited */
        bool got = fgets(line, sizeof line, f) != NULL;
        fclose(f);
        /* the state is the field after the command name's ')' */
        const char *close = got ? strrchr(line, ')') : NULL;
        char state = close && close[1] == ' ' ? close[2] : '?';
        if (state != 'T' && state != 't')
            stopped = false;
        if (used + 16 < seen_len)
            used += (size_t)snprintf(seen + used, seen_len - used,
                                     "%s%s:%c", used ? " " : "threads ",
                                     e->d_name, state);
    }
    closedir(dir);
    return stopped;
}

/* Takes a cycle's snapshot, then never acknowledges its final sync, and,
 * once the test has frozen the daemon, overwrites a wide object's field
 * again and again: each write logs the old value, a large object, which
 * the barrier never filters (Note [Filtering the barrier]), until the ring
 * is full and the write waits for room. */
static void barrier_kid(int out, int in)
{
    heapd_client *c;
    heapd_mutator *m;
    kid_attach(&c, &m);
    struct layout_control *ctl = m->ctl;
    void **wide = heapd_alloc(m, BARRIER_WIDE + 1, 0);
    if (!wide || heapd_root_push(m, wide) == (size_t)-1)
        _exit(KID_SETUP);
    void *large = heapd_alloc(m, 0, 1 << 20);
    wide = heapd_root_get(m, 0);
    if (!large)
        _exit(KID_SETUP);
    heapd_write(m, wide, &wide[0], large);
    uintptr_t addr = (uintptr_t)&m->slot->urs_wake;
    kid_send(out, &addr, sizeof addr);
    /* the snapshot at a safepoint; from then on none */
    while (atomic_load(&ctl->phase) != LAYOUT_PHASE_MARK) {
        if (agent_is_closed(&c->agent))
            _exit(KID_NO_STOP);
        heapd_safepoint(m);
    }
    /* marking ends with a final sync, which waits for this mutator */
    for (;;) {
        uint32_t gen = atomic_load(&m->slot->stop_request);
        if (gen != 0 && !layout_stop_is_snapshot(gen))
            break;
        if (agent_is_closed(&c->agent))
            _exit(KID_NO_STOP);
    }
    kid_send(out, "f", 1);
    kid_recv(in, 'g'); /* the daemon is frozen */
    wide = heapd_root_get(m, 0);
    large = wide[0];
    for (unsigned i = 0; i < 2 * LAYOUT_URS_SIZE; i++)
        heapd_write(m, wide, &wide[0], large);
    kid_expect_orphaned(m);
    _exit(KID_OK);
}

START_TEST(barrier_waiter_is_released)
{
    harness_start(&D, harness_default_config("@SOCK@", "verify = true\n"));
    int up[2], down[2];
    ck_assert_int_eq(pipe(up), 0);
    ck_assert_int_eq(pipe(down), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        close(up[0]);
        close(down[1]);
        barrier_kid(up[1], down[0]);
    }
    close(up[1]);
    close(down[0]);
    uintptr_t wake = read_addr(up[0], "the writer");
    /* the kids are forked: this process may connect now */
    heapd_client *ctl = harness_control(&D);
    ck_assert_msg(heapd_request_collect(ctl, 0) == 0, "collect: %s",
                  heapd_last_error());
    read_tag(up[0], 'f', "the writer to see the cycle's final sync");
    /* frozen, the daemon consumes no ring: the writer's fills */
    ck_assert_int_eq(kill(D.pid, SIGSTOP), 0);
    harness_wait_until(all_stopped, &D.pid, "heapd's threads to stop");
    ck_assert_int_eq(write(down[1], "g", 1), 1);
    wait_asleep(kid, wake, wake + 1,
                "the writer to sleep on its ring's wake word (its main "
                "thread in futex(2) on it)");
    kill_daemon();
    expect_released(kid, "the mutator waiting in a write barrier");
    heapd_disconnect(ctl);
    close(up[0]);
    close(down[1]);
}
END_TEST

static Suite *orphaned_suite(void)
{
    Suite *s = suite_create("orphaned_client");
    TCase *t = tcase_create("dead daemon");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, stopped_mutator_is_released);
    tcase_add_test(t, once_waiter_is_released);
    tcase_add_test(t, barrier_waiter_is_released);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(orphaned_suite());
}
