/* The collection cycle of one heap: trigger, stop, mark, sweep, verify,
 * release.  See Note [Collection cycle] in collector.c. */
#ifndef HEAPD_DAEMON_COLLECTOR_H
#define HEAPD_DAEMON_COLLECTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "notify.h"

struct heap;
struct workers;

/* Start the heap's collector thread.  CYCLE_DONE is sent after cycles
 * complete; OUTBOX becomes every marking job's outbox_notify (Note
 * [Collector handoff] in handoff.c). */
int collector_launch(struct heap *h, struct workers *w,
                     struct notify cycle_done, struct notify outbox);
/* Before the collector thread starts, with no client connected: the two
 * verifying cycles of Note [Recovery cycles] (collector.c).  Returns 0,
 * or -EUCLEAN when the verifier found failures (the first cycle's, if
 * there were any: then nothing was swept). */
int collector_recover(struct heap *h, struct workers *w);
/* The same cycles, run by the collector thread once no hold is on (kept
 * clients resumed or dropped); grants wait for them. */
void collector_recover_later(struct heap *h);
/* Finish any cycle under way and stop the thread.  Call with no client
 * connected (their slots free). */
void collector_join(struct heap *h);
/* heapd is stopping: a save or a heapctl load under way in H's collector
 * ends at once, failed (a stop waits for the cycle they hold up). */
void collector_stopping(struct heap *h);

/* Any thread: while any hold is on (HOLD true adds one, false takes one
 * off), no cycle starts; one under way runs to its end (Note [Resuming
 * clients] in resume.c). */
void collector_hold(struct heap *h, bool hold);
/* No cycle is under way. */
bool collector_idle(struct heap *h);

/* Ask for a cycle (any thread).  Returns the number of the cycle that
 * will satisfy the request: the next one to start. */
uint64_t collector_request(struct heap *h);

/* With heap->lock held: bytes allocated in the heap since heapd started. */
uint64_t collector_bytes_allocated(const struct heap *h);

/* With heap->lock held: bytes the heap may allocate between two cycles,
 * gc_overhead percent of the live bytes (at least of TRIGGER_FLOOR). */
uint64_t collector_allocation_budget(const struct heap *h);

/* With heap->lock held: bytes allocated since the running (or last) cycle
 * started. */
uint64_t collector_allocated_this_cycle(const struct heap *h);
/* With heap->lock held: the cycle a grant waits for -- the recovery
 * cycles (Note [Recovery cycles]), or the cycle under way once it has
 * seen too much allocated (Note [Pacing]) -- else 0. */
uint64_t collector_paced_until(const struct heap *h);
/* With heap->lock held: the number of the cycle under way, 0 if none. */
uint64_t collector_running(const struct heap *h);
/* With heap->lock held: how far the heap's committed memory may grow
 * before grants wait for a cycle, and that memory: Note [Heap goal]. */
uint64_t collector_growth_cap(const struct heap *h);
uint64_t collector_committed(const struct heap *h);

/* With heap->lock held: start a cycle if allocation since the last one
 * started reaches gc_overhead percent of the live bytes, less the runway
 * (Note [Heap goal]). */
void collector_check_trigger(struct heap *h);

/* With heap->lock held: a slot is being freed; keep its allocation count. */
void collector_retire_slot(struct heap *h, unsigned slot);

#endif
