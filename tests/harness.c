/* Test harness.  See Note [Test handshakes] in harness.h. */
#include "harness.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/kcmp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fdpass.h"
#include "frame.h"
#include "layout.h"
#include "wire.h"
#include "young.h"

int64_t harness_now_ms(void)
{
    return (int64_t)(monotonic_ns() / 1000000u);
}

int harness_wait_ms(void)
{
    /* check's own timeouts scale by the same factor; read each time (no
     * state shared by the threads that wait) */
    const char *m = getenv("CK_TIMEOUT_MULTIPLIER");
    char *end;
    double k = m ? strtod(m, &end) : 1;
    if (!m || end == m || *end != '\0' || k < 1 || k > 100)
        k = 1;
    return (int)(60000 * k);
}

void harness_wait_until(bool (*pred)(void *arg, char *seen, size_t seen_len),
                        void *arg, const char *what)
{
    int64_t start = harness_now_ms();
    long nap_us = 1000;
    char seen[512] = "";
    for (;;) {
        seen[0] = '\0';
        if (pred(arg, seen, sizeof seen))
            return;
        if (harness_now_ms() - start >= HARNESS_WAIT_MS)
            break;
        struct timespec ts = {0, nap_us * 1000};
        nanosleep(&ts, NULL);
        nap_us = nap_us * 2 > 10000 ? 10000 : nap_us * 2;
    }
    ck_abort_msg("waited %d ms for %s%s%s", HARNESS_WAIT_MS, what,
                 seen[0] ? "; last seen: " : "", seen);
}

const char *harness_bin(const char *envname)
{
    const char *p = getenv(envname);
    ck_assert_msg(p && p[0], "%s is not set: run the tests with meson test",
                  envname);
    return p;
}

void harness_tmpdir(char *out, size_t n)
{
    snprintf(out, n, "/tmp/heapd-t.XXXXXX");
    ck_assert_msg(mkdtemp(out) != NULL, "mkdtemp: %s", strerror(errno));
    chmod(out, 0755); /* other users reach the socket (denied_user) */
}

const char *harness_default_config(const char *sock, const char *extra)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[daemon]\n"
             "socket = %s\n"
             "log_level = debug\n"
             "gc_threads = 2\n"
             "\n"
             "[heap default]\n"
             "base = 0x%llx\n"
             "max_size = 1G\n"
             "segment_size = 128K\n"
             "%s",
             sock, (unsigned long long)HARNESS_HEAP_BASE, extra ? extra : "");
    return buf;
}

static void drain_locked(struct daemon_proc *d);

/* Note [Harness file-descriptor store]: the thread that reads the notify
 * socket between the waits.  It is joined before every fork() of the
 * test process and started again after it in the parent (pthread_atfork):
 * a child then starts its own threads (libheapd's) with no thread of its
 * parent's copied into it, which ThreadSanitizer refuses ("dup thread
 * with used id"). */
static void *serve_notify(void *arg)
{
    struct daemon_proc *d = arg;
    while (!atomic_load(&d->serve_stop)) {
        struct pollfd p[2] = {{.fd = d->notify_fd, .events = POLLIN},
                              {.fd = d->serve_wake[0], .events = POLLIN}};
        if (poll(p, 2, 1000) > 0 && p[0].revents) {
            pthread_mutex_lock(&d->mu);
            drain_locked(d);
            pthread_mutex_unlock(&d->mu);
        }
    }
    return NULL;
}

static struct daemon_proc *served; /* the one whose thread runs, if any */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void join_server(struct daemon_proc *d)
{
    atomic_store(&d->serve_stop, true);
    if (write(d->serve_wake[1], "x", 1) != 1)
        abort(); /* a pipe of our own: cannot fail */
    pthread_join(d->server, NULL);
    char b;
    while (read(d->serve_wake[0], &b, 1) == 1)
        ;
}

static void start_server(struct daemon_proc *d)
{
    atomic_store(&d->serve_stop, false);
    if (pthread_create(&d->server, NULL, serve_notify, d) != 0)
        abort(); /* the harness cannot serve heapd's notify socket */
}

static void before_fork(void)
{
    if (served)
        join_server(served);
}

static void after_fork_parent(void)
{
    if (served)
        start_server(served);
}

static void after_fork_child(void)
{
    served = NULL; /* the thread was not copied */
}

static void watch_forks(void)
{
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static void stop_serving(struct daemon_proc *d)
{
    if (!d->serving)
        return;
    join_server(d);
    served = NULL;
    close(d->serve_wake[0]);
    close(d->serve_wake[1]);
    d->serving = false;
}

static void make_notify_socket(struct daemon_proc *d)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(d->notify_path, sizeof d->notify_path, "%s/notify", d->dir);
    strcpy(sa.sun_path, d->notify_path);
    d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(d->notify_fd, 0);
    ck_assert_msg(bind(d->notify_fd, (struct sockaddr *)&sa, sizeof sa) == 0,
                  "bind %s: %s", d->notify_path, strerror(errno));
    pthread_once(&atfork_once, watch_forks);
    if (served && served != d)
        stop_serving(served); /* one daemon served at a time */
    ck_assert_int_eq(pipe2(d->serve_wake, O_CLOEXEC | O_NONBLOCK), 0);
    start_server(d);
    served = d;
    d->serving = true;
}

