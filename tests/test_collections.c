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
 * queue closed under producers and a waiter loses nothing.  What
 * a SIGKILL leaves is test_collections_kill.c's.
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

#include "coll_util.h"
#include "harness.h"
#include "heapd.h"
#include "heapd_collections.h"
#include "check_main.h"

/* ---- strings ---- */

START_TEST(strings)
{
    coll_start();
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
    coll_start();
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

/* Note [Inline values]: "KEY=G" and the key's bytes again up to a length
 * that varies with the key, so that buckets hold records of many sizes,
 * HEAPD_MAP_INLINE_MAX among them. */
static size_t inline_value(char *out, const char *key, unsigned i, unsigned g)
{
    size_t len = i % 97 == 0 ? HEAPD_MAP_INLINE_MAX : (i * 37) % 300;
    int n = snprintf(out, HEAPD_MAP_INLINE_MAX + 1, "%s=%u;", key, g);
    for (size_t k = (size_t)n; k < len; k++)
        out[k] = (char)('a' + (k + i) % 26);
    return len < (size_t)n ? (size_t)n : len;
}

/* Key I's name: short ones inline (Note [Inline keys]), every fifth one
 * longer than a bucket keeps. */
static void inline_key(char *out, size_t n, unsigned i)
{
    if (i % 5 == 0)
        snprintf(out, n, "a-key-longer-than-an-entry-keeps:%08u", i);
    else
        key_name(out, n, i);
}

/* Does key I of MAP hold generation G's value, inline? */
static bool inline_ok(heapd_mutator *m, void *map, unsigned i, unsigned g)
{
    char k[64], want[HEAPD_MAP_INLINE_MAX + 1];
    inline_key(k, sizeof k, i);
    size_t wlen = inline_value(want, k, i, g), len = 0;
    const void *b = heapd_map_get_bytes(m, map, k, strlen(k), &len);
    return b && len == wlen && memcmp(b, want, len) == 0;
}

static int put_inline(heapd_mutator *m, size_t r, unsigned i, unsigned g,
                      unsigned flags)
{
    char k[64], v[HEAPD_MAP_INLINE_MAX + 1];
    inline_key(k, sizeof k, i);
    size_t len = inline_value(v, k, i, g);
    return heapd_map_put_bytes(m, heapd_root_get(m, r), k, strlen(k), v, len,
                               flags);
}

START_TEST(map_inline_values)
{
    coll_start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = heapd_root_push(m, heapd_map_new(m, HEAPD_MAP_STR, 0));
    /* from 8 slots through ten resizes, and collections: every third key
     * holds a string object, the others inline values */
    enum { N = 6000 };
    for (unsigned i = 0; i < N; i++) {
        int rc;
        if (i % 3 == 0) {
            char k[64];
            inline_key(k, sizeof k, i);
            rc = heapd_map_put_str(m, heapd_root_get(m, r), k, strlen(k),
                                   make_value(m, k, 1), 0);
        } else {
            rc = put_inline(m, r, i, 1, 0);
        }
        ck_assert_msg(rc == 0, "insert %u: %d %s", i, rc, heapd_last_error());
    }
    harness_collect(m);
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)), N);
    /* an object's value becomes inline, an inline one an object, and
     * back; replaced in place */
    for (unsigned i = 0; i < N; i += 2) {
        if (i % 3 == 0) {
            ck_assert_int_eq(put_inline(m, r, i, 2, 0), 1);
        } else {
            char k[64];
            inline_key(k, sizeof k, i);
            ck_assert_int_eq(heapd_map_put_str(m, heapd_root_get(m, r), k,
                                               strlen(k),
                                               make_value(m, k, 2),
                                               HEAPD_MAP_IF_PRESENT), 1);
        }
    }
    for (unsigned i = 1; i < N; i += 6) /* inline to inline */
        ck_assert_int_eq(put_inline(m, r, i, 3, HEAPD_MAP_IF_PRESENT), 1);
    for (unsigned i = 0; i < N; i += 7) {
        char k[64];
        inline_key(k, sizeof k, i);
        ck_assert_int_eq(heapd_map_delete_str(m, heapd_root_get(m, r), k,
                                              strlen(k)), 0);
    }
    harness_collect(m);
    void *map = heapd_root_get(m, r);
    unsigned present = 0;
    for (unsigned i = 0; i < N; i++) {
        char k[64];
        inline_key(k, sizeof k, i);
        size_t len;
        errno = 0;
        const void *b = heapd_map_get_bytes(m, map, k, strlen(k), &len);
        if (i % 7 == 0) {
            ck_assert_msg(!b && errno == ENOENT, "deleted key %u", i);
            continue;
        }
        present++;
        bool object = i % 2 == 0 ? i % 3 != 0 : i % 3 == 0;
        unsigned g = i % 2 == 0 ? 2 : i % 6 == 1 ? 3 : 1;
        if (!object) {
            ck_assert_msg(inline_ok(m, map, i, g), "key %u: a wrong inline "
                          "value", i);
            errno = 0;
            ck_assert_ptr_null(heapd_map_get_str(m, map, k, strlen(k)));
            ck_assert_int_eq(errno, EINVAL);
            ck_assert_ptr_nonnull(strstr(heapd_last_error(),
                                         "heapd_map_get_bytes"));
            continue;
        }
        /* an object's value: the string's bytes, by either call */
        void *v = heapd_map_get_str(m, map, k, strlen(k));
        unsigned vg;
        ck_assert_msg(value_ok(v, k, &vg) && vg == g, "key %u", i);
        ck_assert_ptr_eq(b, heapd_str_data(v));
        ck_assert_uint_eq(len, heapd_str_len(v));
    }
    ck_assert_int_eq(heapd_map_verify(map), (int)present);
    ck_assert_uint_eq(heapd_map_count(map), present);

    /* iteration makes a string of an inline value */
    heapd_map_iter it;
    ck_assert_int_eq(heapd_map_iter_begin(m, map, &it), 0);
    void *k, *v;
    unsigned seen = 0;
    while (heapd_map_iter_next(&it, &k, &v)) {
        ck_assert(heapd_is_str(k) && heapd_is_str(v));
        size_t len;
        const void *b = heapd_map_get_bytes(
            m, heapd_root_get(m, r), heapd_str_data(k), heapd_str_len(k),
            &len);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_eq(len, heapd_str_len(v));
        ck_assert(memcmp(b, heapd_str_data(v), len) == 0);
        seen++;
    }
    ck_assert_int_eq(errno, 0);
    heapd_map_iter_end(&it);
    ck_assert_uint_eq(seen, present);

    /* a pointer a C local holds keeps its bytes while the key is updated
     * and the old entry is garbage (Note [Client GC discipline]) */
    char key1[64], want[HEAPD_MAP_INLINE_MAX + 1];
    inline_key(key1, sizeof key1, 1);
    size_t wlen = inline_value(want, key1, 1, 3), len1;
    const char *held = heapd_map_get_bytes(m, heapd_root_get(m, r), key1,
                                           strlen(key1), &len1);
    ck_assert_ptr_nonnull(held);
    for (unsigned g = 10; g < 14; g++) {
        ck_assert_int_eq(put_inline(m, r, 1, g, 0), 1);
        harness_collect(m);
    }
    ck_assert_uint_eq(len1, wlen);
    ck_assert_msg(memcmp(held, want, wlen) == 0, "the bytes held changed");
    ck_assert(inline_ok(m, heapd_root_get(m, r), 1, 13));

    /* refused */
    map = heapd_root_get(m, r);
    static char big[HEAPD_MAP_INLINE_MAX + 1];
    ck_assert_int_eq(heapd_map_put_bytes(m, map, "k", 1, big, sizeof big, 0),
                     -E2BIG);
    ck_assert_ptr_nonnull(strstr(heapd_last_error(), "heapd_map_put_str"));
    ck_assert_int_eq(heapd_map_put_bytes(m, map, "k", 1, NULL, 3, 0),
                     -EINVAL);
    ck_assert_int_eq(heapd_map_put_bytes(m, map, "k", 1, "v", 1, 0x80),
                     -EINVAL);
    ck_assert_int_eq(heapd_map_put_bytes(m, map, "k", 1, NULL, 0, 0), 0);
    size_t len;
    ck_assert_ptr_nonnull(heapd_map_get_bytes(m, heapd_root_get(m, r), "k",
                                              1, &len));
    ck_assert_uint_eq(len, 0);
    map = heapd_root_get(m, r);
    errno = 0;
    ck_assert_ptr_null(heapd_map_get_bytes(m, map, "k", 1, NULL));
    ck_assert_int_eq(errno, EINVAL);
    void *kk = heapd_str_new(m, "k", 1);
    size_t rk = heapd_root_push(m, kk);
    void *other = make_value(m, "k", 1);
    ck_assert_int_eq(heapd_map_replace(m, heapd_root_get(m, r),
                                       heapd_root_get(m, rk), other, other),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(heapd_last_error(), "inline"));
    heapd_root_pop(m, 1);
    void *idmap = heapd_map_new(m, HEAPD_MAP_IDENTITY, 0);
    ck_assert_int_eq(heapd_map_put_bytes(m, idmap, "k", 1, "v", 1, 0),
                     -EINVAL);
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)),
                     (int)present + 1);
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
    coll_start();
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
    coll_start();
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
    coll_start();
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
    /* an inline value's record length (Note [Inline values]): an inline
     * key and an inline value make the only bucket without references
     * (Note [Buckets without references]), its flags counting its one
     * key; its record follows that key's */
    size_t r3 = heapd_root_push(m, heapd_map_new(m, HEAPD_MAP_STR, 0));
    ck_assert_int_eq(heapd_map_put_bytes(m, heapd_root_get(m, r3), "inl", 3,
                                         "fifty", 5, 0), 0);
    void *map3 = heapd_root_get(m, r3);
    t = ((void **)map3)[0];
    n = heapd_nrefs(t) - 1;
    uint32_t *flags = NULL, *len = NULL;
    for (size_t i = 0; i < n && !len; i++) {
        void **b = t[1 + i];
        if (!b || heapd_nrefs(b) != 0 || heapd_nbytes(b) == 8)
            continue; /* none, or the map's empty bucket */
        flags = (uint32_t *)heapd_bytes(b) + 1;
        ck_assert_uint_eq(*flags >> 8, 1);
        len = (uint32_t *)((char *)heapd_bytes(b) + 8 + 32);
    }
    ck_assert_ptr_nonnull(len);
    ck_assert_uint_eq(*len, 5);
    *len = 0xffff; /* a raw store */
    size_t vlen;
    errno = 0;
    ck_assert_ptr_null(heapd_map_get_bytes(m, map3, "inl", 3, &vlen));
    ck_assert_int_eq(errno, EUCLEAN);
    ck_assert_int_eq(heapd_map_verify(map3), -EUCLEAN);
    ck_assert_msg(strstr(heapd_last_error(), "record"), "verify said: %s",
                  heapd_last_error());
    /* its count of keys: past its bytes, the keys stop where they do */
    *len = 5;
    ck_assert_int_eq(heapd_map_verify(map3), 1);
    *flags += 200u << 8; /* a raw store */
    const char *got = heapd_map_get_bytes(m, map3, "inl", 3, &vlen);
    ck_assert_ptr_nonnull(got);
    ck_assert_uint_eq(vlen, 5);
    ck_assert(memcmp(got, "fifty", 5) == 0);
    ck_assert_ptr_null(heapd_map_get_bytes(m, map3, "other", 5, &vlen));
    ck_assert_int_eq(heapd_map_verify(map3), -EUCLEAN);
    ck_assert_msg(strstr(heapd_last_error(), "counts"), "verify said: %s",
                  heapd_last_error());
    /* its key made a long one (past the inline bytes) with the hash and
     * the first bytes of the key looked up: no key object to compare the
     * rest with, so no match and no crash */
    *flags -= 200u << 8;
    static const char long_key[] = "a key of thirty bytes, exactly";
    struct {
        uint64_t hash;
        uint32_t len;
        uint8_t inl[20];
    } *bk = (void *)((char *)flags + 4);
    ck_assert_uint_eq(bk->len, 3);
    bk->hash = heapd_hash_bytes(long_key, 30); /* raw stores */
    bk->len = 30;
    memcpy(bk->inl, long_key, sizeof bk->inl);
    errno = 0;
    ck_assert_ptr_null(heapd_map_get_bytes(m, map3, long_key, 30, &vlen));
    ck_assert_int_eq(errno, ENOENT);
    ck_assert_int_eq(heapd_map_verify(map3), -EUCLEAN);
    ck_assert_msg(strstr(heapd_last_error(), "NULL key"), "verify said: %s",
                  heapd_last_error());
    /* a BYTES map's key reference cleared: the same, where the key's
     * bytes come from its object (which a lookup read at NULL - 8) */
    void *bmap = heapd_map_new(m, HEAPD_MAP_BYTES, 0);
    heapd_root_set(m, r3, bmap);
    void *bkey = heapd_alloc(m, 0, 30);
    ck_assert_ptr_nonnull(bkey);
    memcpy(heapd_bytes(bkey), long_key, 30);
    bmap = heapd_root_get(m, r3);
    ck_assert_int_eq(heapd_map_put(m, bmap, bkey, bmap, 0), 0);
    bmap = heapd_root_get(m, r3); /* the put was a safepoint */
    t = ((void **)bmap)[0];
    n = heapd_nrefs(t) - 1;
    hit = false;
    for (size_t i = 0; i < n && !hit; i++) {
        void **b = t[1 + i];
        if (b && heapd_nrefs(b) == 2 && b[0]) {
            b[0] = NULL; /* a raw store */
            hit = true;
        }
    }
    ck_assert(hit);
    ck_assert_ptr_null(heapd_map_get_str(m, bmap, long_key, 30));
    ck_assert_int_eq(heapd_map_verify(bmap), -EUCLEAN);
    ck_assert_msg(strstr(heapd_last_error(), "NULL key"), "verify said: %s",
                  heapd_last_error());
    heapd_root_pop(m, 1);
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
 * stop, at least once (a reader the scheduler starved until then still
 * reads): a value found must be whole and the key's own. */
