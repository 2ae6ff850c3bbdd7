/* models/stack_marking.pml: the root-stack marking handshake between a
 * mutator and the daemon's concurrent mark and final sync, the entry
 * safepoints of the root and global calls with their value parked, and
 * write barriers that wait WAITING.
 *
 * Models Note [Stack marking handshake], Note [Straddling a cycle], Note
 * [Values in flight] and Note [Update remembered set] (client/barrier.c:
 * barrier_stack_slow, barrier_write_slow, barrier_global_slow,
 * barrier_log, urs_wait_room), Note [Waiting in a barrier]
 * (daemon/gc/safepoint.c: a final sync counts a WAITING mutator as stopped, a
 * snapshot waits for it), Note [Client GC discipline] (client/heapd.h:
 * every safepoint call takes its safepoint on entry, before it changes the
 * stack; client/barrier.h: mutator_enter, barrier_park, barrier_unpark;
 * client/mutator.c: heapd_root_push/set/pop, mutator_call;
 * client/globals.c: heapd_global_set; client/alloc.c: heapd_write), the
 * daemon's mark_stack / trace_stack / mark_roots / mark_urs
 * (daemon/gc/mark.c) and Note [Collection cycle] (daemon/gc/collector.c: the
 * snapshot resets the stack words and empties the rings; concurrent mark;
 * the final sync reads the ring, marks the stack if still unmarked and
 * drains with a budget, going back to concurrent marking when it runs
 * out; then the sweep), Note [Filtering the barrier], Note [Snapshot write
 * barrier] (the dirty tag) and Note [Epoch-tagged marks] (allocation is
 * black).
 *
 * Abstractions (each keeps the interleavings that matter here):
 *   - The stop protocol is models/stop.pml; here a stop is: the daemon
 *     raises `stop` (SNAP or SYNC) and waits until the mutator is not
 *     in_heap, and for a snapshot not `waiting` either; the mutator leaves
 *     the heap at a safepoint, a blocking region or a barrier wait and
 *     comes back only while no stop is raised (from a barrier wait: while
 *     no final sync is raised; a snapshot raised meanwhile waits for its
 *     next safepoint, as models/stop.pml checks).  A dead client's slot
 *     counts as stopped once the loop thread has freed it.
 *   - Work the daemon does with the world stopped (the snapshot, the final
 *     sync with its drain and the end-of-marking check) is one atomic step:
 *     nothing a stopped, blocked or waiting mutator can do touches it.  The
 *     sweep is one atomic step too (it only frees unmarked blocks); the
 *     concurrent mark_roots keeps one step per load (the global, its CAS,
 *     the pending root, the depth, each root slot), in the code's order,
 *     and each scan of an object (one field) is one step.
 *   - The mutator's read of the epoch, stack_marking and stack_marked and
 *     its CAS are one atomic step: the daemon's CAS in between makes the
 *     mutator's fail, as does a daemon that already won.
 *   - One mutator slot (a second slot only adds interleavings of the
 *     daemon's mark_stack with itself); the mutator can be killed at any
 *     step, waiting or not.  The loop thread consumes the ring (UrsBatch,
 *     Note [Polling the rings]) and frees a dead slot.
 *   - Sequentially consistent memory: the stack words, epoch, phase,
 *     pending root and root depth are seq_cst or release/acquire in the
 *     code.
 *   - The URS ring holds CAP (1) entries, so logging can find it full and
 *     wait across a final sync.
 *   - heapd_cas runs heapd_write's barrier and is not modelled separately.
 *     One global root exists before the cycles (mark_roots marks it before
 *     the stacks).  heapd_global_set's claim of a new global is CLAIM
 *     below, on that one global: in the code mark_roots skips an entry
 *     created during the cycle (black) and reads the value of an older
 *     one, perhaps before the claim's store; the model's one read of the
 *     global, which may come before the store, stands for both (the
 *     daemon does not see the new value).  NOT modelled:
 *     heapd_global_once's end of init (the result stored, then parked
 *     across the GlobalInitDone request, then mutator_enter again): the
 *     wait has the claim's shape, but the value is a global's before it.
 *   - The root stack is a fixed array in the client's control memory
 *     (Note [Client control memory]): heapd_root_push never waits for
 *     the daemon.
 *
 * Heap: objects 1..3 (0 is NULL), one reference field each, one global
 * (NULL at first).  The stack holds object 1, whose field holds object 2;
 * object 3 is free.  The mutator does up to NOPS of: allocate and
 * heapd_root_push it; allocate and heapd_write it into root 0's field;
 * heapd_root_set root 0 to the top root; heapd_root_pop the top root and
 * heapd_write it into root 0's field (Note [Client GC discipline]: a
 * popped value stays valid until the next safepoint); heapd_global_set
 * the global to the top root; read the top root's field and
 * heapd_root_push it; with CLAIM, allocate and heapd_global_set a new
 * global to it.  CYCLES collection cycles run.
 *
 * Properties:
 *   (K1) when marking ends (end of the final sync, sweep about to start),
 *        every object reachable from the global, or from the stack or the
 *        parked value of a live slot (through fields), is marked with the
 *        epoch;
 *   (K2) the mutator never stores or reads a freed object (asserted at
 *        every use of a reference it holds);
 *   (K3) no invalid end state: the daemon never waits for the mutator
 *        (alive, waiting or dead) to finish marking its stack, and a
 *        mutator waiting for the daemon or for marking to end is released;
 *   (K4) a barrier sees one epoch from start to end: the code's
 *        assertions in barrier_write_slow and barrier_stack_slow; -DNDEBUG
 *        leaves them out, as a release build does.
 *
 * Mutants (spin -D...), each must produce an error:
 *   BUG_NO_PARK            mutator_enter parks nothing: K1 fails (a value
 *                          held only in a C local across the entry
 *                          safepoint of heapd_root_push/set);
 *   BUG_NO_WAIT            a mutator that loses the CAS to the daemon goes
 *                          on without waiting for stack_marked: K1 fails;
 *   BUG_MARKED_EARLY       the daemon sets stack_marked before tracing
 *                          (Note: "only then sets stack_marked"): K1 fails;
 *   BUG_SYNC_SKIPS_STACKS  the final sync does not mark a stack still
 *                          unmarked (the mutator waiting half-way through
 *                          logging it): K1 fails;
 *   BUG_POP_THEN_POLL      heapd_root_pop in the old order: the stack
 *                          barrier, the pop, then the poll: K1 fails (pop
 *                          object 3, a snapshot at the poll, heapd_write
 *                          of 3 into object 1 logs only the old value 2,
 *                          and the sweep frees 3, reachable from root 0);
 *   BUG_BARRIER_BLOCKED    the barriers wait BLOCKED, as before Note
 *                          [Waiting in a barrier]: K4 fails, and with
 *                          NDEBUG K1 (a new object, a C local, stored by a
 *                          heapd_write whose barrier waited while a final
 *                          sync, a sweep and the next snapshot passed);
 *   BUG_RESUME_TAKES_ANY_STOP  leaving a barrier wait takes any stop,
 *                          a snapshot too (as heapd_blocking_leave does:
 *                          see models/stop.pml): K4 fails, and with
 *                          NDEBUG K1, as with BUG_BARRIER_BLOCKED.
 *
 * -DCLAIM adds heapd_global_set claiming a new global for a new object
 * (on no stack and in no field: only the parked value and the barriers
 * keep it): the entry with REF parked, then the GlobalClaim request in a
 * blocking region (mutator_call), during which a final sync, a sweep and a
 * new snapshot may pass, then mutator_enter again, barrier_global_slow
 * (the old value, while marking), the store and the unpark.  Its mutant:
 *   BUG_CLAIM_NO_BARRIER   no mutator_enter after the claim: K1 fails (a
 *                          snapshot during the claim, mark_roots reads the
 *                          global before the store, the mutator stores REF
 *                          and unparks before mark_stack reads
 *                          pending_root: REF, allocated before that
 *                          snapshot, is unmarked and reachable from the
 *                          global).
 *
 * BUG_DEPTH_FIRST (mark_stack loads root_depth before pending_root) is
 * kept to show that the order no longer matters here, and is listed in no
 * configuration: it verifies with and without CLAIM (checked with spin).
 * The order keeps a value that a call parks across a wait a cycle can
 * pass and then pushes without a stack barrier in between (the daemon
 * reads the old depth and the parked value, or the new depth).  No such
 * push is left: heapd_root_push waits only in its entry, and the stack
 * barrier there means that this cycle's trace of the stack has ended
 * before the push (the mutator lost the stack word and waited for
 * stack_marked, or the stack was marked already) or never runs (the
 * mutator logged the stack).  The claim stores REF in the global, not on
 * the stack: with the barrier after the claim REF is kept whatever the
 * order, and without it BUG_CLAIM_NO_BARRIER fails whatever the order.
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
#define SNAP    1       /* SAFEPOINT_SNAPSHOT */
#define SYNC    2       /* SAFEPOINT_FINAL_SYNC */
byte stop;                  /* the stop raised, 0, SNAP or SYNC (models/stop.pml) */
bool in_heap;               /* the mutator runs between safepoints */
bool waiting;               /* the mutator waits inside a write barrier */
bool lock;                  /* h->lock: held by mark_roots; the loop thread
                             * takes it to consume a ring or free a slot */