static void prepare(struct daemon_proc *d)
{
    memset(d, 0, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    d->notify_fd = -1;
    harness_tmpdir(d->dir, sizeof d->dir);
    snprintf(d->sock, sizeof d->sock, "%s/s", d->dir);
    snprintf(d->conf, sizeof d->conf, "%s/heapd.conf", d->dir);
    make_notify_socket(d);
}

/* In the child, first: copy the first N stored fds to 3 + N or above,
 * into LIFTED, so that placing fd i at 3 + i (child_place_store) never closes a
 * stored fd that sits there (Note [Harness file-descriptor store]). */
static void child_lift_store(const struct daemon_proc *d, int n, int *lifted)
{
    for (int i = 0; i < n; i++) {
        lifted[i] = fcntl(d->store[i].fd, F_DUPFD_CLOEXEC, 3 + n);
        if (lifted[i] < 0) {
            fprintf(stderr, "cannot hand the stored fds over: %s\n",
                    strerror(errno));
            _exit(126);
        }
    }
}

/* Then: the N lifted copies at 3, 4, ... in store order (dup2 clears
 * their close-on-exec), and the LISTEN_* variables as systemd sets them. */
static void child_place_store(const struct daemon_proc *d, int n,
                              const int *lifted)
{
    char names[HARNESS_STORE_MAX * 256] = "", num[32];
    size_t used = 0;

    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    unsetenv("LISTEN_PID");
    if (n == 0)
        return;
    for (int i = 0; i < n; i++) {
        if (dup2(lifted[i], 3 + i) < 0) {
            fprintf(stderr, "cannot hand the stored fds over: %s\n",
                    strerror(errno));
            _exit(126);
        }
        close(lifted[i]);
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s",
                                 i ? ":" : "", d->store[i].name);
    }
    snprintf(num, sizeof num, "%d", n);
    setenv("LISTEN_FDS", num, 1);
    setenv("LISTEN_FDNAMES", names, 1);
    snprintf(num, sizeof num, "%d", (int)getpid());
    setenv("LISTEN_PID", num, 1);
}

/* Fork and exec BINARY with ARGV and the notify socket; with HAND_OVER
 * the store too, else no LISTEN_* at all. */
static pid_t spawn(struct daemon_proc *d, const char *binary,
                   char *const argv[], int stderr_fd, bool hand_over)
{
    pthread_mutex_lock(&d->mu);
    d->spawn_mark = d->lines_total;
    pthread_mutex_unlock(&d->mu);
    /* the store stays still while the child copies it: fork joins the
     * serving thread first (before_fork), which must not wait for mu */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int lifted[HARNESS_STORE_MAX];
        int n = hand_over ? d->nstored : 0;
        child_lift_store(d, n, lifted);
        if (stderr_fd >= 0) {
            dup2(stderr_fd, STDERR_FILENO);
            dup2(stderr_fd, STDOUT_FILENO);
            close(stderr_fd);
        }
        child_place_store(d, n, lifted);
        setenv("NOTIFY_SOCKET", d->notify_path, 1);
        if (d->run_as != 0 &&
            (setgroups(0, NULL) != 0 || setgid(d->run_as) != 0 ||
             setuid(d->run_as) != 0)) {
            fprintf(stderr, "cannot become uid %u: %s\n",
                    (unsigned)d->run_as, strerror(errno));
            _exit(126);
        }
        execv(binary, argv);
        fprintf(stderr, "exec %s: %s\n", binary, strerror(errno));
        _exit(127);
    }
    return pid;
}

pid_t harness_spawn(struct daemon_proc *d, char *const argv[], int stderr_fd)
{
    char *args[64];
    size_t n = 0;
    while (argv[n])
        n++;
    args[0] = (char *)harness_bin("HEAPD_BIN");
    for (size_t i = 1; i < n && i < 63; i++)
        args[i] = argv[i];
    args[n < 63 ? n : 63] = NULL;
    return spawn(d, args[0], args, stderr_fd, false);
}

/* ---- the store (Note [Harness file-descriptor store]) ---- */

/* A name systemd's FDNAME= accepts, and that fits LISTEN_FDNAMES. */
static bool fdname_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 255)
        return false;
    for (const char *p = name; *p; p++)
        if (*p == ':' || *p < ' ' || *p > '~')
            return false;
    return true;
}

/* The same open file: kcmp says so exactly; where it is not allowed, the
 * same inode opened with the same flags. */
static bool same_file(int a, int b)
{
    pid_t me = getpid();
    long r = syscall(SYS_kcmp, me, me, KCMP_FILE, a, b);
    if (r >= 0)
        return r == 0;
    struct stat sa, sb;
    if (fstat(a, &sa) != 0 || fstat(b, &sb) != 0)
        return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino &&
           fcntl(a, F_GETFL) == fcntl(b, F_GETFL);
}

static void store_add(struct daemon_proc *d, const char *name, int fd)
{
    for (int i = 0; i < d->nstored; i++)
        if (same_file(d->store[i].fd, fd)) {
            close(fd); /* systemd drops duplicates */
            return;
        }
    if (d->nstored == HARNESS_STORE_MAX) {
        close(fd);
        ck_abort_msg("heapd stored more than %d fds (the last under %s); "
                     "raise HARNESS_STORE_MAX if it should",
                     HARNESS_STORE_MAX, name);
    }
    snprintf(d->store[d->nstored].name, sizeof d->store[0].name, "%s", name);
    d->store[d->nstored].fd = fd;
    d->nstored++;
}

static void store_remove(struct daemon_proc *d, const char *name)
{
    int kept = 0;
    for (int i = 0; i < d->nstored; i++) {
        if (strcmp(d->store[i].name, name) == 0)
            close(d->store[i].fd);
        else
            d->store[kept++] = d->store[i];
    }
    d->nstored = kept;
}

int harness_stored(const struct daemon_proc *d, const char *name)
{
    struct daemon_proc *w = (struct daemon_proc *)d; /* its mutex only */
    int n = 0;
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < d->nstored; i++)
        n += strcmp(d->store[i].name, name) == 0;
    pthread_mutex_unlock(&w->mu);
    return n;
}

void harness_store_keep(struct daemon_proc *d, const char *name, int fd)
{
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    ck_assert_int_ge(copy, 0);
    pthread_mutex_lock(&d->mu);
    store_add(d, name, copy);
    pthread_mutex_unlock(&d->mu);
}

