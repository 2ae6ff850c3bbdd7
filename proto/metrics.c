/* The Prometheus text exposition of heapd's statistics.
 *
 * Note [Metric names]
 * ~~~~~~~~~~~~~~~~~~~
 * Every line of the counter table (Note [Counter table] in
 * proto/heapd_counters.h) is one metric family, named by rule so that a
 * new line needs nothing here:
 *   - "heapd_", then NAME's words without the unit words: "ns" and "bytes"
 *     wherever they stand, and, for a COUNTER, "total";
 *   - then the base unit: "_seconds" for NS (the value divided by 10^9),
 *     "_bytes" for BYTES;
 *   - then "_total" for a COUNTER;
 *   - TYPE is counter or gauge from KIND, HELP is the table's HELP;
 *   - each heap is a sample with the label heap="NAME".
 * So pause_total_ns is heapd_pause_seconds_total, bytes_allocated is
 * heapd_allocated_bytes_total and mark_ns_last is
 * heapd_mark_last_seconds: the names Prometheus' own conventions give
 * (promtool check metrics, which the tests run, reads them without a
 * complaint).  The lines pauses_le_* are not metrics of their own: with
 * pause_total_ns and pause_count they are the histogram
 * heapd_pause_duration_seconds (HEAPD_PAUSE_BUCKETS).  Minor collections,
 * of which heapd keeps only a total and a count, are a summary,
 * heapd_minor_pause_duration_seconds.
 * Label values and help text are escaped as the format says (backslash,
 * double quote in labels, newline).
 */
#include <errno.h>
#include <stddef.h>
#include <stdbool.h>
#include <string.h>

#include "metrics.h"

struct line {
    const char *name, *help;
    heapd_counter_kind kind;
    heapd_counter_unit unit;
};

#define METRICS_LINE_(name, type, kind, unit, source, help) \
    {#name, help, HEAPD_KIND_##kind, HEAPD_UNIT_##unit},
static const struct line lines[HEAPD_HEAP_COUNTERS_N] = {
    HEAPD_HEAP_COUNTERS(METRICS_LINE_)
};
#undef METRICS_LINE_

static bool is_unit_word(const char *w, size_t len, const struct line *l)
{
    return (len == 2 && memcmp(w, "ns", 2) == 0 && l->unit == HEAPD_UNIT_NS) ||
           (len == 5 && memcmp(w, "bytes", 5) == 0 &&
            l->unit == HEAPD_UNIT_BYTES) ||
           (len == 5 && memcmp(w, "total", 5) == 0 &&
            l->kind == HEAPD_KIND_COUNTER);
}

void metrics_name(size_t k, char *buf, size_t n)
{
    const struct line *l = &lines[k];
    size_t o = (size_t)snprintf(buf, n, "heapd");
    for (const char *w = l->name; *w;) {
        size_t len = strcspn(w, "_");
        if (!is_unit_word(w, len, l) && o < n)
            o += (size_t)snprintf(buf + o, n - o, "_%.*s", (int)len, w);
        w += len + (w[len] == '_');
    }
    if (o < n && l->unit != HEAPD_UNIT_COUNT)
        o += (size_t)snprintf(buf + o, n - o, "%s",
                              l->unit == HEAPD_UNIT_NS ? "_seconds"
                                                       : "_bytes");
    if (o < n && l->kind == HEAPD_KIND_COUNTER)
        snprintf(buf + o, n - o, "_total");
}

/* S with \ " and newline escaped, as a label value (QUOTE) or help. */
static void put_escaped(FILE *f, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            fputs("\\\\", f);
        else if (*s == '\n')
            fputs("\\n", f);
        else if (*s == '"' && quote)
            fputs("\\\"", f);
        else
            fputc(*s, f);
    }
}

static void family(FILE *f, const char *name, const char *type,
                   const char *help)
{
    fprintf(f, "# HELP %s ", name);
    put_escaped(f, help, false);
    fprintf(f, "\n# TYPE %s %s\n", name, type);
}

static void sample_ns(FILE *f, uint64_t ns)
{
    fprintf(f, " %llu.%09llu\n", (unsigned long long)(ns / 1000000000u),
            (unsigned long long)(ns % 1000000000u));
}

/* NAME{heap="H"} (SUFFIX appended to NAME) */
static void heap_sample(FILE *f, const char *name, const char *suffix,
                        const struct metrics_heap *h)
{
    fprintf(f, "%s%s{heap=\"", name, suffix);
    put_escaped(f, h->name, true);
    fputs("\"}", f);
}

static void daemon_metric(FILE *f, const char *name, const char *type,
                          const char *help, uint64_t v)
{
    family(f, name, type, help);
    fprintf(f, "%s %llu\n", name, (unsigned long long)v);
}

static const struct bucket {
    size_t line;
    uint64_t ns;
} buckets[] = {
#define METRICS_BUCKET_(line, ns) {HEAPD_HEAP_COUNTER_##line, ns},
    HEAPD_PAUSE_BUCKETS(METRICS_BUCKET_)
#undef METRICS_BUCKET_
};
#define N_BUCKETS (sizeof buckets / sizeof buckets[0])

static bool is_bucket(size_t k)
{
    for (size_t b = 0; b < N_BUCKETS; b++)
        if (buckets[b].line == k)
            return true;
    return false;
}

/* The stop-the-world pauses as a histogram: the pauses_le_* lines, then
 * +Inf (pause_count), _sum and _count. */
