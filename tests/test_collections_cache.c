/* The shared map as a cache (heapd_collections.h: heapd_map_new_opts,
 * heapd_map_put_ttl, heapd_map_expire, heapd_map_stats; Note [Map
 * expiry] and Note [Map budget] in client/collections/map.c), on a real
 * heapd that runs its verifier after every cycle.
 *
 * The promises under test: an expired entry is gone from lookups at once
 * and its memory comes back after the next cycle, with no scan by the
 * program; a map under a budget takes no more than the budget and a
 * stated slack, whatever is inserted, never fails an insert, and keeps
 * the entries that are looked up.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll_util.h"
#include "harness.h"
#include "heapd.h"
#include "heapd_collections.h"
#include "check_main.h"

static size_t cache_map(heapd_mutator *m, uint64_t budget, unsigned flags)
{
    heapd_map_opts o = {.kind = HEAPD_MAP_STR, .budget = budget,
                        .flags = flags};
    size_t r = heapd_root_push(m, heapd_map_new_opts(m, &o));
    ck_assert_ptr_nonnull(heapd_root_get(m, r));
    ck_assert_int_eq(heapd_global_set(m, "t.cache", heapd_root_get(m, r)),
                     0);
    return r;
}

static void key_of(char *k, size_t n, const char *prefix, unsigned i)
{
    snprintf(k, n, "%s:%08u", prefix, i);
}

static bool has(heapd_mutator *m, void *map, const char *prefix, unsigned i)
{
    char k[32];
    size_t len;
    key_of(k, sizeof k, prefix, i);
    return heapd_map_get_bytes(m, map, k, strlen(k), &len) != NULL;
}

static void put(heapd_mutator *m, size_t r, const char *prefix, unsigned i,
                size_t vlen, unsigned ttl)
{
    char k[32], v[HEAPD_MAP_INLINE_MAX];
    key_of(k, sizeof k, prefix, i);
    memset(v, 'a' + i % 26, vlen);
    int rc = heapd_map_put_bytes_ttl(m, heapd_root_get(m, r), k, strlen(k),
                                     v, vlen, ttl, 0);
    ck_assert_msg(rc >= 0, "put %s: %s", k, heapd_last_error());
}

struct gone_wait {
    heapd_mutator *m;
    size_t root;
    unsigned n;
};

static bool all_gone(void *arg, char *seen, size_t len)
{
    struct gone_wait *w = arg;
    unsigned left = 0;
    for (unsigned i = 0; i < w->n; i++)
        left += has(w->m, heapd_root_get(w->m, w->root), "ttl", i);
    if (left == 0)
        return true;
    snprintf(seen, len, "%u of %u still found", left, w->n);
    return false;
}

/* The entries an iteration of the map in root slot R sees. */
static unsigned iterated(heapd_mutator *m, size_t r)
{
    heapd_map_iter it;
    ck_assert_int_eq(heapd_map_iter_begin(m, heapd_root_get(m, r), &it), 0);
    void *k, *v;
    unsigned seen = 0;
    while (heapd_map_iter_next(&it, &k, &v))
        seen++;
    heapd_map_iter_end(&it);
    return seen;
}

static uint64_t live_after_cycle(heapd_client *c, heapd_mutator *m)
{
    harness_collect(m);
    return harness_stats(c).live_bytes;
}

#define TTL_KEYS 10000u

/* Note [Map expiry]: entries of 50 ms are gone from lookups and
 * iteration after it, the others stay; heapd_map_expire removes them and
 * the next cycle gives their memory back; a write on an expired key
 * inserts it anew. */
