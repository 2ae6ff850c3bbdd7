/* Young generations end to end (Note [Young objects, for the program] in
 * client/heapd.h, the Notes of client/minor.c), against a real heapd with
 * the verifier on: a young mutator's rooted data lives through many minor
 * collections and is promoted by age where it is (the same address, no
 * longer young, its mark an epoch), with every young object it reaches; a
 * young object that only a C local holds, by its address or an interior
 * pointer, lives through dozens of minor collections and stays young; a
 * dead young block is freed where it is and allocated again; an old
 * object reachable at a snapshot only through young objects survives,
 * whether the mutator pushes it (Note [The preparatory push]) or, while
 * it is blocked, the daemon scans its young blocks; and a young graph
 * published into a dirty object during marking is black.  Publication
 * and what a young mutator's shared allocation holds is
 * tests/test_young_publish.c, many young mutators sharing a table
 * tests/test_young_many.c, misuse tests/test_young_misuse.c, kills
 * tests/test_young_crash.c.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "check_main.h"

#include "young_util.h"

/* The heap's phase, as every mutator of C sees it in the control area. */
static uint32_t phase_of(heapd_client *c)
{
    return atomic_load(&c->ctl->phase);
}

static uint32_t epoch_of(heapd_client *c)
{
    return atomic_load(&c->ctl->epoch);
}

/* Ask for a cycle, then take safepoints until M's heap is marking: M has
 * then taken the snapshot's stop, and its stack handshake is done (Note
 * [The preparatory push] in client/minor.c).  A mutator that waits for
 * heapd to finish its stack may see the whole marking pass meanwhile (a
 * final sync passes a waiting mutator: Note [Straddling a cycle]); then
 * the next cycle is asked for.  M asks (heapd_collect, which waits for
 * the reply in a blocking region: heapd may take M's stack handshake, or
 * run the whole cycle), or, given HOLD, C does, with the cycle held past
 * its snapshot while the file HOLD exists (Note [Holding marking for
 * tests] in daemon/gc/collector.c): M running takes its own handshake,
 * and the marking lasts until the caller removes HOLD (unless a cycle
 * that passed its hold before HOLD existed was marking already: the
 * callers count what was conclusive).  Returns false if
 * marking was not seen within the bound (the caller fails, in its own
 * thread). */
static bool until_marking(heapd_mutator *m, heapd_client *c, const char *hold)
{
    FILE *f = hold ? fopen(hold, "w") : NULL;
    if (hold && (!f || fclose(f) != 0))
        return false;
    int64_t end = harness_now_ms() + HARNESS_WAIT_MS;
    while (harness_now_ms() < end) {
        uint32_t epoch = epoch_of(c);
        if ((hold ? heapd_request_collect(c, 0) : heapd_collect(m, 0)) != 0)
            return false;
        while (harness_now_ms() < end) {
            heapd_safepoint(m);
            if (phase_of(c) == LAYOUT_PHASE_MARK)
                return true;
            if (epoch_of(c) != epoch)
                break; /* that cycle's marking passed by */
        }
    }
    return false;
}

/* Live data that makes each marking last a while: a list of BALLAST
 * shared nodes under global "ballast", so that a mutator that has seen
 * marking begin usually does what it must before marking ends (the tests
 * check whether it did, and try again if not). */
#define BALLAST 100000

static void add_ballast(heapd_mutator *m)
{
    size_t r = heapd_root_push(m, NULL);
    for (uint64_t i = 0; i < BALLAST; i++) {
        void **n = heapd_alloc_shared(m, 1, 0);
        ck_assert_ptr_nonnull(n);
        heapd_write(m, n, &n[0], heapd_root_get(m, r));
        heapd_root_set(m, r, n);
    }
    ck_assert_int_eq(heapd_global_set(m, "ballast", heapd_root_get(m, r)),
                     0);
    heapd_root_pop(m, 1);
}

/* A scenario that must happen while marking runs until RUNS runs did (at
 * most ATTEMPTS): who takes the push is a race (below), so each run of it
 * is one more chance for a broken side to show. */
#define RUNS 8
#define ATTEMPTS 40


/* The least nursery budget heapd grants: two segments (Note [Young
 * budgets] in daemon/gc/heap.h). */
#define YOUNG_MIN (256u << 10)


/* ---- 1. basics: minor collections, aging ---- */

#define LIST_N 100000
#define LIST_BATCH 1000
#define LIST_GARBAGE 3 /* garbage objects allocated after each node */

/* The list from HEAD holds the nodes TOP, TOP - 1, ..., 0 (each with one
 * field, the next); *YOUNG gets how many of them are still young.  NULL if
 * it is whole, else what is wrong. */
static const char *list_broken(heapd_mutator *m, void *head, uint64_t top,
                               uint64_t *young)
{
    uint64_t want = top, n = 0;
    *young = 0;
    for (void *p = head; p; p = field(p, 0), want--, n++) {
        if (n > top || !node_ok(p, 1, want))
            return "a node of the list is damaged or out of order";
        *young += heapd_is_young(m, p);
    }
    return n == top + 1 ? NULL : "the list is too short";
}

