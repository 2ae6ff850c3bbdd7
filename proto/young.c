/* The nursery tracer both sides share: see Note [Tracing a nursery] in
 * young.h. */
#include "young.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int young_trace_init(struct young_trace *t, uintptr_t lo, uintptr_t hi)
{
    size_t words = (size_t)(hi - lo) / LAYOUT_WORD;
    memset(t, 0, sizeof *t);
    t->lo = lo;
    t->hi = hi;
    t->visited = calloc((words + 63) / 64, sizeof *t->visited);
    /* an object is at least two words, and each is pushed once */
    t->cap = words / 2 + 1;
    t->work = malloc(t->cap * sizeof *t->work);
    if (!t->visited || !t->work) {
        young_trace_destroy(t);
        return -ENOMEM;
    }
    return 0;
}

void young_trace_destroy(struct young_trace *t)
{
    free(t->visited);
    free(t->work);
    t->visited = NULL;
    t->work = NULL;
}

void young_trace_begin(struct young_trace *t)
{
    size_t words = (size_t)(t->hi - t->lo) / LAYOUT_WORD;
    memset(t->visited, 0, (words + 63) / 64 * sizeof *t->visited);
    t->nwork = 0;
    t->objects = 0;
    t->rejected = 0;
}

/* The word offset of R's header if R may be a young object's first field
 * (its header inside the area), else UINT32_MAX. */
static uint32_t header_word(const struct young_trace *t, uintptr_t r)
{
    if ((r & 7) || r - t->lo < LAYOUT_WORD || r - t->lo >= t->hi - t->lo)
        return UINT32_MAX;
    return (uint32_t)((r - LAYOUT_WORD - t->lo) / LAYOUT_WORD);
}

/* Young R: resolve forwarding (Note [Nurseries]) and queue the object it
 * ends at, or emit the shared copy it ends at. */
static void take(struct young_trace *t, uintptr_t r, young_emit_fn emit,
                 void *ctx)
{
    for (int hop = 0; hop <= YOUNG_TRACE_HOPS; hop++) {
        if (!young_trace_contains(t, r)) {
            if (r)
                emit(ctx, r);
            return;
        }
        uint32_t w = header_word(t, r);
        if (w == UINT32_MAX) {
            t->rejected++;
            return;
        }
        uint64_t h = __atomic_load_n((uint64_t *)(r - LAYOUT_WORD),
                                     __ATOMIC_RELAXED);
        uint64_t size = layout_young_size(layout_header_nrefs(h),
                                          layout_header_nbytes(h));
        if (size > t->hi - (r - LAYOUT_WORD)) {
            t->rejected++; /* it would end past the area */
            return;
        }
        if (layout_header_tag(h) == LAYOUT_YOUNG_FORWARDED) {
            r = (uintptr_t)__atomic_load_n((void **)r, __ATOMIC_RELAXED);
            continue;
        }
        uint64_t bit = (uint64_t)1 << (w % 64);
        if (t->visited[w / 64] & bit)
            return;
        t->visited[w / 64] |= bit;
        if (t->nwork < t->cap)
            t->work[t->nwork++] = w;
        return;
    }
    t->rejected++; /* a forwarding chain no copy makes */
}

void young_trace_root(struct young_trace *t, uintptr_t r, young_emit_fn emit,
                      void *ctx)
{
    take(t, r, emit, ctx);
    while (t->nwork > 0) {
        uint32_t w = t->work[--t->nwork];
        uint64_t *hp = (uint64_t *)(t->lo + (uintptr_t)w * LAYOUT_WORD);
        uint64_t h = __atomic_load_n(hp, __ATOMIC_RELAXED);
        /* read again: the same checks as take's, on what is there now */
        size_t n = layout_header_nrefs(h);
        uint64_t size = layout_young_size(n, layout_header_nbytes(h));
        if (layout_header_tag(h) == LAYOUT_YOUNG_FORWARDED ||
            size > t->hi - (uintptr_t)hp) {
            t->rejected++;
            continue;
        }
        t->objects++;
        void **f = (void **)(hp + 1);
        for (size_t k = 0; k < n; k++)
            take(t, (uintptr_t)__atomic_load_n(&f[k], __ATOMIC_RELAXED),
                 emit, ctx);
    }
}
