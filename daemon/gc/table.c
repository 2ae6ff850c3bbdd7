/* The live table: the daemon's records of a heap, in a memfd of its own.
 *
 * Note [The live table]
 * ~~~~~~~~~~~~~~~~~~~~~
 * What a new heapd needs to trust a heap -- every segment's record, the
 * free and reuse bitmaps, the globals' records, the registry of connected
 * mutator clients (id, token, pid, start, name, bytes granted; each
 * slot's client, region, bound and young generation), the last stop
 * generation and
 * the counters -- lives not in heapd's private memory but in a
 * daemon-only memfd, heapd.table.NAME in the service manager's store from
 * the heap's creation on (beside heapd.heap.NAME and heapd.page.NAME:
 * Note [Heaps across restarts] in fdstore.c).  Only the daemon maps it;
 * it is written in place, under heap->lock, exactly as the private
 * records were.  It is the one format a restart reads, however the heapd
 * before ended:
 *   - killed: SIGKILL stops heapd between two stores and the memory stays
 *     as the last store left it: at most one critical section of
 *     heap->lock half done (a grant, a return, an orphaning, a sweep's
 *     release, a punch), besides the words markers and sweepers write
 *     atomically;
 *   - stopped cleanly: every collector stopped, every mutator client gone
 *     or suspended (its registry record stays: Note [Resuming clients] in
 *     resume.c), and table_seal writes what only a clean stop knows (the
 *     counters as they are now, the segment table's orphaned and adopted
 *     counts), then a checksum of the whole table, then the clean word.
 * The clean word's rule.  The table is memory, not a file: a store is in
 * the memfd's pages once it has executed and a killed process loses none,
 * so nothing is flushed (no fsync, no msync); only the order of the
 * stores matters.  table_seal stores the clean word last, with release
 * order, so every record's store precedes it, and nothing stores into the
 * table after it (debug builds sum the table again at table_close).  The
 * next heapd reads the word and the sum before it stores anything, and
 * its first store clears the word: a heapd killed later never leaves a
 * clean word over records it changed.  The sum (FNV-1a over 64-bit words,
 * every word of the table but the sum and the word) tells a table stored
 * into after its seal, by anyone: each word enters it through a
 * bijection, so a change of any one word always shows.  A heap refused, or whose verifying
 * cycles have not passed (Note [Recovery cycles] in collector.c), is not
 * sealed: its records were never proved, and the next heapd proves them.
 *
 * Taking a table back (table_take_back) trusts nothing it can derive:
 *   - the header must name this heapd's table version, layout version,
 *     geometry and record sizes, or the heap is refused;
 *   - the segment records are repaired and recounted (Note [Recovering
 *     the segment table] in segment.c), every client counting as gone but
 *     the registry's;
 *   - the registry's clients are kept for resuming (Note [Resuming
 *     clients]): a record is whole once its `valid` word, written last,
 *     names it; what they hold stays theirs, and a slot is theirs if its
 *     record names them.  kept_of is the one place a kept client is made;
 *   - the globals' records are checked, those a client was initialising
 *     released (but the kept ones'), and the shared table rewritten from
 *     them (globals_recover);
 *   - the stop generation goes on from the last one asked: a kept client
 *     may hold the ack of a stop the heapd before asked;
 *   - the counters are the newer whole of two copies, each behind a
 *     sequence word that is odd while the copy is written: a cycle's end
 *     and the seal write them, so a kill loses what changed since the
 *     last cycle, a clean stop nothing;
 *   - the phase is IDLE again.
 * A sealed table whose word and sum hold is clean if it is also what a
 * clean stop leaves: no record dropped or repaired, no segment owned by a
 * client the registry does not name, no reuse bit on a segment that is
 * not FILLED, phase IDLE, the counts it sealed agreeing with the records.
 * A clean table keeps its reuse bitmap and counts and runs no verifying
 * cycle; any other is recovered as after a kill (counted in
 * crashes_recovered; a sealed one that fails says why in the log): the
 * reuse bitmap emptied, no client served before the verifying cycles
 * pass (Note [Recovery cycles]).  So a table whose checksum fails is not
 * refused but proved the long way, as a killed heapd's is.
 *
 * One format, not a saved state beside the table: the state copied the
 * same records out of the table into a memfd of its own at every clean
 * stop (with a checksum a byte at a time) and back at every start.
 * Measured on a 32 GiB heap of 128 KiB segments (a table of 17 MB), an
 * asserting build on a loaded 2-core machine: the state took 26-40 ms to
 * save and 37-66 ms to take back; the seal takes 3-7 ms (mostly the sum)
 * and a clean take-back 14-16 ms, where one as after a kill takes 19-23
 * ms.  On a 1 GiB heap: the state 0.8-1.2 and 1.3-1.8 ms, the seal
 * 0.14-0.27 ms and a clean take-back 0.55-0.7 ms, against 7-8 ms as after
 * a kill, most of it the verifying cycles a clean table spares (20000
 * live objects here: they grow with the live heap).  The records in a
 * memfd cost no store more than private ones: the same stores into the
 * same memory; the table of a 4 GiB heap of 1 MiB segments is 416 KiB.
 *
 * Tables of another version are refused.  The release before this one
 * (table version 4) kept a slot's nursery run where this one keeps its
 * young budget (Note [Young objects] in proto/young.h), but a table of
 * its never gets this far: its heap is of layout 13, whose epoch 254 is
 * this layout's young mark, and the heap is refused at its daemon's page
 * before anything is mapped.  So an upgrade from it leaves the heap
 * unserved in the store (Note [Heaps heapd cannot adopt] in
 * daemon/adopt.c), as a downgrade does; so does one from the release
 * before that (version 3), which saved a state beside its table
 * (heapd.state.NAME, left with the heap).
 */
