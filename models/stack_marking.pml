/* models/stack_marking.pml: the root-stack marking handshake between the
 * mutators and the daemon's concurrent mark and final sync.
 *
 * Models Note [Stack marking handshake] and Note [Straddling a cycle]
 * (client/barrier.c: barrier_stack_slow, barrier_log, urs_wait_room), the
 * daemon's mark_stack / mark_roots / mark_urs (daemon/mark.c), Note
 * [Collection cycle] (daemon/collector.c: snapshot resets the stack words
 * and empties the rings; concurrent mark; final sync reads every ring,
 * marks every stack still unmarked and drains with a budget, going back to
 * concurrent marking when it runs out; then sweep), Note [Update
 * remembered set] (a ring per slot, read by the loop thread meanwhile and
 * by free_slot when a client dies), Note [Filtering the barrier] and Note
 * [Epoch-tagged marks] (allocation is black).  The handshake comes from the
 * seed stack-dirtiness-concurrent-marking.txt.
 *
 * Abstractions:
 *   - The stop protocol is models/stop.pml; here a stop is: the daemon
 *     raises `stop` and waits until no mutator is in_heap; a mutator leaves
 *     the heap at a safepoint or a blocking region and comes back only
 *     while no stop is raised.  A dead client's slot counts as stopped
 *     once the loop thread has freed it.
 *   - The object write barrier (Note [Snapshot write barrier], issue 5) is
 *     one atomic step that marks the overwritten value directly (it is
 *     logged and read before marking ends); this model is about stacks.
 *   - Sequentially consistent memory: the stack words, epoch and phase are
 *     seq_cst in the code, the ring head is published with release.
 *   - A URS ring holds CAP entries, so a mutator logging its stack can
 *     find it full and wait, blocked, across a final sync (the case the
 *     final sync's mark_stack(..., true) exists for) or a whole cycle.
 *
 * Heap: objects 1..3 (0 is NULL), one reference field each.  Mutator 0's
 * stack holds object 1, mutator 1's object 2, object 3 is free.  Each
 * mutator does up to NOPS of: allocate and push, store its top root into
 * the field of the object below... (heapd_write), set root 0 to the top
 * root, pop, push the top root's field; and may be killed at any step.
 *
 * Properties:
 *   (K1) when marking ends (end of the final sync, sweep about to start),
 *        every object reachable from a live mutator's stack is marked with
 *        the epoch: asserted in the daemon;
 *   (K2) no mutator ever holds a reference to a freed object (sweep freed
 *        nothing live): asserted at every root read;
 *   (K3) nobody waits forever: invalid end states (the daemon never waits
 *        for a mutator's stack; a mutator waiting for the daemon's mark is
 *        released by the mark or the next epoch).
 *
 * KNOWN BUG found by this model (2026-11-30, left for the code's owner):
 *   heapd_root_push(m, ref) runs barrier_stack(m) before it stores REF, and
 *   barrier_stack_slow may block (waiting for the daemon's stack_marked, or
 *   for room in a full ring).  A blocked mutator holds up no stop, so the
 *   final sync, the sweep and the next snapshot can all pass meanwhile
 *   (Note [Straddling a cycle]).  An object allocated black in the old
 *   cycle and reachable only from the caller's C local is then pushed after
 *   the new cycle marked the stack: it is never marked and the next sweep
 *   frees a rooted object (K1 fails; spin finds it in ~2 cycles).  The
 *   same holds for heapd_root_set, and for heapd_write's VAL when the
 *   object barrier waits for ring room.  The comment in heapd_root_push
 *   ("root first, then the safepoint: REF may be reachable from nothing
 *   else") shows the intent.  A fix: publish REF in slot->pending_root
 *   before the barrier (barrier_stack_slow logs it, trace_stack marks it),
 *   as grow_roots already does (-DFIX_PENDING_ROOT here).
 *
 * STATUS (2026-11-30): work in progress, NOT run by scripts/model-check.
 *   With -DCYCLES=1 spin still reports a K1 violation (depth 122, after
 *   22.6M states), not analysed yet; it may be a modelling error.  The
 *   three mutants below do fail as expected.
 *
 * Mutants (spin -D...), each must produce an error:
 *   BUG_NO_WAIT            a mutator that loses the CAS to the daemon goes
 *                          on without waiting for stack_marked: K1 fails;
 *   BUG_MARKED_EARLY       the daemon sets stack_marked before tracing
 *                          (Note: "only then sets stack_marked"): K1 fails;
 *   BUG_SYNC_SKIPS_STACKS  the final sync does not mark stacks still
 *                          unmarked (a mutator blocked half-way through
 *                          logging its own): K1 fails.
 */

