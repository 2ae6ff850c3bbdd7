/* Sweeping.
 *
 * Note [Sweeping]
 * ~~~~~~~~~~~~~~~
 * After marking, with every mutator still stopped (the stop-the-world
 * collector of issue 3; the concurrent one sweeps with mutators running),
 * workers claim segments in batches from a shared counter and, for every
 * small segment (OWNED or FILLED, class known) and every large run:
 *   - a block whose mark is the epoch is live; its block size counts in
 *     live_bytes;
 *   - a block with any other non-zero mark is dead: its mark becomes 0 and,
 *     when the heap poisons (verify = true, or a build with assertions), its
 *     bytes become SWEEP_POISON, so a use after free reads garbage that the
 *     verifier and the client's assertions recognise;
 *   - a FILLED segment left with no live block goes back to the free pool;
 *   - a dead large run goes back at once, its memory punched.
 * OWNED segments are swept too, because their owners are stopped: this is
 * what keeps Note [Epoch-tagged marks] ("after a sweep every non-zero mark
 * is the epoch") true for the whole heap.  The owner keeps allocating past
 * its cursor afterwards; blocks freed behind the cursor are reused once the
 * segment has gone back and come round again.
 * A large run whose mark is still 0 was granted but not yet taken into use
 * by its client (Note [Segment supply]); it is kept while its owner is
 * connected and freed once the owner is gone.
 * Table changes (seg_release) happen under the heap lock, taken per freed
 * segment; everything else reads the table and writes only mark bytes and
 * dead blocks, which no one else touches during the stop.
 */
#include "sweep.h"

#include <pthread.h>
#include <string.h>

#include "heap.h"

#define SWEEP_BATCH 16

void sweep_job_init(struct sweep_job *j, struct heap *h, uint8_t epoch)
{
    memset(j, 0, sizeof *j);
    j->h = h;
    j->epoch = epoch;
    atomic_store(&j->next, h->segs.first);
}

static void release(struct heap *h, uint32_t i, uint8_t expect)
{
    pthread_mutex_lock(&h->lock);
    if (h->segs.segs[i].state == expect)
        seg_release(h, i);
    pthread_mutex_unlock(&h->lock);
}

static void sweep_small(struct sweep_job *j, uint32_t i, uint8_t state,
                        uint64_t *live, uint64_t *freed)
{
    struct heap *h = j->h;
    const struct segtab *t = &h->segs;
    uint8_t cls = t->segs[i].cls;
    if (cls >= LAYOUT_NCLASSES || t->small_nblocks[cls] == 0)
        return; /* blank, or a class we cannot trust: leave it */
    uint8_t *seg = heap_seg_addr(h, i);
    uint8_t *marks = layout_seg_marks(seg);
    uint32_t n = t->small_nblocks[cls], bs = layout_class_size[cls];
    uint8_t *blocks = seg + t->small_first[cls];
    uint32_t nlive = 0;

    for (uint32_t b = 0; b < n; b++) {
        uint8_t m = marks[b];
        if (m == 0)
            continue;
        if (m == j->epoch) {
            nlive++;
            continue;
        }
        marks[b] = 0;
        if (h->poison)
            memset(blocks + (size_t)b * bs, SWEEP_POISON, bs);
        (*freed)++;
    }
    *live += (uint64_t)nlive * bs;
    if (nlive == 0 && state == SEG_FILLED) {
        release(h, i, SEG_FILLED);
        atomic_fetch_add_explicit(&j->freed_segments, 1, memory_order_relaxed);
    }
}

static void sweep_large(struct sweep_job *j, uint32_t i, uint64_t *live,
                        uint64_t *freed)
{
    struct heap *h = j->h;
    const struct seg *s = &h->segs.segs[i];
    uint8_t *mark = layout_seg_marks(heap_seg_addr(h, i));
    uint8_t m = *mark;

    if (m == j->epoch) {
        *live += (uint64_t)s->run << h->seg_shift;
        return;
    }
    if (m == 0 && s->owner != 0)
        return; /* granted, not yet in use */
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
