/* libheapd's young generation: bump allocation in a mutator's nursery,
 * minor collections, promotion and publication, and the preparatory push.
 * The nursery's layout is Note [Nurseries] in proto/young.h.
 *
 * Note [The young invariant]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~
 * No object of the shared heap, no global and no other mutator's root
 * references a young object: only its own mutator's root slots (and the
 * parked value of a call in flight, Note [Values in flight]) and its own
 * young objects do.  Everything rests on it: the daemon never needs to
 * see a nursery except through its owner's roots, a minor collection
 * needs no remembered set (nothing old points young), and an object may
 * move by updating only those roots and young fields.  So every store
 * that could break it publishes first: heapd_write and heapd_cas of a
 * young value into a shared object, heapd_global_set and
 * heapd_global_once's result, and heapd_publish itself copy the value and
 * every young object it reaches into the shared heap (promote_closure),
 * mark each original forwarded to its copy, and only then store the
 * copy's address.  Until the copy is stored nothing shared can reach it,
 * so a process killed in the middle of a publication leaves only
 * unreachable blocks in its own segments, which the next sweep frees.
 * A store INTO a young object needs no barrier at all: nothing shared
 * reaches its fields, and the preparatory push saw what they held at the
 * snapshot (Note [The preparatory push]).  The daemon enforces the rule
 * for others (Note [References into a nursery] in daemon/gc/validate.c): a
 * reference into a nursery met anywhere else is counted and not
 * followed, and the heap verifier reports a shared object that holds one.
 *
 * Note [Minor collections]
 * ~~~~~~~~~~~~~~~~~~~~~~~~
 * A mutator allocates young objects by bumping `top` in the active half
 * of its nursery.  When the half is full, heapd_alloc -- a safepoint,
 * before the new object exists -- collects the nursery itself (minor), in
 * the mutator's own thread, stopping nobody else:
 *   - the halves swap; every young root is evacuated: an object that has
 *     now survived young_age minor collections is promoted (copied into a
 *     block of the shared heap, like one the mutator allocates, so black
 *     while marking: Note [Epoch-tagged marks]), any other one is copied
 *     into the new half with its age, the header's tag, one higher;
 *   - Cheney's scan then evacuates what the copies reference, and the
 *     fields of each promoted copy are evacuated with promotion forced:
 *     a shared object may reference no young one (Note [The young
 *     invariant]), so what a promoted object reaches is promoted too,
 *     even a young copy made earlier in the same collection;
 *   - if anything was promoted, one more pass over the roots and the new
 *     half replaces references to forwarded objects by their copies.
 * The old half is then garbage, and allocation goes on in the new one,
 * after the survivors.  Survivors never overflow the new half: they are
 * at most what the old one held.  An object that dies before its second
 * minor collection (young_age 2, the default) never reaches the shared
 * heap: the reason for aging, as in GHC's Note [Aging under the
 * non-moving collector].  A minor collection never waits and never takes
 * a stop (Note [Promotion never waits]), so no snapshot, and no daemon
 * tracing the nursery, ever sees one half done.
 *
 * Note [Promotion never waits]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A publication happens inside heapd_write, which is not a safepoint:
 * were it to wait for a segment in a blocking region, a snapshot could
 * pass and the caller's C locals lose their objects (Note [Client GC
 * discipline]); and a minor collection that waited in the middle would
 * show a half-copied nursery to a daemon that marks it.  So neither ever
 * asks the daemon for memory.  Instead the mutator keeps, per size class,
 * as many free blocks as it has young objects of that class that could
 * still be promoted (count[k] <= lim[k]): the free blocks of its current
 * segment of the class (avail[k]) and of empty segments it keeps aside
 * for the class (the stash).  heapd_alloc restores the bound before it
 * bumps, asking for a blank segment in a blocking region if need be (it
 * is a safepoint, and the new object does not exist yet); a promotion
 * takes a block and lowers both sides by one; a minor collection makes
 * count[k] the young survivors.  The agent may take a current segment
 * from a blocked mutator (Note [Remark requests] in client/remark.c), so
 * leaving a blocking region counts the current segments again.  The
 * price is address space: up to one block per young object, in segments
 * that stay blank (no memory is touched) until a promotion uses them.
 * A shared allocation of the class (heapd_alloc_shared, an object too big
 * for the nursery) may take one of the counted blocks, so it first makes
 * the bound hold with one block to spare (young_before_shared), before
 * the block is taken: afterwards the new object must not meet a wait.
 */
