/* What the young generation's end-to-end tests share (tests/test_young.c,
 * tests/test_young_many.c, tests/test_young_misuse.c,
 * tests/test_young_crash.c): their daemon, a
 * node with a checked payload, connecting and attaching, and reading an
 * object's mark.  See tests/young_util.c. */
#ifndef HEAPD_TESTS_YOUNG_UTIL_H
#define HEAPD_TESTS_YOUNG_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "harness.h"
#include "heapd.h"

#define MAGIC 0x796f756e67746573ull /* "youngtes" */

/* Every node of these tests: NREFS reference fields, then this. */
struct payload {
    uint64_t id, check;
};

extern struct daemon_proc D;
/* The mapped heap of the test's clients (all map it at one address), so
 * that a damaged reference fails a check instead of faulting. */
extern uintptr_t heap_lo, heap_hi;

uint64_t check_of(uint64_t id);
void fill_payload(void *n, uint64_t id);
/* A young node (for a young mutator) with ID; NULL if heapd_alloc
 * failed. */
void **new_node(heapd_mutator *m, size_t nrefs, uint64_t id);
void **new_shared_node(heapd_mutator *m, size_t nrefs, uint64_t id);
bool in_heap(const void *p);
bool node_ok(void *n, size_t nrefs, uint64_t id);
/* Field K of OBJ; NULL if OBJ is not in the heap (a damaged reference:
 * the check that follows fails). */
void *field(void *obj, size_t k);
/* Connect to the test's heapd (fails the test on error). */
heapd_client *connect_plain(unsigned flags);
/* The end of a test: M detaches, C disconnects, the test's heapd is
 * healthy (the verifier found nothing) and stops cleanly. */
void young_finish(heapd_client *c, heapd_mutator *m);
/* Attach the calling thread to C as a young mutator. */
heapd_mutator *attach_young(heapd_client *c, size_t size, unsigned age);
heapd_young_stats young_stats(const heapd_mutator *m);
/* Allocate garbage until M's next minor collection has run. */
void minor_now(heapd_mutator *m);
/* The bytes a block of an object of NREFS references and NBYTES bytes
 * takes (its size class). */
uint64_t block_bytes(size_t nrefs, size_t nbytes);
/* The mark byte of the block of object OBJ of C's heap, in a small
 * segment (Note [Young objects] in proto/young.h: LAYOUT_MARK_YOUNG, an
 * epoch, or 0 once freed); -1 if OBJ is no small block's object. */
int mark_of(const heapd_client *c, const void *obj);
/* OBJ was promoted where it is: not young for M, its mark an epoch. */
bool promoted(const heapd_client *c, const heapd_mutator *m, const void *obj);
/* OBJ is one of M's young objects, by heapd_is_young and by its mark. */
bool still_young(const heapd_client *c, const heapd_mutator *m,
                 const void *obj);

/* Note [The preparatory push] in client/minor.c: whoever takes a young
 * mutator's stack handshake first, the mutator on its way out of the
 * snapshot's stop or heapd marking its stack, does the push; heapd
 * usually wins.  A blocked mutator of C with a deep stack (HELPER_ROOTS
 * roots), attached before the young one (a lower slot, which heapd marks
 * before), keeps heapd busy while the young mutator takes its own. */
#define HELPER_ROOTS 50000
heapd_mutator *deep_blocked_helper(heapd_client *c);
/* The helper runs again and detaches. */
void helper_leave(heapd_mutator *h);

#endif
