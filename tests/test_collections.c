/* libheapd's shared collections (heapd_collections.h): strings, the
 * concurrent hash map and the queue, used by real processes on a real
 * heapd that runs its verifier after every cycle.
 *
 * Besides what each call does (and refuses), the tests check the
 * concurrent guarantees the header states: lookups of keys being deleted
 * and replaced by another process see whole values, iteration sees each
 * stable key once while another process churns and grows the map, every
 * value pushed by several producers is popped exactly once, a consumer
 * waiting in heapd_queue_pop_wait does not hold up a collection, and a
 * process SIGKILLed in the middle of each step of each operation (Note
 * [Collections survive a kill] in client/collections/map.c; the HEAPD_COLL_STOP_IN
 * hook stops it exactly there) leaves every structure whole and usable.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "heapd_collections.h"
#include "check_main.h"

static struct daemon_proc D;

/* ---- helpers ---- */

static void start(void)
{
    /* the test, not heapd, ends a stopped kid */
    harness_start_with(&D, "stall_timeout = 3600s\n");
}

/* A value string for KEY, generation G: "KEY=G" padded to 100 bytes
 * with a checksum byte at the end, so a reader can tell a whole value
 * from a torn or foreign one. */
#define VAL_LEN 100
static void *make_value(heapd_mutator *m, const char *key, unsigned g)
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
static bool value_ok(const void *v, const char *key, unsigned *g)
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

static void key_name(char *out, size_t n, unsigned i)
{
    snprintf(out, n, "key:%08u", i);
}

