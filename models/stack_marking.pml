/* models/stack_marking.pml: the root-stack marking handshake between a
 * mutator and the daemon's concurrent mark and final sync, with values in
 * flight parked in the slot's pending root.
 *
 * Models Note [Stack marking handshake], Note [Straddling a cycle] and
 * Note [Values in flight] (client/barrier.c: barrier_stack_slow,
 * barrier_write_slow, object_barrier, catch_up, barrier_log, urs_wait_room;
 * client/client_internal.h: barrier_stack, barrier_write, barrier_park,
 * barrier_unpark; client/mutator.c: heapd_root_push, heapd_root_pop;
 * client/alloc.c: heapd_write), the daemon's mark_stack / trace_stack /
 * mark_roots / mark_urs (daemon/mark.c) and Note [Collection cycle]
 * (daemon/collector.c: snapshot resets the stack words and empties the
 * rings; concurrent mark; final sync reads the ring, marks the stack if
 * still unmarked and drains with a budget, going back to concurrent
 * marking when it runs out; then sweep), Note [Update remembered set],
 * Note [Filtering the barrier], Note [Snapshot write barrier] (the dirty
 * tag loop) and Note [Epoch-tagged marks] (allocation is black).  The
 * handshake comes from the seed stack-dirtiness-concurrent-marking.txt.
 *
 * Abstractions (each keeps the interleavings that matter here):
 *   - The stop protocol is models/stop.pml; here a stop is: the daemon
 *     raises `stop` and waits until the mutator is not in_heap; the
 *     mutator leaves the heap at a safepoint or a blocking region and comes
 *     back only while no stop is raised.  A dead client's slot counts as
 *     stopped once the loop thread has freed it.
 *   - Work the daemon does with the world stopped (the snapshot, the final
 *     sync with its drain and the end-of-marking check) is one atomic step:
 *     nothing a stopped or blocked mutator can do touches it.  The sweep is
 *     one atomic step too (it only frees unmarked blocks); the concurrent
 *     mark_roots keeps one step per load (its CAS, the depth, the pending
 *     root, each root slot), in the code's order, and each scan of an
 *     object (one field) is one step.
 *   - The mutator's read of the epoch, stack_marking and stack_marked and
 *     its CAS are one atomic step: the daemon's CAS in between makes the
 *     mutator's fail, as does a daemon that already won.
 *   - One mutator slot (a second slot only adds interleavings of the
 *     daemon's mark_stack with itself); the mutator can be killed at any
 *     step, blocked or not.  The loop thread consumes the ring (UrsBatch,
 *     Note [Polling the rings]) and frees a dead slot.
 *   - Sequentially consistent memory: the stack words, epoch, phase,
 *     pending root and root depth are seq_cst or release/acquire in the
 *     code.
 *   - The URS ring holds CAP (1) entries, so logging can find it full and
 *     block across a final sync or a whole cycle.
 *   - heapd_cas and heapd_global_set run the same park / barrier /
 *     catch_up / store / unpark sequence as heapd_write (barrier_global_slow
 *     logs a global's old value instead of an object's fields) and are not
 *     modelled separately.  See GROW below for heapd_root_push growing
 *     its stack.  NOT modelled: heapd_global_set's path for a new global
 *     (push REF, claim: a blocking call, then a pop without barrier_stack,
 *     possibly in a cycle whose stack marking has not run); see
 *     docs/hardening-models.md.
 *
 * Heap: objects 1..3 (0 is NULL), one reference field each.  The stack
 * holds object 1, whose field holds object 2; object 3 is free.  The
 * mutator does up to NOPS of: allocate and heapd_root_push it; allocate
 * and heapd_write it into root 0's field; heapd_write the top root into
 * root 0's field; heapd_root_set root 0 to the top root;
 * heapd_root_pop; read the top root's field and
 * heapd_root_push it.  CYCLES collection cycles run.
 *
 * Properties:
 *   (K1) when marking ends (end of the final sync, sweep about to start),
 *        every object reachable from the stack or the parked value of a
 *        live slot (through fields) is marked with the epoch;
 *   (K2) the mutator never stores or reads a freed object (asserted at
 *        every use of a reference it holds);
 *   (K3) no invalid end state: the daemon never waits for the mutator
 *        (alive, blocked or dead) to finish marking its stack, and a
 *        mutator waiting for the daemon is released.
 *
 * History: the first version of this model (commit 327d97d) found that
 * heapd_root_push/set and heapd_write stored a value held only in a C local
 * after a barrier that can block while a whole cycle passes (fixed in
 * cfe3c2c, Note [Values in flight]; -DBUG_NO_PARK below).  Its unanalysed
 * one-cycle violation was a modelling error: the daemon was an active
 * proctype and ran its snapshot and mark_roots before init had put object
 * 1 on the stack; init now starts every process atomically.
 *
 * Mutants (spin -D...), each must produce an error:
 *   BUG_NO_PARK            the code before cfe3c2c: nothing is parked and
 *                          there is no catch_up: K1 fails (the value
 *                          stored after a barrier that straddled a cycle);
 *   BUG_NO_WAIT            a mutator that loses the CAS to the daemon goes
 *                          on without waiting for stack_marked: K1 fails;
 *   BUG_MARKED_EARLY       the daemon sets stack_marked before tracing
 *                          (Note: "only then sets stack_marked"): K1 fails;
 *   BUG_SYNC_SKIPS_STACKS  the final sync does not mark a stack still
 *                          unmarked (the mutator blocked half-way through
 *                          logging it): K1 fails.
 *
 * -DGROW adds heapd_root_push growing the stack (a request to the daemon
 * inside a blocking region, during which a final sync, a sweep and a new
 * snapshot may pass).  It found a bug (fixed in 338dd96): back from
 * grow_roots, heapd_root_push stored REF, published the depth and
 * unparked REF without running barrier_stack again, while the daemon's
 * concurrent mark_stack loaded root_depth BEFORE pending_root: it read the
 * old depth, the mutator stored the slot, the depth and unparked, the
 * daemon read pending_root == NULL and set stack_marked, and the sweep
 * freed REF on the stack (K1).  The code now has both fixes, each of which
 * verifies alone; the mutant GROW+BUG_GROW_NO_BARRIER+BUG_DEPTH_FIRST
 * (neither) must fail:
 *   BUG_DEPTH_FIRST        mark_stack loads root_depth before pending_root;
 *   BUG_GROW_NO_BARRIER    no barrier_stack after grow_roots.
 */

