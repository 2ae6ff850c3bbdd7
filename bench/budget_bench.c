/* budget_bench: a shared cache with a memory budget smaller than its data,
 * heapd's map against Redis with maxmemory and allkeys-lru.
 *
 *   budget_bench --impl heapd|redis [--workers W] [--keys N] [--ops N]
 *                [--budget-pct P] [--socket PATH] [--redis-socket PATH]
 *
 * The keys and values are the shared-cache benchmark's (16-byte keys,
 * 100-byte values, bench/cache_bench.h).  First the parent measures what
 * the whole data takes in the store (heapd_map_footprint of a map holding
 * every key; Redis's used_memory past an empty server's) and sets the
 * budget to P % of heapd's figure (default 50), the same bytes for both:
 * heapd_map_new_opts' budget, Redis' maxmemory with maxmemory-policy
 * allkeys-lru.  It fills the budgeted store with every key (most are
 * evicted) and warms it up with KEYS operations as the workers' (in the
 * parent, untimed), then W workers each run N operations, cache-aside: a
 * lookup of a key, and on a miss a put of its value; 80 % of the lookups
 * go to the hottest 20 % of the keys.  Reported: lookups/s (all workers, wall
 * time), the hit rate, evictions/s during the run, and the store's
 * memory at the end against the budget (heapd: the map's footprint;
 * Redis: used_memory).  One line: "RESULT budget impl=... ".
 */
#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "cache_bench.h"
#include "heapd.h"
#include "heapd_collections.h"

static struct {
    const char *impl, *sock, *redis_sock;
    unsigned long workers, keys, ops, budget_pct;
} B = {"heapd", NULL, NULL, 1, 100000, 1000000, 50};

struct shared {
    _Atomic unsigned ready, go;
    _Atomic uint64_t lookups, hits, t_start, t_end;
};
static struct shared *S;

static bool h_op(heapd_mutator *m, void *map, unsigned long k, unsigned w,
                 unsigned long n);
static bool r_op(redisContext *c, unsigned long k, unsigned w,
                 unsigned long n);

/* The key of the N-th operation of a worker: 80 % in the hottest 20 %. */
static unsigned long pick(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    uint64_t r = *s >> 8;
    unsigned long hot = B.keys / 5;
    return r % 100 < 80 ? (unsigned long)(r >> 8) % hot
                        : (unsigned long)(r >> 8) % B.keys;
}

/* ---- heapd ---- */

static heapd_client *hc;
static heapd_mutator *hm;
static char global[64];

static uint64_t footprint_of(void *map)
{
    heapd_map_footprint_t f;
    if (heapd_map_footprint(hm, map, &f) < 0)
        die("heapd_map_footprint: %s", heapd_last_error());
    return f.map_bytes + f.table_bytes + f.bucket_bytes + f.key_bytes +
           f.value_bytes;
}

static void *h_fill_map(uint64_t budget)
{
    heapd_map_opts o = {.kind = HEAPD_MAP_STR, .budget = budget};
    size_t r = heapd_root_push(hm, heapd_map_new_opts(hm, &o));
    if (!heapd_root_get(hm, r))
        die("heapd_map_new_opts: %s", heapd_last_error());
    char key[KEY_BYTES], val[VALUE_BYTES];
    for (unsigned long k = 0; k < B.keys; k++) {
        key_of(key, k);
        value_of(val, key, 0, 0);
        if (heapd_map_put_bytes(hm, heapd_root_get(hm, r), key, KEY_BYTES,
                                val, VALUE_BYTES, 0) < 0)
            die("heapd_map_put_bytes: %s", heapd_last_error());
    }
    return heapd_root_get(hm, r); /* still rooted */
}

