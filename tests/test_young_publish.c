/* Publication end to end (Note [The young invariant], Note [Promotion in
 * place] and Note [Publishing a leaf] in client/minor.c), against a real
 * heapd with the verifier on: every store that makes a young graph shared
 * publishes it in place (heapd_write, heapd_cas, heapd_global_set,
 * heapd_publish, which returns its argument) and another process reads
 * it across cycles; a leaf is shared at once and counted, by the mutator
 * and by heapd as allocated in the shared heap; and a young mutator that
 * allocates mostly shared objects holds few segments (Note [Young
 * segments], Note [Sizing the nursery]).  The rest of the young
 * generation's end-to-end tests are tests/test_young.c.
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

#define TREE 50

/* Build a young tree of TREE nodes (node i has ids BASE + i, children
 * 2i + 1 and 2i + 2) and root it in a new slot, returned. */
static size_t build_tree(heapd_mutator *m, uint64_t base)
{
    void **holder = heapd_alloc(m, TREE, 0);
    ck_assert_ptr_nonnull(holder);
    size_t s = heapd_root_push(m, holder);
    ck_assert_uint_ne(s, (size_t)-1);
    for (size_t i = 0; i < TREE; i++) {
        void **n = new_node(m, 2, base + i);
        ck_assert_ptr_nonnull(n);
        heapd_write(m, holder, &holder[i], n);
    }
    holder = heapd_root_get(m, s);
    for (size_t i = 0; i < TREE; i++) {
        void **n = holder[i];
        ck_assert(heapd_is_young(m, n));
        for (size_t k = 0; k < 2; k++)
            if (2 * i + 1 + k < TREE)
                heapd_write(m, n, &n[k], holder[2 * i + 1 + k]);
    }
    heapd_root_set(m, s, holder[0]);
    ck_assert(heapd_is_young(m, heapd_root_get(m, s)));
    return s;
}

/* NULL if the tree from T is the one build_tree made with BASE (and, if
 * SHARED, has no young node: each promoted where it is, its mark an
 * epoch), else what is wrong. */
static const char *tree_broken(const heapd_client *c, const heapd_mutator *m,
                               void *t, uint64_t base, bool shared)
{
    struct {
        void *n;
        size_t i;
    } stack[TREE];
    size_t depth = 0, seen = 0;
    stack[depth].n = t;
    stack[depth++].i = 0;
    while (depth > 0) {
        void *n = stack[--depth].n;
        size_t i = stack[depth].i;
        if (!node_ok(n, 2, base + i))
            return "a node of the tree is damaged";
        if (shared && !promoted(c, m, n))
            return "a node of a published tree is still young";
        seen++;
        for (size_t k = 0; k < 2; k++) {
            size_t ci = 2 * i + 1 + k;
            void *ch = field(n, k);
            if ((ci < TREE) != (ch != NULL))
                return "the tree has the wrong shape";
            if (ch) {
                if (depth == TREE)
                    return "the tree has too many nodes";
                stack[depth].n = ch;
                stack[depth++].i = ci;
            }
        }
    }
    return seen == TREE ? NULL : "the tree has the wrong number of nodes";
}

#define ck_tree(c, m, t, base, shared)                                       \
    do {                                                                     \
        const char *why_ = tree_broken((c), (m), (t), (base), (shared));     \
        ck_assert_msg(!why_, "tree %llu: %s", (unsigned long long)(base),    \
                      why_);                                                 \
    } while (0)

/* The published bytes grew by at least a tree's nodes since *LAST; *LAST
 * moves on. */
static void published_grew(heapd_mutator *m, uint64_t *last, const char *by)
{
    uint64_t now = young_stats(m).promoted_published_bytes;
    ck_assert_msg(now >= *last + TREE * 40, "%s published %llu bytes, not a "
                  "tree's %u", by, (unsigned long long)(now - *last),
                  TREE * 40);
    *last = now;
}

/* A second process reads global "tree" (base 300) across 20 major
 * cycles, as a mutator without a nursery. */