#define NM      2
#define NOBJ    4       /* objects 1..3; index 0 is NULL */
#define DEPTH   2       /* root slots per mutator */
#define CAP     1       /* URS ring entries per mutator */
#ifndef CYCLES
#define CYCLES  2
#endif
#define NOPS    3       /* operations of mutator 0 */
#define NOPS1   0       /* operations of mutator 1 */

#define IDLE    0
#define MARK    1
#define SWEEP   2

byte epoch = 1;             /* control->epoch: cycle 0 is complete */
byte phase = IDLE;          /* control->phase */
bool stop;                  /* a stop is raised (models/stop.pml) */
bool in_heap[NM];           /* mutator i runs between safepoints */
bool lock;                  /* h->lock */

bool freed[NM];             /* slot status FREE */
byte stack_marking[NM];
byte stack_marked[NM];
byte depth[NM];
byte stk[NM * DEPTH];       /* root slots */
byte pending[NM];           /* slot->pending_root */
byte urs[NM * CAP];         /* URS rings */
byte ulen[NM];

bool alive[NOBJ];           /* block allocated (mark byte != 0) */
byte mark[NOBJ];            /* mark byte: epoch of the last mark/allocation */
byte field[NOBJ];
byte grey;                  /* bit o: object o is queued for scanning */

bool kill[NM];
bool dead[NM];

/* mark_one + seed: mark REF and queue it */
inline mark_ref(r)
{
    if
    :: r != 0 && alive[r] && mark[r] != epoch ->
        mark[r] = epoch;
        grey = grey | (1 << r)
    :: else -> skip
    fi
}

/* mark_urs(h, j, i): read ring i; mark its entries if marking */
inline consume(i)
{
    if
    :: phase == MARK ->
        for (q : 0 .. CAP - 1) {
            if
            :: q < ulen[i] -> mark_ref(urs[i * CAP + q])
            :: else -> skip
            fi
        }
    :: else -> skip         /* h->marking == NULL: dropped */
    fi;
    for (q : 0 .. CAP - 1) { urs[i * CAP + q] = 0 }
    ulen[i] = 0
}

/* ---- the daemon ---- */

inline stop_world()
{
    stop = true;
    (!in_heap[0] && !in_heap[1])
}

/* mark_stack (daemon/mark.c).  Called with the heap lock held, so the loop
 * thread cannot free the slot meanwhile. */
inline mark_stack(i, stopped)
{
    if
    :: freed[i] || stack_marked[i] == epoch -> skip
    :: else ->
        old = stack_marking[i];
        won = true;
        if
        :: stopped -> stack_marking[i] = epoch
        :: else ->
            atomic {
                if
                :: old != epoch && stack_marking[i] == old ->
                    stack_marking[i] = epoch
                :: else -> won = false  /* the mutator marks it */
                fi
            }
        fi;
        if
        :: won ->
#ifdef BUG_MARKED_EARLY
            stack_marked[i] = epoch;
#endif
            /* trace_stack: the depth, then each root, one load a step */
            r = pending[i]; mark_ref(r);
            d = depth[i];
            k = 0;
            do
            :: k < d -> r = stk[i * DEPTH + k]; mark_ref(r); k++
            :: else -> break
            od;
            /* "marked only once every root is" */
            stack_marked[i] = epoch
        :: else -> skip
        fi
    fi
}

/* K1: with the world stopped at the end of marking */
inline check_marked()
{
    d_step {
        reach = 0;
        for (q : 0 .. NM - 1) {
            if
            :: !freed[q] ->
                reach = reach | (1 << pending[q]);
                for (k : 0 .. DEPTH - 1) {
                    if
                    :: k < depth[q] -> reach = reach | (1 << stk[q * DEPTH + k])
                    :: else -> skip
                    fi
                }
            :: else -> skip
            fi
        }
        reach = reach & ~1;
        /* close over fields (3 objects: 3 rounds suffice) */
        for (k : 0 .. 2) {
            for (q : 1 .. NOBJ - 1) {
                if
                :: (reach & (1 << q)) && field[q] != 0 ->
                    reach = reach | (1 << field[q])
                :: else -> skip
                fi
            }
        }
        for (q : 1 .. NOBJ - 1) {
            assert(!(reach & (1 << q)) || mark[q] == epoch)    /* K1 */
        }
        k = 0; q = 0
    }
}

