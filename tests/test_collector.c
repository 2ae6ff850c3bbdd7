/* The collector against a real heapd with the verifier on: several
 * processes mutating linked structures through many cycles, blocking
 * regions, a mutator that never reaches a safepoint, killed clients, bad
 * requests, references planted behind the barrier's back, and heapctl gc
 * and stats.  Processes coordinate through pipes (Note [Test
 * handshakes]). */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
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

/* ---- several processes ---- */

/* A node: 2 refs (left, right), raw bytes: value and a check of it. */
static void *node(heapd_mutator *m, long v)
{
    void **o = heapd_alloc(m, 2, 2 * sizeof(long));
    if (!o)
        return NULL;
    long *b = heapd_bytes(o);
    b[0] = v;
    b[1] = ~v;
    return o;
}

/* Build a tree of DEPTH under root slot R (rooted at every step). */
static void build_tree(heapd_mutator *m, size_t r, int depth, long v)
{
    void *t = node(m, v);
    ck_assert_ptr_nonnull(t);
    heapd_root_set(m, r, t);
    if (depth == 0)
        return;
    size_t s = heapd_root_push(m, NULL);
    for (int side = 0; side < 2; side++) {
        build_tree(m, s, depth - 1, v * 2 + 1 + side);
        void **parent = heapd_root_get(m, r);
        heapd_write(m, parent, &parent[side], heapd_root_get(m, s));
    }
    heapd_root_pop(m, 1);
}

/* Check the tree at T: every node's value follows from its position. */
static long check_tree(void **t, long v, int depth)
{
    if (!t)
        return 0;
    long *b = heapd_bytes(t);
    if (b[0] != v || b[1] != ~v || heapd_nrefs(t) != 2)
        return -1000000;
    if (depth == 0)
        return 1;
    return 1 + check_tree(t[0], v * 2 + 1, depth - 1) +
           check_tree(t[1], v * 2 + 2, depth - 1);
}

/* One worker process: keeps NTREES trees on its root stack, replaces and
 * drops subtrees, forces collections, and checks everything each round.
 * STOP_FD, if >= 0, ends it when readable; else ROUNDS rounds. */
static int tree_worker(const char *sock, int id, int rounds, int stop_fd,
                       int ready_fd)
{
    heapd_connect_opts o = {.socket_path = sock};
    heapd_client *c;
    heapd_mutator *m;
    const int ntrees = 4, depth = 9;
    if (heapd_connect(&c, &o) < 0 || heapd_attach(c, &m) < 0)
        return 10;
    for (int t = 0; t < ntrees; t++) {
        size_t r = heapd_root_push(m, NULL);
        build_tree(m, r, depth, id * 1000 + t);
    }
    if (ready_fd >= 0 && write(ready_fd, "r", 1) != 1)
        return 11;
    unsigned seed = (unsigned)id * 7919u;
    for (int round = 0; stop_fd >= 0 || round < rounds; round++) {
        if (stop_fd >= 0) {
            struct pollfd p = {.fd = stop_fd, .events = POLLIN};
            if (poll(&p, 1, 0) > 0)
                break;
        }
        int t = (int)(rand_r(&seed) % ntrees);
        void **root = heapd_root_get(m, (size_t)t);
        /* replace a child subtree with a fresh one, or drop it */
        int side = (int)(rand_r(&seed) % 2);
        long v = (id * 1000 + t) * 2 + 1 + side;
        if (rand_r(&seed) % 4 == 0) {
            heapd_write(m, root, &root[side], NULL);
        } else {
            size_t s = heapd_root_push(m, NULL);
            build_tree(m, s, depth - 1, v);
            root = heapd_root_get(m, (size_t)t);
            heapd_write(m, root, &root[side], heapd_root_get(m, s));
            heapd_root_pop(m, 1);
        }
        if (round % 5 == 0 && heapd_collect(m, HEAPD_COLLECT_WAIT) < 0)
            return 12;
        for (int k = 0; k < ntrees; k++) {
            void **tr = heapd_root_get(m, (size_t)k);
            long base = id * 1000 + k;
            long *b = heapd_bytes(tr);
            if (b[0] != base || b[1] != ~base)
                return 13;
            for (int sd = 0; sd < 2; sd++)
                if (check_tree(tr[sd], base * 2 + 1 + sd, depth - 1) < 0)
                    return 14;
        }
    }
    heapd_detach(m);
    heapd_disconnect(c);
    return 0;
}