START_TEST(young_list_through_minor_collections)
{
    harness_start_with(&D, "young_size = 256K\n");
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, 0, 0);
    heapd_young_stats y = young_stats(m);
    ck_assert_uint_ge(y.young_bytes, 256 << 10);
    ck_assert_uint_eq(y.young_age, 2);
    ck_assert_uint_eq(y.minor_collections, 0);
    size_t r = heapd_root_push(m, NULL);
    ck_assert_uint_ne(r, (size_t)-1);
    bool saw_young_and_shared = false;
    uint64_t born_young = 0;
    for (uint64_t i = 0; i < LIST_N; i++) {
        void **n = new_node(m, 1, i); /* may run a minor collection */
        ck_assert_msg(n != NULL, "heapd_alloc %llu: %s",
                      (unsigned long long)i, heapd_last_error());
        born_young += heapd_is_young(m, n);
        heapd_write(m, n, &n[0], heapd_root_get(m, r)); /* a plain store */
        heapd_root_set(m, r, n);
        /* garbage of the nodes' class: each minor collection frees it
         * where it is, and the next allocations take those blocks again,
         * so a node freed by mistake is overwritten */
        for (int g = 0; g < LIST_GARBAGE; g++)
            ck_assert_ptr_nonnull(heapd_alloc(m, 1, sizeof(struct payload)));
        if ((i + 1) % LIST_BATCH != 0)
            continue;
        uint64_t young;
        const char *why = list_broken(m, heapd_root_get(m, r), i, &young);
        ck_assert_msg(!why, "after %llu nodes and %llu minor collections: "
                      "%s", (unsigned long long)i + 1,
                      (unsigned long long)young_stats(m).minor_collections,
                      why);
        /* the newest nodes are young, the oldest promoted by age */
        if (young > 0 && young <= i)
            saw_young_and_shared = true;
    }
    y = young_stats(m);
    ck_assert_msg(y.minor_collections > 10, "only %llu minor collections",
                  (unsigned long long)y.minor_collections);
    ck_assert_msg(saw_young_and_shared, "the list never held young and "
                  "promoted nodes at once");
    /* every small object of a young mutator is born young */
    ck_assert_msg(born_young == LIST_N, "only %llu of %u nodes were "
                  "allocated young", (unsigned long long)born_young, LIST_N);
    ck_assert_uint_gt(y.promoted_age_bytes, 0);
    ck_assert_uint_gt(y.minor_pause_max_ns, 0);
    ck_assert_uint_ge(y.minor_pause_total_ns, y.minor_pause_max_ns);
    /* the daemon's counters are the slot's words */
    heapd_stats_t st = harness_stats(c);
    ck_assert_uint_eq(st.minor_collections, y.minor_collections);
    ck_assert_uint_eq(st.promoted_age_bytes, y.promoted_age_bytes);
    /* and major cycles keep it: young nodes traced from the root */
    harness_collect(m);
    harness_collect(m);
    uint64_t young;
    const char *why = list_broken(m, heapd_root_get(m, r), LIST_N - 1, &young);
    ck_assert_msg(!why, "after two cycles: %s", why);
    young_finish(c, m);
}
END_TEST

/* With the heap's young_age HEAP_AGE and the attach's ASKED (0: the
 * heap's), a rooted object is young until it has survived the age, then
 * shared where it is: the same address all along, its mark an epoch from
 * then on (Note [Promotion in place] in client/minor.c). */
static void aging(unsigned heap_age, unsigned asked)
{
    char extra[64];
    unsigned age = asked ? asked : heap_age;
    snprintf(extra, sizeof extra, "young_age = %u\n", heap_age);
    harness_start_with(&D, extra);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, YOUNG_MIN, asked);
    ck_assert_uint_eq(young_stats(m).young_age, age);
    void *born = new_node(m, 0, 42);
    size_t r = heapd_root_push(m, born);
    ck_assert(still_young(c, m, born));
    for (unsigned s = 1; s <= age; s++) {
        uint64_t before = young_stats(m).promoted_age_bytes;
        minor_now(m);
        void *o = heapd_root_get(m, r);
        ck_assert_msg(o == born, "minor collection %u moved the object",
                      s);
        ck_assert_msg(node_ok(o, 0, 42), "the object was damaged by minor "
                      "collection %u", s);
        ck_assert_msg(s < age ? still_young(c, m, o) : promoted(c, m, o),
                      "young_age %u: after %u minor collections the object "
                      "is %s (mark %d)", age, s,
                      heapd_is_young(m, o) ? "young" : "shared",
                      mark_of(c, o));
        if (s == age)
            ck_assert_uint_gt(young_stats(m).promoted_age_bytes, before);
    }
    minor_now(m);
    ck_assert_ptr_eq(heapd_root_get(m, r), born);
    ck_assert(promoted(c, m, born));
    harness_collect(m);
    ck_assert_ptr_eq(heapd_root_get(m, r), born);
    ck_assert(node_ok(born, 0, 42));
    ck_assert(promoted(c, m, born));
    young_finish(c, m);
}

START_TEST(aging_default_two)
{
    aging(2, 0);
}
END_TEST

START_TEST(aging_asked_one)
{
    aging(2, 1);
}
END_TEST

START_TEST(aging_heap_one)
{
    aging(1, 0);
}
END_TEST

START_TEST(aging_asked_three)
{
    aging(1, 3);
}
END_TEST

/* A rooted young object promoted by age takes every young object it
 * reaches with it, however young (Note [Promotion in place]): P ages
 * through one minor collection, then gets young children C1 (with a
 * child C2) and C3; at the minor collection where P reaches its age, all
 * four become shared where they are. */
START_TEST(rooted_object_promoted_in_place_with_its_children)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, YOUNG_MIN, 2);
    void **p = new_node(m, 2, 1);
    ck_assert_ptr_nonnull(p);
    size_t r = heapd_root_push(m, p);
    minor_now(m);
    ck_assert_ptr_eq(heapd_root_get(m, r), p);
    ck_assert_msg(still_young(c, m, p), "promoted after one minor "
                  "collection of young_age 2");
    void **c1 = new_node(m, 1, 2), **c2 = new_node(m, 0, 3);
    void **c3 = new_node(m, 0, 4);
    ck_assert(c1 && c2 && c3);
    heapd_write(m, c1, &c1[0], c2); /* young into young: plain stores */
    heapd_write(m, p, &p[0], c1);
    heapd_write(m, p, &p[1], c3);
    ck_assert(still_young(c, m, c1) && still_young(c, m, c2) &&
              still_young(c, m, c3));
    uint64_t aged = young_stats(m).promoted_age_bytes;
    minor_now(m);
    void **objs[] = {p, c1, c2, c3};
    for (size_t i = 0; i < 4; i++)
        ck_assert_msg(promoted(c, m, objs[i]), "object %zu of the promoted "
                      "graph: young %d, mark %d", i,
                      heapd_is_young(m, objs[i]), mark_of(c, objs[i]));
    /* exactly these four: C locals (these) keep but never promote */
    ck_assert_uint_eq(young_stats(m).promoted_age_bytes - aged,
                      block_bytes(2, sizeof(struct payload)) +
                          block_bytes(1, sizeof(struct payload)) +
                          2 * block_bytes(0, sizeof(struct payload)));
    for (int round = 0; round < 3; round++) {
        ck_assert_ptr_eq(heapd_root_get(m, r), p);
        ck_assert_msg(node_ok(p, 2, 1) && node_ok(c1, 1, 2) &&
                          node_ok(c2, 0, 3) && node_ok(c3, 0, 4),
                      "round %d: a promoted object is damaged", round);
        ck_assert(field(p, 0) == c1 && field(c1, 0) == c2 &&
                  field(p, 1) == c3);
        for (size_t i = 0; i < 4; i++)
            ck_assert(promoted(c, m, objs[i]));
        /* a minor collection leaves them alone, the daemon keeps them */
        minor_now(m);
        harness_collect(m);
    }
    harness_expect_healthy(&D);
    young_finish(c, m);
}
END_TEST

