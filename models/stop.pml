/* models/stop.pml: the stop-the-world handshake with a stop word per
 * slot, its two kinds of stop (a snapshot and a final sync), parking a
 * stop that a slot is late for, and the three states of a live mutator
 * (RUNNING, BLOCKED, and WAITING inside a write barrier), with
 * blocking_enter/leave races, attach during a stop, and a client that dies
 * at any step.
 *
 * Models Note [Stop the world], Note [Parking a stop], Note [Waiting for
 * acks] and Note [Waiting in a barrier] (daemon/gc/safepoint.c:
 * safepoint_stop with SAFEPOINT_SNAPSHOT or SAFEPOINT_FINAL_SYNC, ask_all,
 * ask_slot, wait_slot, look_at_slot, slot_stopped, wait_parked,
 * safepoint_release), grant_slot and grant_free_slot (daemon/grant.c:
 * attach copies heap->stop_raised into the new slot's word and records
 * its owner in owners[i].client_id, both under heap->lock; a freed slot
 * is no longer attached and has no owner), Note [Spinning through a
 * pause] and take_stop / run_again / mutator_stop_slow / mutator_block /
 * mutator_wait_begin / mutator_wait_end / heapd_blocking_leave
 * (client/mutator.c), the barrier waits urs_wait_room and
 * barrier_stack_slow (client/barrier.c, Note [Straddling a cycle]), and
 * Note [Mutator slots] (proto/layout.h: status = state | acked
 * generation; a stop's kind is its generation's parity, odd for a
 * snapshot).
 *
 * Abstractions (each one is what the code relies on) and bounds:
 *   - Promela is sequentially consistent; the words it models
 *     (stop_request[i], status[i]) are accessed with seq_cst atomics in
 *     the code.  The relaxed load in mutator_poll's fast path only delays
 *     noticing a stop, as a later poll would; the slow path re-loads
 *     seq_cst.
 *   - heap->lock: ask_all (raise, park's release, release), the parked
 *     wait's release of one slot (wait_parked: the owner test and
 *     ask_slot(h, i, 0)) and grant_slot / grant_free_slot hold it for
 *     their whole update, so each is one atomic step here; stop_raised is
 *     read and written only under it.  look_at_slot (the status and the
 *     owner, in the slot's reader section) is one step too, and the
 *     parked wait's look and its locked release are two.
 *   - futex_wait(w, v) sleeps only while *w == v, and every store to a
 *     futex word is followed by a wake, so a sleep is modelled as blocking
 *     until the word changes (a guard).  Spinning first (Note [Waiting for
 *     acks], Note [Spinning through a pause]) changes timing only.
 *   - Time: stall_warn is abstracted away.  Waiting for a slot that is not
 *     stopped yet, the daemon may at any moment decide it is late (at most
 *     MAXPARKS times a run) and park the stop; it then waits for the
 *     stalled slots with no deadline, as the code does, letting each go
 *     the moment it stops, in any order (the code looks at them in turn
 *     and sleeps on the first one still late, or PARKED_LOOK_NS).
 *   - "Touching the heap" is one atomic step of a RUNNING mutator between
 *     safepoints; heapd_alloc, root changes and global calls poll first.
 *   - `marking` is control->phase == MARK (barrier_on): set by the
 *     snapshot, cleared by the final sync, both in their stopped sections.
 *     A barrier waits only while marking (it does nothing otherwise); its
 *     wait ends when marking is over, or earlier when the daemon has
 *     served it (`served`: moved the ring's tail, or marked the stack,
 *     during concurrent marking: the daemon may or may not).
 *   - Client ids (owners[i].client_id, `owner` here): 1 and 2 for the
 *     first clients of slots 0 and 1, 3 for the client that attaches to
 *     slot 1 once its first one left it; 0 for a free slot.  Only slot 1
 *     is attached again (grant_slot takes any free slot; the park's
 *     stalled slot may be either, and slot 1 can be the late one or a
 *     later one).  Freeing zeroes the stop word here (the code leaves it;
 *     grant_slot sets it anew) to keep the state space small.  Eviction
 *     is a kill: the daemon frees the slot of a client that runs no more.
 *   - At most one client dies a run (either one, at any step, or none):
 *     one death reaches every path a dead client takes, and a second one
 *     doubled the state space for the same paths in the other slot.
 *
 * The model starts in a cycle's concurrent marking; the stops are its
 * final sync, the next snapshot and that cycle's final sync, so a mutator
 * can wait in a barrier from one cycle's marking, across its final sync,
 * into the next snapshot, and every wait for marking to end can end.  Two
 * slots: slot 0 attached from the start, slot 1 attaching at any moment
 * (heapd_attach polls before it returns); each mutator does up to NOPS
 * heap operations, blocking regions or barriers, then detaches.  Once
 * slot 1's first client left it (detached, or killed and freed), a third
 * client may attach to it, a park under way included; it lives as long
 * as the heap and takes every stop asked of it (NewOwner).  The daemon
 * parks at most MAXPARKS (1) of its stops, in any of the three.
 *
 * Leaving a barrier wait (mutator_wait_end): after storing RUNNING, the
 * mutator loads its stop word once and takes that stop only if it is a
 * final sync (which may have counted it stopped while it waited, and be
 * doing its work); a snapshot under way it leaves to its next safepoint,
 * since that snapshot cannot have counted it.  take_stop takes only stops
 * of the kind it started with, so a snapshot raised right after the
 * final sync's release is not acked inside the barrier either.
 *
 * Properties:
 *   (S1) while the daemon is in its stopped section (snapshot or final
 *        sync work), no mutator touches the heap: asserted by a mutator
 *        each time it touches the heap (one step; the section is an
 *        interval of the daemon's steps, so a touch inside it is a step
 *        taken while `stopped`);
 *   (S2) no snapshot's stopped section is entered while a mutator is inside
 *        a write barrier (heapd_write, heapd_cas, heapd_global_set's
 *        store), waiting or not: asserted by the daemon (Note [Waiting in
 *        a barrier]: a mutator's epoch changes only at its safepoints);
 *   (S3) nobody waits forever: spin's invalid-end-state check (the daemon
 *        never waits for a dead or detached client, nor a final sync for a
 *        mutator waiting in a barrier for marking to end, nor a park for a
 *        stalled slot that stopped, nor for a slot attached again since
 *        the park, whose new owner was never asked; a stopped mutator is
 *        always released; all processes reach their end);
 *   (P1) while a stop is parked, a slot stalled with its owner is still
 *        asked for it until the park lets it go: each load of its stop
 *        word by that owner's mutator (at a safepoint, in take_stop,
 *        leaving a blocking region or a barrier wait) reads nonzero, so it
 *        stops at its next safepoint and the park ends: asserted by the
 *        mutator at each such load;
 *   (P2) reachability, checked by building with -DREACH_RELEASED_RUNS,
 *        which must produce an error: a mutator that acked the parked stop
 *        and was released by the park touches the heap while the other
 *        slot is still stalled, i.e. a late slot does not hold the others
 *        in the stop.  (That every released mutator can always go on is a
 *        liveness property this safety model does not state; the release
 *        writes 0 into the released slots' words, and no wait of a
 *        mutator is on a word that is 0.)
 *   (P3) when the parked wait ends, no slot's word holds the parked stop:
 *        asserted by the daemon.  A stalled slot freed and attached again
 *        between the park's look and its release (ask_all(h, 0,
 *        stalled)) gives its new owner stop_raised, the parked
 *        generation; the parked wait lets such a slot go too, under
 *        heap->lock, whoever owns it.  (The first version let go only the
 *        recorded owner's: the new owner acked the parked stop and waited,
 *        held by the park for as long as any other slot stalled, named by
 *        nobody.  The model found it; BUG_PARK_KEEPS_NEW_OWNER is that
 *        version.)
 *
 * Mutants (spin -D...), each must produce an error:
 *   BUG_LEAVE_LOAD_FIRST  blocking_leave loads its stop word before it
 *                         stores RUNNING (the store->load order the Note's
 *                         "why this is safe" needs): S1 fails.
 *   BUG_NO_WAIT           a mutator acks a stop and runs on without
 *                         waiting for the release: S1 fails.
 *   BUG_FREE_NOT_STOPPED  the daemon does not count a slot with no client
 *                         (freed, or never attached) as stopped: S3 fails
 *                         (it waits for a dead client).
 *   BUG_SNAPSHOT_PASSES_WAITING  a snapshot counts a WAITING mutator as
 *                         stopped, as it does a BLOCKED one (the barriers
 *                         before Note [Waiting in a barrier], which waited
 *                         BLOCKED): S2 fails.
 *   BUG_SYNC_WAITS_WAITING  a final sync waits for a WAITING mutator as
 *                         for a running one: S3 fails (the barrier waits
 *                         for marking to end, the sync for the barrier).
 *   BUG_RESUME_IGNORES_SYNC  leaving a barrier wait takes no stop at all:
 *                         S1 fails (it runs inside the final sync that
 *                         counted it stopped).
 *   BUG_RESUME_TAKES_ANY_STOP  leaving a barrier wait takes any stop under
 *                         way, a snapshot too, as heapd_blocking_leave
 *                         does: S2 fails (the wait ends when the final
 *                         sync ends marking; the next snapshot is raised
 *                         before the mutator runs again; it acks it inside
 *                         the barrier).
 *   BUG_TAKE_STOP_ANY_KIND  take_stop's loop takes a stop of the other kind
 *                         too (the word reloaded after a final sync's
 *                         release holds the next snapshot): S2 fails (a
 *                         barrier wait's end acks the snapshot).
 *   BUG_REASK_SAME_GEN    the re-raise after a park asks the parked
 *                         generation again: a slot the park released,
 *                         which acked it and runs, counts as stopped: S1
 *                         fails.
 *   BUG_RELEASE_STALLED   the park releases the stalled slots too, and
 *                         then waits for them: P1 fails (the stalled slot
 *                         is no longer asked; in this model every mutator
 *                         ends by detaching, so the park does end and S3
 *                         holds, but a mutator that only polls would never
 *                         stop).
 *   BUG_PARK_RELEASE_UNSTOPPED  the parked wait lets a slot that stopped
 *                         go with ask_all(h, 0, NULL), every slot's word,
 *                         instead of ask_slot for that slot: the other
 *                         stalled slot, not stopped yet, is let go too,
 *                         still stalled: P1 fails.
 *   BUG_PARK_WAITS_NEW_OWNER  the parked wait does not compare the slot's
 *                         owner with the one recorded at the park: it
 *                         waits for a re-attached slot's new owner, who
 *                         was attached while stop_raised was 0, was never
 *                         asked the parked stop and never acks it: S3
 *                         fails (a deadlock).
 *   BUG_PARK_KEEPS_NEW_OWNER  the parked wait lets go only a slot of the
 *                         owner recorded at the park (the first version
 *                         of wait_parked): P3 fails.
 *   BUG_PARK_ENDS_STOPPED  the park ends the stop (the stopped section
 *                         follows it without the re-raise), as if the
 *                         stalled slots were still held once stopped: S1
 *                         fails, every slot was let go.
 *   BUG_ATTACH_NO_RAISED  grant_slot does not copy stop_raised: a slot
 *                         attached during a stop is not asked for it.
 *                         S3 fails first, with MAXPARKS 0 as well: slot 1,
 *                         attached again during a stop, is found not
 *                         stopped and waited for (stalled, if the daemon
 *                         parks), and its client, which takes only stops
 *                         asked of it, never acks.  (Before the third
 *                         client was modelled, P1 failed: the stalled new
 *                         slot's word read 0; or, with MAXPARKS 0, S1.)
 *
 * Not a mutant: take_stop returning when its wait for stop g's release is
 * ended by the re-raise g' (Note [Parking a stop]), instead of acking g' at
 * once (BUG_TAKE_STOP_NO_LOOP) verifies: that wake is reachable (a slot
 * acks g, the park lets it go and asks again before it reloads its word),
 * but the mutator then runs with its status acking g, which does not count
 * as stopped for g', and acks g' at its next safepoint.  The loop only saves
 * the re-raised stop that wait (which, for a slow safepoint, could make
 * it late and park again).
 */

