/* bench_util.h: small helpers shared by the heapd benchmarks.
 *
 * A monotonic clock in nanoseconds, fatal-error reporting, a median, peak
 * RSS, and connecting/attaching to heapd with every failure reported.
 * Header-only (static functions) so that each benchmark stays one program.
 */
#ifndef HEAPD_BENCH_UTIL_H
#define HEAPD_BENCH_UTIL_H

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "heapd.h"

/* Print "PROGRAM: " and the message, and exit 1.  The program's name is
 * its executable's, so that every file of a benchmark says the same. */
__attribute__((noreturn, format(printf, 1, 2), unused))
static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", program_invocation_short_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

__attribute__((unused))
static uint64_t now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        die("clock_gettime(CLOCK_MONOTONIC): %s", strerror(errno));
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((unused))
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sleep MS milliseconds (the samplers between their looks). */
__attribute__((unused))
static void sleep_ms(unsigned long ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Median of V[0..N) (sorts V). */
__attribute__((unused))
static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Peak resident set of this process, in KiB. */
__attribute__((unused))
static long peak_rss_kib(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        die("getrusage: %s", strerror(errno));
    return ru.ru_maxrss;
}

/* Parse a positive integer option value or die. */
__attribute__((unused))
static unsigned long parse_count(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v == 0 || s[0] == '-')
        die("%s: expected a positive integer, got \"%s\"", opt, s);
    return v;
}

/* Attach the calling thread to C; with HEAPD_BENCH_PRECISE=1 in the
 * environment as a HEAPD_MUTATOR_PRECISE mutator, whose C stack is no
 * root (scripts/bench's "before" of the C stack as a root). */
__attribute__((unused))
static void bench_attach(heapd_client *c, heapd_mutator **m)
{
#ifdef HEAPD_MUTATOR_PRECISE
    const char *p = getenv("HEAPD_BENCH_PRECISE");
    heapd_mutator_opts o = {
        .flags = p && strcmp(p, "1") == 0 ? HEAPD_MUTATOR_PRECISE : 0};
    int rc = heapd_attach_opts(c, &o, m);
#else /* a baseline's libheapd (scripts/bench), from before precise mutators */
    int rc = heapd_attach(c, m);
#endif
    if (rc < 0)
        die("heapd_attach: %s (%s)", heapd_strerror(rc), heapd_last_error());
}

/* Connect to heapd (SOCK NULL: $HEAPD_SOCKET, then the default) and attach
 * the calling thread (bench_attach). */
__attribute__((unused))
static void heapd_open(const char *sock, const char *name, heapd_client **c,
                       heapd_mutator **m)
{
    heapd_connect_opts o = {.socket_path = sock, .client_name = name};
    int rc = heapd_connect(c, &o);
    if (rc < 0)
        die("heapd_connect: %s", heapd_last_error());
    bench_attach(*c, m);
}

/* heapd_stats from a mutator thread: a socket round trip, so the mutator
 * says it is blocking (Note [Client GC discipline]). */
__attribute__((unused))
static void heapd_stats_or_die(heapd_client *c, heapd_mutator *m,
                               heapd_stats_t *st)
{
    if (m)
        heapd_blocking_enter(m);
    int rc = heapd_stats(c, st);
    if (m)
        heapd_blocking_leave(m);
    if (rc < 0)
        die("heapd_stats: %s (%s)", heapd_strerror(rc), heapd_last_error());
}

/* ---- log-linear histograms of nanoseconds ----
 * Values below 2 * HSUB are counted exactly; a value with highest set bit e
 * (e > HSUB_BITS) goes to one of HSUB sub-buckets of [2^e, 2^(e+1)), chosen
 * by its HSUB_BITS bits below the top one: at most 3.2 % high. */
enum {
    HSUB_BITS = 5,
    HSUB = 1 << HSUB_BITS,
    HMAX_EXP = 40, /* values up to 2^40 - 1 ns (18 minutes) */
    HBUCKETS = 2 * HSUB + (HMAX_EXP - HSUB_BITS - 1) * HSUB,
};

/* The bucket of value V. */
__attribute__((unused))
static inline size_t hist_index(uint64_t v)
{
    if (v >= (1ull << HMAX_EXP))
        v = (1ull << HMAX_EXP) - 1;
    if (v < 2 * HSUB)
        return (size_t)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = e - HSUB_BITS;
    return 2 * HSUB + (size_t)(e - HSUB_BITS - 1) * HSUB +
           (size_t)((v >> shift) - HSUB);
}

/* The highest value that falls into bucket I. */
__attribute__((unused))
static uint64_t hist_upper(size_t i)
{
    if (i < 2 * HSUB)
        return i;
    size_t j = i - 2 * HSUB;
    unsigned e = (unsigned)(j / HSUB) + HSUB_BITS + 1;
    uint64_t top = j % HSUB + HSUB;
    return ((top + 1) << (e - HSUB_BITS)) - 1;
}

