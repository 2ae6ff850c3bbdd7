/* The in-process daemon and its raw-protocol clients: see fuzz_daemon.h. */
#include "fuzz_daemon.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fuzz.h"
#include "log.h"
#include "wire.h"

struct daemon *fuzz_d;
static char sock_dir[64];

static void remove_socket(void)
{
    if (fuzz_d)
        unlink(fuzz_d->socket_path);
    rmdir(sock_dir);
}

void fuzz_daemon_start(const char *name, const char *config_text)
{
    struct daemon *d = calloc(1, sizeof *d);
    FUZZ_CHECK(d);
    FUZZ_CHECK(config_load_string(&d->cfg, name, config_text, stderr) == 0);
    log_set_level(d->cfg.log_level);
    snprintf(sock_dir, sizeof sock_dir, "/tmp/heapd-fuzz-XXXXXX");
    FUZZ_CHECK(mkdtemp(sock_dir));
    snprintf(d->socket_path, sizeof d->socket_path, "%s/heapd.sock",
             sock_dir);
    fuzz_d = d;
    atexit(remove_socket);
    d->uid = getuid();
    d->start_ns = uv_hrtime();
    FUZZ_CHECK(uv_loop_init(&d->loop) == 0);
    FUZZ_CHECK(workers_init(&d->workers, d->cfg.gc_threads) == 0);
    for (size_t i = 0; i < d->cfg.n_heaps; i++) {
        FUZZ_CHECK(heap_open(&d->heaps[i], &d->cfg.heaps[i], -1, -1, -1) == 0);
        d->n_heaps++;
        FUZZ_CHECK(handoff_collector_start(&d->heaps[i], &d->workers,
                                           &d->loop, session_cycle_done,
                                           d) == 0);
        FUZZ_CHECK(handoff_remark_start(&d->heaps[i], d) == 0);
    }
    signal(SIGPIPE, SIG_IGN);
    FUZZ_CHECK(server_listen(d) == 0);
}

/* ---- the client side ---- */

static int on_reply(void *arg, Heapd__Envelope *env)
{
    struct fuzz_client *cl = arg;
    cl->n_replies++;
    /* the daemon only ever sends what a client may receive */
    FUZZ_CHECK(env->body_case != HEAPD__ENVELOPE__BODY_HELLO &&
               env->body_case != HEAPD__ENVELOPE__BODY_STATS_REQUEST &&
               env->body_case != HEAPD__ENVELOPE__BODY_ATTACH_REQUEST &&
               env->body_case != HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST &&
               env->body_case != HEAPD__ENVELOPE__BODY_GLOBAL_CLAIM &&
               env->body_case != HEAPD__ENVELOPE__BODY_REMARK_DONE);
    return cl->on_reply ? cl->on_reply(cl, env) : 0;
}

/* Read what the daemon sent so far; keep or close any fd that came. */
static void drain(struct fuzz_client *cl)
{
    uint8_t buf[65536];
    int fds[FDPASS_MAX];
    unsigned nfds;

    while (!cl->eof) {
        ssize_t n = fdpass_recv(cl->fd, buf, sizeof buf, fds, &nfds);
        for (unsigned i = 0; i < nfds; i++) {
            if (cl->keep_fds && cl->nfds < FDPASS_MAX)
                cl->fds[cl->nfds++] = fds[i];
            else
                close(fds[i]);
        }
        if (n == -EAGAIN || n == -EWOULDBLOCK)
            return;
        if (n == -ECONNRESET || n == 0) {
            cl->eof = true;
            return;
        }
        FUZZ_CHECK(n > 0);
        FUZZ_CHECK(frame_reader_feed(&cl->replies, buf, (size_t)n, on_reply,
                                     cl) == 0);
    }
}

