/* Minor collections in slices (Note [Minor collections in slices] in
 * client/minor.c), against a real heapd with the verifier on, which fills
 * a freed block with poison: each test cuts a collection into as many
 * pauses as it has chunks of work (HEAPD_YOUNG_SLICE=1, the debug builds'
 * hook) and, between two of them, does what the program may do while a
 * young mutator marks:
 *   - moves the only reference to a young object from a field into a C
 *     local (the young barrier keeps it);
 *   - links a new object from one the marking has already scanned (it was
 *     allocated black);
 *   - stores an object whose promotion is under way into a shared one or
 *     a global, or blocks (the promotions end first: nothing shared ever
 *     reaches a young object; heapd_global_set blocks, for its call);
 *   - lets a major cycle take its stack handshake (the preparatory push
 *     gives the collection up, and the next one keeps everything).
 * Each fails if its mechanism is taken out (checked by hand).
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "harness.h"
#include "heapd.h"
#include "check_main.h"

#include "young.h"
#include "young_util.h"

/* The chain a collection marks for many slices: CHAIN young nodes, ids 1
 * to CHAIN, under a root node (id 0, two fields: the chain's head and a
 * free one); the last node's field holds the target (id TARGET). */
#define CHAIN 4000
#define TARGET 900001
#define LATE 900002

/* Garbage of 56 bytes until COND holds of M's statistics, within BOUND
 * allocations; fails the test naming WHAT otherwise. */
#define ALLOC_UNTIL(m, cond, bound, what)                                   \
    do {                                                                    \
        for (uint64_t k_ = 0;; k_++) {                                      \
            heapd_young_stats s_ = young_stats(m);                          \
            if (cond)                                                       \
                break;                                                      \
            ck_assert_msg(k_ < (bound), "%s: not after %llu allocations",   \
                          what, (unsigned long long)k_);                    \
            ck_assert_ptr_nonnull(heapd_alloc(m, 0, 48));                   \
        }                                                                   \
    } while (0)

/* Allocations of 56 bytes within which a collection starts, or ends once
 * started: the budget's, twice (Note [Minor collections in slices]: one
 * still going after a whole budget ends in one pause). */
static uint64_t bound_of(heapd_mutator *m)
{
    return 2 * (young_stats(m).young_bytes / 56) + 64;
}

/* Allocate until M's next collection has ended: afterwards none is
 * under way. */
static void until_ended(heapd_mutator *m)
{
    heapd_young_stats a = young_stats(m);
    ALLOC_UNTIL(m, s_.minor_collections > a.minor_collections, bound_of(m),
                "a minor collection to end");
}

/* Allocate until M's next collection has started (its first pause) and
 * is still under way; none may be under way before. */
static void until_started(heapd_mutator *m)
{
    heapd_young_stats a = young_stats(m);
    ALLOC_UNTIL(m, s_.minor_pauses > a.minor_pauses, bound_of(m),
                "a minor collection to start");
    ck_assert_msg(young_stats(m).minor_collections == a.minor_collections,
                  "the collection ended in its first pause: "
                  "HEAPD_YOUNG_SLICE is not in effect");
}


/* The chain under root slot R, built in a frame of its own: no word of
 * the caller's stack holds one of its nodes. */
static __attribute__((noinline)) void build_chain(heapd_mutator *m, size_t r)
{
    void **root = new_node(m, 2, 0);
    ck_assert_ptr_nonnull(root);
    heapd_root_set(m, r, root);
    void **prev = root;
    for (uint64_t i = 1; i <= CHAIN; i++) {
        void **n = new_node(m, 1, i);
        ck_assert_ptr_nonnull(n);
        heapd_write(m, prev, &prev[0], n);
        prev = n;
    }
    void **t = new_node(m, 1, TARGET);
    ck_assert_ptr_nonnull(t);
    heapd_write(m, prev, &prev[0], t);
}

