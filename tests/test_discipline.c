/* The client's GC rule, Note [Client GC discipline] in heapd.h, as a user
 * relies on it from heapd.h alone, against a real heapd with the verifier
 * on: values popped from the root stack stay valid until the next
 * safepoint, heapd_global_once's INIT may return a fresh object, a client
 * does not survive fork(), checked mode catches a stale reference, and a
 * mutator that never reaches a safepoint is named in the log. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "check_main.h"

static struct daemon_proc D;

#define TABLE_SLOTS 256      /* a wide object: its barrier logs only what a
                                write overwrites (Note [Wide objects]) */
#define CHAIN 6              /* nodes built under a temporary root */
/* Collections the pattern runs through.  Under a sanitizer every cycle
 * costs ten times as much (a TSan run of 1000 took over 8 minutes, most of
 * it sweeping and poisoning what the workers allocated meanwhile); there
 * the run looks for races and memory errors, which 200 cycles exercise as
 * well, and the plain build counts the 1000. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define CYCLES 200
#else
#define CYCLES 1000
#endif
#define NODE_MAGIC 0x6e6f6465u
#define FRESH_NAMES 60       /* globals each worker initialises */

struct node {
    void *next;              /* the one reference field */
    uint32_t magic, index;
    uint64_t check;          /* index ^ address: a reused block shows */
};

static void start(void)
{
    harness_start(&D, harness_default_config("@SOCK@", "verify = true\n"));
}

/* The user's pattern: a chain built under a temporary root, the root
 * popped, the head returned in a C local only. */
static struct node *build_chain(heapd_mutator *m, uint32_t index)
{
    size_t s = heapd_root_push(m, NULL);
    struct node *head = NULL;
    if (s == (size_t)-1)
        return NULL;
    for (int k = 0; k < CHAIN; k++) {
        struct node *n = heapd_alloc(m, 1, sizeof *n - sizeof(void *));
        if (!n) {
            head = NULL;
            break;
        }
        n->magic = NODE_MAGIC;
        n->index = index;
        n->check = (uint64_t)index ^ (uint64_t)(uintptr_t)n;
        heapd_write(m, n, &n->next, head);
        head = n;
        heapd_root_set(m, s, head);
    }
    heapd_root_pop(m, 1); /* a safepoint: HEAD must outlive it */
    return head;
}

/* 0 if the chain from HEAD is whole, else what is wrong. */
static const char *chain_broken(const struct node *head)
{
    int len = 0;
    if (!head)
        return NULL; /* a slot not filled yet */
    for (const struct node *n = head; n; n = n->next, len++) {
        if (n->magic != NODE_MAGIC ||
            n->check != ((uint64_t)n->index ^ (uint64_t)(uintptr_t)n))
            return "a node of a chain was freed or overwritten";
        if (heapd_nrefs(n) != 1)
            return "a node's header changed";
    }
    return len == CHAIN ? NULL : "a chain has the wrong length";
}

static void *init_table(heapd_mutator *m, void *arg)
{
    (void)arg;
    return heapd_alloc(m, TABLE_SLOTS, 0);
}

/* INIT returns an object it made after its last safepoint, the chain's
 * root popped on the way. */
static void *init_fresh(heapd_mutator *m, void *arg)
{
    return build_chain(m, (uint32_t)(uintptr_t)arg);
}

static void child_fail(const char *what)
{
    fprintf(stderr, "discipline worker %d: %s\n", (int)getpid(), what);
    _exit(1);
}

/* A worker: the pattern over and over into a shared table found by a
 * global, with reads, overwrites and CASes, until STOP_FD is readable;
 * every FRESH_NAMES-th round also a heapd_global_once whose INIT returns a
 * fresh chain. */
