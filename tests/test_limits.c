/* Limits on what one client can make heapd hold or do, against a real
 * heapd: connections and unread replies (Note [Connection limits] in
 * daemon/server.c), what a peer may do before its handshake (Note
 * [Admission]), and per-client caps after it (Note [Per-client limits] in
 * daemon/session.c).  Every refusal is followed by a check that the daemon
 * still serves another client. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frame.h"
#include "harness.h"
#include "heapd.h"
#include "wire.h"
#include "check_main.h"

static struct daemon_proc D;

static void start_default(void)
{
    harness_start(&D, harness_default_config("@SOCK@", NULL));
}

/* ---- resource limits (Note [Connection limits] in daemon/server.c) ---- */

/* A config with DAEMON_EXTRA in [daemon]. */
static const char *limits_config(const char *daemon_extra)
{
    static char buf[1024];
    snprintf(buf, sizeof buf,
             "[daemon]\nsocket = @SOCK@\nlog_level = debug\n%s\n"
             "[heap default]\nbase = 0x%llx\nmax_size = 1G\n",
             daemon_extra, (unsigned long long)HARNESS_HEAP_BASE);
    return buf;
}

/* A raw control connection, welcomed. */
static int raw_control(void)
{
    int fd = harness_raw_connect(D.sock);
    harness_send_hello(fd, "default", PROTOCOL_VERSION,
                       HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    Heapd__Envelope *w = harness_read_env(fd, NULL);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(w->body_case, HEAPD__ENVELOPE__BODY_WELCOME);
    heapd__envelope__free_unpacked(w, NULL);
    return fd;
}

static int count_frame(void *arg, Heapd__Envelope *env)
{
    ck_assert_int_eq(env->body_case, HEAPD__ENVELOPE__BODY_STATS_REPLY);
    (*(size_t *)arg)++;
    return 0;
}

/* A stats request flood on FD, which reads nothing: send whole frames
 * until the socket is full and heapd says it paused the connection
 * (connections_throttled, a handshake rather than a timeout).  Without the
 * pause heapd would read and queue replies for ever: give up, failing,
 * after 64 MiB.  Returns the frame; *FRAMES counts whole ones sent, *OFF
 * is how much of the last one went out. */
static uint8_t *flood_until_paused(int fd, size_t *len, size_t *frames,
                                   size_t *off)
{
    Heapd__StatsRequest sr = HEAPD__STATS_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.body_case = HEAPD__ENVELOPE__BODY_STATS_REQUEST;
    env.stats_request = &sr;
    uint8_t *req;
    size_t total = 0;
    ck_assert_int_eq(frame_pack(&env, &req, len), 0);
    ck_assert_int_eq(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
    *frames = *off = 0;
    for (;;) {
        ssize_t w = send(fd, req + *off, *len - *off, MSG_NOSIGNAL);
        if (w > 0) {
            total += (size_t)w;
            *off += (size_t)w;
            if (*off == *len) {
                *off = 0;
                (*frames)++;
            }
            ck_assert_msg(total < (64u << 20), "heapd kept reading a client "
                          "that reads none of its %zu replies", *frames);
            continue;
        }
        ck_assert_msg(w < 0 && errno == EAGAIN, "send: %s", strerror(errno));
        if (harness_daemon_stats(&D).connections_throttled >= 1)
            return req;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        poll(&pf, 1, 100); /* heapd still reading: room comes */
    }
}

/* The paused client reading its replies, and sending the rest of its last
 * request as heapd reads again. */
struct paused_reader {
    int fd;
    const uint8_t *req;
    size_t len, off, frames, replies;
    frame_reader fr;
};

/* Read and send what the socket allows now; true once every request went
 * out whole and has its reply. */
static bool all_answered(void *arg, char *seen, size_t seen_len)
{
    struct paused_reader *pr = arg;
    for (;;) {
        struct pollfd pf = {.fd = pr->fd,
                            .events = POLLIN | (pr->off > 0 ? POLLOUT : 0)};
        if (poll(&pf, 1, 0) <= 0)
            break;
        ck_assert_msg(pf.revents & (POLLIN | POLLOUT),
                      "heapd closed a paused client (poll events 0x%x)",
                      pf.revents);
        if (pf.revents & POLLOUT) {
            ssize_t w = send(pr->fd, pr->req + pr->off, pr->len - pr->off,
                             MSG_NOSIGNAL);
            if (w > 0 && (pr->off += (size_t)w) == pr->len) {
                pr->off = 0;
                pr->frames++;
            }
        }
        if (pf.revents & POLLIN) {
            uint8_t buf[65536];
            ssize_t r = recv(pr->fd, buf, sizeof buf, 0);
            ck_assert_msg(r > 0, "heapd closed a paused client");
            ck_assert_int_eq(frame_reader_feed(&pr->fr, buf, (size_t)r,
                                               count_frame, &pr->replies), 0);
        }
    }
    snprintf(seen, seen_len, "%zu replies to %zu requests%s", pr->replies,
             pr->frames, pr->off ? " and a part-sent one" : "");
    return pr->off == 0 && pr->replies >= pr->frames;
}

/* A client that sends stats requests as fast as the socket takes them and
 * reads nothing: heapd stops reading it once max_write_queue bytes of
 * replies wait, serves others meanwhile, and answers every request once
 * the client reads. */
START_TEST(client_that_does_not_read_is_paused)
{
    harness_start(&D, limits_config("max_write_queue = 64K"));
    int fd = raw_control();
    size_t len, off, frames;
    uint8_t *req = flood_until_paused(fd, &len, &frames, &off);

    /* others are served meanwhile */
    ck_assert_uint_eq(harness_still_serving(D.sock), 2);

    /* now read: every request is answered, and the rest of the last one
     * goes through once heapd reads again */
    struct paused_reader pr = {.fd = fd, .req = req, .len = len, .off = off,
                               .frames = frames};
    frame_reader_init(&pr.fr, 0);
    harness_wait_until(all_answered, &pr, "heapd to answer every request "
                       "of the paused client once it reads");
    ck_assert_uint_eq(pr.replies, pr.frames);
    frame_reader_free(&pr.fr);
    free(req);
    close(fd);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

struct limited_connect {
    heapd_client *c;
    int rc;
};

static bool connect_admitted(void *arg, char *seen, size_t seen_len)
{
    struct limited_connect *lc = arg;
    heapd_connect_opts o = {.socket_path = D.sock,
                            .flags = HEAPD_CONNECT_CONTROL};
    lc->rc = heapd_connect(&lc->c, &o);
    snprintf(seen, seen_len, "%s", heapd_last_error());
    return lc->rc != -EAGAIN;
}

/* A control connection, retried while heapd refuses it for a connection
 * limit: it sees a closed connection in its own time (a bounded wait). */
static heapd_client *connect_when_below_limit(void)
{
    struct limited_connect lc = {NULL, -EAGAIN};
    harness_wait_until(connect_admitted, &lc,
                       "heapd to admit a connection once one closed");
    ck_assert_msg(lc.rc == 0, "connect after a close: %s",
                  heapd_last_error());
    return lc.c;
}

/* A paused client that dies is noticed (its queued replies fail) and
 * freed, although heapd is not reading it. */
START_TEST(paused_client_that_dies_is_freed)
{
    harness_start(&D, limits_config("max_write_queue = 64K"));
    int fd = raw_control();
    size_t len, off, frames;
    free(flood_until_paused(fd, &len, &frames, &off));
    close(fd);
    /* the wait's own control connection is the one left */
    harness_wait_stat(&D, NULL, clients_connected, ==, 1);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* One connection over max_connections_per_user is refused with the reason;
 * the others keep working, and a slot freed is usable again. */
START_TEST(connections_per_user_are_limited)
{
    harness_start(&D, limits_config("max_connections_per_user = 4"));
    int fds[4];
    for (int i = 0; i < 4; i++)
        fds[i] = harness_raw_connect(D.sock);
    int extra = harness_raw_connect(D.sock);
    harness_expect_error_and_close(extra, HEAPD__ERROR_CODE__ERROR_TOO_MANY_CONNECTIONS,
                           "max_connections_per_user");
    /* libheapd reports it as EAGAIN with the daemon's words */
    heapd_connect_opts o = {.socket_path = D.sock,
                            .flags = HEAPD_CONNECT_CONTROL};
    heapd_client *c = NULL;
    ck_assert_int_eq(heapd_connect(&c, &o), -EAGAIN);
    ck_assert_msg(strstr(heapd_last_error(), "max_connections_per_user"),
                  "message: %s", heapd_last_error());
    close(fds[0]);
    c = connect_when_below_limit();
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(c, &st), 0);
    ck_assert_uint_ge(st.connections_refused, 2);
    heapd_disconnect(c);
    for (int i = 1; i < 4; i++)
        close(fds[i]);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(connections_in_all_are_limited)
{
    harness_start(&D, limits_config("max_connections = 3"));
    int fds[3];
    for (int i = 0; i < 3; i++)
        fds[i] = harness_raw_connect(D.sock);
    int extra = harness_raw_connect(D.sock);
    harness_expect_error_and_close(extra, HEAPD__ERROR_CODE__ERROR_TOO_MANY_CONNECTIONS,
                           "max_connections in [daemon]");
    close(fds[2]);
    heapd_client *c = connect_when_below_limit();
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(c, &st), 0);
    uint32_t n = st.clients_connected;
    heapd_disconnect(c);
    ck_assert_uint_eq(n, 3);
    close(fds[0]);
    close(fds[1]);
    harness_stop_clean(&D);
}
END_TEST

/* A client that breaks the protocol while heapd still has replies queued
 * for it, and reads nothing: the connection cannot flush, and is closed
 * CLOSE_GRACE_MS later instead of staying for ever. */
START_TEST(closing_connection_that_never_reads_is_reaped)
{
    harness_start_logged(&D, limits_config("max_write_queue = 1G"),
                         "heapd.log");
    int fd = raw_control();
    Heapd__StatsRequest sr = HEAPD__STATS_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.body_case = HEAPD__ENVELOPE__BODY_STATS_REQUEST;
    env.stats_request = &sr;
    uint8_t *req;
    size_t len;
    ck_assert_int_eq(frame_pack(&env, &req, &len), 0);
    /* replies to 4000 requests are far more than a socket buffer holds */
    for (int i = 0; i < 4000; i++)
        harness_send_bytes(fd, req, len);
    harness_send_bytes(fd, "\x00\x00\x00\x02\xff\xff", 6);
    free(req);
    /* the reaper looks every second, grace 5 s; the wait's own control
     * connection is the one left */
    harness_wait_stat(&D, NULL, clients_connected, ==, 1);
    ck_assert_msg(harness_wait_eof(fd), "the reaped connection is not closed");
    close(fd);
    ck_assert_msg(harness_log_contains(&D, "did not read its last replies"),
                  "no log line for the reaped connection");
    harness_stop_clean(&D);
}
END_TEST

/* ---- before the handshake (Note [Admission] in daemon/server.c) ---- */

/* In a forked child: become uid and gid 65534 with no other group. */
static void become_nobody(void)
{
    ck_assert_int_eq(setgid(65534), 0);
    ck_assert_int_eq(setgroups(0, NULL), 0);
    ck_assert_int_eq(setuid(65534), 0);
}

/* A config whose heap allows uid 65534, with DAEMON_EXTRA in [daemon]. */
static const char *listed_config(const char *daemon_extra)
{
    static char buf[1024];
    snprintf(buf, sizeof buf,
             "[daemon]\nsocket = @SOCK@\nlog_level = debug\n%s\n"
             "[heap default]\nbase = 0x%llx\nmax_size = 1G\n"
             "allow_users = 65534\n",
             daemon_extra, (unsigned long long)HARNESS_HEAP_BASE);
    return buf;
}

static void wait_child_ok(pid_t pid, const char *who)
{
    int st = harness_wait_pid(pid, HARNESS_WAIT_MS);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed", who);
}

/* Idle connections of another user fill max_connections - control_reserve
 * and no more: root's heapctl still gets in. */
START_TEST(idle_connections_leave_the_reserve_to_the_operator)
{
    if (getuid() != 0) {
        fprintf(stderr, "reserve: not root; cannot switch users\n");
        return;
    }
    harness_start(&D, listed_config("max_connections = 8\n"
                                    "control_reserve = 2\n"
                                    "handshake_timeout = 10m\n"));
    int ready[2], done[2];
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(done), 0);
    pid_t pid = fork();
    if (pid == 0) {
        become_nobody();
        int fds[6];
        for (int i = 0; i < 6; i++)
            fds[i] = harness_raw_connect(D.sock);
        int extra = harness_raw_connect(D.sock);
        harness_expect_error_and_close(extra,
                               HEAPD__ERROR_CODE__ERROR_TOO_MANY_CONNECTIONS,
                               "control_reserve");
        ck_assert_int_eq(write(ready[1], "r", 1), 1);
        char b;
        ck_assert_int_eq(read(done[0], &b, 1), 1);
        for (int i = 0; i < 6; i++)
            close(fds[i]);
        _exit(0);
    }
    char b;
    ck_assert_msg(read(ready[0], &b, 1) == 1, "the idle child failed");
    /* the operator: root's control connection, in the reserve */
    heapd_client *c = harness_connect_ok(D.sock, HEAPD_CONNECT_CONTROL);
    /* the refused one may still be closing */
    harness_wait_stat(&D, c, clients_connected, ==, 7);
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(c, &st), 0);
    ck_assert_uint_ge(st.connections_refused, 1);
    heapd_disconnect(c);
    ck_assert_int_eq(write(done[1], "d", 1), 1);
    wait_child_ok(pid, "the idle child");
    close(ready[0]);
    close(ready[1]);
    close(done[0]);
    close(done[1]);
    harness_stop_clean(&D);
}
END_TEST

/* Connections that never complete a Hello (silent, or half a frame) are
 * told and closed after handshake_timeout, and counted; the same user's
 * real client then gets in. */
START_TEST(idle_connections_time_out)
{
    if (getuid() != 0) {
        fprintf(stderr, "time out: not root; cannot switch users\n");
        return;
    }
    harness_start(&D, listed_config("max_connections = 8\n"
                                    "control_reserve = 2\n"
                                    "handshake_timeout = 200ms\n"));
    pid_t pid = fork();
    if (pid == 0) {
        become_nobody();
        int fds[6];
        for (int i = 0; i < 6; i++) {
            fds[i] = harness_raw_connect(D.sock);
            if (i % 2)
                harness_send_bytes(fds[i], "\x00\x00\x00\x40\x0a", 5);
        }
        for (int i = 0; i < 6; i++)
            harness_expect_error_and_close(fds[i],
                                   HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                                   "handshake_timeout");
        heapd_client *c = harness_connect_when_room(D.sock, 0);
        heapd_mutator *m;
        ck_assert_int_eq(heapd_attach(c, &m), 0);
        heapd_detach(m);
        heapd_disconnect(c);
        _exit(0);
    }
    wait_child_ok(pid, "the idle child");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_ge(st.connections_timed_out, 6);
    harness_stop_clean(&D);
}
END_TEST

/* Before the Welcome a frame may be a few KiB: a longer length is refused
 * at once, before any of it is buffered; after it, 1 MiB. */
START_TEST(large_frame_before_hello_is_refused)
{
    start_default();
    static uint8_t f[4 + 65536];
    f[1] = 0x01; /* 65536 bytes announced */
    memset(f + 4, 0xff, 65536);
    int fd = harness_raw_connect(D.sock);
    harness_send_bytes(fd, f, sizeof f);
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                           "over 4096 bytes before the welcome");
    /* the same frame after a Welcome is read whole (and is garbage) */
    fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    harness_send_bytes(fd, f, sizeof f);
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                           "undecodable");
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

