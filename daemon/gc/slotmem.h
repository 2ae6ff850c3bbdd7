/* Client control memory, daemon side (Note [Client control memory] in
 * proto/layout.h): a memfd of mutator regions per client, mapped region
 * by region over the windows of heap->windows as slots are attached. */
#ifndef HEAPD_DAEMON_SLOTMEM_H
#define HEAPD_DAEMON_SLOTMEM_H

#include <stdint.h>

struct heap;

/* What a client wrote into its slot that makes no sense: it is
 * disconnected (Note [Client control memory]). */
enum slot_fault {
    SLOT_FAULT_NONE = 0,
    SLOT_FAULT_ROOT_DEPTH,
    SLOT_FAULT_URS_HEAD,
    SLOT_FAULT_STATUS,
    SLOT_FAULT_ALLOC_BYTES,
    SLOT_FAULT_CAPTURED,
};

/* Reserve heap->windows, zero pages for every slot; -errno. */
int slotmem_reserve(struct heap *h);
void slotmem_release(struct heap *h);

/* A client's control memory: a sealed memfd of REGIONS mutator regions
 * (a descriptor), or a negative errno. */
int slotmem_create(const char *heap_name, uint64_t client, unsigned regions);

/* With heap->lock held: map region REGION of FD over slot SLOT's window;
 * -errno. */
int slotmem_map(struct heap *h, unsigned slot, int fd, unsigned region);
/* With heap->lock held: a slot's region REGION of FD is free; give its
 * pages back (FD may be -1).  The window keeps its mapping until the
 * next attach (Note [Slot windows]). */
void slotmem_free_region(int fd, unsigned region);

/* Any daemon thread: the bytes slot SLOT says its mutator allocated,
 * bounded by what its client was granted (a fault past it). */
uint64_t slotmem_alloc_bytes(struct heap *h, unsigned slot);
/* With heap->lock held: the bytes the young generations of the attached
 * young slots say they hold (their young_held_bytes), at most what the
 * heap's OWNED segments hold (Note [Young memory and the heap goal] in
 * collector.c). */
uint64_t slotmem_young_held(const struct heap *h);

/* Any daemon thread: slot SLOT's client wrote WHY.  The first fault of an
 * attachment is kept and the loop thread told (heap->fault_notify). */
void slotmem_fault(struct heap *h, unsigned slot, enum slot_fault why);
const char *slotmem_fault_name(enum slot_fault f);

#endif
