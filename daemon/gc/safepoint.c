/* The stop-the-world handshake, daemon side.  The mutator side is
 * client/mutator.c.
 *
 * Note [Stop the world]
 * ~~~~~~~~~~~~~~~~~~~~~
 * Stops are futex handshakes in the slots' words, never socket round
 * trips.  The words (Note [Mutator slots] in proto/layout.h), both in the
 * slot's region of its client's control memory:
 *   slot->stop_request      0, or the generation g of the stop asked of it;
 *   slot->status            state (FREE, RUNNING, BLOCKED, WAITING) | last
 *                           acked g.
 * Daemon (one collector thread per heap):
 *   1. g = next generation (never 0; odd for a snapshot, even for a final
 *      sync); under heap->lock, store stop_request = g (seq_cst) in every
 *      attached slot, and heap->stop_raised = g, which grant_slot gives a
 *      slot attached meanwhile.
 *   2. For every slot the daemon has attached (Note [Slots are the
 *      daemon's] in daemon/grant.c), load status (seq_cst) until the slot
 *      is freed or its status is FREE, BLOCKED, RUNNING with ack == g, or
 *      (a final sync only) WAITING (Note [Waiting in a barrier]), spinning
 *      a little and then sleeping on the futex `status` meanwhile (Note
 *      [Waiting for acks]).  Every write of `status` is followed by a
 *      wake, and the futex compares the value it sleeps on, so no change
 *      is missed.  A slot still not stopped after stall_warn parks the
 *      stop (Note [Parking a stop]).
 *   3. The world is stopped: the snapshot or the final sync does its
 *      short work (Note [Collection cycle]).
 *   4. Under heap->lock, store stop_request = 0 in every attached slot
 *      and wake it.
 * Mutator:
 *   - at a safepoint, if its stop_request = g != 0 and it has not acked
 *     g: store status = RUNNING|g, wake, then wait (spinning briefly,
 *     then sleeping: Note [Spinning through a pause]) while stop_request
 *     is still g;
 *   - blocking_enter: store status = BLOCKED|ack, wake;  it must not touch
 *     the heap until blocking_leave;
 *   - blocking_leave: store status = RUNNING|ack (seq_cst), then load
 *     stop_request (seq_cst) and take the safepoint if a stop is under way.
 * Why this is safe: a mutator counted as stopped either acked g and sleeps
 * until release, or was BLOCKED.  A BLOCKED mutator that leaves during the
 * stop stored RUNNING before loading its stop_request, and the daemon
 * stored stop_request before loading status: with both sequentially
 * consistent, the mutator sees the stop and waits (the daemon may or may
 * not have seen it RUNNING; either way it cannot run).  A slot attached
 * during a stop starts RUNNING with ack 0 != g and stop_request = g
 * (both under heap->lock, which step 1 holds), and heapd_attach polls
 * before it returns, so that thread too waits before it can touch the
 * heap (its first heap operation could be a heapd_write, which does not
 * poll); the collector may or may not be waiting for its ack.  Pause
 * work is O(mutators).  A client whose connection closes has its slots
 * set FREE by the loop thread (safepoint_free_slot), which wakes the
 * collector: a dead client never holds up a stop.  Each slot has a word
 * of its own, not one for the heap, so that a stop can be released for
 * some slots and kept for others (Note [Parking a stop]); and the word is
 * in memory only that client writes, so a forged stop stalls only its
 * forger.
 */
#include "safepoint.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "futex.h"
#include "heap.h"
#include "log.h"
#include "slotmem.h"
#include "table.h"

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
/* How often a parked stop looks at its stalled slots besides their
 * wakes: one that is freed, or attached again, wakes nobody. */
#define PARKED_LOOK_NS 50000000u

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

/* With heap->lock held: ask attached slot I for stop GEN (0: none), and
 * wake it if it waits on an older one. */
static void ask_slot(struct heap *h, unsigned i, uint32_t gen)
{
    ASSERT_LOCK_HELD(&h->lock);
    _Atomic uint32_t *w = &heap_slot(h, i)->stop_request;
    if (atomic_exchange(w, gen) != 0)
        futex_wake_all(w);
}

/* Ask every attached slot for GEN (0: release them all) but those set
 * in KEEP, which keep what they were asked. */
static void ask_all(struct heap *h, uint32_t gen, const uint64_t *keep)
{
    heap_lock(h);
    h->stop_raised = gen;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++)
        if (heap_slot_attached(h, i) && !(keep && keep[i / 64] >> (i % 64) & 1))
            ask_slot(h, i, gen);
    heap_unlock(h);
}

enum wait_result {
    WAIT_STOPPED,   /* stopped, blocked, free, faulted, or another owner's */
    WAIT_LATE,      /* not stopped yet */
};

