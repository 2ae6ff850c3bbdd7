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
 * gives back exactly once.  A closing connection whose peer reads nothing
 * would never finish flushing: Note [Connection limits] bounds that too.
 *
 * Note [Connection limits]
 * ~~~~~~~~~~~~~~~~~~~~~~~~
 * One client must not be able to take the daemon from the others, so what
 * a connection can make the daemon hold is bounded:
 *   - reading: one READ_CHUNK buffer shared by all connections, and the
 *     frame reader's partial frame, at most FRAME_MAX_PAYLOAD (Note
 *     [Frames]);
 *   - writing: replies queued for a peer that does not read them.  When a
 *     connection has more than max_write_queue bytes queued, the daemon
 *     stops reading its requests (the peer's own writes then block on its
 *     full socket) and reads again once the queue is down to half; such a
 *     pause is counted in connections_throttled.  Every message the daemon
 *     sends answers a request, but for remark requests, at most one per
 *     segment the client holds at a time (Note [Remark]), so a paused peer
 *     cannot make the queue grow much further; at twice the limit the
 *     connection is closed at once, unflushed;
 *   - closing: a connection that fails flushes its queue and an Error frame
 *     before it closes (conn_finish); one still flushing CLOSE_GRACE_MS
 *     later belongs to a peer that reads nothing, and the reaper timer
 *     closes it unflushed;
 *   - fairness: a read callback takes at most READ_CHUNK bytes from one
 *     connection and libuv turns to the others between reads, so a client
 *     that floods gets its answers at the pace it reads them, and the
 *     others are served meanwhile;
 *   - connections: at most max_connections in all and
 *     max_connections_per_user from one uid (SO_PEERCRED at accept), with
 *     a share kept for the operator (Note [Admission]); one more is told
 *     why in an Error frame (ERROR_TOO_MANY_CONNECTIONS) and closed, and
 *     counted in connections_refused.
 * File descriptors are the last bound: heapd.service raises LimitNOFILE
 * above max_connections.
 *
 * Note [Admission]
 * ~~~~~~~~~~~~~~~~
 * Who may hold what before a handshake, so that peers that never finish
 * one cannot take the daemon from those who do.  The credentials are read
 * at accept (Note [Connection authorisation]; a peer whose credentials
 * cannot be read is refused) and sort the peer into one of three classes:
 *   - privileged: root or the daemon's own user, the operator's heapctl;
 *   - listed: on some heap's ACL;
 *   - unlisted: on none.  It may open a control connection that answers
 *     StatsRequest and Goodbye and refuses everything else with
 *     ERROR_DENIED (counted in requests_refused), and at most
 *     max_unlisted_connections of them are open at once, not counting
 *     those already closing (0: refused at accept).
 * The accept rule, with N the connections including the new one and R
 * control_reserve: a privileged peer is admitted while N <= max_connections;
 * any other while N <= max_connections - R, and while its uid holds fewer
 * than max_connections_per_user.  So connections that others hold, idle or
 * not, leave R for root and the daemon's user: `heapctl stats` always gets
 * in unless the operator's own connections fill the reserve.  Every
 * connection must send a valid Hello within handshake_timeout (a uv timer
 * per connection, stopped by the Welcome); one that has not is sent an
 * Error, closed, and counted in connections_timed_out, so idle peers free
 * what they took within that time.  Until the Welcome, a frame may be at
 * most CONN_HELLO_MAX_PAYLOAD bytes (a Hello is well under 1 KiB): the
 * frame reader refuses a longer length before it buffers any of it.  With
 * the 1 MiB limit of Note [Frames] instead, 100 connections each holding
 * a partial frame made the daemon 100 MB larger.
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

#include "auth.h"
#include "daemon.h"
#include "fdpass.h"
#include "log.h"

#define READ_CHUNK 65536
#define CLOSE_GRACE_MS 5000 /* Note [Connection limits] */
#define LOG_TOKEN 1000      /* one log line, in conn.log_tokens */

struct write_req {
    uv_write_t req;
    uint8_t *buf;
};

/* ---- closing ---- */

/* The pipe and the hello timer are closed: C can go. */
static void on_handle_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    if (--c->handles_open == 0) {
        frame_reader_free(&c->reader);
        if (c->mem_fd >= 0)
            close(c->mem_fd);
        if (c->pidfd >= 0)
            close(c->pidfd);
        free(c);
    }
}

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
    if (c->log_suppressed)
        log_info("client %llu (%s, pid %d) disconnected; %llu more log "
                 "line(s) about it were suppressed (client_log_rate)",
                 (unsigned long long)c->id, c->name, (int)c->peer.pid,
                 (unsigned long long)c->log_suppressed);
    else
        log_info("client %llu (%s, pid %d) disconnected",
                 (unsigned long long)c->id, c->name, (int)c->peer.pid);
    on_handle_closed(h);
}

