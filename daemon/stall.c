/* Stalls: a mutator that holds up its heap's collector is named, and its
 * stall ended by policy.  The loop thread's side; the collector publishes
 * what it waits for (Note [Parking a stop] in safepoint.c).
 *
 * Note [Stalls]
 * ~~~~~~~~~~~~~
 * A cycle cannot end while a mutator does not stop for a snapshot or a
 * final sync (it is stopped by a signal or a debugger, or loops without
 * a safepoint; a final sync also names one that holds its stack-marking
 * handshake, Note [Stack marking handshake]), or while a client does not
 * answer a remark request (Note [Remark]).  Every STALL_TICK_MS the loop
 * thread looks at what the collector waits for: the slots it marked
 * stalled when it parked a stop (owners[i].stall_since, stall_on), and
 * the clients with a remark request older than stall_warn (conn
 * remark_since, set when a request is sent, cleared when none sent to it
 * is left).
 *   - After stall_warn the mutator is named once per stall in the log
 *     (client id, name, pid, uid, slot, what it has not answered, for how
 *     long, and what its program must do) and counted (stalls); heapctl
 *     clients shows it.  While a stall lasts the heap's grants are not
 *     paced and do not wait for a cycle (heap->stalled, read by
 *     session.c's grant): the other clients allocate until max_size or
 *     max_client_bytes, and then get the usual ENOMEM at once, instead of
 *     waiting for a cycle that cannot end.
 *   - After stall_timeout (0: never) stall_action ends it, once:
 *       kill   SIGKILL through the client's pidfd (Note [Pidfd guard] in
 *              auth.c), counted in stalls_killed.  Once the pidfd says the
 *              process is gone, the client leaves as a crashed one (Note
 *              [Client lifecycle] in session.c), even if another process
 *              still holds its socket.  No pidfd, a refused signal, or a
 *              process still there KILL_WAIT_MS later: evict.
 *       evict  Note [Evicted clients].
 *       wait   nothing: it stays named.
 * When the stalled slot stops or is freed the collector asks the stop
 * again; when the client leaves, its remark work goes back to the daemon
 * (Note [Remark]); either way the cycle ends as usual.  Stalls are
 * watched on the loop thread because ending one closes a connection,
 * which the collector never touches (Note [Collector handoff]).  Before,
 * one stopped process froze every process of its heap for as long as it
 * stayed stopped (12 s in the test that found it).
 *
 * Note [Evicted clients]
 * ~~~~~~~~~~~~~~~~~~~~~~
 * An evicted client is treated as gone -- its slots are freed, its
 * segments orphaned, its remark work taken back, its connection closed --
 * while its process may still run (a loop that never reaches a
 * safepoint) or run again (SIGCONT).  libheapd aborts that process at its
 * next call into heapd: the daemon writes `evicted` (what it did not
 * answer) and evicted_after_ms into each of its slots' regions of its
 * control memory, after the regions' pages are given back (Note [Evicted
 * clients, client side] in client/mutator.c).  Until that check, stores
 * the process had begun can still land: the allocation in progress (into
 * a segment its client owned), a barrier call past its check (a field of
 * an object it holds), and the plain stores its program makes through
 * pointers it read before it stalled.  All of them reach only blocks that
 * were allocated at the eviction, and those are fenced: every segment in
 * use at that moment (seg_fence) is granted to no client, and none of its
 * blocks is freed -- a dead one is kept, its mark set to the epoch --
 * until the evicted process is gone (its pidfd, checked every tick).  A
 * block free at the eviction may be reused, since no pointer the process
 * could have taken from the heap since its last safepoint leads there (a
 * sweep frees only what was unreachable at a snapshot it stopped for).
 * The price is memory: while the process lives, the heap keeps what it
 * held at the eviction, dead or alive, and grows around it.  A client
 * without a pidfd keeps its fence until heapd stops.
 * What the fence does not cover: a process that runs on after its
 * eviction may also load pointers the heap gained since, and a store
 * through one of them lands in an object that is not fenced, which may
 * have died and been given to another client by then.  So heapd stops
 * the process first (SIGSTOP through its pidfd) where it may signal it:
 * that window then opens only if someone continues it, and lasts until
 * its next heapd call.  Where heapd may not signal it (the fallback of
 * kill), a process that still runs has that window from the eviction on;
 * such a process is one in a loop that never calls heapd, and the
 * stores that reach further than the fence are the ones it makes
 * through pointers it loads in that loop.
 */
#include "stall.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "daemon.h"
#include "log.h"
#include "resume.h"
#include "mark.h"
#include "remark.h"

