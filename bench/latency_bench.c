/* latency_bench: how long a mutator can be held up by the collector, heapd
 * against the Boehm collector, with glibc malloc/free as the floor.
 *
 * What it measures: the distribution of the time of one iteration of a
 * steady allocation loop, and above all its maximum.  A collector that stops
 * the world shows up as iterations that last as long as its pauses; a
 * concurrent one as iterations that last only as long as its short pauses,
 * plus whatever else holds the mutator up (segment requests to the daemon,
 * page faults, the scheduler running collector threads on the mutator's CPU).
 * So the maximum iteration time is the mutator's own view of the longest
 * pause, measured the same way for both collectors.
 *
 * The workload, the same for all (one implementation per process:
 * `latency_bench heapd|boehm|malloc`):
 *   - a live set of L nodes (default 50000) held in a ring: one object with
 *     L reference fields, rooted (heapd: on the root stack; Boehm: a
 *     GC_MALLOC'd array held in a static);
 *   - a node has 2 references (prev, next) and 16 raw bytes (its iteration
 *     number k and a check word);  the ring's nodes are also a doubly
 *     linked list from the oldest to the newest, so the collector traces
 *     pointers between nodes and not only from the ring;
 *   - the ring is first filled (not timed); then each of N iterations
 *     (default 2000000) allocates a node, links it after the newest node,
 *     cuts the back link of the second oldest node to the oldest, and
 *     replaces the oldest node in its ring slot (round robin).  The live set
 *     stays at exactly L nodes and all the allocation becomes garbage, so
 *     collections keep happening at the collector's own pace.
 *   heapd stores every reference with heapd_write (4 per iteration with the
 *   slot store); heapd_alloc is the iteration's safepoint.  Boehm stores
 *   plainly; its collections run inside GC_MALLOC on this thread.  malloc
 *   stores plainly and frees the oldest node when it drops out: no
 *   collector at all, so its longest iteration is what the machine itself
 *   (the scheduler, the hypervisor, malloc) holds a loop up for, the floor
 *   no collector can go below on it.
 *
 * How it is timed: one CLOCK_MONOTONIC reading at the end of each
 * iteration; the iteration's time is the difference from the previous
 * reading, so the readings cover the loop without gaps and each iteration
 * includes one clock_gettime and one histogram update.  Times go into a
 * log-linear histogram (exact below 64 ns, then 32 sub-buckets per power of
 * two up to 2^40 ns: at most 3.2% relative error); percentiles are the
 * highest value of their bucket (never above the exact maximum), the maximum
 * is exact.  The 8 longest iterations are listed with when they happened,
 * and the thread's CPU time and voluntary / involuntary context switches
 * over the loop (getrusage RUSAGE_THREAD) tell waiting from preemption.
 * Pauses as the collector reports them, for comparison:
 *   heapd  heapd_stats: pause_max_ns (over the daemon's life: run it on a
 *          fresh daemon), pause_total_ns and cycles_completed during the
 *          timed loop, ttsp_max_ns; and, when libheapd's heapd_stats_t has
 *          them (the build checks: HEAPD_BENCH_PHASE_PAUSES),
 *          snapshot_pause_max_ns and final_sync_pause_max_ns;
 *   boehm  a GC_set_on_collection_event callback timing GC_EVENT_START..END
 *          (as bench/gcbench does); collections: GC_get_gc_no() during the
 *          timed loop.
 * At the end (not timed) the ring and the list are checked: every node must
 * carry the iteration number of its slot and the right links, so a collector
 * that freed or reused a live node makes the program fail.
 *
 * Output: comment lines (#) and one machine-readable line,
 *   RESULT latency impl=NAME iters=N live=L p50_ns=.. p99_ns=.. p999_ns=..
 *          p9999_ns=.. max_ns=.. mean_ns=.. total_ms=.. cpu_ms=.. vcsw=..
 *          ivcsw=.. gcs=..
 *          pause_max_ns=.. pause_total_ns=.. ttsp_max_ns=..
 *          [snapshot_pause_max_ns=.. final_sync_pause_max_ns=..]
 *
 *   latency_bench heapd|boehm|malloc [-n N] [--live L] [--busy B]
 *                 [--socket PATH] [--dump-hist FILE]
 *
 * --busy B runs B threads that only spin while the program runs, to keep
 * the other CPUs busy: `malloc --busy 1` on 2 CPUs is the floor for a
 * program whose other CPU is taken, as heapd's is by its collector (on a
 * virtual machine, a CPU can be held up by the host when all are busy).
 * The RESULT line then names the implementation NAME_busy.
 *
 * --dump-hist FILE also writes the whole histogram of the iteration times to
 * FILE (standard output is the same with or without it), for plotting the
 * distribution (scripts/bench draws its complementary CDF): after comment
 * lines (#), one line per non-empty bucket, shortest first,
 *   LOWER_NS UPPER_NS COUNT
 * the bucket's bounds (every value in it lies in [LOWER_NS, UPPER_NS]; the
 * exact buckets below 64 ns have LOWER_NS == UPPER_NS) and how many
 * iterations fell into it.  The last bucket's UPPER_NS is the exact
 * maximum, as for the percentiles of the RESULT line.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* libgc is built thread-aware: GC_THREADS declares its thread API (and
 * GC_get_parallel); this program itself starts no threads. */
