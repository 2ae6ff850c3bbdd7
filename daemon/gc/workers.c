/* The collector's worker pool.  See workers.h. */
#include "workers.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "futex.h"

/* Note [Worker priority]
 * ~~~~~~~~~~~~~~~~~~~~~~
 * Marking and sweeping run concurrently with the mutators, on the same
 * cores.  A mutator that needs the daemon (a segment grant, room in its URS
 * ring) waits for the loop thread, and a mutator waiting for a core is a
 * mutator pause nobody counts.  Giving the workers a lower nice value is
 * not enough: a thread that has just been given a core keeps it for its
 * minimum slice whatever its nice value, so a mutator or the loop thread
 * woken meanwhile waits for the next scheduler tick (4 ms at HZ=250, and
 * with a kernel built without preemption nothing else ends the slice).
 * Measured in latency_bench: 4 ms iterations, the woken mutator queued
 * behind a nice-5 worker while the other core sat idle.  Only a thread of
 * the idle scheduling class (SCHED_IDLE) is preempted at once by a waking
 * normal one.
 *
 * So the workers run in the idle class while nobody waits for their cycle,
 * and mutators and the loop thread always get a core at once.  But the
 * idle class alone starves them when mutators keep every core busy, and a
 * cycle somebody waits for would then never end (measured: a test of three
 * spinning processes on two cores went from 1 s to 100 s).  So whenever a
 * request waits for a cycle -- a heapd_collect, a grant held back by pacing
 * (Note [Pacing]) or by a full heap -- the loop thread marks the pool
 * urgent (workers_set_urgent), which moves every worker to the normal
 * class at nice WORKER_NICE until nothing waits any more.  It does so
 * itself, by thread id: a starved idle-class worker could wait seconds for
 * a core just to move itself.  Allocation that outruns the collector ends
 * up waiting on pacing, so it too makes the pool urgent.  So does heapd's
 * stop, which waits for the cycle under way (Note [Resuming clients] in
 * daemon/resume.c, or collector_join): with
 * the workers left idle behind two busy cores, a stop's last sweep went
 * on at 4 segments a second and heapd was still stopping after 60 s.
 *
 * The idle class is not quite enough either: the kernel still gives an
 * idle-class thread a share of a busy core now and then, and without a
 * preempting wakeup it keeps the core until the next tick, 4 ms.  So an
 * idle-class worker also yields once WORKER_YIELD_NS have passed since it
 * last did (checked at its checkpoints, a clock read): a no-op when nothing
 * else wants the core, and the bound on what it can take from a mutator
 * when something does.  Not at every checkpoint: yielding every few tens
 * of microseconds hands the core to the prefault threads of clients (also
 * idle class, Note [Pre-faulting]) as often, and measured, marking took
 * 20-50% longer.
 *
 * An unprivileged thread may enter the idle class but not leave it (the
 * kernel asks for CAP_SYS_NICE or RLIMIT_NICE); workers_init tries both
 * ways on a probe thread first, and where leaving is refused the workers
 * stay in the normal class at nice WORKER_NICE throughout.
 */
#define WORKER_NICE 5
#define WORKER_YIELD_NS 200000u

/* The calling worker's pool (NULL on every other thread), and when it
 * last yielded. */
static _Thread_local struct workers *my_pool;
static _Thread_local uint64_t my_last_yield;

/* Move thread TID (0: the caller) to the idle class or back. */
static int set_class(pid_t tid, bool idle)
{
    struct sched_param none = {0};
    return sched_setscheduler(tid, idle ? SCHED_IDLE : SCHED_OTHER, &none) == 0
               ? 0
               : -errno;
}

void workers_checkpoint(void)
{
    struct workers *w = my_pool;
    if (!w || !w->idle_ok ||
        atomic_load_explicit(&w->urgent, memory_order_relaxed))
        return;
    uint64_t now = monotonic_ns();
    if (now - my_last_yield >= WORKER_YIELD_NS) {
        sched_yield();
        my_last_yield = now;
    }
}