#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "barrier.h"
#include "client.h"
#include "clock.h"
#include "errors.h"
#include "heapd.h"
#include "layout.h"
#include "minor.h"
#include "mutator.h"
#include "reserve.h"
#include "young.h"

/* Note [Stopping inside a young phase]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A test hook of debug builds: HEAPD_YOUNG_STOP_IN=minor, publish or push
 * in the environment makes a young mutator stop itself (SIGSTOP) once,
 * halfway through its first minor collection, publication or preparatory
 * push that has that far to go, so that a test can SIGKILL it exactly
 * there (tests/test_young_crash.c).  Release builds (NDEBUG) have none.
 */
enum young_phase { PHASE_MINOR = 1, PHASE_PUBLISH, PHASE_PUSH };
#ifndef NDEBUG
static void stop_in(enum young_phase phase)
{
    static _Atomic int want = -1;
    int w = atomic_load_explicit(&want, memory_order_relaxed);
    if (w < 0) {
        const char *e = getenv("HEAPD_YOUNG_STOP_IN");
        w = !e ? 0 : strcmp(e, "minor") == 0 ? PHASE_MINOR
                   : strcmp(e, "publish") == 0 ? PHASE_PUBLISH
                   : strcmp(e, "push") == 0 ? PHASE_PUSH : 0;
        atomic_store(&want, w);
    }
    if (w == (int)phase) {
        atomic_store(&want, 0); /* once */
        raise(SIGSTOP);
    }
}
#else
static inline void stop_in(enum young_phase phase)
{
    (void)phase;
}
#endif

static inline uint64_t *hdr_of(void *obj)
{
    return (uint64_t *)obj - 1;
}

static inline bool forwarded(uint64_t h)
{
    return layout_header_tag(h) == LAYOUT_YOUNG_FORWARDED;
}

static inline void *fwd_of(void *obj)
{
    return *(void **)obj;
}

/* The size class a young object of header H takes when promoted. */
static inline unsigned shared_class(uint64_t h)
{
    return young_class_of(layout_header_nrefs(h), layout_header_nbytes(h));
}

static void publish_stats(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    struct layout_mutator *s = m->slot;
    if (mutator_orphaned(m))
        return; /* Note [A dead daemon] in client/mutator.c */
    atomic_store_explicit(&s->young_minor, y->minor, memory_order_relaxed);
    atomic_store_explicit(&s->young_promoted_age, y->promoted_age,
                          memory_order_relaxed);
    atomic_store_explicit(&s->young_promoted_pub, y->promoted_pub,
                          memory_order_relaxed);
    atomic_store_explicit(&s->young_pause_max_ns, y->pause_max,
                          memory_order_relaxed);
    atomic_store_explicit(&s->young_pause_total_ns, y->pause_total,
                          memory_order_relaxed);
}

/* ---- set up and tear down ---- */

