/* Helpers of the collections' test suites (test_collections.c,
 * test_collections_kill.c): a heapd that ends no stopped kid, value
 * strings a reader can check whole, keys, and kid processes that attach
 * after a word on a pipe and report words back. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll_util.h"
#include "heapd_collections.h"

struct daemon_proc D;

void coll_start(void)
{
    /* the test, not heapd, ends a stopped kid */
    harness_start_with(&D, "stall_timeout = 3600s\n");
}

/* A value string for KEY, generation G: "KEY=G" padded to 100 bytes
 * with a checksum byte at the end, so a reader can tell a whole value
 * from a torn or foreign one. */
void *make_value(heapd_mutator *m, const char *key, unsigned g)
{
    char buf[VAL_LEN];
    memset(buf, '.', sizeof buf);
    int n = snprintf(buf, sizeof buf, "%s=%u", key, g);
    buf[n] = '.';
    unsigned char sum = 0;
    for (size_t i = 0; i < VAL_LEN - 1; i++)
        sum += (unsigned char)buf[i];
    buf[VAL_LEN - 1] = (char)(sum | 1);
    return heapd_str_new(m, buf, sizeof buf);
}

/* Is V a whole value of KEY?  Its generation in *G. */
bool value_ok(const void *v, const char *key, unsigned *g)
{
    if (!v || !heapd_is_str(v) || heapd_str_len(v) != VAL_LEN)
        return false;
    const char *d = heapd_str_data(v);
    unsigned char sum = 0;
    for (size_t i = 0; i < VAL_LEN - 1; i++)
        sum += (unsigned char)d[i];
    if ((char)(sum | 1) != d[VAL_LEN - 1])
        return false;
    size_t kl = strlen(key);
    if (memcmp(d, key, kl) != 0 || d[kl] != '=')
        return false;
    if (g)
        *g = (unsigned)strtoul(d + kl + 1, NULL, 10);
    return true;
}

void key_name(char *out, size_t n, unsigned i)
{
    snprintf(out, n, "key:%08u", i);
}

/* Set key I of MAP (rooted in SLOT) to generation G. */
int put_key(heapd_mutator *m, size_t slot, unsigned i, unsigned g,
                   unsigned flags)
{
    char k[32];
    key_name(k, sizeof k, i);
    void *v = make_value(m, k, g);
    if (!v)
        return -errno;
    return heapd_map_put_str(m, heapd_root_get(m, slot), k, strlen(k), v,
                             flags);
}

/* Fork a kid that waits for a byte on its GO pipe (*GO, the write end:
 * kid_go), then connects and attaches (young if YOUNG) and runs BODY(m,
 * ARG, FD) with FD the write end of a pipe whose read end is returned in
 * *RFD; the kid exits with BODY's return value.  Every kid is forked
 * before the test process connects: a process with libheapd's threads
 * must not fork a child that starts its own under ThreadSanitizer ("dup
 * thread with used id"). */
pid_t fork_kid(int (*body)(heapd_mutator *m, void *arg, int fd),
                      void *arg, bool young, int *rfd, int *go,
                      const char *stop_in)
{
    int p[2], g[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(pipe(g), 0);
    pid_t k = fork();
    ck_assert_int_ge(k, 0);
    if (k == 0) {
        close(p[0]);
        close(g[1]);
        char b;
        if (read(g[0], &b, 1) != 1)
            _exit(89); /* the test ended before it said go */
        close(g[0]);
        if (stop_in)
            setenv("HEAPD_COLL_STOP_IN", stop_in, 1);
        heapd_connect_opts co = {.socket_path = D.sock,
                                 .flags = HEAPD_CONNECT_NO_RECONNECT};
        heapd_mutator_opts mo = {.flags = young ? HEAPD_MUTATOR_YOUNG : 0};
        heapd_client *c;
        heapd_mutator *m;
        if (heapd_connect(&c, &co) != 0 || heapd_attach_opts(c, &mo, &m))
            _exit(90);
        int rc = body(m, arg, p[1]);
        heapd_detach(m);
        heapd_disconnect(c);
        _exit(rc);
    }
    close(p[1]);
    close(g[0]);
    *rfd = p[0];
    *go = g[1];
    return k;
}

void kid_go(int go)
{
    ck_assert_int_eq(write(go, "g", 1), 1);
    close(go);
}

void expect_exit0(pid_t k, const char *who)
{
    int st = harness_wait_pid(k, HARNESS_WAIT_MS);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "%s failed: status 0x%x (exit %d)", who, st,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

void send_u64(int fd, uint64_t v)
{
    if (write(fd, &v, sizeof v) != sizeof v)
        _exit(91);
}

uint64_t recv_u64(int fd, const char *what)
{
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof v);
    ck_assert_msg(n == sizeof v, "no word from the kid: %s", what);
    return v;
}

/* The map or queue in global NAME, for a kid. */
void *global_of(heapd_mutator *m, const char *name)
{
    void *o = heapd_global_get(m, name);
    if (!o)
        _exit(92);
    return o;
}

/* The map of global "t.map", CAP keys big, in a root slot of M. */
size_t shared_map(heapd_mutator *m, size_t cap)
{
    size_t r = heapd_root_push(m, heapd_map_new(m, HEAPD_MAP_STR, cap));
    ck_assert_ptr_nonnull(heapd_root_get(m, r));
    ck_assert_int_eq(heapd_global_set(m, "t.map", heapd_root_get(m, r)), 0);
    return r;
}

struct stop_wait {
    pid_t kid;
};

static bool kid_stopped(void *arg, char *seen, size_t n)
{
    struct stop_wait *w = arg;
    int st;
    pid_t r = waitpid(w->kid, &st, WUNTRACED | WNOHANG);
    ck_assert_int_ge(r, 0);
    if (r == w->kid) {
        ck_assert_msg(WIFSTOPPED(st), "the kid ended before it stopped "
                      "(status 0x%x, exit %d)", st,
                      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return true;
    }
    snprintf(seen, n, "the kid runs");
    return false;
}

void wait_stopped(pid_t k, const char *point)
{
    struct stop_wait w = {k};
    char what[96];
    snprintf(what, sizeof what, "the kid to stop itself at %s", point);
    harness_wait_until(kid_stopped, &w, what);
}

void kill_stopped(pid_t k, const char *point)
{
    wait_stopped(k, point);
    ck_assert_int_eq(kill(k, SIGKILL), 0);
    int st = harness_wait_pid(k, HARNESS_WAIT_MS);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                  "the kid was not killed (status 0x%x)", st);
}

void coll_finish(heapd_client *c, heapd_mutator *m, size_t roots)
{
    heapd_root_pop(m, roots);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
