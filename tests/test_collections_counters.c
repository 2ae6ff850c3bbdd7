/* Counters and get-or-insert in the shared map (heapd_collections.h:
 * heapd_map_add, heapd_map_get_or_put), and atomics on an object's raw
 * bytes (Note [Atomics on raw bytes] in heapd.h), used by real processes
 * on a real heapd that runs its verifier after every cycle.
 *
 * Besides what each call does and refuses, the tests check the counts the
 * header promises: adds by four processes at once, one of them SIGKILLed
 * at a moment the test does not choose, sum to exactly what they
 * reported; of processes racing to insert one key with get-or-put,
 * exactly one inserts and every one gets its value; a read-modify-write
 * of an object value by heapd_map_replace loses no update; fetch-and-adds
 * on an object's raw bytes lose nothing while cycles run.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll_util.h"
#include "harness.h"
#include "heapd.h"
#include "heapd_collections.h"
#include "check_main.h"

/* Adds per process in the concurrent tests: the figure users were
 * promised (four processes, a million each). */
#define ADDS 1000000u
#define PROCS 4

static int64_t counter_of(heapd_mutator *m, void *map, const char *key)
{
    size_t len = 0;
    const void *v = heapd_map_get_bytes(m, map, key, strlen(key), &len);
    ck_assert_msg(v != NULL, "key %s: %s", key, strerror(errno));
    ck_assert_uint_eq(len, sizeof(int64_t));
    int64_t x;
    memcpy(&x, v, sizeof x);
    return x;
}

/* ---- one process ---- */

START_TEST(counters)
{
    coll_start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = shared_map(m, 0);
    int64_t x = -1;
    /* made by the first add, then added to */
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, r), "hits", 4, 5,
                                       &x), 0);
    ck_assert_int_eq(x, 5);
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, r), "hits", 4,
                                       -7, &x), 1);
    ck_assert_int_eq(x, -2);
    ck_assert_int_eq(counter_of(m, heapd_root_get(m, r), "hits"), -2);
    ck_assert_uint_eq(heapd_map_count(heapd_root_get(m, r)), 1);
    /* a delta of 0 reads it */
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, r), "hits", 4, 0,
                                       &x), 1);
    ck_assert_int_eq(x, -2);
    /* on a key longer than a bucket keeps inline, by its string too */
    const char *longk = "a key of more than twenty bytes, made a string";
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, r), longk,
                                       strlen(longk), 1, NULL), 0);
    void *ks = heapd_str_new(m, longk, strlen(longk));
    ck_assert_ptr_nonnull(ks);
    ck_assert_int_eq(heapd_map_add(m, heapd_root_get(m, r), ks, 41, &x), 1);
    ck_assert_int_eq(x, 42);
    /* 8 bytes put inline are a counter */
    int64_t seven = 7;
    ck_assert_int_eq(heapd_map_put_bytes(m, heapd_root_get(m, r), "put", 3,
                                         &seven, sizeof seven, 0), 0);
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, r), "put", 3, 3,
                                       &x), 1);
    ck_assert_int_eq(x, 10);
    /* the sum that would overflow changes nothing */
    int64_t big = INT64_MAX;
    ck_assert_int_eq(heapd_map_put_bytes(m, heapd_root_get(m, r), "big", 3,
                                         &big, sizeof big, 0), 0);
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, r), "big", 3, 1,
                                       &x), -EOVERFLOW);
    ck_assert_str_eq(heapd_last_error(), "heapd_map_add: "
                     "9223372036854775807 + 1 overflows the counter "
                     "(int64_t)");
    ck_assert_int_eq(counter_of(m, heapd_root_get(m, r), "big"), INT64_MAX);
    /* other values are not counters, and stay as they are */
    ck_assert_int_eq(heapd_map_put_bytes(m, heapd_root_get(m, r), "five", 4,
                                         "12345", 5, 0), 0);
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, r), "five", 4, 1,
                                       &x), -EINVAL);
    ck_assert_str_eq(heapd_last_error(), "heapd_map_add: the key's value "
                     "is 5 inline bytes, not a counter (8)");
    void *v = make_value(m, "obj", 1);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(heapd_map_put_str(m, heapd_root_get(m, r), "obj", 3, v,
                                       0), 0);
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, r), "obj", 3, 1,
                                       &x), -EINVAL);
    ck_assert_ptr_nonnull(strstr(heapd_last_error(), "an object, not a "
                                 "counter"));
    ck_assert(value_ok(heapd_map_get_str(m, heapd_root_get(m, r), "obj", 3),
                       "obj", NULL));
    /* misuse */
    ck_assert_int_eq(heapd_map_add_str(m, ks, "k", 1, 1, &x), -EINVAL);
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, r), NULL, 1, 1,
                                       &x), -EINVAL);
    ck_assert_int_eq(heapd_map_add(m, heapd_root_get(m, r), NULL, 1, &x),
                     -EINVAL);
    void *bm = heapd_map_new(m, HEAPD_MAP_BYTES, 0);
    ck_assert_ptr_nonnull(bm);
    ck_assert_int_eq(heapd_map_add_str(m, bm, "k", 1, 1, &x), -EINVAL);
    ck_assert_int_eq(heapd_map_add(m, bm, ks, 1, &x), 0);
    ck_assert_int_eq(heapd_map_add(m, bm, ks, 2, &x), 1);
    ck_assert_int_eq(x, 3);
    ck_assert_int_eq(heapd_map_verify(bm), 1);
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)), 6);
    harness_collect(m);
    ck_assert_int_eq(counter_of(m, heapd_root_get(m, r), "hits"), -2);
    ck_assert_int_eq(counter_of(m, heapd_root_get(m, r), longk), 42);
    coll_finish(c, m, 1);
}
END_TEST