/* Measured, when the workers moved themselves at their checkpoints: the
 * globals suite under ThreadSanitizer went from 30 s to 200 s. */
void workers_set_urgent(struct workers *w, unsigned who, bool waits)
{
    if (!w->idle_ok)
        return;
    hd_mutex_lock(&w->mu);
    w->waits = waits ? w->waits | who : w->waits & ~who;
    bool urgent = w->waits != 0;
    if (atomic_load(&w->urgent) != urgent) {
        atomic_store(&w->urgent, urgent);
        for (unsigned i = 0; i < w->n; i++)
            if (w->tids[i] != 0)
                (void)set_class(w->tids[i], !urgent);
    }
    hd_mutex_unlock(&w->mu);
}

/* Can a thread of this process leave the idle class again? */
static void *probe_main(void *p)
{
    bool *ok = p;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), WORKER_NICE);
    *ok = set_class(0, true) == 0 && set_class(0, false) == 0;
    return NULL;
}

static bool idle_class_usable(void)
{
    pthread_t t;
    bool ok = false;
    if (pthread_create(&t, NULL, probe_main, &ok) != 0)
        return false;
    pthread_join(t, NULL);
    return ok;
}

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
    /* Note [Worker priority]; not fatal: the workers just compete as
     * equals */
    pid_t tid = (pid_t)syscall(SYS_gettid);
    char name[16];
    snprintf(name, sizeof name, "heapd-gc-%u", a.id % 1000u);
    pthread_setname_np(pthread_self(), name); /* for top -H, and the tests */
    (void)setpriority(PRIO_PROCESS, (id_t)tid, WORKER_NICE);
    my_pool = w;
    hd_mutex_lock(&w->mu);
    w->tids[a.id] = tid;
    if (w->idle_ok)
        (void)set_class(0, !atomic_load(&w->urgent));
    for (;;) {
        while (!w->quit && w->job == seen)
            hd_cond_wait(&w->start_cv, &w->mu);
        if (w->quit)
            break;
        seen = w->job;
        workers_fn fn = w->fn;
        void *arg = w->arg;
        bool take_part = a.id < w->active;
        hd_mutex_unlock(&w->mu);
        if (take_part)
            fn(arg, a.id);
        hd_mutex_lock(&w->mu);
        if (--w->running == 0)
            pthread_cond_signal(&w->done_cv);
    }
    hd_mutex_unlock(&w->mu);
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
    atomic_init(&w->urgent, false);
    w->idle_ok = idle_class_usable();
    hd_mutex_init(&w->job_lock);
    hd_mutex_init(&w->mu);
    pthread_cond_init(&w->start_cv, NULL);
    pthread_cond_init(&w->done_cv, NULL);
    w->threads = calloc(n, sizeof *w->threads);
    w->tids = calloc(n, sizeof *w->tids);
    if (!w->threads || !w->tids) {
        free(w->threads);
        free(w->tids);
        return -ENOMEM;
    }
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
    hd_mutex_lock(&w->job_lock);
    hd_mutex_lock(&w->mu);
    w->fn = fn;
    w->arg = arg;
    w->active = active < 1 ? 1 : active > w->n ? w->n : active;
    w->running = w->n;
    w->job++;
    pthread_cond_broadcast(&w->start_cv);
    while (w->running > 0)
        hd_cond_wait(&w->done_cv, &w->mu);
    hd_mutex_unlock(&w->mu);
    hd_mutex_unlock(&w->job_lock);
}

void workers_destroy(struct workers *w)
{
    hd_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->start_cv);
    hd_mutex_unlock(&w->mu);
    for (unsigned i = 0; i < w->n; i++)
        pthread_join(w->threads[i], NULL);
    free(w->threads);
    free(w->tids);
    w->threads = NULL;
    w->tids = NULL;
    w->n = 0;
}