/* Is slot I stopped for GEN (or free, or faulted)?  OWNER: the client
 * it was asked of; a slot freed and attached again since then is not
 * waited for (its new owner was never asked this stop). */
static enum wait_result look_at_slot(struct heap *h, unsigned i,
                                     uint64_t owner, uint32_t gen,
                                     enum safepoint_kind kind, uint32_t *st)
{
    /* Note [Slots are the daemon's] in daemon/grant.c; the load in a
     * reader's section (Note [Slot windows]), and the fault too, so
     * that it names the slot's owner of the load */
    if (!heap_slot_enter(h, i))
        return WAIT_STOPPED;
    enum wait_result r = WAIT_LATE;
    *st = atomic_load(&heap_slot(h, i)->status);
    if (atomic_load(&h->owners[i].client_id) != owner) {
        r = WAIT_STOPPED;
    } else if (LAYOUT_STATUS_STATE(*st) == LAYOUT_MUT_FREE ||
               ack_ahead(*st, gen)) {
        slotmem_fault(h, i, SLOT_FAULT_STATUS);
        r = WAIT_STOPPED;
    } else if (slot_stopped(*st, gen, kind)) {
        r = WAIT_STOPPED;
    }
    heap_slot_leave(h, i);
    return r;
}

/* Wait for slot I to be stopped for GEN, asked at T0, until DEADLINE
 * (ns). */
static enum wait_result wait_slot(struct heap *h, unsigned i, uint32_t gen,
                                  enum safepoint_kind kind, uint64_t t0,
                                  uint64_t deadline)
{
    uint64_t owner = atomic_load(&h->owners[i].client_id);
    for (unsigned spin = 0;; spin++) {
        uint32_t st;
        if (look_at_slot(h, i, owner, gen, kind, &st) == WAIT_STOPPED)
            return WAIT_STOPPED;
        /* Note [Waiting for acks] */
        if ((spin & 63) != 63 || monotonic_ns() - t0 < ACK_SPIN_NS) {
            __builtin_ia32_pause();
            continue;
        }
        futex_wait(&heap_slot(h, i)->status, st, 100000000u);
        if (monotonic_ns() >= deadline)
            return WAIT_LATE;
    }
}

/* What slot I, late for a stop of KIND, has not answered. */
static enum layout_stall_on late_for(struct heap *h, unsigned i,
                                     enum safepoint_kind kind)
{
    if (kind == SAFEPOINT_SNAPSHOT)
        return LAYOUT_STALL_SNAPSHOT;
    enum layout_stall_on on = LAYOUT_STALL_FINAL_SYNC;
    if (heap_slot_enter(h, i)) {
        struct layout_mutator *m = heap_slot(h, i);
        uint32_t epoch = atomic_load(&h->control->epoch);
        /* Note [Stack marking handshake]: it took its stack and has not
         * finished logging it */
        if (atomic_load(&m->stack_marking) == epoch &&
            atomic_load(&m->stack_marked) != epoch)
            on = LAYOUT_STALL_HANDSHAKE;
        heap_slot_leave(h, i);
    }
    return on;
}

/* Note [Parking a stop]
 * ~~~~~~~~~~~~~~~~~~~~~
 * A stop waits for every slot.  One that has not stopped stall_warn
 * after it was asked is late: the collector parks the stop.  It marks
 * the late slot and every later one not stopped by then as stalled (an
 * earlier one was stopped when the walk passed it; if it runs again, the
 * stop asked again later waits for it anew) (owners[i].stall_since and
 * stall_on, read by the loop thread: Note [Stalls] in daemon/stall.c),
 * keeps asking those for the stop, and releases all the others, which run
 * on and allocate, unpaced (HEAP_STALLED_STOP).  It then waits for the
 * stalled slots alone: each stops (it reached a safepoint, or entered a
 * blocking region) or is freed (the stall policy ended its client, or it
 * went away; a final sync also counts one WAITING in a barrier): each is
 * let go, and named no more, the moment it stops, so that a process that
 * was only slow is never taken for the one that stalls.  A slot freed
 * and attached again meanwhile is not waited for, its new owner not
 * being the one that stalled; it is let go too, since an attach between
 * the park's look and its release got the parked stop from stop_raised
 * (models/stop.pml found that window: P3).  Only then is the stop asked
 * again of every slot, under a new generation of the same kind: a slot released by the park that
 * acknowledged the old one must not count as stopped for it, and a slot
 * still waiting in take_stop for the old one (let go, but not yet
 * awake) takes the new one at once (client/mutator.c).  The
 * parked stop did none of its work, so nothing the released mutators did
 * meanwhile escapes it.  Each park doubles the patience of the rounds
 * after it, so that mutators whose safepoints are merely further apart
 * than stall_warn cannot keep a stop from ever completing, one late slot
 * after another.  The pause a parked stop reports starts at its last
 * round.  Without parking, one SIGSTOPped process held
 * every other process of the heap in the stop for as long as it stayed
 * stopped (12 s frozen in the test that found it).
 */