void fuzz_connect(struct fuzz_client *cl)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    uint64_t before = fuzz_d->connections_total;
    unsigned spins = 0;

    frame_reader_init(&cl->replies, 0);
    cl->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(cl->fd >= 0);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", fuzz_d->socket_path);
    FUZZ_CHECK(connect(cl->fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    /* on_connection accepts it, first in d->conns */
    while (fuzz_d->connections_total == before) {
        uv_run(&fuzz_d->loop, UV_RUN_NOWAIT);
        FUZZ_CHECK(++spins < FUZZ_SPIN_LIMIT);
    }
    FUZZ_CHECK(fuzz_d->conns != NULL);
    cl->id = fuzz_d->conns->id;
}

struct conn *fuzz_conn(const struct fuzz_client *cl)
{
    for (struct conn *c = fuzz_d->conns; c; c = c->next)
        if (c->id == cl->id)
            return c->state != CONN_CLOSING ? c : NULL;
    return NULL;
}

static bool conn_open(const struct fuzz_client *cl)
{
    for (struct conn *c = fuzz_d->conns; c; c = c->next)
        if (c->id == cl->id)
            return true;
    return false;
}

void fuzz_turn(struct fuzz_client *cl)
{
    uv_run(&fuzz_d->loop, UV_RUN_NOWAIT);
    drain(cl);
}

void fuzz_turn_wait(struct fuzz_client *cl)
{
    struct pollfd p[2] = {
        {.fd = uv_backend_fd(&fuzz_d->loop), .events = POLLIN},
        {.fd = cl->eof ? -1 : cl->fd, .events = POLLIN},
    };
    poll(p, 2, 1);
    fuzz_turn(cl);
}

void fuzz_send_chunk(struct fuzz_client *cl, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    unsigned spins = 0;

    while (len > 0 && fuzz_conn(cl)) {
        ssize_t n = send(cl->fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            FUZZ_CHECK(errno == EAGAIN || errno == EPIPE ||
                       errno == ECONNRESET);
            if (errno != EAGAIN)
                return;
            n = 0;
        }
        p += n;
        len -= (size_t)n;
        fuzz_turn(cl);
        FUZZ_CHECK(++spins < FUZZ_SPIN_LIMIT);
    }
    for (;;) {
        struct conn *c = fuzz_conn(cl);
        uv_os_fd_t sock;
        int unread = 0;
        if (!c || uv_fileno((uv_handle_t *)&c->pipe, &sock) < 0 ||
            ioctl(sock, FIONREAD, &unread) < 0 || unread == 0)
            break;
        fuzz_turn(cl);
        FUZZ_CHECK(++spins < FUZZ_SPIN_LIMIT);
    }
}

void fuzz_send_envelope(struct fuzz_client *cl, const Heapd__Envelope *env)
{
    uint8_t *buf;
    size_t len;
    if (frame_pack(env, &buf, &len) == 0) {
        fuzz_send_chunk(cl, buf, len);
        free(buf);
    }
}

void fuzz_send_hello(struct fuzz_client *cl, const char *heap, bool control)
{
    Heapd__Hello h = HEAPD__HELLO__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    h.protocol_version = PROTOCOL_VERSION;
    h.heap = (char *)heap;
    h.client_name = (char *)"fuzz";
    h.pid = (int32_t)getpid();
    h.kind = control ? HEAPD__CLIENT_KIND__CLIENT_CONTROL
                     : HEAPD__CLIENT_KIND__CLIENT_MUTATOR;
    env.body_case = HEAPD__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    fuzz_send_envelope(cl, &env);
}

void fuzz_close(struct fuzz_client *cl)
{
    unsigned spins = 0;
    shutdown(cl->fd, SHUT_WR);
    while (conn_open(cl) || !cl->eof) {
        fuzz_turn(cl);
        FUZZ_CHECK(++spins < FUZZ_SPIN_LIMIT);
    }
    close(cl->fd);
    cl->fd = -1;
    for (unsigned i = 0; i < cl->nfds; i++)
        close(cl->fds[i]);
    cl->nfds = 0;
    frame_reader_free(&cl->replies);
}

/* ---- reading the input ---- */

uint64_t fuzz_take(struct fuzz_input *in, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++) {
        uint8_t b = 0;
        if (in->n) {
            b = *in->p++;
            in->n--;
        }
        v |= (uint64_t)b << (8 * i);
    }
    return v;
}

void fuzz_take_bytes(struct fuzz_input *in, size_t want, const uint8_t **p,
                     size_t *len)
{
    *len = want < in->n ? want : in->n;
    *p = in->p;
    in->p += *len;
    in->n -= *len;
}
