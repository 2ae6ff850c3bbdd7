/* systemd integration: the unit files verify cleanly, heapd serves a
 * client on a socket passed by socket activation (sd_listen_fds), and the
 * harness plays systemd's fd store as sd_notify(3) describes it (Note
 * [Harness file-descriptor store]). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "check_main.h"

/* Copy a built unit into DIR, pointing ExecStart at the built heapd. */
static void install_unit(const char *dir, const char *name)
{
    char src[512], dst[512], line[1024];
    snprintf(src, sizeof src, "%s/systemd/%s", getenv("HEAPD_BUILD_ROOT"),
             name);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    FILE *in = fopen(src, "r"), *out = fopen(dst, "w");
    ck_assert_msg(in && out, "cannot copy %s to %s", src, dst);
    while (fgets(line, sizeof line, in)) {
        if (strncmp(line, "ExecStart=", 10) == 0)
            fprintf(out, "ExecStart=%s -c %s/heapd.conf --foreground\n",
                    harness_bin("HEAPD_BIN"), getenv("HEAPD_SOURCE_ROOT"));
        else
            fputs(line, out);
    }
    fclose(in);
    fclose(out);
}

START_TEST(units_verify)
{
    char dir[64], cmd[1024], out[8192];
    ck_assert_msg(access("/usr/bin/systemd-analyze", X_OK) == 0,
                  "systemd-analyze is missing: apt-get install systemd");
    harness_tmpdir(dir, sizeof dir);
    install_unit(dir, "heapd.service");
    install_unit(dir, "heapd.socket");
    snprintf(cmd, sizeof cmd,
             "cd %s && SYSTEMD_LOG_COLOR=0 systemd-analyze verify --man=no "
             "%s/heapd.socket %s/heapd.service 2>&1", dir, dir, dir);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "systemd-analyze verify failed:\n%s", out);
    /* unknown or misspelt keys are only warnings: refuse them too */
    ck_assert_msg(!strstr(out, "ignoring") && !strstr(out, "Unknown"),
                  "systemd-analyze warned:\n%s", out);

    /* the check itself can fail: a broken copy is refused */
    snprintf(cmd, sizeof cmd,
             "cd %s && sed -i 's/^Type=notify/Type=notiffy/' heapd.service && "
             "systemd-analyze verify --man=no %s/heapd.service 2>&1", dir, dir);
    harness_run(cmd, out, sizeof out);
    ck_assert_msg(strstr(out, "notiffy"), "broken unit not reported:\n%s", out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    harness_run(cmd, NULL, 0);
}
END_TEST

