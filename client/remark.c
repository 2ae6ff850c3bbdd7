/* libheapd's side of remarking: rescanning, or giving back, the segments
 * the daemon asks this client about.
 *
 * Note [Remark requests]
 * ~~~~~~~~~~~~~~~~~~~~~~
 * (The owner's side of Note [Remark] in daemon/gc/remark.c, after OCaml's
 * "Fixing remarking to be safe with parallel domains".)  The daemon sends
 * RemarkRequest for small segments this client owns after its mark stack dropped objects in
 * them.  Only a thread that knows no block of the segment is half
 * allocated may rescan it, and only a mutator has a URS ring to log the
 * fields into.  The agent thread queues the request (`queued`, a bitmap)
 * and sets every mutator's remark_pending; then, and at every safepoint
 * of a mutator that finds its flag set (remark_service), each queued
 * segment is settled by the first of:
 *   - it is not the client's any more (`owned` clear: returned, its
 *     SegmentReturn already queued ahead): answered RELEASED;
 *   - it is the current segment of the mutator at its safepoint: that
 *     mutator is between allocations, so every marked block is whole; it
 *     does to every block whose mark is the epoch what the marker does to
 *     an object it scans -- logs its fields, into its own URS ring
 *     (waiting for room like any barrier), and clears a stale dirty tag
 *     (Note [Dirty tags]) -- and answers RESCANNED;
 *   - it waits in the reserve, or in the queue of full segments: nobody
 *     allocates in it; it is returned (a SegmentReturn, then RELEASED),
 *     and the daemon rescans it itself;
 *   - (agent only) it is the current segment of a mutator in a blocking
 *     region: the agent holds that mutator's `hold`, which
 *     heapd_blocking_leave takes before the mutator runs again, takes the
 *     segment from it and returns it as above.  The agent cannot log into
 *     a ring: it is the thread that would tell the daemon the ring is
 *     full, so it gives the segment up instead;
 *   - otherwise a running mutator holds it, perhaps between the reserve
 *     and its current slot: it stays queued, and the mutator that installs
 *     a segment looks again at its next safepoint (remark_recheck).
 * A segment is the client's (`owned`) from the moment the agent reads its
 * grant, before it reads any later frame (remark_granted): a request can
 * only follow the grant it is about, so "not owned" always means
 * returned, never "granted, but the grant not yet handed to its caller".
 * Every path that returns a segment (return_segments) makes it not
 * owned and queues its SegmentReturn as one step under `mu`
 * (remark_send_return), so that a thread that finds it not owned under
 * `mu` sends its answer after the return, and a grant of the same
 * segment, which the daemon may make as soon as it reads the return
 * (Note [An empty segment comes back free] in daemon/gc/segment.c), is
 * read after both: its bit stays set.  (Cleared after the send, the bit
 * of a segment granted again in between would be lost, and a request
 * for it answered RELEASED while a mutator allocates in it: the daemon
 * would take it back and give it to another.)  That path also answers a
 * request queued for it.  So every request is answered once, by a thread
 * that may, and a client that returns everything -- heapd_disconnect --
 * has answered everything before it says Goodbye.  A client that dies
 * answers nothing, and the daemon moves its requests to the global stack.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "barrier.h"
#include "client.h"
#include "heapd.h"
#include "layout.h"
#include "mutator.h"
#include "remark.h"
#include "reserve.h"

#define DONE_BATCH 256 /* segments answered in one RemarkDone, at most */

int remark_client_init(heapd_client *c)
{
    struct client_remark *r = &c->remark;
    size_t words;
    hd_mutex_init(&r->mu);
    r->nsegs = (uint32_t)(c->size >> c->seg_shift);
    words = (r->nsegs + 63) / 64;
    r->queued = calloc(words, sizeof *r->queued);
    r->owned = calloc(words, sizeof *r->owned);
    r->lo = r->nsegs;
    r->hi = 0;
    if (!r->queued || !r->owned) {
        remark_client_free(c);
        return -ENOMEM;
    }
    return 0;
}

void remark_client_free(heapd_client *c)
{
    struct client_remark *r = &c->remark;
    free(r->queued);
    free((void *)r->owned);
    r->queued = NULL;
    r->owned = NULL;
}

static bool is_owned(const struct client_remark *r, uint32_t s)
{
    return s < r->nsegs &&
           (atomic_load_explicit(&r->owned[s / 64], memory_order_acquire) >>
                (s % 64) & 1);
}

