/* The daemon's transport: the listening Unix socket (bound here or passed by
 * systemd), connections, framed reads and writes, and closing.  What the
 * messages mean is session.c's business.
 *
 * Note [Connection lifetime]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A connection is in d->conns from accept until its uv close callback.  It
 * leaves CONN_AWAIT_HELLO only through session.c.  Any protocol error moves
 * it to CONN_CLOSING via conn_fail(): an Error frame is queued, reading
 * stops, uv_shutdown() flushes every queued write, and the close callback
 * frees it.  Bytes that arrive after that are never parsed.  One
 * connection's failure never touches another's state: the only shared
 * things are counters and a heap's client count, which the close callback
 * gives back exactly once.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "daemon.h"
#include "fdpass.h"
#include "log.h"

#define READ_CHUNK 65536

struct write_req {
    uv_write_t req;
    uint8_t *buf;
};

/* ---- closing ---- */

static void on_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    struct daemon *d = c->d;

    session_closed(c);
    if (c->prev)
        c->prev->next = c->next;
    else
        d->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    d->n_conns--;
    if (c->heap)
        c->heap->clients--;
    log_info("client %llu (%s, pid %d) disconnected",
              (unsigned long long)c->id, c->name, (int)c->peer.pid);
    frame_reader_free(&c->reader);
    free(c);
}

static void close_now(struct conn *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->pipe))
        uv_close((uv_handle_t *)&c->pipe, on_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct conn *c = req->handle->data;
    free(req);
    close_now(c);
}

void conn_finish(struct conn *c)
{
    if (c->state == CONN_CLOSING)
        return;
    c->state = CONN_CLOSING;
    uv_read_stop((uv_stream_t *)&c->pipe);
    uv_shutdown_t *req = malloc(sizeof *req);
    if (!req || uv_shutdown(req, (uv_stream_t *)&c->pipe, on_shutdown) < 0) {
        free(req);
        close_now(c);
    }
}

/* ---- writing ---- */

static void on_written(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *)req;
    struct conn *c = req->handle->data;

    c->writes_pending--;
    free(w->buf);
    free(w);
    if (status < 0 && c->state != CONN_CLOSING) {
        log_debug("client %llu: write failed: %s", (unsigned long long)c->id,
                  uv_strerror(status));
        c->state = CONN_CLOSING;
        close_now(c);
    }
}

/* Queue BUF (taken over) on the stream. */
static int queue_bytes(struct conn *c, uint8_t *buf, size_t off, size_t len)
{
    struct write_req *w = malloc(sizeof *w);
    if (!w) {
        free(buf);
        return -ENOMEM;
    }
    w->buf = buf;
    uv_buf_t b = uv_buf_init((char *)buf + off, (unsigned)(len - off));
    int rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_written);
    if (rc < 0) {
        free(buf);
        free(w);
        return rc;
    }
    c->writes_pending++;
    return 0;
}

int conn_send(struct conn *c, const Heapd__Envelope *env)
{
    uint8_t *buf;
    size_t len;
    int rc = frame_pack(env, &buf, &len);
    if (rc < 0)
        return rc;
    return queue_bytes(c, buf, 0, len);
}

int conn_send_with_fd(struct conn *c, const Heapd__Envelope *env, int fd)
{
    uint8_t *buf = NULL;
    size_t len;
    uv_os_fd_t sock;
    ssize_t n;
    int rc;

    /* See Note [Passing the heap fd]: nothing may be queued before us. */
    if (c->writes_pending != 0 ||
        uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) != 0)
        return -EBUSY;
    if ((rc = uv_fileno((uv_handle_t *)&c->pipe, &sock)) < 0)
        goto out;
    if ((rc = frame_pack(env, &buf, &len)) < 0)
        goto out;
    n = fdpass_send(sock, buf, len, fd);
    if (n < 0) {
        rc = (int)n;
        goto out;
    }
    rc = 0;
    if ((size_t)n < len) {
        rc = queue_bytes(c, buf, (size_t)n, len);
        buf = NULL;
    }
out:
    free(buf);
    return rc;
}

int conn_send_error(struct conn *c, uint64_t seq, Heapd__ErrorCode code,
                    const char *msg)
{
    Heapd__Error err = HEAPD__ERROR__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    err.code = code;
    err.message = (char *)msg;
    env.seq = seq;
    env.body_case = HEAPD__ENVELOPE__BODY_ERROR;
    env.error = &err;
    return conn_send(c, &env);
}

void conn_fail(struct conn *c, Heapd__ErrorCode code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    if (c->state == CONN_CLOSING)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_info("client %llu (%s, pid %d): %s", (unsigned long long)c->id,
             c->name[0] ? c->name : "?", (int)c->peer.pid, msg);

    conn_send_error(c, 0, code, msg); /* best effort: the peer may be gone */
    conn_finish(c);
}

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    static char chunk[READ_CHUNK]; /* the loop thread is the only reader */
    (void)h;
    (void)suggested;
    *buf = uv_buf_init(chunk, sizeof chunk);
}

