/* models/stop.pml: the stop-the-world handshake, its two kinds of stop
 * (a snapshot and a final sync) and the three states of a live mutator
 * (RUNNING, BLOCKED, and WAITING inside a write barrier), with
 * blocking_enter/leave races, attach during a stop, and a client that dies
 * at any step.
 *
 * Models Note [Stop the world], Note [Waiting for acks] and Note [Waiting
 * in a barrier] (daemon/safepoint.c: safepoint_stop with SAFEPOINT_SNAPSHOT
 * or SAFEPOINT_FINAL_SYNC, slot_stopped), Note [Spinning through a pause]
 * and mutator_stop_slow / mutator_block / mutator_wait_begin /
 * mutator_wait_end (client/mutator.c), the barrier waits urs_wait_room and
 * barrier_stack_slow (client/barrier.c, Note [Straddling a cycle]), Note
 * [Mutator slots] (proto/layout.h: status = state | acked generation), and
 * free_slot / session_closed (daemon/session.c: a closed connection's slots
 * are set FREE by the loop thread, safepoint_free_slot).
 *
 * Abstractions (each one is what the code relies on, not a shortcut):
 *   - Promela is sequentially consistent; the words it models (stop_request,
 *     stop_kind, status) are accessed with seq_cst atomics in the code.  The
 *     relaxed load in mutator_poll's fast path only delays noticing a stop,
 *     as a later poll would; the slow path re-loads seq_cst.
 *   - futex_wait(w, v) sleeps only while *w == v, and every store to a
 *     futex word is followed by a wake, so a sleep is modelled as blocking
 *     until the word changes (a guard).  Spinning first (Note [Waiting for
 *     acks], Note [Spinning through a pause]) changes timing only.
 *   - "Touching the heap" is one atomic step of a RUNNING mutator between
 *     safepoints; heapd_alloc, root changes and global calls poll first.
 *   - `marking` is control->phase == MARK (barrier_on): set by the
 *     snapshot, cleared by the final sync, both in their stopped sections.
 *     A barrier waits only while marking (it does nothing otherwise); its
 *     wait ends when marking is over, or earlier when the daemon has
 *     served it (`served`: moved the ring's tail, or marked the stack,
 *     during concurrent marking: the daemon may or may not).
 *
 * The model starts in a cycle's concurrent marking; the stops are its
 * final sync, the next snapshot and that cycle's final sync, so a mutator
 * can wait in a barrier from one cycle's marking, across its final sync,
 * into the next snapshot, and every wait for marking to end can end.  Two
 * slots: slot 0 attached from the start, slot 1 attaching at any moment
 * (heapd_attach polls before it returns); each mutator does up to NOPS
 * heap operations, blocking regions or barriers, then detaches.
 *
 * Leaving a barrier wait (see the last mutant and docs/hardening.md):
 * after storing RUNNING, the mutator takes a stop under way only if it is
 * a final sync (which may have counted it stopped while it waited, and be
 * doing its work); a snapshot under way it leaves to its next safepoint,
 * since that snapshot cannot have counted it.  For that the mutator reads
 * the stop's kind, control->stop_kind here, which the daemon stores
 * before stop_request; the code carries it in stop_request itself, as
 * the parity of the generation (layout_stop_is_snapshot), which is the
 * same information in one load.  mutator_wait_end in client/mutator.c;
 * taking any stop there is the mutant BUG_RESUME_TAKES_ANY_STOP.
 *
 * Properties:
 *   (S1) while the daemon is in its stopped section (snapshot or final
 *        sync work), no mutator touches the heap: asserted both by the
 *        daemon when it enters the section and by a mutator each time it
 *        touches the heap;
 *   (S2) no snapshot's stopped section is entered while a mutator is inside
 *        a write barrier (heapd_write, heapd_cas, heapd_global_set's
 *        store), waiting or not: asserted by the daemon (Note [Waiting in
 *        a barrier]: a mutator's epoch changes only at its safepoints);
 *   (S3) nobody waits forever: spin's invalid-end-state check (the daemon
 *        never waits for a dead or detached client, nor a final sync for a
 *        mutator waiting in a barrier for marking to end; a stopped
 *        mutator is always released; all processes reach their end).
 *
 * Mutants (spin -D...), each must produce an error:
 *   BUG_LEAVE_LOAD_FIRST  blocking_leave loads stop_request before it
 *                         stores RUNNING (the store->load order the Note's
 *                         "why this is safe" needs): S1 fails.
 *   BUG_NO_WAIT           a mutator acks a stop and runs on without
 *                         waiting for the release: S1 fails.
 *   BUG_FREE_NOT_STOPPED  the daemon does not count a FREE slot as stopped
 *                         (waits for a dead client): S3 fails (deadlock).
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
 */

