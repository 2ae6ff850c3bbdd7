/* The runtime's interface to libheapd's own libraries (the shared
 * collections in client/collections/): what they may use of the runtime
 * beyond the public heapd.h.  It names no type of the runtime's: a
 * library built on it follows the runtime's rules without seeing its
 * structures (tests/include_rules.py keeps client/collections/ to
 * heapd.h, this header and proto/'s layout, futex, clock, counter and
 * error headers). */
#ifndef HEAPD_CLIENT_RUNTIME_H
#define HEAPD_CLIENT_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "heapd.h"

struct layout_control;

/* Record the calling thread's error message (heapd_last_error); returns
 * CODE. */
int client_set_error(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A public struct a caller passed with its size (Note [Structs that grow]
 * in client/abi.c).  abi_in reads the caller's options SRC of SIZE bytes
 * into DST, OWN bytes, the library's own struct: zero past SIZE; refuses
 * SIZE under MIN (the first stable release's) with -EINVAL and a tail
 * this library does not know that is not zero with -E2BIG, naming CALL.
 * abi_out writes SRC, the library's OWN bytes, into the caller's DST of
 * SIZE bytes: min of the two, zero past OWN. */
int abi_in(void *dst, size_t own, const void *src, size_t size, size_t min,
           const char *call);
void abi_out(void *dst, size_t size, const void *src, size_t own);
/* Copy SRC, libheapd's own heapd_stats_t, into the caller's DST of SIZE
 * bytes whose heaps are HEAP_SIZE bytes each; -EINVAL if no heapd.h has
 * those sizes. */
int abi_stats_place(heapd_stats_t *dst, size_t size, size_t heap_size,
                    const heapd_stats_t *src);
/* The sizes of 0.1.0's structs, what its programs pass. */
enum {
    ABI_0_1_CONNECT_OPTS = 32,
    ABI_0_1_STATS = 10896,
    ABI_0_1_HEAP_STATS = 640,
    ABI_0_1_MUTATOR_OPTS = 24,
    ABI_0_1_YOUNG_STATS = 80,
    ABI_0_1_GLOBAL_INFO = 152,
    ABI_0_1_CLIENT_INFO = 208,
    ABI_0_1_MUTATOR_INFO = 80,
    ABI_0_1_HEAP_SEGMENTS = 7376,
    ABI_0_1_MAP_OPTS = 32,
    ABI_0_1_MAP_STATS = 40,
    ABI_0_1_MAP_FOOTPRINT = 64,
};

/* Push N roots at once, no safepoint taken (Note [Pushing roots without a
 * safepoint] in client/mutator.c): the first slot, or (size_t)-1. */
size_t mutator_roots_push(heapd_mutator *m, void *const *refs, size_t n);

/* 0 while M may wait on the daemon; once M's connection is gone for good
 * or M belongs to this process's parent, the error a call of M fails
 * with (HEAPD_ECLOSED, HEAPD_ESHUTDOWN, HEAPD_EFORKED...), its message and
 * errno set (Note [A dead daemon] in client/mutator.c). */
int mutator_closed(const heapd_mutator *m);

/* The bytes of heap memory object OBJ takes: its size class's block, its
 * run's granules (Note [Runs] in proto/layout.h) or its large object's
 * segments; at least its size, header included. */
uint64_t client_block_bytes(const heapd_mutator *m, const void *obj);

/* M's heap's control area (proto/layout.h), and the id heapd gave M's
 * client (Note [Live clients] there). */
const struct layout_control *mutator_control(const heapd_mutator *m);
uint64_t mutator_client_id(const heapd_mutator *m);

#endif
