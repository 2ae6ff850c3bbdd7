/* Remark: rescanning the segments whose mark-stack entries were dropped.
 *
 * Note [Remark]
 * ~~~~~~~~~~~~~
 * (After OCaml's "Fixing remarking to be safe with parallel domains": its
 * remark stacks, global remark stack, adoption lock and
 * num_domains_to_remark.)  A marker whose stack overflows drops entries
 * grouped by segment and flags those segments (Note [Bounded mark stacks]
 * in mark.c).  Remarking a segment means scanning every block whose mark is the epoch and marking
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
 *     loop thread sends to the owner in a RemarkRequest (SENT; Note
 *     [Collector handoff] in handoff.c).
 *   - The owner's client rescans it at a mutator's safepoint, logging the
 *     fields into that mutator's URS ring, or gives it back if no running
 *     mutator of its holds it (Note [Remark requests] in client/remark.c),
 *     and answers RemarkDone: RESCANNED or RELEASED.  The loop thread first
 *     consumes every ring of the client (the entries were written before
 *     the message was sent), then: a RESCANNED segment the client still
 *     owns is done; anything else -- returned meanwhile, or released --
 *     goes back to the global stack, where it is rescanned by the daemon
 *     or forwarded to whoever owns it now.
 *   - A segment flagged again while it is being rescanned or while its
 *     owner has it (RESCANNING, SENT) is marked AGAIN and goes back to the
 *     global stack when that finishes: the rescan in progress may already
 *     have passed the newly dropped block.
 *   - A client that goes away (its socket closes, for any reason) or says
 *     Goodbye has, under heap->lock and in one step, its segments orphaned
 *     (FILLED) and everything SENT to it moved to the global stack
 *     (remark_client_gone, from client_leaves in session.c): from then on
 *     no request can reach it, and none it had is lost: it ceases being
 *     asked exactly when all its segments are orphaned.  A client whose
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
#include <stdlib.h>
#include <time.h>

#include "heap.h"
#include "log.h"
#include "mark.h"

#define REMARK_WAIT_MS 50 /* the collector re-checks its condition */

static struct seg *seg_at(struct mark_job *j, uint32_t i)
{
    return &j->h->segs.segs[i];
}

static bool valid_seg(const struct heap *h, uint32_t i)
{
    return i >= h->segs.first && i < h->segs.count;
}

/* Note [Checking remark states]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Debug builds check, where j->mu is released after a remark state
 * changed, what Note [Remark] states: remark_outstanding is the number of
 * segments whose state is not NONE; the global stack holds exactly the
 * GLOBAL segments and the outbox exactly the OUTBOX ones; AGAIN is set
 * only on a RESCANNING or SENT segment; a SENT one names the client it
 * went to.  The walk is O(segments in use) and j->mu is taken for every
 * segment flagged or rescanned, so it is sampled like the segment table's
 * check (seg_check_due, Note [Checking the segment table] in
 * segtab_check.c).
 */
bool remark_check(const struct mark_job *j)
{
    ASSERT_LOCK_HELD(&j->mu);
    const struct segtab *t = &j->h->segs;
    uint64_t outstanding = 0, n_global = 0, n_outbox = 0;
    bool ok = true;

#define REMARK_BAD(...)                                                     \
    do {                                                                    \
        log_error("remark states: " __VA_ARGS__);                           \
        ok = false;                                                         \
    } while (0)
    uint32_t high = __atomic_load_n(&t->high, __ATOMIC_ACQUIRE);
    for (uint32_t i = t->first; i < high; i++) {
        const struct seg *s = &t->segs[i];
        uint8_t st = REMARK_STATE(s->remark);
        if (st == REMARK_NONE) {
            if (s->remark != REMARK_NONE)
                REMARK_BAD("segment %u is AGAIN but not flagged", i);
            continue;
        }
        outstanding++;
        n_global += st == REMARK_GLOBAL;
        n_outbox += st == REMARK_OUTBOX;
        if (st > REMARK_SENT)
            REMARK_BAD("segment %u has remark state %u", i, st);
        if ((s->remark & REMARK_AGAIN) && st != REMARK_RESCANNING &&
            st != REMARK_SENT)
            REMARK_BAD("segment %u is AGAIN in state %u", i, st);
        if (st == REMARK_SENT && s->remark_to == 0)
            REMARK_BAD("segment %u is SENT to nobody", i);
    }
    if (outstanding != j->remark_outstanding)
        REMARK_BAD("remark_outstanding %llu, but %llu segments are flagged",
                   (unsigned long long)j->remark_outstanding,
                   (unsigned long long)outstanding);
    const uint32_t lists[2] = {j->remark_global, j->remark_outbox};
    const uint8_t want[2] = {REMARK_GLOBAL, REMARK_OUTBOX};
    const uint64_t counted[2] = {n_global, n_outbox};
    for (int l = 0; l < 2; l++) {
        uint64_t len = 0;
        for (uint32_t i = lists[l]; i != 0 && ok; i = t->segs[i].remark_next) {
            if (i < t->first || i >= high ||
                t->segs[i].remark != want[l] || ++len > counted[l])
                REMARK_BAD("the %s list reaches segment %u (remark %u) "
                           "after %llu entries", l ? "outbox" : "global",
                           i, i < t->count ? t->segs[i].remark : 0,
                           (unsigned long long)len);
        }
        if (ok && len != counted[l])
            REMARK_BAD("the %s list has %llu entries, but %llu segments "
                       "are in its state", l ? "outbox" : "global",
                       (unsigned long long)len,
                       (unsigned long long)counted[l]);
    }
#undef REMARK_BAD
    return ok;
}

