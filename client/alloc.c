/* libheapd allocation: the per-mutator fast path, large objects, and the
 * object accessors.  The segment reserve is client/reserve.c.
 *
 * Note [Allocation fast path]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A mutator owns one current segment per size class.  heapd_alloc rounds
 * the size to its class and, if that segment's cursor is inside its
 * free run (Note [Free runs]: the block there is free) and nothing needs
 * the mutator's attention (a safepoint, a stop, a remark request, an
 * eviction, a dead daemon, a fork, a minor collection due), sets the
 * block's mark to the current epoch (allocate black, Note [Epoch-tagged
 * marks]; a young mutator's, to LAYOUT_MARK_YOUNG), writes its header,
 * zeroes the object (Note [Zeroing an object]) and returns (for a young
 * mutator, heapd.h does the same in the program's code: Note [Inline
 * allocation fast path] there): no lock, no
 * system call, no message, and no call but the jump that ends it for an
 * object over ALLOC_ZERO_INLINE_MAX bytes, so that this path needs few
 * callee-saved registers; everything else (the poll, the run's end) is
 * alloc_general's, which scans the mark bytes from the cursor for the
 * next free run: in a fresh segment that is the rest of it, in a segment
 * swept while its owner held it, the next hole.
 * heapd_alloc begins at a cache line: the same code 16 bytes
 * past one, where an unrelated change had moved it, took 18.8 ns for
 * 256 B young against 17.3 (alloc_bench, 4 runs each, interleaved).
 * Only when the segment is exhausted does the mutator hand it back and
 * take another from the client's reserve: a partly free one of its
 * class, already formatted
 * (Note [Reusing partly free segments] in daemon/gc/segment.c), or a blank
 * one, writing its class into the header before the first block is used
 * (Note [Segments]).  Full segments go back RETURN_BATCH at a
 * time in one SegmentReturn, without waiting, and always before a request
 * that waits, so that the daemon's count of what the client holds is never
 * staler than one batch.  Whether sent yet or not, a full segment is swept
 * like any other: its owner is stopped during a cycle.  The reserve
 * is refilled in the background when it runs low (Note [Reserve sizing]
 * in client/reserve.c); a mutator that finds it
 * empty asks the daemon itself, inside a blocking region, so that it never
 * holds up a stop while it waits (Note [Segment supply]).
 * Objects larger than the largest small class get a run of segments of
 * their own, one round trip each.
 * The safepoint is polled on entry, before the new object exists: the new
 * object is safe until the caller's next safepoint (Note [Client GC
 * discipline] in heapd.h).
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "alloc.h"
#include "barrier.h"
#include "checked.h"
#include "client.h"
#include "errors.h"
#include "heapd.h"
#include "layout.h"
#include "minor.h"
#include "mutator.h"
#include "remark.h"
#include "reserve.h"
#include "runtime.h"
#include "tsan.h"

/* The fast path's objects: fewer than ALLOC_FAST_FIELDS references and
 * than 4 * ALLOC_FAST_FIELDS bytes, small in every segment size
 * (alloc_client_init checks); heapd.h's inline path's too. */
#define ALLOC_FAST_FIELDS HEAPD_FAST_ALLOC_FIELDS_

/* Note [Zeroing an object]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~
 * Every object is zeroed when it is allocated, but for its header's
 * word, which the allocation writes.  Up to ALLOC_ZERO_INLINE_MAX bytes,
 * heapd_alloc stores an immediate 0 word by word, in line.  Larger
 * objects are zeroed by alloc_zero_payload, which heapd_alloc's fast
 * path jumps to last, its frame gone, so that the fast path keeps few
 * callee-saved registers (Note [Allocation fast path]).  It runs
 * heapd.h's heapd_zero_, the inline path's loop: 32 bytes at a time from
 * the payload's start where the CPU has AVX2 (a version chosen when the
 * library is loaded), 16 bytes elsewhere; memset beyond ZERO_LOOP_MAX.
 * Stores aligned to 32 bytes, which never span two lines, took longer
 * (the function's path, 256 B 10.3 against 10.0 ns, 128 B 8.1 against
 * 7.8, 4 runs each).  Zeroing is most of the cost of a young 256-byte
 * object: its block was last written a nursery ago, out of the L1 and
 * L2 caches.  Measured (alloc_bench's loop, young, ring of 1000, 3 runs
 * each interleaved): 256 B 13.0-13.3 -> 10.3-10.5 ns, 128 B 9.7-9.9 ->
 * 8.3-8.4 ns, 64 B 7.0 -> 6.8 ns, and 16 B, whose path gained a test,
 * 5.4 -> 5.6-5.8 ns.  64-byte AVX-512 stores gained nothing at 256 B
 * and lost 0.5 ns at 64 B.
 * The inline path (Note [Inline allocation fast path] in heapd.h) first
 * prefetches for writing the lines of the object's size four objects
 * ahead (heapd_prefetch_ahead_), for objects of 33 to 512 bytes, so that
 * the zeroing's stores find their lines on the way: where the zeroing's
 * store took 44 % of alloc_bench's young loop at 256 B, 256 B went from
 * 15.0-15.6 to 11.7-12.2 ns and 64 B from 6.6-6.7 to 5.3-5.5 (3 runs
 * each, interleaved).  The function's own path does not prefetch.
 */

