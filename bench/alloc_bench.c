/* alloc_bench: the cost of one small allocation, heapd against the usual
 * allocators, side by side in one process.
 *
 * What it measures: nanoseconds per allocation of objects with S payload
 * bytes (S = 16, 32, 64, 256), for
 *   glibc        malloc(S) + free       (glibc's own malloc, see below)
 *   mimalloc     mi_malloc(S) + mi_free
 *   mi_zalloc    mi_zalloc(S) + mi_free (zeroed, as heapd_alloc's memory is)
 *   boehm        GC_MALLOC(S), garbage dropped for the collector
 *   heapd        heapd_alloc(m, 0, S), garbage dropped for the collector
 *   heapd_young  heapd_alloc(y, 0, S) from a second mutator, attached with
 *                HEAPD_MUTATOR_YOUNG (a nursery: --young-size, --young-age,
 *                default the heap's), garbage dropped for its minor
 *                collections
 *
 * How: every allocator runs the same loop.  N objects (default 10 million)
 * are allocated one after the other; object k goes into slot k % 1024 of a
 * ring of 1024 live slots (--ring changes 1024), and the slot's previous occupant is evicted: freed
 * for glibc and mimalloc, simply overwritten (becoming garbage) for the two
 * collectors.  So the live set stays at 1024 objects and the loop measures
 * allocation plus whatever reclamation the allocator needs to keep up: free()
 * for the manual allocators, collection work done on the allocating thread
 * for Boehm (stop-the-world mark, lazy sweep), and for heapd the client side
 * (allocation, heapd_write barrier, safepoints, and the time the thread is
 * held at safepoints while the daemon's collector threads work, on the same
 * CPUs).  Every loop reads the ring's length, and the heapd loops their
 * mutator, into locals first: the young loop, with no call on its path,
 * otherwise loaded both from memory at every allocation, which cost it
 * about 0.8 ns at 256 bytes.  For Boehm the ring is a GC_MALLOC'd
 * array; for heapd it is one heapd object with 1024 reference fields, kept on
 * the root stack and updated with heapd_write.  For heapd_young the ring is
 * a C array on the young mutator's stack, as for the manual allocators: a
 * minor collection scans the stack, so the ring keeps its objects alive
 * and young (Note [Young objects, for the program] in heapd.h), and the
 * evicted ones are freed where they are.  Each (allocator, size) gets a
 * warm-up run, then R timed runs (default 5) interleaved across allocators;
 * the reported figure is the median run's elapsed CLOCK_MONOTONIC time / N.
 *
 * Caveats, stated in docs/benchmarks.md too: the GC allocators return zeroed
 * memory and malloc/mi_malloc do not (mi_zalloc does: the fair peer of
 * heapd_alloc); Boehm rounds small requests up (with
 * interior pointers on, its default, 16 bytes cost a 32-byte granule).
 *
 * Debian's libmimalloc.so exports malloc/free (and __libc_malloc) and so
 * replaces glibc's malloc in any program linked with it.  The glibc column
 * therefore calls glibc's own malloc and free, looked up in libc.so.6 with
 * dlsym; the program checks that they are not mimalloc's.
 *
 * Output: one line per result,
 *   RESULT alloc allocator=NAME size=S n=N runs=R median_ns=X min_ns=X max_ns=X
 * (for heapd_young also
 *   RESULT alloc-heapd-young minor_collections=.. minor_pauses=.. minor_pause_max_ns=..
 *          minor_pause_p99_ns=.. promoted_age_bytes=.. ...),
 * then a markdown table with the ratios heapd/mimalloc and
 * heapd_young/mi_zalloc.
 *
 *   alloc_bench [-n N] [-r R] [--sizes 16,32,64,256] [--ring 1024]
 *               [--young-size BYTES] [--young-age A] [--socket PATH]
 *               [--no-heapd]
 */
#include <dlfcn.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libgc is built thread-aware: GC_THREADS declares its thread API (and
 * GC_get_parallel); this program itself starts no threads. */
#define GC_THREADS
#include <gc.h>
#include <mimalloc.h>

#include "bench_util.h"
#include "heapd.h"

#define MAX_RING (1u << 20)
#define YOUNG_RING_MAX (1u << 16) /* 512 KiB of stack */
#define MAX_SIZES 16
#define MAX_RUNS 101