#define NM       2      /* mutator slots */
#define NSTOPS   3      /* stops: final sync, snapshot, final sync */
#define NOPS     2      /* heap operations / blocking regions / barriers per mutator */
#define MAXPARKS 1      /* parks a run */

#define FREE    0
#define RUNNING 1
#define BLOCKED 2
#define WAITING 3
#define ST(g, s)    ((g) * 4 + (s))     /* LAYOUT_STATUS */
#define STATE(x)    ((x) % 4)           /* LAYOUT_STATUS_STATE */
#define GEN(x)      ((x) / 4)           /* LAYOUT_STATUS_GEN */

#define SNAPSHOT    0                   /* SAFEPOINT_SNAPSHOT */
#define FINAL_SYNC  1                   /* SAFEPOINT_FINAL_SYNC */
#define KIND(g)     (1 - (g) % 2)       /* layout_stop_is_snapshot: odd */

byte stop_request[NM];      /* slot->stop_request: 0 or the generation */
byte stop_raised;           /* heap->stop_raised, under heap->lock */
bool attached[NM];          /* heap_slot_attached: the daemon's record */
byte status[NM];            /* slot->status */
bool marking = true;        /* control->phase == MARK: a cycle is marking */
bool served;                /* the daemon served the barriers this cycle */
bool stopped;               /* ghost: daemon is in its stopped section */
byte parked;                /* ghost: the generation parked, or 0 */
bool stalled[NM];           /* the daemon's stalled set (owners[i].stall_since) */
byte owner[NM];             /* heap->owners[i].client_id: 0, or a client */
byte park_owner[NM];        /* the owner when slot i was stalled, or 0 */
bool heap_closed;           /* ghost: the daemon made its last stop */
bool in_barrier[NM];        /* ghost: mutator i is inside a write barrier */
bool kill[NM];              /* the client of slot i is killed (kill -9) */
bool dead[NM];              /* ... and its thread has stopped running */
bool finished[NM];          /* the mutator detached and returned */