#define GC_THREADS
#include <gc.h>

#include "bench_util.h"
#include "heapd.h"

#define CHECK_MAGIC 0x6c6174656e6379ull /* "latency" */

/* ---- the histogram (hist_index, hist_upper: bench_util.h) ---- */
enum { NTOP = 8 };

typedef struct hist {
    uint64_t count[HBUCKETS];
    uint64_t n, sum, max;
    /* the NTOP longest iterations, longest first */
    uint64_t top_ns[NTOP], top_iter[NTOP], top_at[NTOP];
} hist;

static inline void hist_record(hist *h, uint64_t d, uint64_t iter,
                               uint64_t at)
{
    h->count[hist_index(d)]++;
    h->n++;
    h->sum += d;
    if (d > h->max)
        h->max = d;
    if (__builtin_expect(d > h->top_ns[NTOP - 1], 0)) {
        int k = NTOP - 1;
        for (; k > 0 && h->top_ns[k - 1] < d; k--) {
            h->top_ns[k] = h->top_ns[k - 1];
            h->top_iter[k] = h->top_iter[k - 1];
            h->top_at[k] = h->top_at[k - 1];
        }
        h->top_ns[k] = d;
        h->top_iter[k] = iter;
        h->top_at[k] = at;
    }
}


#define hist_quantile(h, q) hist_quantile_of((h)->count, (h)->n, (h)->max, q)

static uint64_t hist_at_least(const hist *h, uint64_t v)
{
    uint64_t c = 0;
    for (size_t i = hist_index(v); i < HBUCKETS; i++)
        c += h->count[i];
    return c;
}


/* ---- the run's parameters and results ---- */

static size_t n_iters = 2000000, live = 50000;
static const char *sock;
static const char *dump_hist_path; /* --dump-hist */
static hist H;
static uint64_t loop_start_ns; /* CLOCK_MONOTONIC, to line up traces */

/* This thread's CPU time and context switches over the timed loop: a
 * voluntary switch is a wait (a futex in a safepoint or in libheapd, a
 * page fault on I/O), an involuntary one a preemption (another thread, such
 * as a collector thread, took the CPU). */
static struct rusage ru0, ru1;

static void thread_usage(struct rusage *ru)
{
    if (getrusage(RUSAGE_THREAD, ru) != 0)
        die("getrusage(RUSAGE_THREAD): %s", strerror(errno));
}

static double tv_ms(const struct timeval *a, const struct timeval *b)
{
    return (double)(b->tv_sec - a->tv_sec) * 1e3 +
           (double)(b->tv_usec - a->tv_usec) / 1e3;
}

static void stamp(void *bytes, uint64_t k)
{
    uint64_t w[2] = {k, k ^ CHECK_MAGIC};
    memcpy(bytes, w, sizeof w);
}

/* Check node NODE in slot S after TOTAL nodes were made (fill included):
 * slot S holds the latest k < TOTAL with k % live == S; PREV and NEXT are
 * its links, WANT_PREV / WANT_NEXT what they must be. */