/* The chain under a new root slot, returned, and a collection since
 * (which aged it once): none is under way, and none saw the chain's
 * nodes on the stack. */
static size_t settled_chain(heapd_mutator *m)
{
    size_t r = heapd_root_push(m, NULL);
    ck_assert_uint_ne(r, (size_t)-1);
    build_chain(m, r);
    harness_wipe_stack();
    until_ended(m);
    return r;
}

static void **chain_node(heapd_mutator *m, size_t r, uint64_t id)
{
    void **p = heapd_root_get(m, r);
    for (uint64_t i = 0; i < id; i++)
        p = field(p, 0);
    return p;
}

/* NULL if the chain under R is whole, the node of id END at its end (0:
 * none), else what is wrong. */
static const char *chain_broken(heapd_mutator *m, size_t r, uint64_t end)
{
    void *p = heapd_root_get(m, r);
    if (!node_ok(p, 2, 0))
        return "the root node is damaged";
    for (uint64_t i = 1; i <= CHAIN; i++) {
        p = field(p, 0);
        if (!node_ok(p, 1, i))
            return "a node of the chain is damaged";
    }
    p = field(p, 0);
    if (end ? !node_ok(p, 1, end) : p != NULL)
        return "the chain's end is wrong";
    return NULL;
}

/* HELPER: a deep blocked helper first (NULL: none). */
static heapd_mutator *start(heapd_client **c, unsigned age,
                            heapd_mutator **helper)
{
    /* read once, at the first collection of this test's process */
    setenv("HEAPD_YOUNG_SLICE", "1", 1);
    harness_start_with(&D, "young_size = 256K\n");
    *c = connect_plain(0);
    if (helper)
        *helper = deep_blocked_helper(*c);
    return attach_young(*c, 0, age);
}

/* The young barrier: while the chain is marked, the program reads the
 * target into a C local and cuts it off the chain; the collection, which
 * had not reached it and will not find it on the chain, keeps it. */
START_TEST(a_reference_moved_into_a_local_while_marking_survives)
{
    heapd_client *c;
    heapd_mutator *m = start(&c, LAYOUT_YOUNG_AGE_MAX, NULL);
    size_t r = settled_chain(m);
    until_started(m);
    void **last = chain_node(m, r, CHAIN);
    void *volatile t = field(last, 0);
    heapd_write(m, last, &last[0], NULL);
    until_ended(m);
    ck_assert_msg(node_ok(t, 1, TARGET) && heapd_is_young(m, t),
                  "the object a C local took from a field while the young "
                  "generation marked was freed");
    const char *why = chain_broken(m, r, 0);
    ck_assert_msg(!why, "%s", why);
    young_finish(c, m);
}
END_TEST

/* Allocate black: the root node is scanned in the first pause; a new
 * object linked only from it afterwards is kept. */
START_TEST(an_object_allocated_while_marking_survives)
{
    heapd_client *c;
    heapd_mutator *m = start(&c, LAYOUT_YOUNG_AGE_MAX, NULL);
    size_t r = settled_chain(m);
    until_started(m);
    void **root = heapd_root_get(m, r);
    void **late = new_node(m, 1, LATE);
    ck_assert_ptr_nonnull(late);
    heapd_write(m, root, &root[1], late);
    late = NULL;
    harness_wipe_stack();
    until_ended(m);
    ck_assert_msg(node_ok(field(heapd_root_get(m, r), 1), 1, LATE),
                  "an object allocated while the young generation marked, "
                  "reachable from a scanned one, was freed");
    const char *why = chain_broken(m, r, TARGET);
    ck_assert_msg(!why, "%s", why);
    young_finish(c, m);
}
END_TEST

/* How many nodes of the chain under R (the target included) are young. */
static uint64_t young_in_chain(heapd_mutator *m, size_t r)
{
    uint64_t n = 0;
    for (void *p = heapd_root_get(m, r); p; p = field(p, 0))
        n += heapd_is_young(m, p);
    return n;
}

