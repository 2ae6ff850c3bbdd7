/* libheapd allocation (client/alloc.c, Note [Allocation fast path]). */
#ifndef HEAPD_CLIENT_ALLOC_H
#define HEAPD_CLIENT_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "heapd.h"
#include "layout.h"

/* A mutator client's geometry, its reserve and its list of mutators,
 * once the heap is mapped. */
void alloc_client_init(heapd_client *c);
/* Give back the mutator's current segments (detach). */
void alloc_release_all(heapd_mutator *m);
/* The same, but for those a young generation tracks, which stay its
 * own: the segments go back, queued (reserve_flush_returns sends them),
 * and its next allocation of each class takes another (Note [Reserve
 * sizing] in client/reserve.c: a waited collection of a mutator that is
 * not young). */
void alloc_release_current(heapd_mutator *m);
/* OUT: small segment IDX of class CLS as an allocation segment, its
 * cursor at the first block. */
struct alloc_seg;
void alloc_seg_view(const heapd_client *c, uint32_t idx, unsigned cls,
                    struct alloc_seg *out);
/* Make segment IDX (FORMATTED for CLS, or blank) M's current segment of
 * CLS, the old one going back. */
void alloc_install(heapd_mutator *m, unsigned cls, uint32_t idx,
                   bool formatted);
/* An object in the shared heap, after heapd_alloc's checks. */
void *alloc_shared(heapd_mutator *m, size_t nrefs, size_t nbytes);
/* The CPU has AVX2: heapd.h's inline path may zero with 32-byte stores
 * (Note [Inline allocation fast path] in heapd.h). */
bool alloc_cpu_has_ymm(void);

#endif
