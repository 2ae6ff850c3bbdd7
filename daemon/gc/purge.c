/* Memory given back to the kernel: free segments, the free pages of
 * partly used ones, and pages no grant made.  See segment.h.
 *
 * Note [Purging free memory]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~
 * After every sweep the heap gives back the free memory it will not
 * allocate again soon, so that what it holds follows the live data
 * instead of the most it ever held.  Free memory is of two kinds:
 *   - a FREE segment whose memory is not punched;
 *   - a free page of a FILLED small segment: a page past the segment's
 *     header and marks that no block in use overlaps.  A block that
 *     spans a page boundary keeps both pages.  The sweeper records them
 *     from the marks it leaves (seg_swept_pages).
 * seg_purge keeps KEEP bytes of it committed (Note [Heap goal] in
 * collector.c says how much: what the heap allocated over its last cycle
 * interval, at most two budgets; nothing when the cycle saw no
 * allocation)
 * and punches the rest (fallocate(PUNCH_HOLE)).  What it keeps is what
 * grants hand out first: the free pages of reusable segments, lowest
 * first (Note [Reusing partly free segments] in segment.c), then the
 * lowest free segments (Note [Segment supply]).  The free pages of a FILLED
 * segment that is not reusable go in any case: no grant takes them until
 * a sweep makes it reusable.  That is the hysteresis: memory freed and
 * reused at once stays, memory the heap has no use for goes.  Pages of
 * OWNED segments are never punched: their owner allocates there without
 * asking anyone.
 *
 * The pages are checked again under heap->lock before they go (every
 * block that overlaps them has mark 0, in a FILLED segment of the class
 * the table knows): the sweeper's record may be stale, as a segment can
 * be granted, filled and returned while it is swept (Note [A segment
 * changes hands while it is swept] in sweep.c).  Until the punch is done
 * the segment is `purging` and no grant takes it, so nobody allocates on
 * a page while it goes.  A FILLED segment changes state only by a sweep
 * (none runs: seg_purge runs on the collector thread after one) or a
 * grant, so it is still FILLED when the punch ends.
 *
 * What a client sees: a punched page reads as zero.  The allocator
 * zeroes every object it hands out anyway (Note [Allocation fast path]
 * in client/alloc.c), so a block on a punched page needs no re-zeroing;
 * its first touch is one page fault, as for any new memory.  Nothing
 * else reads a free block but the verifier (check 3 of Note [Heap
 * verifier]), which skips punched pages: a read of a hole of a memfd
 * allocates a page, and would make the memory committed again.
 *
 * Accounting: the table counts as committed every segment not punched,
 * less the pages punched out of them (seg_committed; page_purged, one bit
 * per page).  A segment's bits are forgotten when it is granted (its new
 * owner may touch every page) or punched whole.  The bits live in heapd's
 * private memory, not in the live table: after a restart they start
 * empty, and the table counts those pages as committed though they are
 * not -- an overcount, never an undercount.  The checker recounts both
 * figures (Note [Checking the segment table] in segtab_check.c).
 *
 * Why pages and not only segments: after a map's two worker processes
 * exited, three cycles left 88 MiB committed for 17 MiB of live data, in
 * 682 FILLED segments -- one live block keeps a whole segment; and in
 * a heap filled with objects of mixed sizes of which a random 90 % were
 * dropped, 83 MiB stayed committed for 18 MiB live, where the blocks of
 * 1 KiB and more leave most pages wholly free.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heap.h"
#include "log.h"
#include "segment.h"

/* Give back BYTES of the heap's memory at OFF; needs no lock.  Returns
 * 0 or -errno (nothing given back). */
static int punch_range(struct heap *h, uint64_t off, uint64_t len)
{
    if (fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  (off_t)off, (off_t)len) < 0)
        return -errno;
    /* Note [Memory counters] in daemon/gc/collector.c */
    atomic_fetch_add_explicit(&h->stats.purged_bytes, len,
                              memory_order_relaxed);
    return 0;
}