START_TEST(unit_hardening_present)
{
    char path[512], text[8192];
    snprintf(path, sizeof path, "%s/systemd/heapd.service",
             getenv("HEAPD_BUILD_ROOT"));
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    static const char *const keys[] = {
        "Type=notify\n", "RuntimeDirectory=heapd\n",
        "RuntimeDirectoryPreserve=yes\n", "NoNewPrivileges=yes\n",
        "ProtectSystem=strict\n", "ProtectHome=yes\n", "PrivateTmp=yes\n",
        /* IP sockets for metrics_listen only (heapd.conf(5)) */
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n",
        "MemoryDenyWriteExecute=yes\n",
        "LockPersonality=yes\n", "RestrictRealtime=yes\n",
        "SystemCallArchitectures=native\n",
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(strstr(text, keys[i]), "heapd.service lacks %s",
                      keys[i]);
}
END_TEST

static bool file_exists(void *path, char *seen, size_t seen_len)
{
    snprintf(seen, seen_len, "no %s", (const char *)path);
    return access(path, F_OK) == 0;
}

struct activated_connect {
    const char *sock;
    heapd_client *c;
    int rc;
    char error[256];
};

static bool connect_not_refused(void *arg, char *seen, size_t seen_len)
{
    struct activated_connect *ac = arg;
    heapd_connect_opts o = {.socket_path = ac->sock};
    ac->rc = heapd_connect(&ac->c, &o);
    snprintf(ac->error, sizeof ac->error, "%s", heapd_last_error());
    snprintf(seen, seen_len, "%s", ac->error);
    return ac->rc != HEAPD_ENODAEMON;
}

/* systemd-socket-activate binds the socket and execs heapd on the first
 * connection with LISTEN_FDS=1; heapd must serve on that fd. */
START_TEST(socket_activation)
{
    char dir[64], sock[108], conf[128];
    ck_assert_msg(access("/usr/bin/systemd-socket-activate", X_OK) == 0,
                  "systemd-socket-activate is missing: apt-get install "
                  "systemd");
    harness_tmpdir(dir, sizeof dir);
    snprintf(sock, sizeof sock, "%s/activated.sock", dir);
    snprintf(conf, sizeof conf, "%s/heapd.conf", dir);
    /* the config names another socket: the passed one must win */
    FILE *f = fopen(conf, "w");
    fputs(harness_default_config("/nonexistent-dir/never.sock", NULL), f);
    fclose(f);

    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* -l binds before exec; we learn it is bound when the socket file
         * exists, which the parent waits for below */
        execl("/usr/bin/systemd-socket-activate", "systemd-socket-activate",
              "-l", sock, harness_bin("HEAPD_BIN"), "-c", conf, "--foreground",
              (char *)NULL);
        _exit(127);
    }
    harness_wait_until(file_exists, sock,
                       "systemd-socket-activate to bind the socket");

    /* the file appears at bind(), a moment before listen(): retry a
     * refused connect */
    struct activated_connect ac = {.sock = sock};
    harness_wait_until(connect_not_refused, &ac,
                       "systemd-socket-activate to listen on the socket");
    heapd_client *c = ac.c;
    ck_assert_msg(ac.rc == 0, "connect via activated socket: %s",
                  ac.error);
    ck_assert_ptr_eq(heapd_heap_base(c), (void *)HARNESS_HEAP_BASE);
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(c, &st), 0);
    ck_assert_uint_eq(st.heap_count, 1);
    heapd_disconnect(c);

    kill(pid, SIGTERM);
    int s = harness_wait_pid(pid, HARNESS_WAIT_MS);
    ck_assert_msg(WIFEXITED(s) && WEXITSTATUS(s) == 0,
                  "heapd exited with status 0x%x", s);
    /* the activated socket file belongs to systemd: heapd leaves it */
    ck_assert_int_eq(access(sock, F_OK), 0);
    unlink(sock);
    unlink(conf);
    rmdir(dir);
}
END_TEST

/* ---- the harness's fd store (Note [Harness file-descriptor store]) ---- */

static struct daemon_proc D;

/* Send TEXT and N fds to D's notify socket, as sd_pid_notify_with_fds
 * does: one datagram, the fds as SCM_RIGHTS. */
static void send_notify(const struct daemon_proc *d, const char *text,
                        const int *fds, int n)
{
    union {
        struct cmsghdr align;
        char b[CMSG_SPACE(sizeof(int) * 8)];
    } ctl;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct iovec iov = {.iov_base = (void *)text, .iov_len = strlen(text)};
    struct msghdr mh = {.msg_name = &sa, .msg_namelen = sizeof sa,
                        .msg_iov = &iov, .msg_iovlen = 1};
    ck_assert_int_le(n, 8);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", d->notify_path);
    if (n > 0) {
        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.b;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n);
    }
    /* one socket for every send, kept open: the harness's thread may
     * take a datagram's fds while a fresh sender would still hold the
     * lowest free number, and restart_hands_the_store_over counts on
     * where they land (Note [Harness file-descriptor store]) */
    static int s = -1;
    if (s < 0)
        s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(s, 0);
    ck_assert_msg(sendmsg(s, &mh, MSG_NOSIGNAL) == (ssize_t)iov.iov_len,
                  "send to %s: %s", d->notify_path, strerror(errno));
}

