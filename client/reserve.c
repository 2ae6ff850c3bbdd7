/* libheapd: the client's reserve of blank segments (and of partly free
 * ones, Note [Reusing partly free segments] in daemon/gc/segment.c), shared
 * by its mutators
 * (Note [Segment supply] in daemon/gc/segment.c), the queue of full segments
 * going back, and the thread that pre-faults granted segments.
 *
 * Note [Reserve sizing]
 * ~~~~~~~~~~~~~~~~~~~~~
 * A refill is a round trip through the agent thread and the daemon's loop,
 * which share the cores with the collector's workers and with the mutators
 * themselves; a mutator that finds the reserve empty waits for it, and that
 * wait is a pause no collector counter sees.  So the reserve must outlast a
 * round trip at the client's allocation rate:
 *   - a refill of one batch is asked for as soon as fewer than a batch are
 *     left, so one batch is the runway, and the reserve holds at most two;
 *   - the batch starts at RESERVE_START segments and doubles each time a
 *     mutator finds the reserve empty and the refill it waits for comes
 *     whole and without having waited for a cycle: the allocation rate
 *     outran the round trip.  A refill held back by pacing says so
 *     (SegmentGrant.waited), and one the daemon cut to its grant cap is
 *     all a larger batch would get; growing for those made GCBench's
 *     reserve 128 segments, 16 MiB.  The batch stops at batch_cap:
 *     RESERVE_BATCH, or 1/64 of the heap's segments for a small heap,
 *     where a client must not sit on the room a large object or another
 *     client needs, and under a memory limit at most 1/256 of the
 *     limit's segments (Note [Memory limit] in daemon/gc/collector.c: a
 *     31 MiB limit refused the shared cache's second worker for the
 *     first one's reserve of 8 MiB).  It never shrinks; what a client
 *     holds this way is bounded by 2 * batch_cap, and the daemon grants
 *     no more than a mutator's share of an eighth of the heap's
 *     allocation budget (grant_cap in daemon/grant.c, Note [Segment
 *     supply]); it is counted by its quota and
 *     given back when it disconnects (Note [Segment supply]), when
 *     its last mutator detaches -- a process that allocated a large map
 *     and then only serves it held a grown reserve (up to 16 MiB) of
 *     memory nobody would allocate in -- and when a mutator waits for a
 *     collection (heapd_collect with HEAPD_COLLECT_WAIT), before it asks,
 *     so that the cycle's purge gives it to the system, and again after,
 *     once a refill that was out then is in (reserve_settle): the
 *     fragmentation torture, right after its drop and first cycle, held
 *     2.11 to 2.44 times its live bytes, by what the reserve held then
 *     (4.8 to 16.2 MiB), and 2.08 to 2.10 times with it.  A mutator
 *     that is not young gives its current segments back with it
 *     (alloc_release_current; a nursery's are its minor collections' to
 *     size and free), so that the cycle sweeps their free room too: the
 *     torture's mutator held 48 of them, one a size class, 3.6 MiB
 *     committed for 0.3 MiB of blocks, and 2.07-2.09 times became 2.03.
 *     The batch stays: the next refill is one round trip, and the next
 *     allocation of a class takes a partly free segment of it.
 * RESERVE_START is small, two segments: what bounds a reserve from above
 * is batch_cap and the daemon's cap, and a client that needs more gets
 * there in a few doubled refills, while one that allocates little holds
 * little (started at 16, the shared cache's workers held more than a
 * batch of room each, 4 workers some 8 MiB).
 * Debug builds check these bounds, and more, whenever reserve.mu is let
 * go (reserve_is_valid).
 *
 * Note [Pre-faulting]
 * ~~~~~~~~~~~~~~~~~~~
 * A granted segment is often memory the kernel has not given this process
 * yet: punched, or never touched, or touched only by the daemon.  The first
 * write to each of its pages is a page fault, and on the allocation fast
 * path those faults cost more than the allocations (GCBench: a third of
 * the mutator's time when nothing is reused).  So the segments of each
 * background refill are also queued for a prefault thread, which maps them
 * into the process (MADV_POPULATE_WRITE) on a core the mutators do not
 * use, usually well before a mutator takes them: the ready reserve is
 * first in, first out and holds a batch of runway (Note [Reserve sizing]).
 *
 * The thread runs in the idle scheduling class (SCHED_IDLE; nice 19 where
 * that is refused): when the cores are busy it would take them from the
 * mutators and the collector, and a mutator held off its core cannot answer
 * a stop (done at normal priority by the agent thread, this made pauses ten
 * times longer).  Not merely nice 19: a thread of any nice value that has
 * just been given a core keeps it for its minimum slice, so a mutator woken
 * meanwhile (a grant arrived, its ring has room) waits for the next
 * scheduler tick, 4 ms at HZ=250, while this thread faults pages in
 * (measured: 4-5 ms iterations in latency_bench, the woken mutator queued
 * behind this thread in MADV_POPULATE_WRITE).  Only an idle-class thread
 * is preempted at once by any waking normal one.  And since the kernel
 * still lends an idle-class thread a busy core now and then, until the
 * next tick, the thread yields after every segment (one madvise, some
 * tens of microseconds).  While the heap is marking it leaves the
 * segments it claims alone: the daemon's mark workers are in the idle
 * class too (Note [Worker priority] in daemon/gc/workers.c) and would share
 * the spare core with it half and half, and a cycle that marks at half
 * speed makes allocation wait on pacing (measured in latency_bench: grants
 * paced and 10-20 ms iterations, none once this thread stood aside); the
 * mutator faults those pages in itself, a few microseconds each.  A
 * low-priority
 * thread must never hold something a mutator waits for, or it passes its
 * priority on to the mutator:
 *   - it takes no lock: the agent thread alone writes segment numbers into
 *     a ring of atomic words, and the thread claims one by exchanging it
 *     with 0, newest first, while mutators take the oldest segment of the
 *     ready reserve; it sleeps on a futex word that every push bumps;
 *   - it skips a segment whose header already says a mutator formatted it
 *     (kind != BLANK, Note [Segments]): the mutator is faulting its pages
 *     in itself, and a page fault that finds the page locked by the
 *     populating thread waits, uninterruptibly, for as long as that thread
 *     is kept off a core (seen: mutators in D state in __folio_lock when
 *     both took segments in the same order).
 * What is left is harmless: MADV_POPULATE_WRITE maps pages and allocates
 * missing ones as zero, but never changes what memory holds, so racing a
 * mutator that took the segment just after the check, or a client that
 * was granted it since, costs at most a short wait.  The worst case, a
 * segment freed and punched meanwhile, is memory committed again until
 * the next punch, bounded by the ring (pre-faulting is only a speed-up:
 * an entry overwritten when the ring wraps is just not pre-faulted).
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "barrier.h"
#include "client.h"
#include "clock.h"
#include "errors.h"
#include "futex.h"
#include "heapd.h"
#include "layout.h"
#include "mutator.h"
#include "remark.h"
#include "reserve.h"

#define PREFAULT_NICE 19 /* without SCHED_IDLE: Note [Pre-faulting] */
#define RESERVE_LIMIT_SHARE 256 /* Note [Reserve sizing] */