/* With young_age 2, the chain's second collection promotes it: its first
 * pause promotes the root node, its later ones the rest.  Between them,
 * ACT makes the root node reachable to others (from HOLDER, a shared
 * object made before, so that no allocation ends the promotions first),
 * or lets heapd read the mutator's roots; every node must be promoted by
 * then. */
static void promotion_ends_before(void (*act)(heapd_mutator *, void *,
                                              void **),
                                  const char *what)
{
    heapd_client *c;
    heapd_mutator *m = start(&c, 2, NULL);
    size_t r = settled_chain(m);
    size_t h = heapd_root_push(m, heapd_alloc_shared(m, 1, 0));
    ck_assert_ptr_nonnull(heapd_root_get(m, h));
    /* the first collection started after the root node was rooted: it
     * aged it */
    ck_assert_uint_eq(young_in_chain(m, r), CHAIN + 2);
    until_started(m);
    uint64_t before = young_in_chain(m, r);
    ck_assert_msg(before > 0 && !heapd_is_young(m, heapd_root_get(m, r)),
                  "the first pause did not leave a promotion under way "
                  "(%llu young)", (unsigned long long)before);
    act(m, heapd_root_get(m, r), heapd_root_get(m, h));
    ck_assert_msg(young_in_chain(m, r) == 0, "%s: %llu nodes of the chain "
                  "were still young after it", what,
                  (unsigned long long)young_in_chain(m, r));
    until_ended(m);
    const char *why = chain_broken(m, r, TARGET);
    ck_assert_msg(!why, "%s", why);
    young_finish(c, m);
}

/* The root node, itself promoted (shared), is what is stored: the store
 * must end the promotions though it stores no young object (Note [Inline
 * write fast path] in heapd.h: the write mode while they are under
 * way). */
static void store_into_shared(heapd_mutator *m, void *root, void **holder)
{
    heapd_write(m, holder, &holder[0], root);
}

static void set_global(heapd_mutator *m, void *root, void **holder)
{
    (void)holder;
    ck_assert_int_eq(heapd_global_set(m, "slices", root), 0);
}

static void block(heapd_mutator *m, void *root, void **holder)
{
    (void)root;
    (void)holder;
    heapd_blocking_enter(m);
    heapd_blocking_leave(m);
}

/* A major cycle asked for by another thread, which this mutator runs
 * through at heapd_safepoint: heapd may take its roots at the
 * snapshot (Note [Stack marking handshake]). */
struct cycle_ask {
    heapd_client *c;
    _Atomic bool done;
    int rc;
};

static void *ask_a_cycle(void *arg)
{
    struct cycle_ask *q = arg;
    q->rc = heapd_request_collect(q->c, HEAPD_COLLECT_WAIT);
    atomic_store(&q->done, true);
    return NULL;
}

static void run_through_a_cycle(heapd_mutator *m, void *root,
                                void **holder)
{
    (void)root;
    (void)holder;
    struct cycle_ask q = {.c = harness_control(&D)};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, ask_a_cycle, &q), 0);
    int64_t end = harness_now_ms() + HARNESS_WAIT_MS;
    while (!atomic_load(&q.done)) {
        ck_assert_msg(harness_now_ms() < end, "the cycle asked for did not "
                      "end in %d ms", HARNESS_WAIT_MS);
        heapd_safepoint(m);
    }
    pthread_join(t, NULL);
    ck_assert_int_eq(q.rc, 0);
    heapd_disconnect(q.c);
}

START_TEST(a_store_into_a_shared_object_ends_the_promotions_under_way)
{
    promotion_ends_before(store_into_shared, "heapd_write into a shared "
                          "object");
}
END_TEST

START_TEST(a_global_set_ends_the_promotions_under_way)
{
    promotion_ends_before(set_global, "heapd_global_set");
}
END_TEST

