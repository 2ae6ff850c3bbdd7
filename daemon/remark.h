/* Remarking segments after a mark-stack overflow, by their owners or by
 * the daemon.  See Note [Remark] in remark.c. */
#ifndef HEAPD_DAEMON_REMARK_H
#define HEAPD_DAEMON_REMARK_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "heapd.pb-c.h"

struct heap;
struct mark_job;
struct conn;
struct daemon;

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

/* Loop thread: the handle that wakes it to send requests. */
int remark_start(struct heap *h, struct daemon *d);
/* The loop has stopped with no client left: route what waits to be sent
 * (to the global stack now: nobody owns anything), so that a cycle under
 * way can finish (call before collector_stop). */
void remark_drain(struct heap *h);
void remark_stop(struct heap *h);

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
/* SEG, popped from the global stack, is owned: send it to its owner. */
void remark_forward(struct mark_job *j, uint32_t seg);

/* Collector thread, workers idle: wait until remark work comes back or
 * none is outstanding.  True if there is marking to do (run the workers
 * again), false when neither marking nor remark work is left. */
bool remark_wait(struct mark_job *j);
/* With j->mu held: no remark work outstanding. */
bool remark_none_locked(const struct mark_job *j);

/* Loop thread, with heap->lock held: client ID is gone or said goodbye;
 * what it was asked to rescan goes to the global stack. */
void remark_client_gone(struct heap *h, uint64_t id);
/* Loop thread: client C answered. */
void remark_done(struct conn *c, const Heapd__RemarkDone *r);

#ifndef NDEBUG
/* assert() helper, with heap->lock held at the end of marking: no
 * segment is left flagged. */
bool remark_check_clear(const struct heap *h);
#endif

#endif