/* The whole data's footprint, and the budgeted map filled, in GLOBAL. */
static uint64_t h_setup(void)
{
    heapd_open(B.sock, "budget_bench", &hc, &hm);
    uint64_t whole = footprint_of(h_fill_map(0));
    heapd_root_pop(hm, 1);
    uint64_t budget = whole * B.budget_pct / 100;
    void *map = h_fill_map(budget);
    uint64_t seed = 0x2545f4914f6cdd1dull;
    for (unsigned long n = 0; n < B.keys; n++) /* the warm-up */
        h_op(hm, map, pick(&seed), 9, n);
    snprintf(global, sizeof global, "budget_bench.%d", (int)getpid());
    if (heapd_global_set(hm, global, map) < 0)
        die("heapd_global_set: %s", heapd_last_error());
    heapd_root_pop(hm, 1);
    return whole;
}

/* One cache-aside operation on key K of MAP by M: true on a hit. */
static bool h_op(heapd_mutator *m, void *map, unsigned long k, unsigned w,
                 unsigned long n)
{
    char key[KEY_BYTES], val[VALUE_BYTES];
    key_of(key, k);
    size_t len;
    const char *v = heapd_map_get_bytes(m, map, key, KEY_BYTES, &len);
    if (v) {
        if (len != VALUE_BYTES || memcmp(v, "val:", 4) != 0)
            die("heapd: a wrong value for %.16s", key);
        return true;
    }
    value_of(val, key, w, n);
    if (heapd_map_put_bytes(m, map, key, KEY_BYTES, val, VALUE_BYTES, 0) < 0)
        die("heapd_map_put_bytes: %s", heapd_last_error());
    return false;
}

static void h_worker(unsigned w)
{
    heapd_client *c;
    heapd_mutator *m;
    heapd_open(B.sock, "budget_bench", &c, &m);
    void *map = heapd_global_get(m, global);
    if (!map || heapd_root_push(m, map) == (size_t)-1)
        die("the map: %s", heapd_last_error());
    uint64_t seed = 0x9e3779b97f4a7c15ull * (w + 1), hits = 0;
    atomic_fetch_add(&S->ready, 1);
    heapd_blocking_enter(m);
    while (!atomic_load(&S->go))
        sleep_ms(1);
    heapd_blocking_leave(m);
    for (unsigned long n = 0; n < B.ops; n++) {
        hits += h_op(m, map, pick(&seed), w, n);
        if (n % SAFEPOINT_EVERY == 0)
            heapd_safepoint(m);
    }
    atomic_fetch_add(&S->hits, hits);
    atomic_fetch_add(&S->lookups, B.ops);
    heapd_root_pop(m, 1);
    heapd_detach(m);
    heapd_disconnect(c);
}

/* ---- Redis ---- */

static redisContext *redis_open(void)
{
    redisContext *c = redisConnectUnix(B.redis_sock);
    if (!c || c->err)
        die("redisConnectUnix(%s): %s", B.redis_sock,
            c ? c->errstr : "out of memory");
    return c;
}

static void redis_ok(redisContext *c, redisReply *r, const char *what)
{
    if (!r || r->type == REDIS_REPLY_ERROR)
        die("redis %s: %s", what, r ? r->str : c->errstr);
    freeReplyObject(r);
}

/* A field of INFO SECTION. */
static uint64_t redis_info(redisContext *c, const char *section,
                           const char *name)
{
    redisReply *r = redisCommand(c, "INFO %s", section);
    if (!r || r->type != REDIS_REPLY_STRING)
        die("redis INFO: %s", r ? "not a string" : c->errstr);
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s:", name);
    const char *p = strstr(r->str, pat);
    if (!p)
        die("redis INFO %s: no %s", section, name);
    uint64_t v = strtoull(p + strlen(pat), NULL, 10);
    freeReplyObject(r);
    return v;
}