#define STALL_TICK_MS 100
#define KILL_WAIT_MS 2000 /* SIGKILL to exit: then evict */

struct stall_fence {
    struct stall_fence *next;
    struct heap *h;
    int pidfd;            /* the evicted process; -1: none */
    uint64_t client;
    int pid;
    uint32_t *segs;
    uint32_t n;
};

static bool pidfd_exited(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return pidfd >= 0 && poll(&p, 1, 0) > 0;
}

static const char *advice =
    "A thread that waits (I/O, a lock, sleep) must call heapd_blocking_enter "
    "first, and a long loop must call heapd_safepoint now and then";

/* What happens next, for the log line naming a stall of H. */
static void next_step(const struct heap *h, char *buf, size_t n)
{
    const struct config_heap *cfg = h->cfg;
    if (cfg->stall_timeout_ms == 0 || cfg->stall_action == CONFIG_STALL_WAIT)
        snprintf(buf, n, "the other clients run on meanwhile (stall_action "
                 "= wait%s)", cfg->stall_timeout_ms ? "" : ", stall_timeout 0");
    else
        snprintf(buf, n, "the other clients run on meanwhile, and after "
                 "stall_timeout (%llu ms) heapd %s it",
                 (unsigned long long)cfg->stall_timeout_ms,
                 cfg->stall_action == CONFIG_STALL_KILL ? "kills" : "evicts");
}

/* Name a stall of C (SLOT, or -1 for its client's remark requests). */
static void name_stall(struct conn *c, int slot, enum layout_stall_on on,
                       uint64_t ms)
{
    struct heap *h = c->heap;
    char who[32] = "", next[160];
    if (slot >= 0)
        snprintf(who, sizeof who, "mutator slot %d of ", slot);
    next_step(h, next, sizeof next);
    heap_lock(h);
    h->stats.stalls++;
    heap_unlock(h);
    log_warn("heap '%s': %sclient %llu (%s, pid %d, uid %u) %s for %llu "
             "ms; %s.  %s", h->cfg->name, who, (unsigned long long)c->id,
             c->name[0] ? c->name : "?", (int)c->peer.pid,
             (unsigned)c->peer.uid, layout_stall_what(on),
             (unsigned long long)ms, next, advice);
}

/* ---- ending a stall ---- */

static void evict(struct daemon *d, struct conn *c, enum layout_stall_on on,
                  uint64_t ms, const char *why)
{
    struct heap *h = c->heap;
    struct stall_fence *f = calloc(1, sizeof *f);
    unsigned regions[LAYOUT_MAX_MUTATORS], n = 0;
    int rc = -ENOMEM;

    c->stall_ended = true;
    /* Note [Evicted clients]: it runs on no further, where heapd may say
     * so */
    bool stopped = c->pidfd >= 0 &&
                   syscall(SYS_pidfd_send_signal, c->pidfd, SIGSTOP, NULL,
                           0) == 0;
    heap_lock(h);
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++)
        if (c->slots[i / 64] >> (i % 64) & 1)
            regions[n++] = h->owners[i].region;
    /* before the client leaves: its blank segments must not become free */
    if (f)
        rc = seg_fence(h, &f->segs, &f->n);
    h->stats.clients_evicted++;
    heap_unlock(h);
    if (rc == 0) {
        f->h = h;
        f->pidfd = c->pidfd >= 0 ? fcntl(c->pidfd, F_DUPFD_CLOEXEC, 3) : -1;
        f->client = c->id;
        f->pid = (int)c->peer.pid;
        f->next = d->fences;
        d->fences = f;
    } else {
        free(f);
        log_error("heap '%s': cannot fence the segments of evicted client "
                  "%llu: out of memory; stores it still makes may land in "
                  "memory given to others", h->cfg->name,
                  (unsigned long long)c->id);
    }
    session_leave(c);
    /* Note [Evicted clients, client side]: the regions' pages are given
     * back; the mark goes in after, the reason last */
    for (unsigned k = 0; k < n && c->mem_fd >= 0; k++) {
        off_t at = (off_t)regions[k] * (off_t)LAYOUT_MUTATOR_BYTES;
        uint64_t after = ms;
        uint32_t mark = (uint32_t)on;
        if (pwrite(c->mem_fd, &after, sizeof after,
                   at + (off_t)offsetof(struct layout_mutator,
                                        evicted_after_ms)) < 0 ||
            pwrite(c->mem_fd, &mark, sizeof mark,
                   at + (off_t)offsetof(struct layout_mutator, evicted)) < 0)
            log_error("heap '%s': cannot mark client %llu evicted: %s",
                      h->cfg->name, (unsigned long long)c->id,
                      strerror(errno));
    }
    log_warn("heap '%s': client %llu (%s, pid %d, uid %u) evicted (%s) "
             "after it %s for %llu ms: libheapd aborts it at its next call "
             "into heapd, and the %u segments in use now are kept from "
             "reuse until it is gone%s", h->cfg->name,
             (unsigned long long)c->id, c->name[0] ? c->name : "?",
             (int)c->peer.pid, (unsigned)c->peer.uid, why,
             layout_stall_what(on), (unsigned long long)ms,
             rc == 0 ? f->n : 0,
             stopped ? "; heapd stopped it (SIGSTOP): SIGCONT lets it "
                       "reach that call"
                     : "");
    conn_fail(c, HEAPD__ERROR_CODE__ERROR_EVICTED,
              "evicted: this client %s for %llu ms (stall_timeout of heap "
              "'%s')", layout_stall_what(on), (unsigned long long)ms,
              h->cfg->name);
}

