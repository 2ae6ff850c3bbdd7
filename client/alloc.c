/* libheapd allocation: the per-mutator fast path, the client's segment
 * reserve, large objects, and the object accessors.
 *
 * Note [Allocation fast path]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A mutator owns one current segment per size class.  heapd_alloc polls the
 * safepoint, rounds the size to its class and scans that segment's mark
 * bytes from its cursor for a 0 (a free block): in a fresh segment that is
 * the very next block, in a segment swept while its owner held it, the next
 * hole.  It sets the block's mark to the current epoch (allocate black,
 * Note [Epoch-tagged marks]), zeroes the object, writes its header and
 * returns.  No lock, no system call, no message.  Only when the segment is
 * exhausted does the mutator hand it back and take a blank one from the
 * client's reserve, writing its class into the header before the first
 * block is used (Note [Segments]).  Full segments go back RETURN_BATCH at a
 * time in one SegmentReturn, without waiting, and always before a request
 * that waits, so that the daemon's count of what the client holds is never
 * staler than one batch.  Whether sent yet or not, a full segment is swept
 * like any other: its owner is stopped during a cycle.  The reserve
 * is refilled in the background when it runs low; a mutator that finds it
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

#include "client_internal.h"

void alloc_client_init(heapd_client *c)
{
    c->segment_size = c->ctl->segment_size;
    c->seg_shift = (unsigned)__builtin_ctzll(c->segment_size);
    c->small_max = layout_small_max(c->segment_size);
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++)
        layout_small_geometry(c->segment_size, k, &c->small_nblocks[k],
                              &c->small_first[k]);
    pthread_mutex_init(&c->reserve.mu, NULL);
    pthread_cond_init(&c->reserve.refilled, NULL);
    /* a small heap gets a small reserve: a client must not sit on the
     * room a large object or another client needs */
    uint32_t nseg = c->ctl->segment_count;
    c->reserve.batch = nseg / 64 < 1 ? 1
                       : nseg / 64 > RESERVE_BATCH ? RESERVE_BATCH
                                                   : nseg / 64;
    c->reserve.max = 2 * c->reserve.batch;
    c->reserve.low = (c->reserve.batch + 1) / 2;
    pthread_mutex_init(&c->mutators_mu, NULL);
}

static void *seg_addr(const heapd_client *c, uint32_t i)
{
    return (char *)c->base + ((uint64_t)i << c->seg_shift);
}

/* ---- the reserve ---- */

static void return_segments(heapd_client *c, uint32_t *segs, size_t n)
{
    Heapd__SegmentReturn sr = HEAPD__SEGMENT_RETURN__INIT;
    Heapd__Envelope msg = HEAPD__ENVELOPE__INIT;
    if (n == 0)
        return;
    sr.n_segments = n;
    sr.segments = segs;
    msg.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_RETURN;
    msg.segment_return = &sr;
    agent_send(&c->agent, &msg); /* a closed connection gives all back */
}

/* Agent thread: the answer to a background refill. */
static void on_refill(void *arg, int status, Heapd__Envelope *rep)
{
    heapd_client *c = arg;
    uint32_t extra[RESERVE_MAX];
    size_t nextra = 0;
    uint32_t limit = (uint32_t)(c->size >> c->seg_shift);

    pthread_mutex_lock(&c->reserve.mu);
    c->reserve.refilling = false;
    pthread_cond_broadcast(&c->reserve.refilled);
    if (status == 0 && rep &&
        rep->body_case == HEAPD__ENVELOPE__BODY_SEGMENT_GRANT) {
        const Heapd__SegmentGrant *g = rep->segment_grant;
        for (size_t i = 0; i < g->n_segments; i++) {
            uint32_t s = g->segments[i];
            if (s == 0 || s >= limit)
                continue; /* never from a sane daemon; not ours to use */
            if (c->reserve.n < c->reserve.max)
                c->reserve.segs[c->reserve.n++] = s;
            else if (nextra < RESERVE_MAX)
                extra[nextra++] = s;
        }
    }
    pthread_mutex_unlock(&c->reserve.mu);
    return_segments(c, extra, nextra);
}

/* With reserve.mu held: ask for more without waiting, once at a time. */
static void refill_async_locked(heapd_client *c)
{
    Heapd__SegmentRequest sr = HEAPD__SEGMENT_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT;

    if (c->reserve.refilling)
        return;
    sr.kind = HEAPD__SEGMENT_KIND__SEGMENT_SMALL;
    sr.count = c->reserve.batch;
    req.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST;
    req.segment_request = &sr;
    if (agent_call_async(&c->agent, &req, on_refill, c) == 0)
        c->reserve.refilling = true;
}

