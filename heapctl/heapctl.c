/* heapctl: look at a running heapd.
 *
 *   heapctl [--socket PATH] stats [--json | --prometheus]
 *   heapctl [--socket PATH] clients [--json]
 *   heapctl [--socket PATH] segments [--json] [--heap NAME]
 *   heapctl [--socket PATH] [--heap NAME] gc | globals
 *   heapctl [--socket PATH] top [--interval MS]
 *
 * It connects as a control client (HEAPD_CONNECT_CONTROL): it never maps a
 * heap, so it works whatever the heaps' addresses are. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "heapctl_top.h"
#include "heapd.h"
#include "metrics.h"

/* The heaps heapd does not serve (Note [Heaps heapd cannot adopt] in
 * daemon/adopt.c), for stats. */
static heapd_unserved_heap unserved[HEAPD_STATS_MAX_HEAPS];

static void usage(FILE *f)
{
    fprintf(f, "usage: heapctl [--socket PATH] [--heap NAME] stats "
               "[--json | --prometheus]\n"
               "       heapctl [--socket PATH] clients [--json]\n"
               "       heapctl [--socket PATH] segments [--json] [--heap NAME]\n"
               "       heapctl [--socket PATH] [--heap NAME] gc\n"
               "       heapctl [--socket PATH] [--heap NAME] globals\n"
               "       heapctl [--socket PATH] top [--interval MS]\n"
               "       heapctl [--socket PATH] drop HEAP\n"
               "       heapctl [--socket PATH] save|load HEAP FILE\n"
               "  stats     daemon version, uptime, clients, and per heap its\n"
               "            memory, segments, cycles and pauses\n"
               "  clients   every connection: pid, user, heap, segments held,\n"
               "            remark requests unanswered, and what each of its\n"
               "            mutators does; stalled ones (holding the heap up)\n"
               "            first\n"
               "  segments  per heap, its segments by state, and per size\n"
               "            class its segments and blocks in use\n"
               "  gc        run a collection of the heap and wait for it\n"
               "  globals   the heap's named global roots: name, state, size\n"
               "            of the object they reference, its kind (map,\n"
               "            queue, string, other) with a map's keys, a\n"
               "            queue's length or a string's bytes, initialising\n"
               "            client\n"
               "  top       a live view for a terminal: per heap its phase,\n"
               "            cycles and allocation per second, live and\n"
               "            committed memory, pause p99 and max; the clients\n"
               "            by allocation rate, stalled ones first (q quits)\n"
               "  drop      give up HEAP, which heapd does not serve (stats\n"
               "            says why): heapd forgets what the service\n"
               "            manager kept of it and serves it empty; its\n"
               "            objects are lost\n"
               "  save      write HEAP's objects reachable at the next\n"
               "            cycle's snapshot, and its globals, to FILE\n"
               "            (heapd writes it: root or heapd's user only);\n"
               "            its clients go on meanwhile.  load = FILE in\n"
               "            the heap's section loads it back, or\n"
               "  load      load FILE, a saved heap, into HEAP, which must\n"
               "            be empty (root or heapd's user only)\n"
               "  --interval  top's refresh, in ms (100..60000; default 1000)\n"
               "  --json    print one JSON object instead of text (stats,\n"
               "            clients, segments)\n"
               "  --prometheus  stats in Prometheus' text format, every\n"
               "            counter of every heap (for node_exporter's\n"
               "            textfile collector)\n"
               "  --heap    the heap for gc and globals (default:\n"
               "            \"default\"); for segments, only that heap\n"
               "            (default: every heap)\n"
               "The socket is --socket, else $HEAPD_SOCKET, else the "
               "default.\n");
}

static void print_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

/* The lines of HEAPD_HEAP_COUNTERS (see Note [Counter table]), for the
 * printers. */
