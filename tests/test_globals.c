/* Named global roots and once-initialisation across processes, against a
 * real heapd with the verifier on (Note [Global roots]). */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "collections.h"
#include "heapd.h"
#include "heapd_collections.h"
#include "layout.h"
#include "wire.h"
#include "check_main.h"

static struct daemon_proc D;

static void start(void)
{
    harness_start(&D, harness_default_config("@SOCK@", "verify = true\n"));
}

/* An object with one reference field and a value with its check. */
static void *cell(heapd_mutator *m, long v)
{
    void **o = heapd_alloc(m, 1, 2 * sizeof(long));
    if (o) {
        long *b = heapd_bytes(o);
        b[0] = v;
        b[1] = ~v;
    }
    return o;
}

static long cell_value(void *o)
{
    long *b = heapd_bytes(o);
    return b[1] == ~b[0] ? b[0] : -1;
}

START_TEST(set_get_and_survive_cycles)
{
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    ck_assert_ptr_null(heapd_global_get(m, "nothing"));
    void *a = cell(m, 11);
    ck_assert_int_eq(heapd_global_set(m, "a", a), 0);
    ck_assert_ptr_eq(heapd_global_get(m, "a"), a);
    /* a is reachable only from the global now */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    ck_assert_int_eq(cell_value(heapd_global_get(m, "a")), 11);
    void *b = cell(m, 22);
    ck_assert_int_eq(heapd_global_set(m, "a", b), 0);
    ck_assert_int_eq(heapd_global_set(m, "a-null", NULL), 0);
    ck_assert_ptr_null(heapd_global_get(m, "a-null"));
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    ck_assert_int_eq(cell_value(heapd_global_get(m, "a")), 22);

    char longname[80];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ck_assert_int_eq(heapd_global_set(m, longname, b), -ENAMETOOLONG);
    ck_assert_msg(strstr(heapd_last_error(), "the limit is 63"), "%s",
                  heapd_last_error());
    longname[64] = '\0'; /* 64 bytes: one too many */
    ck_assert_int_eq(heapd_global_set(m, longname, b), -ENAMETOOLONG);
    longname[63] = '\0'; /* 63: the longest name */
    ck_assert_int_eq(heapd_global_set(m, longname, b), 0);
    ck_assert_ptr_eq(heapd_global_get(m, longname), b);
    ck_assert_int_eq(heapd_global_set(m, "", b), -EINVAL);
    errno = 0;
    ck_assert_ptr_null(heapd_global_once(m, "", NULL, NULL));
    ck_assert_int_eq(errno, EINVAL);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(table_full)
{
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    char name[32];
    for (int i = 0; i < 256; i++) {
        snprintf(name, sizeof name, "g%d", i);
        ck_assert_int_eq(heapd_global_set(m, name, cell(m, i)), 0);
    }
    ck_assert_int_eq(heapd_global_set(m, "one-too-many", NULL), -ENOMEM);
    ck_assert_msg(strstr(heapd_last_error(), "all 256 global roots in use"),
                  "%s", heapd_last_error());
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    for (int i = 0; i < 256; i++) {
        snprintf(name, sizeof name, "g%d", i);
        ck_assert_int_eq(cell_value(heapd_global_get(m, name)), i);
    }
    /* existing names can still be set */
    ck_assert_int_eq(heapd_global_set(m, "g7", NULL), 0);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- heapd_global_once across processes ---- */

static int init_count_fd = -1;

static void *init_counted(heapd_mutator *m, void *arg)
{
    (void)arg;
    if (write(init_count_fd, "i", 1) != 1)
        return NULL;
    /* init may allocate and collect */
    void *o = cell(m, 4242);
    size_t r = heapd_root_push(m, o);
    if (heapd_collect(m, HEAPD_COLLECT_WAIT) < 0)
        return NULL;
    o = heapd_root_get(m, r);
    heapd_root_pop(m, 1);
    return o;
}

START_TEST(once_race_runs_init_once)
{
    enum { N = 4 };
    int go[2], count[2], res[2];
    start();
    ck_assert_int_eq(pipe(go), 0);
    ck_assert_int_eq(pipe(count), 0);
    ck_assert_int_eq(pipe(res), 0);
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        ck_assert_int_ge(kids[i], 0);
        if (kids[i] == 0) {
            heapd_client *c;
            heapd_mutator *m;
            harness_attach(&D, &c, &m);
            init_count_fd = count[1];
            char x;
            if (read(go[0], &x, 1) != 1)
                _exit(2);
            void *o = heapd_global_once(m, "cache", init_counted, NULL);
            if (!o || cell_value(o) != 4242)
                _exit(3);
            uintptr_t a = (uintptr_t)o;
            if (write(res[1], &a, sizeof a) != sizeof a)
                _exit(4);
            heapd_detach(m);
            heapd_disconnect(c);
            _exit(0);
        }
    }
    close(count[1]);
    close(res[1]);
    ck_assert_int_eq(write(go[1], "gggg", N), N); /* all start together */
    for (int i = 0; i < N; i++)
        harness_wait_ok(kids[i], "once caller");
    char buf[16];
    ck_assert_int_eq(read(count[0], buf, sizeof buf), 1); /* init ran once */
    uintptr_t first = 0, a;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(read(res[0], &a, sizeof a), sizeof a);
        if (i == 0)
            first = a;
        ck_assert_msg(a == first, "process %d got another object", i);
    }
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

static int hang_fd = -1;

static void *init_hangs(heapd_mutator *m, void *arg)
{
    (void)arg;
    heapd_blocking_enter(m); /* never holds up a collection while it hangs */
    if (write(hang_fd, "h", 1) != 1)
        return NULL;
    for (;;)
        pause();
}

static void *init_fine(heapd_mutator *m, void *arg)
{
    (void)arg;
    return cell(m, 99);
}

START_TEST(once_initialiser_killed)
{
    int hang[2], waiting[2];
    start();
    ck_assert_int_eq(pipe(hang), 0);
    ck_assert_int_eq(pipe(waiting), 0);
    pid_t a = fork();
    ck_assert_int_ge(a, 0);
    if (a == 0) {
        heapd_client *c;
        heapd_mutator *m;
        harness_attach(&D, &c, &m);
        hang_fd = hang[1];
        heapd_global_once(m, "config", init_hangs, NULL);
        _exit(5); /* never returns */
    }
    close(hang[1]);
    char x;
    ck_assert_int_eq(read(hang[0], &x, 1), 1); /* A is inside init */

    /* heapctl's view: initialising, owned by a client */
    heapd_connect_opts o = {.socket_path = D.sock,
                            .flags = HEAPD_CONNECT_CONTROL};
    heapd_client *cc;
    ck_assert_int_eq(heapd_connect(&cc, &o), 0);
    heapd_global_info gi[4];
    size_t n;
    ck_assert_int_eq(heapd_globals(cc, gi, 4, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(gi[0].name, "config");
    ck_assert_int_eq(gi[0].state, 2);
    ck_assert_uint_ne(gi[0].owner, 0);
    ck_assert_uint_eq(gi[0].target_bytes, 24); /* the blackhole */

    pid_t b = fork();
    ck_assert_int_ge(b, 0);
    if (b == 0) {
        heapd_client *c;
        heapd_mutator *m;
        harness_attach(&D, &c, &m);
        if (write(waiting[1], "w", 1) != 1)
            _exit(6);
        void *v = heapd_global_once(m, "config", init_fine, NULL);
        _exit(v && cell_value(v) == 99 ? 0 : 7);
    }
    close(waiting[1]);
    ck_assert_int_eq(read(waiting[0], &x, 1), 1);
    /* B is in (or about to be in) heapd_global_once; A dies mid-init */
    kill(a, SIGKILL);
    harness_wait_pid(a, HARNESS_WAIT_MS);
    harness_wait_ok(b, "the caller after the initialiser died");
    ck_assert_int_eq(heapd_globals(cc, gi, 4, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(gi[0].state, 1);
    ck_assert_uint_eq(gi[0].target_bytes, 32);
    heapd_disconnect(cc);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

static void *init_null(heapd_mutator *m, void *arg)
{
    (void)m;
    (void)arg;
    errno = EIO;
    return NULL;
}

START_TEST(once_init_fails_then_retries)
{
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    errno = 0;
    ck_assert_ptr_null(heapd_global_once(m, "flaky", init_null, NULL));
    ck_assert_int_eq(errno, EIO);
    void *v = heapd_global_once(m, "flaky", init_fine, NULL);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(cell_value(v), 99);
    ck_assert_ptr_eq(heapd_global_once(m, "flaky", init_null, NULL), v);
    ck_assert_ptr_eq(heapd_global_get(m, "flaky"), v);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- sharing through globals while others overwrite them ---- */

static bool stopped(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* Publish fresh 100-cell lists under "g", again and again; with DELETING
 * also delete each one after a safepoint, so that the reader may hold the
 * list a delete takes out of "g". */
static int writer(int stop_fd, bool deleting)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    for (long round = 1; !stopped(stop_fd); round++) {
        size_t r = heapd_root_push(m, NULL);
        for (long i = 0; i < 100; i++) {
            void **n = cell(m, round * 1000 + i);
            if (!n)
                return 1;
            heapd_write(m, n, &n[0], heapd_root_get(m, r));
            heapd_root_set(m, r, n);
        }
        if (heapd_global_set(m, "g", heapd_root_get(m, r)) < 0)
            return 2;
        heapd_root_pop(m, 1);
        if (!deleting)
            continue;
        /* the list is only in "g" now; the reader may take it */
        heapd_safepoint(m);
        if (heapd_global_delete(m, "g") < 0)
            return 6;
    }
    heapd_detach(m);
    heapd_disconnect(c);
    return 0;
}

/* Read whatever "g" holds and check the whole list, between safepoints;
 * a byte on SEEN_FD once it has checked one. */
static int reader(int stop_fd, int seen_fd)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    long seen = 0;
    while (!stopped(stop_fd)) {
        void **n = heapd_global_get(m, "g");
        if (n) {
            long first = cell_value(n), len = 0;
            if (first < 0)
                return 3;
            for (; n; n = n[0], len++)
                if (cell_value(n) != first - len)
                    return 4;
            if (len != 100)
                return 5;
            if (seen++ == 0 && write(seen_fd, "s", 1) != 1)
                return 7;
        }
        heapd_safepoint(m);
    }
    heapd_detach(m);
    heapd_disconnect(c);
    return 0; /* it checked at least one list: the test waited for that */
}

/* A writer (DELETING or not) and a reader of "g" in processes of their
 * own, while this process runs 120 collections. */
static void writer_and_reader_across_cycles(bool deleting)
{
    int stop[2], seen[2];
    start();
    ck_assert_int_eq(pipe(stop), 0);
    ck_assert_int_eq(pipe(seen), 0);
    pid_t w = fork();
    ck_assert_int_ge(w, 0);
    if (w == 0) {
        close(stop[1]); /* EOF on stop[0] is the signal to stop */
        _exit(writer(stop[0], deleting));
    }
    pid_t r = fork();
    ck_assert_int_ge(r, 0);
    if (r == 0) {
        close(stop[1]);
        _exit(reader(stop[0], seen[1]));
    }
    close(stop[0]);
    close(seen[1]);
    /* the cycles run while the reader reads (and it has something to
     * check, however late it started) */
    char x;
    struct pollfd p = {.fd = seen[0], .events = POLLIN};
    ck_assert_msg(poll(&p, 1, HARNESS_WAIT_MS) == 1 &&
                      read(seen[0], &x, 1) == 1,
                  "the reader checked no list under \"g\" within %d ms",
                  HARNESS_WAIT_MS);
    heapd_client *cc = harness_control(&D);
    for (int i = 0; i < 120; i++)
        ck_assert_int_eq(heapd_request_collect(cc, HEAPD_COLLECT_WAIT), 0);
    heapd_disconnect(cc);
    close(stop[1]);
    harness_wait_ok(w, deleting ? "deleting writer" : "writer");
    harness_wait_ok(r, "reader");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_ge(st.cycles_completed, 120);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}

START_TEST(globals_alive_across_cycles_under_overwrites)
{
    writer_and_reader_across_cycles(false);
}
END_TEST

/* Two processes that share nothing but a name see each other's writes. */
START_TEST(processes_share_a_structure_by_name)
{
    int to_b[2], to_a[2];
    start();
    ck_assert_int_eq(pipe(to_b), 0);
    ck_assert_int_eq(pipe(to_a), 0);
    pid_t a = fork();
    if (a == 0) {
        heapd_client *c;
        heapd_mutator *m;
        harness_attach(&D, &c, &m);
        void **board = heapd_alloc(m, 8, 0);
        heapd_global_set(m, "board", board);
        board = heapd_global_get(m, "board");
        heapd_write(m, board, &board[0], cell(m, 1));
        heapd_collect(m, HEAPD_COLLECT_WAIT);
        heapd_blocking_enter(m);
        char x;
        if (write(to_b[1], "a", 1) != 1 || read(to_a[0], &x, 1) != 1)
            _exit(10);
        heapd_blocking_leave(m);
        board = heapd_global_get(m, "board");
        if (!board[1] || cell_value(board[1]) != 2 ||
            cell_value(board[0]) != 1)
            _exit(11);
        heapd_detach(m);
        heapd_disconnect(c);
        _exit(0);
    }
    pid_t b = fork();
    if (b == 0) {
        char x;
        if (read(to_b[0], &x, 1) != 1)
            _exit(20);
        heapd_client *c;
        heapd_mutator *m;
        harness_attach(&D, &c, &m);
        void **board = heapd_global_get(m, "board");
        if (!board || cell_value(board[0]) != 1)
            _exit(21);
        heapd_write(m, board, &board[1], cell(m, 2));
        heapd_collect(m, HEAPD_COLLECT_WAIT);
        if (write(to_a[1], "b", 1) != 1)
            _exit(22);
        heapd_detach(m);
        heapd_disconnect(c);
        _exit(0);
    }
    harness_wait_ok(a, "process A");
    harness_wait_ok(b, "process B");
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- deleting globals ---- */

START_TEST(delete_then_get_and_create_again)
{
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    ck_assert_int_eq(heapd_global_set(m, "d", cell(m, 7)), 0);
    ck_assert_int_eq(heapd_global_delete(m, "d"), 0);
    ck_assert_ptr_null(heapd_global_get(m, "d"));
    ck_assert_int_eq(heapd_global_delete(m, "d"), -ENOENT);
    ck_assert_int_eq(heapd_global_delete(m, "never-was"), -ENOENT);
    ck_assert_msg(strstr(heapd_last_error(), "no global named 'never-was'"),
                  "%s", heapd_last_error());
    ck_assert_int_eq(heapd_global_delete(m, ""), -EINVAL);
    /* the name can be created again, by set and by once */
    ck_assert_int_eq(heapd_global_set(m, "d", cell(m, 8)), 0);
    ck_assert_int_eq(cell_value(heapd_global_get(m, "d")), 8);
    ck_assert_int_eq(heapd_global_delete(m, "d"), 0);
    void *v = heapd_global_once(m, "d", init_fine, NULL);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(cell_value(v), 99);
    ck_assert_ptr_eq(heapd_global_get(m, "d"), v);

    /* heapctl's view: gone */
    heapd_client *cc = harness_control(&D);
    heapd_global_info gi[4];
    size_t n;
    ck_assert_int_eq(heapd_global_delete(m, "d"), 0);
    ck_assert_int_eq(heapd_globals(cc, gi, 4, &n), 0);
    ck_assert_uint_eq(n, 0);
    heapd_disconnect(cc);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(delete_frees_an_entry_for_reuse)
{
    heapd_client *c;
    heapd_mutator *m;
    char name[32];
    start();
    harness_attach(&D, &c, &m);
    for (int i = 0; i < 256; i++) {
        snprintf(name, sizeof name, "g%d", i);
        ck_assert_int_eq(heapd_global_set(m, name, cell(m, i)), 0);
    }
    ck_assert_int_eq(heapd_global_set(m, "fresh", NULL), -ENOMEM);
    ck_assert_int_eq(heapd_global_delete(m, "g7"), 0);
    /* the emptied entry is reused once a collection has started (Note
     * [Global roots]) */
    ck_assert_int_eq(heapd_global_set(m, "fresh", NULL), -ENOMEM);
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    ck_assert_int_eq(heapd_global_set(m, "fresh", cell(m, 1000)), 0);
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    ck_assert_int_eq(cell_value(heapd_global_get(m, "fresh")), 1000);
    ck_assert_ptr_null(heapd_global_get(m, "g7"));
    for (int i = 0; i < 256; i++) {
        if (i == 7)
            continue;
        snprintf(name, sizeof name, "g%d", i);
        ck_assert_int_eq(cell_value(heapd_global_get(m, name)), i);
    }
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

static int delete_rc = 1;

static void *init_deletes_itself(heapd_mutator *m, void *arg)
{
    delete_rc = heapd_global_delete(m, arg);
    return cell(m, 3);
}

START_TEST(delete_while_initialising_is_busy)
{
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    void *v = heapd_global_once(m, "busy", init_deletes_itself, "busy");
    ck_assert_int_eq(delete_rc, -EBUSY);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(cell_value(heapd_global_get(m, "busy")), 3);
    /* once init has returned, it can be deleted */
    ck_assert_int_eq(heapd_global_delete(m, "busy"), 0);
    ck_assert_ptr_null(heapd_global_get(m, "busy"));
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

#define BIG (4u << 20) /* a large object: its bytes show in live_bytes */

START_TEST(deleted_value_lives_while_referenced)
{
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    long *kept = heapd_alloc(m, 0, BIG);
    ck_assert_ptr_nonnull(kept);
    kept[0] = 12345;
    size_t r = heapd_root_push(m, kept);
    ck_assert_int_eq(heapd_global_set(m, "kept", kept), 0);
    long *dropped = heapd_alloc(m, 0, BIG);
    ck_assert_ptr_nonnull(dropped);
    ck_assert_int_eq(heapd_global_set(m, "dropped", dropped), 0);
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_ge(st.live_bytes, 2 * BIG);

    ck_assert_int_eq(heapd_global_delete(m, "kept"), 0);
    ck_assert_int_eq(heapd_global_delete(m, "dropped"), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    st = harness_daemon_stats(&D);
    ck_assert_msg(st.live_bytes >= BIG && st.live_bytes < 2 * BIG,
                  "live_bytes %llu: the rooted object (%u bytes) lives and "
                  "the one only the deleted global held is collected",
                  (unsigned long long)st.live_bytes, BIG);
    kept = heapd_root_get(m, r);
    ck_assert_int_eq(kept[0], 12345);
    heapd_root_pop(m, 1);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(deletes_while_marking_lose_nothing)
{
    writer_and_reader_across_cycles(true);
}
END_TEST

/* ---- ending init is the initialiser's alone (Note [Global roots]) ---- */

static bool crashed_at_least(void *arg, char *seen, size_t len)
{
    const uint64_t *want = arg;
    heapd_stats_t st = harness_daemon_stats(&D);
    snprintf(seen, len, "clients_crashed %llu",
             (unsigned long long)st.clients_crashed);
    return st.clients_crashed >= *want;
}


static int finish_fd = -1;

/* Init that says so on hang_fd, then waits, blocked, until finish_fd has
 * a byte or EOF, and returns a cell of 4242. */
static void *init_waits(heapd_mutator *m, void *arg)
{
    char x;
    (void)arg;
    heapd_blocking_enter(m);
    if (write(hang_fd, "h", 1) != 1 || read(finish_fd, &x, 1) < 0)
        return NULL;
    heapd_blocking_leave(m);
    return cell(m, 4242);
}

/* Send REQ with SEQ on the raw connection FD and read the answer. */
static Heapd__Envelope *raw_call(int fd, Heapd__Envelope *req, uint64_t seq)
{
    req->seq = seq;
    harness_send_env(fd, req);
    Heapd__Envelope *rep = harness_read_env(fd, NULL);
    ck_assert_msg(rep, "heapd closed the connection instead of answering "
                  "request %llu", (unsigned long long)seq);
    ck_assert_uint_eq(rep->seq, seq);
    return rep;
}

/* GlobalInitDone(INDEX, OK) from FD, which is not the initialiser: an
 * Error that says so. */
static void forged_init_done(int fd, uint32_t index, bool ok, uint64_t seq)
{
    Heapd__GlobalInitDone gd = HEAPD__GLOBAL_INIT_DONE__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT;
    gd.index = index;
    gd.ok = ok;
    req.body_case = HEAPD__ENVELOPE__BODY_GLOBAL_INIT_DONE;
    req.global_init_done = &gd;
    Heapd__Envelope *rep = raw_call(fd, &req, seq);
    ck_assert_msg(rep->body_case == HEAPD__ENVELOPE__BODY_ERROR &&
                      rep->error->code ==
                          HEAPD__ERROR_CODE__ERROR_BAD_REQUEST &&
                      strstr(rep->error->message, "not being initialised"),
                  "a global_init_done(%u, %d) from a client that is not the "
                  "initialiser was not refused", index, ok);
    heapd__envelope__free_unpacked(rep, NULL);
}

static bool initialising(heapd_client *cc, uint64_t owner)
{
    heapd_global_info gi[4];
    size_t n = 0;
    ck_assert_int_eq(heapd_globals(cc, gi, 4, &n), 0);
    return n == 1 && strcmp(gi[0].name, "slow") == 0 && gi[0].state == 2 &&
           gi[0].owner == owner;
}

START_TEST(forged_init_done_is_refused)
{
    int hang[2], finish[2], waiting[2];
    char x;
    start();
    ck_assert_int_eq(pipe(hang), 0);
    ck_assert_int_eq(pipe(finish), 0);
    ck_assert_int_eq(pipe(waiting), 0);
    pid_t a = fork();
    ck_assert_int_ge(a, 0);
    if (a == 0) {
        heapd_client *c;
        heapd_mutator *m;
        close(finish[1]);
        harness_attach(&D, &c, &m);
        hang_fd = hang[1];
        finish_fd = finish[0];
        void *v = heapd_global_once(m, "slow", init_waits, NULL);
        _exit(v && cell_value(v) == 4242 ? 0 : 9);
    }
    close(hang[1]);
    close(finish[0]);
    ck_assert_int_eq(read(hang[0], &x, 1), 1); /* A is inside init */
    /* a waiter, which must get what A's init returns */
    pid_t w = fork();
    ck_assert_int_ge(w, 0);
    if (w == 0) {
        heapd_client *c;
        heapd_mutator *m;
        close(finish[1]);
        harness_attach(&D, &c, &m);
        if (write(waiting[1], "w", 1) != 1)
            _exit(6);
        void *v = heapd_global_once(m, "slow", init_fine, NULL);
        _exit(v && cell_value(v) == 4242 ? 0 : 7);
    }
    close(waiting[1]);
    ck_assert_int_eq(read(waiting[0], &x, 1), 1);
    heapd_client *cc = harness_control(&D);
    heapd_global_info gi[4];
    size_t n;
    ck_assert_int_eq(heapd_globals(cc, gi, 4, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(gi[0].state, 2);
    uint64_t owner_a = gi[0].owner;

    /* B, a mutator client, finds the entry's index and ends its init,
     * well or badly, and ends one that does not exist */
    int b = harness_raw_connect(D.sock), hfd = -1;
    harness_send_hello(b, "default", PROTOCOL_VERSION,
                       HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    Heapd__Envelope *e = harness_read_env(b, &hfd);
    ck_assert_msg(e && e->body_case == HEAPD__ENVELOPE__BODY_WELCOME,
                  "heapd did not welcome the raw mutator client");
    ck_assert_uint_ne(e->welcome->client_id, owner_a);
    heapd__envelope__free_unpacked(e, NULL);
    ck_assert_int_ge(hfd, 0);
    close(hfd);
    Heapd__GlobalClaim gc = HEAPD__GLOBAL_CLAIM__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT;
    gc.name = (char *)"slow";
    req.body_case = HEAPD__ENVELOPE__BODY_GLOBAL_CLAIM;
    req.global_claim = &gc;
    e = raw_call(b, &req, 1);
    ck_assert_msg(e->body_case == HEAPD__ENVELOPE__BODY_GLOBAL_CLAIMED &&
                      e->global_claimed->role ==
                          HEAPD__GLOBAL_ROLE__GLOBAL_WAIT,
                  "a claim of a global being initialised was not told to "
                  "wait");
    uint32_t index = e->global_claimed->index;
    heapd__envelope__free_unpacked(e, NULL);
    forged_init_done(b, index, true, 2);
    forged_init_done(b, index, false, 3);
    forged_init_done(b, LAYOUT_MAX_GLOBALS, true, 4);
    heapd_stats_t st = harness_stats(cc);
    ck_assert_uint_eq(st.globals_init_refused, 3);
    ck_assert_msg(initialising(cc, owner_a), "after forged ends of its "
                  "init, global 'slow' is no longer A's to initialise");

    /* B leaves without goodbye: it initialised nothing, nothing is
     * released */
    uint64_t crashed = st.clients_crashed + 1;
    close(b);
    harness_wait_until(crashed_at_least, &crashed,
                       "the daemon to take the forging client's leave");
    ck_assert_msg(initialising(cc, owner_a), "after a client that is not "
                  "its initialiser left, global 'slow' is no longer A's");

    /* A ends its init: the waiter and heapctl see A's value */
    close(finish[1]);
    harness_wait_ok(a, "the initialiser");
    harness_wait_ok(w, "the waiter (it must get the initialiser's value)");
    ck_assert_int_eq(heapd_globals(cc, gi, 4, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(gi[0].state, 1);
    ck_assert_uint_eq(gi[0].owner, 0);
    ck_assert_uint_eq(gi[0].target_bytes, 32);
    ck_assert_uint_eq(harness_stats(cc).globals_init_refused, 3);
    heapd_disconnect(cc);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* Note [Collections seen by the daemon]: each global's kind and size,
 * and heads forged by a client reported as numbers, nothing followed. */
START_TEST(heapctl_globals)
{
    char cmd[512], out[4096];
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    ck_assert_int_eq(heapd_global_set(m, "index", cell(m, 5)), 0);
    ck_assert_int_eq(heapd_global_set(m, "empty", NULL), 0);
    void *map = heapd_map_new(m, HEAPD_MAP_STR, 0);
    ck_assert_int_eq(heapd_global_set(m, "words", map), 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(heapd_map_add_str(m, heapd_global_get(m, "words"),
                                           "abc" + i, 1, 1, NULL), 0);
    ck_assert_int_eq(heapd_global_set(m, "jobs", heapd_queue_new(m)), 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(heapd_queue_push(m, heapd_global_get(m, "jobs"),
                                          heapd_str_new(m, "job", 3)), 0);
    heapd_lease lease; /* one of the three leased: 2 queued, 1 lease */
    ck_assert_ptr_nonnull(heapd_queue_pop_lease(m, heapd_global_get(m, "jobs"),
                                                0, &lease));
    ck_assert_int_eq(heapd_global_set(m, "motd",
                                      heapd_str_new(m, "hello", 5)), 0);
    /* a map's shape with a count of its writer's choosing, and one of
     * an unknown map kind */
    uint32_t forged[sizeof(struct coll_map_head) / 4] = {
        0x50414d48u, 0, 0xffffffffu, 0x7fffffffu};
    void *f = heapd_alloc(m, 3, sizeof forged);
    ck_assert_ptr_nonnull(f);
    memcpy(heapd_bytes(f), forged, sizeof forged);
    ck_assert_int_eq(heapd_global_set(m, "forged", f), 0);
    forged[1] = 7;
    f = heapd_alloc(m, 3, sizeof forged);
    ck_assert_ptr_nonnull(f);
    memcpy(heapd_bytes(f), forged, sizeof forged);
    ck_assert_int_eq(heapd_global_set(m, "forged.kind", f), 0);
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' globals 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", out);
    ck_assert_msg(strstr(out, "NAME") && strstr(out, "index") &&
                      strstr(out, "set") && strstr(out, " 32 ") &&
                      strstr(out, "empty") && strstr(out, "KIND") &&
                      strstr(out, "3 keys") && strstr(out, "2 queued") &&
                      strstr(out, "1 leased") &&
                      strstr(out, "5 bytes") &&
                      strstr(out, "9223372036854775807 keys"),
                  "output: %s", out);
    heapd_client *cc = harness_control(&D);
    heapd_global_info gi[16];
    size_t n = 0;
    ck_assert_int_eq(heapd_globals(cc, gi, 16, &n), 0);
    ck_assert_uint_eq(n, 7);
    static const struct {
        const char *name;
        heapd_global_kind kind;
        uint64_t size;
    } want[] = {{"index", HEAPD_GLOBAL_OTHER, 0},
                {"empty", HEAPD_GLOBAL_OTHER, 0},
                {"words", HEAPD_GLOBAL_MAP, 3},
                {"jobs", HEAPD_GLOBAL_QUEUE, 2},
                {"motd", HEAPD_GLOBAL_STRING, 5},
                {"forged", HEAPD_GLOBAL_MAP, 0x7fffffffffffffffull},
                {"forged.kind", HEAPD_GLOBAL_OTHER, 0}};
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        size_t i = 0;
        while (i < n && strcmp(gi[i].name, want[w].name) != 0)
            i++;
        ck_assert_msg(i < n, "global %s not listed", want[w].name);
        ck_assert_msg(gi[i].kind == want[w].kind && gi[i].size == want[w].size,
                      "global %s: kind %d size %" PRIu64, want[w].name,
                      (int)gi[i].kind, gi[i].size);
        ck_assert_uint_eq(gi[i].leases, want[w].kind == HEAPD_GLOBAL_QUEUE);
    }
    heapd_disconnect(cc);
    harness_collect(m);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

static Suite *globals_suite(void)
{
    Suite *s = suite_create("globals");
    TCase *t = tcase_create("globals");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, set_get_and_survive_cycles);
    tcase_add_test(t, table_full);
    tcase_add_test(t, once_race_runs_init_once);
    tcase_add_test(t, once_initialiser_killed);
    tcase_add_test(t, once_init_fails_then_retries);
    tcase_add_test(t, globals_alive_across_cycles_under_overwrites);
    tcase_add_test(t, processes_share_a_structure_by_name);
    tcase_add_test(t, heapctl_globals);
    tcase_add_test(t, delete_then_get_and_create_again);
    tcase_add_test(t, delete_frees_an_entry_for_reuse);
    tcase_add_test(t, delete_while_initialising_is_busy);
    tcase_add_test(t, deleted_value_lives_while_referenced);
    tcase_add_test(t, deletes_while_marking_lose_nothing);
    tcase_add_test(t, forged_init_done_is_refused);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(globals_suite());
}