enum { A_GLIBC, A_MIMALLOC, A_MI_ZALLOC, A_BOEHM, A_HEAPD, A_HEAPD_YOUNG,
       N_ALLOC };
static const char *const alloc_name[N_ALLOC] = {
    "glibc", "mimalloc", "mi_zalloc", "boehm", "heapd", "heapd_young"};

static bool is_heapd(int a) { return a == A_HEAPD || a == A_HEAPD_YOUNG; }

static void *(*libc_malloc)(size_t);
static void (*libc_free)(void *);

static heapd_mutator *hm;  /* attached without a young generation */
static heapd_mutator *hy;  /* attached with HEAPD_MUTATOR_YOUNG */
static size_t ring_len = 1024; /* live slots */

/* The ring for the manual allocators (for Boehm it is on the GC heap). */
static void *manual_ring[MAX_RING];

static uint64_t run_glibc(size_t n, size_t size)
{
    const size_t len = ring_len;
    memset(manual_ring, 0, ring_len * sizeof(void *));
    uint64_t t0 = now_ns();
    for (size_t k = 0, s = 0; k < n; k++, s = s + 1 == len ? 0 : s + 1) {
        libc_free(manual_ring[s]);
        void *p = libc_malloc(size);
        if (!p)
            die("malloc(%zu): out of memory", size);
        manual_ring[s] = p;
    }
    uint64_t t1 = now_ns();
    for (size_t s = 0; s < ring_len; s++)
        libc_free(manual_ring[s]);
    return t1 - t0;
}

static uint64_t run_mimalloc(size_t n, size_t size)
{
    const size_t len = ring_len;
    memset(manual_ring, 0, ring_len * sizeof(void *));
    uint64_t t0 = now_ns();
    for (size_t k = 0, s = 0; k < n; k++, s = s + 1 == len ? 0 : s + 1) {
        mi_free(manual_ring[s]);
        void *p = mi_malloc(size);
        if (!p)
            die("mi_malloc(%zu): out of memory", size);
        manual_ring[s] = p;
    }
    uint64_t t1 = now_ns();
    for (size_t s = 0; s < ring_len; s++)
        mi_free(manual_ring[s]);
    return t1 - t0;
}

static uint64_t run_mi_zalloc(size_t n, size_t size)
{
    const size_t len = ring_len;
    memset(manual_ring, 0, ring_len * sizeof(void *));
    uint64_t t0 = now_ns();
    for (size_t k = 0, s = 0; k < n; k++, s = s + 1 == len ? 0 : s + 1) {
        mi_free(manual_ring[s]);
        void *p = mi_zalloc(size);
        if (!p)
            die("mi_zalloc(%zu): out of memory", size);
        manual_ring[s] = p;
    }
    uint64_t t1 = now_ns();
    for (size_t s = 0; s < ring_len; s++)
        mi_free(manual_ring[s]);
    return t1 - t0;
}

static uint64_t run_boehm(size_t n, size_t size)
{
    const size_t len = ring_len;
    void **ring = GC_MALLOC(ring_len * sizeof(void *));
    if (!ring)
        die("GC_MALLOC(ring): out of memory");
    uint64_t t0 = now_ns();
    for (size_t k = 0, s = 0; k < n; k++, s = s + 1 == len ? 0 : s + 1) {
        void *p = GC_MALLOC(size);
        if (!p)
            die("GC_MALLOC(%zu): out of memory", size);
        ring[s] = p;
    }
    uint64_t t1 = now_ns();
    return t1 - t0;
}

static uint64_t run_heapd(size_t n, size_t size)
{
    const size_t len = ring_len;
    void **ring = heapd_alloc(hm, ring_len, 0);
    if (!ring)
        die("heapd_alloc(ring): %s", strerror(errno));
    if (heapd_root_push(hm, ring) == (size_t)-1)
        die("heapd_root_push: %s", strerror(errno));
    uint64_t t0 = now_ns();
    heapd_mutator *m = hm;
    for (size_t k = 0, s = 0; k < n; k++, s = s + 1 == len ? 0 : s + 1) {
        void *p = heapd_alloc(m, 0, size);
        if (!p)
            die("heapd_alloc(0, %zu): %s", size, strerror(errno));
        heapd_write(m, ring, &ring[s], p);
    }
    uint64_t t1 = now_ns();
    heapd_root_pop(hm, 1);
    return t1 - t0;
}

