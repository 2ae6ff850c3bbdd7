/* libheapd's shared collections killed (Note [Collections survive a
 * kill] in client/collections/map.c): a process SIGKILLed in the middle
 * of each step of each operation (the HEAPD_COLL_STOP_IN hook of debug
 * builds stops it exactly there), and writers killed at any instant,
 * leave every structure whole and usable by the others, on a real heapd
 * that runs its verifier after every cycle. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll_util.h"
#include "harness.h"
#include "heapd.h"
#include "heapd_collections.h"
#include "check_main.h"

#ifndef NDEBUG /* the stop hook is in debug builds only */
/* ---- killed mid-operation ---- */

/* Insert keys 0, 1, ... (generation 1) and report each one done, until
 * stopped; then replace them (generation 2) and delete some, so that
 * every map stop point is on its way. */
static int map_killee_body(heapd_mutator *m, void *arg, int fd)
{
    (void)arg;
    size_t r = heapd_root_push(m, global_of(m, "t.map"));
    for (unsigned i = 0; i < 100000; i++) {
        if (put_key(m, r, i, 1, 0) != 0)
            return 70;
        send_u64(fd, i + 1);
    }
    for (unsigned i = 0; i < 100000; i++)
        if (put_key(m, r, i, 2, 0) != 1)
            return 71;
    return 72; /* never stopped */
}

/* Every key the kid reported is there, whole, and the map works: another
 * process can finish whatever the kid left (a resize) and use it. */
static void map_after_kill(heapd_mutator *m, size_t r, uint64_t acked)
{
    void *map = heapd_root_get(m, r);
    int n = heapd_map_verify(map);
    ck_assert_msg(n >= 0, "verify after the kill: %s", heapd_last_error());
    ck_assert_msg((uint64_t)n == acked || (uint64_t)n == acked + 1,
                  "%d keys, the kid had inserted %" PRIu64, n, acked);
    /* Note [Map footprint]: every key once, a resize left half done too */
    heapd_map_footprint_t f;
    ck_assert_int_eq(heapd_map_footprint(m, map, &f), 0);
    ck_assert_uint_eq(f.keys, (uint64_t)n);
    for (unsigned i = 0; i < acked; i++) {
        char k[32];
        unsigned g;
        key_name(k, sizeof k, i);
        ck_assert_msg(value_ok(heapd_map_get_str(m, map, k, strlen(k)), k,
                               &g) && g == 1, "key %u lost or damaged", i);
    }
    /* a survivor goes on: inserts (which finish a resize), replaces */
    for (unsigned i = 0; i < acked + 3000; i++)
        ck_assert_int_ge(put_key(m, r, i, 3, 0), 0);
    harness_collect(m);
    map = heapd_root_get(m, r);
    n = heapd_map_verify(map);
    ck_assert_msg(n >= 0, "verify after the survivor: %s",
                  heapd_last_error());
    ck_assert_int_eq(n, (int)acked + 3000);
    for (unsigned i = 0; i < acked + 3000; i++) {
        char k[32];
        unsigned g;
        key_name(k, sizeof k, i);
        ck_assert_msg(value_ok(heapd_map_get_str(m, map, k, strlen(k)), k,
                               &g) && g == 3, "key %u", i);
    }
}

static void map_killed_at(const char *point)
{
    coll_start();
    int fd, go;
    pid_t k = fork_kid(map_killee_body, NULL, false, &fd, &go, point);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = shared_map(m, 0);
    uint64_t crashed = harness_daemon_stats(&D).clients_crashed;
    kid_go(go);
    kill_stopped(k, point);
    uint64_t acked = 0, a;
    while (read(fd, &a, sizeof a) == sizeof a)
        acked = a;
    close(fd);
    heapd_client *ctl = harness_control(&D);
    harness_wait_stat(&D, ctl, clients_crashed, >=, crashed + 1);
    heapd_disconnect(ctl);
    map_after_kill(m, r, acked);
    heapd_root_pop(m, 1);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}

START_TEST(map_killed_before_its_swap)
{
    map_killed_at("map.update.built");
}
END_TEST