int young_init(heapd_mutator *m, uint32_t first, uint32_t segs, uint32_t age)
{
    struct young_gen *y = &m->young;
    heapd_client *c = m->c;
    uintptr_t run = (uintptr_t)client_seg_addr(c, first);
    uintptr_t lo;
    uint64_t half;
    int rc;

    layout_young_halves(run, segs, c->segment_size, &lo, &half);
    memset(y, 0, sizeof *y);
    y->first_seg = first;
    y->nsegs = segs;
    y->age = age;
    y->half_bytes = half;
    y->half[0] = (uint8_t *)lo;
    y->half[1] = (uint8_t *)lo + half;
    y->lo = lo;
    y->hi = lo + 2 * half;
    y->max_object = (uint32_t)(half / 8 < c->small_max ? half / 8
                                                         : c->small_max);
    y->top = y->half[0];
    y->end = y->half[0] + half;
    if ((rc = young_trace_init(&y->trace, y->lo, y->hi)) < 0)
        goto fail;
    y->capwork = half / LAYOUT_YOUNG_MIN + 1;
    y->work = malloc(y->capwork * sizeof *y->work);
    if (!y->work) {
        rc = -ENOMEM;
        goto fail;
    }
    /* fault the nursery in now, not in the first minor collections'
     * pauses (Linux 5.14; without it the first touches fault later) */
#ifdef MADV_POPULATE_WRITE
    (void)madvise((void *)run, (size_t)segs << c->seg_shift,
                  MADV_POPULATE_WRITE);
#endif
    /* advisory, for a reader of the heap (Note [Segments]) */
    __atomic_store_n(&((struct layout_segment *)run)->kind, LAYOUT_SEG_YOUNG,
                     __ATOMIC_RELEASE);
    y->on = true;
    m->young_on = true;
    return 0;
fail:
    young_trace_destroy(&y->trace);
    free(y->work);
    memset(y, 0, sizeof *y);
    return client_set_error(rc, "out of memory for a nursery's tracer");
}

void young_release(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++) {
        if (y->nstash[k])
            reserve_give_back(m->c, y->stash[k], y->nstash[k], false);
        y->nstash[k] = 0;
    }
    reserve_flush_returns(m->c);
}

void young_free(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++)
        free(y->stash[k]);
    young_trace_destroy(&y->trace);
    free(y->work);
    memset(y, 0, sizeof *y);
    m->young_on = false;
}

/* ---- promotion capacity (Note [Promotion never waits]) ---- */

static int fill(heapd_mutator *m, unsigned cls, uint64_t want);

/* The free blocks of M's current segment of CLS, from its cursor on. */
static uint32_t count_avail(const heapd_mutator *m, unsigned cls)
{
    const struct alloc_seg *s = &m->cur[cls];
    uint32_t n = 0;
    if (!s->index)
        return 0;
    for (uint32_t i = s->cursor; i < s->nblocks; i++)
        n += __atomic_load_n(&s->marks[i], __ATOMIC_RELAXED) == 0;
    return n;
}

static void set_avail(heapd_mutator *m, unsigned cls, uint32_t avail)
{
    struct young_gen *y = &m->young;
    y->lim[cls] = y->lim[cls] - y->avail[cls] + avail;
    y->avail[cls] = avail;
}

int young_before_shared(heapd_mutator *m, unsigned cls)
{
    struct young_gen *y = &m->young;
    /* the block it takes may be one the bound counts */
    if (y->count[cls] < y->lim[cls])
        return 0;
    return fill(m, cls, (uint64_t)y->count[cls] + 1);
}

void young_shared_took(heapd_mutator *m, unsigned cls, bool seg_changed)
{
    struct young_gen *y = &m->young;
    if (seg_changed)
        set_avail(m, cls, count_avail(m, cls));
    else if (y->avail[cls] > 0)
        set_avail(m, cls, y->avail[cls] - 1);
}

/* One more empty segment set aside for CLS: may wait for the daemon, in a
 * blocking region (a safepoint caller only). */
static int stash_one(heapd_mutator *m, unsigned cls)
{
    struct young_gen *y = &m->young;
    heapd_client *c = m->c;
    uint32_t idx;
    int rc;

    if (y->nstash[cls] == y->capstash[cls]) {
        uint32_t cap = y->capstash[cls] ? 2 * y->capstash[cls] : 4;
        uint32_t *v = realloc(y->stash[cls], cap * sizeof *v);
        if (!v)
            return client_set_error(-ENOMEM, "out of memory");
        y->stash[cls] = v;
        y->capstash[cls] = cap;
    }
    /* blank only: an empty segment holds no block a remark could ask
     * about (Note [Remark requests]) */
    if ((rc = reserve_take(m, cls, &idx, NULL)) < 0)
        return rc;
    struct layout_segment *hd = client_seg_addr(c, idx);
    __atomic_store_n(&hd->size_class, cls, __ATOMIC_RELAXED);
    __atomic_store_n(&hd->kind, LAYOUT_SEG_SMALL, __ATOMIC_RELEASE);
    y->stash[cls][y->nstash[cls]++] = idx;
    y->lim[cls] += c->small_nblocks[cls];
    return 0;
}

