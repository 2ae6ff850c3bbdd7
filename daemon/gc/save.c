/* Saving a heap at a cycle's snapshot (heapctl save).
 *
 * Note [Saving a heap at a snapshot]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A save is one collection cycle that also copies, to a file (Note [Saved
 * heap files] in proto/savefile.c), every object the globals reached at
 * its snapshot, as it was then, while mutators run:
 *   - the snapshot pause takes the save asked for, copies the globals'
 *     names and values, and sets the control page's save_epoch to the
 *     cycle's epoch, which turns on the barrier's save records (Note
 *     [Saving under the barrier] in client/barrier.c);
 *   - a saver thread traces from those values with its own visited
 *     bitmap (a bit per block a segment may hold: max_size / 128 bytes of
 *     address space, touched where objects are), beside the markers.  Each
 *     object it reaches it reads, then reads its dirty tag: an object not
 *     tagged with the epoch before and after has its snapshot fields; one
 *     that is has them in the save record its first writer published, in
 *     some ring: the saver drains the rings (as the loop thread does) until
 *     the record is there.  Its references are checked as the marker's
 *     are (Note [Validating references]); one to no object is saved as 0
 *     and counted;
 *   - nothing is freed meanwhile: the cycle's final sync waits for the
 *     saver, so the sweep that could reuse a snapshot object's block comes
 *     after the last copy;
 *   - the file is written as TMP beside the target, fsync'd, renamed over
 *     it, and the directory fsync'd, before the cycle completes and the
 *     request is answered.
 * Memory: the visited bits, a stack of objects found but not yet copied,
 * one chunk of output, and the records of objects written during the save
 * (as a fork's copied pages are, for Redis' BGSAVE), up to an eighth of
 * the heap's max_size; a record is kept only for an object of its field
 * count.  A record the saver waits for more than RECORD_WAIT_MS (its
 * writer died between its swap and its publishing, or is a client of a
 * release without save records) is given up: that object, and every later
 * one without its record, is copied as read and counted as inexact in the
 * outcome.  A stop of heapd ends a save at its next object (save_abort).
 */
#include "save.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "heap.h"
#include "log.h"
#include "mark.h"
#include "savefile.h"
#include "validate.h"

#define RECORD_WAIT_MS 1000u
/* the records may hold up to max_size / SAVE_RECORDS_SHARE bytes */
#define SAVE_RECORDS_SHARE 8u

struct save_rec {
    uintptr_t obj;
    uint64_t n;
    uint64_t first;          /* a wide one: where its chunks began */
    uint64_t have;           /* ... and the fields they brought, in order */
    uintptr_t f[];
};

static size_t rec_size(uint64_t n)
{
    return sizeof(struct save_rec) + n * sizeof(uintptr_t);
}

/* An object the saver found: where, its block as the file says it (kind
 * and bytes, Note [Saved heap files]) and whether it was found through
 * fields copied as read, which may lead to objects born after the
 * snapshot: dirty from birth, with no record to wait for. */
struct save_found {
    uintptr_t obj;
    uint64_t block;
    bool as_read;
};

struct save_global {
    char name[LAYOUT_GLOBAL_NAME];
    uintptr_t value;
};

struct save_job {
    struct heap *h;
    uint64_t id;
    int fd;
    char path[4096], tmp[4096];
    uint8_t epoch;
    uint64_t t0;
    pthread_t thread;
    bool started;
    unsigned nglobals;
    struct save_global globals[LAYOUT_MAX_GLOBALS];
    /* the records (heap->lock): open addressing on obj, cap a power of 2 */
    struct save_rec **recs;
    size_t rec_cap, rec_n;
    uint64_t rec_bytes;      /* what the records hold */
    /* per slot, the wide record its chunks are building (Note [Saving
     * under the barrier]): a mutator builds one at a time */
    struct save_rec *wide[LAYOUT_MAX_MUTATORS];
    /* the saver's own */
    uint64_t *visited;
    size_t visited_bytes;
    uint64_t blocks_per_seg;
    struct save_found *stack; /* found, not yet copied */
    size_t sp, stack_cap;
    uintptr_t *refs;         /* one object's snapshot fields */
    size_t refs_cap;
    uint8_t *buf;            /* the chunk being filled */
    size_t used;
    uint64_t data_bytes;     /* DATA payload written */
    bool gave_up;            /* Note [Saving a heap at a snapshot] */
    _Atomic bool abort;      /* save_abort */
    struct save_result res;
};

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void job_free(struct save_job *j)
{
    if (!j)
        return;
    for (size_t k = 0; k < j->rec_cap; k++)
        free(j->recs ? j->recs[k] : NULL);
    free(j->recs);
    for (unsigned k = 0; k < LAYOUT_MAX_MUTATORS; k++)
        free(j->wide[k]);
    if (j->visited)
        munmap(j->visited, j->visited_bytes);
    free(j->stack);
    free(j->refs);
    free(j->buf);
    if (j->fd >= 0) {
        close(j->fd);
        unlink(j->tmp);
    }
    free(j);
}