#define NOBJ    4       /* objects 1..3; index 0 is NULL */
#define DEPTH   2       /* root slots */
#define CAP     1       /* URS ring entries */
#ifndef CYCLES
#define CYCLES  2
#endif
#ifndef NOPS
#define NOPS    3       /* mutator operations */
#endif

#define IDLE    0
#define MARK    1
#define SWEEP   2

byte epoch = 1;             /* control->epoch: cycle 0 is complete */
byte phase = IDLE;          /* control->phase */
bool stop;                  /* a stop is raised (models/stop.pml) */
bool in_heap;               /* the mutator runs between safepoints */
bool lock;                  /* h->lock: held by mark_roots; the loop thread
                             * takes it to consume a ring or free a slot */

bool freed;                 /* slot status FREE */
byte stack_marking;
byte stack_marked;
byte depth;                 /* root_depth */
byte stk[DEPTH];            /* root slots */
byte pending;               /* slot->pending_root */
byte urs[CAP];              /* the URS ring */
byte ulen;
#ifdef GROW
byte chunks = 1;            /* root chunks of one slot each */
#endif

bool alive[NOBJ];           /* block allocated */
byte mark[NOBJ];            /* mark byte: epoch of the last mark/allocation */
byte tag[NOBJ];             /* dirty tag (Note [Dirty tags]) */
byte field[NOBJ];
byte grey;                  /* bit o: object o is queued for scanning */

bool kill;
bool dead;