void remark_owned(heapd_client *c, const uint32_t *segs, size_t n, bool own)
{
    struct client_remark *r = &c->remark;
    if (!r->owned)
        return;
    for (size_t k = 0; k < n; k++) {
        uint32_t s = segs[k];
        if (s >= r->nsegs)
            continue;
        uint64_t bit = 1ull << (s % 64);
        if (own)
            atomic_fetch_or_explicit(&r->owned[s / 64], bit,
                                     memory_order_release);
        else
            atomic_fetch_and_explicit(&r->owned[s / 64], ~bit,
                                      memory_order_release);
    }
}

void remark_send_return(heapd_client *c, const uint32_t *segs, size_t n,
                        Heapd__Envelope *msg)
{
    struct client_remark *r = &c->remark;
    /* mu, then the agent's: the agent calls no hook with its own held */
    hd_mutex_lock(&r->mu);
    remark_owned(c, segs, n, false);
    agent_send(&c->agent, msg);
    hd_mutex_unlock(&r->mu);
}

/* With r->mu held. */
static bool is_queued(const struct client_remark *r, uint32_t s)
{
    ASSERT_LOCK_HELD(&r->mu);
    return s < r->nsegs && (r->queued[s / 64] >> (s % 64) & 1);
}

static void unqueue_locked(struct client_remark *r, uint32_t s)
{
    ASSERT_LOCK_HELD(&r->mu);
    r->queued[s / 64] &= ~(1ull << (s % 64));
    __atomic_store_n(&r->n, r->n - 1, __ATOMIC_RELAXED);
    if (r->n == 0) {
        r->lo = r->nsegs;
        r->hi = 0;
    }
}

/* Answers collected by one pass, sent DONE_BATCH at a time. */
struct answers {
    uint32_t rescanned[DONE_BATCH], released[DONE_BATCH];
    size_t nrescanned, nreleased;
};

static void send_answers(heapd_client *c, struct answers *a)
{
    Heapd__RemarkDone rd = HEAPD__REMARK_DONE__INIT;
    Heapd__Envelope msg = HEAPD__ENVELOPE__INIT;
    if (a->nrescanned + a->nreleased == 0)
        return;
    rd.n_rescanned = a->nrescanned;
    rd.rescanned = a->rescanned;
    rd.n_released = a->nreleased;
    rd.released = a->released;
    msg.body_case = HEAPD__ENVELOPE__BODY_REMARK_DONE;
    msg.remark_done = &rd;
    agent_send(&c->agent, &msg); /* a closed connection answers itself */
    a->nrescanned = a->nreleased = 0;
}

void remark_returned(heapd_client *c, const uint32_t *segs, size_t n)
{
    struct client_remark *r = &c->remark;
    struct answers a;
    if (!r->queued || __atomic_load_n(&r->n, __ATOMIC_RELAXED) == 0)
        return;
    a.nrescanned = a.nreleased = 0;
    hd_mutex_lock(&r->mu);
    for (size_t k = 0; k < n; k++) {
        if (!is_queued(r, segs[k]))
            continue;
        unqueue_locked(r, segs[k]);
        a.released[a.nreleased++] = segs[k];
        if (a.nreleased == DONE_BATCH)
            send_answers(c, &a);
    }
    hd_mutex_unlock(&r->mu);
    send_answers(c, &a);
}

/* Log the fields of every block of M's current segment CUR whose mark is
 * the epoch (M is at a safepoint: every such block is whole). */
static void rescan(heapd_mutator *m, const struct alloc_seg *cur)
{
    uint8_t epoch;
    if (!barrier_on(m))
        return; /* marking is over: nothing can be asked of this cycle */
    epoch = (uint8_t)atomic_load(&m->ctl->epoch);
    for (uint32_t b = 0; b < cur->nblocks; b++) {
        if (__atomic_load_n(&cur->marks[b], __ATOMIC_RELAXED) != epoch)
            continue;
        void **obj = (void **)(cur->blocks + (size_t)b * cur->block_size +
                               LAYOUT_WORD);
        uint64_t *hp = (uint64_t *)obj - 1;
        uint64_t hdr = __atomic_load_n(hp, __ATOMIC_RELAXED);
        size_t nrefs = layout_header_nrefs(hdr);
        /* a run object spans its continuations (Note [Runs]) */
        if (layout_object_size(nrefs, 0) >
            layout_block_span(cur->marks, b, cur->nblocks, cur->cls))
            continue; /* not ours to trust: the daemon validates anyway */
        layout_clear_stale_tag(hp, hdr, epoch); /* as the marker does */
        for (size_t f = 0; f < nrefs; f++)
            barrier_log(m, __atomic_load_n(&obj[f], __ATOMIC_RELAXED));
    }
}