static void check_node(const char *impl, size_t s, const void *node,
                       const void *bytes, const void *prev, const void *next,
                       const void *want_prev, const void *want_next,
                       uint64_t total)
{
    uint64_t w[2];
    if (!node)
        die("%s: live-set check: slot %zu is empty", impl, s);
    memcpy(w, bytes, sizeof w);
    uint64_t k = total - 1 - ((total - 1 - s) % live);
    if (w[0] != k || w[1] != (k ^ CHECK_MAGIC))
        die("%s: live-set check: slot %zu holds node %llu/%#llx, expected "
            "%llu: a live node was freed or overwritten", impl, s,
            (unsigned long long)w[0], (unsigned long long)w[1],
            (unsigned long long)k);
    if (prev != want_prev || next != want_next)
        die("%s: live-set check: node %llu (slot %zu) has links %p/%p, "
            "expected %p/%p", impl, (unsigned long long)k, s, prev, next,
            want_prev, want_next);
}

/* ---- heapd ----
 * Node: ref 0 = prev (older neighbour), ref 1 = next (newer), then the 16
 * stamp bytes. */

static heapd_client *hc;
static heapd_mutator *hm;
static heapd_stats_t h_st0, h_st1;

static void *h_node(void)
{
    void *n = heapd_alloc(hm, 2, 16);
    if (!n)
        die("heapd_alloc(2, 16): %s", strerror(errno));
    return n;
}

/* Make node K in slot K % live.  Only heapd_alloc is a safepoint: NODE is
 * linked from the rooted ring before the next one. */
static inline void h_step(void **ring, uint64_t k)
{
    size_t s = (size_t)(k % live);
    size_t s_newest = s == 0 ? live - 1 : s - 1;
    size_t s_second = s + 1 == live ? 0 : s + 1;
    void **node = h_node();
    stamp(heapd_bytes(node), k);
    if (k >= live) {
        /* the oldest node, in slot s, is about to go: nothing may point
         * at it once it leaves the ring */
        void **second = ring[s_second];
        heapd_write(hm, second, &second[0], NULL);
    }
    if (k > 0) {
        void **newest = ring[s_newest];
        heapd_write(hm, node, &node[0], newest);
        heapd_write(hm, newest, &newest[1], node);
    }
    heapd_write(hm, ring, &ring[s], node);
}

static void h_run(void)
{
    heapd_open(sock, "latency_bench", &hc, &hm);
    void **ring = heapd_alloc(hm, live, 0);
    if (!ring)
        die("heapd_alloc(%zu, 0): %s", live, strerror(errno));
    size_t slot = heapd_root_push(hm, ring);
    if (slot == (size_t)-1)
        die("heapd_root_push: %s", strerror(errno));
    for (uint64_t k = 0; k < live; k++) /* fill: not timed */
        h_step(ring, k);
    heapd_stats_or_die(hc, hm, &h_st0);

    thread_usage(&ru0);
    uint64_t t_start = tick(), t0 = t_start;
    loop_start_ns = t_start;
    uint64_t end = (uint64_t)live + n_iters;
    for (uint64_t k = live; k < end; k++) {
        h_step(ring, k);
        uint64_t t1 = tick();
        hist_record(&H, t1 - t0, k - live, t1 - t_start);
        t0 = t1;
    }
    thread_usage(&ru1);

    heapd_stats_or_die(hc, hm, &h_st1);
    for (size_t s = 0; s < live; s++) {
        void **node = ring[s];
        size_t s_newest = (size_t)((end - 1) % live);
        size_t s_oldest = (size_t)(end % live);
        check_node("heapd", s, node, node ? heapd_bytes(node) : NULL,
                   node ? node[0] : NULL, node ? node[1] : NULL,
                   s == s_oldest ? NULL : ring[s == 0 ? live - 1 : s - 1],
                   s == s_newest ? NULL : ring[s + 1 == live ? 0 : s + 1],
                   end);
    }
    heapd_root_pop(hm, 1);
}

/* ---- Boehm ---- */

typedef struct bnode {
    struct bnode *prev, *next;
    uint64_t stamp[2];
} bnode;

static bnode **b_ring;

#include "boehm_pauses.h"

