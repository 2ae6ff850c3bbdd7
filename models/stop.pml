/* models/stop.pml: the stop-the-world handshake (snapshot and final sync
 * stops), with RUNNING and BLOCKED mutators, blocking_enter/leave races,
 * attach during a stop, and a client that dies at any step.
 *
 * Models Note [Stop the world] (daemon/safepoint.c), Note [Waiting for acks]
 * (ibid.), Note [Spinning through a pause] and mutator_stop_slow /
 * heapd_blocking_enter / heapd_blocking_leave (client/mutator.c), Note
 * [Mutator slots] (proto/layout.h: status = state | acked generation), and
 * free_slot / session_closed (daemon/session.c: a closed connection's slots
 * are set FREE by the loop thread, safepoint_free_slot).
 *
 * Abstractions (each one is what the code relies on, not a shortcut):
 *   - Promela is sequentially consistent; the words it models (stop_request,
 *     status) are accessed with seq_cst atomics in the code.  The relaxed
 *     load in mutator_poll's fast path only delays noticing a stop, as a
 *     later poll would; the slow path re-loads seq_cst.
 *   - futex_wait(w, v) sleeps only while *w == v, and every store to a
 *     futex word is followed by a wake, so a sleep is modelled as blocking
 *     until the word changes (a guard).  Spinning first (Note [Waiting for
 *     acks], Note [Spinning through a pause]) changes timing only.
 *   - "Touching the heap" is one atomic step of a RUNNING mutator between
 *     safepoints; heapd_alloc, root changes and global calls poll first.
 *
 * Properties:
 *   (S1) while the daemon is in its stopped section (step 3: snapshot or
 *        final sync work), no mutator touches the heap: asserted both by
 *        the daemon when it enters the section and by a mutator each time
 *        it touches the heap;
 *   (S2) nobody waits forever: spin's invalid-end-state check (the daemon
 *        never waits for a dead or detached client; a stopped mutator is
 *        always released; all processes reach their end).
 *
 * Mutants (spin -D...), each must produce an error:
 *   BUG_LEAVE_LOAD_FIRST  blocking_leave loads stop_request before it
 *                         stores RUNNING (the store->load order the Note's
 *                         "why this is safe" needs): S1 fails.
 *   BUG_NO_WAIT           a mutator acks a stop and runs on without
 *                         waiting for the release: S1 fails.
 *   BUG_FREE_NOT_STOPPED  the daemon does not count a FREE slot as stopped
 *                         (waits for a dead client): S2 fails (deadlock).
 */

#define NM      2       /* mutator slots */
#define NSTOPS  3       /* stops the daemon makes: snapshot, final sync, snapshot */
#define NOPS    2       /* heap operations / blocking regions per mutator */

#define FREE    0
#define RUNNING 1
#define BLOCKED 2
#define ST(g, s)    ((g) * 4 + (s))     /* LAYOUT_STATUS */
#define STATE(x)    ((x) % 4)           /* LAYOUT_STATUS_STATE */
#define GEN(x)      ((x) / 4)           /* LAYOUT_STATUS_GEN */

byte stop_request;          /* control->stop_request: 0 or the generation */
byte status[NM];            /* slot->status */
bool stopped;               /* ghost: daemon is in its stopped section */
bool touching[NM];          /* ghost: mutator i is touching the heap */
bool kill[NM];              /* the client of slot i is killed (kill -9) */
bool dead[NM];              /* ... and its thread has stopped running */
bool finished[NM];          /* the mutator detached and returned */

/* slot_stopped() in daemon/safepoint.c */
#ifdef BUG_FREE_NOT_STOPPED
#define SLOT_STOPPED(st, g) (STATE(st) == BLOCKED || GEN(st) == g)
#else
#define SLOT_STOPPED(st, g) (STATE(st) != RUNNING || GEN(st) == g)
#endif

active proctype Daemon()
{
    byte g = 0, i;
    do
    :: g < NSTOPS ->
        g++;                        /* (h->stop_gen % MASK) + 1: never 0 */
        stop_request = g;           /* 1. seq_cst store */
        /* 2. every slot: load status until stopped; a sleep on the futex
         * is a guard on the word changing (Note [Waiting for acks]) */
        for (i : 0 .. NM - 1) {
            SLOT_STOPPED(status[i], g)
        }
        /* 3. the world is stopped */
        atomic {
            stopped = true;
            for (i : 0 .. NM - 1) {
                assert(!touching[i])    /* S1 */
            }
        }
        stopped = false;
        stop_request = 0            /* 4. release, wake all */
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
    fi
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

proctype Mutator(byte i; bool attached)
{
    byte sg, st, n = 0;
    {
        if
        :: attached -> skip
        :: else ->
            /* handle_attach (loop thread, maybe during a stop): RUNNING
             * with ack 0, which is never a generation */
            status[i] = ST(0, RUNNING)
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
            :: /* mutator_call, a full URS ring, a stack being marked by
                * the daemon: a blocking region */
                st = status[i];                        /* blocking_enter */
                status[i] = ST(GEN(st), BLOCKED);
                /* blocked: must not touch the heap */
                st = status[i];                        /* blocking_leave */
#ifdef BUG_LEAVE_LOAD_FIRST
                sg = stop_request;
                status[i] = ST(GEN(st), RUNNING);
                if
                :: sg == 0 || GEN(st) == sg -> skip
                :: else ->
                    status[i] = ST(sg, RUNNING);
                    (stop_request != sg)
                fi;
#else
                status[i] = ST(GEN(st), RUNNING);     /* seq_cst store... */
                stop_slow(i);                          /* ...then seq_cst load */
#endif
                touch(i)
            fi
        :: else -> break
        od;
        /* heapd_detach: blocking_enter, then the daemon frees the slot */
        st = status[i];
        status[i] = ST(GEN(st), BLOCKED);
        atomic { status[i] = ST(0, FREE); finished[i] = true }
    } unless {
        /* killed at any step, waiting included: the thread runs no more */
        kill[i] -> atomic { touching[i] = false; dead[i] = true }
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
        run Mutator(0, true);
        run Mutator(1, false);
        run Loop(0);
        run Loop(1)
    }
}
