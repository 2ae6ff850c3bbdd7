/* The stop-the-world handshake, daemon side.  The mutator side is
 * client/mutator.c.
 *
 * Note [Stop the world]
 * ~~~~~~~~~~~~~~~~~~~~~
 * Stops are futex handshakes on the shared control area, never socket round
 * trips.  The words (Note [Mutator slots] in proto/layout.h):
 *   control->stop_request   0, or the generation g of the stop under way;
 *   slot->status            state (FREE, RUNNING, BLOCKED, WAITING) | last
 *                           acked g.
 * Daemon (one collector thread per heap):
 *   1. g = next generation (never 0; odd for a snapshot, even for a final
 *      sync); store stop_request = g (seq_cst).
 *   2. For every slot the daemon has attached (Note [Slots are the
 *      daemon's] in daemon/grant.c), load status (seq_cst) until the slot
 *      is freed or its status is FREE, BLOCKED, RUNNING with ack == g, or
 *      (a final sync only) WAITING (Note [Waiting in a barrier]), spinning a little and then sleeping on the
 *      futex `status` meanwhile (Note [Waiting for acks]).
 *      Every write of `status` is followed by a wake, and the futex compares
 *      the value it sleeps on, so no change is missed; the sleep is bounded
 *      only to log a mutator that takes long (the wait itself goes on: a
 *      running mutator must reach a safepoint, and a dead one is freed by
 *      the loop thread when its socket closes).
 *   3. The world is stopped: the snapshot or the final sync does its
 *      short work (Note [Collection cycle]).
 *   4. store stop_request = 0, wake everyone sleeping on it.
 * Mutator:
 *   - at a safepoint, if stop_request = g != 0 and it has not acked g:
 *     store status = RUNNING|g, wake, then wait (spinning briefly, then
 *     sleeping: Note [Spinning through a pause]) while stop_request is
 *     still g;
 *   - blocking_enter: store status = BLOCKED|ack, wake;  it must not touch
 *     the heap until blocking_leave;
 *   - blocking_leave: store status = RUNNING|ack (seq_cst), then load
 *     stop_request (seq_cst) and take the safepoint if a stop is under way.
 * Why this is safe: a mutator counted as stopped either acked g and sleeps
 * until release, or was BLOCKED.  A BLOCKED mutator that leaves during the
 * stop stored RUNNING before loading stop_request, and the daemon stored
 * stop_request before loading status: with both sequentially consistent,
 * the mutator sees the stop and waits (the daemon may or may not have seen
 * it RUNNING; either way it cannot run).  A slot attached during a stop
 * starts RUNNING with ack 0 != g, and heapd_attach polls before it
 * returns, so that thread too waits before it can touch the heap (its
 * first heap operation could be a heapd_write, which does not poll); the
 * collector may or may not be waiting for its ack.  Pause work is O(mutators).
 * A client whose connection closes has its slots set FREE by the loop thread
 * (safepoint_free_slot), which wakes the collector: a dead client never holds
 * up a stop.
 */
#include "safepoint.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "futex.h"
#include "heap.h"
#include "log.h"
#include "slotmem.h"

/* Note [Waiting for acks]
 * ~~~~~~~~~~~~~~~~~~~~~~~
 * A running mutator acks a stop at its next safepoint, usually within
 * microseconds.  The collector thread first spins for it, until
 * ACK_SPIN_NS after the stop request, and only then sleeps on the slot's
 * futex.  Sleeping at once made every ack a wake-up, and the
 * scheduler tends to run the woken collector thread on the waker's core:
 * the mutator that had just acked was pushed off its core and, after the
 * release, had to wait for it back, a pause of its own that no counter
 * saw (measured with sched_switch: most of the mutator's preemptions in
 * bench/latency_bench were right after its ack).  The mirror image of
 * Note [Spinning through a pause] on the mutator's side.
 */
#define ACK_SPIN_NS 100000u

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Note [Waiting in a barrier]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A write barrier may have to wait: for room in a full URS ring, or for
 * the daemon to finish marking the mutator's stack.  The mutator then
 * stores status WAITING (client/barrier.c): it touches nothing while it
 * waits.  The two stops treat it differently, and tell which they are by
 * the parity of their generation (layout_stop_is_snapshot), so that one
 * load of stop_request gives both:
 *   - a final sync counts it as stopped, as if BLOCKED: the sync reads the
 *     ring and marks the stack itself, which is what the barrier waits
 *     for, so waiting for the mutator could deadlock;
 *   - a snapshot waits for it as for a running mutator: it must leave the
 *     barrier and reach its next safepoint first.
 * Leaving the wait, the mutator stores RUNNING, then loads stop_request
 * once: a final sync under way counted it as stopped, so it acknowledges
 * that generation and waits for the release, as a blocking region ends;
 * a snapshot it leaves alone, to be taken at its next safepoint.  (Taking
 * any stop there, as heapd_blocking_leave does, let a snapshot raised
 * right after a final sync's release be acknowledged from inside the
 * barrier: the spin model models/stop.pml found it, BUG_RESUME_TAKES_ANY_STOP.)
 * So no snapshot is ever taken while a mutator is inside heapd_write,
 * heapd_cas or heapd_global_set, and a mutator's epoch can change only at
 * its safepoints: the rule of Note [Client GC discipline] in heapd.h
 * (what was reachable from the roots at the last safepoint stays valid
 * until the next) covers every C local, the ones a barrier call does not
 * take included.  A barrier never waits for a snapshot: after a final
 * sync marking is over and a waiting barrier ends (barrier_on is false),
 * so the snapshot that follows waits at most for a mutator to be
 * scheduled.  Before this state, a barrier that waited BLOCKED let a whole
 * cycle pass, and a reference the caller had read into a local since its
 * last safepoint could be swept under it.
 */