static int reader_body(heapd_mutator *m, void *arg, int fd)
{
    const int *stop = arg; /* a pipe: EOF on stop[0] says stop */
    close(stop[1]);
    int stop_fd = stop[0];
    size_t r = heapd_root_push(m, global_of(m, "t.map"));
    send_u64(fd, 1);
    uint64_t seen = 0, bad = 0;
    for (;;) {
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
        char b;
        ssize_t n = read(stop_fd, &b, 1); /* non-blocking */
        if (n == 1 || n == 0)
            break;
    }
    send_u64(fd, seen);
    send_u64(fd, bad);
    return 0;
}


/* Two writers (one young) delete, re-insert and replace the keys two
 * readers read, while collections run: every value a reader finds is a
 * whole value of its key. */
START_TEST(map_delete_while_reading)
{
    coll_start();
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
    coll_start();
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
    coll_start();
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
    coll_start();
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

/* Note [Closing a queue]: pushes refused after it, what came before it
 * popped in order, then ESHUTDOWN from pop and pop_wait alike. */
START_TEST(queue_close)
{
    coll_start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = heapd_root_push(m, heapd_queue_new(m));
    for (unsigned i = 0; i < 3; i++)
        ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r),
                                          make_value(m, "key:00000001", i)),
                         0);
    ck_assert_int_eq(heapd_queue_close(m, heapd_root_get(m, r)), 0);
    ck_assert_int_eq(heapd_queue_close(m, heapd_root_get(m, r)), 1);
    ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r),
                                      make_value(m, "key:00000001", 9)),
                     -ESHUTDOWN);
    ck_assert_str_eq(heapd_last_error(), "heapd_queue_push: the queue is "
                     "closed (heapd_queue_close): nothing more can be "
                     "pushed");
    ck_assert_uint_eq(heapd_queue_length(heapd_root_get(m, r)), 3);
    harness_collect(m);
    for (unsigned i = 0; i < 3; i++) {
        unsigned g;
        void *v = i == 1 ? heapd_queue_pop_wait(m, heapd_root_get(m, r), 0)
                         : heapd_queue_pop(m, heapd_root_get(m, r));
        ck_assert_msg(value_ok(v, "key:00000001", &g) && g == i,
                      "value %u", i);
    }
    for (int k = 0; k < 2; k++) {
        errno = 0;
        ck_assert_ptr_null(heapd_queue_pop(m, heapd_root_get(m, r)));
        ck_assert_int_eq(errno, ESHUTDOWN);
        errno = 0;
        ck_assert_ptr_null(heapd_queue_pop_wait(m, heapd_root_get(m, r), 0));
        ck_assert_int_eq(errno, ESHUTDOWN);
    }
    ck_assert_uint_eq(heapd_queue_length(heapd_root_get(m, r)), 0);
    ck_assert_int_eq(heapd_queue_close(m, heapd_root_get(m, r)), 1);
    ck_assert_int_eq(heapd_queue_close(m, heapd_alloc(m, 2, 24)), -EINVAL);
    coll_finish(c, m, 1);
}
END_TEST

