/* libheapd's young generation: a mutator's private nursery, its minor
 * collections and promotions (client/minor.c; the layout is Note
 * [Nurseries] in proto/young.h). */
#ifndef HEAPD_CLIENT_MINOR_H
#define HEAPD_CLIENT_MINOR_H

#include <stdbool.h>
#include <stdint.h>

#include "alloc.h"
#include "heapd.h"
#include "layout.h"
#include "young.h"

#define YOUNG_HIST 160 /* pause histogram: 4 buckets per power of two */

/* A young mutator's nursery and its promotion capacity (Note [Promotion
 * never waits] in client/minor.c). */
struct young_gen {
    bool on;
    bool filling;               /* young_fill is running (no recursion) */
    uint8_t *top, *end;         /* bump allocation in the active half */
    uint8_t *half[2];
    unsigned active;            /* half[active] is allocated in */
    uint64_t half_bytes;
    uintptr_t lo, hi;           /* both halves */
    uint32_t age;               /* promote at this many survivals */
    uint32_t max_object;        /* larger objects go to the shared heap */
    uint32_t first_seg, nsegs;  /* the nursery run */
    /* per size class: young objects that may still need a block, and the
     * blocks there are for them (avail in the current segment, plus the
     * stashed segments') */
    uint32_t count[LAYOUT_NCLASSES];
    uint64_t lim[LAYOUT_NCLASSES];
    uint32_t avail[LAYOUT_NCLASSES];
    uint32_t *stash[LAYOUT_NCLASSES]; /* formatted, empty segments */
    uint32_t nstash[LAYOUT_NCLASSES], capstash[LAYOUT_NCLASSES];
    struct young_trace trace;   /* Note [The preparatory push] */
    uintptr_t *work;            /* promoted objects to scan */
    size_t nwork, capwork;
    bool promoted_any;          /* a minor collection promoted something */
    /* statistics, mirrored into the slot's young_* words */
    uint64_t minor, promoted_age, promoted_pub, pause_max, pause_total;
    uint64_t hist[YOUNG_HIST];
};

/* True if R is in the nursery Y (any address of its two halves); false
 * for every R when there is none. */
static inline bool young_contains(const struct young_gen *y, const void *r)
{
    return (uintptr_t)r - y->lo < y->hi - y->lo;
}

/* Set up M's nursery from the attach reply; returns 0 or -ENOMEM. */
int young_init(heapd_mutator *m, uint32_t first, uint32_t segs, uint32_t age);
/* Give back what the nursery holds besides the run (detach). */
void young_release(heapd_mutator *m);
void young_free(heapd_mutator *m);

/* The size class an object of NREFS and NBYTES takes in the shared
 * heap. */
static inline unsigned young_class_of(size_t nrefs, size_t nbytes)
{
    uint64_t s = layout_object_size(nrefs, nbytes);
    return layout_size_class((uint32_t)(s < LAYOUT_MIN_BLOCK ? LAYOUT_MIN_BLOCK
                                                             : s));
}

/* heapd_alloc of a young mutator (Y is its young generation), after the
 * safepoint and the argument checks: the bump (Note [Minor collections]
 * and Note [Promotion never waits] in client/minor.c), inline, or
 * young_alloc_slow. */
void *young_alloc_slow(heapd_mutator *m, size_t nrefs, size_t nbytes);
static inline void *young_alloc(struct young_gen *y, heapd_mutator *m,
                                size_t nrefs, size_t nbytes)
{
    uint64_t size = layout_young_size(nrefs, nbytes);
    uint8_t *p = y->top;
    if (__builtin_expect(size > y->max_object ||
                             (uint64_t)(y->end - p) < size, 0))
        return young_alloc_slow(m, nrefs, nbytes);
    unsigned cls = young_class_of(nrefs, nbytes);
    if (__builtin_expect(y->count[cls] >= y->lim[cls], 0))
        return young_alloc_slow(m, nrefs, nbytes);
    y->count[cls]++;
    y->top = p + size;
    uint64_t *w = (uint64_t *)p;
    alloc_zero_object(w, size);
    w[0] = layout_header(nrefs, nbytes); /* age 0 */
    return p + LAYOUT_WORD;
}
/* Before a shared allocation of class CLS by a young mutator (a safepoint:
 * it may wait): room for the block it may take from the bound.  Returns 0
 * or the error of a segment request. */
int young_before_shared(heapd_mutator *m, unsigned cls);
/* A shared allocation of class CLS by a young mutator took a block of its
 * current segment; SEG_CHANGED: the current segment of CLS was changed. */
void young_shared_took(heapd_mutator *m, unsigned cls, bool seg_changed);

/* R if it is not young; the address of its shared copy if it is one of
 * M's young objects, promoted now if it was not yet (Note [The young
 * invariant]).  Never waits. */
void *young_publish(heapd_mutator *m, void *r);
/* OBJ, or the copy a forwarded young object of Y moved to: inline when
 * OBJ is not a forwarded young object, which is nearly always. */
void *young_resolve_slow(const struct young_gen *y, void *obj);
static inline void *young_resolve(const struct young_gen *y, void *obj)
{
    if (__builtin_expect(!young_contains(y, obj) ||
                             layout_header_tag(((const uint64_t *)obj)[-1]) !=
                                 LAYOUT_YOUNG_FORWARDED,
                         1))
        return obj;
    return young_resolve_slow(y, obj);
}

/* The stack barrier's young half: the preparatory push of every shared
 * reference M's young objects reachable from its roots hold (Note [The
 * preparatory push]); returns false if M has no nursery. */
bool young_push_roots(heapd_mutator *m);
/* After a blocking region or a stop, before the program runs on: the
 * stack handshake if it is due, and the promotion capacity the agent may
 * have taken (Note [Promotion never waits]). */
void young_resume(heapd_mutator *m);

#endif
