/* Shared-memory layout of a heapd heap: the contract between the daemon,
 * which lays it out, and every client, which maps it and checks it.
 *
 * Note [Heap mapping]
 * ~~~~~~~~~~~~~~~~~~~
 * A heap is one memfd of max_size bytes, sparse (pages cost nothing until
 * touched), sealed against shrinking and growing, and mapped MAP_SHARED at
 * the same fixed address `base` in the daemon and in every client, with
 * MAP_FIXED_NOREPLACE so that it never silently replaces another mapping;
 * its first LAYOUT_DAEMON_BYTES are then covered by the daemon's page, a
 * second memfd (Note [The daemon's page]).  Because the address is the
 * same everywhere, a reference stored in the heap is a plain C pointer
 * that means the same object in every process.
 * Consequences every module relies on:
 *
 *   - base is a multiple of segment_size, and segment k starts at
 *     base + k * segment_size, so a segment's header is found by masking a
 *     pointer with ~(segment_size - 1).
 *   - The control area occupies the first control_segments segments; the
 *     first segment available for objects is segment control_segments.
 *   - The memfd is sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) before
 *     any client sees it: a client cannot ftruncate it and make the daemon
 *     fault with SIGBUS on a page that vanished.
 *   - A client trusts nothing in the mapping until it has checked magic,
 *     layout_version and the geometry against its Welcome
 *     (layout_check_control).
 *
 * Note [Control area]
 * ~~~~~~~~~~~~~~~~~~~
 * The control area holds the words every process shares: identity and
 * geometry (written once by the daemon before any client maps it, read-only
 * afterwards), the collector's state words (epoch, phase, the stop request),
 * the table of global roots (Note [Global roots]); the mutator slots are
 * not here but in each client's own memory (Note [Client control
 * memory]).  Any change of meaning or
 * position of a field bumps LAYOUT_VERSION.  Words shared between running
 * processes are _Atomic; the futex words are 32-bit and 4-byte aligned.
 *
 * Note [The daemon's page]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~
 * The words only the daemon writes -- identity, geometry, epoch, phase,
 * and the global roots' names, states and owners (Note
 * [Global roots]): the first LAYOUT_DAEMON_BYTES of the control area --
 * are not in the heap's memfd but in a memfd of their own, of
 * LAYOUT_DAEMON_BYTES (a multiple of the page size; heap_open refuses a
 * machine whose pages are larger).  The daemon maps it read-write over the
 * start of its heap mapping; a client gets it only as a descriptor opened
 * O_RDONLY (through /proc/self/fd), mapped read-only over the same range
 * of its mapping.  A client's store there faults in the client, and
 * mprotect(PROT_WRITE) fails with EACCES: no client can forge the epoch,
 * the phase, the magic or a global's state for the others (an epoch of 0
 * or a bad magic outlived the writer).  A stop is asked of each slot in
 * its own words (Note [Stop the world]): a client that forges its own
 * stalls only itself, and the stall policy ends that (Note [Stalls] in
 * daemon/stall.c).  Futex waits on a read-only mapping work:
 * the key is the file page.  The heap memfd's first LAYOUT_DAEMON_BYTES
 * are never used.
 *
 * Note [Objects]
 * ~~~~~~~~~~~~~~
 * An object is a one-word header, then nrefs reference fields, then nbytes
 * raw bytes, in one block.  A reference is NULL or the address of an
 * object's first field (just past the header), so the header of object p is
 * at p - 8.  The header packs nbytes in bits 0..27, nrefs in bits 28..55 and
 * leaves bits 56..63 for the collector's per-object tag (the dirty epoch of
 * the write barrier, Note [Dirty tags] in client/barrier.c).  Blocks are 8-byte aligned and their size is
 * the object's size rounded up to its size class.  The collector is precise:
 * it reads only the nrefs reference fields, never the raw bytes.
 *
 * Note [Segments]
 * ~~~~~~~~~~~~~~~
 * Segment 0.. control_segments-1 hold the control area; every other segment
 * is in exactly one state in the daemon's table (daemon/gc/segment.c, which is
 * authoritative: nothing the daemon decides rests on a segment header alone).
 * A segment header starts every non-control segment:
 *
 *   small segment:  header | marks[nblocks] | pad to 16 | blocks...
 *   large run:      header | marks[1] | pad | one object over the whole run
 *
 * The kind and geometry of a small segment follow from its size class
 * alone (layout_small_geometry); the owner writes the class into the header
 * and then, with release, the kind SMALL, before it allocates the first
 * block.  The class means something only once the kind says SMALL (read it
 * with acquire), and the daemon re-derives everything else itself and
 * range-checks the class, so a corrupted header can make the daemon skip a
 * segment but never read outside it.
 *
 * A blank header is all zeros (kind LAYOUT_SEG_BLANK is 0), so a segment
 * whose memory was punched out is blank without being written: granting it
 * touches none of its pages, and its first page fault is taken by its owner
 * (or the owner's prefault thread) instead of by the daemon's loop thread
 * while a mutator waits for the grant (measured: a 64-segment grant of
 * punched segments took the loop thread 2-5 ms of shmem faults).
 *
 * Note [Epoch-tagged marks]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~
 * Each block has one mark byte.  0 means the block is free;
 * LAYOUT_MARK_CONT (255) that it is part of the object of the block before
 * it (Note [Runs]); LAYOUT_MARK_YOUNG (254) that it holds a young object,
 * which only its mutator marks, frees or promotes (Note [Young objects] in
 * proto/young.h); any other value is the epoch in which the block was
 * last marked or allocated.  The control area's epoch rotates through
 * 1..239, never 0, and changes only while every mutator is stopped.  So:
 *   - a mutator allocating a block sets its mark to the current epoch (the
 *     block is "allocated black"), and the daemon never writes the mark of a
 *     block it did not trace;
 *   - the collector marks a block by setting its mark to the new epoch, and
 *     a block is live at the end of marking iff mark == epoch;
 *   - sweep sets every other non-zero mark to 0 (and poisons the block).
 * Marks are never bulk-cleared.  After a completed sweep every non-zero mark
 * in the heap equals the current epoch (or continues a block that does),
 * (or is young), which is what lets the next epoch value be any other
 * epoch, including one used 239 cycles ago: no location can still hold
 * it.  A cycle must therefore sweep every segment
 * that holds blocks, owned ones included (checked by the verifier).
 */
