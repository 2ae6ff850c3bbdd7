/* The sweep against the loop thread, one step at a time: a segment that
 * changes hands while a sweeper looks at it keeps what its new owner left
 * alive (Note [A segment changes hands while it is swept] in
 * daemon/gc/sweep.c).  The daemon's own code runs on a heap table built by
 * seg_init and table_create over anonymous memory; the test plays the loop thread (grants,
 * returns, departures, under heap->lock) and one sweeper runs in a thread
 * of its own.  The order of the steps is forced by the heap lock and a
 * handshake on the marks, never by timing.  And what granting a swept
 * segment again grows the heap's committed memory by. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "clock.h"
#include "config.h"
#include "heap.h"
#include "layout.h"
#include "segment.h"
#include "sweep.h"
#include "table.h"
#include "heap_inproc.h"
#include "check_main.h"

enum { SEGS = 8, SHIFT = 17, OLD_EPOCH = 3, EPOCH = 4, DEAD = 40 };
#define WAIT_NS (60ull * 1000000000ull) /* only a failure waits this long */

static struct config_heap cfg;
static struct heap H;
static unsigned cls; /* the size class of the objects */

static void setup(void)
{
    memset(&cfg, 0, sizeof cfg);
    heap_inproc_open(&H, &cfg, "sweep-test", SHIFT, SEGS, EPOCH);
    /* the cycle's collector would have published EPOCH and turned to
     * sweeping (Note [Epoch-tagged marks]) */
    atomic_store(&H.control->phase, LAYOUT_PHASE_SWEEP);
    cls = layout_size_class((uint32_t)layout_object_size(1, 32));
    ck_assert_uint_ne(H.segs.small_nblocks[cls], 0);
}

static void teardown(void)
{
    heap_inproc_close(&H, &cfg);
}

static uint8_t *marks_of(uint32_t seg)
{
    return layout_seg_marks(heap_seg_addr(&H, seg));
}

/* What a client does to allocate block B of SEG in EPOCH: the mark, then
 * the object (Note [Allocation fast path] in client/alloc.c). */
static void allocate(uint32_t seg, uint32_t b, uint8_t epoch)
{
    uint8_t *blocks = (uint8_t *)heap_seg_addr(&H, seg) +
                      H.segs.small_first[cls];
    uint64_t *w = (uint64_t *)(blocks + (size_t)b * layout_class_size[cls]);
    __atomic_store_n(&marks_of(seg)[b], epoch, __ATOMIC_RELAXED);
    memset(w + 1, 0, layout_class_size[cls] - LAYOUT_WORD);
    w[0] = layout_header(1, 32);
}

/* Client 1 fills a segment with DEAD objects of the last cycle and
 * returns it; the last sweep found it mostly free and made it reusable
 * (Note [Reusing partly free segments] in daemon/gc/segment.c). */
static uint32_t reusable_segment(void)
{
    uint32_t seg, fmt, held = 0;
    heap_lock(&H);
    ck_assert_int_eq(seg_grant_small(&H, 1, &held, SEGS, 1, NULL,
                                     UINT64_MAX, &seg, &fmt), 1);
    struct layout_segment *hd = heap_seg_addr(&H, seg);
    hd->size_class = cls;
    __atomic_store_n(&hd->kind, LAYOUT_SEG_SMALL, __ATOMIC_RELEASE);
    for (uint32_t b = 0; b < DEAD; b++)
        allocate(seg, b, OLD_EPOCH);
    ck_assert_int_eq(seg_return(&H, 1, &held, seg), 0);
    ck_assert_uint_eq(H.segs.segs[seg].state, SEG_FILLED);
    heap_unlock(&H);
    uint32_t n = H.segs.small_nblocks[cls];
    seg_swept_filled(&H, seg, n - DEAD, n);
    return seg;
}

static void *sweeper(void *job)
{
    sweep_worker(job, 0);
    return NULL;
}

/* The sweeper has freed every dead block of SEG: its pass is over, and
 * what is left is the decision about the segment, which waits for the
 * heap lock the caller holds. */
static void wait_pass_done(uint32_t seg)
{
    const uint8_t *m = marks_of(seg);
    uint64_t until = monotonic_ns() + WAIT_NS;
    for (;;) {
        uint32_t left = 0;
        for (uint32_t b = 0; b < DEAD; b++)
            left += __atomic_load_n(&m[b], __ATOMIC_ACQUIRE) != 0;
        if (left == 0)
            return;
        ck_assert_msg(monotonic_ns() < until, "the sweeper did not free the %u "
                      "dead blocks of segment %u in 60 s (%u left)", DEAD,
                      seg, left);
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
    }
}

/* While the sweeper is between its pass over a reusable segment (every
 * block dead) and its decision, client 2 is granted the segment, allocates
 * a block in it (black: this cycle's epoch) and dies, and the segment is
 * FILLED again.  The block is live; the segment must stay. */