/* Give back the memory of segments [FIRST, FIRST + N); needs no lock. */
static void punch_memory(struct heap *h, uint32_t first, uint32_t n)
{
    uint64_t len = (uint64_t)n << h->seg_shift;
    int rc = punch_range(h, (uint64_t)first << h->seg_shift, len);
    if (rc < 0) {
        /* cannot give memory back: zero it so grants stay correct */
        log_warn("heap '%s': fallocate(PUNCH_HOLE): %s; zeroing instead",
                 h->cfg->name, strerror(-rc));
        memset(heap_seg_addr(h, first), 0, len);
    }
}

void seg_punch(struct heap *h, uint32_t first, uint32_t n)
{
    ASSERT_LOCK_HELD(&h->lock);
    punch_memory(h, first, n);
    for (uint32_t i = first; i < first + n; i++)
        seg_set_punched(h, i, true);
}

/* Runs of free segments taken out of the pool to be punched without the
 * lock: nobody is granted a segment while its memory goes away. */
enum { PUNCH_MAX_RUNS = 256 };
struct punch_runs {
    uint32_t n, segs;
    uint32_t first[PUNCH_MAX_RUNS], len[PUNCH_MAX_RUNS];
};

/* With heap->lock held: take free segments [I, K) out of the pool (the
 * flag punched: See Note [Segment lifecycle] in segment.c). */
static void runs_take(struct heap *h, struct punch_runs *r, uint32_t i,
                      uint32_t k)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    for (uint32_t x = i; x < k; x++)
        seg_bit_clear(t->free_bits, x);
    t->n_free -= k - i;
    r->first[r->n] = i;
    r->len[r->n++] = k - i;
    r->segs += k - i;
}

/* With heap->lock held: punch R's runs without it, and put them back. */
static void runs_punch(struct heap *h, struct punch_runs *r)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    if (r->n == 0)
        return;
    heap_unlock(h);
    for (uint32_t k = 0; k < r->n; k++)
        punch_memory(h, r->first[k], r->len[k]);
    heap_lock(h);
    /* the table only under the lock (TSan: the stray check's count of
     * punched segments raced with a punch that set the flags without it) */
    for (uint32_t k = 0; k < r->n; k++) {
        for (uint32_t x = r->first[k]; x < r->first[k] + r->len[k]; x++) {
            seg_set_punched(h, x, true);
            seg_bit_set(t->free_bits, x);
        }
        t->n_free += r->len[k];
    }
    r->n = 0;
}

bool seg_has_pages(const struct heap *h, uint32_t first, uint32_t n,
                   off_t cur[2])
{
    off_t from = (off_t)first << h->seg_shift;
    off_t to = (off_t)(first + n) << h->seg_shift;
    if (from < cur[0] || from > cur[1]) {
        off_t d = lseek(h->fd, from, SEEK_DATA);
        cur[0] = from;
        /* ENXIO: no data from here on; any other error: assume there is */
        cur[1] = d >= 0 ? d : errno == ENXIO ? (off_t)INT64_MAX : from;
    }
    return cur[1] < to;
}

/* ---- free pages of FILLED segments ---- */

/* Does page P of a small segment whose NBLOCKS blocks of BS bytes start
 * at FIRST hold nothing in use (MARKS: the blocks' marks; any mark but 0
 * is a block in use, a young one's included: Note [Sweeping])?  Pages
 * that overlap the header and marks never do. */
static bool page_free(const struct segtab *t, const uint8_t *marks,
                      uint32_t nblocks, uint32_t first, uint32_t bs,
                      uint32_t p)
{
    uint64_t lo = (uint64_t)p << t->page_shift;
    uint64_t hi = lo + (1u << t->page_shift) - 1;
    if (lo < first)
        return false;
    uint64_t b0 = (lo - first) / bs, b1 = (hi - first) / bs;
    for (uint64_t b = b0; b <= b1 && b < nblocks; b++)
        if (__atomic_load_n(&marks[b], __ATOMIC_RELAXED) != 0)
            return false;
    return true;
}

