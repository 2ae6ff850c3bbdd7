/* Remark: rescanning the segments whose mark-stack entries were dropped.
 *
 * Note [Remark]
 * ~~~~~~~~~~~~~
 * (DESIGN.md §5; seed remarking-parallel-domains.txt, OCaml's remark
 * stacks, global remark stack, adoption lock and num_domains_to_remark.)
 * A marker whose stack overflows drops entries grouped by segment and
 * flags those segments (Note [Bounded mark stacks] in mark.c).  Remarking
 * a segment means scanning every block whose mark is the epoch and marking
 * its fields.  Who may do that depends on who may allocate in the segment:
 * an owner sets a block's mark before it zeroes the block and writes its
 * header (Note [Allocation fast path]), so while a segment is OWNED only
 * its owning client can tell which marked blocks are whole.
 *
 *   - A flagged segment goes on the heap's global remark stack
 *     (remark_flag).  Every state below but NONE counts in
 *     remark_outstanding, and marking ends only when it is 0 (the final
 *     sync checks it with the world stopped; remark_wait keeps the
 *     collector from stopping the world again while clients still work).
 *   - A worker that runs out of marking pops the global stack and takes
 *     the adoption lock (heap->adoption).  A segment that is not OWNED --
 *     FILLED (returned, or orphaned by a client that went away) or a large
 *     run, whose header is written before its mark -- it rescans under the
 *     lock: no grant adopts a FILLED segment while the lock is held
 *     (grant_reusable in segment.c takes it), and only a grant could give
 *     it an owner.  An OWNED one it forwards: to the outbox, which the
 *     loop thread sends to the owner in a RemarkRequest (SENT).
 *   - The owner's client rescans it at a mutator's safepoint, logging the
 *     fields into that mutator's URS ring, or gives it back if no running
 *     mutator of its holds it (Note [Remark requests] in client/remark.c),
 *     and answers RemarkDone: RESCANNED or RELEASED.  The loop thread first
 *     consumes every ring of the client (the entries were written before
 *     the message was sent), then: a RESCANNED segment the client still
 *     owns is done; anything else -- returned meanwhile, or released --
 *     goes back to the global stack, where it is rescanned by the daemon
 *     or forwarded to whoever owns it now (the PR's forwarding).
 *   - A segment flagged again while it is being rescanned or while its
 *     owner has it (RESCANNING, SENT) is marked AGAIN and goes back to the
 *     global stack when that finishes: the rescan in progress may already
 *     have passed the newly dropped block.
 *   - A client that goes away (its socket closes, for any reason) or says
 *     Goodbye has, under heap->lock and in one step, its segments orphaned
 *     (FILLED) and everything SENT to it moved to the global stack
 *     (remark_client_gone from session.c): from then on no request can
 *     reach it, and none it had is lost -- the PR's "cease servicing
 *     exactly when all its pools are orphaned".  A client whose
 *     connection is closing but not closed yet still owns its segments;
 *     what is routed to it stays SENT, unsent, until its close moves it.
 * The flags live in the daemon's segment table (struct seg), not in the
 * segment header, where any client could write them.  A client that never
 * answers holds up marking exactly as a mutator that never reaches a
 * safepoint holds up a stop; one that dies is cleaned up by its socket's
 * close.  models/remark.pml checks this protocol.
 */
#include "remark.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "daemon.h"
#include "heap.h"
#include "log.h"
#include "mark.h"

#define REMARK_WAIT_MS 50 /* the collector re-checks its condition */

struct remark_sender {
    uv_async_t async;
    struct daemon *d;
    struct heap *h;
};

static struct seg *seg_at(struct mark_job *j, uint32_t i)
{
    return &j->h->segs.segs[i];
}

static bool valid_seg(const struct heap *h, uint32_t i)
{
    return i >= h->segs.first && i < h->segs.count;
}

/* With j->mu held: the global stack and the collector have news. */
static void wake_locked(struct mark_job *j)
{
    if (j->waiting > 0)
        pthread_cond_broadcast(&j->cv);
    pthread_cond_broadcast(&j->remark_cv);
}

static void push_global_locked(struct mark_job *j, uint32_t i)
{
    struct seg *s = seg_at(j, i);
    s->remark = REMARK_GLOBAL;
    s->remark_next = j->remark_global;
    j->remark_global = i;
}

/* With j->mu held: the remark of I is over. */
static void finish_locked(struct mark_job *j, uint32_t i)
{
    struct seg *s = seg_at(j, i);
    if (s->remark & REMARK_AGAIN) {
        push_global_locked(j, i);
    } else {
        s->remark = REMARK_NONE;
        assert(j->remark_outstanding > 0);
        j->remark_outstanding--;
    }
    wake_locked(j);
}

