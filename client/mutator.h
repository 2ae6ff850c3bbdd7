/* libheapd's mutators: attached threads, their safepoints, blocking
 * regions and root stacks (client/mutator.c).  The entry of a safepoint
 * call, mutator_enter, also runs the stack barrier, so it is in
 * client/barrier.h. */
#ifndef HEAPD_CLIENT_MUTATOR_H
#define HEAPD_CLIENT_MUTATOR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "frame.h"
#include "heapd.h"
#include "layout.h"
#include "lock.h"
#include "minor.h"
#include "young.h"
#include "runtime.h"    /* mutator_roots_push, mutator_closed */

/* a mutator's short waits spin this long before they sleep (Note
 * [Spinning through a pause] in client/mutator.c) */
#define MUTATOR_SPIN_NS 300000u

/* A mutator's current segment of one size class. */
struct alloc_seg {
    uint8_t *marks;
    uint8_t *blocks;
    uint32_t cursor;      /* next block to look at */
    uint32_t limit;       /* marks [cursor, limit) are 0 (Note [Free runs]
                             in client/alloc.c) */
    uint32_t nblocks;
    uint32_t block_size;
    uint32_t index;       /* segment index, 0 = none */
    uint8_t cls;          /* its size class */
};

/* Note [Capturing without sorting] in client/stack_roots.c */
#define STACK_ROOTS_SEEN_LOG 9
#define STACK_ROOTS_SEEN (1u << STACK_ROOTS_SEEN_LOG)

/* heapd_mutator.young_flags (Note [Minor collections in slices] in
 * client/minor.c) */
#define MUTATOR_YOUNG 1u            /* young.on: it has a nursery */
#define MUTATOR_YOUNG_MARKING 2u    /* young.phase == YOUNG_MARK: the young
                                       barrier is on */
#define MUTATOR_YOUNG_PROMOTING 4u  /* young.nforce > 0: promotions to end
                                       before a store into anything shared */
#define MUTATOR_YOUNG_COLLECTING 8u /* young.phase != YOUNG_IDLE: a young
                                       allocation is born live */

struct heapd_mutator {
    /* first: heapd.h's inline fast paths read it (Note [Inline write
     * fast path] in heapd.h); mutator_set_young_flags keeps it */
    struct heapd_fast_ fast;
    heapd_client *c;
    uint8_t young_flags;             /* MUTATOR_YOUNG*, in the line every
                                        call reads: a mutator without a
                                        nursery pays no other load for
                                        it, nor one with it for these */
    struct layout_control *ctl;
    struct layout_mutator *slot;
    unsigned slot_index;
    struct heapd_mutator *next;      /* c->mutators */
    uint64_t alloc_bytes;            /* mirrored into slot->alloc_bytes */
    /* the root stack: LAYOUT_MAX_ROOTS references after the slot's words
     * (Note [Client control memory] in proto/layout.h) */
    void *_Atomic *roots;
    size_t depth;
    /* Note [Remark requests]: set when the daemon asks this client to
     * rescan; the mutator looks at its next safepoint */
    _Atomic uint32_t remark_pending;
    /* held by the agent while it takes segments from this mutator, which
     * is blocked; heapd_blocking_leave takes it to run again */
    struct hd_mutex hold;
    uint64_t urs_head;               /* entries written to the URS ring */
    uint64_t urs_notified;           /* head sent in the last UrsBatch */
    struct alloc_seg cur[LAYOUT_NCLASSES];
    /* the attached thread's stack (stack_base_of_self), and Note [C
     * locals are roots] in client/stack_roots.c */
    uintptr_t stack_base, stack_limit;
    bool conservative;               /* not HEAPD_MUTATOR_PRECISE */
    uint64_t captured_last;          /* objects in the last capture */
    /* Note [Capturing without sorting] in client/stack_roots.c */
    uintptr_t capture_seen[STACK_ROOTS_SEEN];
    struct young_gen young;          /* Note [Young objects] in proto/young.h */
};

/* Note [Inline allocation fast path] in heapd.h: fast.runs is cur, and
 * fast.young_bytes counts young allocations (not mirrored, Note [Minor
 * collections] in client/minor.c) */
_Static_assert(offsetof(struct alloc_seg, marks) ==
                       offsetof(struct heapd_run_, marks) &&
                   offsetof(struct alloc_seg, blocks) ==
                       offsetof(struct heapd_run_, blocks) &&
                   offsetof(struct alloc_seg, cursor) ==
                       offsetof(struct heapd_run_, cursor) &&
                   offsetof(struct alloc_seg, limit) ==
                       offsetof(struct heapd_run_, limit) &&
                   offsetof(struct alloc_seg, block_size) ==
                       offsetof(struct heapd_run_, block_size) &&
                   sizeof(struct alloc_seg) == sizeof(struct heapd_run_),
               "heapd.h's inline allocation reads struct alloc_seg");