/* Objects up to this size are zeroed in line (Note [Zeroing an object]). */
#define ALLOC_ZERO_INLINE_MAX 64u
/* alloc_zero_payload's loop up to this size, memset beyond */
#define ZERO_LOOP_MAX 512u

/* Zero the words of the object of SIZE bytes at block B past its header
 * (SIZE a multiple of 8, at most ALLOC_ZERO_INLINE_MAX). */
static inline void alloc_zero_words(uint8_t *b, uint64_t size)
{
    uint64_t *w = (uint64_t *)b;
    switch (size / LAYOUT_WORD) {
    case 8: w[7] = 0; /* fall through */
    case 7: w[6] = 0; /* fall through */
    case 6: w[5] = 0; /* fall through */
    case 5: w[4] = 0; /* fall through */
    case 4: w[3] = 0; /* fall through */
    case 3: w[2] = 0; /* fall through */
    case 2: w[1] = 0; /* fall through */
    default: break;
    }
}

/* Zero object OBJ's fields and bytes, the SIZE - LAYOUT_WORD bytes after
 * its header (SIZE over ALLOC_ZERO_INLINE_MAX); returns OBJ, so that
 * heapd_alloc can end in a jump to it (Note [Zeroing an object]).  Built
 * twice, for plain x86-64 (16-byte stores) and for AVX2 (32-byte ones). */
static inline __attribute__((always_inline)) void *
zero_payload(void *obj, uint64_t size)
{
    uint8_t *b = obj, *end = b - LAYOUT_WORD + size;
    assert(size > ALLOC_ZERO_INLINE_MAX);
    if (size > ZERO_LOOP_MAX)
        memset(b, 0, (size_t)(end - b));
    else
        heapd_zero_(b, end);
    return obj;
}

static __attribute__((noinline)) void *zero_payload_x86_64(void *obj,
                                                           uint64_t size)
{
    return zero_payload(obj, size);
}

static __attribute__((noinline, target("avx2"))) void *
zero_payload_avx2(void *obj, uint64_t size)
{
    return zero_payload(obj, size);
}

/* The one for this CPU, chosen when the library is loaded: an ifunc's
 * resolver would run before a sanitizer's runtime is ready. */
static void *(*alloc_zero_payload)(void *obj,
                                   uint64_t size) = zero_payload_x86_64;

__attribute__((constructor)) static void alloc_zero_pick(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        alloc_zero_payload = zero_payload_avx2;
}

bool alloc_cpu_has_ymm(void)
{
    return alloc_zero_payload == zero_payload_avx2;
}

void alloc_client_init(heapd_client *c)
{
    c->segment_size = c->ctl->segment_size;
    c->seg_shift = (unsigned)__builtin_ctzll(c->segment_size);
    c->small_max = layout_small_max(c->segment_size);
    assert(layout_object_size(ALLOC_FAST_FIELDS - 1,
                              4 * ALLOC_FAST_FIELDS - 1) <= c->small_max);
    /* Note [Runs]: the run class where it holds more than the others */
    c->run_max = layout_run_max(c->segment_size) > c->small_max
                     ? layout_run_max(c->segment_size)
                     : 0;
    c->first_segment = layout_control_segments(c->segment_size);
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++) {
        layout_small_geometry(c->segment_size, k, &c->small_nblocks[k],
                              &c->small_first[k]);
        c->small_magic[k] = layout_block_magic(layout_class_size[k]);
    }
    reserve_init(c);
    hd_mutex_init(&c->mutators_mu);
    hd_mutex_init(&c->roots_mu);
}

/* ---- small objects ---- */

static void release_current(heapd_mutator *m, unsigned cls)
{
    struct alloc_seg *s = &m->cur[cls];
    if (s->index) {
        /* a young segment with a young block in it stays (Note [Young
         * segments] in client/minor.c) */
        if (young_leave_segment(m, s->index))
            reserve_give_back(m->c, &s->index, 1, false);
        memset(s, 0, sizeof *s);
    }
}

void alloc_release_current(heapd_mutator *m)
{
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++)
        release_current(m, k);
}