void harness_store_replace(struct daemon_proc *d, const char *name, int fd)
{
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    ck_assert_int_ge(copy, 0);
    pthread_mutex_lock(&d->mu);
    store_remove(d, name);
    store_add(d, name, copy);
    pthread_mutex_unlock(&d->mu);
}

int harness_stored_fd(const struct daemon_proc *d, const char *name)
{
    struct daemon_proc *w = (struct daemon_proc *)d; /* its mutex only */
    int fd = -1;
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < d->nstored && fd < 0; i++)
        if (strcmp(d->store[i].name, name) == 0)
            fd = d->store[i].fd;
    pthread_mutex_unlock(&w->mu);
    return fd;
}

static void log_line(struct daemon_proc *d, const char *line, size_t len)
{
    if (d->nnotified == HARNESS_NOTIFY_LINES) {
        memmove(d->notified[0], d->notified[1],
                sizeof d->notified[0] * (HARNESS_NOTIFY_LINES - 1));
        d->nnotified--;
    }
    snprintf(d->notified[d->nnotified++], sizeof d->notified[0], "%.*s",
             (int)len, line);
    d->lines_total++;
}

bool harness_notified(const struct daemon_proc *d, const char *text)
{
    struct daemon_proc *w = (struct daemon_proc *)d; /* its mutex only */
    bool found = false;
    pthread_mutex_lock(&w->mu);
    for (unsigned i = 0; i < d->nnotified && !found; i++)
        found = strstr(d->notified[i], text) != NULL;
    pthread_mutex_unlock(&w->mu);
    return found;
}

/* Act on one datagram's TEXT and the NFDS fds it carried. */
static void notify_take(struct daemon_proc *d, const char *text, int *fds,
                        int nfds)
{
    bool fdstore = false, remove = false;
    char name[300] = "";
    bool named = false;

    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > 0)
            log_line(d, p, len);
        if (len == 10 && strncmp(p, "STOPPING=1", len) == 0)
            d->stopping_seen = true;
        else if (len == 9 && strncmp(p, "FDSTORE=1", len) == 0)
            fdstore = true;
        else if (len == 15 && strncmp(p, "FDSTOREREMOVE=1", len) == 0)
            remove = true;
        else if (len >= 7 && strncmp(p, "FDNAME=", 7) == 0 && !named) {
            snprintf(name, sizeof name, "%.*s", (int)(len - 7), p + 7);
            named = true;
        }
        p += len + (e != NULL);
    }
    if (remove) {
        ck_assert_msg(named && fdname_ok(name),
                      "heapd sent FDSTOREREMOVE=1 without a valid FDNAME= "
                      "(systemd ignores it): \"%s\"", text);
        store_remove(d, name);
    }
    if (nfds == 0)
        return;
    if (!fdstore) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return;
    }
    if (!named)
        snprintf(name, sizeof name, "stored");
    if (!fdname_ok(name)) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        ck_abort_msg("heapd stored fds under FDNAME=%s, which systemd "
                     "refuses: 1 to 255 printable bytes, no ':'", name);
    }
    for (int i = 0; i < nfds; i++)
        store_add(d, name, fds[i]);
}

/* Receive one datagram (FLAGS: 0 or MSG_DONTWAIT) and act on it; copy its
 * text to BUF.  Returns its length, or -errno (-EAGAIN: none queued). */
static ssize_t notify_receive(struct daemon_proc *d, char *buf, size_t len,
                              int flags)
{
    union {
        struct cmsghdr align;
        char b[CMSG_SPACE(sizeof(int) * HARNESS_NOTIFY_FDS)];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = len - 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = ctl.b,
                        .msg_controllen = sizeof ctl.b};
    int fds[HARNESS_NOTIFY_FDS], nfds = 0;

    ssize_t n = recvmsg(d->notify_fd, &mh, flags | MSG_CMSG_CLOEXEC);
    if (n < 0)
        return -errno;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k && nfds < HARNESS_NOTIFY_FDS; i++)
            memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int),
                   sizeof(int));
    }
    buf[n] = '\0';
    if (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        ck_abort_msg("a notify datagram carried more than %d fds or %zu "
                     "bytes, and the kernel dropped the rest: \"%s\"",
                     HARNESS_NOTIFY_FDS, len - 1, buf);
    }
    notify_take(d, buf, fds, nfds);
    return n;
}

/* With mu held. */
static void drain_locked(struct daemon_proc *d)
{
    char buf[4096];
    if (d->notify_fd < 0)
        return;
    for (;;) {
        ssize_t n = notify_receive(d, buf, sizeof buf, MSG_DONTWAIT);
        if (n == -EINTR)
            continue;
        if (n < 0)
            return;
    }
}

void harness_drain_notify(struct daemon_proc *d)
{
    pthread_mutex_lock(&d->mu);
    drain_locked(d);
    pthread_mutex_unlock(&d->mu);
}

/* With mu held: a line heapd sent since it was last started that holds
 * WHAT, copied to GOT. */
static bool sent_since_spawn(struct daemon_proc *d, const char *what,
                             char *got, size_t gotlen)
{
    uint64_t since = d->lines_total - d->spawn_mark;
    unsigned first = since < d->nnotified ? d->nnotified - (unsigned)since : 0;
    for (unsigned i = first; i < d->nnotified; i++) {
        if (strstr(d->notified[i], what)) {
            if (got)
                snprintf(got, gotlen, "%s", d->notified[i]);
            return true;
        }
    }
    return false;
}

bool harness_wait_notify(struct daemon_proc *d, const char *what, char *got,
                         size_t gotlen)
{
    int64_t deadline = harness_now_ms() + HARNESS_WAIT_MS;
    bool found;

    /* Note [Harness file-descriptor store]: the serving thread may have
     * read it already */
    pthread_mutex_lock(&d->mu);
    while (!(found = sent_since_spawn(d, what, got, gotlen))) {
        int64_t left = deadline - harness_now_ms();
        if (left <= 0)
            break;
        struct pollfd p = {.fd = d->notify_fd, .events = POLLIN};
        if (poll(&p, 1, (int)left) > 0)
            drain_locked(d);
    }
    pthread_mutex_unlock(&d->mu);
    return found;
}