/* mark_one + seed: mark R and queue it */
inline mark_ref(r)
{
    if
    :: r != 0 && alive[r] && mark[r] != epoch ->
        mark[r] = epoch;
        grey = grey | (1 << r)
    :: else -> skip
    fi
}

/* mark_urs: read the ring; mark its entries if marking (h->marking) */
inline consume()
{
    if
    :: phase == MARK ->
        for (q : 0 .. CAP - 1) {
            if
            :: q < ulen -> mark_ref(urs[q])
            :: else -> skip
            fi
        }
    :: else -> skip         /* h->marking == NULL: dropped */
    fi;
    for (q : 0 .. CAP - 1) { urs[q] = 0 }
    ulen = 0
}

/* one worker step: scan a queued object (its one field) */
inline scan_one()
{
    o = 1;
    do
    :: grey & (1 << o) -> break
    :: else -> o++
    od;
    grey = grey & ~(1 << o);
    r = field[o];
    mark_ref(r);
    o = 0; r = 0
}

/* ---- the daemon ---- */

/* mark_stack(j, slot, false) from mark_roots, under the heap lock (the
 * loop thread cannot free the slot meanwhile), concurrently with the
 * mutator.  trace_stack loads root_depth, then pending_root, then each
 * root slot. */
inline mark_stack_concurrent()
{
    atomic {
        won = false;
        if
        :: freed || stack_marked == epoch -> skip
        :: stack_marking != epoch ->
            stack_marking = epoch; won = true
        :: else -> skip         /* lose: the mutator marks it */
        fi
    };
    if
    :: won ->
#ifdef BUG_MARKED_EARLY
        stack_marked = epoch;
#endif
#ifdef BUG_DEPTH_FIRST
        d = depth;
        r = pending; mark_ref(r);
#else
        /* daemon/mark.c mark_stack: the parked value before the depth */
        r = pending; mark_ref(r);
        d = depth;
#endif
        k = 0;
        do
        :: k < d -> r = stk[k]; mark_ref(r); k++
        :: else -> break
        od;
        /* "marked only once every root is" */
        stack_marked = epoch;
        d = 0; k = 0; r = 0; won = false
    :: else -> skip
    fi
}

/* mark_stack(j, slot, true) in the final sync: the mutator is stopped */
inline mark_stack_stopped()
{
    if
    :: freed || stack_marked == epoch -> skip
    :: else ->
        stack_marking = epoch;
        r = pending; mark_ref(r);
        for (k : 0 .. DEPTH - 1) {
            if
            :: k < depth -> r = stk[k]; mark_ref(r)
            :: else -> skip
            fi
        }
        stack_marked = epoch;
        k = 0; r = 0
    fi
}

/* K1, with the world stopped at the end of marking */
inline check_marked()
{
    reach = 0;
    if
    :: !freed ->
        reach = 1 << pending;
        for (k : 0 .. DEPTH - 1) {
            if
            :: k < depth -> reach = reach | (1 << stk[k])
            :: else -> skip
            fi
        }
    :: else -> skip
    fi;
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
    reach = 0; k = 0; q = 0
}