static const struct counter_line {
    const char *name, *help;
    heapd_counter_unit unit;
} counter_lines[HEAPD_HEAP_COUNTERS_N] = {
#define COUNTER_LINE_(name, type, kind, unit, source, help) \
    {#name, help, HEAPD_UNIT_##unit},
    HEAPD_HEAP_COUNTERS(COUNTER_LINE_)
#undef COUNTER_LINE_
};

void heapctl_counter_values(const heapd_heap_stats *h,
                            uint64_t v[HEAPD_HEAP_COUNTERS_N])
{
#define COUNTER_VALUE_(name, type, kind, unit, source, help) \
    v[HEAPD_HEAP_COUNTER_##name] = h->name;
    HEAPD_HEAP_COUNTERS(COUNTER_VALUE_)
#undef COUNTER_VALUE_
}

static const char *phase_name(uint32_t phase)
{
    return phase == 1 ? "mark" : phase == 2 ? "sweep" : "idle";
}

static void print_stats_json(const heapd_stats_t *s, size_t n_unserved)
{
    printf("{\"version\":");
    print_json_string(s->version);
    printf(",\"uptime_ns\":%" PRIu64 ",\"clients_connected\":%" PRIu32
           ",\"connections_total\":%" PRIu64 ",\"frames_rejected\":%" PRIu64
           ",\"connections_refused\":%" PRIu64
           ",\"connections_throttled\":%" PRIu64
           ",\"connections_timed_out\":%" PRIu64
           ",\"requests_refused\":%" PRIu64
           ",\"log_lines_suppressed\":%" PRIu64 ",\"heaps\":[",
           s->uptime_ns, s->clients_connected, s->connections_total,
           s->frames_rejected, s->connections_refused,
           s->connections_throttled, s->connections_timed_out,
           s->requests_refused, s->log_lines_suppressed);
    for (size_t i = 0; i < s->heap_count; i++) {
        const heapd_heap_stats *h = &s->heaps[i];
        uint64_t v[HEAPD_HEAP_COUNTERS_N];
        printf("%s{\"name\":", i ? "," : "");
        print_json_string(h->name);
        printf(",\"base\":\"0x%" PRIx64 "\",\"reserved_bytes\":%" PRIu64
               ",\"committed_bytes\":%" PRIu64 ",\"segment_size\":%" PRIu64
               ",\"phase\":%" PRIu32 ",\"clients\":%" PRIu32,
               h->base, h->reserved_bytes, h->committed_bytes,
               h->segment_size, h->phase, h->clients);
        heapctl_counter_values(h, v);
        for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N; k++)
            printf(",\"%s\":%" PRIu64, counter_lines[k].name, v[k]);
        printf("}");
    }
    printf("],\"unserved\":[");
    for (size_t i = 0; i < n_unserved; i++) {
        printf("%s{\"name\":", i ? "," : "");
        print_json_string(unserved[i].name);
        printf(",\"why\":");
        print_json_string(unserved[i].why);
        printf("}");
    }
    printf("]}\n");
}

/* Note [Metric names] in proto/metrics.c */
static int print_stats_prometheus(const heapd_stats_t *s, size_t n_unserved)
{
    static uint64_t v[HEAPD_STATS_MAX_HEAPS][HEAPD_HEAP_COUNTERS_N];
    struct metrics_heap h[HEAPD_STATS_MAX_HEAPS];
    struct metrics_daemon d = {
        .version = s->version, .uptime_ns = s->uptime_ns,
        .clients_connected = s->clients_connected,
        .connections_total = s->connections_total,
        .frames_rejected = s->frames_rejected,
        .connections_refused = s->connections_refused,
        .connections_throttled = s->connections_throttled,
        .connections_timed_out = s->connections_timed_out,
        .requests_refused = s->requests_refused,
        .log_lines_suppressed = s->log_lines_suppressed,
        .heaps_unserved = (uint32_t)n_unserved,
    };
    size_t n = s->heap_count < HEAPD_STATS_MAX_HEAPS ? s->heap_count
                                                     : HEAPD_STATS_MAX_HEAPS;
    for (size_t i = 0; i < n; i++) {
        const heapd_heap_stats *hs = &s->heaps[i];
        heapctl_counter_values(hs, v[i]);
        h[i] = (struct metrics_heap){.name = hs->name,
                                     .reserved_bytes = hs->reserved_bytes,
                                     .segment_size = hs->segment_size,
                                     .clients = hs->clients,
                                     .phase = hs->phase,
                                     .counters = v[i]};
    }
    if (metrics_write(stdout, &d, h, n) < 0) {
        fprintf(stderr, "heapctl: stats: cannot write the output\n");
        return -1;
    }
    return 0;
}

/* V in UNIT for a reader, "" when the number says it already. */
static const char *readable(uint64_t v, heapd_counter_unit unit, char *buf,
                            size_t n)
{
    static const char *const ns[] = {"us", "ms", "s"};
    static const char *const bytes[] = {"KiB", "MiB", "GiB", "TiB"};
    double x = (double)v;
    int k = -1;

    if (unit == HEAPD_UNIT_NS) {
        while (k < 1 && x >= 1000) {
            x /= 1000;
            k++;
        }
        if (k >= 0)
            snprintf(buf, n, " (%.3g %s)", x, ns[k]);
    } else if (unit == HEAPD_UNIT_BYTES) {
        while (k < 3 && x >= 1024) {
            x /= 1024;
            k++;
        }
        if (k >= 0)
            snprintf(buf, n, " (%.3g %s)", x, bytes[k]);
    }
    return k >= 0 ? buf : "";
}

/* NS as days and h:m:s. */
static const char *duration(uint64_t ns, char *buf, size_t n)
{
    uint64_t secs = ns / 1000000000u;
    snprintf(buf, n, "%" PRIu64 "d %02" PRIu64 ":%02" PRIu64 ":%02" PRIu64,
             secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    return buf;
}

/* For stats: their number, or -1 (said on stderr). */
static long get_unserved(heapd_client *c)
{
    size_t n = 0;
    if (heapd_unserved_heaps(c, unserved, HEAPD_STATS_MAX_HEAPS, &n) < 0) {
        fprintf(stderr, "heapctl: stats: %s\n", heapd_last_error());
        return -1;
    }
    return (long)(n < HEAPD_STATS_MAX_HEAPS ? n : HEAPD_STATS_MAX_HEAPS);
}

static void print_stats_text(const heapd_stats_t *s, size_t n_unserved)
{
    char d[48];
    printf("heapd %s, up %s\n", s->version, duration(s->uptime_ns, d, sizeof d));
    printf("clients connected: %" PRIu32 " (%" PRIu64 " since start)\n",
           s->clients_connected, s->connections_total);
    printf("frames rejected:   %" PRIu64 "\n", s->frames_rejected);
    printf("connections refused: %" PRIu64 ", throttled: %" PRIu64
           ", timed out: %" PRIu64 "\n", s->connections_refused,
           s->connections_throttled, s->connections_timed_out);
    printf("requests refused:  %" PRIu64 "\n", s->requests_refused);
    printf("log lines suppressed: %" PRIu64 "\n", s->log_lines_suppressed);
    printf("%-16s %-16s %14s %14s %10s %8s\n", "HEAP", "BASE", "RESERVED",
           "COMMITTED", "SEGMENT", "CLIENTS");
    for (size_t i = 0; i < s->heap_count; i++) {
        const heapd_heap_stats *h = &s->heaps[i];
        printf("%-16s 0x%-14" PRIx64 " %14" PRIu64 " %14" PRIu64
               " %10" PRIu64 " %8" PRIu32 "\n",
               h->name, h->base, h->reserved_bytes, h->committed_bytes,
               h->segment_size, h->clients);
    }
    for (size_t i = 0; i < n_unserved; i++)
        printf("%-16s NOT SERVED: %s\n", unserved[i].name, unserved[i].why);
    /* the names in one column, as wide as the longest */
    int w = 17;
    for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N; k++)
        if ((int)strlen(counter_lines[k].name) > w)
            w = (int)strlen(counter_lines[k].name);
    for (size_t i = 0; i < s->heap_count; i++) {
        const heapd_heap_stats *h = &s->heaps[i];
        uint64_t v[HEAPD_HEAP_COUNTERS_N];
        printf("\nheap %s:\n", h->name);
        printf("  %-*s %s\n", w, "phase", phase_name(h->phase));
        heapctl_counter_values(h, v);
        /* the heap's age beside the daemon's uptime: it outlives restarts */
        printf("  %-*s %s, kept across %" PRIu64 " restart(s) of heapd, %"
               PRIu64 " of them after a crash; %" PRIu64 " client(s) "
               "resumed\n", w, "age",
               duration(v[HEAPD_HEAP_COUNTER_heap_age_ns], d, sizeof d),
               v[HEAPD_HEAP_COUNTER_restarts_survived],
               v[HEAPD_HEAP_COUNTER_crashes_recovered],
               v[HEAPD_HEAP_COUNTER_clients_resumed]);
        for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N; k++) {
            const struct counter_line *l = &counter_lines[k];
            char r[32];
            int n = printf("  %-*s %" PRIu64 "%s", w, l->name, v[k],
                           readable(v[k], l->unit, r, sizeof r));
            /* the help in one column after the longest values */
            printf("%*s  %s\n", n < w + 31 ? w + 31 - n : 0, "", l->help);
        }
    }
}

