/* Allocation in the shared heap against a real heapd with the verifier on:
 * objects and roots, size classes and large objects, partly free segments
 * being reused, garbage being reclaimed, the client's reserve, pacing,
 * max_size and quota exhaustion, stray writes into free segments, and how
 * many segments a grant holds.  Processes coordinate through pipes (Note
 * [Test handshakes]). */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "check_main.h"

static struct daemon_proc D;

/* ---- objects and roots ---- */

START_TEST(objects_and_accessors)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start_with(&D, NULL);
    harness_attach(&D, &c, &m);

    void **o = heapd_alloc(m, 3, 20);
    ck_assert_ptr_nonnull(o);
    ck_assert_uint_eq(heapd_nrefs(o), 3);
    ck_assert_uint_eq(heapd_nbytes(o), 20);
    ck_assert_ptr_eq(heapd_bytes(o), (char *)o + 24);
    ck_assert_uint_eq((uintptr_t)o % 8, 0);
    for (int i = 0; i < 3; i++)
        ck_assert_ptr_null(o[i]);
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(((char *)heapd_bytes(o))[i], 0);
    ck_assert(o >= (void **)heapd_heap_base(c) &&
              (char *)o < (char *)heapd_heap_base(c) + heapd_heap_size(c));

    void *empty = heapd_alloc(m, 0, 0);
    ck_assert_ptr_nonnull(empty);
    ck_assert_uint_eq(heapd_nrefs(empty), 0);
    ck_assert_uint_eq(heapd_nbytes(empty), 0);

    heapd_write(m, o, &o[1], empty);
    ck_assert_ptr_eq(o[1], empty);
    ck_assert(heapd_cas(m, o, &o[2], NULL, o));
    ck_assert(!heapd_cas(m, o, &o[2], NULL, empty));
    ck_assert_ptr_eq(o[2], o);

    size_t r = heapd_root_push(m, o);
    ck_assert_uint_eq(r, 0);
    ck_assert_uint_eq(heapd_root_depth(m), 1);
    ck_assert_ptr_eq(heapd_root_get(m, 0), o);
    ck_assert_ptr_null(heapd_root_get(m, 1)); /* past the top */
    heapd_root_set(m, 0, empty);
    ck_assert_ptr_eq(heapd_root_get(m, 0), empty);
    heapd_root_set(m, 0, o);
    /* past the top, and far past the stack's memory: ignored */
    heapd_root_set(m, 1, empty);
    heapd_root_set(m, (size_t)1 << 40, empty); /* 8 TiB on: unmapped */
    ck_assert_uint_eq(heapd_root_depth(m), 1);
    ck_assert_ptr_null(heapd_root_get(m, 1));
    ck_assert_ptr_eq(heapd_root_get(m, 0), o);
    heapd_root_pop(m, 5); /* more than there are: empties the stack */
    ck_assert_uint_eq(heapd_root_depth(m), 0);

    errno = 0;
    ck_assert_ptr_null(heapd_alloc(m, HEAPD_MAX_NREFS + 1, 0));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(heapd_alloc(m, 0, HEAPD_MAX_NBYTES + 1));
    ck_assert_int_eq(errno, EINVAL);

    heapd_stats_t st = harness_stats(c);
    ck_assert_uint_eq(st.mutators, 1);
    ck_assert_uint_ge(st.bytes_allocated, 48);
    heapd_detach(m);
    st = harness_stats(c);
    ck_assert_uint_eq(st.mutators, 0);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* A root stack deeper than one chunk, and its contents across cycles. */
START_TEST(deep_root_stack)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start_with(&D, NULL);
    harness_attach(&D, &c, &m);
    const size_t n = 20000; /* 128K segments: 8192 slots per chunk */
    for (size_t i = 0; i < n; i++) {
        long *o = heapd_alloc(m, 0, sizeof(long));
        ck_assert_ptr_nonnull(o);
        *o = (long)i;
        ck_assert_uint_eq(heapd_root_push(m, o), i);
    }
    harness_collect(m);
    harness_collect(m);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(*(long *)heapd_root_get(m, i), (long)i);
    heapd_root_pop(m, n / 2);
    harness_collect(m);
    for (size_t i = 0; i < n / 2; i++)
        ck_assert_int_eq(*(long *)heapd_root_get(m, i), (long)i);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- partly free segments (Note [Reusing partly free segments]) ---- */

/* A list of N cells (1 reference, 8 bytes) in root slot R; from the head,
 * the cells hold V, V + 1, ... */
static void make_list(heapd_mutator *m, size_t r, long n, long v)
{
    heapd_root_set(m, r, NULL);
    for (long i = n - 1; i >= 0; i--) {
        void **cell = heapd_alloc(m, 1, sizeof(long));
        if (!cell)
            ck_abort_msg("heapd_alloc: %s", heapd_last_error());
        heapd_write(m, cell, &cell[0], heapd_root_get(m, r));
        long x = v + i;
        memcpy(heapd_bytes(cell), &x, sizeof x);
        heapd_root_set(m, r, cell);
    }
}

/* Keep every STEP-th cell of the list in slot R, from the head. */
static void thin_list(heapd_mutator *m, size_t r, int step)
{
    for (void **c = heapd_root_get(m, r); c; c = c[0]) {
        void **next = c[0];
        for (int k = 1; k < step && next; k++)
            next = next[0];
        heapd_write(m, c, &c[0], next);
    }
}

/* The list in slot R holds N cells: V, V + STEP, ... */
static void check_list(heapd_mutator *m, size_t r, long n, long v, long step)
{
    long i = 0;
    for (void **c = heapd_root_get(m, r); c; c = c[0], i++) {
        long x;
        memcpy(&x, heapd_bytes(c), sizeof x);
        if (x != v + i * step)
            ck_abort_msg("cell %ld holds %ld, expected %ld", i, x,
                         v + i * step);
    }
    if (i != n)
        ck_abort_msg("the list has %ld cells, expected %ld", i, n);
}

/* Segments (of SEG_SIZE bytes from BASE) that hold a cell of the list
 * at HEAD, marked in SEGS (one byte per segment of the heap). */
static void mark_segments(void **head, uintptr_t base, uintptr_t seg_size,
                          unsigned char *segs)
{
    for (void **c = head; c; c = c[0])
        segs[((uintptr_t)c - base) / seg_size] = 1;
}


/* Three quarters of a big list die; a refill that names their class is
 * granted the segments they left partly free, not blank ones, and a new
 * list of the same class allocated meanwhile leaves both lists intact (the
 * verifier is on).  The grant is what is checked, not how many segments
 * the client ends up using: whether libheapd takes a blank segment from
 * its reserve rather than wait for a refill of partly free ones depends on
 * how fast the refill comes back (Note [Reserve sizing]). */