static void reader_kid(int go)
{
    char b;
    /* forked before the test connects, so that it starts its threads
     * in a process that had none (ThreadSanitizer and fork); it waits for
     * the tree */
    if (read(go, &b, 1) != 1)
        _exit(5);
    heapd_connect_opts o = {.socket_path = D.sock};
    heapd_client *c;
    heapd_mutator *m;
    if (heapd_connect(&c, &o) != 0 || heapd_attach(c, &m) != 0) {
        fprintf(stderr, "reader: %s\n", heapd_last_error());
        _exit(2);
    }
    heap_lo = (uintptr_t)heapd_heap_base(c);
    heap_hi = heap_lo + heapd_heap_size(c);
    for (int k = 0; k < 20; k++) {
        void *t = heapd_global_get(m, "tree");
        const char *why = t ? tree_broken(c, m, t, 300, true) : "no tree";
        if (why) {
            fprintf(stderr, "reader, cycle %d: %s\n", k, why);
            _exit(3);
        }
        if (heapd_collect(m, HEAPD_COLLECT_WAIT) != 0) {
            fprintf(stderr, "reader: collect: %s\n", heapd_last_error());
            _exit(4);
        }
    }
    heapd_detach(m);
    heapd_disconnect(c);
    _exit(0);
}

START_TEST(publication_promotes_young_graphs_in_place)
{
    harness_start_with(&D, NULL);
    int go[2];
    ck_assert_int_eq(pipe(go), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        close(go[1]);
        reader_kid(go[0]);
    }
    close(go[0]);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, 0, 0);
    void **s = heapd_alloc_shared(m, 4, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert(!heapd_is_young(m, s));
    size_t ss = heapd_root_push(m, s);
    size_t sx = heapd_root_push(m, new_shared_node(m, 0, 9999));
    uint64_t pub = young_stats(m).promoted_published_bytes;

    /* heapd_write: the field gets the tree itself, promoted where it is */
    size_t st = build_tree(m, 0);
    void **t = heapd_root_get(m, st);
    heapd_write(m, s, &s[0], t);
    ck_assert_ptr_eq(field(s, 0), t);
    ck_assert_ptr_eq(heapd_root_get(m, st), t);
    ck_tree(c, m, t, 0, true);
    published_grew(m, &pub, "heapd_write");
    /* a store into it is now a shared store, with its barrier */
    void *right = field(t, 1), *x = heapd_root_get(m, sx);
    heapd_write(m, t, &t[1], x);
    ck_assert_ptr_eq(field(field(s, 0), 1), x);
    heapd_write(m, t, &t[1], right);
    ck_tree(c, m, field(s, 0), 0, true);

    /* heapd_cas, succeeding: the tree itself, promoted */
    st = build_tree(m, 100);
    void **t2 = heapd_root_get(m, st);
    ck_assert(heapd_cas(m, s, &s[1], NULL, t2));
    ck_assert_ptr_eq(field(s, 1), t2);
    ck_tree(c, m, t2, 100, true);
    published_grew(m, &pub, "heapd_cas");
    ck_assert(heapd_cas(m, s, &s[2], NULL, t2));
    ck_assert_ptr_eq(field(s, 2), t2);
    /* failing: nothing stored, the tree whole where it is */
    st = build_tree(m, 200);
    t = heapd_root_get(m, st);
    ck_assert(!heapd_cas(m, s, &s[1], NULL, t));
    ck_assert_ptr_eq(field(s, 1), t2);
    ck_assert_ptr_eq(heapd_root_get(m, st), t);
    ck_tree(c, m, t, 200, false);

    /* heapd_global_set */
    st = build_tree(m, 300);
    t = heapd_root_get(m, st);
    ck_assert_int_eq(heapd_global_set(m, "tree", t), 0);
    ck_assert_ptr_eq(heapd_global_get(m, "tree"), t);
    ck_tree(c, m, t, 300, true);
    published_grew(m, &pub, "heapd_global_set");

    /* heapd_publish: its argument back, promoted with all it reaches */
    st = build_tree(m, 400);
    t = heapd_root_get(m, st);
    ck_assert_ptr_eq(heapd_publish(m, t), t);
    ck_tree(c, m, t, 400, true);
    published_grew(m, &pub, "heapd_publish");
    ck_assert_ptr_eq(heapd_publish(m, t), t);
    ck_assert_ptr_eq(heapd_root_get(m, st), t);
    ck_assert_ptr_eq(heapd_publish(m, s), s);
    ck_assert_ptr_null(heapd_publish(m, NULL));
    ck_assert_uint_eq(young_stats(m).promoted_published_bytes, pub);
    ck_assert_uint_eq(harness_stats(c).promoted_published_bytes, pub);

    /* another process reads the published tree across 20 cycles; this
     * mutator waits in a blocking region meanwhile */
    ck_assert_int_eq(write(go[1], "g", 1), 1);
    close(go[1]);
    heapd_blocking_enter(m);
    harness_wait_ok(kid, "the reading process");
    heapd_blocking_leave(m);
    s = heapd_root_get(m, ss);
    ck_tree(c, m, field(s, 0), 0, true);
    ck_tree(c, m, field(s, 1), 100, true);
    ck_tree(c, m, heapd_global_get(m, "tree"), 300, true);
    ck_tree(c, m, heapd_root_get(m, st), 400, true);
    ck_assert(node_ok(heapd_root_get(m, sx), 0, 9999));
    young_finish(c, m);
}
END_TEST