/* A memfd holding TEXT, its offset at the end (as a writer leaves it). */
static int memfd_with(const char *text)
{
    int fd = memfd_create(text, MFD_CLOEXEC);
    ck_assert_msg(fd >= 0, "memfd_create: %s", strerror(errno));
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    return fd;
}

static void expect_holds(int fd, const char *text)
{
    char buf[64] = "";
    ck_assert_msg(fd >= 0, "no fd stored where %s was expected", text);
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    ck_assert_msg(n == (ssize_t)strlen(text) && memcmp(buf, text, n) == 0,
                  "the stored fd holds \"%.*s\", not \"%s\"",
                  (int)(n > 0 ? n : 0), buf, text);
}

/* The harness closed its copy of pipe end W (our own closed): the read
 * end R sees EOF at once, not a block. */
static void expect_closed_by_harness(int r, const char *what)
{
    struct pollfd p = {.fd = r, .events = POLLIN};
    char c;
    ck_assert_msg(poll(&p, 1, 0) == 1 && read(r, &c, 1) == 0,
                  "the harness still holds %s", what);
    close(r);
}

/* heapd keeps its own heap's memfds (its live table sealed once it
 * stopped) in the store (Note [Heaps across restarts] in daemon/fdstore.c): forget them,
 * as its service manager would on `systemctl clean --what=fdstore`, so
 * that a test of the store itself sees only its own. */
static void forget_heapds_own(void)
{
    static const char *const kinds[] = {"heap", "page", "table"};
    for (int k = 0; k < 3; k++) {
        char msg[128];
        snprintf(msg, sizeof msg, "FDSTOREREMOVE=1\nFDNAME=heapd.%s.default",
                 kinds[k]);
        send_notify(&D, msg, NULL, 0);
    }
    harness_drain_notify(&D);
}

/* What sd_notify(3) says the store does: FDSTORE=1 keeps fds under their
 * FDNAME= (or "stored"), once per open file; FDSTOREREMOVE=1 drops a
 * name's fds; other fds are closed; the lines are logged; harness_stop
 * keeps the store and the private dir for a restart. */
