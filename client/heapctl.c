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
    fprintf(f, "usage: heapctl [--socket PATH] stats [--json]\n"
               "  stats     daemon version, uptime, clients, and per heap the\n"
               "            reserved and committed bytes\n"
               "  --json    print one JSON object instead of text\n"
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
           ",\"heaps\":[",
           s->uptime_ns, s->clients_connected, s->connections_total,
           s->frames_rejected);
    for (size_t i = 0; i < s->heap_count; i++) {
        const heapd_heap_stats *h = &s->heaps[i];
        printf("%s{\"name\":", i ? "," : "");
        print_json_string(h->name);
        printf(",\"base\":\"0x%" PRIx64 "\",\"reserved_bytes\":%" PRIu64
               ",\"committed_bytes\":%" PRIu64 ",\"segment_size\":%" PRIu64
               ",\"clients\":%" PRIu32 "}",
               h->base, h->reserved_bytes, h->committed_bytes,
               h->segment_size, h->clients);
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
    printf("%-16s %-16s %14s %14s %10s %8s\n", "HEAP", "BASE", "RESERVED",
           "COMMITTED", "SEGMENT", "CLIENTS");
    for (size_t i = 0; i < s->heap_count; i++) {
        const heapd_heap_stats *h = &s->heaps[i];
        printf("%-16s 0x%-14" PRIx64 " %14" PRIu64 " %14" PRIu64
               " %10" PRIu64 " %8" PRIu32 "\n",
               h->name, h->base, h->reserved_bytes, h->committed_bytes,
               h->segment_size, h->clients);
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    heapd_connect_opts co = {.flags = HEAPD_CONNECT_CONTROL,
                             .client_name = "heapctl"};
    heapd_client *c = NULL;
    heapd_stats_t st;
    bool json = false;
    int opt, rc;

    while ((opt = getopt_long(argc, argv, "s:jh", opts, NULL)) != -1) {
        switch (opt) {
        case 's': co.socket_path = optarg; break;
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
    if (strcmp(cmd, "stats") != 0) {
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