START_TEST(processes_mutate_linked_structures)
{
    harness_start_with(&D, NULL);
    pid_t kids[3];
    for (int i = 0; i < 3; i++) {
        kids[i] = fork();
        ck_assert_int_ge(kids[i], 0);
        if (kids[i] == 0)
            _exit(tree_worker(D.sock, i + 1, 30, -1, -1));
    }
    for (int i = 0; i < 3; i++)
        harness_wait_ok(kids[i], "tree worker");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_ge(st.cycles_completed, 6);
    ck_assert_uint_eq(st.mutators, 0);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* 300 cycles (more than the 255 epoch values, so marks wrap) with the
 * verifier on, while two processes mutate. */
START_TEST(many_cycles_with_verifier)
{
    harness_start_with(&D, NULL);
    int stop[2], ready[2];
    ck_assert_int_eq(pipe(stop), 0);
    ck_assert_int_eq(pipe(ready), 0);
    pid_t kids[2];
    for (int i = 0; i < 2; i++) {
        kids[i] = fork();
        ck_assert_int_ge(kids[i], 0);
        if (kids[i] == 0) {
            close(stop[1]);
            _exit(tree_worker(D.sock, i + 1, 0, stop[0], ready[1]));
        }
    }
    close(stop[0]);
    close(ready[1]);
    for (int i = 0; i < 2; i++) {
        char r;
        ck_assert_int_eq(read(ready[0], &r, 1), 1);
    }
    heapd_connect_opts o = {.socket_path = D.sock,
                            .flags = HEAPD_CONNECT_CONTROL};
    heapd_client *c;
    ck_assert_int_eq(heapd_connect(&c, &o), 0);
    uint64_t before = harness_stats(c).cycles_completed;
    for (int i = 0; i < 300; i++)
        ck_assert_int_eq(heapd_request_collect(c, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t st = harness_stats(c);
    ck_assert_uint_ge(st.cycles_completed, before + 300);
    ck_assert_uint_gt(st.pause_max_ns, 0);
    ck_assert_uint_ge(st.pause_total_ns, st.pause_max_ns);
    heapd_disconnect(c);
    close(stop[1]);
    for (int i = 0; i < 2; i++)
        harness_wait_ok(kids[i], "tree worker");
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- stopping ---- */

START_TEST(blocked_mutator_does_not_hold_up_cycles)
{
    harness_start_with(&D, NULL);
    int to_kid[2], from_kid[2];
    ck_assert_int_eq(pipe(to_kid), 0);
    ck_assert_int_eq(pipe(from_kid), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        heapd_client *c;
        heapd_mutator *m;
        harness_attach(&D, &c, &m);
        long *o = heapd_alloc(m, 0, sizeof(long));
        *o = 4242;
        heapd_root_push(m, o);
        heapd_blocking_enter(m);
        char x;
        if (write(from_kid[1], "b", 1) != 1 || read(to_kid[0], &x, 1) != 1)
            _exit(20);
        heapd_blocking_leave(m);
        if (*(long *)heapd_root_get(m, 0) != 4242)
            _exit(21);
        for (int i = 0; i < 1000; i++)
            if (!heapd_alloc(m, 1, 8))
                _exit(22);
        heapd_detach(m);
        heapd_disconnect(c);
        _exit(0);
    }
    close(from_kid[1]);
    char x;
    ck_assert_int_eq(read(from_kid[0], &x, 1), 1); /* the kid is blocked */
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    for (int i = 0; i < 5; i++)
        /* would never return if the blocked kid held it up */
        harness_collect(m);
    ck_assert_int_eq(write(to_kid[1], "g", 1), 1);
    harness_wait_ok(kid, "blocked mutator");
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* A mutator that never reaches a safepoint holds up the stop until its
 * process dies; then the cycle completes. */
START_TEST(dead_mutator_releases_stop)
{
    harness_start_with(&D, NULL);
    int ready[2], done[2];
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(done), 0);
    pid_t spinner = fork();
    ck_assert_int_ge(spinner, 0);
    if (spinner == 0) {
        heapd_client *c;
        heapd_mutator *m;
        harness_attach(&D, &c, &m);
        heapd_root_push(m, heapd_alloc(m, 0, 64));
        if (write(ready[1], "r", 1) != 1)
            _exit(1);
        for (volatile unsigned long i = 0;; i++)
            ; /* running, never polling */
    }
    close(ready[1]);
    char r;
    ck_assert_int_eq(read(ready[0], &r, 1), 1);
    pid_t waiter = fork();
    ck_assert_int_ge(waiter, 0);
    if (waiter == 0) {
        heapd_client *c;
        heapd_mutator *m;
        harness_attach(&D, &c, &m);
        int rc = heapd_collect(m, HEAPD_COLLECT_WAIT);
        if (write(done[1], "d", 1) != 1)
            _exit(2);
        _exit(rc == 0 ? 0 : 3);
    }
    kill(spinner, SIGKILL);
    harness_wait_pid(spinner, HARNESS_WAIT_MS);
    harness_wait_ok(waiter, "collect after the spinner died");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_ge(st.cycles_completed, 1);
    ck_assert_uint_eq(st.mutators, 0);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* Lots of memory, all of it rooted: small objects and a large one. */
static void hold_lots(heapd_mutator *m, void *arg)
{
    (void)arg;
    for (int i = 0; i < 50000; i++)
        heapd_root_push(m, heapd_alloc(m, 1, 100));
    heapd_alloc(m, 0, 3 << 20);
}

/* A client killed with lots of memory: every segment comes back. */
START_TEST(killed_client_loses_nothing_else)
{
    harness_start_with(&D, NULL);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t keep = heapd_root_push(m, NULL);
    build_tree(m, keep, 8, 77);
    heapd_stats_t before = harness_stats(c);

    /* from here this thread waits on pipes: it must not hold up the
     * kid's collections (Note [Client GC discipline]) */
    heapd_blocking_enter(m);
    pid_t kid = harness_fork_mutator(&D, hold_lots, NULL);
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    /* the daemon notices the close: wait for its mutator to go */
    harness_wait_stat(&D, c, mutators, ==, 1);
    heapd_blocking_leave(m);
    harness_collect(m);
    harness_collect(m);
    heapd_stats_t st = harness_stats(c);
    ck_assert_uint_eq(st.segments_large, 0);
    ck_assert_uint_le(st.segments_owned + st.segments_filled,
                      before.segments_owned + before.segments_filled + 1);
    ck_assert_int_eq(check_tree(heapd_root_get(m, keep), 77, 8), 511);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- bad requests: answered or counted, never fatal ---- */

static void expect_reply_error(int fd, uint64_t seq, Heapd__ErrorCode code,
                               const char *substr)
{
    Heapd__Envelope *e = harness_read_env(fd, NULL);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ERROR);
    ck_assert_uint_eq(e->seq, seq);
    ck_assert_int_eq(e->error->code, code);
    ck_assert_msg(strstr(e->error->message, substr), "message: %s",
                  e->error->message);
    heapd__envelope__free_unpacked(e, NULL);
}

/* A bystander with a tree of 127 nodes in root slot *KEEP: it attached
 * first, so its mutator has slot 0. */
static void start_bystander(heapd_client **c, heapd_mutator **m,
                            size_t *keep)
{
    harness_start_with(&D, NULL);
    harness_attach(&D, c, m);
    *keep = heapd_root_push(*m, NULL);
    build_tree(*m, *keep, 6, 5);
}

/* The bad requests did not touch the bystander's data; stop the daemon. */
static void bystander_unharmed(heapd_client *c, heapd_mutator *m, size_t keep)
{
    harness_collect(m);
    ck_assert_int_eq(check_tree(heapd_root_get(m, keep), 5, 6), 127);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}

/* A stats request with SEQ on FD, answered in order: every frame sent
 * before it has been handled.  Returns frames_rejected. */
static uint64_t rejected_after(int fd, uint64_t seq)
{
    Heapd__StatsRequest q = HEAPD__STATS_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.seq = seq;
    env.body_case = HEAPD__ENVELOPE__BODY_STATS_REQUEST;
    env.stats_request = &q;
    harness_send_env(fd, &env);
    Heapd__Envelope *rep = harness_read_env(fd, NULL);
    ck_assert_ptr_nonnull(rep);
    ck_assert_int_eq(rep->body_case, HEAPD__ENVELOPE__BODY_STATS_REPLY);
    ck_assert_uint_eq(rep->seq, seq);
    uint64_t n = rep->stats_reply->frames_rejected;
    heapd__envelope__free_unpacked(rep, NULL);
    return n;
}

START_TEST(detach_of_a_slot_not_ours_is_refused)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t keep;
    start_bystander(&c, &m, &keep);
    int fd;
    fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    Heapd__DetachRequest dr = HEAPD__DETACH_REQUEST__INIT;
    dr.slot = 0; /* the bystander's */
    env.seq = 5;
    env.body_case = HEAPD__ENVELOPE__BODY_DETACH_REQUEST;
    env.detach_request = &dr;
    harness_send_env(fd, &env);
    expect_reply_error(fd, 5, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                       "slot 0 is not attached by this client");
    dr.slot = 100000;
    harness_send_env(fd, &env);
    expect_reply_error(fd, 5, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                       "slot 100000");
    close(fd);
    bystander_unharmed(c, m, keep);
}
END_TEST

START_TEST(bad_segment_requests_are_refused)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t keep;
    start_bystander(&c, &m, &keep);
    int fd;
    fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    /* a segment kind that does not exist */
    Heapd__SegmentRequest sr = HEAPD__SEGMENT_REQUEST__INIT;
    sr.kind = 9;
    env.seq = 6;
    env.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST;
    env.segment_request = &sr;
    harness_send_env(fd, &env);
    expect_reply_error(fd, 6, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                       "unknown segment kind 9");
    /* a large object bigger than the heap */
    sr.kind = HEAPD__SEGMENT_KIND__SEGMENT_LARGE;
    sr.bytes = 1ull << 40;
    harness_send_env(fd, &env);
    expect_reply_error(fd, 6, HEAPD__ERROR_CODE__ERROR_NO_MEMORY,
                       "can never fit");
    close(fd);
    bystander_unharmed(c, m, keep);
}
END_TEST

/* Returning segments that are not ours: the control area, one of the
 * bystander's, one outside the heap; counted and ignored, and the same
 * connection still answers. */
START_TEST(returning_segments_not_ours_is_ignored)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t keep;
    start_bystander(&c, &m, &keep);
    int fd;
    fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    uint64_t rejected = rejected_after(fd, 1);
    heapd_stats_t st0 = harness_stats(c);
    uint32_t segs[3] = {0, 5, 999999};
    harness_raw_return_segments(fd, 0, segs, 3);
    ck_assert_uint_eq(rejected_after(fd, 7), rejected + 3);
    heapd_stats_t st1 = harness_stats(c);
    ck_assert_uint_eq(st1.segments_owned, st0.segments_owned);
    close(fd);
    bystander_unharmed(c, m, keep);
}
END_TEST

/* A URS batch for a slot this connection never attached (slot 0 is the
 * bystander's): counted and ignored, its ring left alone. */
START_TEST(urs_batch_for_another_slot_is_ignored)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t keep;
    start_bystander(&c, &m, &keep);
    int fd;
    fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    uint64_t rejected = rejected_after(fd, 1);
    Heapd__UrsBatch ub = HEAPD__URS_BATCH__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    ub.slot = 0;
    ub.head = 1000000;
    env.seq = 0;
    env.body_case = HEAPD__ENVELOPE__BODY_URS_BATCH;
    env.urs_batch = &ub;
    harness_send_env(fd, &env);
    ck_assert_uint_eq(rejected_after(fd, 2), rejected + 1);
    close(fd);
    bystander_unharmed(c, m, keep);
}
END_TEST

/* Global names the daemon must refuse, sent past libheapd's checks. */
START_TEST(bad_global_names_are_refused)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t keep;
    start_bystander(&c, &m, &keep);
    int fd;
    fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    uint64_t rejected = rejected_after(fd, 1);
    char longname[100];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    Heapd__GlobalClaim gcl = HEAPD__GLOBAL_CLAIM__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    gcl.name = longname;
    env.seq = 9;
    env.body_case = HEAPD__ENVELOPE__BODY_GLOBAL_CLAIM;
    env.global_claim = &gcl;
    harness_send_env(fd, &env);
    expect_reply_error(fd, 9, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                       "a global's name must be 1 to 63 bytes");
    gcl.name = (char *)"";
    harness_send_env(fd, &env);
    expect_reply_error(fd, 9, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                       "a global's name must be 1 to 63 bytes");
    ck_assert_uint_eq(harness_daemon_stats(&D).frames_rejected, rejected + 2);
    close(fd);
    bystander_unharmed(c, m, keep);
}
END_TEST