START_TEST(fdstore_keeps_and_drops)
{
    int a = memfd_with("alpha"), b = memfd_with("beta");
    int p1[2], p2[2];
    ck_assert_int_eq(pipe2(p1, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(p2, O_CLOEXEC), 0);
    harness_start(&D, harness_default_config("@SOCK@", NULL));
    ck_assert_int_eq(harness_stored(&D, "heapd.heap.default"), 1);
    ck_assert_int_eq(harness_stored(&D, "heapd.page.default"), 1);
    ck_assert_int_eq(harness_stored(&D, "heapd.table.default"), 1);
    forget_heapds_own();
    ck_assert_int_eq(D.nstored, 0);
    ck_assert(harness_notified(&D, "READY=1"));

    send_notify(&D, "FDSTORE=1\nFDNAME=heapd.heap.x", &a, 1);
    harness_drain_notify(&D);
    ck_assert_int_eq(harness_stored(&D, "heapd.heap.x"), 1);
    expect_holds(harness_stored_fd(&D, "heapd.heap.x"), "alpha");

    /* the same open file again, also through a dup, is not stored twice */
    int a2 = dup(a);
    send_notify(&D, "FDSTORE=1\nFDNAME=heapd.heap.x", &a, 1);
    send_notify(&D, "FDSTORE=1\nFDNAME=heapd.page.x", &a2, 1);
    close(a2);
    /* no name: "stored"; two fds in one datagram, one a pipe's end */
    int two[2] = {b, p1[1]};
    send_notify(&D, "FDSTORE=1", two, 2);
    /* fds without FDSTORE=1 are closed */
    send_notify(&D, "STATUS=not a store", &p2[1], 1);
    harness_drain_notify(&D);
    close(p2[1]);
    close(p1[1]);
    expect_closed_by_harness(p2[0], "an fd sent without FDSTORE=1");
    ck_assert_int_eq(harness_stored(&D, "heapd.heap.x"), 1);
    ck_assert_int_eq(harness_stored(&D, "heapd.page.x"), 0);
    ck_assert_int_eq(harness_stored(&D, "stored"), 2);
    expect_holds(harness_stored_fd(&D, "stored"), "beta");
    ck_assert_int_eq(D.nstored, 3);
    ck_assert(harness_notified(&D, "STATUS=not a store"));

    /* FDSTOREREMOVE=1 closes every fd of its name, and only those */
    send_notify(&D, "FDSTOREREMOVE=1\nFDNAME=stored", NULL, 0);
    harness_drain_notify(&D);
    ck_assert_int_eq(harness_stored(&D, "stored"), 0);
    ck_assert_int_eq(harness_stored_fd(&D, "stored"), -1);
    ck_assert_int_eq(harness_stored(&D, "heapd.heap.x"), 1);
    expect_closed_by_harness(p1[0], "an fd removed by FDSTOREREMOVE=1");

    /* stopped, the store and the private dir stay for a restart */
    harness_stop_clean(&D); /* it stores nothing at a stop: its table
                               was stored at its start */
    ck_assert_int_eq(harness_stored(&D, "heapd.table.default"), 0);
    ck_assert_int_eq(harness_stored(&D, "heapd.state.default"), 0);
    ck_assert(D.stopping_seen);
    ck_assert(harness_notified(&D, "STOPPING=1"));
    ck_assert_int_eq(harness_stored(&D, "heapd.heap.x"), 1);
    expect_holds(harness_stored_fd(&D, "heapd.heap.x"), "alpha");
    ck_assert_int_eq(access(D.notify_path, F_OK), 0);
    harness_forget_store(&D);
    ck_assert_int_eq(D.nstored, 0);
    ck_assert_msg(access(D.dir, F_OK) != 0,
                  "harness_forget_store left %s", D.dir);
    close(a);
    close(b);
}
END_TEST

#define HANDED 6

/* harness_restart_with hands the store over as systemd does: stored fd i
 * at 3 + i, LISTEN_FDS, LISTEN_FDNAMES in store order, LISTEN_PID the new
 * process's own pid.  The harness's copies get falling fd numbers, some in
 * the range 3.. they move to: a dup2 of each in order would overwrite a
 * later one, and a dup2 of one onto its own number would leave it
 * close-on-exec. */
START_TEST(restart_hands_the_store_over)
{
    char names[HANDED][32], text[HANDED][16];
    int held[HANDED], fd[HANDED];
    harness_start(&D, harness_default_config("@SOCK@", NULL));
    forget_heapds_own();
    for (int i = 0; i < HANDED; i++) {
        held[i] = dup(STDIN_FILENO); /* keep the low numbers taken */
        ck_assert_int_ge(held[i], 0);
        snprintf(names[i], sizeof names[i], "heapd.heap.h%d", i);
        snprintf(text[i], sizeof text[i], "marker-%d", i);
        fd[i] = memfd_with(text[i]);
    }
    for (int i = 0; i < HANDED; i++) {
        char msg[256];
        /* the harness's copy takes the lowest free number: each lower */
        close(held[HANDED - 1 - i]);
        snprintf(msg, sizeof msg, "FDSTORE=1\nFDNAME=%s", names[i]);
        send_notify(&D, msg, &fd[i], 1);
        harness_drain_notify(&D);
        ck_assert_int_eq(harness_stored_fd(&D, names[i]),
                         held[HANDED - 1 - i]);
    }
    for (int i = 0; i < HANDED; i++)
        close(fd[i]);
    ck_assert_int_eq(D.nstored, HANDED);
    harness_stop_clean(&D); /* stores nothing: its own were forgotten */

    char out[160], got[4096];
    snprintf(out, sizeof out, "%s/handed", D.dir);
    /* the child writes what it was given, then says READY=1 itself and
     * exits; it ignores harness_stop's SIGTERM, which may come before */
    char *argv[] = {
        "sh", "-c",
        "trap '' TERM; f=$0; { echo \"$LISTEN_PID $$ $LISTEN_FDS $LISTEN_FDNAMES\"; "
        "i=3; while [ -e /proc/$$/fd/$i ]; do cat /proc/$$/fd/$i; echo; "
        "i=$((i + 1)); done; } > \"$f.tmp\" && mv \"$f.tmp\" \"$f\" && "
        "exec systemd-notify --ready",
        out, NULL};
    ck_assert_msg(access("/usr/bin/systemd-notify", X_OK) == 0,
                  "systemd-notify is missing: apt-get install systemd");
    harness_restart_with(&D, "/bin/sh", argv);
    FILE *f = fopen(out, "r");
    ck_assert_msg(f != NULL, "the restarted child wrote no %s", out);
    size_t n = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    got[n] = '\0';
    unlink(out);

    char want[4096];
    int used = snprintf(want, sizeof want, "%d %d %d ", (int)D.pid,
                        (int)D.pid, HANDED);
    for (int i = 0; i < HANDED; i++)
        used += snprintf(want + used, sizeof want - used, "%s%s",
                         i ? ":" : "", names[i]);
    used += snprintf(want + used, sizeof want - used, "\n");
    for (int i = 0; i < HANDED; i++)
        used += snprintf(want + used, sizeof want - used, "%s\n", text[i]);
    ck_assert_msg(strcmp(got, want) == 0,
                  "the restarted child was given\n%s\ninstead of\n%s", got,
                  want);

    harness_stop_clean(&D);
    /* the store is kept across restarts, as systemd keeps it */
    ck_assert_int_eq(D.nstored, HANDED);
    expect_holds(harness_stored_fd(&D, names[0]), text[0]);
    harness_forget_store(&D);
    ck_assert_msg(access(D.dir, F_OK) != 0,
                  "harness_forget_store left %s", D.dir);
}
END_TEST

/* With only its own heap stored, heapd comes up again in its kept
 * private dir, on its own socket (the stored memfds are no listener), its
 * log appended to, and the heap recovered. */
START_TEST(restart_empty_store)
{
    harness_start_logged(&D, harness_default_config("@SOCK@", NULL),
                         "heapd.log");
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
    pid_t first = D.pid;
    harness_stop_clean(&D);
    ck_assert_int_eq(harness_stored(&D, "heapd.table.default"), 1);
    ck_assert_msg(access(D.dir, F_OK) == 0,
                  "harness_stop removed %s with heapd's heap stored", D.dir);
    D.stopping_seen = false;
    harness_restart(&D);
    ck_assert_int_ne(D.pid, first);
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
    ck_assert(harness_log_contains(&D, "connected (control)"));
    ck_assert(!harness_log_contains(&D, "using the socket passed by systemd"));
    ck_assert(harness_log_contains(&D, "'default': recovered"));
    harness_stop_clean(&D);
    ck_assert(D.stopping_seen);
    harness_forget_store(&D);
    ck_assert_msg(access(D.dir, F_OK) != 0, "harness_forget_store left %s",
                  D.dir);
}
END_TEST

static Suite *systemd_suite(void)
{
    Suite *s = suite_create("systemd");
    TCase *t = tcase_create("units");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, units_verify);
    tcase_add_test(t, unit_hardening_present);
    tcase_add_test(t, socket_activation);
    suite_add_tcase(s, t);
    t = tcase_create("fdstore");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, fdstore_keeps_and_drops);
    tcase_add_test(t, restart_hands_the_store_over);
    tcase_add_test(t, restart_empty_store);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(systemd_suite());
}