proctype Daemon()
{
    byte c, k, d, r, o, reach, q;
    bool won, done;

    for (c : 1 .. CYCLES) {
        /* the snapshot pause (collector.c snapshot()) */
        stop = true;
        atomic {
            !in_heap ->
            epoch++;
            stack_marking = 0;
            stack_marked = 0;
            phase = IDLE;           /* h->marking == NULL: dropped */
            consume();
            grey = 0;
            phase = MARK;
            stop = false
        };
        /* concurrent mark: mark_roots under the heap lock */
        atomic { !lock -> lock = true };
        mark_stack_concurrent();
        lock = false;
        do
        :: true ->
            /* the workers, reading fields as the mutator writes them */
            do
            :: atomic { grey != 0 -> scan_one() }
            :: else -> break
            od;
            /* the final sync: ring, stack, drain with a budget */
            stop = true;
            atomic {
                !in_heap && !lock ->
                if
                :: !freed ->
                    consume();
#ifndef BUG_SYNC_SKIPS_STACKS
                    mark_stack_stopped()
#else
                    skip
#endif
                :: else -> skip
                fi;
                done = true;
                do
                :: grey != 0 ->
                    if
                    :: scan_one()
                    :: done = false; break      /* budget spent */
                    fi
                :: else -> break
                od;
                if
                :: done ->
                    check_marked();
                    phase = SWEEP
                :: else -> skip             /* marking goes on */
                fi;
                stop = false
            };
            if
            :: done -> break
            :: else -> skip
            fi
        od;
        /* concurrent sweep, then IDLE */
        atomic {
            for (o : 1 .. NOBJ - 1) {
                if
                :: alive[o] && mark[o] != epoch ->
                    alive[o] = false; mark[o] = 0; field[o] = 0; tag[o] = 0
                :: else -> skip
                fi
            }
            o = 0;
            phase = IDLE
        }
    }
}

/* ---- the loop thread: the ring and a dead client ---- */

proctype Loop()
{
    byte q;
end:
    do
    :: atomic { !lock && ulen > 0 -> consume() }       /* UrsBatch */
    :: atomic {
            !lock && dead && !freed ->
            consume(); depth = 0; pending = 0; freed = true; in_heap = false
        }
    od
}

/* ---- the mutator ---- */

/* K2 */
inline use(r) { assert(r == 0 || alive[r]) }

/* a safepoint (mutator_poll) */
inline poll()
{
    in_heap = false;
    atomic { !stop -> in_heap = true }
}

/* barrier_log: filtered, and a full ring waits blocked (urs_wait_room);
 * after a wait, marking may be over: then the entry is dropped */
inline barrier_log(lr)
{
    if
    :: lr == 0 || mark[lr] == epoch -> skip   /* Note [Filtering the barrier] */
    :: else ->
        if
        :: ulen >= CAP ->
            in_heap = false;                    /* blocking_enter */
            (ulen < CAP);                       /* the daemon moves the tail */
            atomic { !stop -> in_heap = true }  /* blocking_leave */
        :: else -> skip
        fi;
        atomic {
            if
            :: phase == MARK -> urs[ulen] = lr; ulen++
            :: else -> skip
            fi
        }
    fi;
    lr = 0
}

/* barrier_stack_slow */
inline barrier_stack_slow()
{
    do
    :: atomic {
            phase == MARK ->
            e = epoch;
            if
            :: stack_marked == e -> won = false; res = 1
            :: stack_marking != e -> stack_marking = e; won = true; res = 0
            :: else -> won = false; res = 0
            fi
        };
        if
        :: res == 1 -> res = 0; break
        :: won ->
            k = 0;
            do
            :: k < depth -> lr = stk[k]; barrier_log(lr); k++
            :: else -> break
            od;
            k = 0;
            lr = pending; barrier_log(lr);
            if
            :: epoch != e -> skip      /* a new cycle began: start over */
            :: else -> stack_marked = e; break
            fi
        :: else ->
#ifdef BUG_NO_WAIT
            break;
#endif
            /* the daemon is marking it: wait blocked for its word or a
             * new epoch */
            in_heap = false;
            (stack_marked == e || epoch != e);
            atomic { !stop -> in_heap = true }
        fi
    :: else -> break        /* !barrier_on */
    od;
    e = 0; won = false
}

/* barrier_stack(m, v): parks V (Note [Values in flight]) */
inline barrier_stack(v)
{
    if
    :: phase == MARK && stack_marked != epoch ->
#ifndef BUG_NO_PARK
        pending = v;
#endif
        barrier_stack_slow()
    :: else -> skip
    fi
}

/* heapd_write's barrier_write(m, obj, field, v): park V, the object
 * barrier (log the field unless tagged, for every cycle it straddles),
 * catch_up */
