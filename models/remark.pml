/* models/remark.pml: remarking segments after a mark-stack overflow, with
 * owners, orphans and the adoption lock.
 *
 * THIS MODELS A DESIGN, NOT CODE: issue 6 (remark and ownership) is not
 * implemented yet.  It follows /work/shared/DESIGN.md section 5 ("Remark
 * and ownership") and section 6 (a crash orphans the client's segments and
 * moves its remark work to the global stack), and the seed
 * remarking-parallel-domains.txt (OCaml's remark stacks per domain, the
 * global remark stack for orphaned pools, the adoption lock,
 * num_domains_to_remark, and "a domain ceases servicing its remark stack
 * exactly when all its pools are orphaned").  When issue 6 lands, bring this
 * model in step with the code (name its functions and Notes here, and make
 * each step below match one of the code's) before trusting it.
 *
 * The design as modelled:
 *   - the daemon's marker overflows its mark stack and flags a segment for
 *     remark (each segment at most once a cycle): it counts the work
 *     (`outstanding`, an atomic counter), reads the segment's owner, and
 *     then pushes the request: to the owner's remark stack if the owner
 *     accepts requests, else to the global remark stack;
 *   - an owner services its stack at a safepoint (or its agent thread does
 *     while it is blocked: the same steps): for a segment it still owns it
 *     rescans the segment, and only then answers done (the entry leaves its
 *     stack and the counter drops); for a segment that changed owner
 *     between flagging and servicing it forwards the request (to the new
 *     owner if it accepts, else to the global stack);
 *   - the daemon services the global stack under the adoption lock: an
 *     orphaned segment is rescanned with the lock held (no client can adopt
 *     it meanwhile), then the counter drops; a segment adopted meanwhile is
 *     forwarded to its owner;
 *   - a client adopts an orphaned segment under the adoption lock;
 *   - a client that terminates orphans its segments, stops accepting
 *     requests and moves its pending requests to the global stack, in one
 *     step (under its stack's lock); a client that dies at any step is
 *     cleaned up by the daemon's loop thread with the same step;
 *   - marking ends only when the counter is zero.
 *
 * Sizes: 2 clients, 2 segments (segment i first owned by client i), 2
 * cycles.  Each client may adopt orphans, service its stack, terminate, or
 * die at any step.
 *
 * Properties:
 *   (R1) marking never ends while remark work is outstanding: when the
 *        daemon ends marking, no flagged segment is left un-remarked;
 *   (R2) every remark is done by the segment's owner, or by the daemon
 *        under the adoption lock on an orphaned segment: never by anyone
 *        while another party may allocate into it;
 *   (R3) no invalid end state (no deadlock), whenever a client terminates
 *        or dies.
 *
 * Mutants (spin -D...), each must produce an error:
 *   BUG_STOP_ACCEPT_EARLY  a terminating client stops accepting requests,
 *                          then moves its pending requests, then orphans
 *                          its segments (three steps): a request for a
 *                          segment it still owns reaches the global stack
 *                          and the daemon rescans it while the client may
 *                          still allocate into it (R2);
 *   BUG_DAEMON_REMARKS_OWNED  the daemon rescans a global entry without
 *                          checking that the segment is still orphaned
 *                          (one adopted meanwhile): R2;
 *   BUG_EARLY_DECREMENT    an owner answers done (counter down) before it
 *                          has rescanned: marking can end first (R1).
 */

#define NC      2           /* clients */
#define NS      2           /* segments */
#define NONE    2           /* owner: nobody (orphaned) */
#define DAEMON  3           /* remarker: the daemon */
#ifndef CYCLES
#define CYCLES  2
#endif

byte owner[NS];
bool accepting[NC];
bool dead[NC];
bool cleaned[NC];           /* dead and cleaned up, or terminated */
bool kill[NC];
byte stack[NC];             /* bit s: a request for segment s */
byte global;                /* the global remark stack, bits */
byte outstanding;           /* the atomic counter of remark work */
bool adopt_lock;
bool marking;
bool need[NS];              /* ghost: flagged and not yet rescanned */

/* a rescan of segment S by WHO (a client, or the daemon) */
inline remark(s, who)
{
    if
    :: who == DAEMON ->
        assert(adopt_lock && owner[s] == NONE)     /* R2 */
    :: else ->
        assert(owner[s] == who)                    /* R2 */
    fi;
    need[s] = false
}

