/* libheapd mutators: attaching a thread, safepoints and blocking regions
 * (the mutator side of Note [Stop the world] in daemon/gc/safepoint.c), the
 * root stack, and collection requests. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "alloc.h"
#include "barrier.h"
#include "checked.h"
#include "client.h"
#include "errors.h"
#include "frame.h"
#include "futex.h"
#include "heapd.h"
#include "layout.h"
#include "mutator.h"
#include "remark.h"
#include "reserve.h"
#include "stack.h"
#include "stack_roots.h"
#include "tsan.h"

/* ---- safepoints ---- */

/* Note [Spinning through a pause]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * The daemon's pauses are tens of microseconds (they only flip words), but
 * a mutator that sleeps on the futex for one must then be woken and
 * scheduled again, and on a busy machine the scheduler can take
 * milliseconds to give it a core back, longer than the pause itself; on a
 * virtual machine the core it slept on may have halted, and the host takes
 * its time to run it again.  So a stopped mutator first spins on the stop
 * word, with a pause instruction, for up to MUTATOR_SPIN_NS, keeping its
 * core, and only then sleeps (futex_spin_wait).  The daemon needs no core
 * from the mutator: with mutators <= cores its collector thread has one.
 * The other waits of a mutator on the daemon that are usually short do the
 * same: room in its URS ring (the mark workers poll the rings every few
 * hundred objects, Note [Polling the rings]), a refill already on its way
 * (Note [Reserve sizing]), and its root stack being marked by the daemon
 * (Note [Stack marking handshake]).  But not a refill while the heap
 * marks: heapd may hold that grant until the cycle has done its share
 * (Note [Pacing] in daemon/gc/collector.c), and the cycle's workers need
 * the core the spin would keep.  GCBench without a nursery spent 23 % of
 * its samples spinning there; sleeping at once, its median of 5 runs
 * went from 283 to 269 ms (interleaved with the build before).
 */


/* Note [A dead daemon]
 * ~~~~~~~~~~~~~~~~~~~~
 * A mutator waits on words the daemon writes: the stop word until a
 * pause's release, a global's wake word while another process runs its
 * heapd_global_once INIT, its ring's wake word and its stack's mark word
 * in a write barrier.  If the daemon dies in the middle (SIGKILL, a
 * crash), or closes this client's connection, nobody will ever write them.
 * The rule: once the agent has seen the connection end, a mutator waits
 * for nothing, writes nothing the daemon reads, and every call of it that
 * needs the daemon fails:
 *   - the waits end: each sleeps through agent_wait_word, which registers
 *     the sleeper with the agent and looks at `closed` before it sleeps;
 *     the agent, closing, sets `closed` and then FUTEX_WAKEs every
 *     registered word (a wake writes nothing: the client may write no word
 *     of the daemon's, and the wake works on read-only memory; waiters of
 *     other processes wake too, look at their word and sleep again).  A
 *     close between the look and the sleep would be missed, since the word
 *     itself does not change, so a sleep lasts at most AGENT_SLEEP_NS (100
 *     ms): a pause the daemon ends wakes the sleeper at once, as before,
 *     and only an orphan waits that long, once.
 *   - nothing more is written into the slot, the ring or the root stack
 *     (take_stop acknowledges no stop, blocking regions change no status):
 *     the daemon freed the slot and the segments when the connection
 *     closed, and may have given them to another client, whose stops a
 *     RUNNING status written into its slot would hold up for good.
 *   - heapd_alloc fails at once with EPIPE (errno from HEAPD_ECLOSED), even
 *     when its current segment has free blocks: those segments were
 *     orphaned with the connection and may be another client's by now,
 *     and no daemon collects for this client any more.  The test on the
 *     fast path is one load of a word the agent writes once, predicted not
 *     taken: bench/alloc_bench measures no difference (16-byte objects,
 *     10.1 ns an allocation before, 9.8-9.9 ns after; 64-byte ones,
 *     14.6-14.9 ns before, 14.5-15.2 ns after: the noise of the runs).
 *     heapd_root_push fails the same way, heapd_collect, heapd_global_set
 *     and heapd_global_once return HEAPD_ECLOSED (or NULL with EPIPE),
 *     heapd_root_set and heapd_root_pop change nothing the daemon reads,
 *     heapd_root_get returns NULL (its chunk was orphaned too), and
 *     heapd_safepoint, heapd_blocking_enter/leave and the write barrier
 *     return without waiting.  A child of fork() holding its parent's
 *     mutator is treated the same (Note [Clients and fork]).
 * Objects the mutator reads stay mapped until heapd_disconnect; what they
 * hold is the application's business.  Before this rule, a client stopped
 * in a pause when the daemon was killed slept in futex_wait for ever.
 */