bool freed;                 /* slot status FREE */
byte stack_marking;
byte stack_marked;
byte depth;                 /* root_depth */
byte stk[DEPTH];            /* root slots */
byte pending;               /* slot->pending_root */
byte glob;                  /* one global root's value (Note [Global roots]) */
byte urs[CAP];              /* the URS ring */
byte ulen;

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
 * mutator.  trace_stack loads pending_root, then root_depth, then each
 * root slot (BUG_DEPTH_FIRST: root_depth first). */
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
        /* daemon/gc/mark.c mark_stack: the parked value before the depth */
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
    reach = 1 << glob;
    if
    :: !freed ->
        reach = reach | (1 << pending);
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
        stop = SNAP;
        atomic {
            !in_heap && !waiting ->     /* a snapshot waits for WAITING */
            epoch++;
            stack_marking = 0;
            stack_marked = 0;
            phase = IDLE;           /* h->marking == NULL: dropped */
            consume();
            grey = 0;
            phase = MARK;
            stop = 0
        };
        /* concurrent mark: mark_roots under the heap lock, the globals
         * first (the global existed before the cycle) */
        atomic { !lock -> lock = true };
        r = glob; mark_ref(r); r = 0;
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
            stop = SYNC;
            atomic {
                !in_heap && !lock ->    /* a WAITING mutator counts as stopped */
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
                stop = 0
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
            consume(); depth = 0; pending = 0; freed = true;
            in_heap = false; waiting = false
        }
    od
}