/* ---- 2. young objects that only C locals hold ---- */

/* Note [Minor collections]: a minor collection keeps what the mutator's
 * stack and registers point to, interior pointers included, and never
 * promotes it by age.  Each test allocates LOCAL_ALLOCS objects after it
 * made its young objects, in a small nursery, so that dozens of minor
 * collections run while only a C local holds them, and a few major
 * cycles with the verifier on.  The garbage is of the held objects'
 * classes too: a held block freed by mistake is allocated again and
 * zeroed, which the checks of its counter see. */
#define LOCAL_ALLOCS 10000
#define LOCAL_YOUNG YOUNG_MIN
#define LOCAL_MINORS 24    /* at least this many minor collections */
#define LOCAL_CYCLES 4     /* major cycles among the allocations */

/* What a held object holds in its bytes: a counter the loop moves on. */
struct counter {
    uint64_t count, check;
};

static void count_on(struct counter *k)
{
    k->count++;
    k->check = check_of(k->count);
}

static bool count_ok(const struct counter *k, uint64_t want)
{
    return k->count == want && k->check == check_of(want);
}

static void count_start(struct counter *k)
{
    k->count = 0;
    k->check = check_of(0);
}

/* Garbage allocation I of LOCAL_ALLOCS: of the classes the held objects
 * and their children take (1 and 2 references and a counter, a node of
 * no reference), or a 4 KiB block that makes the minor collections
 * frequent, filled; a major cycle every LOCAL_ALLOCS / LOCAL_CYCLES. */
static void local_garbage(heapd_mutator *m, uint64_t i)
{
    static const size_t nrefs[4] = {1, 2, 0, 0};
    static const size_t nbytes[4] = {sizeof(struct counter),
                                     sizeof(struct counter),
                                     sizeof(struct payload), 4000};
    void **g = heapd_alloc(m, nrefs[i % 4], nbytes[i % 4]);
    ck_assert_msg(g != NULL, "heapd_alloc %llu: %s", (unsigned long long)i,
                  heapd_last_error());
    memset(heapd_bytes(g), 0xa5, nbytes[i % 4]);
    if (i % (LOCAL_ALLOCS / LOCAL_CYCLES) == LOCAL_ALLOCS / LOCAL_CYCLES / 2)
        ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
}

/* After the loop: enough minor collections and major cycles ran, and
 * the verifier found nothing. */
static void local_ran(heapd_client *c, heapd_mutator *m, uint64_t minors,
                      uint64_t cycles)
{
    uint64_t ran = young_stats(m).minor_collections - minors;
    ck_assert_msg(ran >= LOCAL_MINORS, "only %llu minor collections ran",
                  (unsigned long long)ran);
    ck_assert_uint_ge(harness_stats(c).cycles_completed,
                      cycles + LOCAL_CYCLES);
    harness_expect_healthy(&D);
}


/* O (one reference, a counter) in a C local, not rooted, with a young
 * child in its field.  The local is an ordinary one: the compiler keeps it
 * in a callee-saved register or a stack slot, both of which the scan of
 * the stack sees (Note [Scanning a mutator's own stack] in
 * client/stack.c). */
START_TEST(young_local_survives_minor_collections)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, LOCAL_YOUNG, 0);
    uint64_t minors = young_stats(m).minor_collections;
    uint64_t cycles = harness_stats(c).cycles_completed;
    void **o = heapd_alloc(m, 1, sizeof(struct counter));
    ck_assert_ptr_nonnull(o);
    void **child = new_node(m, 0, 7);
    ck_assert_ptr_nonnull(child);
    heapd_write(m, o, &o[0], child);
    count_start((struct counter *)(o + 1));
    child = NULL;
    for (uint64_t i = 0; i < LOCAL_ALLOCS; i++) {
        struct counter *k = (struct counter *)(o + 1);
        ck_assert_msg(count_ok(k, i), "after %llu allocations the object "
                      "a C local holds was freed (count %llu)",
                      (unsigned long long)i, (unsigned long long)k->count);
        count_on(k);
        local_garbage(m, i);
    }
    ck_assert(count_ok((struct counter *)(o + 1), LOCAL_ALLOCS));
    ck_assert_msg(node_ok(field(o, 0), 0, 7), "the young child of the "
                  "object a C local holds was freed");
    /* Note [Minor collections]: what only C locals hold stays young */
    ck_assert_msg(still_young(c, m, o) && still_young(c, m, field(o, 0)),
                  "an object only a C local held was promoted (young %d "
                  "mark %d, its child young %d mark %d)",
                  heapd_is_young(m, o), mark_of(c, o),
                  heapd_is_young(m, field(o, 0)), mark_of(c, field(o, 0)));
    local_ran(c, m, minors, cycles);
    young_finish(c, m);
}
END_TEST

/* Young A (one reference, a counter) with child 11 and young B (two
 * references, a counter) with child 12 in its field 1, of which the
 * caller gets interior pointers only: A's bytes and B's field 1. */
static __attribute__((noinline)) void
interior_only(heapd_mutator *m, struct counter **bytes_of_a, void ***field_of_b)
{
    void **a = heapd_alloc(m, 1, sizeof(struct counter));
    void **b = heapd_alloc(m, 2, sizeof(struct counter));
    void **ca = new_node(m, 0, 11), **cb = new_node(m, 0, 12);
    ck_assert(a && b && ca && cb);
    heapd_write(m, a, &a[0], ca);
    heapd_write(m, b, &b[1], cb);
    count_start(heapd_bytes(a));
    count_start(heapd_bytes(b));
    *bytes_of_a = heapd_bytes(a);
    *field_of_b = &b[1];
}

/* The same with interior pointers (heapd_bytes(o), &o[1]) as the only
 * references: kept in volatile locals, so in the frame's stack slots, and
 * the stack below wiped once they are made, so that no copy of the
 * objects' own addresses is left anywhere the scan looks. */