/* The young mutator's ring: a C array on this thread's stack, as a C
 * program would keep it (see the top of the file).  A minor collection
 * scans the stack, so what the ring holds stays alive, and, held by a C
 * local only, stays young (Note [Young objects, for the program] in
 * heapd.h); the rest is freed where it is. */
static __attribute__((noinline)) uint64_t run_heapd_young(size_t n,
                                                          size_t size)
{
    const size_t len = ring_len;
    if (ring_len > YOUNG_RING_MAX)
        die("--ring %zu: heapd_young keeps its ring on the stack, at most "
            "%u slots; use a smaller --ring", ring_len, YOUNG_RING_MAX);
    heapd_mutator *y = hy;
    void *volatile *ring = alloca(ring_len * sizeof *ring);
    for (size_t s = 0; s < ring_len; s++)
        ring[s] = NULL;
    uint64_t t0 = now_ns();
    for (size_t k = 0, s = 0; k < n; k++, s = s + 1 == len ? 0 : s + 1) {
        void *p = heapd_alloc(y, 0, size);
        if (!p)
            die("heapd_alloc(0, %zu) (young): %s", size, strerror(errno));
        ring[s] = p;
    }
    uint64_t t1 = now_ns();
    __asm__ volatile("" : : "r"(ring) : "memory"); /* the ring lives on */
    return t1 - t0;
}

static uint64_t (*const run_alloc[N_ALLOC])(size_t, size_t) = {
    run_glibc, run_mimalloc, run_mi_zalloc, run_boehm, run_heapd,
    run_heapd_young};

/* One run of allocator A.  While another allocator runs, the heapd
 * mutators reach no safepoint for up to a second, so they say they are
 * blocking (Note [Client GC discipline]) rather than hold up heapd's
 * collections; the one that runs leaves its blocking region first. */
static uint64_t run_one(int a, size_t n, size_t size)
{
    heapd_mutator *self = a == A_HEAPD ? hm : a == A_HEAPD_YOUNG ? hy : NULL;
    if (self)
        heapd_blocking_leave(self);
    uint64_t t = run_alloc[a](n, size);
    if (self)
        heapd_blocking_enter(self);
    return t;
}

/* glibc's malloc and free even though mimalloc interposes on them. */
static void find_glibc_malloc(void)
{
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (!libc)
        die("dlopen(libc.so.6): %s", dlerror());
    libc_malloc = (void *(*)(size_t))dlsym(libc, "malloc");
    libc_free = (void (*)(void *))dlsym(libc, "free");
    if (!libc_malloc || !libc_free)
        die("dlsym(libc.so.6, malloc/free): %s", dlerror());
    void *p = libc_malloc(64);
    if (!p)
        die("glibc malloc(64) failed");
    if (mi_is_in_heap_region(p))
        die("libc.so.6's malloc returned mimalloc memory: cannot measure "
            "glibc malloc in this process");
    libc_free(p);
    if (dlclose(libc) != 0)
        die("dlclose(libc.so.6): %s", dlerror());
}

static size_t parse_sizes(const char *s, size_t *out)
{
    size_t n = 0;
    char *copy = strdup(s);
    if (!copy)
        die("out of memory");
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_SIZES)
            die("--sizes: at most %d sizes", MAX_SIZES);
        unsigned long v = parse_count("--sizes", tok);
        if (v > (1ul << 20))
            die("--sizes: %lu is over 1 MiB", v);
        out[n++] = v;
    }
    free(copy);
    if (n == 0)
        die("--sizes: no size given");
    return n;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: alloc_bench [-n N] [-r R] [--sizes S,S,...] "
            "[--ring L] [--young-size BYTES] [--young-age A]\n"
            "                   [--socket PATH] [--no-heapd]\n"
            "  -n, --count N   allocations per run and size (default "
            "10000000)\n"
            "  -r, --runs R    timed runs after one warm-up (default 5)\n"
            "  --sizes LIST    payload sizes in bytes (default "
            "16,32,64,256)\n"
            "  --ring L        live objects kept (default 1024)\n"
            "  --young-size B  heapd_young's nursery in bytes (default: the "
            "heap's young_size)\n"
            "  --young-age A   minor collections before promotion, 1..8 "
            "(default: the heap's)\n"
            "  --socket PATH   heapd's socket (default $HEAPD_SOCKET, then "
            "the system one)\n"
            "  --no-heapd      skip heapd (no daemon needed)\n");
}