/* Start heapd, attach a young mutator of a new client (*C) and root a
 * shared object of NREFS fields for it at *SLOT. */
static heapd_mutator *young_with_holder(heapd_client **c, size_t nrefs,
                                        size_t *slot)
{
    harness_start_with(&D, NULL);
    *c = connect_plain(0);
    heapd_mutator *m = attach_young(*c, 0, 0);
    void **s = heapd_alloc_shared(m, nrefs, 0);
    ck_assert_ptr_nonnull(s);
    *slot = heapd_root_push(m, s);
    return m;
}

/* Publishing leaves: young objects with no reference field, each
 * promoted by one call (Note [Publishing a leaf] in client/minor.c). */

START_TEST(a_published_leaf_is_shared_at_once_and_counted)
{
    heapd_client *c;
    size_t ss;
    heapd_mutator *m = young_with_holder(&c, 3, &ss);
    void **s;
    const char *by[] = {"heapd_write", "heapd_cas", "heapd_global_set",
                        "heapd_publish"};
    void *leaf[4];
    for (int k = 0; k < 4; k++) {
        leaf[k] = new_node(m, 0, 700 + (uint64_t)k);
        ck_assert_ptr_nonnull(leaf[k]);
        ck_assert(still_young(c, m, leaf[k]));
        uint64_t block = block_bytes(0, heapd_nbytes(leaf[k]));
        uint64_t pub = young_stats(m).promoted_published_bytes;
        s = heapd_root_get(m, ss);
        switch (k) {
        case 0: heapd_write(m, s, &s[0], leaf[k]); break;
        case 1: ck_assert(heapd_cas(m, s, &s[1], NULL, leaf[k])); break;
        case 2: ck_assert_int_eq(heapd_global_set(m, "leaf", leaf[k]), 0);
            break;
        default:
            ck_assert_ptr_eq(heapd_publish(m, leaf[k]), leaf[k]);
            heapd_write(m, s, &s[2], leaf[k]);
        }
        ck_assert_msg(promoted(c, m, leaf[k]), "the leaf %s stored is "
                      "still young", by[k]);
        ck_assert_msg(young_stats(m).promoted_published_bytes == pub + block,
                      "%s published %llu bytes, not the leaf's block of "
                      "%llu", by[k], (unsigned long long)(
                          young_stats(m).promoted_published_bytes - pub),
                      (unsigned long long)block);
        /* heapd counts from the slot what the mutator counts */
        ck_assert_uint_eq(harness_stats(c).promoted_published_bytes,
                          young_stats(m).promoted_published_bytes);
        /* published again: nothing more */
        ck_assert_ptr_eq(heapd_publish(m, leaf[k]), leaf[k]);
        ck_assert_uint_eq(young_stats(m).promoted_published_bytes,
                          pub + block);
    }
    /* shared now: the leaves outlive minor collections and major cycles
     * with only the shared object and the global to hold them */
    for (int cycle = 0; cycle < 2; cycle++) {
        minor_now(m);
        harness_collect(m);
        s = heapd_root_get(m, ss);
        ck_assert(node_ok(field(s, 0), 0, 700));
        ck_assert(node_ok(field(s, 1), 0, 701));
        ck_assert(node_ok(heapd_global_get(m, "leaf"), 0, 702));
        ck_assert(node_ok(field(s, 2), 0, 703));
        harness_expect_healthy(&D);
    }
    young_finish(c, m);
}
END_TEST

/* What a young mutator promotes is allocated in the shared heap as far as
 * heapd is concerned (Note [Promotion in place] in client/minor.c): its
 * count of bytes allocated grows by the blocks published, and not by
 * young blocks that die young. */
#define COUNTED_LEAVES 4096