#ifndef NDEBUG
/* Note [Holding stall actions for tests]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Debug builds only: while the file HEAPD_TEST_HOLD_STALL_ACTION names
 * exists, stall_timeout ends no stall.  The stall is still named, and
 * the heap still unpaced, so a test can check what a stall lets the
 * others do (allocate; go on, for a second stalled client continued)
 * before heapd acts, instead of racing stall_timeout; it removes the
 * file to let heapd act.  Unheld, such a check is a race with the
 * timeout that only a margin wins: under ThreadSanitizer the worker of
 * test_stall makes its 1000 allocations in 25-36 ms of a 3 s timeout,
 * and the continued client must answer its stop within the same 3 s. */
static bool stall_action_held(void)
{
    const char *path = getenv("HEAPD_TEST_HOLD_STALL_ACTION");
    return path && access(path, F_OK) == 0;
}
#else
static bool stall_action_held(void)
{
    return false;
}
#endif

static void end_stall(struct daemon *d, struct conn *c,
                      enum layout_stall_on on, uint64_t ms)
{
    struct heap *h = c->heap;
    char why[128];
    if (c->stall_ended || c->state == CONN_CLOSING || c->gone ||
        stall_action_held()) /* Note [Holding stall actions for tests] */
        return;
    switch (h->cfg->stall_action) {
    case CONFIG_STALL_WAIT:
        return;
    case CONFIG_STALL_KILL:
        if (c->pidfd < 0) {
            snprintf(why, sizeof why, "heapd has no pidfd of it");
        } else if (syscall(SYS_pidfd_send_signal, c->pidfd, SIGKILL, NULL,
                           0) < 0) {
            snprintf(why, sizeof why, "heapd may not kill it: %s",
                     strerror(errno));
        } else {
            c->stall_ended = true;
            c->killed_at = uv_now(&d->loop);
            c->killed_on = on;
            c->killed_after = ms;
            heap_lock(h);
            h->stats.stalls_killed++;
            heap_unlock(h);
            log_warn("heap '%s': client %llu (%s, pid %d, uid %u) %s for "
                     "%llu ms (stall_timeout): killed", h->cfg->name,
                     (unsigned long long)c->id, c->name[0] ? c->name : "?",
                     (int)c->peer.pid, (unsigned)c->peer.uid,
                     layout_stall_what(on), (unsigned long long)ms);
            return;
        }
        evict(d, c, on, ms, why);
        return;
    case CONFIG_STALL_EVICT:
        evict(d, c, on, ms, "stall_action = evict");
        return;
    }
}

/* A client killed for a stall: once its process is gone it leaves as a
 * crashed one; if it is not gone in KILL_WAIT_MS, it is evicted. */
static void watch_killed(struct daemon *d, struct conn *c, uint64_t now)
{
    if (!c->killed_at || c->state == CONN_CLOSING)
        return;
    if (pidfd_exited(c->pidfd)) {
        c->killed_at = 0;
        session_leave(c);
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_EVICTED,
                  "killed: this client %s for %llu ms",
                  layout_stall_what(c->killed_on),
                  (unsigned long long)c->killed_after);
    } else if (now - c->killed_at > KILL_WAIT_MS) {
        c->killed_at = 0;
        c->stall_ended = false;
        evict(d, c, c->killed_on, c->killed_after,
              "SIGKILL did not end it");
    }
}

/* ---- watching ---- */

