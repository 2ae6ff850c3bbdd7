/* models/remark.pml: remarking segments after a mark-stack overflow, with
 * owners, orphans and the adoption lock (Note [Remark]).
 *
 * It follows the code: Note [Remark] in daemon/gc/remark.c (the per-segment
 * state machine: remark_flag, remark_pop_locked, remark_lock_unowned,
 * remark_finish, remark_forward, route, remark_client_gone, remark_done),
 * refill() and drop_grouped() in daemon/gc/mark.c, client_leaves() and
 * Note [Client lifecycle] in daemon/session.c, grant_reusable() and
 * seg_return()/seg_orphan() in daemon/gc/segment.c, final_sync() in
 * daemon/gc/collector.c, and Note [Remark requests] in client/remark.c.
 * Each step below names the function it stands for; when one of those
 * changes, change the step here.
 *
 * Processes and what they stand for:
 *   Marker     the mark workers overflowing their stacks: drop_grouped()
 *              (mark.c) calls remark_flag() on a segment, at any moment of
 *              marking, also while that segment is being rescanned;
 *   Worker     a mark worker out of packets: refill() (mark.c) pops the
 *              global remark stack (remark_pop_locked), takes the adoption
 *              lock (remark_lock_unowned), rescans an ownerless segment
 *              under it (rescan(), two steps: a flag can land in between)
 *              and finishes (remark_finish), or forwards an OWNED one
 *              (remark_forward: OUTBOX);
 *   Loop       the daemon's loop thread, one atomic step per event (every
 *              one runs under heap->lock on one thread): route() the
 *              outbox, session_handle() of one client frame (SegmentReturn
 *              -> seg_return, RemarkDone -> remark_done, Goodbye ->
 *              handle_goodbye -> client_leaves), a grant of a reusable
 *              segment (handle_segment_request -> grant_reusable, under
 *              the adoption lock), on_read() seeing a dead client's EOF
 *              (CLOSING; or conn_fail on a truncated last frame: CLOSING
 *              with its last frames unread), on_closed() ->
 *              session_closed() -> client_leaves;
 *   Collector  run_cycle(): snapshot() starts marking, final_sync() ends
 *              it only when remark_outstanding == 0 (remark_none_locked),
 *              and the sweep files the ownerless segments as reusable;
 *   Client     libheapd: its agent thread receiving SegmentGrant
 *              (remark_granted, as each grant is read) and RemarkRequest (remark_request,
 *              then remark_service(c, NULL): one it does not own is
 *              answered released at once), a mutator at a safepoint
 *              rescanning its current segment and answering rescanned
 *              (service_pass, rescan, send_answers), a segment going back
 *              (return_segments -> remark_returned: SegmentReturn, then
 *              released if it was asked about), and heapd_disconnect's
 *              Goodbye; it may die at any step (SIGKILL: `unless`), and
 *              its socket then closes.
 *   Client->daemon and daemon->client messages travel on FIFO channels
 *   (one socket each way): a return the client sends before an answer is
 *   read first, and a dead client's last frames are read before its EOF.
 *
 * The state, as in the code:
 *   owner[s]     NONE: not OWNED (FILLED, ownerless: returned or
 *                orphaned), else the client that owns it (seg.owner with
 *                SEG_OWNED);
 *   rs[s]        seg.remark: R_NONE, R_GLOBAL, R_RESCANNING, R_OUTBOX,
 *                R_SENT (to sent_to[s], seg.remark_to), and again[s]
 *                (REMARK_AGAIN); every state but R_NONE counts in
 *                outstanding (remark_outstanding);
 *   reusable[s]  reuse_bits: set by the sweep for FILLED segments, cleared
 *                by a grant; a segment returned or orphaned during marking
 *                is not reusable before the next sweep;
 *   conn[c]      CONN_READY, CONN_CLOSING, or closed (on_closed ran);
 *                left[c]: client_leaves ran (Goodbye: c->gone, or close);
 *   mine[c]      the client's `owned` bitmap (client/remark.c), queued[c]
 *                its `queued` requests (always segments it owns: the others
 *                are answered at once); kill[c]: it died, ended[c]: it said
 *                Goodbye and stopped.
 * Ghosts: need[s], flagged and not rescanned since (set by every flag);
 * fgen[s], the flags of s this cycle: a rescan clears need[s] only if no
 * flag came since it started (a snapshot of fgen), so a rescan that a
 * flag overtakes leaves the work to the AGAIN rule.
 *
 * Sizes: 2 clients, 2 segments (segment i first owned by client i), 2
 * cycles, at most MAXFLAGS (2) overflows a cycle: about 4 million states,
 * 10 seconds.  Each client may adopt reusable segments (those FILLED at the
 * end of the first cycle), rescan or return what it is asked about, return
 * segments on its own, say Goodbye, or die at any step.
 *
 * Abstractions (what the model does not distinguish):
 *   - one Worker: the state machine lets one party at a time rescan a
 *     segment, and what other workers do to it is flag it (Marker); a flag
 *     from final_sync's mark_drain is a flag just before it;
 *   - a grant is a loop event at any time (the arrival of the client's
 *     SegmentRequest); grants of blank segments are not modelled (nothing
 *     in them is marked);
 *   - which of the client's threads holds a requested segment is a
 *     nondeterministic choice: rescan it (a running mutator's current
 *     segment) or return it (reserve, full queue, blocked mutator); the
 *     rescanned answer goes out in the step that ends the rescan
 *     (service_pass sends it right after, and nothing can return a
 *     mutator's current segment while that mutator is in service_pass);
 *   - not modelled: large runs (never OWNED: the daemon rescans them),
 *     route()'s out-of-memory branch, and conn_fail() of a live client's
 *     connection (libheapd's mutators do not stop when the daemon closes
 *     it, while the daemon orphans its segments).
 *
 * Properties:
 *   (R1) marking never ends while a flagged segment is not rescanned since
 *        its last flag (final_sync, with remark_outstanding == 0: no
 *        need[s]; and every segment's remark state is NONE, as
 *        remark_check_clear asserts);
 *   (R2) every rescan, at its start and at its end, is done by a client
 *        that owns the segment (the daemon says it is its owner and the
 *        client thinks so), or by the daemon with the adoption lock held
 *        on a segment that is not OWNED and that no live client believes
 *        it holds: nobody may allocate into a segment while it is
 *        rescanned by someone else;
 *   (R3) no invalid end state (no deadlock: final_sync waits forever only
 *        if remark work is stuck), whenever clients terminate or die, and
 *        no request is ever routed to a client that has left (nobody would
 *        answer it).
 *
 * Mutants (spin -D...), each must produce an error:
 *   BUG_STOP_ACCEPT_EARLY  client_leaves in two steps: what was SENT to the
 *                          client moves to the global stack first, and its
 *                          segments are orphaned in a later loop event;
 *                          meanwhile a worker forwards one of them and the
 *                          loop routes it to the client that left (R3);
 *   BUG_DAEMON_REMARKS_OWNED  remark_lock_unowned does not check the
 *                          segment's state: a worker rescans an OWNED
 *                          segment (R2);
 *   BUG_EARLY_DECREMENT    the client answers RemarkDone rescanned before
 *                          it rescans: the daemon finishes the segment and
 *                          marking can end first (R1);
 *   BUG_NO_AGAIN           remark_flag ignores a flag on a RESCANNING or
 *                          SENT segment: the rescan in progress may have
 *                          passed the dropped block (R1).
 *
 * Not in scripts/model-check, on purpose:
 *   MUTATOR_GRANT_LAG      the race this model found in an earlier
 *                          version of the code: mutator_request_segments
 *                          marked granted segments owned on the mutator's
 *                          thread after agent_call returned, while the
 *                          agent thread could already be serving a
 *                          RemarkRequest for one of them: it answered
 *                          released, the daemon took the segment back and
 *                          rescanned it while the mutator allocated into
 *                          it.  The code now marks every grant owned on
 *                          the agent thread as it reads it (remark_granted,
 *                          the agent's on_grant hook), which is what this
 *                          model does; -DMUTATOR_GRANT_LAG shows the old
 *                          race (R2 fails).
 */

