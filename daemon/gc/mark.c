/* Marking.
 *
 * Note [Parallel marking]
 * ~~~~~~~~~~~~~~~~~~~~~~~
 * gc_threads workers trace at once.  Each has a private stack of objects
 * it has marked but not yet scanned.  Marking an object is storing the
 * epoch into its mark byte if it was not there; two workers racing on one
 * object may both push it (see mark_one), so an object is scanned at least
 * once and rarely twice.  A worker whose stack
 * holds more than 2 packets' worth gives one packet to the shared pool; a
 * worker that runs dry takes a packet from the pool, and if the pool is
 * empty waits.  Marking ends when every worker waits and the pool is
 * empty: since a worker only waits with an empty stack, no marked object
 * is left unscanned.  The roots are marked first, by one thread under the
 * heap lock (mark_roots), and seeded into the pool.  A worker that runs
 * dry also takes remark work (Note [Remark] in daemon/gc/remark.c) before it
 * waits, and marking ends only when that is gone too.
 *
 * Note [Bounded mark stacks]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~
 * (After OCaml's "Fixing remarking to be safe with parallel domains".)
 * A wide or bushy graph can put millions of marked-but-unscanned objects
 * on a stack, and the daemon must not grow with what clients build.  So each marking
 * thread's stack holds at most mark_stack_limit bytes of entries
 * (stack_cap), and so does the shared pool (pool_cap): marking holds at
 * most (gc_threads + 2) * mark_stack_limit, plus, for the moment a stack
 * overflows, as much again to sort it.  When a stack is full the worker
 * groups its entries by segment and drops those of the segments with the
 * most entries until at least half the stack is free (as OCaml's
 * mark_stack_prune drops the pools with the most entries), and flags those
 * segments for remark.  A packet the pool has no room for (a root or URS
 * seeding, a final sync giving back its rest) is dropped the same way.
 * Nothing is lost: a dropped object is marked, so remarking its segment --
 * scanning every block whose mark is the epoch -- scans it; and until
 * every flagged segment is remarked marking does not end.  A worker that
 * cannot get memory for a stack behaves as if the stack were full, so no
 * allocation failure loses work either.  Remarks rescan objects that were
 * allocated black too, and their bytes do not count in marked_bytes:
 * after overflows the live estimate (Note [Pacing]) is low by the objects
 * dropped.
 */
#include "mark.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"
#include "heap.h"
#include "log.h"
#include "remark.h"
#include "slotmem.h"
#include "save.h"
#include "validate.h"
#include "workers.h"
#include "young.h"

#define PACKET_REFS 256
#define URS_POLL_EVERY 512 /* objects scanned between ring polls */
#define BAD_LOG_PER_CYCLE 8 /* bad references logged per cycle */

struct mark_packet {
    struct mark_packet *next;
    uint32_t n;
    uintptr_t refs[PACKET_REFS];
};

struct mark_stack {
    uintptr_t *v;
    size_t n, cap;              /* cap <= the job's stack_cap */
    uint64_t marked;    /* objects this worker marked */
    uint64_t scanned_bytes; /* bytes of the objects it scanned */
};

/* Count a reference that is not followed, and log the first few of each
 * cycle with what is wrong with it (Note [Validating references] in
 * validate.c); YOUNG: a young object's, counted apart (Note [References
 * to young objects]). */
static void report_bad(struct heap *h, uintptr_t r, const char *where,
                       bool young)
{
    atomic_fetch_add_explicit(young ? &h->stats.young_refs_refused
                                    : &h->stats.bad_refs,
                              1, memory_order_relaxed);
    if (atomic_fetch_add_explicit(&h->bad_logged, 1, memory_order_relaxed) <
        BAD_LOG_PER_CYCLE)
        log_warn("heap '%s': bad reference 0x%lx in %s: %s; not followed",
                 h->cfg->name, (unsigned long)r, where, validate_diagnose(h, r));
}

static void count_bad(const struct heap *h)
{
    atomic_fetch_add_explicit(&((struct heap *)h)->stats.bad_refs, 1,
                              memory_order_relaxed);
}

/* ---- the work pool ---- */

void mark_job_init(struct mark_job *j, struct heap *h, uint8_t epoch,
                   unsigned nworkers)
{
    /* Note [Epoch-tagged marks]: an epoch is never 0, young nor a
     * continuation, and the job marks with the one the snapshot just
     * published */
    assert(layout_mark_is_epoch(epoch));
    assert(epoch == atomic_load(&h->control->epoch));
    memset(j, 0, sizeof *j);
    j->h = h;
    j->epoch = epoch;
    j->nworkers = nworkers;
    /* Note [Bounded mark stacks]; at least two packets, so that a stack
     * can always take one from the pool and still donate */
    j->stack_cap = h->cfg->mark_stack_limit / sizeof(uintptr_t);
    if (j->stack_cap < 2 * PACKET_REFS)
        j->stack_cap = 2 * PACKET_REFS;
    j->pool_cap = j->stack_cap;
    hd_mutex_init(&j->mu);
    pthread_cond_init(&j->cv, NULL);
    pthread_cond_init(&j->remark_cv, NULL);
}

void mark_job_destroy(struct mark_job *j)
{
    while (j->pool) {
        struct mark_packet *p = j->pool;
        j->pool = p->next;
        free(p);
    }
    free(j->captured);
    hd_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    pthread_cond_destroy(&j->remark_cv);
}

