/* The multi-producer multi-consumer queue shared by processes
 * (heapd_collections.h).
 *
 * Note [Shared queue]
 * ~~~~~~~~~~~~~~~~~~~
 * A queue is a linked list of nodes (refs: next, value; a state word)
 * after the lock-free queue of Michael and Scott ("Simple, Fast, and
 * Practical Non-Blocking and Blocking Concurrent Queue Algorithms"),
 * which a garbage collector makes simple, with a node's claim made by its
 * state word instead of by the head:
 *   - a push links a new node, READY, after the last (compare-and-swap
 *     of its NULL next), then swings the tail to it.  The tail may lag
 *     the last node: whoever sees it lag moves it on before anything
 *     else, so a pusher killed between its link and its swing leaves a
 *     queue that works (Note [Collections survive a kill] in
 *     client/collections/map.c);
 *   - a pop takes the first READY node with one compare-and-swap of its
 *     state, to DONE (or to a lease, Note [Leased delivery]), and only
 *     then reads and clears its value.  One CAS both delivers the value
 *     and says to whom: a process killed before it took nothing, one
 *     killed after it took the value.  A state never becomes READY again;
 *   - the cursor is a node such that no node up to it is READY: a pop
 *     walks from it and stores the node it took there (a plain store: a
 *     cursor moved back by a racing store is still such a node);
 *   - the head is a node such that every node up to it is DONE: whoever
 *     makes the node after it DONE moves it on, so the list holds only
 *     what is waiting or leased and the rest is garbage;
 *   - a node is never reused while anyone holds it: C locals are roots,
 *     and nothing is freed; that is what the paper's counted pointers are
 *     for.  A DONE node's value is cleared, so the queue does not keep it
 *     alive.
 * Measured (release, bench/queue_bench, 3 runs each) against the pop
 * that swung the head to take a value: 38 ns a pop against 22 in one
 * process, the state's compare-and-swap being one more atomic operation;
 * two consumer processes draining 10^6 items 2.8-3.2 M a second against
 * 4.1-4.2 M (both swap the same node's state, then the head); one
 * producer and two consumers taking as it pushes 1.2-1.7 M against
 * 0.8-1.3 M, the runs' spread.  The price of a pop that can say to whom
 * it delivered.
 *
 * Note [Closing a queue]
 * ~~~~~~~~~~~~~~~~~~~~~~
 * heapd_queue_close links a node in state CLOSED, with no value, after
 * the last, as a push links one.  It is the queue's last node for good: a
 * push that finds it at the end (as the tail, or after it) links nothing
 * and fails with -ESHUTDOWN, and a pop that reaches it takes nothing.
 * So the values pushed before the close are exactly those linked before
 * the marker, and consumers drain every one of them first: none is lost
 * to a close, and none is pushed after it.  A pop that reaches the marker
 * says ESHUTDOWN once every node before it is DONE, and EAGAIN while a
 * lease may still give one back (Note [Leased delivery]).  A flag in the
 * queue object could not say so: a push that read it clear may link its
 * node after the consumers have seen the queue closed and empty.  The
 * close is one compare-and-swap, as a push's link; a closer killed before
 * it closed nothing, one killed after it left the tail lagging, which the
 * next operation moves on.  Closing wakes every waiter (Note [Waiting for
 * a value]).
 *
 * Note [Leased delivery]
 * ~~~~~~~~~~~~~~~~~~~~~~
 * heapd_queue_pop_lease takes a READY node as a pop does, but its
 * compare-and-swap writes a lease token instead of DONE: the id of the
 * caller's client (Note [Live clients] in proto/layout.h) and a grant
 * number, (id << 16 | grant), never 0.  The node stays where it is, value
 * and all; heapd_queue_ack swaps the token for DONE.  The lease word
 * after it holds (grant << 48 | deadline), the deadline in ms of
 * CLOCK_MONOTONIC (one clock for every process of the machine), all ones
 * for none; the grantee writes it right after its swap, so a lease word
 * whose grant is not the token's belongs to a grant under way and is not
 * read as expired.  Grants are numbered by the queue, not by each
 * process, so two consumers' grants of a node differ unless 65,536
 * grants of the queue came between a walker's two reads.  A lease may be taken back, by a swap from its token
 * to the taker's own token (or DONE, for a plain pop), when its client is
 * missing from the live clients (heapd saw it die: a kill, a crash, an
 * eviction) or its deadline has passed.  So every delivery of a value is
 * one swap of its node's state from READY or from a token that can no
 * longer be acked: a value is delivered again only if its consumer died
 * or its lease ran out, once per time, and an ack of a lease taken back
 * fails (-ESTALE).
 *   A taken-back lease is delivered before any READY node, in the order
 * of the first pushes: a pop first walks from the head (every node before
 * the first READY one is leased or DONE) when something may have come
 * back, that is when live_gen differs from the queue's seen_gen (a client
 * left since the last such walk) or the soonest deadline (next_due) has
 * passed; a walk that reaches the first READY node taking nothing records
 * both, and looks again within a ms if a grant with a deadline came
 * meanwhile (due_grants moved: its deadline may have been replaced).  A
 * grantee that finds itself no longer listed after its swap (evicted in
 * between) unsettles seen_gen, so the next pop walks and takes its lease
 * back.  A client that leaves bumps live_gen and wakes its sleepers, and
 * a waiting pop sleeps on the queue's word and live_gen at once, so a
 * waiter takes back a dead consumer's value the moment heapd sees it die,
 * with no visibility timeout.  A pop with no lease out walks nothing.
 */
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "coll.h"
#include "futex.h"
#include "layout.h"