static void close_now(struct conn *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->hello_timer))
        uv_close((uv_handle_t *)&c->hello_timer, on_handle_closed);
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
    c->closing_since = uv_now(&c->d->loop); /* Note [Connection limits] */
    uv_read_stop((uv_stream_t *)&c->pipe);
    uv_shutdown_t *req = malloc(sizeof *req);
    if (!req || uv_shutdown(req, (uv_stream_t *)&c->pipe, on_shutdown) < 0) {
        free(req);
        close_now(c);
    }
}

/* ---- logging (Note [Per-client limits] in session.c) ---- */

void conn_log(struct conn *c, enum config_log_level level, const char *fmt,
              ...)
{
    struct daemon *d = c->d;
    uint64_t rate = d->cfg.client_log_rate, now = uv_now(&d->loop);
    char msg[1600];
    va_list ap;

    if (!log_enabled(level))
        return;
    /* a token bucket of one second's lines */
    c->log_tokens += (now - c->log_refilled) * rate;
    if (c->log_tokens > rate * LOG_TOKEN)
        c->log_tokens = rate * LOG_TOKEN;
    c->log_refilled = now;
    if (c->log_tokens < LOG_TOKEN) {
        c->log_suppressed++;
        d->log_lines_suppressed++;
        return;
    }
    c->log_tokens -= LOG_TOKEN;
    if (c->log_suppressed) {
        log_msg(level, "client %llu (%s, pid %d): %llu log line(s) about it "
                "suppressed (client_log_rate %llu per second in [daemon] "
                "of %s)", (unsigned long long)c->id, c->name[0] ? c->name
                : "?", (int)c->peer.pid,
                (unsigned long long)c->log_suppressed,
                (unsigned long long)rate, d->cfg.path);
        c->log_suppressed = 0;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_msg(level, "%s", msg);
}

/* ---- writing ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
static int on_frame(void *arg, Heapd__Envelope *env);
static void after_frames(struct conn *c, int rc);

static size_t queued_bytes(struct conn *c)
{
    return uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe);
}

/* After a write was queued: pause reading, or give up on a peer that does
 * not read (Note [Connection limits]). */
static void check_queue(struct conn *c)
{
    uint64_t limit = c->d->cfg.max_write_queue;
    size_t q = queued_bytes(c);
    if (c->state == CONN_CLOSING || q <= limit)
        return;
    if (q > 2 * limit) {
        conn_log(c, CONFIG_LOG_WARN, "client %llu (%s, pid %d) does not read its replies "
                 "(%zu bytes queued, max_write_queue %llu); closing",
                 (unsigned long long)c->id, c->name[0] ? c->name : "?",
                 (int)c->peer.pid, q, (unsigned long long)limit);
        c->state = CONN_CLOSING;
        close_now(c);
        return;
    }
    if (!c->throttled) {
        c->throttled = true;
        c->d->connections_throttled++;
        uv_read_stop((uv_stream_t *)&c->pipe);
        conn_log(c, CONFIG_LOG_DEBUG,
                 "client %llu: %zu bytes of replies unread; reading paused",
                  (unsigned long long)c->id, q);
    }
}

static void on_written(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *)req;
    struct conn *c = req->handle->data;

    c->writes_pending--;
    free(w->buf);
    free(w);
    if (status < 0 && c->state != CONN_CLOSING) {
        conn_log(c, CONFIG_LOG_DEBUG, "client %llu: write failed: %s",
                 (unsigned long long)c->id, uv_strerror(status));
        c->state = CONN_CLOSING;
        close_now(c);
        return;
    }
    if (c->throttled && c->state != CONN_CLOSING &&
        queued_bytes(c) <= c->d->cfg.max_write_queue / 2) {
        c->throttled = false;
        /* first what the pause held back, then the socket again */
        after_frames(c, frame_reader_resume(&c->reader, on_frame, c));
        if (!c->throttled && c->state != CONN_CLOSING &&
            uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) < 0) {
            c->state = CONN_CLOSING;
            close_now(c);
        }
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
    check_queue(c);
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

int conn_send_with_fds(struct conn *c, const Heapd__Envelope *env,
                       const int *fds, unsigned nfds)
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
    n = fdpass_send(sock, buf, len, fds, nfds);
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

int conn_reply(struct conn *c, Heapd__Envelope *env, uint64_t seq)
{
    env->seq = seq;
    int rc = conn_send(c, env);
    if (rc < 0)
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL, "cannot send %s: %s",
                  frame_body_name(env), strerror(-rc));
    return rc;
}