/* Agent: take the queued segments of mutators that are blocked (their
 * `hold` keeps them so) and give them back; a young one's are promoted
 * first (young_surrender), and stay if its handshake is not done yet. */
#define BACK_MAX (2 * LAYOUT_NCLASSES)
static void take_from_blocked(heapd_client *c, struct answers *a)
{
    struct client_remark *r = &c->remark;
    uint32_t back[BACK_MAX];

    hd_mutex_lock(&c->mutators_mu);
    for (heapd_mutator *m = c->mutators; m; m = m->next) {
        size_t nback = 0;
        hd_mutex_lock(&m->hold);
        uint32_t state = LAYOUT_STATUS_STATE(atomic_load(&m->slot->status));
        /* a mutator waiting in a barrier touches no segment either; but a
         * young one may promote into its segments before it blocks
         * again (Note [Promotion in place] in client/minor.c) */
        if (state == LAYOUT_MUT_BLOCKED ||
            (state == LAYOUT_MUT_WAITING && !m->young.on)) {
            hd_mutex_lock(&r->mu);
            for (unsigned k = 0; k < LAYOUT_NCLASSES; k++) {
                uint32_t s = m->cur[k].index;
                if (s && is_queued(r, s) && young_surrender(m, s)) {
                    unqueue_locked(r, s);
                    back[nback++] = s;
                    memset(&m->cur[k], 0, sizeof m->cur[k]);
                }
            }
            /* its spare segments, which hold no young block */
            for (unsigned k = 0; k < LAYOUT_NCLASSES && nback < BACK_MAX;
                 k++) {
                uint32_t n;
                const uint32_t *sp = young_spares(m, k, &n);
                for (uint32_t i = 0; i < n && nback < BACK_MAX;) {
                    uint32_t s = sp[i];
                    if (is_queued(r, s) && young_surrender(m, s)) {
                        unqueue_locked(r, s); /* moved the last one here */
                        back[nback++] = s;
                        n--;
                        continue;
                    }
                    i++;
                }
            }
            /* its other young segments: promoted, then given back too
             * (Note [Young segments] in client/minor.c) */
            for (uint32_t i = 0; m->young.on && i < m->young.nsegs &&
                                 nback < BACK_MAX;) {
                uint32_t s = m->young.segs[i].index;
                if (is_queued(r, s) && young_surrender(m, s)) {
                    unqueue_locked(r, s); /* untracked: look at i again */
                    back[nback++] = s;
                    continue;
                }
                i++;
            }
            hd_mutex_unlock(&r->mu);
        }
        hd_mutex_unlock(&m->hold);
        if (nback == 0)
            continue;
        /* returned first: the daemon reads the return before the answer */
        reserve_give_back(c, back, nback, true);
        for (size_t k = 0; k < nback; k++) {
            a->released[a->nreleased++] = back[k];
            if (a->nreleased == DONE_BATCH)
                send_answers(c, a);
        }
    }
    hd_mutex_unlock(&c->mutators_mu);
}

/* M's current segment S, if it is one. */
static bool find_current(const heapd_mutator *m, uint32_t s,
                         struct alloc_seg *out)
{
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++) {
        if (m->cur[k].index == s) {
            *out = m->cur[k];
            return true;
        }
    }
    return false;
}

