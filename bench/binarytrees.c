/* binarytrees: The Computer Language Benchmarks Game's binary-trees on
 * heapd, on the Boehm collector and on malloc/free, in one process or split
 * over several that share the long-lived tree.
 *
 * The workload, for a maximum depth N (CLBG's, unchanged):
 *   1. build a "stretch" tree of depth N + 1, check it, drop it;
 *   2. build a long-lived tree of depth N, kept to the end;
 *   3. for d = 4, 6, ..., N: build 2^(N - d + 4) trees of depth d bottom up
 *      (both children, then the node), check each, drop it;
 *   4. check the long-lived tree.
 * A node is two references (left, right) and nothing else: heapd_alloc(m,
 * 2, 0), GC_MALLOC(16), malloc(16).  A leaf has no children.  To check a
 * tree is to count its nodes: a tree of depth d has 2^(d+1) - 1, and the
 * program stops if any tree it checks has another count.  It prints CLBG's
 * lines (the stretch tree's check, each depth's trees and their summed
 * check, the long-lived tree's check) and a RESULT line.
 *
 * --procs P (default 1) splits step 3 over P worker processes: the parent
 * does steps 1 and 2, then starts the workers; worker w does its share of
 * every depth's trees (of the K trees of a depth, those from K w / P up to
 * K (w + 1) / P), then checks the long-lived tree (step 4, in each worker);
 * the parent waits for all of them and prints the summed checks.  The
 * long-lived tree is shared: heapd's is in the shared heap, found through
 * a global; Boehm's and malloc's are the parent's, which the workers see
 * copy-on-write (fork).
 *
 * The time, total_ms, is one definition for every implementation and P:
 * the wall time from just before the stretch tree (the parent's
 * implementation set up: GC_INIT, heapd connected and attached) until
 * the long-lived tree has been checked, by the one process (P = 1) or by
 * every worker, which has then exited and been reaped by the parent
 * (P > 1: starting the workers, and for heapd each worker's connecting
 * and leaving, are inside the time).  Printing is not.
 *
 * How, per implementation (`binarytrees IMPL DEPTH [--procs P] ...`):
 *   malloc  glibc malloc/free; each dropped tree is freed recursively,
 *           inside the time (freeing is part of a malloc program's cost).
 *   boehm   GC_MALLOC, default settings (GC_set_handle_fork(1) so that a
 *           worker may collect after fork).  Collections and their pauses
 *           from a GC_set_on_collection_event callback (boehm_pauses.h),
 *           each worker's counted from its fork.
 *   heapd   young off.  The trees are built rooted, as a
 *           HEAPD_MUTATOR_PRECISE mutator must (Note [Client GC discipline]
 *           in heapd.h), so that the figure compares with the runs before C
 *           locals were roots: one root slot per depth, pushed once; a tree of
 *           depth d is built into a caller-given slot, its left subtree into
 *           the slot of depth d while its right one is built into the
 *           caller's slot, then the node is allocated, both read back from
 *           their slots and written into it, and the node replaces the right
 *           subtree in the caller's slot.  A level's slot keeps the last
 *           left subtree built there until it is built again (cleared after
 *           each depth's trees).  The long-lived tree is built so too, then
 *           stored into the global "binarytrees.long_lived" (heapd_global_set)
 *           and read back from it for the check.  A check polls
 *           heapd_safepoint every 65536 nodes: the tree it reads is rooted.
 *   heapd --young
 *           a mutator attached with HEAPD_MUTATOR_YOUNG (--young-size and
 *           --young-age: the nursery, the heap's by default), the trees
 *           built the natural C way, C locals held across heapd_alloc: see
 *           Note [The natural builder] for what that needs.  The long-lived
 *           tree is published by heapd_global_set.
 *   heapd --young --rooted
 *           young on, the rooted builder of young off (root slots are
 *           updated when young objects move, and every reference is read
 *           back from its slot after heapd_alloc), correct with either kind
 *           of young generation.  --rooted alone is young off.
 *           With --procs, each heapd worker connects for itself (Note
 *           [Clients and fork] in client/agent.c: a child never uses the
 *           parent's client), reads the global, and is attached as the
 *           parent is; the parent waits in a blocking region.
 *
 * Output: CLBG's lines, then
 *   RESULT binarytrees impl=NAME depth=N procs=P total_ms=.. maxrss_kib=..
 *          gcs=.. pause_max_ms=.. pause_total_ms=.. [heapd: heap_committed_end=..
 *          snapshot_pause_max_ms=.. final_sync_pause_max_ms=..] [young:
 *          young_bytes=.. young_age=.. minor_collections=.. minor_pauses=..
 *          minor_pause_max_ms=.. minor_pause_p99_ms=.. minor_pause_total_ms=.. promoted_age_bytes=..
 *          promoted_published_bytes=..]
 * impl= is malloc, boehm, heapd, heapd_young or heapd_young_rooted.
 * maxrss_kib: the largest peak resident set of the parent and its workers.
 * gcs, pauses: heapd's cycles and pauses are the daemon's figures for the
 * heap (heapd_stats, over the parent's connection: run against a fresh
 * heapd), Boehm's summed over the processes (max: the longest).  The minor
 * collections are summed over the parent's and the workers' mutators; the
 * longest is the longest of any, the p99 the highest of their p99s.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* libgc is built thread-aware: GC_THREADS declares its thread API; this
 * program itself starts no threads. */