#define NC      2           /* clients */
#define NS      2           /* segments */
#define NONE    2           /* owner: nobody (not OWNED) */
#ifndef CYCLES
#define CYCLES  2
#endif
#ifndef MAXFLAGS
#define MAXFLAGS 2          /* overflows (remark_flag calls) a cycle */
#endif

/* seg.remark (enum remark_state in daemon/gc/remark.h) */
#define R_NONE          0
#define R_GLOBAL        1
#define R_RESCANNING    2
#define R_OUTBOX        3
#define R_SENT          4

/* conn.state */
#define READY   0           /* CONN_READY */
#define CLOSING 1           /* CONN_CLOSING: frames are no longer read */
#define CLOSED  2           /* on_closed ran: not in d->conns */

#define BIT(s)  (1 << (s))

mtype = { REQ, GRANT, RET, RESCANNED, RELEASED, BYE };

/* daemon -> client: RemarkRequest, SegmentGrant */
chan down[NC] = [4] of { mtype, byte };
/* client -> daemon: SegmentReturn, RemarkDone (rescanned / released),
 * Goodbye: at most one return and one answer a segment, and a Goodbye */
chan up[NC] = [5] of { mtype, byte };

/* the daemon */
byte owner[NS];
byte rs[NS];
bool again[NS];
byte sent_to[NS];
byte outstanding;
bool reusable[NS];
bool adopt_lock;            /* heap->adoption */
bool marking;               /* h->marking != NULL */
byte nflags;
byte conn[NC];
bool left[NC];