#include "table.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "globals.h"
#include "heap.h"
#include "log.h"
#include "futex.h"
#include "kept.h"

#define TABLE_MAGIC 0x3162746470616568ull /* "heapdtb1", little-endian */
/* TABLE_VERSION, in table.h */
#define TABLE_CLEAN 0x6e61656c63627468ull /* "htbclean", little-endian */

struct table_stats_copy {
    _Atomic uint64_t seq;     /* odd while written; 0: never written */
    struct heap_stats stats;
};

/* A connected mutator client (Note [The live table]: the registry).
 * `valid` is its id once every other field is written, 0 before. */
struct table_client {
    _Atomic uint64_t valid;
    uint8_t token[RESUME_TOKEN_BYTES];
    int32_t pid;
    uint32_t uid, gid;
    uint64_t start;
    char name[64];
    uint64_t granted;
};

/* Who holds mutator slot I: its client (0: free), region, alloc_bound,
 * and its young generation (Note [Young objects] in proto/young.h): the
 * nursery budget and the age it promotes at; young_bytes 0: none. */
struct table_slot {
    uint64_t client;
    uint32_t region;
    uint64_t alloc_bound;
    uint64_t young_bytes;
    uint32_t young_age;
};

/* What a clean stop adds (Note [The live table]): `word` is TABLE_CLEAN
 * once table_seal wrote the rest, 0 from a heapd's first store on. */
struct table_clean {
    uint64_t orphaned, adopted; /* the segment table's, at the seal */
    uint64_t sum;               /* table_sum at the seal */
    _Atomic uint64_t word;
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
    _Atomic uint32_t stop_gen;  /* the last stop generation asked */
    struct table_slot slots[LAYOUT_MAX_MUTATORS];
    struct table_client clients[TABLE_CLIENTS];
    struct table_clean clean;
};

_Static_assert(offsetof(struct table_header, clean.sum) % 8 == 0 &&
                   offsetof(struct table_header, clean.word) ==
                       offsetof(struct table_header, clean.sum) + 8,
               "table_sum skips the sum and the clean word, whole words");

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
    /* Note [The live table]: one version */
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
    ASSERT_LOCK_HELD(&h->lock);
    struct table_header *hd = h->table;
    if (!hd)
        return;
    uint64_t k = hd->copies++;
    struct table_stats_copy *c = &hd->stats[k & 1];
    atomic_store(&c->seq, 2 * k + 1);
    /* field by field: an ATOMIC counter is bumped without heap->lock (a
     * struct copy raced with the strays timer's purged_bytes, TSan) */
#define SAVE_LOCKED(name) c->stats.name = h->stats.name;
#define SAVE_ATOMIC(name)                                       \
    atomic_store_explicit(&c->stats.name,                       \
                          atomic_load_explicit(&h->stats.name,  \
                                               memory_order_relaxed), \
                          memory_order_relaxed);