START_TEST(expiry)
{
    coll_start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    /* refusals: a TTL in a map that keeps no deadlines */
    size_t plain = heapd_root_push(m, heapd_map_new(m, HEAPD_MAP_STR, 0));
    ck_assert_int_eq(heapd_map_put_bytes_ttl(m, heapd_root_get(m, plain),
                                             "k", 1, "v", 1, 50, 0),
                     -EINVAL);
    ck_assert_int_eq(heapd_map_put_bytes_ttl(m, heapd_root_get(m, plain),
                                             "k", 1, "v", 1, 0, 0),
                     0);
    heapd_map_opts bad = {.kind = HEAPD_MAP_STR, .flags = 0x80};
    ck_assert_ptr_null(heapd_map_new_opts(m, &bad));
    ck_assert_int_eq(errno, EINVAL);
    heapd_root_pop(m, 1);

    size_t r = cache_map(m, 0, HEAPD_MAP_EXPIRY);
    uint64_t live0 = live_after_cycle(c, m);
    /* an hour first, so that what they hold is measured however slow
     * the build; then 50 ms, by a put of each again */
    for (unsigned i = 0; i < TTL_KEYS; i++)
        put(m, r, "ttl", i, 100, 3600 * 1000);
    for (unsigned i = 0; i < 100; i++) {
        put(m, r, "keep", i, 100, 0);
        put(m, r, "hour", i, 100, 3600 * 1000);
    }
    uint64_t live1 = live_after_cycle(c, m);
    ck_assert_uint_gt(live1, live0 + TTL_KEYS * 100);
    for (unsigned i = 0; i < TTL_KEYS; i++)
        put(m, r, "ttl", i, 100, 50);
    struct gone_wait w = {m, r, TTL_KEYS};
    harness_wait_until(all_gone, &w, "the 50 ms entries to expire");
    for (unsigned i = 0; i < 100; i++)
        ck_assert(has(m, heapd_root_get(m, r), "keep", i) &&
                  has(m, heapd_root_get(m, r), "hour", i));
    /* iteration sees the 200 that live */
    unsigned seen = iterated(m, r);
    ck_assert_uint_eq(seen, 200);
    /* the writes above swept some; heapd_map_expire the rest */
    heapd_map_stats_t st;
    ck_assert_int_eq(heapd_map_stats(heapd_root_get(m, r), &st), 0);
    long swept = heapd_map_expire(m, heapd_root_get(m, r));
    ck_assert_int_ge(swept, 0);
    ck_assert_int_eq(heapd_map_stats(heapd_root_get(m, r), &st), 0);
    ck_assert_uint_eq(st.expirations, TTL_KEYS);
    ck_assert_uint_eq(st.count, 200);
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)), 200);
    uint64_t live2 = live_after_cycle(c, m);
    ck_assert_msg(live2 < live0 + (live1 - live0) / 10,
                  "live %" PRIu64 " before, %" PRIu64 " filled, %" PRIu64
                  " after the expiry and a cycle",
                  live0, live1, live2);
    /* a key that expired is inserted anew (0), not replaced (1) */
    put(m, r, "ttl", 7, 10, 50);
    harness_wait_until(all_gone, &w, "entry 7 to expire again");
    char key[32];
    key_of(key, sizeof key, "ttl", 7);
    ck_assert_int_eq(heapd_map_put_bytes(m, heapd_root_get(m, r), key,
                                         strlen(key), "x", 1, 0),
                     0);
    ck_assert(has(m, heapd_root_get(m, r), "ttl", 7));
    coll_finish(c, m, 1);
}
END_TEST

/* Note [Map expiry]: with no heapd_map_expire, the writes of a map sweep
 * its expired entries away. */
START_TEST(writes_sweep_expired_entries)
{
    coll_start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = cache_map(m, 0, HEAPD_MAP_EXPIRY);
    for (unsigned i = 0; i < 2000; i++)
        put(m, r, "ttl", i, 50, 30);
    struct gone_wait w = {m, r, 2000};
    harness_wait_until(all_gone, &w, "the 30 ms entries to expire");
    heapd_map_stats_t st;
    for (unsigned i = 0; i < 4000; i++)
        put(m, r, "other", i % 10, 50, 0);
    ck_assert_int_eq(heapd_map_stats(heapd_root_get(m, r), &st), 0);
    ck_assert_uint_eq(st.expirations, 2000);
    ck_assert_uint_eq(st.count, 10);
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)), 10);
    coll_finish(c, m, 1);
}
END_TEST

/* Note [Map expiry] across a resize finished by an iteration: the
 * buckets it copies keep their words (deadlines), so the map verifies
 * and an entry that expired stays absent.  129 keys in a table of 128
 * slots start a resize and migrate one chunk of 64; heapd_map_iter_begin
 * finishes it. */