/* ---- clients ---- */

static const char *state_name(heapd_mutator_state s)
{
    static const char *const names[] = {"running", "blocked", "waiting",
                                        "stopped", "stalled", "faulted"};
    return (unsigned)s < 6 ? names[s] : "faulted";
}

static const char *stall_name(heapd_stall_on on)
{
    static const char *const names[] = {"none", "snapshot", "final_sync",
                                        "handshake", "remark"};
    return (unsigned)on < 5 ? names[on] : "none";
}

static uint64_t stalled_ms(const heapd_mutator_info *m)
{
    return m->state == HEAPD_MUTATOR_STALLED ? m->stalled_ms + 1 : 0;
}

/* Stalled first, the longest first; then by slot. */
static int mutator_order(const void *a, const void *b)
{
    const heapd_mutator_info *x = a, *y = b;
    uint64_t sx = stalled_ms(x), sy = stalled_ms(y);
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* A client with a stalled mutator (its longest first; mutators sorted
 * already), then by id. */
static int client_order(const void *a, const void *b)
{
    const heapd_client_info *x = a, *y = b;
    uint64_t sx = x->mutator_count ? stalled_ms(&x->mutators[0]) : 0;
    uint64_t sy = y->mutator_count ? stalled_ms(&y->mutators[0]) : 0;
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void sort_clients(heapd_client_info *cl, size_t n)
{
    for (size_t i = 0; i < n; i++)
        qsort(cl[i].mutators, cl[i].mutator_count, sizeof cl[i].mutators[0],
              mutator_order);
    qsort(cl, n, sizeof cl[0], client_order);
}

static void print_clients_json(const heapd_client_info *cl, size_t n)
{
    printf("{\"clients\":[");
    for (size_t i = 0; i < n; i++) {
        const heapd_client_info *c = &cl[i];
        printf("%s{\"id\":%" PRIu64 ",\"name\":", i ? "," : "", c->id);
        print_json_string(c->name);
        printf(",\"pid\":%" PRId32 ",\"uid\":%" PRIu32 ",\"heap\":", c->pid,
               c->uid);
        print_json_string(c->heap);
        printf(",\"kind\":\"%s\",\"connected_at\":%" PRId64
               ",\"segments_held\":%" PRIu32 ",\"bytes_granted\":%" PRIu64
               ",\"remark_outstanding\":%" PRIu32
               ",\"remark_late_ms\":%" PRIu64 ",\"library\":",
               c->control ? "control" : "mutator", c->connected_at,
               c->segments_held, c->bytes_granted, c->remark_outstanding,
               c->remark_late_ms);
        print_json_string(c->library);
        printf(",\"mutators\":[");
        for (size_t k = 0; k < c->mutator_count; k++) {
            const heapd_mutator_info *m = &c->mutators[k];
            printf("%s{\"slot\":%" PRIu32 ",\"state\":\"%s\","
                   "\"stalled_ms\":%" PRIu64 ",\"stalled_on\":\"%s\","
                   "\"alloc_bytes\":%" PRIu64 ",\"urs_backlog\":%" PRIu64
                   ",\"root_depth\":%" PRIu64 ",\"young_bytes\":%" PRIu64
                   ",\"minor_collections\":%" PRIu64
                   ",\"promoted_bytes\":%" PRIu64
                   ",\"minor_pause_max_ns\":%" PRIu64 "}",
                   k ? "," : "", m->slot, state_name(m->state),
                   m->stalled_ms, stall_name(m->stalled_on), m->alloc_bytes,
                   m->urs_backlog, m->root_depth, m->young_bytes,
                   m->minor_collections, m->promoted_bytes,
                   m->minor_pause_max_ns);
        }
        printf("]}");
    }
    printf("]}\n");
}

static void print_clients_text(const heapd_client_info *cl, size_t n)
{
    printf("%-6s %-20s %8s %6s %-16s %-19s %8s %-8s %s\n", "ID", "NAME",
           "PID", "UID", "HEAP", "CONNECTED SINCE", "SEGMENTS", "LIBHEAPD",
           "REMARK");
    for (size_t i = 0; i < n; i++) {
        const heapd_client_info *c = &cl[i];
        char since[32] = "?", remark[48];
        time_t t = (time_t)c->connected_at;
        struct tm tm;
        if (localtime_r(&t, &tm))
            strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S", &tm);
        if (c->remark_late_ms)
            snprintf(remark, sizeof remark, "%" PRIu32 " (oldest %" PRIu64
                     " ms)", c->remark_outstanding, c->remark_late_ms);
        else
            snprintf(remark, sizeof remark, "%" PRIu32,
                     c->remark_outstanding);
        printf("%-6" PRIu64 " %-20s %8" PRId32 " %6" PRIu32 " %-16s %-19s "
               "%8" PRIu32 " %-8s %s\n", c->id, c->name, c->pid, c->uid,
               c->control ? "(control)" : c->heap, since, c->segments_held,
               c->library[0] ? c->library : "<0.2.0", remark);
        for (size_t k = 0; k < c->mutator_count; k++) {
            const heapd_mutator_info *m = &c->mutators[k];
            char what[160];
            switch (m->state) {
            case HEAPD_MUTATOR_RUNNING:
                snprintf(what, sizeof what, "running");
                break;
            case HEAPD_MUTATOR_BLOCKED:
                snprintf(what, sizeof what, "in a blocking region");
                break;
            case HEAPD_MUTATOR_WAITING:
                snprintf(what, sizeof what, "waiting in a write barrier");
                break;
            case HEAPD_MUTATOR_STOPPED:
                snprintf(what, sizeof what, "stopped (acknowledged)");
                break;
            case HEAPD_MUTATOR_STALLED:
                snprintf(what, sizeof what, "STALLED %" PRIu64 " ms: %s",
                         m->stalled_ms, heapd_stall_what(m->stalled_on));
                break;
            default:
                snprintf(what, sizeof what, "FAULTED: its client wrote "
                         "words that make no sense; heapd disconnects it");
            }
            printf("       slot %-3" PRIu32 " %s; %" PRIu64 " bytes "
                   "allocated, URS backlog %" PRIu64 ", %" PRIu64
                   " roots\n", m->slot, what, m->alloc_bytes,
                   m->urs_backlog, m->root_depth);
            /* a young mutator's nursery budget (Note [Young objects, for
             * the program] in heapd.h) on a line of its own */
            if (m->young_bytes)
                printf("                nursery budget %" PRIu64
                       " bytes, %" PRIu64
                       " minor collections (longest %" PRIu64 " us), %" PRIu64
                       " bytes promoted\n", m->young_bytes,
                       m->minor_collections, m->minor_pause_max_ns / 1000,
                       m->promoted_bytes);
        }
    }
}

/* ---- segments ---- */

/* V bytes in a column: "512 B", "3.5 KiB", "12.1 MiB". */
static const char *size_text(uint64_t v, char *buf, size_t n)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)v;
    int k = 0;
    while (k < 4 && x >= 1024) {
        x /= 1024;
        k++;
    }
    if (k == 0)
        snprintf(buf, n, "%" PRIu64 " B", v);
    else
        snprintf(buf, n, "%.1f %s", x, unit[k]);
    return buf;
}