START_TEST(get_or_put)
{
    coll_start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = shared_map(m, 0);
    bool ins = false;
    void *v1 = make_value(m, "k1", 1);
    ck_assert_ptr_nonnull(v1);
    void *got = heapd_map_get_or_put_str(m, heapd_root_get(m, r), "k1", 2,
                                         v1, &ins);
    ck_assert_ptr_eq(got, v1);
    ck_assert(ins);
    void *v2 = make_value(m, "k1", 2);
    ck_assert_ptr_nonnull(v2);
    got = heapd_map_get_or_put_str(m, heapd_root_get(m, r), "k1", 2, v2,
                                   &ins);
    ck_assert(!ins);
    unsigned g = 0;
    ck_assert(value_ok(got, "k1", &g));
    ck_assert_uint_eq(g, 1);
    /* by a key object, and INSERTED may be NULL */
    void *k = heapd_str_new(m, "k1", 2);
    ck_assert_ptr_nonnull(k);
    got = heapd_map_get_or_put(m, heapd_root_get(m, r), k, v2, NULL);
    ck_assert(value_ok(got, "k1", &g) && g == 1);
    void *k2 = heapd_str_new(m, "k2", 2);
    void *v3 = make_value(m, "k2", 3);
    ck_assert_ptr_nonnull(k2);
    ck_assert_ptr_nonnull(v3);
    got = heapd_map_get_or_put(m, heapd_root_get(m, r), k2, v3, &ins);
    ck_assert(ins && got == v3);
    ck_assert_uint_eq(heapd_map_count(heapd_root_get(m, r)), 2);
    /* an inline value is not an object to return */
    ck_assert_int_eq(heapd_map_put_bytes(m, heapd_root_get(m, r), "inl", 3,
                                         "abc", 3, 0), 0);
    errno = 0;
    ck_assert_ptr_null(heapd_map_get_or_put_str(m, heapd_root_get(m, r),
                                                "inl", 3, v2, &ins));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_nonnull(strstr(heapd_last_error(), "heapd_map_get_bytes "
                                 "reads it"));
    /* misuse */
    errno = 0;
    ck_assert_ptr_null(heapd_map_get_or_put_str(m, heapd_root_get(m, r),
                                                "k9", 2, NULL, &ins));
    ck_assert_int_eq(errno, EINVAL);
    errno = 0;
    ck_assert_ptr_null(heapd_map_get_or_put(m, v2, k, v2, &ins));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_uint_eq(heapd_map_count(heapd_root_get(m, r)), 3);
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)), 3);
    coll_finish(c, m, 1);
}
END_TEST

/* ---- processes at once ---- */