enum { Q_HEAD, Q_TAIL, Q_CURSOR, Q_NREFS };
enum { N_NEXT, N_VALUE, N_NREFS };

/* the queue's head: proto/collections.h (Note [Collections seen by the
 * daemon]) */
_Static_assert(Q_NREFS == COLL_QUEUE_NREFS,
               "the queue's shape is proto/collections.h's");

struct node_meta {
    uint32_t tag;
    uint32_t seq;               /* the previous node's + 1: push order */
    _Atomic uint64_t state;     /* Note [Shared queue], [Leased delivery] */
    _Atomic uint64_t lease;     /* grant << 48 | deadline (ms) */
};

/* A node's states; any larger value is a lease token (id << 16 | grant,
 * Note [Leased delivery]). */
enum {
    ST_READY = 0,
    ST_DONE = 1,
    ST_CLOSED = 2, /* Note [Closing a queue] */
};
#define GRANT_BITS 16
#define GRANT_MASK ((1ull << GRANT_BITS) - 1)
#define DUE_BITS 48
#define DUE_NONE ((1ull << DUE_BITS) - 1)
#define LEASE_ID_MAX (UINT64_MAX >> GRANT_BITS)

static inline struct coll_queue_head *queue_meta(void *q)
{
    return COLL_META(struct coll_queue_head, q, Q_NREFS);
}

static inline struct node_meta *node_meta(void *n)
{
    return COLL_META(struct node_meta, n, N_NREFS);
}

static inline uint64_t node_state(void *n)
{
    return atomic_load(&node_meta(n)->state);
}

bool heapd_is_queue(const void *obj)
{
    struct coll_info ci;
    return obj && coll_kind_of(heapd_nrefs(obj), heapd_nbytes(obj),
                               heapd_bytes((void *)obj),
                               &ci) == COLL_KIND_QUEUE;
}

static void *new_node(heapd_mutator *m, uint64_t state)
{
    void *n = heapd_alloc_shared(m, N_NREFS, sizeof(struct node_meta));
    if (n) {
        node_meta(n)->tag = COLL_TAG_NODE;
        atomic_store_explicit(&node_meta(n)->state, state,
                              memory_order_relaxed);
    }
    return n;
}

void *heapd_queue_new(heapd_mutator *m)
{
    void *q = heapd_alloc_shared(m, Q_NREFS, sizeof(struct coll_queue_head));
    if (!q)
        return NULL;
    queue_meta(q)->tag = COLL_TAG_QUEUE;
    queue_meta(q)->seen_gen = atomic_load(&mutator_control(m)->live_gen);
    queue_meta(q)->next_due = UINT64_MAX;
    size_t root = heapd_root_push(m, q);
    if (root == (size_t)-1)
        return NULL;
    void *out = NULL;
    void *d = new_node(m, ST_DONE); /* the first head: taken already */
    if (d) {
        q = heapd_root_get(m, root);
        heapd_write(m, q, &((void **)q)[Q_HEAD], d);
        heapd_write(m, q, &((void **)q)[Q_TAIL], d);
        out = q;
    }
    int e = errno;
    heapd_root_pop(m, 1);
    errno = e;
    return out;
}