/* Debug builds: marking runs between a snapshot and the final sync that
 * ends it, in the epoch the snapshot published; the epoch changes only
 * at a snapshot, with every mutator stopped (Note [Epoch-tagged marks]),
 * so a marker that met another would store marks of the wrong cycle. */
static void assert_marking(const struct mark_job *j)
{
    const struct layout_control *c = j->h->control;
    (void)c;
    assert(atomic_load_explicit(&c->epoch, memory_order_relaxed) ==
           j->epoch);
    assert(atomic_load_explicit(&c->phase, memory_order_relaxed) ==
           LAYOUT_PHASE_MARK);
}

/* ---- Note [Bounded mark stacks] ---- */

static uint32_t seg_of(const struct mark_job *j, uintptr_t obj)
{
    return (uint32_t)((obj - (uintptr_t)j->h->base) >> j->h->seg_shift);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_u64_desc(const void *a, const void *b)
{
    return cmp_u64(b, a);
}

static bool in_sorted(const uint64_t *v, size_t n, uint64_t key)
{
    return bsearch(&key, v, n, sizeof *v, cmp_u64) != NULL;
}

/* Drop entries of V[0..*N) grouped by segment, the segments with the most
 * entries first, until at least WANT are gone; flag those segments for
 * remark.  Without memory to sort, drop the oldest WANT entries and flag
 * each one's segment. */
static void drop_grouped(struct mark_job *j, uintptr_t *v, size_t *n,
                         size_t want)
{
    size_t m = *n, u = 0, chosen = 0, dropped = 0;
    if (m == 0)
        return;
    uint64_t *k = malloc(m * sizeof *k);

    atomic_fetch_add_explicit(&j->overflows, 1, memory_order_relaxed);
    if (!k) {
        uint32_t seg;
        for (size_t x = 0; x < want && x < m; x++) {
            seg = seg_of(j, v[x]);
            remark_flag(j, &seg, 1);
        }
        size_t drop = want < m ? want : m;
        memmove(v, v + drop, (m - drop) * sizeof *v);
        *n = m - drop;
        return;
    }
    for (size_t x = 0; x < m; x++)
        k[x] = seg_of(j, v[x]);
    qsort(k, m, sizeof *k, cmp_u64);
    /* (count << 32 | segment) per segment, most entries first */
    for (size_t x = 0; x < m;) {
        size_t y = x;
        while (y < m && k[y] == k[x])
            y++;
        k[u++] = (uint64_t)(y - x) << 32 | k[x];
        x = y;
    }
    qsort(k, u, sizeof *k, cmp_u64_desc);
    while (chosen < u && dropped < want)
        dropped += k[chosen++] >> 32;
    uint32_t segs[64];
    size_t ns = 0;
    for (size_t x = 0; x < chosen; x++) {
        k[x] &= 0xffffffffu;
        segs[ns++] = (uint32_t)k[x];
        if (ns == 64) {
            remark_flag(j, segs, ns);
            ns = 0;
        }
    }
    remark_flag(j, segs, ns);
    qsort(k, chosen, sizeof *k, cmp_u64);
    size_t keep = 0;
    for (size_t x = 0; x < m; x++)
        if (!in_sorted(k, chosen, seg_of(j, v[x])))
            v[keep++] = v[x];
    *n = keep;
    free(k);
}

/* Put packet P in the pool if it has room, else drop its entries by
 * segment (Note [Bounded mark stacks]).  Takes P. */
static void pool_put(struct mark_job *j, struct mark_packet *p)
{
    hd_mutex_lock(&j->mu);
    if (j->pool_n + p->n <= j->pool_cap) {
        p->next = j->pool;
        j->pool = p;
        j->pool_n += p->n;
        assert(p->n <= PACKET_REFS);
        if (j->waiting > 0)
            pthread_cond_broadcast(&j->cv);
        /* a collector waiting for remarks has marking to do (remark_wait) */
        pthread_cond_broadcast(&j->remark_cv);
        hd_mutex_unlock(&j->mu);
        return;
    }
    hd_mutex_unlock(&j->mu);
    size_t n = p->n;
    drop_grouped(j, p->refs, &n, n);
    free(p);
}

/* Give the newest PACKET_REFS entries of S to the pool, if it has room.
 * On allocation failure the work simply stays local. */
static void donate(struct mark_job *j, struct mark_stack *s)
{
    hd_mutex_lock(&j->mu);
    bool room = j->pool_n + PACKET_REFS <= j->pool_cap;
    hd_mutex_unlock(&j->mu);
    if (!room)
        return;
    struct mark_packet *p = malloc(sizeof *p);
    if (!p)
        return;
    p->n = PACKET_REFS;
    s->n -= PACKET_REFS;
    memcpy(p->refs, s->v + s->n, sizeof p->refs);
    pool_put(j, p);
}

/* Push OBJ, a marked object, on S; a full stack drops half its entries
 * by segment first (Note [Bounded mark stacks]). */
static void push(struct mark_job *j, struct mark_stack *s, uintptr_t obj)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4096;
        if (cap > j->stack_cap)
            cap = j->stack_cap;
        uintptr_t *v = cap > s->cap ? realloc(s->v, cap * sizeof *v) : NULL;
        if (v) {
            s->v = v;
            s->cap = cap;
        } else if (s->cap == 0) {
            uint32_t seg = seg_of(j, obj); /* no stack at all */
            atomic_fetch_add_explicit(&j->overflows, 1, memory_order_relaxed);
            remark_flag(j, &seg, 1);
            return;
        } else {
            drop_grouped(j, s->v, &s->n, s->n / 2 ? s->n / 2 : 1);
        }
    }
    /* Note [Bounded mark stacks]: the drop made room, within the cap */
    assert(s->n < s->cap && s->cap <= j->stack_cap);
    s->v[s->n++] = obj;
}

