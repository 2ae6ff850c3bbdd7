/* An in-process heap for the collector's own tests (tests/heap_inproc.c):
 * the daemon's structures over anonymous memory, with no heapd, no file
 * and no client. */
#ifndef HEAPD_TESTS_HEAP_INPROC_H
#define HEAPD_TESTS_HEAP_INPROC_H

#include <stdint.h>

#include "config.h"
#include "heap.h"

/* Open H over anonymous memory, as heap_open lays a heap out: the control
 * area at the base, whose epoch is EPOCH, then SEGS segments of 2^SHIFT
 * bytes; its segment table made and formatted and its live table made
 * (Note [The live table]).  CFG gets NAME and the geometry; anything
 * else in it is the caller's, set before the call.
 * Small segments only: nothing is ever punched (H.fd is -1). */
void heap_inproc_open(struct heap *h, struct config_heap *cfg,
                      const char *name, unsigned shift, unsigned segs,
                      uint32_t epoch);
/* Undo heap_inproc_open. */
void heap_inproc_close(struct heap *h, const struct config_heap *cfg);

#endif