void reserve_init(heapd_client *c)
{
    struct reserve *r = &c->reserve;
    hd_mutex_init(&r->mu);
    atomic_init(&r->refills, 0);
    /* Note [Reserve sizing]: a 64th of the heap, or a 256th of its
     * memory limit */
    uint32_t share = c->ctl->segment_count / 64;
    if (c->memory_limit &&
        (c->memory_limit >> c->seg_shift) / RESERVE_LIMIT_SHARE < share)
        share = (uint32_t)((c->memory_limit >> c->seg_shift) /
                           RESERVE_LIMIT_SHARE);
    r->batch_cap = share < 1               ? 1
                   : share > RESERVE_BATCH ? RESERVE_BATCH
                                           : share;
    r->batch = r->batch_cap < RESERVE_START ? r->batch_cap : RESERVE_START;
    r->max = 2 * r->batch;
    r->low = r->batch;
}

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
    /* no longer ours, and queued, as one step: Note [Remark requests] in
     * client/remark.c (a closed connection gives all back) */
    remark_send_return(c, segs, n, &msg);
    remark_returned(c, segs, n);
}

/* ---- pre-faulting (Note [Pre-faulting]) ---- */

/* The newest queued segment not yet taken, claimed, or 0 when none is
 * left at or above *FLOOR.  Newest first: the mutators take the oldest
 * (Note [Pre-faulting]). */
static uint32_t prefault_claim(struct prefault *p, uint32_t *floor)
{
    uint32_t t = atomic_load_explicit(&p->tail, memory_order_acquire);
    uint32_t lo = t - *floor > PREFAULT_QUEUE ? t - PREFAULT_QUEUE : *floor;
    for (uint32_t i = t; i != lo; i--) {
        uint32_t s = atomic_exchange_explicit(
            &p->queue[(i - 1) % PREFAULT_QUEUE], 0, memory_order_acquire);
        if (s)
            return s;
    }
    *floor = t; /* everything below t is claimed */
    return 0;
}

