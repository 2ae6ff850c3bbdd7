/* heapctl top: a live view of a running heapd, for a terminal (ncurses).
 *
 * Note [heapctl top]
 * ~~~~~~~~~~~~~~~~~~
 * Every INTERVAL (1 s; --interval) it asks heapd for its statistics and
 * its connections, two round trips on heapctl's control connection, and
 * redraws:
 *   - a line per heap: its phase, cycles per second and allocation rate
 *     (the differences from the last look, "-" on the first), live and
 *     committed bytes, and the pauses' p99 and maximum.  The p99 is read
 *     off the pause histogram (the pauses_le_* counters): the upper bound
 *     of the bucket the 99th percentile falls in, of the pauses since the
 *     last look if there were any, else of all of them; "<=" says it is a
 *     bound;
 *   - a line per mutator client, sorted by allocation rate, except that a
 *     client with a stalled mutator (one that holds a collection up: Note
 *     [Stalls] in daemon/stall.c) comes first, in bold, with what it has
 *     not answered and for how long: that is the line an operator looks
 *     for.
 * Keys: q quits, space redraws now.  It never writes to heapd; a heapd
 * that goes away ends it with heapctl's usual message.
 */
#include <curses.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "heapctl_top.h"

#define TOP_MAX_CLIENTS 256

struct heap_prev {
    char name[64];
    uint64_t cycles, alloc, pauses[HEAPD_HEAP_COUNTERS_N];
};

struct client_row {
    const heapd_client_info *c;
    uint64_t alloc;     /* its mutators' bytes allocated */
    double rate;        /* bytes per second since the last look, -1: new */
    const heapd_mutator_info *stalled; /* the longest stalled, or NULL */
};

struct prev_alloc {
    uint64_t id, alloc;
};

/* BYTES as "12.3 MiB". */
static const char *bytes_str(double bytes, char *buf, size_t n)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

/* NS as "250 us", "1.2 ms". */
static const char *ns_str(uint64_t ns, char *buf, size_t n)
{
    if (ns < 1000000)
        snprintf(buf, n, "%" PRIu64 " us", ns / 1000);
    else if (ns < 1000000000)
        snprintf(buf, n, "%.1f ms", (double)ns / 1e6);
    else
        snprintf(buf, n, "%.2f s", (double)ns / 1e9);
    return buf;
}

static const struct {
    size_t line;
    uint64_t ns;
} buckets[] = {
#define TOP_BUCKET_(line, ns) {HEAPD_HEAP_COUNTER_##line, ns},
    HEAPD_PAUSE_BUCKETS(TOP_BUCKET_)
#undef TOP_BUCKET_
};

/* The p99 of the pauses counted in V (minus PREV, if it has any): the
 * upper bound of its bucket, or 0 when there were none; *OVER: beyond
 * the last bucket. */
static uint64_t pause_p99(const uint64_t *v, const uint64_t *prev,
                          bool *over)
{
    uint64_t total = v[HEAPD_HEAP_COUNTER_pause_count] -
                     (prev ? prev[HEAPD_HEAP_COUNTER_pause_count] : 0);
    *over = false;
    if (total == 0) {
        if (!prev)
            return 0;
        return pause_p99(v, NULL, over);
    }
    uint64_t want = total - total / 100; /* at least 99 % of them */
    for (size_t b = 0; b < sizeof buckets / sizeof buckets[0]; b++) {
        uint64_t c = v[buckets[b].line] - (prev ? prev[buckets[b].line] : 0);
        if (c >= want)
            return buckets[b].ns;
    }
    *over = true;
    return buckets[sizeof buckets / sizeof buckets[0] - 1].ns;
}

static const char *phase_str(uint32_t p)
{
    return p == 1 ? "mark" : p == 2 ? "sweep" : "idle";
}

static const char *stall_str(heapd_stall_on on)
{
    static const char *const s[] = {"-", "snapshot", "final sync",
                                    "handshake", "remark"};
    return (unsigned)on < 5 ? s[on] : "?";
}