/* Link NODE after the last node of Q, then swing the tail to it: 0, or
 * -ESHUTDOWN if the last node is the closed marker (Note [Closing a
 * queue]).  STOP: the stop point after the link.  No safepoint. */
static int link_node(heapd_mutator *m, void **q, void *node, const char *stop)
{
    for (;;) {
        void **tail = coll_load(&q[Q_TAIL]);
        void *next = coll_load(&tail[N_NEXT]);
        if (tail != coll_load(&q[Q_TAIL]))
            continue;
        if (next) { /* the tail lags: move it on */
            heapd_cas(m, q, &q[Q_TAIL], tail, next);
            continue;
        }
        if (node_state(tail) == ST_CLOSED)
            return -ESHUTDOWN;
        node_meta(node)->seq = node_meta(tail)->seq + 1; /* not yet seen */
        if (heapd_cas(m, tail, &tail[N_NEXT], NULL, node)) {
            coll_stop_in(stop);
            heapd_cas(m, q, &q[Q_TAIL], tail, node);
            return 0;
        }
    }
}

/* Tell the waiters of Q that something changed (Note [Waiting for a
 * value]). */
static void wake_waiters(void *q)
{
    struct coll_queue_head *qm = queue_meta(q);
    atomic_fetch_add(&qm->seq, 1);
    if (atomic_load(&qm->waiters))
        futex_wake_all(&qm->seq);
}

int heapd_queue_push(heapd_mutator *m, void *queue, void *value)
{
    if (!heapd_is_queue(queue) || !value)
        return client_set_error(-EINVAL, "heapd_queue_push: %s",
                                value ? "QUEUE is not a queue made by "
                                        "heapd_queue_new"
                                      : "VALUE is NULL");
    /* both at once: Note [Pushing roots without a safepoint] in
     * client/mutator.c */
    void *refs[2] = {queue, value};
    size_t root = mutator_roots_push(m, refs, 2);
    if (root == (size_t)-1)
        return -errno;
    int rc = 0;
    void *node = new_node(m, ST_READY);
    if (!node) {
        rc = -errno;
        goto out;
    }
    void **q = heapd_root_get(m, root);
    /* a young value is published here, before the node is linked */
    heapd_write(m, node, &((void **)node)[N_VALUE],
                heapd_root_get(m, root + 1));
    rc = link_node(m, q, node, "queue.push.linked");
    if (rc) {
        client_set_error(rc, "heapd_queue_push: the queue is closed "
                         "(heapd_queue_close): nothing more can be pushed");
        goto out;
    }
    atomic_fetch_add(&queue_meta(q)->pushed, 1);
    wake_waiters(q);
out:
    heapd_root_pop(m, 2);
    return rc;
}

int heapd_queue_close(heapd_mutator *m, void *queue)
{
    if (!heapd_is_queue(queue))
        return client_set_error(-EINVAL, "heapd_queue_close: QUEUE is not "
                                "a queue made by heapd_queue_new");
    size_t root = heapd_root_push(m, queue);
    if (root == (size_t)-1)
        return -errno;
    int rc = 0;
    void *node = new_node(m, ST_CLOSED);
    if (!node) {
        rc = -errno;
        goto out;
    }
    void **q = heapd_root_get(m, root);
    /* Note [Closing a queue]: closed already, 1 */
    rc = link_node(m, q, node, "queue.close.linked") ? 1 : 0;
    wake_waiters(q);
out:
    heapd_root_pop(m, 1);
    return rc;
}

/* ---- taking a value (Note [Shared queue], Note [Leased delivery]) ---- */

/* What a pop makes of the node it takes: DONE (TOKEN 0), or a lease of
 * TOKEN for LEASE_MS from the take (0: no deadline); DUE: its deadline
 * (ms, DUE_NONE: none), set by take(). */