/* ---- the mutator ---- */

/* K2 */
inline use(r) { assert(r == 0 || alive[r]) }

/* K4: the code's assertions that a barrier sees one epoch (Note
 * [Straddling a cycle]); -DNDEBUG drops them, as a release build does */
#ifndef NDEBUG
#define SAME_EPOCH(e)   assert(epoch == (e))
#else
#define SAME_EPOCH(e)   skip
#endif

/* A wait inside a write barrier (Note [Waiting in a barrier]):
 * mutator_wait_begin stores WAITING; a final sync counts it as stopped, a
 * snapshot waits for it. */
inline wait_begin()
{
#ifdef BUG_BARRIER_BLOCKED
    in_heap = false                     /* BLOCKED: any stop passes */
#else
    atomic { in_heap = false; waiting = true }
#endif
}

/* mutator_wait_end after a barrier wait: RUNNING again; a final sync
 * under way (which may have counted it stopped) is waited for; a snapshot
 * under way is left to the next safepoint, since it cannot have counted a
 * WAITING mutator (models/stop.pml, the mutant BUG_RESUME_TAKES_ANY_STOP
 * there and here). */
inline wait_end()
{
#if defined(BUG_BARRIER_BLOCKED) || defined(BUG_RESUME_TAKES_ANY_STOP)
    waiting = false;
    atomic { !stop -> in_heap = true }
#else
    /* acking a final sync and waiting for its release is, for this
     * abstraction, staying WAITING: stopped for that sync, not for a
     * snapshot raised after it */
    atomic { stop != SYNC -> waiting = false; in_heap = true }
#endif
}