_Static_assert(offsetof(struct heapd_mutator, fast) == 0,
               "heapd.h's inline fast paths read a mutator's first bytes");
_Static_assert(HEAPD_FAST_PHASE_MARK_ == LAYOUT_PHASE_MARK &&
                   HEAPD_FAST_YOUNG_TAG_ == LAYOUT_YOUNG_TAG &&
                   LAYOUT_TAG_SHIFT == 56,
               "heapd.h's inline write reads the layout's phase and tags");

/* What heapd_write's fast path (heapd_store_is_plain_) may do for M,
 * from its young flags and its client's checked mode: the cases of Note
 * [Write fast path] in client/alloc.c, as the mode of Note [Inline write
 * fast path] in heapd.h. */
static inline unsigned char mutator_write_mode(const heapd_mutator *m)
{
    if (m->c->checked || (m->young_flags & MUTATOR_YOUNG_MARKING))
        return HEAPD_FAST_CALL_;
    if (m->young_flags & MUTATOR_YOUNG_PROMOTING)
        return HEAPD_FAST_YOUNG_; /* ended before a store into the shared */
    return m->young_flags ? HEAPD_FAST_YOUNG_ANY_
                          : HEAPD_FAST_UNLESS_MARKING_;
}
/* Set M's young flags, and the write mode that follows from them: every
 * change of the flags goes through here. */
/* Note [Inline allocation fast path] in heapd.h */
static inline unsigned char mutator_alloc_mode(const heapd_mutator *m)
{
    return !m->c->checked &&
                   (m->young_flags &
                    (MUTATOR_YOUNG | MUTATOR_YOUNG_COLLECTING)) == MUTATOR_YOUNG
               ? HEAPD_FAST_ALLOC_YOUNG_
               : HEAPD_FAST_CALL_;
}
static inline void mutator_set_young_flags(heapd_mutator *m, uint8_t f)
{
    m->young_flags = f;
    m->fast.write_mode = mutator_write_mode(m);
    m->fast.alloc_mode = mutator_alloc_mode(m);
}

/* The daemon evicted M's client (Note [Evicted clients, client side] in
 * client/mutator.c): say so on stderr, naming what the program must
 * change, and abort the process. */
__attribute__((noreturn, cold)) void
mutator_evicted_abort(const heapd_mutator *m);
/* Abort if the daemon has marked M's slot evicted: one relaxed load of a
 * word in the line of the stop word, which every safepoint poll reads. */
static inline void mutator_check_evicted(const heapd_mutator *m)
{
    /* a child of fork() holding its parent's mutator is not the evicted
     * process: it gets the orphan's errors (Note [Clients and fork]) */
    if (__builtin_expect(atomic_load_explicit(&m->slot->evicted,
                                              memory_order_relaxed) != 0, 0) &&
        !agent_forked(&m->c->agent))
        mutator_evicted_abort(m);
}
/* The agent thread, at the connection's end: abort if any of C's
 * mutators was evicted. */
void mutator_check_evicted_all(heapd_client *c);

/* M's connection is gone, or this process is a child of the one that
 * attached M: M waits for nothing and writes nothing of the daemon's any
 * more, and its calls fail (Note [A dead daemon] in client/mutator.c).  A
 * closed connection may be an eviction's: the daemon marks the slot
 * before it closes, so the mark is looked at once more here (Note
 * [Evicted clients, client side]). */
static inline bool mutator_orphaned(const heapd_mutator *m)
{
    const struct agent *a = &m->c->agent;
    if (__builtin_expect(agent_is_closed(a), 0)) {
        mutator_check_evicted(m);
        return true;
    }
    return __builtin_expect(agent_forked(a), 0);
}
/* The error of a call on an orphaned M, with its message set. */
static inline int mutator_orphan_error(const heapd_mutator *m)
{
    return agent_gone_error(&m->c->agent);
}

void mutator_stop_slow(heapd_mutator *m);
void mutator_safepoint_slow(heapd_mutator *m);
static inline bool mutator_poll_due(const heapd_mutator *m)
{
    return __builtin_expect(
        (atomic_load_explicit(&m->slot->stop_request, memory_order_relaxed) |
         atomic_load_explicit(&m->remark_pending, memory_order_relaxed)) != 0,
        0);
}
/* Does M's next call need its safepoint, or one of the error paths: a
 * poll due, an eviction, a closed connection, a fork?  The fast paths of
 * the calls (Note [Fast paths of the calls] in client/mutator.c) test
 * this first and leave the rest to the call's general path, which does
 * every check again. */