/* A user on no heap's ACL reads stats, is refused anything else, never
 * maps a heap, and holds at most max_unlisted_connections. */
START_TEST(unlisted_user_reads_stats_only)
{
    if (getuid() != 0) {
        fprintf(stderr, "unlisted: not root; cannot switch users\n");
        return;
    }
    harness_start(&D, limits_config("max_unlisted_connections = 2"));
    pid_t pid = fork();
    if (pid == 0) {
        become_nobody();
        heapd_connect_opts o = {.socket_path = D.sock,
                                .flags = HEAPD_CONNECT_CONTROL};
        heapd_client *c1 = NULL, *c2 = NULL, *c3 = NULL;
        ck_assert_msg(heapd_connect(&c1, &o) == 0, "stats connection: %s",
                      heapd_last_error());
        heapd_stats_t st;
        ck_assert_int_eq(heapd_stats(c1, &st), 0);
        ck_assert_int_eq(heapd_request_collect(c1, 0), HEAPD_EDENIED);
        ck_assert_msg(strstr(heapd_last_error(), "may only read stats"),
                      "message: %s", heapd_last_error());
        ck_assert_int_eq(heapd_stats(c1, &st), 0); /* still open */
        ck_assert_uint_ge(st.requests_refused, 1);
        ck_assert_int_eq(heapd_connect(&c2, &o), 0);
        ck_assert_int_eq(heapd_connect(&c3, &o), -EAGAIN);
        ck_assert_msg(strstr(heapd_last_error(), "max_unlisted_connections"),
                      "message: %s", heapd_last_error());
        heapd_disconnect(c2);
        heapd_disconnect(c1);
        _exit(0);
    }
    wait_child_ok(pid, "the unlisted child");
    /* a raw Attach on the stats connection is refused too */
    pid = fork();
    if (pid == 0) {
        become_nobody();
        int fd = raw_control();
        Heapd__AttachRequest ar = HEAPD__ATTACH_REQUEST__INIT;
        Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
        env.seq = 7;
        env.body_case = HEAPD__ENVELOPE__BODY_ATTACH_REQUEST;
        env.attach_request = &ar;
        harness_send_env(fd, &env);
        Heapd__Envelope *e = harness_read_env(fd, NULL);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ERROR);
        ck_assert_int_eq(e->error->code, HEAPD__ERROR_CODE__ERROR_DENIED);
        ck_assert_uint_eq(e->seq, 7);
        heapd__envelope__free_unpacked(e, NULL);
        close(fd);
        _exit(0);
    }
    wait_child_ok(pid, "the unlisted raw child");
    ck_assert_uint_ge(harness_daemon_stats(&D).requests_refused, 2);
    harness_stop_clean(&D);
}
END_TEST