/* Set key I of MAP (rooted in SLOT) to generation G. */
static int put_key(heapd_mutator *m, size_t slot, unsigned i, unsigned g,
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
static pid_t fork_kid(int (*body)(heapd_mutator *m, void *arg, int fd),
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

static void kid_go(int go)
{
    ck_assert_int_eq(write(go, "g", 1), 1);
    close(go);
}

static void expect_exit0(pid_t k, const char *who)
{
    int st = harness_wait_pid(k, HARNESS_WAIT_MS);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "%s failed: status 0x%x (exit %d)", who, st,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static void send_u64(int fd, uint64_t v)
{
    if (write(fd, &v, sizeof v) != sizeof v)
        _exit(91);
}

static uint64_t recv_u64(int fd, const char *what)
{
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof v);
    ck_assert_msg(n == sizeof v, "no word from the kid: %s", what);
    return v;
}

/* The map or queue in global NAME, for a kid. */
static void *global_of(heapd_mutator *m, const char *name)
{
    void *o = heapd_global_get(m, name);
    if (!o)
        _exit(92);
    return o;
}

/* ---- strings ---- */

START_TEST(strings)
{
    start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    void *s = heapd_str_new(m, "hello", 5);
    ck_assert_ptr_nonnull(s);
    ck_assert(heapd_is_str(s));
    ck_assert_uint_eq(heapd_str_len(s), 5);
    ck_assert_str_eq(heapd_str_data(s), "hello");
    ck_assert_uint_eq(heapd_str_hash(s), heapd_hash_bytes("hello", 5));
    size_t r = heapd_root_push(m, s);
    void *e = heapd_str_new(m, NULL, 0); /* the empty string */
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(heapd_str_len(e), 0);
    ck_assert_str_eq(heapd_str_data(e), "");
    heapd_root_push(m, e);
    void *z = heapd_str_new(m, "a\0b", 3); /* bytes, NUL included */
    ck_assert_ptr_nonnull(z);
    ck_assert_uint_eq(heapd_str_len(z), 3);
    ck_assert_int_eq(memcmp(heapd_str_data(z), "a\0b", 4), 0);
    heapd_root_push(m, z);
    void *h2 = heapd_str_new(m, "hellp", 5);
    s = heapd_root_get(m, r);
    e = heapd_root_get(m, r + 1);
    ck_assert(!heapd_str_eq(s, h2));
    ck_assert_int_lt(heapd_str_cmp(s, h2), 0);
    ck_assert_int_gt(heapd_str_cmp(s, e), 0);
    ck_assert_int_eq(heapd_str_cmp(s, s), 0);
    void *h3 = heapd_str_new(m, "hello", 5);
    s = heapd_root_get(m, r);
    ck_assert(heapd_str_eq(s, h3) && s != h3);
    ck_assert_uint_ne(heapd_hash_bytes("hello", 5),
                      heapd_hash_bytes("hellp", 5));
    /* not strings */
    ck_assert(!heapd_is_str(NULL));
    void *o = heapd_alloc(m, 1, 32);
    ck_assert(!heapd_is_str(o));
    void *forged = heapd_alloc(m, 0, 32); /* the tag, a length that lies */
    memcpy(heapd_bytes(forged), "HSTR\x40\0\0\0", 8);
    ck_assert(!heapd_is_str(forged));
    /* refused */
    errno = 0;
    ck_assert_ptr_null(heapd_str_new(m, NULL, 3));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(heapd_str_new(m, "x", HEAPD_STR_MAX + 1));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_nonnull(strstr(heapd_last_error(), "HEAPD_STR_MAX"));
    heapd_root_pop(m, 3);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* ---- the map, one process ---- */

START_TEST(map_operations)
{
    start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    void *map = heapd_map_new(m, HEAPD_MAP_STR, 0);
    ck_assert_ptr_nonnull(map);
    ck_assert(heapd_is_map(map));
    size_t r = heapd_root_push(m, map);
    ck_assert_int_eq(put_key(m, r, 1, 1, 0), 0);      /* inserted */
    ck_assert_int_eq(put_key(m, r, 1, 2, 0), 1);      /* replaced */
    ck_assert_int_eq(put_key(m, r, 1, 3, HEAPD_MAP_IF_ABSENT), -EEXIST);
    ck_assert_int_eq(put_key(m, r, 2, 1, HEAPD_MAP_IF_PRESENT), -ENOENT);
    ck_assert_int_eq(put_key(m, r, 2, 1, HEAPD_MAP_IF_ABSENT), 0);
    unsigned g;
    map = heapd_root_get(m, r);
    ck_assert(value_ok(heapd_map_get_str(m, map, "key:00000001", 12),
                       "key:00000001", &g) && g == 2);
    ck_assert_ptr_null(heapd_map_get_str(m, map, "key:00000003", 12));
    ck_assert_uint_eq(heapd_map_count(map), 2);
    /* by a key string, and compare-and-swap of a value */
    void *k1 = heapd_str_new(m, "key:00000001", 12);
    size_t rk = heapd_root_push(m, k1);
    map = heapd_root_get(m, r);
    void *v2 = heapd_map_get(m, map, heapd_root_get(m, rk));
    size_t rv = heapd_root_push(m, v2);
    void *v9 = make_value(m, "key:00000001", 9);
    size_t rv9 = heapd_root_push(m, v9);
    void *v7 = make_value(m, "key:00000001", 7);
    map = heapd_root_get(m, r);
    ck_assert_int_eq(heapd_map_replace(m, map, heapd_root_get(m, rk),
                                       heapd_root_get(m, rv9), v7), -EAGAIN);
    v7 = make_value(m, "key:00000001", 7);
    map = heapd_root_get(m, r);
    ck_assert_int_eq(heapd_map_replace(m, map, heapd_root_get(m, rk),
                                       heapd_root_get(m, rv), v7), 0);
    map = heapd_root_get(m, r);
    ck_assert(value_ok(heapd_map_get(m, map, heapd_root_get(m, rk)),
                       "key:00000001", &g) && g == 7);
    /* delete */
    ck_assert_int_eq(heapd_map_delete(m, heapd_root_get(m, r),
                                      heapd_root_get(m, rk)), 0);
    map = heapd_root_get(m, r);
    ck_assert_ptr_null(heapd_map_get(m, map, heapd_root_get(m, rk)));
    ck_assert_int_eq(heapd_map_delete(m, map, heapd_root_get(m, rk)),
                     -ENOENT);
    ck_assert_int_eq(heapd_map_delete_str(m, heapd_root_get(m, r),
                                          "key:00000002", 12), 0);
    ck_assert_uint_eq(heapd_map_count(heapd_root_get(m, r)), 0);
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)), 0);
    heapd_root_pop(m, 3);

    /* keys longer than what a bucket keeps of them, alike up to there */
    const char *long1 = "a-long-key-with-a-shared-prefix:1";
    const char *long2 = "a-long-key-with-a-shared-prefix:2";
    ck_assert_int_eq(heapd_map_put_str(m, heapd_root_get(m, r), long1,
                                       strlen(long1),
                                       make_value(m, long1, 1), 0), 0);
    ck_assert_int_eq(heapd_map_put_str(m, heapd_root_get(m, r), long2,
                                       strlen(long2),
                                       make_value(m, long2, 2), 0), 0);
    map = heapd_root_get(m, r);
    ck_assert(value_ok(heapd_map_get_str(m, map, long1, strlen(long1)),
                       long1, &g) && g == 1);
    ck_assert(value_ok(heapd_map_get_str(m, map, long2, strlen(long2)),
                       long2, &g) && g == 2);
    ck_assert_ptr_null(heapd_map_get_str(m, map, long1, strlen(long1) - 1));
    ck_assert_int_eq(heapd_map_verify(map), 2);
    ck_assert_int_eq(heapd_map_delete_str(m, map, long1, strlen(long1)), 0);
    ck_assert_int_eq(heapd_map_delete_str(m, heapd_root_get(m, r), long2,
                                          strlen(long2)), 0);

    /* it grows from 8 slots, through eleven resizes, with collections */
    enum { N = 20000 };
    for (unsigned i = 0; i < N; i++)
        ck_assert_int_eq(put_key(m, r, i, 1, 0), 0);
    harness_collect(m);
    for (unsigned i = 0; i < N; i += 2)
        ck_assert_int_eq(put_key(m, r, i, 2, 0), 1);
    for (unsigned i = 0; i < N; i += 3) {
        char k[32];
        key_name(k, sizeof k, i);
        ck_assert_int_eq(heapd_map_delete_str(m, heapd_root_get(m, r), k,
                                              strlen(k)), 0);
    }
    harness_collect(m);
    map = heapd_root_get(m, r);
    unsigned present = 0;
    for (unsigned i = 0; i < N; i++) {
        char k[32];
        key_name(k, sizeof k, i);
        void *v = heapd_map_get_str(m, map, k, strlen(k));
        if (i % 3 == 0) {
            ck_assert_msg(!v, "deleted key %u is there", i);
            continue;
        }
        ck_assert_msg(value_ok(v, k, &g) && g == (i % 2 ? 1u : 2u),
                      "key %u: a wrong value", i);
        present++;
    }
    ck_assert_int_eq(heapd_map_verify(map), (int)present);
    ck_assert_uint_eq(heapd_map_count(map), present);

    /* refused */
    void *plain = heapd_alloc(m, 0, 16);
    map = heapd_root_get(m, r);
    ck_assert_int_eq(heapd_map_put(m, plain, plain, plain, 0), -EINVAL);
    ck_assert_ptr_nonnull(strstr(heapd_last_error(), "not a map"));
    ck_assert_int_eq(heapd_map_put(m, map, plain, plain, 0), -EINVAL);
    ck_assert_ptr_nonnull(strstr(heapd_last_error(), "heapd_str_new"));
    ck_assert_int_eq(heapd_map_put_str(m, map, "k", 1, NULL, 0), -EINVAL);
    ck_assert_int_eq(heapd_map_put_str(m, map, "k", 1, plain,
                                       HEAPD_MAP_IF_ABSENT |
                                           HEAPD_MAP_IF_PRESENT), -EINVAL);
    ck_assert_int_eq(heapd_map_put_str(m, map, "k", 1, plain, 0x80), -EINVAL);
    errno = 0;
    ck_assert_ptr_null(heapd_map_get(m, map, plain));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(heapd_map_get(m, plain, plain));
    ck_assert_int_eq(heapd_map_verify(plain), -EINVAL);
    ck_assert_ptr_null(heapd_map_new(m, 7, 0));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert(!heapd_is_map(plain) && !heapd_is_map(NULL));
    heapd_root_pop(m, 1);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* Note [Map footprint]: with the map the heap's only object graph, what
 * the footprint counts is what a collection marks (the daemon counts
 * objects, not the room past them), and the parts are what the objects
 * are: a key of 12 bytes is kept in its bucket (Note [Inline keys]), one
 * of 40 is a string object, and so is a value of VAL_LEN.  The mutator
 * is precise, so that no stack word keeps an old bucket alive beside the
 * map. */
START_TEST(map_footprint_is_what_the_collector_marks)
{
    start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach_precise(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    void *map = heapd_map_new(m, HEAPD_MAP_STR, 0);
    ck_assert_ptr_nonnull(map);
    size_t r = heapd_root_push(m, map);
    const unsigned n = 5000;
    for (unsigned i = 0; i < n; i++)
        ck_assert_int_eq(put_key(m, r, i, 1, 0), 0);
    for (unsigned i = 0; i < n; i += 3)
        ck_assert_int_eq(put_key(m, r, i, 2, 0), 1); /* garbage */
    const unsigned nlong = 100;
    char longkey[41];
    for (unsigned i = 0; i < nlong; i++) {
        snprintf(longkey, sizeof longkey, "a key too long to be inline: %08u",
                 i);
        void *v = heapd_str_new(m, "v", 1);
        ck_assert_ptr_nonnull(v);
        ck_assert_int_eq(heapd_map_put_str(m, heapd_root_get(m, r), longkey,
                                           strlen(longkey), v, 0), 0);
    }
    harness_collect(m);
    heapd_blocking_enter(m);
    heapd_stats_t st = harness_stats(ctl);
    heapd_blocking_leave(m);
    heapd_map_footprint_t f;
    map = heapd_root_get(m, r);
    ck_assert_int_eq(heapd_map_footprint(m, map, &f), 0);
    uint64_t blocks = f.map_bytes + f.table_bytes + f.bucket_bytes +
                      f.key_bytes + f.value_bytes;
    fprintf(stderr, "footprint: %" PRIu64 " keys, map %" PRIu64 ", table %"
            PRIu64 ", buckets %" PRIu64 ", keys %" PRIu64 ", values %"
            PRIu64 ", headers %" PRIu64 ", slack %" PRIu64 "; live %"
            PRIu64 "\n", f.keys, f.map_bytes, f.table_bytes,
            f.bucket_bytes, f.key_bytes, f.value_bytes, f.header_bytes,
            f.slack_bytes, st.live_bytes);
    ck_assert_uint_eq(f.keys, n + nlong);
    ck_assert_uint_eq(blocks - f.slack_bytes, st.live_bytes);
    /* a string object: header, then its bytes, rounded to a class; the
     * short keys have none */
    void *k0 = heapd_str_new(m, longkey, strlen(longkey));
    void *v0 = heapd_map_get_str(m, heapd_root_get(m, r), "key:00000000", 12);
    ck_assert_ptr_nonnull(k0);
    ck_assert_ptr_nonnull(v0);
    uint64_t kb = f.key_bytes / nlong;
    ck_assert_uint_eq(f.key_bytes, kb * nlong);
    ck_assert_uint_ge(kb, 8 + heapd_nrefs(k0) * 8 + heapd_nbytes(k0));
    ck_assert_uint_lt(kb, 2 * (8 + heapd_nbytes(k0)));
    uint64_t vb = (f.value_bytes - nlong * 32) / n; /* "v": 32-byte blocks */
    ck_assert_uint_eq(f.value_bytes, vb * n + nlong * 32);
    ck_assert_uint_ge(vb, 8 + heapd_nrefs(v0) * 8 + heapd_nbytes(v0));
    /* a header per value, per long key, for the map, its two shared
     * buckets and its table at least (and per bucket) */
    ck_assert_uint_ge(f.header_bytes, 8 * ((uint64_t)n + 2 * nlong + 4));
    ck_assert_int_eq(heapd_map_footprint(m, k0, &f), -EINVAL);
    ck_assert_int_eq(heapd_map_footprint(m, heapd_root_get(m, r), NULL),
                     -EINVAL);
    heapd_root_pop(m, 1);
    heapd_disconnect(ctl);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(map_kinds)
{
    start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    /* BYTES: two objects with the same raw bytes are one key; the
     * reference fields are not part of it */
    size_t r = heapd_root_push(m, heapd_map_new(m, HEAPD_MAP_BYTES, 4));
    void *a = heapd_alloc(m, 1, 8);
    memcpy(heapd_bytes(a), "abcdefgh", 8);
    size_t ra = heapd_root_push(m, a);
    void *b = heapd_alloc(m, 2, 8);
    memcpy(heapd_bytes(b), "abcdefgh", 8);
    size_t rb = heapd_root_push(m, b);
    ck_assert_int_eq(heapd_map_put(m, heapd_root_get(m, r),
                                   heapd_root_get(m, ra),
                                   heapd_root_get(m, ra), 0), 0);
    ck_assert_int_eq(heapd_map_put(m, heapd_root_get(m, r),
                                   heapd_root_get(m, rb),
                                   heapd_root_get(m, rb), 0), 1);
    ck_assert_ptr_eq(heapd_map_get(m, heapd_root_get(m, r),
                                   heapd_root_get(m, ra)),
                     heapd_root_get(m, rb));
    ck_assert_ptr_eq(heapd_map_get_str(m, heapd_root_get(m, r), "abcdefgh",
                                       8), heapd_root_get(m, rb));
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)), 1);
    /* IDENTITY: the same two are two keys; a young key is its copy */
    heapd_root_set(m, r, heapd_map_new(m, HEAPD_MAP_IDENTITY, 0));
    ck_assert_int_eq(heapd_map_put(m, heapd_root_get(m, r),
                                   heapd_root_get(m, ra),
                                   heapd_root_get(m, ra), 0), 0);
    ck_assert_int_eq(heapd_map_put(m, heapd_root_get(m, r),
                                   heapd_root_get(m, rb),
                                   heapd_root_get(m, rb), 0), 0);
    ck_assert_ptr_eq(heapd_map_get(m, heapd_root_get(m, r),
                                   heapd_root_get(m, ra)),
                     heapd_root_get(m, ra));
    ck_assert_int_eq(heapd_map_get_str(m, heapd_root_get(m, r), "x", 1)
                         ? 0 : errno, EINVAL);
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)), 2);
    /* the STR map takes only strings */
    heapd_root_set(m, r, heapd_map_new(m, HEAPD_MAP_STR, 0));
    ck_assert_int_eq(heapd_map_put(m, heapd_root_get(m, r),
                                   heapd_root_get(m, ra),
                                   heapd_root_get(m, ra), 0), -EINVAL);
    heapd_root_pop(m, 3);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* A client that writes garbage into the raw bytes of a map (a stored
 * hash, the map's kind) costs only that map: lookups find nothing where
 * the bytes lie, heapd_map_verify names the damage, calls on a map whose
 * kind is garbage are refused, and heapd and everything else are whole. */
START_TEST(map_damaged_by_a_client)
{
    start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = heapd_root_push(m, heapd_map_new(m, HEAPD_MAP_STR, 0));
    for (unsigned i = 0; i < 100; i++)
        ck_assert_int_eq(put_key(m, r, i, 1, 0), 0);
    size_t other = heapd_root_push(m, heapd_map_new(m, HEAPD_MAP_STR, 0));
    for (unsigned i = 0; i < 100; i++)
        ck_assert_int_eq(put_key(m, other, i, 1, 0), 0);
    /* the hash stored beside key 7: the bucket is the only object with
     * two reference fields per key whose first key is key 7's string */
    void *map = heapd_root_get(m, r);
    void *v7 = heapd_map_get_str(m, map, "key:00000007", 12);
    ck_assert_ptr_nonnull(v7);
    void **t = ((void **)map)[0];
    size_t n = heapd_nrefs(t) - 1;
    bool hit = false;
    for (size_t i = 0; i < n && !hit; i++) {
        void **b = t[1 + i];
        for (size_t e = 0; b && e < heapd_nrefs(b) / 2; e++)
            if (b[2 * e + 1] == v7) {
                /* its record: 8 bytes of tag and flags, then 32 a key,
                 * the hash first (Note [Shared map]) */
                uint64_t *hash = (uint64_t *)((char *)heapd_bytes(b) + 8 +
                                              32 * e);
                *hash ^= 0x5a5a5a5a5a5a5a5aull; /* a raw store */
                hit = true;
            }
    }
    ck_assert(hit);
    ck_assert_ptr_null(heapd_map_get_str(m, map, "key:00000007", 12));
    ck_assert_int_eq(heapd_map_verify(map), -EUCLEAN);
    ck_assert_msg(strstr(heapd_last_error(), "hash"), "verify said: %s",
                  heapd_last_error());
    /* the kind */
    uint32_t *kind = (uint32_t *)heapd_bytes(map) + 1;
    *kind = 0x77;
    ck_assert(!heapd_is_map(map));
    ck_assert_int_eq(put_key(m, r, 1, 2, 0), -EINVAL);
    ck_assert_ptr_null(heapd_map_get_str(m, heapd_root_get(m, r),
                                         "key:00000001", 12));
    ck_assert_int_eq(errno, EINVAL);
    /* the other map, and the heap, are whole */
    harness_collect(m);
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, other)), 100);
    for (unsigned i = 0; i < 100; i++) {
        char k[32];
        key_name(k, sizeof k, i);
        ck_assert(value_ok(heapd_map_get_str(m, heapd_root_get(m, other), k,
                                             strlen(k)), k, NULL));
    }
    heapd_root_pop(m, 2);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* ---- the map, several processes ---- */