/* With j->mu held, about to release it: Note [Checking remark states]. */
static void check_locked(struct mark_job *j)
{
    ASSERT_LOCK_HELD(&j->mu);
#ifndef NDEBUG
    if (seg_check_due(&j->releases))
        assert(remark_check(j));
#else
    (void)j;
#endif
}

/* With j->mu held: the global stack and the collector have news. */
static void wake_locked(struct mark_job *j)
{
    ASSERT_LOCK_HELD(&j->mu);
    if (j->waiting > 0)
        pthread_cond_broadcast(&j->cv);
    pthread_cond_broadcast(&j->remark_cv);
}

/* With j->mu held: I goes on the global stack. */
static void push_global_locked(struct mark_job *j, uint32_t i)
{
    ASSERT_LOCK_HELD(&j->mu);
    struct seg *s = seg_at(j, i);
    s->remark = REMARK_GLOBAL;
    s->remark_next = j->remark_global;
    j->remark_global = i;
}

/* With j->mu held: the remark of I is over. */
static void finish_locked(struct mark_job *j, uint32_t i)
{
    ASSERT_LOCK_HELD(&j->mu);
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
    hd_mutex_lock(&j->mu);
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
    check_locked(j);
    hd_mutex_unlock(&j->mu);
}

bool remark_pop_locked(struct mark_job *j, uint32_t *seg)
{
    ASSERT_LOCK_HELD(&j->mu);
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
    hd_mutex_lock(&h->adoption);
    if (seg_state(&h->segs, seg) != SEG_OWNED)
        return true;
    hd_mutex_unlock(&h->adoption);
    return false;
}

void remark_unlock_unowned(struct heap *h)
{
    hd_mutex_unlock(&h->adoption);
}

void remark_finish(struct mark_job *j, uint32_t seg)
{
    hd_mutex_lock(&j->mu);
    j->remark_daemon++;
    finish_locked(j, seg);
    check_locked(j);
    hd_mutex_unlock(&j->mu);
}

void remark_forward(struct mark_job *j, uint32_t seg)
{
    hd_mutex_lock(&j->mu);
    struct seg *s = seg_at(j, seg);
    s->remark = REMARK_OUTBOX; /* a flag meanwhile: its rescan is to come */
    s->remark_next = j->remark_outbox;
    j->remark_outbox = seg;
    check_locked(j);
    hd_mutex_unlock(&j->mu);
    notify_send(&j->outbox_notify);
}

bool remark_none_locked(const struct mark_job *j)
{
    ASSERT_LOCK_HELD(&j->mu);
    return j->remark_outstanding == 0;
}

bool remark_wait(struct mark_job *j)
{
    bool work;
    hd_mutex_lock(&j->mu);
    while (j->remark_outstanding > 0 && !j->remark_global && !j->pool) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += REMARK_WAIT_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        hd_cond_timedwait(&j->remark_cv, &j->mu, &ts);
    }
    work = j->remark_global || j->pool;
    hd_mutex_unlock(&j->mu);
    return work;
}

/* ---- the outbox, taken by the loop thread ---- */

static bool asks_grow(struct remark_asks *a)
{
    size_t nc = a->cap ? 2 * a->cap : 64;
    uint32_t *seg = realloc(a->seg, nc * sizeof *seg);
    if (!seg)
        return false;
    a->seg = seg;
    uint64_t *client = realloc(a->client, nc * sizeof *client);
    if (!client)
        return false;
    a->client = client;
    a->cap = nc;
    return true;
}

