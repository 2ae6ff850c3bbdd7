/* gcbench: GCBench (Ellis, Kovac, Boehm), the classic binary-tree collector
 * benchmark, on heapd, on the Boehm collector, and on malloc/free.
 *
 * What it measures: the total time of the standard GCBench workload, the
 * longest and the summed mutator pause, and peak memory.  The workload:
 *   1. build and drop a "stretch" tree of depth 18;
 *   2. build a long-lived tree of depth 16 and a long-lived array of 500000
 *      doubles, both kept to the end;
 *   3. for depth d = 4, 6, ..., 16: build NumIters(d) trees of depth d top
 *      down (Populate: allocate a node, then its children, recursively) and
 *      drop each, then NumIters(d) trees bottom up (MakeTree: children
 *      first, then the parent) and drop each, where
 *        TreeSize(d) = 2^(d+1) - 1, NumIters(d) = 2 TreeSize(18) / TreeSize(d);
 *   4. check that the long-lived tree and array are intact.
 * A node has two references (left, right) and two ints (i, j).
 *
 * How, per implementation (one per process: `gcbench heapd|boehm|malloc`):
 *   heapd   nodes are heapd_alloc(m, 2, 8), the array heapd_alloc(m, 0,
 *           500000 * 8).  Young off keeps to the precise rule (Note [Client
 *           GC discipline] in heapd.h: a HEAPD_MUTATOR_PRECISE mutator's
 *           locals are no roots), so that it runs precise too
 *           (HEAPD_BENCH_PRECISE=1) and compares with the runs before C
 *           locals were roots: the long-lived tree and the array sit in
 *           root slots, and so does the tree being built.
 *           Populate writes each new child into its parent (reachable from a
 *           root) with heapd_write before the next allocation.  MakeTree
 *           builds into a caller-given root slot: the left subtree is kept in
 *           a pushed slot while the right one is built into the caller's slot
 *           and while the parent is allocated; the parent then replaces the
 *           right subtree in the caller's slot.
 *           --young attaches the mutator with HEAPD_MUTATOR_YOUNG (nursery
 *           budget --young-size, --young-age, default the heap's): young
 *           objects never move and a minor collection keeps what C locals
 *           hold (Note [Young objects, for the program] in heapd.h), so
 *           MakeTree is written as C is, its subtrees in C locals, and
 *           Populate is the same.  --rooted runs the rooted MakeTree and a
 *           rooted Populate (the node being populated sits in a root slot
 *           of its level, read back after each allocation: the port the
 *           copying nursery this project had before needed), with or
 *           without a young
 *           generation, to tell what the port costs from what the young
 *           generation gains.  Minor collections: heapd_young_stats_get
 *           (count, longest, p99, promoted bytes, by age and by
 *           publication), added to the RESULT line.
 *           Pauses: heapd_stats pause_max_ns / pause_total_ns (the daemon's
 *           figures for the heap: run against a fresh heapd so they cover this
 *           program only), and when heapd_stats_t has them (the build checks,
 *           HEAPD_BENCH_PHASE_PAUSES) the concurrent collector's
 *           snapshot_pause_max_ns and final_sync_pause_max_ns (added to its
 *           RESULT line as snapshot_pause_max_ms, final_sync_pause_max_ms).  Memory: this process's peak RSS (the mapped heap
 *           pages it touched count in it) and the heap's committed bytes,
 *           sampled after every phase (peak) and at the end.
 *   boehm   GC_MALLOC nodes, GC_MALLOC_ATOMIC array, default settings.
 *           Pauses: Boehm 8.2 has no stopped-time counter, so a
 *           GC_set_on_collection_event callback timestamps GC_EVENT_START and
 *           GC_EVENT_END (CLOCK_MONOTONIC); the collection runs on the
 *           allocating (only) mutator thread with the world stopped, so
 *           START..END is its pause.  Lazy sweeping done later inside
 *           GC_MALLOC is not counted as pause.  GC_get_full_gc_total_time()
 *           is printed as a cross-check.  Memory: peak RSS.
 *   malloc  glibc malloc, each dropped tree freed explicitly (not timed
 *           separately: freeing is part of the manual-memory cost).
 *
 * Output: the classic per-phase lines, then one machine-readable line,
 *   RESULT gcbench impl=NAME total_ms=.. pause_max_ms=.. pause_total_ms=..
 *          maxrss_kib=.. heap_committed_end=.. heap_committed_peak=.. gcs=..
 *
 *   gcbench heapd|boehm|malloc [--socket PATH] [--check]
 *           [--young | --rooted] [--young-size BYTES] [--young-age A]
 * (impl= in the RESULT line is heapd, heapd_young or heapd_rooted)
 * --check verifies the shape of every tree built (slower; for debugging
 * collectors, not for timing).
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libgc is built thread-aware: GC_THREADS declares its thread API (and
 * GC_get_parallel); this program itself starts no threads. */