/* Mark R if it is unmarked; true if this call marked it.  A plain store,
 * not a compare-and-swap: two workers that race on one object may both
 * push it and scan it twice, which marks nothing wrongly and costs less
 * than a locked instruction per object.  The store follows the one load
 * validate_ref made, which read an epoch: never a young mark (Note
 * [References to young objects] in validate.c).  WHERE names R's origin
 * for the log. */
static bool mark_one(struct mark_job *j, uintptr_t r, struct valid_ref *ref,
                     const char *where)
{
    if (!validate_ref(j->h, r, ref)) {
        report_bad(j->h, r, where, ref->young);
        return false;
    }
    assert(layout_mark_is_epoch(ref->seen));
    if (ref->seen == j->epoch)
        return false;
    __atomic_store_n(ref->mark, j->epoch, __ATOMIC_RELAXED);
    return true;
}

/* The block size of OBJ, which was validated when it was marked: during
 * the stop no marked object's segment changes kind (sweep has not run). */
static uint64_t block_size_of(const struct heap *h, uintptr_t obj)
{
    const struct segtab *t = &h->segs;
    uint32_t i = (uint32_t)((obj - (uintptr_t)h->base) >> h->seg_shift);
    switch (seg_state(t, i)) {
    case SEG_OWNED:
    case SEG_FILLED: {
        uint8_t cls = seg_class((struct heap *)h, i);
        if (cls >= LAYOUT_NCLASSES || t->small_nblocks[cls] == 0)
            return 0;
        if (cls != LAYOUT_CLASS_RUN)
            return layout_class_size[cls];
        /* Note [Runs]: the span, from the marks */
        uint8_t *seg = heap_seg_addr(h, i);
        uint32_t idx = layout_small_block(
            obj - (uintptr_t)seg, t->small_first[cls], t->small_nblocks[cls],
            layout_class_size[cls], t->small_magic[cls]);
        return idx == UINT32_MAX ? 0
                                 : layout_block_span(layout_seg_marks(seg),
                                                     idx, t->small_nblocks[cls],
                                                     cls);
    }
    case SEG_LARGE:
        return ((uint64_t)t->segs[i].run << h->seg_shift) - LAYOUT_LARGE_OBJECT;
    default:
        return 0;
    }
}

/* Scan one marked object's reference fields.  REMARK: a block found by
 * a remark rather than a reference (Note [Remark] in daemon/gc/remark.c): its
 * bytes are not counted, and a header that does not fit its block is not
 * a bad reference -- a client that died while it allocated the block
 * (mark set, header not yet written) leaves one -- only a block whose
 * fields are not read. */
static void scan_block(struct mark_job *j, struct mark_stack *s,
                       uintptr_t obj, uint64_t block_size, bool remark)
{
    struct valid_ref ref = {.obj = obj, .block_size = block_size};
    uint64_t hdr = validate_header(&ref);
    if (hdr == 0) {
        if (!remark)
            count_bad(j->h);
        return;
    }
    /* every marked object is scanned once (twice at most, when two
     * workers race on it): what the program keeps (Note [Pacing]) */
    if (!remark)
        s->scanned_bytes += layout_object_size(layout_header_nrefs(hdr),
                                               layout_header_nbytes(hdr));
    layout_clear_stale_tag((uint64_t *)(obj - LAYOUT_WORD), hdr, j->epoch);
    void *const *f = (void *const *)obj;
    size_t n = layout_header_nrefs(hdr);
    for (size_t k = 0; k < n; k++) {
        uintptr_t v = (uintptr_t)__atomic_load_n(&f[k], __ATOMIC_RELAXED);
        struct valid_ref child;
        if (v && mark_one(j, v, &child, "a reference field")) {
            s->marked++;
            push(j, s, v);
        }
    }
}

static void scan(struct mark_job *j, struct mark_stack *s, uintptr_t obj)
{
    scan_block(j, s, obj, block_size_of(j->h, obj), false);
}

/* Remark segment I (Note [Remark] in daemon/gc/remark.c): scan every block
 * whose mark is the epoch.  The caller holds the adoption lock and has
 * seen I FILLED or the head of a large run, so nobody allocates in it. */