void alloc_release_all(heapd_mutator *m)
{
    uint32_t segs[LAYOUT_NCLASSES];
    size_t n = 0;
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++) {
        if (m->cur[k].index)
            segs[n++] = m->cur[k].index;
        memset(&m->cur[k], 0, sizeof m->cur[k]);
    }
    reserve_give_back(m->c, segs, n, true);
}

void alloc_seg_view(const heapd_client *c, uint32_t idx, unsigned cls,
                    struct alloc_seg *out)
{
    uint8_t *seg = client_seg_addr(c, idx);
    memset(out, 0, sizeof *out);
    out->marks = layout_seg_marks(seg);
    out->blocks = seg + c->small_first[cls];
    out->nblocks = c->small_nblocks[cls];
    out->block_size = layout_class_size[cls];
    out->index = idx;
    out->cls = (uint8_t)cls;
}

void alloc_install(heapd_mutator *m, unsigned cls, uint32_t idx,
                   bool formatted)
{
    heapd_client *c = m->c;
    struct alloc_seg *s = &m->cur[cls];
    release_current(m, cls);
    uint8_t *seg = client_seg_addr(c, idx);
    struct layout_segment *hd = (struct layout_segment *)seg;
    /* a partly free segment is formatted for CLS already, its live blocks
     * marked (Note [Reusing partly free segments] in daemon/gc/segment.c);
     * a blank one gets the class, then the kind that makes it valid,
     * before any block (Note [Segments]); the prefault thread reads the
     * kind too (Note [Pre-faulting]) */
    if (!formatted) {
        __atomic_store_n(&hd->size_class, cls, __ATOMIC_RELAXED);
        __atomic_store_n(&hd->kind, LAYOUT_SEG_SMALL, __ATOMIC_RELEASE);
    }
    alloc_seg_view(c, idx, cls, s);
    remark_recheck(m); /* Note [Remark requests] in client/remark.c */
}

/* The current segment of CLS is exhausted: move on to a fresh one (a
 * young mutator: one of its young segments with room, if it has one). */
static int next_segment(heapd_mutator *m, unsigned cls)
{
    uint32_t idx;
    bool formatted;
    int rc;

    release_current(m, cls);
    bool young = m->young_flags && cls != LAYOUT_CLASS_RUN;
    for (bool refused = false;; refused = true) {
        if (young) {
            int64_t r = young_reuse_take(m, cls);
            if (r < 0)
                return (int)r;
            if (r > 0) {
                alloc_install(m, cls, (uint32_t)r, true);
                return 0;
            }
            /* Note [Minor collections before a wait] in client/minor.c */
            if (!refused)
                young_collect_early(m, cls);
        }
        rc = reserve_take(m, cls, &idx, &formatted);
        /* refused: what a whole collection frees first (the same Note) */
        if (rc == -ENOMEM && young && !refused && young_collect_all(m))
            continue;
        if (rc < 0)
            return rc;
        break;
    }
    /* Note [Young segments]: tracked before it holds a young block */
    if (m->young_flags && cls != LAYOUT_CLASS_RUN &&
        (rc = young_track(m, idx, cls)) < 0) {
        reserve_give_back(m->c, &idx, 1, false);
        return rc;
    }
    alloc_install(m, cls, idx, formatted);
    return 0;
}

/* Note [Runs] in proto/layout.h: K free blocks in a row of the current
 * run segment S from its cursor on, as its first index, or UINT32_MAX. */
static uint32_t find_run(const struct alloc_seg *s, uint32_t k)
{
    uint32_t i = s->cursor;
    while (i + k <= s->nblocks) {
        uint32_t have = 0;
        while (have < k &&
               __atomic_load_n(&s->marks[i + have], __ATOMIC_RELAXED) == 0)
            have++;
        if (have == k)
            return i;
        i += have + 1; /* past the block in use */
    }
    return UINT32_MAX;
}

/* An object of SIZE bytes in the run class: blocks of M's current run
 * segment, or of the next one (Note [Runs]). */