#define SHARED_KEYS 2000

struct churn {
    unsigned rounds;    /* passes over the keys */
    unsigned first, n;  /* the keys it churns */
    bool grow;          /* also insert new keys, from 1,000,000 on */
};

/* Replace, delete and re-insert keys [first, first + n) ROUNDS times;
 * a word to FD when it has begun, then one when it is done. */
static int churn_body(heapd_mutator *m, void *arg, int fd)
{
    const struct churn *ch = arg;
    size_t r = heapd_root_push(m, global_of(m, "t.map"));
    send_u64(fd, 1);
    unsigned fresh = 1000000;
    for (unsigned round = 0; round < ch->rounds; round++) {
        for (unsigned i = ch->first; i < ch->first + ch->n; i++) {
            char k[32];
            key_name(k, sizeof k, i);
            int rc;
            if ((i + round) % 4 == 0)
                rc = heapd_map_delete_str(m, heapd_root_get(m, r), k,
                                          strlen(k));
            else
                rc = put_key(m, r, i, round + 2, 0);
            if (rc < 0 && rc != -ENOENT)
                return 20;
            if (ch->grow && (rc = put_key(m, r, fresh++, 1, 0)) != 0)
                return 21;
        }
    }
    send_u64(fd, 2);
    return 0;
}