void harness_start(struct daemon_proc *d, const char *config)
{
    harness_start_logged(d, config, NULL);
}

void harness_start_with(struct daemon_proc *d, const char *extra)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "verify = true\n%s", extra ? extra : "");
    harness_start(d, harness_default_config("@SOCK@", buf));
}

void harness_start_holding(struct daemon_proc *d, char *hold, size_t len)
{
    snprintf(hold, len, "/tmp/heapd-hold-%d", (int)getpid());
    setenv("HEAPD_TEST_HOLD_MARKING", hold, 1);
    harness_start_with(d, NULL);
    unsetenv("HEAPD_TEST_HOLD_MARKING");
}

static void start(struct daemon_proc *d, const char *config,
                  const char *log_name, uid_t uid);
static void write_config(const struct daemon_proc *d);
static void wait_ready(struct daemon_proc *d, const char *what);

void harness_start_logged(struct daemon_proc *d, const char *config,
                          const char *log_name)
{
    start(d, config, log_name, 0);
}

void harness_start_as(struct daemon_proc *d, const char *config,
                      const char *log_name, uid_t uid)
{
    start(d, config, log_name, uid);
}

static void start(struct daemon_proc *d, const char *config,
                  const char *log_name, uid_t uid)
{
    int log_fd = -1;
    prepare(d);
    if (uid != 0) {
        d->run_as = uid;
        ck_assert_msg(chown(d->dir, uid, uid) == 0 &&
                          chmod(d->notify_path, 0666) == 0,
                      "cannot hand %s to uid %u: %s", d->dir, (unsigned)uid,
                      strerror(errno));
    }
    if (log_name) {
        snprintf(d->log, sizeof d->log, "%s/%s", d->dir, log_name);
        log_fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ck_assert_msg(log_fd >= 0, "open %s: %s", d->log, strerror(errno));
    }
    /* substitute @SOCK@ */
    const char *at = strstr(config, "@SOCK@");
    if (at)
        snprintf(d->config_text, sizeof d->config_text, "%.*s%s%s",
                 (int)(at - config), config, d->sock, at + 6);
    else
        snprintf(d->config_text, sizeof d->config_text, "%s", config);
    write_config(d);

    char *argv[] = {"heapd", "-c", d->conf, "--foreground", NULL};
    d->pid = harness_spawn(d, argv, log_fd);
    if (log_fd >= 0)
        close(log_fd);
    wait_ready(d, "heapd");
}

static void write_config(const struct daemon_proc *d)
{
    FILE *f = fopen(d->conf, "w");
    ck_assert_msg(f != NULL, "open %s: %s", d->conf, strerror(errno));
    fputs(d->config_text, f);
    ck_assert_msg(fclose(f) == 0, "write %s: %s", d->conf, strerror(errno));
}

static void wait_ready(struct daemon_proc *d, const char *what)
{
    if (!harness_wait_notify(d, "READY=1", NULL, 0)) {
        int st = harness_wait_pid(d->pid, 100);
        ck_abort_msg("%s did not become ready within %d ms (wait status "
                     "%d); config:\n%s", what, HARNESS_WAIT_MS, st,
                     d->config_text);
    }
}

/* Remove the private dir and what the harness made in it. */
static void remove_private_dir(struct daemon_proc *d)
{
    stop_serving(d);
    if (d->notify_fd >= 0)
        close(d->notify_fd);
    d->notify_fd = -1;
    unlink(d->notify_path);
    if (d->log[0])
        unlink(d->log);
    unlink(d->conf);
    unlink(d->sock);
    rmdir(d->dir);
    d->dir_kept = false;
}

/* Make the private dir removed by harness_stop again, at the same path,
 * for harness_restart: its notify socket and config as before. */
static void remake_private_dir(struct daemon_proc *d)
{
    ck_assert_msg(mkdir(d->dir, 0755) == 0,
                  "cannot make %s again for the restart: %s", d->dir,
                  strerror(errno));
    chmod(d->dir, 0755); /* as harness_tmpdir, whatever the umask */
    make_notify_socket(d);
    if (d->run_as != 0)
        ck_assert_msg(chown(d->dir, d->run_as, d->run_as) == 0 &&
                          chmod(d->notify_path, 0666) == 0,
                      "cannot hand %s to uid %u: %s", d->dir,
                      (unsigned)d->run_as, strerror(errno));
    write_config(d);
}

void harness_restart(struct daemon_proc *d)
{
    char *argv[] = {"heapd", "-c", d->conf, "--foreground", NULL};
    harness_restart_with(d, harness_bin("HEAPD_BIN"), argv);
}

void harness_restart_with(struct daemon_proc *d, const char *binary,
                          char *const argv[])
{
    int log_fd = -1;
    ck_assert_msg(d->dir[0] != '\0',
                  "harness_restart needs a heapd started by harness_start "
                  "and stopped by harness_stop");
    if (!d->dir_kept)
        remake_private_dir(d);
    d->dir_kept = false;
    if (d->log[0]) {
        log_fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                      0644);
        ck_assert_msg(log_fd >= 0, "open %s: %s", d->log, strerror(errno));
    }
    d->pid = spawn(d, binary, argv, log_fd, true);
    if (log_fd >= 0)
        close(log_fd);
    wait_ready(d, binary);
}

void harness_forget_store(struct daemon_proc *d)
{
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < d->nstored; i++)
        close(d->store[i].fd);
    d->nstored = 0;
    pthread_mutex_unlock(&d->mu);
    if (d->dir_kept)
        remove_private_dir(d);
}