static void *prefault_main(void *arg)
{
    heapd_client *c = arg;
    struct prefault *p = &c->prefault;
    bool populate = true;
    uint32_t floor = 0;

    pthread_setname_np(pthread_self(), "heapd-prefault");
    /* this thread only: a thread's nice value is its own on Linux */
    struct sched_param none = {0};
    if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &none) != 0)
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), PREFAULT_NICE);
    for (;;) {
        uint32_t seq = atomic_load_explicit(&p->seq, memory_order_acquire);
        uint32_t s = prefault_claim(p, &floor);
        if (s == 0) {
            if (atomic_load(&p->stop))
                break;
            futex_wait(&p->seq, seq, 0); /* any push or the stop bumps it */
            continue;
        }
        if (atomic_load_explicit(&c->ctl->phase, memory_order_relaxed) ==
            LAYOUT_PHASE_MARK)
            continue; /* the marker needs the spare core: Note [Pre-faulting] */
        const struct layout_segment *hd = client_seg_addr(c, s);
        if (__atomic_load_n(&hd->kind, __ATOMIC_RELAXED) != LAYOUT_SEG_BLANK)
            continue; /* a mutator has it already: leave it the pages */
#ifdef MADV_POPULATE_WRITE
        /* only a speed-up: a kernel before 5.14 says EINVAL, and then we
         * just keep the queue drained */
        if (populate && madvise(client_seg_addr(c, s), c->segment_size,
                                MADV_POPULATE_WRITE) != 0)
            populate = false;
        sched_yield(); /* Note [Pre-faulting]: a segment at a time */
#else
        (void)populate;
#endif
    }
    return NULL;
}

/* Agent thread: queue S for pre-faulting; the thread starts on first use.
 * When the queue wraps, the oldest unclaimed entry is overwritten: it is
 * the one a mutator takes next anyway. */
static void prefault_push(heapd_client *c, uint32_t s)
{
    struct prefault *p = &c->prefault;
    if (!p->started) {
        if (p->failed || pthread_create(&p->thread, NULL, prefault_main, c)) {
            p->failed = true;
            return;
        }
        p->started = true;
    }
    uint32_t t = atomic_load_explicit(&p->tail, memory_order_relaxed);
    atomic_store_explicit(&p->queue[t % PREFAULT_QUEUE], s,
                          memory_order_release);
    atomic_store_explicit(&p->tail, t + 1, memory_order_release);
}

/* Agent thread: wake the prefault thread after a batch of pushes. */
static void prefault_kick(heapd_client *c)
{
    struct prefault *p = &c->prefault;
    if (p->started) {
        atomic_fetch_add_explicit(&p->seq, 1, memory_order_release);
        futex_wake_all(&p->seq);
    }
}

void reserve_stop(heapd_client *c)
{
    struct prefault *p = &c->prefault;
    if (!p->started)
        return;
    atomic_store(&p->stop, true);
    atomic_fetch_add(&p->seq, 1);
    futex_wake_all(&p->seq);
    pthread_join(p->thread, NULL);
    p->started = false;
}

/* ---- the reserve's invariant ---- */

#ifndef NDEBUG
/* Print what is wrong with the reserve and return false. */
#define RESERVE_BROKEN(...)                                             \
    (fprintf(stderr, "libheapd: the segment reserve is inconsistent (a " \
                     "libheapd bug, or heapd granted a segment twice): " \
                     __VA_ARGS__),                                      \
     fputc('\n', stderr), false)

/* The array a segment number of the reserve was found in. */
static const char *const reserve_where[] = {"", "ready ring", "reuse list",
                                            "queue of full segments"};

/* With reserve.mu held: R as every function of this file leaves it when it
 * lets go of the lock.
 *   - Note [Reserve sizing]: the batch is at least 1 and at most batch_cap,
 *     itself at most RESERVE_BATCH; it started at RESERVE_START (or
 *     batch_cap, if smaller) and only doubled, up to batch_cap; a refill is
 *     asked for below one batch (low) and the ring holds at most two (max),
 *     never more than it has room for.
 *   - a full batch of full segments is sent back before the lock is let
 *     go (reserve_give_back), so fewer than RETURN_BATCH wait.
 *   - partly free segments fit their list and name a size class; so do
 *     the classes the next refill asks for.
 *   - every segment number held is nonzero (segment 0 is the control area;
 *     on_refill and mutator_request_segments drop 0) and held once: the
 *     daemon grants only segments nobody holds, and a full segment is
 *     still this client's until its SegmentReturn is sent, after it has
 *     left the queue (Note [Segment supply] in daemon/gc/segment.c; only
 *     returned segments become reusable, Note [Reusing partly free
 *     segments]). */