/* the clients */
byte mine[NC];
byte queued[NC];
#ifdef MUTATOR_GRANT_LAG
byte lag[NC];               /* granted, remark_owned not called yet */
#endif
bool kill[NC];              /* SIGKILL: from then on the client's only
                               step is its `unless` escape */
bool ended[NC];             /* said Goodbye and stopped */

/* ghosts */
bool need[NS];
byte fgen[NS];

#ifdef MUTATOR_GRANT_LAG
#define HOLDS(c, s) (!kill[c] && !ended[c] && ((mine[c] | lag[c]) & BIT(s)))
#else
#define HOLDS(c, s) (!kill[c] && !ended[c] && (mine[c] & BIT(s)))
#endif

/* R2, a rescan by the daemon: the adoption lock is held, the segment is
 * not OWNED, and no live client thinks it may allocate into it */
#define DAEMON_MAY_RESCAN(s) \
    (adopt_lock && owner[s] == NONE && !HOLDS(0, s) && !HOLDS(1, s))
/* R2, a rescan by client C: the daemon and C agree that C owns it */
#define OWNER_MAY_RESCAN(c, s) (owner[s] == c && (mine[c] & BIT(s)))

/* push_global_locked */
inline push_global(s)
{
    rs[s] = R_GLOBAL;
    again[s] = false;
    sent_to[s] = 0
}

/* finish_locked: the remark of S is over */
inline finish(s)
{
    if
    :: again[s] -> push_global(s)
    :: else ->
        rs[s] = R_NONE;
        sent_to[s] = 0;
        assert(outstanding > 0);
        outstanding--
    fi
}

/* remark_flag, one segment (drop_grouped: the worker's stack overflowed
 * and dropped entries in S) */
inline flag(s)
{
    need[s] = true;
    fgen[s]++;
    if
    :: rs[s] == R_NONE ->
        outstanding++;
        push_global(s)
    :: rs[s] == R_RESCANNING || rs[s] == R_SENT ->
#ifndef BUG_NO_AGAIN
        again[s] = true
#else
        skip
#endif
    :: else -> skip     /* GLOBAL, OUTBOX: its rescan is still to come */
    fi
}

/* seg_orphan: C's segments become FILLED, ownerless (not reusable) */
inline seg_orphan(c)
{
    for (k : 0 .. NS - 1) {
        if
        :: owner[k] == c -> owner[k] = NONE
        :: else -> skip
        fi
    }
    k = 0
}

