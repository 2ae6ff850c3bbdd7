/* The multi-producer multi-consumer queue shared by processes
 * (heapd_collections.h).
 *
 * Note [Shared queue]
 * ~~~~~~~~~~~~~~~~~~~
 * A queue is a linked list of nodes (refs: next, value) with a head and a
 * tail reference in the queue object: the lock-free queue of Michael and
 * Scott ("Simple, Fast, and Practical Non-Blocking and Blocking Concurrent
 * Queue Algorithms"), which a garbage collector makes simple:
 *   - the head node is a dummy; a value is in the node after it.  A push
 *     links a new node after the last (compare-and-swap of its NULL
 *     next), then swings the tail to it; a pop swings the head to the
 *     node after it and takes that node's value;
 *   - the tail may lag the last node by one: whoever sees it lag moves
 *     it on before doing anything else.  So a pusher killed between its
 *     link and its swing leaves a queue that works (Note [Collections
 *     survive a kill] in client/collections/map.c);
 *   - a node is never reused while anyone holds it: a process that loaded
 *     the head holds it in a C local until its compare-and-swap, with no
 *     safepoint in between, and the collector frees nothing a mutator
 *     holds before its next safepoint.  That is what the paper's counted
 *     pointers are for; here there is no ABA and nothing to free;
 *   - a popped value is cleared from the node it leaves (now the dummy),
 *     so the queue does not keep it alive.
 *
 * Note [Closing a queue]
 * ~~~~~~~~~~~~~~~~~~~~~~
 * heapd_queue_close links a node flagged NODE_CLOSED, with no value,
 * after the last, as a push links one.  It is the queue's last node for
 * good: a push that finds it at the end (as the tail, or after it) links
 * nothing and fails with -ESHUTDOWN, and a pop that finds it after the
 * head takes nothing, leaves it there, and says ESHUTDOWN.  So the values
 * pushed before the close are exactly those linked before the marker, and
 * consumers drain every one of them first: none is lost to a close, and
 * none is pushed after it.  A flag in the queue object could not say so:
 * a push that read it clear may link its node after the consumers have
 * seen the queue closed and empty.  The close is one compare-and-swap, as
 * a push's link; a closer killed before it closed nothing, one killed
 * after it left the tail lagging, which the next operation moves on.
 * Closing wakes every waiter (Note [Waiting for a value]).
 *
 * Note [Waiting for a value]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~
 * heapd_queue_pop_wait sleeps on a futex word in the queue object (the
 * heap is a MAP_SHARED mapping, so a futex there is shared by processes).
 * A waiter reads the word, counts itself in `waiters`, tries the pop again
 * (a push between the first try and the count is seen there), then
 * sleeps while the word is unchanged.  A push adds one to the word after
 * linking its node, and wakes every sleeper if `waiters` is not zero.
 * The sleep is a blocking region (heapd_blocking_enter): a collection
 * never waits for a consumer that waits for a value.  The queue is on the
 * waiter's root stack while it sleeps, so the word stays where it is.  A
 * waiter killed while counted leaves `waiters` one too high: pushes then
 * make a futex wake call that wakes nobody, nothing worse.
 */
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "coll.h"
#include "futex.h"

enum { Q_HEAD, Q_TAIL, Q_NREFS };
enum { N_NEXT, N_VALUE, N_NREFS };

/* the queue's head: proto/collections.h (Note [Collections seen by the
 * daemon]) */
_Static_assert(Q_NREFS == COLL_QUEUE_NREFS,
               "the queue's shape is proto/collections.h's");

struct node_meta {
    uint32_t tag;
    uint32_t flags;             /* NODE_CLOSED: Note [Closing a queue] */
};
#define NODE_CLOSED 1u

static inline struct coll_queue_head *queue_meta(void *q)
{
    return COLL_META(struct coll_queue_head, q, Q_NREFS);
}

bool heapd_is_queue(const void *obj)
{
    uint64_t len;
    return obj && coll_kind_of(heapd_nrefs(obj), heapd_nbytes(obj),
                               heapd_bytes((void *)obj),
                               &len) == COLL_KIND_QUEUE;
}

static void *new_node(heapd_mutator *m, uint32_t flags)
{
    void *n = heapd_alloc_shared(m, N_NREFS, sizeof(struct node_meta));
    if (n) {
        COLL_META(struct node_meta, n, N_NREFS)->tag = COLL_TAG_NODE;
        COLL_META(struct node_meta, n, N_NREFS)->flags = flags;
    }
    return n;
}

/* Is node N the closed queue's marker (Note [Closing a queue])? */
static bool node_closed(void *n)
{
    return COLL_META(struct node_meta, n, N_NREFS)->flags & NODE_CLOSED;
}

void *heapd_queue_new(heapd_mutator *m)
{
    void *q = heapd_alloc_shared(m, Q_NREFS, sizeof(struct coll_queue_head));
    if (!q)
        return NULL;
    queue_meta(q)->tag = COLL_TAG_QUEUE;
    size_t root = heapd_root_push(m, q);
    if (root == (size_t)-1)
        return NULL;
    void *out = NULL;
    void *d = new_node(m, 0);
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
        if (node_closed(tail))
            return -ESHUTDOWN;
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
    void *node = new_node(m, 0);
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
    void *node = new_node(m, NODE_CLOSED);
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

void *heapd_queue_pop(heapd_mutator *m, void *queue)
{
    if (!heapd_is_queue(queue)) {
        client_set_error(-EINVAL, "heapd_queue_pop: QUEUE is not a queue "
                         "made by heapd_queue_new");
        errno = EINVAL;
        return NULL;
    }
    void **q = queue;
    for (;;) {
        void **head = coll_load(&q[Q_HEAD]);
        void **tail = coll_load(&q[Q_TAIL]);
        void **next = coll_load(&head[N_NEXT]);
        if (head != coll_load(&q[Q_HEAD]))
            continue;
        if (head == tail) {
            if (!next) {
                errno = EAGAIN;
                return NULL;
            }
            heapd_cas(m, q, &q[Q_TAIL], tail, next); /* it lags */
            continue;
        }
        if (node_closed(next)) { /* Note [Closing a queue]: drained */
            errno = ESHUTDOWN;
            return NULL;
        }
        void *value = coll_load(&next[N_VALUE]);
        if (!heapd_cas(m, q, &q[Q_HEAD], head, next))
            continue;
        coll_stop_in("queue.pop.taken");
        /* NEXT is the dummy now: it must not keep VALUE alive */
        heapd_write(m, next, &next[N_VALUE], NULL);
        atomic_fetch_add(&queue_meta(q)->popped, 1);
        return value;
    }
}

void *heapd_queue_pop_wait(heapd_mutator *m, void *queue, unsigned timeout_ms)
{
    uint64_t deadline = timeout_ms ? monotonic_ns() + timeout_ms * 1000000ull
                                   : 0;
    for (;;) {
        void *v = heapd_queue_pop(m, queue);
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
        atomic_fetch_add(&qm->waiters, 1);
        if ((v = heapd_queue_pop(m, queue)) || errno != EAGAIN) {
            int e = errno;
            atomic_fetch_sub(&qm->waiters, 1);
            errno = e;
            return v;
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
        futex_wait(&qm->seq, seq, deadline ? deadline - now : 0);
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

size_t heapd_queue_length(const void *queue)
{
    uint64_t len;
    return queue && coll_kind_of(heapd_nrefs(queue), heapd_nbytes(queue),
                                 heapd_bytes((void *)queue),
                                 &len) == COLL_KIND_QUEUE
               ? (size_t)len
               : 0;
}
