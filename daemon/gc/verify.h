/* The heap verifier.  See Note [Heap verifier] in verify.c. */
#ifndef HEAPD_DAEMON_VERIFY_H
#define HEAPD_DAEMON_VERIFY_H

#include <stdint.h>

struct heap;

/* With heap->lock held, every mutator stopped and marking complete: every
 * shared object reachable from a root is allocated and marked, and every
 * young one reachable where it may be (Note [Heap verifier], check 4).
 * Returns the failures (logged with their path from a root). */
uint64_t verify_reachable(struct heap *h, uint8_t epoch);

/* With heap->lock held, every mutator stopped and the sweep of EPOCH
 * complete: every non-zero mark is EPOCH, a continuation, or young where a
 * young block may be, and every free block is poison or zero. */
uint64_t verify_segments(struct heap *h, uint8_t epoch);

#endif
