/* libheapd's young generation: a mutator's young objects in its own
 * segments, its minor collections and promotions in place (client/minor.c;
 * the mark that makes a block young is Note [Young objects] in
 * proto/young.h). */
#ifndef HEAPD_CLIENT_MINOR_H
#define HEAPD_CLIENT_MINOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "heapd.h"
#include "layout.h"
#include "young.h"

#define YOUNG_HIST 160 /* pause histogram: 4 buckets per power of two */

/* A segment of the mutator's that may hold young blocks: every segment a
 * young mutator allocates in, until a minor collection finds none young
 * in it (Note [Young segments] in client/minor.c). */
struct young_seg {
    uint8_t *marks, *blocks;
    uint64_t *live;             /* a bit per block: reached, this trace */
    uint64_t *held;             /* a bit per block: a C local held it at
                                   this collection's start (after live) */
    uint64_t magic;             /* layout_block_magic of its class */
    uint32_t index;             /* the segment */
    uint32_t nblocks, block_size;
    uint32_t young;             /* young blocks at the last sweep */
    uint8_t cls;
    bool reusable;              /* on its class's reuse list */
    bool mixed;                 /* may hold a mark other than 0 and young
                                   (Note [Sweeping a segment of young
                                   blocks only]) */
};

/* Words of S's live bits (and as many of its held bits). */
static inline size_t young_bitmap_words(const struct young_seg *s)
{
    return (s->nblocks + 63) / 64;
}

/* client/minor_sweep.c: fill young block K of S with POISON; free it,
 * filled with POISON first if that is not 0; are S's marks all 0 or
 * young; is none of them young; free the young blocks of S the trace
 * did not reach, returning its free blocks (Note [Sweeping a young
 * segment eight marks at a time], Note [Sweeping a segment of young
 * blocks only]). */
void minor_poison_block(struct young_seg *s, uint32_t k, uint8_t poison);
void minor_free_block(struct young_seg *s, uint32_t k, uint8_t poison);
bool minor_young_only(const struct young_seg *s);
bool minor_no_young(const struct young_seg *s);
uint32_t minor_sweep_seg(struct young_seg *s, uint8_t poison);

/* A minor collection's phases (Note [Minor collections in slices]). */
enum young_phase_state { YOUNG_IDLE, YOUNG_MARK, YOUNG_SWEEP };

struct young_gen {
    bool on;
    uint32_t age;               /* promote at this many survivals */
    uint64_t budget;            /* bytes allocated between minor collections */
    /* the next one runs at fast.young_bytes == fast.young_next_minor
     * (Note [Inline allocation fast path] in heapd.h) */
    uint64_t minor_at;          /* young_bytes at the last one */
    uint64_t shared_since;      /* shared blocks it allocated in young
                                   segments since the last pause (Note
                                   [Sizing the nursery]) */
    uint64_t shared_due;        /* as many as bring the next pause: the
                                   young bytes that do, as of then */
    /* the young segments: segs[segmap[i] - 1] is segment i's */
    struct young_seg *segs;
    uint32_t nsegs, capsegs;
    uint32_t *segmap;           /* per segment of the heap: 0 or 1 + index */
    uint32_t heap_segs;
    /* per size class: young segments with free blocks, for allocation */
    uint32_t *reuse[LAYOUT_NCLASSES];
    uint32_t nreuse[LAYOUT_NCLASSES];
    /* per size class: segments a sweep found no young block in, kept
     * (untracked) for allocation: Note [Young segments] */
    uint32_t *spare[LAYOUT_NCLASSES];
    uint32_t nspare[LAYOUT_NCLASSES], capspare[LAYOUT_NCLASSES];
    uint64_t spare_bytes;
    /* the trace's work list: objects, their low bit their mode */
    uintptr_t *work;
    size_t nwork, capwork;
    size_t nforce;              /* promoted objects whose fields are to be
                                   promoted: the top of work */
    /* the collection under way (Note [Minor collections in slices]) */
    enum young_phase_state phase;
    uint32_t at_seg;            /* where the held scan or the sweep is */
    uint64_t slice_bytes;       /* allocated between two slices */
    uint64_t cycle_at;          /* young_bytes when it started */
    uint64_t traced;            /* bytes it found that stay young */
    /* statistics, mirrored into the slot's young_* words */
    uint64_t minor, promoted_age, promoted_pub, pause_max, pause_total;
    uint64_t pauses;            /* slices: a collection takes one or more */
    uint64_t survived;          /* bytes that stayed young, last minor */
    uint64_t hist[YOUNG_HIST];
};