#define NM      2       /* mutator slots */
#define NSTOPS  3       /* stops: final sync, snapshot, final sync */
#define NOPS    2       /* heap operations / blocking regions / barriers per mutator */

#define FREE    0
#define RUNNING 1
#define BLOCKED 2
#define WAITING 3
#define ST(g, s)    ((g) * 4 + (s))     /* LAYOUT_STATUS */
#define STATE(x)    ((x) % 4)           /* LAYOUT_STATUS_STATE */
#define GEN(x)      ((x) / 4)           /* LAYOUT_STATUS_GEN */

#define SNAPSHOT    0                   /* SAFEPOINT_SNAPSHOT */
#define FINAL_SYNC  1                   /* SAFEPOINT_FINAL_SYNC */
#define KIND(g)     ((g) % 2)           /* stop g: 1 final sync, 2 snapshot, 3 final sync */

byte stop_request;          /* control->stop_request: 0 or the generation */
bit stop_kind;              /* the kind of the last stop requested */
byte status[NM];            /* slot->status */
bool marking = true;        /* control->phase == MARK: a cycle is marking */
bool served;                /* the daemon served the barriers this cycle */
bool stopped;               /* ghost: daemon is in its stopped section */
bool touching[NM];          /* ghost: mutator i is touching the heap */
bool in_barrier[NM];        /* ghost: mutator i is inside a write barrier */
bool kill[NM];              /* the client of slot i is killed (kill -9) */
bool dead[NM];              /* ... and its thread has stopped running */
bool finished[NM];          /* the mutator detached and returned */

/* slot_stopped(st, g, kind) in daemon/safepoint.c */
#if defined(BUG_SNAPSHOT_PASSES_WAITING)
#define WAITING_STOPPED(k)  true
#elif defined(BUG_SYNC_WAITS_WAITING)
#define WAITING_STOPPED(k)  false
#else
#define WAITING_STOPPED(k)  ((k) == FINAL_SYNC)
#endif
#ifdef BUG_FREE_NOT_STOPPED
#define FREE_STOPPED        false
#else
#define FREE_STOPPED        true
#endif
#define SLOT_STOPPED(st, g, k) \
    ((STATE(st) == RUNNING && GEN(st) == (g)) || STATE(st) == BLOCKED || \
     (STATE(st) == WAITING && WAITING_STOPPED(k)) || \
     (STATE(st) == FREE && FREE_STOPPED))

proctype Daemon()
{
    byte g = 0, i;
    bit k;
    do
    :: g < NSTOPS ->
        g++;                        /* (h->stop_gen % MASK) + 1: never 0 */
        k = KIND(g);
        stop_kind = k;              /* the kind, then the request */
        stop_request = g;           /* 1. seq_cst store */
        /* 2. every slot: load status until stopped; a sleep on the futex
         * is a guard on the word changing (Note [Waiting for acks]) */
        for (i : 0 .. NM - 1) {
            SLOT_STOPPED(status[i], g, k)
        }
        /* 3. the world is stopped */
        atomic {
            stopped = true;
            for (i : 0 .. NM - 1) {
                assert(!touching[i]);                       /* S1 */
                assert(k != SNAPSHOT || !in_barrier[i])     /* S2 */
            }
            if
            :: k == SNAPSHOT -> marking = true; served = false
            :: else -> marking = false      /* marking is complete */
            fi
        };
        stopped = false;
        stop_request = 0;           /* 4. release, wake all */
        /* concurrent marking: the daemon may consume the rings and mark
         * the stacks the barriers wait for, or not get to them */
        if
        :: k == SNAPSHOT -> served = true
        :: skip
        fi
    :: else -> break
    od
}

/* mutator_stop_slow (client/mutator.c) */
inline stop_slow(i)
{
    sg = stop_request;
    st = status[i];
    if
    :: sg == 0 || GEN(st) == sg -> skip
    :: else ->
        status[i] = ST(sg, RUNNING);    /* ack: seq_cst store, wake */
#ifndef BUG_NO_WAIT
        (stop_request != sg)            /* Note [Spinning through a pause] */
#endif
    fi;
    sg = 0; st = 0
}

/* set_state (client/mutator.c): a new state, the same ack.  Only the
 * mutator writes its live slot's status, so the load and the store are
 * one step. */