struct take {
    uint64_t token;
    unsigned lease_ms;
    uint64_t due;
};

/* Move Q's head over the DONE nodes after it (Note [Shared queue]). */
static void advance_head(heapd_mutator *m, void **q)
{
    for (;;) {
        void **h = coll_load(&q[Q_HEAD]);
        void **n = coll_load(&h[N_NEXT]);
        if (!n || node_state(n) != ST_DONE)
            return;
        heapd_cas(m, q, &q[Q_HEAD], h, n);
    }
}

/* Swap node N's state from S to what T makes of it: true if this call
 * took N. */
static bool claim(void **n, uint64_t s, const struct take *t)
{
    struct node_meta *nm = node_meta(n);
    if (!atomic_compare_exchange_strong(&nm->state, &s,
                                        t->token ? t->token : ST_DONE))
        return false;
    if (t->token) /* Note [Leased delivery]: right after the swap */
        atomic_store(&nm->lease, (t->token & GRANT_MASK) << DUE_BITS |
                                     t->due);
    return true;
}

/* May lease token S of node N be taken back at NOW (ms)?  If not, lower
 * *SOONEST to when it may be by its deadline. */
static bool lease_over(const struct layout_control *ctl, void **n,
                       uint64_t s, uint64_t now, uint64_t *soonest)
{
    if (!layout_client_alive(ctl, s >> GRANT_BITS))
        return true; /* heapd saw its client leave */
    uint64_t l = atomic_load(&node_meta(n)->lease);
    uint64_t due = l & DUE_NONE;
    if (l >> DUE_BITS != (s & GRANT_MASK))
        due = now + 1; /* a grant under way: look again soon */
    else if (due == DUE_NONE)
        return false;
    else if (due <= now)
        return true;
    if (due < *soonest)
        *soonest = due;
    return false;
}

static void lower_due(struct coll_queue_head *qm, uint64_t due)
{
    uint64_t was = atomic_load(&qm->next_due);
    while (due < was &&
           !atomic_compare_exchange_weak(&qm->next_due, &was, due))
        ;
}

/* The walk of Note [Leased delivery]: a lease of Q taken back as T says,
 * or NULL (none to take back, or nothing may have come back). */
static void **take_back(void **q, const struct layout_control *ctl,
                        const struct take *t)
{
    struct coll_queue_head *qm = queue_meta(q);
    uint32_t gen = atomic_load(&ctl->live_gen);
    uint32_t seen = atomic_load(&qm->seen_gen);
    uint64_t due = atomic_load(&qm->next_due);
    if (gen == seen && due == UINT64_MAX)
        return NULL;
    uint64_t now = monotonic_ns() / 1000000u;
    if (gen == seen && now < due)
        return NULL;
    uint64_t soonest = UINT64_MAX;
    uint32_t grants = atomic_load(&qm->due_grants);
    for (void **n = coll_load(&q[Q_HEAD]); (n = coll_load(&n[N_NEXT]));) {
        uint64_t s = node_state(n);
        if (s == ST_READY || s == ST_CLOSED)
            break;
        if (s != ST_DONE && lease_over(ctl, n, s, now, &soonest) &&
            claim(n, s, t))
            return n;
    }
    atomic_compare_exchange_strong(&qm->seen_gen, &seen, gen);
    if (due <= now)
        atomic_compare_exchange_strong(&qm->next_due, &due, soonest);
    else
        lower_due(qm, soonest);
    /* a grant with a deadline during the walk, past where it stopped,
     * may have lowered next_due before the swap above replaced it: look
     * again soon */
    if (atomic_load(&qm->due_grants) != grants)
        lower_due(qm, now + 1);
    return NULL;
}

/* Is node A before node B (Note [Shared queue])?  Their sequence
 * numbers wrap; a queue holds fewer than 2^31 nodes. */
static bool node_before(void *a, void *b)
{
    return (int32_t)(node_meta(a)->seq - node_meta(b)->seq) < 0;
}

/* The first READY node of Q, taken as T says, walking from the cursor
 * (from the head if there is none, or it is behind the head); or NULL
 * with *CLOSED set if the walk reached the closed marker. */
