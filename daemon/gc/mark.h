/* Marking: tracing the object graph in parallel.  See Note [Parallel
 * marking] in mark.c (references are checked by validate.h). */
#ifndef HEAPD_DAEMON_MARK_H
#define HEAPD_DAEMON_MARK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lock.h"
#include "notify.h"

struct heap;

struct mark_packet;

struct mark_job {
    struct heap *h;
    uint8_t epoch;
    struct hd_mutex mu;
    pthread_cond_t cv;
    struct mark_packet *pool;  /* shared work, guarded by mu */
    size_t pool_n;             /* entries in the pool, guarded by mu */
    size_t stack_cap;          /* Note [Bounded mark stacks]: entries a */
    size_t pool_cap;           /* stack, and the pool, may hold */
    unsigned nworkers;
    unsigned waiting;          /* workers with no work, guarded by mu */
    bool done;
    /* Note [Remark] in daemon/gc/remark.c, guarded by mu */
    uint32_t remark_global;    /* the global remark stack (a segment, 0:
                                  empty), linked through seg.remark_next */
    uint32_t remark_outbox;    /* OWNED segments for the loop thread to
                                  send to their owners */
    struct notify outbox_notify; /* wakes the loop thread to take the
                                  outbox (Note [Collector handoff]) */
    uint64_t remark_outstanding; /* flagged and not yet rescanned */
    pthread_cond_t remark_cv;  /* the collector waits for remark work */
    uint64_t remark_sent, remark_daemon; /* for the heap's stats */
    _Atomic uint64_t overflows;  /* stacks or pool that overflowed */
    _Atomic uint64_t marked;   /* objects marked this cycle */
    _Atomic uint64_t marked_bytes; /* and their bytes, headers included */
    _Atomic uint64_t urs_entries; /* URS entries consumed this cycle */
    /* Note [Marking C stack captures last] in mark.c, under heap->lock */
    uintptr_t *captured;       /* captured references not marked yet */
    size_t ncaptured, capcaptured;
    bool captures_marked;      /* the first of them have been marked */
    uint64_t captured_first;   /* objects they marked first */
    uint64_t captured_bytes_at; /* marked_bytes when they were first marked */
#ifndef NDEBUG
    uint64_t releases;         /* of mu: Note [Checking remark states] */
#endif
};

void mark_job_init(struct mark_job *j, struct heap *h, uint8_t epoch,
                   unsigned nworkers);
void mark_job_destroy(struct mark_job *j);

/* With heap->lock held, mutators running: mark every global root and
 * every root stack the daemon wins (Note [Stack marking handshake]). */
void mark_roots(struct mark_job *j);

/* With heap->lock held: mark slot SLOT's root stack.  STOPPED: its mutator
 * is stopped or blocked, so the daemon takes the stack whatever the
 * handshake words say (final sync). */
void mark_stack(struct mark_job *j, unsigned slot, bool stopped);

/* With heap->lock held: consume slot SLOT's URS ring up to its head,
 * validating and queueing every entry (Note [Update remembered set]).  J
 * may be NULL outside marking: the entries are then dropped.  Returns the
 * entries consumed. */
uint64_t mark_urs(struct heap *h, struct mark_job *j, unsigned slot);
/* With heap->lock held, as SLOT is freed: mark the fields of a save
 * record staged at its ring's head (Note [Saving under the barrier] in
 * client/barrier.c).  J may be NULL: nothing to do. */
void mark_staged(struct heap *h, struct mark_job *j, unsigned slot);

/* With heap->lock held, no worker running: mark the C stack captures
 * held back so far (Note [Marking C stack captures last]); false if
 * there were none. */
bool mark_captures(struct mark_job *j);
/* What the captures retained this cycle: objects they marked first and
 * the bytes marked since (the job's end). */
uint64_t mark_captures_bytes(struct mark_job *j);

/* Start a new round of workers on the same job. */
void mark_round_reset(struct mark_job *j);

/* One worker's share of tracing (a workers_fn). */
void mark_worker(void *job, unsigned worker);

/* Drain the shared pool on the calling thread, scanning at most BUDGET
 * objects.  Returns true if the pool was emptied, false if the budget ran
 * out (the rest stays in the pool). */
bool mark_drain(struct mark_job *j, uint64_t budget);

/* True if the shared pool is empty. */
bool mark_pool_empty(struct mark_job *j);

#endif
