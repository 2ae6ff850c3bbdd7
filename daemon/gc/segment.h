/* The daemon's segment table: the authoritative state of every segment of a
 * heap.  See Note [Segments] in proto/layout.h, and Note [Segment supply]
 * and Note [Segment lifecycle] in segment.c.  A function here runs with
 * heap->lock held, and asserts it (Note [Checked lock rules] in
 * proto/lock.h), unless its comment says otherwise: the readers the
 * markers and sweepers use (seg_state, seg_class, seg_fenced, ...), the
 * set-up of a table nobody shares yet (seg_init, seg_format,
 * seg_recount_memory, seg_destroy, segtab_check) and the few that take
 * the lock themselves. */
#ifndef HEAPD_DAEMON_SEGMENT_H
#define HEAPD_DAEMON_SEGMENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct heap;
struct resume_client;

/* Each state, its flags and every transition between the states: See
 * Note [Segment lifecycle] in segment.c. */
enum seg_state {
    SEG_CONTROL = 0,    /* the control area */
    SEG_FREE,           /* in the pool */
    SEG_OWNED,          /* granted to a client that allocates in it */
    SEG_FILLED,         /* returned (or orphaned) small segment */
    SEG_LARGE,          /* first segment of a large object's run */
    SEG_LARGE_TAIL,     /* other segments of that run */
};
#define SEG_STATE_MAX SEG_LARGE_TAIL

#define SEG_CLASS_UNKNOWN 0xffu /* owned but not formatted (or corrupt) */

struct seg {
    uint8_t state;      /* enum seg_state; read atomically by markers */
    uint8_t cls;        /* small: size class, or SEG_CLASS_UNKNOWN */
    uint8_t punched;    /* memory given back; reads as zero */
    uint8_t orphan;     /* left with objects by a client that went away,
                           not yet adopted (stats segments_orphaned) */
    uint8_t unknown_ref;/* FILLED with no class: the epoch a reference
                           into it was last met (Note [A segment leaves
                           its owner]); written by markers */
    uint8_t purging;    /* FILLED: some of its free pages are being
                           punched without the lock, and it is granted to
                           nobody meanwhile (Note [Purging free memory]
                           in daemon/gc/purge.c) */
    uint32_t run;       /* large: segments in the run; its tails: the
                           head's index */
    uint64_t owner;     /* client id, 0 for none */
    uint64_t free_since;/* cycles_completed when it became free */
    uint64_t unknown_since; /* cycles_completed when it became FILLED
                               with no class */
    uint8_t fenced;     /* evictions holding it (Note [Evicted clients]
                           in daemon/stall.c): no block of it is freed
                           and it is granted to nobody; read by sweepers */
    uint16_t charge;    /* 1 + the index of the seg_charge its blocks'
                           bytes count for, 0 for none (Note [Quota] in
                           segment.c); read atomically by sweepers */
    /* Note [Remark] in daemon/gc/remark.c; guarded by the marking job's mu */
    uint8_t remark;     /* enum remark_state, | REMARK_AGAIN */
    uint32_t remark_next;  /* the list it is on (0: end) */
    uint64_t remark_to; /* SENT: the client asked to rescan it */
};

/* What one client is charged for besides the segments it holds (Note
 * [Quota] in segment.c).  heap->lock. */
struct seg_charge {
    uint64_t client;        /* 0: the record is free */
    uint64_t live;          /* bytes that survived in its segments the
                               heap holds, at the last sweep */
    uint64_t fresh;         /* bytes it handed the heap since the last
                               sweep started: returned full segments,
                               large runs */
    uint64_t fresh_swept;   /* the part of fresh the running sweep counts */
    bool counted;           /* the running sweep counts for this client */
};

#define SEG_CHARGES_MAX 65535u /* seg.charge is 16 bits */