#define GC_THREADS
#include <gc.h>

#include "bench_util.h"
#include "heapd.h"

enum {
    MIN_DEPTH = 4,
    MAX_DEPTH = 24,         /* the stretch tree: 2^26 nodes, 1 GiB and more */
    MAX_PROCS = 16,
    POLL_EVERY = 65536,     /* nodes a rooted check reads between polls */
};

static const char GLOBAL_NAME[] = "binarytrees.long_lived";

/* The node of the Boehm and malloc versions; a heapd node has the same
 * two reference fields at the address heapd_alloc returns. */
typedef struct node {
    struct node *left, *right;
} node;

static long tree_nodes(int d) { return (1L << (d + 1)) - 1; }

/* What a process did, in a MAP_SHARED page the parent reads once a worker
 * exited.  Boehm's counters are the process's own since its fork (the
 * parent's: since GC_INIT). */
struct wres {
    long check[MAX_DEPTH + 1];    /* summed checks of depth d's trees */
    long long_lived_check;
    uint64_t gcs, pause_max_ns, pause_total_ns;
    heapd_young_stats ys;
};

/* Count the nodes of tree N.  POLL: a mutator that polls heapd_safepoint
 * every POLL_EVERY nodes (N rooted), or NULL. */
static unsigned poll_count;
static long check_tree(const node *n, heapd_mutator *poll)
{
    if (poll && ++poll_count % POLL_EVERY == 0)
        heapd_safepoint(poll);
    if (!n->left)
        return 1;
    return 1 + check_tree(n->left, poll) + check_tree(n->right, poll);
}

static void check_is(long got, int d, const char *what)
{
    if (got != tree_nodes(d))
        die("%s of depth %d: check %ld, expected %ld: the tree is corrupt",
            what, d, got, tree_nodes(d));
}

/* ---- what every implementation provides ---- */

typedef struct impl {
    const char *name;
    void (*init)(void);                 /* the parent, before the time */
    long (*stretch)(int d);             /* build, check, drop */
    void (*long_lived)(int d);          /* build, keep */
    void (*before_fork)(void);
    void (*after_workers)(void);
    void (*worker_init)(void);          /* a worker, after fork */
    long (*trees)(int d, long k);       /* k trees: summed checks */
    long (*check_long_lived)(void);
    void (*collect)(struct wres *r, bool worker); /* counters */
    void (*leave)(void);                /* a worker, before _exit */
    void (*report)(void);               /* RESULT's fields; the parent */
} impl;

/* ---- malloc ---- */

static node *m_long_lived;

static void m_init(void) {}

