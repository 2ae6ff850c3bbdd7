/* The write barrier as a program compiled against heapd.h runs it: the
 * inline fast path of heapd_write (Note [Inline write fast path] in
 * heapd.h) stores at once only where no barrier applies, and calls the
 * function everywhere else.  Its mode follows the mutator (no nursery,
 * a nursery, checked mode); a store while the heap marks still logs the
 * value it overwrites (Note [Snapshot write barrier]), which then lives
 * through the cycle; a young mutator's store of a young value into a
 * shared object still publishes it.  Against a real heapd with the
 * verifier on.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check_main.h"
#include "harness.h"
#include "heapd.h"
#include "young_util.h"

#define NURSERY (1u << 20)

static unsigned write_mode(const heapd_mutator *m)
{
    return ((const struct heapd_fast_ *)(const void *)m)->write_mode;
}

static heapd_mutator *attach_flags(heapd_client *c, unsigned flags)
{
    heapd_mutator_opts o = {.flags = flags};
    heapd_mutator *m;
    int rc = heapd_attach_opts(c, &o, &m);
    ck_assert_msg(rc == 0, "attach failed (%s): %s", heapd_strerror(rc),
                  heapd_last_error());
    return m;
}

/* A mutator without a nursery stores at once unless the heap marks; a
 * young one, into its young objects, and what is not young into a shared
 * object unless the heap marks; a checked client's mutators always call,
 * for checked mode's checks are in the function. */
START_TEST(the_write_mode_follows_the_mutator)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *plain = attach_flags(c, 0);
    ck_assert_uint_eq(write_mode(plain), HEAPD_FAST_UNLESS_MARKING_);
    heapd_detach(plain);
    heapd_mutator *young = attach_young(c, NURSERY, 0);
    ck_assert_uint_eq(write_mode(young), HEAPD_FAST_YOUNG_ANY_);
    /* through minor collections, which mark in slices between calls
     * (the function is called then) and end in IDLE */
    void **keep = new_node(young, 1, 1);
    ck_assert_ptr_nonnull(keep);
    for (int i = 0; i < 200000; i++) {
        void **n = new_node(young, 1, 2);
        ck_assert_ptr_nonnull(n);
        heapd_write(young, n, &n[0], keep);
    }
    ck_assert_uint_gt(young_stats(young).minor_collections, 0);
    ck_assert(node_ok(keep, 1, 1));
    heapd_detach(young);
    heapd_disconnect(c);

    c = connect_plain(HEAPD_CONNECT_CHECKED);
    plain = attach_flags(c, 0);
    ck_assert_uint_eq(write_mode(plain), HEAPD_FAST_CALL_);
    heapd_detach(plain);
    young = attach_young(c, 0, 0);
    ck_assert_uint_eq(write_mode(young), HEAPD_FAST_CALL_);
    young_finish(c, young);
}
END_TEST

/* The snapshot's barrier through the macro: with a cycle held past its
 * snapshot before it marks anything (Note [Holding marking for tests]),
 * M -- a precise mutator, or a young one, whose store of a shared object
 * into a shared one is inline too -- overwrites the only reference to
 * shared B with NULL.  The inline test sees the heap's phase and calls
 * the function, which logs B: B lives through the cycle, while an object
 * nothing referenced at the snapshot is freed.  A plain store there
 * would lose B. */