/* wait_slot's "stopped" in daemon/gc/safepoint.c: not attached (freed, or
 * never attached: heap_slot_enter fails), or slot_stopped(st, g, kind) */
#if defined(BUG_SNAPSHOT_PASSES_WAITING)
#define WAITING_STOPPED(k)  true
#elif defined(BUG_SYNC_WAITS_WAITING)
#define WAITING_STOPPED(k)  false
#else
#define WAITING_STOPPED(k)  ((k) == FINAL_SYNC)
#endif
#ifdef BUG_FREE_NOT_STOPPED
#define DETACHED_STOPPED(i) false
#else
#define DETACHED_STOPPED(i) (!attached[i])
#endif
#define SLOT_STOPPED(i, g, k) \
    (DETACHED_STOPPED(i) || \
     (attached[i] && \
      ((STATE(status[i]) == RUNNING && GEN(status[i]) == (g)) || \
       STATE(status[i]) == BLOCKED || \
       (STATE(status[i]) == WAITING && WAITING_STOPPED(k)))))

/* look_at_slot(h, i, owner, ...) in the parked wait: stopped, freed, or
 * attached again since the park (another owner, who was never asked) */
#ifdef BUG_PARK_WAITS_NEW_OWNER
#define LOOK_STOPPED(i, g, k)   SLOT_STOPPED(i, g, k)
#else
#define LOOK_STOPPED(i, g, k) \
    (SLOT_STOPPED(i, g, k) || owner[i] != park_owner[i])