static int on_frame(void *arg, Heapd__Envelope *env)
{
    struct conn *c = arg;
    if (c->state == CONN_CLOSING)
        return -ECANCELED;
    return session_handle(c, env);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct conn *c = s->data;
    int rc;

    if (n == 0 || c->state == CONN_CLOSING)
        return;
    if (n < 0) {
        if (n == UV_EOF && frame_reader_pending(&c->reader) > 0) {
            c->d->frames_rejected++;
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                      "truncated frame: the stream ended %zu bytes into a "
                      "frame", frame_reader_pending(&c->reader));
            return;
        }
        c->state = CONN_CLOSING;
        close_now(c);
        return;
    }
    rc = frame_reader_feed(&c->reader, (const uint8_t *)buf->base, (size_t)n,
                           on_frame, c);
    if (rc == -EMSGSIZE || rc == -EBADMSG) {
        c->d->frames_rejected++;
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                  rc == -EMSGSIZE
                      ? "bad frame length (0 or over %u bytes); closing"
                      : "undecodable frame (not a heapd.Envelope with a "
                        "body); closing",
                  FRAME_MAX_PAYLOAD);
    } else if (rc == -ENOMEM) {
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                  "out of memory reading a frame");
    }
    /* other negative codes: session_handle already failed the connection */
}

/* ---- accepting ---- */

static void on_connection(uv_stream_t *listener, int status)
{
    struct daemon *d = listener->data;
    struct conn *c;

    if (status < 0) {
        log_warn("accept: %s", uv_strerror(status));
        return;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        log_error("accept: out of memory");
        return;
    }
    c->d = d;
    frame_reader_init(&c->reader, FRAME_MAX_PAYLOAD);
    uv_pipe_init(&d->loop, &c->pipe, 0);
    c->pipe.data = c;
    c->id = ++d->next_client_id;
    c->next = d->conns;
    if (d->conns)
        d->conns->prev = c;
    d->conns = c;
    d->n_conns++;
    d->connections_total++;
    if (uv_accept(listener, (uv_stream_t *)&c->pipe) < 0 ||
        uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) < 0) {
        c->state = CONN_CLOSING;
        close_now(c);
        return;
    }
    if (d->stopping)
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_SHUTTING_DOWN,
                  "heapd is shutting down");
}

/* Remove a socket file left by a heapd that died, but never one that a live
 * heapd is listening on. */
static int clear_stale_socket(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct stat st;
    int fd, rc = 0;

    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode)) {
        log_error("%s exists and is not a socket; remove it or set 'socket' "
                  "in [daemon]", path);
        return -EEXIST;
    }
    strcpy(sa.sun_path, path); /* length checked by the caller */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
        log_error("another heapd is already listening on %s; stop it or "
                  "set another 'socket' in [daemon]", path);
        rc = -EADDRINUSE;
    } else if (errno == ECONNREFUSED) {
        if (unlink(path) < 0)
            rc = -errno;
    }
    close(fd);
    return rc;
}

int server_listen(struct daemon *d)
{
    int rc, n;

    uv_pipe_init(&d->loop, &d->listener, 0);
    d->listener.data = d;

    n = sd_listen_fds(1);
    if (n > 1) {
        log_error("systemd passed %d sockets; heapd.socket must declare "
                  "exactly one ListenStream", n);
        rc = -EINVAL;
        goto out;
    }
    if (n == 1) {
        if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0)
            <= 0) {
            log_error("the socket systemd passed is not a listening Unix "
                      "stream socket; fix ListenStream in heapd.socket");
            rc = -EINVAL;
            goto out;
        }
        if ((rc = uv_pipe_open(&d->listener, SD_LISTEN_FDS_START)) < 0)
            goto uv_fail;
        d->socket_activated = true;
        log_info("using the socket passed by systemd");
    } else {
        if (strlen(d->socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
            log_error("socket path %s is too long (limit %zu bytes)",
                      d->socket_path,
                      sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
            rc = -ENAMETOOLONG;
            goto out;
        }
        if ((rc = clear_stale_socket(d->socket_path)) < 0)
            goto out;
        if ((rc = uv_pipe_bind(&d->listener, d->socket_path)) < 0)
            goto uv_fail;
        /* Note [Connection authorisation]: access is decided per heap. */
        if (chmod(d->socket_path, 0666) < 0)
            log_warn("chmod %s: %s", d->socket_path, strerror(errno));
    }
    if ((rc = uv_listen((uv_stream_t *)&d->listener, 128, on_connection)) < 0)
        goto uv_fail;
    d->listening = true;
    return 0;
uv_fail:
    log_error("cannot listen on %s: %s; check the directory exists and is "
              "writable, or set 'socket' in [daemon]",
              d->socket_activated ? "the systemd socket" : d->socket_path,
              uv_strerror(rc));
out:
    uv_close((uv_handle_t *)&d->listener, NULL);
    return rc;
}

void server_stop(struct daemon *d)
{
    if (d->listening) {
        uv_close((uv_handle_t *)&d->listener, NULL);
        d->listening = false;
        if (!d->socket_activated)
            unlink(d->socket_path);
    }
    for (struct conn *c = d->conns; c; c = c->next)
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_SHUTTING_DOWN,
                  "heapd is shutting down");
}

void server_abort_all(struct daemon *d)
{
    for (struct conn *c = d->conns; c; c = c->next) {
        c->state = CONN_CLOSING;
        close_now(c);
    }
}