struct segtab {
    struct seg *segs;
    uint32_t count;         /* segments in the heap, control included */
    uint32_t first;         /* first non-control segment */
    uint32_t high;          /* 1 + highest segment ever taken: per-cycle
                               walks stop here, so their cost follows the
                               memory used, not max_size */
    uint64_t *free_bits;    /* bit i set: segment i is SEG_FREE */
    uint64_t *reuse_bits;   /* bit i set: FILLED and partly free (Note
                               [Reusing partly free segments]) */
    uint32_t n_free, n_owned, n_filled, n_large, n_reusable;
    uint32_t n_fenced;      /* segments with fenced != 0 */
    _Atomic uint32_t strays_again; /* walks seg_punch_strays still makes
                              whatever the counts say (Note [Free memory
                              stays free]) */
    uint64_t orphaned, adopted;   /* stats segments_orphaned/_adopted */
    /* Note [Purging free memory] in daemon/gc/purge.c: the memory the table
     * accounts for.  heap->lock */
    uint32_t n_unpunched;   /* segments whose memory is not punched */
    uint64_t pages_purged;  /* pages of theirs punched since they were
                               last granted (bits set in page_purged) */
    unsigned page_shift;    /* log2 of the kernel's page size */
    uint32_t seg_pages;     /* pages in a segment */
    uint32_t page_words;    /* 64-bit words of a segment's page bitmap */
    /* per segment, page_words each, in heapd's private memory (a restart
     * starts them empty: Note [Purging free memory]) */
    _Atomic uint64_t *page_free;  /* pages no block in use overlapped at
                                     its last sweep (FILLED); written by
                                     the sweeper without the lock */
    uint64_t *page_purged;  /* pages punched since it was last granted;
                               heap->lock */
    uint32_t small_max;     /* largest small object size */
    uint32_t small_nblocks[256];  /* per class; 0 = class not usable */
    uint32_t small_first[256];
    uint64_t small_magic[256];    /* layout_block_magic, per class */
    struct seg_charge *charges;   /* Note [Quota]; grows, never shrinks */
    uint32_t n_charges;           /* records allocated */
#ifndef NDEBUG
    /* Note [Checking the segment table]: states written (set_state), their
     * number at the last check, and releases of heap->lock; heap->lock */
    uint64_t state_changes, checked_at, releases;
#endif
};

/* The table's geometry for H's configuration, and its private page
 * bitmaps (Note [Purging free memory] in daemon/gc/purge.c); the records
 * themselves live in the live table (Note [The live table] in
 * daemon/gc/table.c), which points t->segs and the bitmaps at them.
 * Returns 0 or -ENOMEM. */
int seg_init(struct heap *h);
/* A new heap's records: every segment free and never touched. */
void seg_format(struct heap *h);
/* Note [Recovering the segment table] in segment.c: the records as the
 * heapd before left them, made good with every client gone but KEPT's
 * (a list; NULL: none).  CYCLES is the cycles_completed the counters were
 * taken back at.  SEALED (NULL after a kill): the counts a clean stop
 * sealed (Note [The live table] in table.c), kept with the reuse bitmap
 * if the records are as a clean stop leaves them; *ODD counts what is
 * not.  Returns 0, or -EINVAL with WHY (N bytes) naming a record no heapd
 * writes. */
struct seg_sealed {
    uint64_t orphaned, adopted;
};
int seg_recover(struct heap *h, uint64_t cycles,
                const struct resume_client *kept,
                const struct seg_sealed *sealed, uint32_t *odd, char *why,
                size_t n);
void seg_destroy(struct heap *h);

static inline uint8_t seg_state(const struct segtab *t, uint32_t i)
{
    return __atomic_load_n(&t->segs[i].state, __ATOMIC_ACQUIRE);
}

