/* libheapd allocation (client/alloc.c, Note [Allocation fast path]). */
#ifndef HEAPD_CLIENT_ALLOC_H
#define HEAPD_CLIENT_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "heapd.h"
#include "layout.h"

/* Zero an object's words after the header.  Most objects are a few words,
 * where stores beat a call to memset. */
static inline void alloc_zero_object(uint64_t *w, uint64_t size)
{
    switch (size / LAYOUT_WORD) {
    case 8: w[7] = 0; /* fall through */
    case 7: w[6] = 0; /* fall through */
    case 6: w[5] = 0; /* fall through */
    case 5: w[4] = 0; /* fall through */
    case 4: w[3] = 0; /* fall through */
    case 3: w[2] = 0; /* fall through */
    case 2: w[1] = 0; /* fall through */
    case 1: break;
    default: __builtin_memset(w + 1, 0, size - LAYOUT_WORD); break;
    }
}

/* A mutator client's geometry, its reserve and its list of mutators,
 * once the heap is mapped. */
void alloc_client_init(heapd_client *c);
/* Give back the mutator's current segments (detach). */
void alloc_release_all(heapd_mutator *m);
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

#endif