/* Look up every churned key over and over until FD (the parent) says
 * stop: a value found must be whole and the key's own. */
static int reader_body(heapd_mutator *m, void *arg, int fd)
{
    const int *stop = arg; /* a pipe: EOF on stop[0] says stop */
    close(stop[1]);
    int stop_fd = stop[0];
    size_t r = heapd_root_push(m, global_of(m, "t.map"));
    send_u64(fd, 1);
    uint64_t seen = 0, bad = 0;
    for (;;) {
        char b;
        ssize_t n = read(stop_fd, &b, 1); /* non-blocking */
        if (n == 1 || n == 0)
            break;
        void *map = heapd_root_get(m, r);
        for (unsigned i = 0; i < SHARED_KEYS; i++) {
            char k[32];
            key_name(k, sizeof k, i);
            void *v = heapd_map_get_str(m, map, k, strlen(k));
            if (v && !value_ok(v, k, NULL))
                bad++;
            seen += v != NULL;
            if (i % 128 == 0) {
                heapd_safepoint(m);
                map = heapd_root_get(m, r);
            }
        }
    }
    send_u64(fd, seen);
    send_u64(fd, bad);
    return 0;
}

static size_t shared_map(heapd_mutator *m, size_t cap)
{
    size_t r = heapd_root_push(m, heapd_map_new(m, HEAPD_MAP_STR, cap));
    ck_assert_ptr_nonnull(heapd_root_get(m, r));
    ck_assert_int_eq(heapd_global_set(m, "t.map", heapd_root_get(m, r)), 0);
    return r;
}

/* Two writers (one young) delete, re-insert and replace the keys two
 * readers read, while collections run: every value a reader finds is a
 * whole value of its key. */
