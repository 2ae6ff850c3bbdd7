/* Evicted clients, the client's side: a process whose slot the daemon has
 * marked evicted is aborted at its next heapd call, with a message that
 * names the heap, how long it stalled and what the program must do (Note
 * [Evicted clients, client side] in client/mutator.c).
 *
 * The daemon's part is simulated: a kid process connects and attaches
 * for itself, then stores into its own slot what the daemon writes when
 * it evicts the client (evicted = LAYOUT_STALL_SNAPSHOT, evicted_after_ms
 * = 12345; Note [Client control memory] in proto/layout.h) and makes one
 * call.  The kid must die of SIGABRT with the message on its stderr,
 * which the test reads through a pipe.  Kids are forked before the test
 * process makes a connection of its own, so that no libheapd thread is
 * copied into them.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "mutator.h"
#include "check_main.h"

static struct daemon_proc D;

#define STALLED_MS 12345u

/* A kid's exit codes; dying of SIGABRT is what an evicted kid must do. */
enum kid_exit {
    KID_OK = 0,
    KID_ATTACH = 10,  /* could not connect or attach */
    KID_SETUP,        /* an allocation or root before the mark failed */
    KID_RETURNED,     /* the call on the evicted slot returned */
    KID_NO_MARKING,   /* no cycle's marking began */
    KID_PIPE,         /* the test's pipe broke */
    KID_UNMARKED,     /* a call on a slot not marked failed */
};

static const char *kid_exit_name(int status)
{
    if (WIFSIGNALED(status))
        return strsignal(WTERMSIG(status));
    switch (WEXITSTATUS(status)) {
    case KID_OK: return "exited normally";
    case KID_ATTACH: return "could not connect or attach";
    case KID_SETUP: return "setting up before the mark failed";
    case KID_RETURNED: return "the call on the evicted slot returned";
    case KID_NO_MARKING: return "no cycle's marking began";
    case KID_PIPE: return "the pipe to the test broke";
    case KID_UNMARKED: return "a call on a slot that is not marked failed";
    default: return "an unknown exit code";
    }
}

/* The call an evicted kid makes. */
enum evicted_call {
    CALL_ALLOC,
    CALL_SAFEPOINT,
    CALL_ROOT_PUSH,
    CALL_WRITE_MARKING,
    CALL_BLOCKING_LEAVE,
    CALL_NONE_AGENT, /* none: the agent sees the connection end */
};

/* What the daemon writes into each slot of a client it evicts. */
static void mark_evicted(heapd_mutator *m)
{
    atomic_store(&m->slot->evicted_after_ms, STALLED_MS);
    atomic_store(&m->slot->evicted, LAYOUT_STALL_SNAPSHOT);
}

static void kid_attach(heapd_client **c, heapd_mutator **m)
{
    heapd_connect_opts o = {.socket_path = D.sock};
    if (heapd_connect(c, &o) != 0 || heapd_attach(*c, m) != 0)
        _exit(KID_ATTACH);
}

/* Safepoints until a cycle's snapshot has begun marking; the kid then
 * takes no safepoint, so the final sync waits for it and marking goes on
 * (Note [Stop the world] in daemon/gc/safepoint.c).  The cycle is asked for
 * by the client, not the mutator: heapd_collect would wait for its reply
 * in a blocking region, where the whole cycle can run without this
 * mutator's safepoint, and then no MARK phase is ever seen. */
static void kid_wait_marking(heapd_mutator *m)
{
    if (heapd_request_collect(m->c, 0) != 0)
        _exit(KID_NO_MARKING);
    while (atomic_load(&m->ctl->phase) != LAYOUT_PHASE_MARK)
        heapd_safepoint(m); /* the test's wait for the kid bounds this */
}