/* One pass over the queue; true if it stopped at a full batch. */
static bool service_pass(heapd_client *c, heapd_mutator *m)
{
    struct client_remark *r = &c->remark;
    struct answers a;
    struct alloc_seg mine[LAYOUT_NCLASSES];
    uint32_t back[DONE_BATCH];
    size_t nmine = 0, nback = 0;
    bool flush = false, full = false;

    a.nrescanned = a.nreleased = 0;
    if (!m)
        take_from_blocked(c, &a);
    if (m && !hd_mutex_trylock(&r->mu)) {
        /* the agent is at it; look again at the next safepoint */
        atomic_store(&m->remark_pending, 1);
        return false;
    }
    if (!m)
        hd_mutex_lock(&r->mu);
    for (uint32_t w = r->lo / 64; !full && r->n > 0 && w * 64 < r->hi; w++) {
        uint64_t bits = r->queued[w];
        while (bits && !full) {
            uint32_t s = w * 64 + (uint32_t)__builtin_ctzll(bits);
            bits &= bits - 1;
            int where;
            if (!is_owned(r, s)) {
                /* returned: its SegmentReturn is queued ahead of us */
                unqueue_locked(r, s);
                a.released[a.nreleased++] = s;
            } else if (m && (find_current(m, s, &mine[nmine]) ||
                             young_seg_view(m, s, &mine[nmine]))) {
                unqueue_locked(r, s);
                nmine++;
            } else if ((where = reserve_take_back(c, s)) != 0) {
                unqueue_locked(r, s);
                if (where == 1)
                    back[nback++] = s;
                else
                    flush = true;
                a.released[a.nreleased++] = s;
            }
            full = a.nreleased == DONE_BATCH || nback == DONE_BATCH ||
                   nmine == LAYOUT_NCLASSES;
        }
    }
    hd_mutex_unlock(&r->mu);
    /* the returns go out before the answers that name them */
    if (flush)
        reserve_flush_returns(c);
    if (nback)
        reserve_give_back(c, back, nback, true);
    for (size_t k = 0; k < nmine; k++) {
        rescan(m, &mine[k]);
        a.rescanned[a.nrescanned++] = mine[k].index;
    }
    send_answers(c, &a);
    return full;
}

void remark_service(heapd_client *c, heapd_mutator *m)
{
    if (!c->remark.queued)
        return;
    if (m)
        atomic_store(&m->remark_pending, 0); /* a request after this sets it */
    if (m && agent_is_closed(&c->agent)) {
        /* the daemon has orphaned this client's segments, and may give
         * them to others: allocate in none of them again (remark_closed) */
        memset(m->cur, 0, sizeof m->cur);
        return;
    }
    while (service_pass(c, m))
        ;
}

void remark_recheck(heapd_mutator *m)
{
    if (__atomic_load_n(&m->c->remark.n, __ATOMIC_RELAXED) != 0)
        atomic_store_explicit(&m->remark_pending, 1, memory_order_relaxed);
}

void remark_granted(void *arg, const Heapd__SegmentGrant *g)
{
    if (g->kind == HEAPD__SEGMENT_KIND__SEGMENT_SMALL)
        remark_owned(arg, g->segments, g->n_segments, true);
}

/* The connection is gone, so the daemon has orphaned everything this
 * client held (Note [Client lifecycle] in daemon/session.c): every mutator
 * drops its current segments at its next safepoint, and the reserve
 * gives out nothing (reserve_take), so allocation fails from then on. */
void remark_closed(void *arg)
{
    heapd_client *c = arg;
    hd_mutex_lock(&c->mutators_mu);
    for (heapd_mutator *m = c->mutators; m; m = m->next)
        atomic_store(&m->remark_pending, 1);
    hd_mutex_unlock(&c->mutators_mu);
}

void remark_request(void *arg, const Heapd__RemarkRequest *rq)
{
    heapd_client *c = arg;
    struct client_remark *r = &c->remark;
    if (!r->queued)
        return;
    hd_mutex_lock(&r->mu);
    for (size_t k = 0; k < rq->n_segments; k++) {
        uint32_t s = rq->segments[k];
        if (s < c->first_segment || s >= r->nsegs)
            continue; /* never from a sane daemon: nothing to rescan */
        if (is_queued(r, s))
            continue;
        r->queued[s / 64] |= 1ull << (s % 64);
        __atomic_store_n(&r->n, r->n + 1, __ATOMIC_RELAXED);
        if (s < r->lo)
            r->lo = s;
        if (s + 1 > r->hi)
            r->hi = s + 1;
    }
    hd_mutex_unlock(&r->mu);
    hd_mutex_lock(&c->mutators_mu);
    for (heapd_mutator *m = c->mutators; m; m = m->next)
        atomic_store(&m->remark_pending, 1);
    hd_mutex_unlock(&c->mutators_mu);
    remark_service(c, NULL);
}