START_TEST(published_objects_count_as_allocated_in_the_shared_heap)
{
    heapd_client *c;
    size_t ss;
    heapd_mutator *m = young_with_holder(&c, 1, &ss);
    void **s;
    uint64_t block = 0, before = harness_stats(c).bytes_allocated;
    for (size_t i = 0; i < COUNTED_LEAVES; i++) {
        void *young = new_node(m, 0, i); /* dies young */
        ck_assert_ptr_nonnull(young);
        void *leaf = new_node(m, 0, i);
        ck_assert_ptr_nonnull(leaf);
        block = block_bytes(0, heapd_nbytes(leaf));
        s = heapd_root_get(m, ss);
        heapd_write(m, s, &s[0], leaf);
    }
    uint64_t grew = harness_stats(c).bytes_allocated - before;
    ck_assert_msg(grew == COUNTED_LEAVES * block, "heapd counted %llu bytes "
                  "allocated for %d published blocks of %llu bytes (and as "
                  "many young ones that died)", (unsigned long long)grew,
                  COUNTED_LEAVES, (unsigned long long)block);
    ck_assert_uint_eq(young_stats(m).promoted_published_bytes,
                      COUNTED_LEAVES * block);
    young_finish(c, m);
}
END_TEST

/* A young mutator that allocates shared objects (heapd_alloc_shared)
 * of one size, and with YOUNG_EVERY > 0 a young one of the same size
 * (dropped) after every YOUNG_EVERY of them: the segments it fills go
 * back, at once when they hold no young block, and at the next minor
 * collection, which a budget of shared blocks brings, when they do (Note
 * [Young segments] and Note [Sizing the nursery] in client/minor.c); and
 * what it kept stays whole.  Before, it held every segment it had filled:
 * 64 MiB of them here. */
#define SHARED_ONLY_BYTES (64u << 20)
#define SHARED_ONLY_KEEP 64

static void mostly_shared(unsigned young_every)
{
    heapd_client *c;
    size_t sk;
    heapd_mutator *m = young_with_holder(&c, SHARED_ONLY_KEEP, &sk);
    void **keep;
    heapd_stats_t base = harness_stats(c);
    const struct layout_control *ctl = heapd_heap_base(c);
    uint64_t seg = ctl->segment_size, most = 0;
    size_t n = SHARED_ONLY_BYTES / 32, every = n / SHARED_ONLY_KEEP;
    for (size_t i = 0; i < n; i++) {
        void **p = new_shared_node(m, 0, i);
        ck_assert_ptr_nonnull(p);
        if (young_every && i % young_every == 0)
            ck_assert_ptr_nonnull(new_node(m, 0, i));
        if (i % every == 0 && i / every < SHARED_ONLY_KEEP) {
            keep = heapd_root_get(m, sk);
            heapd_write(m, keep, &keep[i / every], p);
        }
        if (i % (n / 16) == 0) {
            heapd_stats_t st = harness_stats(c);
            uint64_t held = (st.segments_owned - base.segments_owned) * seg;
            most = held > most ? held : most;
        }
    }
    /* the young ones alone would not have brought one */
    uint64_t minors = young_stats(m).minor_collections;
    ck_assert_msg(young_every ? minors > 0 : minors == 0,
                  "%llu minor collections", (unsigned long long)minors);
    /* at most its nursery's budget of shared blocks in young segments
     * before the collection, as many again while its slices sweep, and a
     * reserve */
    uint64_t bound = 2 * young_stats(m).young_bytes + SHARED_ONLY_BYTES / 16;
    ck_assert_msg(bound < SHARED_ONLY_BYTES / 2, "a budget of %llu KiB is "
                  "too large for this test",
                  (unsigned long long)(young_stats(m).young_bytes >> 10));
    ck_assert_msg(most <= bound, "the young mutator held %llu KiB of "
                  "segments while it allocated %u MiB of shared objects "
                  "(at most %llu KiB)", (unsigned long long)(most >> 10),
                  SHARED_ONLY_BYTES >> 20, (unsigned long long)(bound >> 10));
    for (int cycle = 0; cycle < 2; cycle++) {
        harness_collect(m);
        keep = heapd_root_get(m, sk);
        for (size_t k = 0; k < SHARED_ONLY_KEEP; k++)
            ck_assert_msg(node_ok(field(keep, k), 0, k * every),
                          "kept object %zu is damaged after cycle %d", k,
                          cycle);
    }
    young_finish(c, m);
}

START_TEST(a_young_mutator_allocating_shared_only_holds_few_segments)
{
    mostly_shared(0);
}
END_TEST

START_TEST(a_young_mutator_allocating_mostly_shared_holds_few_segments)
{
    mostly_shared(100);
}
END_TEST