int64_t save_request(struct heap *h, int fd, const char *path,
                     const char *tmp, char *why, size_t n)
{
    static _Atomic uint64_t ids;
    struct save_job *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(why, n, "out of memory for a save");
        return -ENOMEM;
    }
    j->h = h;
    j->fd = fd;
    snprintf(j->path, sizeof j->path, "%s", path);
    snprintf(j->tmp, sizeof j->tmp, "%s", tmp);
    heap_lock(h);
    if (h->save_asked || h->saving) {
        heap_unlock(h);
        snprintf(why, n, "heap '%s' is being saved already; ask again "
                 "once that save is done", h->cfg->name);
        j->fd = -1; /* the caller's to close */
        free(j);
        return -EBUSY;
    }
    j->id = atomic_fetch_add(&ids, 1) + 1;
    h->save_asked = j;
    heap_unlock(h);
    return (int64_t)j->id;
}

void save_snapshot(struct heap *h, uint8_t epoch)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct save_job *j = h->save_asked;
    if (!j)
        return;
    h->save_asked = NULL;
    h->saving = j;
    j->epoch = epoch;
    j->t0 = monotonic_ns();
    j->res.id = j->id;
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++) {
        if (h->globals[i].state != LAYOUT_GLOBAL_SET)
            continue;
        struct save_global *g = &j->globals[j->nglobals++];
        memcpy(g->name, h->globals[i].name, sizeof g->name);
        g->name[sizeof g->name - 1] = 0;
        g->value = (uintptr_t)atomic_load(&h->control->global_values[i]);
    }
    /* Note [Saving under the barrier]: on from the first write after the
     * pause */
    atomic_store(&h->control->save_epoch, epoch);
}

/* ---- the records (heap->lock) ---- */

static size_t rec_slot(const struct save_job *j, uintptr_t obj)
{
    uint64_t x = (uint64_t)obj * UINT64_C(0x9e3779b97f4a7c15);
    size_t k = (size_t)(x >> 20) & (j->rec_cap - 1);
    while (j->recs[k] && j->recs[k]->obj != obj)
        k = (k + 1) & (j->rec_cap - 1);
    return k;
}

static bool rec_grow(struct save_job *j)
{
    size_t cap = j->rec_cap ? 2 * j->rec_cap : 1024;
    struct save_rec **old = j->recs, **nw = calloc(cap, sizeof *nw);
    size_t oldcap = j->rec_cap;
    if (!nw)
        return false;
    j->recs = nw;
    j->rec_cap = cap;
    for (size_t k = 0; k < oldcap; k++)
        if (old[k])
            j->recs[rec_slot(j, old[k]->obj)] = old[k];
    free(old);
    return true;
}

/* With heap->lock held: R (counted in rec_bytes) becomes its object's
 * record, unless it has one (one per object and cycle: another is
 * forged) or there is no memory (the object will be copied as read); R is
 * freed then. */
static void rec_insert(struct save_job *j, struct save_rec *r)
{
    size_t k;
    if (((j->rec_n + 1) * 2 > j->rec_cap && !rec_grow(j)) ||
        j->recs[k = rec_slot(j, r->obj)]) {
        j->rec_bytes -= rec_size(r->n);
        free(r);
        return;
    }
    j->recs[k] = r;
    j->rec_n++;
    if (j->rec_bytes > j->res.record_bytes_max)
        j->res.record_bytes_max = j->rec_bytes;
}

