/* The collection cycle of one heap.
 *
 * Note [Collection cycle]
 * ~~~~~~~~~~~~~~~~~~~~~~~
 * One collector thread per heap runs cycles; the workers (gc_threads, shared
 * by all heaps) do the parallel parts.  This is the stop-the-world baseline
 * of issue 3 (DESIGN.md §4 describes the concurrent collector that replaces
 * steps 3-5 later; its correctness is checked against this one through the
 * verifier):
 *   1. Trigger: a request (heapd_collect, heapctl gc, a grant that found the
 *      heap full), or allocation since the last cycle's start above
 *      gc_overhead percent of the live bytes after the last cycle, with a
 *      floor of TRIGGER_FLOOR so that a near-empty heap does not collect
 *      constantly (Go's GOGC, OCaml's space_overhead).  Allocation is
 *      counted by the mutators in their slots and summed by the daemon when
 *      a client asks for segments, which is when allocation can progress.
 *   2. Stop every mutator (Note [Stop the world]).
 *   3. Under the heap lock: next epoch, snapshot the classes of owned
 *      segments, mark the roots.  Then trace with all workers
 *      (Note [Parallel marking]).
 *   4. Sweep with all workers (Note [Sweeping]).
 *   5. Verify if asked (Note [Heap verifier]).
 *   6. Stats, give idle memory back, release the mutators, tell the loop
 *      thread (pending CollectDone replies and grants wait for it).
 * The pause is steps 2-6 and is recorded with the time-to-safepoint.
 * The heap lock is never held while waiting for mutators: the loop thread
 * needs it to free the slots of clients that die meanwhile.
 */
#include "collector.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "globals.h"
#include "heap.h"
#include "log.h"
#include "mark.h"
#include "safepoint.h"
#include "sweep.h"
#include "verify.h"
#include "workers.h"

#define TRIGGER_FLOOR (4u << 20)

struct collector {
    struct heap *h;
    struct workers *workers;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool requested;
    bool quit;
    uint64_t cycles_started;     /* guarded by mu */
    uint64_t alloc_at_last;      /* heap->lock: allocation at last start */
    uv_async_t done;
    collector_done_fn on_done;
    void *arg;
};

static void free_on_close(uv_handle_t *hd)
{
    free(hd->data);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t collector_bytes_allocated(const struct heap *h)
{
    uint64_t n = h->stats.alloc_retired;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        const struct layout_mutator *m = &h->control->mutators[i];
        if (LAYOUT_STATUS_STATE(m->status) != LAYOUT_MUT_FREE)
            n += atomic_load_explicit(&m->alloc_bytes, memory_order_relaxed);
    }
    return n;
}

void collector_retire_slot(struct heap *h, unsigned slot)
{
    struct layout_mutator *m = &h->control->mutators[slot];
    h->stats.alloc_retired += atomic_load(&m->alloc_bytes);
    atomic_store(&m->alloc_bytes, 0);
}

uint64_t collector_request(struct heap *h)
{
    struct collector *gc = h->gc;
    pthread_mutex_lock(&gc->mu);
    uint64_t target = gc->cycles_started + 1;
    gc->requested = true;
    pthread_cond_signal(&gc->cv);
    pthread_mutex_unlock(&gc->mu);
    return target;
}

/* Bytes the heap may allocate between two cycles.  heap->lock held. */
static uint64_t allocation_budget(const struct heap *h)
{
    uint64_t live = h->stats.live_bytes > TRIGGER_FLOOR ? h->stats.live_bytes
                                                        : TRIGGER_FLOOR;
    return live / 100 * h->cfg->gc_overhead;
}

void collector_check_trigger(struct heap *h)
{
    struct collector *gc = h->gc;
    uint64_t since = collector_bytes_allocated(h) - gc->alloc_at_last;
    if (since >= allocation_budget(h))
        collector_request(h);
}