static void redis_fill(redisContext *c)
{
    char key[KEY_BYTES], val[VALUE_BYTES];
    for (unsigned long k = 0; k < B.keys; k += 1000) {
        unsigned long n = B.keys - k < 1000 ? B.keys - k : 1000;
        for (unsigned long i = 0; i < n; i++) {
            key_of(key, k + i);
            value_of(val, key, 0, 0);
            redisAppendCommand(c, "SET %b %b", key, (size_t)KEY_BYTES, val,
                               (size_t)VALUE_BYTES);
        }
        for (unsigned long i = 0; i < n; i++) {
            void *r;
            if (redisGetReply(c, &r) != REDIS_OK)
                die("redis SET: %s", c->errstr);
            redis_ok(c, r, "SET");
        }
    }
}

/* The whole data's used_memory past the empty server's; the store
 * filled under BUDGET. */
static uint64_t r_setup(uint64_t budget)
{
    redisContext *c = redis_open();
    redis_ok(c, redisCommand(c, "FLUSHALL"), "FLUSHALL");
    redis_ok(c, redisCommand(c, "CONFIG SET maxmemory 0"), "CONFIG SET");
    uint64_t empty = redis_info(c, "memory", "used_memory");
    redis_fill(c);
    uint64_t whole = redis_info(c, "memory", "used_memory") - empty;
    redis_ok(c, redisCommand(c, "FLUSHALL"), "FLUSHALL");
    redis_ok(c, redisCommand(c, "CONFIG SET maxmemory-policy allkeys-lru"),
             "CONFIG SET");
    redis_ok(c, redisCommand(c, "CONFIG SET maxmemory %llu",
                             (unsigned long long)budget),
             "CONFIG SET");
    redis_fill(c);
    uint64_t seed = 0x2545f4914f6cdd1dull;
    for (unsigned long n = 0; n < B.keys; n++) /* the warm-up */
        r_op(c, pick(&seed), 9, n);
    redisFree(c);
    return whole;
}

/* One cache-aside operation on key K through C: true on a hit. */
static bool r_op(redisContext *c, unsigned long k, unsigned w,
                 unsigned long n)
{
    char key[KEY_BYTES], val[VALUE_BYTES];
    key_of(key, k);
    redisReply *r = redisCommand(c, "GET %b", key, (size_t)KEY_BYTES);
    if (!r)
        die("redis GET: %s", c->errstr);
    if (r->type == REDIS_REPLY_STRING) {
        if (r->len != VALUE_BYTES || memcmp(r->str, "val:", 4) != 0)
            die("redis: a wrong value for %.16s", key);
        freeReplyObject(r);
        return true;
    }
    freeReplyObject(r);
    value_of(val, key, w, n);
    redis_ok(c, redisCommand(c, "SET %b %b", key, (size_t)KEY_BYTES, val,
                             (size_t)VALUE_BYTES),
             "SET");
    return false;
}

static void r_worker(unsigned w)
{
    redisContext *c = redis_open();
    uint64_t seed = 0x9e3779b97f4a7c15ull * (w + 1), hits = 0;
    atomic_fetch_add(&S->ready, 1);
    while (!atomic_load(&S->go))
        sleep_ms(1);
    for (unsigned long n = 0; n < B.ops; n++)
        hits += r_op(c, pick(&seed), w, n);
    atomic_fetch_add(&S->hits, hits);
    atomic_fetch_add(&S->lookups, B.ops);
    redisFree(c);
}

/* ---- the run ---- */

