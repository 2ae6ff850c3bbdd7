/* The scan of a segment's young blocks both sides share: see Note
 * [Scanning young blocks] in young.h. */
#include "young.h"

uint32_t young_scan_segment(const uint8_t *marks, const uint8_t *blocks,
                            uint32_t nblocks, uint32_t block_size,
                            young_emit_fn emit, void *ctx)
{
    uint32_t seen = 0;
    uint64_t fit = block_size / LAYOUT_WORD - 1; /* fields after the header */
    for (uint32_t b = 0; b < nblocks; b++) {
        if (__atomic_load_n(&marks[b], __ATOMIC_RELAXED) != LAYOUT_MARK_YOUNG)
            continue;
        seen++;
        const uint64_t *w = (const uint64_t *)(blocks + (size_t)b * block_size);
        uint64_t n = layout_header_nrefs(__atomic_load_n(w, __ATOMIC_RELAXED));
        if (n > fit)
            n = fit;
        for (uint64_t k = 1; k <= n; k++) {
            uintptr_t r = (uintptr_t)__atomic_load_n(&w[k], __ATOMIC_RELAXED);
            if (r)
                emit(ctx, r);
        }
    }
    return seen;
}
