/* Integration tests: a real heapd on a private socket, real client
 * processes, real shared memory.  Every bad input is followed by a check
 * that the daemon still serves another client. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

static heapd_client *connect_ok(const char *sock, unsigned flags)
{
    heapd_connect_opts o = {.socket_path = sock, .flags = flags};
    heapd_client *c = NULL;
    int rc = heapd_connect(&c, &o);
    ck_assert_msg(rc == 0, "heapd_connect: %s (%s)", heapd_strerror(rc),
                  heapd_last_error());
    return c;
}

/* The daemon still works: a fresh control client gets stats, and returns
 * how many clients are connected. */
static uint32_t still_serving(const char *sock)
{
    heapd_client *c = connect_ok(sock, HEAPD_CONNECT_CONTROL);
    heapd_stats_t st;
    int rc = heapd_stats(c, &st);
    ck_assert_msg(rc == 0, "stats: %s", heapd_last_error());
    heapd_disconnect(c);
    return st.clients_connected;
}

static void start_default(void)
{
    harness_start(&D, harness_default_config("@SOCK@", NULL));
}

/* An Error reply with CODE, then EOF. */
static void expect_error_and_close(int fd, Heapd__ErrorCode code,
                                   const char *substr)
{
    Heapd__Envelope *e = harness_read_env(fd, NULL);
    ck_assert_msg(e != NULL, "expected an error frame, got EOF");
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ERROR);
    ck_assert_int_eq(e->error->code, code);
    ck_assert_msg(strstr(e->error->message, substr),
                  "error message '%s' lacks '%s'", e->error->message, substr);
    heapd__envelope__free_unpacked(e, NULL);
    ck_assert_msg(harness_wait_eof(fd), "heapd did not close the connection");
    close(fd);
}

/* ---- the happy path ---- */

START_TEST(connect_and_stats)
{
    start_default();
    heapd_client *c = connect_ok(D.sock, 0);
    ck_assert_ptr_eq(heapd_heap_base(c), (void *)HARNESS_HEAP_BASE);
    ck_assert_uint_eq(heapd_heap_size(c), 1u << 30);
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(c, &st), 0);
    ck_assert_str_eq(st.version, "0.1.0");
    ck_assert_uint_eq(st.clients_connected, 1);
    ck_assert_uint_eq(st.heap_count, 1);
    ck_assert_str_eq(st.heaps[0].name, "default");
    ck_assert_uint_eq(st.heaps[0].base, HARNESS_HEAP_BASE);
    ck_assert_uint_eq(st.heaps[0].reserved_bytes, 1u << 30);
    ck_assert_uint_eq(st.heaps[0].clients, 1);
    /* the daemon wrote the control area: at least one page is committed */
    ck_assert_uint_ge(st.heaps[0].committed_bytes, 4096);
    ck_assert_uint_lt(st.heaps[0].committed_bytes, 1u << 20); /* sparse */
    /* repeated calls on one connection: replies matched by seq */
    for (int i = 0; i < 50; i++)
        ck_assert_int_eq(heapd_stats(c, &st), 0);
    heapd_disconnect(c);
    harness_stop_clean(&D);
    ck_assert_msg(D.stopping_seen, "heapd never sent STOPPING=1");
    ck_assert_int_eq(access(D.sock, F_OK), -1); /* socket file removed */
}
END_TEST

/* Two client processes map the heap at the same address and see each
 * other's bytes: A allocates an object and roots it, B writes into it, A
 * reads B's bytes back.  Handshakes over pipes; no sleeps. */
