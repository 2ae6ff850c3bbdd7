/* Sweeping: freeing every allocated block whose mark is not the epoch.
 * See Note [Sweeping] in sweep.c. */
#ifndef HEAPD_DAEMON_SWEEP_H
#define HEAPD_DAEMON_SWEEP_H

#include <stdatomic.h>
#include <stdint.h>

#include "layout.h"

struct heap;

#define SWEEP_POISON LAYOUT_POISON /* byte pattern of a freed block */

struct sweep_job {
    struct heap *h;
    uint8_t epoch;
    _Atomic uint32_t next;        /* next segment to claim */
    _Atomic uint64_t live_bytes;  /* blocks that survived */
    _Atomic uint64_t freed_blocks;
    _Atomic uint64_t freed_segments;
    _Atomic uint32_t young_segments; /* holding a young block (Note
                                        [Sweeping]) */
    _Atomic uint64_t young_bytes; /* in young blocks (Note [Young
                                     memory and the heap goal]) */
    _Atomic uint64_t *charged;    /* per quota record: bytes that survived
                                     in the segments charged to it (Note
                                     [Quota] in daemon/gc/segment.c); NULL
                                     without memory for it */
    uint32_t ncharged;
};

/* Takes heap->lock. */
void sweep_job_init(struct sweep_job *j, struct heap *h, uint8_t epoch);
/* With heap->lock held, once every worker is done: hand the per-client
 * tally to the segment table (Note [Quota]) and free it, and the count of
 * segments holding young blocks and their bytes to the heap
 * (heap->young_segments, heap->young_bytes). */
void sweep_job_finish(struct sweep_job *j);
/* One worker's share (a workers_fn). */
void sweep_worker(void *job, unsigned worker);

#endif
