/* libheapd allocation (client/alloc.c, Note [Allocation fast path]). */
#ifndef HEAPD_CLIENT_ALLOC_H
#define HEAPD_CLIENT_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "heapd.h"

/* A mutator client's geometry, its reserve and its list of mutators,
 * once the heap is mapped. */
void alloc_client_init(heapd_client *c);
/* Give back the mutator's current segments (detach). */
void alloc_release_all(heapd_mutator *m);
/* Make segment IDX (FORMATTED for CLS, or blank) M's current segment of
 * CLS, the old one going back. */
void alloc_install(heapd_mutator *m, unsigned cls, uint32_t idx,
                   bool formatted);
/* A block of M's current segment of CLS, initialised for NREFS and
 * NBYTES, or NULL when that segment has no free block.  Never waits. */
void *alloc_take_current(heapd_mutator *m, unsigned cls, size_t nrefs,
                         size_t nbytes);
/* An object in the shared heap, after heapd_alloc's checks. */
void *alloc_shared(heapd_mutator *m, size_t nrefs, size_t nbytes);

#endif