#ifndef HEAPD_PROTO_LAYOUT_H
#define HEAPD_PROTO_LAYOUT_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "heapd_object.h"

#define LAYOUT_MAGIC 0x0031504145484448ULL /* bytes "HDHEAP1\0" in memory */
/* 8: the daemon's page (Note [The daemon's page]).
 * 9: the globals' names, states and owners in the daemon's page, their
 * values in global_values[] after it (Note [Global roots]).
 * 10: client control memory (Note [Client control memory]).
 * 12: nurseries (a run of YOUNG segments per young mutator, gone in 14):
 * the YOUNG segment kind and a slot's young words.
 * 13: the run class and LAYOUT_MARK_CONT (Note [Runs]); epochs 1..254.
 * 14: young objects in the client's segments (Note [Young objects] in
 * proto/young.h): LAYOUT_MARK_YOUNG and LAYOUT_YOUNG_TAG, epochs
 * 1..239, no nursery kind.
 * 15: a C stack capture after the root stack (captured_n,
 * LAYOUT_MAX_CAPTURED) and LAYOUT_URS_CAPTURED entries (Note [C locals
 * are roots] in client/stack_roots.c).
 * 16: a slot's capture_unscanned and capture_overflows (and the live
 * table's counters that sum them), and young_promoting.
 * 17: a slot's young_held_bytes (Note [Young memory and the heap goal]
 * in daemon/gc/collector.c).
 * 18: a size class of 2^n + 8 bytes per doubling (79 classes).
 * 19: large_run_max in the daemon's page (Note [The longest large
 * run]).
 * 20: the live clients' table in the daemon's page (Note [Live
 * clients]). */
#define LAYOUT_VERSION 20u

#define LAYOUT_MIN_SEGMENT_SIZE (16u * 1024u)
#define LAYOUT_MAX_SEGMENT_SIZE (1u << 30)
#define LAYOUT_CONTROL_BYTES (16u * 1024u * 1024u) /* bytes the control area needs */
#define LAYOUT_DAEMON_BYTES (32u * 1024u) /* Note [The daemon's page] */

#define LAYOUT_MAX_MUTATORS 128

/* ---- objects (Note [Objects]) ---- */

#define LAYOUT_WORD HEAPD_OBJ_WORD_
#define LAYOUT_FIELD_BITS HEAPD_OBJ_FIELD_BITS_
#define LAYOUT_FIELD_MAX ((1u << LAYOUT_FIELD_BITS) - 1)

static inline uint64_t layout_header(uint64_t nrefs, uint64_t nbytes)
{
    return heapd_obj_header_(nrefs, nbytes);
}
static inline size_t layout_header_nbytes(uint64_t h)
{
    return (size_t)(h & LAYOUT_FIELD_MAX);
}
static inline size_t layout_header_nrefs(uint64_t h)
{
    return (size_t)((h >> LAYOUT_FIELD_BITS) & LAYOUT_FIELD_MAX);
}
/* The dirty tag (Note [Dirty tags]) lives in the header's top byte. */
#define LAYOUT_TAG_SHIFT HEAPD_OBJ_TAG_SHIFT_
static inline uint8_t layout_header_tag(uint64_t h)
{
    return (uint8_t)(h >> LAYOUT_TAG_SHIFT);
}
static inline uint64_t layout_header_with_tag(uint64_t h, uint8_t tag)
{
    return (h & ~((uint64_t)0xff << LAYOUT_TAG_SHIFT)) |
           (uint64_t)tag << LAYOUT_TAG_SHIFT;
}
/* What scanning an object does to its header at HP, read as H, in the
 * cycle of EPOCH: clear a dirty tag left from an earlier cycle (Note
 * [Dirty tags], Note [Epoch reuse]); a barrier that tags it meanwhile wins
 * the race.  The marker does it, and so does a client's remark. */