/* push a request for S: to client C's stack if it accepts, else global */
inline push_to(c, s)
{
    if
    :: c < NC && accepting[c] -> stack[c] = stack[c] | (1 << s)
    :: else -> global = global | (1 << s)
    fi
}

/* orphan C's segments, stop accepting, move its requests to global */
inline retire(c)
{
    for (k : 0 .. NS - 1) {
        if
        :: owner[k] == c -> owner[k] = NONE
        :: else -> skip
        fi
    }
    accepting[c] = false;
    global = global | stack[c];
    stack[c] = 0;
    k = 0
}

proctype Daemon()
{
    byte cyc, s, o, flagged, k;

    for (cyc : 1 .. CYCLES) {
        marking = true;
        flagged = 0;
        do
        :: /* overflow: flag a segment (count, read its owner, push) */
            atomic {
                if
                :: !(flagged & 1) -> s = 0
                :: !(flagged & 2) -> s = 1
                fi;
                flagged = flagged | (1 << s);
                need[s] = true;
                outstanding++
            };
            o = owner[s];
            atomic { push_to(o, s) };
            s = 0; o = 0
        :: /* service the global stack */
            atomic {
                global != 0 ->
                s = (global & 1 -> 0 : 1);
                global = global & ~(1 << s)
            };
            atomic { !adopt_lock -> adopt_lock = true };
#ifndef BUG_DAEMON_REMARKS_OWNED
            if
            :: owner[s] == NONE || (owner[s] < NC && !accepting[owner[s]]) ->
#else
            if
            :: true ->
#endif
                /* orphaned, or its owner is terminating (which the
                 * design says orphans it in the same step) */
                remark(s, DAEMON);
                outstanding--
            :: else ->
                atomic { o = owner[s]; push_to(o, s) }   /* forward */
            fi;
            adopt_lock = false;
            s = 0; o = 0
        :: atomic {
                outstanding == 0 ->
                /* R1: the end of marking */
                for (k : 0 .. NS - 1) { assert(!need[k]) }
                k = 0;
                marking = false
            };
            break
        od
    }
}

/* the daemon's loop thread: a dead client's connection closes */
proctype Loop()
{
    byte c, k;
end:
    do
    :: atomic { dead[0] && !cleaned[0] -> retire(0); cleaned[0] = true }
    :: atomic { dead[1] && !cleaned[1] -> retire(1); cleaned[1] = true }
    od
}

proctype Client(byte me)
{
    byte s, o, k;
    {
end:
        do
        :: /* adopt an orphaned segment, under the adoption lock */
            atomic {
                !adopt_lock && (owner[0] == NONE || owner[1] == NONE) ->
                s = (owner[0] == NONE -> 0 : 1);
                owner[s] = me;
                s = 0
            }
        :: /* service my remark stack at a safepoint */
            atomic {
                stack[me] != 0 ->
                s = (stack[me] & 1 -> 0 : 1)
            };
            if
            :: owner[s] == me ->
#ifdef BUG_EARLY_DECREMENT
                atomic { stack[me] = stack[me] & ~(1 << s); outstanding-- };
                remark(s, me);
#else
                remark(s, me);
                /* answer done: the entry leaves my stack, the count drops */
                atomic { stack[me] = stack[me] & ~(1 << s); outstanding-- }
#endif
            :: else ->
                /* forwarding: the segment changed owner */
                atomic {
                    stack[me] = stack[me] & ~(1 << s);
                    o = owner[s];
                    push_to(o, s)
                }
            fi;
            s = 0; o = 0
        :: /* terminate */
#ifndef BUG_STOP_ACCEPT_EARLY
            atomic { retire(me); cleaned[me] = true };
#else
            accepting[me] = false;
            atomic { global = global | stack[me]; stack[me] = 0 };
            atomic {
                for (k : 0 .. NS - 1) {
                    if
                    :: owner[k] == me -> owner[k] = NONE
                    :: else -> skip
                    fi
                }
                k = 0;
                cleaned[me] = true
            };
#endif
            break
        od
    } unless {
        atomic { kill[me] && !cleaned[me] -> dead[me] = true }
    }
}

proctype Killer(byte c)
{
    if
    :: kill[c] = true
    :: skip
    fi
}

init {
    atomic {
        owner[0] = 0; owner[1] = 1;
        accepting[0] = true; accepting[1] = true;
        run Daemon();
        run Loop();
        run Client(0);
        run Client(1);
        run Killer(0);
        run Killer(1)
    }
}