/* ---- after it (Note [Per-client limits] in daemon/session.c) ---- */

static void send_hello_named(int fd, const char *heap, const char *name,
                             Heapd__ClientKind kind)
{
    Heapd__Hello h = HEAPD__HELLO__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    h.protocol_version = PROTOCOL_VERSION;
    h.heap = (char *)heap;
    h.client_name = (char *)name;
    h.pid = getpid();
    h.kind = kind;
    env.body_case = HEAPD__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    harness_send_env(fd, &env);
}

/* A stats round trip on FD: everything FD sent before is handled. */
static void stats_round_trip(int fd)
{
    Heapd__StatsRequest sr = HEAPD__STATS_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.seq = 99;
    env.body_case = HEAPD__ENVELOPE__BODY_STATS_REQUEST;
    env.stats_request = &sr;
    harness_send_env(fd, &env);
    for (;;) {
        Heapd__Envelope *e = harness_read_env(fd, NULL);
        ck_assert_msg(e != NULL, "EOF before the stats reply");
        bool done = e->body_case == HEAPD__ENVELOPE__BODY_STATS_REPLY;
        heapd__envelope__free_unpacked(e, NULL);
        if (done)
            return;
    }
}

/* The whole of heapd's log (harness_start_logged). */
static char *read_log(void)
{
    FILE *f = fopen(D.log, "r");
    ck_assert_msg(f != NULL, "no daemon log");
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n - 1 == 0)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static size_t count_in(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* Newlines in a client's words cannot forge log lines. */
START_TEST(client_strings_are_logged_escaped)
{
    harness_start_logged(&D, harness_default_config("@SOCK@", NULL),
                         "heapd.log");
    int fd = harness_raw_connect(D.sock);
    send_hello_named(fd, "default", "evil\nheapd: error: forged by name",
                     HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    Heapd__Envelope *w = harness_read_env(fd, NULL);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(w->body_case, HEAPD__ENVELOPE__BODY_WELCOME);
    heapd__envelope__free_unpacked(w, NULL);
    stats_round_trip(fd); /* the connect line is written by now */
    close(fd);
    fd = harness_raw_connect(D.sock);
    send_hello_named(fd, "no\nheapd: error: forged by heap", "x",
                     HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_NO_SUCH_HEAP,
                           "no\\x0aheapd: error: forged by heap");
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
    char *log = read_log();
    ck_assert_msg(strstr(log, "evil\\x0aheapd: error: forged by name"),
                  "the escaped client_name is not logged:\n%s", log);
    ck_assert_msg(strstr(log, "no\\x0aheapd: error: forged by heap"),
                  "the escaped heap name is not logged:\n%s", log);
    ck_assert_msg(!strstr(log, "\nheapd: error: forged"),
                  "a client forged a log line:\n%s", log);
    free(log);
    harness_stop_clean(&D);
}
END_TEST

/* A flood of bad UrsBatch frames: every one is counted as rejected, a
 * bounded share is logged (client_log_rate), the rest is counted as
 * suppressed and said so in the log. */
START_TEST(bad_urs_batch_flood_is_rate_limited)
{
    enum { FLOOD = 5000 };
    harness_start_logged(&D, limits_config("client_log_rate = 10"),
                         "heapd.log");
    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    Heapd__UrsBatch ub = HEAPD__URS_BATCH__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    ub.slot = 200; /* no such slot: ignored, logged */
    env.body_case = HEAPD__ENVELOPE__BODY_URS_BATCH;
    env.urs_batch = &ub;
    uint8_t *one;
    size_t len;
    ck_assert_int_eq(frame_pack(&env, &one, &len), 0);
    uint8_t *all = malloc(len * FLOOD);
    for (size_t i = 0; i < FLOOD; i++)
        memcpy(all + i * len, one, len);
    harness_send_bytes(fd, all, len * FLOOD);
    free(all);
    free(one);
    stats_round_trip(fd);
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.frames_rejected, FLOOD);
    close(fd);
    harness_wait_stat(&D, NULL, clients_connected, ==, 1);
    char *log = read_log();
    size_t logged = count_in(log, "URS batch for slot 200");
    ck_assert_msg(logged + st.log_lines_suppressed == FLOOD,
                  "%zu lines logged and %llu suppressed of %d", logged,
                  (unsigned long long)st.log_lines_suppressed, FLOOD);
    ck_assert_msg(logged < FLOOD / 10, "%zu of %d bad frames logged",
                  logged, FLOOD);
    ck_assert_msg(strstr(log, "more log line(s) about it were suppressed"),
                  "no count of the suppressed lines in the log");
    free(log);
    harness_stop_clean(&D);
}
END_TEST

/* The daemon's resident memory, from /proc/PID/status. */
static uint64_t vm_rss_kib(pid_t pid)
{
    char path[64], line[256];
    uint64_t kib = 0;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %" SCNu64 " kB", &kib) == 1)
            break;
    fclose(f);
    ck_assert_msg(kib > 0, "no VmRSS in %s", path);
    return kib;
}

/* A raw mutator connection with one slot attached that never acks a stop:
 * no cycle completes while it is open. */
static int raw_stalling_mutator(void)
{
    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    Heapd__AttachRequest ar = HEAPD__ATTACH_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.seq = 1;
    env.body_case = HEAPD__ENVELOPE__BODY_ATTACH_REQUEST;
    env.attach_request = &ar;
    harness_send_env(fd, &env);
    Heapd__Envelope *e = harness_read_env(fd, NULL);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ATTACH_REPLY);
    heapd__envelope__free_unpacked(e, NULL);
    return fd;
}