/* Attach on a control connection: refused on the wire, and by libheapd. */
START_TEST(attach_on_a_control_connection_is_refused)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t keep;
    start_bystander(&c, &m, &keep);
    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    Heapd__AttachRequest ar = HEAPD__ATTACH_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.seq = 8;
    env.body_case = HEAPD__ENVELOPE__BODY_ATTACH_REQUEST;
    env.attach_request = &ar;
    harness_send_env(fd, &env);
    expect_reply_error(fd, 8, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                       "needs a mutator connection");
    close(fd);
    heapd_client *cc = harness_control(&D);
    heapd_mutator *cm;
    ck_assert_int_eq(heapd_attach(cc, &cm), -EINVAL);
    heapd_disconnect(cc);
    bystander_unharmed(c, m, keep);
}
END_TEST

/* References a buggy client stores behind the barrier's back: each is
 * counted, logged with what is wrong with it, and never followed; the
 * daemon keeps collecting and other data stays intact. */
START_TEST(planted_bad_references)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start_logged(&D, harness_default_config("@SOCK@", NULL),
                         "heapd.log");
    harness_attach(&D, &c, &m);
    size_t keep = heapd_root_push(m, NULL);
    build_tree(m, keep, 6, 9);
    uintptr_t base = (uintptr_t)heapd_heap_base(c);
    void **good = heapd_alloc(m, 1, 64);
    void **bad = heapd_alloc(m, 6, 0);
    heapd_root_push(m, bad);
    uintptr_t planted[6] = {
        0x10000,                                 /* outside the heap */
        base + (200u << 20) + 3,                 /* unaligned */
        base + 64,                               /* the control area */
        base + (900u << 20),                     /* a free segment */
        (uintptr_t)good + 8,                     /* inside an object */
        (uintptr_t)good,                         /* fine: kept alive */
    };
    for (int i = 0; i < 6; i++)
        bad[i] = (void *)planted[i]; /* no barrier: that is the bug */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t st = harness_stats(c);
    ck_assert_uint_ge(st.bad_refs, 5);
    ck_assert_msg(harness_log_contains(&D, "in a reference field: outside "
                                           "the heap") &&
                      harness_log_contains(&D, "not 8-byte aligned") &&
                      harness_log_contains(&D, "in the control area") &&
                      harness_log_contains(&D, "in a free segment") &&
                      harness_log_contains(&D, "not the first field of a "
                                               "block"),
                  "heapd's log lacks a diagnosis");
    /* the one good reference kept its object; the tree is intact */
    ck_assert_uint_eq(heapd_nrefs(bad[5]), 1);
    ck_assert_int_eq(check_tree(heapd_root_get(m, keep), 9, 6), 127);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* The rest of the planted references: a freed block, a segment header,
 * another heap's memory, and garbage that reaches the daemon only through
 * an update remembered set.  Each is counted and diagnosed, never
 * followed, and everything live stays intact. */
