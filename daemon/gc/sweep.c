/* Sweeping.
 *
 * Note [Sweeping]
 * ~~~~~~~~~~~~~~~
 * After the final sync, with mutators running and allocating black, the
 * workers claim segments in batches from a shared counter and, for every
 * small segment (OWNED or FILLED, class known) and every large run:
 *   - a block whose mark is the epoch is live; its block size counts in
 *     live_bytes;
 *   - a block whose mark is LAYOUT_MARK_YOUNG holds a young object, which
 *     only its mutator frees or promotes (Note [Young objects] in
 *     proto/young.h): it is never freed nor written, fenced or not, and
 *     counts as in use (live_bytes, the segment's live blocks: it is
 *     neither freed whole nor made reusable for it, Note [Reusing partly
 *     free segments]); the segments that hold one are counted for
 *     `heapctl segments` (segments_young), and the bytes of the young
 *     blocks of OWNED segments for it and for pacing (young_bytes, Note
 *     [Young memory and the heap goal] in collector.c);
 *   - a block with any other non-zero mark is dead: when the heap poisons
 *     (verify = true, or a build with assertions) its bytes become
 *     SWEEP_POISON, and then its mark becomes 0 (a release store); a run
 *     object's blocks go together (Note [Runs] in proto/layout.h);
 *   - a FILLED segment left with no live block goes back to the free pool,
 *     one left with enough free blocks becomes reusable (Note [Reusing
 *     partly free segments] in daemon/gc/segment.c), and the pages of one
 *     that no block in use overlaps are recorded for seg_purge (Note
 *     [Purging free memory] in daemon/gc/purge.c);
 *   - a dead large run goes back at once, its memory punched;
 *   - in a fenced segment nothing is freed: a dead block's mark becomes
 *     the epoch, as if marked (Note [Evicted clients] in
 *     daemon/stall.c).
 * OWNED segments are swept too, while their owners allocate into them: an
 * owner writes only marks that are 0 (setting the epoch, or YOUNG) and
 * its own YOUNG ones (setting 0 or the epoch), and the sweeper only marks
 * that are neither 0, the epoch nor YOUNG (setting 0), so they never
 * write the same mark, and the owner cannot take a block before its poison
 * is in.  Sweeping every segment keeps Note [Epoch reuse] true.  A segment
 * an owner formatted after the snapshot holds only black blocks.
 * A large run whose mark is still 0 was granted but not yet taken into use
 * by its client (Note [Segment supply]); it is kept while its owner is
 * connected and freed once the owner is gone.
 * Table changes (seg_release) happen under the heap lock, taken per freed
 * segment; the decision to free is taken there too (Note [A segment
 * changes hands while it is swept]).  What survives in a FILLED segment
 * or a large run is added to
 * the tally of the client the segment is charged to (Note [Quota] in
 * daemon/gc/segment.c): one relaxed atomic add per such segment, into an
 * array of the job's, so that no worker takes the lock for it.
 */
#include "sweep.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "workers.h"

/* Note [A segment changes hands while it is swept]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A sweeper reads a segment's marks without the heap lock, and while it
 * does, the loop thread may give the segment to someone and take it back:
 * a grant adopts a reusable FILLED segment (Note [Reusing partly free
 * segments] in segment.c), its new owner allocates black in it, stores
 * the objects where others see them and leaves, and the segment is FILLED
 * again, now with live blocks the sweeper's pass never saw; a large run's
 * owner sets its mark and leaves after the sweeper read the mark as 0.
 * The state alone, FILLED or LARGE before and after, cannot tell.  So the
 * sweeper frees a segment only after looking again under the heap lock,
 * which every change of hands takes (grants, returns, seg_orphan): it is
 * still in the state it was swept in, and no mark in it is the epoch (a
 * large run: and one whose mark is 0 has no owner).  Under the lock
 * nobody can take a FILLED segment or an ownerless run into use, so what
 * it reads there stays true until seg_release.  The look is a scan of the
 * marks of a segment about to be freed, at most a few thousand bytes.
 * Freeing on the state alone freed segments that the spawn-burn test's
 * board (test_lifecycle.c) still pointed into: it failed so twice under
 * heavy load, and in 3 of 5 runs with a delay put into the sweep between
 * its pass and its release (84 verify failures and 103 bad references in
 * one); with the look, none of 8 such runs failed.
 */

#define SWEEP_BATCH 16

/* Debug builds: the sweep runs after the final sync that ended marking
 * in EPOCH, with the barrier off, and before the next snapshot, the only
 * place the epoch changes (Note [Epoch-tagged marks]): a sweeper that met
 * another epoch would free what that cycle marked. */
static void assert_sweeping(const struct heap *h, uint8_t epoch)
{
    const struct layout_control *c = h->control;
    (void)c, (void)epoch;
    assert(layout_mark_is_epoch(epoch));
    assert(atomic_load_explicit(&c->epoch, memory_order_relaxed) == epoch);
    assert(atomic_load_explicit(&c->phase, memory_order_relaxed) ==
           LAYOUT_PHASE_SWEEP);
}