/* Push until the queue is closed; reports that it started, then how many
 * pushes succeeded. */
static int closed_producer_body(heapd_mutator *m, void *arg, int fd)
{
    const unsigned *id = arg;
    size_t r = heapd_root_push(m, global_of(m, "t.queue"));
    send_u64(fd, 1);
    char k[32];
    key_name(k, sizeof k, *id);
    for (unsigned i = 0;; i++) {
        void *v = make_value(m, k, i);
        if (!v)
            return 40;
        int rc = heapd_queue_push(m, heapd_root_get(m, r), v);
        if (rc == -ESHUTDOWN) {
            send_u64(fd, i);
            return 0;
        }
        if (rc != 0)
            return 41;
        if (i == 100)
            send_u64(fd, 2);
    }
}

/* Pop with pop_wait until it says ESHUTDOWN; reports how many values of
 * each producer it took, each in order. */
static int closed_consumer_body(heapd_mutator *m, void *arg, int fd)
{
    (void)arg;
    size_t r = heapd_root_push(m, global_of(m, "t.queue"));
    send_u64(fd, 1);
    uint64_t n[3] = {0, 0, 0};
    for (;;) {
        void *v = heapd_queue_pop_wait(m, heapd_root_get(m, r), 0);
        if (!v)
            break;
        unsigned p = (unsigned)strtoul(heapd_str_data(v) + 4, NULL, 10), g;
        char k[32];
        key_name(k, sizeof k, p);
        if (p < 1 || p > 2 || !value_ok(v, k, &g) || g != n[p])
            return 51;
        n[p]++;
    }
    if (errno != ESHUTDOWN)
        return 52;
    send_u64(fd, n[1]);
    send_u64(fd, n[2]);
    return 0;
}