static void rescan(struct mark_job *j, struct mark_stack *s, uint32_t i)
{
    ASSERT_LOCK_HELD(&j->h->adoption);
    struct heap *h = j->h;
    const struct segtab *t = &h->segs;
    uint8_t *seg = heap_seg_addr(h, i);
    uint8_t *marks = layout_seg_marks(seg);

    /* flagged for a validated reference, so OWNED, FILLED or LARGE, and
     * not OWNED under the adoption lock (remark_lock_unowned): nothing
     * but a sweep frees a FILLED segment with a known class or a large
     * run (Note [Segment lifecycle]) */
    assert(seg_state(t, i) == SEG_FILLED || seg_state(t, i) == SEG_LARGE);
    if (seg_state(t, i) == SEG_LARGE) {
        if (__atomic_load_n(marks, __ATOMIC_ACQUIRE) == j->epoch)
            scan_block(j, s, (uintptr_t)seg + LAYOUT_LARGE_OBJECT +
                                 LAYOUT_WORD,
                       ((uint64_t)t->segs[i].run << h->seg_shift) -
                           LAYOUT_LARGE_OBJECT,
                       true);
        return;
    }
    uint8_t cls = seg_class(h, i);
    if (cls >= LAYOUT_NCLASSES || t->small_nblocks[cls] == 0)
        return; /* no block can be marked in it */
    uint32_t n = t->small_nblocks[cls], bs = layout_class_size[cls];
    uintptr_t first = (uintptr_t)seg + t->small_first[cls] + LAYOUT_WORD;
    for (uint32_t b = 0; b < n; b++)
        if (__atomic_load_n(&marks[b], __ATOMIC_ACQUIRE) == j->epoch)
            scan_block(j, s, first + (uintptr_t)b * bs,
                       layout_block_span(marks, b, n, cls), true);
}

static uint64_t poll_urs(struct mark_job *j);

/* With j->mu held: take a packet off the pool, or NULL. */
static struct mark_packet *pool_take_locked(struct mark_job *j)
{
    ASSERT_LOCK_HELD(&j->mu);
    struct mark_packet *p = j->pool;
    /* Note [Bounded mark stacks]: pool_n counts the pool's entries */
    assert(j->pool_n <= j->pool_cap && (p != NULL) == (j->pool_n != 0));
    if (p) {
        assert(p->n <= j->pool_n);
        j->pool = p->next;
        j->pool_n -= p->n;
    }
    return p;
}

/* Take a packet into S, or remark work (Note [Remark] in
 * daemon/gc/remark.c), or wait; false when marking is over. */
static bool refill(struct mark_job *j, struct mark_stack *s)
{
    bool got = false;
    uint32_t seg;
    /* before looking for shared work, take what mutators have logged */
    poll_urs(j);
    hd_mutex_lock(&j->mu);
    for (;;) {
        struct mark_packet *p = pool_take_locked(j);
        if (p) {
            hd_mutex_unlock(&j->mu);
            for (uint32_t k = 0; k < p->n; k++)
                push(j, s, p->refs[k]);
            free(p);
            return true;
        }
        if (remark_pop_locked(j, &seg)) {
            hd_mutex_unlock(&j->mu);
            if (remark_lock_unowned(j->h, seg)) {
                rescan(j, s, seg);
                remark_unlock_unowned(j->h);
                remark_finish(j, seg);
            } else {
                remark_forward(j, seg);
            }
            return true;
        }
        if (j->done)
            break;
        assert(j->waiting < j->nworkers);
        if (++j->waiting == j->nworkers) {
            /* Note [Parallel marking]: every worker waits, with an empty
             * stack, and nothing is left to share */
            j->done = true;
            pthread_cond_broadcast(&j->cv);
            break;
        }
        hd_cond_wait(&j->cv, &j->mu);
        j->waiting--;
    }
    hd_mutex_unlock(&j->mu);
    return got;
}

/* Objects popped from the stack wait in a small FIFO ring, their headers
 * prefetched, before they are scanned: by then the cache miss on the header
 * and fields has been overlapped with other work (OCaml 5.1's mark
 * prefetching). */
#define PREFETCH_RING 16

void mark_worker(void *arg, unsigned worker)
{
    struct mark_job *j = arg;
    struct mark_stack s = {0};
    uintptr_t ring[PREFETCH_RING];
    unsigned head = 0, queued = 0;
    (void)worker;
    assert_marking(j);

    unsigned since_poll = 0;
    do {
        while (s.n > 0 || queued > 0) {
            if (++since_poll == URS_POLL_EVERY) {
                since_poll = 0;
                poll_urs(j);
                workers_checkpoint(); /* Note [Worker priority] */
                /* the running total pacing reads (Note [Pacing]) */
                atomic_fetch_add_explicit(&j->marked_bytes, s.scanned_bytes,
                                          memory_order_relaxed);
                s.scanned_bytes = 0;
            }
            if (s.n > 0 && queued < PREFETCH_RING) {
                if (s.n > 2 * PACKET_REFS)
                    donate(j, &s);
                uintptr_t obj = s.v[--s.n];
                __builtin_prefetch((const void *)(obj - LAYOUT_WORD));
                ring[(head + queued++) % PREFETCH_RING] = obj;
                continue;
            }
            uintptr_t obj = ring[head];
            head = (head + 1) % PREFETCH_RING;
            queued--;
            scan(j, &s, obj);
        }
    } while (refill(j, &s));
    atomic_fetch_add_explicit(&j->marked, s.marked, memory_order_relaxed);
    atomic_fetch_add_explicit(&j->marked_bytes, s.scanned_bytes,
                              memory_order_relaxed);
    free(s.v);
}

/* ---- rounds and the final drain ---- */

void mark_round_reset(struct mark_job *j)
{
    hd_mutex_lock(&j->mu);
    j->waiting = 0;
    j->done = false;
    hd_mutex_unlock(&j->mu);
}

bool mark_pool_empty(struct mark_job *j)
{
    hd_mutex_lock(&j->mu);
    bool empty = j->pool == NULL;
    hd_mutex_unlock(&j->mu);
    return empty;
}