START_TEST(interior_pointer_keeps_young_object)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, LOCAL_YOUNG, 0);
    uint64_t minors = young_stats(m).minor_collections;
    uint64_t cycles = harness_stats(c).cycles_completed;
    struct counter *ka0;
    void **fb0;
    interior_only(m, &ka0, &fb0);
    struct counter *volatile ka = ka0;
    void **volatile fb = fb0;
    ka0 = NULL;
    fb0 = NULL;
    harness_wipe_stack();
    for (uint64_t i = 0; i < LOCAL_ALLOCS; i++) {
        struct counter *kb = (struct counter *)(fb + 1);
        ck_assert_msg(count_ok(ka, i) && count_ok(kb, i),
                      "after %llu allocations an object only an interior "
                      "pointer held was freed (counts %llu, %llu)",
                      (unsigned long long)i,
                      (unsigned long long)ka->count,
                      (unsigned long long)kb->count);
        count_on(ka);
        count_on(kb);
        local_garbage(m, i);
    }
    void **a = (void **)ka - 1, **b = (void **)fb - 1;
    ck_assert(count_ok(ka, LOCAL_ALLOCS) &&
              count_ok((struct counter *)(fb + 1), LOCAL_ALLOCS));
    ck_assert_msg(node_ok(field(a, 0), 0, 11) && node_ok(field(b, 1), 0, 12),
                  "a young child of an object an interior pointer held was "
                  "freed");
    ck_assert_ptr_null(field(b, 0));
    ck_assert_msg(still_young(c, m, a) && still_young(c, m, b) &&
                      still_young(c, m, field(a, 0)) &&
                      still_young(c, m, field(b, 1)),
                  "an object only an interior pointer held was promoted");
    local_ran(c, m, minors, cycles);
    young_finish(c, m);
}
END_TEST

#define DEAD_N 400
#define DEAD_NBYTES 72  /* with one reference: a class nothing else takes */
#define DEAD_STALE 8    /* kept by stale words of the stack, at most */
#define DEAD_SLACK 1024 /* bytes of minor_now's garbage stale words keep */

/* DEAD_N young objects, each in a root slot of its own (so that a stale
 * copy of one address keeps that one only); their addresses in ADDR,
 * which is malloc'd memory, not scanned. */
static __attribute__((noinline)) void root_many(heapd_mutator *m,
                                                uintptr_t *addr)
{
    for (size_t i = 0; i < DEAD_N; i++) {
        void **n = heapd_alloc(m, 1, DEAD_NBYTES);
        ck_assert_ptr_nonnull(n);
        *(uint64_t *)heapd_bytes(n) = i;
        ck_assert_uint_ne(heapd_root_push(m, n), (size_t)-1);
        addr[i] = (uintptr_t)n;
    }
}

static int cmp_addr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Note [Minor collections], step 3: a young block nothing reaches is
 * freed where it is (its mark back to 0), the young bytes in use fall, and
 * the next allocations of its class take it again. */
START_TEST(dead_young_blocks_are_reused)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, YOUNG_MIN, 2);
    uintptr_t *addr = malloc(DEAD_N * sizeof *addr);
    ck_assert_ptr_nonnull(addr);
    root_many(m, addr);
    uint64_t bs = block_bytes(1, DEAD_NBYTES);
    minor_now(m); /* they survive it, rooted, and are not old yet */
    heapd_young_stats y = young_stats(m);
    ck_assert_uint_ge(y.bytes_in_use, DEAD_N * bs);
    for (size_t i = 0; i < DEAD_N; i++)
        ck_assert(still_young(c, m, (void *)addr[i]) &&
                  *(uint64_t *)heapd_bytes((void *)addr[i]) == i);
    uint64_t in_use = y.bytes_in_use;
    heapd_root_pop(m, DEAD_N);
    harness_wipe_stack();
    minor_now(m);
    size_t freed = 0;
    for (size_t i = 0; i < DEAD_N; i++)
        freed += mark_of(c, (void *)addr[i]) == 0;
    ck_assert_msg(freed >= DEAD_N - DEAD_STALE, "only %zu of %u dead young "
                  "blocks were freed", freed, DEAD_N);
    y = young_stats(m);
    ck_assert_msg(y.bytes_in_use + freed * bs <= in_use + DEAD_SLACK,
                  "young bytes in use %llu -> %llu with %zu blocks of %llu "
                  "bytes freed", (unsigned long long)in_use,
                  (unsigned long long)y.bytes_in_use, freed,
                  (unsigned long long)bs);
    /* the freed blocks are the next ones of their class allocated */
    qsort(addr, DEAD_N, sizeof *addr, cmp_addr);
    size_t reused = 0;
    for (size_t i = 0; i < freed; i++) {
        void **n = heapd_alloc(m, 1, DEAD_NBYTES);
        ck_assert_ptr_nonnull(n);
        ck_assert(still_young(c, m, n));
        uintptr_t a = (uintptr_t)n;
        reused += bsearch(&a, addr, DEAD_N, sizeof *addr, cmp_addr) != NULL;
    }
    ck_assert_msg(reused == freed, "%zu of the %zu allocations after the "
                  "minor collection took a freed block", reused, freed);
    ck_assert_uint_eq(young_stats(m).minor_collections, y.minor_collections);
    free(addr);
    young_finish(c, m);
}
END_TEST

#define ZERO_N 32          /* objects of each size */
#define ZERO_MAX_NBYTES 600 /* past what the fast path zeroes inline */

/* ZERO_N young objects of one reference and NBYTES bytes, every byte
 * written and the reference set (to the object itself), each in a root
 * slot; their addresses appended to ADDR (malloc'd memory, not scanned). */
static __attribute__((noinline)) void dirty_row(heapd_mutator *m,
                                                size_t nbytes,
                                                uintptr_t *addr)
{
    for (size_t i = 0; i < ZERO_N; i++) {
        void **n = heapd_alloc(m, 1, nbytes);
        ck_assert_ptr_nonnull(n);
        memset(heapd_bytes(n), 0xa5, nbytes);
        heapd_write(m, n, &n[0], n);
        ck_assert_uint_ne(heapd_root_push(m, n), (size_t)-1);
        addr[i] = (uintptr_t)n;
    }
}

/* Note [Allocation fast path]: a block a minor collection freed is
 * zeroed again when it is taken, at every size the fast path zeroes in
 * line (both 8-byte alignments of a block, a tail word or none) and past
 * it: a fresh segment reads as zero anyway, a reused block does not.
 * Every object the test makes is written all over before it dies. */
