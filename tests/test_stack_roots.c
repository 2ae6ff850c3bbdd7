/* C locals are roots (Note [C locals are roots] in client/stack_roots.c):
 * a shared object that only a local variable of an attached thread
 * points to -- by its reference, inside its bytes, or one past its end --
 * lives through major cycles, whether the thread runs through their
 * stops or is blocked across them; a HEAPD_MUTATOR_PRECISE mutator's
 * locals keep nothing.  Against a real heapd with the verifier on, which
 * fills a freed block with poison and checks every cycle.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "heapd.h"
#include "check_main.h"

#include "young_util.h"

#define CYCLES 4
#define KEPT_ID 4242
/* an object that fills its 64-byte block: one past its end is the start
 * of the next block */
#define FULL_BYTES (64 - 8)

/* Allocate garbage through COUNT cycles that another thread asks for:
 * the stops find this thread in heapd_alloc, where it captures. */
struct cycler {
    heapd_client *c;
    unsigned count;
    _Atomic bool done;
    int rc;
};

static void *cycle_thread(void *arg)
{
    struct cycler *cy = arg;
    for (unsigned i = 0; i < cy->count && cy->rc == 0; i++)
        cy->rc = heapd_request_collect(cy->c, HEAPD_COLLECT_WAIT);
    atomic_store(&cy->done, true);
    return NULL;
}

static void cycles_while_running(heapd_mutator *m, heapd_client *c,
                                 unsigned count)
{
    struct cycler cy = {.c = c, .count = count};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, cycle_thread, &cy), 0);
    int64_t end = harness_now_ms() + HARNESS_WAIT_MS;
    while (!atomic_load(&cy.done)) {
        ck_assert_msg(harness_now_ms() < end, "%u cycles not done in %d ms",
                      count, HARNESS_WAIT_MS);
        ck_assert_ptr_nonnull(heapd_alloc(m, 1, 48));
    }
    pthread_join(t, NULL);
    ck_assert_int_eq(cy.rc, 0);
}

/* A shared node of KEPT_ID, made in a frame of its own, so that only
 * what the caller keeps of it stays on the stack. */
static __attribute__((noinline)) void *make_kept(heapd_mutator *m,
                                                 size_t nbytes)
{
    void **n = heapd_alloc(m, 1, nbytes);
    ck_assert_ptr_nonnull(n);
    fill_payload(n, KEPT_ID);
    return n;
}

static heapd_client *start(void)
{
    harness_start_with(&D, NULL);
    return connect_plain(0);
}

/* start(), and a mutator attached with FLAGS in *M. */
static heapd_client *start_attached(heapd_mutator **m, unsigned flags)
{
    heapd_client *c = start();
    heapd_mutator_opts o = {.flags = flags};
    ck_assert_int_eq(heapd_attach_opts(c, &o, m), 0);
    return c;
}

static void finish(heapd_client *c, heapd_mutator *m)
{
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}

/* The reference in a local, through cycles taken running and blocked
 * (heapd_collect waits in a blocking region). */
START_TEST(a_local_keeps_a_shared_object)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, 0);
    void *volatile kept = make_kept(m, sizeof(struct payload));
    harness_wipe_stack();
    cycles_while_running(m, c, CYCLES);
    for (int i = 0; i < CYCLES; i++)
        ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    ck_assert_msg(node_ok(kept, 1, KEPT_ID) && mark_of(c, kept) > 0,
                  "an object only a local held was freed (mark %d)",
                  mark_of(c, kept));
    finish(c, m);
}
END_TEST

/* Only heapd_bytes(o) in a local: an interior pointer keeps O. */
START_TEST(an_interior_pointer_keeps_its_object)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, 0);
    const struct payload *volatile bytes =
        heapd_bytes(make_kept(m, sizeof(struct payload)));
    harness_wipe_stack();
    cycles_while_running(m, c, CYCLES);
    void *obj = (void *)((uintptr_t)bytes - sizeof(void *));
    ck_assert_msg(node_ok(obj, 1, KEPT_ID) && mark_of(c, obj) > 0,
                  "an object only heapd_bytes of it held was freed");
    finish(c, m);
}
END_TEST

/* Only the address one past its end, the next block's start. */
START_TEST(one_past_the_end_keeps_its_object)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, 0);
    const uint8_t *volatile end =
        (const uint8_t *)heapd_bytes(make_kept(m, FULL_BYTES)) + FULL_BYTES;
    harness_wipe_stack();
    cycles_while_running(m, c, CYCLES);
    void *obj = (void *)((uintptr_t)end - FULL_BYTES - sizeof(void *));
    ck_assert_int_eq(heapd_nbytes(obj), FULL_BYTES);
    const struct payload *p = heapd_bytes(obj);
    ck_assert_msg(p->id == KEPT_ID && p->check == check_of(KEPT_ID) &&
                      mark_of(c, obj) > 0,
                  "an object only a pointer one past its end held was freed");
    finish(c, m);
}
END_TEST