static int row_cmp(const void *a, const void *b)
{
    const struct client_row *x = a, *y = b;
    if (!!x->stalled != !!y->stalled)
        return x->stalled ? -1 : 1;
    if (x->rate != y->rate)
        return x->rate > y->rate ? -1 : 1;
    return x->alloc > y->alloc ? -1 : x->alloc < y->alloc;
}

static void draw(const heapd_stats_t *st, struct heap_prev *prev,
                 size_t *nprev, double dt, const heapd_client_info *cl,
                 size_t ncl, struct prev_alloc *pa, size_t *npa,
                 unsigned interval_ms)
{
    char a[32], b[32], c[32], d[32];
    int row = 0;
    erase();
    uint64_t up = st->uptime_ns / 1000000000u;
    mvprintw(row++, 0, "heapd %s  up %" PRIu64 "d %02" PRIu64 ":%02" PRIu64
             ":%02" PRIu64 "  connections %" PRIu32 "  every %.1f s  "
             "q: quit", st->version, up / 86400, up / 3600 % 24,
             up / 60 % 60, up % 60, st->clients_connected,
             interval_ms / 1000.0);
    row++;
    attron(A_BOLD);
    mvprintw(row++, 0, "%-16s %-6s %9s %12s %11s %11s %12s %10s", "HEAP",
             "PHASE", "CYCLES/S", "ALLOC/S", "LIVE", "COMMITTED",
             "PAUSE P99", "PAUSE MAX");
    attroff(A_BOLD);
    struct heap_prev next[HEAPD_STATS_MAX_HEAPS];
    for (size_t i = 0; i < st->heap_count && i < HEAPD_STATS_MAX_HEAPS; i++) {
        const heapd_heap_stats *h = &st->heaps[i];
        uint64_t v[HEAPD_HEAP_COUNTERS_N];
        heapctl_counter_values(h, v);
        const struct heap_prev *p = NULL;
        for (size_t k = 0; k < *nprev; k++)
            if (strcmp(prev[k].name, h->name) == 0)
                p = &prev[k];
        char cyc[16] = "-", rate[48] = "-", p99[48];
        if (p && dt > 0) {
            snprintf(cyc, sizeof cyc, "%.1f",
                     (double)(h->cycles_completed - p->cycles) / dt);
            snprintf(rate, sizeof rate, "%s/s",
                     bytes_str((double)(h->bytes_allocated - p->alloc) / dt,
                               a, sizeof a));
        }
        bool over;
        uint64_t q = pause_p99(v, p ? p->pauses : NULL, &over);
        if (q == 0)
            snprintf(p99, sizeof p99, "-");
        else
            snprintf(p99, sizeof p99, "%s%s", over ? ">" : "<=",
                     ns_str(q, b, sizeof b));
        mvprintw(row++, 0, "%-16.16s %-6s %9s %12s %11s %11s %12s %10s",
                 h->name, phase_str(h->phase), cyc, rate,
                 bytes_str((double)h->live_bytes, c, sizeof c),
                 bytes_str((double)h->committed_bytes, d, sizeof d), p99,
                 ns_str(h->pause_max_ns, a, sizeof a));
        snprintf(next[i].name, sizeof next[i].name, "%s", h->name);
        next[i].cycles = h->cycles_completed;
        next[i].alloc = h->bytes_allocated;
        memcpy(next[i].pauses, v, sizeof v);
    }
    *nprev = st->heap_count < HEAPD_STATS_MAX_HEAPS ? st->heap_count
                                                     : HEAPD_STATS_MAX_HEAPS;
    memcpy(prev, next, *nprev * sizeof *prev);

    /* the mutator clients: stalled first, then by allocation rate */
    static struct client_row rows[TOP_MAX_CLIENTS];
    size_t n = 0;
    for (size_t i = 0; i < ncl && n < TOP_MAX_CLIENTS; i++) {
        if (cl[i].control)
            continue;
        struct client_row *r = &rows[n++];
        *r = (struct client_row){.c = &cl[i], .rate = -1};
        for (size_t k = 0; k < cl[i].mutator_count; k++) {
            const heapd_mutator_info *m = &cl[i].mutators[k];
            r->alloc += m->alloc_bytes;
            if (m->state == HEAPD_MUTATOR_STALLED &&
                (!r->stalled || m->stalled_ms > r->stalled->stalled_ms))
                r->stalled = m;
        }
        for (size_t k = 0; k < *npa; k++)
            if (pa[k].id == cl[i].id && dt > 0)
                r->rate = (double)(r->alloc - pa[k].alloc) / dt;
    }
    qsort(rows, n, sizeof rows[0], row_cmp);
    row++;
    attron(A_BOLD);
    mvprintw(row++, 0, "%-8s %-20s %-12s %4s %12s %11s %8s  %s", "PID",
             "CLIENT", "HEAP", "MUT", "ALLOC/S", "ALLOCATED", "SEGMENTS",
             "STATE");
    attroff(A_BOLD);
    int maxrow = getmaxy(stdscr);
    for (size_t i = 0; i < n; i++) {
        const struct client_row *r = &rows[i];
        char rate[48] = "-", state[96] = "running";
        if (r->rate >= 0)
            snprintf(rate, sizeof rate, "%s/s",
                     bytes_str(r->rate, a, sizeof a));
        if (r->stalled)
            snprintf(state, sizeof state, "STALLED: no answer to the %s "
                     "for %" PRIu64 " ms", stall_str(r->stalled->stalled_on),
                     r->stalled->stalled_ms);
        else if (r->c->mutator_count == 0)
            snprintf(state, sizeof state, "no mutator attached");
        else if (r->c->remark_outstanding)
            snprintf(state, sizeof state, "%" PRIu32 " remark request(s) "
                     "unanswered", r->c->remark_outstanding);
        if (row >= maxrow - 1) {
            mvprintw(row, 0, "... %zu more", n - i);
            break;
        }
        if (r->stalled)
            attron(A_BOLD);
        mvprintw(row++, 0, "%-8" PRId32 " %-20.20s %-12.12s %4zu %12s %11s "
                 "%8" PRIu32 "  %s", r->c->pid, r->c->name, r->c->heap,
                 r->c->mutator_count, rate,
                 bytes_str((double)r->alloc, b, sizeof b),
                 r->c->segments_held, state);
        if (r->stalled)
            attroff(A_BOLD);
    }
    if (n == 0)
        mvprintw(row++, 0, "(no mutator clients)");
    *npa = 0;
    for (size_t i = 0; i < n && *npa < TOP_MAX_CLIENTS; i++)
        pa[(*npa)++] = (struct prev_alloc){rows[i].c->id, rows[i].alloc};
    refresh();
}

