/* The loop thread's end of the collector: cycle completions and the remark
 * outbox.
 *
 * Note [Collector handoff]
 * ~~~~~~~~~~~~~~~~~~~~~~~~
 * The collector's threads (the heap's collector thread and the gc_threads
 * workers: collector.c, mark.c, remark.c, sweep.c, safepoint.c, verify.c,
 * workers.c, segment.c, validate.c) never touch a connection, a protobuf
 * message or libuv; only the loop thread does.  What the collector has to
 * tell a client leaves through three narrow channels, each a plain function
 * pointer (struct notify, notify.h) that this file turns into a
 * uv_async_t:
 *   - a cycle completed: session_cycle_done answers the requests that
 *     waited for it (Note [Pacing] in collector.c);
 *   - a client wrote nonsense into its control memory (Note [Client
 *     control memory] in proto/layout.h): slotmem_fault flags the slot,
 *     and the loop thread disconnects the client;
 *   - the remark outbox (Note [Remark] in remark.c) has segments whose
 *     owners must rescan them: the loop thread takes it under heap->lock
 *     (remark_outbox_take), telling the collector which owners it can
 *     reach (struct remark_reach), and sends each owner one RemarkRequest
 *     naming its segments.  The answer, RemarkDone, comes back here too
 *     (remark_done) and is handed to the collector as segment numbers
 *     (remark_answered).
 * The reason: a struct conn lives only as long as the loop thread lets it
 * -- server.c frees it in a close callback at any turn of the loop -- so
 * a collector thread holding one would race with that free; with the
 * handoff, a connection is looked up on the loop thread at the moment a
 * frame is sent, and a client gone by then is simply not found.  The
 * collector's files include none of daemon.h, heapd.pb-c.h or uv.h
 * (grep '#include' daemon/{collector,mark,remark,sweep,safepoint,verify,
 * workers,segment,validate}.c checks it).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "collector.h"
#include "daemon.h"
#include "log.h"
#include "mark.h"
#include "remark.h"
#include "slotmem.h"

struct handoff {
    struct heap *h;
    struct daemon *d;           /* set by handoff_remark_start */
    uv_async_t cycle;           /* the collector completed cycles */
    collector_done_fn on_done;
    void *done_arg;
    uv_async_t outbox;          /* the remark outbox has segments */
    _Atomic bool outbox_on;     /* outbox initialised, not yet closing */
    uv_async_t fault;           /* a slot's client wrote nonsense */
    bool cycle_on;
    unsigned open;              /* handles not yet closed */
};

static struct handoff *get_handoff(struct heap *h)
{
    if (!h->handoff) {
        h->handoff = calloc(1, sizeof *h->handoff);
        if (h->handoff)
            h->handoff->h = h;
    }
    return h->handoff;
}

static void free_on_close(uv_handle_t *hd)
{
    struct handoff *hf = hd->data;
    if (--hf->open == 0)
        free(hf);
}

/* ---- cycles ---- */

static void notify_cycle(void *arg)
{
    struct handoff *hf = arg;
    uv_async_send(&hf->cycle);
}

static void on_cycle(uv_async_t *a)
{
    struct handoff *hf = a->data;
    hf->on_done(hf->h, hf->done_arg);
}

static void notify_outbox(void *arg)
{
    struct handoff *hf = arg;
    /* before handoff_remark_start nothing is sent: no client is connected yet */
    if (atomic_load_explicit(&hf->outbox_on, memory_order_acquire))
        uv_async_send(&hf->outbox);
}

int handoff_collector_start(struct heap *h, struct workers *w,
                            uv_loop_t *loop, collector_done_fn on_done,
                            void *arg)
{
    struct handoff *hf = get_handoff(h);
    int rc;
    if (!hf)
        return -ENOMEM;
    hf->on_done = on_done;
    hf->done_arg = arg;
    if ((rc = uv_async_init(loop, &hf->cycle, on_cycle)) < 0)
        return rc;
    hf->cycle.data = hf;
    hf->cycle_on = true;
    hf->open++;
    uv_unref((uv_handle_t *)&hf->cycle); /* connections keep the loop up */
    rc = collector_launch(h, w,
                          (struct notify){.fn = notify_cycle, .arg = hf},
                          (struct notify){.fn = notify_outbox, .arg = hf});
    if (rc < 0) { /* handoff_stop frees the rest */
        hf->cycle_on = false;
        uv_close((uv_handle_t *)&hf->cycle, free_on_close);
    }
    return rc;
}

/* ---- the remark outbox ---- */

