/* libheapd's side of concurrent marking: the snapshot write barrier, the
 * update remembered set, and the root-stack marking handshake.
 *
 * Note [Snapshot write barrier]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * (DESIGN.md §4; seed dirty-flags-nonmoving.txt.)  While the heap's phase
 * is MARK the collector traces the object graph as it was at the snapshot,
 * concurrently with mutators.  Every reference a field held at the snapshot
 * must reach the marker, so before the first write to an object after the
 * snapshot the mutator logs ALL of the object's reference fields to its
 * update remembered set (URS), then sets the object's dirty tag to the
 * epoch; writes to a dirty object are plain stores.  The invariant the
 * optimisation rests on, as in the seed:
 *
 *     dirty (tag == epoch)  ==>  all of its fields were logged
 *                                   (or seen marked: Note [Filtering the
 *                                   barrier]).
 *
 * It holds across processes racing on one object because a writer sets the
 * tag only after logging, with a compare-and-swap on the header: a writer
 * that sees the tag unset logs before it writes; a writer that sees it set
 * knows that someone logged every field before setting it, and any field
 * written since was logged by the writer that changed it first.  Logging
 * twice is harmless.  Objects allocated during marking are black (their mark
 * is the epoch) and carry the epoch as their tag, so writes to them are
 * free.  The phase can only change while the mutator is stopped, and
 * heapd_write is not a safepoint, so one write sees one phase, unless its
 * barrier blocks (Note [Straddling a cycle], Note [Values in flight]).  Outside
 * marking the barrier is one load and a predictable branch.
 *
 * Note [Dirty tags]
 * ~~~~~~~~~~~~~~~~~
 * A dirty tag is an epoch value in the header's top byte (Note [Objects]),
 * never bulk-cleared.  Epochs rotate through 255 values, so a tag left from
 * 255 cycles ago would make the barrier skip a first write.  The marker
 * prevents that: when it scans an object whose tag is neither 0 nor the
 * epoch, it clears the tag (compare-and-swap, so a concurrent barrier wins).
 * Every object live at a snapshot is scanned in that cycle, so by the time
 * an epoch value comes round again every live object's tag is 0 or the
 * previous epoch (see the epoch-reuse test).
 *
 * Note [Update remembered set]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Each mutator slot holds a ring of LAYOUT_URS_SIZE references in shared
 * memory.  The mutator appends at urs_head; the daemon consumes up to the
 * head and advances urs_tail.  When a quarter of a ring has accumulated,
 * the mutator sends UrsBatch{slot, head} through its client's agent thread
 * without waiting; the daemon's loop thread (and, between objects, the mark
 * workers: Note [Polling the rings]) reads the entries from the ring itself,
 * validates each
 * (Note [Validating references]) and queues it for marking.  Because the
 * entries live in shared memory, the final sync reads every ring directly
 * while mutators are stopped, and the daemon drains the ring of a client
 * that died: nothing a crashed mutator logged is lost.  Only a full ring
 * makes a mutator wait, in a blocking region, for the daemon to move the
 * tail (futex urs_wake).
 *
 * Note [Stack marking handshake]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * (Seed stack-dirtiness-concurrent-marking.txt.)  A root stack alive at the
 * snapshot must be marked after the snapshot and before it is mutated.
 * The snapshot pause resets both words of every slot; then whoever wants to
 * mark a stack first checks stack_marked == epoch (done), and otherwise
 * tries to CAS stack_marking from its old value to the epoch:
 *   - the mutator, before its first push, set or pop in the cycle: if it
 *     wins it logs every root to its URS and sets stack_marked; if the
 *     daemon holds it, it waits (blocked) until stack_marked == epoch;
 *   - the daemon, when it marks roots: if it wins it marks every root
 *     (under the heap lock, so the slot cannot be freed meanwhile) and only
 *     then sets stack_marked and wakes the mutator; if it loses it moves
 *     on: the mutator marks it, and the final sync checks it was done.
 * The daemon never waits for a mutator, so a dead client's stack holds up
 * nothing.
 *
 * Note [Straddling a cycle]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~
 * Logging can block (a full URS ring), and a blocked mutator holds up no
 * stop: a final sync, a sweep and the next snapshot may all pass while it
 * waits.  So the object barrier and the stack handshake are loops that
 * re-read the epoch after logging and start over if it changed: a tag or a
 * stack word set for the old cycle says nothing about the new one.  A
 * mutator waiting for the daemon to mark its stack also stops waiting when
 * the epoch changes (the snapshot resets the word it waits on).  Entries
 * logged after a final sync are useless and would leak stale references
 * into the next cycle: barrier_log drops them once marking is over, and the
 * snapshot pause empties every ring (Note [Collection cycle]).
 */
