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

static void print_stats_json(const heapd_stats_t *s)
{
    printf("{\"version\":");
    print_json_string(s->version);
    printf(",\"uptime_ns\":%" PRIu64 ",\"clients_connected\":%" PRIu32
           ",\"connections_total\":%" PRIu64 ",\"frames_rejected\":%" PRIu64
           ",\"connections_refused\":%" PRIu64
           ",\"connections_throttled\":%" PRIu64 ",\"heaps\":[",
           s->uptime_ns, s->clients_connected, s->connections_total,
           s->frames_rejected, s->connections_refused,
           s->connections_throttled);
    for (size_t i = 0; i < s->heap_count; i++) {
        const heapd_heap_stats *h = &s->heaps[i];
        printf("%s{\"name\":", i ? "," : "");
        print_json_string(h->name);
        printf(",\"base\":\"0x%" PRIx64 "\",\"reserved_bytes\":%" PRIu64
               ",\"committed_bytes\":%" PRIu64 ",\"segment_size\":%" PRIu64
               ",\"clients\":%" PRIu32 ",\"mutators\":%" PRIu32
               ",\"cycles_completed\":%" PRIu64
               ",\"bytes_allocated\":%" PRIu64 ",\"live_bytes\":%" PRIu64
               ",\"segments_free\":%" PRIu64 ",\"segments_owned\":%" PRIu64
               ",\"segments_filled\":%" PRIu64
               ",\"segments_large\":%" PRIu64 ",\"pause_max_ns\":%" PRIu64
               ",\"pause_total_ns\":%" PRIu64 ",\"ttsp_max_ns\":%" PRIu64
               ",\"verify_failures\":%" PRIu64 ",\"bad_refs\":%" PRIu64
               ",\"phase\":%" PRIu32 ",\"mark_ns_last\":%" PRIu64
               ",\"sweep_ns_last\":%" PRIu64 ",\"urs_entries\":%" PRIu64
               ",\"snapshot_pause_max_ns\":%" PRIu64
               ",\"final_sync_pause_max_ns\":%" PRIu64
               ",\"final_sync_retries\":%" PRIu64
               ",\"grants_paced\":%" PRIu64 ",\"remark_requests\":%" PRIu64
               ",\"remark_global\":%" PRIu64 ",\"mark_overflows\":%" PRIu64
               ",\"clients_crashed\":%" PRIu64
               ",\"segments_orphaned\":%" PRIu64
               ",\"segments_adopted\":%" PRIu64 "}",
               h->base, h->reserved_bytes, h->committed_bytes,
               h->segment_size, h->clients, h->mutators, h->cycles_completed,
               h->bytes_allocated, h->live_bytes, h->segments_free,
               h->segments_owned, h->segments_filled, h->segments_large,
               h->pause_max_ns, h->pause_total_ns, h->ttsp_max_ns,
               h->verify_failures, h->bad_refs, h->phase, h->mark_ns_last,
               h->sweep_ns_last, h->urs_entries, h->snapshot_pause_max_ns,
               h->final_sync_pause_max_ns, h->final_sync_retries,
               h->grants_paced, h->remark_requests, h->remark_global,
               h->mark_overflows, h->clients_crashed, h->segments_orphaned,
               h->segments_adopted);
    }
    printf("]}\n");
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
    printf("connections refused: %" PRIu64 ", throttled: %" PRIu64 "\n",
           s->connections_refused, s->connections_throttled);
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
        printf("\nheap %s:\n", h->name);
        printf("  mutators          %" PRIu32 "\n", h->mutators);
        printf("  cycles_completed  %" PRIu64 "\n", h->cycles_completed);
        printf("  bytes_allocated   %" PRIu64 "\n", h->bytes_allocated);
        printf("  live_bytes        %" PRIu64 "\n", h->live_bytes);
        printf("  segments          %" PRIu64 " free, %" PRIu64 " owned, %"
               PRIu64 " filled, %" PRIu64 " large\n", h->segments_free,
               h->segments_owned, h->segments_filled, h->segments_large);
        printf("  pause_max_ns      %" PRIu64 "\n", h->pause_max_ns);
        printf("  pause_total_ns    %" PRIu64 "\n", h->pause_total_ns);
        printf("  ttsp_max_ns       %" PRIu64 "\n", h->ttsp_max_ns);
        printf("  verify_failures   %" PRIu64 "\n", h->verify_failures);
        printf("  bad_refs          %" PRIu64 "\n", h->bad_refs);
        printf("  phase             %s\n", h->phase == 1   ? "mark"
                                           : h->phase == 2 ? "sweep"
                                                           : "idle");
        printf("  mark_ns_last      %" PRIu64 "\n", h->mark_ns_last);
        printf("  sweep_ns_last     %" PRIu64 "\n", h->sweep_ns_last);
        printf("  urs_entries       %" PRIu64 "\n", h->urs_entries);
        printf("  snapshot_pause_max_ns   %" PRIu64 "\n",
               h->snapshot_pause_max_ns);
        printf("  final_sync_pause_max_ns %" PRIu64 "\n",
               h->final_sync_pause_max_ns);
        printf("  final_sync_retries      %" PRIu64 "\n",
               h->final_sync_retries);
        printf("  grants_paced            %" PRIu64 "\n", h->grants_paced);
        printf("  remark_requests         %" PRIu64 "\n", h->remark_requests);
        printf("  remark_global           %" PRIu64 "\n", h->remark_global);
        printf("  mark_overflows          %" PRIu64 "\n", h->mark_overflows);
        printf("  clients_crashed         %" PRIu64 "\n", h->clients_crashed);
        printf("  segments_orphaned       %" PRIu64 "\n",
               h->segments_orphaned);
        printf("  segments_adopted        %" PRIu64 "\n", h->segments_adopted);
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