START_TEST(two_processes_share_bytes)
{
    start_default();
    int to_a[2], from_a[2];
    ck_assert_int_eq(pipe(to_a), 0);
    ck_assert_int_eq(pipe(from_a), 0);

    pid_t a = fork();
    ck_assert_int_ge(a, 0);
    if (a == 0) {
        heapd_client *c;
        heapd_mutator *m;
        harness_attach(&D, &c, &m);
        char *o = heapd_alloc(m, 0, 128);
        ck_assert_ptr_nonnull(o);
        heapd_root_push(m, o); /* alive while B looks at it */
        snprintf(heapd_bytes(o), 64, "hello from %d", (int)getpid());
        uintptr_t where[2] = {(uintptr_t)heapd_heap_base(c), (uintptr_t)o};
        /* waiting on a pipe: hold up no collection meanwhile */
        heapd_blocking_enter(m);
        ck_assert_int_eq(write(from_a[1], where, sizeof where), sizeof where);
        char go;
        ck_assert_int_eq(read(to_a[0], &go, 1), 1); /* B has written */
        heapd_blocking_leave(m);
        /* B's reply, written into the same object */
        ck_assert_str_eq((char *)heapd_bytes(o) + 64, "ack from B");
        heapd_detach(m);
        heapd_disconnect(c);
        _exit(0);
    }
    pid_t b = fork();
    ck_assert_int_ge(b, 0);
    if (b == 0) {
        uintptr_t where[2];
        ck_assert_int_eq(read(from_a[0], where, sizeof where), sizeof where);
        heapd_client *c;
        heapd_mutator *m;
        harness_attach(&D, &c, &m);
        ck_assert_uint_eq((uintptr_t)heapd_heap_base(c), where[0]);
        void *o = (void *)where[1];
        ck_assert_uint_eq(heapd_nbytes(o), 128);
        char expect[64];
        snprintf(expect, sizeof expect, "hello from %d", (int)a);
        ck_assert_str_eq(heapd_bytes(o), expect);
        strcpy((char *)heapd_bytes(o) + 64, "ack from B");
        heapd_detach(m);
        heapd_disconnect(c);
        ck_assert_int_eq(write(to_a[1], "g", 1), 1);
        _exit(0);
    }
    harness_wait_ok(a, "client A");
    harness_wait_ok(b, "client B");
    /* both left; the daemon still serves */
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(hello_one_byte_at_a_time)
{
    start_default();
    int fd = harness_raw_connect(D.sock);
    Heapd__Hello h = HEAPD__HELLO__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    uint8_t *buf;
    size_t len;
    h.protocol_version = PROTOCOL_VERSION;
    h.heap = (char *)"default";
    env.body_case = HEAPD__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    ck_assert_int_eq(frame_pack(&env, &buf, &len), 0);
    for (size_t i = 0; i < len; i++)
        harness_send_bytes(fd, buf + i, 1);
    free(buf);
    int hfd;
    Heapd__Envelope *w = harness_read_env(fd, &hfd);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(w->body_case, HEAPD__ENVELOPE__BODY_WELCOME);
    ck_assert(w->welcome->has_fd);
    ck_assert_int_ge(hfd, 0);
    struct stat st;
    ck_assert_int_eq(fstat(hfd, &st), 0);
    ck_assert_int_eq(st.st_size, 1 << 30);
    /* sealed: a client cannot shrink the heap under the daemon */
    ck_assert_int_eq(ftruncate(hfd, 4096), -1);
    ck_assert_int_eq(errno, EPERM);
    close(hfd);
    heapd__envelope__free_unpacked(w, NULL);
    close(fd);
    harness_stop_clean(&D);
}
END_TEST

/* ---- bad frames: error reply, that connection closed, others fine ---- */

START_TEST(bad_frame_oversized)
{
    start_default();
    heapd_client *bystander = connect_ok(D.sock, 0);
    int fd = harness_raw_connect(D.sock);
    uint8_t hdr[4] = {0x7f, 0xff, 0xff, 0xff};
    harness_send_bytes(fd, hdr, 4);
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                           "bad frame length");
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(bystander, &st), 0);
    ck_assert_uint_eq(st.frames_rejected, 1);
    heapd_disconnect(bystander);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(bad_frame_zero_length)
{
    start_default();
    int fd = harness_raw_connect(D.sock);
    uint8_t hdr[4] = {0, 0, 0, 0};
    harness_send_bytes(fd, hdr, 4);
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                           "bad frame length");
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(bad_frame_garbage)
{
    start_default();
    heapd_client *bystander = connect_ok(D.sock, 0);
    int fd = harness_raw_connect(D.sock);
    uint8_t f[4 + 16] = {0, 0, 0, 16};
    memset(f + 4, 0xff, 16);
    harness_send_bytes(fd, f, sizeof f);
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                           "undecodable");
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(bystander, &st), 0);
    heapd_disconnect(bystander);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(bad_frame_truncated)
{
    start_default();
    int fd = harness_raw_connect(D.sock);
    uint8_t f[4 + 3] = {0, 0, 0, 10, 1, 2, 3}; /* 10 announced, 3 sent */
    harness_send_bytes(fd, f, sizeof f);
    ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                           "truncated frame");
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

/* Garbage after a good hello on a welcomed connection. */
START_TEST(bad_frame_after_welcome)
{
    start_default();
    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    harness_send_bytes(fd, "\x00\x00\x00\x02\xff\xff", 6);
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                           "undecodable");
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