inline barrier_write(obj, v)
{
    if
    :: phase == MARK ->
        e0 = epoch;
#ifndef BUG_NO_PARK
        pending = v;
#endif
        do
        :: phase == MARK ->
            e = epoch;
            if
            :: tag[obj] == e -> break
            :: else -> skip
            fi;
            lr = field[obj];
            barrier_log(lr);
            tag[obj] = e;
            if
            :: epoch == e -> break
            :: else -> skip
            fi
        :: else -> break
        od;
#ifndef BUG_NO_PARK
        if
        :: epoch != e0 -> barrier_stack_slow()  /* catch_up */
        :: else -> skip
        fi;
#endif
        e0 = 0; e = 0
    :: else -> skip
    fi
}

/* heapd_alloc: a safepoint, then a black block (tagged while marking);
 * none free: the operation is skipped */
inline alloc()
{
    poll();
    atomic {
        o = 1;
        do
        :: o < NOBJ && alive[o] -> o++
        :: else -> break
        od;
        if
        :: o < NOBJ ->
            alive[o] = true; mark[o] = epoch; field[o] = 0;
            tag[o] = (phase == MARK -> epoch : 0)
        :: else -> o = 0
        fi
    }
}

/* heapd_write(m, root 0, its field, v) */
inline write_root0(v)
{
    k = stk[0];                 /* heapd_root_get */
    use(k);
    use(v);
    barrier_write(k, v);
    use(v);
    field[k] = v;
    pending = 0;                /* barrier_unpark */
    k = 0; o = 0
}

/* heapd_root_push(m, v) */
inline root_push(v)
{
    barrier_stack(v);
#ifdef GROW
    if
    :: depth == chunks ->
        /* grow_roots: park V, then a request to the daemon (a blocking
         * region: a stop, even a whole new snapshot, may pass) */
        pending = v;
        in_heap = false;
        atomic { !stop -> in_heap = true };
        chunks++;
#ifndef BUG_GROW_NO_BARRIER
        /* heapd_root_push: the stack barrier again after growing */
        barrier_stack(v);
#endif
        skip
    :: else -> skip
    fi;
#endif
    use(v);
    stk[depth] = v;
    depth++;
    pending = 0;
    poll()
}

proctype Mutator()
{
    byte n, e, e0, k, lr, o, res;
    bool won;
    {
        atomic { !stop -> in_heap = true };
        for (n : 1 .. NOPS) {
            if
            :: depth < DEPTH ->
                alloc();
                if
                :: o != 0 -> root_push(o); o = 0
                :: else -> skip
                fi
            :: depth > 0 ->
                /* heapd_write(root 0, its field, a new object) */
                alloc();
                if
                :: o != 0 -> write_root0(o)
                :: else -> skip
                fi
            :: depth == DEPTH ->
                /* heapd_write(root 0, its field, the top root) */
                o = stk[depth - 1];         /* heapd_root_get */
                write_root0(o)
            :: depth == DEPTH ->
                /* heapd_root_set(m, 0, the top root) */
                o = stk[depth - 1];         /* heapd_root_get */
                barrier_stack(o);
                use(o);
                stk[0] = o;
                pending = 0;
                o = 0;
                poll()
            :: depth > 0 ->
                /* heapd_root_pop(1) */
                barrier_stack(0);
                depth--;
                stk[depth] = 0;
                poll()
            :: depth > 0 && depth < DEPTH && field[stk[depth - 1]] != 0 ->
                /* heapd_read the top root's field, heapd_root_push it */
                o = field[stk[depth - 1]];
                use(o);
                root_push(o);
                o = 0
            fi
        };
        /* heapd_detach: blocked, the daemon frees the slot */
        in_heap = false;
        dead = true
    } unless {
        kill -> dead = true
    }
}

proctype Killer()
{
    if
    :: atomic { !dead -> kill = true }
    :: skip
    fi
}

init {
    atomic {
        alive[1] = true; mark[1] = 1; field[1] = 2;
        alive[2] = true; mark[2] = 1;
        stk[0] = 1; depth = 1;
        run Daemon();
        run Loop();
        run Mutator();
        run Killer()
    }
}