START_TEST(map_delete_while_reading)
{
    start();
    int stop[2];
    ck_assert_int_eq(pipe(stop), 0);
    ck_assert_int_eq(fcntl(stop[0], F_SETFL, O_NONBLOCK), 0);
    int rfd[4], go[4];
    pid_t readers[2], writers[2];
    for (int i = 0; i < 2; i++)
        readers[i] = fork_kid(reader_body, stop, false, &rfd[i], &go[i],
                              NULL);
    close(stop[0]);
    struct churn ch[2] = {{.rounds = 30, .first = 0, .n = SHARED_KEYS / 2,
                           .grow = true},
                          {.rounds = 30, .first = SHARED_KEYS / 2,
                           .n = SHARED_KEYS / 2, .grow = false}};
    for (int i = 0; i < 2; i++)
        writers[i] = fork_kid(churn_body, &ch[i], i == 1, &rfd[2 + i],
                              &go[2 + i], NULL);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = shared_map(m, 0);
    for (unsigned i = 0; i < SHARED_KEYS; i++)
        ck_assert_int_eq(put_key(m, r, i, 1, 0), 0);
    for (int i = 0; i < 4; i++)
        kid_go(go[i]);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(recv_u64(rfd[i], "started"), 1);
    /* collections while they work */
    for (int i = 0; i < 2; i++) {
        harness_collect(m);
        ck_assert_uint_eq(recv_u64(rfd[2 + i], "churned"), 2);
        expect_exit0(writers[i], "a writer");
    }
    close(stop[1]); /* EOF: the readers stop */
    for (int i = 0; i < 2; i++) {
        uint64_t seen = recv_u64(rfd[i], "seen");
        uint64_t bad = recv_u64(rfd[i], "bad");
        ck_assert_msg(bad == 0, "reader %d found %" PRIu64 " damaged values "
                      "of %" PRIu64, i, bad, seen);
        ck_assert_uint_gt(seen, 0);
        expect_exit0(readers[i], "a reader");
    }
    harness_collect(m);
    void *map = heapd_root_get(m, r);
    int n = heapd_map_verify(map);
    ck_assert_msg(n >= 0, "verify: %s", heapd_last_error());
    ck_assert_uint_eq((unsigned)n, heapd_map_count(map));
    /* the last round left: key i deleted iff (i + 29) % 4 == 0 */
    for (unsigned i = 0; i < SHARED_KEYS; i++) {
        char k[32];
        unsigned g;
        key_name(k, sizeof k, i);
        void *v = heapd_map_get_str(m, map, k, strlen(k));
        if ((i + 29) % 4 == 0)
            ck_assert_msg(!v, "key %u should be deleted", i);
        else
            ck_assert_msg(value_ok(v, k, &g) && g == 31, "key %u", i);
    }
    for (int i = 0; i < 4; i++)
        close(rfd[i]);
    heapd_root_pop(m, 1);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* Iteration sees every stable key exactly once while another process
 * churns other keys and grows the map through several resizes. */
START_TEST(map_iteration_under_updates)
{
    start();
    struct churn ch = {.rounds = 4, .first = 0, .n = SHARED_KEYS,
                       .grow = true};
    int rfd, go;
    pid_t w = fork_kid(churn_body, &ch, false, &rfd, &go, NULL);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = shared_map(m, 0);
    enum { STABLE = 3000, STABLE_BASE = 500000 };
    for (unsigned i = 0; i < STABLE; i++)
        ck_assert_int_eq(put_key(m, r, STABLE_BASE + i, 1, 0), 0);
    for (unsigned i = 0; i < SHARED_KEYS; i++)
        ck_assert_int_eq(put_key(m, r, i, 1, 0), 0);
    kid_go(go);
    ck_assert_uint_eq(recv_u64(rfd, "started"), 1);
    static unsigned char seen[STABLE];
    unsigned passes = 0;
    bool done = false;
    while (!done || passes < 2) {
        memset(seen, 0, sizeof seen);
        heapd_map_iter it;
        ck_assert_int_eq(heapd_map_iter_begin(m, heapd_root_get(m, r), &it),
                         0);
        void *k, *v;
        unsigned churned = 0;
        while (heapd_map_iter_next(&it, &k, &v)) {
            ck_assert(heapd_is_str(k));
            ck_assert_msg(value_ok(v, heapd_str_data(k), NULL),
                          "key %s: value %.*s", heapd_str_data(k),
                          v && heapd_is_str(v) ? (int)heapd_str_len(v) : 0,
                          v && heapd_is_str(v) ? heapd_str_data(v) : "");
            unsigned i = (unsigned)strtoul(heapd_str_data(k) + 4, NULL, 10);
            if (i >= STABLE_BASE && i < STABLE_BASE + STABLE) {
                ck_assert_msg(!seen[i - STABLE_BASE], "key %u seen twice",
                              i);
                seen[i - STABLE_BASE] = 1;
            } else {
                churned++;
            }
        }
        heapd_map_iter_end(&it);
        for (unsigned i = 0; i < STABLE; i++)
            ck_assert_msg(seen[i], "pass %u: stable key %u not seen", passes,
                          STABLE_BASE + i);
        passes++;
        if (!done) {
            /* has the writer finished? (a non-blocking look) */
            struct timeval tv = {0, 0};
            fd_set fs;
            FD_ZERO(&fs);
            FD_SET(rfd, &fs);
            if (select(rfd + 1, &fs, NULL, NULL, &tv) == 1) {
                ck_assert_uint_eq(recv_u64(rfd, "churned"), 2);
                done = true;
            }
        }
    }
    expect_exit0(w, "the writer");
    close(rfd);
    ck_assert_uint_gt(heapd_map_count(heapd_root_get(m, r)),
                      STABLE + 4 * SHARED_KEYS);
    ck_assert_int_ge(heapd_map_verify(heapd_root_get(m, r)), 0);
    heapd_root_pop(m, 1);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

struct inserter {
    unsigned first, n;  /* its own keys */
};

/* Insert its own keys and race for the shared ones [0, SHARED_KEYS) with
 * IF_ABSENT; reports how many shared ones it won. */
static int insert_body(heapd_mutator *m, void *arg, int fd)
{
    const struct inserter *in = arg;
    size_t r = heapd_root_push(m, global_of(m, "t.map"));
    send_u64(fd, 1);
    uint64_t won = 0;
    for (unsigned i = 0; i < in->n; i++) {
        if (put_key(m, r, in->first + i, 1, 0) != 0)
            return 30;
        if (i < SHARED_KEYS) {
            int rc = put_key(m, r, i, 1, HEAPD_MAP_IF_ABSENT);
            if (rc == 0)
                won++;
            else if (rc != -EEXIST)
                return 31;
        }
    }
    send_u64(fd, won);
    return 0;
}

/* Two processes insert into one small map at once, through its resizes:
 * every key once, every shared key won by exactly one. */
START_TEST(map_concurrent_inserts)
{
    start();
    enum { OWN = 30000 };
    struct inserter in[2] = {{.first = 100000, .n = OWN},
                             {.first = 200000, .n = OWN}};
    int rfd[2], go[2];
    pid_t k[2];
    for (int i = 0; i < 2; i++)
        k[i] = fork_kid(insert_body, &in[i], i == 1, &rfd[i], &go[i], NULL);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = shared_map(m, 0);
    for (int i = 0; i < 2; i++)
        kid_go(go[i]);
    uint64_t won = 0;
    for (int i = 0; i < 2; i++)
        ck_assert_uint_eq(recv_u64(rfd[i], "started"), 1);
    harness_collect(m);
    for (int i = 0; i < 2; i++) {
        won += recv_u64(rfd[i], "won");
        expect_exit0(k[i], "an inserter");
        close(rfd[i]);
    }
    ck_assert_uint_eq(won, SHARED_KEYS);
    void *map = heapd_root_get(m, r);
    ck_assert_int_eq(heapd_map_verify(map), 2 * OWN + SHARED_KEYS);
    ck_assert_uint_eq(heapd_map_count(map), 2 * OWN + SHARED_KEYS);
    for (int j = 0; j < 2; j++)
        for (unsigned i = 0; i < OWN; i++) {
            char key[32];
            key_name(key, sizeof key, in[j].first + i);
            ck_assert_msg(value_ok(heapd_map_get_str(m, map, key,
                                                     strlen(key)),
                                   key, NULL), "key %s", key);
        }
    heapd_root_pop(m, 1);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* ---- the queue ---- */

START_TEST(queue_operations)
{
    start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = heapd_root_push(m, heapd_queue_new(m));
    ck_assert(heapd_is_queue(heapd_root_get(m, r)));
    errno = 0;
    ck_assert_ptr_null(heapd_queue_pop(m, heapd_root_get(m, r)));
    ck_assert_int_eq(errno, EAGAIN);
    for (unsigned i = 0; i < 1000; i++) {
        char k[32];
        key_name(k, sizeof k, i);
        void *v = make_value(m, k, i);
        ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r), v), 0);
        if (i == 500)
            harness_collect(m);
    }
    ck_assert_uint_eq(heapd_queue_length(heapd_root_get(m, r)), 1000);
    harness_collect(m);
    for (unsigned i = 0; i < 1000; i++) {
        char k[32];
        unsigned g;
        key_name(k, sizeof k, i);
        void *v = heapd_queue_pop(m, heapd_root_get(m, r));
        ck_assert_msg(value_ok(v, k, &g) && g == i, "value %u", i);
    }
    ck_assert_uint_eq(heapd_queue_length(heapd_root_get(m, r)), 0);
    errno = 0;
    ck_assert_ptr_null(heapd_queue_pop_wait(m, heapd_root_get(m, r), 20));
    ck_assert_int_eq(errno, ETIMEDOUT);
    /* refused */
    void *plain = heapd_alloc(m, 2, 24);
    ck_assert(!heapd_is_queue(plain) && !heapd_is_queue(NULL));
    ck_assert_int_eq(heapd_queue_push(m, plain, plain), -EINVAL);
    ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r), NULL),
                     -EINVAL);
    ck_assert_ptr_null(heapd_queue_pop(m, plain));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(heapd_queue_pop_wait(m, plain, 0));
    ck_assert_int_eq(errno, EINVAL);
    heapd_root_pop(m, 1);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

#define PER_PRODUCER 3000

struct producer {
    unsigned id;
};

static int producer_body(heapd_mutator *m, void *arg, int fd)
{
    const struct producer *p = arg;
    size_t r = heapd_root_push(m, global_of(m, "t.queue"));
    send_u64(fd, 1);
    for (unsigned i = 0; i < PER_PRODUCER; i++) {
        char k[32];
        key_name(k, sizeof k, p->id);
        void *v = make_value(m, k, i);
        if (!v || heapd_queue_push(m, heapd_root_get(m, r), v) != 0)
            return 40;
    }
    send_u64(fd, 2);
    return 0;
}

/* Pop with pop_wait until a value of key 99 (the stop sign); each value
 * popped goes to FD as (producer << 32 | generation). */