#define GC_THREADS
#include <gc.h>

#include "bench_util.h"
#include "heapd.h"

enum {
    STRETCH_DEPTH = 18,
    LONG_LIVED_DEPTH = 16,
    ARRAY_SIZE = 500000,
    MIN_DEPTH = 4,
    MAX_DEPTH = 16,
};

static long tree_size(int d) { return (1L << (d + 1)) - 1; }
static long num_iters(int d)
{
    return 2 * tree_size(STRETCH_DEPTH) / tree_size(d);
}

static bool check_trees;

/* Node layout of the Boehm and malloc versions; the heapd node has the
 * same fields: two references, then 8 raw bytes for i and j. */
typedef struct node {
    struct node *left, *right;
    int i, j;
} node;

/* Verify a complete tree of depth D: every inner node has two children and
 * every leaf none.  LEFT/RIGHT read a node's references. */
static void check_shape(void *n, int d, void *(*left)(void *),
                        void *(*right)(void *))
{
    if (!n)
        die("tree check: missing node at height %d", d);
    void *l = left(n), *r = right(n);
    if (d == 0) {
        if (l || r)
            die("tree check: leaf %p has children (%p, %p)", n, l, r);
        return;
    }
    check_shape(l, d - 1, left, right);
    check_shape(r, d - 1, left, right);
}
static void *c_left(void *n) { return ((node *)n)->left; }
static void *c_right(void *n) { return ((node *)n)->right; }

/* ---- what every implementation provides ---- */

typedef struct impl {
    const char *name;
    void (*init)(void);
    void (*stretch)(void);
    void (*long_lived)(void);            /* tree and array, kept */
    void (*top_down)(int depth, long iters);
    void (*bottom_up)(int depth, long iters);
    void (*check_long_lived)(void);
    void (*sample)(void);                /* memory sample after a phase */
    void (*report)(double total_ms);     /* the RESULT line */
} impl;

static void check_array(const double *a)
{
    if (a[1000] != 1.0 / 1000 || a[ARRAY_SIZE / 2 - 1] !=
                                     1.0 / (ARRAY_SIZE / 2 - 1))
        die("long-lived array corrupted: a[1000] = %g", a[1000]);
}

static void fill_array(double *a)
{
    for (int i = 1; i < ARRAY_SIZE / 2; i++)
        a[i] = 1.0 / i;
}

/* ---- Boehm ---- */

static node *b_long_lived;
static double *b_array;

#include "boehm_pauses.h"

static void b_init(void)
{
    GC_INIT();
    GC_start_performance_measurement();
    GC_set_on_collection_event(b_on_event);
}

static node *b_node(node *l, node *r)
{
    node *n = GC_MALLOC(sizeof *n);
    if (!n)
        die("GC_MALLOC: out of memory");
    n->left = l;
    n->right = r;
    return n;
}

static void b_populate(int d, node *n)
{
    if (d <= 0)
        return;
    n->left = b_node(NULL, NULL);
    n->right = b_node(NULL, NULL);
    b_populate(d - 1, n->left);
    b_populate(d - 1, n->right);
}

static node *b_make(int d)
{
    if (d <= 0)
        return b_node(NULL, NULL);
    node *l = b_make(d - 1);
    node *r = b_make(d - 1);
    return b_node(l, r);
}