/* The bucket bound at or below which a fraction Q of the N values counted
 * in COUNT[HBUCKETS] lie, capped at their exact maximum MAX; 0 for none. */
__attribute__((unused))
static uint64_t hist_quantile_of(const uint64_t *count, uint64_t n,
                                 uint64_t max, double q)
{
    if (n == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)n + 0.999999999);
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < HBUCKETS; i++) {
        seen += count[i];
        if (seen >= rank) {
            uint64_t u = hist_upper(i);
            return u < max ? u : max;
        }
    }
    return max;
}

/* A timed loop's clock: now_ns() without its error path, which the vDSO
 * clock_gettime(CLOCK_MONOTONIC) never takes once it has worked. */
__attribute__((unused))
static inline uint64_t tick(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- where a heap's memory is ----
 * The parts of heapd's committed memory at one moment (Note [Where the
 * memory is] in daemon/report.c), with the last cycle's live bytes:
 * bench_where takes them (of heap HEAP; NULL: the first the client
 * sees), bench_where_print writes them as KEY=KiB pairs
 * after PREFIX (the where_* fields of a RESULT line, which scripts/bench
 * turns into the "Where the memory goes" table):
 *   committed   the heap's committed bytes (fstat) at that moment
 *   live        the last cycle's marked bytes (objects, headers included)
 *   in_use      bytes of blocks in use: the owned and filled segments'
 *               (young blocks too) and large objects
 *   young       of in_use, young blocks (nurseries): what young mutators
 *               say they hold, or the last sweep found if that is more
 *   garbage     in_use - young - live: allocated since the last cycle, or
 *               dead since (with the room past live objects' ends)
 *   free_filled free blocks of small segments given back
 *   free_owned  free room of the segments clients hold (reserves,
 *               current segments)
 *   free_segs   free segments whose pages were not given back yet
 *   control     the control area
 *   other       committed - the parts above (what moved while they were
 *               read) */
struct bench_where {
    uint64_t committed, live, in_use, young, garbage, free_filled,
        free_owned, free_segs, control, other;
};

#ifdef HEAPD_HAVE_WHERE
__attribute__((unused))
static void bench_where(heapd_client *c, heapd_mutator *m, const char *heap,
                        struct bench_where *w)
{
    static heapd_heap_segments hs;
    heapd_stats_t st;
    size_t n = 0;
    if (m)
        heapd_blocking_enter(m);
    int rc = heapd_stats(c, &st);
    if (rc >= 0)
        rc = heapd_segments(c, heap, &hs, 1, &n);
    if (m)
        heapd_blocking_leave(m);
    if (rc < 0 || n < 1)
        die("heapd_segments(%s): %s (%s)", heap ? heap : "", heapd_strerror(rc),
            heapd_last_error());
    uint64_t live = 0;
    for (size_t i = 0; i < st.heap_count && i < HEAPD_STATS_MAX_HEAPS; i++)
        if (strcmp(st.heaps[i].name, hs.name) == 0)
            live = st.heaps[i].live_bytes;
    struct bench_where x = {0};
    x.committed = hs.committed_bytes;
    x.live = live;
    x.in_use = hs.in_use_owned + hs.in_use_filled + hs.committed_large;
    uint64_t young = hs.young_held > hs.young_bytes ? hs.young_held
                                                    : hs.young_bytes;
    x.young = young < x.in_use ? young : x.in_use;
    x.garbage = x.in_use - x.young > live ? x.in_use - x.young - live : 0;
    x.free_filled = hs.committed_filled > hs.in_use_filled
                        ? hs.committed_filled - hs.in_use_filled : 0;
    x.free_owned = hs.committed_owned > hs.in_use_owned
                       ? hs.committed_owned - hs.in_use_owned : 0;
    x.free_segs = hs.committed_free;
    x.control = hs.committed_control;
    uint64_t parts = x.in_use + x.free_filled + x.free_owned + x.free_segs +
                     x.control;
    x.other = x.committed > parts ? x.committed - parts : 0;
    *w = x;
}
#endif

__attribute__((unused))
static void bench_where_print(const char *prefix, const struct bench_where *w)
{
    printf(" %scommitted_kib=%" PRIu64 " %slive_kib=%" PRIu64
           " %sin_use_kib=%" PRIu64 " %syoung_kib=%" PRIu64
           " %sgarbage_kib=%" PRIu64 " %sfree_filled_kib=%" PRIu64
           " %sfree_owned_kib=%" PRIu64 " %sfree_segs_kib=%" PRIu64
           " %scontrol_kib=%" PRIu64 " %sother_kib=%" PRIu64,
           prefix, w->committed / 1024, prefix, w->live / 1024, prefix,
           w->in_use / 1024, prefix, w->young / 1024, prefix,
           w->garbage / 1024, prefix, w->free_filled / 1024, prefix,
           w->free_owned / 1024, prefix, w->free_segs / 1024, prefix,
           w->control / 1024, prefix, w->other / 1024);
}

#endif