static __attribute__((noinline)) void *
alloc_run(heapd_mutator *m, uint64_t size, size_t nrefs, size_t nbytes)
{
    struct alloc_seg *s = &m->cur[LAYOUT_CLASS_RUN];
    uint32_t k = (uint32_t)((size + LAYOUT_RUN_GRANULE - 1) /
                            LAYOUT_RUN_GRANULE);
    uint32_t i;
    while (!s->index || (i = find_run(s, k)) == UINT32_MAX) {
        int rc = next_segment(m, LAYOUT_CLASS_RUN);
        if (rc < 0) {
            errno = client_errno(rc);
            return NULL;
        }
    }
    uint8_t epoch = (uint8_t)atomic_load_explicit(&m->ctl->epoch,
                                                  memory_order_relaxed);
    /* the first block's mark before the others' (Note [Runs]) */
    __atomic_store_n(&s->marks[i], epoch, __ATOMIC_RELAXED);
    for (uint32_t x = i + 1; x < i + k; x++)
        __atomic_store_n(&s->marks[x], LAYOUT_MARK_CONT, __ATOMIC_RELAXED);
    s->cursor = i + k;
    TSAN_REUSE_ACQUIRE(&m->c->tsan_reuse); /* Note [Reuse and
                                              ThreadSanitizer] */
    uint8_t *b = s->blocks + (size_t)i * LAYOUT_RUN_GRANULE;
    alloc_zero_payload(b + LAYOUT_WORD, size);
    *(uint64_t *)b = layout_header_with_tag(layout_header(nrefs, nbytes),
                                            barrier_on(m) ? epoch : 0);
    m->alloc_bytes += (uint64_t)k * LAYOUT_RUN_GRANULE;
    atomic_store_explicit(&m->slot->alloc_bytes, m->alloc_bytes,
                          memory_order_relaxed);
    return b + LAYOUT_WORD;
}

static __attribute__((noinline)) void *
alloc_large(heapd_mutator *m, uint64_t size, size_t nrefs, size_t nbytes)
{
    uint32_t first, run;
    int rc = mutator_request_segments(m, HEAPD__SEGMENT_KIND__SEGMENT_LARGE,
                                      1, size, &first, 1, &run,
                                      LAYOUT_NCLASSES, NULL);
    if (rc < 0) {
        errno = client_errno(rc);
        return NULL;
    }
    uint8_t *seg = client_seg_addr(m->c, first);
    uint8_t *blk = seg + LAYOUT_LARGE_OBJECT;
    /* zero already (Note [Segment supply]); running again, so the epoch is
     * this cycle's */
    uint8_t epoch = (uint8_t)atomic_load_explicit(&m->ctl->epoch,
                                                  memory_order_relaxed);
    *(uint64_t *)blk = layout_header_with_tag(layout_header(nrefs, nbytes),
                                              barrier_on(m) ? epoch : 0);
    __atomic_store_n(layout_seg_marks(seg), epoch, __ATOMIC_RELEASE);
    m->alloc_bytes += (uint64_t)run << m->c->seg_shift;
    atomic_store_explicit(&m->slot->alloc_bytes, m->alloc_bytes,
                          memory_order_relaxed);
    return blk + LAYOUT_WORD;
}

/* The index of the first mark from I on that is 0 (a free block), or N.
 * A partly free segment (Note [Reusing partly free segments]) is mostly
 * allocated blocks, so the marks are read eight at a time: a word with
 * no zero byte is eight blocks in use.  The marks start 8-aligned (Note
 * [Segments]); a word past the last mark reads the segment's padding or
 * first block, and a zero found there is past N. */
static __attribute__((noinline)) uint32_t next_free_mark(const uint8_t *marks,
                                                         uint32_t i,
                                                         uint32_t n)
{
    while (i < n && (i & 7) != 0) {
        if (__atomic_load_n(&marks[i], __ATOMIC_RELAXED) == 0)
            return i;
        i++;
    }
    for (; i < n; i += 8) {
        uint64_t w = __atomic_load_n((const uint64_t *)(marks + i),
                                     __ATOMIC_RELAXED);
        uint64_t zero = (w - 0x0101010101010101ull) & ~w &
                        0x8080808080808080ull;
        if (zero) {
            i += (uint32_t)__builtin_ctzll(zero) >> 3;
            return i < n ? i : n;
        }
    }
    return n;
}

/* Block I of M's current segment S, free, made an object of SIZE
 * bytes: its mark set, zeroed if SIZE is at most ALLOC_ZERO_INLINE_MAX
 * (the caller zeroes a larger one: Note [Zeroing an object]), its header
 * written, counted.  YOUNG: a
 * young object (Note [Young objects] in proto/young.h), whose mark is
 * LAYOUT_MARK_YOUNG and whose header's tag is LAYOUT_YOUNG_TAG, age 0. */
static inline __attribute__((always_inline)) void *
init_block(heapd_mutator *m, struct alloc_seg *s, uint32_t i, uint64_t size,
           size_t nrefs, size_t nbytes, bool young)
{
    uint8_t *b = s->blocks + (size_t)i * s->block_size;
    uint8_t epoch = young ? 0
                          : (uint8_t)atomic_load_explicit(
                                &m->ctl->epoch, memory_order_relaxed);
    /* relaxed atomics: the marker and other threads' barriers read and
     * set mark bytes of this segment's allocated blocks */
    __atomic_store_n(&s->marks[i], young ? LAYOUT_MARK_YOUNG : epoch,
                     __ATOMIC_RELAXED);
    TSAN_REUSE_ACQUIRE(&m->c->tsan_reuse); /* Note [Reuse and
                                              ThreadSanitizer] */
    if (size <= ALLOC_ZERO_INLINE_MAX) /* the caller zeroes the rest */
        alloc_zero_words(b, size);
    /* black, and dirty from birth while marking: no barrier needed for
     * its first writes (Note [Snapshot write barrier]) */
    *(uint64_t *)b = layout_header_with_tag(
        layout_header(nrefs, nbytes),
        young ? LAYOUT_YOUNG_TAG : !barrier_on(m) ? 0 : epoch);
    if (young) {
        m->fast.young_bytes += s->block_size;
    } else {
        m->alloc_bytes += s->block_size;
        atomic_store_explicit(&m->slot->alloc_bytes, m->alloc_bytes,
                              memory_order_relaxed);
    }
    return b + LAYOUT_WORD;
}