static void usage(void)
{
    die("usage: budget_bench --impl heapd|redis [--workers W] [--keys N] "
        "[--ops N] [--budget-pct P] [--socket PATH] [--redis-socket PATH]");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"impl", required_argument, NULL, 'i'},
        {"workers", required_argument, NULL, 'w'},
        {"keys", required_argument, NULL, 'k'},
        {"ops", required_argument, NULL, 'n'},
        {"budget-pct", required_argument, NULL, 'p'},
        {"socket", required_argument, NULL, 's'},
        {"redis-socket", required_argument, NULL, 'r'},
        {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'i': B.impl = optarg; break;
        case 'w': B.workers = parse_count("--workers", optarg); break;
        case 'k': B.keys = parse_count("--keys", optarg); break;
        case 'n': B.ops = parse_count("--ops", optarg); break;
        case 'p': B.budget_pct = parse_count("--budget-pct", optarg); break;
        case 's': B.sock = optarg; break;
        case 'r': B.redis_sock = optarg; break;
        default: usage();
        }
    }
    bool redis = strcmp(B.impl, "redis") == 0;
    if (!redis && strcmp(B.impl, "heapd") != 0)
        usage();
    if (B.budget_pct >= 100 || B.keys < 10)
        die("--budget-pct: below 100; --keys: at least 10");
    if (redis && !B.redis_sock)
        die("--redis-socket is needed for redis");
    S = mmap(NULL, sizeof *S, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (S == MAP_FAILED)
        die("mmap: %s", strerror(errno));
    /* the budget is P % of heapd's whole data for both: Redis is given
     * heapd's figure, which the parent measures first (a heapd on
     * --socket, needed for redis too) */
    uint64_t whole, budget, ev0;
    redisContext *rc = NULL;
    if (redis) {
        heapd_open(B.sock, "budget_bench", &hc, &hm);
        uint64_t hwhole = footprint_of(h_fill_map(0));
        heapd_root_pop(hm, 1);
        heapd_detach(hm);
        heapd_disconnect(hc);
        budget = hwhole * B.budget_pct / 100;
        whole = r_setup(budget);
        rc = redis_open();
        ev0 = redis_info(rc, "stats", "evicted_keys");
    } else {
        whole = h_setup();
        budget = whole * B.budget_pct / 100;
        heapd_map_stats_t st;
        heapd_map_stats(heapd_global_get(hm, global), &st);
        ev0 = st.evictions;
        heapd_blocking_enter(hm); /* while the workers run */
    }
    pid_t *kids = calloc(B.workers, sizeof *kids);
    for (unsigned w = 0; w < B.workers; w++) {
        if ((kids[w] = fork()) < 0)
            die("fork: %s", strerror(errno));
        if (kids[w] == 0) {
            redis ? r_worker(w) : h_worker(w);
            _exit(0);
        }
    }
    while (atomic_load(&S->ready) < B.workers)
        sleep_ms(1);
    uint64_t t0 = now_ns();
    atomic_store(&S->go, 1);
    for (unsigned w = 0; w < B.workers; w++) {
        int st;
        if (waitpid(kids[w], &st, 0) < 0 || !WIFEXITED(st) ||
            WEXITSTATUS(st) != 0)
            die("worker %u failed", w);
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    uint64_t evictions, memory;
    if (redis) {
        evictions = redis_info(rc, "stats", "evicted_keys") - ev0;
        memory = redis_info(rc, "memory", "used_memory");
        redisFree(rc);
    } else {
        heapd_blocking_leave(hm);
        void *map = heapd_global_get(hm, global);
        heapd_map_stats_t st;
        heapd_map_stats(map, &st);
        evictions = st.evictions - ev0;
        memory = footprint_of(map);
        if (heapd_map_verify(map) < 0)
            die("heapd_map_verify: %s", heapd_last_error());
        heapd_global_delete(hm, global);
        heapd_detach(hm);
        heapd_disconnect(hc);
    }
    double lookups = (double)atomic_load(&S->lookups);
    printf("RESULT budget impl=%s workers=%lu keys=%lu ops=%lu "
           "budget_pct=%lu whole_bytes=%llu budget_bytes=%llu "
           "memory_bytes=%llu lookups_per_s=%.0f hit_pct=%.1f "
           "evictions_per_s=%.0f seconds=%.3f\n",
           B.impl, B.workers, B.keys, B.ops, B.budget_pct,
           (unsigned long long)whole, (unsigned long long)budget,
           (unsigned long long)memory, lookups / secs,
           100.0 * (double)atomic_load(&S->hits) / lookups,
           (double)evictions / secs, secs);
    return 0;
}