void remark_asks_free(struct remark_asks *a)
{
    free(a->seg);
    free(a->client);
    *a = (struct remark_asks){0};
}

bool remark_outbox_take(struct heap *h, remark_reach_fn reach, void *arg,
                        struct remark_asks *out)
{
    ASSERT_LOCK_HELD(&h->lock);
    bool all = true;
    struct mark_job *j = h->marking;
    if (!j)
        return true;
    hd_mutex_lock(&j->mu);
    for (uint32_t i = j->remark_outbox, next; i != 0; i = next) {
        struct seg *s = seg_at(j, i);
        next = s->remark_next;
        enum remark_reach r = seg_state(&h->segs, i) == SEG_OWNED
                                  ? reach(arg, s->owner)
                                  : REMARK_PEER_GONE;
        if (r == REMARK_PEER_GONE) {
            push_global_locked(j, i); /* returned or orphaned meanwhile */
            continue;
        }
        s->remark = REMARK_SENT;
        s->remark_to = s->owner;
        if (r != REMARK_PEER_READY)
            continue; /* closing: its close moves it (Note [Remark]) */
        if (out->n == out->cap && !asks_grow(out)) {
            /* no memory now: the rest waits for another turn */
            s->remark = REMARK_OUTBOX;
            s->remark_next = next;
            j->remark_outbox = i;
            j->remark_sent += out->n;
            all = false;
            goto out;
        }
        out->seg[out->n] = i;
        out->client[out->n++] = s->owner;
    }
    j->remark_outbox = 0;
    j->remark_sent += out->n;
    wake_locked(j);
out:
    check_locked(j);
    hd_mutex_unlock(&j->mu);
    return all;
}

void remark_client_gone(struct heap *h, uint64_t id)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct mark_job *j = h->marking;
    if (!j)
        return;
    hd_mutex_lock(&j->mu);
    for (uint32_t i = h->segs.first; i < h->segs.high; i++) {
        struct seg *s = &h->segs.segs[i];
        if (REMARK_STATE(s->remark) == REMARK_SENT && s->remark_to == id)
            push_global_locked(j, i); /* AGAIN or not: rescanned anew */
    }
    wake_locked(j);
    check_locked(j);
    hd_mutex_unlock(&j->mu);
}

/* With heap->lock and j->mu held: is I a segment CLIENT was asked to
 * rescan? */
static bool sent_to(struct mark_job *j, uint32_t i, uint64_t client)
{
    ASSERT_LOCK_HELD(&j->h->lock);
    ASSERT_LOCK_HELD(&j->mu);
    if (!valid_seg(j->h, i))
        return false;
    const struct seg *s = seg_at(j, i);
    return REMARK_STATE(s->remark) == REMARK_SENT && s->remark_to == client;
}

static bool owned_by(const struct heap *h, uint32_t i, uint64_t client)
{
    const struct seg *s = &h->segs.segs[i];
    return seg_state(&h->segs, i) == SEG_OWNED && s->owner == client;
}

void remark_answered(struct heap *h, uint64_t client, uint32_t *held,
                     const uint32_t *rescanned, size_t nr,
                     const uint32_t *released, size_t nl, size_t *bad,
                     size_t *taken_back)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct mark_job *j = h->marking;
    *bad = 0;
    *taken_back = 0;
    if (!j) {
        *bad = nr + nl;
        return;
    }
    hd_mutex_lock(&j->mu);
    for (size_t k = 0; k < nr; k++) {
        uint32_t i = rescanned[k];
        if (!sent_to(j, i, client))
            (*bad)++;
        else if (owned_by(h, i, client))
            finish_locked(j, i);
        else
            push_global_locked(j, i); /* returned meanwhile */
    }
    for (size_t k = 0; k < nl; k++) {
        uint32_t i = released[k];
        if (!sent_to(j, i, client)) {
            (*bad)++;
            continue;
        }
        if (owned_by(h, i, client)) {
            /* it says it holds it no more, yet never returned it: take
             * it back, so that the daemon can rescan it */
            (*taken_back)++;
            seg_return(h, client, held, i);
        }
        push_global_locked(j, i);
    }
    wake_locked(j);
    check_locked(j);
    hd_mutex_unlock(&j->mu);
}

#ifndef NDEBUG
bool remark_check_clear(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    for (uint32_t i = h->segs.first; i < h->segs.high; i++)
        if (h->segs.segs[i].remark != REMARK_NONE)
            return false;
    return true;
}
#endif