/* PROCS kids running BODY with ARGS[i] (kid YOUNG young), their pipes. */
struct kids {
    pid_t k[PROCS];
    int rfd[PROCS], go[PROCS];
};

static void kids_fork(struct kids *ks,
                      int (*body)(heapd_mutator *m, void *arg, int fd),
                      void *const args[PROCS], int young)
{
    for (int i = 0; i < PROCS; i++)
        ks->k[i] = fork_kid(body, args[i], i == young, &ks->rfd[i],
                            &ks->go[i], NULL);
}

/* Let them go, and wait until each said it started. */
static void kids_go(struct kids *ks)
{
    for (int i = 0; i < PROCS; i++)
        kid_go(ks->go[i]);
    for (int i = 0; i < PROCS; i++)
        ck_assert_uint_eq(recv_u64(ks->rfd[i], "started"), 1);
}

/* What an adder tells the test through memory shared before the fork:
 * adds done, and whether one is under way (set before the call, cleared
 * with the count after it). */
struct progress {
    _Atomic uint64_t done;
    _Atomic uint32_t pending;
};

struct adder {
    struct progress *p;
    unsigned n;
};

/* Add 1 to the counter "words" N times, then report the count. */
static int add_body(heapd_mutator *m, void *arg, int fd)
{
    const struct adder *a = arg;
    void *map = global_of(m, "t.map");
    size_t r = heapd_root_push(m, map);
    send_u64(fd, 1);
    for (unsigned i = 0; i < a->n; i++) {
        atomic_store(&a->p->pending, 1);
        int rc = heapd_map_add_str(m, heapd_root_get(m, r), "words", 5, 1,
                                   NULL);
        if (rc < 0)
            return 40;
        atomic_store(&a->p->done, i + 1u);
        atomic_store(&a->p->pending, 0);
    }
    heapd_root_pop(m, 1);
    send_u64(fd, a->n);
    return 0;
}

/* PROCS processes add 1 to one counter ADDS times each while cycles run;
 * with KILL, the first is SIGKILLed once it has done some adds, at a
 * moment the test does not choose, and the counter is what the others
 * did and what it reported, plus the add it may have had under way. */
static void adders(bool kill_one)
{
    coll_start();
    struct progress *p = mmap(NULL, PROCS * sizeof *p,
                              PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(p != MAP_FAILED);
    struct adder a[PROCS];
    void *args[PROCS];
    for (int i = 0; i < PROCS; i++) {
        a[i] = (struct adder){.p = &p[i], .n = ADDS};
        args[i] = &a[i];
    }
    struct kids ks;
    kids_fork(&ks, add_body, args, PROCS - 1);
    pid_t *k = ks.k;
    int *rfd = ks.rfd;
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = shared_map(m, 0);
    kids_go(&ks);
    /* cycles while they add: the counter's buckets are garbage at once */
    uint64_t at = 1000 + (uint64_t)getpid() % (ADDS / 4);
    while (atomic_load(&p[0].done) < at) {
        harness_collect(m);
        int st;
        ck_assert_int_eq(waitpid(k[0], &st, WNOHANG), 0);
    }
    uint64_t dead_done = 0, dead_pending = 0, total = 0;
    int first = 0;
    if (kill_one) {
        ck_assert_int_eq(kill(k[0], SIGKILL), 0);
        int st = harness_wait_pid(k[0], HARNESS_WAIT_MS);
        ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        dead_done = atomic_load(&p[0].done);
        dead_pending = atomic_load(&p[0].pending);
        close(rfd[0]);
        first = 1;
    }
    harness_collect(m);
    for (int i = first; i < PROCS; i++) {
        total += recv_u64(rfd[i], "adds done");
        expect_exit0(k[i], "an adder");
        close(rfd[i]);
    }
    int64_t got = counter_of(m, heapd_root_get(m, r), "words");
    if (kill_one) {
        ck_assert_msg((uint64_t)got >= total + dead_done &&
                          (uint64_t)got <= total + dead_done + dead_pending,
                      "the counter is %" PRId64 ": the survivors added %"
                      PRIu64 ", the killed one reported %" PRIu64
                      " with %" PRIu64 " under way", got, total, dead_done,
                      dead_pending);
    } else {
        ck_assert_uint_eq(total, (uint64_t)PROCS * ADDS);
        ck_assert_int_eq(got, (int64_t)PROCS * ADDS);
    }
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)), 1);
    coll_finish(c, m, 1);
    munmap(p, PROCS * sizeof *p);
}