/* remark_client_gone: everything SENT to C goes to the global stack */
inline remark_client_gone(c)
{
    for (k : 0 .. NS - 1) {
        if
        :: rs[k] == R_SENT && sent_to[k] == c -> push_global(k)
        :: else -> skip
        fi
    }
    k = 0
}

/* client_leaves (session.c), under heap->lock: one step */
inline client_leaves(c)
{
#ifndef BUG_STOP_ACCEPT_EARLY
    seg_orphan(c);
    remark_client_gone(c);
    left[c] = true
#else
    /* the requests move now, the segments are orphaned by a later event
     * (the Loop's `half` step) */
    remark_client_gone(c);
    left[c] = true;
    half[c] = true
#endif
}

proctype Marker()
{
    byte s;
end:
    do
    :: atomic {
            marking && nflags < MAXFLAGS ->
            if
            :: s = 0
            :: s = 1
            fi;
            nflags++;
            flag(s);
            s = 0
        }
    od
}

proctype Worker()
{
    byte s, snap;
    bool unowned;
end:
    do
    :: /* refill: remark_pop_locked (under j->mu) */
        atomic {
            if
            :: rs[0] == R_GLOBAL -> s = 0
            :: rs[1] == R_GLOBAL -> s = 1
            fi;
            rs[s] = R_RESCANNING;
            again[s] = false
        };
        /* remark_lock_unowned: lock heap->adoption, read the segment's
         * state; an OWNED one: unlock */
        atomic {
            !adopt_lock ->
            adopt_lock = true;
#ifndef BUG_DAEMON_REMARKS_OWNED
            unowned = (owner[s] == NONE);
#else
            unowned = true;
#endif
            if
            :: !unowned -> adopt_lock = false
            :: else -> skip
            fi
        };
        if
        :: unowned ->
            /* rescan (mark.c), under the adoption lock: it starts ... */
            atomic {
                assert(DAEMON_MAY_RESCAN(s));       /* R2 */
                snap = fgen[s]
            };
            /* ... and ends: a flag may have come meanwhile */
            atomic {
                assert(DAEMON_MAY_RESCAN(s));       /* R2 */
                if
                :: fgen[s] == snap -> need[s] = false
                :: else -> skip
                fi;
                snap = 0
            };
            adopt_lock = false;                     /* remark_unlock_unowned */
            atomic { finish(s) }                    /* remark_finish */
        :: else ->
            /* remark_forward: to the outbox, for the loop thread */
            atomic { rs[s] = R_OUTBOX; again[s] = false }
        fi;
        s = 0;
        unowned = false
    od
}

/* route (remark.c): every OUTBOX segment goes to the client that owns it
 * now (SENT; on the wire if its connection is READY, else its close moves
 * it), or back to the global stack if it is not OWNED */
inline route()
{
    for (k : 0 .. NS - 1) {
        if
        :: rs[k] == R_OUTBOX ->
            o = owner[k];
            if
            :: o != NONE && conn[o] != CLOSED ->   /* find_conn */
                assert(!left[o]);                   /* R3 */
                rs[k] = R_SENT;
                sent_to[k] = o;
                if
                :: conn[o] == READY -> down[o]!REQ, k   /* send_request */
                :: else -> skip     /* closing: its close moves it */
                fi
            :: else -> push_global(k)   /* returned or orphaned meanwhile */
            fi;
            o = 0
        :: else -> skip
        fi
    }
    k = 0
}