static bool reserve_is_valid(const struct reserve *r)
{
    ASSERT_LOCK_HELD(&r->mu);
    if (r->batch_cap < 1 || r->batch_cap > RESERVE_BATCH)
        return RESERVE_BROKEN("batch_cap %u is outside [1, %u]", r->batch_cap,
                              RESERVE_BATCH);
    if (r->batch < 1 || r->batch > r->batch_cap)
        return RESERVE_BROKEN("batch %u is outside [1, batch_cap %u]",
                              r->batch, r->batch_cap);
    unsigned doubled = r->batch / RESERVE_START;
    if (r->batch != r->batch_cap &&
        (r->batch % RESERVE_START != 0 || (doubled & (doubled - 1)) != 0))
        return RESERVE_BROKEN("batch %u is below batch_cap %u but not "
                              "RESERVE_START %u doubled", r->batch,
                              r->batch_cap, RESERVE_START);
    if (r->low != r->batch || r->max != 2 * r->batch)
        return RESERVE_BROKEN("low %u and max %u are not one and two "
                              "batches of %u", r->low, r->max, r->batch);
    if (r->max > RESERVE_MAX)
        return RESERVE_BROKEN("max %u is above RESERVE_MAX %u", r->max,
                              RESERVE_MAX);
    if (r->head >= RESERVE_MAX || r->n > r->max)
        return RESERVE_BROKEN("the ring's head %u or count %u is out of "
                              "bounds (RESERVE_MAX %u, max %u)", r->head,
                              r->n, RESERVE_MAX, r->max);
    if (r->nfull >= RETURN_BATCH)
        return RESERVE_BROKEN("%u full segments wait; a batch of %u should "
                              "have gone back", r->nfull, RETURN_BATCH);
    if (r->n + r->nreuse > r->max)
        return RESERVE_BROKEN("%u blank and %u partly free segments; room "
                              "for %u (Note [Reuse before growth])", r->n,
                              r->nreuse, r->max);
    for (unsigned k = 0; k < r->nreuse; k++)
        if (r->reuse[k].cls >= LAYOUT_NCLASSES)
            return RESERVE_BROKEN("partly free segment %u has class %u; "
                                  "there are %u", r->reuse[k].seg,
                                  r->reuse[k].cls, LAYOUT_NCLASSES);
    for (unsigned k = LAYOUT_NCLASSES; k < 64 * (sizeof r->classes /
                                                 sizeof r->classes[0]); k++)
        if (r->classes[k >> 6] >> (k & 63) & 1)
            return RESERVE_BROKEN("class %u, beyond the last, is asked for",
                                  k);

    /* every segment number once: an open-addressed set, less than a third
     * full, of the numbers seen so far and where (0: an empty cell) */
    enum { SET = 1024 };
    _Static_assert(SET >= 3 * (2 * RESERVE_MAX + RETURN_BATCH),
                   "the set has room for every segment held");
    uint32_t seen[SET] = {0};
    uint8_t where[SET];
    for (unsigned w = 1; w <= 3; w++) {
        unsigned count = w == 1 ? r->n : w == 2 ? r->nreuse : r->nfull;
        for (unsigned k = 0; k < count; k++) {
            uint32_t s = w == 1   ? r->segs[(r->head + k) % RESERVE_MAX]
                         : w == 2 ? r->reuse[k].seg
                                  : r->full[k];
            if (s == 0)
                return RESERVE_BROKEN("entry %u of the %s is segment 0", k,
                                      reserve_where[w]);
            unsigned i = (s * 2654435761u) >> 22; /* the top 10 bits */
            while (seen[i] != 0 && seen[i] != s)
                i = (i + 1) % SET;
            if (seen[i] == s)
                return RESERVE_BROKEN("segment %u is in the %s and in the %s",
                                      s, reserve_where[where[i]],
                                      reserve_where[w]);
            seen[i] = s;
            where[i] = (uint8_t)w;
        }
    }
    return true;
}
#undef RESERVE_BROKEN
#endif

/* Let go of reserve.mu, R checked first in a debug build (Note [Reserve
 * sizing], reserve_is_valid). */
static void unlock_reserve(struct reserve *r)
{
    assert(reserve_is_valid(r));
    hd_mutex_unlock(&r->mu);
}

/* ---- refills ---- */

/* With reserve.mu held: add S to the ready reserve, which is first in,
 * first out (Note [Pre-faulting]). */
static void put_locked(struct reserve *r, uint32_t s)
{
    ASSERT_LOCK_HELD(&r->mu);
    r->segs[(r->head + r->n++) % RESERVE_MAX] = s;
}

/* With reserve.mu held: the oldest blank segment, or false. */
static bool take_locked(struct reserve *r, uint32_t *out)
{
    ASSERT_LOCK_HELD(&r->mu);
    if (r->n == 0)
        return false;
    *out = r->segs[r->head];
    r->head = (r->head + 1) % RESERVE_MAX;
    r->n--;
    return true;
}

/* With reserve.mu held: file granted segment S into the reserve, as a
 * partly free one of class F - 1, or blank if F is 0 (Note [Reusing
 * partly free segments] in daemon/gc/segment.c); false when the reserve
 * is full or F names no class, and S is to go back. */
static bool file_locked(struct reserve *r, uint32_t s, uint32_t f)
{
    ASSERT_LOCK_HELD(&r->mu);
    if (r->n + r->nreuse >= r->max || (f != 0 && f - 1 >= LAYOUT_NCLASSES))
        return false;
    if (f != 0) {
        r->reuse[r->nreuse].seg = s;
        r->reuse[r->nreuse++].cls = f - 1;
    } else {
        put_locked(r, s);
    }
    return true;
}

/* With reserve.mu held: a mutator found the reserve empty; the next
 * refills are larger (Note [Reserve sizing]). */
static void grow_batch_locked(struct reserve *r)
{
    ASSERT_LOCK_HELD(&r->mu);
    if (r->batch >= r->batch_cap)
        return;
    r->batch = 2 * r->batch > r->batch_cap ? r->batch_cap : 2 * r->batch;
    r->max = 2 * r->batch;
    r->low = r->batch;
}