/* A thread blocked across the cycles: its capture at heapd_blocking_enter
 * is its stack's roots while it waits. */
struct blocked {
    heapd_client *c;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool entered, go;
    bool ok;
    int mark;
};

static __attribute__((noinline)) void *blocked_thread(void *arg)
{
    struct blocked *b = arg;
    heapd_mutator *m;
    if (heapd_attach(b->c, &m) != 0)
        return NULL;
    void *volatile kept = make_kept(m, sizeof(struct payload));
    harness_wipe_stack();
    heapd_blocking_enter(m);
    pthread_mutex_lock(&b->mu);
    b->entered = true;
    pthread_cond_broadcast(&b->cv);
    while (!b->go)
        pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
    heapd_blocking_leave(m);
    b->ok = node_ok(kept, 1, KEPT_ID);
    b->mark = mark_of(b->c, kept);
    heapd_detach(m);
    return NULL;
}

START_TEST(a_blocked_threads_locals_keep_their_objects)
{
    heapd_client *c = start();
    struct blocked b = {.c = c};
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, blocked_thread, &b), 0);
    pthread_mutex_lock(&b.mu);
    while (!b.entered)
        pthread_cond_wait(&b.cv, &b.mu);
    pthread_mutex_unlock(&b.mu);
    heapd_mutator *m;
    ck_assert_int_eq(heapd_attach(c, &m), 0);
    cycles_while_running(m, c, CYCLES);
    pthread_mutex_lock(&b.mu);
    b.go = true;
    pthread_cond_broadcast(&b.cv);
    pthread_mutex_unlock(&b.mu);
    pthread_join(t, NULL);
    ck_assert_msg(b.ok && b.mark > 0, "an object only a local of a thread "
                  "blocked across %d cycles held was freed (mark %d)",
                  CYCLES, b.mark);
    finish(c, m);
}
END_TEST

/* Has OBJ been freed?  Asks for one more cycle first (from a thread
 * whose mutator, if any, is blocked). */
struct freed_wait {
    const heapd_client *c;
    const void *obj;
};

static bool freed_now(void *arg, char *seen, size_t len)
{
    struct freed_wait *f = arg;
    int mark = mark_of(f->c, f->obj);
    ck_assert_int_eq(heapd_request_collect((heapd_client *)f->c,
                                           HEAPD_COLLECT_WAIT), 0);
    snprintf(seen, len, "mark %d", mark);
    return mark == 0;
}

/* HEAPD_MUTATOR_PRECISE: the local keeps nothing, the object is freed
 * (so the tests above fail if the capture is taken out). */
START_TEST(a_precise_mutators_locals_keep_nothing)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, HEAPD_MUTATOR_PRECISE);
    void *volatile kept = make_kept(m, sizeof(struct payload));
    cycles_while_running(m, c, CYCLES);
    struct freed_wait f = {c, kept};
    heapd_blocking_enter(m);
    harness_wait_until(freed_now, &f, "the object only a precise mutator's "
                       "local held is freed");
    heapd_blocking_leave(m);
    finish(c, m);
}
END_TEST

/* A list only a local holds, LIST nodes: each cycle counts it as what C
 * stack words kept (conservative_roots, conservative_bytes_retained); a
 * precise mutator's list is not kept, and counted nowhere. */
#define LIST 1000

static __attribute__((noinline)) void *make_list(heapd_mutator *m)
{
    void **head = NULL;
    size_t r = heapd_root_push(m, NULL);
    ck_assert_uint_ne(r, (size_t)-1);
    for (int i = 0; i < LIST; i++) {
        void **n = heapd_alloc(m, 1, sizeof(struct payload));
        ck_assert_ptr_nonnull(n);
        fill_payload(n, (uint64_t)i);
        heapd_write(m, n, &n[0], heapd_root_get(m, r));
        heapd_root_set(m, r, n);
        head = n;
    }
    heapd_root_pop(m, 1);
    return head;
}