/* Forget the blocks of current segments the agent took (Note [Remark
 * requests] in client/remark.c). */
static void recount_taken(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++)
        if (!m->cur[k].index && y->avail[k])
            set_avail(m, k, 0);
}

/* Make lim[CLS] at least WANT, and every other class's bound hold again
 * (a wait may lose current segments to the agent): may wait, in blocking
 * regions.  Returns 0 or the error of a segment request. */
static int fill(heapd_mutator *m, unsigned cls, uint64_t want)
{
    struct young_gen *y = &m->young;
    int rc = 0;
    if (y->filling)
        return 0; /* a wait inside stash_one resumed: its caller fills */
    y->filling = true;
    for (bool again = true; again && rc == 0;) {
        again = false;
        recount_taken(m);
        while (y->lim[cls] < want && (rc = stash_one(m, cls)) == 0)
            again = true;
        for (unsigned k = 0; k < LAYOUT_NCLASSES && rc == 0; k++)
            while (y->count[k] > y->lim[k] && (rc = stash_one(m, k)) == 0)
                again = true;
    }
    y->filling = false;
    return rc;
}

/* A block of class CLS for a promotion: the current segment's, or a
 * stashed segment's.  Never waits. */
static void *promo_block(heapd_mutator *m, unsigned cls, uint64_t h)
{
    struct young_gen *y = &m->young;
    size_t nrefs = layout_header_nrefs(h), nbytes = layout_header_nbytes(h);
    void *p = alloc_take_current(m, cls, nrefs, nbytes);
    if (!p) {
        set_avail(m, cls, 0);
        if (y->nstash[cls] == 0) {
            /* the bound is kept by every path that changes it: a bug */
            fprintf(stderr, "libheapd: bug: no block of class %u to promote "
                    "into (%u young, %llu kept)\n", cls, y->count[cls],
                    (unsigned long long)y->lim[cls]);
            abort();
        }
        uint32_t idx = y->stash[cls][--y->nstash[cls]];
        y->lim[cls] -= m->c->small_nblocks[cls];
        alloc_install(m, cls, idx, true);
        set_avail(m, cls, count_avail(m, cls));
        p = alloc_take_current(m, cls, nrefs, nbytes);
        assert(p);
    }
    set_avail(m, cls, y->avail[cls] ? y->avail[cls] - 1 : 0);
    return p;
}

/* ---- promotion ---- */

/* Copy young OBJ (not forwarded) into the shared heap, forward it, and
 * queue the copy for its fields.  Returns the copy. */
static void *promote_one(heapd_mutator *m, void *obj, bool by_age)
{
    struct young_gen *y = &m->young;
    uint64_t *hp = hdr_of(obj);
    uint64_t h = *hp;
    unsigned cls = shared_class(h);
    uint64_t size = layout_object_size(layout_header_nrefs(h),
                                       layout_header_nbytes(h));
    /* alloc_take_current wrote the header: black and dirty while marking
     * (Note [Snapshot write barrier]), and the sizes */
    void *copy = promo_block(m, cls, h);
    memcpy(copy, obj, size - LAYOUT_WORD);
    *hp = layout_header_with_tag(h, LAYOUT_YOUNG_FORWARDED);
    *(void **)obj = copy;
    if (y->count[cls] > 0)
        y->count[cls]--;
    if (by_age)
        y->promoted_age += size;
    else
        y->promoted_pub += size;
    y->promoted_any = true;
    assert(y->nwork < y->capwork);
    y->work[y->nwork++] = (uintptr_t)copy;
    return copy;
}

/* ---- minor collections (Note [Minor collections]) ---- */

struct evac {
    uint8_t *to, *free;     /* the new half, and its end of copies */
    uint32_t kept[LAYOUT_NCLASSES]; /* young survivors per class */
};

static inline bool in_new(const struct evac *e, const void *p)
{
    return (const uint8_t *)p > e->to && (const uint8_t *)p <= e->free;
}