START_TEST(reused_young_blocks_are_zeroed)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, YOUNG_MIN, 2);
    /* every object made, sorted: malloc'd, as the stack (a root) would
     * keep what it holds */
    size_t cap = (ZERO_MAX_NBYTES / 8 + 1) * 2 * ZERO_N, ndirty = 0;
    uintptr_t *dirty = malloc(cap * sizeof *dirty);
    ck_assert_ptr_nonnull(dirty);
    for (size_t nbytes = 0; nbytes <= ZERO_MAX_NBYTES; nbytes += 8) {
        dirty_row(m, nbytes, dirty + ndirty);
        ndirty += ZERO_N;
        heapd_root_pop(m, ZERO_N);
        harness_wipe_stack();
        /* the first may be one under way, for which they were born live
         * (Note [Minor collections in slices]) */
        minor_now(m);
        minor_now(m);
        qsort(dirty, ndirty, sizeof *dirty, cmp_addr);
        size_t reused = 0, made = ndirty;
        for (size_t i = 0; i < ZERO_N; i++) {
            void **n = heapd_alloc(m, 1, nbytes);
            ck_assert_ptr_nonnull(n);
            uintptr_t a = (uintptr_t)n;
            bool again = bsearch(&a, dirty, made, sizeof *dirty,
                                 cmp_addr) != NULL;
            reused += again;
            ck_assert_msg(n[0] == NULL, "the reference of a new object of "
                          "%zu bytes (%s block) is %p", nbytes,
                          again ? "a reused" : "a fresh", n[0]);
            unsigned char *b = heapd_bytes(n);
            for (size_t k = 0; k < nbytes; k++)
                ck_assert_msg(b[k] == 0, "byte %zu of a new object of %zu "
                              "bytes (%s block) is %#x", k, nbytes,
                              again ? "a reused" : "a fresh", b[k]);
            memset(b, 0xa5, nbytes);
            dirty[ndirty++] = a;
        }
        /* minor_now's garbage (48 bytes, no reference) takes the freed
         * blocks of its own class first */
        if (layout_size_class(16 + (uint32_t)nbytes) !=
            layout_size_class(56))
            ck_assert_msg(reused > 0, "no freed block of %zu bytes was "
                          "taken again", nbytes);
    }
    free(dirty);
    young_finish(c, m);
}
END_TEST

#define MIXED_N 16
#define MIXED_NBYTES 88 /* with one reference: a class nothing else takes */
#define MIXED_KEPT 5    /* the one published */

/* MIXED_N objects in a row, their addresses in ADDR (malloc'd memory,
 * not scanned), all young but the MIXED_KEPT-th, which is rooted: made
 * young and published (promoted where it is), or, SHARED, allocated in
 * the shared heap by heapd_alloc_shared.  Nothing else of the caller's
 * holds any. */
static __attribute__((noinline)) void mixed_row(heapd_mutator *m,
                                                uintptr_t *addr, bool shared)
{
    for (size_t i = 0; i < MIXED_N; i++) {
        void **n = shared && i == MIXED_KEPT
                       ? heapd_alloc_shared(m, 1, MIXED_NBYTES)
                       : heapd_alloc(m, 1, MIXED_NBYTES);
        ck_assert_ptr_nonnull(n);
        *(uint64_t *)heapd_bytes(n) = i;
        addr[i] = (uintptr_t)n;
    }
    void *p = (void *)addr[MIXED_KEPT];
    if (!shared)
        p = heapd_publish(m, p);
    ck_assert_uint_ne(heapd_root_push(m, p), (size_t)-1);
}

#define OLD_N 60000 /* shared nodes, one in four kept */
#define OLD_NBYTES 24 /* with one reference: a class nothing else takes */

/* Note [Sweeping a segment of young blocks only] in client/minor_sweep.c: a
 * nursery given partly free segments (Note [Reusing partly free
 * segments] in daemon/gc/segment.c), shared objects in use among free
 * blocks, sweeps them mark by mark.  A list of shared nodes loses three
 * in four to a cycle; a young mutator then allocates garbage of the
 * same class through several minor collections, some of it in the
 * list's segments.  Every node kept is still there, unchanged. */
START_TEST(a_nursery_in_partly_free_segments_keeps_their_objects)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *p;
    ck_assert_int_eq(heapd_attach(c, &p), 0);
    void **head = NULL;
    for (uint64_t i = 0; i < OLD_N; i++) {
        void **n = heapd_alloc(p, 1, OLD_NBYTES);
        ck_assert_ptr_nonnull(n);
        *(uint64_t *)heapd_bytes(n) = i;
        heapd_write(p, n, &n[0], head);
        head = n;
    }
    for (void **cur = head; cur;) {
        void **next = cur[0];
        for (int k = 0; k < 3 && next; k++)
            next = next[0];
        heapd_write(p, cur, &cur[0], next);
        cur = next;
    }
    ck_assert_int_eq(heapd_global_set(p, "old", head), 0);
    head = NULL;
    heapd_detach(p);

    heapd_mutator *m = attach_young(c, YOUNG_MIN, 2);
    harness_collect(m); /* three in four die, their blocks are swept */
    uint64_t seg =
        ((const struct layout_control *)heapd_heap_base(c))->segment_size;
    size_t nsegs = heapd_heap_size(c) / seg;
    unsigned char *old_segs = calloc(nsegs, 1);
    ck_assert_ptr_nonnull(old_segs);
    uintptr_t base = (uintptr_t)heapd_heap_base(c);
    for (void **n = heapd_global_get(m, "old"); n; n = n[0])
        old_segs[((uintptr_t)n - base) / seg] = 1;
    uint64_t minors = young_stats(m).minor_collections;
    size_t among = 0;
    for (int i = 0; i < 8 * (int)(YOUNG_MIN / 32); i++) {
        void **n = heapd_alloc(m, 1, OLD_NBYTES);
        ck_assert_ptr_nonnull(n);
        among += old_segs[((uintptr_t)n - base) / seg];
    }
    free(old_segs);
    ck_assert_uint_ge(young_stats(m).minor_collections, minors + 4);
    ck_assert_msg(among > 0, "no young block in the partly free segments "
                  "of the list: nothing was tested");
    uint64_t want = OLD_N - 1, kept = 0;
    for (void **n = heapd_global_get(m, "old"); n; n = n[0], want -= 4) {
        ck_assert_msg(mark_of(c, n) > 0 && mark_of(c, n) != LAYOUT_MARK_YOUNG,
                      "node %llu of the list has mark %d",
                      (unsigned long long)want, mark_of(c, n));
        ck_assert_uint_eq(*(uint64_t *)heapd_bytes(n), want);
        kept++;
    }
    ck_assert_uint_eq(kept, OLD_N / 4);
    young_finish(c, m);
}
END_TEST

/* Note [Sweeping a young segment eight marks at a time]: dead young
 * blocks that share a word of marks with a promoted object (SHARED: one
 * of the shared heap) are freed, and the kept one's mark and contents
 * stay as they were. */