static void b_stretch(void)
{
    node *t = b_make(STRETCH_DEPTH);
    if (check_trees)
        check_shape(t, STRETCH_DEPTH, c_left, c_right);
}

static void b_long_lived_build(void)
{
    b_long_lived = b_node(NULL, NULL);
    b_populate(LONG_LIVED_DEPTH, b_long_lived);
    b_array = GC_MALLOC_ATOMIC(sizeof(double) * ARRAY_SIZE);
    if (!b_array)
        die("GC_MALLOC_ATOMIC: out of memory");
    memset(b_array, 0, sizeof(double) * ARRAY_SIZE);
    fill_array(b_array);
}

static void b_top_down(int d, long iters)
{
    for (long k = 0; k < iters; k++) {
        node *t = b_node(NULL, NULL);
        b_populate(d, t);
        if (check_trees)
            check_shape(t, d, c_left, c_right);
    }
}

static void b_bottom_up(int d, long iters)
{
    for (long k = 0; k < iters; k++) {
        node *t = b_make(d);
        if (check_trees)
            check_shape(t, d, c_left, c_right);
    }
}

static void b_check(void)
{
    check_shape(b_long_lived, LONG_LIVED_DEPTH, c_left, c_right);
    check_array(b_array);
}

static void b_sample(void) {}

static void b_report(double total_ms)
{
    printf("boehm: %llu collections (GC_get_gc_no %llu), "
           "GC_get_full_gc_total_time %lu ms, heap %zu bytes, "
           "parallel marking %s\n",
           (unsigned long long)b_events, (unsigned long long)GC_get_gc_no(),
           GC_get_full_gc_total_time(), GC_get_heap_size(),
           GC_get_parallel() ? "on" : "off");
    printf("RESULT gcbench impl=boehm total_ms=%.1f pause_max_ms=%.3f "
           "pause_total_ms=%.1f maxrss_kib=%ld heap_committed_end=%zu "
           "heap_committed_peak=- gcs=%llu\n",
           total_ms, b_pause_max / 1e6, b_pause_total / 1e6, peak_rss_kib(),
           GC_get_heap_size(), (unsigned long long)GC_get_gc_no());
}

/* ---- malloc ---- */

static node *m_long_lived;
static double *m_array;

static void m_init(void) {}

static node *m_node(node *l, node *r)
{
    node *n = malloc(sizeof *n);
    if (!n)
        die("malloc: out of memory");
    n->left = l;
    n->right = r;
    n->i = n->j = 0;
    return n;
}

static void m_free_tree(node *n)
{
    if (!n)
        return;
    m_free_tree(n->left);
    m_free_tree(n->right);
    free(n);
}

static void m_populate(int d, node *n)
{
    if (d <= 0)
        return;
    n->left = m_node(NULL, NULL);
    n->right = m_node(NULL, NULL);
    m_populate(d - 1, n->left);
    m_populate(d - 1, n->right);
}

static node *m_make(int d)
{
    if (d <= 0)
        return m_node(NULL, NULL);
    node *l = m_make(d - 1);
    node *r = m_make(d - 1);
    return m_node(l, r);
}

static void m_stretch(void)
{
    node *t = m_make(STRETCH_DEPTH);
    if (check_trees)
        check_shape(t, STRETCH_DEPTH, c_left, c_right);
    m_free_tree(t);
}

static void m_long_lived_build(void)
{
    m_long_lived = m_node(NULL, NULL);
    m_populate(LONG_LIVED_DEPTH, m_long_lived);
    m_array = calloc(ARRAY_SIZE, sizeof(double));
    if (!m_array)
        die("calloc: out of memory");
    fill_array(m_array);
}

static void m_top_down(int d, long iters)
{
    for (long k = 0; k < iters; k++) {
        node *t = m_node(NULL, NULL);
        m_populate(d, t);
        if (check_trees)
            check_shape(t, d, c_left, c_right);
        m_free_tree(t);
    }
}

static void m_bottom_up(int d, long iters)
{
    for (long k = 0; k < iters; k++) {
        node *t = m_make(d);
        if (check_trees)
            check_shape(t, d, c_left, c_right);
        m_free_tree(t);
    }
}

