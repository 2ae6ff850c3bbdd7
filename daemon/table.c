/* The live table: the daemon's records of a heap, in a memfd of its own.
 *
 * Note [The live table]
 * ~~~~~~~~~~~~~~~~~~~~~
 * What a new heapd needs to trust a heap after the one before was killed
 * -- every segment's record, the free and reuse bitmaps, the globals'
 * records -- lives not in heapd's private memory but in a daemon-only
 * memfd, heapd.table.NAME in the service manager's store from the heap's
 * creation on (beside heapd.heap.NAME and heapd.page.NAME: Note [Heaps
 * across restarts] in fdstore.c).  Only the daemon maps it; it is written
 * in place, under heap->lock, exactly as the private records were.  A
 * SIGKILL stops heapd between two stores and the memory stays as the last
 * store left it: at most one critical section of heap->lock half done (a
 * grant, a return, an orphaning, a sweep's release, a punch), besides the
 * words markers and sweepers write atomically.  So a heapd that finds no
 * saved state (Note [Saved state] in state.c) recovers from the table,
 * and trusts nothing it can derive:
 *   - the header must name this heapd's table version, layout version,
 *     geometry and record sizes, or the heap is refused;
 *   - the segment records are repaired and recounted (Note [Recovering
 *     the segment table] in segment.c), every client counting as gone;
 *   - the globals' records are checked, those a client was initialising
 *     released, and the shared table rewritten from them (globals_recover);
 *   - the counters are those of the last cycle that ended: each cycle's
 *     end copies them into one of two slots, each behind a sequence word
 *     that is odd while the slot is written; the newer whole copy wins;
 *   - the phase is IDLE again, and no client is served before the
 *     recovery cycles pass (Note [Recovery cycles] in collector.c).
 * Keeping the records in a memfd costs no store more than before: they
 * are the same stores into the same amount of memory; the table of a
 * 4 GiB heap of 1 MiB segments is 292 KiB.
 */
#include "table.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "globals.h"
#include "heap.h"
#include "log.h"

#define TABLE_MAGIC 0x3162746470616568ull /* "heapdtb1", little-endian */
#define TABLE_VERSION 1u

struct table_stats_copy {
    _Atomic uint64_t seq;     /* odd while written; 0: never written */
    struct heap_stats stats;
};

struct table_header {
    uint64_t magic;
    uint32_t version;
    uint32_t layout_version;
    uint64_t base, max_size, segment_size;
    uint32_t count, first;
    uint32_t header_bytes, seg_bytes, global_bytes, stats_bytes;
    uint64_t globals_off, segs_off, free_off, reuse_off, bytes;
    uint64_t created_unix_ns;   /* the heap's birth, for its age */
    uint64_t copies;            /* stats copies made */
    struct table_stats_copy stats[2];
};

