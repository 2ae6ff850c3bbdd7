/* libheapd's side of concurrent marking: the snapshot write barrier, the
 * update remembered set, and the root-stack marking handshake.
 *
 * Note [Snapshot write barrier]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * (After GHC's Note [Dirty flags in the non-moving collector].)  While
 * the heap's phase is MARK the collector traces the object graph as it was at the snapshot,
 * concurrently with mutators.  Every reference a field held at the snapshot
 * must reach the marker, so before the first write to an object after the
 * snapshot the mutator logs ALL of the object's reference fields to its
 * update remembered set (URS), then sets the object's dirty tag to the
 * epoch; writes to a dirty object are plain stores.  The invariant the
 * optimisation rests on, as in GHC's:
 *
 *     dirty (tag == epoch)  ==>  all of its fields were logged
 *                                   (or seen marked: Note [Filtering the
 *                                   barrier]).
 *
 * (In a save's cycle the writer that sets the tag publishes its log just
 * after: Note [Saving under the barrier], which says how the gap is
 * closed when it dies in it.)
 *
 * It holds across processes racing on one object because a writer sets the
 * tag only after logging, with a compare-and-swap on the header: a writer
 * that sees the tag unset logs before it writes; a writer that sees it set
 * knows that someone logged every field before setting it, and any field
 * written since was logged by the writer that changed it first.  Logging
 * twice is harmless.  Objects allocated during marking are black (their mark
 * is the epoch) and carry the epoch as their tag, so writes to them are
 * free.  The phase can only change while the mutator is stopped, and
 * heapd_write is not a safepoint, so one write sees one cycle, even when its
 * barrier waits (Note [Straddling a cycle]).  Outside marking the barrier
 * is one load and a predictable branch.
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
 * memory (in a save's cycle, save records too: Note [Saving under the
 * barrier]).  The mutator appends at urs_head; the daemon consumes up to the
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
 * (After GHC's Note [StgStack dirtiness flags and concurrent marking].)
 * A root stack alive at the
 * snapshot must be marked after the snapshot and before it is mutated.
 * The snapshot pause resets both words of every slot; then whoever wants to
 * mark a stack first checks stack_marked == epoch (done), and otherwise
 * tries to CAS stack_marking from its old value to the epoch:
 *   - the mutator, before its first push, set or pop in the cycle: if it
 *     wins it logs every root to its URS, its C stack's capture too (Note
 *     [C locals are roots] in client/stack_roots.c), and sets
 *     stack_marked; if the daemon holds it, it waits (blocked) until
 *     stack_marked == epoch;
 *   - the daemon, when it marks roots: if it wins it marks every root and
 *     the capture
 *     (under the heap lock, so the slot cannot be freed meanwhile) and only
 *     then sets stack_marked and wakes the mutator; if it loses it moves
 *     on: the mutator marks it, and the final sync checks it was done.
 *     It does not try while the slot's young_promoting word is set (Note
 *     [Minor collections in slices] in client/minor.c): the mutator takes
 *     it, its promotions first; the final sync's pause takes it whatever
 *     the word (isolation: a_slot_promoting_for_good_keeps_its_roots).
 * The daemon never waits for a mutator, so a dead client's stack holds up
 * nothing.
 *
 * Note [Straddling a cycle]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~
 * Logging can wait (a full URS ring), and so can the stack handshake (the
 * daemon is marking the stack).  Such a wait is WAITING, not BLOCKED
 * (Note [Waiting in a barrier] in daemon/gc/safepoint.c): a final sync may
 * pass it, a snapshot may not, so a barrier sees one epoch from start to
 * end, and the tag or stack word it sets is for the cycle it began in.
 * What a final sync passing it changes is that marking may be over when
 * the wait ends: entries logged then are useless and would leak stale
 * references into the next cycle, so barrier_log drops them once marking
 * is over, the waits end as soon as it is, and the snapshot pause empties
 * every ring anyway (Note [Collection cycle]).
 */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "agent.h"