#define SAVE_DERIVED(name)
#define SAVE_(name, type, kind, unit, source, help) SAVE_##source(name)
    HEAPD_HEAP_COUNTERS(SAVE_)
#undef SAVE_
#undef SAVE_DERIVED
#undef SAVE_ATOMIC
#undef SAVE_LOCKED
    c->stats.alloc_retired = h->stats.alloc_retired;
    c->stats.slot_retired = h->stats.slot_retired;
    c->stats.created_unix_ns = h->stats.created_unix_ns;
    atomic_store(&c->seq, 2 * k + 2);
}

/* FNV-1a over the table's 64-bit words but the sum's and the clean
 * word's (Note [The live table]). */
static uint64_t table_sum(const struct heap *h)
{
    const uint64_t *w = h->table;
    size_t skip = offsetof(struct table_header, clean.sum) / 8;
    size_t resume = offsetof(struct table_header, clean.word) / 8 + 1;
    size_t n = h->table_bytes / 8;
    uint64_t sum = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < skip; i++)
        sum = (sum ^ w[i]) * 0x100000001b3ull;
    for (size_t i = resume; i < n; i++)
        sum = (sum ^ w[i]) * 0x100000001b3ull;
    return sum;
}

bool table_seal(struct heap *h)
{
    struct table_header *hd = h->table;
    if (!hd || h->refused || atomic_load(&h->recovery_left) != 0)
        return false;
    heap_lock(h);
    assert(segtab_check(&h->segs)); /* Note [Checking the segment table] */
    assert(atomic_load(&h->control->phase) == LAYOUT_PHASE_IDLE);
    table_save_stats(h);
    hd->clean.orphaned = h->segs.orphaned;
    hd->clean.adopted = h->segs.adopted;
    hd->clean.sum = table_sum(h);
    /* last, after every record: Note [The live table] */
    atomic_store_explicit(&hd->clean.word, TABLE_CLEAN, memory_order_release);
    heap_unlock(h);
    return true;
}

static int registry_recover(struct heap *h, struct resume_client **kept,
                            uint32_t *odd, char *why, size_t n);

_Static_assert(TABLE_CLIENTS == LAYOUT_LIVE_CLIENTS,
               "live[] mirrors the registry: Note [Live clients]");

/* The daemon's page mirrors registry record K in live[K] (Note [Live
 * clients] in proto/layout.h): ID there now, 0 for none.  A client that
 * leaves bumps live_gen and wakes its sleepers. */
static void live_set(struct heap *h, unsigned k, uint64_t id)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct layout_control *c = h->control;
    if (id > atomic_load(&c->live_id_max))
        atomic_store(&c->live_id_max, id);
    uint64_t was = atomic_exchange(&c->live[k], id);
    if (was != 0 && was != id) {
        atomic_fetch_add(&c->live_gen, 1);
        futex_wake_all(&c->live_gen);
    }
}

/* Is ID one of KEPT's? */
static bool kept_id(const struct resume_client *kept, uint64_t id)
{
    for (; kept; kept = kept->next)
        if (kept->id == id)
            return true;
    return false;
}

/* A sealed table H is not taken as clean: say WHY once. */
static void not_clean(struct heap *h, bool *clean, const char *why)
{
    if (!*clean)
        return;
    log_warn("heap '%s': its table was sealed at a clean stop, but %s; it "
             "is recovered as after a kill, with verifying cycles",
             h->cfg->name, why);
    *clean = false;
}

int table_take_back(struct heap *h, char *why, size_t n,
                    struct resume_client **kept, bool *clean)
{
    struct table_header *hd = h->table;
    struct segtab *t = &h->segs;
    uint32_t odd = 0;
    int rc = 0;

    *kept = NULL;
    /* nobody else has the heap yet, but every writer of the table holds
     * the lock (Note [Checked lock rules] in proto/lock.h) */
    heap_lock(h);
    /* read before this heapd's first store, which clears it */
    *clean = atomic_load_explicit(&hd->clean.word, memory_order_acquire) ==
             TABLE_CLEAN;
    if (*clean && table_sum(h) != hd->clean.sum)
        not_clean(h, clean, "its checksum does not match: it was stored "
                  "into after");
    atomic_store(&hd->clean.word, 0);