/* Add 5 to counter "c", or get-or-put key "g" (ARG non-NULL): the kid
 * stops before the operation's swap, where it is killed. */
static int one_op_body(heapd_mutator *m, void *arg, int fd)
{
    (void)fd;
    void *map = global_of(m, "t.map");
    if (arg) {
        void *v = make_value(m, "g", 9);
        if (!v)
            return 75;
        return heapd_map_get_or_put_str(m, map, "g", 1, v, NULL) ? 76 : 77;
    }
    return heapd_map_add_str(m, map, "c", 1, 5, NULL) >= 0 ? 78 : 79;
}

/* Note [Counters]: an add or a get-or-put killed before its swap did
 * nothing, and the others' go on. */
static void op_killed_before_its_swap(bool get_or_put)
{
    coll_start();
    int fd, go;
    pid_t k = fork_kid(one_op_body, get_or_put ? (void *)1 : NULL, false,
                       &fd, &go, "map.update.built");
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = shared_map(m, 0);
    int64_t x = 0;
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, r), "c", 1, 10,
                                       &x), 0);
    kid_go(go);
    kill_stopped(k, "map.update.built");
    close(fd);
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, r), "c", 1, 0,
                                       &x), 1);
    ck_assert_int_eq(x, 10);
    ck_assert_ptr_null(heapd_map_get_str(m, heapd_root_get(m, r), "g", 1));
    bool ins = false;
    void *v = make_value(m, "g", 3);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_eq(heapd_map_get_or_put_str(m, heapd_root_get(m, r), "g",
                                              1, v, &ins), v);
    ck_assert(ins);
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, r), "c", 1, 1,
                                       &x), 1);
    ck_assert_int_eq(x, 11);
    harness_collect(m);
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)), 2);
    coll_finish(c, m, 1);
}

START_TEST(add_killed_before_its_swap)
{
    op_killed_before_its_swap(false);
}
END_TEST

START_TEST(get_or_put_killed_before_its_swap)
{
    op_killed_before_its_swap(true);
}
END_TEST

START_TEST(map_killed_starting_a_resize)
{
    map_killed_at("map.resize.begun");
}
END_TEST

START_TEST(map_killed_with_a_claim)
{
    map_killed_at("map.resize.claimed");
}
END_TEST

START_TEST(map_killed_after_a_freeze)
{
    map_killed_at("map.resize.frozen");
}
END_TEST

START_TEST(map_killed_before_the_switch)
{
    map_killed_at("map.resize.switch");
}
END_TEST

static int queue_killee_body(heapd_mutator *m, void *arg, int fd)
{
    const char *point = arg;
    size_t r = heapd_root_push(m, global_of(m, "t.queue"));
    if (strcmp(point, "queue.push.linked") == 0) {
        void *v = make_value(m, "key:00000005", 1000);
        send_u64(fd, 1);
        heapd_queue_push(m, heapd_root_get(m, r), v);
    } else if (strcmp(point, "queue.pop.taken") == 0) {
        send_u64(fd, 1);
        heapd_queue_pop(m, heapd_root_get(m, r));
    } else {
        send_u64(fd, 1);
        heapd_queue_pop_wait(m, heapd_root_get(m, r), 0);
    }
    return 80; /* never stopped */
}

/* The queue holds values 0..99 of key 5 (popped_first of them popped
 * already) when the kid is killed at POINT. */