/* With heap->lock held: a record of OBJ's fields, if OBJ is an object and
 * it stays within the bound (NULL otherwise), counted; N: the fields it
 * must have (UINT64_MAX: its own). */
static struct save_rec *rec_new(struct heap *h, struct save_job *j,
                                uintptr_t obj, uint64_t n)
{
    struct valid_ref ref;
    if (!validate_ref(h, obj, &ref))
        return NULL;
    uint64_t nrefs = layout_header_nrefs(validate_header(&ref));
    /* a record is kept only for an object of that many fields, and
     * within its bound: a client that forges records grows heapd's
     * memory no further (its objects are then copied as read) */
    if ((n != UINT64_MAX && n != nrefs) ||
        j->rec_bytes + rec_size(nrefs) >
            h->cfg->max_size / SAVE_RECORDS_SHARE)
        return NULL;
    struct save_rec *r = malloc(rec_size(nrefs));
    if (!r)
        return NULL;
    r->obj = obj;
    r->n = nrefs;
    r->first = r->have = 0;
    j->rec_bytes += rec_size(nrefs);
    return r;
}

static void rec_drop(struct save_job *j, struct save_rec *r)
{
    if (r) {
        j->rec_bytes -= rec_size(r->n);
        free(r);
    }
}

void save_take_record(struct heap *h, uintptr_t obj, void *_Atomic *ring,
                      uint64_t at, uint64_t n)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct save_job *j = h->saving;
    struct save_rec *r;
    if (!j || !(r = rec_new(h, j, obj, n)))
        return;
    j->res.records++;
    for (uint64_t i = 0; i < n; i++)
        r->f[i] = (uintptr_t)atomic_load_explicit(
            &ring[(at + i) % LAYOUT_URS_SIZE], memory_order_relaxed);
    rec_insert(j, r);
}

void save_take_chunk(struct heap *h, unsigned slot, uintptr_t obj,
                     uint64_t first, uint64_t k, void *_Atomic *ring,
                     uint64_t at, uint64_t n)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct save_job *j = h->saving;
    if (!j || slot >= LAYOUT_MAX_MUTATORS)
        return;
    struct save_rec *w = j->wide[slot];
    /* a mutator builds one wide record at a time: another one's chunks
     * end the one before (a writer that lost, or died) */
    if (w && (w->first != first || w->obj != obj)) {
        rec_drop(j, w);
        w = j->wide[slot] = NULL;
    }
    if (!w) {
        if (k != 0 || !(w = rec_new(h, j, obj, UINT64_MAX)))
            return;
        w->first = first;
        j->wide[slot] = w;
    }
    /* in order, each once: a chunk out of place makes the record short */
    if (k != w->have || n > w->n - k) {
        rec_drop(j, w);
        j->wide[slot] = NULL;
        return;
    }
    for (uint64_t i = 0; i < n; i++)
        w->f[k + i] = (uintptr_t)atomic_load_explicit(
            &ring[(at + i) % LAYOUT_URS_SIZE], memory_order_relaxed);
    w->have += n;
}

void save_take_commit(struct heap *h, unsigned slot, uintptr_t obj,
                      uint64_t first)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct save_job *j = h->saving;
    if (!j || slot >= LAYOUT_MAX_MUTATORS)
        return;
    struct save_rec *w = j->wide[slot];
    if (!w || w->first != first || w->obj != obj)
        return;
    j->wide[slot] = NULL;
    if (w->have != w->n) {
        rec_drop(j, w);
        return;
    }
    j->res.records++;
    rec_insert(j, w);
}

void save_slot_freed(struct heap *h, unsigned slot)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct save_job *j = h->saving;
    if (j && slot < LAYOUT_MAX_MUTATORS) {
        rec_drop(j, j->wide[slot]); /* its next owner starts anew */
        j->wide[slot] = NULL;
    }
}

/* Drain every ring into the records, as the loop thread would. */
static void drain_rings(struct save_job *j)
{
    struct heap *h = j->h;
    heap_lock(h);
    for (unsigned i = 0; h->marking && i < LAYOUT_MAX_MUTATORS; i++)
        if (heap_slot_attached(h, i))
            mark_urs(h, h->marking, i);
    heap_unlock(h);
}