void remark_flag(struct mark_job *j, const uint32_t *segs, size_t n)
{
    if (n == 0)
        return;
    pthread_mutex_lock(&j->mu);
    for (size_t k = 0; k < n; k++) {
        if (!valid_seg(j->h, segs[k]))
            continue; /* entries are validated references: never */
        struct seg *s = seg_at(j, segs[k]);
        switch (REMARK_STATE(s->remark)) {
        case REMARK_NONE:
            j->remark_outstanding++;
            push_global_locked(j, segs[k]);
            break;
        case REMARK_RESCANNING:
        case REMARK_SENT:
            s->remark |= REMARK_AGAIN;
            break;
        default: /* GLOBAL, OUTBOX: its rescan is still to come */
            break;
        }
    }
    wake_locked(j);
    pthread_mutex_unlock(&j->mu);
}

bool remark_pop_locked(struct mark_job *j, uint32_t *seg)
{
    uint32_t i = j->remark_global;
    if (i == 0)
        return false;
    struct seg *s = seg_at(j, i);
    j->remark_global = s->remark_next;
    s->remark = REMARK_RESCANNING;
    *seg = i;
    return true;
}

bool remark_lock_unowned(struct heap *h, uint32_t seg)
{
    pthread_mutex_lock(&h->adoption);
    if (seg_state(&h->segs, seg) != SEG_OWNED)
        return true;
    pthread_mutex_unlock(&h->adoption);
    return false;
}

void remark_unlock_unowned(struct heap *h)
{
    pthread_mutex_unlock(&h->adoption);
}

void remark_finish(struct mark_job *j, uint32_t seg)
{
    pthread_mutex_lock(&j->mu);
    j->remark_daemon++;
    finish_locked(j, seg);
    pthread_mutex_unlock(&j->mu);
}

void remark_forward(struct mark_job *j, uint32_t seg)
{
    struct remark_sender *rs = j->h->remark_sender;
    pthread_mutex_lock(&j->mu);
    struct seg *s = seg_at(j, seg);
    s->remark = REMARK_OUTBOX; /* a flag meanwhile: its rescan is to come */
    s->remark_next = j->remark_outbox;
    j->remark_outbox = seg;
    pthread_mutex_unlock(&j->mu);
    if (rs)
        uv_async_send(&rs->async);
}

bool remark_none_locked(const struct mark_job *j)
{
    return j->remark_outstanding == 0;
}

bool remark_wait(struct mark_job *j)
{
    bool work;
    pthread_mutex_lock(&j->mu);
    while (j->remark_outstanding > 0 && !j->remark_global && !j->pool) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += REMARK_WAIT_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&j->remark_cv, &j->mu, &ts);
    }
    work = j->remark_global || j->pool;
    pthread_mutex_unlock(&j->mu);
    return work;
}

/* ---- the loop thread ---- */

static struct conn *find_conn(struct daemon *d, const struct heap *h,
                              uint64_t id)
{
    for (struct conn *c = d->conns; c; c = c->next)
        if (c->heap == h && c->id == id)
            return c;
    return NULL;
}

static void send_request(struct conn *c, uint32_t *segs, size_t n)
{
    Heapd__RemarkRequest rr = HEAPD__REMARK_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    rr.n_segments = n;
    rr.segments = segs;
    env.body_case = HEAPD__ENVELOPE__BODY_REMARK_REQUEST;
    env.remark_request = &rr;
    if (conn_send(c, &env) < 0)
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                  "cannot send a remark request; closing");
}

/* Send the outbox: each segment to the client that owns it now, or back
 * to the global stack if nobody does. */
static void route(struct daemon *d, struct heap *h)
{
    uint32_t *batch = NULL;
    size_t n = 0, cap = 0;

    pthread_mutex_lock(&h->lock);
    struct mark_job *j = h->marking;
    if (!j) {
        pthread_mutex_unlock(&h->lock);
        return;
    }
    pthread_mutex_lock(&j->mu);
    for (uint32_t i = j->remark_outbox, next; i != 0; i = next) {
        struct seg *s = seg_at(j, i);
        next = s->remark_next;
        struct conn *c = seg_state(&h->segs, i) == SEG_OWNED
                             ? find_conn(d, h, s->owner)
                             : NULL;
        if (!c) {
            push_global_locked(j, i); /* returned or orphaned meanwhile */
            continue;
        }
        s->remark = REMARK_SENT;
        s->remark_to = s->owner;
        if (c->state != CONN_READY)
            continue; /* closing: its close moves it (Note [Remark]) */
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            uint32_t *b = realloc(batch, nc * sizeof *b);
            if (!b) { /* no memory now: the rest waits for another turn */
                s->remark = REMARK_OUTBOX;
                s->remark_next = next;
                j->remark_outbox = i;
                j->remark_sent += n;
                pthread_mutex_unlock(&j->mu);
                pthread_mutex_unlock(&h->lock);
                uv_async_send(&((struct remark_sender *)h->remark_sender)
                                   ->async);
                goto send;
            }
            batch = b;
            cap = nc;
        }
        batch[n++] = i;
    }
    j->remark_outbox = 0;
    j->remark_sent += n;
    wake_locked(j);
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_unlock(&h->lock);
send:
    /* one request per owner: the batch grouped by remark_to */
    for (size_t a = 0; a < n;) {
        uint64_t to = h->segs.segs[batch[a]].remark_to;
        size_t m = 0;
        for (size_t b = a; b < n; b++) {
            if (h->segs.segs[batch[b]].remark_to == to) {
                uint32_t x = batch[b];
                batch[b] = batch[a + m];
                batch[a + m++] = x;
            }
        }
        struct conn *c = find_conn(d, h, to);
        if (c)
            send_request(c, batch + a, m);
        a += m;
    }
    free(batch);
}