/* Bottom up: the children, then the node. */
static node *m_make(int d)
{
    node *l = NULL, *r = NULL;
    if (d > 0) {
        l = m_make(d - 1);
        r = m_make(d - 1);
    }
    node *n = malloc(sizeof *n);
    if (!n)
        die("malloc: out of memory");
    n->left = l;
    n->right = r;
    return n;
}

static void m_free(node *n)
{
    if (n->left) {
        m_free(n->left);
        m_free(n->right);
    }
    free(n);
}

static long m_stretch(int d)
{
    node *t = m_make(d);
    long c = check_tree(t, NULL);
    m_free(t);
    return c;
}

static void m_long_lived_build(int d) { m_long_lived = m_make(d); }

static long m_trees(int d, long k)
{
    long sum = 0;
    for (long i = 0; i < k; i++) {
        node *t = m_make(d);
        long c = check_tree(t, NULL);
        check_is(c, d, "a tree");
        sum += c;
        m_free(t);
    }
    return sum;
}

static long m_check_long_lived(void) { return check_tree(m_long_lived, NULL); }

static void m_nothing(void) {}
static void m_collect(struct wres *r, bool worker)
{
    (void)r;
    (void)worker;
}

static void m_report(void)
{
    printf(" gcs=0 pause_max_ms=0 pause_total_ms=0");
    m_free(m_long_lived);
}

/* ---- Boehm ---- */

#include "boehm_pauses.h"

static node *b_long_lived;
static uint64_t b_gc_no0, b_pause_total0;   /* a worker's, at its fork */
static struct wres b_total;                 /* the parent's report */

static void b_init(void)
{
    GC_set_handle_fork(1);
    GC_INIT();
    GC_set_on_collection_event(b_on_event);
}

static node *b_make(int d)
{
    node *l = NULL, *r = NULL;
    if (d > 0) {
        l = b_make(d - 1);
        r = b_make(d - 1);
    }
    node *n = GC_MALLOC(sizeof *n);
    if (!n)
        die("GC_MALLOC: out of memory");
    n->left = l;
    n->right = r;
    return n;
}

static long b_stretch(int d) { return check_tree(b_make(d), NULL); }
static void b_long_lived_build(int d) { b_long_lived = b_make(d); }

static long b_trees(int d, long k)
{
    long sum = 0;
    for (long i = 0; i < k; i++) {
        long c = check_tree(b_make(d), NULL);
        check_is(c, d, "a tree");
        sum += c;
    }
    return sum;
}

static long b_check_long_lived(void) { return check_tree(b_long_lived, NULL); }

static void b_worker_init(void)
{
    b_gc_no0 = GC_get_gc_no();
    b_pause_total0 = b_pause_total;
}

static void b_collect(struct wres *r, bool worker)
{
    r->gcs = GC_get_gc_no() - (worker ? b_gc_no0 : 0);
    r->pause_total_ns = b_pause_total - (worker ? b_pause_total0 : 0);
    r->pause_max_ns = b_pause_max;
    if (!worker)
        b_total = *r;
}

static void b_report(void)
{
    printf(" gcs=%llu pause_max_ms=%.3f pause_total_ms=%.1f",
           (unsigned long long)b_total.gcs, b_total.pause_max_ns / 1e6,
           b_total.pause_total_ns / 1e6);
}

/* ---- heapd ---- */

static const char *h_sock;
static heapd_client *hc;
static heapd_mutator *hm;
static bool h_young, h_rooted;  /* --young; the rooted builder */
static heapd_mutator_opts h_yopts = {.flags = HEAPD_MUTATOR_YOUNG};
static size_t h_temp_slot;
/* The rooted builder's slots: h_level_slot[d] holds the left subtree of
 * the tree of depth d being built. */
static size_t h_level_slot[MAX_DEPTH + 2];
static heapd_stats_t h_st0;
static struct wres h_total;     /* minor collections of every mutator */

static size_t h_push(void)
{
    size_t s = heapd_root_push(hm, NULL);
    if (s == (size_t)-1)
        die("heapd_root_push: %s", strerror(errno));
    return s;
}