/* Agent thread: the answer to a background refill. */
static void on_refill(void *arg, int status, Heapd__Envelope *rep)
{
    heapd_client *c = arg;
    struct reserve *r = &c->reserve;
    uint32_t extra[RESERVE_MAX];
    size_t nextra = 0;
    uint32_t limit = (uint32_t)(c->size >> c->seg_shift);

    hd_mutex_lock(&r->mu);
    r->refilling = false;
    if (status == 0 && rep &&
        rep->body_case == HEAPD__ENVELOPE__BODY_SEGMENT_GRANT) {
        const Heapd__SegmentGrant *g = rep->segment_grant;
        /* Note [Reserve sizing]: a mutator waited for a round trip, not
         * for a cycle */
        if (r->starved && !g->waited && g->n_segments >= r->asked)
            grow_batch_locked(r);
        r->starved = false;
        for (size_t i = 0; i < g->n_segments; i++) {
            uint32_t s = g->segments[i];
            if (s == 0 || s >= limit)
                continue; /* never from a sane daemon; not ours to use */
            /* partly free and formatted, or blank (Note [Reusing partly
             * free segments] in daemon/gc/segment.c); the header is not
             * read here: a blank segment's first page may not exist yet */
            uint32_t f = i < g->n_formatted ? g->formatted[i] : 0;
            if (file_locked(r, s, f)) {
                if (f == 0)
                    prefault_push(c, s);
            } else if (nextra < RESERVE_MAX) {
                extra[nextra++] = s;
            }
        }
    }
    atomic_fetch_add(&r->refills, 1);
    unlock_reserve(r);
    futex_wake_all(&r->refills);
    prefault_kick(c);
    return_segments(c, extra, nextra);
}

/* With reserve.mu held: ask for more without waiting, once at a time. */
static void refill_async_locked(heapd_client *c)
{
    ASSERT_LOCK_HELD(&c->reserve.mu);
    Heapd__SegmentRequest sr = HEAPD__SEGMENT_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT;

    uint32_t classes[LAYOUT_NCLASSES];
    size_t nclasses = 0;

    if (c->reserve.refilling)
        return;
    /* the classes taken since the last refill */
    for (uint32_t k = 0; k < LAYOUT_NCLASSES; k++)
        if (c->reserve.classes[k >> 6] >> (k & 63) & 1)
            classes[nclasses++] = k;
    memset(c->reserve.classes, 0, sizeof c->reserve.classes);
    sr.kind = HEAPD__SEGMENT_KIND__SEGMENT_SMALL;
    sr.count = c->reserve.batch;
    sr.n_classes = nclasses;
    sr.classes = classes;
    req.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST;
    req.segment_request = &sr;
    if (agent_call_async(&c->agent, &req, on_refill, c) == 0) {
        c->reserve.refilling = true;
        c->reserve.asked = sr.count;
    }
}

int reserve_drain(heapd_client *c)
{
    struct reserve *r = &c->reserve;
    uint32_t segs[2 * RESERVE_MAX];
    size_t n = 0;
    hd_mutex_lock(&r->mu);
    while (take_locked(r, &segs[n]))
        n++;
    while (r->nreuse > 0)
        segs[n++] = r->reuse[--r->nreuse].seg;
    unlock_reserve(r);
    return_segments(c, segs, n);
    return (int)n;
}

static void wait_refill_locked(heapd_mutator *m, bool empty_only);

void reserve_settle(heapd_mutator *m)
{
    struct reserve *r = &m->c->reserve;
    hd_mutex_lock(&r->mu);
    if (r->refilling)
        wait_refill_locked(m, false);
    unlock_reserve(r);
    reserve_drain(m->c);
    reserve_flush_returns(m->c);
}

int reserve_take_back(heapd_client *c, uint32_t s)
{
    struct reserve *r = &c->reserve;
    int where = 0;
    hd_mutex_lock(&r->mu);
    for (unsigned k = 0; k < r->nreuse && !where; k++) {
        if (r->reuse[k].seg == s) {
            r->reuse[k] = r->reuse[--r->nreuse];
            where = 1;
        }
    }
    for (unsigned k = 0; k < r->n && !where; k++) {
        if (r->segs[(r->head + k) % RESERVE_MAX] == s) {
            /* blank segments hold no marked block; take it out anyway */
            for (unsigned x = k; x + 1 < r->n; x++)
                r->segs[(r->head + x) % RESERVE_MAX] =
                    r->segs[(r->head + x + 1) % RESERVE_MAX];
            r->n--;
            where = 1;
        }
    }
    for (unsigned k = 0; k < r->nfull && !where; k++)
        if (r->full[k] == s)
            where = 2;
    unlock_reserve(r);
    return where;
}

/* Queue full segments to go back; send the batch when it is full or FLUSH
 * is set. */