#endif

/* ask_all(h, gen, keep): under heap->lock (the caller's d_step),
 * heap->stop_raised = gen and every attached slot not kept is asked for
 * gen (0: released) */
inline ask_all(gen, keep_stalled)
{
    stop_raised = gen;
    for (i : 0 .. NM - 1) {
        if
        :: attached[i] && !(keep_stalled && stalled[i]) ->
            stop_request[i] = gen
        :: else -> skip
        fi
    }
    i = 0
}

/* wait_parked: stalled slot J, if look_at_slot with the owner recorded
 * at the park finds it stopped (or freed, or attached again), is named
 * no more and, under heap->lock, if it still has that owner, let go (its
 * word 0: ask_slot(h, j, 0)).  The look and the locked release are two
 * steps, as in the code. */
inline let_go(j)
{
    stalled[j] && LOOK_STOPPED(j, g, k) ->
    d_step {
        stalled[j] = false;
#ifdef BUG_PARK_RELEASE_UNSTOPPED
        ask_all(0, false);
#else
        /* whoever has the slot now (a new owner attached between the
         * park's look and its release got the parked stop) */
        if
#ifdef BUG_PARK_KEEPS_NEW_OWNER
        :: owner[j] == park_owner[j] -> stop_request[j] = 0
#else
        :: attached[j] -> stop_request[j] = 0
#endif
        :: else -> skip
        fi;
#endif
        park_owner[j] = 0
    }
}