static void queue_killed_at(const char *point)
{
    coll_start();
    int fd, go;
    pid_t k = fork_kid(queue_killee_body, (void *)point, false, &fd, &go,
                       point);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = heapd_root_push(m, heapd_queue_new(m));
    ck_assert_int_eq(heapd_global_set(m, "t.queue", heapd_root_get(m, r)), 0);
    bool waiting = strcmp(point, "queue.pop_wait.waiting") == 0;
    unsigned n = waiting ? 0 : 100;
    for (unsigned i = 0; i < n; i++)
        ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r),
                                          make_value(m, "key:00000005", i)),
                         0);
    kid_go(go);
    ck_assert_uint_eq(recv_u64(fd, "started"), 1);
    kill_stopped(k, point);
    close(fd);
    harness_collect(m);
    /* the survivor pushes, and pops everything in order */
    for (unsigned i = 0; i < 50; i++)
        ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r),
                                          make_value(m, "key:00000005",
                                                     2000 + i)), 0);
    harness_collect(m);
    unsigned want = strcmp(point, "queue.pop.taken") == 0 ? 1 : 0;
    bool linked_seen = false;
    for (;;) {
        void *v = heapd_queue_pop(m, heapd_root_get(m, r));
        if (!v)
            break;
        unsigned g;
        ck_assert(value_ok(v, "key:00000005", &g));
        if (g == 1000) { /* the killed pusher's: linked, so it is in */
            ck_assert(!linked_seen && want == n);
            linked_seen = true;
            continue;
        }
        if (want < n) {
            ck_assert_uint_eq(g, want);
        } else {
            ck_assert_uint_eq(g, 2000 + want - n);
        }
        want++;
    }
    ck_assert_uint_eq(want, n + 50);
    if (strcmp(point, "queue.push.linked") == 0)
        ck_assert_msg(linked_seen, "the value the pusher linked is lost");
    /* the killed popper counted its take before the stop point
     * (heapd_queue_length) */
    ck_assert_uint_eq(heapd_queue_length(heapd_root_get(m, r)), 0);
    /* a pop_wait after a killed waiter still wakes */
    ck_assert_ptr_null(heapd_queue_pop_wait(m, heapd_root_get(m, r), 10));
    ck_assert_int_eq(errno, ETIMEDOUT);
    heapd_root_pop(m, 1);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}

static int closer_body(heapd_mutator *m, void *arg, int fd)
{
    (void)arg;
    send_u64(fd, 1);
    heapd_queue_close(m, global_of(m, "t.queue"));
    return 81; /* never stopped */
}

/* Note [Closing a queue]: a closer killed after it linked the marker,
 * the tail not moved on, closed the queue: what was pushed before drains
 * in order, then pops say ESHUTDOWN, and no push succeeds. */
START_TEST(queue_killed_closing)
{
    coll_start();
    int fd, go;
    pid_t k = fork_kid(closer_body, NULL, false, &fd, &go,
                       "queue.close.linked");
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = heapd_root_push(m, heapd_queue_new(m));
    ck_assert_int_eq(heapd_global_set(m, "t.queue", heapd_root_get(m, r)), 0);
    for (unsigned i = 0; i < 10; i++)
        ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r),
                                          make_value(m, "key:00000005", i)),
                         0);
    kid_go(go);
    ck_assert_uint_eq(recv_u64(fd, "started"), 1);
    kill_stopped(k, "queue.close.linked");
    close(fd);
    harness_collect(m);
    ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r),
                                      make_value(m, "key:00000005", 99)),
                     -ESHUTDOWN);
    for (unsigned i = 0; i < 10; i++) {
        unsigned g;
        ck_assert(value_ok(heapd_queue_pop(m, heapd_root_get(m, r)),
                           "key:00000005", &g) && g == i);
    }
    errno = 0;
    ck_assert_ptr_null(heapd_queue_pop_wait(m, heapd_root_get(m, r), 0));
    ck_assert_int_eq(errno, ESHUTDOWN);
    ck_assert_int_eq(heapd_queue_close(m, heapd_root_get(m, r)), 1);
    coll_finish(c, m, 1);
}
END_TEST

START_TEST(queue_killed_after_linking)
{
    queue_killed_at("queue.push.linked");
}
END_TEST

START_TEST(queue_killed_after_taking)
{
    queue_killed_at("queue.pop.taken");
}
END_TEST

START_TEST(queue_killed_while_waiting)
{
    queue_killed_at("queue.pop_wait.waiting");
}
END_TEST
#endif

/* ---- killed at any instant ---- */

#define STORM_KEYS 500
#define STORM_ROUNDS 6
#define STORM_AHEAD 16384 /* own keys a writer makes, at most */

