/* The daemon's side of a shared heap: its memfd, its mapping at the fixed
 * base, and its control area.  See Note [Heap mapping] in proto/layout.h. */
#ifndef HEAPD_DAEMON_HEAP_H
#define HEAPD_DAEMON_HEAP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "layout.h"
#include "segment.h"

struct collector;
struct mark_job;
struct handoff;

/* Counters of a heap, under heap->lock unless said otherwise. */
struct heap_stats {
    uint64_t cycles_completed;
    uint64_t live_bytes;         /* after the last cycle */
    uint64_t pause_max_ns, pause_total_ns;
    uint64_t ttsp_max_ns;
    uint64_t verify_failures;
    uint64_t alloc_retired;      /* bytes allocated by slots now freed */
    uint64_t mark_ns_last, sweep_ns_last;
    uint64_t urs_entries;
    uint64_t snapshot_pause_max_ns, final_sync_pause_max_ns;
    uint64_t final_sync_retries;
    uint64_t grants_paced;       /* Note [Pacing] */
    uint64_t remark_requests;    /* Note [Remark] in daemon/remark.c */
    uint64_t remark_global;
    uint64_t mark_overflows;
    uint64_t clients_crashed;    /* Note [Client lifecycle] */
    _Atomic uint64_t bad_refs;   /* bumped by mark workers */
};

struct heap {
    const struct config_heap *cfg;
    int fd;                          /* sealed memfd, -1 when closed */
    void *base;                      /* == (void *)cfg->base when open */
    struct layout_control *control;  /* == base */
    unsigned clients;                /* mutator clients connected */
    unsigned mutators;               /* attached mutator slots */
    unsigned seg_shift;              /* log2(segment_size) */
    uint32_t stop_gen;               /* collector thread: last stop gen */
    bool poison;                     /* poison freed blocks (verify/debug) */
    bool verify;                     /* run the verifier after each cycle */
    uint8_t static_flag;             /* Note [Global roots]; heap->lock */
    pthread_mutex_t lock;            /* table, slots, stats */
    pthread_mutex_t adoption;        /* Note [Remark] in daemon/remark.c:
                                        no FILLED segment is granted while
                                        the daemon rescans one; taken
                                        after lock, never before it */
    struct segtab segs;
    struct heap_stats stats;
    struct collector *gc;
    struct mark_job *marking;        /* the cycle's job while phase is MARK */
    struct handoff *handoff;         /* daemon/handoff.c: the loop
                                        thread's end of the collector
                                        (Note [Collector handoff]) */
    _Atomic uint32_t bad_logged;     /* bad references logged this cycle */
};

static inline void *heap_seg_addr(const struct heap *h, uint32_t i)
{
    return (char *)h->base + ((uint64_t)i << h->seg_shift);
}

/* Create the memfd, seal it, map it at cfg->base and lay out the control
 * area.  Returns 0 or a negative errno after logging a message that names
 * the heap, the range and the config key to change (-EEXIST when the range
 * is already mapped in the daemon). */
int heap_open(struct heap *h, const struct config_heap *cfg);

/* Unmap and close.  Safe on a heap that failed to open or is closed. */
void heap_close(struct heap *h);

/* Bytes of the memfd backed by memory now (pages touched and not punched). */
uint64_t heap_committed_bytes(const struct heap *h);

#endif