/* Two producers pushing, a consumer asleep in pop_wait, and the queue
 * closed under them: the producers stop at -ESHUTDOWN, the consumer
 * wakes, drains every value pushed before the close, in order, and ends
 * at ESHUTDOWN: nothing lost, nothing pushed after it. */
START_TEST(queue_closed_under_producers_and_a_waiter)
{
    coll_start();
    int cfd, cgo, pfd[2], pgo[2];
    pid_t cons = fork_kid(closed_consumer_body, NULL, true, &cfd, &cgo, NULL);
    static const unsigned ids[2] = {1, 2};
    pid_t prod[2];
    for (int i = 0; i < 2; i++)
        prod[i] = fork_kid(closed_producer_body, (void *)&ids[i], i == 0,
                           &pfd[i], &pgo[i], NULL);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = heapd_root_push(m, heapd_queue_new(m));
    ck_assert_int_eq(heapd_global_set(m, "t.queue", heapd_root_get(m, r)), 0);
    kid_go(cgo);
    ck_assert_uint_eq(recv_u64(cfd, "consumer started"), 1);
    for (int i = 0; i < 2; i++) {
        kid_go(pgo[i]);
        ck_assert_uint_eq(recv_u64(pfd[i], "producer started"), 1);
    }
    for (int i = 0; i < 2; i++)
        ck_assert_uint_eq(recv_u64(pfd[i], "101 values pushed"), 2);
    harness_collect(m);
    ck_assert_int_eq(heapd_queue_close(m, heapd_root_get(m, r)), 0);
    uint64_t pushed[2];
    for (int i = 0; i < 2; i++) {
        pushed[i] = recv_u64(pfd[i], "values pushed");
        expect_exit0(prod[i], "a producer");
        close(pfd[i]);
    }
    for (int i = 0; i < 2; i++)
        ck_assert_uint_eq(recv_u64(cfd, "values popped"), pushed[i]);
    expect_exit0(cons, "the consumer");
    close(cfd);
    errno = 0;
    ck_assert_ptr_null(heapd_queue_pop(m, heapd_root_get(m, r)));
    ck_assert_int_eq(errno, ESHUTDOWN);
    coll_finish(c, m, 1);
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
    coll_start();
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
    coll_start();
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
    tcase_add_test(t, map_inline_values);
    tcase_add_test(t, queue_operations);
    tcase_add_test(t, queue_close);
    suite_add_tcase(s, t);
    t = tcase_create("concurrent");
    tcase_set_timeout(t, 900);
    tcase_add_test(t, map_delete_while_reading);
    tcase_add_test(t, map_iteration_under_updates);
    tcase_add_test(t, map_concurrent_inserts);
    tcase_add_test(t, queue_producers_consumers);
    tcase_add_test(t, queue_waiter_holds_up_nothing);
    tcase_add_test(t, queue_closed_under_producers_and_a_waiter);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