int heapctl_top(heapd_client *c, unsigned interval_ms)
{
    static struct heap_prev prev[HEAPD_STATS_MAX_HEAPS];
    static struct prev_alloc pa[TOP_MAX_CLIENTS];
    size_t nprev = 0, npa = 0;
    heapd_stats_t st;
    int rc = 0;

    if (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO)) {
        fprintf(stderr, "heapctl: top needs a terminal; heapctl stats and "
                        "heapctl clients print the same once\n");
        return 2;
    }
    if (!initscr()) {
        fprintf(stderr, "heapctl: top: cannot set up the terminal (TERM=%s)\n",
                getenv("TERM") ? getenv("TERM") : "");
        return 1;
    }
    cbreak();
    noecho();
    curs_set(0);
    keypad(stdscr, TRUE);
    timeout((int)interval_ms);
    uint64_t last = 0;
    for (;;) {
        heapd_client_info *cl = NULL;
        size_t ncl = 0;
        if ((rc = heapd_stats(c, &st)) < 0 ||
            (rc = heapd_clients(c, &cl, &ncl)) < 0)
            break;
        uint64_t t = monotonic_ns();
        double dt = last ? (double)(t - last) / 1e9 : 0;
        last = t;
        draw(&st, prev, &nprev, dt, cl, ncl, pa, &npa, interval_ms);
        heapd_clients_free(cl);
        int ch = getch();
        if (ch == 'q' || ch == 'Q')
            break;
    }
    endwin();
    if (rc < 0) {
        fprintf(stderr, "heapctl: top: %s\n", heapd_last_error());
        return 1;
    }
    return 0;
}