/* Bitmaps of the table (free_bits, reuse_bits, the page bitmaps). */
static inline void seg_bit_set(uint64_t *b, uint32_t i)
{
    b[i >> 6] |= 1ull << (i & 63);
}
static inline void seg_bit_clear(uint64_t *b, uint32_t i)
{
    b[i >> 6] &= ~(1ull << (i & 63));
}
static inline bool seg_bit_test(const uint64_t *b, uint32_t i)
{
    return b[i >> 6] >> (i & 63) & 1;
}
/* Bits set in the N words at W. */
static inline uint32_t seg_popcount(const uint64_t *w, uint32_t n)
{
    uint32_t c = 0;
    for (uint32_t k = 0; k < n; k++)
        c += (uint32_t)__builtin_popcountll(w[k]);
    return c;
}

/* With heap->lock held: the bytes of heap memory the table accounts for
 * as committed (Note [Purging free memory] in daemon/gc/purge.c): every
 * segment not punched, less the pages punched out of them. */
static inline uint64_t seg_committed(const struct segtab *t,
                                     unsigned seg_shift)
{
    return ((uint64_t)t->n_unpunched << seg_shift) -
           (t->pages_purged << t->page_shift);
}
/* With heap->lock held: segment I's memory is punched (PUNCHED) or about
 * to be used again (its punched pages forgotten: whoever takes it may
 * touch any of them). */
void seg_set_punched(struct heap *h, uint32_t i, bool punched);
/* The table's derived memory counts, recounted from the records (a new
 * table, or one taken over from the heapd before). */
void seg_recount_memory(struct segtab *t);

/* Grant up to COUNT small segments to OWNER, whose *HELD segments count
 * toward QUOTA_SEGS: partly free ones of the size classes set in CLASSES
 * (a bitmap of LAYOUT_NCLASSES bits; NULL: none) first, blank ones for the
 * rest, growing the committed memory by at most ROOM bytes (UINT64_MAX:
 * no bound) with punched blank segments and the punched pages of reused
 * ones (Note [Heap goal] in daemon/gc/collector.c); OUT_FORMATTED[k] is 0
 * for a blank OUT[k], else 1 + its class.  Returns the number granted
 * (>= 1), -EDQUOT when the client's quota is reached, -ENOSPC when the
 * heap is full, or -EAGAIN when nothing could be granted without growing
 * by more than ROOM. */
int seg_grant_small(struct heap *h, uint64_t owner, uint32_t *held,
                    uint32_t quota_segs, uint32_t count,
                    const uint64_t *classes, uint64_t room, uint32_t *out,
                    uint32_t *out_formatted);
/* Note [Reuse before growth] in client/reserve.c: grant OWNER up to
 * COUNT partly free segments of CLASSES as seg_grant_small would (their
 * punched pages within ROOM bytes: Note [Reused pages are growth] in
 * segment.c), and no blank one.  Returns the number granted, 0 if the
 * heap has none that fits, or -EDQUOT. */
int seg_grant_reusable(struct heap *h, uint64_t owner, uint32_t *held,
                       uint32_t quota_segs, uint32_t count,
                       const uint64_t *classes, uint64_t room, uint32_t *out,
                       uint32_t *out_formatted);
/* The sweep left FILLED segment I with NFREE free blocks of NBLOCKS: make
 * it reusable if that is enough (takes the heap lock). */
void seg_swept_filled(struct heap *h, uint32_t i, uint32_t nfree,
                      uint32_t nblocks);
/* The segments of the run a large object of BYTES (header included)
 * takes. */
uint64_t seg_run_segments(const struct heap *h, uint64_t bytes);
/* Grant a run of segments for one large object of BYTES (header
 * included).  Returns 0 with *first and *run set, -EDQUOT, -ENOSPC, or
 * -EFBIG when it can never fit. */
int seg_grant_large(struct heap *h, uint64_t owner, uint32_t *held,
                    uint32_t quota_segs, uint64_t bytes, uint32_t *first,
                    uint32_t *run);

/* OWNER gives segment I back.  Returns 0 or -EINVAL when I is not a small
 * segment owned by OWNER (nothing changes). */
int seg_return(struct heap *h, uint64_t owner, uint32_t *held, uint32_t i);