/* A writer of the storm: replaces and deletes the shared keys, inserts
 * keys of its own (from BASE on, never deleted) and pushes each of them
 * to the queue too; after every own insert and push it reports the
 * number done.  It runs until it is killed. */
static int storm_body(heapd_mutator *m, void *arg, int fd)
{
    unsigned base = *(unsigned *)arg;
    size_t r = heapd_root_push(m, global_of(m, "t.map"));
    size_t q = heapd_root_push(m, global_of(m, "t.queue"));
    uint64_t x = base * 2654435761u + 1;
    for (unsigned n = 0;; n++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned k = (unsigned)(x % STORM_KEYS);
        int rc;
        if (x % 5 == 0) {
            char key[32];
            key_name(key, sizeof key, k);
            rc = heapd_map_delete_str(m, heapd_root_get(m, r), key,
                                      strlen(key));
        } else {
            rc = put_key(m, r, k, (unsigned)(x % 1000) + 2, 0);
        }
        if (rc < 0 && rc != -ENOENT)
            return 100;
        if (put_key(m, r, base + n, 1, 0) != 0)
            return 101;
        char key[32];
        key_name(key, sizeof key, base + n);
        void *v = make_value(m, key, 1);
        if (!v || heapd_queue_push(m, heapd_root_get(m, q), v) != 0)
            return 102;
        send_u64(fd, n + 1);
    }
}

static int storm_setup_body(heapd_mutator *m, void *arg, int fd)
{
    (void)arg;
    size_t r = heapd_root_push(m, heapd_map_new(m, HEAPD_MAP_STR, 0));
    if (heapd_global_set(m, "t.map", heapd_root_get(m, r)) != 0 ||
        heapd_global_set(m, "t.queue", heapd_queue_new(m)) != 0)
        return 110;
    for (unsigned i = 0; i < STORM_KEYS; i++)
        if (put_key(m, r, i, 1, 0) != 0)
            return 111;
    send_u64(fd, 1);
    return 0;
}

/* Writers SIGKILLed wherever they are, round after round: the test
 * process only forks and kills (it connects at the end), and kills a
 * writer as soon as it reports progress past a mark that moves each
 * round, so the kills fall at varied points of the operations.  Then
 * every own key a writer reported is in the map and in the queue, whole,
 * the map verifies, and every shared key present has a whole value. */