void seg_swept_pages(struct heap *h, uint32_t i, const uint8_t *marks,
                     uint32_t nblocks, uint32_t first, uint32_t bs)
{
    struct segtab *t = &h->segs;
    _Atomic uint64_t *pf = seg_pages_free(t, i);
    for (uint32_t w = 0; w < t->page_words; w++) {
        uint64_t bits = 0;
        for (uint32_t k = 0; k < 64 && w * 64 + k < t->seg_pages; k++)
            if (page_free(t, marks, nblocks, first, bs, w * 64 + k))
                bits |= 1ull << k;
        atomic_store_explicit(&pf[w], bits, memory_order_relaxed);
    }
}

/* Runs of free pages of FILLED segments, punched without the lock while
 * their segments are `purging`. */
enum { PAGE_MAX_RUNS = 512 };
struct page_runs {
    uint32_t n;
    uint32_t seg[PAGE_MAX_RUNS], page[PAGE_MAX_RUNS], len[PAGE_MAX_RUNS];
    uint64_t pages;     /* punched so far */
    bool failed;        /* a punch failed: say so once */
};

/* With heap->lock held: punch R's runs without it, then record them. */
static void page_runs_punch(struct heap *h, struct page_runs *r)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    int err[PAGE_MAX_RUNS];
    if (r->n == 0)
        return;
    heap_unlock(h);
    for (uint32_t k = 0; k < r->n; k++)
        err[k] = punch_range(h,
                             ((uint64_t)r->seg[k] << h->seg_shift) +
                                 ((uint64_t)r->page[k] << t->page_shift),
                             (uint64_t)r->len[k] << t->page_shift);
    heap_lock(h);
    for (uint32_t k = 0; k < r->n; k++) {
        struct seg *s = &t->segs[r->seg[k]];
        s->purging = 0; /* See Note [Segment lifecycle] in segment.c */
        if (err[k] < 0) {
            if (!r->failed)
                log_warn("heap '%s': fallocate(PUNCH_HOLE) of free pages: "
                         "%s; they stay committed", h->cfg->name,
                         strerror(-err[k]));
            r->failed = true;
            continue;
        }
        uint64_t *pp = seg_pages_purged(t, r->seg[k]);
        for (uint32_t p = r->page[k]; p < r->page[k] + r->len[k]; p++)
            seg_bit_set(pp, p);
        t->pages_purged += r->len[k];
        r->pages += r->len[k];
    }
    r->n = 0;
}

/* With heap->lock held: the free pages of FILLED segment I not punched
 * yet, checked against its marks now (Note [Purging free memory]), as a
 * bitmap in OUT (page_words words); returns how many. */
static uint32_t purgeable_pages(const struct heap *h, uint32_t i,
                                uint64_t *out)
{
    ASSERT_LOCK_HELD(&h->lock);
    const struct segtab *t = &h->segs;
    const struct seg *s = &t->segs[i];
    const uint64_t *pp = seg_pages_purged(t, i);
    const _Atomic uint64_t *pf = seg_pages_free(t, i);
    uint32_t n = 0;
    uint8_t cls = s->cls;
    if (cls >= LAYOUT_NCLASSES || t->small_nblocks[cls] == 0)
        return 0;
    const uint8_t *marks = layout_seg_marks(heap_seg_addr(h, i));
    for (uint32_t w = 0; w < t->page_words; w++) {
        uint64_t bits = atomic_load_explicit(&pf[w], memory_order_relaxed) &
                        ~pp[w];
        for (uint64_t b = bits; b; b &= b - 1) {
            uint32_t p = w * 64 + (uint32_t)__builtin_ctzll(b);
            if (!page_free(t, marks, t->small_nblocks[cls],
                           t->small_first[cls], layout_class_size[cls], p))
                bits &= ~(1ull << (p & 63));
        }
        out[w] = bits;
        n += (uint32_t)__builtin_popcountll(bits);
    }
    return n;
}