proctype Daemon()
{
    byte g = 0, n = 0, i, late, parks = 0;
    bit k;
    do
    :: n < NSTOPS ->
        n++;
        if
        :: n % 2 == 1 -> k = FINAL_SYNC
        :: else -> k = SNAPSHOT
        fi;
        /* the next generation of this kind's parity (never 0) */
        g++;
        if
        :: KIND(g) != k -> g++
        :: else -> skip
        fi;
        do
        :: true ->
            d_step { ask_all(g, false) };     /* 1. raise */
            /* 2. every slot in turn: load status until stopped; a sleep
             * on the futex is a guard on the word changing (Note [Waiting
             * for acks]); or, while it is not stopped, it is late */
            late = NM;
            i = 0;
            do
            :: i == NM -> break
            :: i < NM && SLOT_STOPPED(i, g, k) -> i++
            :: i < NM && parks < MAXPARKS && !SLOT_STOPPED(i, g, k) ->
                late = i; break
            od;
            i = 0;
            if
            :: late == NM -> break
            :: else -> skip
            fi;
            /* Note [Parking a stop]: every slot from the late one on that
             * is attached and not stopped now is stalled, and its owner
             * recorded (one step a slot: the load of owners[i].client_id
             * and look_at_slot with it)... */
            parks++;
            for (i : late .. NM - 1) {
                d_step {
                    if
                    :: attached[i] && !SLOT_STOPPED(i, g, k) ->
                        stalled[i] = true; park_owner[i] = owner[i]
                    :: else -> skip
                    fi
                }
            }
            i = 0;
            /* ...the others are released, the stalled ones kept... */
#ifdef BUG_RELEASE_STALLED
            d_step { ask_all(0, false); parked = g };
#else
            d_step { ask_all(0, true); parked = g };
#endif
            /* ...and wait_parked waits for the stalled ones, no deadline,
             * letting each go the moment it stops (in any order: the code
             * looks at them in turn, and sleeps on the first one late) */
            do
            :: let_go(0)
            :: let_go(1)
            :: atomic {
                   !stalled[0] && !stalled[1] ->
                   /* P3 */
                   assert(stop_request[0] == 0 && stop_request[1] == 0);
                   parked = 0; late = 0; break
               }
            od;
#ifdef BUG_PARK_ENDS_STOPPED
            break;
#endif
            /* asked again under a new generation of the same kind */
#ifndef BUG_REASK_SAME_GEN
            g = g + 2
#endif
        od;
        /* 3. the world is stopped */
        atomic {
            stopped = true;
            for (i : 0 .. NM - 1) {
                assert(k != SNAPSHOT || !in_barrier[i])     /* S2 */
            }
            i = 0;
            if
            :: k == SNAPSHOT -> marking = true; served = false
            :: else -> marking = false      /* marking is complete */
            fi
        };
        stopped = false;
        d_step { ask_all(0, false) };   /* 4. release, wake all */
        /* concurrent marking: the daemon may consume the rings and mark
         * the stacks the barriers wait for, or not get to them */
        if
        :: k == SNAPSHOT -> served = true
        :: skip
        fi
    :: else -> break
    od;
    heap_closed = true
}

/* Mutator c loads its stop word into sg: checked against P1 (a slot
 * stalled with owner c is still asked while its stop is parked). */
inline load_word(i)
{
    atomic {
        sg = stop_request[i];
        assert(sg != 0 || parked == 0 || !stalled[i] ||
               park_owner[i] != c)                      /* P1 */
    }
}

/* ...for take_stop, which keeps the kind of the stop it starts with */
inline load_stop(i)
{
    atomic {
        sg = stop_request[i];
        assert(sg != 0 || parked == 0 || !stalled[i] ||
               park_owner[i] != c);                     /* P1 */
        kd = KIND(sg)
    }
}