static void worker(int id, int stop_fd)
{
    heapd_connect_opts o = {.socket_path = D.sock};
    heapd_client *c;
    heapd_mutator *m;
    if (heapd_connect(&c, &o) < 0 || heapd_attach(c, &m) < 0)
        child_fail(heapd_last_error());
    void **table = heapd_global_once(m, "table", init_table, NULL);
    if (!table)
        child_fail("no table");
    if (heapd_root_push(m, table) == (size_t)-1)
        child_fail("push");
    unsigned fresh = 0;
    for (uint32_t round = 0;; round++) {
        if (round % 64 == 0) {
            struct pollfd p = {.fd = stop_fd, .events = POLLIN};
            if (poll(&p, 1, 0) == 1)
                break;
        }
        uint32_t i = (round * 7 + (uint32_t)id * 131) % TABLE_SLOTS;
        struct node *head = build_chain(m, i);
        if (!head)
            child_fail("allocation failed");
        /* HEAD is in a C local only: valid until the next safepoint */
        if (round % 3 == 0) {
            void *old = __atomic_load_n(&table[i], __ATOMIC_ACQUIRE);
            heapd_cas(m, table, &table[i], old, head);
        } else {
            heapd_write(m, table, &table[i], head);
        }
        const struct node *other =
            __atomic_load_n(&table[(i + 97) % TABLE_SLOTS], __ATOMIC_ACQUIRE);
        const char *why = chain_broken(other);
        if (why)
            child_fail(why);
        if (round % 97 == 0 && fresh < FRESH_NAMES) {
            char name[32];
            snprintf(name, sizeof name, "fresh-%d-%u", id, fresh++);
            struct node *f = heapd_global_once(m, name, init_fresh,
                                               (void *)(uintptr_t)fresh);
            if (!f)
                child_fail("heapd_global_once failed");
            if ((why = chain_broken(f)))
                child_fail(why);
        }
    }
    /* every chain in the table, and every fresh global, whole */
    for (unsigned i = 0; i < TABLE_SLOTS; i++) {
        const char *why = chain_broken(table[i]);
        if (why)
            child_fail(why);
    }
    for (unsigned k = 0; k < fresh; k++) {
        char name[32];
        snprintf(name, sizeof name, "fresh-%d-%u", id, k);
        const char *why = chain_broken(heapd_global_get(m, name));
        if (why)
            child_fail(why);
    }
    heapd_detach(m);
    heapd_disconnect(c);
    _exit(0);
}

/* NWORKERS processes run the pattern while this process asks for CYCLES
 * collections; the verifier must find nothing. */
static void run_pattern(int nworkers)
{
    int pipefd[2];
    pid_t kids[4];
    start();
    ck_assert_int_eq(pipe(pipefd), 0);
    for (int w = 0; w < nworkers; w++) {
        kids[w] = fork();
        ck_assert_int_ge(kids[w], 0);
        if (kids[w] == 0) {
            close(pipefd[1]);
            worker(w, pipefd[0]);
        }
    }
    close(pipefd[0]);
    heapd_client *ctl = harness_control(&D);
    uint64_t start_cycles = harness_stats(ctl).cycles_completed;
    for (;;) {
        heapd_stats_t st = harness_stats(ctl);
        ck_assert_uint_eq(st.verify_failures, 0);
        if (st.cycles_completed - start_cycles >= CYCLES)
            break;
        /* a kid that died already fails the test now, not at the end */
        for (int w = 0; w < nworkers; w++) {
            int status;
            if (waitpid(kids[w], &status, WNOHANG) == kids[w])
                ck_abort_msg("worker %d exited early (status 0x%x) after "
                             "%llu cycles", w, status,
                             (unsigned long long)(st.cycles_completed -
                                                  start_cycles));
        }
        ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    }
    close(pipefd[1]); /* stop */
    for (int w = 0; w < nworkers; w++)
        harness_wait_ok(kids[w], "a discipline worker");
    heapd_stats_t st = harness_stats(ctl);
    ck_assert_uint_ge(st.cycles_completed - start_cycles, CYCLES);
    ck_assert_uint_eq(st.verify_failures, 0);
    heapd_disconnect(ctl);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}

START_TEST(popped_values_survive_two_processes)
{
    run_pattern(2);
}
END_TEST

START_TEST(popped_values_survive_four_processes)
{
    run_pattern(4);
}
END_TEST

/* ---- fork ---- */