int harness_wait_pid(pid_t pid, int ms)
{
    int64_t deadline = harness_now_ms() + ms;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        if (r < 0)
            return -1;
        if (harness_now_ms() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Wait for PID to exit within MS, reading the notify socket meanwhile
 * (Note [Harness file-descriptor store]); -1 on time-out, after SIGKILL. */
static int wait_exit_serving(struct daemon_proc *d, int ms)
{
    int64_t deadline = harness_now_ms() + ms;
    int st;
    for (;;) {
        harness_drain_notify(d);
        pid_t r = waitpid(d->pid, &st, WNOHANG);
        if (r == d->pid)
            break;
        if (r < 0)
            return -1;
        if (harness_now_ms() >= deadline) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &st, 0);
            return -1;
        }
        /* a datagram wakes us at once; the exit is looked for every 2 ms */
        struct pollfd p = {.fd = d->notify_fd, .events = POLLIN};
        poll(&p, d->notify_fd >= 0 ? 1 : 0, 2);
    }
    /* what it sent before it exited is queued: take it all */
    harness_drain_notify(d);
    return st;
}

int harness_stop(struct daemon_proc *d)
{
    int st;
    ck_assert_int_eq(kill(d->pid, SIGTERM), 0);
    st = wait_exit_serving(d, HARNESS_WAIT_MS);
    ck_assert_msg(st != -1, "heapd did not exit within %d ms of SIGTERM",
                  HARNESS_WAIT_MS);
    pthread_mutex_lock(&d->mu);
    bool kept = d->nstored > 0;
    pthread_mutex_unlock(&d->mu);
    if (kept)
        d->dir_kept = true; /* for harness_restart or harness_forget_store */
    else
        remove_private_dir(d);
    return st;
}

void harness_kill(struct daemon_proc *d)
{
    ck_assert_int_eq(kill(d->pid, SIGKILL), 0);
    int st = wait_exit_serving(d, HARNESS_WAIT_MS);
    ck_assert_msg(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                  "heapd did not die of SIGKILL (status %#x)", st);
    d->dir_kept = true; /* for harness_restart or harness_forget_store */
}

int harness_raw_connect(const char *sock)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0,
                  "connect %s: %s", sock, strerror(errno));
    return fd;
}

void harness_send_bytes(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        ck_assert_msg(w > 0, "send: %s", strerror(errno));
        c += w;
        n -= (size_t)w;
    }
}

void harness_send_env(int fd, const Heapd__Envelope *env)
{
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(frame_pack(env, &buf, &len), 0);
    harness_send_bytes(fd, buf, len);
    free(buf);
}

int harness_raw_welcomed(const char *sock, Heapd__ClientKind kind)
{
    int fd = harness_raw_connect(sock), hfd = -1;
    harness_send_hello(fd, "default", PROTOCOL_VERSION, kind);
    Heapd__Envelope *w = harness_read_env(fd, &hfd);
    ck_assert_msg(w && w->body_case == HEAPD__ENVELOPE__BODY_WELCOME,
                  "heapd did not welcome a raw %s client",
                  kind == HEAPD__CLIENT_KIND__CLIENT_MUTATOR ? "mutator"
                                                             : "control");
    if (hfd >= 0)
        close(hfd);
    heapd__envelope__free_unpacked(w, NULL);
    return fd;
}

void harness_send_hello(int fd, const char *heap, uint32_t version,
                        Heapd__ClientKind kind)
{
    Heapd__Hello h = HEAPD__HELLO__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    h.protocol_version = version;
    h.heap = (char *)heap;
    h.client_name = (char *)"raw-test";
    h.pid = getpid();
    h.kind = kind;
    env.body_case = HEAPD__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    harness_send_env(fd, &env);
}

/* Read exactly N bytes within the deadline; false at EOF. */
static bool read_bounded(int fd, uint8_t *p, size_t n, int *fd_out,
                         int64_t deadline)
{
    while (n > 0) {
        int64_t left = deadline - harness_now_ms();
        ck_assert_msg(left > 0, "no reply from heapd within %d ms",
                      HARNESS_WAIT_MS);
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, (int)left) <= 0)
            continue;
        int got[FDPASS_MAX];
        unsigned ngot = 0;
        ssize_t r = fdpass_recv(fd, p, n, got, &ngot);
        /* the heap's memfd to FD_OUT; the daemon's page is not needed */
        for (unsigned i = 0; i < ngot; i++) {
            if (i == 0 && fd_out)
                *fd_out = got[0];
            else
                close(got[i]);
        }
        if (r == 0 || r == -ECONNRESET)
            return false;
        ck_assert_msg(r > 0, "recv: %s", strerror((int)-r));
        p += r;
        n -= (size_t)r;
    }
    return true;
}

Heapd__Envelope *harness_read_env(int fd, int *fd_out)
{
    int64_t deadline = harness_now_ms() + HARNESS_WAIT_MS;
    uint8_t hdr[4];
    if (fd_out)
        *fd_out = -1;
    if (!read_bounded(fd, hdr, 4, fd_out, deadline))
        return NULL;
    uint32_t len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
                   (uint32_t)hdr[2] << 8 | hdr[3];
    ck_assert_msg(len > 0 && len <= FRAME_MAX_PAYLOAD, "bad length %u", len);
    uint8_t *buf = malloc(len);
    ck_assert_ptr_nonnull(buf);
    ck_assert_msg(read_bounded(fd, buf, len, fd_out, deadline),
                  "EOF inside a frame from heapd");
    Heapd__Envelope *env = frame_decode(buf, len);
    free(buf);
    ck_assert_msg(env != NULL, "heapd sent an undecodable frame");
    return env;
}