static void **take_ready(heapd_mutator *m, void **q, const struct take *t,
                         bool *closed)
{
    void **head = coll_load(&q[Q_HEAD]), **cursor = coll_load(&q[Q_CURSOR]);
    void **start = cursor, **c, **n;
    if (!cursor || node_before(cursor, head)) {
        start = head;
        if (cursor) /* it would keep the nodes after it alive */
            heapd_cas(m, q, &q[Q_CURSOR], cursor, NULL);
    }
    c = start;
    *closed = false;
    while ((n = coll_load(&c[N_NEXT]))) {
        uint64_t s = node_state(n);
        if (s == ST_READY) {
            if (!claim(n, s, t))
                continue; /* another pop took it: look at it again */
            if (t->token || c != head) /* n may stay in the list */
                heapd_write(m, q, &q[Q_CURSOR], n);
            return n;
        }
        if (s == ST_CLOSED) {
            *closed = true;
            break;
        }
        c = n;
    }
    if (c != start && c != head) /* nothing up to C is READY */
        heapd_write(m, q, &q[Q_CURSOR], c);
    return NULL;
}

/* Is every node before Q's closed marker DONE (Note [Closing a
 * queue])? */
static bool drained(heapd_mutator *m, void **q)
{
    advance_head(m, q);
    void **n = coll_load(&((void **)coll_load(&q[Q_HEAD]))[N_NEXT]);
    return n && node_state(n) == ST_CLOSED;
}

/* Is M's client in the live clients (Note [Live clients])?  The index
 * it was found at is kept, so a lease's pop reads one word. */
static bool self_listed(heapd_mutator *m, uint64_t id)
{
    static _Atomic unsigned at;
    const struct layout_control *ctl = mutator_control(m);
    unsigned k = atomic_load_explicit(&at, memory_order_relaxed);
    if (atomic_load(&ctl->live[k]) == id)
        return true;
    for (k = 0; k < LAYOUT_LIVE_CLIENTS; k++)
        if (atomic_load(&ctl->live[k]) == id) {
            atomic_store_explicit(&at, k, memory_order_relaxed);
            return true;
        }
    return false;
}

/* A pop of QUEUE, taken as T says (WHO for messages): the value, or NULL
 * with errno EAGAIN, ESHUTDOWN or EINVAL.  *NODE: the node taken.  No
 * safepoint. */
static void *take(heapd_mutator *m, void *queue, struct take *t,
                  const char *who, void ***node)
{
    if (!heapd_is_queue(queue)) {
        client_set_error(-EINVAL, "%s: QUEUE is not a queue made by "
                         "heapd_queue_new", who);
        errno = EINVAL;
        return NULL;
    }
    void **q = queue;
    struct coll_queue_head *qm = queue_meta(q);
    bool closed;
    uint64_t was = ST_READY;
    t->due = t->token && t->lease_ms
                 ? monotonic_ns() / 1000000u + t->lease_ms
                 : DUE_NONE;
    if (t->token) { /* numbered per queue: Note [Leased delivery] */
        uint64_t grant;
        do /* 0 would look like a lease word never written */
            grant = atomic_fetch_add(&qm->grants, 1) & GRANT_MASK;
        while (grant == 0);
        t->token = (t->token & ~GRANT_MASK) | grant;
    }
    void **n = take_back(q, mutator_control(m), t);
    if (n) {
        was = ~(uint64_t)0; /* a lease */
    } else if (!(n = take_ready(m, q, t, &closed))) {
        errno = closed && drained(m, q) ? ESHUTDOWN : EAGAIN;
        return NULL;
    }
    if (was == ST_READY)
        atomic_fetch_add(&qm->popped, 1);
    else
        atomic_fetch_add(&qm->released, 1);
    if (t->token) {
        atomic_fetch_add(&qm->leased, 1);
        if (t->due != DUE_NONE) { /* counted first: take_back's check */
            atomic_fetch_add(&qm->due_grants, 1);
            lower_due(qm, t->due);
        }
        /* evicted between the check of lease_take and the swap: the
         * next pop walks, and takes the lease back */
        if (!self_listed(m, t->token >> GRANT_BITS))
            atomic_store(&qm->seen_gen,
                         atomic_load(&mutator_control(m)->live_gen) ^
                             0x80000000u);
    }
    coll_stop_in(t->token ? "queue.pop_lease.taken" : "queue.pop.taken");
    void *value = coll_load(&n[N_VALUE]);
    if (!t->token) {
        /* DONE: it must not keep VALUE alive */
        heapd_write(m, n, &n[N_VALUE], NULL);
        advance_head(m, q);
    }
    *node = n;
    return value;
}

