/* The collector's worker threads: gc_threads of them, shared by all heaps,
 * running one parallel job (a mark or a sweep) at a time. */
#ifndef HEAPD_DAEMON_WORKERS_H
#define HEAPD_DAEMON_WORKERS_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <stdbool.h>
#include <stdint.h>

#include "lock.h"

typedef void (*workers_fn)(void *arg, unsigned worker);

struct workers {
    unsigned n;
    pthread_t *threads;
    pid_t *tids;                /* their thread ids, 0 until they run (mu) */
    struct hd_mutex job_lock;   /* one job at a time */
    struct hd_mutex mu;
    pthread_cond_t start_cv, done_cv;
    uint64_t job;               /* generation of the current job */
    unsigned running;           /* workers still in the current job */
    workers_fn fn;
    void *arg;
    unsigned active;            /* workers taking part in the current job */
    bool quit;
    bool idle_ok;               /* the idle class can be left again */
    unsigned waits;             /* WORKERS_WAIT_* bits, under mu */
    _Atomic bool urgent;        /* waits != 0: somebody waits for a cycle */
};

/* Who waits for the collector's cycles (Note [Worker priority]). */
enum {
    WORKERS_WAIT_REQUEST = 1u << 0, /* a client's request, deferred */
    WORKERS_WAIT_STOP = 1u << 1,    /* heapd's stop, for the cycle under way */
};

int workers_init(struct workers *w, unsigned n);
/* Run FN(ARG, k) on every worker k in 0..n-1 and wait for all of them. */
void workers_run(struct workers *w, workers_fn fn, void *arg);
/* The same on the first ACTIVE workers only (1..n). */
void workers_run_n(struct workers *w, workers_fn fn, void *arg,
                   unsigned active);
void workers_destroy(struct workers *w);

/* Note [Worker priority]: whether WHO (a WORKERS_WAIT_* bit) waits for a
 * cycle (any thread; the workers are in the normal class while anybody
 * waits, in the idle class otherwise), and a worker's checkpoint, where
 * an idle-class worker yields now and then (a no-op on any other
 * thread). */
void workers_set_urgent(struct workers *w, unsigned who, bool waits);
void workers_checkpoint(void);

#endif