#include <errno.h>
#include <string.h>

#include "client_internal.h"
#include "futex.h"

/* Note [Wide objects]
 * ~~~~~~~~~~~~~~~~~~~
 * Logging all fields before the first write pays off for small objects,
 * whose later writes are then free; for an object with thousands of
 * reference fields it means thousands of entries, several full rings and
 * waits for the daemon, for one write.  An object with more than
 * BARRIER_WIDE reference fields therefore gets the plain deletion barrier
 * instead (Yuasa's, as GHC uses for arrays): every write while marking
 * logs the value it overwrites.  That keeps the snapshot too (each field's
 * snapshot value is logged by the write that first replaces it); such an
 * object is never tagged dirty.  (BARRIER_WIDE is in client_internal.h,
 * for the inline part of the barrier.)
 */

/* ---- the update remembered set ---- */

static void urs_notify(heapd_mutator *m)
{
    Heapd__UrsBatch ub = HEAPD__URS_BATCH__INIT;
    Heapd__Envelope msg = HEAPD__ENVELOPE__INIT;
    ub.slot = m->slot_index;
    ub.head = m->urs_head;
    msg.body_case = HEAPD__ENVELOPE__BODY_URS_BATCH;
    msg.urs_batch = &ub;
    agent_send(&m->c->agent, &msg); /* a dead connection: the daemon drains */
    m->urs_notified = m->urs_head;
}

/* The ring is full: make sure the daemon knows, and wait (blocked) until
 * it has consumed some. */
static void urs_wait_room(heapd_mutator *m)
{
    struct layout_mutator *s = m->slot;
    if (m->urs_notified != m->urs_head)
        urs_notify(m);
    mutator_block(m); /* may be logging a remark: no remark service here */
    for (;;) {
        uint32_t w = atomic_load(&s->urs_wake);
        if (m->urs_head - atomic_load(&s->urs_tail) < LAYOUT_URS_SIZE)
            break;
        if (agent_is_closed(&m->c->agent))
            break; /* no daemon to wait for; the slot is gone anyway */
        /* Note [Spinning through a pause] */
        futex_spin_wait(&s->urs_wake, w, MUTATOR_SPIN_NS, 100000000u);
    }
    heapd_blocking_leave(m);
}

/* Note [Filtering the barrier]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A logged reference only asks the marker to mark it.  One whose mark byte
 * already holds the epoch needs nothing: the marker sets the byte before it
 * queues or scans the object, and never unmarks it within the cycle, and a
 * block allocated black carries the epoch from birth (Note [Epoch-tagged
 * marks]).  So barrier_log leaves out references it can see are marked, as
 * GHC's nonmoving write barrier does (needs_upd_rem_set_mark in
 * rts/sm/NonMovingMark.c; seed dirty-flags-nonmoving.txt): fewer entries,
 * fewer full rings, fewer waits for the daemon.  The object barrier's
 * invariant then reads: dirty ==> every field's snapshot value was logged
 * or marked.  The check trusts nothing it reads: a reference outside the
 * heap's segments, into a segment whose advisory header does not say
 * small with a sane class, or not at the start of a block is logged as it
 * is and left to the daemon (Note [Validating references]); a stale read of
 * a byte that the marker is setting just logs once more than needed.  A
 * wrong "marked" would need the byte of the very block REF starts to hold
 * this cycle's epoch, which means that block was marked or allocated in
 * this cycle: REF's object is then marked.  Large objects are always
 * logged; they are seldom overwritten. */