START_TEST(counter_added_by_four_processes)
{
    adders(false);
}
END_TEST

START_TEST(counter_with_an_adder_killed)
{
    adders(true);
}
END_TEST

enum { RACE_KEYS = 2000 };

/* get_or_put_str every key of [0, RACE_KEYS) with a value of generation
 * ID; reports how many it inserted, then the generation it got for each
 * key. */
static int race_body(heapd_mutator *m, void *arg, int fd)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    size_t r = heapd_root_push(m, global_of(m, "t.map"));
    send_u64(fd, 1);
    uint64_t won = 0;
    static unsigned gens[RACE_KEYS];
    for (unsigned i = 0; i < RACE_KEYS; i++) {
        char key[32];
        key_name(key, sizeof key, i);
        void *v = make_value(m, key, id);
        if (!v)
            return 50;
        bool ins = false;
        void *got = heapd_map_get_or_put_str(m, heapd_root_get(m, r), key,
                                             strlen(key), v, &ins);
        if (!got || !value_ok(got, key, &gens[i]))
            return 51;
        if (ins != (gens[i] == id))
            return 52;
        won += ins;
    }
    send_u64(fd, won);
    for (unsigned i = 0; i < RACE_KEYS; i++)
        send_u64(fd, gens[i]);
    heapd_root_pop(m, 1);
    return 0;
}

/* PROCS processes get-or-put the same keys: each key inserted once, and
 * every process got the one value that was inserted. */
START_TEST(get_or_put_race)
{
    coll_start();
    void *args[PROCS];
    for (int i = 0; i < PROCS; i++)
        args[i] = (void *)(uintptr_t)(i + 1);
    struct kids ks;
    kids_fork(&ks, race_body, args, 0);
    pid_t *k = ks.k;
    int *rfd = ks.rfd;
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = shared_map(m, 0);
    kids_go(&ks);
    uint64_t won = 0;
    static uint64_t first[RACE_KEYS];
    for (int i = 0; i < PROCS; i++) {
        won += recv_u64(rfd[i], "inserted");
        for (unsigned j = 0; j < RACE_KEYS; j++) {
            uint64_t g = recv_u64(rfd[i], "generation");
            if (i == 0)
                first[j] = g;
            ck_assert_msg(g == first[j], "key %u: process %d got generation "
                          "%" PRIu64 ", process 1 %" PRIu64, j, i + 1, g,
                          first[j]);
        }
        expect_exit0(k[i], "a racer");
        close(rfd[i]);
    }
    ck_assert_uint_eq(won, RACE_KEYS);
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)), RACE_KEYS);
    coll_finish(c, m, 1);
}
END_TEST

enum { RMW = 20000 };

/* Add 1 to the number in the value of key "acc" RMW times, each as a
 * read (heapd_map_get_str), a new value, and heapd_map_replace of the one
 * read, again if another process replaced it first. */
static int rmw_body(heapd_mutator *m, void *arg, int fd)
{
    (void)arg;
    void *map = global_of(m, "t.map");
    void *key = heapd_str_new(m, "acc", 3);
    if (!key)
        return 60;
    send_u64(fd, 1);
    uint64_t retries = 0;
    for (unsigned i = 0; i < RMW; i++) {
        for (;;) {
            /* C locals hold MAP, KEY and OLD across the allocation (Note
             * [C locals are roots]) */
            void *old = heapd_map_get_str(m, map, "acc", 3);
            if (!old)
                return 61;
            int64_t n;
            memcpy(&n, heapd_bytes(old), sizeof n);
            void *nv = heapd_alloc(m, 0, sizeof n);
            if (!nv)
                return 62;
            n++;
            memcpy(heapd_bytes(nv), &n, sizeof n);
            int rc = heapd_map_replace(m, map, key, old, nv);
            if (rc == 0)
                break;
            if (rc != -EAGAIN)
                return 63;
            retries++;
        }
    }
    send_u64(fd, retries);
    return 0;
}