static void overwrite_while_the_heap_marks(heapd_client *c, heapd_mutator *m,
                                           const char *hold, unsigned mode)
{
    size_t slot = heapd_root_push(m, NULL);
    ck_assert_uint_ne(slot, (size_t)-1);
    void **a = new_shared_node(m, 1, 1);
    ck_assert_ptr_nonnull(a);
    heapd_root_set(m, slot, a);
    void **b = new_shared_node(m, 0, 2);
    ck_assert_ptr_nonnull(b);
    a = heapd_root_get(m, slot);
    heapd_write(m, a, &a[0], b);
    void **garbage = new_shared_node(m, 0, 3);
    ck_assert_ptr_nonnull(garbage);

    FILE *f = fopen(hold, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    uint64_t cycles = harness_stats(c).cycles_completed;
    heapd_blocking_enter(m); /* the snapshot's stop need not wait for us */
    ck_assert_int_eq(heapd_request_collect(c, 0), 0);
    harness_wait_stat(&D, c, phase, ==, 1); /* held in its mark */
    heapd_blocking_leave(m);
    ck_assert_uint_eq(write_mode(m), mode);
    a = heapd_root_get(m, slot);
    heapd_write(m, a, &a[0], NULL);
    heapd_blocking_enter(m);
    unlink(hold);
    harness_wait_stat(&D, c, cycles_completed, >=, cycles + 1);
    heapd_blocking_leave(m);

    int mb = mark_of(c, b), mg = mark_of(c, garbage);
    ck_assert_msg(mb > 0, "B, overwritten while the heap marked, was freed "
                          "(mark %d): the store was not logged", mb);
    ck_assert(node_ok(b, 0, 2));
    ck_assert_msg(mg == 0, "an object nothing referenced at the snapshot "
                           "kept mark %d: the cycle freed nothing", mg);
    heapd_root_pop(m, 1);
}

START_TEST(a_write_while_the_heap_marks_keeps_what_it_overwrites)
{
    char hold[64];
    harness_start_holding(&D, hold, sizeof hold);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_flags(c, HEAPD_MUTATOR_PRECISE);
    overwrite_while_the_heap_marks(c, m, hold, HEAPD_FAST_UNLESS_MARKING_);
    young_finish(c, m);
}
END_TEST

START_TEST(a_young_write_while_the_heap_marks_keeps_what_it_overwrites)
{
    char hold[64];
    harness_start_holding(&D, hold, sizeof hold);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m =
        attach_flags(c, HEAPD_MUTATOR_YOUNG | HEAPD_MUTATOR_PRECISE);
    overwrite_while_the_heap_marks(c, m, hold, HEAPD_FAST_YOUNG_ANY_);
    young_finish(c, m);
}
END_TEST

/* A young mutator's store into a shared object is no young store: the
 * inline test reads the shared object's header and calls the function,
 * which publishes the young value stored (promotes it in place); a
 * store into a young object stays a plain store, its value young. */
START_TEST(a_young_value_stored_into_a_shared_object_is_published)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, 0, 0);
    size_t slot = heapd_root_push(m, NULL);
    ck_assert_uint_ne(slot, (size_t)-1);
    void **shared = new_shared_node(m, 1, 1);
    ck_assert_ptr_nonnull(shared);
    heapd_root_set(m, slot, shared);
    void **y = new_node(m, 1, 2);
    void **z = new_node(m, 0, 3);
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_nonnull(z);
    ck_assert(still_young(c, m, y));
    heapd_write(m, y, &y[0], z);
    ck_assert_msg(still_young(c, m, z),
                  "a store into a young object published its value");
    heapd_write(m, shared, &shared[0], y);
    ck_assert_msg(promoted(c, m, y) && promoted(c, m, z),
                  "a young graph stored into a shared object stayed young "
                  "(marks %d and %d)", mark_of(c, y), mark_of(c, z));
    ck_assert_ptr_eq(field(shared, 0), y);
    ck_assert_ptr_eq(field(y, 0), z);
    ck_assert(node_ok(y, 1, 2) && node_ok(z, 0, 3));
    /* the function itself, by its name in parentheses, is the same store */
    void **w = new_node(m, 0, 4);
    ck_assert_ptr_nonnull(w);
    (heapd_write)(m, shared, &shared[0], w);
    ck_assert(promoted(c, m, w));
    ck_assert_ptr_eq(field(shared, 0), w);
    young_finish(c, m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("barrier");
    TCase *t = tcase_create("inline write");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, the_write_mode_follows_the_mutator);
    tcase_add_test(t, a_write_while_the_heap_marks_keeps_what_it_overwrites);
    tcase_add_test(t,
                   a_young_write_while_the_heap_marks_keeps_what_it_overwrites);
    tcase_add_test(t, a_young_value_stored_into_a_shared_object_is_published);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