struct flood {
    int fd;
    uint8_t *bytes;
    size_t len;
};

static void *send_flood(void *arg)
{
    struct flood *f = arg;
    harness_send_bytes(f->fd, f->bytes, f->len);
    return NULL;
}

/* 10^5 CollectRequest{wait} from one client while no cycle can complete:
 * max_requests_per_client wait, every other one is refused at once with
 * the key named, and the daemon stays small. */
START_TEST(collect_waits_are_capped)
{
    enum { WAITS = 100000, CAP = 256 };
    /* in a sanitizer build, ASan's quarantine keeps every freed reply
     * resident (256 MB of them by default): that is ASan's memory, not
     * heapd's, so the daemon gets a small one */
    char asan[512];
    const char *was = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%squarantine_size_mb=1", was ? was : "",
             was && *was ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
    start_default();
    int fd = raw_stalling_mutator();
    uint64_t before = vm_rss_kib(D.pid);
    Heapd__CollectRequest cr = HEAPD__COLLECT_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    cr.wait = true;
    env.seq = 2;
    env.body_case = HEAPD__ENVELOPE__BODY_COLLECT_REQUEST;
    env.collect_request = &cr;
    uint8_t *one;
    size_t len;
    ck_assert_int_eq(frame_pack(&env, &one, &len), 0);
    struct flood f = {.fd = fd, .len = len * WAITS};
    f.bytes = malloc(f.len);
    for (size_t i = 0; i < WAITS; i++)
        memcpy(f.bytes + i * len, one, len);
    free(one);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, send_flood, &f), 0);
    for (size_t i = 0; i < WAITS - CAP; i++) {
        Heapd__Envelope *e = harness_read_env(fd, NULL);
        ck_assert_msg(e != NULL, "EOF after %zu refusals", i);
        ck_assert_msg(e->body_case == HEAPD__ENVELOPE__BODY_ERROR,
                      "answer %zu is %s, not an error", i,
                      frame_body_name(e));
        ck_assert_int_eq(e->error->code, HEAPD__ERROR_CODE__ERROR_NO_MEMORY);
        ck_assert_msg(strstr(e->error->message, "max_requests_per_client"),
                      "message: %s", e->error->message);
        heapd__envelope__free_unpacked(e, NULL);
    }
    pthread_join(t, NULL);
    free(f.bytes);
    uint64_t after = vm_rss_kib(D.pid);