/* With heap->lock held: queue the pages set in BITS of segment I. */
static void page_runs_add(struct heap *h, struct page_runs *r, uint32_t i,
                          const uint64_t *bits)
{
    ASSERT_LOCK_HELD(&h->lock);
    const struct segtab *t = &h->segs;
    /* See Note [Segment lifecycle] in segment.c: the flag purging */
    h->segs.segs[i].purging = 1;
    for (uint32_t p = 0; p < t->seg_pages;) {
        if (!seg_bit_test(bits, p)) {
            p++;
            continue;
        }
        uint32_t q = p + 1;
        while (q < t->seg_pages && seg_bit_test(bits, q))
            q++;
        if (r->n == PAGE_MAX_RUNS)
            page_runs_punch(h, r); /* I stays purging: nobody takes it */
        h->segs.segs[i].purging = 1;
        r->seg[r->n] = i;
        r->page[r->n] = p;
        r->len[r->n++] = q - p;
        p = q;
    }
}

/* With heap->lock held: the bytes of free segment I, not punched whole,
 * that are committed: less the pages punched out of it while it was
 * partly used (Note [Reused pages are growth] in segment.c). */
static uint64_t free_seg_committed(const struct heap *h, uint32_t i)
{
    ASSERT_LOCK_HELD(&h->lock);
    return ((uint64_t)1 << h->seg_shift) - seg_purged_bytes(&h->segs, i);
}

/* With heap->lock held: the committed free memory grants hand out before
 * any new memory (Note [Heap goal] in collector.c): the free blocks of
 * reusable segments, less their punched pages, and the free segments not
 * punched, less theirs. */
static uint64_t usable_bytes(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    const struct segtab *t = &h->segs;
    uint64_t n = 0;
    for (uint32_t i = t->first; i < t->high; i++) {
        const struct seg *s = &t->segs[i];
        if (s->state == SEG_FREE && !s->punched) {
            n += free_seg_committed(h, i);
            continue;
        }
        if (s->state != SEG_FILLED || !seg_bit_test(t->reuse_bits, i) ||
            s->cls >= LAYOUT_NCLASSES || t->small_nblocks[s->cls] == 0)
            continue;
        const uint8_t *marks = layout_seg_marks(heap_seg_addr(h, i));
        uint64_t nfree = 0;
        for (uint32_t b = 0; b < t->small_nblocks[s->cls]; b++)
            nfree += __atomic_load_n(&marks[b], __ATOMIC_RELAXED) == 0;
        uint64_t holes = nfree * layout_class_size[s->cls];
        uint64_t gone = seg_purged_bytes(t, i);
        n += holes > gone ? holes - gone : 0;
    }
    return n;
}