/* OWNER is gone: its small segments become FILLED (or FREE if never
 * formatted), its large runs ownerless: all of them counted as orphaned
 * until a sweep frees them or a grant adopts them. */
void seg_orphan(struct heap *h, uint64_t owner);

/* Note [Evicted clients] in daemon/stall.c: fence every segment in use
 * (not FREE) now: none of its blocks is freed and it is granted to no
 * client until seg_unfence.  *OUT gets the fenced segments (malloc'd,
 * *N of them).  Returns 0 or -ENOMEM (nothing fenced). */
int seg_fence(struct heap *h, uint32_t **out, uint32_t *n);
/* Lift a fence seg_fence set. */
void seg_unfence(struct heap *h, const uint32_t *segs, uint32_t n);
static inline bool seg_fenced(const struct segtab *t, uint32_t i)
{
    return __atomic_load_n(&t->segs[i].fenced, __ATOMIC_RELAXED) != 0;
}

/* ---- Note [Quota] in segment.c ---- */

/* With heap->lock held: the bytes OWNER is charged for beside the segments
 * it holds: what survived in its other segments at the last sweep, and
 * what it has handed the heap since (ALL); or the first alone (!ALL). */
uint64_t seg_charged_bytes(const struct heap *h, uint64_t owner, bool all);
/* With heap->lock held, as a sweep starts: returns how many records the
 * sweep may tally (seg.charge - 1 below it). */
uint32_t seg_sweep_start(struct heap *h);
/* With heap->lock held, as a sweep ends: TALLY[k] is what survived in
 * the heap's segments charged to record k (N records; NULL: no tally was
 * kept, every charge stays as it was). */
void seg_sweep_charged(struct heap *h, const _Atomic uint64_t *tally,
                       uint32_t n);
/* The record segment I's blocks count for, plus 1 (0: none).  Any
 * thread. */
static inline uint16_t seg_charge_of(const struct segtab *t, uint32_t i)
{
    return __atomic_load_n(&t->segs[i].charge, __ATOMIC_RELAXED);
}

/* The size class of small segment I, or SEG_CLASS_UNKNOWN.  For an owned
 * segment the first call after its owner formatted it reads the class from
 * the header (range-checked) and caches it in the table: the owner writes
 * the class before it allocates any block, so any valid reference into the
 * segment implies the class is there (Note [Segments]).  Any thread. */
uint8_t seg_class(struct heap *h, uint32_t i);

/* Sweep side: give back a small segment that holds no live block, or a
 * dead large run. */
void seg_release(struct heap *h, uint32_t i);

/* ---- memory given back: daemon/gc/purge.c ---- */

/* With heap->lock held: punch segments [FIRST, FIRST + N) now (they read
 * as zero afterwards), and say so in the table. */
void seg_punch(struct heap *h, uint32_t first, uint32_t n);
/* Does the memfd have pages in segments [FIRST, FIRST + N)?  CUR caches
 * what the last lseek found: start it at {INT64_MAX, 0}, and ask in
 * increasing order. */
bool seg_has_pages(const struct heap *h, uint32_t first, uint32_t n,
                   off_t cur[2]);
/* Note [Purging free memory]: the sweeper found FILLED segment I with the
 * marks MARKS of its NBLOCKS blocks of BS bytes from offset FIRST; record
 * which pages no block in use overlaps.  Any thread, no lock. */
void seg_swept_pages(struct heap *h, uint32_t i, const uint8_t *marks,
                     uint32_t nblocks, uint32_t first, uint32_t bs);
/* Segment I's page bitmaps (page_words words each): the pages punched
 * since it was last granted, and those its last sweep found free. */
static inline uint64_t *seg_pages_purged(const struct segtab *t, uint32_t i)
{
    return t->page_purged + (size_t)i * t->page_words;
}
static inline _Atomic uint64_t *seg_pages_free(const struct segtab *t,
                                               uint32_t i)
{
    return t->page_free + (size_t)i * t->page_words;
}
/* Is page P of segment I punched since the segment was last granted?
 * With heap->lock held, or where nothing changes the table (the
 * verifier, in a pause). */