START_TEST(writers_killed_at_any_instant)
{
    coll_start();
    int fd, go;
    pid_t k = fork_kid(storm_setup_body, NULL, false, &fd, &go, NULL);
    kid_go(go);
    ck_assert_uint_eq(recv_u64(fd, "set up"), 1);
    expect_exit0(k, "the setup");
    close(fd);
    static unsigned base[STORM_ROUNDS][2];
    uint64_t acked[STORM_ROUNDS][2] = {{0}};
    for (unsigned round = 0; round < STORM_ROUNDS; round++) {
        pid_t w[2];
        int wfd[2], wgo[2];
        for (int i = 0; i < 2; i++) {
            base[round][i] = 1000000 * (2 * round + (unsigned)i + 1);
            w[i] = fork_kid(storm_body, &base[round][i], i == 1, &wfd[i],
                            &wgo[i], NULL);
        }
        for (int i = 0; i < 2; i++)
            kid_go(wgo[i]);
        for (int i = 0; i < 2; i++) {
            /* 37 + 53 * round operations, then at once the kill */
            uint64_t mark = 37 + 53 * round + 11 * (uint64_t)i;
            while (acked[round][i] < mark)
                acked[round][i] = recv_u64(wfd[i], "a writer's progress");
            ck_assert_int_eq(kill(w[i], SIGKILL), 0);
            int st = harness_wait_pid(w[i], HARNESS_WAIT_MS);
            ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                          "writer %d of round %u ended by itself (status "
                          "0x%x, exit %d)", i, round, st,
                          WIFEXITED(st) ? WEXITSTATUS(st) : -1);
            uint64_t a; /* what it reported before it died */
            while (read(wfd[i], &a, sizeof a) == sizeof a)
                acked[round][i] = a;
            close(wfd[i]);
        }
    }
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    harness_collect(m);
    size_t r = heapd_root_push(m, heapd_global_get(m, "t.map"));
    void *map = heapd_root_get(m, r);
    int n = heapd_map_verify(map);
    ck_assert_msg(n >= 0, "verify: %s", heapd_last_error());
    /* a writer runs ahead of what the test has read of its reports by a
     * pipe's worth at most (64 KiB: 8192 of them), then blocks */
    static unsigned char pushed[2 * STORM_ROUNDS + 1][STORM_AHEAD];
    memset(pushed, 0, sizeof pushed);
    for (unsigned round = 0; round < STORM_ROUNDS; round++)
        for (int i = 0; i < 2; i++)
            for (unsigned j = 0; j < acked[round][i]; j++) {
                char key[32];
                unsigned g;
                key_name(key, sizeof key, base[round][i] + j);
                ck_assert_msg(value_ok(heapd_map_get_str(m, map, key,
                                                         strlen(key)),
                                       key, &g) && g == 1,
                              "round %u writer %d: key %s lost", round, i,
                              key);
            }
    for (unsigned i = 0; i < STORM_KEYS; i++) {
        char key[32];
        key_name(key, sizeof key, i);
        void *v = heapd_map_get_str(m, map, key, strlen(key));
        ck_assert_msg(!v || value_ok(v, key, NULL), "key %s is torn", key);
    }
    /* the queue: every reported push is there once, in each writer's
     * order; a push the kill cut short may be there too */
    size_t q = heapd_root_push(m, heapd_global_get(m, "t.queue"));
    void *v;
    while ((v = heapd_queue_pop(m, heapd_root_get(m, q)))) {
        ck_assert(heapd_is_str(v));
        unsigned id = (unsigned)strtoul(heapd_str_data(v) + 4, NULL, 10);
        unsigned who = id / 1000000, j = id % 1000000;
        ck_assert_msg(who >= 1 && who <= 2 * STORM_ROUNDS &&
                          j < STORM_AHEAD,
                      "a foreign value in the queue: %s", heapd_str_data(v));
        char key[32];
        key_name(key, sizeof key, id);
        ck_assert_msg(value_ok(v, key, NULL), "a torn value in the queue");
        ck_assert_msg(!pushed[who][j], "value %u popped twice", id);
        ck_assert_msg(j == 0 || pushed[who][j - 1], "value %u popped "
                      "before %u", id, id - 1);
        pushed[who][j] = 1;
    }
    for (unsigned round = 0; round < STORM_ROUNDS; round++)
        for (int i = 0; i < 2; i++)
            for (unsigned j = 0; j < acked[round][i]; j++)
                ck_assert_msg(pushed[2 * round + (unsigned)i + 1][j],
                              "round %u writer %d: push %u lost", round, i,
                              j);
    heapd_root_pop(m, 2);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("collections_kill");
    TCase *t = tcase_create("storm");
    tcase_set_timeout(t, 900);
    tcase_add_test(t, writers_killed_at_any_instant);
    suite_add_tcase(s, t);
#ifndef NDEBUG /* the stop hook is in debug builds only */
    t = tcase_create("killed");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, map_killed_before_its_swap);
    tcase_add_test(t, add_killed_before_its_swap);
    tcase_add_test(t, get_or_put_killed_before_its_swap);
    tcase_add_test(t, map_killed_starting_a_resize);
    tcase_add_test(t, map_killed_with_a_claim);
    tcase_add_test(t, map_killed_after_a_freeze);
    tcase_add_test(t, map_killed_before_the_switch);
    tcase_add_test(t, queue_killed_after_linking);
    tcase_add_test(t, queue_killed_after_taking);
    tcase_add_test(t, queue_killed_while_waiting);
    tcase_add_test(t, queue_killed_closing);
    suite_add_tcase(s, t);
#endif
    return s;
}

int main(void)
{
    return check_main(suite());
}