#define OTHER_BASE 0x7ec000000000ull

/* A logged daemon with heaps "default" and "other", and a list of every
 * other one of 20000 objects in root slot *KEEP after two cycles: the rest
 * are free blocks in segments that stay in use.  Returns one of those.
 * The mutator is precise: a local, or a stale word on the stack, would
 * keep the free one (Note [C locals are roots]). */
static uintptr_t start_with_half_list(heapd_client **c, heapd_mutator **m,
                                      size_t *keep)
{
    char conf[1024];
    snprintf(conf, sizeof conf,
             "[daemon]\nsocket = @SOCK@\nlog_level = info\n"
             "[heap default]\nbase = 0x%llx\nmax_size = 1G\n"
             "[heap other]\nbase = 0x%llx\nmax_size = 1G\n",
             (unsigned long long)HARNESS_HEAP_BASE,
             (unsigned long long)OTHER_BASE);
    harness_start_logged(&D, conf, "heapd.log");
    harness_attach_precise(&D, c, m);
    *keep = heapd_root_push(*m, NULL);
    uintptr_t freed = 0;
    for (long i = 0; i < 20000; i++) {
        void **o = heapd_alloc(*m, 1, 48);
        ck_assert_ptr_nonnull(o);
        *(long *)heapd_bytes(o) = i;
        if (i % 2 == 0) {
            heapd_write(*m, o, &o[0], heapd_root_get(*m, *keep));
            heapd_root_set(*m, *keep, o);
        } else if (i == 1001) {
            freed = (uintptr_t)o;
        }
    }
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(heapd_collect(*m, HEAPD_COLLECT_WAIT), 0);
    return freed;
}