void seg_purge(struct heap *h, uint64_t keep, struct seg_purged *out)
{
    struct segtab *t = &h->segs;
    struct punch_runs r = {0};
    struct page_runs pr = {0};
    uint32_t segments = 0;
    uint64_t *bits = calloc(t->page_words, sizeof *bits);

    heap_lock(h);
    /* the free pages of FILLED segments: those of reusable ones are what
     * grants take first, lowest first; the others go */
    for (uint32_t i = t->first; bits && i < t->high; i++) {
        struct seg *s = &t->segs[i];
        if (s->state != SEG_FILLED || s->fenced || s->purging)
            continue;
        uint32_t n = purgeable_pages(h, i, bits);
        if (n == 0)
            continue;
        uint64_t bytes = (uint64_t)n << t->page_shift;
        if (seg_bit_test(t->reuse_bits, i) && keep >= bytes) {
            keep -= bytes;
            continue;
        }
        page_runs_add(h, &pr, i, bits);
    }
    page_runs_punch(h, &pr);
    /* then the free segments, lowest first */
    for (uint32_t i = t->first; i < t->high; i++) {
        if (t->segs[i].state != SEG_FREE || t->segs[i].punched ||
            !seg_bit_test(t->free_bits, i))
            continue;
        if (r.n == PUNCH_MAX_RUNS) { /* drops the lock: look again */
            segments += r.segs;
            r.segs = 0;
            runs_punch(h, &r);
            i--;
            continue;
        }
        uint64_t bytes = free_seg_committed(h, i);
        if (keep >= bytes) {
            keep -= bytes;
            continue; /* committed and about to be reused: keep it */
        }
        uint32_t k = i + 1;
        while (k < t->high && t->segs[k].state == SEG_FREE &&
               !t->segs[k].punched && seg_bit_test(t->free_bits, k))
            k++;
        runs_take(h, &r, i, k);
        i = k - 1;
    }
    /* the system calls without the lock (Note [Segment supply]) */
    runs_punch(h, &r);
    out->usable = usable_bytes(h);
    heap_unlock(h);
    free(bits);
    out->pages = pr.pages;
    out->segments = segments + r.segs + seg_punch_strays(h);
}

/* Note [Free memory stays free]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Every client maps the whole heap writable, so a client can write into
 * segments the daemon believes punched (FREE and punched: never granted,
 * or given back) and make memory committed that no segment accounts for:
 * 512 MiB written into never-granted segments stayed committed for good.
 * The daemon's bound is its own accounting: the memfd holds at most the
 * used part of the control segments (the control area; nobody uses the
 * rest, which is punched again as well) and the segments not punched (granted ones, FILLED ones,
 * large runs, the free pool kept committed on purpose:
 * Note [Segment supply]).  At the end of every cycle, whenever a client
 * leaves and every SEG_STRAYS_EVERY_MS (a timer of the loop thread: a
 * client that writes and then idles makes no cycle), seg_punch_strays
 * compares that with the memfd's allocated blocks
 * (fstat, as heap_committed_bytes); only when the memfd holds more does it
 * walk the memfd's data extents (lseek SEEK_DATA / SEEK_HOLE) and punch
 * again every FREE segment believed punched that has pages.  The check
 * is two system calls and a walk of the table up to `high`; the extent
 * walk, 2.3 us an extent on a 16 GiB memfd (1.4 ms for 612 extents), is
 * paid only after stray writes.  A grant of a segment believed punched
 * asks the memfd whether it has pages there (SEEK_DATA: 0.17 us a
 * segment, against 0.5 us for mincore on 128 KiB) and, if so, zeroes its
 * header and marks (small) or punches it (large: the object must read as
 * zero), so a granted blank segment reads as blank however it was
 * scribbled on; what else is in a small segment's blocks is harmless, as
 * the allocator zeroes every object it hands out
 * (Note [Allocation fast path] in client/alloc.c).  Writes into the kept pool stay committed
 * only as long as the pool does, and its headers are zeroed at the grant
 * as before.  A client that writes into memory the daemon accounts for
 * but has not touched (a large object's untouched pages, a reserve's
 * blank segments) is not caught: the committed bytes still never exceed
 * the daemon's own count for longer than a cycle.  Nor, by the counts
 * alone, is the tail of a scribble still being written when the walk
 * passed it, once it fits in that slack; so after a walk that found
 * strays the next STRAYS_AGAIN calls walk whatever the counts say (a test
 * writing 256 MiB met a timer tick mid-write under load, and 35 segments
 * stayed committed, hidden by 5.6 MiB of granted but untouched memory).
 */
#define STRAYS_AGAIN 3

/* The bytes of the control segments that hold the control area; the
 * rest of them nobody uses (the mutator slots are in clients' own memory:
 * Note [Client control memory]). */
