/* heapd: the shared-heap daemon.  Command line, start-up, systemd
 * integration and shutdown.
 *
 * Note [Start-up and readiness]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * heapd is "ready" once every configured heap is mapped and laid out and the
 * socket is listening: a client that connects after readiness is served.
 * Readiness is announced exactly then, in the way the caller asked for:
 *   - under systemd (Type=notify) with sd_notify("READY=1");
 *   - without --foreground, by the parent of the daemonised child exiting 0
 *     (it waits on a pipe for the child's word; any start-up error makes it
 *     exit 1 after the child has printed why);
 *   - with --foreground outside systemd, by the log line "ready".
 * On SIGTERM or SIGINT heapd announces STOPPING=1, stops accepting, tells
 * every client with an Error(SHUTTING_DOWN) -- but for mutator clients
 * when a service manager keeps the heaps: those are suspended once every
 * collector is idle (Note [Resuming clients] in resume.c) --, lets queued
 * bytes flush for at most SHUTDOWN_GRACE_MS, seals its heaps' live tables
 * (Note [The live table] in daemon/gc/table.c), unmaps its heaps and
 * exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "clock.h"
#include "collector.h"
#include "daemon.h"
#include "heapd_build.h"
#include "fdstore.h"
#include "log.h"
#include "resume.h"
#include "stall.h"
#include "table.h"

#define SHUTDOWN_GRACE_MS 2000
#define QUIESCE_POLL_MS 5 /* how often a clean exit looks at the collectors */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: heapd [-c FILE] [--socket PATH] [--foreground] "
            "[--check-config]\n"
            "  -c, --config FILE   configuration (default %s)\n"
            "  -s, --socket PATH   listen on PATH instead of [daemon] socket\n"
            "  -f, --foreground    do not daemonise (systemd runs it so)\n"
            "  -t, --check-config  validate the configuration and exit\n"
            "  -V, --version       print the version and exit\n",
            HEAPD_DEFAULT_CONFIG);
}

/* ---- daemonising (Note [Start-up and readiness]) ---- */

static int ready_fd = -1;

static int daemonize_begin(void)
{
    int p[2];
    pid_t pid;
    char ok;

    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    pid = fork();
    if (pid < 0)
        return -errno;
    if (pid > 0) {
        close(p[1]);
        ssize_t n;
        do
            n = read(p[0], &ok, 1);
        while (n < 0 && errno == EINTR);
        _exit(n == 1 && ok == 'R' ? 0 : 1);
    }
    close(p[0]);
    ready_fd = p[1];
    if (setsid() < 0)
        return -errno;
    if (chdir("/") < 0)
        return -errno;
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, STDIN_FILENO);
        close(null);
    }
    return 0;
}

static void announce_ready(struct daemon *d)
{
    log_info("ready: %zu heap%s, listening on %s", d->n_heaps,
             d->n_heaps == 1 ? "" : "s",
             d->socket_activated ? "the systemd socket" : d->socket_path);
    sd_notifyf(0, "READY=1\nSTATUS=serving %zu heap(s)\nMAINPID=%d",
               d->n_heaps, (int)getpid());
    if (ready_fd >= 0) {
        ssize_t n = write(ready_fd, "R", 1);
        (void)n;
        close(ready_fd);
        ready_fd = -1;
    }
}

/* Note [Connection limits] (daemon/server.c): one descriptor per
 * connection, plus the heaps' memfds, the listener and libuv's own. */
static void raise_nofile(struct daemon *d)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)d->cfg.max_connections + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want
                      ? want
                      : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < want)
        log_warn("open files are limited to %llu, fewer than max_connections "
                 "(%u) needs; raise LimitNOFILE (ulimit -n) or lower "
                 "max_connections", (unsigned long long)rl.rlim_cur,
                 d->cfg.max_connections);
}

/* ---- shutdown ---- */

static void stop_quiesce(struct daemon *d)
{
    if (!d->quiesce_on)
        return;
    uv_close((uv_handle_t *)&d->quiesce, NULL);
    d->quiesce_on = false;
}

static void on_grace_expired(uv_timer_t *t)
{
    struct daemon *d = t->data;
    log_warn("shutdown: %u connection(s) did not drain in %d ms; closing",
             d->n_conns, SHUTDOWN_GRACE_MS);
    stop_quiesce(d);
    server_abort_all(d);
}

/* Note [Resuming clients] in resume.c: once every collector is idle (and
 * held), the mutator clients leave their connections, not their heaps. */
static void on_quiesce(uv_timer_t *t)
{
    struct daemon *d = t->data;
    for (size_t i = 0; i < d->n_heaps; i++)
        if (!collector_idle(&d->heaps[i]))
            return;
    stop_quiesce(d);
    unsigned n = resume_suspend_all(d);
    if (n)
        log_info("shutdown: %u client(s) kept for the next heapd", n);
}