static void print_segments_json(const heapd_heap_segments *hs, size_t n)
{
    printf("{\"heaps\":[");
    for (size_t i = 0; i < n; i++) {
        const heapd_heap_segments *h = &hs[i];
        printf("%s{\"name\":", i ? "," : "");
        print_json_string(h->name);
        printf(",\"segment_size\":%" PRIu64 ",\"segments_total\":%" PRIu32
               ",\"segments_free\":%" PRIu32 ",\"segments_owned\":%" PRIu32
               ",\"segments_filled\":%" PRIu32 ",\"segments_large\":%" PRIu32
               ",\"segments_large_tail\":%" PRIu32
               ",\"segments_orphaned\":%" PRIu32
               ",\"segments_punched\":%" PRIu32
               ",\"segments_unformatted\":%" PRIu32
               ",\"segments_young\":%" PRIu32 ",\"young_bytes\":%" PRIu64
               ",\"committed_bytes\":%" PRIu64 ",\"block_bytes\":%" PRIu64
               ",\"committed_control\":%" PRIu64
               ",\"committed_free\":%" PRIu64
               ",\"committed_owned\":%" PRIu64
               ",\"committed_filled\":%" PRIu64
               ",\"committed_large\":%" PRIu64 ",\"in_use_owned\":%" PRIu64
               ",\"in_use_filled\":%" PRIu64 ",\"young_held\":%" PRIu64
               ",\"classes\":[",
               h->segment_size, h->total, h->free, h->owned, h->filled,
               h->large, h->large_tail, h->orphaned, h->punched,
               h->unformatted, h->young, h->young_bytes, h->committed_bytes,
               h->block_bytes, h->committed_control, h->committed_free,
               h->committed_owned, h->committed_filled, h->committed_large,
               h->in_use_owned, h->in_use_filled, h->young_held);
        for (size_t k = 0; k < h->class_count; k++) {
            const heapd_class_segments *c = &h->classes[k];
            printf("%s{\"size_class\":%" PRIu32 ",\"object_size\":%" PRIu32
                   ",\"segments\":%" PRIu32 ",\"segments_owned\":%" PRIu32
                   ",\"blocks\":%" PRIu64 ",\"blocks_in_use\":%" PRIu64
                   ",\"committed_bytes\":%" PRIu64 ",\"block_bytes\":%" PRIu64
                   ",\"fragmentation_permille\":%" PRIu64 "}",
                   k ? "," : "", c->size_class, c->object_size, c->segments,
                   c->segments_owned, c->blocks, c->blocks_in_use,
                   c->committed_bytes, c->block_bytes,
                   c->fragmentation_permille);
        }
        printf("]}");
    }
    printf("]}\n");
}