#define CONTROL_USED                                                         \
    ((sizeof(struct layout_control) + 4095u) & ~(uint64_t)4095u)

/* With heap->lock held: the bytes the daemon counts as committed (Note
 * [Free memory stays free]): the control area and every segment not
 * punched (none at or above `high` was ever taken). */
static uint64_t accounted_bytes(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    /* pages punched out of them count: a client may write there too
     * (Note [Purging free memory]) */
    return CONTROL_USED + ((uint64_t)h->segs.n_unpunched << h->seg_shift);
}

/* Give back what a client wrote into the unused rest of the control
 * segments; true if it had pages. */
static bool punch_control_rest(struct heap *h)
{
    off_t off = (off_t)CONTROL_USED;
    off_t end = (off_t)h->segs.first << h->seg_shift;
    off_t d = off < end ? lseek(h->fd, off, SEEK_DATA) : -1;
    if (d < 0 || d >= end)
        return false;
    if (fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off,
                  end - off) != 0)
        return false;
    /* Note [Memory counters] in daemon/gc/collector.c */
    atomic_fetch_add_explicit(&h->stats.purged_bytes, (uint64_t)(end - off),
                              memory_order_relaxed);
    return true;
}

uint32_t seg_punch_strays(struct heap *h)
{
    struct segtab *t = &h->segs;
    struct punch_runs r = {0};
    uint32_t total = 0;
    /* first the memfd, then the table: a grant in between only makes the
     * table count more, never a stray page look accounted for for good */
    uint64_t committed = heap_committed_bytes(h);

    heap_lock(h);
    uint64_t accounted = accounted_bytes(h);
    heap_unlock(h);
    uint32_t again = atomic_load(&t->strays_again);
    if (committed <= accounted &&
        (again == 0 ||
         !atomic_compare_exchange_strong(&t->strays_again, &again,
                                         again - 1)))
        return 0;
    if (punch_control_rest(h))
        log_info("heap '%s': the unused part of the control area had pages "
                 "(a client wrote there): punched again", h->cfg->name);

    off_t end = (off_t)t->count << h->seg_shift;
    off_t off = (off_t)t->first << h->seg_shift;
    heap_lock(h);
    while (off < end) {
        /* the kernel's view of the memfd needs no lock, but the table
         * does: hold it, and drop it to punch */
        off_t d = lseek(h->fd, off, SEEK_DATA);
        if (d < 0)
            break; /* ENXIO: no data beyond */
        off_t e = lseek(h->fd, d, SEEK_HOLE);
        e = e < 0 || e > end ? end : e;
        uint32_t a = (uint32_t)(d >> h->seg_shift);
        uint32_t b = (uint32_t)((e - 1) >> h->seg_shift) + 1;
        for (uint32_t i = a; i < b; i++) {
            if (r.n == PUNCH_MAX_RUNS) { /* drops the lock: look again */
                total += r.segs;
                r.segs = 0;
                runs_punch(h, &r);
            }
            const struct seg *s = &t->segs[i];
            if (s->state != SEG_FREE || !s->punched ||
                !seg_bit_test(t->free_bits, i))
                continue;
            uint32_t k = i + 1;
            while (k < b && t->segs[k].state == SEG_FREE &&
                   t->segs[k].punched && seg_bit_test(t->free_bits, k))
                k++;
            runs_take(h, &r, i, k);
            i = k - 1;
        }
        off = (off_t)b << h->seg_shift;
    }
    total += r.segs;
    runs_punch(h, &r);
    h->stats.segments_repunched += total;
    if (total)
        atomic_store(&t->strays_again, STRAYS_AGAIN);
    heap_unlock(h);
    if (total)
        log_info("heap '%s': %u free segment(s) had pages no grant made "
                 "(a client wrote where it was given nothing): punched "
                 "again (%llu bytes committed, %llu accounted for)",
                 h->cfg->name, total, (unsigned long long)committed,
                 (unsigned long long)accounted);
    return total;
}

