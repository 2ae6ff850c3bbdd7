/* Sweeping.
 *
 * Note [Sweeping]
 * ~~~~~~~~~~~~~~~
 * After the final sync, with mutators running and allocating black, the
 * workers claim segments in batches from a shared counter and, for every
 * small segment (OWNED or FILLED, class known) and every large run:
 *   - a block whose mark is the epoch is live; its block size counts in
 *     live_bytes;
 *   - a block with any other non-zero mark is dead: when the heap poisons
 *     (verify = true, or a build with assertions) its bytes become
 *     SWEEP_POISON, and then its mark becomes 0 (a release store);
 *   - a FILLED segment left with no live block goes back to the free pool,
 *     one left with enough free blocks becomes reusable (Note [Reusing
 *     partly free segments] in daemon/segment.c);
 *   - a dead large run goes back at once, its memory punched;
 *   - in a fenced segment nothing is freed: a dead block's mark becomes
 *     the epoch, as if marked (Note [Evicted clients] in
 *     daemon/stall.c).
 * OWNED segments are swept too, while their owners allocate into them: an
 * owner writes only marks that are 0 (setting the epoch) and the sweeper
 * only marks that are neither 0 nor the epoch (setting 0), so they never
 * write the same mark, and the owner cannot take a block before its poison
 * is in.  Sweeping every segment keeps Note [Epoch reuse] true.  A segment
 * an owner formatted after the snapshot holds only black blocks.
 * A large run whose mark is still 0 was granted but not yet taken into use
 * by its client (Note [Segment supply]); it is kept while its owner is
 * connected and freed once the owner is gone.
 * Table changes (seg_release) happen under the heap lock, taken per freed
 * segment.  What survives in a FILLED segment or a large run is added to
 * the tally of the client the segment is charged to (Note [Quota] in
 * daemon/segment.c): one relaxed atomic add per such segment, into an
 * array of the job's, so that no worker takes the lock for it.
 */
#include "sweep.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "workers.h"

#define SWEEP_BATCH 16

void sweep_job_init(struct sweep_job *j, struct heap *h, uint8_t epoch)
{
    memset(j, 0, sizeof *j);
    j->h = h;
    j->epoch = epoch;
    atomic_store(&j->next, h->segs.first);
    pthread_mutex_lock(&h->lock);
    uint32_t n = seg_sweep_start(h);
    j->charged = n ? calloc(n, sizeof *j->charged) : NULL;
    j->ncharged = j->charged ? n : 0;
    pthread_mutex_unlock(&h->lock);
}

void sweep_job_finish(struct sweep_job *j)
{
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

static void release(struct heap *h, uint32_t i, uint8_t expect)
{
    pthread_mutex_lock(&h->lock);
    if (h->segs.segs[i].state == expect)
        seg_release(h, i);
    segtab_assert(&h->segs); /* Note [Checking the segment table] */
    pthread_mutex_unlock(&h->lock);
}

static void sweep_small(struct sweep_job *j, uint32_t i, uint8_t state,
                        uint64_t *live, uint64_t *freed)
{
    struct heap *h = j->h;
    const struct segtab *t = &h->segs;
    uint8_t cls = seg_class(h, i);
    bool fenced = seg_fenced(t, i); /* Note [Evicted clients] */
    if (cls >= LAYOUT_NCLASSES || t->small_nblocks[cls] == 0) {
        /* blank, or a class nobody knows: Note [A segment leaves its
         * owner] */
        if (state == SEG_FILLED && !fenced &&
            seg_unknown_unreferenced(h, i, j->epoch)) {
            release(h, i, SEG_FILLED);
            atomic_fetch_add_explicit(&j->freed_segments, 1,
                                      memory_order_relaxed);
        }
        return;
    }
    uint8_t *seg = heap_seg_addr(h, i);
    uint8_t *marks = layout_seg_marks(seg);
    uint32_t n = t->small_nblocks[cls], bs = layout_class_size[cls];
    uint8_t *blocks = seg + t->small_first[cls];
    uint32_t nlive = 0;

    for (uint32_t b = 0; b < n; b++) {
        uint8_t m = __atomic_load_n(&marks[b], __ATOMIC_RELAXED);
        if (m == 0)
            continue;
        if (m == j->epoch) {
            nlive++;
            continue;
        }
        if (fenced) {
            /* kept, as if marked: an evicted process may still write
             * into it (Note [Evicted clients]); the epoch, not its old
             * mark, keeps Note [Epoch reuse] true */
            __atomic_store_n(&marks[b], j->epoch, __ATOMIC_RELAXED);
            nlive++;
            continue;
        }
        /* poison, then free: an owner allocating into this segment right
         * now takes the block only once it reads the 0 */
        if (h->poison)
            memset(blocks + (size_t)b * bs, SWEEP_POISON, bs);
        __atomic_store_n(&marks[b], 0, __ATOMIC_RELEASE);
        (*freed)++;
    }
    *live += (uint64_t)nlive * bs;
    if (state == SEG_FILLED) /* an OWNED one counts whole, as held */
        tally(j, i, (uint64_t)nlive * bs);
    if (nlive == 0 && state == SEG_FILLED && !fenced) {
        release(h, i, SEG_FILLED);
        atomic_fetch_add_explicit(&j->freed_segments, 1, memory_order_relaxed);
    } else if (state == SEG_FILLED && !fenced) {
        /* every block not live is free now: Note [Reusing partly free
         * segments] */
        seg_swept_filled(h, i, n - nlive, n);
    }
}

static void sweep_large(struct sweep_job *j, uint32_t i, uint64_t *live,
                        uint64_t *freed)
{
    struct heap *h = j->h;
    const struct seg *s = &h->segs.segs[i];
    uint8_t *mark = layout_seg_marks(heap_seg_addr(h, i));
    uint8_t m = __atomic_load_n(mark, __ATOMIC_ACQUIRE);

    if (m == j->epoch) {
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
    *mark = 0;
    (*freed)++;
    release(h, i, SEG_LARGE);
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