/* A peer that connects and goes away without a word. */
START_TEST(silent_peer_and_half_hello)
{
    start_default();
    for (int i = 0; i < 20; i++) {
        int fd = harness_raw_connect(D.sock);
        if (i % 2)
            harness_send_bytes(fd, "\x00\x00", 2); /* half a header */
        close(fd);
    }
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

/* ---- bad messages ---- */

START_TEST(first_message_not_hello)
{
    start_default();
    int fd = harness_raw_connect(D.sock);
    Heapd__StatsRequest sr = HEAPD__STATS_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.body_case = HEAPD__ENVELOPE__BODY_STATS_REQUEST;
    env.stats_request = &sr;
    harness_send_env(fd, &env);
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                           "expected hello as the first message, got "
                           "stats_request");
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(second_hello)
{
    start_default();
    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    harness_send_hello(fd, "default", PROTOCOL_VERSION,
                       HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                           "unexpected hello");
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(client_sends_daemon_message)
{
    start_default();
    int fd = harness_raw_connect(D.sock);
    harness_send_hello(fd, "default", PROTOCOL_VERSION,
                       HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    Heapd__Envelope *w = harness_read_env(fd, NULL);
    heapd__envelope__free_unpacked(w, NULL);
    Heapd__Welcome wel = HEAPD__WELCOME__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.body_case = HEAPD__ENVELOPE__BODY_WELCOME;
    env.welcome = &wel;
    harness_send_env(fd, &env);
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                           "unexpected welcome");
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(unknown_client_kind)
{
    start_default();
    int fd = harness_raw_connect(D.sock);
    harness_send_hello(fd, "default", PROTOCOL_VERSION, 7);
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                           "unknown client kind 7");
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(version_mismatch)
{
    start_default();
    int fd = harness_raw_connect(D.sock);
    harness_send_hello(fd, "default", 99,
                       HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_VERSION,
                           "protocol version 99 is not supported");
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

/* ---- client-side errors: distinct codes, useful messages ---- */

START_TEST(no_such_heap)
{
    start_default();
    heapd_connect_opts o = {.socket_path = D.sock, .heap = "nope"};
    heapd_client *c = (heapd_client *)1;
    ck_assert_int_eq(heapd_connect(&c, &o), HEAPD_ENOHEAP);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(heapd_last_error(), "no heap named 'nope'") &&
                      strstr(heapd_last_error(), "[heap nope]"),
                  "message: %s", heapd_last_error());
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(no_daemon)
{
    heapd_connect_opts o = {.socket_path = "/tmp/heapd-no-such-dir/s"};
    heapd_client *c;
    ck_assert_int_eq(heapd_connect(&c, &o), HEAPD_ENODAEMON);
    ck_assert_msg(strstr(heapd_last_error(), "no heapd is listening on "
                                             "/tmp/heapd-no-such-dir/s"),
                  "message: %s", heapd_last_error());
    ck_assert_str_eq(heapd_strerror(HEAPD_ENODAEMON),
                     "no heapd is listening on the socket");
    /* $HEAPD_SOCKET is used when opts name none */
    setenv("HEAPD_SOCKET", "/tmp/heapd-no-such-dir/env", 1);
    ck_assert_int_eq(heapd_connect(&c, NULL), HEAPD_ENODAEMON);
    ck_assert_msg(strstr(heapd_last_error(), "/tmp/heapd-no-such-dir/env"),
                  "message: %s", heapd_last_error());
    unsetenv("HEAPD_SOCKET");
}
END_TEST

START_TEST(socket_path_too_long)
{
    char p[200];
    memset(p, 'a', sizeof p - 1);
    p[0] = '/';
    p[sizeof p - 1] = '\0';
    heapd_connect_opts o = {.socket_path = p};
    heapd_client *c;
    ck_assert_int_eq(heapd_connect(&c, &o), HEAPD_ESOCKPATH);
    ck_assert_msg(strstr(heapd_last_error(), "the limit is 107"), "%s",
                  heapd_last_error());
    ck_assert_int_eq(heapd_connect(NULL, &o), -EINVAL);
    o.flags = 0x80;
    ck_assert_int_eq(heapd_connect(&c, &o), -EINVAL);
}
END_TEST

START_TEST(address_range_taken)
{
    start_default();
    /* occupy one page in the middle of the heap's range */
    void *p = mmap((void *)(HARNESS_HEAP_BASE + (64u << 20)), 4096,
                   PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS |
                   MAP_FIXED_NOREPLACE, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    heapd_connect_opts o = {.socket_path = D.sock};
    heapd_client *c;
    ck_assert_int_eq(heapd_connect(&c, &o), HEAPD_EADDRTAKEN);
    ck_assert_msg(strstr(heapd_last_error(),
                         "[0x7e8000000000, 0x7e8040000000)") &&
                      strstr(heapd_last_error(), "'base' in [heap default]"),
                  "message: %s", heapd_last_error());
    munmap(p, 4096);
    /* the daemon dropped that client and serves the next */
    c = connect_ok(D.sock, 0);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(denied_user)
{
    if (getuid() != 0) {
        /* only root can become another user to be refused */
        fprintf(stderr, "denied_user: not root; cannot test refusal\n");
        return;
    }
    start_default();
    pid_t pid = fork();
    if (pid == 0) {
        ck_assert_int_eq(setgid(65534), 0);
        ck_assert_int_eq(setgroups(0, NULL), 0);
        ck_assert_int_eq(setuid(65534), 0);
        heapd_connect_opts o = {.socket_path = D.sock};
        heapd_client *c;
        int rc = heapd_connect(&c, &o);
        ck_assert_int_eq(rc, HEAPD_EDENIED);
        ck_assert_msg(strstr(heapd_last_error(), "uid 65534 gid 65534 may not "
                                                 "use heap 'default'"),
                      "message: %s", heapd_last_error());
        _exit(0);
    }
    int st = harness_wait_pid(pid, HARNESS_WAIT_MS);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed");
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(allowed_by_group)
{
    if (getuid() != 0) {
        fprintf(stderr, "allowed_by_group: not root; cannot switch users\n");
        return;
    }
    harness_start(&D, harness_default_config("@SOCK@",
                                             "allow_groups = 4242\n"));
    pid_t pid = fork();
    if (pid == 0) {
        gid_t extra = 4242;
        ck_assert_int_eq(setgid(65534), 0);
        ck_assert_int_eq(setgroups(1, &extra), 0);
        ck_assert_int_eq(setuid(65534), 0);
        heapd_client *c = connect_ok(D.sock, 0);
        heapd_disconnect(c);
        _exit(0);
    }
    int st = harness_wait_pid(pid, HARNESS_WAIT_MS);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed");
    harness_stop_clean(&D);
}
END_TEST

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
    ck_assert_uint_eq(still_serving(D.sock), 2);

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
    expect_error_and_close(extra, HEAPD__ERROR_CODE__ERROR_TOO_MANY_CONNECTIONS,
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
    expect_error_and_close(extra, HEAPD__ERROR_CODE__ERROR_TOO_MANY_CONNECTIONS,
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
        expect_error_and_close(extra,
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
    heapd_client *c = connect_ok(D.sock, HEAPD_CONNECT_CONTROL);
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
            expect_error_and_close(fds[i],
                                   HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                                   "handshake_timeout");
        heapd_client *c = connect_ok(D.sock, 0);
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
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                           "over 4096 bytes before the welcome");
    /* the same frame after a Welcome is read whole (and is garbage) */
    fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    harness_send_bytes(fd, f, sizeof f);
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                           "undecodable");
    ck_assert_uint_eq(still_serving(D.sock), 1);
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
    expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_NO_SUCH_HEAP,
                           "no\\x0aheapd: error: forged by heap");
    ck_assert_uint_eq(still_serving(D.sock), 1);
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

/* ---- dying clients and shutdown ---- */

START_TEST(client_killed)
{
    start_default();
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        heapd_client *c = connect_ok(D.sock, 0);
        (void)c;
        ck_assert_int_eq(write(ready[1], "r", 1), 1);
        for (;;)
            pause();
    }
    char r;
    ck_assert_int_eq(read(ready[0], &r, 1), 1);
    ck_assert_uint_eq(still_serving(D.sock), 2);
    kill(pid, SIGKILL);
    harness_wait_pid(pid, HARNESS_WAIT_MS);
    /* the daemon notices the close in its own time; the wait's own
     * control connection is the one left */
    harness_wait_stat(&D, NULL, clients_connected, ==, 1);
    harness_stop_clean(&D);
}
END_TEST

/* ---- the collector's scheduling (Note [Worker priority]) ---- */

/* Of PID's threads whose name starts with PREFIX: how many, and how many
 * have scheduling policy POLICY (field 41 of /proc/PID/task/TID/stat). */
static void thread_policies(pid_t pid, const char *prefix, int policy,
                            int *n, int *with)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
    *n = *with = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[sizeof dir + sizeof e->d_name + 8], buf[1024];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s/comm", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* the thread has gone */
        bool named = fgets(buf, sizeof buf, f) &&
                     strncmp(buf, prefix, strlen(prefix)) == 0;
        fclose(f);
        snprintf(path, sizeof path, "%s/%s/stat", dir, e->d_name);
        if (!named || !(f = fopen(path, "r")))
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        /* fields from the third on follow the ')' that ends the name */
        char *p = strrchr(buf, ')'), *save = NULL;
        int field = 2, pol = -1;
        for (char *tok = p ? strtok_r(p + 1, " ", &save) : NULL; tok;
             tok = strtok_r(NULL, " ", &save))
            if (++field == 41)
                pol = atoi(tok);
        (*n)++;
        if (pol == policy)
            (*with)++;
    }
    closedir(d);
}

static bool workers_have_policy(void *arg, char *seen, size_t seen_len)
{
    int policy = *(int *)arg, n, with;
    thread_policies(D.pid, "heapd-gc-", policy, &n, &with);
    snprintf(seen, seen_len, "%d of %d collector workers have it", with, n);
    return n > 0 && with == n;
}

/* Wait (bounded) until every one of the daemon's collector worker threads
 * has POLICY. */
static void wait_worker_policy(int policy, const char *when)
{
    char what[128];
    snprintf(what, sizeof what, "scheduling policy %d on every collector "
             "worker %s", policy, when);
    harness_wait_until(workers_have_policy, &policy, what);
}

static void *leave_idle_class(void *ok)
{
    struct sched_param none = {0};
    *(bool *)ok = sched_setscheduler(0, SCHED_IDLE, &none) == 0 &&
                  sched_setscheduler(0, SCHED_OTHER, &none) == 0;
    return NULL;
}

/* The workers idle in the idle class, and move to the normal class while a
 * request waits for their cycle.  (Where this user may not leave the idle
 * class the daemon keeps them normal throughout, and so does the test.) */
START_TEST(collector_workers_idle_unless_a_cycle_is_awaited)
{
    pthread_t t;
    bool can_leave = false;
    ck_assert_int_eq(pthread_create(&t, NULL, leave_idle_class, &can_leave), 0);
    pthread_join(t, NULL);
    int at_rest = can_leave ? SCHED_IDLE : SCHED_OTHER;

    start_default();
    wait_worker_policy(at_rest, "at rest");
    /* a mutator that never reaches a safepoint holds the next cycle at its
     * stop, so a collect asked for meanwhile waits */
    pid_t stuck = harness_fork_mutator(&D, NULL, NULL);
    pid_t waiter = fork();
    ck_assert_int_ge(waiter, 0);
    if (waiter == 0) {
        heapd_client *cc = connect_ok(D.sock, HEAPD_CONNECT_CONTROL);
        _exit(heapd_request_collect(cc, HEAPD_COLLECT_WAIT) == 0 ? 0 : 1);
    }
    wait_worker_policy(SCHED_OTHER, "while a collect waits");
    kill(stuck, SIGKILL);
    harness_wait_pid(stuck, HARNESS_WAIT_MS);
    harness_wait_ok(waiter, "the collect");
    wait_worker_policy(at_rest, "once nothing waits");
    harness_stop_clean(&D);
}
END_TEST

START_TEST(shutdown_tells_clients)
{
    start_default();
    heapd_client *c = connect_ok(D.sock, 0);
    harness_stop_clean(&D);
    heapd_stats_t st;
    int rc = heapd_stats(c, &st);
    ck_assert_msg(rc == HEAPD_ESHUTDOWN || rc == HEAPD_ECLOSED,
                  "stats after shutdown: %d %s", rc, heapd_last_error());
    heapd_disconnect(c);
}
END_TEST

/* The client agent fails waiting calls when the daemon dies under it. */
START_TEST(daemon_killed_under_client)
{
    start_default();
    heapd_client *c = connect_ok(D.sock, 0);
    kill(D.pid, SIGKILL);
    harness_wait_pid(D.pid, HARNESS_WAIT_MS);
    heapd_stats_t st;
    int rc = heapd_stats(c, &st);
    ck_assert_int_eq(rc, HEAPD_ECLOSED);
    heapd_disconnect(c);
    /* a new heapd replaces the stale socket file */
    struct daemon_proc d2;
    harness_start(&d2, harness_default_config("@SOCK@", NULL));
    ck_assert_uint_eq(still_serving(d2.sock), 1);
    int s = harness_stop(&d2);
    ck_assert(WIFEXITED(s) && WEXITSTATUS(s) == 0);
    unlink(D.sock);
    rmdir(D.dir);
}
END_TEST

START_TEST(second_daemon_same_socket)
{
    start_default();
    char out[4096];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' -c '%s' --foreground 2>&1",
             harness_bin("HEAPD_BIN"), D.conf);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 0, "second heapd ran");
    /* it fails on the heap range or the socket, whichever first: the heap
     * is mapped per process, so it is the socket */
    ck_assert_msg(strstr(out, "another heapd is already listening on"),
                  "output: %s", out);
    ck_assert_uint_eq(still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

static bool file_gone(void *path, char *seen, size_t seen_len)
{
    snprintf(seen, seen_len, "%s exists", (const char *)path);
    return access(path, F_OK) != 0;
}

START_TEST(daemonize_mode)
{
    struct daemon_proc d;
    char text[4096];
    /* reuse harness pieces by hand: start without --foreground */
    memset(&d, 0, sizeof d);
    harness_tmpdir(d.dir, sizeof d.dir);
    snprintf(d.sock, sizeof d.sock, "%s/s", d.dir);
    snprintf(d.conf, sizeof d.conf, "%s/heapd.conf", d.dir);
    snprintf(text, sizeof text, "%s", harness_default_config(d.sock, NULL));
    FILE *f = fopen(d.conf, "w");
    fputs(text, f);
    fclose(f);
    snprintf(d.notify_path, sizeof d.notify_path, "%s/notify", d.dir);
    d.notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, d.notify_path);
    ck_assert_int_eq(bind(d.notify_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    char *argv[] = {"heapd", "-c", d.conf, NULL};
    pid_t parent = harness_spawn(&d, argv, -1);
    /* the parent exits 0 only once the child is ready */
    int st = harness_wait_pid(parent, HARNESS_WAIT_MS);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
    ck_assert_uint_eq(still_serving(d.sock), 1);
    char got[512];
    ck_assert(harness_wait_notify(&d, "MAINPID=", got, sizeof got));
    pid_t child = atoi(strstr(got, "MAINPID=") + 8);
    ck_assert_int_gt(child, 0);
    ck_assert_int_ne(child, parent);
    ck_assert_int_eq(kill(child, SIGTERM), 0);
    ck_assert(harness_wait_notify(&d, "STOPPING=1", NULL, 0));
    /* not our child: wait for the socket file to go */
    harness_wait_until(file_gone, d.sock, "the daemonized heapd to remove "
                       "its socket file at SIGTERM");
    close(d.notify_fd);
    unlink(d.notify_path);
    unlink(d.conf);
    rmdir(d.dir);
}
END_TEST

START_TEST(bad_config_exits_nonzero)
{
    char dir[64], conf[128], cmd[512], out[4096];
    harness_tmpdir(dir, sizeof dir);
    snprintf(conf, sizeof conf, "%s/bad.conf", dir);
    FILE *f = fopen(conf, "w");
    fputs("[daemon]\ngc_threads = 0\n[heap default]\nbase = 0x7e8000000000\n"
          "max_size = 1G\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' -c '%s' --foreground 2>&1",
             harness_bin("HEAPD_BIN"), conf);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    char expect[256];
    snprintf(expect, sizeof expect, "heapd:%s:2: ", conf);
    ck_assert_msg(strstr(out, expect), "output: %s", out);
    /* --check-config reports the same and exits non-zero */
    snprintf(cmd, sizeof cmd, "'%s' -c '%s' --check-config 2>&1",
             harness_bin("HEAPD_BIN"), conf);
    st = harness_run(cmd, out, sizeof out);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    ck_assert_msg(strstr(out, expect), "output: %s", out);
    unlink(conf);
    rmdir(dir);
}
END_TEST

START_TEST(check_config_shipped)
{
    char cmd[512], out[4096];
    const char *root = getenv("HEAPD_SOURCE_ROOT");
    ck_assert_ptr_nonnull(root);
    snprintf(cmd, sizeof cmd, "'%s' -c '%s/heapd.conf' --check-config 2>&1",
             harness_bin("HEAPD_BIN"), root);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "output: %s", out);
    ck_assert_msg(strstr(out, "configuration OK"), "output: %s", out);
    snprintf(cmd, sizeof cmd, "'%s' --bogus 2>&1", harness_bin("HEAPD_BIN"));
    st = harness_run(cmd, out, sizeof out);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    ck_assert_msg(strstr(out, "usage: heapd"), "output: %s", out);
}
END_TEST

/* The daemon cannot map a heap whose range is taken in its own process.
 * [0x7f0000000000, 0x7ffffffe0000) (1 TiB less one segment, the most the
 * config allows) always overlaps the main thread's stack, which sits within
 * 16 GiB of the top of user space however it is randomised, so the mapping
 * fails deterministically. */
START_TEST(heap_map_failure_reported)
{
    char dir[64], conf[128], cmd[512], out[4096];
    harness_tmpdir(dir, sizeof dir);
    snprintf(conf, sizeof conf, "%s/c.conf", dir);
    FILE *f = fopen(conf, "w");
    fprintf(f, "[daemon]\nsocket = %s/s\n[heap default]\n"
               "base = 0x7f0000000000\nmax_size = 1099511496704\n", dir);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' -c '%s' --foreground 2>&1",
             harness_bin("HEAPD_BIN"), conf);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %x: %s", st,
                  out);
    ck_assert_msg(strstr(out, "heap 'default': cannot map [0x7f0000000000, ") &&
                      strstr(out, "choose another 'base' in [heap default]"),
                  "output: %s", out);
    unlink(conf);
    rmdir(dir);
}
END_TEST

/* Run heapctl ARGS against a daemon with one mutator client connected,
 * with the socket in --socket or (SOCK_IN_ENV) in $HEAPD_SOCKET; it must
 * exit WANT_STATUS.  OUT gets its output. */
static void heapctl_with_a_client(bool sock_in_env, const char *args,
                                  int want_status, char *out, size_t outlen)
{
    char cmd[512];
    start_default();
    heapd_client *c = connect_ok(D.sock, 0);
    if (sock_in_env)
        snprintf(cmd, sizeof cmd, "HEAPD_SOCKET='%s' '%s' %s 2>&1", D.sock,
                 harness_bin("HEAPCTL_BIN"), args);
    else
        snprintf(cmd, sizeof cmd, "'%s' --socket '%s' %s 2>&1",
                 harness_bin("HEAPCTL_BIN"), D.sock, args);
    int st = harness_run(cmd, out, outlen);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == want_status,
                  "status 0x%x, output: %s", st, out);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}

START_TEST(heapctl_stats_table)
{
    char out[8192];
    heapctl_with_a_client(false, "stats", 0, out, sizeof out);
    ck_assert_msg(strstr(out, "heapd 0.1.0, up ") &&
                      strstr(out, "clients connected: 2") &&
                      strstr(out, "default          0x7e8000000000"),
                  "output: %s", out);
}
END_TEST

/* JSON, with the socket from $HEAPD_SOCKET */
START_TEST(heapctl_stats_json)
{
    char out[8192];
    heapctl_with_a_client(true, "stats --json", 0, out, sizeof out);
    ck_assert_msg(strstr(out, "{\"version\":\"0.1.0\",\"uptime_ns\":") &&
                      strstr(out, "\"heaps\":[{\"name\":\"default\","
                                  "\"base\":\"0x7e8000000000\","
                                  "\"reserved_bytes\":1073741824,") &&
                      strstr(out, "\"clients\":1,\"mutators\":0,"),
                  "output: %s", out);
}
END_TEST

START_TEST(heapctl_unknown_command)
{
    char out[8192];
    heapctl_with_a_client(false, "frobnicate", 2, out, sizeof out);
    ck_assert_msg(strstr(out, "unknown command 'frobnicate'"), "%s", out);
}
END_TEST

START_TEST(heapctl_without_daemon)
{
    char dir[64], cmd[512], out[4096];
    harness_tmpdir(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s/s' stats 2>&1",
             harness_bin("HEAPCTL_BIN"), dir);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status 0x%x: %s",
                  st, out);
    ck_assert_msg(strstr(out, "heapctl: no heapd is listening on"), "%s", out);
    rmdir(dir);
}
END_TEST