static enum remark_reach reach(void *arg, uint64_t client)
{
    struct handoff *hf = arg;
    struct conn *c = conn_find(hf->d, hf->h, client);
    return !c                        ? REMARK_PEER_GONE
           : c->state != CONN_READY ? REMARK_PEER_CLOSING
                                    : REMARK_PEER_READY;
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
static void route(struct handoff *hf)
{
    struct heap *h = hf->h;
    struct remark_asks a = {0};

    heap_lock(h);
    bool all = remark_outbox_take(h, reach, hf, &a);
    heap_unlock(h);
    if (!all)
        uv_async_send(&hf->outbox);
    /* one request per owner: the asks grouped by client */
    for (size_t x = 0; x < a.n;) {
        uint64_t to = a.client[x];
        size_t m = 0;
        for (size_t y = x; y < a.n; y++) {
            if (a.client[y] == to) {
                uint32_t s = a.seg[y];
                uint64_t t = a.client[y];
                a.seg[y] = a.seg[x + m];
                a.client[y] = a.client[x + m];
                a.seg[x + m] = s;
                a.client[x + m++] = t;
            }
        }
        struct conn *c = conn_find(hf->d, h, to);
        if (c) {
            send_request(c, a.seg + x, m);
            /* Note [Stalls] in stall.c: its answer is awaited from now */
            if (!c->remark_since)
                c->remark_since = uv_now(&hf->d->loop);
        }
        x += m;
    }
    remark_asks_free(&a);
}

static void on_outbox(uv_async_t *a)
{
    route(a->data);
}

/* ---- faults (Note [Client control memory]) ---- */

static void notify_fault(void *arg)
{
    struct handoff *hf = arg;
    if (atomic_load_explicit(&hf->outbox_on, memory_order_acquire))
        uv_async_send(&hf->fault);
}

/* Disconnect every client whose slot has a fault; a slot's fault is
 * cleared when the slot is freed, which the disconnection does. */
static void on_fault(uv_async_t *a)
{
    struct handoff *hf = a->data;
    struct heap *h = hf->h;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        enum slot_fault f = atomic_load(&h->owners[i].fault);
        uint64_t id = atomic_load(&h->owners[i].client_id);
        struct conn *c = f && id ? conn_find(hf->d, h, id) : NULL;
        if (!c || c->state == CONN_CLOSING)
            continue;
        heap_lock(h);
        h->stats.clients_disconnected++;
        heap_unlock(h);
        log_warn("heap '%s': client %llu (%s, pid %d, uid %u) wrote %s "
                 "into mutator slot %u; disconnected.  Its program writes "
                 "into libheapd's memory: a stray pointer, or a hostile "
                 "client", h->cfg->name, (unsigned long long)c->id,
                 c->name[0] ? c->name : "?", (int)c->peer.pid,
                 (unsigned)c->peer.uid, slotmem_fault_name(f), i);
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                  "mutator slot %u holds %s: this client is disconnected",
                  i, slotmem_fault_name(f));
    }
}

int handoff_remark_start(struct heap *h, struct daemon *d)
{
    struct handoff *hf = get_handoff(h);
    int rc;
    if (!hf)
        return -ENOMEM;
    hf->d = d;
    if ((rc = uv_async_init(&d->loop, &hf->outbox, on_outbox)) < 0)
        return rc;
    hf->outbox.data = hf;
    hf->open++;
    uv_unref((uv_handle_t *)&hf->outbox); /* connections keep the loop up */
    if ((rc = uv_async_init(&d->loop, &hf->fault, on_fault)) < 0)
        return rc; /* the daemon does not start */
    hf->fault.data = hf;
    hf->open++;
    uv_unref((uv_handle_t *)&hf->fault);
    h->fault_notify = (struct notify){.fn = notify_fault, .arg = hf};
    atomic_store_explicit(&hf->outbox_on, true, memory_order_release);
    return 0;
}

void handoff_stop(struct heap *h)
{
    struct handoff *hf = h->handoff;
    /* what a worker forwarded last: with no client left it all goes to
     * the global stack, so that a cycle under way can finish */
    if (hf && atomic_load(&hf->outbox_on))
        route(hf);
    /* Note [Stop the world]: no client is connected, so it finishes */
    collector_join(h);
    if (!hf)
        return;
    h->handoff = NULL;
    bool outbox = atomic_exchange(&hf->outbox_on, false);
    unsigned open = hf->open;
    if (open == 0) {
        free(hf);
        return;
    }
    if (hf->cycle_on)
        uv_close((uv_handle_t *)&hf->cycle, free_on_close);
    if (outbox) {
        h->fault_notify = (struct notify){0};
        uv_close((uv_handle_t *)&hf->outbox, free_on_close);
        uv_close((uv_handle_t *)&hf->fault, free_on_close);
    }
}

/* ---- answers ---- */

void remark_done(struct conn *c, const Heapd__RemarkDone *r)
{
    struct heap *h = c->heap;
    size_t bad = 0, unowned = 0;

    if (!h) {
        c->d->frames_rejected++;
        return;
    }
    heap_lock(h);
    /* the fields were logged before the message was sent */
    if (h->marking)
        for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++)
            if (c->slots[i / 64] >> (i % 64) & 1)
                mark_urs(h, h->marking, i);
    remark_answered(h, c->id, &c->held, r->rescanned, r->n_rescanned,
                    r->released, r->n_released, &bad, &unowned);
    /* Note [Stalls] in stall.c: a client that answers is not stalled;
     * what it still has to answer is timed from its last answer */
    if (c->remark_since && r->n_rescanned + r->n_released > bad)
        c->remark_since = uv_now(&c->d->loop);
    heap_unlock(h);
    if (bad || unowned) {
        c->d->frames_rejected += bad + unowned;
        log_info("client %llu (%s): remark answer names %zu segment(s) it "
                 "was not asked to rescan and %zu it released without "
                 "returning them; ignored / taken back",
                 (unsigned long long)c->id, c->name, bad, unowned);
    }
}