int conn_reply_error(struct conn *c, uint64_t seq, Heapd__ErrorCode code,
                     const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    conn_log(c, CONFIG_LOG_DEBUG, "client %llu (%s): %s",
             (unsigned long long)c->id, c->name, msg);
    int rc = conn_send_error(c, seq, code, msg);
    if (rc < 0)
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                  "cannot send an error: %s", strerror(-rc));
    return rc;
}

void conn_fail(struct conn *c, Heapd__ErrorCode code, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;

    if (c->state == CONN_CLOSING)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    conn_log(c, CONFIG_LOG_INFO, "client %llu (%s, pid %d): %s",
             (unsigned long long)c->id, c->name[0] ? c->name : "?",
             (int)c->peer.pid, msg);

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
    int rc = session_handle(c, env);
    /* Note [Connection limits]: no more requests until the peer reads */
    return rc < 0 ? rc : c->throttled ? FRAME_PAUSE : 0;
}

/* What frame_reader_feed or _resume said about C's input. */
static void after_frames(struct conn *c, int rc)
{
    if (rc == -EMSGSIZE || rc == -EBADMSG) {
        c->d->frames_rejected++;
        /* Note [Admission]: the limit is small until the Welcome */
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                  rc == -EMSGSIZE
                      ? "bad frame length (0 or over %zu bytes%s); closing"
                      : "undecodable frame (not a heapd.Envelope with a "
                        "body); closing",
                  c->reader.max_payload, c->state == CONN_AWAIT_HELLO
                                             ? " before the welcome" : "");
    } else if (rc == -ENOMEM) {
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                  "out of memory reading a frame");
    }
    /* FRAME_PAUSE: reading is stopped, on_written resumes; other negative
     * codes: session_handle already failed the connection */
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct conn *c = s->data;

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
    after_frames(c, frame_reader_feed(&c->reader, (const uint8_t *)buf->base,
                                      (size_t)n, on_frame, c));
}

/* ---- accepting ---- */

/* Note [Admission]: a new connection's class, and whether it may stay. */
static void admit(struct conn *c)
{
    struct daemon *d = c->d;
    uv_os_fd_t sock;
    unsigned same_user = 0, unlisted = 0;
    unsigned others_max = d->cfg.max_connections - d->cfg.control_reserve;
    int rc;

    if ((rc = uv_fileno((uv_handle_t *)&c->pipe, &sock)) < 0 ||
        (rc = auth_read_peer(sock, &c->peer)) < 0) {
        memset(&c->peer, 0, sizeof c->peer);
        c->peer.uid = (uid_t)-1;
        c->peer.gid = (gid_t)-1;
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                  "cannot read peer credentials: %s", strerror(-rc));
        return;
    }
    /* Note [Pidfd guard] in auth.c: without one, a stall is ended by
     * eviction */
    c->pidfd = auth_peer_pidfd(sock, &c->peer);
    if (c->pidfd < 0)
        log_debug("client %llu (pid %d): no pidfd: %s",
                  (unsigned long long)c->id, (int)c->peer.pid,
                  strerror(-c->pidfd));
    c->privileged = c->peer.uid == 0 || c->peer.uid == d->uid;
    c->unlisted = !c->privileged && !auth_listed(&d->cfg, &c->peer, d->uid);
    for (struct conn *o = d->conns; o; o = o->next) {
        if (o == c)
            continue;
        same_user += o->peer.uid == c->peer.uid;
        unlisted += o->unlisted && o->state != CONN_CLOSING;
    }
    if (d->n_conns > d->cfg.max_connections) {
        d->connections_refused++;
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_TOO_MANY_CONNECTIONS,
                  "heapd already has %u connections (max_connections in "
                  "[daemon] of %s); close some or raise it",
                  d->n_conns - 1, d->cfg.path);
    } else if (!c->privileged && d->n_conns > others_max) {
        d->connections_refused++;
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_TOO_MANY_CONNECTIONS,
                  "heapd already has %u connections; the last %u of "
                  "max_connections %u are kept for root and heapd's own "
                  "user (control_reserve in [daemon] of %s); close some or "
                  "raise max_connections", d->n_conns - 1,
                  d->cfg.control_reserve, d->cfg.max_connections,
                  d->cfg.path);
    } else if (same_user >= d->cfg.max_connections_per_user) {
        d->connections_refused++;
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_TOO_MANY_CONNECTIONS,
                  "uid %u already has %u connections to heapd "
                  "(max_connections_per_user in [daemon] of %s); close some "
                  "or raise it", (unsigned)c->peer.uid, same_user,
                  d->cfg.path);
    } else if (c->unlisted && unlisted >= d->cfg.max_unlisted_connections) {
        d->connections_refused++;
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_TOO_MANY_CONNECTIONS,
                  "uid %u is on no heap's ACL and heapd already has %u "
                  "connections from such users (max_unlisted_connections in "
                  "[daemon] of %s); add the user to allow_users of a heap",
                  (unsigned)c->peer.uid, unlisted, d->cfg.path);
    }
}

