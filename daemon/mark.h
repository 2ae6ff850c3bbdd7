/* Marking: validating references and tracing the object graph in parallel.
 * See Note [Validating references] and Note [Parallel marking] in mark.c. */
#ifndef HEAPD_DAEMON_MARK_H
#define HEAPD_DAEMON_MARK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct heap;

/* A validated reference: the object, its mark byte, its block. */
struct mark_ref {
    uintptr_t obj;        /* address of the first field */
    uint8_t *mark;
    uint64_t block_size;  /* bytes the object may occupy, header included */
};

/* Note [Validating references]: fill *out and return true iff R is the
 * first-field address of an allocated block (mark byte != 0). */
bool mark_resolve(const struct heap *h, uintptr_t r, struct mark_ref *out);

/* The object's header, or 0 if its sizes do not fit its block (a corrupt
 * header: counted as a bad reference, its fields not traced). */
uint64_t mark_checked_header(const struct mark_ref *ref);

struct mark_packet;

struct mark_job {
    struct heap *h;
    uint8_t epoch;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct mark_packet *pool;  /* shared work, guarded by mu */
    unsigned nworkers;
    unsigned waiting;          /* workers with no work, guarded by mu */
    bool done;
    _Atomic uint64_t marked;   /* objects marked this cycle */
};

void mark_job_init(struct mark_job *j, struct heap *h, uint8_t epoch,
                   unsigned nworkers);
void mark_job_destroy(struct mark_job *j);

/* With every mutator stopped and heap->lock held: mark what every live
 * mutator's root stack and every global root references, and queue it. */
void mark_roots(struct mark_job *j);

/* One worker's share of tracing (a workers_fn). */
void mark_worker(void *job, unsigned worker);

#endif