/* The record for OBJ (NULL: none yet).  Records stay until the save
 * ends: an object is copied once. */
static struct save_rec *rec_find(struct save_job *j, uintptr_t obj)
{
    struct save_rec *r = NULL;
    heap_lock(j->h);
    if (j->rec_cap)
        r = j->recs[rec_slot(j, obj)];
    heap_unlock(j->h);
    return r;
}

/* The record of dirty OBJ, waiting for it to be published (Note [Saving a
 * heap at a snapshot]). */
static struct save_rec *rec_wait(struct save_job *j, uintptr_t obj,
                                 bool as_read)
{
    struct save_rec *r = rec_find(j, obj);
    if (r)
        return r;
    drain_rings(j);
    /* found through fields copied as read: born after the snapshot, with
     * no record to come, as likely as not */
    if ((r = rec_find(j, obj)) || j->gave_up || as_read)
        return r;
    uint64_t until = monotonic_ns() + RECORD_WAIT_MS * 1000000ull;
    while (!(r = rec_find(j, obj)) && monotonic_ns() < until) {
        nanosleep(&(struct timespec){.tv_nsec = 50000}, NULL);
        drain_rings(j);
    }
    if (!r) {
        j->gave_up = true;
        log_warn("heap '%s': save: no save record of object 0x%lx came in "
                 "%u ms (its writer died while writing it, or runs a "
                 "libheapd before 0.2); it and every object after it "
                 "without one are saved as read", j->h->cfg->name,
                 (unsigned long)obj, RECORD_WAIT_MS);
    }
    return r;
}

/* ---- output ---- */