    if ((rc = registry_recover(h, kept, &odd, why, n)) < 0)
        goto out;
    /* Note [Live clients]: the clients kept are alive, no other */
    for (unsigned k = 0; k < TABLE_CLIENTS; k++)
        live_set(h, k, atomic_load(&hd->clients[k].valid));
    if (odd)
        not_clean(h, clean, "its registry names clients or slots no heapd "
                  "writes");
    if (atomic_load(&h->control->phase) != LAYOUT_PHASE_IDLE)
        not_clean(h, clean, "the heap is in the middle of a cycle");

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
    /* the registry's clients keep what they hold until resume_adopt
     * decides (Note [Resuming clients]); any other owner is gone */
    /* a clean table keeps its reuse bitmap and the counts it sealed */
    struct seg_sealed sealed = {hd->clean.orphaned, hd->clean.adopted};
    odd = 0;
    if ((rc = seg_recover(h, h->stats.cycles_completed, *kept,
                          *clean ? &sealed : NULL, &odd, why, n)) < 0)
        goto out;
    if (odd)
        not_clean(h, clean, "its segment table is not as a clean stop "
                  "leaves it (the log says how)");
    if ((rc = globals_recover(h, *kept, why, n)) < 0)
        goto out;
    if (rc > 0)
        not_clean(h, clean, "global roots were being initialised by clients "
                  "it does not keep");
    rc = 0;
    for (struct resume_client *r = *kept; r; r = r->next)
        for (uint32_t i = t->first; i < t->high; i++)
            r->held += t->segs[i].state == SEG_OWNED &&
                       t->segs[i].owner == r->id;
    uint32_t stale = 0;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++)
        if (!kept_id(*kept, hd->slots[i].client)) {
            stale += hd->slots[i].client != 0;
            table_slot_set(h, i, 0, 0, 0);
            table_slot_young(h, i, 0, 0);
        }
    if (stale)
        not_clean(h, clean, "its slots name clients its registry does not "
                  "keep");
    atomic_store(&h->control->phase, LAYOUT_PHASE_IDLE);
    h->stop_gen = atomic_load(&hd->stop_gen);
    h->stats.restarts_survived++;
    h->stats.crashes_recovered += !*clean;
    table_save_stats(h);
out:
    if (rc < 0) {
        while (*kept) {
            struct resume_client *r = *kept;
            *kept = r->next;
            free(r);
        }
        /* not heap_unlock: the table failed seg_recover's own check (or
         * was not read), and the heap is refused as it was found */
        hd_mutex_unlock(&h->lock);
    } else {
        heap_unlock(h);
    }
    return rc;
}

/* ---- the registry: Note [The live table] ---- */

void table_client_add(struct heap *h, uint64_t id, const uint8_t *token,
                      pid_t pid, uid_t uid, gid_t gid, uint64_t start,
                      const char *name)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct table_header *hd = h->table;
    for (unsigned k = 0; hd && k < TABLE_CLIENTS; k++) {
        struct table_client *r = &hd->clients[k];
        if (atomic_load(&r->valid) != 0)
            continue;
        memcpy(r->token, token, sizeof r->token);
        r->pid = pid;
        r->uid = uid;
        r->gid = gid;
        r->start = start;
        snprintf(r->name, sizeof r->name, "%s", name);
        r->granted = 0;
        atomic_store(&r->valid, id); /* last: the record is whole */
        live_set(h, k, id);
        return;
    }
    /* full: this client is not kept if heapd is killed */
}

static struct table_client *client_of(struct heap *h, uint64_t id)
{
    struct table_header *hd = h->table;
    for (unsigned k = 0; hd && id && k < TABLE_CLIENTS; k++)
        if (atomic_load(&hd->clients[k].valid) == id)
            return &hd->clients[k];
    return NULL;
}

void table_client_remove(struct heap *h, uint64_t id)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct table_header *hd = h->table;
    struct table_client *r = client_of(h, id);
    if (r) {
        atomic_store(&r->valid, 0);
        live_set(h, (unsigned)(r - hd->clients), 0);
    }
}

void table_client_granted(struct heap *h, uint64_t id, uint64_t granted)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct table_client *r = client_of(h, id);
    if (r)
        r->granted = granted;
}

void table_slot_set(struct heap *h, unsigned slot, uint64_t client,
                    unsigned region, uint64_t alloc_bound)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct table_header *hd = h->table;
    if (!hd)
        return;
    hd->slots[slot].region = region;
    hd->slots[slot].alloc_bound = alloc_bound;
    hd->slots[slot].client = client;
}