static void pause_histogram(FILE *f, const struct metrics_heap *h, size_t n)
{
    static const char name[] = "heapd_pause_duration_seconds";
    family(f, name, "histogram", "stop-the-world pauses (snapshots and "
           "final syncs), by length");
    for (size_t i = 0; i < n; i++) {
        for (size_t b = 0; b < N_BUCKETS; b++) {
            fprintf(f, "%s_bucket{heap=\"", name);
            put_escaped(f, h[i].name, true);
            fprintf(f, "\",le=\"%llu.%06llu\"} %llu\n",
                    (unsigned long long)(buckets[b].ns / 1000000000u),
                    (unsigned long long)(buckets[b].ns % 1000000000u / 1000u),
                    (unsigned long long)h[i].counters[buckets[b].line]);
        }
        fprintf(f, "%s_bucket{heap=\"", name);
        put_escaped(f, h[i].name, true);
        fprintf(f, "\",le=\"+Inf\"} %llu\n",
                (unsigned long long)
                    h[i].counters[HEAPD_HEAP_COUNTER_pause_count]);
        heap_sample(f, name, "_sum", &h[i]);
        sample_ns(f, h[i].counters[HEAPD_HEAP_COUNTER_pause_total_ns]);
        heap_sample(f, name, "_count", &h[i]);
        fprintf(f, " %llu\n", (unsigned long long)
                                  h[i].counters[HEAPD_HEAP_COUNTER_pause_count]);
    }
}

/* A summary of pauses from a total time and a count (no quantiles). */
static void pause_summary(FILE *f, const char *name, const char *help,
                          size_t total_ns, size_t count,
                          const struct metrics_heap *h, size_t n)
{
    family(f, name, "summary", help);
    for (size_t i = 0; i < n; i++) {
        heap_sample(f, name, "_sum", &h[i]);
        sample_ns(f, h[i].counters[total_ns]);
        heap_sample(f, name, "_count", &h[i]);
        fprintf(f, " %llu\n", (unsigned long long)h[i].counters[count]);
    }
}

int metrics_write(FILE *f, const struct metrics_daemon *d,
                  const struct metrics_heap *h, size_t n)
{
    family(f, "heapd_build_info", "gauge",
           "always 1; the label is the daemon's version");
    fputs("heapd_build_info{version=\"", f);
    put_escaped(f, d->version, true);
    fputs("\"} 1\n", f);
    family(f, "heapd_uptime_seconds", "gauge", "since the daemon started");
    fputs("heapd_uptime_seconds", f);
    sample_ns(f, d->uptime_ns);
    daemon_metric(f, "heapd_clients_connected", "gauge",
                  "connections open now, control ones included",
                  d->clients_connected);
    daemon_metric(f, "heapd_connections_total", "counter",
                  "connections accepted since start", d->connections_total);
    daemon_metric(f, "heapd_frames_rejected_total", "counter",
                  "bad frames and messages since start", d->frames_rejected);
    daemon_metric(f, "heapd_connections_refused_total", "counter",
                  "over max_connections(_per_user)", d->connections_refused);
    daemon_metric(f, "heapd_connections_throttled_total", "counter",
                  "reading paused: replies unread", d->connections_throttled);
    daemon_metric(f, "heapd_connections_timed_out_total", "counter",
                  "no hello within handshake_timeout",
                  d->connections_timed_out);
    daemon_metric(f, "heapd_requests_refused_total", "counter",
                  "over a per-client cap, or denied", d->requests_refused);
    daemon_metric(f, "heapd_log_lines_suppressed_total", "counter",
                  "over client_log_rate", d->log_lines_suppressed);
    daemon_metric(f, "heapd_heaps_unserved", "gauge",
                  "configured heaps not served (heapctl stats says why)",
                  d->heaps_unserved);

    static const struct {
        const char *name, *help;
        size_t offset;
    } gauges[] = {
        {"heapd_heap_reserved_bytes", "address space: the heap's max_size",
         offsetof(struct metrics_heap, reserved_bytes)},
        {"heapd_heap_segment_bytes", "the heap's segment_size",
         offsetof(struct metrics_heap, segment_size)},
        {"heapd_heap_clients", "mutator clients connected to the heap",
         offsetof(struct metrics_heap, clients)},
        {"heapd_heap_phase", "the collector's phase: 0 idle, 1 mark, 2 sweep",
         offsetof(struct metrics_heap, phase)},
    };
    for (size_t g = 0; g < sizeof gauges / sizeof gauges[0]; g++) {
        family(f, gauges[g].name, "gauge", gauges[g].help);
        for (size_t i = 0; i < n; i++) {
            uint64_t v;
            memcpy(&v, (const char *)&h[i] + gauges[g].offset, sizeof v);
            heap_sample(f, gauges[g].name, "", &h[i]);
            fprintf(f, " %llu\n", (unsigned long long)v);
        }
    }

    /* Note [Metric names] */
    for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N; k++) {
        char name[128];
        if (is_bucket(k))
            continue;
        metrics_name(k, name, sizeof name);
        family(f, name,
               lines[k].kind == HEAPD_KIND_COUNTER ? "counter" : "gauge",
               lines[k].help);
        for (size_t i = 0; i < n; i++) {
            heap_sample(f, name, "", &h[i]);
            if (lines[k].unit == HEAPD_UNIT_NS)
                sample_ns(f, h[i].counters[k]);
            else
                fprintf(f, " %llu\n", (unsigned long long)h[i].counters[k]);
        }
    }
    pause_histogram(f, h, n);
    pause_summary(f, "heapd_minor_pause_duration_seconds",
                  "minor collections of young generations: their total "
                  "time and number",
                  HEAPD_HEAP_COUNTER_minor_pause_total_ns,
                  HEAPD_HEAP_COUNTER_minor_collections, h, n);
    fflush(f);
    return ferror(f) ? -EIO : 0;
}