/* session_handle of one frame from client C (on_frame: READY only) */
inline frame(c)
{
    up[c]?m, s;
    if
    :: left[c] ->
        /* after Goodbye (c->gone): rejected, conn_fail */
        conn[c] = CLOSING
    :: else ->
        if
        :: m == RET ->
            /* handle_segment_return -> seg_return */
            if
            :: owner[s] == c -> owner[s] = NONE
            :: else -> skip     /* -EINVAL */
            fi
        :: m == RESCANNED ->
            /* remark_done, rescanned[] */
            if
            :: rs[s] == R_SENT && sent_to[s] == c ->    /* sent_to */
                if
                :: owner[s] == c -> finish(s)           /* owned_by */
                :: else -> push_global(s)   /* returned meanwhile */
                fi
            :: else -> skip     /* bad: not asked */
            fi
        :: m == RELEASED ->
            /* remark_done, released[] */
            if
            :: rs[s] == R_SENT && sent_to[s] == c ->
                if
                :: owner[s] == c ->
                    owner[s] = NONE     /* taken back: seg_return */
                :: else -> skip
                fi;
                push_global(s)
            :: else -> skip
            fi
        :: m == BYE ->
            /* handle_goodbye -> client_leaves; c->gone */
            client_leaves(c)
        fi
    fi;
    m = 0;
    s = 0
}

/* handle_segment_request -> seg_grant_small -> grant_reusable, under
 * the adoption lock: a reusable (FILLED) segment becomes OWNED by C =
 * adoption; the grant goes on the wire.  (The client's SegmentRequest may
 * have been sent just before it died: only its connection matters.) */
#define grant_guard(c) \
    (!adopt_lock && (reusable[0] || reusable[1]) && conn[c] == READY && \
     !left[c] && len(down[c]) < NS)

inline grant(c)
{
    if
    :: reusable[0] -> s = 0
    :: reusable[1] -> s = 1
    fi;
    assert(owner[s] == NONE);
    owner[s] = c;
    reusable[s] = false;
    down[c]!GRANT, s;
    s = 0
}

proctype Loop()
{
    byte k, o, s;
    mtype m;
#ifdef BUG_STOP_ACCEPT_EARLY
    bool half[NC];
#endif
end:
    do
    :: /* on_route (uv_async_send from remark_forward) */
        atomic { (rs[0] == R_OUTBOX || rs[1] == R_OUTBOX) -> route() }
    :: /* a frame from client 0 / 1 */
        atomic { conn[0] == READY && nempty(up[0]) -> frame(0) }
    :: atomic { conn[1] == READY && nempty(up[1]) -> frame(1) }
    :: /* handle_segment_request -> grant_reusable (client 0 / 1) */
        atomic { grant_guard(0) -> grant(0) }
    :: atomic { grant_guard(1) -> grant(1) }
    :: /* on_read: EOF after a dead client's last frames: CLOSING */
        atomic { conn[0] == READY && kill[0] && empty(up[0]) -> conn[0] = CLOSING }
    :: atomic { conn[1] == READY && kill[1] && empty(up[1]) -> conn[1] = CLOSING }
    :: /* on_read: a dead client's stream ends inside a frame: conn_fail,
        * CLOSING with its last frames unread */
        atomic { conn[0] == READY && kill[0] -> conn[0] = CLOSING }
    :: atomic { conn[1] == READY && kill[1] -> conn[1] = CLOSING }
    :: /* on_closed -> session_closed -> client_leaves (not again after
        * Goodbye: c->gone; the close that follows a Goodbye is left out) */
        atomic {
            conn[0] == CLOSING ->
            do
            :: nempty(up[0]) -> up[0]?_, _
            :: empty(up[0]) -> break
            od;
            if
            :: !left[0] -> client_leaves(0)
            :: else -> skip
            fi;
            conn[0] = CLOSED
        }
    :: atomic {
            conn[1] == CLOSING ->
            do
            :: nempty(up[1]) -> up[1]?_, _
            :: empty(up[1]) -> break
            od;
            if
            :: !left[1] -> client_leaves(1)
            :: else -> skip
            fi;
            conn[1] = CLOSED
        }
#ifdef BUG_STOP_ACCEPT_EARLY
    :: atomic { half[0] -> seg_orphan(0); half[0] = false }
    :: atomic { half[1] -> seg_orphan(1); half[1] = false }
#endif
    od
}