active proctype Daemon()
{
    byte c, i, k, d, r, old, o, reach, q;
    bool won, done;

    for (c : 1 .. CYCLES) {
        /* snapshot (collector.c snapshot()) */
        stop_world();
        atomic {
            (!lock) -> lock = true;
            epoch++;
            for (i : 0 .. NM - 1) {
                stack_marking[i] = 0;
                stack_marked[i] = 0;
                phase = IDLE;       /* h->marking == NULL: dropped */
                consume(i)
            }
            grey = 0;
            phase = MARK;
            lock = false
        }
        stop = false;
        /* concurrent mark: mark_roots under the heap lock */
        atomic { (!lock) -> lock = true };
        for (i : 0 .. NM - 1) {
            mark_stack(i, false)
        }
        lock = false;
        do
        :: true ->
            /* the workers: scan queued objects, reading fields as
             * mutators write them */
            do
            :: grey != 0 ->
                atomic {
                    o = 1;
                    do
                    :: grey & (1 << o) -> break
                    :: else -> o++
                    od;
                    grey = grey & ~(1 << o)
                };
                r = field[o];
                mark_ref(r)
            :: else -> break
            od;
            /* final sync */
            stop_world();
            atomic { (!lock) -> lock = true };
            for (i : 0 .. NM - 1) {
                if
                :: !freed[i] ->
                    atomic { consume(i) };
#ifndef BUG_SYNC_SKIPS_STACKS
                    mark_stack(i, true)
#else
                    skip
#endif
                :: else -> skip
                fi
            }
            lock = false;
            /* mark_drain with a budget: it may run out */
            done = true;
            do
            :: grey != 0 ->
                if
                :: atomic {
                        o = 1;
                        do
                        :: grey & (1 << o) -> break
                        :: else -> o++
                        od;
                        grey = grey & ~(1 << o)
                    };
                    r = field[o];
                    mark_ref(r)
                :: done = false; break      /* budget spent */
                fi
            :: else -> break
            od;
            if
            :: done ->
                check_marked();
                phase = SWEEP;
                stop = false;
                break
            :: else ->
                stop = false        /* release; marking goes on */
            fi
        od;
        /* concurrent sweep */
        for (o : 1 .. NOBJ - 1) {
            atomic {
                if
                :: alive[o] && mark[o] != epoch ->
                    alive[o] = false; mark[o] = 0; field[o] = 0
                :: else -> skip
                fi
            }
        }
        phase = IDLE
    }
}

/* ---- the loop thread: rings and dead clients ---- */

active proctype Loop()
{
    byte i, q;
end:
    do
    :: atomic { !lock && ulen[0] > 0 -> consume(0) }   /* UrsBatch */
    :: atomic { !lock && ulen[1] > 0 -> consume(1) }
    :: atomic {
            !lock && dead[0] && !freed[0] ->
            consume(0); depth[0] = 0; pending[0] = 0; freed[0] = true; in_heap[0] = false
        }
    :: atomic {
            !lock && dead[1] && !freed[1] ->
            consume(1); depth[1] = 0; pending[1] = 0; freed[1] = true; in_heap[1] = false
        }
    od
}

/* ---- the mutators ---- */

/* a safepoint (mutator_poll) */
inline poll(i)
{
    in_heap[i] = false;
    atomic { !stop -> in_heap[i] = true }
}

/* barrier_log: filtered, and a full ring waits blocked (urs_wait_room) */
inline barrier_log(i, lr)
{
    if
    :: lr == 0 || mark[lr] == epoch -> skip   /* Note [Filtering the barrier] */
    :: else ->
        if
        :: ulen[i] >= CAP ->
            in_heap[i] = false;                  /* blocking_enter */
            (ulen[i] < CAP);                     /* the daemon moves the tail */
            atomic { !stop -> in_heap[i] = true } /* blocking_leave */
        :: else -> skip
        fi;
        if
        :: phase != MARK -> skip                 /* marking is over: dropped */
        :: else ->
            atomic {
                urs[i * CAP + ulen[i]] = lr;
                ulen[i]++
            }
        fi
    fi
}