void harness_raw_mutator(const char *sock, struct harness_raw *r)
{
    int got[FDPASS_MAX];
    unsigned ngot = 0;
    uint8_t hdr[4];
    r->sock = harness_raw_connect(sock);
    harness_send_hello(r->sock, "default", PROTOCOL_VERSION,
                       HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    /* the descriptors come with the frame's first bytes */
    ssize_t n = fdpass_recv(r->sock, hdr, sizeof hdr, got, &ngot);
    ck_assert_msg(n == (ssize_t)sizeof hdr && ngot == 3,
                  "a Welcome with 3 descriptors: got %zd bytes, %u fds", n,
                  ngot);
    r->heap_fd = got[0];
    close(got[1]);
    r->mem_fd = got[2];
    uint32_t len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
                   (uint32_t)hdr[2] << 8 | hdr[3];
    ck_assert_msg(len > 0 && len <= FRAME_MAX_PAYLOAD, "bad length %u", len);
    uint8_t *buf = malloc(len);
    ck_assert_ptr_nonnull(buf);
    ck_assert_msg(read_bounded(r->sock, buf, len, NULL,
                               harness_now_ms() + HARNESS_WAIT_MS),
                  "EOF inside the Welcome");
    Heapd__Envelope *w = frame_decode(buf, len);
    free(buf);
    ck_assert_msg(w && w->body_case == HEAPD__ENVELOPE__BODY_WELCOME,
                  "heapd did not welcome a raw mutator");
    r->base = w->welcome->heap_base;
    r->max_size = w->welcome->max_size;
    r->segment_size = w->welcome->segment_size;
    heapd__envelope__free_unpacked(w, NULL);
}

void harness_raw_close(struct harness_raw *r)
{
    close(r->sock);
    close(r->heap_fd);
    close(r->mem_fd);
}

Heapd__Envelope *harness_raw_attach(struct harness_raw *r, uint64_t seq,
                                    bool young, uint64_t bytes, uint32_t age)
{
    Heapd__AttachRequest ar = HEAPD__ATTACH_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    ar.young = young;
    ar.young_bytes = bytes;
    ar.young_age = age;
    env.seq = seq;
    env.body_case = HEAPD__ENVELOPE__BODY_ATTACH_REQUEST;
    env.attach_request = &ar;
    harness_send_env(r->sock, &env);
    Heapd__Envelope *e = harness_read_env(r->sock, NULL);
    ck_assert_msg(e != NULL, "heapd closed the connection at an attach");
    ck_assert_uint_eq(e->seq, seq);
    return e;
}

struct layout_mutator *harness_raw_young_mutator(struct harness_raw *r,
                                                 bool blocked)
{
    Heapd__Envelope *e = harness_raw_attach(r, 1, true, 0, 0);
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ATTACH_REPLY);
    ck_assert_uint_ne(e->attach_reply->young_bytes, 0);
    void *p = mmap(NULL, LAYOUT_MUTATOR_BYTES, PROT_READ | PROT_WRITE,
                   MAP_SHARED, r->mem_fd,
                   (off_t)e->attach_reply->region *
                       (off_t)LAYOUT_MUTATOR_BYTES);
    heapd__envelope__free_unpacked(e, NULL);
    ck_assert_msg(p != MAP_FAILED, "cannot map the raw client's slot words");
    struct layout_mutator *m = p;
    if (blocked)
        atomic_store(&m->status, LAYOUT_STATUS(0, LAYOUT_MUT_BLOCKED));
    return m;
}

void harness_raw_map(struct harness_raw *r)
{
    void *p = mmap((void *)(uintptr_t)r->base, r->max_size,
                   PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED_NOREPLACE | MAP_NORESERVE,
                   r->heap_fd, 0);
    ck_assert_msg(p == (void *)(uintptr_t)r->base ||
                      (p == MAP_FAILED && errno == EEXIST),
                  "cannot map the heap at its base: %s", strerror(errno));
}

static unsigned raw_class(void)
{
    return layout_size_class((uint32_t)layout_object_size(2, 0));
}

static uint8_t *raw_seg(const struct harness_raw *r, uint32_t seg)
{
    return (uint8_t *)(uintptr_t)(r->base + (uint64_t)seg * r->segment_size);
}

void harness_raw_ask_segments(int fd, uint64_t seq, uint32_t count)
{
    Heapd__SegmentRequest sr = HEAPD__SEGMENT_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    sr.kind = HEAPD__SEGMENT_KIND__SEGMENT_SMALL;
    sr.count = count;
    env.seq = seq;
    env.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST;
    env.segment_request = &sr;
    harness_send_env(fd, &env);
}

void harness_raw_return_segments(int fd, uint64_t seq, uint32_t *segs,
                                 size_t n)
{
    Heapd__SegmentReturn sr = HEAPD__SEGMENT_RETURN__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    sr.n_segments = n;
    sr.segments = segs;
    env.seq = seq;
    env.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_RETURN;
    env.segment_return = &sr;
    harness_send_env(fd, &env);
}

uint32_t harness_raw_segment(struct harness_raw *r, uint64_t seq)
{
    harness_raw_ask_segments(r->sock, seq, 1);
    Heapd__Envelope *g = harness_read_env(r->sock, NULL);
    ck_assert_msg(g && g->body_case == HEAPD__ENVELOPE__BODY_SEGMENT_GRANT,
                  "no segment for the raw client");
    uint32_t seg = g->segment_grant->segments[0];
    heapd__envelope__free_unpacked(g, NULL);
    /* as a mutator formats a blank one (Note [Segments]) */
    struct layout_segment *hd = (struct layout_segment *)raw_seg(r, seg);
    hd->size_class = raw_class();
    __atomic_store_n(&hd->kind, LAYOUT_SEG_SMALL, __ATOMIC_RELEASE);
    return seg;
}