static void begin_shutdown(struct daemon *d, const char *why)
{
    if (d->stopping)
        return;
    d->stopping = true;
    log_info("%s: shutting down", why);
    sd_notify(0, "STOPPING=1");
    uv_close((uv_handle_t *)&d->sig_term, NULL);
    uv_close((uv_handle_t *)&d->sig_int, NULL);
    uv_close((uv_handle_t *)&d->sig_hup, NULL);
    if (d->watchdog_on)
        uv_close((uv_handle_t *)&d->watchdog, NULL);
    uv_close((uv_handle_t *)&d->strays, NULL);
    /* with a service manager to keep the heaps, the clients stay theirs */
    bool keep = d->fd_store;
    server_stop(d, keep);
    if (keep) {
        for (size_t i = 0; i < d->n_heaps; i++)
            collector_hold(&d->heaps[i], true);
        uv_timer_init(&d->loop, &d->quiesce);
        d->quiesce.data = d;
        uv_timer_start(&d->quiesce, on_quiesce, 0, QUIESCE_POLL_MS);
        d->quiesce_on = true;
    }
    if (d->n_conns > 0) {
        uv_timer_init(&d->loop, &d->grace);
        d->grace.data = d;
        uv_timer_start(&d->grace, on_grace_expired, SHUTDOWN_GRACE_MS, 0);
        uv_unref((uv_handle_t *)&d->grace); /* connections keep the loop */
    }
}