START_TEST(partly_free_segments_are_reused)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start_with(&D, NULL);
    enum { N = 400000, M = 300000 };

    /* the old list, left to a global by a client that goes away, so that
     * its segments are all FILLED for the sweep to find */
    harness_attach(&D, &c, &m);
    size_t old = heapd_root_push(m, NULL);
    make_list(m, old, N, 0);
    thin_list(m, old, 4);
    ck_assert_int_eq(heapd_global_set(m, "old", heapd_root_get(m, old)), 0);
    heapd_detach(m);
    heapd_disconnect(c);

    harness_attach(&D, &c, &m);
    harness_collect(m); /* the three quarters die, their blocks are swept */
    const struct layout_control *ctl = heapd_heap_base(c);
    uintptr_t base = (uintptr_t)heapd_heap_base(c);
    uintptr_t seg_size = (uintptr_t)ctl->segment_size;
    size_t nsegs = heapd_heap_size(c) / seg_size;
    unsigned char *old_segs = calloc(nsegs, 1);
    ck_assert_ptr_nonnull(old_segs);
    mark_segments(heapd_global_get(m, "old"), base, seg_size, old_segs);

    /* a refill naming the class: partly free segments of the old list */
    unsigned cls = layout_size_class(
        (uint32_t)layout_object_size(1, sizeof(long)));
    int fd;
    fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    Heapd__SegmentRequest sr = HEAPD__SEGMENT_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    uint32_t classes[1] = {cls};
    sr.kind = HEAPD__SEGMENT_KIND__SEGMENT_SMALL;
    sr.count = 16;
    sr.n_classes = 1;
    sr.classes = classes;
    env.seq = 1;
    env.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST;
    env.segment_request = &sr;
    harness_send_env(fd, &env);
    Heapd__Envelope *g = harness_read_env(fd, NULL);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->body_case, HEAPD__ENVELOPE__BODY_SEGMENT_GRANT);
    Heapd__SegmentGrant *sg = g->segment_grant;
    ck_assert_uint_ge(sg->n_segments, 1);
    ck_assert_uint_eq(sg->n_formatted, sg->n_segments);
    for (size_t i = 0; i < sg->n_segments; i++) {
        ck_assert_msg(sg->formatted[i] == 1 + cls,
                      "granted segment %u is %s (class %u asked for)",
                      sg->segments[i], sg->formatted[i] ? "of another class"
                                                        : "blank", cls);
        ck_assert_msg(sg->segments[i] < nsegs && old_segs[sg->segments[i]],
                      "granted segment %u holds none of the old list",
                      sg->segments[i]);
    }
    heapd__envelope__free_unpacked(g, NULL);
    close(fd); /* its segments are the daemon's again */

    size_t young = heapd_root_push(m, NULL);
    make_list(m, young, M, 10000000);
    harness_collect(m);
    check_list(m, young, M, 10000000, 1);
    long reused = 0;
    for (void **cl = heapd_root_get(m, young); cl; cl = cl[0])
        reused += old_segs[((uintptr_t)cl - base) / seg_size];
    free(old_segs);
    size_t old_slot = heapd_root_push(m, heapd_global_get(m, "old"));
    check_list(m, old_slot, N / 4, 0, 4);
    fprintf(stderr, "partly_free_segments_are_reused: %ld of %d new cells "
            "in the old list's segments\n", reused, M);
    ck_assert_uint_eq(harness_stats(c).verify_failures, 0);
    heapd_root_pop(m, 2);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* Every size class and several large sizes (run objects and runs of
 * segments): right sizes, zeroed, distinct, contents intact across
 * cycles, and large runs freed once dropped. */
START_TEST(every_size_class)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start_with(&D, NULL);
    /* at the end every object is garbage, which a copy of the last one
     * left in a register would keep */
    harness_attach_precise(&D, &c, &m);

    static const size_t large[] = {16384 + 8, 100000, 1 << 20, 5 << 20};
    const size_t nsmall = LAYOUT_NCLASSES * 3;
    const size_t total = nsmall + sizeof large / sizeof large[0];
    size_t base = heapd_root_depth(m);
    size_t k = 0;
    for (unsigned cl = 0; cl < LAYOUT_NCLASSES; cl++) {
        for (int j = 0; j < 3; j++, k++) {
            /* the class size itself, and sizes just past the previous */
            size_t sz = layout_class_size[cl] - (size_t)j * 8;
            if (sz < 16)
                sz = 16;
            size_t nbytes = sz - 16;
            void **o = heapd_alloc(m, 1, nbytes);
            ck_assert_msg(o != NULL, "class %u size %zu", cl, sz);
            ck_assert_uint_eq(heapd_nbytes(o), nbytes);
            unsigned char *b = heapd_bytes(o);
            for (size_t i = 0; i < nbytes; i++)
                ck_assert_int_eq(b[i], 0);
            memset(b, (int)(k & 0xff), nbytes);
            heapd_root_push(m, o);
        }
    }
    for (size_t i = 0; i < sizeof large / sizeof large[0]; i++, k++) {
        void **o = heapd_alloc(m, 2, large[i]);
        ck_assert_msg(o != NULL, "large %zu: %s", large[i], strerror(errno));
        ck_assert_uint_eq(heapd_nbytes(o), large[i]);
        ck_assert_ptr_null(o[0]);
        unsigned char *b = heapd_bytes(o);
        for (size_t j = 0; j < large[i]; j += 4093)
            ck_assert_int_eq(b[j], 0);
        memset(b, (int)(k & 0xff), large[i]);
        heapd_root_push(m, o);
    }
    ck_assert_uint_eq(k, total);
    /* no two objects overlap: every object's bytes still hold its pattern
     * after all were written, and after cycles */
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < total; i++) {
            void *o = heapd_root_get(m, base + i);
            unsigned char *b = heapd_bytes(o);
            size_t nb = heapd_nbytes(o);
            for (size_t j = 0; j < nb; j += (nb > 4096 ? 4093 : 1))
                ck_assert_msg(b[j] == (unsigned char)(i & 0xff),
                              "object %zu byte %zu overwritten", i, j);
        }
        harness_collect(m);
    }
    heapd_stats_t st = harness_stats(c);
    ck_assert_uint_eq(layout_small_max(128 * 1024), 16384);
    /* the first two large sizes take blocks of the run class (Note
     * [Runs]); only 1 MiB and 5 MiB get runs of segments */
    ck_assert_uint_lt(16384 + 8 + 16, layout_run_max(128 * 1024));
    ck_assert_uint_lt(100000 + 16, layout_run_max(128 * 1024));
    ck_assert_uint_eq(st.segments_large, 2);
    heapd_root_pop(m, total);
    harness_collect(m);
    st = harness_stats(c);
    ck_assert_uint_eq(st.segments_large, 0);
    ck_assert_uint_lt(st.live_bytes, 4096);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- reused blocks are zeroed ---- */