/* The live list is whole; stop the daemon. */
static void half_list_intact(heapd_client *c, heapd_mutator *m, size_t keep)
{
    long expect = 19998, n = 0;
    for (void **o = heapd_root_get(m, keep); o; o = o[0], n++) {
        ck_assert_int_eq(*(long *)heapd_bytes(o), expect);
        expect -= 2;
    }
    ck_assert_int_eq(n, 10000);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}

START_TEST(planted_free_block_header_and_other_heap)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t keep;
    uintptr_t freed = start_with_half_list(&c, &m, &keep);
    uintptr_t base = (uintptr_t)heapd_heap_base(c);
    const struct layout_control *ctl = heapd_heap_base(c);
    uintptr_t kept = (uintptr_t)heapd_root_get(m, keep);
    uintptr_t seg_size = (uintptr_t)ctl->segment_size;
    uintptr_t header = ((kept - base) & ~(seg_size - 1)) + base + 8;

    void **bad = heapd_alloc(m, 3, 0);
    heapd_root_push(m, bad);
    bad[0] = (void *)freed;                       /* a free block */
    bad[1] = (void *)header;                      /* a segment header */
    bad[2] = (void *)(OTHER_BASE + (200u << 20)); /* another heap */
    uint64_t before = harness_stats(c).bad_refs;
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    ck_assert_uint_ge(harness_stats(c).bad_refs, before + 3);
    ck_assert_msg(harness_log_contains(&D, ": a free block; not followed") &&
                      harness_log_contains(&D, "in a segment's header") &&
                      harness_log_contains(&D, "outside the heap"),
                  "heapd's log lacks a diagnosis");
    heapd_root_pop(m, 1);
    half_list_intact(c, m, keep);
}
END_TEST