proctype Collector()
{
    byte cyc, k;
    for (cyc : 1 .. CYCLES) {
        /* snapshot: marking starts */
        atomic {
            marking = true;
            nflags = 0;
            fgen[0] = 0;
            fgen[1] = 0
        };
        /* the workers run dry and remark_wait returns false; final_sync:
         * remark_none_locked, with the world stopped */
        atomic {
            outstanding == 0 ->
            for (k : 0 .. NS - 1) {
                assert(!need[k]);                   /* R1 */
                assert(rs[k] == R_NONE)             /* remark_check_clear */
            }
            marking = false;
            /* the sweep: FILLED segments become reusable (reuse_bits) */
            for (k : 0 .. NS - 1) {
                reusable[k] = (owner[k] == NONE)
            }
            k = 0
        }
    }
}

proctype Client(byte me)
{
    byte s, snap;
    mtype m;
    {
end:
        do
        :: /* the agent thread reads a frame */
            atomic {
                nempty(down[me]) ->
                down[me]?m, s;
                if
                :: m == GRANT ->
#ifndef MUTATOR_GRANT_LAG
                    /* on_refill: remark_owned(true) on this thread */
                    mine[me] = mine[me] | BIT(s)
#else
                    /* mutator_request_segments: the mutator does it */
                    lag[me] = lag[me] | BIT(s)
#endif
                :: m == REQ ->
                    /* remark_request: queued; then remark_service(c,
                     * NULL) on this thread answers at once one that is
                     * not mine (service_pass: !is_owned, returned, its
                     * SegmentReturn ahead) */
                    if
                    :: mine[me] & BIT(s) -> queued[me] = queued[me] | BIT(s)
                    :: else -> up[me]!RELEASED, s
                    fi
                fi;
                m = 0;
                s = 0
            }
#ifdef MUTATOR_GRANT_LAG
        :: atomic { lag[me] != 0 -> mine[me] = mine[me] | lag[me]; lag[me] = 0 }
#endif
        :: /* service_pass: a mutator at its safepoint holds it as its
            * current segment: rescan (log the fields), then answer
            * rescanned */
            atomic {
                if
                :: (queued[me] & mine[me] & 1) -> s = 0
                :: (queued[me] & mine[me] & 2) -> s = 1
                fi;
                queued[me] = queued[me] & ~BIT(s);
#ifdef BUG_EARLY_DECREMENT
                up[me]!RESCANNED, s;
#endif
                assert(OWNER_MAY_RESCAN(me, s));    /* R2 */
                snap = fgen[s]
            };
            atomic {
                assert(OWNER_MAY_RESCAN(me, s));    /* R2 */
                if
                :: fgen[s] == snap -> need[s] = false
                :: else -> skip
                fi;
#ifndef BUG_EARLY_DECREMENT
                up[me]!RESCANNED, s;                /* send_answers */
#endif
                s = 0;
                snap = 0
            }
        :: /* return_segments: a segment of mine goes back (it is full, the
            * reserve drains, or service_pass / take_from_blocked gives back
            * a requested one no running mutator holds): SegmentReturn,
            * then remark_owned(false), then remark_returned answers a
            * queued request released */
            atomic {
                if
                :: (mine[me] & 1) -> s = 0
                :: (mine[me] & 2) -> s = 1
                fi;
                up[me]!RET, s;
                mine[me] = mine[me] & ~BIT(s);
                if
                :: queued[me] & BIT(s) ->
                    queued[me] = queued[me] & ~BIT(s);
                    up[me]!RELEASED, s
                :: else -> skip
                fi;
                s = 0
            }
        :: /* heapd_disconnect: Goodbye (what it still holds or was asked
            * about, client_leaves takes over) */
            atomic { up[me]!BYE, 0; ended[me] = true };
            break
        od
    } unless {
        /* SIGKILL, at any step */
        kill[me] && !ended[me]
    }
}

proctype Killer(byte c)
{
end:
    atomic { !ended[c] -> kill[c] = true }
}

init {
    atomic {
        owner[0] = 0; owner[1] = 1;
        mine[0] = BIT(0); mine[1] = BIT(1);
        run Collector();
        run Marker();
        run Worker();
        run Loop();
        run Client(0);
        run Client(1);
        run Killer(0);
        run Killer(1)
    }
}