static void kid_evicted(enum evicted_call call, int up, int down)
{
    heapd_client *c;
    heapd_mutator *m;
    kid_attach(&c, &m);
    void **obj = heapd_alloc(m, 1, 0);
    if (!obj || heapd_root_push(m, obj) != 0)
        _exit(KID_SETUP);
    switch (call) {
    case CALL_ALLOC:
        mark_evicted(m);
        heapd_alloc(m, 1, 0);
        break;
    case CALL_SAFEPOINT:
        mark_evicted(m);
        heapd_safepoint(m);
        break;
    case CALL_ROOT_PUSH:
        mark_evicted(m);
        heapd_root_push(m, obj);
        break;
    case CALL_WRITE_MARKING:
        /* OBJ was allocated before the cycle: its first write while
         * marking takes the barrier's slow path */
        kid_wait_marking(m);
        mark_evicted(m);
        heapd_write(m, obj, &obj[0], NULL);
        break;
    case CALL_BLOCKING_LEAVE:
        heapd_blocking_enter(m);
        mark_evicted(m);
        heapd_blocking_leave(m);
        break;
    case CALL_NONE_AGENT: {
        heapd_blocking_enter(m);
        mark_evicted(m);
        /* tell the test, then wait: the test kills heapd, and the pipe
         * ends with the test's process if it fails */
        char ch = 'm';
        if (write(up, &ch, 1) != 1 || read(down, &ch, 1) < 0)
            _exit(KID_PIPE);
        break;
    }
    }
    _exit(KID_RETURNED);
}

/* Fork a kid that makes CALL on an evicted slot, its stderr into *ERR_FD,
 * its reports into *UP_FD and the test's end of a pipe it waits on into
 * *DOWN_FD (both NULL, or both set). */
static pid_t spawn_evicted(enum evicted_call call, int *err_fd, int *up_fd,
                           int *down_fd)
{
    int err[2], up[2], down[2];
    ck_assert_int_eq(pipe(err), 0);
    ck_assert_int_eq(pipe(up), 0);
    ck_assert_int_eq(pipe(down), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core); /* it is to abort */
        close(err[0]);
        close(up[0]);
        close(down[1]);
        if (dup2(err[1], STDERR_FILENO) < 0)
            _exit(KID_PIPE);
        close(err[1]);
        kid_evicted(call, up[1], down[0]);
    }
    close(err[1]);
    close(up[1]);
    close(down[0]);
    *err_fd = err[0];
    if (up_fd) {
        *up_fd = up[0];
        *down_fd = down[1];
    } else {
        close(up[0]);
        close(down[1]);
    }
    return kid;
}

/* Everything the kid wrote on stderr, until it closes it (bounded). */
static void read_all(int fd, char *buf, size_t len)
{
    size_t n = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ck_assert_msg(poll(&p, 1, HARNESS_WAIT_MS) == 1,
                      "the kid's stderr stayed open %d ms (it hangs?); "
                      "so far: %.*s", HARNESS_WAIT_MS, (int)n, buf);
        ssize_t r = read(fd, buf + n, len - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        ck_assert_msg(r >= 0, "reading the kid's stderr: %s",
                      strerror(errno));
        if (r == 0 || (n += (size_t)r) == len - 1)
            break;
    }
    buf[n] = '\0';
    close(fd);
}

/* KID, whose stderr is ERR_FD, dies of SIGABRT with the message. */
static void expect_aborted(pid_t kid, int err_fd, const char *what)
{
    char err[4096];
    read_all(err_fd, err, sizeof err);
    int st = harness_wait_pid(kid, HARNESS_WAIT_MS);
    ck_assert_msg(st != -1, "%s: the kid did not end within %d ms",
                  what, HARNESS_WAIT_MS);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
                  "%s: the kid was to abort, but %s (exit %d); stderr: %s",
                  what, kid_exit_name(st),
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1, err);
    static const char *const want[] = {
        "libheapd: ", "evicted", "'default'", "12345 ms",
        "has not acknowledged the snapshot's stop", "heapd_blocking_enter",
        "heapd_safepoint",
        "stall_timeout",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(err, want[i]) != NULL,
                      "%s: the message does not say \"%s\": %s", what,
                      want[i], err);
}