static bool marked_already(const heapd_mutator *m, const void *ref)
{
    const heapd_client *c = m->c;
    uint64_t off = (uint64_t)((uintptr_t)ref - (uintptr_t)c->base);
    if (off >= c->size)
        return false;
    uint32_t i = (uint32_t)(off >> c->seg_shift);
    if (i < c->first_segment)
        return false; /* the control area */
    uint8_t *seg = client_seg_addr(c, i);
    const struct layout_segment *hd = (const struct layout_segment *)seg;
    /* Note [Segments]: the kind, then the class it makes valid */
    if (__atomic_load_n(&hd->kind, __ATOMIC_ACQUIRE) != LAYOUT_SEG_SMALL)
        return false;
    uint32_t cls = __atomic_load_n(&hd->size_class, __ATOMIC_RELAXED);
    if (cls >= LAYOUT_NCLASSES)
        return false;
    uint32_t idx = layout_small_block((uint64_t)((uint8_t *)ref - seg),
                                      c->small_first[cls],
                                      c->small_nblocks[cls],
                                      layout_class_size[cls],
                                      c->small_magic[cls]);
    return idx != UINT32_MAX &&
           __atomic_load_n(layout_seg_marks(seg) + idx, __ATOMIC_RELAXED) ==
               (uint8_t)atomic_load_explicit(&m->ctl->epoch,
                                             memory_order_relaxed);
}

void barrier_log(heapd_mutator *m, void *ref)
{
    struct layout_mutator *s = m->slot;
    if (!ref || marked_already(m, ref)) /* Note [Filtering the barrier] */
        return;
    if (m->urs_head - atomic_load_explicit(&s->urs_tail, memory_order_acquire)
        >= LAYOUT_URS_SIZE) {
        urs_wait_room(m);
        if (m->urs_head - atomic_load(&s->urs_tail) >= LAYOUT_URS_SIZE)
            return; /* connection gone */
        /* marking may have ended while this mutator was blocked: an entry
         * now would only leak into the next cycle (Note [Straddling a
         * cycle]) */
        if (!barrier_on(m))
            return;
    }
    atomic_store_explicit(&s->urs[m->urs_head % LAYOUT_URS_SIZE], ref,
                          memory_order_relaxed);
    m->urs_head++;
    atomic_store_explicit(&s->urs_head, m->urs_head, memory_order_release);
    if (m->urs_head - m->urs_notified >= LAYOUT_URS_SIZE / 4)
        urs_notify(m);
}

/* Note [Values in flight]
 * ~~~~~~~~~~~~~~~~~~~~~~~
 * The value a call is about to store (heapd_root_push and heapd_root_set's
 * REF, heapd_write's VAL, heapd_cas's DESIRED, heapd_global_set's REF)
 * often lives only in a C local: a new object, say.  Note [Client GC
 * discipline] makes that safe until the next safepoint, and these calls
 * store first and take their safepoint after.  But their barriers can
 * block, waiting for room in a full URS ring or for the daemon to finish
 * marking the stack, and a blocked mutator holds up no stop: a final sync,
 * a sweep and a new snapshot may all pass meanwhile (Note [Straddling a
 * cycle]).  The value is not reachable from the new cycle's roots, so it
 * would stay unmarked and be swept, then stored.  (Found by the spin model
 * of the stack handshake, models/stack_marking.pml.)  So:
 *   - while such a barrier runs, the value is parked in the slot's
 *     pending_root, which every marking of the stack, the daemon's
 *     (mark_stack) and the mutator's own (barrier_stack_slow), treats as a
 *     root;
 *   - a barrier for a store into the heap or a global, after which the
 *     value is no longer on any root, ends by marking the stack for the
 *     current cycle if the epoch changed while it ran (catch_up), so the
 *     parked value is in the new cycle's marking whichever side marks the
 *     stack; a store into the stack needs no more: the stack is a root;
 *   - the value is unparked after its store, where it is covered like any
 *     other stored reference (reachable at the snapshot, or allocated
 *     black).
 * Outside marking nothing is parked: the barriers do not run.
 */
static void catch_up(heapd_mutator *m, uint32_t epoch_before)
{
    if (atomic_load(&m->ctl->epoch) != epoch_before)
        barrier_stack_slow(m);
}

/* ---- the object barrier (Note [Snapshot write barrier]) ---- */