/* Classes zeroed in line, by alloc_zero_payload's loop, and by memset
 * (Note [Zeroing an object] in client/alloc.c). */
#define ZERO_CLASS_MAX 640u
#define ZERO_FILL 0xa5

/* An object of NBYTES bytes (a multiple of 8) from M, checked all zero,
 * then filled so that its block is dirty when it is taken again. */
static unsigned char *take_zeroed(heapd_mutator *m, size_t nbytes)
{
    unsigned char *o = heapd_alloc(m, 0, nbytes);
    ck_assert_msg(o != NULL, "heapd_alloc(0, %zu): %s", nbytes,
                  heapd_last_error());
    /* a word at a time, one check: fast enough under ThreadSanitizer */
    const uint64_t *w = (const uint64_t *)o;
    size_t i = 0;
    while (i < nbytes / 8 && w[i] == 0)
        i++;
    ck_assert_msg(i == nbytes / 8, "%zu-byte object %p: word %zu is %#llx",
                  nbytes, (void *)o, i, (unsigned long long)w[i]);
    memset(o, ZERO_FILL, nbytes);
    return o;
}

/* ---- the inline allocation fast path ---- */

/* A young mutator's allocations in the caller's code (the heapd_alloc
 * macro, where this build has it) and in the function ((heapd_alloc))
 * take the same blocks in turn, make the same objects, and count the
 * same budget (Note [Inline allocation fast path] in heapd.h): every
 * pair from one free run is two blocks in a row, each object young,
 * zeroed and of its sizes, and the nursery's bytes in use grow by the
 * block of each. */
START_TEST(inline_and_called_allocations_agree)
{
    heapd_client *c;
    heapd_mutator *m, *y;
    harness_start_with(&D, "young_size = 256K\n");
    harness_attach_young(&D, &c, &m, &y);
    /* the library serves the inline path (a program built with this
     * header and no sanitizer takes it) */
    ck_assert_uint_eq(((const struct heapd_fast_ *)(const void *)y)->alloc_mode,
                      HEAPD_FAST_ALLOC_YOUNG_);
    static const size_t shapes[][2] = {{0, 8},  {1, 0},   {2, 16}, {0, 56},
                                       {3, 40}, {0, 120}, {4, 96}, {0, 256},
                                       {8, 200}, {0, 1000}, {30, 900}};
    unsigned pairs = 0, adjacent = 0;
    /* through two minor collections, so that blocks are taken again */
    heapd_young_stats s = {0};
    for (unsigned round = 0; round < 64 || s.minor_collections < 2;
         round++) {
        ck_assert_msg(round < 4096, "no second minor collection after %u "
                      "rounds", round);
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            size_t nrefs = shapes[k][0], nbytes = shapes[k][1] + round % 3 * 8;
            uint64_t block = layout_class_size[layout_size_class(
                (uint32_t)layout_object_size(nrefs, nbytes))];
            heapd_young_stats a, b, d;
            heapd_young_stats_get(y, &a);
            void *p = heapd_alloc(y, nrefs, nbytes);
            heapd_young_stats_get(y, &b);
            void *q = (heapd_alloc)(y, nrefs, nbytes);
            heapd_young_stats_get(y, &d);
            ck_assert_ptr_nonnull(p);
            ck_assert_ptr_nonnull(q);
            void *o[2] = {p, q};
            for (int j = 0; j < 2; j++) {
                ck_assert(heapd_is_young(y, o[j]));
                ck_assert_uint_eq(heapd_nrefs(o[j]), nrefs);
                ck_assert_uint_eq(heapd_nbytes(o[j]), nbytes);
                const uint64_t *w = o[j];
                for (size_t i = 0; i < nrefs + nbytes / 8; i++)
                    ck_assert_msg(w[i] == 0, "(%zu, %zu): word %zu of %s "
                                  "object is %#llx", nrefs, nbytes, i,
                                  j ? "the called" : "the inline",
                                  (unsigned long long)w[i]);
                /* dirty, for the next object the block holds */
                memset(heapd_bytes(o[j]), 0xa5, nbytes);
            }
            /* no minor collection between: each took one block */
            if (b.minor_collections == a.minor_collections)
                ck_assert_uint_eq(b.bytes_in_use, a.bytes_in_use + block);
            if (d.minor_collections == b.minor_collections) {
                ck_assert_uint_eq(d.bytes_in_use, b.bytes_in_use + block);
                pairs++;
                adjacent += (uintptr_t)q == (uintptr_t)p + block;
            }
        }
        heapd_young_stats_get(y, &s);
    }
    /* a pair split by the end of a free run is rare */
    ck_assert_msg(adjacent * 10 >= pairs * 9, "%u of %u pairs in adjacent "
                  "blocks", adjacent, pairs);
    harness_detach_young(c, m, y);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

static int cmp_addr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* A block freed and taken again reads all zero, in every class up to
 * ZERO_CLASS_MAX, at the size that fills a class's block and a word
 * less, and at both alignments of a block in its cache line.  Every
 * object is filled before it is dropped (and freed blocks are poisoned
 * with the verifier on), so a byte that
 * was not zeroed shows.  A young mutator takes its own blocks again
 * after each minor collection; a shared one, the blocks a cycle freed
 * between the objects it kept. */
/* Note [Young runs are capped] in client/alloc.c: the free run the
 * inline path takes blocks from never reaches more than 64 KiB past its
 * cursor, whatever the segment holds free, so heapd_alloc is called (and
 * sees a stop or remark) at least that often. */
START_TEST(young_runs_are_capped)
{
    heapd_client *c;
    heapd_mutator *m, *y;
    harness_start_with(&D, "young_size = 1M\n");
    harness_attach_young(&D, &c, &m, &y);
    const struct heapd_fast_ *f = (const struct heapd_fast_ *)(const void *)y;
    static const size_t sizes[] = {8, 56, 248, 1016};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        unsigned cls = layout_size_class(
            (uint32_t)layout_object_size(0, sizes[k]));
        uint32_t cap = 65536 / layout_class_size[cls], longest = 0;
        for (unsigned n = 0; n < 50000; n++) {
            ck_assert_ptr_nonnull(heapd_alloc(y, 0, sizes[k]));
            const struct heapd_run_ *r = &f->runs[cls];
            uint32_t left = r->limit > r->cursor ? r->limit - r->cursor : 0;
            ck_assert_msg(left < cap, "%zu-byte objects: a free run of %u "
                          "blocks ahead of the cursor, over the cap of %u",
                          sizes[k], left, cap);
            longest = left > longest ? left : longest;
        }
        /* the cap, not the segment, ended the runs */
        ck_assert_uint_ge(longest + 1, cap / 2);
    }
    harness_detach_young(c, m, y);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* A young mutator that only allocates, every object from the inline path,
 * still answers the stops of a collection another mutator waits for. */