static void *resolve_young(const struct young_gen *y, void *v)
{
    while (young_contains(y, v) && forwarded(*hdr_of(v)))
        v = fwd_of(v);
    return v;
}

/* The new place of young P; FORCE: it must be shared. */
static void *evacuate(heapd_mutator *m, struct evac *e, void *p, bool force)
{
    struct young_gen *y = &m->young;
    uint64_t h = *hdr_of(p);
    if (forwarded(h)) {
        void *q = resolve_young(y, p);
        if (!force || !young_contains(y, q))
            return q;
        p = q; /* a young copy that a promoted object references */
        h = *hdr_of(p);
    }
    if (in_new(e, p)) {
        if (!force)
            return p;
        unsigned cls = shared_class(h);
        if (e->kept[cls] > 0)
            e->kept[cls]--;
        return promote_one(m, p, true);
    }
    unsigned age = layout_header_tag(h);
    if (force || age + 1 >= y->age)
        return promote_one(m, p, true);
    uint64_t size = layout_young_size(layout_header_nrefs(h),
                                      layout_header_nbytes(h));
    uint8_t *dst = e->free;
    memcpy(dst, hdr_of(p), size);
    *(uint64_t *)dst = layout_header_with_tag(h, (uint8_t)(age + 1));
    e->free += size;
    e->kept[shared_class(h)]++;
    void *q = dst + LAYOUT_WORD;
    *hdr_of(p) = layout_header_with_tag(h, LAYOUT_YOUNG_FORWARDED);
    *(void **)p = q;
    return q;
}

/* Evacuate the young references in the NREFS fields at F. */
static void evacuate_fields(heapd_mutator *m, struct evac *e, void **f,
                            size_t n, bool force)
{
    for (size_t k = 0; k < n; k++) {
        void *v = f[k];
        if (young_contains(&m->young, v))
            f[k] = evacuate(m, e, v, force);
    }
}

/* After promotions: no root or young field may keep a forwarded
 * object. */
static void fix_up(heapd_mutator *m, struct evac *e)
{
    struct young_gen *y = &m->young;
    for (size_t i = 0; i < m->depth; i++) {
        void *v = atomic_load_explicit(&m->roots[i], memory_order_relaxed);
        if (young_contains(y, v))
            atomic_store_explicit(&m->roots[i], resolve_young(y, v),
                                  memory_order_relaxed);
    }
    for (uint8_t *p = e->to; p < e->free;) {
        uint64_t h = *(uint64_t *)p;
        size_t n = layout_header_nrefs(h);
        if (!forwarded(h)) {
            void **f = (void **)(p + LAYOUT_WORD);
            for (size_t k = 0; k < n; k++)
                if (young_contains(y, f[k]))
                    f[k] = resolve_young(y, f[k]);
        }
        p += layout_young_size(n, layout_header_nbytes(h));
    }
}

static void record_pause(struct young_gen *y, uint64_t ns)
{
    y->minor++;
    y->pause_total += ns;
    if (ns > y->pause_max)
        y->pause_max = ns;
    /* 4 buckets per power of two: bucket 4*log2(ns) + the next 2 bits */
    unsigned b = 0;
    if (ns >= 4) {
        unsigned lg = 63u - (unsigned)__builtin_clzll(ns);
        b = 4 * lg + (unsigned)((ns >> (lg - 2)) & 3);
    }
    y->hist[b < YOUNG_HIST ? b : YOUNG_HIST - 1]++;
}