START_TEST(a_blocking_region_ends_the_promotions_under_way)
{
    promotion_ends_before(block, "heapd_blocking_enter");
}
END_TEST

START_TEST(a_snapshot_ends_the_promotions_under_way)
{
    promotion_ends_before(run_through_a_cycle, "a major cycle's snapshot");
}
END_TEST

/* Allocate black, whoever freed the block: heapd's sweep frees promoted
 * objects of the young mutator's current segment while its collection
 * marks; the young objects allocated into those blocks then, which only
 * root slots pushed since hold, are kept. */
#define VICTIMS 16
#define VICTIM_BYTES 200 /* a class nothing else here allocates */

struct victims {
    const heapd_client *c;
    uintptr_t obj[VICTIMS];     /* HARNESS_HIDE: no C local keeps them */
};

static bool victims_freed(void *arg, char *seen, size_t len)
{
    struct victims *v = arg;
    int n = 0;
    for (int i = 0; i < VICTIMS; i++)
        n += mark_of(v->c, HARNESS_UNHIDE(v->obj[i])) == 0;
    snprintf(seen, len, "%d of %d freed", n, VICTIMS);
    return n == VICTIMS;
}

/* The victims fill the start of a segment of their class, promoted
 * (published) and then dropped; in a frame of its own. */
static __attribute__((noinline)) void make_victims(heapd_client *c,
                                                   heapd_mutator *m,
                                                   struct victims *v)
{
    void **all = heapd_alloc(m, VICTIMS, 0);
    ck_assert_ptr_nonnull(all);
    for (int i = 0; i < VICTIMS; i++) {
        void *o = heapd_alloc(m, 0, VICTIM_BYTES);
        ck_assert_ptr_nonnull(o);
        heapd_write(m, all, &all[i], o);
        v->obj[i] = HARNESS_HIDE(o);
    }
    ck_assert_int_eq(heapd_global_set(m, "victims", all), 0);
    ck_assert(promoted(c, m, HARNESS_UNHIDE(v->obj[0])));
    ck_assert_int_eq(heapd_global_set(m, "victims", NULL), 0);
}

START_TEST(a_block_heapd_frees_while_marking_is_allocated_black)
{
    heapd_client *c;
    heapd_mutator *m = start(&c, LAYOUT_YOUNG_AGE_MAX, NULL);
    size_t r = settled_chain(m);
    struct victims v = {.c = c};
    make_victims(c, m, &v);
    harness_wipe_stack();
    /* a whole collection sweeps the segment: its cursor goes back to its
     * first block; then the next one marks the chain */
    until_started(m);
    until_ended(m);
    until_started(m);
    uint64_t minors = young_stats(m).minor_collections;
    harness_wipe_stack();
    heapd_blocking_enter(m);
    ck_assert_int_eq(heapd_request_collect(c, HEAPD_COLLECT_WAIT), 0);
    harness_wait_until(victims_freed, &v, "heapd's sweep frees the victims");
    heapd_blocking_leave(m);
    size_t first = (size_t)-1;
    void *late[VICTIMS];
    for (int i = 0; i < VICTIMS; i++) {
        late[i] = heapd_alloc(m, 0, VICTIM_BYTES);
        ck_assert_ptr_nonnull(late[i]);
        memset(heapd_bytes(late[i]), 0x5a, VICTIM_BYTES);
        size_t s = heapd_root_push(m, late[i]);
        ck_assert_uint_ne(s, (size_t)-1);
        if (first == (size_t)-1)
            first = s;
    }
    ck_assert_msg(late[0] == HARNESS_UNHIDE(v.obj[0]), "the first new object is not in "
                  "the first block heapd freed");
    ck_assert_msg(young_stats(m).minor_collections == minors,
                  "the collection ended before the new objects were made");
    for (int i = 0; i < VICTIMS; i++)
        late[i] = NULL;
    harness_wipe_stack();
    until_ended(m);
    for (int i = 0; i < VICTIMS; i++) {
        void *o = heapd_root_get(m, first + (size_t)i);
        const uint8_t *p = heapd_bytes(o);
        ck_assert_msg(still_young(c, m, o) && p[0] == 0x5a &&
                          p[VICTIM_BYTES - 1] == 0x5a,
                      "object %d, allocated while the young generation "
                      "marked into a block heapd had freed since it began, "
                      "was freed (mark %d)", i, mark_of(c, o));
    }
    const char *why = chain_broken(m, r, TARGET);
    ck_assert_msg(!why, "%s", why);
    young_finish(c, m);
}
END_TEST