/* Set up M's young generation (attach, in the attaching thread: its stack
 * is the one scanned); returns 0 or a negative errno. */
int young_init(heapd_mutator *m, uint64_t budget, uint32_t age);
/* Detach: free every young block and give back the young segments that
 * are not current. */
void young_release(heapd_mutator *m);
void young_free(heapd_mutator *m);

/* A young mutator's minor collection, or its next slice, is due
 * (young_bytes reached next_minor): run it.  A safepoint's caller only. */
void young_collect(heapd_mutator *m);
/* M needs a segment of CLS and has none of its own with room: start a
 * collection now, instead of waiting for heapd, if that is due (Note
 * [Minor collections before a wait] in client/minor.c).  A safepoint's
 * caller only. */
void young_collect_early(heapd_mutator *m, unsigned cls);
/* heapd refused M a segment: end the collection under way, or run a
 * whole one, in this pause; false if there is nothing it could free (the
 * same Note).  A safepoint's caller only. */
bool young_collect_all(heapd_mutator *m);
/* M has just taken a young block, for OBJ, of its current segment of
 * CLS while a collection is under way: it is live for this collection
 * (Note [Minor collections in slices]).  Returns OBJ. */
void *young_allocated_black(heapd_mutator *m, unsigned cls, void *obj);
/* M has just taken a shared block of its current segment of CLS (a
 * young mutator's heapd_alloc_shared): the segment holds a mark other
 * than 0 and young (Note [Sweeping a segment of young blocks only]). */
void young_took_shared(heapd_mutator *m, unsigned cls);
/* Promote what the promotions under way still have to reach (Note
 * [Minor collections in slices]): before anything M stores is seen by
 * others. */
void young_promote_pending(heapd_mutator *m);
/* The young barrier's slow half (young_barrier in client/mutator.h). */
void young_barrier_slow(heapd_mutator *m, void *old);
/* M installed segment IDX as its current segment of CLS: track it. */
int young_track(heapd_mutator *m, uint32_t idx, unsigned cls);
/* A segment of CLS with free blocks for M to allocate in: one of its
 * young segments with room, or a spare one (tracked again), or 0.  A
 * negative errno if tracking it failed (it is given back). */
int64_t young_reuse_take(heapd_mutator *m, unsigned cls);

/* R itself; if it is one of M's young objects it is promoted first, with
 * everything young it reaches (Note [The young invariant]).  Never
 * waits. */
void *young_publish(heapd_mutator *m, void *r);

/* The stack barrier's young half: the preparatory push of every shared
 * reference M's roots and the young objects reachable from its roots and
 * its stack hold (Note [The preparatory push]); returns false if M has no
 * young generation. */
bool young_push_roots(heapd_mutator *m);
/* After a blocking region or a stop, before the program runs on: the
 * stack handshake if it is due (Note [The preparatory push]). */
void young_resume(heapd_mutator *m);
/* The agent, for a blocked mutator M (its `hold` held): promote every
 * young block of segment IDX, with what each reaches, and stop tracking
 * it (or take it off its spare list), so that it may be given back (Note
 * [Remark requests] in client/remark.c).  False if it cannot now (M's
 * stack handshake of this cycle is not done yet). */
bool young_surrender(heapd_mutator *m, uint32_t idx);
/* The spare segments of M, for the agent to look through: *N of them
 * in class CLS. */
const uint32_t *young_spares(const heapd_mutator *m, unsigned cls,
                             uint32_t *n);
/* True if IDX is one of M's young segments. */
bool young_tracks(const heapd_mutator *m, uint32_t idx);
/* M leaves its current segment IDX: true if M may give it back now (not
 * tracked, or no longer: Note [Young segments]), false if it stays. */
bool young_leave_segment(heapd_mutator *m, uint32_t idx);
/* Young or spare segment IDX of M as an allocation segment (for a
 * rescan: Note [Remark requests] in client/remark.c); false if it is
 * neither. */
struct alloc_seg;
bool young_seg_view(const heapd_mutator *m, uint32_t idx,
                    struct alloc_seg *out);

#endif