void **harness_raw_young(struct harness_raw *r, uint32_t seg, uint32_t b,
                         void *a, void *f)
{
    uint32_t nblocks, first;
    unsigned cls = raw_class();
    layout_small_geometry(r->segment_size, cls, &nblocks, &first);
    ck_assert_uint_lt(b, nblocks);
    uint8_t *s = raw_seg(r, seg);
    void **o = (void **)(s + first + (size_t)b * layout_class_size[cls] +
                         LAYOUT_WORD);
    __atomic_store_n(&layout_seg_marks(s)[b], LAYOUT_MARK_YOUNG,
                     __ATOMIC_RELAXED);
    ((uint64_t *)o)[-1] = layout_header(2, 0);
    o[0] = a;
    o[1] = f;
    return o;
}

uint8_t harness_raw_mark(struct harness_raw *r, uint32_t seg, uint32_t b)
{
    return __atomic_load_n(&layout_seg_marks(raw_seg(r, seg))[b],
                           __ATOMIC_RELAXED);
}

bool harness_wait_eof(int fd)
{
    int64_t deadline = harness_now_ms() + HARNESS_WAIT_MS;
    char buf[4096];
    for (;;) {
        int64_t left = deadline - harness_now_ms();
        if (left <= 0)
            return false;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, (int)left) <= 0)
            continue;
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET))
            return true;
    }
}

int harness_run(const char *cmd, char *out, size_t outlen)
{
    /* bounded: a command that hangs fails the test instead of stalling it */
    setenv("HARNESS_CMD", cmd, 1);
    FILE *p = popen("timeout -k 5 120 sh -c \"$HARNESS_CMD\"", "r");
    size_t n = 0;
    ck_assert_ptr_nonnull(p);
    if (out && outlen) {
        n = fread(out, 1, outlen - 1, p);
        out[n] = '\0';
    }
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0)
        ;
    return pclose(p);
}

/* ---- libheapd helpers ---- */

void harness_stop_clean(struct daemon_proc *d)
{
    int st = harness_stop(d);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && d->log[0]) {
        /* what heapd said last, for the test log */
        char cmd[256];
        snprintf(cmd, sizeof cmd, "tail -n 30 '%s' >&2", d->log);
        if (system(cmd) != 0)
            fprintf(stderr, "(heapd's log %s is gone)\n", d->log);
    }
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "heapd did not exit 0 after SIGTERM (status 0x%x)", st);
}

__attribute__((noinline)) void harness_wipe_stack(void)
{
    volatile uint64_t words[4096];
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        words[i] = 0;
}

static void attach_with(const struct daemon_proc *d, heapd_client **c,
                        heapd_mutator **m, unsigned flags)
{
    heapd_connect_opts o = {.socket_path = d->sock};
    int rc = heapd_connect(c, &o);
    ck_assert_msg(rc == 0, "connect: %s", heapd_last_error());
    heapd_mutator_opts mo = {.flags = flags};
    rc = heapd_attach_opts(*c, &mo, m);
    ck_assert_msg(rc == 0, "attach: %s", heapd_last_error());
}

void harness_attach(const struct daemon_proc *d, heapd_client **c,
                    heapd_mutator **m)
{
    attach_with(d, c, m, 0);
}

void harness_attach_precise(const struct daemon_proc *d, heapd_client **c,
                            heapd_mutator **m)
{
    attach_with(d, c, m, HEAPD_MUTATOR_PRECISE);
}

void harness_attach_young(const struct daemon_proc *d, heapd_client **c,
                          heapd_mutator **m, heapd_mutator **y)
{
    heapd_mutator_opts yo = {.flags = HEAPD_MUTATOR_YOUNG};
    attach_with(d, c, m, 0);
    heapd_blocking_enter(*m);
    ck_assert_msg(heapd_attach_opts(*c, &yo, y) == 0,
                  "heapd_attach_opts (young): %s", heapd_last_error());
}

void harness_detach_young(heapd_client *c, heapd_mutator *m, heapd_mutator *y)
{
    heapd_detach(y);
    heapd_blocking_leave(m);
    heapd_detach(m);
    heapd_disconnect(c);
}