START_TEST(iteration_finishes_a_resize)
{
    coll_start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = cache_map(m, 0, HEAPD_MAP_EXPIRY);
    for (unsigned i = 0; i < 128; i++)
        put(m, r, "hour", i, 20, 3600 * 1000);
    put(m, r, "ttl", 0, 20, 1);
    struct gone_wait w = {m, r, 1};
    harness_wait_until(all_gone, &w, "the 1 ms entry to expire");
    void **t = ((void **)heapd_root_get(m, r))[0];
    ck_assert_ptr_nonnull(t[0]); /* a resize under way */
    unsigned seen = iterated(m, r);
    ck_assert_uint_eq(seen, 128);
    t = ((void **)heapd_root_get(m, r))[0];
    ck_assert_ptr_null(t[0]); /* finished */
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)), 129);
    ck_assert(!has(m, heapd_root_get(m, r), "ttl", 0));
    ck_assert_int_eq(heapd_map_expire(m, heapd_root_get(m, r)), 1);
    coll_finish(c, m, 1);
}
END_TEST

#define BUDGET (8u << 20)
#define VLEN 1000u
#define FILL_BYTES (100u << 20)
#define HOT 100u

/* Note [Map budget]: 100 MiB of inserts into a map of 8 MiB: no insert
 * fails, its footprint never passes the budget by more than the slack
 * the header states (what one write adds before it evicts), and the keys
 * looked up all along are all still there. */
START_TEST(budget_holds)
{
    coll_start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = cache_map(m, BUDGET, 0);
    for (unsigned i = 0; i < HOT; i++)
        put(m, r, "hot", i, VLEN, 0);
    unsigned n = FILL_BYTES / VLEN;
    uint64_t worst = 0;
    for (unsigned i = 0; i < n; i++) {
        put(m, r, "fill", i, VLEN, 0);
        for (unsigned h = i % 10; h < HOT; h += 10)
            ck_assert_msg(has(m, heapd_root_get(m, r), "hot", h),
                          "hot key %u evicted after %u inserts", h, i);
        /* measured when no resize runs: a resize holds a frozen copy
         * of each bucket not migrated yet (Note [Map budget]) */
        void **t = ((void **)heapd_root_get(m, r))[0];
        if (i % 1000 == 999 && t[0] == NULL) {
            heapd_map_footprint_t f;
            ck_assert_int_eq(heapd_map_footprint(m, heapd_root_get(m, r),
                                                 &f),
                             0);
            uint64_t total = f.map_bytes + f.table_bytes + f.bucket_bytes +
                             f.key_bytes + f.value_bytes;
            if (total > worst)
                worst = total;
        }
    }
    heapd_map_stats_t st;
    ck_assert_int_eq(heapd_map_stats(heapd_root_get(m, r), &st), 0);
    ck_assert_msg(worst <= BUDGET + 4 * (VLEN + 256),
                  "footprint %" PRIu64 " over a budget of %u", worst,
                  BUDGET);
    ck_assert_uint_gt(st.evictions, n / 2);
    ck_assert_uint_le(st.used, BUDGET + 4 * (VLEN + 256));
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)),
                     (int)st.count);
    /* the newest inserts are there, the oldest gone */
    ck_assert(has(m, heapd_root_get(m, r), "fill", n - 1));
    ck_assert(!has(m, heapd_root_get(m, r), "fill", 0));
    fprintf(stderr, "budget_holds: %u inserts of %u bytes, footprint at "
            "most %" PRIu64 " bytes (budget %u), %" PRIu64 " evictions, "
            "%" PRIu64 " keys\n", n, VLEN, worst, BUDGET, st.evictions,
            st.count);
    coll_finish(c, m, 1);
}
END_TEST

/* A writer of the concurrent test: ARG inserts of 500 bytes, every
 * third with a TTL of 20 ms, each one looked up right after; it reports
 * its count every 1,000. */