static void on_route(uv_async_t *a)
{
    struct remark_sender *rs = a->data;
    route(rs->d, rs->h);
}

int remark_start(struct heap *h, struct daemon *d)
{
    struct remark_sender *rs = calloc(1, sizeof *rs);
    int rc;
    if (!rs)
        return -ENOMEM;
    rs->d = d;
    rs->h = h;
    if ((rc = uv_async_init(&d->loop, &rs->async, on_route)) < 0) {
        free(rs);
        return rc;
    }
    rs->async.data = rs;
    uv_unref((uv_handle_t *)&rs->async); /* connections keep the loop up */
    h->remark_sender = rs;
    return 0;
}

void remark_drain(struct heap *h)
{
    struct remark_sender *rs = h->remark_sender;
    if (rs)
        route(rs->d, h);
}

static void free_sender(uv_handle_t *hd)
{
    free(hd->data);
}

void remark_stop(struct heap *h)
{
    struct remark_sender *rs = h->remark_sender;
    if (!rs)
        return;
    h->remark_sender = NULL;
    uv_close((uv_handle_t *)&rs->async, free_sender);
}

void remark_client_gone(struct heap *h, uint64_t id)
{
    struct mark_job *j = h->marking;
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    for (uint32_t i = h->segs.first; i < h->segs.high; i++) {
        struct seg *s = &h->segs.segs[i];
        if (REMARK_STATE(s->remark) == REMARK_SENT && s->remark_to == id)
            push_global_locked(j, i); /* AGAIN or not: rescanned anew */
    }
    wake_locked(j);
    pthread_mutex_unlock(&j->mu);
}

/* With heap->lock and j->mu held: is I a segment C was asked to rescan? */
static bool sent_to(struct mark_job *j, uint32_t i, const struct conn *c)
{
    if (!valid_seg(j->h, i))
        return false;
    const struct seg *s = seg_at(j, i);
    return REMARK_STATE(s->remark) == REMARK_SENT && s->remark_to == c->id;
}

static bool owned_by(const struct heap *h, uint32_t i, const struct conn *c)
{
    const struct seg *s = &h->segs.segs[i];
    return seg_state(&h->segs, i) == SEG_OWNED && s->owner == c->id;
}

void remark_done(struct conn *c, const Heapd__RemarkDone *r)
{
    struct heap *h = c->heap;
    size_t bad = 0, unowned = 0;

    if (!h) {
        c->d->frames_rejected++;
        return;
    }
    pthread_mutex_lock(&h->lock);
    struct mark_job *j = h->marking;
    if (!j) {
        bad = r->n_rescanned + r->n_released;
        goto out;
    }
    /* the fields were logged before the message was sent */
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++)
        if (c->slots[i / 64] >> (i % 64) & 1)
            mark_urs(h, j, i);
    pthread_mutex_lock(&j->mu);
    for (size_t k = 0; k < r->n_rescanned; k++) {
        uint32_t i = r->rescanned[k];
        if (!sent_to(j, i, c))
            bad++;
        else if (owned_by(h, i, c))
            finish_locked(j, i);
        else
            push_global_locked(j, i); /* returned meanwhile */
    }
    for (size_t k = 0; k < r->n_released; k++) {
        uint32_t i = r->released[k];
        if (!sent_to(j, i, c)) {
            bad++;
            continue;
        }
        if (owned_by(h, i, c)) {
            /* it says it holds it no more, yet never returned it: take
             * it back, so that the daemon can rescan it */
            unowned++;
            seg_return(h, c->id, &c->held, i);
        }
        push_global_locked(j, i);
    }
    wake_locked(j);
    pthread_mutex_unlock(&j->mu);
out:
    pthread_mutex_unlock(&h->lock);
    if (bad || unowned) {
        c->d->frames_rejected += bad + unowned;
        log_info("client %llu (%s): remark answer names %zu segment(s) it "
                 "was not asked to rescan and %zu it released without "
                 "returning them; ignored / taken back",
                 (unsigned long long)c->id, c->name, bad, unowned);
    }
}

#ifndef NDEBUG
bool remark_check_clear(const struct heap *h)
{
    for (uint32_t i = h->segs.first; i < h->segs.high; i++)
        if (h->segs.segs[i].remark != REMARK_NONE)
            return false;
    return true;
}
#endif