int alloc_drain_reserve(heapd_client *c)
{
    uint32_t segs[RESERVE_MAX];
    size_t n;
    pthread_mutex_lock(&c->reserve.mu);
    n = c->reserve.n;
    memcpy(segs, c->reserve.segs, n * sizeof segs[0]);
    c->reserve.n = 0;
    pthread_mutex_unlock(&c->reserve.mu);
    return_segments(c, segs, n);
    return (int)n;
}

/* Queue a full segment to go back; send the batch when it is full or
 * FLUSH is set.  Takes reserve.mu. */
static void give_back(heapd_client *c, const uint32_t *segs, size_t n,
                      bool flush)
{
    uint32_t batch[RETURN_BATCH];
    size_t nb = 0;
    pthread_mutex_lock(&c->reserve.mu);
    for (size_t i = 0; i < n; i++) {
        if (c->reserve.nfull == RETURN_BATCH) {
            memcpy(batch, c->reserve.full, sizeof batch);
            nb = RETURN_BATCH;
            c->reserve.nfull = 0;
            pthread_mutex_unlock(&c->reserve.mu);
            return_segments(c, batch, nb);
            pthread_mutex_lock(&c->reserve.mu);
        }
        c->reserve.full[c->reserve.nfull++] = segs[i];
    }
    nb = 0;
    if (flush || c->reserve.nfull == RETURN_BATCH) {
        nb = c->reserve.nfull;
        memcpy(batch, c->reserve.full, nb * sizeof batch[0]);
        c->reserve.nfull = 0;
    }
    pthread_mutex_unlock(&c->reserve.mu);
    return_segments(c, batch, nb);
}

void alloc_flush_returns(heapd_client *c)
{
    give_back(c, NULL, 0, true);
}

/* A blank segment for M: from the reserve, or from the daemon.  When the
 * reserve is empty but a refill is already on its way, waiting for it (in
 * a blocking region) is shorter than a round trip of our own. */
static int take_blank(heapd_mutator *m, uint32_t *out)
{
    heapd_client *c = m->c;
    uint32_t got[RESERVE_BATCH];
    int n;

    pthread_mutex_lock(&c->reserve.mu);
    if (c->reserve.n == 0 && c->reserve.refilling) {
        pthread_mutex_unlock(&c->reserve.mu);
        heapd_blocking_enter(m);
        pthread_mutex_lock(&c->reserve.mu);
        while (c->reserve.n == 0 && c->reserve.refilling)
            pthread_cond_wait(&c->reserve.refilled, &c->reserve.mu);
        pthread_mutex_unlock(&c->reserve.mu);
        heapd_blocking_leave(m);
        pthread_mutex_lock(&c->reserve.mu);
    }
    if (c->reserve.n > 0) {
        *out = c->reserve.segs[--c->reserve.n];
        if (c->reserve.n < c->reserve.low)
            refill_async_locked(c);
        pthread_mutex_unlock(&c->reserve.mu);
        return 0;
    }
    pthread_mutex_unlock(&c->reserve.mu);

    n = mutator_request_segments(m, HEAPD__SEGMENT_KIND__SEGMENT_SMALL,
                                 c->reserve.batch, 0, got, RESERVE_BATCH,
                                 NULL);
    if (n < 0)
        return n;
    *out = got[0];
    pthread_mutex_lock(&c->reserve.mu);
    int k = 1;
    while (k < n && c->reserve.n < c->reserve.max)
        c->reserve.segs[c->reserve.n++] = got[k++];
    pthread_mutex_unlock(&c->reserve.mu);
    return_segments(c, got + k, (size_t)(n - k));
    return 0;
}

/* ---- small objects ---- */

static void release_current(heapd_mutator *m, unsigned cls)
{
    struct alloc_seg *s = &m->cur[cls];
    if (s->index) {
        give_back(m->c, &s->index, 1, false);
        memset(s, 0, sizeof *s);
    }
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
    give_back(m->c, segs, n, true);
}

/* The current segment of CLS is exhausted: move on to a fresh one. */
static int next_segment(heapd_mutator *m, unsigned cls)
{
    heapd_client *c = m->c;
    struct alloc_seg *s = &m->cur[cls];
    uint32_t idx;
    int rc;

    release_current(m, cls);
    if ((rc = take_blank(m, &idx)) < 0)
        return rc;
    uint8_t *seg = seg_addr(c, idx);
    struct layout_segment *hd = (struct layout_segment *)seg;
    hd->kind = LAYOUT_SEG_SMALL;
    /* the class before any block: Note [Segments] */
    __atomic_store_n(&hd->size_class, cls, __ATOMIC_RELEASE);
    s->index = idx;
    s->marks = layout_seg_marks(seg);
    s->blocks = seg + c->small_first[cls];
    s->nblocks = c->small_nblocks[cls];
    s->block_size = layout_class_size[cls];
    s->cursor = 0;
    return 0;
}