static void on_signal(uv_signal_t *s, int signum)
{
    begin_shutdown(s->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* SIGHUP's default action ended heapd at once, with no clean stop, and
 * Restart=on-failure does not restart a service SIGHUP ended: the heaps
 * were lost to a signal many operators send to ask for a reload.  heapd
 * reads its configuration only at start, so it says that and goes on. */
static void on_hup(uv_signal_t *s, int signum)
{
    (void)s;
    (void)signum;
    log_info("SIGHUP: heapd does not reload its configuration; restart it "
             "(systemctl restart heapd) to apply a change, which keeps the "
             "heaps under systemd");
}

static void on_watchdog(uv_timer_t *t)
{
    (void)t;
    sd_notify(0, "WATCHDOG=1");
}

static void start_watchdog(struct daemon *d)
{
    uint64_t usec;
    if (sd_watchdog_enabled(0, &usec) <= 0)
        return;
    uv_timer_init(&d->loop, &d->watchdog);
    uv_timer_start(&d->watchdog, on_watchdog, usec / 2000, usec / 2000);
    d->watchdog_on = true;
}

/* Note [Free memory stays free]: what a client wrote into free segments
 * is given back within a tick, cycles or not. */
static void on_strays(uv_timer_t *t)
{
    struct daemon *d = t->data;
    for (size_t i = 0; i < d->n_heaps; i++)
        seg_punch_strays(&d->heaps[i]);
}

static void start_strays(struct daemon *d)
{
    uv_timer_init(&d->loop, &d->strays);
    d->strays.data = d;
    uv_timer_start(&d->strays, on_strays, SEG_STRAYS_EVERY_MS,
                   SEG_STRAYS_EVERY_MS);
    uv_unref((uv_handle_t *)&d->strays); /* connections keep the loop up */
}

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Take back heap H, kept as KH, KP and KT, from its live table, sealed
 * at a clean stop or left by a kill (Note [Heaps across restarts] in
 * fdstore.c).  The descriptors stay the caller's.  Returns true with
 * *CLEAN saying which, or false with WHY saying why not (H closed). */
static bool take_back(struct daemon *d, struct heap *h,
                      const struct config_heap *cfg, int kh, int kp, int kt,
                      bool *clean, char *why, size_t n, struct fdstore *fds)
{
    struct resume_client *kept = NULL;

    if (kh < 0 || kp < 0) {
        snprintf(why, n, "the service manager kept only part of it");
        return false;
    }
    if (kt < 0) {
        snprintf(why, n, "the service manager kept no table of it (a heapd "
                 "of a release before the live table left it)");
        return false;
    }
    if (heap_open(h, cfg, dup(kh), dup(kp), dup(kt)) < 0) {
        snprintf(why, n, "its memfds do not fit [heap %s] (the log says "
                 "how)", cfg->name);
        return false;
    }
    /* Note [The live table], Note [Resuming clients] */
    if (table_take_back(h, why, n, &kept, clean) < 0)
        goto refused;
    /* Note [Live clients]: no id the heap has listed is given again */
    uint64_t listed = atomic_load(&h->control->live_id_max);
    if (listed > d->next_client_id)
        d->next_client_id = listed;
    resume_adopt(d, h, kept, fds);
    if (*clean)
        return true;
    /* Note [Recovery cycles] */
    if (resume_keeps(d, h)) {
        /* their stacks are roots, their remarks theirs: the verifying
         * cycles wait until they are back (Note [Recovery cycles]) */
        collector_recover_later(h);
        return true;
    }
    if (collector_recover(h, &d->workers) < 0) {
        snprintf(why, n, "the verifying cycles found %llu failures (the "
                 "log names them)",
                 (unsigned long long)h->stats.verify_failures);
        goto refused;
    }
    return true;
refused:
    heap_close(h);
    return false;
}

/* Heap I: the one the service manager kept, if it proves itself, else a
 * new one (Note [Heaps across restarts] in fdstore.c). */
static int open_heap(struct daemon *d, size_t i, struct fdstore *fds)
{
    const struct config_heap *cfg = &d->cfg.heaps[i];
    struct heap *h = &d->heaps[i];
    int kh = fdstore_take(fds, "heap", cfg->name);
    int kp = fdstore_take(fds, "page", cfg->name);
    int kt = fdstore_take(fds, "table", cfg->name);
    int ks = fdstore_take(fds, "state", cfg->name);
    uint64_t t0 = monotonic_ns();
    char why[512] = "";
    bool clean = false;
    int rc;

    if (ks >= 0) {
        /* Note [The live table]: the release before saved it beside the
         * table; the table alone is read */
        log_warn("heap '%s': the heapd before (an earlier release) saved "
                 "its state as heapd.state.%s, which this heapd does not "
                 "read: dropped; the heap is taken back from its table "
                 "alone", cfg->name, cfg->name);
        fdstore_forget("state", cfg->name);
        close(ks);
    }
    if (kh >= 0 || kp >= 0 || kt >= 0) {
        bool back = take_back(d, h, cfg, kh, kp, kt, &clean, why, sizeof why,
                              fds);
        if (back) {
            h->stats.recovery_ns = monotonic_ns() - t0;
            h->recovery_t0 = t0; /* Note [Recovery cycles], when deferred */
            log_info("heap '%s': recovered from the table %s, in %llu ms "
                     "(%u segments in use)", cfg->name,
                     clean ? "the heapd before sealed at a clean stop"
                           : "as after a kill",
                     (unsigned long long)(h->stats.recovery_ns / 1000000),
                     h->segs.count - h->segs.first - h->segs.n_free);
        } else {
            log_error("heap '%s': not recovered: %s.  Its memfds stay in "
                      "the service manager's store as heapd.lost-heap.%s, "
                      "heapd.lost-page.%s and heapd.lost-table.%s, for an "
                      "operator to save (systemctl clean --what=fdstore "
                      "heapd drops them); the heap starts empty", cfg->name,
                      why, cfg->name, cfg->name, cfg->name);
            /* renamed: the store keeps a file once, under one name */
            fdstore_forget("heap", cfg->name);
            fdstore_forget("page", cfg->name);
            fdstore_forget("table", cfg->name);
            if (kh >= 0)
                fdstore_keep("lost-heap", cfg->name, kh, true);
            if (kp >= 0)
                fdstore_keep("lost-page", cfg->name, kp, true);
            if (kt >= 0)
                fdstore_keep("lost-table", cfg->name, kt, true);
        }
        if (kh >= 0)
            close(kh);
        if (kp >= 0)
            close(kp);
        if (kt >= 0)
            close(kt);
        if (back)
            return 0;
    }
    if ((rc = heap_open(h, cfg, -1, -1, -1)) < 0)
        return rc;
    fdstore_keep("heap", cfg->name, h->fd, true);
    fdstore_keep("page", cfg->name, h->page_fd, true);
    fdstore_keep("table", cfg->name, h->table_fd, true);
    return 0;
}

/* A clean exit: every heap's table sealed for the next heapd (Note [The
 * live table]); nothing stores into it after. */
static void seal_heaps(struct daemon *d)
{
    for (size_t i = 0; i < d->n_heaps; i++) {
        struct heap *h = &d->heaps[i];
        if (!table_seal(h))
            log_info("heap '%s': its table is not sealed (%s); the next "
                     "heapd recovers it as after a kill", h->cfg->name,
                     h->refused ? "the heap is refused"
                                : "its verifying cycles have not passed");
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"socket", required_argument, NULL, 's'},
        {"foreground", no_argument, NULL, 'f'},
        {"check-config", no_argument, NULL, 't'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *config_path = HEAPD_DEFAULT_CONFIG, *socket_override = NULL;
    bool foreground = false, check_only = false, loop_ready = false;
    bool workers_ready = false;
    struct daemon *d = NULL;
    int opt, rc = 1;

    while ((opt = getopt_long(argc, argv, "c:s:ftVh", opts, NULL)) != -1) {
        switch (opt) {
        case 'c': config_path = optarg; break;
        case 's': socket_override = optarg; break;
        case 'f': foreground = true; break;
        case 't': check_only = true; break;
        case 'V': printf("heapd %s\n", HEAPD_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "heapd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }

    d = calloc(1, sizeof *d);
    if (!d) {
        fprintf(stderr, "heapd: out of memory\n");
        return 1;
    }
    if (config_load(&d->cfg, config_path, stderr) < 0)
        goto out;
    if (check_only) {
        printf("heapd: %s: configuration OK (%zu heap%s)\n", config_path,
               d->cfg.n_heaps, d->cfg.n_heaps == 1 ? "" : "s");
        rc = 0;
        goto out;
    }
    log_set_level(d->cfg.log_level);
    snprintf(d->socket_path, sizeof d->socket_path, "%s", d->cfg.socket);
    if (socket_override) {
        if (strlen(socket_override) >= sizeof d->socket_path) {
            fprintf(stderr, "heapd: --socket %s: path is %zu bytes; the "
                    "limit is %zu (sun_path)\n", socket_override,
                    strlen(socket_override), sizeof d->socket_path - 1);
            goto out;
        }
        strcpy(d->socket_path, socket_override);
    }
    if (!foreground && daemonize_begin() < 0) {
        fprintf(stderr, "heapd: cannot daemonise: %s\n", strerror(errno));
        goto out;
    }

    d->uid = getuid();
    d->start_ns = uv_hrtime();
    raise_nofile(d);
    if (uv_loop_init(&d->loop) < 0)
        goto out;
    loop_ready = true;
    if (workers_init(&d->workers, d->cfg.gc_threads) < 0) {
        log_error("cannot start %u collector threads; lower gc_threads",
                  d->cfg.gc_threads);
        goto out;
    }
    workers_ready = true;
    d->fd_store = getenv("NOTIFY_SOCKET") != NULL;
    if (fdstore_collect(&d->fds) < 0)
        log_warn("cannot read the descriptors passed at start; every heap "
                 "starts empty");
    for (size_t i = 0; i < d->cfg.n_heaps; i++) {
        if (open_heap(d, i, &d->fds) < 0) {
            fdstore_close_rest(&d->fds);
            goto out;
        }
        d->n_heaps++;
        if (handoff_collector_start(&d->heaps[i], &d->workers, &d->loop,
                                    session_cycle_done, d) < 0) {
            log_error("heap '%s': cannot start its collector thread",
                      d->cfg.heaps[i].name);
            goto out;
        }
        if (handoff_remark_start(&d->heaps[i], d) < 0) {
            log_error("heap '%s': out of memory", d->cfg.heaps[i].name);
            goto out;
        }
    }
    fdstore_close_rest(&d->fds);
    uv_signal_init(&d->loop, &d->sig_term);
    uv_signal_init(&d->loop, &d->sig_int);
    d->sig_term.data = d->sig_int.data = d;
    uv_signal_start(&d->sig_term, on_signal, SIGTERM);
    uv_signal_start(&d->sig_int, on_signal, SIGINT);
    uv_signal_init(&d->loop, &d->sig_hup);
    uv_signal_start(&d->sig_hup, on_hup, SIGHUP);
    signal(SIGPIPE, SIG_IGN);
    if (server_listen(d) < 0)
        goto out;
    if (metrics_http_start(d) < 0)
        goto out;
    start_watchdog(d);
    start_strays(d);
    stall_start(d);
    announce_ready(d);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    rc = 0;
out:
    metrics_http_stop(d); /* Note [Metrics endpoint] */
    /* collectors first: no client is connected any more, so a cycle under
     * way finishes (Note [Stop the world]) */
    for (size_t i = 0; i < d->n_heaps; i++)
        handoff_stop(&d->heaps[i]);
    /* Note [The live table]: no client, no cycle: a clean exit seals */
    if (rc == 0)
        seal_heaps(d);
    if (workers_ready)
        workers_destroy(&d->workers);
    if (loop_ready) {
        uv_walk(&d->loop, close_walk, NULL);
        uv_run(&d->loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&d->loop) != 0)
            log_warn("event loop closed with handles still open");
    }
    metrics_http_free(d);
    stall_stop(d);
    resume_free_all(d);
    for (size_t i = 0; i < d->n_heaps; i++)
        heap_close(&d->heaps[i]);
    if (rc == 0 && !check_only)
        log_info("stopped");
    free(d);
    return rc;
}