void reserve_give_back(heapd_client *c, const uint32_t *segs, size_t n,
                       bool flush)
{
    struct reserve *r = &c->reserve;
    uint32_t batch[RETURN_BATCH];
    size_t nb = 0;
    hd_mutex_lock(&r->mu);
    for (size_t i = 0; i < n; i++) {
        if (r->nfull == RETURN_BATCH) {
            memcpy(batch, r->full, sizeof batch);
            nb = RETURN_BATCH;
            r->nfull = 0;
            unlock_reserve(r);
            return_segments(c, batch, nb);
            hd_mutex_lock(&r->mu);
        }
        r->full[r->nfull++] = segs[i];
    }
    nb = 0;
    if (flush || r->nfull == RETURN_BATCH) {
        nb = r->nfull;
        memcpy(batch, r->full, nb * sizeof batch[0]);
        r->nfull = 0;
    }
    unlock_reserve(r);
    return_segments(c, batch, nb);
}

void reserve_flush_returns(heapd_client *c)
{
    reserve_give_back(c, NULL, 0, true);
}

/* Note [Reuse before growth]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A mutator whose current segment of a class is used up takes a partly
 * free segment of that class (Note [Reusing partly free segments] in
 * daemon/gc/segment.c) before a blank one, so that the heap refills the
 * holes its sweeps leave instead of spreading its live blocks over new
 * memory.  Partly free segments come only from the daemon, in refills
 * that name the classes the client allocates in; but a refill is asked
 * for when the ready reserve of blank segments runs low, and a reserve
 * full of blank ones meant up to two batches of them taken while the
 * heap held partly free segments of the class.  So partly free segments
 * of a class are asked for alone (SegmentRequest.reuse_only), which the
 * daemon answers with what it has, maybe none, never a blank segment and
 * never after a wait for memory (only pacing holds it, as any grant):
 * ahead, when a mutator takes the last one of its class the reserve
 * holds, and when it finds none, in which case, if the last answer for
 * the class had some, it waits for the answer in a blocking region,
 * REUSE_WAIT_NS at most, and only then takes a blank segment (a class
 * whose blocks die all together has its segments freed whole, not made
 * partly free: alloc_bench's 256-byte objects took 7 times as long
 * waiting for answers with none).  An answer with none marks the class dry until the
 * heap's epoch or phase changes (a sweep makes new partly free
 * segments), so a class the heap has none of costs one round trip a
 * phase.  The bound is latency's: waiting for every answer made
 * latency_bench's longest iteration 4-12 ms (0.7 ms before), a round trip
 * that the agent and heapd need cores for; 200 us costs the shared map
 * some of its reuse.  One such request is
 * out at a time; partly free and blank segments together fill the
 * reserve to its size (Note [Reserve sizing]), so refills do not pile
 * partly free ones up.  Measured on the shared map (2 worker processes,
 * 112-byte values): the values took 333 segments, 26 % occupied after
 * the workers left, taking blank segments while partly free ones waited
 * and piling partly free ones up in the reserves; 245 (35 %) when it
 * waited for every answer.  A mutator that finds the reserve empty and
 * asks heapd itself names its class too, and takes a partly free segment
 * of it if one comes; refused, it takes what the answer asked for ahead
 * brought meanwhile, which heapd handled first (Note [Memory limit] in
 * daemon/gc/collector.c).
 */

/* The heap's cycle, as a stamp that changes with its epoch and phase. */
static uint32_t cycle_stamp(const heapd_client *c)
{
    uint32_t e = atomic_load_explicit(&c->ctl->epoch, memory_order_relaxed);
    uint32_t p = atomic_load_explicit(&c->ctl->phase, memory_order_relaxed);
    return (e << 2 | (p & 3)) + 1; /* never 0 */
}

/* Agent thread: the answer to a reuse_only request. */
static void on_reuse(void *arg, int status, Heapd__Envelope *rep)
{
    heapd_client *c = arg;
    struct reserve *r = &c->reserve;
    uint32_t extra[RESERVE_MAX];
    size_t nextra = 0, got = 0;
    uint32_t limit = (uint32_t)(c->size >> c->seg_shift);

    hd_mutex_lock(&r->mu);
    r->reusing = false;
    if (status == 0 && rep &&
        rep->body_case == HEAPD__ENVELOPE__BODY_SEGMENT_GRANT) {
        const Heapd__SegmentGrant *g = rep->segment_grant;
        for (size_t i = 0; i < g->n_segments; i++) {
            uint32_t s = g->segments[i];
            uint32_t f = i < g->n_formatted ? g->formatted[i] : 0;
            if (s == 0 || s >= limit)
                continue; /* never from a sane daemon; not ours to use */
            if (f != 0 && file_locked(r, s, f)) {
                got += f - 1 == r->reusing_cls;
            } else if (nextra < RESERVE_MAX) {
                extra[nextra++] = s; /* blank: a daemon that ignored
                                        reuse_only */
            }
        }
        if (got == 0)
            r->reuse_dry[r->reusing_cls] = cycle_stamp(c);
        r->reuse_hit[r->reusing_cls] = got > 0;
    } else {
        /* refused or failed: not asked again this phase */
        r->reuse_dry[r->reusing_cls] = cycle_stamp(c);
    }
    atomic_fetch_add(&r->refills, 1);
    unlock_reserve(r);
    futex_wake_all(&r->refills);
    return_segments(c, extra, nextra);
}