/* The index of the first mark from I on that is not 0 (a block in use),
 * or N: the end of a free run (Note [Free runs]).  Eight marks at a
 * time once I is 8-aligned, as next_free_mark; a word past the last
 * mark may read the first block, and what it finds there is past N. */
static __attribute__((noinline)) uint32_t next_used_mark(const uint8_t *marks,
                                                         uint32_t i,
                                                         uint32_t n)
{
    while (i < n && (i & 7) != 0) {
        if (__atomic_load_n(&marks[i], __ATOMIC_RELAXED) != 0)
            return i;
        i++;
    }
    for (; i < n; i += 8) {
        uint64_t w = __atomic_load_n((const uint64_t *)(marks + i),
                                     __ATOMIC_RELAXED);
        if (w) {
            i += (uint32_t)__builtin_ctzll(w) >> 3;
            return i < n ? i : n;
        }
    }
    return n;
}

/* Note [Free runs]
 * ~~~~~~~~~~~~~~~~
 * A mutator's current segment of a class has a free run, [cursor,
 * limit): blocks whose marks were 0 when take_block last read them, and
 * still are, because a mark of a free block in a segment a mutator owns
 * becomes non-zero only when that mutator allocates it.  The daemon's
 * marker marks no free block (a reference to one is a bad reference,
 * not followed); its sweepers and the mutator's own minor collection
 * only ever zero marks; the blocks they free past the limit are found
 * when the run ends and take_block looks for the next one.  So the fast
 * path allocates block CURSOR while CURSOR < LIMIT without reading its
 * mark; take_block finds the next free block and the run's end, eight
 * marks at a time (a young run cut short: Note [Young runs are
 * capped]).  Whatever starts the cursor again (a segment
 * installed, a minor sweep of the current segment) sets LIMIT to 0.
 * Measured (alloc_bench young, ring of 1000, 2 runs each interleaved
 * with the build before): 64 B 8.1-8.2 -> 7.4-7.7 ns, 256 B 14.1 ->
 * 13.8 ns, 16 B 6.2 -> 5.9-6.0 ns; GCBench young is unchanged.
 */

/* Note [Young runs are capped]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * heapd.h's inline allocation (Note [Inline allocation fast path]) takes
 * blocks of a young mutator's free run without asking whether heapd
 * wants a stop or a remark: what makes it call heapd_alloc, whose checks
 * see both, is the run's end.  So a young run is cut at
 * ALLOC_YOUNG_RUN_BYTES of blocks (at least one): a stop waits for at
 * most that many bytes of inline allocation (4096 blocks of 16 bytes,
 * some 15 us), and the cut costs a call every 64 KiB.  The rest of the
 * run is still free, and the call finds it again as the next run.
 * Measured (a young 256-byte allocation in a ring of 1024, as
 * alloc_bench's, the best of 5 interleaved runs): with no test of
 * heapd's words the inline path took 7.04-7.14 ns, with the open gate
 * alone 7.16-7.33, and with the stop and remark words as well, which it
 * read on every allocation before, 7.58-7.70. */
#define ALLOC_YOUNG_RUN_BYTES (64u * 1024u)

/* The next free block of M's current segment S, initialised (init_block),
 * or NULL when the segment is exhausted: the next in the free run, or
 * the first of the next run (Note [Free runs]), a YOUNG run cut (Note
 * [Young runs are capped]). */
static inline __attribute__((always_inline)) void *
take_block(heapd_mutator *m, struct alloc_seg *s, uint64_t size, size_t nrefs,
           size_t nbytes, bool young)
{
    uint32_t i = s->cursor;
    if (__builtin_expect(i >= s->limit, 0)) {
        i = next_free_mark(s->marks, i, s->nblocks);
        if (i >= s->nblocks) {
            s->cursor = s->limit = s->nblocks;
            return NULL;
        }
        uint32_t end = s->nblocks;
        if (young) {
            uint32_t cap = ALLOC_YOUNG_RUN_BYTES / s->block_size;
            cap = cap ? cap : 1;
            end = end - i > cap ? i + cap : end;
        }
        s->limit = next_used_mark(s->marks, i + 1, end);
    }
    s->cursor = i + 1;
    void *p = init_block(m, s, i, size, nrefs, nbytes, young);
    return size <= ALLOC_ZERO_INLINE_MAX ? p : alloc_zero_payload(p, size);
}

