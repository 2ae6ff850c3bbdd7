/* The collector's worker pool.  See workers.h. */
#include "workers.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Note [Worker priority]
 * ~~~~~~~~~~~~~~~~~~~~~~
 * Marking and sweeping run concurrently with the mutators, on the same
 * cores.  A mutator that needs the daemon (a segment grant, room in its URS
 * ring) waits for the loop thread, and a mutator waiting for a core is a
 * mutator pause nobody counts.  So the workers run at a lower priority
 * (nice WORKER_NICE, per thread): whenever a mutator or the loop thread is
 * runnable it gets the core, and the workers use what is left.  The pauses
 * themselves are short: the workers are idle during both stops except for
 * the final-sync drain, which the collector thread does itself.  Not
 * SCHED_IDLE: with mutators busy on every core, idle-class workers would
 * never run and a cycle would never end (measured: a test of three
 * spinning processes on two cores went from 1 s to 100 s).
 */
#define WORKER_NICE 5

struct worker_arg {
    struct workers *w;
    unsigned id;
};

static void *worker_main(void *p)
{
    struct worker_arg a = *(struct worker_arg *)p;
    struct workers *w = a.w;
    uint64_t seen = 0;

    free(p);
    /* Note [Worker priority] */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), WORKER_NICE) < 0)
        (void)0; /* not fatal: the workers just compete as equals */
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && w->job == seen)
            pthread_cond_wait(&w->start_cv, &w->mu);
        if (w->quit)
            break;
        seen = w->job;
        workers_fn fn = w->fn;
        void *arg = w->arg;
        bool take_part = a.id < w->active;
        pthread_mutex_unlock(&w->mu);
        if (take_part)
            fn(arg, a.id);
        pthread_mutex_lock(&w->mu);
        if (--w->running == 0)
            pthread_cond_signal(&w->done_cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int workers_init(struct workers *w, unsigned n)
{
    sigset_t all, old;
    int rc = 0;

    w->n = 0;
    w->job = 0;
    w->running = 0;
    w->quit = false;
    pthread_mutex_init(&w->job_lock, NULL);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->start_cv, NULL);
    pthread_cond_init(&w->done_cv, NULL);
    w->threads = calloc(n, sizeof *w->threads);
    if (!w->threads)
        return -ENOMEM;
    /* workers take no signals: libuv's loop thread handles them */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (unsigned i = 0; i < n; i++) {
        struct worker_arg *a = malloc(sizeof *a);
        if (!a) {
            rc = -ENOMEM;
            break;
        }
        a->w = w;
        a->id = i;
        if ((rc = pthread_create(&w->threads[i], NULL, worker_main, a)) != 0) {
            free(a);
            rc = -rc;
            break;
        }
        w->n++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc < 0)
        workers_destroy(w);
    return rc;
}

void workers_run(struct workers *w, workers_fn fn, void *arg)
{
    workers_run_n(w, fn, arg, w->n);
}

void workers_run_n(struct workers *w, workers_fn fn, void *arg,
                   unsigned active)
{
    pthread_mutex_lock(&w->job_lock);
    pthread_mutex_lock(&w->mu);
    w->fn = fn;
    w->arg = arg;
    w->active = active < 1 ? 1 : active > w->n ? w->n : active;
    w->running = w->n;
    w->job++;
    pthread_cond_broadcast(&w->start_cv);
    while (w->running > 0)
        pthread_cond_wait(&w->done_cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_unlock(&w->job_lock);
}

void workers_destroy(struct workers *w)
{
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->start_cv);
    pthread_mutex_unlock(&w->mu);
    for (unsigned i = 0; i < w->n; i++)
        pthread_join(w->threads[i], NULL);
    free(w->threads);
    w->threads = NULL;
    w->n = 0;
}