bool mark_drain(struct mark_job *j, uint64_t budget)
{
    struct mark_stack s = {0};
    uint64_t scanned = 0;
    bool emptied = true;
    assert_marking(j);

    for (;;) {
        hd_mutex_lock(&j->mu);
        struct mark_packet *p = pool_take_locked(j);
        hd_mutex_unlock(&j->mu);
        if (!p)
            break;
        for (uint32_t k = 0; k < p->n; k++)
            push(j, &s, p->refs[k]);
        free(p);
        while (s.n > 0 && scanned < budget) {
            scan(j, &s, s.v[--s.n]);
            scanned++;
        }
        if (s.n > 0) { /* budget spent: give the rest back */
            while (s.n > 0) {
                struct mark_packet *q = malloc(sizeof *q);
                if (!q) { /* cannot park it: drop it for remark */
                    drop_grouped(j, s.v, &s.n, s.n);
                    break;
                }
                q->n = 0;
                while (s.n > 0 && q->n < PACKET_REFS)
                    q->refs[q->n++] = s.v[--s.n];
                pool_put(j, q);
            }
            emptied = false;
            break;
        }
    }
    atomic_fetch_add_explicit(&j->marked, s.marked, memory_order_relaxed);
    atomic_fetch_add_explicit(&j->marked_bytes, s.scanned_bytes,
                              memory_order_relaxed);
    free(s.v);
    return emptied;
}

/* ---- roots ---- */

/* Roots found by one thread, published to the pool a packet at a time. */
struct seeder {
    struct mark_packet *cur;
};

static void seed_flush(struct mark_job *j, struct seeder *sd)
{
    if (!sd->cur)
        return;
    pool_put(j, sd->cur);
    sd->cur = NULL;
}

static void seed(struct mark_job *j, struct seeder *sd, uintptr_t obj)
{
    if (sd->cur && sd->cur->n == PACKET_REFS)
        seed_flush(j, sd);
    if (!sd->cur) {
        struct mark_packet *p = malloc(sizeof *p);
        if (!p) {
            /* no memory for a packet: remark its segment instead (Note
             * [Bounded mark stacks]) */
            size_t one = 1;
            drop_grouped(j, &obj, &one, 1);
            return;
        }
        p->n = 0;
        sd->cur = p;
    }
    sd->cur->refs[sd->cur->n++] = obj;
}

/* Mark V, a root or a logged reference, and queue it. */
static void mark_root(struct mark_job *j, struct seeder *sd, uintptr_t v,
                      const char *where)
{
    struct valid_ref ref;
    if (v && mark_one(j, v, &ref, where)) {
        atomic_fetch_add_explicit(&j->marked, 1, memory_order_relaxed);
        seed(j, sd, v);
    }
}

/* Note [The daemon's preparatory push]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * When the daemon takes the stack handshake of a young slot (Note [Stack
 * marking handshake] in client/barrier.c: its mutator is blocked,
 * stopped or dead, or was slower than mark_roots), it owes what the
 * mutator's own handshake does (Note [The preparatory push] in
 * client/minor.c): every shared object the mutator's live young objects
 * reference is marked before the mutator changes any of them.  The daemon
 * cannot see the mutator's C locals, which may hold any of its young
 * objects, so it takes every young block of every small segment the
 * slot's client owns (OWNED, its owner the client's id, in the daemon's
 * own table) as live: young_scan_segment (Note [Scanning young blocks] in
 * proto/young.h) emits each one's reference fields, and each is marked
 * as a root, "a young object".  A root of the slot, or a field, that
 * references a young block of a segment the client owns is skipped, for
 * that block is scanned itself; any other reference is validated as
 * every reference is, so a young object of another client's is refused
 * (Note [References to young objects] in validate.c).  A field that is
 * no reference at all is dropped without counting it in bad_refs: a young
 * block may be one a mutator of the client is allocating right now (its
 * mark set, its words still those of the block's last life: poison, or an
 * object freed), which is no client's fault.
 * The cost is a walk of the segment table to `high` and of the marks and
 * young blocks of the client's segments, under heap->lock, per young slot
 * the daemon takes (a client with k young mutators is scanned up to k
 * times a cycle); a dead young object's shared references live one cycle
 * more.  Measured (-O2 with assertions, 2 shared cores), a client owning
 * 1000 segments of 128 KiB of 24-byte blocks (5.2 million): 1.4 ms a walk
 * with no young block (the marks alone), 14.6 ms with a tenth of the
 * blocks young and each referencing a shared object (about 26 ns a young
 * block, most of it the validation of its field), 69 ms with every block
 * young.  A mutator's young objects are bounded by its budget and age
 * (Note [Young budgets] in heap.h), so a walk is about the marks' pass
 * plus a millisecond per 40,000 young objects.
 */
struct young_push {
    struct mark_job *j;
    struct seeder *sd;
    uint64_t client;
};

/* Is R, which validate_ref refused as young, in a segment client
 * P->client owns (Note [The daemon's preparatory push])?  With
 * heap->lock held. */
static bool own_young(const struct young_push *p, uintptr_t r)
{
    const struct heap *h = p->j->h;
    uint32_t i = (uint32_t)((r - (uintptr_t)h->base) >> h->seg_shift);
    return h->segs.segs[i].state == SEG_OWNED &&
           h->segs.segs[i].owner == p->client;
}

/* Root R of a young slot: marked unless it is its client's young block. */
static void young_root(struct young_push *p, uintptr_t r)
{
    struct valid_ref ref;
    if (!validate_ref(p->j->h, r, &ref) && ref.young && own_young(p, r))
        return;
    mark_root(p->j, p->sd, r, "a root stack");
}