/* Out of line, so that the fast path stays small: move to fresh segments
 * until a block is found. */
static __attribute__((noinline)) void *
alloc_slow(heapd_mutator *m, unsigned cls, uint64_t size, size_t nrefs,
           size_t nbytes, bool young)
{
    for (;;) {
        int rc = next_segment(m, cls);
        if (rc < 0) {
            errno = client_errno(rc);
            return NULL;
        }
        void *p = take_block(m, &m->cur[cls], size, nrefs, nbytes, young);
        if (p)
            return p;
    }
}

void *alloc_shared(heapd_mutator *m, size_t nrefs, size_t nbytes)
{
    uint64_t size = layout_object_size(nrefs, nbytes);
    if (size > m->c->small_max)
        return size <= m->c->run_max ? alloc_run(m, size, nrefs, nbytes)
                                     : alloc_large(m, size, nrefs, nbytes);
    unsigned cls = layout_size_class((uint32_t)size);
    void *p = take_block(m, &m->cur[cls], size, nrefs, nbytes, false);
    if (!p)
        p = alloc_slow(m, cls, size, nrefs, nbytes, false);
    /* Note [Sweeping a segment of young blocks only] in client/minor_sweep.c */
    if (p && m->young_flags)
        young_took_shared(m, cls);
    return p;
}

/* heapd_alloc's checks, before the allocation: 0, or the errno. */
static inline int alloc_enter(heapd_mutator *m, size_t nrefs, size_t nbytes)
{
    /* Note [Evicted clients, client side] in client/mutator.c: first, and
     * the poll below does not load the mark again */
    mutator_check_evicted(m);
    /* Note [A dead daemon] in client/mutator.c: the current segments of
     * a closed connection are orphaned; Note [Clients and fork] in
     * client/agent.c: the parent's are the parent's */
    if (mutator_orphaned(m))
        return client_errno(mutator_orphan_error(m));
    mutator_poll_checked(m);
    if (__builtin_expect(nrefs > LAYOUT_FIELD_MAX || nbytes > LAYOUT_FIELD_MAX,
                         0))
        return EINVAL;
    return 0;
}

void *heapd_alloc_shared(heapd_mutator *m, size_t nrefs, size_t nbytes)
{
    int e = alloc_enter(m, nrefs, nbytes);
    if (e) {
        errno = e;
        return NULL;
    }
    return alloc_shared(m, nrefs, nbytes);
}

/* Every allocation the fast path leaves: a safepoint or a stop due, an
 * orphaned or evicted mutator, a large object, an exhausted segment, a
 * minor collection due or under way (Note [Allocation fast path]). */
static __attribute__((noinline)) void *
alloc_general(heapd_mutator *m, size_t nrefs, size_t nbytes)
{
    /* Note [Evicted clients, client side] in client/mutator.c: first, and
     * the poll below does not load the mark again */
    mutator_check_evicted(m);
    /* Note [A dead daemon] in client/mutator.c: the current segments of
     * a closed connection are orphaned; Note [Clients and fork] in
     * client/agent.c: the parent's are the parent's */
    if (mutator_orphaned(m)) {
        errno = client_errno(mutator_orphan_error(m));
        return NULL;
    }
    mutator_poll_checked(m);
    /* Note [Inline write fast path] in heapd.h: the program's stores go
     * by this mode until its next call */
    assert(m->fast.write_mode == mutator_write_mode(m));
    if (__builtin_expect(nrefs > LAYOUT_FIELD_MAX || nbytes > LAYOUT_FIELD_MAX,
                         0)) {
        errno = EINVAL;
        return NULL;
    }
    uint64_t size = layout_object_size(nrefs, nbytes);
    if (__builtin_expect(size > m->c->small_max, 0))
        return size <= m->c->run_max ? alloc_run(m, size, nrefs, nbytes)
                                     : alloc_large(m, size, nrefs, nbytes);
    unsigned cls = layout_size_class((uint32_t)size);
    void *p;
    /* take_block is inlined once for each kind, the young one loading
     * nothing of the heap's epoch and phase */
    if (__builtin_expect(m->young_flags, 0)) {
        /* Note [Minor collections] in client/minor.c: before the new
         * object exists */
        if (__builtin_expect(
                m->fast.young_bytes >= m->fast.young_next_minor, 0))
            young_collect(m);
        p = take_block(m, &m->cur[cls], size, nrefs, nbytes, true);
        if (__builtin_expect(p == NULL, 0))
            p = alloc_slow(m, cls, size, nrefs, nbytes, true);
        /* Note [Minor collections in slices]: allocate black */
        if (__builtin_expect(m->young_flags & MUTATOR_YOUNG_COLLECTING, 0) &&
            p)
            return young_allocated_black(m, cls, p);
        return p;
    }
    p = take_block(m, &m->cur[cls], size, nrefs, nbytes, false);
    return __builtin_expect(p != NULL, 1)
               ? p
               : alloc_slow(m, cls, size, nrefs, nbytes, false);
}

