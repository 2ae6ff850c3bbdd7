/* The Prometheus text exposition of heapd's statistics, one writer for both
 * sides: heapctl stats --prometheus (for node_exporter's textfile
 * collector) and heapd's own scrape endpoint (metrics_listen).  See
 * proto/metrics.c. */
#ifndef HEAPD_PROTO_METRICS_H
#define HEAPD_PROTO_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "heapd_counters.h"

/* One heap: its name, geometry, and the values of HEAPD_HEAP_COUNTERS in
 * table order (the order of HeapStats.counters on the wire). */
struct metrics_heap {
    const char *name;
    uint64_t reserved_bytes;
    uint64_t segment_size;
    uint64_t clients;
    uint64_t phase;
    const uint64_t *counters; /* HEAPD_HEAP_COUNTERS_N of them */
};

/* The daemon's own. */
struct metrics_daemon {
    const char *version;
    uint64_t uptime_ns;
    uint32_t clients_connected;
    uint64_t connections_total;
    uint64_t frames_rejected;
    uint64_t connections_refused;
    uint64_t connections_throttled;
    uint64_t connections_timed_out;
    uint64_t requests_refused;
    uint64_t log_lines_suppressed;
    uint32_t heaps_unserved;    /* Note [Heaps heapd cannot adopt] in
                                   daemon/adopt.c */
};

/* Write D and the N heaps of H to F in the text format 0.0.4.  Returns 0,
 * or -EIO if F reported an error. */
int metrics_write(FILE *f, const struct metrics_daemon *d,
                  const struct metrics_heap *h, size_t n);

/* The metric name of counter line K ("heapd_pause_seconds_total" for
 * pause_total_ns), into BUF of N bytes. */
void metrics_name(size_t k, char *buf, size_t n);

#endif