static size_t round_page(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

/* The table's layout for H's geometry. */
static void layout_of(const struct heap *h, struct table_header *hd)
{
    const struct segtab *t = &h->segs;
    size_t words = ((size_t)t->count + 63) / 64;
    memset(hd, 0, sizeof *hd);
    hd->magic = TABLE_MAGIC;
    hd->version = TABLE_VERSION;
    hd->layout_version = LAYOUT_VERSION;
    hd->base = h->cfg->base;
    hd->max_size = h->cfg->max_size;
    hd->segment_size = h->cfg->segment_size;
    hd->count = t->count;
    hd->first = t->first;
    hd->header_bytes = sizeof(struct table_header);
    hd->seg_bytes = sizeof(struct seg);
    hd->global_bytes = sizeof(struct heap_global);
    hd->stats_bytes = sizeof(struct heap_stats);
    hd->globals_off = round_page(sizeof *hd);
    hd->segs_off = hd->globals_off +
                   round_page(LAYOUT_MAX_GLOBALS * sizeof(struct heap_global));
    hd->free_off = hd->segs_off + round_page((size_t)t->count *
                                             sizeof(struct seg));
    hd->reuse_off = hd->free_off + round_page(words * sizeof(uint64_t));
    hd->bytes = hd->reuse_off + round_page(words * sizeof(uint64_t));
}

/* Map FD, laid out as HD says, and point H's records into it. */
static int map_table(struct heap *h, int fd, const struct table_header *hd)
{
    void *p = mmap(NULL, hd->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                   0);
    if (p == MAP_FAILED)
        return -errno;
    h->table = p;
    h->table_bytes = hd->bytes;
    h->table_fd = fd;
    h->globals = (struct heap_global *)((char *)p + hd->globals_off);
    h->segs.segs = (struct seg *)((char *)p + hd->segs_off);
    h->segs.free_bits = (uint64_t *)((char *)p + hd->free_off);
    h->segs.reuse_bits = (uint64_t *)((char *)p + hd->reuse_off);
    return 0;
}

int table_create(struct heap *h)
{
    struct table_header hd;
    char name[96];
    int fd, rc;

    layout_of(h, &hd);
    snprintf(name, sizeof name, "heapd:%s:table", h->cfg->name);
    if ((fd = heap_sealed_memfd(name, hd.bytes)) < 0)
        return fd;
    if ((rc = map_table(h, fd, &hd)) < 0) {
        close(fd);
        return rc;
    }
    hd.created_unix_ns = h->stats.created_unix_ns;
    memcpy(h->table, &hd, sizeof hd);
    return 0;
}

#define REFUSE(...)                                                          \
    do {                                                                     \
        snprintf(why, n, __VA_ARGS__);                                       \
        rc = -EINVAL;                                                        \
        goto out;                                                            \
    } while (0)

int table_adopt(struct heap *h, int fd, char *why, size_t n)
{
    struct table_header want, hd;
    ssize_t got;
    int rc = 0;

    layout_of(h, &want);
    got = pread(fd, &hd, sizeof hd, 0);
    if (got != (ssize_t)sizeof hd || hd.magic != TABLE_MAGIC)
        REFUSE("its table is not heapd's");
    if (hd.version != TABLE_VERSION)
        REFUSE("its table is of version %u, and this heapd reads version "
               "%u only", hd.version, TABLE_VERSION);
    if (hd.layout_version != LAYOUT_VERSION)
        REFUSE("the heap is of layout version %u, and this heapd's is %u",
               hd.layout_version, LAYOUT_VERSION);
    if (hd.base != want.base || hd.max_size != want.max_size ||
        hd.segment_size != want.segment_size)
        REFUSE("the heap was base 0x%llx, max_size %llu, segment_size %llu, "
               "and [heap %s] now says 0x%llx, %llu, %llu; put the old "
               "values back to recover it", (unsigned long long)hd.base,
               (unsigned long long)hd.max_size,
               (unsigned long long)hd.segment_size, h->cfg->name,
               (unsigned long long)want.base,
               (unsigned long long)want.max_size,
               (unsigned long long)want.segment_size);
    if (hd.header_bytes != want.header_bytes ||
        hd.seg_bytes != want.seg_bytes ||
        hd.global_bytes != want.global_bytes ||
        hd.stats_bytes != want.stats_bytes || hd.count != want.count ||
        hd.first != want.first || hd.globals_off != want.globals_off ||
        hd.segs_off != want.segs_off || hd.free_off != want.free_off ||
        hd.reuse_off != want.reuse_off || hd.bytes != want.bytes)
        REFUSE("its table's records are of another build of heapd");
    if (!heap_sealed_as(fd, want.bytes))
        REFUSE("its table is not a sealed memfd of %llu bytes",
               (unsigned long long)want.bytes);
    if ((rc = map_table(h, fd, &want)) < 0)
        REFUSE("its table cannot be mapped: %s", strerror(-rc));
    h->stats.created_unix_ns = hd.created_unix_ns;
    return 0;
out:
    close(fd);
    return rc;
}

void table_save_stats(struct heap *h)
{
    struct table_header *hd = h->table;
    if (!hd)
        return;
    uint64_t k = hd->copies++;
    struct table_stats_copy *c = &hd->stats[k & 1];
    atomic_store(&c->seq, 2 * k + 1);
    c->stats = h->stats;
    atomic_store(&c->seq, 2 * k + 2);
}

int table_recover(struct heap *h, char *why, size_t n)
{
    struct table_header *hd = h->table;
    int rc = 0;

    /* the newer whole copy of the counters (Note [The live table]) */
    uint64_t s0 = atomic_load(&hd->stats[0].seq);
    uint64_t s1 = atomic_load(&hd->stats[1].seq);
    bool ok0 = s0 != 0 && s0 % 2 == 0, ok1 = s1 != 0 && s1 % 2 == 0;
    if (ok0 || ok1) {
        const struct table_stats_copy *c =
            ok0 && (!ok1 || s0 > s1) ? &hd->stats[0] : &hd->stats[1];
        h->stats = c->stats;
        hd->copies = c == &hd->stats[0] ? s0 / 2 : s1 / 2;
    } else {
        memset(&h->stats, 0, sizeof h->stats);
        hd->copies = 0;
    }
    h->stats.created_unix_ns = hd->created_unix_ns;
    if ((rc = seg_recover(h, h->stats.cycles_completed, why, n)) < 0)
        goto out;
    if ((rc = globals_recover(h, why, n)) < 0)
        goto out;
    atomic_store(&h->control->phase, LAYOUT_PHASE_IDLE);
    h->stats.restarts_survived++;
    h->stats.crashes_recovered++;
    table_save_stats(h);
out:
    return rc;
}

void table_close(struct heap *h)
{
    if (h->table)
        munmap(h->table, h->table_bytes);
    if (h->table_fd >= 0)
        close(h->table_fd);
    h->table = NULL;
    h->table_fd = -1;
    h->globals = NULL;
    h->segs.segs = NULL;
    h->segs.free_bits = NULL;
    h->segs.reuse_bits = NULL;
}