int main(int argc, char **argv)
{
    size_t n = 10000000, runs = 5;
    size_t sizes[MAX_SIZES] = {16, 32, 64, 256};
    size_t nsizes = 4;
    const char *sock = NULL;
    bool use_heapd = true;
    heapd_mutator_opts yopts = {.flags = HEAPD_MUTATOR_YOUNG};

    enum { OPT_SIZES = 256, OPT_RING, OPT_SOCKET, OPT_NO_HEAPD,
           OPT_YOUNG_SIZE, OPT_YOUNG_AGE };
    static const struct option opts[] = {
        {"count", required_argument, NULL, 'n'},
        {"runs", required_argument, NULL, 'r'},
        {"sizes", required_argument, NULL, OPT_SIZES},
        {"ring", required_argument, NULL, OPT_RING},
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"no-heapd", no_argument, NULL, OPT_NO_HEAPD},
        {"young-size", required_argument, NULL, OPT_YOUNG_SIZE},
        {"young-age", required_argument, NULL, OPT_YOUNG_AGE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "n:r:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': n = parse_count("-n", optarg); break;
        case 'r': runs = parse_count("-r", optarg); break;
        case OPT_SIZES: nsizes = parse_sizes(optarg, sizes); break;
        case OPT_RING:
            ring_len = parse_count("--ring", optarg);
            if (ring_len > MAX_RING)
                die("--ring: at most %u", MAX_RING);
            break;
        case OPT_SOCKET: sock = optarg; break;
        case OPT_NO_HEAPD: use_heapd = false; break;
        case OPT_YOUNG_SIZE:
            yopts.young_size = parse_count("--young-size", optarg);
            break;
        case OPT_YOUNG_AGE:
            yopts.young_age = (unsigned)parse_count("--young-age", optarg);
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (runs > MAX_RUNS)
        die("-r: at most %d runs", MAX_RUNS);

    find_glibc_malloc();
    GC_INIT();
    heapd_client *hc = NULL;
    heapd_stats_t st0 = {0}, st1 = {0};
    if (use_heapd) {
        heapd_open(sock, "alloc_bench", &hc, &hm);
        /* a second mutator of the same thread: each is in a blocking
         * region except while its own column runs (run_one) */
        int rc = heapd_attach_opts(hc, &yopts, &hy);
        if (rc < 0)
            die("heapd_attach_opts(HEAPD_MUTATOR_YOUNG): %s (%s)",
                heapd_strerror(rc), heapd_last_error());
        heapd_blocking_enter(hm);
        heapd_blocking_enter(hy);
        heapd_stats_or_die(hc, NULL, &st0);
    }

    printf("# alloc_bench: n=%zu per run, %zu timed runs after 1 warm-up, "
           "ring of %zu live objects\n", n, runs, ring_len);
    printf("# boehm %d.%d.%d (parallel marking: %s), mimalloc %d\n",
           GC_VERSION_MAJOR, GC_VERSION_MINOR, GC_VERSION_MICRO,
           GC_get_parallel() ? "on" : "off", mi_version());
    fflush(stdout);

    static double med[MAX_SIZES][N_ALLOC];
    uint64_t heapd_ns = 0, heapd_allocs = 0, young_ns = 0, young_allocs = 0;
    for (size_t si = 0; si < nsizes; si++) {
        double ns[N_ALLOC][MAX_RUNS];
        for (int a = 0; a < N_ALLOC; a++) {
            if (is_heapd(a) && !use_heapd)
                continue;
            (void)run_one(a, n, sizes[si]); /* warm-up */
        }
        for (size_t r = 0; r < runs; r++) {
            for (int a = 0; a < N_ALLOC; a++) {
                if (is_heapd(a) && !use_heapd)
                    continue;
                uint64_t t = run_one(a, n, sizes[si]);
                ns[a][r] = (double)t / (double)n;
                if (a == A_HEAPD) {
                    heapd_ns += t;
                    heapd_allocs += n;
                } else if (a == A_HEAPD_YOUNG) {
                    young_ns += t;
                    young_allocs += n;
                }
            }
        }
        for (int a = 0; a < N_ALLOC; a++) {
            if (is_heapd(a) && !use_heapd)
                continue;
            double m = median(ns[a], runs); /* sorts: [0] min, [runs-1] max */
            med[si][a] = m;
            printf("RESULT alloc allocator=%s size=%zu n=%zu runs=%zu "
                   "median_ns=%.2f min_ns=%.2f max_ns=%.2f\n",
                   alloc_name[a], sizes[si], n, runs, m, ns[a][0],
                   ns[a][runs - 1]);
        }
        fflush(stdout);
    }

    if (use_heapd) {
        heapd_stats_or_die(hc, NULL, &st1); /* both mutators are blocking */
        printf("RESULT alloc-heapd-gc cycles=%llu pause_max_ns=%llu "
               "pause_total_ns=%llu ttsp_max_ns=%llu "
               "heap_committed_bytes=%llu bytes_allocated=%llu "
               "timed_allocs=%llu timed_ns=%llu\n",
               (unsigned long long)(st1.cycles_completed - st0.cycles_completed),
               (unsigned long long)st1.pause_max_ns,
               (unsigned long long)(st1.pause_total_ns - st0.pause_total_ns),
               (unsigned long long)st1.ttsp_max_ns,
               (unsigned long long)st1.heap_committed_bytes,
               (unsigned long long)(st1.bytes_allocated - st0.bytes_allocated),
               (unsigned long long)heapd_allocs,
               (unsigned long long)heapd_ns);
        heapd_young_stats ys;
        heapd_young_stats_get(hy, &ys);
        printf("RESULT alloc-heapd-young young_bytes=%llu young_age=%u "
               "minor_collections=%llu minor_pauses=%llu "
               "minor_pause_max_ns=%llu "
               "minor_pause_p99_ns=%llu minor_pause_total_ns=%llu "
               "promoted_age_bytes=%llu promoted_published_bytes=%llu "
               "timed_allocs=%llu timed_ns=%llu\n",
               (unsigned long long)ys.young_bytes, ys.young_age,
               (unsigned long long)ys.minor_collections,
               (unsigned long long)ys.minor_pauses,
               (unsigned long long)ys.minor_pause_max_ns,
               (unsigned long long)ys.minor_pause_p99_ns,
               (unsigned long long)ys.minor_pause_total_ns,
               (unsigned long long)ys.promoted_age_bytes,
               (unsigned long long)ys.promoted_published_bytes,
               (unsigned long long)young_allocs,
               (unsigned long long)young_ns);
    }
    printf("RESULT alloc-boehm-gc collections=%llu heap_bytes=%zu\n",
           (unsigned long long)GC_get_gc_no(), GC_get_heap_size());

    printf("\n| payload bytes | glibc malloc+free | mimalloc | mi_zalloc "
           "| Boehm GC_MALLOC | heapd_alloc | heapd young | "
           "heapd / mimalloc | heapd young / mi_zalloc |\n"
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t si = 0; si < nsizes; si++) {
        printf("| %zu | %.1f ns | %.1f ns | %.1f ns | %.1f ns |", sizes[si],
               med[si][A_GLIBC], med[si][A_MIMALLOC], med[si][A_MI_ZALLOC],
               med[si][A_BOEHM]);
        if (use_heapd)
            printf(" %.1f ns | %.1f ns | %.2f× | %.2f× |\n",
                   med[si][A_HEAPD], med[si][A_HEAPD_YOUNG],
                   med[si][A_HEAPD] / med[si][A_MIMALLOC],
                   med[si][A_HEAPD_YOUNG] / med[si][A_MI_ZALLOC]);
        else
            printf(" – | – | – | – |\n");
    }

    if (use_heapd) {
        heapd_blocking_leave(hy);
        heapd_blocking_leave(hm);
        heapd_detach(hy);
        heapd_detach(hm);
        heapd_disconnect(hc);
    }
    if (fflush(stdout) != 0 || ferror(stdout))
        die("writing the results failed");
    return 0;
}