/* Note [Counter table]: the daemon sends one entry per line of the table,
 * heapd_stats copies every one (heaps[0]'s to the top level too), counters
 * never go down, and heapctl prints every name. */
static const struct {
    const char *name;
    heapd_counter_kind kind;
} table_lines[] = {
#define TABLE_LINE_(name, type, kind, unit, source, help) \
    {#name, HEAPD_KIND_##kind},
    HEAPD_HEAP_COUNTERS(TABLE_LINE_)
#undef TABLE_LINE_
};

static void table_values(const heapd_heap_stats *h, uint64_t *v)
{
#define TABLE_VALUE_(name, type, kind, unit, source, help) \
    v[HEAPD_HEAP_COUNTER_##name] = h->name;
    HEAPD_HEAP_COUNTERS(TABLE_VALUE_)
#undef TABLE_VALUE_
}

static void table_top_values(const heapd_stats_t *st, uint64_t *v)
{
#define TABLE_TOP_(name, type, kind, unit, source, help) \
    v[HEAPD_HEAP_COUNTER_##name] = st->name;
    HEAPD_HEAP_COUNTERS(TABLE_TOP_)
#undef TABLE_TOP_
}

START_TEST(every_counter_reaches_the_client)
{
    uint64_t before[HEAPD_HEAP_COUNTERS_N], after[HEAPD_HEAP_COUNTERS_N];
    uint64_t top[HEAPD_HEAP_COUNTERS_N];
    char cmd[512], out[16384], key[80];
    start_default();

    /* the wire: exactly one entry per line */
    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    Heapd__StatsRequest sr = HEAPD__STATS_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.seq = 1;
    env.body_case = HEAPD__ENVELOPE__BODY_STATS_REQUEST;
    env.stats_request = &sr;
    harness_send_env(fd, &env);
    Heapd__Envelope *rep = harness_read_env(fd, NULL);
    ck_assert_int_eq(rep->body_case, HEAPD__ENVELOPE__BODY_STATS_REPLY);
    ck_assert_uint_eq(rep->stats_reply->n_heaps, 1);
    ck_assert_uint_eq(rep->stats_reply->heaps[0]->n_counters,
                      HEAPD_HEAP_COUNTERS_N);
    heapd__envelope__free_unpacked(rep, NULL);
    close(fd);

    /* the copies, and a cycle later no counter has gone down */
    heapd_client *c = connect_ok(D.sock, HEAPD_CONNECT_CONTROL);
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(c, &st), 0);
    table_values(&st.heaps[0], before);
    table_top_values(&st, top);
    for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N; k++)
        ck_assert_msg(top[k] == before[k], "%s: %llu at top level, %llu in "
                      "heaps[0]", table_lines[k].name,
                      (unsigned long long)top[k],
                      (unsigned long long)before[k]);
    ck_assert_int_eq(heapd_request_collect(c, HEAPD_COLLECT_WAIT), 0);
    ck_assert_int_eq(heapd_stats(c, &st), 0);
    table_values(&st.heaps[0], after);
    ck_assert_uint_gt(after[HEAPD_HEAP_COUNTER_cycles_completed],
                      before[HEAPD_HEAP_COUNTER_cycles_completed]);
    for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N; k++)
        if (table_lines[k].kind == HEAPD_KIND_COUNTER)
            ck_assert_msg(after[k] >= before[k], "counter %s went down: "
                          "%llu, then %llu", table_lines[k].name,
                          (unsigned long long)before[k],
                          (unsigned long long)after[k]);
    heapd_disconnect(c);

    /* heapctl: every name, in JSON and in text */
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' stats --json 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    int rc = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "output: %s", out);
    for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N; k++) {
        snprintf(key, sizeof key, "\"%s\":", table_lines[k].name);
        ck_assert_msg(strstr(out, key), "no %s in: %s", key, out);
    }
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' stats 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    rc = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "output: %s", out);
    for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N; k++) {
        snprintf(key, sizeof key, "\n  %s ", table_lines[k].name);
        ck_assert_msg(strstr(out, key), "no '%s' line in: %s",
                      table_lines[k].name, out);
    }
    harness_stop_clean(&D);
}
END_TEST