struct marking_wait {
    heapd_mutator *m;
    const struct layout_control *ctl;
    uint32_t epoch;  /* before the cycle was asked for */
    bool marking;
};

/* Safepoints until the cycle asked for is marking (or has passed by
 * whole in one safepoint: then the caller asks again). */
static bool cycle_marking(void *arg, char *seen, size_t seen_len)
{
    struct marking_wait *w = arg;
    heapd_safepoint(w->m); /* the snapshot needs this thread's ack */
    uint32_t phase = atomic_load(&w->ctl->phase);
    uint32_t epoch = atomic_load(&w->ctl->epoch);
    snprintf(seen, seen_len, "phase %u, epoch %u (%u before)", phase, epoch,
             w->epoch);
    w->marking = phase == LAYOUT_PHASE_MARK;
    return w->marking || epoch != w->epoch;
}

/* Garbage only a URS carries: an unreachable object's fields are logged by
 * the barrier at its first write while marking.  The phase changes only
 * while this mutator is stopped and heapd_write is not a safepoint
 * (client/barrier.c), so a write once marking is seen lands in it.  The
 * cycle is asked for by the client, not the mutator: heapd_collect waits
 * for its reply in a blocking region, where the whole cycle can run
 * without this mutator (under ASan on a busy machine it did, 20 times in
 * a row); running, the mutator holds up the snapshot and the final sync
 * until its safepoints. */