/* Field R of a young block of P->client's: marked unless it is the
 * client's young block, or no object at all. */
static void young_field(void *ctx, uintptr_t r)
{
    struct young_push *p = ctx;
    struct valid_ref ref;
    if (!validate_ref(p->j->h, r, &ref) && (!ref.young || own_young(p, r)))
        return; /* a block being allocated, garbage, or scanned itself */
    mark_root(p->j, p->sd, r, "a young object");
}

/* Mark what every young block of P->client's segments references. */
static void young_push(struct young_push *p)
{
    struct heap *h = p->j->h;
    const struct segtab *t = &h->segs;
    ASSERT_LOCK_HELD(&h->lock);
    for (uint32_t i = t->first; i < t->high; i++) {
        if (t->segs[i].state != SEG_OWNED || t->segs[i].owner != p->client)
            continue;
        uint8_t c = seg_class(h, i);
        if (c >= LAYOUT_NCLASSES || t->small_nblocks[c] == 0)
            continue; /* blank: nothing in it */
        uint8_t *seg = heap_seg_addr(h, i);
        young_scan_segment(layout_seg_marks(seg), seg + t->small_first[c],
                           t->small_nblocks[c], layout_class_size[c],
                           young_field, p);
    }
}

/* Note [Marking C stack captures last]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * The objects C stacks point into (Note [C locals are roots] in
 * client/stack_roots.c) are snapshot roots like the root slots, but they
 * are held back: the daemon's handshake keeps a slot's capture in the
 * job's list, and the mutator's logs each captured reference with bit 0
 * set, which its URS consumer strips and holds back the same way.  When
 * the workers run dry, the collector marks them (mark_captures) and runs
 * the workers again; the final sync marks what came in after, in its
 * pause.  So what they mark first, and what is marked from then on, is
 * what the conservative roots kept that the precise ones had not reached
 * by then: conservative_roots and conservative_bytes_retained (the bytes
 * marked from the first of them to the end, so writes logged meanwhile
 * count too: an upper bound).  Marking them later is safe: they are
 * snapshot roots, copied out of the slot at its handshake, and every
 * root need only be marked before the cycle ends.  A word that is no
 * object's any more (a stale one's object died since) is dropped, not
 * counted as a bad reference.  The list holds at most CAPTURES_HELD
 * entries (8 MiB, the captures of 8 slots filled to LAYOUT_MAX_CAPTURED):
 * past it a capture is marked at once, as a precise root, so a client
 * that logs tagged entries without end costs the daemon no memory, only
 * its counts their accuracy.
 */
#define CAPTURES_HELD ((size_t)LAYOUT_MAX_CAPTURED * 8)

static void hold_capture(struct mark_job *j, struct seeder *sd, uintptr_t v)
{
    struct valid_ref ref;
    ASSERT_LOCK_HELD(&j->h->lock);
    if (!validate_ref(j->h, v, &ref))
        return;
    if (j->ncaptured == CAPTURES_HELD) {
        mark_root(j, sd, v, "a C stack");
        return;
    }
    if (j->ncaptured == j->capcaptured) {
        size_t cap = j->capcaptured ? 2 * j->capcaptured : 256;
        uintptr_t *c = realloc(j->captured, cap * sizeof *c);
        if (!c) { /* marked now, only not counted */
            mark_root(j, sd, v, "a C stack");
            return;
        }
        j->captured = c;
        j->capcaptured = cap;
    }
    j->captured[j->ncaptured++] = v;
}

bool mark_captures(struct mark_job *j)
{
    ASSERT_LOCK_HELD(&j->h->lock);
    struct seeder sd = {0};
    if (j->ncaptured == 0)
        return false;
    if (!j->captures_marked) {
        j->captures_marked = true;
        j->captured_bytes_at = atomic_load(&j->marked_bytes);
    }
    for (size_t i = 0; i < j->ncaptured; i++) {
        uint64_t before = atomic_load(&j->marked);
        mark_root(j, &sd, j->captured[i], "a C stack");
        j->captured_first += atomic_load(&j->marked) - before;
    }
    seed_flush(j, &sd);
    j->ncaptured = 0;
    return true;
}

uint64_t mark_captures_bytes(struct mark_job *j)
{
    return j->captures_marked
               ? atomic_load(&j->marked_bytes) - j->captured_bytes_at
               : 0;
}

/* Mark every root in the stack of slot SLOT, and for a young slot what
 * its client's young objects reference (Note [The daemon's preparatory
 * push]). */