/* A daemon of the same protocol version with another table (Note
 * [Counter table]: append-only): heapd_stats reads as many entries as
 * both know and takes the others as 0.  The daemon here is this thread,
 * answering one control client: heap 0 with more entries than the table,
 * heap 1 with fewer. */
#define SHORT_COUNTERS 3
struct table_peer {
    int listen_fd;
    const char *failed;    /* what went wrong, NULL if nothing */
};

static void *table_peer_serve(void *arg)
{
    struct table_peer *p = arg;
    uint64_t long_v[HEAPD_HEAP_COUNTERS_N + 2], short_v[SHORT_COUNTERS];
    Heapd__Envelope *in = NULL;
    int fd = accept(p->listen_fd, NULL, NULL);

    p->failed = "accept";
    if (fd < 0)
        return NULL;
    p->failed = "no hello";
    if (!(in = harness_read_env(fd, NULL)) ||
        in->body_case != HEAPD__ENVELOPE__BODY_HELLO)
        goto out;
    heapd__envelope__free_unpacked(in, NULL);
    Heapd__Welcome w = HEAPD__WELCOME__INIT;
    Heapd__Envelope e = HEAPD__ENVELOPE__INIT;
    w.protocol_version = PROTOCOL_VERSION;
    w.heap = (char *)"default";
    e.body_case = HEAPD__ENVELOPE__BODY_WELCOME;
    e.welcome = &w;
    harness_send_env(fd, &e);
    p->failed = "no stats request";
    if (!(in = harness_read_env(fd, NULL)) ||
        in->body_case != HEAPD__ENVELOPE__BODY_STATS_REQUEST)
        goto out;
    for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N + 2; k++)
        long_v[k] = 1000 + k;
    for (size_t k = 0; k < SHORT_COUNTERS; k++)
        short_v[k] = 2000 + k;
    Heapd__HeapStats h0 = HEAPD__HEAP_STATS__INIT, h1 = HEAPD__HEAP_STATS__INIT;
    Heapd__HeapStats *hs[2] = {&h0, &h1};
    Heapd__StatsReply r = HEAPD__STATS_REPLY__INIT;
    h0.name = (char *)"long";
    h0.n_counters = HEAPD_HEAP_COUNTERS_N + 2;
    h0.counters = long_v;
    h1.name = (char *)"short";
    h1.n_counters = SHORT_COUNTERS;
    h1.counters = short_v;
    r.version = (char *)"peer";
    r.n_heaps = 2;
    r.heaps = hs;
    e.seq = in->seq;
    e.body_case = HEAPD__ENVELOPE__BODY_STATS_REPLY;
    e.stats_reply = &r;
    harness_send_env(fd, &e);
    heapd__envelope__free_unpacked(in, NULL);
    p->failed = "the client sent more than a stats request";
    if ((in = harness_read_env(fd, NULL)) != NULL)
        goto out;
    p->failed = NULL;