static void m_check(void)
{
    check_shape(m_long_lived, LONG_LIVED_DEPTH, c_left, c_right);
    check_array(m_array);
}

static void m_sample(void) {}

static void m_report(double total_ms)
{
    printf("RESULT gcbench impl=malloc total_ms=%.1f pause_max_ms=0 "
           "pause_total_ms=0 maxrss_kib=%ld heap_committed_end=- "
           "heap_committed_peak=- gcs=0\n",
           total_ms, peak_rss_kib());
    m_free_tree(m_long_lived);
    free(m_array);
}

/* ---- heapd ---- */

static const char *h_sock;
static heapd_client *hc;
static heapd_mutator *hm;
static size_t h_tree_slot, h_array_slot, h_temp_slot;
static bool h_young, h_rooted;          /* --young, --rooted */
static heapd_mutator_opts h_yopts = {.flags = HEAPD_MUTATOR_YOUNG};
/* The rooted Populate's slots: h_level_slot[k] holds the node of height k
 * being populated. */
static size_t h_level_slot[STRETCH_DEPTH + 1];
static heapd_stats_t h_st0;
static uint64_t h_committed_peak;

static void *h_left(void *n) { return ((void **)n)[0]; }
static void *h_right(void *n) { return ((void **)n)[1]; }

static size_t h_push(void *ref)
{
    size_t s = heapd_root_push(hm, ref);
    if (s == (size_t)-1)
        die("heapd_root_push: %s", strerror(errno));
    return s;
}

static void *h_node(void)
{
    void *n = heapd_alloc(hm, 2, 2 * sizeof(int));
    if (!n)
        die("heapd_alloc(2, 8): %s", strerror(errno));
    return n;
}

static void h_init(void)
{
    if (h_young) {
        heapd_connect_opts o = {.socket_path = h_sock,
                                .client_name = "gcbench"};
        int rc = heapd_connect(&hc, &o);
        if (rc < 0)
            die("heapd_connect: %s", heapd_last_error());
        rc = heapd_attach_opts(hc, &h_yopts, &hm);
        if (rc < 0)
            die("heapd_attach_opts(HEAPD_MUTATOR_YOUNG): %s (%s)",
                heapd_strerror(rc), heapd_last_error());
    } else {
        heapd_open(h_sock, "gcbench", &hc, &hm);
    }
    heapd_stats_or_die(hc, hm, &h_st0);
    h_committed_peak = h_st0.heap_committed_bytes;
    h_tree_slot = h_push(NULL);
    h_array_slot = h_push(NULL);
    h_temp_slot = h_push(NULL);
    if (h_rooted)
        for (int k = 0; k <= STRETCH_DEPTH; k++)
            h_level_slot[k] = h_push(NULL);
}

/* N is reachable from a root; each new child is linked into it before the
 * next allocation, so the whole tree stays reachable. */
static void h_populate(int d, void *n)
{
    if (d <= 0)
        return;
    void **f = n;
    void *l = h_node();
    heapd_write(hm, n, &f[0], l);
    void *r = h_node();
    heapd_write(hm, n, &f[1], r);
    h_populate(d - 1, l);
    h_populate(d - 1, r);
}

/* Populate, rooted (--rooted): the node of height D is in root slot
 * SLOT.  Nothing is kept in a C local across heapd_alloc: the node is
 * read back from its slot after each one.  Each child goes into
 * the next level's slot while it is populated; the node itself, still
 * rooted, keeps the finished left subtree alive. */
static void h_populate_rooted(int d, size_t slot)
{
    if (d <= 0)
        return;
    void *l = h_node();
    void **n = heapd_root_get(hm, slot);
    heapd_write(hm, n, &n[0], l);
    void *r = h_node();
    n = heapd_root_get(hm, slot);
    heapd_write(hm, n, &n[1], r);
    size_t child = h_level_slot[d - 1];
    heapd_root_set(hm, child, n[0]);  /* N is rooted: valid past the set */
    h_populate_rooted(d - 1, child);
    n = heapd_root_get(hm, slot);
    heapd_root_set(hm, child, n[1]);
    h_populate_rooted(d - 1, child);
    heapd_root_set(hm, child, NULL);
}

