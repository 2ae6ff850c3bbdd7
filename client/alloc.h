/* libheapd allocation (client/alloc.c, Note [Allocation fast path]). */
#ifndef HEAPD_CLIENT_ALLOC_H
#define HEAPD_CLIENT_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "heapd.h"
#include "layout.h"

/* Objects up to this size are zeroed inline, larger ones by memset. */
#define ALLOC_ZERO_INLINE_MAX 512u

/* Zero the first SIZE bytes of block B (8-aligned, SIZE a multiple of 8),
 * the header's word among them.  A few words are stored one by one; up to
 * ALLOC_ZERO_INLINE_MAX bytes, 16 bytes at a time at 16-byte aligned
 * addresses, which never span two cache lines, and with no call (Note
 * [Allocation fast path]); larger ones by memset. */
static inline void alloc_zero_object(uint8_t *b, uint64_t size)
{
    typedef uint64_t zero16 __attribute__((vector_size(16)));
    uint64_t *w = (uint64_t *)b;
    switch (size / LAYOUT_WORD) {
    case 8: w[7] = 0; /* fall through */
    case 7: w[6] = 0; /* fall through */
    case 6: w[5] = 0; /* fall through */
    case 5: w[4] = 0; /* fall through */
    case 4: w[3] = 0; /* fall through */
    case 3: w[2] = 0; /* fall through */
    case 2: w[1] = 0; /* fall through */
    case 1: return;
    default: break;
    }
    if (size > ALLOC_ZERO_INLINE_MAX) {
        memset(b + LAYOUT_WORD, 0, size - LAYOUT_WORD);
        return;
    }
    uint8_t *end = b + size;
    if ((uintptr_t)b & 8) {
        *(uint64_t *)b = 0;
        b += 8;
    }
    for (; b + 16 <= end; b += 16) {
        __asm__("" : "+r"(b)); /* a loop, not a call to memset */
        *(zero16 *)b = (zero16){0, 0};
    }
    if (b < end)
        *(uint64_t *)b = 0;
}

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

#endif