static void print_segments_text(const heapd_heap_segments *hs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const heapd_heap_segments *h = &hs[i];
        bool owned = false;
        printf("%sheap %s: %" PRIu32 " segments of %" PRIu64 " bytes\n",
               i ? "\n" : "", h->name, h->total, h->segment_size);
        printf("  free %" PRIu32 " (punched %" PRIu32 "), owned %" PRIu32
               ", filled %" PRIu32 ", large %" PRIu32 " (+%" PRIu32
               " tail), orphaned %" PRIu32 ", unformatted %" PRIu32 "%s",
               h->free, h->punched, h->owned, h->filled, h->large,
               h->large_tail, h->orphaned, h->unformatted,
               h->young ? "" : "\n");
        char yb[32];
        if (h->young) /* only a heap with young objects says so */
            printf(", young %" PRIu32 " (%s in young blocks)\n", h->young,
                   size_text(h->young_bytes, yb, sizeof yb));
        char cb[32], bb[32];
        printf("  committed %s, in blocks kept by the last sweep %s\n",
               size_text(h->committed_bytes, cb, sizeof cb),
               size_text(h->block_bytes, bb, sizeof bb));
        char m[7][32];
        printf("  committed in: control %s, free segments %s, owned %s (%s "
               "in blocks), filled %s (%s in blocks), large %s\n",
               size_text(h->committed_control, m[0], sizeof m[0]),
               size_text(h->committed_free, m[1], sizeof m[1]),
               size_text(h->committed_owned, m[2], sizeof m[2]),
               size_text(h->in_use_owned, m[3], sizeof m[3]),
               size_text(h->committed_filled, m[4], sizeof m[4]),
               size_text(h->in_use_filled, m[5], sizeof m[5]),
               size_text(h->committed_large, m[6], sizeof m[6]));
        if (h->young_held)
            printf("  young mutators say their nurseries hold %s\n",
                   size_text(h->young_held, m[0], sizeof m[0]));
        if (h->class_count == 0) {
            printf("  no small segment has a size class\n");
            continue;
        }
        printf("  %5s %6s %9s %6s %10s %10s %9s %10s %10s %6s\n", "CLASS",
               "SIZE", "SEGMENTS", "OWNED", "BLOCKS", "IN USE", "OCCUPANCY",
               "COMMITTED", "IN BLOCKS", "FRAG");
        for (size_t k = 0; k < h->class_count; k++) {
            const heapd_class_segments *c = &h->classes[k];
            double occ = c->blocks ? 100.0 * (double)c->blocks_in_use /
                                         (double)c->blocks
                                   : 0;
            owned |= c->segments_owned != 0;
            char com[32], inb[32], frag[16];
            if (c->block_bytes)
                snprintf(frag, sizeof frag, "%.2fx",
                         (double)c->fragmentation_permille / 1000.0);
            else
                snprintf(frag, sizeof frag, "-");
            printf("  %5" PRIu32 " %6" PRIu32 " %9" PRIu32 " %6" PRIu32
                   " %10" PRIu64 " %10" PRIu64 " %8.1f%% %10s %10s %6s%s\n",
                   c->size_class, c->object_size, c->segments,
                   c->segments_owned, c->blocks, c->blocks_in_use, occ,
                   size_text(c->committed_bytes, com, sizeof com),
                   size_text(c->block_bytes, inb, sizeof inb),
                   frag, c->segments_owned ? " ~" : "");
        }
        if (owned)
            printf("  ~ estimate: owners allocate in their OWNED segments "
                   "while they are counted\n");
    }
}