/* With reserve.mu held: ask for partly free segments of CLS in the
 * background, unless a request is out or the heap had none this phase. */
static void reuse_async_locked(heapd_client *c, unsigned cls)
{
    ASSERT_LOCK_HELD(&c->reserve.mu);
    struct reserve *r = &c->reserve;
    Heapd__SegmentRequest sr = HEAPD__SEGMENT_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT;
    uint32_t stamp = cycle_stamp(c), klass = cls;
    unsigned room = r->max > r->n + r->nreuse ? r->max - r->n - r->nreuse : 0;
    if (r->reusing || r->reuse_dry[cls] == stamp || room == 0)
        return;
    sr.kind = HEAPD__SEGMENT_KIND__SEGMENT_SMALL;
    sr.count = r->batch < room ? r->batch : room;
    sr.n_classes = 1;
    sr.classes = &klass;
    sr.reuse_only = true;
    req.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST;
    req.segment_request = &sr;
    if (agent_call_async(&c->agent, &req, on_reuse, c) == 0) {
        r->reusing = true;
        r->reusing_cls = cls;
    }
}

/* With reserve.mu held: wait, in a blocking region, until the refill
 * out is in, or (EMPTY_ONLY) until the ready reserve holds a segment. */
static void wait_refill_locked(heapd_mutator *m, bool empty_only)
{
    ASSERT_LOCK_HELD(&m->c->reserve.mu);
    struct reserve *r = &m->c->reserve;
    unlock_reserve(r);
    heapd_blocking_enter(m);
    hd_mutex_lock(&r->mu);
    while (r->refilling && (!empty_only || r->n == 0)) {
        uint32_t gen = atomic_load(&r->refills);
        unlock_reserve(r);
        /* Note [Spinning through a pause] (not while the heap marks);
         * the word is this client's own, and a request the connection's
         * end leaves unanswered is failed by the agent (on_refill,
         * on_reuse), which bumps it: no wait outlives the connection
         * (Note [A dead daemon] in client/mutator.c) */
        futex_spin_wait(&r->refills, gen, barrier_on(m) ? 0 : MUTATOR_SPIN_NS,
                        0);
        hd_mutex_lock(&r->mu);
    }
    unlock_reserve(r);
    heapd_blocking_leave(m);
    hd_mutex_lock(&r->mu);
}

/* With reserve.mu held: does the reserve hold a partly free segment of
 * class CLS? */
static bool has_reusable_locked(const struct reserve *r, unsigned cls)
{
    ASSERT_LOCK_HELD(&r->mu);
    for (unsigned k = 0; k < r->nreuse; k++)
        if (r->reuse[k].cls == cls)
            return true;
    return false;
}

/* A test hook of debug builds: HEAPD_REUSE_WAIT_US in the environment
 * makes a mutator wait for every reuse_only answer of a class not known to
 * be dry, not only while the class's last answer had some, for at most
 * that long instead of REUSE_WAIT_NS.  Without it, how many blank
 * segments a refill takes before the first answer comes is the machine's
 * load (tests/test_memory.c: 83, 94 and 97 segments for 64 under load,
 * bounded at 81), which is not what that test is about.  0: no hook;
 * release builds (NDEBUG) have none. */
static uint64_t reuse_hook_ns(void)
{
#ifndef NDEBUG
    const char *e = getenv("HEAPD_REUSE_WAIT_US");
    if (e && *e)
        return strtoull(e, NULL, 10) * 1000u;
#endif
    return 0;
}

/* With reserve.mu held: wait, in a blocking region, for the reuse_only
 * answer that is out, at most REUSE_WAIT_NS (Note [Reuse before growth];
 * reuse_hook_ns). */
static void wait_reuse_locked(heapd_mutator *m)
{
    ASSERT_LOCK_HELD(&m->c->reserve.mu);
    struct reserve *r = &m->c->reserve;
    const uint64_t hook = reuse_hook_ns();
    const uint64_t bound = hook ? hook : REUSE_WAIT_NS;
    uint64_t t0 = monotonic_ns();
    unlock_reserve(r);
    heapd_blocking_enter(m);
    hd_mutex_lock(&r->mu);
    while (r->reusing) {
        uint64_t waited = monotonic_ns() - t0;
        if (waited >= bound)
            break;
        uint32_t gen = atomic_load(&r->refills);
        unlock_reserve(r);
        uint64_t left = bound - waited;
        /* Note [Spinning through a pause]: spin a little, then sleep, so
         * that the agent and heapd get the core the answer needs */
        futex_spin_wait(&r->refills, gen,
                        left < MUTATOR_SPIN_NS ? left : MUTATOR_SPIN_NS, left);
        hd_mutex_lock(&r->mu);
    }
    unlock_reserve(r);
    heapd_blocking_leave(m);
    hd_mutex_lock(&r->mu);
}