static inline void b_step(bnode **ring, uint64_t k)
{
    size_t s = (size_t)(k % live);
    size_t s_newest = s == 0 ? live - 1 : s - 1;
    size_t s_second = s + 1 == live ? 0 : s + 1;
    bnode *node = GC_MALLOC(sizeof *node);
    if (!node)
        die("GC_MALLOC(%zu): out of memory", sizeof *node);
    stamp(node->stamp, k);
    if (k >= live)
        ring[s_second]->prev = NULL;
    if (k > 0) {
        node->prev = ring[s_newest];
        ring[s_newest]->next = node;
    }
    ring[s] = node;
}

static uint64_t b_gcs0, b_gcs1, b_pause_total0;

static void b_run(void)
{
    GC_INIT();
    GC_set_on_collection_event(b_on_event);
    b_ring = GC_MALLOC(live * sizeof *b_ring);
    if (!b_ring)
        die("GC_MALLOC(ring of %zu): out of memory", live);
    bnode **ring = b_ring;
    for (uint64_t k = 0; k < live; k++)
        b_step(ring, k);
    b_gcs0 = GC_get_gc_no();
    b_pause_total0 = b_pause_total;

    thread_usage(&ru0);
    uint64_t t_start = tick(), t0 = t_start;
    loop_start_ns = t_start;
    uint64_t end = (uint64_t)live + n_iters;
    for (uint64_t k = live; k < end; k++) {
        b_step(ring, k);
        uint64_t t1 = tick();
        hist_record(&H, t1 - t0, k - live, t1 - t_start);
        t0 = t1;
    }
    thread_usage(&ru1);

    b_gcs1 = GC_get_gc_no();
    for (size_t s = 0; s < live; s++) {
        bnode *node = ring[s];
        size_t s_newest = (size_t)((end - 1) % live);
        size_t s_oldest = (size_t)(end % live);
        check_node("boehm", s, node, node ? node->stamp : NULL,
                   node ? node->prev : NULL, node ? node->next : NULL,
                   s == s_oldest ? NULL : ring[s == 0 ? live - 1 : s - 1],
                   s == s_newest ? NULL : ring[s + 1 == live ? 0 : s + 1],
                   end);
    }
}

/* ---- glibc malloc/free: the floor ---- */

static inline void m_step(bnode **ring, uint64_t k)
{
    size_t s = (size_t)(k % live);
    size_t s_newest = s == 0 ? live - 1 : s - 1;
    size_t s_second = s + 1 == live ? 0 : s + 1;
    bnode *node = malloc(sizeof *node);
    if (!node)
        die("malloc(%zu): out of memory", sizeof *node);
    stamp(node->stamp, k);
    node->prev = node->next = NULL;
    if (k >= live) {
        ring[s_second]->prev = NULL;
        free(ring[s]); /* the oldest: unreachable from now on */
    }
    if (k > 0) {
        node->prev = ring[s_newest];
        ring[s_newest]->next = node;
    }
    ring[s] = node;
}

static void m_run(void)
{
    bnode **ring = calloc(live, sizeof *ring);
    if (!ring)
        die("calloc(ring of %zu): out of memory", live);
    for (uint64_t k = 0; k < live; k++)
        m_step(ring, k);

    thread_usage(&ru0);
    uint64_t t_start = tick(), t0 = t_start;
    loop_start_ns = t_start;
    uint64_t end = (uint64_t)live + n_iters;
    for (uint64_t k = live; k < end; k++) {
        m_step(ring, k);
        uint64_t t1 = tick();
        hist_record(&H, t1 - t0, k - live, t1 - t_start);
        t0 = t1;
    }
    thread_usage(&ru1);

    for (size_t s = 0; s < live; s++) {
        bnode *node = ring[s];
        size_t s_newest = (size_t)((end - 1) % live);
        size_t s_oldest = (size_t)(end % live);
        check_node("malloc", s, node, node ? node->stamp : NULL,
                   node ? node->prev : NULL, node ? node->next : NULL,
                   s == s_oldest ? NULL : ring[s == 0 ? live - 1 : s - 1],
                   s == s_newest ? NULL : ring[s + 1 == live ? 0 : s + 1],
                   end);
    }
    for (size_t s = 0; s < live; s++)
        free(ring[s]);
    free(ring);
}

/* ---- --busy: spinning threads ---- */

static unsigned n_busy;
static atomic_bool busy_stop;
static pthread_t busy_threads[64];