struct inline_loop {
    heapd_client *c;
    _Atomic bool done;
    _Atomic bool ended;      /* the thread returned, perhaps failing */
    _Atomic unsigned long allocated;
};

static void *inline_loop_run(struct inline_loop *l)
{
    heapd_mutator *y;
    heapd_mutator_opts yo = {.flags = HEAPD_MUTATOR_YOUNG};
    if (heapd_attach_opts(l->c, &yo, &y) < 0)
        return (void *)heapd_last_error();
    while (!atomic_load(&l->done)) {
        if (!heapd_alloc(y, 0, 8))
            return (void *)"heapd_alloc failed";
        atomic_fetch_add_explicit(&l->allocated, 1, memory_order_relaxed);
    }
    heapd_detach(y);
    return NULL;
}

static void *inline_loop_main(void *arg)
{
    struct inline_loop *l = arg;
    void *why = inline_loop_run(l);
    atomic_store(&l->ended, true);
    return why;
}

START_TEST(inline_allocation_answers_stops)
{
    heapd_client *c;
    heapd_mutator *m;
    pthread_t t;
    harness_start_with(&D, NULL);
    harness_attach(&D, &c, &m);
    struct inline_loop l = {.c = c};
    ck_assert_int_eq(pthread_create(&t, NULL, inline_loop_main, &l), 0);
    while (atomic_load(&l.allocated) < 1000 && !atomic_load(&l.ended))
        sched_yield(); /* bounded by the test's timeout */
    if (atomic_load(&l.ended)) {
        void *early;
        pthread_join(t, &early);
        ck_abort_msg("the allocating thread ended before 1000 objects: %s",
                     early ? (char *)early : "no error");
    }
    heapd_stats_t before = harness_stats(c);
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t after = harness_stats(c);
    ck_assert_uint_ge(after.cycles_completed, before.cycles_completed + 3);
    atomic_store(&l.done, true);
    void *why;
    ck_assert_int_eq(pthread_join(t, &why), 0);
    ck_assert_msg(why == NULL, "the allocating thread: %s", (char *)why);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(reused_blocks_are_zeroed)
{
    heapd_client *c;
    heapd_mutator *m, *y;
    harness_start_with(&D, "young_size = 256K\n");
    harness_attach(&D, &c, &m);
    heapd_mutator_opts yo = {.flags = HEAPD_MUTATOR_YOUNG};
    ck_assert_int_eq(heapd_attach_opts(c, &yo, &y), 0);
    enum { KEEP = 256 };
    size_t sizes[2 * LAYOUT_NCLASSES], nsizes = 0;
    for (unsigned cl = 0; layout_class_size[cl] <= ZERO_CLASS_MAX; cl++)
        for (size_t cut = 0; cut <= 8; cut += 8)
            if (layout_class_size[cl] >= LAYOUT_WORD + cut + 8)
                sizes[nsizes++] = layout_class_size[cl] - LAYOUT_WORD - cut;

    /* young: through a minor collection after the first, so that every
     * block of the nursery is taken again; meanwhile M, which reaches
     * no safepoint, is blocking (Note [Client GC discipline]) */
    heapd_blocking_enter(m);
    for (size_t z = 0; z < nsizes; z++) {
        heapd_young_stats a, b;
        heapd_young_stats_get(y, &a);
        uint64_t bound = 4 * (a.young_bytes / (sizes[z] + 8)) + (64u << 10);
        for (uint64_t k = 0;; k++) {
            ck_assert_msg(k < bound, "%zu bytes: no second minor collection "
                          "after %llu allocations", sizes[z],
                          (unsigned long long)k);
            take_zeroed(y, sizes[z]);
            heapd_young_stats_get(y, &b);
            if (b.minor_collections >= a.minor_collections + 2)
                break;
        }
    }

    /* shared: keep every other object, collect, take as many again */
    heapd_blocking_leave(m);
    heapd_blocking_enter(y);
    void **keep = heapd_alloc(m, nsizes * KEEP, 0);
    ck_assert_ptr_nonnull(keep);
    ck_assert_uint_ne(heapd_root_push(m, keep), (size_t)-1);
    uintptr_t *freed = malloc(nsizes * KEEP * sizeof *freed);
    ck_assert_ptr_nonnull(freed);
    for (size_t z = 0, n = 0; z < nsizes; z++) {
        for (size_t i = 0; i < 2 * KEEP; i++, n++) {
            unsigned char *o = take_zeroed(m, sizes[z]);
            if (n & 1)
                heapd_write(m, keep, &keep[n / 2], o);
            else
                freed[n / 2] = (uintptr_t)o;
        }
    }
    harness_collect(m);
    qsort(freed, nsizes * KEEP, sizeof *freed, cmp_addr);
    uint64_t reused = 0, taken = 0;
    for (size_t z = 0; z < nsizes; z++) {
        for (size_t i = 0; i < 2 * KEEP; i++, taken++) {
            uintptr_t o = (uintptr_t)take_zeroed(m, sizes[z]);
            reused += bsearch(&o, freed, nsizes * KEEP, sizeof *freed,
                              cmp_addr) != NULL;
        }
    }
    heapd_root_pop(m, 1);
    heapd_blocking_leave(y);
    /* the shared half tests something only if freed blocks came back */
    ck_assert_msg(reused * 32 >= taken, "only %llu of %llu shared objects "
                  "took a block freed before them",
                  (unsigned long long)reused, (unsigned long long)taken);
    free(freed);
    heapd_detach(y);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* Allocating far more than the heap holds works when little stays live. */
START_TEST(garbage_is_reclaimed)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start(&D, "[daemon]\nsocket = @SOCK@\nlog_level = info\n"
                      "[heap default]\nbase = 0x7e8000000000\n"
                      "max_size = 48M\nverify = true\n");
    harness_attach(&D, &c, &m);
    size_t keep = heapd_root_push(m, NULL);
    const long n = 400000; /* 400k * (1 KiB + header): ~13x the heap */
    for (long i = 0; i < n; i++) {
        void **o = heapd_alloc(m, 1, 1024);
        ck_assert_msg(o != NULL, "alloc %ld: %s (%s)", i, strerror(errno),
                      heapd_last_error());
        *(long *)heapd_bytes(o) = i;
        if (i % 10000 == 0) { /* a short list of survivors */
            heapd_write(m, o, &o[0], heapd_root_get(m, keep));
            heapd_root_set(m, keep, o);
        }
    }
    long expect = (n - 1) / 10000 * 10000, count = 0;
    for (void **o = heapd_root_get(m, keep); o; o = o[0], count++) {
        ck_assert_int_eq(*(long *)heapd_bytes(o), expect);
        expect -= 10000;
    }
    ck_assert_int_eq(count, n / 10000);
    heapd_stats_t st = harness_stats(c);
    ck_assert_uint_ge(st.cycles_completed, 10);
    ck_assert_uint_ge(st.bytes_allocated, (uint64_t)n * 1032);
    ck_assert_uint_le(st.heap_committed_bytes, 48u << 20);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* Note [Reserve sizing] and Note [Pre-faulting] (client/reserve.c): a
 * client that allocates as fast as it can grows its reserve, but never
 * holds more than two of the largest batches, its current segment and a
 * return batch; its data survives; at disconnect the prefault thread stops
 * and every segment it held comes back. */
START_TEST(reserve_is_bounded_and_given_back)
{
    heapd_client *c;
    heapd_mutator *m;
    /* 8192 segments of 128 KiB: the batch may grow to its cap of 64 */
    harness_start(&D, "[daemon]\nsocket = @SOCK@\nlog_level = info\n"
                      "[heap default]\nbase = 0x7e8000000000\n"
                      "max_size = 1G\nverify = true\n");
    heapd_stats_t base = harness_daemon_stats(&D);
    harness_attach(&D, &c, &m);
    size_t keep = heapd_root_push(m, NULL);
    const uint64_t bound = 2 * 64 + 1 + 16 + 1; /* + one root chunk */
    const long n = 300000; /* 300 MiB of 1 KiB objects, mostly garbage */
    for (long i = 0; i < n; i++) {
        void **o = heapd_alloc(m, 1, 1024);
        ck_assert_msg(o != NULL, "alloc %ld: %s", i, heapd_last_error());
        *(long *)heapd_bytes(o) = i;
        if (i % 5000 == 0) {
            heapd_write(m, o, &o[0], heapd_root_get(m, keep));
            heapd_root_set(m, keep, o);
        }
        if (i % 20000 == 0) {
            heapd_stats_t st = harness_daemon_stats(&D);
            uint64_t held = st.segments_owned - base.segments_owned;
            ck_assert_msg(held <= bound, "the client holds %llu segments "
                          "(at most %llu)", (unsigned long long)held,
                          (unsigned long long)bound);
        }
    }
    long expect = (n - 1) / 5000 * 5000, count = 0;
    for (void **o = heapd_root_get(m, keep); o; o = o[0], count++) {
        ck_assert_int_eq(*(long *)heapd_bytes(o), expect);
        expect -= 5000;
    }
    ck_assert_int_eq(count, n / 5000);
    heapd_detach(m);
    heapd_disconnect(c);
    /* the daemon takes the close in its own time */
    harness_wait_stat(&D, NULL, segments_owned, ==, base.segments_owned);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* Note [Pacing]: a mutator that allocates garbage as fast as it can next
 * to a large live set outruns the collector; its grants wait for the cycle
 * under way, and the heap stays within the live bytes plus PACE_FACTOR + 1
 * allocation budgets (its collector has a core of its own: one mutator),
 * instead of growing with every cycle.  The bound comes from the live set the test builds and
 * gc_overhead, not from how fast either side runs: whether a grant had to
 * wait depends on the scheduler, the bound does not. */
START_TEST(allocation_is_paced)
{
    heapd_client *c;
    heapd_mutator *m;
    enum { GC_OVERHEAD = 100, PACE_FACTOR = 2 }; /* Note [Pacing] */
    char conf[512];
    snprintf(conf, sizeof conf,
             "[daemon]\nsocket = @SOCK@\nlog_level = info\n"
             "[heap default]\nbase = 0x7e8000000000\n"
             "max_size = 4G\nverify = true\ngc_overhead = %d\n",
             GC_OVERHEAD);
    harness_start(&D, conf);
    harness_attach(&D, &c, &m);
    size_t keep = heapd_root_push(m, NULL);
    const long live = 600000; /* 40-byte objects: 24 MB */
    const uint64_t block = layout_class_size[layout_size_class(
        (uint32_t)layout_object_size(1, 24))];
    const uint64_t live_set = (uint64_t)live * block;
    const uint64_t budget = live_set / 100 * GC_OVERHEAD;
    /* the control area, the client's reserve (at most two batches of
     * RESERVE_BATCH segments: 16 MiB) and partly used segments: far less
     * than the 720 MB allocated */
    const uint64_t slack = 24u << 20;
    const uint64_t bound = live_set + (PACE_FACTOR + 1) * budget + slack;
    for (long i = 0; i < live; i++) {
        void **o = heapd_alloc(m, 1, 24);
        ck_assert_ptr_nonnull(o);
        *(long *)heapd_bytes(o) = i;
        heapd_write(m, o, &o[0], heapd_root_get(m, keep));
        heapd_root_set(m, keep, o);
    }
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    uint64_t live_bytes = harness_stats(c).live_bytes, most = 0;
    ck_assert_uint_ge(live_bytes, live_set);
    /* 720 MB of garbage, 30 budgets (ThreadSanitizer took minutes over
     * 3 GB, the heap verified every cycle): without pacing the heap would
     * grow by what is allocated while each (verified, so slow) cycle
     * runs */
    for (long i = 0; i < 10000000; i++) {
        /* not ck_assert: check records every assertion it passes, and that
         * would make this loop slower than any collector */
        if (!heapd_alloc(m, 0, 64))
            ck_abort_msg("alloc %ld: %s", i, heapd_last_error());
        if (i % 250000 == 0) {
            uint64_t committed = harness_stats(c).heap_committed_bytes;
            most = committed > most ? committed : most;
        }
    }
    heapd_stats_t st = harness_stats(c);
    most = st.heap_committed_bytes > most ? st.heap_committed_bytes : most;
    fprintf(stderr, "allocation_is_paced: %llu grants paced, %llu cycles, "
            "at most %llu bytes committed\n",
            (unsigned long long)st.grants_paced,
            (unsigned long long)st.cycles_completed,
            (unsigned long long)most);
    ck_assert_msg(most <= bound,
                  "heap committed %llu bytes for a live set of %llu (%llu "
                  "marked): more than the live set, %d budgets of %llu and "
                  "%llu of slack",
                  (unsigned long long)most, (unsigned long long)live_set,
                  (unsigned long long)live_bytes, PACE_FACTOR + 1,
                  (unsigned long long)budget, (unsigned long long)slack);
    long n = 0;
    for (void **o = heapd_root_get(m, keep); o; o = o[0], n++)
        ck_assert_int_eq(*(long *)heapd_bytes(o), live - 1 - n);
    ck_assert_int_eq(n, live);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- exhaustion ---- */

START_TEST(heap_full_then_recovers)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start(&D, "[daemon]\nsocket = @SOCK@\n[heap default]\n"
                      "base = 0x7e8000000000\nmax_size = 24M\nverify = true\n");
    harness_attach(&D, &c, &m);
    size_t n = 0;
    void *o;
    while ((o = heapd_alloc(m, 0, 1000)) != NULL) {
        ck_assert(heapd_root_push(m, o) != (size_t)-1);
        n++;
        ck_assert_msg(n < 100000, "a 24M heap never filled up");
    }
    ck_assert_int_eq(errno, ENOMEM);
    ck_assert_msg(strstr(heapd_last_error(), "heap 'default' is full"),
                  "message: %s", heapd_last_error());
    ck_assert_uint_gt(n, 5000); /* most of the 8M past the control area */
    /* large objects fail the same way */
    ck_assert_ptr_null(heapd_alloc(m, 0, 4 << 20));
    ck_assert_int_eq(errno, ENOMEM);
    /* drop everything: allocation works again */
    heapd_root_pop(m, heapd_root_depth(m));
    harness_collect(m);
    for (int i = 0; i < 1000; i++)
        ck_assert_ptr_nonnull(heapd_alloc(m, 0, 1000));
    ck_assert_ptr_nonnull(heapd_alloc(m, 0, 4 << 20));
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(client_quota)
{
    heapd_client *c, *c2;
    heapd_mutator *m, *m2;
    harness_start_with(&D, "max_client_bytes = 1M\n");
    harness_attach(&D, &c, &m);
    /* more than the client may hold at once */
    errno = 0;
    ck_assert_ptr_null(heapd_alloc(m, 0, 2 << 20));
    ck_assert_int_eq(errno, ENOMEM);
    ck_assert_msg(strstr(heapd_last_error(), "max_client_bytes"),
                  "message: %s", heapd_last_error());
    /* within the quota works, for this client and another */
    ck_assert_ptr_nonnull(heapd_alloc(m, 0, 512 << 10));
    /* garbage from here: a stale copy on the stack would keep it (Note
     * [C locals are roots]), and with what a slow (ASan) cycle sees
     * allocated meanwhile, go past the quota */
    harness_wipe_stack();
    harness_attach(&D, &c2, &m2);
    ck_assert_ptr_nonnull(heapd_alloc(m2, 0, 100));
    /* small allocation of objects that die never stops: full segments go
     * back to the heap, and a cycle finds them dead (Note [Quota]); m2
     * waits meanwhile (Note [Client GC discipline]) */
    heapd_blocking_enter(m2);
    for (int i = 0; i < 20000; i++)
        ck_assert_msg(heapd_alloc(m, 0, 100) != NULL, "object %d: %s", i,
                      heapd_last_error());
    heapd_blocking_leave(m2);
    heapd_detach(m2);
    heapd_disconnect(c2);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* Prepend a 1 KiB cell holding V to the list in root slot R; false (errno
 * ENOMEM) when the heap will not give the memory. */
static bool push_kib(heapd_mutator *m, size_t r, long v)
{
    void **cell = heapd_alloc(m, 1, 1024);
    if (!cell)
        return false;
    heapd_write(m, cell, &cell[0], heapd_root_get(m, r));
    memcpy(heapd_bytes(cell), &v, sizeof v);
    heapd_root_set(m, r, cell);
    return true;
}

/* Cells of the list in slot R, checking that they hold N - 1, ..., 0. */
static long count_kib(heapd_mutator *m, size_t r, long n)
{
    long i = 0;
    for (void **c = heapd_root_get(m, r); c; c = c[0], i++) {
        long x;
        memcpy(&x, heapd_bytes(c), sizeof x);
        if (x != n - 1 - i)
            ck_abort_msg("cell %ld holds %ld, expected %ld", i, x, n - 1 - i);
    }
    return i;
}

/* Note [Quota] (daemon/gc/segment.c): max_client_bytes bounds what a client
 * makes the heap hold -- the segments it holds and what survives of the
 * objects it allocated -- not what it allocates.  A client that keeps
 * everything alive and hands its full segments back gets ENOMEM near the
 * quota, another client still allocates, and a client whose objects die
 * allocates many times its quota. */
START_TEST(quota_bounds_what_a_client_keeps)
{
    heapd_client *c, *c2;
    heapd_mutator *m, *m2;
    const uint64_t quota = 16u << 20;
    harness_start_with(&D, "max_client_bytes = 16M\n");
    harness_attach(&D, &c, &m);
    size_t keep = heapd_root_push(m, NULL);
    long n = 0;
    errno = 0;
    while (push_kib(m, keep, n)) {
        n++;
        /* before, the heap (1 GiB) filled up: 243 MB for a 16M quota */
        ck_assert_msg(n < (long)(4 * quota / 1024),
                      "a client with max_client_bytes = 16M keeps %ld KiB "
                      "alive", n);
    }
    ck_assert_int_eq(errno, ENOMEM);
    ck_assert_msg(strstr(heapd_last_error(), "max_client_bytes") &&
                      strstr(heapd_last_error(), "alive"),
                  "message: %s", heapd_last_error());
    harness_collect(m);
    heapd_stats_t st = harness_stats(c);
    const struct layout_control *ctl = heapd_heap_base(c);
    uint64_t held = st.segments_owned * ctl->segment_size;
    fprintf(stderr, "quota_bounds_what_a_client_keeps: ENOMEM after %ld "
            "cells: %llu bytes live, %llu in owned segments\n", n,
            (unsigned long long)st.live_bytes, (unsigned long long)held);
    /* held + live <= quota at every grant, and what it handed over since
     * the last sweep below another quota (Note [Quota]), plus one grant */
    ck_assert_uint_le(st.live_bytes + held, 3 * quota);
    ck_assert_uint_ge(st.live_bytes + held, quota / 2);

    /* another client allocates, and keeps, half as much, or a quarter of
     * its quota if that is less (N reaches 3 quotas when little was swept
     * during the fill: half of it may not fit); each mutator waits while
     * the other one works (Note [Client GC discipline]) */
    long half = n / 2;
    if (half > (long)(quota / 4 / 1024))
        half = (long)(quota / 4 / 1024);
    heapd_blocking_enter(m);
    harness_attach(&D, &c2, &m2);
    size_t keep2 = heapd_root_push(m2, NULL);
    long n2 = 0;
    while (n2 < half && push_kib(m2, keep2, n2))
        n2++;
    ck_assert_msg(n2 == half, "the second client got ENOMEM after %ld "
                  "cells: %s", n2, heapd_last_error());
    heapd_blocking_enter(m2);
    heapd_blocking_leave(m);
    ck_assert_int_eq(count_kib(m, keep, n), n);

    /* the first lets its list go: it may allocate again */
    heapd_root_set(m, keep, NULL);
    for (long i = 0; i < half; i++)
        ck_assert_msg(push_kib(m, keep, i), "cell %ld after the list "
                      "died: %s", i, heapd_last_error());
    ck_assert_int_eq(count_kib(m, keep, half), half);
    heapd_detach(m);
    heapd_disconnect(c);

    /* objects that die: eight times the quota, allocated by one client */
    heapd_blocking_leave(m2);
    ck_assert_int_eq(count_kib(m2, keep2, half), half);
    heapd_root_set(m2, keep2, NULL);
    for (long i = 0; i < (long)(8 * quota / 1024); i++)
        ck_assert_msg(heapd_alloc(m2, 1, 1024), "garbage cell %ld: %s", i,
                      heapd_last_error());
    ck_assert_uint_ge(harness_stats(c2).bytes_allocated, 8 * quota);
    heapd_detach(m2);
    heapd_disconnect(c2);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* Write BYTES of garbage into the heap of C from offset OFF: memory the
 * daemon never granted (the whole heap is mapped writable). */
static void scribble(heapd_client *c, size_t off, size_t bytes)
{
    ck_assert_uint_le(off + bytes, heapd_heap_size(c));
    memset((char *)heapd_heap_base(c) + off, 0x5a, bytes);
}

/* A forked mutator's body: the same, at the upper half of the heap whose
 * client is ARG (mapped at the same address in every process). */
static void scribble_upper_half(heapd_mutator *m, void *arg)
{
    (void)m;
    scribble(arg, heapd_heap_size(arg) / 2, 256u << 20);
}

/* Note [Free memory stays free] (daemon/gc/segment.c): memory a client
 * writes into segments it was never granted is given back by the next
 * cycle, when the client leaves, or within a tick of the daemon's timer;
 * the segments are granted blank
 * afterwards, and a bystander's data is intact. */
START_TEST(stray_writes_into_free_segments_are_given_back)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start_with(&D, NULL);
    harness_attach(&D, &c, &m);
    size_t keep = heapd_root_push(m, NULL);
    make_list(m, keep, 20000, 7);
    harness_collect(m);
    uint64_t before = harness_stats(c).heap_committed_bytes;
    const uint64_t slack = 16u << 20; /* the free pool may grow a little */
    /* each scribble covers this many free segments, never granted */
    const uint64_t segs =
        (256u << 20) / ((const struct layout_control *)heapd_heap_base(c))
                           ->segment_size;
    uint64_t repunched = harness_stats(c).segments_repunched;

    /* this client, well past what is in use: a quarter of the heap; then
     * the end of a cycle */
    size_t size = heapd_heap_size(c);
    scribble(c, size / 4, 256u << 20);
    harness_collect(m);
    harness_wait_stat(&D, c, segments_repunched, >=, repunched + segs);
    harness_wait_stat(&D, c, heap_committed_bytes, <=, before + slack);

    /* a client that writes and goes away: its leaving */
    /* this thread waits: Note [Client GC discipline] */
    heapd_blocking_enter(m);
    repunched = harness_stats(c).segments_repunched;
    pid_t kid = harness_fork_mutator(&D, scribble_upper_half, c);
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    harness_wait_stat(&D, c, segments_repunched, >=, repunched + segs);
    harness_wait_stat(&D, c, heap_committed_bytes, <=, before + slack);

    /* a client that writes and stays, with no cycle (this mutator is
     * blocked, so nothing allocates): the loop thread's timer */
    uint64_t cycles = harness_stats(c).cycles_completed;
    repunched = harness_stats(c).segments_repunched;
    scribble(c, size / 4, 256u << 20);
    harness_wait_stat(&D, c, segments_repunched, >=, repunched + segs);
    harness_wait_stat(&D, c, heap_committed_bytes, <=, before + slack);
    ck_assert_uint_eq(harness_stats(c).cycles_completed, cycles);
    heapd_blocking_leave(m);

    /* the scribbled segments are granted as blank ones: allocation over
     * all of them works and the verifier finds nothing wrong */
    size_t junk = heapd_root_push(m, NULL);
    make_list(m, junk, 200000, 0);
    check_list(m, keep, 20000, 7, 1);
    harness_collect(m);
    check_list(m, junk, 200000, 0, 1);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

#ifndef NDEBUG
/* Note [Pacing]: whether a cycle's workers have a core of their own is
 * judged at its start, and again at each grant while it runs.  A cycle
 * starts with one mutator allocating (its workers have a core), is held
 * before it marks (Note [Holding marking for tests]) while as many
 * processes as there are cores start allocating: they take the cores, so
 * their grants wait once a runway (at most half a budget) has been
 * allocated during the cycle, not PACE_FACTOR budgets.  They allocate
 * three quarters of those two budgets together: judged at the start
 * only, no grant waited (and the memory benchmark's shared map, whose
 * workers joined a cycle its parent's fill had started, held 2.4-2.6
 * times its live bytes in about one run of four, against 1.99). */
START_TEST(a_cycle_that_loses_its_core_paces_to_the_goal)
{
    enum { BUDGET = 4 << 20, PACE_FACTOR = 2 }; /* TRIGGER_FLOOR */
    char hold[64];
    harness_start_holding(&D, hold, sizeof hold);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    ck_assert_int_ge(cores, 1);
    ck_assert_int_le(cores, 16);
    /* the kids are forked before this process has libheapd's threads
     * (ThreadSanitizer refuses a child's threads otherwise).  Each waits
     * for GO's end, allocates a little over a segment (its slot then counts
     * as allocating, whatever the next grant), says so on READY and waits
     * for MORE's end: all of them allocate at once, however slowly each
     * starts (under ASan the first could finish before the second began,
     * and one allocating process has the collector's core to share) */
    const long warm = ((128 << 10) + (16 << 10)) / 64;
    const long each = (long)PACE_FACTOR * BUDGET * 3 / 4 / cores / 64;
    ck_assert_int_gt(each, warm);
    int go[2], more[2], ready[2];
    pid_t kids[16];
    ck_assert_int_eq(pipe(go), 0);
    ck_assert_int_eq(pipe(more), 0);
    ck_assert_int_eq(pipe(ready), 0);
    for (long k = 0; k < cores; k++) {
        kids[k] = fork();
        ck_assert_int_ge(kids[k], 0);
        if (kids[k] == 0) {
            char r = 'r';
            close(go[1]);
            close(more[1]);
            close(ready[0]);
            if (read(go[0], &r, 1) != 0)
                _exit(1);
            heapd_client *kc = harness_connect_ok(D.sock, 0);
            heapd_mutator *km;
            if (!kc || heapd_attach(kc, &km) < 0)
                _exit(2);
            for (long i = 0; i < each; i++) {
                if (i == warm) {
                    heapd_blocking_enter(km);
                    if (write(ready[1], &r, 1) != 1 ||
                        read(more[0], &r, 1) != 0)
                        _exit(4);
                    heapd_blocking_leave(km);
                }
                if (!heapd_alloc(km, 0, 48))
                    _exit(3);
            }
            heapd_detach(km);
            heapd_disconnect(kc);
            _exit(0);
        }
    }
    close(go[0]);
    close(more[0]);
    close(ready[1]);
    heapd_client *ctl = harness_control(&D), *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    ck_assert_ptr_nonnull(heapd_alloc(m, 0, 64)); /* one mutator allocated */
    FILE *f = fopen(hold, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(heapd_collect(m, 0), 0);
    heapd_blocking_enter(m);
    harness_wait_stat(&D, ctl, phase, ==, LAYOUT_PHASE_MARK);
    ck_assert_uint_eq(harness_stats(ctl).grants_paced, 0);
    close(go[1]); /* go */
    for (long k = 0; k < cores; k++) {
        char r;
        ck_assert_msg(read(ready[0], &r, 1) == 1,
                      "an allocating process died before it was ready");
    }
    close(more[1]); /* all of them, now */
    harness_wait_stat(&D, ctl, grants_paced, >=, 1);
    unlink(hold);
    for (long k = 0; k < cores; k++)
        harness_wait_ok(kids[k], "an allocating process paced by the cycle");
    heapd_blocking_leave(m);
    heapd_detach(m);
    heapd_disconnect(c);
    heapd_disconnect(ctl);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST
#endif

/* ---- segment supply ---- */

/* Ask for COUNT small segments of CLASSES (N of them) over raw connection
 * FD, as request SEQ; the grant's segments and how many are formatted. */
static size_t ask_small(int fd, uint64_t seq, uint32_t count,
                        uint32_t *classes, size_t n, size_t *formatted)
{
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    Heapd__SegmentRequest sr = HEAPD__SEGMENT_REQUEST__INIT;
    sr.kind = HEAPD__SEGMENT_KIND__SEGMENT_SMALL;
    sr.count = count;
    sr.n_classes = n;
    sr.classes = classes;
    env.seq = seq;
    env.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST;
    env.segment_request = &sr;
    harness_send_env(fd, &env);
    Heapd__Envelope *g = harness_read_env(fd, NULL);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->body_case, HEAPD__ENVELOPE__BODY_SEGMENT_GRANT);
    ck_assert_uint_eq(g->seq, seq);
    size_t got = g->segment_grant->n_segments;
    if (formatted)
        *formatted = g->segment_grant->n_formatted;
    heapd__envelope__free_unpacked(g, NULL);
    return got;
}

/* Note [Segment supply]: one grant is at most an eighth of the allocation
 * budget, at least GRANT_MIN (4) segments, whatever a client asks for;
 * size classes that are none are ignored.
 * A fresh 1G heap's budget is TRIGGER_FLOOR (4 MiB), an eighth of it is 4
 * segments of 128 KiB. */
START_TEST(grants_are_capped_by_the_budget)
{
    harness_start_with(&D, NULL);
    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    ck_assert_uint_eq(ask_small(fd, 3, 64, NULL, 0, NULL), 4);

    /* size classes that are none (Note [Reusing partly free segments]):
     * only a preference, ignored; the grant is of blank segments */
    uint32_t not_classes[3] = {LAYOUT_NCLASSES, 9999, UINT32_MAX};
    size_t formatted = 1;
    ck_assert_uint_ge(ask_small(fd, 4, 4, not_classes, 3, &formatted), 1);
    ck_assert_uint_eq(formatted, 0);
    close(fd);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* Note [Segment supply]: the eighth of the budget is shared by the
 * attached mutators, so that the reserves of many clients together hold a
 * fraction of a budget.  gc_overhead 1700: a budget of 17 times 4 MiB
 * (computed as a hundredth times 1700, a little less), an eighth of it 67
 * whole segments, a grant GRANT_MAX (64); then a quarter of the 67 with
 * 4 mutators attached, and GRANT_MIN (4, not 3) with 20. */
START_TEST(grants_are_a_mutators_share)
{
    enum { MANY = 20 };
    heapd_client *c[MANY];
    heapd_mutator *m[MANY];
    harness_start_with(&D, "gc_overhead = 1700\n");
    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    ck_assert_uint_eq(ask_small(fd, 3, 64, NULL, 0, NULL), 64);
    for (int i = 0; i < MANY; i++) {
        harness_attach(&D, &c[i], &m[i]);
        heapd_blocking_enter(m[i]);
        if (i == 3)
            ck_assert_uint_eq(ask_small(fd, 4, 64, NULL, 0, NULL), 16);
    }
    ck_assert_uint_eq(ask_small(fd, 5, 64, NULL, 0, NULL), 4);
    for (int i = 0; i < MANY; i++) {
        heapd_blocking_leave(m[i]);
        heapd_detach(m[i]);
        heapd_disconnect(c[i]);
    }
    close(fd);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

static Suite *alloc_suite(void)
{
    Suite *s = suite_create("alloc");
    TCase *t = tcase_create("alloc");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, objects_and_accessors);
    tcase_add_test(t, deep_root_stack);
    tcase_add_test(t, every_size_class);
    tcase_add_test(t, partly_free_segments_are_reused);
    tcase_add_test(t, reused_blocks_are_zeroed);
    tcase_add_test(t, inline_and_called_allocations_agree);
    tcase_add_test(t, young_runs_are_capped);
    tcase_add_test(t, inline_allocation_answers_stops);
    tcase_add_test(t, garbage_is_reclaimed);
    tcase_add_test(t, reserve_is_bounded_and_given_back);
    tcase_add_test(t, allocation_is_paced);
    tcase_add_test(t, heap_full_then_recovers);
    tcase_add_test(t, client_quota);
    tcase_add_test(t, quota_bounds_what_a_client_keeps);
    tcase_add_test(t, stray_writes_into_free_segments_are_given_back);
    tcase_add_test(t, grants_are_capped_by_the_budget);
    tcase_add_test(t, grants_are_a_mutators_share);
#ifndef NDEBUG
    tcase_add_test(t, a_cycle_that_loses_its_core_paces_to_the_goal);
#endif
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(alloc_suite());
}
