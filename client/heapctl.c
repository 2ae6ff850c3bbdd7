/* heapctl: look at a running heapd.
 *
 *   heapctl [--socket PATH] stats [--json]
 *
 * It connects as a control client (HEAPD_CONNECT_CONTROL): it never maps a
 * heap, so it works whatever the heaps' addresses are. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heapd.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: heapctl [--socket PATH] [--heap NAME] stats [--json]\n"
               "       heapctl [--socket PATH] [--heap NAME] gc\n"
               "       heapctl [--socket PATH] [--heap NAME] globals\n"
               "  stats     daemon version, uptime, clients, and per heap its\n"
               "            memory, segments, cycles and pauses\n"
               "  gc        run a collection of the heap and wait for it\n"
               "  globals   the heap's named global roots: name, state, size\n"
               "            of the object they reference, initialising client\n"
               "  --json    print one JSON object instead of text\n"
               "  --heap    the heap for gc (default: \"default\")\n"
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

/* V[i] = the value of line i in H. */
static void counter_values(const heapd_heap_stats *h,
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

static void print_stats_json(const heapd_stats_t *s)
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
        counter_values(h, v);
        for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N; k++)
            printf(",\"%s\":%" PRIu64, counter_lines[k].name, v[k]);
        printf("}");
    }
    printf("]}\n");
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

static void print_stats_text(const heapd_stats_t *s)
{
    uint64_t secs = s->uptime_ns / 1000000000u;
    printf("heapd %s, up %" PRIu64 "d %02" PRIu64 ":%02" PRIu64 ":%02" PRIu64
           "\n", s->version, secs / 86400, secs / 3600 % 24, secs / 60 % 60,
           secs % 60);
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
    for (size_t i = 0; i < s->heap_count; i++) {
        const heapd_heap_stats *h = &s->heaps[i];
        uint64_t v[HEAPD_HEAP_COUNTERS_N];
        printf("\nheap %s:\n", h->name);
        printf("  %-17s %s\n", "phase", phase_name(h->phase));
        counter_values(h, v);
        for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N; k++) {
            const struct counter_line *l = &counter_lines[k];
            char r[32];
            int n = printf("  %-17s %" PRIu64 "%s", l->name, v[k],
                           readable(v[k], l->unit, r, sizeof r));
            /* the help in one column after the longest values */
            printf("%*s  %s\n", n < 48 ? 48 - n : 0, "", l->help);
        }
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"heap", required_argument, NULL, 'H'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    heapd_connect_opts co = {.flags = HEAPD_CONNECT_CONTROL,
                             .client_name = "heapctl"};
    heapd_client *c = NULL;
    heapd_stats_t st;
    bool json = false;
    int opt, rc;

    while ((opt = getopt_long(argc, argv, "s:jH:h", opts, NULL)) != -1) {
        switch (opt) {
        case 's': co.socket_path = optarg; break;
        case 'H': co.heap = optarg; break;
        case 'j': json = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind++];
    if (strcmp(cmd, "stats") != 0 && strcmp(cmd, "gc") != 0 &&
        strcmp(cmd, "globals") != 0) {
        fprintf(stderr, "heapctl: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    if (optind != argc) {
        fprintf(stderr, "heapctl: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if ((rc = heapd_connect(&c, &co)) < 0) {
        fprintf(stderr, "heapctl: %s\n", heapd_last_error());
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
            printf("%-40s %-13s %-16s %12s %s\n", "NAME", "STATE", "TARGET",
                   "BYTES", "OWNER");
            for (size_t i = 0; i < n && i < 256; i++) {
                char owner[32] = "-";
                if (g[i].owner)
                    snprintf(owner, sizeof owner, "client %" PRIu64,
                             g[i].owner);
                printf("%-40s %-13s 0x%-14" PRIx64 " %12" PRIu64 " %s\n",
                       g[i].name,
                       g[i].state >= 0 && g[i].state < 4 ? states[g[i].state]
                                                         : "?",
                       g[i].target, g[i].target_bytes, owner);
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
    rc = heapd_stats(c, &st);
    if (rc < 0)
        fprintf(stderr, "heapctl: stats: %s\n", heapd_last_error());
    else if (json)
        print_stats_json(&st);
    else
        print_stats_text(&st);
    heapd_disconnect(c);
    return rc < 0 ? 1 : 0;
}