/* take_stop(m, gen) (client/mutator.c), gen in sg, loaded by the caller
 * (load_stop, which also keeps its kind in kd): while sg is a stop of the
 * kind it started with, ack it unless acked, wait while the word still
 * holds it, and reload the word (a stop re-asked under a new generation
 * while it waited is taken at once).  The tests on sg and on the slot's
 * own status (which only this mutator writes while it lives) are folded
 * into the step before them. */
inline take_stop(i)
{
    do
#ifdef BUG_TAKE_STOP_ANY_KIND
    :: atomic { sg == 0 -> sg = 0; kd = 0; break }
    :: atomic { sg != 0 && GEN(status[i]) == sg -> sg = 0; kd = 0; break }
    :: atomic { sg != 0 && GEN(status[i]) != sg ->
#else
    :: atomic { sg == 0 || KIND(sg) != kd -> sg = 0; kd = 0; break }
    :: atomic { sg != 0 && KIND(sg) == kd && GEN(status[i]) == sg ->
           sg = 0; kd = 0; break }
    :: atomic { sg != 0 && KIND(sg) == kd && GEN(status[i]) != sg ->
#endif
           status[i] = ST(sg, RUNNING)      /* ack: seq_cst store, wake */
       };
#ifndef BUG_NO_WAIT
        (stop_request[i] != sg);            /* Note [Spinning through a pause] */
#endif
#ifdef BUG_TAKE_STOP_NO_LOOP
        atomic { sg = 0; kd = 0; break }    /* returns, whatever woke it */
#else
        load_word(i)                        /* the reload */
#endif
    od
}

/* mutator_poll, then mutator_stop_slow: the fast path's load, then the
 * slow path's */
inline poll(i)
{
    if
    :: atomic {
           stop_request[i] != 0 -> skip
       };
        load_stop(i);
        take_stop(i)
    :: atomic {
           stop_request[i] == 0 ->
               assert(parked == 0 || !stalled[i] ||
                      park_owner[i] != c)               /* P1 */
       }
    fi
}

/* set_state (client/mutator.c): a new state, the same ack.  Only the
 * mutator writes its live slot's status, so the load and the store are
 * one step. */
inline set_state(i, s)
{
    status[i] = ST(GEN(status[i]), s)
}

/* A heap operation: one step while RUNNING, checked against S1 (and,
 * with REACH_RELEASED_RUNS, against P2's reachability).  One step is
 * enough: the daemon's stopped section is an interval of its steps, so a
 * touch anywhere inside it is a step taken while `stopped`. */
inline touch(i)
{
    assert(!stopped)                    /* S1 */
#ifdef REACH_RELEASED_RUNS
    ;
    assert(!(parked != 0 && GEN(status[i]) == parked &&
             stalled[1 - i]))           /* P2: reachable, must fail */
#endif
}

/* mutator_wait_end: run_again (RUNNING, seq_cst store, then one seq_cst
 * load of the word), then the stop loaded if it is a final sync. */
inline wait_leave(i)
{
    set_state(i, RUNNING);
    load_stop(i);
#if defined(BUG_RESUME_TAKES_ANY_STOP)
    take_stop(i)                        /* any stop, as blocking_leave */
#elif defined(BUG_RESUME_IGNORES_SYNC)
    sg = 0; kd = 0
#else
    if
    :: sg != 0 && KIND(sg) == FINAL_SYNC -> take_stop(i)
    :: else -> sg = 0; kd = 0           /* none, or a snapshot: it waits */
    fi
#endif
}

proctype Mutator(byte i; byte c; bool attached_at_start)
{
    byte sg, kd, n = 0;
    {
        if
        :: attached_at_start -> skip
        :: else ->
            /* grant_slot (loop thread, maybe during a stop), under
             * heap->lock: RUNNING with ack 0, which is never a
             * generation, asked for the stop under way; heapd_attach
             * polls before it returns */
            d_step {
                attached[i] = true;
                owner[i] = c;
                status[i] = ST(0, RUNNING);
#ifndef BUG_ATTACH_NO_RAISED
                stop_request[i] = stop_raised
#endif
            };
            poll(i)
        fi;
        do
        :: n < NOPS ->
            n++;
            if
            :: /* heapd_alloc, root push/set/pop, global calls: poll, then
                * touch the heap */
                poll(i);
                touch(i)
            :: /* mutator_call, heapd_blocking_enter/leave, growing the
                * root stack: a blocking region */
                set_state(i, BLOCKED);          /* blocking_enter */
                /* blocked: must not touch the heap */
#ifdef BUG_LEAVE_LOAD_FIRST
                load_stop(i);                   /* blocking_leave */
                set_state(i, RUNNING);
#else
                set_state(i, RUNNING);  /* run_again: seq_cst store... */
                load_stop(i);           /* ...then seq_cst load */
#endif
                take_stop(i);
                touch(i)
            :: /* heapd_write / heapd_cas / heapd_global_set's store: not a
                * safepoint; the barrier logs (maybe waiting), then the
                * store: the touch after the wait */
                if
                :: atomic { marking -> in_barrier[i] = true };
                    /* a full ring, or the daemon marking the stack:
                     * mutator_wait_begin */
                    set_state(i, WAITING);
                    (!marking || served);       /* the wait */
                    wait_leave(i)               /* mutator_wait_end */
                :: atomic { !marking -> in_barrier[i] = true }
                    /* barrier off, or room in the ring */
                fi;
                atomic { touch(i); in_barrier[i] = false }
            fi
        :: else -> break
        od;
        /* heapd_detach: blocking_enter, then the daemon frees the slot
         * (grant_free_slot, under heap->lock) */
        set_state(i, BLOCKED);
        d_step {
            attached[i] = false; owner[i] = 0; status[i] = ST(0, FREE);
            stop_request[i] = 0; finished[i] = true
        }
    } unless {
        /* killed at any step, waiting included: the thread runs no more */
        kill[i] -> d_step {
            in_barrier[i] = false; dead[i] = true;
            sg = 0; kd = 0
        }
    }
}

/* Client C attaches to slot I once its first client left it (detached,
 * or killed and its slot freed: grant_slot takes a free slot), a stop
 * or a park under way included, and polls before heapd_attach returns.
 * It then lives as long as the heap: it touches the heap after each
 * stop it takes, and takes every stop asked of it (a running mutator
 * reaches a safepoint; its polls that find no stop change nothing, so
 * they are one guard on its word).  It is never killed and never
 * blocks: a wait for it ends only when it acks. */
proctype NewOwner(byte i; byte c)
{
    byte sg, kd;
    d_step {
        !attached[i] && (finished[i] || dead[i]) ->
        attached[i] = true;
        owner[i] = c;
        status[i] = ST(0, RUNNING);
#ifndef BUG_ATTACH_NO_RAISED
        stop_request[i] = stop_raised
#endif
    };
    poll(i);
    touch(i);
    do
    :: heap_closed -> break
    :: atomic { stop_request[i] != 0 -> skip };
        load_stop(i);
        take_stop(i);
        touch(i)
    od
}

/* One client may be killed, at any moment, or none; the loop thread
 * then sees its socket close and frees the slot (session_closed ->
 * grant_free_slot, under heap->lock).  One death a run reaches every
 * path a dead client takes; a second one would only take the same paths
 * for the other slot. */
proctype Loop()
{
    byte i;
    if
    :: atomic { !finished[0] -> i = 0; kill[0] = true }
    :: atomic { !finished[1] -> i = 1; kill[1] = true }
    :: skip
    fi;
    if
    :: kill[i] ->
        dead[i];
        /* its own slot only: one never attached may be another's now */
        d_step {
            if
            :: owner[i] == i + 1 ->
                attached[i] = false; owner[i] = 0; status[i] = ST(0, FREE);
                stop_request[i] = 0
            :: else -> skip
            fi;
            i = 0
        }
    :: else -> skip
    fi
}

init {
    atomic {
        /* slot 0 attached before the first stop; slot 1 attaches at any
         * moment, during a stop included */
        attached[0] = true;
        owner[0] = 1;
        status[0] = ST(0, RUNNING);
        status[1] = ST(0, FREE);
        run Daemon();
        run Mutator(0, 1, true);
        run Mutator(1, 2, false);
        run NewOwner(1, 3);
        run Loop()
    }
}