static void trace_stack(struct mark_job *j, struct seeder *sd, unsigned slot)
{
    struct heap *h = j->h;
    struct layout_mutator *m = heap_slot(h, slot);
    void *_Atomic *roots = layout_mutator_roots(m);
    struct young_push p = {j, sd, atomic_load(&h->owners[slot].client_id)};
    bool young = h->owners[slot].young_bytes != 0;
    /* the parked value before the depth: a mutator stores the slot and
     * the depth before it unparks, so whichever it reads, the value is
     * seen (Note [Values in flight] in client/barrier.c) */
    uintptr_t v = (uintptr_t)atomic_load(&m->pending_root);
    if (young)
        young_root(&p, v);
    else
        mark_root(j, sd, v, "a root stack");
    uint64_t depth = atomic_load_explicit(&m->root_depth, memory_order_acquire);
    if (depth > LAYOUT_MAX_ROOTS) {
        /* Note [Client control memory]: nonsense; mark what there is */
        slotmem_fault(h, slot, SLOT_FAULT_ROOT_DEPTH);
        depth = LAYOUT_MAX_ROOTS;
    }
    for (uint64_t e = 0; e < depth; e++) {
        v = (uintptr_t)atomic_load_explicit(&roots[e], memory_order_relaxed);
        if (young)
            young_root(&p, v);
        else
            mark_root(j, sd, v, "a root stack");
    }
    /* Note [C locals are roots] in client/stack_roots.c: the capture is
     * the stack's at the snapshot (the mutator stopped or blocked then,
     * and replaces it only once this handshake is done) */
    void *_Atomic *cap = layout_mutator_captured(m);
    uint64_t ncap = atomic_load_explicit(&m->captured_n,
                                         memory_order_acquire);
    if (ncap > LAYOUT_MAX_CAPTURED) {
        slotmem_fault(h, slot, SLOT_FAULT_CAPTURED);
        ncap = LAYOUT_MAX_CAPTURED;
    }
    for (uint64_t e = 0; e < ncap; e++)
        hold_capture(j, sd, (uintptr_t)atomic_load_explicit(
                                &cap[e], memory_order_relaxed));
    if (young)
        young_push(&p);
}

void mark_stack(struct mark_job *j, unsigned slot, bool stopped)
{
    ASSERT_LOCK_HELD(&j->h->lock);
    struct layout_mutator *m = heap_slot(j->h, slot);
    struct seeder sd = {0};
    uint32_t epoch = j->epoch;

    if (!heap_slot_enter(j->h, slot)) /* Note [Slot windows] */
        return;
    if (atomic_load(&m->stack_marked) == epoch)
        goto out;
    uint32_t old = atomic_load(&m->stack_marking);
    if (!stopped) {
        /* Note [Minor collections in slices] in client/minor.c: promotions
         * under way, which the mutator's own handshake ends first */
        if (atomic_load(&m->young_promoting))
            goto out;
        /* Note [Stack marking handshake]: lose, and the mutator marks it */
        if (old == epoch ||
            !atomic_compare_exchange_strong(&m->stack_marking, &old, epoch))
            goto out;
    } else {
        atomic_store(&m->stack_marking, epoch);
    }
    trace_stack(j, &sd, slot);
    seed_flush(j, &sd);
    /* marked only once every root is: the mutator may mutate after this */
    atomic_store(&m->stack_marked, epoch);
    futex_wake_all(&m->stack_marked);
out:
    heap_slot_leave(j->h, slot);
}

void mark_roots(struct mark_job *j)
{
    ASSERT_LOCK_HELD(&j->h->lock);
    struct heap *h = j->h;
    struct seeder sd = {0};

    /* global roots: Note [Global roots].  Which entries are roots, and
     * whether one is marked this cycle, is the daemon's record; only the
     * value, which clients write, is read from the table (and validated
     * by mark_root like any reference). */
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++) {
        struct heap_global *r = &h->globals[i];
        if (r->state != LAYOUT_GLOBAL_SET &&
            r->state != LAYOUT_GLOBAL_INITIALIZING)
            continue;
        if (r->static_flag == h->static_flag)
            continue; /* created during this cycle: black */
        r->static_flag = h->static_flag;
        mark_root(j, &sd,
                  (uintptr_t)atomic_load(&h->control->global_values[i]),
                  "a global root");
    }
    seed_flush(j, &sd);
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++)
        mark_stack(j, i, false);
}

/* Note [Polling the rings]
 * ~~~~~~~~~~~~~~~~~~~~~~~~
 * A UrsBatch message wakes the loop thread, which consumes the ring; but a
 * mutator writing fast fills a ring faster than a busy machine schedules
 * that thread, and a full ring makes the mutator wait.  So the mark workers,
 * which run exactly while rings fill, also consume every non-empty ring
 * every URS_POLL_EVERY objects and whenever they run out of work.  They
 * only try the heap lock: if the loop thread or the collector holds it,
 * someone is consuming already.
 */
static uint64_t poll_urs(struct mark_job *j)
{
    struct heap *h = j->h;
    uint64_t n = 0;
    if (!heap_trylock(h))
        return 0;
    if (h->marking == j) {
        for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
            struct layout_mutator *m = heap_slot(h, i);
            if (heap_slot_attached(h, i) &&
                atomic_load(&m->urs_head) != atomic_load(&m->urs_tail))
                n += mark_urs(h, j, i);
        }
    }
    heap_unlock(h);
    return n;
}

/* Note [Saving under the barrier] in client/barrier.c: the save record
 * that begins at entry T of SLOT's ring (published up to HEAD) -- a whole
 * record, a wide record's chunk, or the commit of its chunks -- goes to
 * the saver, if a save runs, and its fields are marked, as the entries
 * the barrier logs otherwise would be.  A record cut by the head or of a count
 * past the ring's size is the work of a client that writes its ring by
 * hand: counted as a bad reference, and its fields marked as entries.
 * Returns the last entry it consumed. */