/* Does M's next allocation need more than the fast path: the calls'
 * checks, or a young generation whose minor collection is due? */
static inline bool alloc_attention(const heapd_mutator *m)
{
    return mutator_attention(m) ||
           (m->young_flags && m->fast.young_bytes >= m->fast.young_next_minor);
}

/* on a cache line (Note [Allocation fast path]); in parentheses, the
 * function that heapd.h's macro calls (Note [Inline allocation fast
 * path] in heapd.h) */
__attribute__((aligned(64))) void *(heapd_alloc)(heapd_mutator *m,
                                                  size_t nrefs, size_t nbytes)
{
    /* Note [Allocation fast path]: no call, and few callee-saved
     * registers, on this path; every other case in alloc_general */
    if (__builtin_expect((nrefs | nbytes >> 2) < ALLOC_FAST_FIELDS, 1)) {
        uint64_t size = layout_object_size(nrefs, nbytes);
        unsigned cls = layout_size_class((uint32_t)size);
        struct alloc_seg *s = &m->cur[cls];
        uint32_t i = s->cursor;
        /* Note [Free runs]: block I is free */
        if (__builtin_expect(i < s->limit &&
                                 !alloc_attention(m),
                             1)) {
            s->cursor = i + 1;
            void *p = init_block(m, s, i, size, nrefs, nbytes,
                                 m->young_flags != 0);
            /* Note [Minor collections in slices]: allocate black */
            if (__builtin_expect(m->young_flags & MUTATOR_YOUNG_COLLECTING,
                                 0))
                p = young_allocated_black(m, cls, p);
            /* Note [Zeroing an object]: a jump, the frame gone */
            if (__builtin_expect(size > ALLOC_ZERO_INLINE_MAX, 0))
                return alloc_zero_payload(p, size);
            return p;
        }
    }
    return alloc_general(m, nrefs, nbytes);
}

/* ---- objects ---- */

uint64_t client_block_bytes(const heapd_mutator *m, const void *obj)
{
    uint64_t h = __atomic_load_n((const uint64_t *)obj - 1, __ATOMIC_RELAXED);
    uint64_t size = layout_object_size(layout_header_nrefs(h),
                                       layout_header_nbytes(h));
    const heapd_client *c = m->c;
    if (size <= c->small_max)
        return layout_class_size[layout_size_class((uint32_t)size)];
    if (size <= c->run_max) /* Note [Runs] */
        return (size + LAYOUT_RUN_GRANULE - 1) / LAYOUT_RUN_GRANULE *
               LAYOUT_RUN_GRANULE;
    return (LAYOUT_LARGE_OBJECT + size + c->segment_size - 1) /
           c->segment_size * c->segment_size;
}

/* Atomic: other processes' write barriers tag the header concurrently
 * (Note [Dirty tags]); its size fields never change. */
static inline uint64_t header_of(const void *obj)
{
    return __atomic_load_n((const uint64_t *)obj - 1, __ATOMIC_RELAXED);
}

size_t heapd_nrefs(const void *obj)
{
    if (__builtin_expect(atomic_load_explicit(&checked_any,
                                              memory_order_relaxed), 0))
        checked_accessor(obj, "heapd_nrefs");
    return layout_header_nrefs(header_of(obj));
}

size_t heapd_nbytes(const void *obj)
{
    if (__builtin_expect(atomic_load_explicit(&checked_any,
                                              memory_order_relaxed), 0))
        checked_accessor(obj, "heapd_nbytes");
    return layout_header_nbytes(header_of(obj));
}

void *heapd_bytes(void *obj)
{
    if (__builtin_expect(atomic_load_explicit(&checked_any,
                                              memory_order_relaxed), 0))
        checked_accessor(obj, "heapd_bytes");
    return (void **)obj + layout_header_nrefs(header_of(obj));
}

#ifndef NDEBUG
/* assert() helper: FIELD is one of OBJ's reference fields. */
static bool check_field(const void *obj, void *const *field)
{
    return obj && (uintptr_t)field >= (uintptr_t)obj &&
           (uintptr_t)field < (uintptr_t)obj + heapd_nrefs(obj) * LAYOUT_WORD &&
           ((uintptr_t)field & 7) == 0;
}
#endif