/* Note [Admission]: no valid Hello within handshake_timeout. */
static void on_hello_timeout(uv_timer_t *t)
{
    struct conn *c = t->data;
    if (c->state != CONN_AWAIT_HELLO)
        return;
    c->d->connections_timed_out++;
    conn_fail(c, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
              "no hello within %llu ms of connecting (handshake_timeout in "
              "[daemon] of %s); closing",
              (unsigned long long)c->d->cfg.handshake_timeout_ms,
              c->d->cfg.path);
}

void conn_welcomed(struct conn *c)
{
    uv_timer_stop(&c->hello_timer);
    c->reader.max_payload = FRAME_MAX_PAYLOAD; /* Note [Frames] */
}

/* Every second: close connections that have been closing for longer than
 * CLOSE_GRACE_MS (Note [Connection limits]). */
static void on_reaper(uv_timer_t *t)
{
    struct daemon *d = t->data;
    uint64_t now = uv_now(&d->loop);
    for (struct conn *c = d->conns; c; c = c->next)
        if (c->state == CONN_CLOSING && c->closing_since &&
            now - c->closing_since > CLOSE_GRACE_MS) {
            conn_log(c, CONFIG_LOG_INFO, "client %llu (%s, pid %d) did not "
                     "read its last replies in %d ms; closing",
                     (unsigned long long)c->id, c->name[0] ? c->name : "?",
                     (int)c->peer.pid, CLOSE_GRACE_MS);
            c->closing_since = 0;
            close_now(c);
        }
}

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
    c->mem_fd = -1;
    c->pidfd = -1;
    c->connected_at = time(NULL);
    /* Note [Admission]: small frames until the Welcome */
    frame_reader_init(&c->reader, CONN_HELLO_MAX_PAYLOAD);
    uv_pipe_init(&d->loop, &c->pipe, 0);
    c->pipe.data = c;
    uv_timer_init(&d->loop, &c->hello_timer);
    c->hello_timer.data = c;
    c->handles_open = 2;
    c->log_tokens = (uint64_t)d->cfg.client_log_rate * LOG_TOKEN;
    c->log_refilled = uv_now(&d->loop);
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
    uv_timer_start(&c->hello_timer, on_hello_timeout,
                   d->cfg.handshake_timeout_ms, 0);
    if (d->stopping) {
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_SHUTTING_DOWN,
                  "heapd is shutting down");
        return;
    }
    admit(c);
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

    /* taken at start with what the service manager kept (Note [Heaps
     * across restarts] in fdstore.c) */
    n = (int)d->fds.n_listeners;
    if (n > 1) {
        log_error("systemd passed %d sockets; heapd.socket must declare "
                  "exactly one ListenStream", n);
        rc = -EINVAL;
        goto out;
    }
    if (n == 1) {
        if (sd_is_socket_unix(d->fds.listeners[0], SOCK_STREAM, 1, NULL, 0)
            <= 0) {
            log_error("the socket systemd passed is not a listening Unix "
                      "stream socket; fix ListenStream in heapd.socket");
            rc = -EINVAL;
            goto out;
        }
        if ((rc = uv_pipe_open(&d->listener, d->fds.listeners[0])) < 0)
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
    uv_timer_init(&d->loop, &d->reaper);
    d->reaper.data = d;
    uv_timer_start(&d->reaper, on_reaper, 1000, 1000);
    uv_unref((uv_handle_t *)&d->reaper); /* connections keep the loop */
    d->reaper_on = true;
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

void server_stop(struct daemon *d, bool keep_mutators)
{
    if (d->reaper_on) {
        uv_close((uv_handle_t *)&d->reaper, NULL);
        d->reaper_on = false;
    }
    if (d->listening) {
        uv_close((uv_handle_t *)&d->listener, NULL);
        d->listening = false;
        if (!d->socket_activated)
            unlink(d->socket_path);
    }
    for (struct conn *c = d->conns; c; c = c->next) {
        if (keep_mutators && c->heap && !c->gone && c->state == CONN_READY)
            continue;
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_SHUTTING_DOWN,
                  "heapd is shutting down");
    }
}

struct conn *conn_find(struct daemon *d, const struct heap *h, uint64_t id)
{
    for (struct conn *c = d->conns; c; c = c->next)
        if (c->heap == h && c->id == id)
            return c;
    return NULL;
}

void server_abort_all(struct daemon *d)
{
    for (struct conn *c = d->conns; c; c = c->next) {
        c->state = CONN_CLOSING;
        close_now(c);
    }
}