static int write_all(struct save_job *j, const struct iovec *iov, int n)
{
    struct iovec v[3];
    memcpy(v, iov, (size_t)n * sizeof *v);
    struct iovec *p = v;
    while (n > 0) {
        ssize_t w = writev(j->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            int e = errno;
            snprintf(j->res.why, sizeof j->res.why,
                     "writing %.300s at offset %llu: %s; free space or "
                     "choose another file", j->tmp,
                     (unsigned long long)j->res.file_bytes, strerror(e));
            return -e;
        }
        j->res.file_bytes += (uint64_t)w;
        while (n > 0 && (size_t)w >= p->iov_len) {
            w -= (ssize_t)p->iov_len;
            p++;
            n--;
        }
        if (n > 0) {
            p->iov_base = (char *)p->iov_base + w;
            p->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static int put_chunk(struct save_job *j, uint32_t type, const void *payload,
                     uint32_t len)
{
    uint8_t prefix[8], crc[4];
    save_chunk_prefix(prefix, type, len);
    save_put32(crc, save_chunk_crc(prefix, payload, len));
    struct iovec iov[3] = {{prefix, 8}, {(void *)payload, len}, {crc, 4}};
    return write_all(j, iov, 3);
}

static int flush(struct save_job *j)
{
    if (j->used == 0)
        return 0;
    int rc = put_chunk(j, SAVE_CHUNK_DATA, j->buf, (uint32_t)j->used);
    j->data_bytes += j->used;
    j->used = 0;
    return rc;
}

static int put(struct save_job *j, const void *p, size_t n)
{
    const uint8_t *s = p;
    while (n > 0) {
        size_t k = SAVE_CHUNK_MAX - j->used;
        if (k > n)
            k = n;
        memcpy(j->buf + j->used, s, k);
        j->used += k;
        s += k;
        n -= k;
        if (j->used == SAVE_CHUNK_MAX) {
            int rc = flush(j);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

static int put64(struct save_job *j, uint64_t v)
{
    if (j->used + 8 <= SAVE_CHUNK_MAX) { /* the common case, in line */
        save_put64(j->buf + j->used, v);
        j->used += 8;
        return j->used == SAVE_CHUNK_MAX ? flush(j) : 0;
    }
    uint8_t b[8];
    save_put64(b, v);
    return put(j, b, 8);
}

/* ---- tracing ---- */

/* Validate R and mark it visited; true if it is an object not yet seen,
 * with *BLOCK its block for the file.  *OK says whether it is an object at
 * all. */
static bool discover(struct save_job *j, uintptr_t r, bool *ok,
                     uint64_t *block)
{
    struct heap *h = j->h;
    struct valid_ref ref;
    *ok = r == 0 || (validate_ref(h, r, &ref) && validate_header(&ref));
    if (r == 0 || !*ok)
        return false;
    uint32_t i = (uint32_t)((r - (uintptr_t)h->base) >> h->seg_shift);
    uint64_t idx = (uint64_t)(ref.mark -
                              layout_seg_marks(heap_seg_addr(h, i)));
    uint64_t bit = (uint64_t)i * j->blocks_per_seg + idx;
    uint64_t *w = &j->visited[bit >> 6], m = UINT64_C(1) << (bit & 63);
    if (*w & m)
        return false;
    *w |= m;
    uint64_t kind = seg_state(&h->segs, i) == SEG_LARGE ? SAVE_BLOCK_LARGE
                    : seg_class(h, i) == LAYOUT_CLASS_RUN ? SAVE_BLOCK_RUN
                                                          : SAVE_BLOCK_SMALL;
    *block = ref.block_size | kind << SAVE_BLOCK_KIND_SHIFT;
    return true;
}

/* Found R: validated, visited, and on the stack if new.  An R that is
 * no object becomes 0, counted. */
static int found(struct save_job *j, uintptr_t *r, bool as_read)
{
    bool ok;
    uint64_t block;
    if (discover(j, *r, &ok, &block)) {
        if (j->sp == j->stack_cap) {
            size_t cap = j->stack_cap ? 2 * j->stack_cap : 4096;
            struct save_found *st = realloc(j->stack, cap * sizeof *st);
            if (!st)
                return -ENOMEM;
            j->stack = st;
            j->stack_cap = cap;
        }
        j->stack[j->sp++] = (struct save_found){*r, block, as_read};
    }
    if (!ok) {
        j->res.bad_refs++;
        *r = 0;
    }
    return 0;
}

static int refs_room(struct save_job *j, size_t n)
{
    if (n <= j->refs_cap)
        return 0;
    uintptr_t *p = realloc(j->refs, n * sizeof *p);
    if (!p)
        return -ENOMEM;
    j->refs = p;
    j->refs_cap = n;
    return 0;
}

/* Copy F (validated when found, and visited) to the file as it was at
 * the snapshot, and push the objects it referenced then. */
static int save_object(struct save_job *j, const struct save_found *fo)
{
    struct valid_ref ref;
    uintptr_t obj = fo->obj;
    _Atomic uint64_t *hp = (_Atomic uint64_t *)obj - 1;
    void *_Atomic *f = (void *_Atomic *)obj;
    uint64_t h1 = atomic_load_explicit(hp, memory_order_acquire);
    /* its block is as found: nothing is freed or moved before the sweep;
     * its header is read again, and must still fit it */
    ref.block_size = fo->block & SAVE_BLOCK_BYTES_MASK;
    ref.obj = obj;
    uint64_t hdr = validate_header(&ref);
    uint64_t nrefs = layout_header_nrefs(hdr);
    uint64_t nbytes = layout_header_nbytes(hdr);
    bool as_read = fo->as_read;
    int rc = refs_room(j, nrefs);
    if (rc < 0)
        return rc;
    if (!hdr) {
        /* a client rewrote its header since it was found: an empty
         * object in its block keeps the file's references whole */
        j->res.bad_refs++;
        nbytes = 0;
    }
    bool clean = layout_header_tag(h1) != j->epoch;
    if (clean) {
        /* acquire: a write's store to a field is a release after its
         * tag (Note [Saving under the barrier]), so a field read new
         * shows the tag below */
        for (uint64_t k = 0; k < nrefs; k++)
            j->refs[k] = (uintptr_t)atomic_load_explicit(&f[k],
                                                         memory_order_acquire);
        clean = layout_header_tag(atomic_load_explicit(
                    hp, memory_order_relaxed)) != j->epoch;
        if (clean)
            as_read = false; /* as at the snapshot, whatever led here */
    }
    if (!clean) {
        struct save_rec *r = rec_wait(j, obj, fo->as_read);
        if (r && r->n == nrefs) {
            memcpy(j->refs, r->f, nrefs * sizeof r->f[0]);
            as_read = false;
        } else {
            j->res.inexact++;
            as_read = true;
            for (uint64_t k = 0; k < nrefs; k++)
                j->refs[k] = (uintptr_t)atomic_load_explicit(
                    &f[k], memory_order_relaxed);
        }
    }
    if ((rc = put64(j, obj | SAVE_REC_OBJECT)) < 0 ||
        (rc = put64(j, fo->block)) < 0 ||
        (rc = put64(j, layout_header(nrefs, nbytes))) < 0)
        return rc;
    for (uint64_t k = 0; k < nrefs; k++)
        if ((rc = found(j, &j->refs[k], as_read)) < 0 ||
            (rc = put64(j, j->refs[k])) < 0)
            return rc;
    /* raw bytes have no barrier: as read (Note [Saving under the
     * barrier]) */
    static const uint8_t zero[8];
    if ((rc = put(j, (const uint8_t *)(f + nrefs), nbytes)) < 0 ||
        (rc = put(j, zero, (8 - nbytes % 8) % 8)) < 0)
        return rc;
    j->res.objects++;
    j->res.object_bytes += layout_object_size(nrefs, nbytes);
    return 0;
}

static int save_globals(struct save_job *j)
{
    int rc;
    for (unsigned g = 0; g < j->nglobals; g++) {
        struct save_global *s = &j->globals[g];
        size_t len = strlen(s->name);
        uint8_t name[LAYOUT_GLOBAL_NAME] = {0};
        memcpy(name, s->name, len);
        if ((rc = found(j, &s->value, false)) < 0 ||
            (rc = put64(j, SAVE_REC_GLOBAL)) < 0 ||
            (rc = put64(j, s->value)) < 0 || (rc = put64(j, len)) < 0 ||
            (rc = put(j, name, (len + 7) & ~(size_t)7)) < 0)
            return rc;
        j->res.globals++;
    }
    return 0;
}

static int save_end(struct save_job *j)
{
    int rc = flush(j);
    if (rc < 0)
        return rc;
    uint8_t end[32];
    save_put64(end, j->res.objects);
    save_put64(end + 8, j->res.object_bytes);
    save_put64(end + 16, j->res.globals);
    save_put64(end + 24, j->data_bytes);
    return put_chunk(j, SAVE_CHUNK_END, end, sizeof end);
}

/* Sync the file, give it its name, sync its directory. */
static int save_commit_(struct save_job *j)
{
    const char *what = "syncing";
    /* a save is answered only once its file and name are on disk */
    int rc = 0;
    if (fsync(j->fd) < 0)
        goto fail;
    what = "renaming it to its name";
    if (rename(j->tmp, j->path) < 0)
        goto fail;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", j->path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    what = "syncing its directory";
    if (dfd < 0 || fsync(dfd) < 0) {
        rc = -errno;
        if (dfd >= 0)
            close(dfd);
        snprintf(j->res.why, sizeof j->res.why, "%.300s is in place, but "
                 "syncing its directory failed (%s): a crash now may lose "
                 "it; save again", j->path, strerror(-rc));
        return rc;
    }
    close(dfd);
    return 0;
fail:
    rc = -errno;
    snprintf(j->res.why, sizeof j->res.why, "%s %.300s: %s", what, j->tmp,
             strerror(-rc));
    return rc;
}

static int save_commit(struct save_job *j)
{
    uint64_t t0 = monotonic_ns();
    int rc = save_commit_(j);
    j->res.sync_ns = monotonic_ns() - t0;
    return rc;
}

static int save_run(struct save_job *j)
{
    struct heap *h = j->h;
    int rc;
    j->buf = malloc(SAVE_CHUNK_MAX);
    j->blocks_per_seg = (uint64_t)1 << (h->seg_shift - 4);
    j->visited_bytes = (((uint64_t)h->segs.count * j->blocks_per_seg + 63) /
                        64) * 8;
    j->visited = mmap(NULL, j->visited_bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (j->visited == MAP_FAILED)
        j->visited = NULL;
    if (!j->buf || !j->visited) {
        snprintf(j->res.why, sizeof j->res.why, "out of memory for the "
                 "save's buffers");
        return -ENOMEM;
    }
    struct save_header hd = {
        .format = SAVE_FORMAT,
        .layout = LAYOUT_VERSION,
        .base = (uint64_t)(uintptr_t)h->base,
        .max_size = h->cfg->max_size,
        .segment_size = h->cfg->segment_size,
        .saved_at_ns = realtime_ns(),
    };
    uint8_t head[SAVE_HEADER_BYTES];
    save_header_encode(&hd, head);
    struct iovec iov = {head, sizeof head};
    if ((rc = write_all(j, &iov, 1)) < 0 || (rc = save_globals(j)) < 0)
        return rc;
#ifndef NDEBUG
    heap_hold_for_tests(h, "HEAPD_TEST_HOLD_SAVE", "save", &j->abort);
#endif
    while (j->sp > 0) {
        struct save_found fo = j->stack[--j->sp];
        if (atomic_load_explicit(&j->abort, memory_order_relaxed)) {
            snprintf(j->res.why, sizeof j->res.why, "heapd is stopping; "
                     "save again once it runs");
            return -ECANCELED;
        }
        if ((rc = save_object(j, &fo)) < 0)
            return rc; /* ENOMEM, or a write (its why set) */
    }
    if ((rc = save_end(j)) < 0 || (rc = save_commit(j)) < 0)
        return rc;
    return 0;
}

static void *saver_main(void *arg)
{
    struct save_job *j = arg;
    pthread_setname_np(pthread_self(), "heapd-save");
    j->res.rc = save_run(j);
    if (j->res.rc < 0 && !j->res.why[0])
        snprintf(j->res.why, sizeof j->res.why, "%s",
                 strerror(-j->res.rc));
    return NULL;
}

void save_start(struct heap *h)
{
    heap_lock(h);
    struct save_job *j = h->saving;
    if (j)
        j->started = true;
    heap_unlock(h);
    if (!j)
        return;
    if (pthread_create(&j->thread, NULL, saver_main, j) != 0) {
        j->started = false;
        j->res.rc = -EAGAIN;
        snprintf(j->res.why, sizeof j->res.why, "no thread for the saver; "
                 "try again");
    }
}

bool save_finish(struct heap *h)
{
    heap_lock(h);
    struct save_job *j = h->saving;
    heap_unlock(h);
    if (!j)
        return false;
    if (j->started)
        pthread_join(j->thread, NULL);
    heap_lock(h);
    atomic_store(&h->control->save_epoch, 0);
    h->saving = NULL;
    if (j->res.rc == 0) {
        close(j->fd);
        j->fd = -1;
    }
    j->res.ns = monotonic_ns() - j->t0;
    /* by id: a save asked for as another ends is answered a cycle after
     * it, and the other's outcome must still be there */
    if (!h->save_last)
        h->save_last = calloc(SAVE_OUTCOMES, sizeof *h->save_last);
    if (h->save_last)
        h->save_last[j->id % SAVE_OUTCOMES] = j->res;
    heap_unlock(h);
    if (j->res.rc == 0)
        log_info("heap '%s': saved to %s: %llu objects (%llu bytes), %llu "
                 "globals, %llu file bytes in %llu ms; %llu copied as "
                 "read, %llu bad references", h->cfg->name, j->path,
                 (unsigned long long)j->res.objects,
                 (unsigned long long)j->res.object_bytes,
                 (unsigned long long)j->res.globals,
                 (unsigned long long)j->res.file_bytes,
                 (unsigned long long)(j->res.ns / 1000000),
                 (unsigned long long)j->res.inexact,
                 (unsigned long long)j->res.bad_refs);
    else
        log_error("heap '%s': save to %s failed: %s", h->cfg->name, j->path,
                  j->res.why);
    job_free(j);
    return true;
}

void save_abort(struct heap *h)
{
    heap_lock(h);
    if (h->saving)
        atomic_store(&h->saving->abort, true);
    /* and one whose cycle has started but not reached its snapshot */
    if (h->save_asked)
        atomic_store(&h->save_asked->abort, true);
    heap_unlock(h);
}

void save_discard(struct heap *h)
{
    job_free(h->save_asked);
    h->save_asked = NULL;
    free(h->save_last);
    h->save_last = NULL;
}