/* Build a tree of depth D into root slot OUT. */
static void h_make(int d, size_t out)
{
    if (d <= 0) {
        heapd_root_set(hm, out, h_node());
        return;
    }
    size_t left_slot = h_push(NULL);
    h_make(d - 1, left_slot);
    h_make(d - 1, out);            /* the right subtree, rooted in OUT */
    void **p = h_node();
    heapd_write(hm, p, &p[0], heapd_root_get(hm, left_slot));
    heapd_write(hm, p, &p[1], heapd_root_get(hm, out));
    heapd_root_set(hm, out, p);    /* the right subtree stays reachable */
    heapd_root_pop(hm, 1);
}

/* MakeTree as C is written (--young without --rooted): the subtrees in C
 * locals.  A young mutator's minor collections keep what its C locals
 * hold, and never promote it (Note [Young objects, for the program] in
 * heapd.h); young off builds rooted (h_make), as a precise mutator
 * must. */
static void *h_make_local(int d)
{
    if (d <= 0)
        return h_node();
    void *l = h_make_local(d - 1);
    void *r = h_make_local(d - 1);
    void **p = h_node();
    heapd_write(hm, p, &p[0], l);
    heapd_write(hm, p, &p[1], r);
    return p;
}

/* Build a tree of depth D into root slot OUT, the way the run asks. */
static void h_build(int d, size_t out)
{
    if (h_young && !h_rooted)
        heapd_root_set(hm, out, h_make_local(d));
    else
        h_make(d, out);
}

static void h_stretch(void)
{
    h_build(STRETCH_DEPTH, h_temp_slot);
    if (check_trees)
        check_shape(heapd_root_get(hm, h_temp_slot), STRETCH_DEPTH, h_left,
                    h_right);
    heapd_root_set(hm, h_temp_slot, NULL);
}

static void h_long_lived_build(void)
{
    if (h_rooted) {
        heapd_root_set(hm, h_tree_slot, h_node());
        h_populate_rooted(LONG_LIVED_DEPTH, h_tree_slot);
    } else {
        void *t = h_node();
        heapd_root_set(hm, h_tree_slot, t);
        h_populate(LONG_LIVED_DEPTH, t);
    }
    void *a = heapd_alloc(hm, 0, sizeof(double) * ARRAY_SIZE);
    if (!a)
        die("heapd_alloc(0, %zu): %s", sizeof(double) * ARRAY_SIZE,
            strerror(errno));
    heapd_root_set(hm, h_array_slot, a);
    fill_array(heapd_bytes(a));
}

static void h_top_down(int d, long iters)
{
    for (long k = 0; k < iters && h_rooted; k++) {
        heapd_root_set(hm, h_temp_slot, h_node());
        h_populate_rooted(d, h_temp_slot);
        if (check_trees)
            check_shape(heapd_root_get(hm, h_temp_slot), d, h_left, h_right);
    }
    for (long k = 0; k < iters && !h_rooted; k++) {
        void *t = h_node();
        heapd_root_set(hm, h_temp_slot, t);
        h_populate(d, t);
        if (check_trees)
            check_shape(t, d, h_left, h_right);
    }
    heapd_root_set(hm, h_temp_slot, NULL);
}

static void h_bottom_up(int d, long iters)
{
    for (long k = 0; k < iters; k++) {
        h_build(d, h_temp_slot);
        if (check_trees)
            check_shape(heapd_root_get(hm, h_temp_slot), d, h_left, h_right);
    }
    heapd_root_set(hm, h_temp_slot, NULL);
}

static void h_check(void)
{
    check_shape(heapd_root_get(hm, h_tree_slot), LONG_LIVED_DEPTH, h_left,
                h_right);
    check_array(heapd_bytes(heapd_root_get(hm, h_array_slot)));
}

#ifdef HEAPD_HAVE_WHERE
static struct bench_where h_where; /* at the committed peak sampled */
#endif