#include "barrier.h"
#include "client.h"
#include "futex.h"
#include "heapd.h"
#include "layout.h"
#include "minor.h"
#include "mutator.h"
#include "stack_roots.h"

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
 * object is tagged dirty only in a save's cycle (Note [Saving under the
 * barrier]).  (BARRIER_WIDE is in client/barrier.h,
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

/* The ring has no room for NEED more entries: make sure the daemon knows,
 * and wait (blocked) until it has consumed enough. */
static void urs_wait_room(heapd_mutator *m, uint64_t need)
{
    struct layout_mutator *s = m->slot;
    if (m->urs_notified != m->urs_head)
        urs_notify(m);
    /* Note [Waiting in a barrier]; it may be logging a remark: no remark
     * service here */
    mutator_wait_begin(m);
    for (;;) {
        uint32_t w = atomic_load(&s->urs_wake);
        if (m->urs_head - atomic_load(&s->urs_tail) + need <= LAYOUT_URS_SIZE)
            break;
        if (!barrier_on(m))
            break; /* a final sync passed: nothing to log any more */
        /* Note [Spinning through a pause]; Note [A dead daemon] in
         * client/mutator.c: no daemon to wait for, the slot is gone */
        if (agent_wait_word(&m->c->agent, &s->urs_wake, w,
                            MUTATOR_SPIN_NS) < 0)
            break;
    }
    mutator_wait_end(m);
}

/* urs_room, when there is none yet: wait for it. */
static bool urs_room_wait(heapd_mutator *m, uint64_t need)
{
    urs_wait_room(m, need);
    return barrier_on(m) && m->urs_head - atomic_load(&m->slot->urs_tail) +
                                    need <= LAYOUT_URS_SIZE;
}

/* Room for NEED entries in M's ring, waiting for it (Note [Straddling a
 * cycle]); false if marking ended or the connection went meanwhile.  The
 * check stays in line in every barrier that logs. */
static inline bool urs_room(heapd_mutator *m, uint64_t need)
{
    if (m->urs_head - atomic_load_explicit(&m->slot->urs_tail,
                                           memory_order_acquire) +
            need <= LAYOUT_URS_SIZE)
        return true;
    return urs_room_wait(m, need);
}

/* Write the N words W and then the NFIELDS fields at FIELDS into M's
 * ring from its head on, not yet published; returns how many. */
static uint64_t urs_stage(heapd_mutator *m, const uintptr_t *w, uint64_t n,
                          void *_Atomic *fields, uint64_t nfields)
{
    void *_Atomic *ring = m->slot->urs;
    uint64_t at = m->urs_head;
    for (uint64_t k = 0; k < n; k++)
        atomic_store_explicit(&ring[(at + k) % LAYOUT_URS_SIZE],
                              (void *)w[k], memory_order_relaxed);
    for (uint64_t k = 0; k < nfields; k++)
        atomic_store_explicit(
            &ring[(at + n + k) % LAYOUT_URS_SIZE],
            atomic_load_explicit(&fields[k], memory_order_relaxed),
            memory_order_relaxed);
    return n + nfields;
}

/* Publish the N entries staged at M's ring's head. */
static void urs_commit(heapd_mutator *m, uint64_t n)
{
    m->urs_head += n;
    atomic_store_explicit(&m->slot->urs_head, m->urs_head,
                          memory_order_release);
    if (m->urs_head - m->urs_notified >= LAYOUT_URS_SIZE / 4)
        urs_notify(m);
}

/* Note [Filtering the barrier]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A logged reference only asks the marker to mark it.  One whose mark byte
 * already holds the epoch needs nothing: the marker sets the byte before it
 * queues or scans the object, and never unmarks it within the cycle, and a
 * block allocated black carries the epoch from birth (Note [Epoch-tagged
 * marks]).  So barrier_log leaves out references it can see are marked, as
 * GHC's nonmoving write barrier does (needs_upd_rem_set_mark in
 * rts/sm/NonMovingMark.c; Note [Dirty flags in the non-moving
 * collector]): fewer entries,
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

/* Log REF, with TAG (0 or LAYOUT_URS_CAPTURED) in its low bits. */
static void log_tagged(heapd_mutator *m, void *ref, uintptr_t tag)
{
    if (!ref || marked_already(m, ref)) /* Note [Filtering the barrier] */
        return;
    /* the ring is not ours any more, and nobody marks: Note [A dead
     * daemon] in client/mutator.c (a daemon that died while marking leaves
     * the phase MARK for good, and every write here) */
    if (mutator_orphaned(m))
        return;
    /* marking may have ended while this mutator waited: an entry now
     * would only leak into the next cycle (Note [Straddling a cycle]); or
     * the connection is gone */
    if (!urs_room(m, 1))
        return;
    uintptr_t w = (uintptr_t)ref | tag;
    urs_commit(m, urs_stage(m, &w, 1, NULL, 0));
}

void barrier_log(heapd_mutator *m, void *ref)
{
    log_tagged(m, ref, 0);
}

void barrier_log_captured(heapd_mutator *m, void *ref)
{
    log_tagged(m, ref, LAYOUT_URS_CAPTURED);
}

/* Note [Values in flight]
 * ~~~~~~~~~~~~~~~~~~~~~~~
 * A value handed to a call that is a safepoint and stores it
 * (heapd_root_push and heapd_root_set's REF, heapd_global_set's REF) often
 * lives only in a C local: a new object, say.  The call takes its
 * safepoint on entry (Note [Client GC discipline] in heapd.h), and a
 * snapshot taken there does not see the local; heapd_root_push may also
 * block to grow the stack, and heapd_global_set to claim a name, and a
 * whole cycle may pass meanwhile.  So, from before the safepoint until the
 * value is stored, it is parked in the slot's pending_root, which every
 * marking of the stack, the daemon's (mark_stack) and the mutator's own
 * (barrier_stack_slow), treats as a root; and after any wait the call runs
 * the stack barrier again (mutator_enter), so that the parked value is in
 * the marking of a cycle that began meanwhile whichever side marks the
 * stack.  Unparked after its store, the value is covered like any stored
 * reference: reachable at the snapshot, or allocated black.  (The hole
 * this closes was found by the spin model of the stack handshake,
 * models/stack_marking.pml.)  The write barriers need none of this: they
 * are not safepoints, and no snapshot passes them (Note [Straddling a
 * cycle]).
 */

/* Note [Saving under the barrier]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A save (Note [Saving a heap at a snapshot] in daemon/gc/save.c) copies
 * every object as it was at its cycle's snapshot while mutators write.  An
 * object whose dirty tag is not the epoch has not been written since (a
 * write comes after the tag), so the saver copies it as it finds it.  For
 * one that is, the fields it had are those its first writer read before
 * it set the tag.  So in a cycle whose epoch is the control page's
 * save_epoch the barrier of every object, wide ones too, logs a save
 * record: the object with LAYOUT_URS_SAVED, its field count, and its
 * fields unfiltered, written past the ring's head and published (the head
 * moved over them) only if this writer's compare-and-swap set the tag.  A
 * writer that loses the race had read fields that the winner may have
 * changed: its record is never published.  So each object written in the
 * cycle has at most one record, with exactly its snapshot fields, in the
 * ring of the winner, which publishes it right after its swap.  A winner
 * that dies (or is evicted) in between leaves its record staged at its
 * head: heapd marks its fields when it frees the slot (mark_staged in
 * daemon/gc/mark.c), for nothing else logged them, and the saver copies
 * that object as it finds it, and counts it.
 * Raw bytes have no barrier: they are saved as read.  The price is paid
 * in save cycles only: every first write logs its object's fields, marked
 * or not.  An object too wide to stage in the ring (more than
 * LAYOUT_URS_SIZE - LAYOUT_URS_RECORD references) is logged in chunks of
 * LAYOUT_URS_CHUNK_FIELDS fields, each published as it is written (so
 * marking has them whatever happens next), all naming the ring position
 * the first began at; the writer whose swap sets the tag then publishes a
 * commit naming that position, and heapd takes those chunks, and only
 * those, as the object's record (a mutator builds one at a time, its
 * chunks in order: anything else drops what it had built).
 */
static bool barrier_saving(const heapd_mutator *m)
{
    return atomic_load_explicit(&m->ctl->save_epoch, memory_order_relaxed) ==
           atomic_load_explicit(&m->ctl->epoch, memory_order_relaxed);
}

/* Note [Saving under the barrier]: the record of OBJ, read as H, too wide
 * to stage, in chunks and a commit. */
static void barrier_save_chunks(heapd_mutator *m, void *obj, uint64_t h)
{
    _Atomic uint64_t *hp = (_Atomic uint64_t *)obj - 1;
    void *_Atomic *f = (void *_Atomic *)obj;
    uint8_t epoch = (uint8_t)atomic_load(&m->ctl->epoch);
    uint64_t n = layout_header_nrefs(h), first = m->urs_head;
    for (uint64_t k = 0; k < n; k += LAYOUT_URS_CHUNK_FIELDS) {
        uint64_t c = n - k;
        if (c > LAYOUT_URS_CHUNK_FIELDS)
            c = LAYOUT_URS_CHUNK_FIELDS;
        if (!urs_room(m, c + LAYOUT_URS_CHUNK_HEAD))
            return; /* marking is over: nothing to log */
        /* another writer won meanwhile: these chunks are never committed */
        h = atomic_load_explicit(hp, memory_order_acquire);
        if (layout_header_tag(h) == epoch)
            return;
        uintptr_t w[LAYOUT_URS_CHUNK_HEAD] = {
            (uintptr_t)obj | LAYOUT_URS_SAVED,
            (uintptr_t)(c | LAYOUT_URS_CHUNK), (uintptr_t)first,
            (uintptr_t)k};
        urs_commit(m, urs_stage(m, w, LAYOUT_URS_CHUNK_HEAD, f + k, c));
    }
    bool won = false;
    while (layout_header_tag(h) != epoch && !won)
        won = atomic_compare_exchange_weak_explicit(
            hp, &h, layout_header_with_tag(h, epoch), memory_order_acq_rel,
            memory_order_acquire);
    if (won && urs_room(m, LAYOUT_URS_RECORD)) {
        uintptr_t w[LAYOUT_URS_RECORD] = {
            (uintptr_t)obj | LAYOUT_URS_SAVED,
            (uintptr_t)(first | LAYOUT_URS_COMMIT)};
        urs_commit(m, urs_stage(m, w, LAYOUT_URS_RECORD, NULL, 0));
    }
    /* the caller's release store to a field comes after the tag */
}

/* Note [Saving under the barrier]: OBJ's record, staged and published
 * if this writer's swap sets its tag. */
static void barrier_save_stage(heapd_mutator *m, void *obj)
{
    _Atomic uint64_t *hp = (_Atomic uint64_t *)obj - 1;
    uint8_t epoch = (uint8_t)atomic_load(&m->ctl->epoch);
    uint64_t h = atomic_load_explicit(hp, memory_order_acquire);
    uint64_t n = layout_header_nrefs(h);

    if (layout_header_tag(h) == epoch)
        return;
    if (mutator_orphaned(m))
        return; /* Note [A dead daemon] in client/mutator.c */
    if (n + LAYOUT_URS_RECORD > LAYOUT_URS_SIZE) {
        barrier_save_chunks(m, obj, h);
        return;
    }
    /* after a wait, marking may be over or another writer may have won */
    if (!urs_room(m, n + LAYOUT_URS_RECORD))
        return;
    h = atomic_load_explicit(hp, memory_order_acquire);
    uintptr_t w[LAYOUT_URS_RECORD] = {(uintptr_t)obj | LAYOUT_URS_SAVED,
                                      (uintptr_t)n};
    uint64_t staged = urs_stage(m, w, LAYOUT_URS_RECORD,
                                (void *_Atomic *)obj, n);
    bool won = false;
    while (layout_header_tag(h) != epoch && !won)
        won = atomic_compare_exchange_weak_explicit(
            hp, &h, layout_header_with_tag(h, epoch), memory_order_acq_rel,
            memory_order_acquire);
    if (won)
        urs_commit(m, staged);
    /* the caller's store to a field (a release, in heapd_write and
     * heapd_cas) comes after the tag, for a saver that reads the field
     * (acquire) and then the tag */
}

/* ---- the object barrier (Note [Snapshot write barrier]) ---- */

void barrier_write_slow(heapd_mutator *m, void *obj, void **field)
{
    _Atomic uint64_t *hp = (_Atomic uint64_t *)obj - 1;
    void *_Atomic *f = (void *_Atomic *)obj;

    /* Note [Evicted clients, client side] in client/mutator.c: before the
     * ring or a tag is written */
    mutator_check_evicted(m);

    /* Note [Saving under the barrier] */
    if (barrier_saving(m)) {
        barrier_save_stage(m, obj);
        return;
    }

    /* Note [Wide objects]: log just the value being overwritten */
    if (layout_header_nrefs(atomic_load_explicit(hp, memory_order_relaxed)) >
        BARRIER_WIDE) {
        barrier_log(m, __atomic_load_n(field, __ATOMIC_RELAXED));
        return;
    }
    uint8_t epoch = (uint8_t)atomic_load(&m->ctl->epoch);
    uint64_t h = atomic_load_explicit(hp, memory_order_acquire);
    if (layout_header_tag(h) == epoch)
        return;
    size_t n = layout_header_nrefs(h);
    for (size_t k = 0; k < n; k++)
        barrier_log(m, atomic_load_explicit(&f[k], memory_order_relaxed));
    /* tag only after logging; a racing writer's tag is as good.  Logging
     * may have waited, but not across a snapshot (Note [Straddling a
     * cycle]): the tag is this cycle's. */
    assert(atomic_load(&m->ctl->epoch) == epoch);
    while (layout_header_tag(h) != epoch &&
           !atomic_compare_exchange_weak_explicit(
               hp, &h, layout_header_with_tag(h, epoch),
               memory_order_release, memory_order_relaxed))
        ;
}

/* ---- global roots (Note [Global roots]) ---- */

/* Before a store replaces a global's *VALUE while marking: its old value
 * is logged, since another process may have just read it. */
void barrier_global_slow(heapd_mutator *m, void *_Atomic *value)
{
    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    barrier_log(m, atomic_load(value));
}

/* ---- the root stack (Note [Stack marking handshake]) ---- */

void barrier_stack_slow(heapd_mutator *m)
{
    struct layout_mutator *s = m->slot;
    uint32_t epoch = atomic_load(&m->ctl->epoch);
    uint32_t old = atomic_load(&s->stack_marking);

    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    if (!barrier_on(m) || atomic_load(&s->stack_marked) == epoch)
        return;
    if (mutator_orphaned(m))
        return; /* Note [A dead daemon] in client/mutator.c */
    if (old != epoch &&
        atomic_compare_exchange_strong(&s->stack_marking, &old, epoch)) {
        /* a young mutator's roots lead to its young objects, and the
         * shared references they hold are logged too (Note [The
         * preparatory push] in client/minor.c) */
        if (!young_push_roots(m)) {
            for (size_t i = 0; i < m->depth; i++)
                barrier_log(m, atomic_load_explicit(&m->roots[i],
                                                    memory_order_relaxed));
            barrier_log(m, atomic_load(&s->pending_root));
        }
        stack_roots_log(m); /* Note [C locals are roots] */
        /* Note [Straddling a cycle]: still this cycle */
        assert(atomic_load(&m->ctl->epoch) == epoch);
        atomic_store(&s->stack_marked, epoch);
        futex_wake_all(&s->stack_marked);
        return;
    }
    /* the daemon is marking it: wait for its word, or for marking to end
     * (a final sync marks the stack itself) */
    mutator_wait_begin(m);
    for (;;) {
        uint32_t v = atomic_load(&s->stack_marked);
        if (v == epoch || !barrier_on(m))
            break;
        /* Note [Spinning through a pause]; Note [A dead daemon] */
        if (agent_wait_word(&m->c->agent, &s->stack_marked, v,
                            MUTATOR_SPIN_NS) < 0)
            break;
    }
    mutator_wait_end(m);
}