static void run_cycle(struct collector *gc)
{
    struct heap *h = gc->h;
    struct mark_job mj;
    struct sweep_job sj;
    uint64_t t0 = now_ns(), ttsp, verify_failures = 0;
    uint64_t t_mark, t_sweep, t_verify;
    uint8_t epoch;

    safepoint_stop(h, &ttsp);

    pthread_mutex_lock(&h->lock);
    epoch = (uint8_t)layout_next_epoch(h->control->epoch);
    atomic_store(&h->control->epoch, epoch);
    atomic_store(&h->control->phase, LAYOUT_PHASE_MARK);
    gc->alloc_at_last = collector_bytes_allocated(h);
    seg_snapshot_classes(h);
    globals_bump_flag(h);
    mark_job_init(&mj, h, epoch, gc->workers->n);
    mark_roots(&mj);
    pthread_mutex_unlock(&h->lock);

    t_mark = now_ns();
    workers_run(gc->workers, mark_worker, &mj);

    t_sweep = now_ns();
    atomic_store(&h->control->phase, LAYOUT_PHASE_SWEEP);
    sweep_job_init(&sj, h, epoch);
    workers_run(gc->workers, sweep_worker, &sj);

    t_verify = now_ns();
    pthread_mutex_lock(&h->lock);
    if (h->verify)
        verify_failures = verify_heap(h, epoch);
    h->stats.cycles_completed++;
    h->stats.live_bytes = atomic_load(&sj.live_bytes);
    h->stats.verify_failures += verify_failures;
    if (ttsp > h->stats.ttsp_max_ns)
        h->stats.ttsp_max_ns = ttsp;
    uint32_t punched = seg_punch_idle(h, h->stats.cycles_completed,
                                      (uint32_t)(allocation_budget(h) >>
                                                 h->seg_shift));
    atomic_store(&h->control->phase, LAYOUT_PHASE_IDLE);
    uint64_t pause = now_ns() - t0;
    h->stats.pause_total_ns += pause;
    if (pause > h->stats.pause_max_ns)
        h->stats.pause_max_ns = pause;
    uint64_t cycle = h->stats.cycles_completed;
    pthread_mutex_unlock(&h->lock);

    safepoint_release(h);
    log_debug("heap '%s': cycle %llu: epoch %u, %llu objects marked, %llu "
              "blocks and %llu segments freed, %llu live bytes, %u segments "
              "given back, pause %llu us (stop %llu, roots %llu, mark %llu, "
              "sweep %llu, verify and rest %llu)%s",
              h->cfg->name, (unsigned long long)cycle, epoch,
              (unsigned long long)atomic_load(&mj.marked),
              (unsigned long long)atomic_load(&sj.freed_blocks),
              (unsigned long long)atomic_load(&sj.freed_segments),
              (unsigned long long)atomic_load(&sj.live_bytes), punched,
              (unsigned long long)(pause / 1000),
              (unsigned long long)(ttsp / 1000),
              (unsigned long long)((t_mark - t0 - ttsp) / 1000),
              (unsigned long long)((t_sweep - t_mark) / 1000),
              (unsigned long long)((t_verify - t_sweep) / 1000),
              (unsigned long long)((t0 + pause - t_verify) / 1000),
              verify_failures ? ", VERIFY FAILED" : "");
    mark_job_destroy(&mj);
    uv_async_send(&gc->done);
}

static void *collector_main(void *arg)
{
    struct collector *gc = arg;
    pthread_mutex_lock(&gc->mu);
    for (;;) {
        while (!gc->requested && !gc->quit)
            pthread_cond_wait(&gc->cv, &gc->mu);
        if (gc->quit)
            break;
        gc->requested = false;
        gc->cycles_started++;
        pthread_mutex_unlock(&gc->mu);
        run_cycle(gc);
        pthread_mutex_lock(&gc->mu);
    }
    pthread_mutex_unlock(&gc->mu);
    return NULL;
}

static void on_done_async(uv_async_t *a)
{
    struct collector *gc = a->data;
    gc->on_done(gc->h, gc->arg);
}

int collector_start(struct heap *h, struct workers *w, uv_loop_t *loop,
                    collector_done_fn on_done, void *arg)
{
    struct collector *gc = calloc(1, sizeof *gc);
    sigset_t all, old;
    int rc;

    if (!gc)
        return -ENOMEM;
    gc->h = h;
    gc->workers = w;
    gc->on_done = on_done;
    gc->arg = arg;
    pthread_mutex_init(&gc->mu, NULL);
    pthread_cond_init(&gc->cv, NULL);
    if ((rc = uv_async_init(loop, &gc->done, on_done_async)) < 0) {
        free(gc);
        return rc;
    }
    gc->done.data = gc;
    uv_unref((uv_handle_t *)&gc->done); /* connections keep the loop alive */
    h->gc = gc;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&gc->thread, NULL, collector_main, gc);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        uv_close((uv_handle_t *)&gc->done, free_on_close);
        h->gc = NULL;
        return -rc;
    }
    return 0;
}

void collector_stop(struct heap *h)
{
    struct collector *gc = h->gc;
    if (!gc)
        return;
    pthread_mutex_lock(&gc->mu);
    gc->quit = true;
    pthread_cond_signal(&gc->cv);
    pthread_mutex_unlock(&gc->mu);
    pthread_join(gc->thread, NULL);
    h->gc = NULL;
    uv_close((uv_handle_t *)&gc->done, free_on_close);
}