static inline bool mutator_attention(const heapd_mutator *m)
{
    const struct agent *a = &m->c->agent;
    /* mutator_poll_due's two words and the eviction mark in one test:
     * written as mutator_poll_due(m) || the mark, heapd_alloc's fast path
     * took 10.9 ns for 64 bytes instead of 10.0 (alloc_bench young) */
    if (atomic_load_explicit(&m->slot->stop_request, memory_order_relaxed) |
        atomic_load_explicit(&m->slot->evicted, memory_order_relaxed) |
        atomic_load_explicit(&m->remark_pending, memory_order_relaxed))
        return true;
    return agent_is_closed(a) || agent_forked(a);
}
/* The safepoint poll (Note [Stop the world] in daemon/gc/safepoint.c), which
 * also services remark requests (Note [Remark requests]), for a caller
 * that has just made the eviction check (alloc_general: one load of it). */
static inline void mutator_poll_checked(heapd_mutator *m)
{
    if (mutator_poll_due(m))
        mutator_safepoint_slow(m);
}
/* The same with the eviction check first (Note [Evicted clients, client
 * side] in client/mutator.c). */
static inline void mutator_poll(heapd_mutator *m)
{
    mutator_check_evicted(m);
    mutator_poll_checked(m);
}
/* Enter a blocking region without servicing remark requests (inside the
 * library, where the caller may be servicing one); heapd_blocking_leave
 * ends it. */
void mutator_block(heapd_mutator *m);
/* Wait inside a barrier: Note [Waiting in a barrier] in
 * daemon/gc/safepoint.c; mutator_wait_end ends the wait, taking a final sync
 * under way but never a snapshot. */
void mutator_wait_begin(heapd_mutator *m);
void mutator_wait_end(heapd_mutator *m);
/* A call to the daemon from a mutator thread: inside a blocking region,
 * so that the mutator never holds up a stop while it waits. */
int mutator_call(heapd_mutator *m, Heapd__Envelope *req,
                 Heapd__Envelope **reply);
/* Ask for a segment of KIND (and BYTES for large): a blocking call.  CLS
 * (small ones; LAYOUT_NCLASSES for none): partly free segments of that
 * class may come first, FORMATTED[i] then 1 + their class, else 0. */
int mutator_request_segments(heapd_mutator *m, Heapd__SegmentKind kind,
                             uint32_t count, uint64_t bytes, uint32_t *out,
                             uint32_t max, uint32_t *run, unsigned cls,
                             uint32_t *formatted);
/* heapd_disconnect: free mutators the application did not detach. */
void mutator_free_all(heapd_client *c);

/* ---- telling a young object (Note [Young segments] in client/minor.c),
 * inline: heapd_write asks it of every store ---- */

/* The young segment of M that address P is in, or NULL. */
static inline struct young_seg *young_seg_of(const heapd_mutator *m,
                                             uintptr_t p)
{
    const heapd_client *c = m->c;
    uint64_t off = (uint64_t)(p - (uintptr_t)c->base);
    if (off >= c->size)
        return NULL;
    uint32_t k = m->young.segmap[off >> c->seg_shift];
    return k ? &m->young.segs[k - 1] : NULL;
}

/* The block of young segment S that object pointer V is, or UINT32_MAX
 * (layout_small_block's multiply). */
static inline uint32_t young_block_of(const struct young_seg *s, uintptr_t v)
{
    uint64_t b = (uint64_t)(v - LAYOUT_WORD - (uintptr_t)s->blocks);
    if (b >= (uint64_t)s->nblocks * s->block_size)
        return UINT32_MAX;
    uint32_t idx = (uint32_t)((b * s->magic) >> 32);
    return (uint64_t)idx * s->block_size == b ? idx : UINT32_MAX;
}

static inline bool young_block_is_young(const struct young_seg *s, uint32_t b)
{
    return __atomic_load_n(&s->marks[b], __ATOMIC_RELAXED) ==
           LAYOUT_MARK_YOUNG;
}

/* True if OBJ's header says it is young (Note [Young objects] in
 * proto/young.h): a load of the line a store into OBJ writes.  Whose it
 * is, young_is_mine says. */
static inline bool young_header_says(const void *obj)
{
    return layout_header_young(
        __atomic_load_n((const uint64_t *)obj - 1, __ATOMIC_RELAXED));
}

/* The young barrier (Note [Minor collections in slices] in
 * client/minor.c): before a store into FIELD of one of M's young objects
 * while M marks (FLAGS, its young_flags, say so), the reference FIELD
 * holds is kept by this collection. */
static inline void young_barrier(heapd_mutator *m, uint8_t flags,
                                 void *const *field)
{
    if (__builtin_expect(flags & MUTATOR_YOUNG_MARKING, 0)) {
        void *old = __atomic_load_n(field, __ATOMIC_RELAXED);
        if (old)
            young_barrier_slow(m, old);
    }
}

/* True if OBJ is one of M's young objects (an object pointer, not an
 * interior one). */
static inline bool young_is_mine(const heapd_mutator *m, const void *obj)
{
    if (!m->young_flags)
        return false;
    struct young_seg *s = young_seg_of(m, (uintptr_t)obj);
    if (!s)
        return false;
    uint32_t b = young_block_of(s, (uintptr_t)obj);
    return b != UINT32_MAX && young_block_is_young(s, b);
}

#endif