/* 0 if heapd serves a heap NAME (that this user may see), else -ENOENT
 * after saying so and which it serves. */
static int heap_named(heapd_client *c, const char *name)
{
    static heapd_stats_t st;
    if (heapd_stats(c, &st) < 0) {
        fprintf(stderr, "heapctl: stats: %s\n", heapd_last_error());
        return -EIO;
    }
    for (size_t i = 0; i < st.heap_count && i < HEAPD_STATS_MAX_HEAPS; i++)
        if (strcmp(st.heaps[i].name, name) == 0)
            return 0;
    /* Note [Heaps heapd cannot adopt] in daemon/adopt.c */
    long nu = get_unserved(c);
    for (long i = 0; i < nu; i++) {
        if (strcmp(unserved[i].name, name) == 0) {
            fprintf(stderr, "heapctl: heap '%s' is not served: %s\n", name,
                    unserved[i].why);
            return -ENOENT;
        }
    }
    fprintf(stderr, "heapctl: no heap named '%s'; heapd serves", name);
    for (size_t i = 0; i < st.heap_count && i < HEAPD_STATS_MAX_HEAPS; i++)
        fprintf(stderr, "%s '%s'", i ? "," : "", st.heaps[i].name);
    fprintf(stderr, "%s (heapctl stats lists them)\n",
            st.heap_count ? "" : " none you may see");
    return -ENOENT;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"prometheus", no_argument, NULL, 'p'},
        {"interval", required_argument, NULL, 'i'},
        {"heap", required_argument, NULL, 'H'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    heapd_connect_opts co = {.flags = HEAPD_CONNECT_CONTROL,
                             .client_name = "heapctl"};
    heapd_client *c = NULL;
    heapd_stats_t st;
    bool json = false, prometheus = false;
    unsigned interval_ms = 1000;
    char *end;
    int opt, rc;

    while ((opt = getopt_long(argc, argv, "s:jpi:H:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'i':
            interval_ms = (unsigned)strtoul(optarg, &end, 10);
            if (*end || end == optarg || interval_ms < 100 ||
                interval_ms > 60000) {
                fprintf(stderr, "heapctl: --interval %s: a number of ms, "
                                "100 to 60000\n", optarg);
                return 2;
            }
            break;
        case 's': co.socket_path = optarg; break;
        case 'H': co.heap = optarg; break;
        case 'j': json = true; break;
        case 'p': prometheus = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind++], *drop = NULL;
    if (strcmp(cmd, "stats") != 0 && strcmp(cmd, "gc") != 0 &&
        strcmp(cmd, "globals") != 0 && strcmp(cmd, "clients") != 0 &&
        strcmp(cmd, "segments") != 0 && strcmp(cmd, "top") != 0 &&
        strcmp(cmd, "drop") != 0 && strcmp(cmd, "save") != 0 &&
        strcmp(cmd, "load") != 0) {
        fprintf(stderr, "heapctl: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    if (strcmp(cmd, "drop") == 0) {
        if (optind >= argc) {
            fprintf(stderr, "heapctl: drop needs the heap's name: heapctl "
                            "drop HEAP (heapctl stats lists the heaps "
                            "heapd does not serve)\n");
            return 2;
        }
        drop = argv[optind++];
    }
    const char *save_heap = NULL, *save_file = NULL;
    char save_path[PATH_MAX];
    bool loading = strcmp(cmd, "load") == 0;
    if (strcmp(cmd, "save") == 0 || loading) {
        if (argc - optind != 2) {
            fprintf(stderr, "heapctl: %s needs the heap's name and a "
                            "file: heapctl %s HEAP FILE\n", cmd, cmd);
            return 2;
        }
        save_heap = argv[optind++];
        save_file = argv[optind++];
        if (save_file[0] != '/') { /* heapd writes it: make it absolute */
            char cwd[PATH_MAX];
            if (!getcwd(cwd, sizeof cwd) ||
                snprintf(save_path, sizeof save_path, "%s/%s", cwd,
                         save_file) >= (int)sizeof save_path) {
                fprintf(stderr, "heapctl: %s: the path of %s is too "
                                "long\n", cmd, save_file);
                return 2;
            }
            save_file = save_path;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "heapctl: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (prometheus && (json || strcmp(cmd, "stats") != 0)) {
        fprintf(stderr, "heapctl: --prometheus is for stats, without "
                        "--json\n");
        return 2;
    }
    if (json && strcmp(cmd, "top") == 0) {
        fprintf(stderr, "heapctl: top has no --json: heapctl stats --json "
                        "and heapctl clients --json print the same once\n");
        return 2;
    }
    if ((rc = heapd_connect(&c, &co)) < 0) {
        fprintf(stderr, "heapctl: %s\n", heapd_last_error());
        return 1;
    }
    if (drop) { /* Note [Heaps heapd cannot adopt] in daemon/adopt.c */
        rc = heapd_heap_drop(c, drop);
        if (rc < 0)
            fprintf(stderr, "heapctl: drop: %s\n", heapd_last_error());
        else
            printf("heap %s: given up; heapd serves it empty\n", drop);
        heapd_disconnect(c);
        return rc < 0 ? 1 : 0;
    }
    if (save_heap && loading) { /* Note [Loading a saved heap] in
                                   daemon/gc/load.c */
        heapd_load_info li;
        rc = heapd_heap_load(c, save_heap, save_file, &li);
        if (rc < 0)
            fprintf(stderr, "heapctl: load: %s\n", heapd_last_error());
        else
            printf("heap %s: loaded %s: %llu objects (%llu bytes, %llu "
                   "placed anew), %llu globals; %llu bytes read in %.3f s\n",
                   save_heap, save_file, (unsigned long long)li.objects,
                   (unsigned long long)li.object_bytes,
                   (unsigned long long)li.moved,
                   (unsigned long long)li.globals,
                   (unsigned long long)li.file_bytes, (double)li.ns / 1e9);
        heapd_disconnect(c);
        return rc < 0 ? 1 : 0;
    }
    if (save_heap) { /* Note [Saving a heap at a snapshot] in
                        daemon/gc/save.c */
        heapd_save_info si;
        rc = heapd_heap_save(c, save_heap, save_file, &si);
        if (rc < 0)
            fprintf(stderr, "heapctl: save: %s\n", heapd_last_error());
        else
            printf("heap %s: saved to %s: %llu objects (%llu bytes), %llu "
                   "globals; %llu bytes written in %.3f s; %llu objects "
                   "written meanwhile (%llu bytes held)%s\n",
                   save_heap, save_file, (unsigned long long)si.objects,
                   (unsigned long long)si.object_bytes,
                   (unsigned long long)si.globals,
                   (unsigned long long)si.file_bytes, (double)si.ns / 1e9,
                   (unsigned long long)si.records,
                   (unsigned long long)si.record_bytes,
                   si.inexact ? "; SOME OBJECTS COPIED AS READ, see "
                                "heapd's log" : "");
        heapd_disconnect(c);
        return rc < 0 ? 1 : 0;
    }
    if (strcmp(cmd, "top") == 0) { /* Note [heapctl top] */
        rc = heapctl_top(c, interval_ms);
        heapd_disconnect(c);
        return rc;
    }
    if (strcmp(cmd, "clients") == 0) {
        heapd_client_info *cl = NULL;
        size_t n = 0;
        rc = heapd_clients(c, &cl, &n);
        if (rc < 0) {
            fprintf(stderr, "heapctl: clients: %s\n", heapd_last_error());
        } else {
            sort_clients(cl, n);
            if (json)
                print_clients_json(cl, n);
            else
                print_clients_text(cl, n);
        }
        heapd_clients_free(cl);
        heapd_disconnect(c);
        return rc < 0 ? 1 : 0;
    }
    if (strcmp(cmd, "segments") == 0) {
        static heapd_heap_segments hs[HEAPD_STATS_MAX_HEAPS];
        size_t n = 0;
        rc = heapd_segments(c, co.heap, hs, HEAPD_STATS_MAX_HEAPS, &n);
        if (n > HEAPD_STATS_MAX_HEAPS)
            n = HEAPD_STATS_MAX_HEAPS;
        if (rc < 0)
            fprintf(stderr, "heapctl: segments: %s\n", heapd_last_error());
        else if (json)
            print_segments_json(hs, n);
        else
            print_segments_text(hs, n);
        heapd_disconnect(c);
        return rc < 0 ? 1 : 0;
    }
    /* heapd gives a control connection whose heap it does not know its
     * first heap (heapctl without --heap asks for "default"): a heap
     * named on purpose must be one heapd serves */
    if (co.heap && (rc = heap_named(c, co.heap)) < 0) {
        heapd_disconnect(c);
        return 1;
    }
    if (strcmp(cmd, "globals") == 0) {
        static heapd_global_info g[256];
        size_t n = 0;
        static const char *const states[] = {"empty", "set", "initialising",
                                             "released"};
        rc = heapd_globals(c, g, 256, &n);
        if (rc < 0) {
            fprintf(stderr, "heapctl: globals: %s\n", heapd_last_error());
        } else {
            static const char *const kinds[] = {"other", "map", "queue",
                                                "string"};
            static const char *const sizes[] = {"", "keys", "queued",
                                                "bytes"};
            printf("%-40s %-13s %-16s %12s %-7s %-18s %-14s %s\n", "NAME",
                   "STATE", "TARGET", "BYTES", "KIND", "SIZE", "OWNER",
                   "MORE");
            for (size_t i = 0; i < n && i < 256; i++) {
                char owner[32] = "-", size[32] = "-", more[160] = "";
                if (g[i].owner)
                    snprintf(owner, sizeof owner, "client %" PRIu64,
                             g[i].owner);
                unsigned k = g[i].kind <= HEAPD_GLOBAL_STRING ? g[i].kind : 0;
                if (k && g[i].target)
                    snprintf(size, sizeof size, "%" PRIu64 " %s", g[i].size,
                             sizes[k]);
                if (k == HEAPD_GLOBAL_QUEUE && g[i].target)
                    snprintf(more, sizeof more, "%" PRIu64 " leased",
                             g[i].leases);
                if (k == HEAPD_GLOBAL_MAP && g[i].target &&
                    (g[i].budget || g[i].evictions || g[i].expirations))
                    snprintf(more, sizeof more,
                             "budget %.1f MiB, used %.1f MiB, %" PRIu64
                             " evicted, %" PRIu64 " expired",
                             (double)g[i].budget / 1048576.0,
                             (double)g[i].used / 1048576.0, g[i].evictions,
                             g[i].expirations);
                printf("%-40s %-13s 0x%-14" PRIx64 " %12" PRIu64
                       " %-7s %-18s %-14s %s\n",
                       g[i].name,
                       g[i].state >= 0 && g[i].state < 4 ? states[g[i].state]
                                                         : "?",
                       g[i].target, g[i].target_bytes,
                       g[i].target ? kinds[k] : "-", size, owner, more);
            }
        }
        heapd_disconnect(c);
        return rc < 0 ? 1 : 0;
    }
    if (strcmp(cmd, "gc") == 0) {
        rc = heapd_request_collect(c, HEAPD_COLLECT_WAIT);
        if (rc == 0)
            rc = heapd_stats(c, &st);
        if (rc < 0)
            fprintf(stderr, "heapctl: gc: %s\n", heapd_last_error());
        else
            printf("heap %s: cycle %" PRIu64 " completed, %" PRIu64
                   " live bytes, pause %" PRIu64 " us (max)\n",
                   st.heaps[0].name, st.cycles_completed, st.live_bytes,
                   st.pause_max_ns / 1000);
        heapd_disconnect(c);
        return rc < 0 ? 1 : 0;
    }
    long n_unserved = 0;
    rc = heapd_stats(c, &st);
    if (rc < 0)
        fprintf(stderr, "heapctl: stats: %s\n", heapd_last_error());
    else if ((n_unserved = get_unserved(c)) < 0)
        rc = -1;
    else if (prometheus)
        rc = print_stats_prometheus(&st, (size_t)n_unserved);
    else if (json)
        print_stats_json(&st, (size_t)n_unserved);
    else
        print_stats_text(&st, (size_t)n_unserved);
    heapd_disconnect(c);
    return rc < 0 ? 1 : 0;
}
