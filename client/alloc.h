/* libheapd allocation (client/alloc.c, Note [Allocation fast path]). */
#ifndef HEAPD_CLIENT_ALLOC_H
#define HEAPD_CLIENT_ALLOC_H

#include "heapd.h"

/* A mutator client's geometry, its reserve and its list of mutators,
 * once the heap is mapped. */
void alloc_client_init(heapd_client *c);
/* Give back the mutator's current segments (detach). */
void alloc_release_all(heapd_mutator *m);

#endif