/* Connect and attach this process (the parent, or a worker for itself). */
static void h_connect(const char *name)
{
    heapd_connect_opts o = {.socket_path = h_sock, .client_name = name};
    int rc = heapd_connect(&hc, &o);
    if (rc < 0)
        die("heapd_connect: %s", heapd_last_error());
    rc = heapd_attach_opts(hc, h_young ? &h_yopts : NULL, &hm);
    if (rc < 0)
        die("heapd_attach_opts%s: %s (%s)",
            h_young ? "(HEAPD_MUTATOR_YOUNG)" : "", heapd_strerror(rc),
            heapd_last_error());
    if (h_rooted) {
        h_temp_slot = h_push();
        for (int d = 0; d <= MAX_DEPTH + 1; d++)
            h_level_slot[d] = h_push();
    }
}

static void h_init(void)
{
    h_connect("binarytrees");
    heapd_stats_or_die(hc, hm, &h_st0);
}

static void *h_node(void)
{
    void *n = heapd_alloc(hm, 2, 0);
    if (!n)
        die("heapd_alloc(2, 0): %s", strerror(errno));
    return n;
}

/* The rooted builder: a tree of depth D into root slot OUT.  Nothing is
 * held in a C local across a safepoint: each subtree is in a slot, read
 * back after heapd_alloc (a young one may have moved). */
static void hr_make(int d, size_t out)
{
    if (d == 0) {
        heapd_root_set(hm, out, h_node());
        return;
    }
    size_t left = h_level_slot[d];
    hr_make(d - 1, left);
    hr_make(d - 1, out);            /* the right subtree, rooted in OUT */
    void **n = h_node();
    heapd_write(hm, n, &n[0], heapd_root_get(hm, left));
    heapd_write(hm, n, &n[1], heapd_root_get(hm, out));
    heapd_root_set(hm, out, n);     /* the right subtree stays reachable */
}

/* Note [The natural builder]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * --young without --rooted builds a tree as a C program would:
 *     l = make(d - 1); r = make(d - 1); n = heapd_alloc(m, 2, 0);
 *     heapd_write(m, n, &n[0], l); heapd_write(m, n, &n[1], r);
 * with l and r in C locals across heapd_alloc, and checks it from a C
 * local (so its check never polls a safepoint).  Nothing roots them but
 * the C stack, so this is correct only with a young generation whose
 * minor collections find young objects from the C stack (conservatively)
 * and never move or promote one that only the stack holds.  With a
 * copying nursery whose roots are the root stack alone, a minor
 * collection in mid-build moves or drops l and r and the tree is corrupt:
 * the check stops the program, or it faults.  That is the point of the
 * mode: what the young generation saves a program written without root
 * slots.  --young --rooted is the same mutator with the rooted builder.
 */
static void *hn_make(int d)
{
    if (d == 0)
        return h_node();
    void *l = hn_make(d - 1);
    void *r = hn_make(d - 1);
    void **n = h_node();
    heapd_write(hm, n, &n[0], l);
    heapd_write(hm, n, &n[1], r);
    return n;
}

static void h_clear_slots(void)
{
    heapd_root_set(hm, h_temp_slot, NULL);
    for (int d = 0; d <= MAX_DEPTH + 1; d++)
        heapd_root_set(hm, h_level_slot[d], NULL);
}

static long h_stretch(int d)
{
    if (!h_rooted) /* See Note [The natural builder] */
        return check_tree(hn_make(d), NULL);
    hr_make(d, h_temp_slot);
    long c = check_tree(heapd_root_get(hm, h_temp_slot), hm);
    h_clear_slots();
    return c;
}

static void h_long_lived_build(int d)
{
    int rc;
    if (h_rooted) {
        hr_make(d, h_temp_slot);
        rc = heapd_global_set(hm, GLOBAL_NAME,
                              heapd_root_get(hm, h_temp_slot));
        if (rc == 0)
            h_clear_slots();
    } else {
        rc = heapd_global_set(hm, GLOBAL_NAME, hn_make(d));
    }
    if (rc < 0)
        die("heapd_global_set(%s): %s (%s)", GLOBAL_NAME, heapd_strerror(rc),
            heapd_last_error());
}

