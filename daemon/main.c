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

#include "collector.h"
#include "daemon.h"
#include "heapd_build.h"
#include "fdstore.h"
#include "log.h"
#include "resume.h"
#include "stall.h"
#include "table.h"
#include "wire.h"

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
    char unserved[64] = "";
    if (d->n_unserved) /* Note [Heaps heapd cannot adopt] */
        snprintf(unserved, sizeof unserved, " (%zu more not served: "
                 "heapctl stats says why)", d->n_unserved);
    log_info("ready: %zu heap%s%s, listening on %s", d->n_heaps,
             d->n_heaps == 1 ? "" : "s", unserved,
             d->socket_activated ? "the systemd socket" : d->socket_path);
    sd_notifyf(0, "READY=1\nSTATUS=serving %zu heap(s)%s\nMAINPID=%d",
               d->n_heaps, unserved, (int)getpid());
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
    /* the stop waits for the cycle under way (Note [Worker priority]),
     * and not for a save or a load, which that cycle would wait for */
    workers_set_urgent(&d->workers, WORKERS_WAIT_STOP, true);
    for (size_t i = 0; i < d->n_heaps; i++)
        if (d->heaps[i].gc) /* a heap served */
            collector_stopping(&d->heaps[i]);
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
        case 'V': /* Note [Heaps heapd cannot adopt]: which heaps it reads */
            printf("heapd %s (protocol %u, layout %u, table %u)\n",
                   HEAPD_VERSION, PROTOCOL_VERSION, LAYOUT_VERSION,
                   TABLE_VERSION);
            return 0;
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
    if (adopt_heaps(d) < 0) {
        fdstore_close_rest(&d->fds);
        goto out;
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