void sweep_job_init(struct sweep_job *j, struct heap *h, uint8_t epoch)
{
    assert_sweeping(h, epoch);
    memset(j, 0, sizeof *j);
    j->h = h;
    j->epoch = epoch;
    atomic_store(&j->next, h->segs.first);
    heap_lock(h);
    uint32_t n = seg_sweep_start(h);
    j->charged = n ? calloc(n, sizeof *j->charged) : NULL;
    j->ncharged = j->charged ? n : 0;
    heap_unlock(h);
}

void sweep_job_finish(struct sweep_job *j)
{
    ASSERT_LOCK_HELD(&j->h->lock);
    j->h->young_segments = atomic_load(&j->young_segments);
    j->h->young_bytes = atomic_load(&j->young_bytes);
    seg_sweep_charged(j->h, j->charged, j->ncharged);
    free(j->charged);
    j->charged = NULL;
    j->ncharged = 0;
}

/* BYTES survived in segment I: Note [Quota] */
static void tally(struct sweep_job *j, uint32_t i, uint64_t bytes)
{
    uint16_t c = seg_charge_of(&j->h->segs, i);
    if (c != 0 && c <= j->ncharged && bytes != 0)
        atomic_fetch_add_explicit(&j->charged[c - 1], bytes,
                                  memory_order_relaxed);
}

/* With heap->lock held: does segment I, in state EXPECT, hold a block the
 * sweep of EPOCH must keep?  Note [A segment changes hands while it is
 * swept]. */
static bool holds_live(const struct heap *h, uint32_t i, uint8_t expect,
                       uint8_t epoch)
{
    ASSERT_LOCK_HELD(&h->lock);
    const struct segtab *t = &h->segs;
    const uint8_t *marks = layout_seg_marks(heap_seg_addr(h, i));
    if (expect == SEG_LARGE) {
        uint8_t m = __atomic_load_n(marks, __ATOMIC_ACQUIRE);
        return m == epoch || m == LAYOUT_MARK_YOUNG ||
               (m == 0 && t->segs[i].owner != 0);
    }
    uint8_t cls = __atomic_load_n(&t->segs[i].cls, __ATOMIC_ACQUIRE);
    if (cls >= LAYOUT_NCLASSES || t->small_nblocks[cls] == 0)
        return false; /* no block to tell apart: Note [A segment leaves its
                         owner] decided */
    /* a young block is in use (Note [Sweeping]) */
    return memchr(marks, epoch, t->small_nblocks[cls]) != NULL ||
           memchr(marks, LAYOUT_MARK_YOUNG, t->small_nblocks[cls]) != NULL;
}

/* Free segment I, swept in state EXPECT, if it is still in that state and
 * holds nothing live (Note [A segment changes hands while it is swept]).
 * True if it was freed. */
static bool release(struct heap *h, uint32_t i, uint8_t expect, uint8_t epoch)
{
    bool freed = false;
    /* the two states a sweep frees (Note [Segment lifecycle], (6)) */
    assert(expect == SEG_FILLED || expect == SEG_LARGE);
    heap_lock(h);
    if (h->segs.segs[i].state == expect && !seg_fenced(&h->segs, i) &&
        !holds_live(h, i, expect, epoch)) {
        seg_release(h, i);
        assert(h->segs.segs[i].state == SEG_FREE);
        freed = true;
    }
    heap_unlock(h);
    return freed;
}