static void watch_slots(struct daemon *d, struct heap *h, size_t hi)
{
    uint64_t now = monotonic_ns();
    const struct config_heap *cfg = h->cfg;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        uint64_t since = atomic_load(&h->owners[i].stall_since);
        uint64_t id = atomic_load(&h->owners[i].client_id);
        if (!since || !id || now < since)
            continue;
        struct conn *c = conn_find(d, h, id);
        if (!c)
            continue;
        uint64_t ms = (now - since) / 1000000u;
        enum layout_stall_on on = atomic_load(&h->owners[i].stall_on);
        if (ms >= cfg->stall_warn_ms && d->stall_warned[hi][i] != since) {
            d->stall_warned[hi][i] = since;
            name_stall(c, (int)i, on, ms);
        }
        if (cfg->stall_timeout_ms && ms >= cfg->stall_timeout_ms)
            end_stall(d, c, on, ms);
    }
}

/* With heap->lock held: remark requests sent to client ID and not yet
 * answered (Note [Remark]). */
static uint32_t remarks_sent_to(struct heap *h, uint64_t id)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct mark_job *j = h->marking;
    uint32_t n = 0;
    if (!j)
        return 0;
    hd_mutex_lock(&j->mu);
    for (uint32_t i = h->segs.first; i < h->segs.high; i++)
        n += REMARK_STATE(h->segs.segs[i].remark) == REMARK_SENT &&
             h->segs.segs[i].remark_to == id;
    hd_mutex_unlock(&j->mu);
    return n;
}

uint32_t stall_remarks_outstanding(struct conn *c)
{
    struct heap *h = c->heap;
    if (!h)
        return 0;
    heap_lock(h);
    uint32_t n = remarks_sent_to(h, c->id);
    heap_unlock(h);
    return n;
}

static void watch_remarks(struct daemon *d, struct heap *h)
{
    uint64_t now = uv_now(&d->loop);
    const struct config_heap *cfg = h->cfg;
    bool late = false;
    for (struct conn *c = d->conns; c; c = c->next) {
        if (c->heap != h || !c->remark_since)
            continue;
        if (stall_remarks_outstanding(c) == 0) {
            c->remark_since = 0;
            c->remark_warned = false;
            continue;
        }
        uint64_t ms = now - c->remark_since;
        if (ms < cfg->stall_warn_ms)
            continue;
        late = true;
        if (!c->remark_warned) {
            c->remark_warned = true;
            name_stall(c, -1, LAYOUT_STALL_REMARK, ms);
        }
        if (cfg->stall_timeout_ms && ms >= cfg->stall_timeout_ms)
            end_stall(d, c, LAYOUT_STALL_REMARK, ms);
    }
    if (late)
        atomic_fetch_or(&h->stalled, HEAP_STALLED_REMARK);
    else
        atomic_fetch_and(&h->stalled, ~HEAP_STALLED_REMARK);
}

static void watch_fences(struct daemon *d)
{
    for (struct stall_fence **fp = &d->fences; *fp;) {
        struct stall_fence *f = *fp;
        if (!pidfd_exited(f->pidfd)) {
            fp = &f->next;
            continue;
        }
        heap_lock(f->h);
        seg_unfence(f->h, f->segs, f->n);
        heap_unlock(f->h);
        log_info("heap '%s': evicted client %llu (pid %d) is gone; its "
                 "fence of %u segments is lifted", f->h->cfg->name,
                 (unsigned long long)f->client, f->pid, f->n);
        *fp = f->next;
        close(f->pidfd);
        free(f->segs);
        free(f);
    }
}

static void on_tick(uv_timer_t *t)
{
    struct daemon *d = t->data;
    uint64_t now = uv_now(&d->loop);
    for (size_t k = 0; k < d->n_heaps; k++) {
        struct heap *h = &d->heaps[k];
        watch_slots(d, h, k);
        watch_remarks(d, h);
        /* Note [Stalls]: grants that wait for a cycle wait no more */
        if (atomic_load(&h->stalled))
            session_stalled(h, d); /* cheap when nothing waits */
    }
    for (struct conn *c = d->conns, *next; c; c = next) {
        next = c->next;
        watch_killed(d, c, now);
    }
    watch_fences(d);
    resume_watch(d, now); /* Note [Resuming clients] in resume.c */
}

void stall_start(struct daemon *d)
{
    uv_timer_init(&d->loop, &d->stall_timer);
    d->stall_timer.data = d;
    uv_timer_start(&d->stall_timer, on_tick, STALL_TICK_MS, STALL_TICK_MS);
    uv_unref((uv_handle_t *)&d->stall_timer);
}

void stall_stop(struct daemon *d)
{
    while (d->fences) {
        struct stall_fence *f = d->fences;
        d->fences = f->next;
        if (f->pidfd >= 0)
            close(f->pidfd);
        free(f->segs);
        free(f);
    }
}