out:
    if (in)
        heapd__envelope__free_unpacked(in, NULL);
    close(fd);
    return NULL;
}

START_TEST(counter_tables_of_another_length)
{
    struct table_peer p = {.failed = NULL};
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    uint64_t v[HEAPD_HEAP_COUNTERS_N];
    char dir[64];
    pthread_t t;

    harness_tmpdir(dir, sizeof dir);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/peer.sock", dir);
    p.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(p.listen_fd, 0);
    ck_assert_int_eq(bind(p.listen_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(p.listen_fd, 1), 0);
    ck_assert_int_eq(pthread_create(&t, NULL, table_peer_serve, &p), 0);

    heapd_client *c = connect_ok(sa.sun_path, HEAPD_CONNECT_CONTROL);
    heapd_stats_t st;
    int rc = heapd_stats(c, &st);
    ck_assert_msg(rc == 0, "stats: %s", heapd_last_error());
    heapd_disconnect(c);
    pthread_join(t, NULL);
    ck_assert_msg(p.failed == NULL, "the peer: %s", p.failed);

    ck_assert_uint_eq(st.heap_count, 2);
    table_values(&st.heaps[0], v);
    for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N; k++)
        ck_assert_msg(v[k] == 1000 + k, "long %s: %llu",
                      table_lines[k].name, (unsigned long long)v[k]);
    table_values(&st.heaps[1], v);
    for (size_t k = 0; k < HEAPD_HEAP_COUNTERS_N; k++)
        ck_assert_msg(v[k] == (k < SHORT_COUNTERS ? 2000 + k : 0),
                      "short %s: %llu", table_lines[k].name,
                      (unsigned long long)v[k]);
    close(p.listen_fd);
    unlink(sa.sun_path);
    rmdir(dir);
}
END_TEST