static void minor(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    struct evac e;
    uint64_t t0 = monotonic_ns();

    y->active ^= 1;
    e.to = e.free = y->half[y->active];
    memset(e.kept, 0, sizeof e.kept);
    y->nwork = 0;
    y->promoted_any = false;
    for (size_t i = 0; i < m->depth; i++) {
        void *v = atomic_load_explicit(&m->roots[i], memory_order_relaxed);
        if (young_contains(y, v))
            atomic_store_explicit(&m->roots[i], evacuate(m, &e, v, false),
                                  memory_order_relaxed);
    }
    void *pending = atomic_load(&m->slot->pending_root);
    if (young_contains(y, pending))
        atomic_store(&m->slot->pending_root, evacuate(m, &e, pending, false));
    size_t scanned = 0, roots = m->depth;
    for (uint8_t *scan = e.to; scan < e.free || y->nwork > 0;) {
        while (scan < e.free) {
            if (++scanned == roots / 2 + 1)
                stop_in(PHASE_MINOR); /* Note [Stopping inside a young phase] */
            uint64_t h = *(uint64_t *)scan;
            size_t n = layout_header_nrefs(h);
            if (!forwarded(h))
                evacuate_fields(m, &e, (void **)(scan + LAYOUT_WORD), n,
                                false);
            scan += layout_young_size(n, layout_header_nbytes(h));
        }
        while (y->nwork > 0) {
            void **obj = (void **)y->work[--y->nwork];
            evacuate_fields(m, &e, obj, layout_header_nrefs(*hdr_of(obj)),
                            true);
        }
    }
    if (y->promoted_any)
        fix_up(m, &e);
    memcpy(y->count, e.kept, sizeof y->count);
    y->top = e.free;
    y->end = e.to + y->half_bytes;
    record_pause(y, monotonic_ns() - t0);
    publish_stats(m);
}

/* ---- allocation ---- */

void *young_alloc_slow(heapd_mutator *m, size_t nrefs, size_t nbytes)
{
    struct young_gen *y = &m->young;
    uint64_t size = layout_young_size(nrefs, nbytes);
    unsigned cls = young_class_of(nrefs, nbytes);
    int rc;

    if (size > y->max_object)
        return alloc_shared(m, nrefs, nbytes);
    if ((uint64_t)(y->end - y->top) < size) {
        /* every class's bound holds before the collection promotes */
        if ((rc = fill(m, cls, y->count[cls])) < 0)
            goto fail;
        minor(m);
        if ((uint64_t)(y->end - y->top) < size) {
            /* the survivors left no room: this one goes shared */
            void *p = alloc_shared(m, nrefs, nbytes);
            return p;
        }
    }
    if (y->count[cls] >= y->lim[cls] &&
        (rc = fill(m, cls, y->count[cls] + 1)) < 0)
        goto fail;
    y->count[cls]++;
    uint8_t *p = y->top;
    y->top += size;
    memset(p + LAYOUT_WORD, 0, size - LAYOUT_WORD);
    *(uint64_t *)p = layout_header(nrefs, nbytes);
    return p + LAYOUT_WORD;
fail:
    errno = client_errno(rc);
    return NULL;
}

/* ---- publication (Note [The young invariant]) ---- */

void *young_resolve_slow(const struct young_gen *y, void *obj)
{
    return resolve_young(y, obj);
}

/* Promote everything young the queued copies reference. */
static void promote_closure(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    size_t done = 0;
    while (y->nwork > 0) {
        if (++done == 2)
            stop_in(PHASE_PUBLISH); /* Note [Stopping inside a young phase] */
        void **obj = (void **)y->work[--y->nwork];
        size_t n = layout_header_nrefs(*hdr_of(obj));
        for (size_t k = 0; k < n; k++) {
            void *v = resolve_young(y, obj[k]);
            if (young_contains(y, v))
                v = promote_one(m, v, false);
            obj[k] = v;
        }
    }
}

void *young_publish(heapd_mutator *m, void *r)
{
    struct young_gen *y = &m->young;
    r = resolve_young(y, r);
    if (!young_contains(y, r))
        return r;
    /* Note [A dead daemon], Note [Clients and fork]: the current segments
     * are not this mutator's to allocate in any more (a child's copy
     * would allocate in its parent's); the young address is stored as it
     * is, and a heapd that meets it refuses it */
    if (mutator_orphaned(m))
        return r;
    y->nwork = 0;
    void *copy = promote_one(m, r, false);
    promote_closure(m);
    publish_stats(m);
    return copy;
}

/* ---- the preparatory push ---- */