static void sweep_beside(bool shared)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, YOUNG_MIN, 2);
    uintptr_t *addr = malloc(MIXED_N * sizeof *addr);
    ck_assert_ptr_nonnull(addr);
    mixed_row(m, addr, shared);
    uint64_t bs = block_bytes(1, MIXED_NBYTES);
    for (size_t i = 1; i < MIXED_N; i++)
        ck_assert_msg(addr[i] - addr[i - 1] == bs, "objects %zu and %zu "
                      "of a fresh class are not neighbours", i - 1, i);
    void *kept = (void *)addr[MIXED_KEPT];
    uint8_t mark = mark_of(c, kept);
    ck_assert_uint_ne(mark, 0);
    ck_assert_uint_ne(mark, LAYOUT_MARK_YOUNG);
    harness_wipe_stack();
    minor_now(m);
    size_t freed = 0;
    for (size_t i = 0; i < MIXED_N; i++)
        if (i != MIXED_KEPT)
            freed += mark_of(c, (void *)addr[i]) == 0;
    ck_assert_msg(freed >= MIXED_N - 1 - DEAD_STALE, "only %zu of %u dead "
                  "young blocks beside a %s one were freed", freed,
                  MIXED_N - 1, shared ? "shared" : "promoted");
    uint8_t now = mark_of(c, kept);
    ck_assert_msg(now == mark || (now != 0 && now != LAYOUT_MARK_YOUNG),
                  "the %s object's mark went from %u to %u",
                  shared ? "shared" : "promoted", mark, now);
    ck_assert_uint_eq(*(uint64_t *)heapd_bytes(kept), MIXED_KEPT);
    heapd_root_pop(m, 1);
    free(addr);
    young_finish(c, m);
}

START_TEST(sweep_frees_young_blocks_beside_a_promoted_one)
{
    sweep_beside(false);
}
END_TEST

/* The same beside a block of the shared heap that heapd_alloc_shared took
 * in the nursery's segment (Note [Sweeping a segment of young blocks
 * only] in client/minor.c: such a segment is swept mark by mark). */
START_TEST(sweep_frees_young_blocks_beside_a_shared_one)
{
    sweep_beside(true);
}
END_TEST

#define GROWN_LIST (256u << 10) /* nodes: 6 MiB of 24-byte blocks */
#define GROWN_GARBAGE (32u << 20) /* bytes allocated after it died */

/* A list of N young nodes that only the returned pointer -- a C local of
 * the caller's -- holds. */
static __attribute__((noinline)) void *local_list(heapd_mutator *m, size_t n)
{
    void *head = NULL;
    for (size_t i = 0; i < n; i++) {
        void **node = heapd_alloc(m, 1, 8);
        ck_assert_ptr_nonnull(node);
        heapd_write(m, node, &node[0], head);
        head = node;
    }
    return head;
}

/* Note [Minor collections before a wait]: a list that a C local held
 * through a minor collection grew the nursery to twice its size (Note
 * [Sizing the nursery]); once it is dead, a mutator that may hold no more
 * than 16 MiB allocates 32 MiB of garbage, which a nursery that waited
 * for its grown budget could not: it collects when it finds nothing in
 * the reserve instead. */
START_TEST(a_grown_nursery_collects_before_it_waits)
{
    harness_start_with(&D, "max_client_bytes = 16M\n");
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, YOUNG_MIN, 2);
    void *volatile head = local_list(m, GROWN_LIST);
    /* a minor collection that finds it whole: garbage until one runs,
     * within twice the list's bytes (Note [Sizing the nursery]) */
    heapd_young_stats y = young_stats(m);
    uint64_t bs = block_bytes(1, 8), bound = 2 * GROWN_LIST + 64;
    for (uint64_t k = 0; young_stats(m).minor_collections ==
                         y.minor_collections; k++) {
        ck_assert_msg(k < bound, "no minor collection after %llu "
                      "allocations", (unsigned long long)k);
        ck_assert_ptr_nonnull(heapd_alloc(m, 1, 8));
    }
    y = young_stats(m);
    ck_assert_msg(y.bytes_in_use >= GROWN_LIST * bs,
                  "the list (%u nodes) held by a local did not survive: "
                  "%llu young bytes in use", GROWN_LIST,
                  (unsigned long long)y.bytes_in_use);
    head = NULL;
    harness_wipe_stack();
    for (uint64_t k = 0; k < GROWN_GARBAGE / bs; k++)
        ck_assert_msg(heapd_alloc(m, 1, 8) != NULL,
                      "allocation %llu after the list died failed: %s (%s)",
                      (unsigned long long)k, strerror(errno),
                      heapd_last_error());
    heapd_young_stats z = young_stats(m);
    ck_assert_msg(z.bytes_in_use < y.bytes_in_use,
                  "young bytes in use %llu -> %llu: the dead list was "
                  "never freed", (unsigned long long)y.bytes_in_use,
                  (unsigned long long)z.bytes_in_use);
    (void)head;
    young_finish(c, m);
}
END_TEST

#define HELD_LIST (1u << 20) /* nodes: 24 MiB of 24-byte blocks, three
                               goals of an empty heap */

/* Note [Young memory and the heap goal] in daemon/gc/collector.c: a
 * nursery that grows on a list only a C local holds (Note [Sizing the
 * nursery]) to three goals of an empty heap holds memory no cycle could
 * free; its slot says what its young generation holds, and none of the
 * grants it takes waits for a cycle. */
START_TEST(a_nursery_grown_past_the_goal_waits_for_no_cycle)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, YOUNG_MIN, 2);
    heapd_stats_t before = harness_stats(c);
    void *volatile head = local_list(m, HELD_LIST);
    heapd_stats_t after = harness_stats(c);
    heapd_young_stats y = young_stats(m);
    uint64_t n = 0;
    for (void *p = head; p && n <= HELD_LIST; p = field(p, 0))
        n++;
    ck_assert_msg(n == HELD_LIST && y.minor_collections > 0,
                  "the list held by a local has %llu nodes of %u after "
                  "%llu minor collections", (unsigned long long)n,
                  HELD_LIST, (unsigned long long)y.minor_collections);
    ck_assert_msg(after.grants_paced == before.grants_paced,
                  "%llu grants waited for a cycle while the nursery grew "
                  "to %llu bytes in use",
                  (unsigned long long)(after.grants_paced -
                                       before.grants_paced),
                  (unsigned long long)y.bytes_in_use);
    head = NULL;
    (void)head;
    young_finish(c, m);
}
END_TEST

/* ---- 3. an old object reachable only through young ones ---- */

#define C_ID 77

/* Global "A" -> A (one field) -> C (shared, C_ID), and young B -> C in a
 * root slot of M, returned; C is then referenced by those two only. */
