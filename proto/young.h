/* A mutator's young generation in shared memory: the nursery's layout, the
 * young object's header, and the tracer both sides use to find the shared
 * references a nursery holds (proto/young.c).
 *
 * Note [Nurseries]
 * ~~~~~~~~~~~~~~~~
 * (After GHC's Note [Aging under the non-moving collector].)  A mutator
 * that opts in at attach gets a nursery: a run of whole segments of the
 * heap that the daemon grants with the slot, records as YOUNG in its own
 * table (owned by the client, bound to the slot) and takes back with the
 * slot.  Only its mutator allocates there, and only its mutator's roots
 * and young objects reference it (Note [The young invariant] in
 * client/minor.c).  The run is laid out as
 *
 *   segment header (kind YOUNG, advisory) | pad to LAYOUT_YOUNG_START |
 *   half 0 | half 1
 *
 * two equal halves of young_half bytes each: the mutator bump-allocates in
 * the active half, and a minor collection copies what survives into the
 * other one, which then becomes active (Note [Minor collections] in
 * client/minor.c).  A young object has the shared heap's format (Note
 * [Objects] in proto/layout.h) and is at least LAYOUT_YOUNG_MIN bytes; the
 * header's top byte, which in the shared heap is the dirty tag, holds its
 * age, the minor collections it has survived.  When an object is copied,
 * its old place keeps its header with the tag LAYOUT_YOUNG_FORWARDED (the
 * sizes stay, so a scan can step over it) and its first word holds the new
 * address: a young copy in the other half, or its promoted copy in the
 * shared heap.
 *
 * Why in the heap, where every process maps it: the daemon can then read
 * a nursery itself, and a blocked or dead mutator never holds up marking
 * nor hides what its young objects reference (Note [The preparatory push]
 * in client/minor.c); the nursery survives a restart of heapd with the
 * rest of the heap; and its memory is counted and given back like any
 * segment's.  What another process writes into a nursery is its own
 * damage: nobody else's object can be reached through one (the daemon
 * never follows a reference into a nursery from anywhere but its own
 * mutator's roots), and the tracer below trusts nothing it reads.
 */
#ifndef HEAPD_PROTO_YOUNG_H
#define HEAPD_PROTO_YOUNG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"

#define LAYOUT_YOUNG_START 128u     /* offset of half 0 in the run */
#define LAYOUT_YOUNG_MIN 16u        /* bytes: header + a forwarding word */
#define LAYOUT_YOUNG_FORWARDED 0xffu /* the tag of a copied object */
#define LAYOUT_YOUNG_AGE_MAX 8u     /* young_age is 1..LAYOUT_YOUNG_AGE_MAX */

/* A young object's size in its nursery: the shared heap's size, at least
 * LAYOUT_YOUNG_MIN. */
static inline uint64_t layout_young_size(uint64_t nrefs, uint64_t nbytes)
{
    uint64_t s = layout_object_size(nrefs, nbytes);
    return s < LAYOUT_YOUNG_MIN ? LAYOUT_YOUNG_MIN : s;
}

/* The data area of a nursery run of SEGS segments starting at RUN: two
 * halves of *HALF bytes (a multiple of 8), the first at *LO. */
static inline void layout_young_halves(uintptr_t run, uint64_t segs,
                                       uint64_t segment_size, uintptr_t *lo,
                                       uint64_t *half)
{
    uint64_t data = segs * segment_size - LAYOUT_YOUNG_START;
    *lo = run + LAYOUT_YOUNG_START;
    *half = (data / 2) & ~(uint64_t)7;
}

/* Note [Tracing a nursery]
 * ~~~~~~~~~~~~~~~~~~~~~~~~
 * young_trace finds every shared reference that the young objects
 * reachable from some roots hold, without moving or writing anything: the
 * mutator runs it for its preparatory push, and the daemon when it marks
 * the stack of a mutator that has not (Note [The preparatory push] in
 * client/minor.c).  Its input may be anything (another process can write
 * into a nursery), so:
 *   - a young reference is followed only if it is 8-aligned, at least 8
 *     bytes into [lo, hi), and its object (header included) ends by hi;
 *   - a forwarded object is followed to its copy, at most a few hops
 *     (a young copy, then a promoted one: YOUNG_TRACE_HOPS);
 *   - each 8-byte word of the area is visited at most once (a bitmap),
 *     and the work list never holds more than the area has words, so a
 *     trace takes time and memory in proportion to the nursery, whatever
 *     its contents;
 *   - everything else that is not NULL goes to EMIT as it is: the caller
 *     validates it as it would any reference (the daemon: Note [Validating
 *     references]; the mutator logs it, and the daemon validates the log).
 * Each visited object's fields are read once, with relaxed loads.
 */
typedef void (*young_emit_fn)(void *ctx, uintptr_t ref);

struct young_trace {
    uintptr_t lo, hi;       /* the nursery's data area */
    uint64_t *visited;      /* a bit per word of [lo, hi) */
    uint32_t *work;         /* word offsets of objects to scan */
    size_t nwork, cap;
    uint64_t objects;       /* young objects scanned, this trace */
    uint64_t rejected;      /* young-looking references not followed */
};

#define YOUNG_TRACE_HOPS 4

/* Allocate the tracer's bitmap and work list for an area [LO, HI).
 * Returns 0 or -ENOMEM. */
int young_trace_init(struct young_trace *t, uintptr_t lo, uintptr_t hi);
void young_trace_destroy(struct young_trace *t);
/* Start a new trace: nothing visited. */
void young_trace_begin(struct young_trace *t);
/* True if R is in the tracer's area (it is then traced, not emitted). */
static inline bool young_trace_contains(const struct young_trace *t,
                                        uintptr_t r)
{
    return r - t->lo < t->hi - t->lo;
}
/* Trace from root R: a young R is traced, any other non-NULL R emitted. */
void young_trace_root(struct young_trace *t, uintptr_t r, young_emit_fn emit,
                      void *ctx);

#endif