/* Note [The preparatory push]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * (GHC's Note [Aging under the non-moving collector], for processes.)
 * While the daemon marks, an old object C may be reachable at the
 * snapshot only through young objects of some mutator, which the marker
 * does not trace.  So the stack handshake of a young mutator (Note [Stack
 * marking handshake] in client/barrier.c) is also the preparatory push:
 * whoever takes the handshake traces the young objects reachable from the
 * mutator's roots and logs (the mutator) or marks (the daemon) every
 * shared reference they hold (young_trace, Note [Tracing a nursery]).
 * Two rules make that enough:
 *   - a young mutator takes its handshake before it changes any young
 *     object or its root stack after a snapshot: on the way out of the
 *     snapshot's stop, and out of a blocking region that a snapshot
 *     passed (young_resume), and at attach; so its young objects are as
 *     they were at the snapshot when they are traced, and every shared
 *     reference stored into one later was reachable at the snapshot or is
 *     black;
 *   - the nursery is in the heap, which the daemon maps, so it never needs
 *     the mutator: a mutator blocked through a whole cycle, stopped by a
 *     signal right after a snapshot, or dead, has its stack and nursery
 *     traced by the daemon's mark_stack, which takes the handshake from
 *     it.  The alternative, emptying the nursery on the way into every
 *     blocking region, would promote everything young at each wait, and
 *     mutators wait often (every request to the daemon is one); tracing
 *     costs the daemon a walk of the live young objects, once a cycle.
 * Objects the mutator promotes while marking are black (allocated with
 * the epoch), so the marker needs nothing from them.
 */
static void emit_log(void *ctx, uintptr_t ref)
{
    barrier_log(ctx, (void *)ref);
}

bool young_push_roots(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    if (!m->young_on)
        return false;
    young_trace_begin(&y->trace);
    for (size_t i = 0; i < m->depth; i++) {
        if (i == m->depth / 2 && i > 0)
            stop_in(PHASE_PUSH); /* Note [Stopping inside a young phase] */
        young_trace_root(&y->trace,
                         (uintptr_t)atomic_load_explicit(&m->roots[i],
                                                         memory_order_relaxed),
                         emit_log, m);
    }
    young_trace_root(&y->trace, (uintptr_t)atomic_load(&m->slot->pending_root),
                     emit_log, m);
    return true;
}

void young_resume(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    if (!m->young_on)
        return;
    /* Note [The preparatory push]: even inside fill, whose wait a snapshot
     * may have passed, before a minor collection it is about to run */
    if (barrier_stack_due(m))
        barrier_stack_slow(m);
    if (y->filling)
        return;
    /* Note [Promotion never waits]: the agent takes current segments from
     * a young mutator only while it is blocked (a failure to fill: the
     * next heapd_alloc fails with it) */
    fill(m, 0, 0);
}

/* ---- the public calls ---- */

void *heapd_publish(heapd_mutator *m, void *obj)
{
    if (!m || !m->young_on)
        return obj;
    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    return young_publish(m, obj);
}

bool heapd_is_young(const heapd_mutator *m, const void *obj)
{
    return m && young_contains(&m->young, obj);
}

void heapd_young_stats_get(const heapd_mutator *m, heapd_young_stats *out)
{
    const struct young_gen *y = &m->young;
    memset(out, 0, sizeof *out);
    if (!y->on)
        return;
    out->young_bytes = (uint64_t)y->nsegs << m->c->seg_shift;
    out->young_age = y->age;
    out->minor_collections = y->minor;
    out->promoted_age_bytes = y->promoted_age;
    out->promoted_published_bytes = y->promoted_pub;
    out->minor_pause_max_ns = y->pause_max;
    out->minor_pause_total_ns = y->pause_total;
    out->bytes_in_use = (uint64_t)(y->top - y->half[y->active]);
    /* p99: the upper end of the bucket the 99th percentile falls in */
    uint64_t seen = 0, want = y->minor - y->minor / 100;
    for (unsigned b = 0; b < YOUNG_HIST && y->minor; b++) {
        seen += y->hist[b];
        if (seen >= want) {
            unsigned lg = b / 4, q = b % 4;
            out->minor_pause_p99_ns =
                lg < 2 ? 4 : ((uint64_t)(4 + q + 1) << lg) / 4;
            break;
        }
    }
}