/* barrier_log: filtered, and a full ring waits (urs_wait_room) until the
 * daemon moves the tail or marking ends; after a wait, marking may be
 * over: then the entry is dropped */
inline barrier_log(lr)
{
    if
    :: lr == 0 || mark[lr] == epoch -> skip   /* Note [Filtering the barrier] */
    :: else ->
        if
        :: ulen >= CAP ->
            wait_begin();
            (ulen < CAP || phase != MARK);
            wait_end()
        :: else -> skip
        fi;
        atomic {
            if
            :: phase == MARK && ulen < CAP -> urs[ulen] = lr; ulen++
            :: else -> skip
            fi
        }
    fi;
    lr = 0
}

/* barrier_stack_slow: take the stack word and log the stack, or wait
 * for the daemon to finish marking it, or for marking to end */
inline barrier_stack_slow()
{
    atomic {
        if
        :: phase == MARK ->
            e = epoch;
            if
            :: stack_marked == e -> won = false; res = 1
            :: stack_marking != e -> stack_marking = e; won = true; res = 0
            :: else -> won = false; res = 0
            fi
        :: else -> won = false; res = 1     /* !barrier_on */
        fi
    };
    if
    :: res == 1 -> skip
    :: won ->
        k = 0;
        do
        :: k < depth -> lr = stk[k]; barrier_log(lr); k++
        :: else -> break
        od;
        k = 0;
        lr = pending; barrier_log(lr);
        SAME_EPOCH(e);                      /* K4 */
        stack_marked = e
    :: else ->
#ifndef BUG_NO_WAIT
        wait_begin();
        (stack_marked == e || phase != MARK);
        wait_end()
#else
        skip
#endif
    fi;
    e = 0; won = false; res = 0
}

/* mutator_enter(m, v, &parked): the safepoint, then the stack barrier,
 * V parked through whatever of them runs (Note [Values in flight],
 * Note [Client GC discipline]) */
inline enter(v)
{
    if
    :: atomic {
            stop != 0 ->                    /* mutator_poll_due */
#ifndef BUG_NO_PARK
            if
            :: v != 0 -> pending = v; parked = true
            :: else -> skip
            fi;
#endif
            in_heap = false                 /* ack */
        };
        atomic { !stop -> in_heap = true }
    :: else -> skip
    fi;
    if
    :: phase == MARK && stack_marked != epoch ->    /* barrier_stack_due */
#ifndef BUG_NO_PARK
        if
        :: v != 0 -> pending = v; parked = true
        :: else -> skip
        fi;
#endif
        barrier_stack_slow()
    :: else -> skip
    fi
}

/* barrier_unpark, if parked */
inline unpark()
{
    if
    :: parked -> pending = 0; parked = false
    :: else -> skip
    fi
}

/* heapd_write's barrier_write(m, obj, field): the object barrier, no
 * safepoint and no snapshot inside (Note [Snapshot write barrier]) */