static __attribute__((noinline)) void *
alloc_large(heapd_mutator *m, uint64_t size, size_t nrefs, size_t nbytes)
{
    uint32_t first, run;
    int rc = mutator_request_segments(m, HEAPD__SEGMENT_KIND__SEGMENT_LARGE,
                                      1, size, &first, 1, &run);
    if (rc < 0) {
        errno = client_errno(rc);
        return NULL;
    }
    uint8_t *seg = seg_addr(m->c, first);
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

/* Zero an object's words after the header.  Most objects are a few words,
 * where stores beat a call to memset. */
static inline void zero_object(uint64_t *w, uint64_t size)
{
    switch (size / LAYOUT_WORD) {
    case 8: w[7] = 0; /* fall through */
    case 7: w[6] = 0; /* fall through */
    case 6: w[5] = 0; /* fall through */
    case 5: w[4] = 0; /* fall through */
    case 4: w[3] = 0; /* fall through */
    case 3: w[2] = 0; /* fall through */
    case 2: w[1] = 0; /* fall through */
    case 1: break;
    default: memset(w + 1, 0, size - LAYOUT_WORD); break;
    }
}

/* The next free block of M's current segment of CLS, initialised, or
 * NULL when the segment is exhausted. */
static inline void *take_block(heapd_mutator *m, struct alloc_seg *s,
                               uint64_t size, size_t nrefs, size_t nbytes)
{
    while (s->cursor < s->nblocks) {
        uint32_t i = s->cursor++;
        if (s->marks[i] != 0)
            continue;
        uint8_t *b = s->blocks + (size_t)i * s->block_size;
        uint8_t epoch = (uint8_t)atomic_load_explicit(&m->ctl->epoch,
                                                      memory_order_relaxed);
        s->marks[i] = epoch;
        zero_object((uint64_t *)b, size);
        /* black, and dirty from birth while marking: no barrier needed
         * for its first writes (Note [Snapshot write barrier]) */
        *(uint64_t *)b = layout_header_with_tag(layout_header(nrefs, nbytes),
                                                barrier_on(m) ? epoch : 0);
        m->alloc_bytes += s->block_size;
        atomic_store_explicit(&m->slot->alloc_bytes, m->alloc_bytes,
                              memory_order_relaxed);
        return b + LAYOUT_WORD;
    }
    return NULL;
}

/* Out of line, so that the fast path stays small: move to fresh segments
 * until a block is found. */
static __attribute__((noinline)) void *
alloc_slow(heapd_mutator *m, unsigned cls, uint64_t size, size_t nrefs,
           size_t nbytes)
{
    for (;;) {
        int rc = next_segment(m, cls);
        if (rc < 0) {
            errno = client_errno(rc);
            return NULL;
        }
        void *p = take_block(m, &m->cur[cls], size, nrefs, nbytes);
        if (p)
            return p;
    }
}

void *heapd_alloc(heapd_mutator *m, size_t nrefs, size_t nbytes)
{
    mutator_poll(m);
    if (__builtin_expect(nrefs > LAYOUT_FIELD_MAX || nbytes > LAYOUT_FIELD_MAX,
                         0)) {
        errno = EINVAL;
        return NULL;
    }
    uint64_t size = layout_object_size(nrefs, nbytes);
    if (__builtin_expect(size > m->c->small_max, 0))
        return alloc_large(m, size, nrefs, nbytes);
    unsigned cls = layout_size_class((uint32_t)size);
    void *p = take_block(m, &m->cur[cls], size, nrefs, nbytes);
    return __builtin_expect(p != NULL, 1) ? p
                                          : alloc_slow(m, cls, size, nrefs,
                                                       nbytes);
}

/* ---- objects ---- */

static inline uint64_t header_of(const void *obj)
{
    return *((const uint64_t *)obj - 1);
}

size_t heapd_nrefs(const void *obj)
{
    return layout_header_nrefs(header_of(obj));
}

size_t heapd_nbytes(const void *obj)
{
    return layout_header_nbytes(header_of(obj));
}

void *heapd_bytes(void *obj)
{
    return (void **)obj + heapd_nrefs(obj);
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

void heapd_write(heapd_mutator *m, void *obj, void **field, void *val)
{
    assert(check_field(obj, field));
    barrier_write(m, obj, field); /* Note [Snapshot write barrier] */
    /* release: another process that loads VAL sees the object it points
     * to initialised */
    __atomic_store_n(field, val, __ATOMIC_RELEASE);
}

bool heapd_cas(heapd_mutator *m, void *obj, void **field, void *expected,
               void *desired)
{
    assert(check_field(obj, field));
    barrier_write(m, obj, field);
    return __atomic_compare_exchange_n(field, &expected, desired, false,
                                       __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}