#define RING 64

/* heapd_publish of one node of a young graph -- a ring of RING nodes,
 * each also referencing a shared node or none -- returns that node and
 * promotes the ring, every node once, and nothing else: a young node
 * outside it, even one that references the ring, stays young. */
START_TEST(publish_returns_its_argument_and_promotes_the_whole_graph)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, 0, 0);
    void **x = new_shared_node(m, 0, 9000);
    ck_assert_ptr_nonnull(x);
    int xmark = mark_of(c, x);
    ck_assert_uint_ne(heapd_root_push(m, x), (size_t)-1);
    void **ring[RING];
    for (size_t i = 0; i < RING; i++) {
        ring[i] = new_node(m, 2, 100 + i);
        ck_assert_ptr_nonnull(ring[i]);
        heapd_root_push(m, ring[i]);
    }
    for (size_t i = 0; i < RING; i++) {
        heapd_write(m, ring[i], &ring[i][0], ring[(i + 1) % RING]);
        heapd_write(m, ring[i], &ring[i][1], i % 2 ? NULL : x);
    }
    void **out = new_node(m, 1, 5); /* young, outside: it references ring */
    ck_assert_ptr_nonnull(out);
    heapd_write(m, out, &out[0], ring[RING / 2]);
    ck_assert_uint_ne(heapd_root_push(m, out), (size_t)-1);
    void **lone = new_node(m, 0, 6); /* young, unrelated */
    ck_assert_uint_ne(heapd_root_push(m, lone), (size_t)-1);
    for (size_t i = 0; i < RING; i++)
        ck_assert(still_young(c, m, ring[i]));
    uint64_t pub = young_stats(m).promoted_published_bytes;
    ck_assert_ptr_eq(heapd_publish(m, ring[7]), ring[7]);
    for (size_t i = 0; i < RING; i++) {
        ck_assert_msg(promoted(c, m, ring[i]), "ring node %zu: young %d "
                      "mark %d", i, heapd_is_young(m, ring[i]),
                      mark_of(c, ring[i]));
        ck_assert(node_ok(ring[i], 2, 100 + i));
        ck_assert_ptr_eq(field(ring[i], 0), ring[(i + 1) % RING]);
        ck_assert_ptr_eq(field(ring[i], 1), i % 2 ? NULL : (void *)x);
    }
    ck_assert_uint_eq(young_stats(m).promoted_published_bytes - pub,
                      RING * block_bytes(2, sizeof(struct payload)));
    ck_assert_msg(still_young(c, m, out) && still_young(c, m, lone),
                  "a publication promoted a young object its value does "
                  "not reach");
    ck_assert_int_eq(mark_of(c, x), xmark);
    ck_assert_ptr_eq(field(out, 0), ring[RING / 2]);
    /* published again: nothing more to do */
    pub = young_stats(m).promoted_published_bytes;
    ck_assert_ptr_eq(heapd_publish(m, ring[0]), ring[0]);
    ck_assert_uint_eq(young_stats(m).promoted_published_bytes, pub);
    /* the ring is the heap's now: a global keeps it through cycles, and
     * the young objects stay their mutator's */
    ck_assert_int_eq(heapd_global_set(m, "ring", ring[0]), 0);
    heapd_root_pop(m, heapd_root_depth(m));
    for (int cycle = 0; cycle < 2; cycle++) {
        minor_now(m);
        harness_collect(m);
        void **n = heapd_global_get(m, "ring");
        for (size_t i = 0; i < RING; i++, n = field(n, 0))
            ck_assert_msg(n == ring[i] && node_ok(n, 2, 100 + i),
                          "cycle %d: ring node %zu is damaged", cycle, i);
        ck_assert_ptr_eq(n, ring[0]);
        ck_assert(node_ok(x, 0, 9000));
    }
    young_finish(c, m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("young_publish");
    TCase *t = tcase_create("publication");
    tcase_add_test(t, publication_promotes_young_graphs_in_place);
    tcase_add_test(t, publish_returns_its_argument_and_promotes_the_whole_graph);
    tcase_add_test(t, a_published_leaf_is_shared_at_once_and_counted);
    tcase_add_test(t, published_objects_count_as_allocated_in_the_shared_heap);
    suite_add_tcase(s, t);
    t = tcase_create("segments");
    tcase_add_test(t,
                   a_young_mutator_allocating_shared_only_holds_few_segments);
    tcase_add_test(t,
                   a_young_mutator_allocating_mostly_shared_holds_few_segments);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