/* The parked stop GEN (Note [Parking a stop]): wait until every slot in
 * STALLED (asked at T0 of clients OWNERS) is stopped, releasing each as
 * soon as it is. */
static void wait_parked(struct heap *h, uint64_t *stalled,
                        const uint64_t *owners, uint32_t gen,
                        enum safepoint_kind kind)
{
    for (;;) {
        int first = -1;
        uint32_t first_st = 0;
        for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
            uint32_t st;
            if (!(stalled[i / 64] >> (i % 64) & 1))
                continue;
            if (look_at_slot(h, i, owners[i], gen, kind, &st) ==
                WAIT_LATE) {
                if (first < 0) {
                    first = (int)i;
                    first_st = st;
                }
                continue;
            }
            /* stopped: named no more, and let go at once -- whoever has
             * the slot now: one attached between the park's look and its
             * release got the parked stop from stop_raised */
            stalled[i / 64] &= ~(1ull << (i % 64));
            heap_lock(h);
            uint64_t now_owner = atomic_load(&h->owners[i].client_id);
            if (now_owner == owners[i]) {
                atomic_store(&h->owners[i].stall_since, 0);
                atomic_store(&h->owners[i].stall_on, LAYOUT_STALL_NONE);
            }
            if (now_owner != 0)
                ask_slot(h, i, 0);
            heap_unlock(h);
        }
        if (first < 0)
            return;
        futex_wait(&heap_slot(h, (unsigned)first)->status, first_st,
                   PARKED_LOOK_NS);
    }
}

uint32_t safepoint_stop(struct heap *h, enum safepoint_kind kind,
                        uint64_t *ttsp_max_ns, uint64_t *stopped_from_ns)
{
    ASSERT_LOCK_NOT_HELD(&h->lock);
    uint32_t gen = h->stop_gen;
    uint64_t max = 0, t0;
    /* Note [Parking a stop]: a round's patience doubles after each park */
    uint64_t patience = h->cfg->stall_warn_ms * 1000000u;

    for (;;) {
        /* the next generation of this kind's parity (never 0) */
        do
            gen = gen % LAYOUT_GEN_MASK + 1;
        while (layout_stop_is_snapshot(gen) != (kind == SAFEPOINT_SNAPSHOT));
        h->stop_gen = gen;
        table_stop_gen(h, gen); /* Note [The live table] */
        ask_all(h, gen, NULL);

        t0 = monotonic_ns();
        unsigned late = LAYOUT_MAX_MUTATORS;
        for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
            if (wait_slot(h, i, gen, kind, t0, t0 + patience) == WAIT_LATE) {
                late = i;
                break;
            }
            uint64_t waited = monotonic_ns() - t0;
            if (waited > max)
                max = waited;
        }
        if (late == LAYOUT_MAX_MUTATORS)
            break;

        /* park: every slot not stopped now is stalled */
        uint64_t stalled[LAYOUT_MAX_MUTATORS / 64] = {0};
        uint64_t owners[LAYOUT_MAX_MUTATORS] = {0};
        for (unsigned i = late; i < LAYOUT_MAX_MUTATORS; i++) {
            uint32_t st;
            owners[i] = atomic_load(&h->owners[i].client_id);
            if (owners[i] == 0 ||
                look_at_slot(h, i, owners[i], gen, kind, &st) ==
                    WAIT_STOPPED)
                continue;
            stalled[i / 64] |= 1ull << (i % 64);
            atomic_store(&h->owners[i].stall_on, late_for(h, i, kind));
            atomic_store(&h->owners[i].stall_since, t0);
        }
        ask_all(h, 0, stalled);
        atomic_fetch_or(&h->stalled, HEAP_STALLED_STOP);
        wait_parked(h, stalled, owners, gen, kind);
        atomic_fetch_and(&h->stalled, ~HEAP_STALLED_STOP);
        patience *= 2;
        /* a stop that parked is as long as its stall: not a ttsp */
    }
    *ttsp_max_ns = max;
    *stopped_from_ns = t0;
    return gen;
}

void safepoint_release(struct heap *h)
{
    ask_all(h, 0, NULL);
}

void safepoint_own_slot(struct heap *h, unsigned slot, int pid, unsigned uid,
                        const char *name)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct heap_slot_owner *o = &h->owners[slot];
    o->pid = pid;
    o->uid = uid;
    snprintf(o->name, sizeof o->name, "%s", name);
}

void safepoint_free_slot(struct heap *h, unsigned slot)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct layout_mutator *m = heap_slot(h, slot);
    atomic_store(&m->status, LAYOUT_STATUS(0, LAYOUT_MUT_FREE));
    futex_wake_all(&m->status);
}