static int writer_body(heapd_mutator *m, void *arg, int fd)
{
    unsigned n = (unsigned)(uintptr_t)arg;
    size_t r = heapd_root_push(m, global_of(m, "t.cache"));
    char prefix[16], k[32], v[500];
    snprintf(prefix, sizeof prefix, "w%d", (int)getpid());
    for (unsigned i = 0; i < n; i++) {
        key_of(k, sizeof k, prefix, i);
        memset(v, 'a' + i % 26, sizeof v);
        if (heapd_map_put_bytes_ttl(m, heapd_root_get(m, r), k, strlen(k), v,
                                    sizeof v, i % 3 ? 0 : 20, 0) < 0)
            return 70;
        size_t len;
        const char *got = heapd_map_get_bytes(m, heapd_root_get(m, r), k,
                                              strlen(k), &len);
        /* evicted already by another writer is allowed, torn is not */
        if (got && (len != sizeof v || got[0] != v[0] ||
                    got[len - 1] != v[0]))
            return 71;
        if (i % 1000 == 999)
            send_u64(fd, i + 1);
    }
    return 0;
}

#define WRITERS 3
#define WRITES 30000u
#define SMALL_BUDGET (2u << 20)

/* Note [Map budget] with writers at once, one young and one SIGKILLed
 * half-way: no insert fails, the map verifies, its footprint stays
 * within the budget and what each writer may add before it evicts, and
 * what a killed writer did not count drifts `used` by at most its one
 * write. */
START_TEST(budget_with_writers_and_a_kill)
{
    coll_start();
    int fd[WRITERS], go[WRITERS];
    pid_t k[WRITERS];
    for (unsigned j = 0; j < WRITERS; j++)
        k[j] = fork_kid(writer_body, (void *)(uintptr_t)WRITES, j == 1,
                        &fd[j], &go[j], NULL);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = cache_map(m, SMALL_BUDGET, HEAPD_MAP_EXPIRY);
    for (unsigned j = 0; j < WRITERS; j++)
        kid_go(go[j]);
    /* the writers' cycles must not wait for this thread's stop */
    heapd_blocking_enter(m);
    /* kill the last one once it is well under way */
    while (recv_u64(fd[WRITERS - 1], "progress") < WRITES / 2)
        ;
    ck_assert_int_eq(kill(k[WRITERS - 1], SIGKILL), 0);
    harness_wait_pid(k[WRITERS - 1], HARNESS_WAIT_MS);
    for (unsigned j = 0; j + 1 < WRITERS; j++) {
        expect_exit0(k[j], j == 1 ? "the young writer" : "a writer");
        close(fd[j]);
    }
    close(fd[WRITERS - 1]);
    heapd_blocking_leave(m);
    void **t = ((void **)heapd_root_get(m, r))[0];
    ck_assert_ptr_null(t[0]); /* no resize left half done by the kill */
    heapd_map_stats_t st;
    ck_assert_int_eq(heapd_map_stats(heapd_root_get(m, r), &st), 0);
    ck_assert_int_eq(heapd_map_verify(heapd_root_get(m, r)),
                     (int)st.count);
    heapd_map_footprint_t f;
    ck_assert_int_eq(heapd_map_footprint(m, heapd_root_get(m, r), &f), 0);
    uint64_t total = f.map_bytes + f.table_bytes + f.bucket_bytes +
                     f.key_bytes + f.value_bytes;
    ck_assert_msg(total <= SMALL_BUDGET + WRITERS * 1024,
                  "footprint %" PRIu64 " over a budget of %u", total,
                  SMALL_BUDGET);
    ck_assert_uint_gt(st.evictions + st.expirations, WRITES);
    fprintf(stderr, "budget_with_writers_and_a_kill: footprint %" PRIu64
            ", used %" PRIu64 ", %" PRIu64 " keys, %" PRIu64 " evicted, %"
            PRIu64 " expired\n", total, st.used, st.count, st.evictions,
            st.expirations);
    coll_finish(c, m, 1);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("collections_cache");
    TCase *t = tcase_create("use");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, expiry);
    tcase_add_test(t, writes_sweep_expired_entries);
    tcase_add_test(t, iteration_finishes_a_resize);
    tcase_add_test(t, budget_holds);
    tcase_add_test(t, budget_with_writers_and_a_kill);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