static void h_sample(void)
{
    heapd_stats_t st;
    heapd_stats_or_die(hc, hm, &st);
    if (st.heap_committed_bytes > h_committed_peak) {
        h_committed_peak = st.heap_committed_bytes;
#ifdef HEAPD_HAVE_WHERE
        bench_where(hc, hm, NULL, &h_where);
#endif
    }
}

/* impl= of the RESULT line: the mode */
static const char *h_name(void)
{
    return h_young ? "heapd_young" : h_rooted ? "heapd_rooted" : "heapd";
}

static void h_report(double total_ms)
{
    h_sample();
    heapd_stats_t st;
    heapd_stats_or_die(hc, hm, &st);
    uint64_t cycles = st.cycles_completed - h_st0.cycles_completed;
    printf("heapd: %llu cycles, %llu bytes allocated, live after last cycle "
           "%llu, ttsp max %llu ns, verify failures %llu, bad refs %llu, "
           "segments free/owned/filled/large %llu/%llu/%llu/%llu\n",
           (unsigned long long)cycles,
           (unsigned long long)(st.bytes_allocated - h_st0.bytes_allocated),
           (unsigned long long)st.live_bytes,
           (unsigned long long)st.ttsp_max_ns,
           (unsigned long long)st.verify_failures,
           (unsigned long long)st.bad_refs,
           (unsigned long long)st.segments_free,
           (unsigned long long)st.segments_owned,
           (unsigned long long)st.segments_filled,
           (unsigned long long)st.segments_large);
    printf("RESULT gcbench impl=%s total_ms=%.1f pause_max_ms=%.3f "
           "pause_total_ms=%.1f maxrss_kib=%ld heap_committed_end=%llu "
           "heap_committed_peak=%llu gcs=%llu",
           h_name(), total_ms, st.pause_max_ns / 1e6,
           (st.pause_total_ns - h_st0.pause_total_ns) / 1e6, peak_rss_kib(),
           (unsigned long long)st.heap_committed_bytes,
           (unsigned long long)h_committed_peak, (unsigned long long)cycles);
#ifdef HEAPD_BENCH_PHASE_PAUSES
    /* the concurrent collector's two pauses (the build found them in
     * heapd_stats_t: bench/meson.build) */
    printf(" snapshot_pause_max_ms=%.3f final_sync_pause_max_ms=%.3f",
           st.snapshot_pause_max_ns / 1e6, st.final_sync_pause_max_ns / 1e6);
#endif
#ifdef HEAPD_BENCH_CONSERVATIVE
    /* what C stack words alone kept (Note [C locals are roots]) */
    printf(" conservative_roots=%llu conservative_bytes=%llu",
           (unsigned long long)(st.conservative_roots -
                                h_st0.conservative_roots),
           (unsigned long long)(st.conservative_bytes_retained -
                                h_st0.conservative_bytes_retained));
#endif
    if (h_young) {
        heapd_young_stats ys;
        heapd_young_stats_get(hm, &ys);
        printf(" young_bytes=%llu young_age=%u minor_collections=%llu "
               "minor_pauses=%llu "
               "minor_pause_max_ms=%.3f minor_pause_p99_ms=%.3f "
               "minor_pause_total_ms=%.1f promoted_age_bytes=%llu "
               "promoted_published_bytes=%llu",
               (unsigned long long)ys.young_bytes, ys.young_age,
               (unsigned long long)ys.minor_collections,
               (unsigned long long)ys.minor_pauses,
               ys.minor_pause_max_ns / 1e6, ys.minor_pause_p99_ns / 1e6,
               ys.minor_pause_total_ns / 1e6,
               (unsigned long long)ys.promoted_age_bytes,
               (unsigned long long)ys.promoted_published_bytes);
    }
#ifdef HEAPD_HAVE_WHERE
    bench_where_print("where_", &h_where);
#endif
    printf("\n");
    heapd_root_pop(hm, heapd_root_depth(hm));
    heapd_detach(hm);
    heapd_disconnect(hc);
}