static void run_evicted(enum evicted_call call, const char *what)
{
    int err;
    harness_start(&D, harness_default_config("@SOCK@", NULL));
    pid_t kid = spawn_evicted(call, &err, NULL, NULL);
    expect_aborted(kid, err, what);
    /* the kid's end was a crash: the daemon serves on */
    harness_still_serving(D.sock);
    harness_stop(&D);
}

START_TEST(alloc_aborts)
{
    run_evicted(CALL_ALLOC, "heapd_alloc");
}
END_TEST

START_TEST(safepoint_aborts)
{
    run_evicted(CALL_SAFEPOINT, "heapd_safepoint");
}
END_TEST

START_TEST(root_push_aborts)
{
    run_evicted(CALL_ROOT_PUSH, "heapd_root_push");
}
END_TEST

START_TEST(write_while_marking_aborts)
{
    run_evicted(CALL_WRITE_MARKING, "heapd_write while marking");
}
END_TEST

START_TEST(blocking_leave_aborts)
{
    run_evicted(CALL_BLOCKING_LEAVE, "heapd_blocking_leave");
}
END_TEST

/* The kid's main thread makes no call; its agent thread sees the
 * connection end (heapd is killed) and finds the mark. */
START_TEST(agent_aborts_at_close)
{
    int err, up, down;
    harness_start(&D, harness_default_config("@SOCK@", NULL));
    pid_t kid = spawn_evicted(CALL_NONE_AGENT, &err, &up, &down);
    struct pollfd p = {.fd = up, .events = POLLIN};
    char ch = 0;
    ck_assert_msg(poll(&p, 1, HARNESS_WAIT_MS) == 1,
                  "the kid did not report its slot marked within %d ms",
                  HARNESS_WAIT_MS);
    ck_assert_msg(read(up, &ch, 1) == 1 && ch == 'm',
                  "the kid ended before it reported its slot marked");
    close(up);
    ck_assert_int_eq(kill(D.pid, SIGKILL), 0);
    ck_assert_msg(harness_wait_pid(D.pid, HARNESS_WAIT_MS) != -1,
                  "the SIGKILLed heapd did not exit");
    expect_aborted(kid, err, "the agent thread at the connection's end");
    close(down);
    D.dir_kept = true; /* the store's fds and the private dir go */
    harness_forget_store(&D);
}
END_TEST

/* A slot that is not marked: every call works (the checks read the mark,
 * nothing else). */
START_TEST(unmarked_slot_works)
{
    harness_start(&D, harness_default_config("@SOCK@", NULL));
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        heapd_client *c;
        heapd_mutator *m;
        kid_attach(&c, &m);
        void **obj = heapd_alloc(m, 1, 0);
        if (!obj || heapd_root_push(m, obj) != 0)
            _exit(KID_UNMARKED);
        kid_wait_marking(m);
        heapd_write(m, obj, &obj[0], heapd_alloc(m, 0, 8));
        heapd_safepoint(m);
        heapd_blocking_enter(m);
        heapd_blocking_leave(m);
        if (heapd_root_get(m, 0) != obj || heapd_collect(m, HEAPD_COLLECT_WAIT))
            _exit(KID_UNMARKED);
        heapd_root_pop(m, 1);
        heapd_detach(m);
        heapd_disconnect(c);
        _exit(KID_OK);
    }
    int st = harness_wait_pid(kid, HARNESS_WAIT_MS);
    ck_assert_msg(st != -1, "the kid did not end within %d ms",
                  HARNESS_WAIT_MS);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == KID_OK,
                  "the kid with a slot not marked: %s (exit %d)",
                  kid_exit_name(st), WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    harness_stop(&D);
}
END_TEST

static Suite *evicted_suite(void)
{
    Suite *s = suite_create("evicted");
    TCase *t = tcase_create("evicted client");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, alloc_aborts);
    tcase_add_test(t, safepoint_aborts);
    tcase_add_test(t, root_push_aborts);
    tcase_add_test(t, write_while_marking_aborts);
    tcase_add_test(t, blocking_leave_aborts);
    tcase_add_test(t, agent_aborts_at_close);
    tcase_add_test(t, unmarked_slot_works);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(evicted_suite());
}