static bool slot_stopped(uint32_t st, uint32_t gen, enum safepoint_kind kind)
{
    switch (LAYOUT_STATUS_STATE(st)) {
    case LAYOUT_MUT_RUNNING:
        return LAYOUT_STATUS_GEN(st) == gen;
    case LAYOUT_MUT_WAITING:
        return kind == SAFEPOINT_FINAL_SYNC;
    default:
        return true;
    }
}

/* Note [Client control memory]: a running mutator's ack is a
 * generation the daemon issued, GEN or one before it; one ahead of GEN
 * (in the half of the 30-bit circle ahead) was written by no mutator.
 * (A blocked or waiting mutator keeps an old ack, which may be any
 * distance behind.) */
static bool ack_ahead(uint32_t st, uint32_t gen)
{
    uint32_t acked = LAYOUT_STATUS_GEN(st);
    uint32_t d = (acked - gen) & LAYOUT_GEN_MASK;
    return LAYOUT_STATUS_STATE(st) == LAYOUT_MUT_RUNNING && acked != 0 &&
           d != 0 && d < LAYOUT_GEN_MASK / 2;
}

/* Log the mutator in SLOT that has held up a stop for WAITED ns: who it
 * is, from the daemon's own record, and what its program must do. */
static void report_slow(struct heap *h, unsigned slot, uint32_t st,
                        uint64_t waited)
{
    struct heap_slot_owner *r = &h->owners[slot];
    struct {
        unsigned long long client_id;
        int pid;
        unsigned uid;
        char name[64];
    } o;
    pthread_mutex_lock(&h->lock);
    o.client_id = atomic_load(&r->client_id);
    o.pid = r->pid;
    o.uid = r->uid;
    memcpy(o.name, r->name, sizeof o.name);
    pthread_mutex_unlock(&h->lock);
    log_warn("heap '%s': mutator slot %u of client %llu (%s, pid %d, uid %u) "
             "has not reached a safepoint for %llu ms%s; every process "
             "of the heap waits for it.  A thread that waits (I/O, a lock, "
             "sleep) must call heapd_blocking_enter first, and a long loop "
             "must call heapd_safepoint now and then",
             h->cfg->name, slot, o.client_id,
             o.name[0] ? o.name : "?", o.pid, o.uid,
             (unsigned long long)(waited / 1000000u),
             LAYOUT_STATUS_STATE(st) == LAYOUT_MUT_WAITING
                 ? " (it waits inside a write barrier)" : "");
}

uint32_t safepoint_stop(struct heap *h, enum safepoint_kind kind,
                        uint64_t *ttsp_max_ns)
{
    struct layout_control *ctl = h->control;
    static const uint64_t report_ns = 1000000000u; /* log slow mutators */
    uint32_t gen = h->stop_gen;
    uint64_t t0, max = 0;

    /* the next generation of this kind's parity (never 0) */
    do
        gen = gen % LAYOUT_GEN_MASK + 1;
    while (layout_stop_is_snapshot(gen) != (kind == SAFEPOINT_SNAPSHOT));

    h->stop_gen = gen;
    atomic_store(&ctl->stop_request, gen);
    t0 = now_ns();
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        struct layout_mutator *m = heap_slot(h, i);
        uint64_t next_report = t0 + report_ns;
        for (unsigned spin = 0;; spin++) {
            /* Note [Slots are the daemon's] in daemon/grant.c; the load
             * in a reader's section (Note [Slot windows]) */
            if (!heap_slot_enter(h, i))
                break;
            uint32_t st = atomic_load(&m->status);
            heap_slot_leave(h, i);
            if (LAYOUT_STATUS_STATE(st) == LAYOUT_MUT_FREE ||
                ack_ahead(st, gen)) {
                slotmem_fault(h, i, SLOT_FAULT_STATUS);
                break;
            }
            if (slot_stopped(st, gen, kind))
                break;
            /* Note [Waiting for acks] */
            if ((spin & 63) != 63 || now_ns() - t0 < ACK_SPIN_NS) {
                __builtin_ia32_pause();
                continue;
            }
            futex_wait(&m->status, st, 100000000u);
            uint64_t t = now_ns();
            if (t >= next_report) {
                report_slow(h, i, st, t - t0);
                next_report = t + report_ns;
            }
        }
        uint64_t waited = now_ns() - t0;
        if (waited > max)
            max = waited;
    }
    *ttsp_max_ns = max;
    return gen;
}

void safepoint_release(struct heap *h)
{
    atomic_store(&h->control->stop_request, 0);
    futex_wake_all(&h->control->stop_request);
}

void safepoint_own_slot(struct heap *h, unsigned slot, int pid, unsigned uid,
                        const char *name)
{
    struct heap_slot_owner *o = &h->owners[slot];
    o->pid = pid;
    o->uid = uid;
    snprintf(o->name, sizeof o->name, "%s", name);
}

void safepoint_free_slot(struct heap *h, unsigned slot)
{
    struct layout_mutator *m = heap_slot(h, slot);
    atomic_store(&m->status, LAYOUT_STATUS(0, LAYOUT_MUT_FREE));
    futex_wake_all(&m->status);
}