static void *busy_main(void *arg)
{
    volatile uint64_t x = 0;
    (void)arg;
    while (!atomic_load_explicit(&busy_stop, memory_order_relaxed))
        for (int i = 0; i < 1000; i++)
            x += (uint64_t)i;
    return NULL;
}

static void busy_start(void)
{
    for (unsigned i = 0; i < n_busy; i++)
        if (pthread_create(&busy_threads[i], NULL, busy_main, NULL) != 0)
            die("--busy: cannot start thread %u", i);
}

static void busy_end(void)
{
    atomic_store(&busy_stop, true);
    for (unsigned i = 0; i < n_busy; i++)
        pthread_join(busy_threads[i], NULL);
}

/* ---- report ---- */

/* --dump-hist: the histogram to PATH (see the head of the file). */
static void hist_dump(const hist *h, const char *label, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        die("--dump-hist %s: %s", path, strerror(errno));
    fprintf(f, "# latency_bench %s: %llu iterations, live set %zu nodes, "
               "max %llu ns\n# lower_ns upper_ns count\n", label,
            (unsigned long long)h->n, live, (unsigned long long)h->max);
    for (size_t i = 0; i < HBUCKETS; i++) {
        if (!h->count[i])
            continue;
        uint64_t lo = i == 0 ? 0 : hist_upper(i - 1) + 1;
        uint64_t hi = hist_upper(i);
        if (hi > h->max) /* the bucket of the maximum */
            hi = h->max;
        if (lo > hi)
            lo = hi;
        fprintf(f, "%llu %llu %llu\n", (unsigned long long)lo,
                (unsigned long long)hi, (unsigned long long)h->count[i]);
    }
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed)
        die("--dump-hist %s: writing failed", path);
}