static inline bool seg_page_purged(const struct segtab *t, uint32_t i,
                                   uint32_t p)
{
    return seg_bit_test(seg_pages_purged(t, i), p);
}
/* The bytes of the pages punched out of segment I since it was last
 * granted: what granting it again grows the committed memory by (Note
 * [Reused pages are growth] in segment.c).  With heap->lock held. */
static inline uint64_t seg_purged_bytes(const struct segtab *t, uint32_t i)
{
    return (uint64_t)seg_popcount(seg_pages_purged(t, i), t->page_words)
           << t->page_shift;
}
/* What seg_purge did and left. */
struct seg_purged {
    uint32_t segments;  /* free segments punched (strays included) */
    uint64_t pages;     /* pages punched out of FILLED segments */
    uint64_t usable;    /* committed free memory grants hand out first:
                           the free blocks of reusable segments (less
                           their punched pages) and the free segments kept */
};
/* Note [Purging free memory]: after a sweep, keep at most KEEP bytes of
 * free memory committed -- the free pages of reusable segments and the
 * free segments, in the order grants take them -- and punch the rest:
 * free pages of FILLED segments and whole free segments.  Then any stray
 * pages (seg_punch_strays).  Takes heap->lock itself (not held by the
 * caller) and drops it around the system calls. */
void seg_purge(struct heap *h, uint64_t keep, struct seg_purged *out);
/* Note [Free memory stays free] in purge.c: if the heap's memfd holds
 * more than the segments the daemon counts as committed, punch every
 * segment it believes punched that has pages again.  Locks as
 * seg_purge.  Returns the segments punched. */
uint32_t seg_punch_strays(struct heap *h);
/* How often the loop thread runs seg_punch_strays besides cycles' ends
 * and departures (Note [Free memory stays free]): cheap (an fstat and a
 * walk of the table under the lock) unless there are strays. */
#define SEG_STRAYS_EVERY_MS 1000u

/* Note [Loading a saved heap] in load.c, transition (7) of Note [Segment
 * lifecycle]: FREE segment I becomes FILLED with class CLS, formatted
 * and reading as zero past its header; FREE segments [I, I + RUN) a
 * large run.  Return 0, or -EBUSY if a segment is not FREE (or out of
 * the heap).  seg_unload makes such a segment (or run) FREE and punched
 * again. */
int seg_load_small(struct heap *h, uint32_t i, uint8_t cls);
int seg_load_large(struct heap *h, uint32_t i, uint32_t run);
void seg_unload(struct heap *h, uint32_t i);

/* Note [Checking the segment table] in segtab_check.c: true iff T's counters
 * and bitmaps agree with a recount of its states; logs what disagrees.
 * With heap->lock held (or T not shared). */
bool segtab_check(const struct segtab *t);
#define SEGTAB_CHECK_EVERY 16
/* assert(segtab_check()) at a release of heap->lock (heap_unlock), when
 * a segment's state changed since the last check or at every
 * SEGTAB_CHECK_EVERY-th release (every release with HEAPD_CHECK_ALL set).
 * A no-op with NDEBUG. */
#ifndef NDEBUG
void segtab_assert(struct segtab *t);
#else
#define segtab_assert(t) ((void)(t))
#endif
/* Note [A segment leaves its owner]: may the sweep of the cycle of EPOCH
 * free FILLED segment I, whose class nobody knows?  And: a reference
 * into segment I was refused for want of a class. */
bool seg_unknown_unreferenced(const struct heap *h, uint32_t i, uint8_t epoch);
void seg_note_unknown_ref(const struct heap *h, uint32_t i);

#ifndef NDEBUG
/* One more release of a lock, counted in *RELEASES (the lock's own
 * counter, under it): is it a sampled one (Note [Checking the segment
 * table])? */
bool seg_check_due(uint64_t *releases);
#endif


#endif