/* ---- evicted clients ---- */

/* Note [Evicted clients, client side]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A mutator that does not answer a stop for stall_timeout may get its
 * client evicted (Note [Evicted clients] in daemon/stall.c): the daemon
 * frees the client's slots, giving their pages back, orphans its segments,
 * then writes `evicted` (what the slot did not answer) and
 * `evicted_after_ms` into each of its slots, in the client's own control
 * memory (Note [Client control memory] in proto/layout.h), and then closes
 * the connection.  The process is then a stranger to the heap: its
 * segments may be another client's once it is gone, and nothing it holds
 * is a root.  So libheapd aborts it at its next call, with one message
 * that names the heap, the slot, the stop it did not answer and for how
 * long, and what the program must change (mutator_evicted_abort).
 *
 * The mark is the only word that means "evicted".  A slot whose pages were
 * given back reads 0 everywhere, which is neither an eviction nor a
 * released stop: a stop or blocking region that finds its status FREE
 * (no attached slot is FREE: the daemon disconnects a client that writes
 * it) waits for the connection's end, which the daemon sends after the
 * mark, and looks at the mark then (await_slot_end).
 *
 * Where the check is (mutator_check_evicted, one relaxed load):
 *   - on entry of every call that touches the heap for a mutator, before
 *     the call writes anything into the heap, the slot or the root stack,
 *     and before the orphan check (an evicted client's connection is
 *     closed too): heapd_alloc, heapd_safepoint and every poll
 *     (mutator_poll), heapd_root_push/set/pop/get, heapd_blocking_enter
 *     and heapd_blocking_leave, heapd_collect, heapd_detach,
 *     heapd_global_set/once/delete, and the slow paths of the write
 *     barriers (client/barrier.c).  heapd_write and heapd_cas check only
 *     in that slow path: outside marking, or on an object already dirty,
 *     the inline barrier reads just the phase and the header, and the
 *     store lands in an object the process could reach;
 *   - in the stop's wait (take_stop): on entry and after every wake;
 *   - in every orphan check (mutator_orphaned): the connection's close
 *     comes after the mark, so a call that finds it closed finds the mark;
 *   - on the agent thread, when the connection closes (EOF): every
 *     attached mutator's slot (mutator_check_evicted_all), so that an
 *     evicted process resumed by SIGCONT aborts even if its agent thread
 *     runs first and its mutators make no call.
 * On heapd_alloc's fast path the check is one load of a word in the cache
 * line of the stop word, which the poll reads next, predicted not taken:
 * bench/alloc_bench (5 million objects a run, the median of 5 runs, three
 * rounds before and two after, interleaved) measured 16-byte objects at
 * 10.26-10.64 ns an allocation before and 9.34-9.67 after, 64-byte ones
 * at 14.71-15.36 ns before and 14.25-14.57 after: no cost (the gain is
 * code layout and the noise of a shared machine).
 *
 * Which stores can still land after the eviction, none of them made by a
 * call that has seen the mark: a heapd_alloc already past its check when
 * the process was stopped writes only into a segment its client owned,
 * and so does heapd.h's inline allocation of a young mutator, which reads
 * no eviction mark: it takes blocks of its current free run, in a segment
 * its client owned, until the gate closes with the connection (Note [The
 * open gate] in client/agent.c) or the run ends, at most 64 KiB on (Note
 * [Young runs are capped] in client/alloc.c), and the call then aborts; a
 * heapd_write or heapd_cas already past its barrier stores into an object
 * the process could reach; and the program's plain C stores between heapd
 * calls go wherever it points.  The daemon fences all of them: the
 * segments in use at the eviction are given to no client until the
 * process is gone (Note [Evicted clients] in daemon/stall.c).
 */