static const impl impls[] = {
    {"heapd", h_init, h_stretch, h_long_lived_build, h_top_down, h_bottom_up,
     h_check, h_sample, h_report},
    {"boehm", b_init, b_stretch, b_long_lived_build, b_top_down, b_bottom_up,
     b_check, b_sample, b_report},
    {"malloc", m_init, m_stretch, m_long_lived_build, m_top_down,
     m_bottom_up, m_check, m_sample, m_report},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: gcbench heapd|boehm|malloc [--socket PATH] "
               "[--check]\n"
               "               [--young | --rooted] [--young-size BYTES] "
               "[--young-age A]\n"
               "  --young       heapd: attach with HEAPD_MUTATOR_YOUNG (and "
               "the same program)\n"
               "  --rooted      heapd: populate rooted, no young generation\n"
               "  --young-size  the nursery in bytes (default: the heap's)\n"
               "  --young-age   minor collections before promotion, 1..8 "
               "(default: the heap's)\n");
}

static double ms_since(uint64_t t0) { return (now_ns() - t0) / 1e6; }

/* Memory samples are heapd_stats round trips: keep them out of the times. */
static uint64_t sample_ns;
static void sample(const impl *im)
{
    uint64_t t = now_ns();
    im->sample();
    sample_ns += now_ns() - t;
}

int main(int argc, char **argv)
{
    enum { OPT_SOCKET = 256, OPT_CHECK, OPT_YOUNG, OPT_ROOTED,
           OPT_YOUNG_SIZE, OPT_YOUNG_AGE };
    static const struct option opts[] = {
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"check", no_argument, NULL, OPT_CHECK},
        {"young", no_argument, NULL, OPT_YOUNG},
        {"rooted", no_argument, NULL, OPT_ROOTED},
        {"young-size", required_argument, NULL, OPT_YOUNG_SIZE},
        {"young-age", required_argument, NULL, OPT_YOUNG_AGE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_SOCKET: h_sock = optarg; break;
        case OPT_CHECK: check_trees = true; break;
        case OPT_YOUNG: h_young = true; break;
        case OPT_ROOTED: h_rooted = true; break;
        case OPT_YOUNG_SIZE:
            h_yopts.young_size = parse_count("--young-size", optarg);
            break;
        case OPT_YOUNG_AGE:
            h_yopts.young_age = (unsigned)parse_count("--young-age", optarg);
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind + 1 != argc) {
        usage(stderr);
        return 2;
    }
    const impl *im = NULL;
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++)
        if (strcmp(argv[optind], impls[k].name) == 0)
            im = &impls[k];
    if (!im || (h_rooted && strcmp(im->name, "heapd") != 0)) {
        usage(stderr);
        return 2;
    }

    im->init();
    printf("GCBench on %s%s: stretch tree depth %d, long-lived tree depth "
           "%d, array of %d doubles, trees of depth %d..%d\n",
           strcmp(im->name, "heapd") == 0 ? h_name() : im->name,
           check_trees ? " (--check: every tree verified)" : "",
           STRETCH_DEPTH, LONG_LIVED_DEPTH, ARRAY_SIZE, MIN_DEPTH, MAX_DEPTH);
    fflush(stdout);

    uint64_t t_start = now_ns();
    im->stretch();
    sample(im);
    im->long_lived();
    sample(im);
    for (int d = MIN_DEPTH; d <= MAX_DEPTH; d += 2) {
        long iters = num_iters(d);
        uint64_t t = now_ns();
        im->top_down(d, iters);
        double td = ms_since(t);
        sample(im);
        t = now_ns();
        im->bottom_up(d, iters);
        double bu = ms_since(t);
        sample(im);
        printf("depth %2d: %6ld trees, top down %8.1f ms, bottom up %8.1f "
               "ms\n", d, iters, td, bu);
    }
    double total = ms_since(t_start) - sample_ns / 1e6;
    im->check_long_lived(); /* a full walk: not timed */
    printf("total %.1f ms (long-lived tree and array intact)\n", total);
    im->report(total);
    if (fflush(stdout) != 0 || ferror(stdout))
        die("writing the results failed");
    return 0;
}