inline barrier_write(obj)
{
    if
    :: phase == MARK ->
        e = epoch;
        if
        :: tag[obj] != e ->
            lr = field[obj];
            barrier_log(lr);
            SAME_EPOCH(e);                  /* K4 */
            tag[obj] = e
        :: else -> skip
        fi;
        e = 0
    :: else -> skip
    fi
}

/* heapd_alloc: a safepoint, then a black block (tagged while marking);
 * none free: the operation is skipped */
inline alloc()
{
    enter(0);
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

/* heapd_write(m, root 0, its field, v): v is a C local; nothing parks it */
inline write_root0(v)
{
    k = stk[0];                 /* heapd_root_get */
    use(k);
    use(v);
    barrier_write(k);
    use(v);
    field[k] = v;
    k = 0
}

/* heapd_root_push(m, v): the entry, then the push (a fixed array: no
 * wait) */
inline root_push(v)
{
    enter(v);
    use(v);
    stk[depth] = v;
    depth++;
    unpark()
}

/* heapd_global_set(m, a new global, v) (client/globals.c): the entry;
 * no entry yet, so v parked (barrier_park) and claim(): the GlobalClaim
 * request in a blocking region (a stop, even a whole new cycle, may pass);
 * mutator_enter again; barrier_global_slow logs the old value while
 * marking; the store; the unpark */
inline global_claim(v)
{
    enter(v);
    pending = v; parked = true;
    in_heap = false;                    /* heapd_blocking_enter */
    atomic { !stop -> in_heap = true }; /* heapd_blocking_leave */
#ifndef BUG_CLAIM_NO_BARRIER
    enter(v);                           /* mutator_enter after the wait */
#endif
    if
    :: phase == MARK -> lr = glob; barrier_log(lr)
    :: else -> skip
    fi;
    use(v);
    glob = v;
    unpark()
}

/* heapd_root_pop(m, 1) */
inline root_pop()
{
#ifndef BUG_POP_THEN_POLL
    enter(0);
    depth--;
    stk[depth] = 0
#else
    /* the old order: the stack barrier, the pop, then the poll */
    if
    :: phase == MARK && stack_marked != epoch -> barrier_stack_slow()
    :: else -> skip
    fi;
    depth--;
    stk[depth] = 0;
    if
    :: atomic { stop != 0 -> in_heap = false };
        atomic { !stop -> in_heap = true }
    :: else -> skip
    fi
#endif
}

proctype Mutator()
{
    byte n, e, k, lr, o, res;
    bool won, parked;
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
                :: o != 0 -> write_root0(o); o = 0
                :: else -> skip
                fi
            :: depth == DEPTH ->
                /* heapd_root_set(m, 0, the top root) */
                o = stk[depth - 1];         /* heapd_root_get */
                enter(o);
                use(o);
                stk[0] = o;
                unpark();
                o = 0
            :: depth == DEPTH ->
                /* heapd_root_pop(1), then heapd_write(root 0, its field,
                 * the popped value) */
                o = stk[depth - 1];         /* heapd_root_get */
                root_pop();
                write_root0(o);
                o = 0
            :: depth > 0 ->
                /* heapd_global_set(the global, the top root): the entry,
                 * then barrier_global_slow logs the old value */
                o = stk[depth - 1];
                enter(o);
                if
                :: phase == MARK -> lr = glob; barrier_log(lr)
                :: else -> skip
                fi;
                use(o);
                glob = o;
                unpark();
                o = 0
            :: depth > 0 && depth < DEPTH && field[stk[depth - 1]] != 0 ->
                /* heapd_read the top root's field, heapd_root_push it */
                o = field[stk[depth - 1]];
                use(o);
                root_push(o);
                o = 0
#ifdef CLAIM
            :: true ->
                /* allocate, then heapd_global_set(a new global, it) */
                alloc();
                if
                :: o != 0 -> global_claim(o); o = 0
                :: else -> skip
                fi
#endif
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