pid_t harness_fork_mutator(const struct daemon_proc *d,
                           void (*body)(heapd_mutator *m, void *arg),
                           void *arg)
{
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        heapd_client *c;
        heapd_mutator *m;
        close(ready[0]);
        harness_attach(d, &c, &m);
        if (body)
            body(m, arg);
        if (write(ready[1], "r", 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    close(ready[1]); /* a kid that dies early gives EOF, not a hang */
    char r;
    bool is_ready = read(ready[0], &r, 1) == 1;
    close(ready[0]);
    if (!is_ready) {
        int st = harness_wait_pid(kid, HARNESS_WAIT_MS);
        ck_abort_msg("the forked mutator died before it was ready (%s %d)",
                     st != -1 && WIFSIGNALED(st) ? "signal" : "exit code",
                     st == -1           ? -1
                     : WIFSIGNALED(st) ? WTERMSIG(st)
                                       : WEXITSTATUS(st));
    }
    return kid;
}

heapd_client *harness_control(const struct daemon_proc *d)
{
    heapd_connect_opts o = {.socket_path = d->sock,
                            .flags = HEAPD_CONNECT_CONTROL};
    heapd_client *c;
    ck_assert_msg(heapd_connect(&c, &o) == 0, "control connect: %s",
                  heapd_last_error());
    return c;
}

heapd_stats_t harness_stats(heapd_client *c)
{
    heapd_stats_t st;
    ck_assert_msg(heapd_stats(c, &st) == 0, "stats: %s", heapd_last_error());
    return st;
}

void harness_collect(heapd_mutator *m)
{
    int rc = heapd_collect(m, HEAPD_COLLECT_WAIT);
    ck_assert_msg(rc == 0, "collect: %s", heapd_last_error());
}

heapd_stats_t harness_daemon_stats(const struct daemon_proc *d)
{
    heapd_client *c = harness_control(d);
    heapd_stats_t st = harness_stats(c);
    heapd_disconnect(c);
    return st;
}

struct stat_wait {
    heapd_client *c;
    size_t offset, size;
    const char *name, *op;
    uint64_t value;
};

static bool stat_holds(void *arg, char *seen, size_t seen_len)
{
    struct stat_wait *w = arg;
    heapd_stats_t st = harness_stats(w->c);
    const char *p = (const char *)&st + w->offset;
    uint64_t v;
    if (w->size == sizeof(uint32_t)) {
        uint32_t v32;
        memcpy(&v32, p, sizeof v32);
        v = v32;
    } else {
        memcpy(&v, p, sizeof v);
    }
    snprintf(seen, seen_len, "%s = %llu", w->name, (unsigned long long)v);
    if (strcmp(w->op, "==") == 0)
        return v == w->value;
    if (strcmp(w->op, "!=") == 0)
        return v != w->value;
    if (strcmp(w->op, ">=") == 0)
        return v >= w->value;
    return v <= w->value;
}

void harness_wait_stat_field(const struct daemon_proc *d, heapd_client *c,
                             size_t offset, size_t size, const char *name,
                             const char *op, uint64_t value)
{
    ck_assert_msg(size == sizeof(uint32_t) || size == sizeof(uint64_t),
                  "harness_wait_stat: %s is not a counter", name);
    ck_assert_msg(strcmp(op, "==") == 0 || strcmp(op, "!=") == 0 ||
                      strcmp(op, ">=") == 0 || strcmp(op, "<=") == 0,
                  "harness_wait_stat: unknown comparison %s", op);
    struct stat_wait w = {.c = c ? c : harness_control(d), .offset = offset,
                          .size = size, .name = name, .op = op,
                          .value = value};
    char what[128];
    snprintf(what, sizeof what, "heapd's %s %s %llu", name, op,
             (unsigned long long)value);
    harness_wait_until(stat_holds, &w, what);
    if (!c)
        heapd_disconnect(w.c);
}

void harness_expect_healthy(const struct daemon_proc *d)
{
    heapd_stats_t st = harness_daemon_stats(d);
    ck_assert_msg(st.verify_failures == 0 && st.bad_refs == 0 &&
                      st.young_refs_refused == 0,
                  "verify failures %llu, bad refs %llu, references to "
                  "young objects %llu after %llu cycles (see heapd's log)",
                  (unsigned long long)st.verify_failures,
                  (unsigned long long)st.bad_refs,
                  (unsigned long long)st.young_refs_refused,
                  (unsigned long long)st.cycles_completed);
}

void harness_wait_ok(pid_t pid, const char *who)
{
    int st = harness_wait_pid(pid, HARNESS_WAIT_MS * 4);
    ck_assert_msg(st != -1, "%s did not finish within %d ms", who,
                  HARNESS_WAIT_MS * 4);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "%s failed (status 0x%x)", who, st);
}

bool harness_log_contains(const struct daemon_proc *d, const char *text)
{
    FILE *f = fopen(d->log, "r");
    ck_assert_msg(f != NULL, "no daemon log (start with harness_start_logged)");
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    for (size_t k; (k = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += k;
        if (n + 1 == cap) { /* the whole log: a line may come late */
            buf = realloc(buf, cap *= 2);
            ck_assert_ptr_nonnull(buf);
        }
    }
    fclose(f);
    buf[n] = '\0';
    bool found = strstr(buf, text) != NULL;
    free(buf);
    return found;
}

heapd_client *harness_connect_ok(const char *sock, unsigned flags)
{
    heapd_connect_opts o = {.socket_path = sock, .flags = flags};
    heapd_client *c = NULL;
    int rc = heapd_connect(&c, &o);
    ck_assert_msg(rc == 0, "heapd_connect: %s (%s)", heapd_strerror(rc),
                  heapd_last_error());
    return c;
}

struct connect_retry {
    const char *sock;
    unsigned flags;
    heapd_client *c;
};

static bool connect_not_full(void *arg, char *seen, size_t seen_len)
{
    struct connect_retry *r = arg;
    heapd_connect_opts o = {.socket_path = r->sock, .flags = r->flags};
    int rc = heapd_connect(&r->c, &o);
    if (rc == -EAGAIN) {
        snprintf(seen, seen_len, "%s", heapd_last_error());
        return false;
    }
    ck_assert_msg(rc == 0, "heapd_connect: %s (%s)", heapd_strerror(rc),
                  heapd_last_error());
    return true;
}

heapd_client *harness_connect_when_room(const char *sock, unsigned flags)
{
    struct connect_retry r = {sock, flags, NULL};
    harness_wait_until(connect_not_full, &r,
                       "heapd to have closed the connections it refused");
    return r.c;
}

uint32_t harness_still_serving(const char *sock)
{
    heapd_client *c = harness_connect_ok(sock, HEAPD_CONNECT_CONTROL);
    heapd_stats_t st;
    int rc = heapd_stats(c, &st);
    ck_assert_msg(rc == 0, "stats: %s", heapd_last_error());
    heapd_disconnect(c);
    return st.clients_connected;
}

void harness_expect_error_and_close(int fd, Heapd__ErrorCode code,
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

void **harness_build_fan(heapd_mutator *m, size_t slot, size_t n,
                         uint64_t magic)
{
    void **fan = heapd_alloc(m, n, 0);
    if (!fan)
        return NULL;
    heapd_root_set(m, slot, fan);
    for (size_t i = 0; i < n; i++) {
        void **ch = heapd_alloc(m, 1, 16);
        if (!ch)
            return NULL;
        heapd_write(m, fan, &fan[i], ch); /* linked before the safepoint */
        uint64_t *b = heapd_bytes(ch);
        b[0] = i;
        b[1] = magic;
        uint64_t *leaf = heapd_alloc(m, 0, 8);
        if (!leaf)
            return NULL;
        *leaf = i * 7 + magic;
        heapd_write(m, ch, &ch[0], leaf);
    }
    return fan;
}