/* heapd_map_replace composes into a read-modify-write of an object
 * value: PROCS processes incrementing one key's value that way, with
 * get-or-put making it, lose no increment. */
START_TEST(replace_composes_a_read_modify_write)
{
    coll_start();
    void *const args[PROCS] = {NULL};
    struct kids ks;
    kids_fork(&ks, rmw_body, args, 1);
    pid_t *k = ks.k;
    int *rfd = ks.rfd;
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = shared_map(m, 0);
    void *zero = heapd_alloc(m, 0, sizeof(int64_t));
    ck_assert_ptr_nonnull(zero);
    bool ins = false;
    ck_assert_ptr_eq(heapd_map_get_or_put_str(m, heapd_root_get(m, r),
                                              "acc", 3, zero, &ins),
                     zero);
    ck_assert(ins);
    kids_go(&ks);
    harness_collect(m);
    uint64_t retries = 0;
    for (int i = 0; i < PROCS; i++) {
        retries += recv_u64(rfd[i], "retries");
        expect_exit0(k[i], "an incrementer");
        close(rfd[i]);
    }
    void *v = heapd_map_get_str(m, heapd_root_get(m, r), "acc", 3);
    ck_assert_ptr_nonnull(v);
    int64_t n;
    memcpy(&n, heapd_bytes(v), sizeof n);
    ck_assert_msg(n == (int64_t)PROCS * RMW, "the value is %" PRId64
                  " after %d increments (%" PRIu64 " retries)", n,
                  PROCS * RMW, retries);
    coll_finish(c, m, 1);
}
END_TEST

/* Fetch-and-add 1 to the 8 raw bytes of global "t.cell" N times. */
static int atomic_body(heapd_mutator *m, void *arg, int fd)
{
    unsigned n = (unsigned)(uintptr_t)arg;
    uint64_t *cell = heapd_bytes(global_of(m, "t.cell"));
    send_u64(fd, 1);
    for (unsigned i = 0; i < n; i++) {
        __atomic_fetch_add(cell, 1, __ATOMIC_RELAXED);
        if (i % 4096 == 0)
            heapd_safepoint(m);
    }
    send_u64(fd, n);
    return 0;
}

/* Note [Atomics on raw bytes]: PROCS processes fetch-and-add one word
 * of an object's raw bytes while cycles run, and lose nothing. */
START_TEST(atomics_on_raw_bytes)
{
    coll_start();
    void *args[PROCS];
    for (int i = 0; i < PROCS; i++)
        args[i] = (void *)(uintptr_t)ADDS;
    struct kids ks;
    kids_fork(&ks, atomic_body, args, 0);
    pid_t *k = ks.k;
    int *rfd = ks.rfd;
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    void *cell = heapd_alloc(m, 0, sizeof(uint64_t));
    ck_assert_ptr_nonnull(cell);
    ck_assert_int_eq(heapd_global_set(m, "t.cell", cell), 0);
    kids_go(&ks);
    harness_collect(m);
    harness_collect(m);
    uint64_t total = 0;
    for (int i = 0; i < PROCS; i++) {
        total += recv_u64(rfd[i], "adds done");
        expect_exit0(k[i], "an adder");
        close(rfd[i]);
    }
    harness_collect(m);
    cell = heapd_global_get(m, "t.cell");
    ck_assert_uint_eq(total, (uint64_t)PROCS * ADDS);
    ck_assert_uint_eq(__atomic_load_n((uint64_t *)heapd_bytes(cell),
                                      __ATOMIC_RELAXED),
                      (uint64_t)PROCS * ADDS);
    coll_finish(c, m, 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("collections_counters");
    TCase *t = tcase_create("use");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, counters);
    tcase_add_test(t, get_or_put);
    suite_add_tcase(s, t);
    t = tcase_create("concurrent");
    tcase_set_timeout(t, 900);
    tcase_add_test(t, counter_added_by_four_processes);
    tcase_add_test(t, counter_with_an_adder_killed);
    tcase_add_test(t, get_or_put_race);
    tcase_add_test(t, replace_composes_a_read_modify_write);
    tcase_add_test(t, atomics_on_raw_bytes);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