/* With reserve.mu held: a partly free segment of class CLS, or false. */
static bool take_reusable_locked(struct reserve *r, unsigned cls,
                                 uint32_t *out)
{
    ASSERT_LOCK_HELD(&r->mu);
    for (unsigned k = 0; k < r->nreuse; k++) {
        if (r->reuse[k].cls != cls)
            continue;
        *out = r->reuse[k].seg;
        r->reuse[k] = r->reuse[--r->nreuse];
        return true;
    }
    return false;
}

bool reserve_ready(heapd_client *c, unsigned cls)
{
    struct reserve *r = &c->reserve;
    hd_mutex_lock(&r->mu);
    bool ready = r->n > 0 || has_reusable_locked(r, cls);
    unlock_reserve(r);
    return ready;
}

/* A segment of class CLS for M: a partly free one of that class, else a
 * blank one from the reserve, else from the daemon.  When the reserve is
 * empty but a refill is already on its way, waiting for it (in a blocking
 * region) is shorter than a round trip of our own. */
int reserve_take(heapd_mutator *m, unsigned cls, uint32_t *out,
                 bool *formatted)
{
    heapd_client *c = m->c;
    struct reserve *r = &c->reserve;
    uint32_t got[RESERVE_BATCH];
    int n;

    /* orphaned: Note [Remark requests], Note [A dead daemon] */
    if (mutator_orphaned(m))
        return mutator_orphan_error(m);
    hd_mutex_lock(&r->mu);
    if (formatted) {
        /* the next refills ask for partly free segments of this class
         * too */
        r->classes[cls >> 6] |= 1ull << (cls & 63);
        /* Note [Reuse before growth]: partly free first, asked for
         * ahead, and waited for a little while the heap may have some */
        *formatted = take_reusable_locked(r, cls, out);
        if (!*formatted && r->reuse_dry[cls] != cycle_stamp(c)) {
            reuse_async_locked(c, cls);
            /* waited for only while the class's last answer had some */
            if (r->reusing && r->reusing_cls == cls &&
                (r->reuse_hit[cls] || reuse_hook_ns())) {
                wait_reuse_locked(m);
                *formatted = take_reusable_locked(r, cls, out);
            }
        }
        if (*formatted) {
            if (!has_reusable_locked(r, cls))
                reuse_async_locked(c, cls); /* the next one, ahead */
            unlock_reserve(r);
            return 0;
        }
    }
    if (r->n == 0) {
        r->starved = true; /* the batch grows with the answer (on_refill) */
        if (r->refilling)
            wait_refill_locked(m, true);
    }
    if (take_locked(r, out)) {
        if (r->n + r->nreuse < r->low)
            refill_async_locked(c);
        unlock_reserve(r);
        return 0;
    }
    unlock_reserve(r);

    /* partly free segments of CLS first: under a memory limit they may
     * be all the heap can give (Note [Memory limit] in
     * daemon/gc/collector.c) */
    uint32_t fmt[RESERVE_BATCH];
    n = mutator_request_segments(m, HEAPD__SEGMENT_KIND__SEGMENT_SMALL,
                                 r->batch, 0, got, RESERVE_BATCH, NULL,
                                 formatted ? cls : LAYOUT_NCLASSES, fmt);
    if (n == -ENOMEM) {
        /* refused: the answer to the partly free segments asked for
         * ahead comes first on the connection, and may have taken every
         * one heapd had for this class -- they are the reserve's now */
        hd_mutex_lock(&r->mu);
        bool reused = formatted && take_reusable_locked(r, cls, out);
        bool got_one = reused || take_locked(r, out);
        if (got_one && formatted)
            *formatted = reused;
        unlock_reserve(r);
        if (got_one)
            return 0;
    }
    if (n < 0)
        return n;
    /* the mutator's: one of its class, or else a blank one */
    int use = -1;
    for (int k = 0; k < n && use < 0; k++)
        if (formatted && fmt[k] == 1u + cls)
            use = k;
    for (int k = 0; k < n && use < 0; k++)
        if (fmt[k] == 0)
            use = k;
    uint32_t back[RESERVE_BATCH];
    size_t nback = 0;
    hd_mutex_lock(&r->mu);
    for (int k = 0; k < n; k++) {
        if (k != use && !file_locked(r, got[k], fmt[k]))
            back[nback++] = got[k];
    }
    unlock_reserve(r);
    return_segments(c, back, nback);
    if (use < 0) /* only partly free ones of other classes */
        return client_set_error(HEAPD_EPROTO, "heapd granted segments of "
                                "other size classes than the one asked "
                                "for; report it with heapd's log");
    *out = got[use];
    if (formatted)
        *formatted = fmt[use] != 0;
    return 0;
}