static uint64_t save_record(struct mark_job *j, struct seeder *sd,
                            unsigned slot, uint64_t t, uint64_t head)
{
    struct layout_mutator *m = heap_slot(j->h, slot);
    uintptr_t obj = (uintptr_t)atomic_load_explicit(
                        &m->urs[t % LAYOUT_URS_SIZE], memory_order_relaxed) &
                    ~(uintptr_t)LAYOUT_URS_SAVED;
    uint64_t w = head - t >= LAYOUT_URS_RECORD
                     ? (uint64_t)(uintptr_t)atomic_load_explicit(
                           &m->urs[(t + 1) % LAYOUT_URS_SIZE],
                           memory_order_relaxed)
                     : UINT64_MAX;
    uint64_t head_words = LAYOUT_URS_RECORD, n = w, pos = 0, off = 0;
    if (w != UINT64_MAX && (w & LAYOUT_URS_COMMIT)) {
        save_take_commit(j->h, slot, obj, w & ~LAYOUT_URS_COMMIT);
        return t + 1;
    }
    if (w != UINT64_MAX && (w & LAYOUT_URS_CHUNK)) {
        head_words = LAYOUT_URS_CHUNK_HEAD;
        n = w & ~LAYOUT_URS_CHUNK;
        if (n > LAYOUT_URS_CHUNK_FIELDS || head - t < head_words)
            n = UINT64_MAX;
        else {
            pos = (uint64_t)(uintptr_t)atomic_load_explicit(
                &m->urs[(t + 2) % LAYOUT_URS_SIZE], memory_order_relaxed);
            off = (uint64_t)(uintptr_t)atomic_load_explicit(
                &m->urs[(t + 3) % LAYOUT_URS_SIZE], memory_order_relaxed);
        }
    }
    if (n > LAYOUT_URS_SIZE - head_words || n > head - t - head_words) {
        count_bad(j->h);
        return t;
    }
    uint64_t first = t + head_words;
    if (head_words == LAYOUT_URS_CHUNK_HEAD)
        save_take_chunk(j->h, slot, obj, pos, off, m->urs,
                        first % LAYOUT_URS_SIZE, n);
    else
        save_take_record(j->h, obj, m->urs, first % LAYOUT_URS_SIZE, n);
    for (uint64_t k = first; k < first + n; k++)
        mark_root(j, sd,
                  (uintptr_t)atomic_load_explicit(&m->urs[k % LAYOUT_URS_SIZE],
                                                  memory_order_relaxed),
                  "a save record");
    return first + n - 1;
}

/* Note [Saving under the barrier] in client/barrier.c: a writer that won
 * its tag and died (or was evicted) before it moved its head over its
 * record leaves the record staged past the head, and the fields it
 * stands for logged nowhere else.  So when a slot is freed while marking,
 * a well-formed record right at its head has its fields marked -- those
 * that are objects: an older record there, from a writer that lost or
 * from a cycle before, only keeps a few objects one cycle longer. */
void mark_staged(struct heap *h, struct mark_job *j, unsigned slot)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct layout_mutator *m = heap_slot(h, slot);
    struct seeder sd = {0};
    struct valid_ref ref;
    uint64_t head = atomic_load(&m->urs_head);
    uintptr_t v = (uintptr_t)atomic_load(&m->urs[head % LAYOUT_URS_SIZE]);
    uint64_t n = (uint64_t)(uintptr_t)atomic_load(
        &m->urs[(head + 1) % LAYOUT_URS_SIZE]);
    if (!j || !(v & LAYOUT_URS_SAVED) ||
        n > LAYOUT_URS_SIZE - LAYOUT_URS_RECORD)
        return;
    for (uint64_t k = 0; k < n; k++) {
        uintptr_t f = (uintptr_t)atomic_load(
            &m->urs[(head + LAYOUT_URS_RECORD + k) % LAYOUT_URS_SIZE]);
        if (f && validate_ref(h, f, &ref))
            mark_root(j, &sd, f, "a staged save record");
    }
    seed_flush(j, &sd);
}

uint64_t mark_urs(struct heap *h, struct mark_job *j, unsigned slot)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct layout_mutator *m = heap_slot(h, slot);
    struct seeder sd = {0};
    uint64_t tail = atomic_load(&m->urs_tail);
    uint64_t head = atomic_load_explicit(&m->urs_head, memory_order_acquire);

    if (head == tail)
        return 0;
    if (head - tail > LAYOUT_URS_SIZE) {
        /* a head the mutator cannot have written (Note [Client control
         * memory]): what the ring holds is still marked, for it may be
         * all that keeps an object another client stored alive */
        slotmem_fault(h, slot, SLOT_FAULT_URS_HEAD);
        tail = head - LAYOUT_URS_SIZE;
    }
    for (uint64_t t = tail; j && t < head; t++) {
        uintptr_t v = (uintptr_t)atomic_load_explicit(
            &m->urs[t % LAYOUT_URS_SIZE], memory_order_relaxed);
        /* Note [Marking C stack captures last] */
        if (v & LAYOUT_URS_CAPTURED)
            hold_capture(j, &sd, v & ~(uintptr_t)LAYOUT_URS_CAPTURED);
        else if (v & LAYOUT_URS_SAVED)
            t = save_record(j, &sd, slot, t, head);
        else
            mark_root(j, &sd, v, "an update remembered set");
    }
    if (j) {
        seed_flush(j, &sd);
        atomic_fetch_add(&j->urs_entries, head - tail);
    }
    atomic_store(&m->urs_tail, head);
    atomic_fetch_add(&m->urs_wake, 1);
    futex_wake_all(&m->urs_wake);
    return head - tail;
}