static void report(const char *impl)
{
    char label[32];
    snprintf(label, sizeof label, "%s%s", impl, n_busy ? "_busy" : "");
    if (dump_hist_path)
        hist_dump(&H, label, dump_hist_path);
    printf("# %s: %llu iterations, live set %zu nodes, %ld CPUs online, "
           "%u spinning thread(s)\n", label, (unsigned long long)H.n, live,
           sysconf(_SC_NPROCESSORS_ONLN), n_busy);
    printf("# iterations >= 10us: %llu, >= 100us: %llu, >= 1ms: %llu, "
           ">= 10ms: %llu\n",
           (unsigned long long)hist_at_least(&H, 10000),
           (unsigned long long)hist_at_least(&H, 100000),
           (unsigned long long)hist_at_least(&H, 1000000),
           (unsigned long long)hist_at_least(&H, 10000000));
    double cpu_ms = tv_ms(&ru0.ru_utime, &ru1.ru_utime) +
                    tv_ms(&ru0.ru_stime, &ru1.ru_stime);
    printf("# the loop: %.1f ms, of which on CPU %.1f ms (user %.1f, system "
           "%.1f); context switches: %ld voluntary, %ld involuntary\n",
           H.sum / 1e6, cpu_ms, tv_ms(&ru0.ru_utime, &ru1.ru_utime),
           tv_ms(&ru0.ru_stime, &ru1.ru_stime),
           ru1.ru_nvcsw - ru0.ru_nvcsw, ru1.ru_nivcsw - ru0.ru_nivcsw);
    printf("# the loop started at CLOCK_MONOTONIC %llu ns (perf record -k "
           "CLOCK_MONOTONIC lines a trace up with it)\n",
           (unsigned long long)loop_start_ns);
    printf("# longest iterations (us @ ms into the loop):");
    for (int k = 0; k < NTOP && H.top_ns[k]; k++)
        printf(" %.1f@%.1f", H.top_ns[k] / 1e3, H.top_at[k] / 1e6);
    printf("\n");

    printf("RESULT latency impl=%s iters=%llu live=%zu busy=%u p50_ns=%llu "
           "p99_ns=%llu p999_ns=%llu p9999_ns=%llu max_ns=%llu "
           "mean_ns=%.1f total_ms=%.1f cpu_ms=%.1f vcsw=%ld ivcsw=%ld",
           label, (unsigned long long)H.n, live, n_busy,
           (unsigned long long)hist_quantile(&H, 0.5),
           (unsigned long long)hist_quantile(&H, 0.99),
           (unsigned long long)hist_quantile(&H, 0.999),
           (unsigned long long)hist_quantile(&H, 0.9999),
           (unsigned long long)H.max, (double)H.sum / (double)H.n,
           H.sum / 1e6, cpu_ms, ru1.ru_nvcsw - ru0.ru_nvcsw,
           ru1.ru_nivcsw - ru0.ru_nivcsw);
    if (strcmp(impl, "heapd") == 0) {
        printf(" gcs=%llu pause_max_ns=%llu pause_total_ns=%llu "
               "ttsp_max_ns=%llu",
               (unsigned long long)(h_st1.cycles_completed -
                                    h_st0.cycles_completed),
               (unsigned long long)h_st1.pause_max_ns,
               (unsigned long long)(h_st1.pause_total_ns -
                                    h_st0.pause_total_ns),
               (unsigned long long)h_st1.ttsp_max_ns);
#ifdef HEAPD_BENCH_PHASE_PAUSES
        printf(" snapshot_pause_max_ns=%llu final_sync_pause_max_ns=%llu",
               (unsigned long long)h_st1.snapshot_pause_max_ns,
               (unsigned long long)h_st1.final_sync_pause_max_ns);
#endif
        printf("\n");
    } else if (strcmp(impl, "malloc") == 0) {
        printf(" gcs=0 pause_max_ns=0 pause_total_ns=0 ttsp_max_ns=-\n");
    } else {
        printf(" gcs=%llu pause_max_ns=%llu pause_total_ns=%llu "
               "ttsp_max_ns=-\n",
               (unsigned long long)(b_gcs1 - b_gcs0),
               (unsigned long long)b_pause_max,
               (unsigned long long)(b_pause_total - b_pause_total0));
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: latency_bench heapd|boehm|malloc [-n N] [--live L] "
            "[--busy B] [--socket PATH]\n"
            "                     [--dump-hist FILE]\n"
            "  -n, --count N   timed iterations (default 2000000)\n"
            "  --live L        live nodes kept in the ring (default 50000, "
            "at least 2)\n"
            "  --busy B        B threads spin meanwhile (default 0)\n"
            "  --socket PATH   heapd's socket (default $HEAPD_SOCKET, then "
            "the system one)\n"
            "  --dump-hist FILE  also write the iteration times' histogram "
            "to FILE\n"
            "                  (lines: lower_ns upper_ns count)\n");
}

int main(int argc, char **argv)
{
    enum { OPT_LIVE = 256, OPT_SOCKET, OPT_BUSY, OPT_DUMP_HIST };
    static const struct option opts[] = {
        {"count", required_argument, NULL, 'n'},
        {"live", required_argument, NULL, OPT_LIVE},
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"busy", required_argument, NULL, OPT_BUSY},
        {"dump-hist", required_argument, NULL, OPT_DUMP_HIST},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': n_iters = parse_count("-n", optarg); break;
        case OPT_LIVE:
            live = parse_count("--live", optarg);
            if (live < 2 || live > HEAPD_MAX_NREFS)
                die("--live: between 2 and %u", HEAPD_MAX_NREFS);
            break;
        case OPT_SOCKET: sock = optarg; break;
        case OPT_BUSY:
            n_busy = (unsigned)parse_count("--busy", optarg);
            if (n_busy > 64)
                die("--busy: at most 64 threads");
            break;
        case OPT_DUMP_HIST: dump_hist_path = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind + 1 != argc) {
        usage(stderr);
        return 2;
    }
    const char *impl = argv[optind];
    (void)now_ns(); /* dies here if the clock does not work */
    busy_start();
    if (strcmp(impl, "heapd") == 0) {
        h_run();
    } else if (strcmp(impl, "boehm") == 0) {
        b_run();
    } else if (strcmp(impl, "malloc") == 0) {
        m_run();
    } else {
        usage(stderr);
        return 2;
    }
    busy_end();
    report(impl);
    if (strcmp(impl, "heapd") == 0) {
        heapd_detach(hm);
        heapd_disconnect(hc);
    }
    if (fflush(stdout) != 0 || ferror(stdout))
        die("writing the results failed");
    return 0;
}