static size_t old_through_young(heapd_mutator *m)
{
    size_t sc = heapd_root_push(m, new_shared_node(m, 0, C_ID));
    void **a = heapd_alloc_shared(m, 1, 0);
    ck_assert_ptr_nonnull(a);
    heapd_write(m, a, &a[0], heapd_root_get(m, sc));
    ck_assert_int_eq(heapd_global_set(m, "A", a), 0);
    void **b = heapd_alloc(m, 1, 0);
    ck_assert_ptr_nonnull(b);
    ck_assert(heapd_is_young(m, b));
    heapd_write(m, b, &b[0], heapd_root_get(m, sc));
    size_t sb = heapd_root_push(m, b);
    heapd_root_set(m, sc, NULL);
    return sb;
}

/* (After GHC's Note [Aging under the non-moving collector].)  C is
 * reachable at the snapshot only through young B: A -> C is cut before
 * it.  Marking, the mutator moves C from B into A2, allocated while
 * marking (black: the marker never scans it, and a store into it is not
 * logged), and clears B -> C (a young store, no barrier): only the
 * preparatory push of B's fields, by the mutator or by the daemon, has
 * marked C.  C must live through the cycle and after. */
START_TEST(old_object_only_young_reaches_at_snapshot)
{
    char hold[64];
    harness_start_holding(&D, hold, sizeof hold);
    heapd_client *c = connect_plain(0);
    heapd_mutator *h = deep_blocked_helper(c);
    heapd_mutator *m = attach_young(c, 0, 0);
    add_ballast(m);
    int attempt, conclusive = 0;
    for (attempt = 0; attempt < ATTEMPTS && conclusive < RUNS; attempt++) {
        size_t sb = old_through_young(m);
        void **a = heapd_global_get(m, "A");
        heapd_write(m, a, &a[0], NULL); /* idle: no barrier */
        ck_assert_uint_ne(phase_of(c), LAYOUT_PHASE_MARK);
        /* every other attempt, marking is held until the move is done */
        bool held = attempt % 2;
        ck_assert_msg(until_marking(m, c, held ? hold : NULL),
                      "marking did not begin");
        uint32_t epoch = epoch_of(c);
        void **a2 = heapd_alloc_shared(m, 1, 0);
        ck_assert_ptr_nonnull(a2);
        void **b = heapd_root_get(m, sb);
        ck_assert(heapd_is_young(m, b));
        void *cc = field(b, 0);
        ck_assert(node_ok(cc, 0, C_ID));
        heapd_write(m, a2, &a2[0], cc);
        heapd_write(m, b, &b[0], NULL);
        /* the move happened in the marking whose snapshot saw B -> C */
        conclusive += phase_of(c) == LAYOUT_PHASE_MARK && epoch_of(c) == epoch;
        if (held)
            ck_assert_int_eq(unlink(hold), 0);
        size_t sa2 = heapd_root_push(m, a2);
        /* this cycle ends, and one more runs */
        harness_collect(m);
        ck_assert_msg(node_ok(field(heapd_root_get(m, sa2), 0), 0, C_ID),
                      "attempt %d: C was freed: the cycle did not see what "
                      "young B held at its snapshot", attempt);
        harness_expect_healthy(&D);
        harness_collect(m);
        ck_assert(node_ok(field(heapd_root_get(m, sa2), 0), 0, C_ID));
        heapd_root_pop(m, heapd_root_depth(m));
    }
    ck_assert_msg(conclusive, "in %d attempts marking never lasted until the "
                  "move was done", attempt);
    heapd_detach(m);
    helper_leave(h);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

struct cutter {
    heapd_client *c;
    char err[256];
};

/* A second mutator of the process: after the snapshot cuts A -> C, then
 * runs three whole cycles. */
static void *cut_and_collect(void *arg)
{
    struct cutter *k = arg;
    heapd_mutator *w;
    if (heapd_attach(k->c, &w) != 0) {
        snprintf(k->err, sizeof k->err, "attach: %s", heapd_last_error());
        return NULL;
    }
    if (!until_marking(w, k->c, NULL)) {
        snprintf(k->err, sizeof k->err, "marking did not begin");
        goto out;
    }
    void **a = heapd_global_get(w, "A");
    heapd_write(w, a, &a[0], NULL);
    for (int i = 0; i < 3; i++) {
        if (heapd_collect(w, HEAPD_COLLECT_WAIT) != 0) {
            snprintf(k->err, sizeof k->err, "collect: %s",
                     heapd_last_error());
            break;
        }
    }
out:
    heapd_detach(w);
    return NULL;
}

/* The daemon's side: the young mutator holds B -> C and is blocked from
 * before the cycle to after three; A -> C is cut after the first
 * snapshot, so in the next two C is reachable only through B, which only
 * the daemon's scan of the client's young blocks for the blocked mutator
 * finds (Note [The preparatory push]). */
START_TEST(blocked_young_mutator_keeps_old_object)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, 0, 0);
    size_t sb = old_through_young(m);
    uint64_t cycles = harness_stats(c).cycles_completed;
    struct cutter k = {.c = c};
    pthread_t t;
    heapd_blocking_enter(m);
    ck_assert_int_eq(pthread_create(&t, NULL, cut_and_collect, &k), 0);
    pthread_join(t, NULL);
    heapd_blocking_leave(m);
    ck_assert_msg(k.err[0] == '\0', "the cutting thread: %s", k.err);
    ck_assert_uint_ge(harness_stats(c).cycles_completed, cycles + 3);
    void **b = heapd_root_get(m, sb);
    ck_assert(heapd_is_young(m, b));
    ck_assert_ptr_null(field(heapd_global_get(m, "A"), 0));
    ck_assert_msg(node_ok(field(b, 0), 0, C_ID), "C was freed while young B "
                  "of a blocked mutator held it");
    harness_expect_healthy(&D);
    /* and it goes once nothing holds it */
    heapd_write(m, b, &b[0], NULL);
    harness_collect(m);
    young_finish(c, m);
}
END_TEST

/* ---- 4. a young graph published into a dirty object ---- */

/* One run of publication_into_dirty_object_while_marking, its marking
 * held while HOLD exists (NULL: not held); true if the publications
 * happened while marking, in the cycle of the snapshot. */
