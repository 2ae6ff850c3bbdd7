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
#include "heapd_build.h"
#include "wire.h"
#include "check_main.h"

static struct daemon_proc D;

static void start_default(void)
{
    harness_start(&D, harness_default_config("@SOCK@", NULL));
}

/* ---- the happy path ---- */

START_TEST(connect_and_stats)
{
    start_default();
    heapd_client *c = harness_connect_ok(D.sock, 0);
    ck_assert_ptr_eq(heapd_heap_base(c), (void *)HARNESS_HEAP_BASE);
    ck_assert_uint_eq(heapd_heap_size(c), 1u << 30);
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(c, &st), 0);
    ck_assert_str_eq(st.version, HEAPD_VERSION);
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
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
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
    heapd_client *bystander = harness_connect_ok(D.sock, 0);
    int fd = harness_raw_connect(D.sock);
    uint8_t hdr[4] = {0x7f, 0xff, 0xff, 0xff};
    harness_send_bytes(fd, hdr, 4);
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
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
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                           "bad frame length");
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(bad_frame_garbage)
{
    start_default();
    heapd_client *bystander = harness_connect_ok(D.sock, 0);
    int fd = harness_raw_connect(D.sock);
    uint8_t f[4 + 16] = {0, 0, 0, 16};
    memset(f + 4, 0xff, 16);
    harness_send_bytes(fd, f, sizeof f);
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
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
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                           "truncated frame");
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

/* Garbage after a good hello on a welcomed connection. */
START_TEST(bad_frame_after_welcome)
{
    start_default();
    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    harness_send_bytes(fd, "\x00\x00\x00\x02\xff\xff", 6);
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_BAD_FRAME,
                           "undecodable");
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
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
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
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
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                           "expected hello as the first message, got "
                           "stats_request");
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(second_hello)
{
    start_default();
    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    harness_send_hello(fd, "default", PROTOCOL_VERSION,
                       HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                           "unexpected hello");
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
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
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                           "unexpected welcome");
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(unknown_client_kind)
{
    start_default();
    int fd = harness_raw_connect(D.sock);
    harness_send_hello(fd, "default", PROTOCOL_VERSION, 7);
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                           "unknown client kind 7");
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(version_mismatch)
{
    start_default();
    int fd = harness_raw_connect(D.sock);
    harness_send_hello(fd, "default", 99,
                       HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_VERSION,
                           "(protocol 99, layout 0) cannot use heapd");
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
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
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
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
    c = harness_connect_ok(D.sock, 0);
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
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
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
        heapd_client *c = harness_connect_ok(D.sock, 0);
        heapd_disconnect(c);
        _exit(0);
    }
    int st = harness_wait_pid(pid, HARNESS_WAIT_MS);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed");
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
        heapd_client *c = harness_connect_ok(D.sock, 0);
        (void)c;
        ck_assert_int_eq(write(ready[1], "r", 1), 1);
        for (;;)
            pause();
    }
    char r;
    ck_assert_int_eq(read(ready[0], &r, 1), 1);
    ck_assert_uint_eq(harness_still_serving(D.sock), 2);
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

/* May a thread of this user leave the idle class again?  (Where it may
 * not, heapd keeps its workers in the normal class throughout.) */
static bool can_leave_idle_class(void)
{
    pthread_t t;
    bool ok = false;
    ck_assert_int_eq(pthread_create(&t, NULL, leave_idle_class, &ok), 0);
    pthread_join(t, NULL);
    return ok;
}

/* The workers idle in the idle class, and move to the normal class while a
 * request waits for their cycle.  (Where this user may not leave the idle
 * class the daemon keeps them normal throughout, and so does the test.) */