static long h_trees(int d, long k)
{
    long sum = 0;
    for (long i = 0; i < k; i++) {
        long c;
        if (h_rooted) {
            hr_make(d, h_temp_slot);
            c = check_tree(heapd_root_get(hm, h_temp_slot), hm);
        } else {
            c = check_tree(hn_make(d), NULL);
        }
        check_is(c, d, "a tree");
        sum += c;
    }
    if (h_rooted)
        h_clear_slots();
    return sum;
}

/* The global is a root: the check may poll. */
static long h_check_long_lived(void)
{
    const node *t = heapd_global_get(hm, GLOBAL_NAME);
    if (!t)
        die("global %s is not set", GLOBAL_NAME);
    return check_tree(t, hm);
}

static void h_before_fork(void) { heapd_blocking_enter(hm); }
static void h_after_workers(void) { heapd_blocking_leave(hm); }

/* The parent's client and mutator are not this child's (Note [Clients and
 * fork] in client/agent.c): connect anew; the copies are never used. */
static void h_worker_init(void)
{
    h_connect("binarytrees-worker");
    if (!heapd_global_get(hm, GLOBAL_NAME))
        die("worker: global %s is not set", GLOBAL_NAME);
}

static void h_collect(struct wres *r, bool worker)
{
    heapd_young_stats_get(hm, &r->ys);
    if (worker)
        return;
    /* the parent: its own mutator's, with the workers' added in main */
    h_total = *r;
}

static void h_leave(void)
{
    heapd_root_pop(hm, heapd_root_depth(hm));
    heapd_detach(hm);
    heapd_disconnect(hc);
}

static void h_report(void)
{
    heapd_stats_t st;
    heapd_stats_or_die(hc, hm, &st);
    printf(" gcs=%llu pause_max_ms=%.3f pause_total_ms=%.1f "
           "heap_committed_end=%llu",
           (unsigned long long)(st.cycles_completed -
                                h_st0.cycles_completed),
           st.pause_max_ns / 1e6,
           (st.pause_total_ns - h_st0.pause_total_ns) / 1e6,
           (unsigned long long)st.heap_committed_bytes);
#ifdef HEAPD_BENCH_PHASE_PAUSES
    /* the concurrent collector's two pauses (bench/meson.build) */
    printf(" snapshot_pause_max_ms=%.3f final_sync_pause_max_ms=%.3f",
           st.snapshot_pause_max_ns / 1e6, st.final_sync_pause_max_ns / 1e6);
#endif
    if (h_young) {
        const heapd_young_stats *ys = &h_total.ys;
        printf(" young_bytes=%llu young_age=%u minor_collections=%llu "
               "minor_pauses=%llu "
               "minor_pause_max_ms=%.3f minor_pause_p99_ms=%.3f "
               "minor_pause_total_ms=%.1f promoted_age_bytes=%llu "
               "promoted_published_bytes=%llu",
               (unsigned long long)ys->young_bytes, ys->young_age,
               (unsigned long long)ys->minor_collections,
               (unsigned long long)ys->minor_pauses,
               ys->minor_pause_max_ns / 1e6, ys->minor_pause_p99_ns / 1e6,
               ys->minor_pause_total_ns / 1e6,
               (unsigned long long)ys->promoted_age_bytes,
               (unsigned long long)ys->promoted_published_bytes);
    }
    int rc = heapd_global_delete(hm, GLOBAL_NAME);
    if (rc < 0)
        die("heapd_global_delete(%s): %s", GLOBAL_NAME, heapd_strerror(rc));
    h_leave();
}