START_TEST(planted_garbage_in_an_update_remembered_set)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t keep;
    start_with_half_list(&c, &m, &keep);
    const struct layout_control *ctl = heapd_heap_base(c);
    uint64_t before = harness_stats(c).bad_refs;
    bool logged = false;
    for (int round = 0; round < 20 && !logged; round++) {
        void **u = heapd_alloc(m, 2, 0);
        ck_assert_ptr_nonnull(u);
        u[0] = (void *)(uintptr_t)(0x10000 + 8 * round); /* no barrier */
        struct marking_wait w = {m, ctl, atomic_load(&ctl->epoch), false};
        ck_assert_int_eq(heapd_request_collect(c, 0), 0);
        harness_wait_until(cycle_marking, &w, "the cycle asked for to mark");
        heapd_write(m, u, &u[1], NULL); /* logs u[0] if marking */
        ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
        logged = w.marking;
    }
    ck_assert_msg(logged, "no write landed in marking in 20 cycles");
    ck_assert_uint_ge(harness_stats(c).bad_refs, before + 1);
    ck_assert_msg(harness_log_contains(&D, "in an update remembered set"),
                  "heapd's log lacks the garbage URS entry");
    half_list_intact(c, m, keep);
}
END_TEST

/* The value after counter NAME's name in heapctl stats' text OUT (its
 * column is as wide as the longest name), or -1. */
static long long text_stat(const char *out, const char *name)
{
    char key[80];
    long long v;
    snprintf(key, sizeof key, "\n  %s ", name);
    const char *p = strstr(out, key);
    return p && sscanf(p + strlen(key), " %lld", &v) == 1 ? v : -1;
}

START_TEST(heapctl_gc_and_stats)
{
    char cmd[512], out[8192];
    harness_start_with(&D, NULL);
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' gc 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "output: %s", out);
    ck_assert_msg(strstr(out, "heap default: cycle 1 completed"), "%s", out);
    /* a heap heapd does not serve: exit 1 and which it serves */
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' --heap nope gc 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1 &&
                      strstr(out, "no heap named 'nope'"), "output: %s", out);
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' --heap default gc 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "output: %s", out);
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' stats 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "output: %s", out);
    ck_assert_msg(text_stat(out, "cycles_completed") == 2 &&
                      text_stat(out, "verify_failures") == 0 &&
                      strstr(out, "pause_max_ns"),
                  "output: %s", out);
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' stats --json 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(strstr(out, "\"cycles_completed\":2,") &&
                      strstr(out, "\"bad_refs\":0,") &&
                      strstr(out, "\"final_sync_retries\":"),
                  "output: %s", out);
    harness_stop_clean(&D);
}
END_TEST

static Suite *collector_suite(void)
{
    Suite *s = suite_create("collector");
    TCase *t = tcase_create("collector");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, processes_mutate_linked_structures);
    tcase_add_test(t, many_cycles_with_verifier);
    tcase_add_test(t, blocked_mutator_does_not_hold_up_cycles);
    tcase_add_test(t, dead_mutator_releases_stop);
    tcase_add_test(t, killed_client_loses_nothing_else);
    tcase_add_test(t, detach_of_a_slot_not_ours_is_refused);
    tcase_add_test(t, bad_segment_requests_are_refused);
    tcase_add_test(t, returning_segments_not_ours_is_ignored);
    tcase_add_test(t, urs_batch_for_another_slot_is_ignored);
    tcase_add_test(t, bad_global_names_are_refused);
    tcase_add_test(t, attach_on_a_control_connection_is_refused);
    tcase_add_test(t, planted_bad_references);
    tcase_add_test(t, planted_free_block_header_and_other_heap);
    tcase_add_test(t, planted_garbage_in_an_update_remembered_set);
    tcase_add_test(t, heapctl_gc_and_stats);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(collector_suite());
}