static int consumer_body(heapd_mutator *m, void *arg, int fd)
{
    (void)arg;
    size_t r = heapd_root_push(m, global_of(m, "t.queue"));
    send_u64(fd, 1);
    for (;;) {
        void *v = heapd_queue_pop_wait(m, heapd_root_get(m, r), 0);
        if (!v)
            return 50;
        const char *d = heapd_str_data(v);
        unsigned p = (unsigned)strtoul(d + 4, NULL, 10), g;
        char k[32];
        key_name(k, sizeof k, p);
        if (!value_ok(v, k, &g))
            return 51;
        if (p == 99)
            break;
        send_u64(fd, (uint64_t)p << 32 | g);
    }
    send_u64(fd, UINT64_MAX);
    return 0;
}

/* Two producers, two consumers waiting in pop_wait, collections between:
 * every value popped exactly once, each producer's in its order. */
START_TEST(queue_producers_consumers)
{
    start();
    int cfd[2], pfd[2], cgo[2], pgo[2];
    pid_t cons[2], prod[2];
    for (int i = 0; i < 2; i++)
        cons[i] = fork_kid(consumer_body, NULL, i == 1, &cfd[i], &cgo[i],
                           NULL);
    struct producer pr[2] = {{.id = 1}, {.id = 2}};
    for (int i = 0; i < 2; i++)
        prod[i] = fork_kid(producer_body, &pr[i], i == 0, &pfd[i], &pgo[i],
                           NULL);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = heapd_root_push(m, heapd_queue_new(m));
    ck_assert_int_eq(heapd_global_set(m, "t.queue", heapd_root_get(m, r)), 0);
    for (int i = 0; i < 2; i++)
        kid_go(cgo[i]);
    for (int i = 0; i < 2; i++)
        ck_assert_uint_eq(recv_u64(cfd[i], "consumer started"), 1);
    for (int i = 0; i < 2; i++)
        kid_go(pgo[i]);
    for (int i = 0; i < 2; i++)
        ck_assert_uint_eq(recv_u64(pfd[i], "producer started"), 1);
    harness_collect(m);
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(recv_u64(pfd[i], "produced"), 2);
        expect_exit0(prod[i], "a producer");
        close(pfd[i]);
    }
    /* one stop sign per consumer */
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r),
                                          make_value(m, "key:00000099", 0)),
                         0);
    static unsigned char got[3][PER_PRODUCER];
    memset(got, 0, sizeof got);
    for (int i = 0; i < 2; i++) {
        int last[3] = {-1, -1, -1};
        for (;;) {
            uint64_t w = recv_u64(cfd[i], "a popped value");
            if (w == UINT64_MAX)
                break;
            unsigned p = (unsigned)(w >> 32), g = (unsigned)w;
            ck_assert(p >= 1 && p <= 2 && g < PER_PRODUCER);
            ck_assert_msg(!got[p][g], "value %u of producer %u popped twice",
                          g, p);
            ck_assert_msg((int)g > last[p], "consumer %d popped %u of "
                          "producer %u after %d", i, g, p, last[p]);
            last[p] = (int)g;
            got[p][g] = 1;
        }
        expect_exit0(cons[i], "a consumer");
        close(cfd[i]);
    }
    for (unsigned p = 1; p <= 2; p++)
        for (unsigned g = 0; g < PER_PRODUCER; g++)
            ck_assert_msg(got[p][g], "value %u of producer %u lost", g, p);
    ck_assert_uint_eq(heapd_queue_length(heapd_root_get(m, r)), 0);
    heapd_root_pop(m, 1);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

static int waiter_body(heapd_mutator *m, void *arg, int fd)
{
    (void)arg;
    void *q = global_of(m, "t.queue");
    send_u64(fd, 1);
    void *v = heapd_queue_pop_wait(m, q, 0);
    if (!value_ok(v, "key:00000007", NULL))
        return 60;
    send_u64(fd, 2);
    return 0;
}

/* A consumer asleep in pop_wait holds up no collection: cycles complete
 * while it waits, nobody is counted as stalled, and it wakes for a push. */
START_TEST(queue_waiter_holds_up_nothing)
{
    start();
    int fd, go;
    pid_t k = fork_kid(waiter_body, NULL, false, &fd, &go, NULL);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    size_t r = heapd_root_push(m, heapd_queue_new(m));
    ck_assert_int_eq(heapd_global_set(m, "t.queue", heapd_root_get(m, r)), 0);
    kid_go(go);
    ck_assert_uint_eq(recv_u64(fd, "started"), 1);
    /* the waiter's word is read; whether it sleeps already or is about
     * to, each cycle must complete without it */
    uint64_t stalls = harness_stats(ctl).stalls;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    ck_assert_uint_eq(harness_stats(ctl).stalls, stalls);
    ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r),
                                      make_value(m, "key:00000007", 1)), 0);
    ck_assert_uint_eq(recv_u64(fd, "woken"), 2);
    expect_exit0(k, "the waiter");
    close(fd);
    heapd_root_pop(m, 1);
    heapd_disconnect(ctl);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* ---- killed mid-operation ---- */

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

/* Stop K where it stopped itself, then SIGKILL it there. */
static void kill_stopped(pid_t k, const char *point)
{
    struct stop_wait w = {k};
    char what[96];
    snprintf(what, sizeof what, "the kid to stop itself at %s", point);
    harness_wait_until(kid_stopped, &w, what);
    ck_assert_int_eq(kill(k, SIGKILL), 0);
    int st = harness_wait_pid(k, HARNESS_WAIT_MS);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                  "the kid was not killed (status 0x%x)", st);
}

/* Insert keys 0, 1, ... (generation 1) and report each one done, until
 * stopped; then replace them (generation 2) and delete some, so that
 * every map stop point is on its way. */
static int map_killee_body(heapd_mutator *m, void *arg, int fd)
{
    (void)arg;
    size_t r = heapd_root_push(m, global_of(m, "t.map"));
    for (unsigned i = 0; i < 100000; i++) {
        if (put_key(m, r, i, 1, 0) != 0)
            return 70;
        send_u64(fd, i + 1);
    }
    for (unsigned i = 0; i < 100000; i++)
        if (put_key(m, r, i, 2, 0) != 1)
            return 71;
    return 72; /* never stopped */
}

/* Every key the kid reported is there, whole, and the map works: another
 * process can finish whatever the kid left (a resize) and use it. */