static void sweep_small(struct sweep_job *j, uint32_t i, uint8_t state,
                        uint64_t *live, uint64_t *freed)
{
    struct heap *h = j->h;
    const struct segtab *t = &h->segs;
    /* Note [Sweeping]: a small segment is swept OWNED or FILLED, and only
     * a FILLED one may be freed */
    assert(state == SEG_OWNED || state == SEG_FILLED);
    uint8_t cls = seg_class(h, i);
    bool fenced = seg_fenced(t, i); /* Note [Evicted clients] */
    if (cls >= LAYOUT_NCLASSES || t->small_nblocks[cls] == 0) {
        /* blank, or a class nobody knows: Note [A segment leaves its
         * owner] */
        if (state == SEG_FILLED && !fenced &&
            seg_unknown_unreferenced(h, i, j->epoch) &&
            release(h, i, SEG_FILLED, j->epoch))
            atomic_fetch_add_explicit(&j->freed_segments, 1,
                                      memory_order_relaxed);
        return;
    }
    uint8_t *seg = heap_seg_addr(h, i);
    uint8_t *marks = layout_seg_marks(seg);
    uint32_t n = t->small_nblocks[cls], bs = layout_class_size[cls];
    uint8_t *blocks = seg + t->small_first[cls];
    uint32_t nlive = 0, nyoung = 0;

    for (uint32_t b = 0; b < n; b++) {
        uint8_t m = __atomic_load_n(&marks[b], __ATOMIC_RELAXED);
        if (m == 0 || (m == LAYOUT_MARK_CONT && cls == LAYOUT_CLASS_RUN))
            continue; /* free, or a continuation that follows no object:
                         Note [Runs] */
        /* the blocks it spans, its continuations read before any of them
         * is freed (Note [Runs]) */
        uint32_t k = (uint32_t)(layout_block_span(marks, b, n, cls) / bs);
        if (m == LAYOUT_MARK_YOUNG) { /* its mutator's: Note [Sweeping] */
            nyoung += k;
            nlive += k;
            b += k - 1;
            continue;
        }
        if (m == j->epoch) {
            nlive += k;
            b += k - 1;
            continue;
        }
        if (fenced) {
            /* kept, as if marked: an evicted process may still write
             * into it (Note [Evicted clients]); the epoch, not its old
             * mark, keeps Note [Epoch reuse] true */
            __atomic_store_n(&marks[b], j->epoch, __ATOMIC_RELAXED);
            nlive += k;
            b += k - 1;
            continue;
        }
        /* poison, then free, the first block last: an owner allocating
         * into this segment right now takes a block only once it reads
         * its 0 */
        if (h->poison)
            memset(blocks + (size_t)b * bs, SWEEP_POISON, (size_t)k * bs);
        for (uint32_t x = b + k - 1; x > b; x--)
            __atomic_store_n(&marks[x], 0, __ATOMIC_RELEASE);
        __atomic_store_n(&marks[b], 0, __ATOMIC_RELEASE);
        (*freed)++;
        b += k - 1;
    }
    *live += (uint64_t)nlive * bs;
    if (nyoung)
        atomic_fetch_add_explicit(&j->young_segments, 1,
                                  memory_order_relaxed);
    if (nyoung && state == SEG_OWNED) /* Note [Young memory and the heap
                                         goal]: where young blocks belong */
        atomic_fetch_add_explicit(&j->young_bytes, (uint64_t)nyoung * bs,
                                  memory_order_relaxed);
    if (state == SEG_FILLED) /* an OWNED one counts whole, as held */
        tally(j, i, (uint64_t)nlive * bs);
    if (nlive == 0 && state == SEG_FILLED && !fenced) {
        if (release(h, i, SEG_FILLED, j->epoch))
            atomic_fetch_add_explicit(&j->freed_segments, 1,
                                      memory_order_relaxed);
    } else if (state == SEG_FILLED && !fenced) {
        /* every block not live is free now: Note [Reusing partly free
         * segments], Note [Purging free memory] in purge.c */
        seg_swept_filled(h, i, n - nlive, n);
        seg_swept_pages(h, i, marks, n, t->small_first[cls], bs);
    }
}

static void sweep_large(struct sweep_job *j, uint32_t i, uint64_t *live,
                        uint64_t *freed)
{
    struct heap *h = j->h;
    const struct seg *s = &h->segs.segs[i];
    uint8_t *mark = layout_seg_marks(heap_seg_addr(h, i));
    uint8_t m = __atomic_load_n(mark, __ATOMIC_ACQUIRE);

    if (m == j->epoch || m == LAYOUT_MARK_YOUNG) {
        /* a young large object is a client's mistake (Note [Young
         * objects]), but its mark is its mutator's all the same */
        if (m == LAYOUT_MARK_YOUNG)
            atomic_fetch_add_explicit(&j->young_segments, 1,
                                      memory_order_relaxed);
        *live += (uint64_t)s->run << h->seg_shift;
        tally(j, i, (uint64_t)s->run << h->seg_shift);
        return;
    }
    if (m == 0 && s->owner != 0) {
        tally(j, i, (uint64_t)s->run << h->seg_shift);
        return; /* granted, not yet in use */
    }
    if (seg_fenced(&h->segs, i)) { /* Note [Evicted clients] */
        if (m != 0)
            __atomic_store_n(mark, j->epoch, __ATOMIC_RELAXED);
        tally(j, i, (uint64_t)s->run << h->seg_shift);
        return;
    }
    if (!release(h, i, SEG_LARGE, j->epoch))
        return; /* taken into use meanwhile */
    (*freed)++;
    atomic_fetch_add_explicit(&j->freed_segments, 1, memory_order_relaxed);
}

void sweep_worker(void *arg, unsigned worker)
{
    struct sweep_job *j = arg;
    struct heap *h = j->h;
    uint32_t count = __atomic_load_n(&h->segs.high, __ATOMIC_ACQUIRE);
    uint64_t live = 0, freed = 0;
    (void)worker;

    for (;;) {
        uint32_t start = atomic_fetch_add(&j->next, SWEEP_BATCH);
        if (start >= count)
            break;
        assert_sweeping(h, j->epoch);
        workers_checkpoint(); /* Note [Worker priority] */
        uint32_t end = start + SWEEP_BATCH < count ? start + SWEEP_BATCH
                                                   : count;
        for (uint32_t i = start; i < end; i++) {
            uint8_t st = seg_state(&h->segs, i);
            if (st == SEG_OWNED || st == SEG_FILLED)
                sweep_small(j, i, st, &live, &freed);
            else if (st == SEG_LARGE)
                sweep_large(j, i, &live, &freed);
        }
    }
    atomic_fetch_add(&j->live_bytes, live);
    atomic_fetch_add(&j->freed_blocks, freed);
}