static void counted(bool precise)
{
    heapd_mutator *m;
    heapd_client *c =
        start_attached(&m, precise ? HEAPD_MUTATOR_PRECISE : 0);
    void *volatile list = make_list(m);
    harness_wipe_stack();
    heapd_stats_t a = harness_stats(c);
    for (int i = 0; i < CYCLES; i++)
        ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t b = harness_stats(c);
    uint64_t roots = b.conservative_roots - a.conservative_roots;
    uint64_t bytes = b.conservative_bytes_retained -
                     a.conservative_bytes_retained;
    if (precise) {
        ck_assert_msg(roots == 0 && bytes == 0, "a precise mutator's locals "
                      "counted: %llu objects, %llu bytes",
                      (unsigned long long)roots, (unsigned long long)bytes);
    } else {
        /* every cycle keeps the whole list through its head */
        ck_assert_msg(roots >= CYCLES && bytes >= (uint64_t)CYCLES * LIST * 32,
                      "%d cycles counted %llu objects and %llu bytes kept by "
                      "C stack words, for a list of %d nodes only a local "
                      "held", CYCLES, (unsigned long long)roots,
                      (unsigned long long)bytes, LIST);
        uint64_t n = 0;
        for (void *p = list; p; p = field(p, 0), n++)
            ck_assert_msg(n < LIST && node_ok(p, 1, LIST - 1 - n),
                          "node %llu of the list a local held is damaged",
                          (unsigned long long)n);
        ck_assert_uint_eq(n, LIST);
    }
    finish(c, m);
}

START_TEST(what_locals_alone_keep_is_counted)
{
    counted(false);
}
END_TEST

START_TEST(a_precise_mutator_counts_nothing)
{
    counted(true);
}
END_TEST

/* heapd_add_roots (Note [Registered roots]): a word of a registered
 * malloc'd table keeps its object, through cycles taken running and
 * blocked; one of a table not registered does not, nor once the range is
 * removed.  The mutator is precise: no stack word keeps anything. */

START_TEST(a_registered_range_keeps_its_objects)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, HEAPD_MUTATOR_PRECISE);
    void **table = calloc(16, sizeof *table);
    void **other = calloc(16, sizeof *other);
    ck_assert(table && other);
    ck_assert_int_eq(heapd_add_roots(m, table, table + 16), 0);
    table[5] = make_kept(m, sizeof(struct payload));
    other[5] = make_kept(m, sizeof(struct payload));
    cycles_while_running(m, c, CYCLES);
    heapd_blocking_enter(m); /* every mutator of the process blocked */
    for (int i = 0; i < CYCLES; i++)
        ck_assert_int_eq(heapd_request_collect(c, HEAPD_COLLECT_WAIT), 0);
    heapd_blocking_leave(m);
    ck_assert_msg(node_ok(table[5], 1, KEPT_ID) && mark_of(c, table[5]) > 0,
                  "an object only a registered range held was freed");
    /* blocked while the waits ask for cycles */
    struct freed_wait f = {c, other[5]};
    heapd_blocking_enter(m);
    harness_wait_until(freed_now, &f, "the object only a table not "
                       "registered held is freed");
    heapd_blocking_leave(m);
    ck_assert_int_eq(heapd_remove_roots(m, table, table + 16), 0);
    f.obj = table[5];
    heapd_blocking_enter(m);
    harness_wait_until(freed_now, &f, "the object only a removed range "
                       "held is freed");
    heapd_blocking_leave(m);
    free(table);
    free(other);
    finish(c, m);
}
END_TEST

START_TEST(registering_nonsense_is_refused)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, 0);
    uint64_t words[4];
    ck_assert_int_eq(heapd_add_roots(NULL, words, words + 4), -EINVAL);
    ck_assert_int_eq(heapd_add_roots(m, NULL, words), -EINVAL);
    ck_assert_int_eq(heapd_add_roots(m, words + 4, words), -EINVAL);
    char *base = heapd_heap_base(c);
    ck_assert_int_eq(heapd_add_roots(m, base + 4096, base + 8192), -EINVAL);
    ck_assert_msg(strstr(heapd_last_error(), "inside the heap"),
                  "the error does not say why: %s", heapd_last_error());
    ck_assert_int_eq(heapd_remove_roots(m, words, words + 4), -ENOENT);
    ck_assert_int_eq(heapd_add_roots(m, words, words + 4), 0);
    ck_assert_int_eq(heapd_remove_roots(m, words, words + 4), 0);
    ck_assert_int_eq(heapd_remove_roots(m, words, words + 4), -ENOENT);
    finish(c, m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("stack_roots");
    TCase *t = tcase_create("locals");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, a_local_keeps_a_shared_object);
    tcase_add_test(t, an_interior_pointer_keeps_its_object);
    tcase_add_test(t, one_past_the_end_keeps_its_object);
    tcase_add_test(t, a_blocked_threads_locals_keep_their_objects);
    tcase_add_test(t, a_precise_mutators_locals_keep_nothing);
    tcase_add_test(t, what_locals_alone_keep_is_counted);
    tcase_add_test(t, a_precise_mutator_counts_nothing);
    tcase_add_test(t, a_registered_range_keeps_its_objects);
    tcase_add_test(t, registering_nonsense_is_refused);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