/* Every heapd_write the fast path leaves: a barrier on, a shared object
 * of a young mutator, checked mode (Note [Write fast path]). */
static __attribute__((noinline)) void
write_general(heapd_mutator *m, void *obj, void **field, void *val)
{
    /* Note [The young invariant] in client/minor.c: one load of the
     * flags for all the young tests */
    uint8_t yf = m->young_flags;
    if (__builtin_expect(yf, 0)) {
        if (young_header_says(obj)) {
            assert(check_field(obj, field));
            /* Note [Checked mode]: not another mutator's young object */
            if (CHECKED(m->c) && !young_is_mine(m, val))
                checked_object(m->c, val, true, "heapd_write", "VAL");
            young_barrier(m, yf, field);
            __atomic_store_n(field, val, __ATOMIC_RELEASE);
            return;
        }
        /* Note [Minor collections in slices] in client/minor.c */
        if (__builtin_expect(yf & MUTATOR_YOUNG_PROMOTING, 0))
            young_promote_pending(m);
        if (val && young_header_says(val))
            young_publish(m, val);
    }
    if (CHECKED(m->c)) { /* Note [Checked mode] */
        checked_field(m->c, obj, field, "heapd_write");
        checked_object(m->c, val, true, "heapd_write", "VAL");
    }
    assert(check_field(obj, field));
    barrier_write(m, obj, field); /* Note [Snapshot write barrier] */
    /* release: another process that loads VAL sees the object it points
     * to initialised */
    __atomic_store_n(field, val, __ATOMIC_RELEASE);
}

/* Note [Write fast path]
 * ~~~~~~~~~~~~~~~~~~~~~~
 * heapd_write stores at once, with no call and no callee-saved register,
 * when no barrier applies: a young mutator's store into one of its young
 * objects while no minor collection marks (Note [The young invariant] in
 * client/minor.c), or its store of what is not young into a shared
 * object while neither a minor collection marks, nor promotions are under
 * way, nor a cycle marks, or a store by a mutator without a nursery while
 * no cycle marks (Note [Snapshot write barrier]), checked mode off every
 * way.  Everything else is write_general's.  Measured on GCBench young,
 * whose stores are all of the first kind: heapd_write's share of the
 * profile went from 11 % to 3 %; its time, from 224 to 222 ms (median of
 * 16 runs interleaved with the build before, within this machine's
 * noise).  The test is heapd_store_is_plain_, from the mutator's write
 * mode (Note [Inline write fast path] in heapd.h), which programs built
 * against heapd.h make inline, calling this function only when it
 * fails; this path serves the rest: programs built with
 * HEAPD_NO_INLINE, and any that call it by its name in parentheses.
 */
void(heapd_write)(heapd_mutator *m, void *obj, void **field, void *val)
{
    /* Note [Inline write fast path] in heapd.h: the mode the test reads
     * follows the mutator */
    assert(m->fast.write_mode == mutator_write_mode(m));
    if (__builtin_expect(heapd_store_is_plain_(m, obj, val), 1)) {
        assert(check_field(obj, field));
        /* release: see write_general */
        __atomic_store_n(field, val, __ATOMIC_RELEASE);
        return;
    }
    write_general(m, obj, field, val);
}

bool heapd_cas(heapd_mutator *m, void *obj, void **field, void *expected,
               void *desired)
{
    /* Note [The young invariant] in client/minor.c: one load of the
     * flags for all the young tests */
    uint8_t yf = m->young_flags;
    if (__builtin_expect(yf, 0)) {
        if (young_header_says(obj)) {
            assert(check_field(obj, field));
            /* Note [Checked mode]: not another mutator's young object */
            if (CHECKED(m->c) && !young_is_mine(m, desired))
                checked_object(m->c, desired, true, "heapd_cas", "DESIRED");
            /* the young barrier of a store that may not happen: what
             * FIELD holds is kept either way */
            young_barrier(m, yf, field);
            return __atomic_compare_exchange_n(field, &expected, desired,
                                               false, __ATOMIC_SEQ_CST,
                                               __ATOMIC_SEQ_CST);
        }
        /* Note [Minor collections in slices] in client/minor.c */
        if (__builtin_expect(yf & MUTATOR_YOUNG_PROMOTING, 0))
            young_promote_pending(m);
        if (desired && young_header_says(desired))
            young_publish(m, desired);
    }
    if (CHECKED(m->c)) { /* Note [Checked mode] */
        checked_field(m->c, obj, field, "heapd_cas");
        checked_object(m->c, desired, true, "heapd_cas", "DESIRED");
    }
    assert(check_field(obj, field));
    barrier_write(m, obj, field);
    return __atomic_compare_exchange_n(field, &expected, desired, false,
                                       __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}