/* Add worker W's minor collections into the parent's. */
static void h_add_young(const struct wres *w)
{
    heapd_young_stats *t = &h_total.ys, s = w->ys;
    t->minor_collections += s.minor_collections;
    t->minor_pauses += s.minor_pauses;
    t->minor_pause_total_ns += s.minor_pause_total_ns;
    t->promoted_age_bytes += s.promoted_age_bytes;
    t->promoted_published_bytes += s.promoted_published_bytes;
    if (s.minor_pause_max_ns > t->minor_pause_max_ns)
        t->minor_pause_max_ns = s.minor_pause_max_ns;
    if (s.minor_pause_p99_ns > t->minor_pause_p99_ns)
        t->minor_pause_p99_ns = s.minor_pause_p99_ns;
    if (!t->young_bytes) {
        t->young_bytes = s.young_bytes;
        t->young_age = s.young_age;
    }
}

static void b_add(const struct wres *w)
{
    b_total.gcs += w->gcs;
    b_total.pause_total_ns += w->pause_total_ns;
    if (w->pause_max_ns > b_total.pause_max_ns)
        b_total.pause_max_ns = w->pause_max_ns;
}

static const impl impls[] = {
    {"malloc", m_init, m_stretch, m_long_lived_build, m_nothing, m_nothing,
     m_nothing, m_trees, m_check_long_lived, m_collect, m_nothing, m_report},
    {"boehm", b_init, b_stretch, b_long_lived_build, m_nothing, m_nothing,
     b_worker_init, b_trees, b_check_long_lived, b_collect, m_nothing,
     b_report},
    {"heapd", h_init, h_stretch, h_long_lived_build, h_before_fork,
     h_after_workers, h_worker_init, h_trees, h_check_long_lived, h_collect,
     h_leave, h_report},
};

/* ---- the run ---- */

static int max_depth, procs = 1;

static long iterations(int d) { return 1L << (max_depth - d + MIN_DEPTH); }

/* Worker W's trees of every depth and the long-lived tree's check. */
static void work(const impl *im, int w, struct wres *r)
{
    for (int d = MIN_DEPTH; d <= max_depth; d += 2) {
        long k = iterations(d);
        long lo = k * w / procs, hi = k * (w + 1) / procs;
        r->check[d] = im->trees(d, hi - lo);
    }
    r->long_lived_check = im->check_long_lived();
    check_is(r->long_lived_check, max_depth, "the long-lived tree");
}

static const char *impl_name(const impl *im)
{
    if (strcmp(im->name, "heapd") != 0)
        return im->name;
    return !h_young ? "heapd" : h_rooted ? "heapd_young_rooted"
                                         : "heapd_young";
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: binarytrees malloc|boehm|heapd DEPTH [--procs P] "
            "[--socket PATH]\n"
            "                   [--young] [--rooted] [--young-size BYTES] "
            "[--young-age A]\n"
            "  DEPTH         the long-lived tree's depth, %d..%d (CLBG: 21)\n"
            "  --procs       worker processes sharing the long-lived tree, "
            "1..%d (default 1)\n"
            "  --young       heapd: attach with HEAPD_MUTATOR_YOUNG, build "
            "trees the natural C way\n"
            "  --rooted      heapd --young: build trees rooted, as young off "
            "does\n"
            "  --young-size  the nursery in bytes (default: the heap's)\n"
            "  --young-age   minor collections before promotion, 1..8 "
            "(default: the heap's)\n",
            MIN_DEPTH + 2, MAX_DEPTH, MAX_PROCS);
}