START_TEST(fork_child_fails_fast)
{
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    void *kept = heapd_alloc(m, 0, 8);
    ck_assert_ptr_nonnull(kept);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        heapd_mutator *m2;
        heapd_stats_t st;
        if (heapd_attach(c, &m2) != HEAPD_EFORKED)
            child_fail("heapd_attach in a child did not fail with "
                       "HEAPD_EFORKED");
        if (!strstr(heapd_last_error(), "heapd_connect in the child"))
            child_fail("the error does not say what to do");
        if (heapd_stats(c, &st) != HEAPD_EFORKED)
            child_fail("heapd_stats in a child did not fail");
        errno = 0;
        if (heapd_alloc(m, 0, 8) != NULL || errno != EBADF)
            child_fail("heapd_alloc with the parent's mutator did not fail "
                       "with EBADF");
        heapd_disconnect(c); /* frees the child's copy only */
#ifndef __SANITIZE_THREAD__
        /* and the child may connect for itself (not under TSan, which
         * refuses new threads in a child of a process that had threads:
         * "dup thread with used id") */
        heapd_client *own;
        heapd_connect_opts o = {.socket_path = D.sock};
        if (heapd_connect(&own, &o) < 0 || heapd_attach(own, &m2) < 0)
            child_fail(heapd_last_error());
        if (!heapd_alloc(m2, 1, 8))
            child_fail("the child's own client cannot allocate");
        heapd_detach(m2);
        heapd_disconnect(own);
#endif
        _exit(0);
    }
    harness_wait_ok(kid, "the forked child");
    /* the parent's client is untouched */
    ck_assert_ptr_nonnull(heapd_alloc(m, 2, 16));
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(c, &st), 0);
    ck_assert_uint_ge(st.clients_connected, 1);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* A young mutator's allocations in a child run in the caller's code
 * (Note [Inline allocation fast path] in heapd.h) and must not take the
 * parent's blocks: the child's heapd_alloc fails as the function's does. */
START_TEST(fork_child_of_a_young_mutator_fails_fast)
{
    heapd_client *c;
    heapd_mutator *m, *y;
    start();
    harness_attach_young(&D, &c, &m, &y);
    /* a free run in the class the child asks for */
    void *kept = heapd_alloc(y, 0, 8);
    ck_assert_ptr_nonnull(kept);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        errno = 0;
        if (heapd_alloc(y, 0, 8) != NULL || errno != EBADF)
            child_fail("heapd_alloc with the parent's young mutator did not "
                       "fail with EBADF");
        _exit(0);
    }
    harness_wait_ok(kid, "the forked child");
    /* the parent's next block is the one after KEPT: the child took none */
    char *next = heapd_alloc(y, 0, 8);
    ck_assert_ptr_eq(next, (char *)kept + layout_class_size[layout_size_class(
                                              (uint32_t)layout_object_size(0, 8))]);
    harness_detach_young(c, m, y);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- checked mode ---- */

enum misuse { STALE_WRITE, STALE_ACCESSOR, CONTROL_AREA, INTERIOR };

/* A checked child that makes MISUSE after a correct warm-up; returns its
 * wait status and its stderr in ERR. */
static int run_checked(enum misuse what, char *err, size_t errlen)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        heapd_connect_opts o = {.socket_path = D.sock,
                                .flags = HEAPD_CONNECT_CHECKED};
        heapd_client *c;
        heapd_mutator *m;
        /* precise: STALE stands for a pointer kept where no scan looks
         * (malloc'd memory, a file); a local would keep its object, and
         * so may a stale copy on the stack (Note [C locals are roots]) */
        heapd_mutator_opts mo = {.flags = HEAPD_MUTATOR_PRECISE};
        if (heapd_connect(&c, &o) < 0 || heapd_attach_opts(c, &mo, &m) < 0)
            child_fail(heapd_last_error());
        void **root = heapd_alloc(m, 2, 0);
        heapd_root_push(m, root);
        /* correct use passes every check */
        void *ok = heapd_alloc(m, 1, 16);
        heapd_write(m, root, &root[0], ok);
        if (heapd_nrefs(ok) != 1 || heapd_nbytes(ok) != 16)
            child_fail("accessors");
        void *stale = heapd_alloc(m, 1, 16); /* never rooted */
        /* two whole cycles: STALE's block is swept */
        heapd_collect(m, HEAPD_COLLECT_WAIT);
        heapd_collect(m, HEAPD_COLLECT_WAIT);
        void *base = heapd_heap_base(c);
        switch (what) {
        case STALE_WRITE:
            heapd_write(m, root, &root[1], stale);
            break;
        case STALE_ACCESSOR:
            (void)heapd_nbytes(stale);
            break;
        case CONTROL_AREA:
            heapd_root_push(m, (char *)base + 4096);
            break;
        case INTERIOR:
            heapd_cas(m, root, &root[1], NULL, (char *)ok + 8);
            break;
        }
        _exit(0); /* the check did not fire */
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < errlen && (r = read(fds[0], err + n, errlen - 1 - n)) > 0)
        n += (size_t)r;
    err[n] = '\0';
    close(fds[0]);
    int status = harness_wait_pid(kid, HARNESS_WAIT_MS);
    return status;
}