void *heapd_queue_pop(heapd_mutator *m, void *queue)
{
    struct take t = {0, 0, DUE_NONE};
    void **n;
    return take(m, queue, &t, "heapd_queue_pop", &n);
}

/* The take of a lease for M for LEASE_MS (0: none), or -EUSERS if M's
 * client cannot hold one. */
static int lease_take(heapd_mutator *m, unsigned lease_ms, struct take *t,
                      const char *who)
{
    uint64_t id = mutator_client_id(m);
    if (id == 0 || id > LEASE_ID_MAX || !self_listed(m, id))
        return client_set_error(-EUSERS, "%s: heapd does not list this "
                                "client among the heap's live clients "
                                "(it lists at most %u): a lease it held "
                                "would be taken back at once; use "
                                "heapd_queue_pop, or fewer clients", who,
                                LAYOUT_LIVE_CLIENTS);
    t->token = id << GRANT_BITS; /* take() numbers the grant */
    t->lease_ms = lease_ms;
    return 0;
}

static bool lease_given(heapd_lease *lease, const char *who)
{
    if (lease)
        return true;
    client_set_error(-EINVAL, "%s: LEASE is NULL", who);
    errno = EINVAL;
    return false;
}

static void *take_wait(heapd_mutator *m, void *queue, struct take *t,
                       unsigned timeout_ms, const char *who, void ***node);

/* heapd_queue_pop_lease, and with WAIT heapd_queue_pop_lease_wait
 * (waiting up to TIMEOUT_MS); WHO for messages. */
static void *pop_lease(heapd_mutator *m, void *queue, unsigned lease_ms,
                       bool wait, unsigned timeout_ms, heapd_lease *lease,
                       const char *who)
{
    struct take t;
    void **n;
    int rc;
    if (!lease_given(lease, who))
        return NULL;
    if ((rc = lease_take(m, lease_ms, &t, who)) < 0) {
        errno = -rc;
        return NULL;
    }
    void *v = wait ? take_wait(m, queue, &t, timeout_ms, who, &n)
                   : take(m, queue, &t, who, &n);
    if (v) {
        lease->node_ = n;
        lease->token_ = t.token;
    }
    return v;
}

void *heapd_queue_pop_lease(heapd_mutator *m, void *queue, unsigned lease_ms,
                            heapd_lease *lease)
{
    return pop_lease(m, queue, lease_ms, false, 0, lease,
                     "heapd_queue_pop_lease");
}

int heapd_queue_ack(heapd_mutator *m, void *queue, heapd_lease *lease)
{
    if (!heapd_is_queue(queue) || !lease || !lease->node_ ||
        lease->token_ <= GRANT_MASK || heapd_nrefs(lease->node_) != N_NREFS ||
        heapd_nbytes(lease->node_) != sizeof(struct node_meta) ||
        node_meta(lease->node_)->tag != COLL_TAG_NODE)
        return client_set_error(-EINVAL, "heapd_queue_ack: %s",
                                !heapd_is_queue(queue)
                                    ? "QUEUE is not a queue made by "
                                      "heapd_queue_new"
                                    : "LEASE is not one heapd_queue_pop_lease "
                                      "gave (or it was acked already)");
    void **q = queue, **n = lease->node_;
    struct coll_queue_head *qm = queue_meta(q);
    uint64_t s = lease->token_;
    lease->node_ = NULL;
    if (!atomic_compare_exchange_strong(&node_meta(n)->state, &s, ST_DONE))
        return client_set_error(-ESTALE, "heapd_queue_ack: the lease had "
                                "ended: its deadline passed, or heapd "
                                "counted this client gone, and the value "
                                "was given to another consumer");
    atomic_fetch_add(&qm->released, 1);
    coll_stop_in("queue.ack.done");
    heapd_write(m, n, &n[N_VALUE], NULL);
    advance_head(m, q);
    if (atomic_load(&qm->waiters)) /* a drained closed queue: waiters */
        wake_waiters(q);
    return 0;
}