/* A major cycle's stack handshake while the chain is marked: the
 * preparatory push, if the mutator takes it (heapd may take it first:
 * Note [The preparatory push]), gives the collection up; the chain, the
 * target a C local took and an object allocated since live through the
 * next ones. */
#define ROUNDS 8

/* Ask heapd for a cycle and take safepoints until its snapshot's stop is
 * past (the epoch moved): M, running, took its stack handshake on the
 * way out, unless heapd took it first. */
static void major_snapshot(heapd_mutator *m, heapd_client *c)
{
    uint32_t epoch = atomic_load(&c->ctl->epoch);
    ck_assert_int_eq(heapd_collect(m, 0), 0);
    int64_t end = harness_now_ms() + HARNESS_WAIT_MS;
    while (atomic_load(&c->ctl->epoch) == epoch) {
        ck_assert_msg(harness_now_ms() < end, "no snapshot in %d ms",
                      HARNESS_WAIT_MS);
        heapd_safepoint(m);
    }
}

START_TEST(a_major_cycle_while_marking_keeps_everything)
{
    heapd_client *c;
    heapd_mutator *h;
    heapd_mutator *m = start(&c, LAYOUT_YOUNG_AGE_MAX, &h);
    size_t r = settled_chain(m);
    for (uint64_t round = 0, end = TARGET; round < ROUNDS; round++) {
        until_started(m);
        uint64_t minors = young_stats(m).minor_collections;
        major_snapshot(m, c);
        ck_assert_uint_eq(young_stats(m).minor_collections, minors);
        /* the chain's end moves to the root node's free field, through a
         * C local; a node allocated since takes its place */
        void **last = chain_node(m, r, CHAIN);
        void *volatile t = field(last, 0);
        void **late = new_node(m, 1, LATE + round);
        ck_assert_ptr_nonnull(late);
        heapd_write(m, last, &last[0], late);
        late = NULL;
        void **root = heapd_root_get(m, r);
        heapd_write(m, root, &root[1], t);
        t = NULL;
        harness_wipe_stack();
        until_ended(m);
        until_ended(m);
        ck_assert_msg(node_ok(field(heapd_root_get(m, r), 1), 1, end),
                      "round %llu: the node a C local held across a major "
                      "cycle's handshake was freed",
                      (unsigned long long)round);
        end = LATE + round;
        const char *why = chain_broken(m, r, end);
        ck_assert_msg(!why, "round %llu: %s (the node allocated after the "
                      "handshake?)", (unsigned long long)round, why);
    }
    helper_leave(h);
    young_finish(c, m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("young_slices");
    TCase *t = tcase_create("slices");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, a_reference_moved_into_a_local_while_marking_survives);
    tcase_add_test(t, an_object_allocated_while_marking_survives);
    tcase_add_test(t, a_store_into_a_shared_object_ends_the_promotions_under_way);
    tcase_add_test(t, a_global_set_ends_the_promotions_under_way);
    tcase_add_test(t, a_blocking_region_ends_the_promotions_under_way);
    tcase_add_test(t, a_snapshot_ends_the_promotions_under_way);
    tcase_add_test(t, a_block_heapd_frees_while_marking_is_allocated_black);
    tcase_add_test(t, a_major_cycle_while_marking_keeps_everything);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
