/* Remarking segments after a mark-stack overflow, by their owners or by
 * the daemon.  See Note [Remark] in remark.c.  Nothing here knows a
 * connection: what must go to a client leaves through the outbox, which
 * the loop thread takes (Note [Collector handoff] in handoff.c). */
#ifndef HEAPD_DAEMON_REMARK_H
#define HEAPD_DAEMON_REMARK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct heap;
struct mark_job;

/* A segment's remark state (struct seg.remark), guarded by the marking
 * job's mu.  Every state but NONE counts in remark_outstanding. */
enum remark_state {
    REMARK_NONE = 0,
    REMARK_GLOBAL,      /* on the global remark stack */
    REMARK_RESCANNING,  /* a worker is rescanning it */
    REMARK_OUTBOX,      /* owned: waiting for the loop thread to send it */
    REMARK_SENT,        /* owned: its owner was asked (remark_to) */
};
#define REMARK_STATE(x) ((x) & 0x7f)
#define REMARK_AGAIN 0x80 /* flagged again while RESCANNING or SENT */

/* Any marking thread: flag segments SEGS[0..N) for remark. */
void remark_flag(struct mark_job *j, const uint32_t *segs, size_t n);
/* With j->mu held: take a segment off the global stack (now RESCANNING). */
bool remark_pop_locked(struct mark_job *j, uint32_t *seg);
/* Take the adoption lock if segment SEG has no owner who may allocate in
 * it (true); else false, and no lock is held. */
bool remark_lock_unowned(struct heap *h, uint32_t seg);
void remark_unlock_unowned(struct heap *h);
/* A worker rescanned SEG (RESCANNING). */
void remark_finish(struct mark_job *j, uint32_t seg);
/* SEG, popped from the global stack, is owned: put it in the outbox for
 * its owner and wake the loop thread (j->outbox_notify). */
void remark_forward(struct mark_job *j, uint32_t seg);

/* Collector thread, workers idle: wait until remark work comes back or
 * none is outstanding.  True if there is marking to do (run the workers
 * again), false when neither marking nor remark work is left. */
bool remark_wait(struct mark_job *j);
/* With j->mu held: no remark work outstanding. */
bool remark_none_locked(const struct mark_job *j);

/* ---- the outbox, taken by the loop thread ---- */

/* Can the owner of a segment be asked to rescan it now?  The loop
 * thread's answer, for client CLIENT. */
enum remark_reach {
    REMARK_PEER_GONE,     /* no such client: the daemon rescans it */
    REMARK_PEER_CLOSING,  /* closing: stays SENT until its close moves it */
    REMARK_PEER_READY,    /* ask it */
};
typedef enum remark_reach (*remark_reach_fn)(void *arg, uint64_t client);

/* What the outbox gave: item K asks client CLIENT[K] to rescan segment
 * SEG[K]. */
struct remark_asks {
    size_t n, cap;
    uint32_t *seg;
    uint64_t *client;
};

/* Loop thread, with heap->lock held: empty the outbox.  Each segment still
 * OWNED becomes SENT to its owner; one that is not, or whose owner REACH
 * calls gone, goes back to the global stack.  *OUT (empty on entry; free
 * it with remark_asks_free) gets the asks for owners REACH calls ready.
 * Returns false when memory ran out and part of the outbox waits for
 * another call. */
bool remark_outbox_take(struct heap *h, remark_reach_fn reach, void *arg,
                        struct remark_asks *out);
void remark_asks_free(struct remark_asks *a);

/* Loop thread, with heap->lock held: client ID is gone or said goodbye;
 * what it was asked to rescan goes to the global stack. */
void remark_client_gone(struct heap *h, uint64_t id);

/* Loop thread, with heap->lock held, the client's URS rings consumed:
 * client CLIENT, holding *HELD segments, answered that it rescanned
 * RESCANNED[0..NR) and released RELEASED[0..NL).  *BAD counts segments
 * it was not asked to rescan, *TAKEN_BACK those it released but still
 * owned (now returned for it). */
void remark_answered(struct heap *h, uint64_t client, uint32_t *held,
                     const uint32_t *rescanned, size_t nr,
                     const uint32_t *released, size_t nl, size_t *bad,
                     size_t *taken_back);

/* Note [Checking remark states] in remark.c: with j->mu held, true iff
 * remark_outstanding and the two lists agree with the segments' remark
 * states; logs what disagrees. */
bool remark_check(const struct mark_job *j);

#ifndef NDEBUG
/* assert() helper, with heap->lock held at the end of marking: no
 * segment is left flagged. */
bool remark_check_clear(const struct heap *h);
#endif

#endif