void table_slot_young(struct heap *h, unsigned slot, uint64_t bytes,
                      uint32_t age)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct table_header *hd = h->table;
    if (!hd)
        return;
    hd->slots[slot].young_bytes = bytes;
    hd->slots[slot].young_age = age;
}

void table_stop_gen(struct heap *h, uint32_t gen)
{
    struct table_header *hd = h->table;
    if (hd)
        atomic_store(&hd->stop_gen, gen);
}

bool table_client_listed(struct heap *h, uint64_t id)
{
    ASSERT_LOCK_HELD(&h->lock);
    return client_of(h, id) != NULL;
}

/* The kept client (Note [Resuming clients] in resume.c) of registry
 * record TC, whose `valid` word read ID: the one place a resume_client
 * is made, after a clean stop and after a kill alike.  Each slot the
 * table gives it has its region, bound and young generation put back
 * into heap->owners (a budget or an age out of range is a young
 * generation no heapd grants: the slot resumes without one, counted in
 * *ODD); *ODD counts the slots naming it in a region no heapd writes,
 * which it does not get.  Its `held` is counted once the segment
 * records are recovered (table_take_back).  NULL: out of memory. */
static struct resume_client *kept_of(struct heap *h,
                                     const struct table_client *tc,
                                     uint64_t id, uint32_t *odd)
{
    struct table_header *hd = h->table;
    struct resume_client *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->id = id;
    memcpy(r->token, tc->token, sizeof r->token);
    r->pid = tc->pid;
    r->uid = tc->uid;
    r->gid = tc->gid;
    r->start = tc->start;
    memcpy(r->name, tc->name, sizeof r->name);
    r->granted = tc->granted;
    r->mem_fd = r->pidfd = -1;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        const struct table_slot *ts = &hd->slots[i];
        if (ts->client != id)
            continue;
        if (ts->region >= LAYOUT_MAX_MUTATORS) {
            (*odd)++; /* no slot of R's: its record goes too */
            table_slot_set(h, i, 0, 0, 0);
            table_slot_young(h, i, 0, 0);
            continue;
        }
        r->slots[i / 64] |= 1ull << (i % 64);
        h->owners[i].region = ts->region;
        atomic_store(&h->owners[i].alloc_bound, ts->alloc_bound);
        uint64_t bytes = ts->young_bytes;
        uint32_t age = ts->young_age;
        if (bytes != 0 && !heap_young_ok(h, bytes, age)) {
            (*odd)++; /* not what an attach grants */
            bytes = 0;
            table_slot_young(h, i, 0, 0);
        }
        h->owners[i].young_bytes = bytes;
        h->owners[i].young_age = bytes ? age : 0;
    }
    return r;
}

/* The clients the registry names, whole (Note [The live table]), as
 * records for resume_adopt; *ODD counts what no heapd writes: a record
 * with no name's end, a second record of one id or the id UINT64_MAX
 * (after which the next connection's id would wrap to 0, "none")
 * (dropped), a slot in no region (dropped). */
static int registry_recover(struct heap *h, struct resume_client **kept,
                            uint32_t *odd, char *why, size_t n)
{
    struct table_header *hd = h->table;
    for (unsigned k = 0; k < TABLE_CLIENTS; k++) {
        struct table_client *tc = &hd->clients[k];
        uint64_t id = atomic_load(&tc->valid);
        if (id == 0)
            continue;
        if (memchr(tc->name, 0, sizeof tc->name) == NULL ||
            id == UINT64_MAX || kept_id(*kept, id)) {
            atomic_store(&tc->valid, 0);
            (*odd)++;
            continue;
        }
        struct resume_client *r = kept_of(h, tc, id, odd);
        if (!r) {
            snprintf(why, n, "out of memory");
            return -ENOMEM;
        }
        r->next = *kept;
        *kept = r;
    }
    return 0;
}

void table_close(struct heap *h)
{
#ifndef NDEBUG
    /* Note [The live table]: nothing stores into a sealed table */
    struct table_header *hd = h->table;
    assert(!hd || atomic_load(&hd->clean.word) != TABLE_CLEAN ||
           table_sum(h) == hd->clean.sum);
#endif
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