static inline void layout_clear_stale_tag(uint64_t *hp, uint64_t h,
                                          uint8_t epoch)
{
    uint8_t tag = layout_header_tag(h);
    if (tag != 0 && tag != epoch)
        __atomic_compare_exchange_n(hp, &h, layout_header_with_tag(h, 0),
                                    false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* Bytes an object occupies, header included (8-byte multiple). */
static inline uint64_t layout_object_size(uint64_t nrefs, uint64_t nbytes)
{
    return heapd_obj_size_(nrefs, nbytes);
}

/* ---- size classes ----
 * 16..128 bytes in steps of 8 (every object size is a multiple of 8, so
 * these waste nothing), then, per doubling up to 16 KiB, a class of the
 * power of two plus a header word and 8 classes an eighth of it apart: a
 * block wastes at most 1/8 of its size, and a C program's power-of-two
 * payload (256 bytes and its header: 264) wastes nothing where the
 * eighth above (288) wasted 8 %.  Measured (a young 256-byte allocation
 * in a ring of 1000, the best of 5 interleaved runs): a block stride of
 * 288 bytes took 8.44 ns and one of 256 took 8.15, the 0.3 ns being the
 * cache lines the allocation writes.  The last class is the run class
 * (Note [Runs]), for objects above the largest of the others.
 *
 * Note [Runs]
 * ~~~~~~~~~~~
 * An object too large for a size class but smaller than a segment's
 * blocks together (16 KiB to about 127 KiB with 128 KiB segments) lives
 * in a small segment of the run class: blocks of LAYOUT_RUN_GRANULE
 * bytes, of which it takes as many consecutive ones as it needs.  Its
 * first block's mark is an epoch as any block's (Note [Epoch-tagged
 * marks]); each other one's is LAYOUT_MARK_CONT, which no epoch is.  So a
 * run object wastes less than a granule, at most 1/16 of it, where a run
 * of whole segments of its own wasted up to 7/8 of a segment; and it is
 * allocated by its mutator from its own segment, with no round trip to
 * heapd.  Everything that reads marks knows the object's extent from them
 * alone (layout_block_span), never from its header:
 *   - a reference is to a block whose mark is an epoch, never 0 or
 *     LAYOUT_MARK_CONT, and the object must fit its span;
 *   - the owner sets the marks of free blocks only (0), the first block's
 *     before the others; so a block that reads LAYOUT_MARK_CONT right
 *     after a block in use is part of it, whoever reads it;
 *   - the sweep frees a dead object's span -- its continuation marks
 *     read before any of them is freed, then freed, then its first mark;
 *     an owner that allocates meanwhile claims only blocks already freed,
 *     and so never writes a mark the sweep has still to read.  A
 *     continuation mark that follows no object (a client that wrote
 *     marks) is left to its segment's next life;
 *   - a page is free when no block in use and no continuation overlaps
 *     it (Note [Purging free memory] in daemon/gc/purge.c).
 * Measured: a heap of objects of 16 to 128 KiB at random held one whole
 * segment per object, and each cost its mutator a round trip. */
#define LAYOUT_NCLASSES HEAPD_OBJ_NCLASSES_
#define LAYOUT_CLASS_RUN (LAYOUT_NCLASSES - 1)
#define LAYOUT_RUN_GRANULE 1024u
#define LAYOUT_MARK_CONT 255u
/* Note [Young objects] in proto/young.h */
#define LAYOUT_MARK_YOUNG HEAPD_OBJ_MARK_YOUNG_
#define LAYOUT_POISON 0xdbu    /* the byte a freed block is filled with */
#define LAYOUT_MIN_BLOCK HEAPD_OBJ_MIN_BLOCK_
#define LAYOUT_MAX_SMALL 16384u

extern const uint32_t layout_class_size[LAYOUT_NCLASSES];

/* The class for an object of SIZE bytes (16 <= SIZE <= LAYOUT_MAX_SMALL,
 * a multiple of 8).  Most objects are small: their class is computed in
 * line, the others' out of the allocation's fast path. */
static inline unsigned layout_size_class(uint32_t size)
{
    return heapd_obj_class_(size);
}

/* Largest object size that goes to a small segment of this size: at least
 * 4 blocks per segment (16 KiB with the default 128 KiB segments).  Larger
 * objects go to the run class up to layout_run_max, and beyond it get a
 * run of whole segments of their own. */
uint32_t layout_small_max(uint64_t segment_size);
/* Largest object size (header included) the run class holds in a
 * segment of this size (Note [Runs]). */
uint32_t layout_run_max(uint64_t segment_size);

/* The bytes the block IDX of NBLOCKS, whose marks are MARKS, of a small
 * segment of class CLS spans: its class's size, or in the run class the
 * granule times it and the continuation marks that follow it (Note
 * [Runs]). */
static inline uint64_t layout_block_span(const uint8_t *marks, uint32_t idx,
                                         uint32_t nblocks, unsigned cls)
{
    if (cls != LAYOUT_CLASS_RUN)
        return layout_class_size[cls];
    uint32_t k = idx + 1;
    while (k < nblocks &&
           __atomic_load_n(&marks[k], __ATOMIC_RELAXED) == LAYOUT_MARK_CONT)
        k++;
    return (uint64_t)(k - idx) * LAYOUT_RUN_GRANULE;
}
/* Is MARK that of an object's first block (a young one included)? */
static inline bool layout_mark_in_use(uint8_t mark)
{
    return mark != 0 && mark != LAYOUT_MARK_CONT;
}
/* Is MARK an epoch: a shared object's first block? */
static inline bool layout_mark_is_epoch(uint8_t mark)
{
    return mark != 0 && mark < LAYOUT_MARK_YOUNG;
}

/* ---- segments (Note [Segments]) ---- */

enum layout_seg_kind {
    LAYOUT_SEG_BLANK = 0,   /* granted, not yet formatted by its owner */
    LAYOUT_SEG_SMALL = 1,
    LAYOUT_SEG_LARGE = 2,
};

struct layout_segment {
    uint32_t kind;          /* enum layout_seg_kind (advisory) */
    uint32_t size_class;    /* valid once kind is SMALL (Note [Segments]) */
    uint64_t large_bytes;   /* large: bytes of the whole run */
    uint64_t reserved[6];
    /* marks[] start at LAYOUT_SEG_MARKS */
};
#define LAYOUT_SEG_MARKS 64u
#define LAYOUT_LARGE_OBJECT 128u /* offset of a large object's block */
/* The end of the user address space (47 bits): every heap is below it. */
#define LAYOUT_USER_SPACE_END UINT64_C(0x800000000000)

static inline uint8_t *layout_seg_marks(void *seg)
{
    return (uint8_t *)seg + LAYOUT_SEG_MARKS;
}

/* Geometry of a small segment of class CLS: block count and the offset of
 * block 0 (16-aligned, past the marks).  Same on both sides. */
void layout_small_geometry(uint64_t segment_size, unsigned cls,
                           uint32_t *nblocks, uint32_t *first_block);

/* Dividing by a class size by multiplying (Note [Segments]): MAGIC is
 * layout_block_magic(class size).  layout_small_block gives the index of
 * the block whose object a reference at offset OFF from the start of a
 * small segment points to, or UINT32_MAX when OFF is no block's object.
 * The multiply is exact wherever OFF is a block's object, because offsets
 * are below 2^32 (LAYOUT_MAX_SEGMENT_SIZE); elsewhere it may be one off,
 * and the check of idx * bs rejects it.  Daemon and clients both use it. */
static inline uint64_t layout_block_magic(uint32_t bs)
{
    return (UINT64_C(1) << 32) / bs + 1;
}
static inline uint32_t layout_small_block(uint64_t off, uint32_t first,
                                          uint32_t nblocks, uint32_t bs,
                                          uint64_t magic)
{
    if (off < (uint64_t)first + LAYOUT_WORD)
        return UINT32_MAX;
    uint64_t b = off - LAYOUT_WORD - first;
    uint32_t idx = (uint32_t)((b * magic) >> 32);
    return (uint64_t)idx * bs == b && idx < nblocks ? idx : UINT32_MAX;
}

/* ---- mutator slots and the stop protocol ----
 *
 * Note [Mutator slots]
 * ~~~~~~~~~~~~~~~~~~~~
 * Each attached mutator (one thread of one client) has a slot: an index
 * the daemon hands out on attach and takes back on detach or when the
 * client's connection closes, and the slot's words, struct layout_mutator
 * followed by the mutator's root stack (LAYOUT_MAX_ROOTS references).
 * The words live in the client's control memory (Note [Client control
 * memory]), not in the heap: only the client and the daemon map them.  In
 * between attach and detach the mutator writes its slot, except for the
 * words the daemon owns: `urs_tail` and `urs_wake` (Note [Update
 * remembered set]); and the stack words, which either side may take (Note
 * [Stack marking handshake]) and which the snapshot resets.  The words
 * are grouped on cache lines by writer (see struct layout_mutator).
 * `status` is the futex word of the stop protocol (Note [Stop the world],
 * daemon/gc/safepoint.c): its low 2 bits are the mutator's state and the
 * rest the last stop generation it acknowledged, so that a state change
 * and an acknowledgement are one atomic store and one futex wake, and the
 * daemon can never miss either.
 *
 * Note [Client control memory]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A mutator client's slots are in a memfd of its own, which the daemon
 * creates at the handshake (max_mutators_per_client regions of
 * LAYOUT_MUTATOR_BYTES, sparse, sealed against shrinking and growing so
 * that the daemon never faults on a page that vanished) and sends with
 * the Welcome; the client maps it anywhere (nothing in the heap points
 * into it).  Attach names the region of that memfd the slot uses; the
 * daemon maps the region over the slot's window of its own (a reserved
 * range per heap, one window per slot); a freed slot's region stays
 * mapped, its pages given back, until the next attach maps another over
 * it (Note [Slot windows] in daemon/gc/slotmem.c), so a collector thread
 * never faults on a slot that was just freed.  So no client can read or write
 * another client's slots, root stacks or URS rings (before, a client that
 * wrote into other slots' root depths and ring heads made four clients
 * lose their lists).  What a client writes there is its own damage, and
 * the daemon reads it as untrusted input: a root depth beyond
 * LAYOUT_MAX_ROOTS, a capture beyond LAYOUT_MAX_CAPTURED, a ring head
 * more than LAYOUT_URS_SIZE ahead of the tail or behind it, a status of FREE on an attached slot or an ack of a
 * stop the daemon never raised, or more bytes
 * allocated than its client was ever granted in segments makes the daemon
 * disconnect the client and count it (clients_disconnected); meanwhile
 * the daemon uses the bound instead (it marks what the stack and the ring
 * can hold, counts the slot as stopped, counts the granted bytes) and
 * never waits for the slot because of them.  A young slot's bytes
 * allocated may honestly pass its grants: a young mutator keeps its
 * segments and allocates again, with no grant in between, the blocks its
 * minor collections and the daemon's sweeps free in them (Note [Young
 * segments] in client/minor.c; the shared map's young run passed its
 * grants within a second).  So for a young slot the daemon uses the bound
 * and does not disconnect the client.  Two young words are hints no value
 * of which is a fault: young_promoting set for good leaves the slot's
 * stack handshake to the final sync's pause (and lets the verifier accept
 * a young object under a promoted one on that slot's path only), and
 * young_held_bytes counts, summed over the young slots, for no more than
 * the heap's OWNED segments hold (Note [Young memory and the heap goal]
 * in daemon/gc/collector.c).
 */
enum layout_mut_state {
    LAYOUT_MUT_FREE = 0,     /* no mutator */
    LAYOUT_MUT_RUNNING = 1,  /* may touch the heap; must poll safepoints */
    LAYOUT_MUT_BLOCKED = 2,  /* in a blocking region: never touches the heap */
    LAYOUT_MUT_WAITING = 3,  /* waiting inside a write barrier: touches
                                nothing until it leaves, holds up a
                                snapshot (Note [Waiting in a barrier]) */
};
#define LAYOUT_STATUS(gen, state) ((uint32_t)(gen) << 2 | (uint32_t)(state))
#define LAYOUT_STATUS_STATE(s) ((s) & 3u)
#define LAYOUT_STATUS_GEN(s) ((s) >> 2)
#define LAYOUT_GEN_MASK 0x3fffffffu
/* A stop's kind is the parity of its generation, so that a mutator reads
 * both in one load of its slot's stop_request: odd for a snapshot, even for a final
 * sync (Note [Waiting in a barrier] in daemon/gc/safepoint.c). */
static inline bool layout_stop_is_snapshot(uint32_t gen)
{
    return (gen & 1u) != 0;
}

/* What a stalled mutator has not answered (Note [Stalls] in
 * daemon/stall.c), and the reason an evicted slot gives its mutator (Note
 * [Evicted clients] in daemon/stall.c). */
enum layout_stall_on {
    LAYOUT_STALL_NONE = 0,
    LAYOUT_STALL_SNAPSHOT = 1,   /* the stop of a snapshot */
    LAYOUT_STALL_FINAL_SYNC = 2, /* the stop of a final sync */
    LAYOUT_STALL_HANDSHAKE = 3,  /* the stop of a final sync, while it
                                    holds its stack-marking handshake */
    LAYOUT_STALL_REMARK = 4,     /* a remark request to its client */
};

/* What a mutator stalled on, as the rest of a sentence ("... has not
 * acknowledged the snapshot's stop"), for the daemon's log and
 * libheapd's abort message alike. */
const char *layout_stall_what(enum layout_stall_on on);

#define LAYOUT_URS_SIZE 8192 /* entries in a mutator's URS ring (64 KiB) */
/* An URS entry with this bit set is a reference a C stack capture holds
 * (Note [Marking C stack captures last] in daemon/gc/mark.c); a
 * reference is 8-aligned, so the bit is free. */
#define LAYOUT_URS_CAPTURED 1u
/* An URS entry with this bit set begins a save record: the object (this
 * entry, the bit aside), then its reference count n, then its n fields as
 * they were at the snapshot, published together (Note [Saving under the
 * barrier] in client/barrier.c). */
#define LAYOUT_URS_SAVED 2u
#define LAYOUT_URS_RECORD 2u /* entries of a save record besides fields */
/* A save record's count word with LAYOUT_URS_CHUNK is a chunk of a wide
 * object's record (count | CHUNK, the ring position its first chunk
 * began at, the chunk's first field, its fields); with LAYOUT_URS_COMMIT
 * it commits the chunks that began at the position it holds. */
#define LAYOUT_URS_CHUNK (UINT64_C(1) << 62)
#define LAYOUT_URS_COMMIT (UINT64_C(1) << 61)
#define LAYOUT_URS_CHUNK_HEAD 4u     /* entries of a chunk besides fields */
#define LAYOUT_URS_CHUNK_FIELDS 1024u /* fields of a chunk, at most */

struct layout_mutator {
    /* Words are grouped by who writes them, one cache line per group, so
     * that the daemon consuming a ring or marking a stack never steals the
     * line a running mutator writes on every allocation or root change. */
    _Atomic uint32_t status;        /* futex word, see the Note */
    uint32_t slot_epoch;            /* attach count of this region */
    uint64_t client_id;             /* daemon: owner connection */
    /* daemon, read by the mutator at every safepoint */
    alignas(64) _Atomic uint32_t stop_request; /* futex: the stop gen
                                       asked of this slot, 0 = none (Note
                                       [Stop the world]) */
    _Atomic uint32_t evicted;       /* enum layout_stall_on: the daemon
                                       evicted this client for it (Note
                                       [Evicted clients]); 0 = no */
    _Atomic uint64_t evicted_after_ms; /* how long it had stalled */
    /* mutator, often */
    alignas(64) _Atomic uint64_t alloc_bytes; /* bytes allocated in the
                                                 shared heap (promoted ones
                                                 too), monotonic */
    _Atomic uint64_t root_depth;    /* root slots in use */
    _Atomic uint64_t urs_head;      /* URS entries written, ever */
    void *_Atomic pending_root;     /* a root being pushed while the stack
                                       grows (a safepoint): a root too */
    /* Note [Stack marking handshake]: once per cycle, by either side */
    alignas(64) _Atomic uint32_t stack_marking; /* epoch of the taker */
    _Atomic uint32_t stack_marked;  /* futex: epoch the stack was marked in */
    /* Note [Minor collections in slices] in client/minor.c: nonzero while
     * the mutator has promotions under way; heapd then leaves a running
     * mutator's stack handshake to the mutator */
    _Atomic uint32_t young_promoting;
    /* Note [C locals are roots] in client/stack_roots.c: the objects the
     * thread's stack and registers pointed into when it last stopped for
     * a snapshot or blocked, at layout_mutator_captured */
    _Atomic uint64_t captured_n;
    /* statistics only, which the daemon reads and never trusts: captures
     * whose stack could not be scanned (a heapd call on another stack),
     * and captures that filled the area and dropped the rest */
    _Atomic uint64_t capture_unscanned;
    _Atomic uint64_t capture_overflows;
    /* Note [Young objects]: the mutator's young generation, written by
     * the mutator at its minor collections and promotions; statistics,
     * which the daemon reads and never trusts, and a pacing hint */
    alignas(64) _Atomic uint64_t young_minor;   /* minor collections */
    _Atomic uint64_t young_promoted_age;    /* bytes promoted by age */
    _Atomic uint64_t young_promoted_pub;    /* bytes promoted by a store */
    _Atomic uint64_t young_pause_max_ns;    /* longest minor pause */
    _Atomic uint64_t young_pause_total_ns;  /* all of them together */
    /* the hint: the bytes of the segments the young generation holds now
     * (its young segments and its spares), kept out of the heap's goal,
     * bounded by the segments clients hold (Note [Young memory and the
     * heap goal] in daemon/gc/collector.c) */
    _Atomic uint64_t young_held_bytes;
    /* Note [Update remembered set]: the daemon's side of the ring */
    alignas(64) _Atomic uint64_t urs_tail; /* entries consumed, ever */
    _Atomic uint32_t urs_wake;      /* futex: bumped when the tail moves */
    alignas(64) void *_Atomic urs[LAYOUT_URS_SIZE];
    /* the root stack follows, at LAYOUT_MUTATOR_ROOTS */
};

/* A mutator's region of its client's control memory (Note [Client control
 * memory]): the slot's words, then LAYOUT_MAX_ROOTS root references, then
 * LAYOUT_MAX_CAPTURED captured ones (a 1 MiB stack's worth of distinct
 * objects). */
#define LAYOUT_MAX_ROOTS (1u << 19)
#define LAYOUT_MAX_CAPTURED (1u << 17)
#define LAYOUT_MUTATOR_ROOTS                                                 \
    ((sizeof(struct layout_mutator) + 4095u) & ~(size_t)4095u)
#define LAYOUT_MUTATOR_CAPTURED                                              \
    (LAYOUT_MUTATOR_ROOTS + (size_t)LAYOUT_MAX_ROOTS * sizeof(void *))
#define LAYOUT_MUTATOR_BYTES                                                 \
    (LAYOUT_MUTATOR_CAPTURED + (size_t)LAYOUT_MAX_CAPTURED * sizeof(void *))

static inline void *_Atomic *layout_mutator_roots(struct layout_mutator *m)
{
    return (void *_Atomic *)((uint8_t *)m + LAYOUT_MUTATOR_ROOTS);
}

static inline void *_Atomic *layout_mutator_captured(struct layout_mutator *m)
{
    return (void *_Atomic *)((uint8_t *)m + LAYOUT_MUTATOR_CAPTURED);
}

/* ---- global roots (named static objects) ----
 *
 * Note [Global roots]
 * ~~~~~~~~~~~~~~~~~~~
 * (After GHC's Note [Static objects under the nonmoving collector].)  A
 * heap has a table of named global roots.  Only the daemon creates and
 * deletes entries (on a GlobalClaim or GlobalDelete, so that two
 * processes can never create the same name twice).  An entry is:
 *   EMPTY         unused;
 *   SET           value is NULL or a reference, a root of every cycle;
 *   INITIALIZING  heapd_global_once is running init in client `owner`;
 *                 value is the blackhole, an object that client allocated
 *                 in the shared heap, so the entry is a root like any other
 *                 and the daemon never needs to know what init is doing;
 *   RELEASED      the initialiser left (or init failed): the next caller
 *                 of heapd_global_once claims it and runs init again.
 * Every change of `state` bumps `wake`, the futex word waiters sleep on.
 *
 * Who writes what.  An entry's name, state, wake and owner (struct
 * layout_global) are in the daemon's page, read-only to every client
 * (Note [The daemon's page]); only its value, global_values[i], is in
 * client-writable memory, and a mutator reads and writes it directly.  The
 * daemon keeps a record of each entry (struct heap_global in daemon/gc/heap.h)
 * and writes the shared words from it, under the heap lock.  Were they
 * writable, one stored INITIALIZING made every heapd_global_once caller
 * wait for ever, and one stored owner made another client's leave release
 * an init still running (both observed; now the store faults in the
 * writer, tests/test_isolation.c).
 *
 * Ending init is a request.  The initialiser stores its result (or NULL)
 * into the value and sends GlobalInitDone; the daemon takes it only from
 * the client its record names as the initialiser (anyone else gets
 * ERROR_BAD_REQUEST, counted in globals_init_refused), makes the entry SET
 * (RELEASED, value NULL, if init failed), bumps `wake` and wakes the
 * waiters.  When a client leaves, the entries the record says it was
 * initialising become RELEASED the same way.
 *
 * Waiting is bounded.  A heapd_global_once caller that finds an entry
 * INITIALIZING sleeps on `wake` for at most 10 ms, then 20, 40, ... up to
 * 1 s; each time that passes with no change it sends GlobalClaim(once),
 * which the daemon answers from its record: WAIT while the client it
 * granted init to is still running it, READY if the entry is SET,
 * INITIALIZE if nobody initialises it.  So a waiter never rests on one
 * futex wake alone.  heapd_global_set answers -EBUSY for an entry that is
 * INITIALIZING.
 *
 * Deleting.  heapd_global_delete asks the daemon, which refuses an
 * INITIALIZING entry (-EBUSY) and empties any other one: state EMPTY,
 * name, value and owner cleared, its record freed.  An emptied entry is
 * not given to a new name before the next snapshot, and heapd_global_set
 * checks that its entry still has its name after its last safepoint and
 * before its store: every mutator is stopped at a safepoint during a
 * snapshot, so a store meant for a deleted global never lands in the
 * entry's next tenant.  While marking, the old value must not be lost:
 * the client cannot log it, since between its check of the phase and the
 * daemon's store lies the request's blocking region, through which a
 * snapshot can pass.  So the daemon, holding the heap lock, looks at the
 * entry's mark: if the cycle's root marking has not taken it yet, it
 * runs that root marking first (mark_roots takes each root once a
 * cycle); if it has, the value now was stored during marking, and every
 * value it replaced was logged by its writer's barrier.  The object
 * itself lives on while anything else references it.
 *
 * Marking treats the value of each entry that the daemon's record says is
 * SET or INITIALIZING as a root, and validates it like any reference it
 * reads.  Its per-entry mark is a static flag, kept in the daemon's record
 * alone, compared with the heap's flag that flips every cycle (GHC's
 * bump_static_flag): an entry is marked this cycle iff its flag equals the
 * heap's, so no pass ever clears the flags; an entry created during
 * marking starts with the current flag (black), and a value overwritten
 * during marking goes through the write barrier.
 */
#define LAYOUT_MAX_GLOBALS 256
#define LAYOUT_LIVE_CLIENTS 1024 /* Note [Live clients] */
#define LAYOUT_GLOBAL_NAME 64 /* bytes, NUL included */

enum layout_global_state {
    LAYOUT_GLOBAL_EMPTY = 0,
    LAYOUT_GLOBAL_SET = 1,
    LAYOUT_GLOBAL_INITIALIZING = 2,
    LAYOUT_GLOBAL_RELEASED = 3,
};

/* The daemon's words of a global, in the daemon's page; the value is
 * control->global_values[index], which clients write. */
struct layout_global {
    char name[LAYOUT_GLOBAL_NAME];   /* "" when EMPTY */
    _Atomic uint32_t state;          /* enum layout_global_state */
    _Atomic uint32_t wake;           /* futex: bumped on every state change */
    uint64_t owner;                  /* INITIALIZING: the client running init */
};

/* Phases of a collection cycle, stored in control->phase. */
enum layout_phase {
    LAYOUT_PHASE_IDLE = 0,
    LAYOUT_PHASE_MARK = 1,
    LAYOUT_PHASE_SWEEP = 2,
};

struct layout_control {
    /* identity and geometry: written once, before any client maps */
    uint64_t magic;
    uint32_t layout_version;
    uint32_t header_bytes;        /* sizeof(struct layout_control) */
    uint64_t base;
    uint64_t max_size;
    uint64_t segment_size;
    uint32_t control_segments;    /* segments taken by the control area */
    uint32_t segment_count;       /* max_size / segment_size */
    char heap_name[64];
    /* 0, or LAYOUT_POISON when freed blocks are filled with it (a heap
     * that verifies): what frees a block -- the daemon's sweep, a minor
     * collection -- fills it first.  Written by the daemon when it opens
     * the heap, before it answers any client. */
    _Atomic uint32_t poison;

    /* collector state, shared with running mutators */
    alignas(64) _Atomic uint32_t epoch;  /* Note [Epoch-tagged marks] */
    _Atomic uint32_t phase;              /* enum layout_phase */
    /* the most segments a large run of the heap has had: Note [The
     * longest large run] */
    _Atomic uint32_t large_run_max;
    /* the epoch of the cycle a save runs in, or 0 (Note [Saving under the
     * barrier] in client/barrier.c); in the padding before globals[], so
     * a client of an earlier release finds every word where it was */
    _Atomic uint32_t save_epoch;

    /* the global roots' names, states and owners (Note [Global roots]) */
    alignas(64) struct layout_global globals[LAYOUT_MAX_GLOBALS];

    /* the clients heapd counts alive: Note [Live clients] */
    alignas(64) _Atomic uint32_t live_gen;
    _Atomic uint64_t live_id_max;   /* the highest id ever listed */
    alignas(64) _Atomic uint64_t live[LAYOUT_LIVE_CLIENTS];

    /* the end of the daemon's page (Note [The daemon's page]): clients
     * write from here on */
    alignas(LAYOUT_DAEMON_BYTES) void *_Atomic
        global_values[LAYOUT_MAX_GLOBALS];
};

_Static_assert(sizeof(struct layout_control) <= LAYOUT_CONTROL_BYTES,
               "control area outgrew LAYOUT_CONTROL_BYTES");
_Static_assert(offsetof(struct layout_control, global_values) ==
                   LAYOUT_DAEMON_BYTES,
               "the daemon's page holds exactly the daemon's words");

/* Note [The longest large run]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Only a large run's first segment has a header: its later ones hold the
 * object's bytes.  So a client resolving an address in a segment with no
 * header it knows (Note [Resolving an interior pointer] in client/stack.c)
 * reads the headers of the segments before it, for a large run that
 * covers it, as far back as the longest run may reach.  large_run_max, in
 * the daemon's page, says how far that is: the most segments of any
 * large run the heap has had, a high-water mark the daemon raises before
 * it answers the grant of a longer run (seg_grant_large), kept with the
 * heap across restarts as the whole page is (Note [Heaps across
 * restarts]).  A client can hold an address in a run only after the
 * run's grant, so it reads a bound at least that long.  Bounded by the largest object
 * instead (18,433 segments of 128 KiB), one stale stack word in a free
 * segment read that many punched headers, committing a page of each: in
 * the shared map's benchmark 18,433 to 55,299 segments punched again by
 * the daemon and a 40 ms stop per run, where its largest run is none.
 * No client can write the daemon's page, so none can shorten another's
 * walk. */

/* Note [Live clients]
 * ~~~~~~~~~~~~~~~~~~~~
 * live[] in the daemon's page lists the ids of the clients of the heap
 * heapd counts alive: a client is in it from before its Welcome is sent
 * until it leaves (Note [Client lifecycle] in daemon/session.c: Goodbye,
 * its socket's close, a stall's eviction), and across a restart of heapd
 * while it is kept (Note [Resuming clients] in daemon/resume.c); the
 * heapd that takes a heap back clears every id it does not keep before
 * it answers anyone.  An entry is one word, an id or 0, written by the
 * daemon only, under heap->lock; live_gen is bumped after every id that
 * leaves, and sleepers on it are woken.  So a client that finds another's
 * id missing knows heapd has seen that client gone for good: what it held
 * in the heap for others (a queue's lease, Note [Leased delivery] in
 * client/collections/queue.c) may be taken back, and a client may sleep
 * on live_gen to learn of a death the moment heapd does.  Ids are never
 * reused: live_id_max keeps the highest one listed, and a heapd taking
 * the heap back gives new clients ids above it, so a client that died
 * around a restart cannot look alive in a newcomer.  No client
 * can write the page, so none can make another look dead.  A heap has
 * room for LAYOUT_LIVE_CLIENTS ids, as many as the live table keeps
 * (TABLE_CLIENTS); a client that finds its own id missing was not listed
 * and is told so by what needs the listing.  A scan of the 8 KiB for an
 * id that is not there costs 0.38 us here (cached); only a client looking
 * for a dead owner makes one. */

/* Is client ID listed alive in C's daemon's page (Note [Live clients])? */
static inline bool layout_client_alive(const struct layout_control *c,
                                       uint64_t id)
{
    for (unsigned i = 0; id && i < LAYOUT_LIVE_CLIENTS; i++)
        if (atomic_load_explicit(&c->live[i], memory_order_acquire) == id)
            return true;
    return false;
}

/* Segments the control area occupies for a given segment size. */
static inline uint32_t layout_control_segments(uint64_t segment_size)
{
    return (uint32_t)((LAYOUT_CONTROL_BYTES + segment_size - 1) / segment_size);
}

/* Epochs rotate through 1..239 (Note [Epoch-tagged marks]): a young
 * object's header tag is LAYOUT_YOUNG_TAG or above (Note [Young objects]
 * in proto/young.h), a shared object's 0 or an epoch. */
#define LAYOUT_EPOCHS 239u
#define LAYOUT_YOUNG_TAG HEAPD_OBJ_YOUNG_TAG_
_Static_assert(LAYOUT_EPOCHS < LAYOUT_YOUNG_TAG &&
                   LAYOUT_YOUNG_TAG + 8u < LAYOUT_MARK_YOUNG &&
                   LAYOUT_MARK_YOUNG < LAYOUT_MARK_CONT,
               "no epoch is a young tag, a young or a continuation mark");
static inline uint32_t layout_next_epoch(uint32_t e)
{
    return e % LAYOUT_EPOCHS + 1u;
}
static inline uint32_t layout_prev_epoch(uint32_t e)
{
    return e == 1 ? LAYOUT_EPOCHS : e - 1u;
}

/* Check a mapped control area against the geometry the daemon announced.
 * Returns 0, or -EPROTO for a bad magic, -EPROTONOSUPPORT for another
 * layout version, -EINVAL for a geometry that disagrees.  Used by the client
 * before it touches anything else in the heap (Note [Heap mapping]). */
int layout_check_control(const struct layout_control *c, uint64_t base,
                         uint64_t max_size, uint64_t segment_size);

/* Fill a fresh control area (daemon side): C must be zeroed memory (a new
 * memfd); only the identity and geometry are written. */
void layout_init_control(struct layout_control *c, const char *heap_name,
                         uint64_t base, uint64_t max_size,
                         uint64_t segment_size);

#endif