static void map_after_kill(heapd_mutator *m, size_t r, uint64_t acked)
{
    void *map = heapd_root_get(m, r);
    int n = heapd_map_verify(map);
    ck_assert_msg(n >= 0, "verify after the kill: %s", heapd_last_error());
    ck_assert_msg((uint64_t)n == acked || (uint64_t)n == acked + 1,
                  "%d keys, the kid had inserted %" PRIu64, n, acked);
    /* Note [Map footprint]: every key once, a resize left half done too */
    heapd_map_footprint_t f;
    ck_assert_int_eq(heapd_map_footprint(m, map, &f), 0);
    ck_assert_uint_eq(f.keys, (uint64_t)n);
    for (unsigned i = 0; i < acked; i++) {
        char k[32];
        unsigned g;
        key_name(k, sizeof k, i);
        ck_assert_msg(value_ok(heapd_map_get_str(m, map, k, strlen(k)), k,
                               &g) && g == 1, "key %u lost or damaged", i);
    }
    /* a survivor goes on: inserts (which finish a resize), replaces */
    for (unsigned i = 0; i < acked + 3000; i++)
        ck_assert_int_ge(put_key(m, r, i, 3, 0), 0);
    harness_collect(m);
    map = heapd_root_get(m, r);
    n = heapd_map_verify(map);
    ck_assert_msg(n >= 0, "verify after the survivor: %s",
                  heapd_last_error());
    ck_assert_int_eq(n, (int)acked + 3000);
    for (unsigned i = 0; i < acked + 3000; i++) {
        char k[32];
        unsigned g;
        key_name(k, sizeof k, i);
        ck_assert_msg(value_ok(heapd_map_get_str(m, map, k, strlen(k)), k,
                               &g) && g == 3, "key %u", i);
    }
}

static void map_killed_at(const char *point)
{
    start();
    int fd, go;
    pid_t k = fork_kid(map_killee_body, NULL, false, &fd, &go, point);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = shared_map(m, 0);
    uint64_t crashed = harness_daemon_stats(&D).clients_crashed;
    kid_go(go);
    kill_stopped(k, point);
    uint64_t acked = 0, a;
    while (read(fd, &a, sizeof a) == sizeof a)
        acked = a;
    close(fd);
    heapd_client *ctl = harness_control(&D);
    harness_wait_stat(&D, ctl, clients_crashed, >=, crashed + 1);
    heapd_disconnect(ctl);
    map_after_kill(m, r, acked);
    heapd_root_pop(m, 1);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}

START_TEST(map_killed_before_its_swap)
{
    map_killed_at("map.update.built");
}
END_TEST

START_TEST(map_killed_starting_a_resize)
{
    map_killed_at("map.resize.begun");
}
END_TEST

START_TEST(map_killed_with_a_claim)
{
    map_killed_at("map.resize.claimed");
}
END_TEST

START_TEST(map_killed_after_a_freeze)
{
    map_killed_at("map.resize.frozen");
}
END_TEST

START_TEST(map_killed_before_the_switch)
{
    map_killed_at("map.resize.switch");
}
END_TEST

static int queue_killee_body(heapd_mutator *m, void *arg, int fd)
{
    const char *point = arg;
    size_t r = heapd_root_push(m, global_of(m, "t.queue"));
    if (strcmp(point, "queue.push.linked") == 0) {
        void *v = make_value(m, "key:00000005", 1000);
        send_u64(fd, 1);
        heapd_queue_push(m, heapd_root_get(m, r), v);
    } else if (strcmp(point, "queue.pop.taken") == 0) {
        send_u64(fd, 1);
        heapd_queue_pop(m, heapd_root_get(m, r));
    } else {
        send_u64(fd, 1);
        heapd_queue_pop_wait(m, heapd_root_get(m, r), 0);
    }
    return 80; /* never stopped */
}

/* The queue holds values 0..99 of key 5 (popped_first of them popped
 * already) when the kid is killed at POINT. */
static void queue_killed_at(const char *point)
{
    start();
    int fd, go;
    pid_t k = fork_kid(queue_killee_body, (void *)point, false, &fd, &go,
                       point);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = heapd_root_push(m, heapd_queue_new(m));
    ck_assert_int_eq(heapd_global_set(m, "t.queue", heapd_root_get(m, r)), 0);
    bool waiting = strcmp(point, "queue.pop_wait.waiting") == 0;
    unsigned n = waiting ? 0 : 100;
    for (unsigned i = 0; i < n; i++)
        ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r),
                                          make_value(m, "key:00000005", i)),
                         0);
    kid_go(go);
    ck_assert_uint_eq(recv_u64(fd, "started"), 1);
    kill_stopped(k, point);
    close(fd);
    harness_collect(m);
    /* the survivor pushes, and pops everything in order */
    for (unsigned i = 0; i < 50; i++)
        ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r),
                                          make_value(m, "key:00000005",
                                                     2000 + i)), 0);
    harness_collect(m);
    unsigned want = strcmp(point, "queue.pop.taken") == 0 ? 1 : 0;
    bool linked_seen = false;
    for (;;) {
        void *v = heapd_queue_pop(m, heapd_root_get(m, r));
        if (!v)
            break;
        unsigned g;
        ck_assert(value_ok(v, "key:00000005", &g));
        if (g == 1000) { /* the killed pusher's: linked, so it is in */
            ck_assert(!linked_seen && want == n);
            linked_seen = true;
            continue;
        }
        if (want < n) {
            ck_assert_uint_eq(g, want);
        } else {
            ck_assert_uint_eq(g, 2000 + want - n);
        }
        want++;
    }
    ck_assert_uint_eq(want, n + 50);
    if (strcmp(point, "queue.push.linked") == 0)
        ck_assert_msg(linked_seen, "the value the pusher linked is lost");
    /* the killed popper's count never came (heapd_queue_length) */
    ck_assert_uint_eq(heapd_queue_length(heapd_root_get(m, r)),
                      strcmp(point, "queue.pop.taken") == 0);
    /* a pop_wait after a killed waiter still wakes */
    ck_assert_ptr_null(heapd_queue_pop_wait(m, heapd_root_get(m, r), 10));
    ck_assert_int_eq(errno, ETIMEDOUT);
    heapd_root_pop(m, 1);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}

START_TEST(queue_killed_after_linking)
{
    queue_killed_at("queue.push.linked");
}
END_TEST

START_TEST(queue_killed_after_taking)
{
    queue_killed_at("queue.pop.taken");
}
END_TEST

START_TEST(queue_killed_while_waiting)
{
    queue_killed_at("queue.pop_wait.waiting");
}
END_TEST

/* ---- killed at any instant ---- */

#define STORM_KEYS 500
#define STORM_ROUNDS 6
#define STORM_AHEAD 16384 /* own keys a writer makes, at most */

/* A writer of the storm: replaces and deletes the shared keys, inserts
 * keys of its own (from BASE on, never deleted) and pushes each of them
 * to the queue too; after every own insert and push it reports the
 * number done.  It runs until it is killed. */
static int storm_body(heapd_mutator *m, void *arg, int fd)
{
    unsigned base = *(unsigned *)arg;
    size_t r = heapd_root_push(m, global_of(m, "t.map"));
    size_t q = heapd_root_push(m, global_of(m, "t.queue"));
    uint64_t x = base * 2654435761u + 1;
    for (unsigned n = 0;; n++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned k = (unsigned)(x % STORM_KEYS);
        int rc;
        if (x % 5 == 0) {
            char key[32];
            key_name(key, sizeof key, k);
            rc = heapd_map_delete_str(m, heapd_root_get(m, r), key,
                                      strlen(key));
        } else {
            rc = put_key(m, r, k, (unsigned)(x % 1000) + 2, 0);
        }
        if (rc < 0 && rc != -ENOENT)
            return 100;
        if (put_key(m, r, base + n, 1, 0) != 0)
            return 101;
        char key[32];
        key_name(key, sizeof key, base + n);
        void *v = make_value(m, key, 1);
        if (!v || heapd_queue_push(m, heapd_root_get(m, q), v) != 0)
            return 102;
        send_u64(fd, n + 1);
    }
}