START_TEST(collector_workers_idle_unless_a_cycle_is_awaited)
{
    int at_rest = can_leave_idle_class() ? SCHED_IDLE : SCHED_OTHER;

    start_default();
    wait_worker_policy(at_rest, "at rest");
    /* a mutator that never reaches a safepoint holds the next cycle at its
     * stop, so a collect asked for meanwhile waits */
    pid_t stuck = harness_fork_mutator(&D, NULL, NULL);
    pid_t waiter = fork();
    ck_assert_int_ge(waiter, 0);
    if (waiter == 0) {
        heapd_client *cc = harness_connect_ok(D.sock, HEAPD_CONNECT_CONTROL);
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

/* For the stop test: wait until every collector worker of heapd PID is
 * in the normal class, for half the harness's bound (so that heapd still
 * stops within the other half), then remove HOLD, which holds the cycle
 * the stop waits for.  Exits 0 if they were, 1 if not: a forked process,
 * while the test's own thread waits in harness_stop. */
_Noreturn static void release_once_urgent(pid_t pid, const char *hold)
{
    int64_t deadline = harness_now_ms() + harness_wait_ms() / 2;
    int n = 0, with = 0;
    while (harness_now_ms() < deadline) {
        thread_policies(pid, "heapd-gc-", SCHED_OTHER, &n, &with);
        if (n > 0 && with == n)
            break;
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    unlink(hold);
    if (n == 0 || with != n)
        fprintf(stderr, "%d of %d collector workers in the normal class "
                "while heapd's stop waited for its cycle\n", with, n);
    _exit(n > 0 && with == n ? 0 : 1);
}

static bool cycle_held(void *arg, char *seen, size_t len)
{
    heapd_stats_t st = {0};
    int rc = heapd_stats(arg, &st);
    snprintf(seen, len, "heapd_stats %d, phase %u", rc, (unsigned)st.phase);
    return rc == 0 && st.phase == 1;
}

/* A stop waits for the cycle under way (Note [Resuming clients] in
 * daemon/resume.c), so it
 * too moves the workers to the normal class: in the idle class behind
 * busy cores, a stop's sweep could take minutes (Note [Worker
 * priority]). */
START_TEST(collector_workers_urgent_while_a_stop_waits)
{
    if (!can_leave_idle_class())
        return; /* they are in the normal class throughout */

    char hold[64];
    harness_start_holding(&D, hold, sizeof hold);
    int fd = open(hold, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    /* a cycle held before it marks, which nobody waits for */
    heapd_client *cc = harness_connect_ok(D.sock, HEAPD_CONNECT_CONTROL);
    ck_assert_int_eq(heapd_request_collect(cc, 0), 0);
    harness_wait_until(cycle_held, cc, "a cycle held before it marks");
    heapd_disconnect(cc);
    wait_worker_policy(SCHED_IDLE, "with a cycle that nobody waits for");
    pid_t releaser = fork();
    ck_assert_int_ge(releaser, 0);
    if (releaser == 0)
        release_once_urgent(D.pid, hold);
    harness_stop_clean(&D);
    harness_wait_ok(releaser, "the workers' class during the stop");
    unlink(hold);
}
END_TEST

/* SIGHUP: heapd says it does not reload and goes on serving; the heap and
 * its client are untouched, and SIGTERM still stops it cleanly. */
static bool hup_logged(void *arg, char *seen, size_t n)
{
    (void)arg;
    snprintf(seen, n, "no SIGHUP line in heapd's log yet");
    return harness_log_contains(&D, "SIGHUP: heapd does not reload");
}

START_TEST(sighup_is_logged_not_fatal)
{
    harness_start_logged(&D, harness_default_config("@SOCK@", ""),
                         "heapd.log");
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    void **o = heapd_alloc(m, 0, 64);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(heapd_global_set(m, "kept", o), 0);
    ck_assert_int_eq(kill(D.pid, SIGHUP), 0);
    harness_wait_until(hup_logged, NULL, "heapd to log the SIGHUP");
    harness_still_serving(D.sock);
    harness_collect(m);
    ck_assert_ptr_eq(heapd_global_get(m, "kept"), o);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(shutdown_tells_clients)
{
    start_default();
    heapd_client *c = harness_connect_ok(D.sock, 0);
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
    heapd_client *c = harness_connect_ok(D.sock, 0);
    kill(D.pid, SIGKILL);
    harness_wait_pid(D.pid, HARNESS_WAIT_MS);
    heapd_stats_t st;
    int rc = heapd_stats(c, &st);
    ck_assert_int_eq(rc, HEAPD_ECLOSED);
    heapd_disconnect(c);
    /* a new heapd replaces the stale socket file */
    struct daemon_proc d2;
    harness_start(&d2, harness_default_config("@SOCK@", NULL));
    ck_assert_uint_eq(harness_still_serving(d2.sock), 1);
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
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
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
    ck_assert_uint_eq(harness_still_serving(d.sock), 1);
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
    heapd_client *c = harness_connect_ok(D.sock, 0);
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
    ck_assert_msg(strstr(out, "heapd " HEAPD_VERSION ", up ") &&
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
    ck_assert_msg(strstr(out, "{\"version\":\"" HEAPD_VERSION
                             "\",\"uptime_ns\":") &&
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
    heapd_client *c = harness_connect_ok(D.sock, HEAPD_CONNECT_CONTROL);
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

    heapd_client *c = harness_connect_ok(sa.sun_path, HEAPD_CONNECT_CONTROL);
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
    tcase_add_test(t, collector_workers_urgent_while_a_stop_waits);
    tcase_add_test(t, shutdown_tells_clients);
    tcase_add_test(t, sighup_is_logged_not_fatal);
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
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(daemon_suite());
}