/* heapd_queue_pop_wait and heapd_queue_pop_lease_wait: a take as T says,
 * waiting up to TIMEOUT_MS (0: no limit). */
static void *take_wait(heapd_mutator *m, void *queue, struct take *t,
                       unsigned timeout_ms, const char *who, void ***node)
{
    const struct layout_control *ctl = mutator_control(m);
    uint64_t deadline = timeout_ms ? monotonic_ns() + timeout_ms * 1000000ull
                                   : 0;
    for (;;) {
        void *v = take(m, queue, t, who, node);
        if (v || errno != EAGAIN)
            return v;
        if (mutator_closed(m)) /* Note [A dead daemon] */
            return NULL;
        uint64_t now = monotonic_ns();
        if (deadline && now >= deadline) {
            errno = ETIMEDOUT;
            return NULL;
        }
        /* Note [Waiting for a value] */
        struct coll_queue_head *qm = queue_meta(queue);
        uint32_t seq = atomic_load(&qm->seq);
        uint32_t gen = atomic_load(&ctl->live_gen);
        atomic_fetch_add(&qm->waiters, 1);
        if ((v = take(m, queue, t, who, node)) || errno != EAGAIN) {
            int e = errno;
            atomic_fetch_sub(&qm->waiters, 1);
            errno = e;
            return v;
        }
        /* a lease's deadline ends the sleep too (Note [Leased
         * delivery]) */
        uint64_t sleep = deadline ? deadline - now : 0;
        uint64_t due = atomic_load(&qm->next_due);
        if (due != UINT64_MAX) {
            uint64_t at = due * 1000000u + 1000000u;
            uint64_t d = at > now ? at - now : 1;
            if (!sleep || d < sleep)
                sleep = d;
        }
        size_t root = heapd_root_push(m, queue);
        if (root == (size_t)-1) {
            int e = errno;
            atomic_fetch_sub(&qm->waiters, 1);
            errno = e;
            return NULL;
        }
        queue = heapd_root_get(m, root);
        qm = queue_meta(queue);
        coll_stop_in("queue.pop_wait.waiting");
        heapd_blocking_enter(m);
        futex_wait2(&qm->seq, seq, (_Atomic uint32_t *)&ctl->live_gen, gen,
                    sleep);
        heapd_blocking_leave(m);
        atomic_fetch_sub(&qm->waiters, 1);
        queue = heapd_root_get(m, root);
        /* the pop's safepoint comes before the slot goes: QUEUE stays
         * valid until the next one */
        heapd_root_pop(m, 1);
        if (mutator_closed(m))
            return NULL;
    }
}

void *heapd_queue_pop_wait(heapd_mutator *m, void *queue, unsigned timeout_ms)
{
    struct take t = {0, 0, DUE_NONE};
    void **n;
    return take_wait(m, queue, &t, timeout_ms, "heapd_queue_pop_wait", &n);
}

void *heapd_queue_pop_lease_wait(heapd_mutator *m, void *queue,
                                 unsigned lease_ms, unsigned timeout_ms,
                                 heapd_lease *lease)
{
    return pop_lease(m, queue, lease_ms, true, timeout_ms, lease,
                     "heapd_queue_pop_lease_wait");
}

/* QUEUE's report (coll_kind_of), zeros if it is no queue. */
static struct coll_info queue_info(const void *queue)
{
    struct coll_info ci = {0};
    if (queue && coll_kind_of(heapd_nrefs(queue), heapd_nbytes(queue),
                              heapd_bytes((void *)queue),
                              &ci) != COLL_KIND_QUEUE)
        ci = (struct coll_info){0};
    return ci;
}

size_t heapd_queue_length(const void *queue)
{
    return (size_t)queue_info(queue).size;
}

size_t heapd_queue_leases(const void *queue)
{
    return (size_t)queue_info(queue).leases;
}