void mutator_evicted_abort(const heapd_mutator *m)
{
    char msg[1024];
    uint32_t on = atomic_load_explicit(&m->slot->evicted,
                                       memory_order_relaxed);
    unsigned long long ms = (unsigned long long)atomic_load_explicit(
        &m->slot->evicted_after_ms, memory_order_relaxed);
    int n = snprintf(msg, sizeof msg,
                     "libheapd: heapd evicted this process (pid %d) from heap "
                     "'%s': its mutator in slot %u %s for %llu ms, so "
                     "heapd (stall_action = evict, or it could not kill "
                     "the process) ended its client, freed its "
                     "slots and closed its connection, and the process "
                     "aborts. A thread that waits (I/O, a lock, sleep) must "
                     "call heapd_blocking_enter first, and a long loop must "
                     "call heapd_safepoint now and then; raise stall_timeout "
                     "in heapd.conf if this pause was expected.\n",
                     (int)getpid(), m->c->heap_name, m->slot_index,
                     layout_stall_what((enum layout_stall_on)on), ms);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof msg ? (size_t)n
                                                    : sizeof msg - 1;
    for (size_t off = 0; off < len;) {
        ssize_t w = write(STDERR_FILENO, msg + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    abort();
}

void mutator_check_evicted_all(heapd_client *c)
{
    hd_mutex_lock(&c->mutators_mu);
    for (heapd_mutator *m = c->mutators; m; m = m->next)
        mutator_check_evicted(m);
    hd_mutex_unlock(&c->mutators_mu);
}

/* M's status reads FREE: the daemon has freed its slot and given its
 * pages back, and either marks it evicted and closes the connection, or
 * just closes it.  Wait for the close (a bounded sleep at a time, woken
 * by the close: Note [A dead daemon]), then look at the mark (Note
 * [Evicted clients, client side]); what is left is an orphan. */
static void await_slot_end(heapd_mutator *m)
{
    uint32_t st;
    while (LAYOUT_STATUS_STATE(st = atomic_load(&m->slot->status)) ==
           LAYOUT_MUT_FREE) {
        mutator_check_evicted(m);
        if (agent_wait_word(&m->c->agent, &m->slot->status, st, 0) < 0)
            break;
    }
    mutator_check_evicted(m);
}

static bool slot_freed(const heapd_mutator *m)
{
    return __builtin_expect(LAYOUT_STATUS_STATE(atomic_load(
                                &m->slot->status)) == LAYOUT_MUT_FREE, 0);
}

/* Acknowledge stop GEN (loaded once by the caller) and wait for its
 * release, or for the connection's end (Note [A dead daemon]); the
 * eviction mark is looked at on entry and after every wake (Note
 * [Evicted clients, client side]). */
static void take_stop(heapd_mutator *m, uint32_t gen)
{
    _Atomic uint32_t *word = &m->slot->stop_request;
    bool snapshot = layout_stop_is_snapshot(gen);

    mutator_check_evicted(m);
    /* Note [C locals are roots] in client/stack_roots.c: before the ack */
    if (snapshot && gen != 0)
        stack_roots_capture(m);
    /* a stop re-asked under a new generation while this mutator waited
     * (Note [Parking a stop] in daemon/gc/safepoint.c) is taken at once, if
     * it is of the same kind */
    while (gen != 0 && layout_stop_is_snapshot(gen) == snapshot) {
        uint32_t st = atomic_load(&m->slot->status);
        if (LAYOUT_STATUS_STATE(st) == LAYOUT_MUT_FREE) {
            await_slot_end(m); /* the stop word reads 0 too */
            return;
        }
        if (LAYOUT_STATUS_GEN(st) == gen)
            return;
        if (mutator_orphaned(m))
            return; /* the slot is not ours any more */
        /* acknowledge: everything this mutator wrote is visible to the
         * collector once it sees the ack (seq_cst store, futex wake) */
        TSAN_REUSE_RELEASE(&m->c->tsan_reuse); /* Note [Reuse and
                                                  ThreadSanitizer] */
        atomic_store(&m->slot->status,
                     LAYOUT_STATUS(gen, LAYOUT_MUT_RUNNING));
        futex_wake_all(&m->slot->status);
        /* Note [Spinning through a pause], once: woken with the stop
         * still on (a bounded sleep's end, a wake for another process's
         * waiter), the pause is a long one */
        for (uint64_t spin = MUTATOR_SPIN_NS; atomic_load(word) == gen;
             spin = 0) {
            if (agent_wait_word(&m->c->agent, word, gen, spin) < 0) {
                mutator_check_evicted(m); /* closed after the mark */
                return;
            }
            mutator_check_evicted(m);
        }
        mutator_check_evicted(m);
        /* released, or the slot's pages given back: then the loop's
         * FREE status waits for the end (a release writes no status) */
        gen = atomic_load(word);
        if (gen == 0 && slot_freed(m))
            await_slot_end(m);
    }
}

void mutator_stop_slow(heapd_mutator *m)
{
    take_stop(m, atomic_load(&m->slot->stop_request));
}

void mutator_safepoint_slow(heapd_mutator *m)
{
    mutator_stop_slow(m);
    young_resume(m); /* Note [The preparatory push] in client/minor.c */
    /* Note [Remark requests] in client/remark.c */
    if (atomic_load_explicit(&m->remark_pending, memory_order_acquire))
        remark_service(m->c, m);
}

void heapd_safepoint(heapd_mutator *m)
{
    mutator_poll(m); /* the eviction check first */
}

static void set_state(heapd_mutator *m, uint32_t state)
{
    if (mutator_orphaned(m))
        return; /* Note [A dead daemon]: the slot is not ours any more */
    uint32_t st = atomic_load(&m->slot->status);
    atomic_store(&m->slot->status,
                 LAYOUT_STATUS(LAYOUT_STATUS_GEN(st), state));
    futex_wake_all(&m->slot->status);
}

void mutator_block(heapd_mutator *m)
{
    TSAN_REUSE_RELEASE(&m->c->tsan_reuse); /* Note [Reuse and
                                              ThreadSanitizer] */
    set_state(m, LAYOUT_MUT_BLOCKED);
}

void mutator_wait_begin(heapd_mutator *m)
{
    set_state(m, LAYOUT_MUT_WAITING);
}

/* RUNNING again; returns the stop under way then (seq_cst store then
 * seq_cst load: see the Note's "why this is safe"), none for an orphan
 * (Note [A dead daemon]). */
static uint32_t run_again(heapd_mutator *m)
{
    /* not while the agent takes segments from this blocked mutator */
    hd_mutex_lock(&m->hold);
    bool orphaned = mutator_orphaned(m);
    uint32_t st = orphaned ? 0 : atomic_load(&m->slot->status);
    bool freed = !orphaned && LAYOUT_STATUS_STATE(st) == LAYOUT_MUT_FREE;
    if (!orphaned && !freed)
        atomic_store(&m->slot->status,
                     LAYOUT_STATUS(LAYOUT_STATUS_GEN(st), LAYOUT_MUT_RUNNING));
    hd_mutex_unlock(&m->hold);
    if (freed) { /* Note [Evicted clients, client side] */
        await_slot_end(m);
        return 0;
    }
    return orphaned ? 0 : atomic_load(&m->slot->stop_request);
}

/* Note [Waiting in a barrier]: the stop under way may be a final sync that
 * counted this mutator as stopped while it waited, so it must not run on
 * before that stop's release; but a snapshot it must not take: it is
 * inside a barrier, not at a safepoint, and the snapshot waits for its
 * next one. */
void mutator_wait_end(heapd_mutator *m)
{
    uint32_t gen = run_again(m);
    if (gen != 0 && !layout_stop_is_snapshot(gen))
        take_stop(m, gen);
}

/* A blocked mutator may hold up a remark (the daemon waits for it while a
 * cycle marks): the requests it has are answered first, and those that
 * come while it is blocked are the agent's (Note [Remark requests]). */
void heapd_blocking_enter(heapd_mutator *m)
{
    if (!m)
        return;
    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    if (atomic_load_explicit(&m->remark_pending, memory_order_acquire))
        remark_service(m->c, m);
    /* Note [Minor collections in slices] in client/minor.c: heapd may
     * take the blocked mutator's roots */
    if ((m->young_flags & MUTATOR_YOUNG_PROMOTING))
        young_promote_pending(m);
    /* Note [C locals are roots] in client/stack_roots.c: the handshake
     * due first, then the capture heapd may take it with */
    if (stack_roots_wanted(m) || m->captured_last) {
        if (barrier_stack_due(m))
            barrier_stack_slow(m);
        stack_roots_capture(m);
    }
    mutator_block(m);
}

void heapd_blocking_leave(heapd_mutator *m)
{
    if (!m)
        return;
    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    take_stop(m, run_again(m));
    young_resume(m); /* Note [The preparatory push] in client/minor.c */
}

int mutator_call(heapd_mutator *m, Heapd__Envelope *req,
                 Heapd__Envelope **reply)
{
    heapd_blocking_enter(m);
    int rc = agent_call(&m->c->agent, req, reply);
    heapd_blocking_leave(m);
    return rc;
}

int mutator_request_segments(heapd_mutator *m, Heapd__SegmentKind kind,
                             uint32_t count, uint64_t bytes, uint32_t *out,
                             uint32_t max, uint32_t *run, unsigned cls,
                             uint32_t *formatted)
{
    Heapd__SegmentRequest sr = HEAPD__SEGMENT_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    uint32_t klass = cls;
    int rc;

    sr.kind = kind;
    sr.count = count;
    sr.bytes = bytes;
    if (cls < LAYOUT_NCLASSES && formatted) {
        sr.n_classes = 1;
        sr.classes = &klass;
    }
    req.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST;
    req.segment_request = &sr;
    reserve_flush_returns(m->c); /* the daemon counts them before this */
    rc = mutator_call(m, &req, &rep);
    /* Refused for the quota while the reserve holds blank segments: give
     * them back (the daemon reads the return first) and ask once more. */
    if (rc == -ENOMEM && kind != HEAPD__SEGMENT_KIND__SEGMENT_SMALL &&
        reserve_drain(m->c) > 0)
        rc = mutator_call(m, &req, &rep);
    if (rc < 0)
        return rc;
    const Heapd__SegmentGrant *g = rep->segment_grant;
    uint32_t limit = m->c->size >> m->c->seg_shift;
    rc = 0;
    if (rep->body_case != HEAPD__ENVELOPE__BODY_SEGMENT_GRANT) {
        rc = client_bad_reply(frame_body_name(&req), rep, NULL);
        goto out;
    }
    if (g->kind != kind || g->n_segments == 0 || g->n_segments > max) {
        rc = client_bad_reply(frame_body_name(&req), rep,
                              "%zu segments of kind %d, asked 1 to %u of kind %d",
                              g->n_segments, (int)g->kind, max, (int)kind);
        goto out;
    }
    for (size_t i = 0; i < g->n_segments; i++) {
        if (g->segments[i] == 0 || g->segments[i] >= limit) {
            rc = client_bad_reply(frame_body_name(&req), rep,
                                  "segment %u, outside the heap",
                                  g->segments[i]);
            goto out;
        }
        out[i] = g->segments[i];
        if (formatted) {
            uint32_t f = i < g->n_formatted ? g->formatted[i] : 0;
            formatted[i] = f != 0 && f - 1 < LAYOUT_NCLASSES ? f : 0;
        }
    }
    if (run)
        *run = g->run;
    rc = (int)g->n_segments;
out:
    heapd__envelope__free_unpacked(rep, NULL);
    return rc;
}

/* ---- attach and detach ---- */

int heapd_attach(heapd_client *c, heapd_mutator **out)
{
    return heapd_attach_opts_sized(c, NULL, 0, out);
}

/* See Note [Structs that grow] in client/abi.c. */
int heapd_attach_opts_sized(heapd_client *c, const heapd_mutator_opts *opts,
                            size_t size, heapd_mutator **out)
{
    Heapd__AttachRequest ar = HEAPD__ATTACH_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    heapd_mutator_opts own;
    heapd_mutator *m;
    int rc;

    if (!c || !out)
        return client_set_error(-EINVAL, "heapd_attach: NULL argument");
    *out = NULL;
    if (opts) {
        rc = abi_in(&own, sizeof own, opts, size, ABI_0_1_MUTATOR_OPTS,
                    "heapd_attach_opts");
        if (rc < 0)
            return rc;
        opts = &own;
        if (opts->flags & ~(HEAPD_MUTATOR_YOUNG | HEAPD_MUTATOR_PRECISE))
            return client_set_error(-EINVAL, "heapd_attach_opts: unknown "
                                    "flags 0x%x", opts->flags);
        if (opts->young_age > LAYOUT_YOUNG_AGE_MAX)
            return client_set_error(-EINVAL, "heapd_attach_opts: young_age "
                                    "%u is out of range: an object is "
                                    "promoted after 1 to %u minor "
                                    "collections", opts->young_age,
                                    LAYOUT_YOUNG_AGE_MAX);
        ar.young = (opts->flags & HEAPD_MUTATOR_YOUNG) != 0;
        ar.young_bytes = ar.young ? opts->young_size : 0;
        ar.young_age = ar.young ? opts->young_age : 0;
    }
    if (!c->ctl)
        return client_set_error(-EINVAL, "heapd_attach: a control "
                                "connection (HEAPD_CONNECT_CONTROL) has no "
                                "heap to attach to");
    req.body_case = HEAPD__ENVELOPE__BODY_ATTACH_REQUEST;
    req.attach_request = &ar;
    if ((rc = agent_call(&c->agent, &req, &rep)) < 0)
        return rc; /* -EAGAIN: no free slot */
    const Heapd__AttachReply *a = rep->attach_reply;
    if (rep->body_case != HEAPD__ENVELOPE__BODY_ATTACH_REPLY)
        rc = client_bad_reply(frame_body_name(&req), rep, NULL);
    else if (a->slot >= LAYOUT_MAX_MUTATORS || a->region >= c->mem_regions ||
             (ar.young && (a->young_bytes == 0 || a->young_age == 0 ||
                           a->young_age > LAYOUT_YOUNG_AGE_MAX)))
        rc = client_bad_reply(frame_body_name(&req), rep,
                              "slot %u, region %u, nursery budget %llu, "
                              "age %u", a->slot, a->region,
                              (unsigned long long)a->young_bytes,
                              a->young_age);
    if (rc < 0) {
        heapd__envelope__free_unpacked(rep, NULL);
        return rc;
    }
    m = calloc(1, sizeof *m);
    if (!m) {
        /* the slot is freed when this client disconnects */
        heapd__envelope__free_unpacked(rep, NULL);
        return client_set_error(-ENOMEM, "out of memory");
    }
    m->c = c;
    m->ctl = c->ctl;
    /* Note [Inline write fast path] in heapd.h */
    m->fast.phase = (const uint32_t *)&c->ctl->phase;
    hd_mutex_init(&m->hold);
    m->slot_index = rep->attach_reply->slot;
    /* Note [Client control memory] */
    m->slot = (struct layout_mutator *)(c->mem + (size_t)rep->attach_reply->region *
                                                   LAYOUT_MUTATOR_BYTES);
    /* Note [Inline allocation fast path] in heapd.h: what the function's
     * fast path reads, for the caller's */
    m->fast.runs = (struct heapd_run_ *)m->cur;
    m->fast.open = agent_gate(&c->agent);
    m->fast.zero_ymm = alloc_cpu_has_ymm();
    mutator_set_young_flags(m, 0);
    m->roots = layout_mutator_roots(m->slot);
    /* the ring's counters run on from the region's previous mutator; the
     * daemon has moved the tail up to the head */
    m->urs_head = m->urs_notified = atomic_load(&m->slot->urs_head);
    /* Note [C locals are roots] in client/stack_roots.c; a young
     * generation scans the stack too */
    m->conservative = !opts || !(opts->flags & HEAPD_MUTATOR_PRECISE);
    rc = 0;
    if (m->conservative || ar.young)
        rc = stack_base_of_self(&m->stack_base, &m->stack_limit);
    if (rc == 0 && ar.young)
        rc = young_init(m, a->young_bytes, a->young_age);
    if (rc < 0) {
        /* the slot goes with the connection */
        heapd__envelope__free_unpacked(rep, NULL);
        hd_mutex_destroy(&m->hold);
        free(m);
        return rc;
    }
    heapd__envelope__free_unpacked(rep, NULL);

    hd_mutex_lock(&c->mutators_mu);
    m->next = c->mutators;
    c->mutators = m;
    hd_mutex_unlock(&c->mutators_mu);
    /* a safepoint before the thread can touch the heap: the slot may have
     * been given out during a stop whose collector has already counted
     * this slot as free (Note [Stop the world] in daemon/gc/safepoint.c) */
    mutator_poll(m);
    /* attached while marking: the stack handshake before anything young
     * exists (Note [The preparatory push] in client/minor.c) */
    young_resume(m);
    *out = m;
    return 0;
}

/* Take M off its client's list; true if it was the last mutator. */
static bool forget(heapd_mutator *m)
{
    heapd_client *c = m->c;
    hd_mutex_lock(&c->mutators_mu);
    for (heapd_mutator **p = &c->mutators; *p; p = &(*p)->next) {
        if (*p == m) {
            *p = m->next;
            break;
        }
    }
    bool last = c->mutators == NULL;
    hd_mutex_unlock(&c->mutators_mu);
    return last;
}

void heapd_detach(heapd_mutator *m)
{
    Heapd__DetachRequest dr = HEAPD__DETACH_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;

    if (!m)
        return;
    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    young_release(m); /* first: it frees the young blocks of them all */
    alloc_release_all(m);
    dr.slot = m->slot_index;
    req.body_case = HEAPD__ENVELOPE__BODY_DETACH_REQUEST;
    req.detach_request = &dr;
    /* blocked while the daemon frees the slot: a stop never waits for a
     * mutator that is leaving.  If the daemon is gone, so is the slot. */
    heapd_blocking_enter(m);
    if (agent_call(&m->c->agent, &req, &rep) == 0)
        heapd__envelope__free_unpacked(rep, NULL);
    /* Note [Reserve sizing]: a client with no mutator holds no reserve */
    if (forget(m))
        reserve_drain(m->c);
    young_free(m);
    hd_mutex_destroy(&m->hold);
    free(m);
}

/* heapd_disconnect: the daemon frees the slots of a closed connection. */
void mutator_free_all(heapd_client *c)
{
    while (c->mutators) {
        heapd_mutator *m = c->mutators;
        c->mutators = m->next;
        young_free(m);
        free(m);
    }
}

/* ---- the root stack ---- */

/* Note [Fast paths of the calls]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * The calls a program makes most (heapd_alloc, heapd_write, and here
 * heapd_root_push, heapd_root_set and heapd_root_pop) each begin with a
 * fast path that calls nothing, so that the compiler saves few
 * callee-saved registers for it (none in these and heapd_write; four in
 * heapd_alloc, Note [Allocation fast path]): it is taken when
 * mutator_attention says no safepoint is due and no error path
 * applies, and nothing else the
 * call's general path does would act (checked mode, the stack barrier of
 * a cycle that has not marked this stack yet, a full root stack); every
 * other case goes to the general path, which checks everything again.
 * The general path's safepoint would have found nothing to do, so the
 * fast path keeps Note [Client GC discipline] in heapd.h as it is.
 * Measured on GCBench young off, whose trees are built in root slots
 * (a root call or two per allocation): 342 -> 320 ms with the root
 * calls' fast paths (median of 10 runs interleaved with the build
 * before; the rooted port, 389 -> 381 ms).
 */
static inline bool root_calm(const heapd_mutator *m)
{
    return !mutator_attention(m) && !CHECKED(m->c) && !barrier_stack_due(m);
}

/* Each of these takes its safepoint on entry, REF parked through it, and
 * only then changes the stack (Note [Client GC discipline] in heapd.h). */
static __attribute__((noinline)) size_t root_push_general(heapd_mutator *m,
                                                          void *ref)
{
    bool parked = false;
    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    if (mutator_orphaned(m)) { /* Note [A dead daemon] */
        errno = client_errno(mutator_orphan_error(m));
        return (size_t)-1;
    }
    /* Note [Checked mode]; its own young objects are the mutator's */
    if (CHECKED(m->c) && !young_is_mine(m, ref))
        checked_object(m->c, ref, true, "heapd_root_push", "REF");
    mutator_enter(m, ref, &parked);
    size_t i = m->depth;
    if (i == LAYOUT_MAX_ROOTS) {
        if (parked)
            barrier_unpark(m);
        client_set_error(-ENOMEM, "the root stack is full (%u roots): pop "
                         "roots a caller no longer needs, or keep many "
                         "objects under one", LAYOUT_MAX_ROOTS);
        errno = ENOMEM;
        return (size_t)-1;
    }
    atomic_store_explicit(&m->roots[i], ref, memory_order_relaxed);
    m->depth = i + 1;
    atomic_store_explicit(&m->slot->root_depth, m->depth, memory_order_release);
    if (parked)
        barrier_unpark(m);
    return i;
}

int mutator_closed(const heapd_mutator *m)
{
    if (!mutator_orphaned(m))
        return 0;
    int rc = mutator_orphan_error(m);
    errno = client_errno(rc);
    return rc;
}

const struct layout_control *mutator_control(const heapd_mutator *m)
{
    return m->ctl;
}

uint64_t mutator_client_id(const heapd_mutator *m)
{
    return m->c->client_id;
}

/* Note [Pushing roots without a safepoint]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A library call handed several references (heapd_map_put's map, key
 * and value) must root them all before its first allocation; pushed one
 * by one with heapd_root_push, the first push's safepoint would end the
 * life of the others, which only C locals held (the map test's iteration
 * read freed values, one run in three).  mutator_roots_push pushes them
 * together and takes no safepoint: like a write barrier it runs only the
 * stack barrier (Note [Stack marking handshake]), whose wait no snapshot
 * passes, so the values are covered as a stored reference is: reachable
 * at the snapshot, or allocated black.  Returns the first slot, or
 * (size_t)-1 with errno ENOMEM (the stack is full) or the daemon's
 * error. */
size_t mutator_roots_push(heapd_mutator *m, void *const *refs, size_t n)
{
    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    if (mutator_orphaned(m)) { /* Note [A dead daemon] */
        errno = client_errno(mutator_orphan_error(m));
        return (size_t)-1;
    }
    for (size_t k = 0; k < n; k++) /* Note [Checked mode] */
        if (CHECKED(m->c) && !young_is_mine(m, refs[k]))
            checked_object(m->c, refs[k], true, "heapd_root_push", "REF");
    size_t i = m->depth;
    if (n > LAYOUT_MAX_ROOTS - i) {
        client_set_error(-ENOMEM, "the root stack is full (%u roots): pop "
                         "roots a caller no longer needs, or keep many "
                         "objects under one", LAYOUT_MAX_ROOTS);
        errno = ENOMEM;
        return (size_t)-1;
    }
    if (barrier_stack_due(m))
        barrier_stack_slow(m);
    for (size_t k = 0; k < n; k++)
        atomic_store_explicit(&m->roots[i + k], refs[k], memory_order_relaxed);
    m->depth = i + n;
    atomic_store_explicit(&m->slot->root_depth, m->depth, memory_order_release);
    return i;
}

size_t heapd_root_push(heapd_mutator *m, void *ref)
{
    size_t i = m->depth;
    if (__builtin_expect(root_calm(m) && i < LAYOUT_MAX_ROOTS, 1)) {
        atomic_store_explicit(&m->roots[i], ref, memory_order_relaxed);
        m->depth = i + 1;
        atomic_store_explicit(&m->slot->root_depth, m->depth,
                              memory_order_release);
        return i;
    }
    return root_push_general(m, ref);
}

static __attribute__((noinline)) void
root_set_general(heapd_mutator *m, size_t slot, void *ref)
{
    bool parked = false;
    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    if (mutator_orphaned(m))
        return; /* Note [A dead daemon] */
    /* Note [Checked mode]; its own young objects are the mutator's */
    if (CHECKED(m->c) && !young_is_mine(m, ref))
        checked_object(m->c, ref, true, "heapd_root_set", "REF");
    mutator_enter(m, ref, &parked);
    if (slot < m->depth)
        atomic_store_explicit(&m->roots[slot], ref, memory_order_relaxed);
    if (parked)
        barrier_unpark(m);
}

void heapd_root_set(heapd_mutator *m, size_t slot, void *ref)
{
    if (__builtin_expect(root_calm(m) && slot < m->depth, 1)) {
        atomic_store_explicit(&m->roots[slot], ref, memory_order_relaxed);
        return;
    }
    root_set_general(m, slot, ref);
}

void *heapd_root_get(heapd_mutator *m, size_t slot)
{
    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    if (slot >= m->depth || mutator_orphaned(m)) /* Note [A dead daemon] */
        return NULL;
    return atomic_load_explicit(&m->roots[slot], memory_order_relaxed);
}

/* The safepoint before the slots go: what they held stays valid until the
 * caller's next safepoint.  Popping first and polling after let a
 * snapshot see a stack without them, and a value the caller then stored
 * into a wide object (whose barrier logs only what it overwrites) was
 * swept (the discipline test, 16 to 66 verifier failures in 15 s). */
static __attribute__((noinline)) void root_pop_general(heapd_mutator *m,
                                                       size_t n)
{
    bool parked = false;
    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    mutator_enter(m, NULL, &parked);
    m->depth = n >= m->depth ? 0 : m->depth - n;
    if (mutator_orphaned(m))
        return; /* Note [A dead daemon] */
    atomic_store_explicit(&m->slot->root_depth, m->depth, memory_order_release);
}

void heapd_root_pop(heapd_mutator *m, size_t n)
{
    if (__builtin_expect(root_calm(m), 1)) {
        m->depth = n >= m->depth ? 0 : m->depth - n;
        atomic_store_explicit(&m->slot->root_depth, m->depth,
                              memory_order_release);
        return;
    }
    root_pop_general(m, n);
}

size_t heapd_root_depth(const heapd_mutator *m)
{
    return m->depth;
}

/* ---- collections ---- */

static int collect_call(heapd_client *c, heapd_mutator *m, int flags)
{
    Heapd__CollectRequest cr = HEAPD__COLLECT_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    int rc;

    if (flags & ~HEAPD_COLLECT_WAIT)
        return client_set_error(-EINVAL, "unknown collect flags 0x%x",
                                (unsigned)flags);
    cr.wait = (flags & HEAPD_COLLECT_WAIT) != 0;
    /* Note [Reserve sizing] in client/reserve.c: a program that waits for
     * a collection gives its reserve and its current segments back first,
     * for that cycle's purge */
    if (m && cr.wait) {
        if (!m->young_flags) /* a nursery's are its minor collections' */
            alloc_release_current(m);
        reserve_drain(c);
        reserve_flush_returns(c);
    }
    req.body_case = HEAPD__ENVELOPE__BODY_COLLECT_REQUEST;
    req.collect_request = &cr;
    rc = m ? mutator_call(m, &req, &rep) : agent_call(&c->agent, &req, &rep);
    if (rc < 0)
        return rc;
    if (rep->body_case != HEAPD__ENVELOPE__BODY_COLLECT_DONE)
        rc = client_bad_reply(frame_body_name(&req), rep, NULL);
    heapd__envelope__free_unpacked(rep, NULL);
    /* and what a refill out at the drain brought meanwhile */
    if (rc == 0 && m && cr.wait)
        reserve_settle(m);
    return rc;
}

int heapd_collect(heapd_mutator *m, int flags)
{
    if (!m)
        return client_set_error(-EINVAL, "heapd_collect: NULL mutator");
    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    return collect_call(m->c, m, flags);
}

int heapd_request_collect(heapd_client *c, int flags)
{
    if (!c)
        return client_set_error(-EINVAL, "heapd_request_collect: NULL client");
    return collect_call(c, NULL, flags);
}