static void object_barrier(heapd_mutator *m, void *obj, void **field);

void barrier_write_slow(heapd_mutator *m, void *obj, void **field, void *val)
{
    uint32_t epoch = atomic_load(&m->ctl->epoch);
    barrier_park(m, val); /* Note [Values in flight] */
    object_barrier(m, obj, field);
    catch_up(m, epoch);
}

static void object_barrier(heapd_mutator *m, void *obj, void **field)
{
    _Atomic uint64_t *hp = (_Atomic uint64_t *)obj - 1;
    void *_Atomic *f = (void *_Atomic *)obj;

    /* Note [Wide objects]: log just the value being overwritten */
    if (layout_header_nrefs(atomic_load_explicit(hp, memory_order_relaxed)) >
        BARRIER_WIDE) {
        barrier_log(m, __atomic_load_n(field, __ATOMIC_RELAXED));
        return;
    }

    /* Note [Straddling a cycle]: logging may block, and a whole cycle may
     * end and another begin meanwhile; then log again for the new one */
    while (barrier_on(m)) {
        uint8_t epoch = (uint8_t)atomic_load(&m->ctl->epoch);
        uint64_t h = atomic_load_explicit(hp, memory_order_acquire);
        if (layout_header_tag(h) == epoch)
            return;
        size_t n = layout_header_nrefs(h);
        for (size_t k = 0; k < n; k++)
            barrier_log(m, atomic_load_explicit(&f[k], memory_order_relaxed));
        /* tag only after logging; a racing writer's tag is as good */
        while (layout_header_tag(h) != epoch &&
               !atomic_compare_exchange_weak_explicit(
                   hp, &h, layout_header_with_tag(h, epoch),
                   memory_order_release, memory_order_relaxed))
            ;
        if (atomic_load(&m->ctl->epoch) == epoch)
            return;
    }
}

/* ---- global roots (Note [Global roots]) ---- */

/* Before VAL replaces a global's *VALUE while marking: its old value is
 * logged, for every cycle the wait for ring room may straddle, since
 * another process may have just read it; VAL is parked (Note [Values in
 * flight]): barrier_unpark after the store. */
void barrier_global_slow(heapd_mutator *m, void *_Atomic *value, void *val)
{
    uint32_t epoch = atomic_load(&m->ctl->epoch);
    barrier_park(m, val);
    while (barrier_on(m)) {
        uint32_t e = atomic_load(&m->ctl->epoch);
        barrier_log(m, atomic_load(value));
        if (atomic_load(&m->ctl->epoch) == e)
            break;
    }
    catch_up(m, epoch);
}

/* ---- the root stack (Note [Stack marking handshake]) ---- */

void barrier_stack_slow(heapd_mutator *m)
{
    struct layout_mutator *s = m->slot;

    /* Note [Straddling a cycle], as for objects */
    while (barrier_on(m)) {
        uint32_t epoch = atomic_load(&m->ctl->epoch);
        uint32_t old = atomic_load(&s->stack_marking);
        if (atomic_load(&s->stack_marked) == epoch)
            return;
        if (old != epoch &&
            atomic_compare_exchange_strong(&s->stack_marking, &old, epoch)) {
            for (size_t i = 0; i < m->depth; i++)
                barrier_log(m, mutator_root_slot(m, i)[0]);
            barrier_log(m, atomic_load(&s->pending_root));
            if (atomic_load(&m->ctl->epoch) != epoch)
                continue; /* a new cycle began while we logged */
            atomic_store(&s->stack_marked, epoch);
            futex_wake_all(&s->stack_marked);
            return;
        }
        /* the daemon is marking it: wait for its word, or a new cycle */
        mutator_block(m);
        for (;;) {
            uint32_t v = atomic_load(&s->stack_marked);
            if (v == epoch || atomic_load(&m->ctl->epoch) != epoch ||
                agent_is_closed(&m->c->agent))
                break;
            /* Note [Spinning through a pause] */
            futex_spin_wait(&s->stack_marked, v, MUTATOR_SPIN_NS, 100000000u);
        }
        heapd_blocking_leave(m);
        if (agent_is_closed(&m->c->agent))
            return;
    }
}