START_TEST(adopted_meanwhile_is_kept)
{
    uint32_t seg = reusable_segment();
    struct sweep_job sj;
    pthread_t t;

    sweep_job_init(&sj, &H, EPOCH);
    heap_lock(&H);
    ck_assert_int_eq(pthread_create(&t, NULL, sweeper, &sj), 0);
    wait_pass_done(seg);

    /* the loop thread, while the sweeper waits for the lock */
    uint64_t classes[(LAYOUT_NCLASSES + 63) / 64] = {0};
    classes[cls / 64] |= 1ull << (cls % 64);
    uint32_t got, fmt, held = 0;
    ck_assert_int_eq(seg_grant_small(&H, 2, &held, SEGS, 1, classes,
                                     UINT64_MAX, &got, &fmt), 1);
    ck_assert_uint_eq(got, seg);
    ck_assert_uint_eq(fmt, 1 + cls); /* adopted, formatted */
    allocate(seg, 0, EPOCH);
    seg_orphan(&H, 2);
    ck_assert_uint_eq(H.segs.segs[seg].state, SEG_FILLED);
    heap_unlock(&H);

    ck_assert_int_eq(pthread_join(t, NULL), 0);
    heap_lock(&H);
    sweep_job_finish(&sj);
    ck_assert_msg(H.segs.segs[seg].state == SEG_FILLED &&
                      marks_of(seg)[0] == EPOCH,
                  "segment %u (state %u, block 0 marked %u) was freed by a "
                  "sweep that looked at it before a client allocated in "
                  "it", seg, H.segs.segs[seg].state, marks_of(seg)[0]);
    ck_assert(segtab_check(&H.segs));
    heap_unlock(&H);
}
END_TEST

/* A sweep of SEG, every block of which is dead, with nobody taking it:
 * it is FREE after, and the heap lock is held; the segments it freed. */
static uint64_t sweep_all_dead(uint32_t seg)
{
    struct sweep_job sj;
    pthread_t t;

    sweep_job_init(&sj, &H, EPOCH);
    ck_assert_int_eq(pthread_create(&t, NULL, sweeper, &sj), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    heap_lock(&H);
    sweep_job_finish(&sj);
    ck_assert_uint_eq(H.segs.segs[seg].state, SEG_FREE);
    return atomic_load(&sj.freed_segments);
}

/* The same pass with nobody taking the segment: every block was dead,
 * and the segment goes back to the pool. */
START_TEST(dead_segment_is_freed)
{
    uint32_t seg = reusable_segment();
    ck_assert_uint_eq(sweep_all_dead(seg), 1);
    ck_assert(segtab_check(&H.segs));
    heap_unlock(&H);
}
END_TEST

/* ---- what a swept segment granted again grows the heap by ---- */

/* The upper half of segment SEG's pages punched, as the purge records a
 * punch (page_runs_punch in daemon/gc/purge.c); the number of them. */
static uint32_t punch_upper_half(uint32_t seg)
{
    ASSERT_LOCK_HELD(&H.lock);
    uint32_t pages = H.segs.seg_pages / 2;
    uint64_t *pp = seg_pages_purged(&H.segs, seg);
    for (uint32_t p = H.segs.seg_pages - pages; p < H.segs.seg_pages; p++)
        seg_bit_set(pp, p);
    H.segs.pages_purged += pages;
    return pages;
}

/* SEG, whose PAGES pages are punched, is granted to client 2 by a grant
 * of CLASSES (NULL: blank segments only) only with room for them: with a
 * page less, the grant is held back (the other segments are punched
 * blank ones, a segment of growth each) and the committed memory stays;
 * with room for exactly them, less than a segment's, it is granted, and
 * the committed memory grows by its punched pages. */
static void granted_only_with_room(uint32_t seg, uint32_t pages,
                                   const uint64_t *classes, uint32_t fmt_want)
{
    uint32_t got, fmt, held = 0;
    ASSERT_LOCK_HELD(&H.lock);
    uint64_t before = seg_committed(&H.segs, SHIFT);
    uint64_t room = (uint64_t)pages << H.segs.page_shift;
    ck_assert_uint_lt(room, (uint64_t)1 << SHIFT);
    ck_assert_int_eq(seg_grant_small(&H, 2, &held, SEGS, 1, classes,
                                     room - 1, &got, &fmt), -EAGAIN);
    if (classes)
        ck_assert_int_eq(seg_grant_reusable(&H, 2, &held, SEGS, 1, classes,
                                            room - 1, &got, &fmt), 0);
    ck_assert_uint_eq(seg_committed(&H.segs, SHIFT), before);
    ck_assert_int_eq(seg_grant_small(&H, 2, &held, SEGS, 1, classes, room,
                                     &got, &fmt), 1);
    ck_assert_uint_eq(got, seg);
    ck_assert_uint_eq(fmt, fmt_want);
    ck_assert_uint_eq(seg_committed(&H.segs, SHIFT),
                      before + ((uint64_t)pages << H.segs.page_shift));
    ck_assert(segtab_check(&H.segs));
}

/* Note [Reused pages are growth]: a reusable segment's punched pages. */
START_TEST(reused_pages_are_growth)
{
    uint32_t seg = reusable_segment();
    uint64_t classes[(LAYOUT_NCLASSES + 63) / 64] = {0};
    classes[cls / 64] |= 1ull << (cls % 64);
    heap_lock(&H);
    ck_assert(seg_bit_test(H.segs.reuse_bits, seg));
    granted_only_with_room(seg, punch_upper_half(seg), classes, 1 + cls);
    heap_unlock(&H);
}
END_TEST

/* The same for a free segment that was not punched whole: the pages
 * punched while it was partly used. */
START_TEST(free_segments_punched_pages_are_growth)
{
    uint32_t seg = reusable_segment();
    heap_lock(&H);
    uint32_t pages = punch_upper_half(seg);
    heap_unlock(&H);
    ck_assert_uint_eq(sweep_all_dead(seg), 1);
    ck_assert(!H.segs.segs[seg].punched);
    granted_only_with_room(seg, pages, NULL, 0);
    heap_unlock(&H);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sweep");
    TCase *t = tcase_create("changes of hands");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, adopted_meanwhile_is_kept);
    tcase_add_test(t, dead_segment_is_freed);
    suite_add_tcase(s, t);
    t = tcase_create("growth");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, reused_pages_are_growth);
    tcase_add_test(t, free_segments_punched_pages_are_growth);
    suite_add_tcase(s, t);
    return check_main(s);
}