static bool dirty_publication(heapd_mutator *m, heapd_client *c, int attempt,
                              const char *hold)
{
    size_t so = heapd_root_push(m, heapd_alloc_shared(m, 3, 0));
    size_t sx1 = heapd_root_push(m, new_shared_node(m, 0, 1));
    size_t sx2 = heapd_root_push(m, new_shared_node(m, 0, 2));
    size_t sz = heapd_root_push(m, new_shared_node(m, 0, 5));
    void **y3 = new_node(m, 1, 3);
    ck_assert_ptr_nonnull(y3);
    heapd_write(m, y3, &y3[0], heapd_root_get(m, sz));
    size_t sy = heapd_root_push(m, y3);
    void **o = heapd_root_get(m, so);
    heapd_write(m, o, &o[0], heapd_root_get(m, sx1));
    heapd_root_set(m, sx1, NULL);
    heapd_root_set(m, sz, NULL); /* Z: only young Y3 holds it */
    /* every other attempt, marking is held until the publications */
    ck_assert_msg(until_marking(m, c, hold), "marking did not begin");
    uint32_t epoch = epoch_of(c);
    o = heapd_root_get(m, so);
    heapd_write(m, o, &o[1], heapd_root_get(m, sx2)); /* O dirty */
    size_t sn = heapd_root_push(m, heapd_alloc_shared(m, 1, 0));
    size_t s6 = heapd_root_push(m, new_node(m, 0, 6));
    void **y4 = new_node(m, 1, 4);
    ck_assert_ptr_nonnull(y4);
    heapd_write(m, y4, &y4[0], heapd_root_get(m, sy));
    ck_assert(heapd_is_young(m, y4) && heapd_is_young(m, heapd_root_get(m, s6)));
    void **n = heapd_root_get(m, sn);
    heapd_write(m, n, &n[0], y4); /* published: Y4 and Y3 */
    o = heapd_root_get(m, so);
    heapd_write(m, o, &o[2], heapd_root_get(m, s6)); /* published: Y6 */
    bool conclusive = phase_of(c) == LAYOUT_PHASE_MARK &&
                      epoch_of(c) == epoch;
    if (hold)
        ck_assert_int_eq(unlink(hold), 0);
    /* promoted where they are, and black (and dirty) from then on: the
     * header's tag is the epoch (Note [Promotion in place]) */
    ck_assert_ptr_eq(field(n, 0), y4);
    ck_assert_ptr_eq(field(o, 2), heapd_root_get(m, s6));
    void *promoted_now[] = {y4, field(y4, 0), field(o, 2)};
    for (size_t i = 0; i < 3; i++) {
        void *p = promoted_now[i];
        ck_assert(promoted(c, m, p));
        uint64_t h = __atomic_load_n((uint64_t *)p - 1, __ATOMIC_RELAXED);
        ck_assert_msg(!conclusive || layout_header_tag(h) == epoch,
                      "attempt %d: object %zu, promoted while marking, has "
                      "the tag %u, not the epoch %u", attempt, i,
                      layout_header_tag(h), epoch);
    }
    heapd_root_set(m, sx2, NULL);
    heapd_root_set(m, sy, NULL);
    heapd_root_set(m, s6, NULL);
    for (int cycle = 0; cycle < 2; cycle++) {
        harness_collect(m);
        o = heapd_root_get(m, so);
        ck_assert_msg(node_ok(field(o, 0), 0, 1) && node_ok(field(o, 1), 0, 2),
                      "attempt %d, cycle %d: O's old fields are damaged",
                      attempt, cycle);
        ck_assert_msg(node_ok(field(o, 2), 0, 6), "attempt %d, cycle %d: "
                      "the object published into dirty O while marking was "
                      "freed", attempt, cycle);
        n = heapd_root_get(m, sn);
        void *q4 = field(n, 0), *q3 = q4 ? field(q4, 0) : NULL;
        ck_assert_msg(node_ok(q4, 1, 4) && node_ok(q3, 1, 3),
                      "attempt %d, cycle %d: the graph published into N "
                      "while marking was freed", attempt, cycle);
        ck_assert_msg(node_ok(field(q3, 0), 0, 5), "attempt %d, cycle %d: "
                      "Z, reachable at the snapshot only through a young "
                      "object, was freed", attempt, cycle);
        harness_expect_healthy(&D);
    }
    heapd_root_pop(m, heapd_root_depth(m));
    return conclusive;
}

/* (After GHC's Note [Dirty flags in the non-moving collector].)  While
 * marking, O (allocated before) is made dirty by a write, its fields
 * logged once, and N is allocated (black, and dirty from the start); a
 * young graph published into either then is not logged: it is promoted
 * where it is, and must be black (Note [Promotion in place]).  Z,
 * reachable at the snapshot only through young Y3, must have been
 * pushed: Y3, promoted black into N, is never scanned. */
START_TEST(publication_into_dirty_object_while_marking)
{
    char hold[64];
    harness_start_holding(&D, hold, sizeof hold);
    heapd_client *c = connect_plain(0);
    heapd_mutator *h = deep_blocked_helper(c);
    heapd_mutator *m = attach_young(c, 0, 0);
    add_ballast(m);
    int attempt, conclusive = 0;
    for (attempt = 0; attempt < ATTEMPTS && conclusive < RUNS; attempt++)
        conclusive += dirty_publication(m, c, attempt,
                                        attempt % 2 ? hold : NULL);
    ck_assert_msg(conclusive, "in %d attempts marking never lasted until the "
                  "publications were done", attempt);
    heapd_detach(m);
    helper_leave(h);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("young");
    TCase *t = tcase_create("minor");
    tcase_add_test(t, young_list_through_minor_collections);
    tcase_add_test(t, aging_default_two);
    tcase_add_test(t, aging_asked_one);
    tcase_add_test(t, aging_heap_one);
    tcase_add_test(t, aging_asked_three);
    tcase_add_test(t, rooted_object_promoted_in_place_with_its_children);
    suite_add_tcase(s, t);
    t = tcase_create("locals");
    tcase_add_test(t, young_local_survives_minor_collections);
    tcase_add_test(t, interior_pointer_keeps_young_object);
    tcase_add_test(t, dead_young_blocks_are_reused);
    tcase_add_test(t, reused_young_blocks_are_zeroed);
    tcase_add_test(t, a_grown_nursery_collects_before_it_waits);
    tcase_add_test(t, a_nursery_grown_past_the_goal_waits_for_no_cycle);
    tcase_add_test(t, sweep_frees_young_blocks_beside_a_promoted_one);
    tcase_add_test(t, sweep_frees_young_blocks_beside_a_shared_one);
    tcase_add_test(t, a_nursery_in_partly_free_segments_keeps_their_objects);
    suite_add_tcase(s, t);
    t = tcase_create("publication");
    tcase_add_test(t, publication_into_dirty_object_while_marking);
    suite_add_tcase(s, t);
    t = tcase_create("push");
    tcase_add_test(t, old_object_only_young_reaches_at_snapshot);
    tcase_add_test(t, blocked_young_mutator_keeps_old_object);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