/* barrier_stack + barrier_stack_slow */
inline barrier_stack(i)
{
    do
    :: phase == MARK && stack_marked[i] != epoch ->
        e = epoch;
        old = stack_marking[i];
        if
        :: stack_marked[i] == e -> break
        :: else -> skip
        fi;
        atomic {
            if
            :: old != e && stack_marking[i] == old ->
                stack_marking[i] = e; won = true
            :: else -> won = false
            fi
        };
        if
        :: won ->
            k = 0;
            do
            :: k < depth[i] -> lr = stk[i * DEPTH + k]; barrier_log(i, lr); k++
            :: else -> break
            od;
            lr = pending[i]; barrier_log(i, lr);
            if
            :: epoch != e -> skip      /* a new cycle began: start over */
            :: else -> stack_marked[i] = e; break
            fi
        :: else ->
#ifdef BUG_NO_WAIT
            break;
#endif
            /* the daemon is marking it: wait blocked for its word or a
             * new epoch */
            in_heap[i] = false;
            (stack_marked[i] == e || epoch != e);
            atomic { !stop -> in_heap[i] = true }
        fi
    :: else -> break
    od
}

/* K2 */
#define ROOT(i, k) stk[(i) * DEPTH + (k)]
inline use(r) { assert(r == 0 || alive[r]) }

proctype Mutator(byte i)
{
    byte n, e, old, k, lr, o, top;
    bool won;
    {
        atomic { !stop -> in_heap[i] = true };
        for (n : 1 .. (i == 0 -> NOPS : NOPS1)) {
            if
            :: depth[i] < DEPTH && !alive[3] ->
                /* heapd_alloc: poll, then a black block (none left: the
                 * operation is skipped) */
                poll(i);
                atomic {
                    if
                    :: !alive[3] ->
                        o = 3; alive[3] = true; mark[3] = epoch; field[3] = 0
                    :: else -> goto skipped
                    fi
                };
                /* heapd_root_push: barrier, root, poll.  The barrier can
                 * block (a full ring, the daemon marking the stack) while a
                 * whole cycle passes: O, held in a C local only, is then
                 * neither a root nor marked (KNOWN BUG, see the header).
                 * FIX_PENDING_ROOT publishes it in pending_root first, as
                 * grow_roots does. */
#ifdef FIX_PENDING_ROOT
                pending[i] = o;
#endif
                barrier_stack(i);
                use(o);
                ROOT(i, depth[i]) = o;
                depth[i]++;
                pending[i] = 0;
                o = 0;
                poll(i);
            skipped: skip
            :: depth[i] == 2 ->
                /* heapd_write(root 1, field, root 0): the object barrier
                 * (abstracted: Note [Snapshot write barrier]) */
                top = ROOT(i, 1);
                use(top);
                atomic {
                    if
                    :: phase == MARK -> mark_ref(field[top])
                    :: else -> skip
                    fi;
                    field[top] = ROOT(i, 0)
                };
                top = 0
            :: depth[i] == 2 ->
                /* heapd_root_set(0, root 1) */
                barrier_stack(i);
                ROOT(i, 0) = ROOT(i, 1);
                poll(i)
            :: depth[i] > 0 ->
                /* heapd_root_pop(1) */
                barrier_stack(i);
                depth[i]--;
                ROOT(i, depth[i]) = 0;
                poll(i)
            :: depth[i] == 1 && field[ROOT(i, 0)] != 0 ->
                /* heapd_read the field, heapd_root_push it */
                top = field[ROOT(i, 0)];
                use(top);
                barrier_stack(i);
                use(top);
                ROOT(i, 1) = top;
                depth[i] = 2;
                top = 0;
                poll(i)
            :: else -> skip
            fi
        };
        /* heapd_detach: blocked, the daemon frees the slot */
        in_heap[i] = false;
        dead[i] = true
    } unless {
        kill[i] -> dead[i] = true
    }
}

proctype Killer(byte i)
{
    if
    :: atomic { !dead[i] -> kill[i] = true }
    :: skip
    fi
}

init {
    atomic {
        alive[1] = true; mark[1] = 1;
        alive[2] = true; mark[2] = 1;
        ROOT(0, 0) = 1; depth[0] = 1;
        ROOT(1, 0) = 2; depth[1] = 1;
        run Mutator(0);
        run Mutator(1);
        run Killer(0);
        run Killer(1)
    }
}