static Suite *daemon_suite(void)
{
    Suite *s = suite_create("daemon");
    TCase *t = tcase_create("integration");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, connect_and_stats);
    tcase_add_test(t, two_processes_share_bytes);
    tcase_add_test(t, hello_one_byte_at_a_time);
    tcase_add_test(t, bad_frame_oversized);
    tcase_add_test(t, bad_frame_zero_length);
    tcase_add_test(t, bad_frame_garbage);
    tcase_add_test(t, bad_frame_truncated);
    tcase_add_test(t, bad_frame_after_welcome);
    tcase_add_test(t, silent_peer_and_half_hello);
    tcase_add_test(t, first_message_not_hello);
    tcase_add_test(t, second_hello);
    tcase_add_test(t, client_sends_daemon_message);
    tcase_add_test(t, unknown_client_kind);
    tcase_add_test(t, version_mismatch);
    tcase_add_test(t, no_such_heap);
    tcase_add_test(t, no_daemon);
    tcase_add_test(t, socket_path_too_long);
    tcase_add_test(t, address_range_taken);
    tcase_add_test(t, denied_user);
    tcase_add_test(t, allowed_by_group);
    tcase_add_test(t, client_killed);
    tcase_add_test(t, collector_workers_idle_unless_a_cycle_is_awaited);
    tcase_add_test(t, shutdown_tells_clients);
    tcase_add_test(t, daemon_killed_under_client);
    tcase_add_test(t, second_daemon_same_socket);
    tcase_add_test(t, daemonize_mode);
    tcase_add_test(t, bad_config_exits_nonzero);
    tcase_add_test(t, check_config_shipped);
    tcase_add_test(t, heap_map_failure_reported);
    tcase_add_test(t, heapctl_stats_table);
    tcase_add_test(t, heapctl_stats_json);
    tcase_add_test(t, heapctl_unknown_command);
    tcase_add_test(t, heapctl_without_daemon);
    tcase_add_test(t, every_counter_reaches_the_client);
    tcase_add_test(t, counter_tables_of_another_length);
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
    return check_main(daemon_suite());
}