int main(int argc, char **argv)
{
    enum { OPT_SOCKET = 256, OPT_PROCS, OPT_YOUNG, OPT_ROOTED,
           OPT_YOUNG_SIZE, OPT_YOUNG_AGE };
    static const struct option opts[] = {
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"procs", required_argument, NULL, OPT_PROCS},
        {"young", no_argument, NULL, OPT_YOUNG},
        {"rooted", no_argument, NULL, OPT_ROOTED},
        {"young-size", required_argument, NULL, OPT_YOUNG_SIZE},
        {"young-age", required_argument, NULL, OPT_YOUNG_AGE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool rooted_opt = false;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_SOCKET: h_sock = optarg; break;
        case OPT_PROCS: procs = (int)parse_count("--procs", optarg); break;
        case OPT_YOUNG: h_young = true; break;
        case OPT_ROOTED: rooted_opt = true; break;
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
    if (optind + 2 != argc) {
        usage(stderr);
        return 2;
    }
    const impl *im = NULL;
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++)
        if (strcmp(argv[optind], impls[k].name) == 0)
            im = &impls[k];
    int n = (int)parse_count("DEPTH", argv[optind + 1]);
    bool is_heapd = im && strcmp(im->name, "heapd") == 0;
    if (!im || n < MIN_DEPTH + 2 || n > MAX_DEPTH || procs > MAX_PROCS ||
        ((h_young || rooted_opt) && !is_heapd)) {
        usage(stderr);
        return 2;
    }
    max_depth = n;
    /* young off has only the rooted builder: C locals are not roots */
    h_rooted = rooted_opt || !h_young;

    struct wres *res = mmap(NULL, sizeof *res * (size_t)procs,
                            PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                            -1, 0);
    if (res == MAP_FAILED)
        die("mmap: %s", strerror(errno));
    memset(res, 0, sizeof *res * (size_t)procs);

    im->init();
    uint64_t t0 = now_ns();
    long stretch = im->stretch(max_depth + 1);
    check_is(stretch, max_depth + 1, "the stretch tree");
    im->long_lived(max_depth);
    if (procs == 1) {
        work(im, 0, &res[0]);
    } else {
        pid_t pids[MAX_PROCS];
        fflush(NULL);
        im->before_fork();
        for (int w = 0; w < procs; w++) {
            pids[w] = fork();
            if (pids[w] < 0)
                die("fork: %s", strerror(errno));
            if (pids[w] == 0) {
                im->worker_init();
                work(im, w, &res[w]);
                im->collect(&res[w], true);
                im->leave();
                if (fflush(NULL) != 0)
                    _exit(1);
                _exit(0);
            }
        }
        bool failed = false;
        for (int w = 0; w < procs; w++) {
            int st;
            while (waitpid(pids[w], &st, 0) < 0)
                if (errno != EINTR)
                    die("waitpid: %s", strerror(errno));
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "binarytrees: worker %d (pid %d) failed "
                        "(status %#x)\n", w, (int)pids[w], st);
                failed = true;
            }
        }
        if (failed)
            die("a worker failed: no result");
        im->after_workers();
    }
    double total_ms = (now_ns() - t0) / 1e6;

    struct wres self = {0};
    im->collect(&self, false);
    for (int w = 0; w < procs && procs > 1; w++) {
        if (is_heapd)
            h_add_young(&res[w]);
        else if (strcmp(im->name, "boehm") == 0)
            b_add(&res[w]);
    }

    printf("stretch tree of depth %d\t check: %ld\n", max_depth + 1, stretch);
    for (int d = MIN_DEPTH; d <= max_depth; d += 2) {
        long sum = 0;
        for (int w = 0; w < procs; w++)
            sum += res[w].check[d];
        if (sum != iterations(d) * tree_nodes(d))
            die("depth %d: summed check %ld, expected %ld", d, sum,
                iterations(d) * tree_nodes(d));
        printf("%ld\t trees of depth %d\t check: %ld\n", iterations(d), d,
               sum);
    }
    for (int w = 0; w < procs; w++)
        check_is(res[w].long_lived_check, max_depth, "the long-lived tree");
    printf("long lived tree of depth %d\t check: %ld\n", max_depth,
           res[0].long_lived_check);

    struct rusage ru_self, ru_kids;
    if (getrusage(RUSAGE_SELF, &ru_self) != 0 ||
        getrusage(RUSAGE_CHILDREN, &ru_kids) != 0)
        die("getrusage: %s", strerror(errno));
    long rss = ru_self.ru_maxrss > ru_kids.ru_maxrss ? ru_self.ru_maxrss
                                                     : ru_kids.ru_maxrss;
    printf("RESULT binarytrees impl=%s depth=%d procs=%d total_ms=%.1f "
           "maxrss_kib=%ld",
           impl_name(im), max_depth, procs, total_ms, rss);
    im->report();
    printf("\n");
    if (fflush(stdout) != 0 || ferror(stdout))
        die("writing the results failed");
    return 0;
}
