/* Stopping and releasing a heap's mutators.  See Note [Stop the world]. */
#ifndef HEAPD_DAEMON_SAFEPOINT_H
#define HEAPD_DAEMON_SAFEPOINT_H

#include <stdint.h>

struct heap;

/* What a stop is for: a snapshot waits for mutators waiting inside a
 * barrier, a final sync does not (Note [Waiting in a barrier]). */
enum safepoint_kind {
    SAFEPOINT_SNAPSHOT,
    SAFEPOINT_FINAL_SYNC,
};

/* Raise the stop request and wait until every slot is stopped, blocked or
 * free (or waiting in a barrier, for a final sync).  Called by the
 * collector thread without heap->lock held (the loop thread frees the
 * slots of dead clients under it).  Returns the stop generation;
 * *ttsp_max_ns gets the longest time one mutator took, *stopped_from_ns
 * when the round that stopped them all began (Note [Parking a stop]). */
uint32_t safepoint_stop(struct heap *h, enum safepoint_kind kind,
                        uint64_t *ttsp_max_ns, uint64_t *stopped_from_ns);

/* Let every mutator run again. */
void safepoint_release(struct heap *h);

/* Record who attached slot SLOT, which grant_slot gave out: the names the
 * stop's warnings give.  Called with heap->lock held. */
void safepoint_own_slot(struct heap *h, unsigned slot, int pid, unsigned uid,
                        const char *name);

/* Mark a slot free (detach or a dead client) and wake the collector if it
 * waits on it.  Called with heap->lock held. */
void safepoint_free_slot(struct heap *h, unsigned slot);

#endif