static int storm_setup_body(heapd_mutator *m, void *arg, int fd)
{
    (void)arg;
    size_t r = heapd_root_push(m, heapd_map_new(m, HEAPD_MAP_STR, 0));
    if (heapd_global_set(m, "t.map", heapd_root_get(m, r)) != 0 ||
        heapd_global_set(m, "t.queue", heapd_queue_new(m)) != 0)
        return 110;
    for (unsigned i = 0; i < STORM_KEYS; i++)
        if (put_key(m, r, i, 1, 0) != 0)
            return 111;
    send_u64(fd, 1);
    return 0;
}

/* Writers SIGKILLed wherever they are, round after round: the test
 * process only forks and kills (it connects at the end), and kills a
 * writer as soon as it reports progress past a mark that moves each
 * round, so the kills fall at varied points of the operations.  Then
 * every own key a writer reported is in the map and in the queue, whole,
 * the map verifies, and every shared key present has a whole value. */
START_TEST(writers_killed_at_any_instant)
{
    start();
    int fd, go;
    pid_t k = fork_kid(storm_setup_body, NULL, false, &fd, &go, NULL);
    kid_go(go);
    ck_assert_uint_eq(recv_u64(fd, "set up"), 1);
    expect_exit0(k, "the setup");
    close(fd);
    static unsigned base[STORM_ROUNDS][2];
    uint64_t acked[STORM_ROUNDS][2] = {{0}};
    for (unsigned round = 0; round < STORM_ROUNDS; round++) {
        pid_t w[2];
        int wfd[2], wgo[2];
        for (int i = 0; i < 2; i++) {
            base[round][i] = 1000000 * (2 * round + (unsigned)i + 1);
            w[i] = fork_kid(storm_body, &base[round][i], i == 1, &wfd[i],
                            &wgo[i], NULL);
        }
        for (int i = 0; i < 2; i++)
            kid_go(wgo[i]);
        for (int i = 0; i < 2; i++) {
            /* 37 + 53 * round operations, then at once the kill */
            uint64_t mark = 37 + 53 * round + 11 * (uint64_t)i;
            while (acked[round][i] < mark)
                acked[round][i] = recv_u64(wfd[i], "a writer's progress");
            ck_assert_int_eq(kill(w[i], SIGKILL), 0);
            int st = harness_wait_pid(w[i], HARNESS_WAIT_MS);
            ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                          "writer %d of round %u ended by itself (status "
                          "0x%x, exit %d)", i, round, st,
                          WIFEXITED(st) ? WEXITSTATUS(st) : -1);
            uint64_t a; /* what it reported before it died */
            while (read(wfd[i], &a, sizeof a) == sizeof a)
                acked[round][i] = a;
            close(wfd[i]);
        }
    }
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    harness_collect(m);
    size_t r = heapd_root_push(m, heapd_global_get(m, "t.map"));
    void *map = heapd_root_get(m, r);
    int n = heapd_map_verify(map);
    ck_assert_msg(n >= 0, "verify: %s", heapd_last_error());
    /* a writer runs ahead of what the test has read of its reports by a
     * pipe's worth at most (64 KiB: 8192 of them), then blocks */
    static unsigned char pushed[2 * STORM_ROUNDS + 1][STORM_AHEAD];
    memset(pushed, 0, sizeof pushed);
    for (unsigned round = 0; round < STORM_ROUNDS; round++)
        for (int i = 0; i < 2; i++)
            for (unsigned j = 0; j < acked[round][i]; j++) {
                char key[32];
                unsigned g;
                key_name(key, sizeof key, base[round][i] + j);
                ck_assert_msg(value_ok(heapd_map_get_str(m, map, key,
                                                         strlen(key)),
                                       key, &g) && g == 1,
                              "round %u writer %d: key %s lost", round, i,
                              key);
            }
    for (unsigned i = 0; i < STORM_KEYS; i++) {
        char key[32];
        key_name(key, sizeof key, i);
        void *v = heapd_map_get_str(m, map, key, strlen(key));
        ck_assert_msg(!v || value_ok(v, key, NULL), "key %s is torn", key);
    }
    /* the queue: every reported push is there once, in each writer's
     * order; a push the kill cut short may be there too */
    size_t q = heapd_root_push(m, heapd_global_get(m, "t.queue"));
    void *v;
    while ((v = heapd_queue_pop(m, heapd_root_get(m, q)))) {
        ck_assert(heapd_is_str(v));
        unsigned id = (unsigned)strtoul(heapd_str_data(v) + 4, NULL, 10);
        unsigned who = id / 1000000, j = id % 1000000;
        ck_assert_msg(who >= 1 && who <= 2 * STORM_ROUNDS &&
                          j < STORM_AHEAD,
                      "a foreign value in the queue: %s", heapd_str_data(v));
        char key[32];
        key_name(key, sizeof key, id);
        ck_assert_msg(value_ok(v, key, NULL), "a torn value in the queue");
        ck_assert_msg(!pushed[who][j], "value %u popped twice", id);
        ck_assert_msg(j == 0 || pushed[who][j - 1], "value %u popped "
                      "before %u", id, id - 1);
        pushed[who][j] = 1;
    }
    for (unsigned round = 0; round < STORM_ROUNDS; round++)
        for (int i = 0; i < 2; i++)
            for (unsigned j = 0; j < acked[round][i]; j++)
                ck_assert_msg(pushed[2 * round + (unsigned)i + 1][j],
                              "round %u writer %d: push %u lost", round, i,
                              j);
    heapd_root_pop(m, 2);
    harness_expect_healthy(&D);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("collections");
    TCase *t = tcase_create("use");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, strings);
    tcase_add_test(t, map_operations);
    tcase_add_test(t, map_footprint_is_what_the_collector_marks);
    tcase_add_test(t, map_kinds);
    tcase_add_test(t, map_damaged_by_a_client);
    tcase_add_test(t, queue_operations);
    suite_add_tcase(s, t);
    t = tcase_create("concurrent");
    tcase_set_timeout(t, 900);
    tcase_add_test(t, map_delete_while_reading);
    tcase_add_test(t, map_iteration_under_updates);
    tcase_add_test(t, map_concurrent_inserts);
    tcase_add_test(t, queue_producers_consumers);
    tcase_add_test(t, queue_waiter_holds_up_nothing);
    tcase_add_test(t, writers_killed_at_any_instant);
    suite_add_tcase(s, t);
#ifndef NDEBUG /* the stop hook is in debug builds only */
    t = tcase_create("killed");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, map_killed_before_its_swap);
    tcase_add_test(t, map_killed_starting_a_resize);
    tcase_add_test(t, map_killed_with_a_claim);
    tcase_add_test(t, map_killed_after_a_freeze);
    tcase_add_test(t, map_killed_before_the_switch);
    tcase_add_test(t, queue_killed_after_linking);
    tcase_add_test(t, queue_killed_after_taking);
    tcase_add_test(t, queue_killed_while_waiting);
    suite_add_tcase(s, t);
#endif
    return s;
}

int main(void)
{
    return check_main(suite());
}
