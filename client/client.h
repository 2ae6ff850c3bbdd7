/* libheapd: a client, one connection to heapd and, for a mutator client,
 * its mapping of the heap (client/client.c). */
#ifndef HEAPD_CLIENT_CLIENT_H
#define HEAPD_CLIENT_CLIENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "heapd.h"
#include "layout.h"
#include "lock.h"
#include "remark.h"
#include "reserve.h"

struct heapd_client {
    struct agent agent;
    uint64_t client_id;
    char heap_name[64];
    void *base;                      /* mapping, NULL for control clients */
    size_t size;
    int heap_fd;
    /* mutator clients: the heap's geometry and shared state */
    struct layout_control *ctl;
    uint8_t *mem;                    /* its control memory (Note [Client
                                        control memory]), mem_regions
                                        regions of LAYOUT_MUTATOR_BYTES */
    unsigned mem_regions;
    uint64_t segment_size;
    unsigned seg_shift;
    uint32_t small_max;
    uint32_t run_max;                /* Note [Runs]: objects up to this
                                        size (above small_max) go to the
                                        run class; 0: none */
    uint32_t small_nblocks[LAYOUT_NCLASSES];
    uint32_t small_first[LAYOUT_NCLASSES];
    uint64_t small_magic[LAYOUT_NCLASSES]; /* layout_block_magic */
    uint32_t first_segment;          /* past the control area */
    struct reserve reserve;
    struct prefault prefault;
    struct client_remark remark;
    struct hd_mutex mutators_mu;
    struct heapd_mutator *mutators;  /* attached, for heapd_disconnect */
    /* heapd_add_roots' ranges (Note [C locals are roots] in
     * client/stack_roots.c), guarded by roots_mu */
    struct hd_mutex roots_mu;
    struct root_range {
        uintptr_t lo, hi;
    } *ranges;
    size_t nranges, capranges;
    _Atomic size_t nranges_any;      /* nranges, read without the lock */
    bool checked;                    /* Note [Checked mode] */
    /* Note [Reconnecting] in client/agent.c: what a resuming Hello needs */
    uint8_t token[16];
    size_t token_len;
    char socket_path[108];
    char client_name[64];
    uint64_t heap_base, heap_max_size;
    uint64_t memory_limit;           /* the heap's, 0 for none (Welcome) */
    char tsan_reuse;                 /* Note [Reuse and ThreadSanitizer] */
};

/* The address of segment I of the heap. */
static inline void *client_seg_addr(const heapd_client *c, uint32_t i)
{
    return (char *)c->base + ((uint64_t)i << c->seg_shift);
}

/* Ask heapd for its statistics: 0 with *REP its StatsReply (the caller
 * frees *REP, which may be set on failure too), or an error code. */
int client_stats_call(heapd_client *c, Heapd__Envelope **rep);

#endif