#ifdef __SANITIZE_THREAD__
    /* the daemon under test is a TSan build too: its shadow memory is
     * several times what it shadows (a run here grew 52 MB) */
    const uint64_t bound_kib = 128 * 1024;
#else
    const uint64_t bound_kib = 32 * 1024;
#endif
    ck_assert_msg(after < before + bound_kib, "heapd grew from %llu KiB to "
                  "%llu KiB (bound: %llu KiB more)", (unsigned long long)before,
                  (unsigned long long)after, (unsigned long long)bound_kib);
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_ge(st.requests_refused, WAITS - CAP);
    close(fd); /* its slot goes: the cycle completes */
    harness_wait_stat(&D, NULL, clients_connected, ==, 1);
    harness_stop_clean(&D);
}
END_TEST

/* One client gets max_mutators_per_client slots and no more; another
 * client still attaches. */
START_TEST(mutators_per_client_are_capped)
{
    enum { CAP = 64 };
    start_default();
    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    Heapd__AttachRequest ar = HEAPD__ATTACH_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.body_case = HEAPD__ENVELOPE__BODY_ATTACH_REQUEST;
    env.attach_request = &ar;
    for (int i = 0; i <= CAP; i++) {
        env.seq = (uint64_t)i + 1;
        harness_send_env(fd, &env);
        Heapd__Envelope *e = harness_read_env(fd, NULL);
        ck_assert_ptr_nonnull(e);
        if (i < CAP) {
            ck_assert_msg(e->body_case == HEAPD__ENVELOPE__BODY_ATTACH_REPLY,
                          "attach %d: %s", i, frame_body_name(e));
        } else {
            ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ERROR);
            ck_assert_msg(strstr(e->error->message,
                                 "max_mutators_per_client"),
                          "message: %s", e->error->message);
        }
        heapd__envelope__free_unpacked(e, NULL);
    }
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(c, &st), 0);
    ck_assert_uint_eq(st.mutators, CAP + 1);
    heapd_detach(m);
    heapd_disconnect(c);
    close(fd);
    harness_wait_stat(&D, NULL, clients_connected, ==, 1);
    harness_stop_clean(&D);
}
END_TEST

static Suite *limits_suite(void)
{
    Suite *s = suite_create("limits");
    TCase *t = tcase_create("limits");
    tcase_add_test(t, client_that_does_not_read_is_paused);
    tcase_add_test(t, paused_client_that_dies_is_freed);
    tcase_add_test(t, connections_per_user_are_limited);
    tcase_add_test(t, connections_in_all_are_limited);
    tcase_add_test(t, closing_connection_that_never_reads_is_reaped);
    tcase_add_test(t, idle_connections_leave_the_reserve_to_the_operator);
    tcase_add_test(t, idle_connections_time_out);
    tcase_add_test(t, large_frame_before_hello_is_refused);
    tcase_add_test(t, unlisted_user_reads_stats_only);
    tcase_add_test(t, client_strings_are_logged_escaped);
    tcase_add_test(t, bad_urs_batch_flood_is_rate_limited);
    tcase_add_test(t, collect_waits_are_capped);
    tcase_add_test(t, mutators_per_client_are_capped);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(limits_suite());
}
