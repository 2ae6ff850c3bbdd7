/* The heap verifier.  See Note [Heap verifier] in verify.c. */
#ifndef HEAPD_DAEMON_VERIFY_H
#define HEAPD_DAEMON_VERIFY_H

#include <stdint.h>

struct heap;

/* With every mutator stopped and the sweep done: check the heap, log each
 * failure with its path from a root, and return how many there were. */
uint64_t verify_heap(struct heap *h, uint8_t epoch);

#endif