START_TEST(checked_mode_catches_misuse)
{
    static const struct {
        enum misuse what;
        const char *call, *why;
    } cases[] = {
        {STALE_WRITE, "heapd_write: VAL", "a collection freed it"},
        {STALE_ACCESSOR, "heapd_nbytes: OBJ", "a collection freed it"},
        {CONTROL_AREA, "heapd_root_push: REF", "control area"},
        {INTERIOR, "heapd_cas: DESIRED", "interior pointer"},
    };
    char err[4096];
    start();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int status = run_checked(cases[i].what, err, sizeof err);
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
                      "case %zu: the checked child was not aborted (status "
                      "0x%x): %s", i, status, err);
        ck_assert_msg(strstr(err, cases[i].call) && strstr(err, cases[i].why),
                      "case %zu: the message does not name '%s' and '%s': %s",
                      i, cases[i].call, cases[i].why, err);
    }
    /* the aborted clients cost nobody anything */
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- a mutator that never reaches a safepoint ---- */

struct log_wait {
    const char *pid_text;
};

static bool log_names_kid(void *arg, char *seen, size_t seen_len)
{
    const struct log_wait *w = arg;
    bool pid = harness_log_contains(&D, w->pid_text);
    bool advice = harness_log_contains(&D, "heapd_safepoint");
    snprintf(seen, seen_len, "'%s' %s, 'heapd_safepoint' %s", w->pid_text,
             pid ? "logged" : "not logged", advice ? "logged" : "not logged");
    return pid && advice;
}

START_TEST(stuck_mutator_is_named)
{
    char want[64];
    harness_start_logged(&D, harness_default_config("@SOCK@", "verify = true\n"),
                         "heapd.log");
    pid_t kid = harness_fork_mutator(&D, NULL, NULL);
    heapd_client *ctl = harness_control(&D);
    ck_assert_int_eq(heapd_request_collect(ctl, 0), 0);
    /* the stop waits for the kid and says so once a second */
    snprintf(want, sizeof want, "pid %d,", (int)kid);
    struct log_wait w = {want};
    harness_wait_until(log_names_kid, &w,
                       "heapd's log to name the stuck process and say "
                       "heapd_safepoint");
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    /* with the kid gone the collection completes */
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

/* ---- errors ---- */

START_TEST(alloc_after_daemon_gone_is_epipe)
{
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    harness_stop_clean(&D);
    /* large objects ask the daemon every time */
    void *p;
    int tries = 0;
    errno = 0;
    while ((p = heapd_alloc(m, 0, 1 << 20)) != NULL && tries++ < 1000)
        ;
    ck_assert_ptr_null(p);
    ck_assert_msg(errno == EPIPE, "errno is %d (%s), not EPIPE", errno,
                  strerror(errno));
    heapd_detach(m);
    heapd_disconnect(c);
}
END_TEST

/* A young mutator's small objects come from the inline path; once the
 * client knows heapd is gone (a call failed), the next one fails too
 * (Note [The open gate] in client/agent.c). */
START_TEST(young_alloc_after_daemon_gone_is_epipe)
{
    heapd_client *c;
    heapd_mutator *m, *y;
    heapd_stats_t st;
    start();
    harness_attach_young(&D, &c, &m, &y);
    /* a free run in the class asked for below */
    ck_assert_ptr_nonnull(heapd_alloc(y, 0, 8));
    /* a crash: a clean stop would also ask the mutators to stop */
    harness_kill(&D);
    ck_assert_int_lt(heapd_stats(c, &st), 0); /* the agent has closed */
    errno = 0;
    void *p = heapd_alloc(y, 0, 8);
    ck_assert_msg(p == NULL && errno == EPIPE,
                  "heapd_alloc after heapd closed the connection: %p, "
                  "errno %d (%s), not NULL and EPIPE", p, errno,
                  strerror(errno));
    harness_detach_young(c, m, y);
    harness_forget_store(&D);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("discipline");
    TCase *t = tcase_create("pattern");
    /* CYCLES collections take about 20 s in a plain build: a bound on a
     * hang, not on speed */
    tcase_set_timeout(t, 900);
    tcase_add_test(t, popped_values_survive_two_processes);
    tcase_add_test(t, popped_values_survive_four_processes);
    suite_add_tcase(s, t);
    t = tcase_create("misuse");
    tcase_add_test(t, fork_child_fails_fast);
    tcase_add_test(t, fork_child_of_a_young_mutator_fails_fast);
    tcase_add_test(t, checked_mode_catches_misuse);
    tcase_add_test(t, stuck_mutator_is_named);
    tcase_add_test(t, alloc_after_daemon_gone_is_epipe);
    tcase_add_test(t, young_alloc_after_daemon_gone_is_epipe);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