inline set_state(i, s)
{
    atomic { st = status[i]; status[i] = ST(GEN(st), s); st = 0 }
}

/* A heap operation: one step while RUNNING, checked against S1. */
inline touch(i)
{
    atomic {
        assert(!stopped);               /* S1 */
        touching[i] = true
    }
    touching[i] = false
}

/* Leaving a barrier wait: RUNNING again (seq_cst store), then the stop
 * under way, if it is a final sync (see the header). */
inline wait_leave(i)
{
    set_state(i, RUNNING);
#if defined(BUG_RESUME_TAKES_ANY_STOP)
    stop_slow(i);                       /* taking any stop, as blocking_leave */
#elif defined(BUG_RESUME_IGNORES_SYNC)
    skip;
#else
    /* the generation, then its kind: a kind read after the release of SG
     * may be the next stop's, and then SG is over anyway; so the mutator
     * acks SG itself, not whatever stop_request holds by then */
    sg = stop_request;
    if
    :: sg != 0 && GEN(status[i]) != sg && stop_kind == FINAL_SYNC ->
        status[i] = ST(sg, RUNNING);
        (stop_request != sg)
    :: else -> skip                     /* none, or a snapshot: it waits */
    fi;
    sg = 0;
#endif
    skip
}

proctype Mutator(byte i; bool attached)
{
    byte sg, st, n = 0;
    {
        if
        :: attached -> skip
        :: else ->
            /* handle_attach (loop thread, maybe during a stop): RUNNING
             * with ack 0, which is never a generation; heapd_attach polls
             * before it returns */
            status[i] = ST(0, RUNNING);
            if
            :: stop_request != 0 -> stop_slow(i)
            :: else -> skip
            fi
        fi;
        do
        :: n < NOPS ->
            n++;
            if
            :: /* heapd_alloc, root push/set/pop, global calls: poll, then
                * touch the heap */
                if
                :: stop_request != 0 -> stop_slow(i)   /* mutator_poll */
                :: else -> skip
                fi;
                touch(i)
            :: /* mutator_call, heapd_blocking_enter/leave, growing the
                * root stack: a blocking region */
                set_state(i, BLOCKED);                 /* blocking_enter */
                /* blocked: must not touch the heap */
#ifdef BUG_LEAVE_LOAD_FIRST
                sg = stop_request;                     /* blocking_leave */
                set_state(i, RUNNING);
                if
                :: sg == 0 || GEN(status[i]) == sg -> skip
                :: else ->
                    status[i] = ST(sg, RUNNING);
                    (stop_request != sg)
                fi;
                sg = 0;
#else
                set_state(i, RUNNING);     /* blocking_leave: seq_cst store... */
                stop_slow(i);              /* ...then seq_cst load */
#endif
                touch(i)
            :: /* heapd_write / heapd_cas / heapd_global_set's store: not a
                * safepoint; the barrier logs (maybe waiting), then the
                * store: the touch after the wait */
                in_barrier[i] = true;
                if
                :: marking ->
                    /* a full ring, or the daemon marking the stack:
                     * mutator_wait_begin */
                    set_state(i, WAITING);
                    (!marking || served);              /* the wait */
                    wait_leave(i)                      /* mutator_wait_end */
                :: else -> skip     /* barrier off, or room in the ring */
                fi;
                touch(i);
                in_barrier[i] = false
            fi
        :: else -> break
        od;
        /* heapd_detach: blocking_enter, then the daemon frees the slot */
        set_state(i, BLOCKED);
        atomic { status[i] = ST(0, FREE); finished[i] = true }
    } unless {
        /* killed at any step, waiting included: the thread runs no more */
        kill[i] -> atomic { touching[i] = false; in_barrier[i] = false; dead[i] = true }
    }
}

/* The client of slot i may be killed at any moment; the loop thread then
 * sees its socket close and frees the slot (session_closed -> free_slot ->
 * safepoint_free_slot). */
proctype Loop(byte i)
{
    if
    :: atomic { !finished[i] -> kill[i] = true };
        dead[i];
        status[i] = ST(0, FREE)
    :: skip
    fi
}

init {
    atomic {
        /* slot 0 attached before the first stop; slot 1 attaches at any
         * moment, during a stop included */
        status[0] = ST(0, RUNNING);
        status[1] = ST(0, FREE);
        run Daemon();
        run Mutator(0, true);
        run Mutator(1, false);
        run Loop(0);
        run Loop(1)
    }
}
