/* cache_bench: a cache that every worker process reads and updates, on
 * heapd's shared hash map, Redis, LMDB and a mutex-guarded shared table.
 *
 *   cache_bench --impl heapd|redis|redis_pipe|lmdb|mutex|unlocked
 *               [--workers W]
 *               [--update-pct U] [--ops N] [--keys N] [--batch B]
 *               [--socket PATH] [--redis-socket PATH] [--dir PATH]
 *               [--daemon-pid PID] [--sample-ms MS] [--quick]
 *
 * The workload: KEYS keys (100,000) of exactly 16 bytes ("key:" and 12
 * digits), each with a 100-byte value.  The parent fills the store, then
 * forks W workers; each opens the store for itself (a heapd client, a
 * Redis connection, an LMDB environment do not survive fork), and all
 * start together once every one is ready.  Each runs OPS operations on
 * random keys (a per-worker xorshift, the same sequence for every
 * implementation): U percent updates (replace the key's value with a new
 * 100-byte value), the rest lookups (find the value, check its length,
 * add its first and last byte to a checksum).  Values carry their key's
 * digits: afterwards (not timed) the parent checks every key.
 *
 *   heapd       heapd_map_new(HEAPD_MAP_STR, KEYS) in a global; lookup
 *               heapd_map_get_bytes (zero copy); update
 *               heapd_map_put_bytes, the value kept in the map's entry
 *               (--str-values: heapd_str_new + heapd_map_put_str, and
 *               heapd_map_get_str + heapd_str_data).  A lookup is not a
 *               safepoint: a worker calls heapd_safepoint every 256
 *               operations (Note [Client GC discipline] in heapd.h) and
 *               waits for the start in a blocking region.
 *   redis       Redis on its Unix socket (hiredis): GET / SET, one command
 *               then its reply.
 *   redis_pipe  the same, BATCH (16) commands appended, then their replies;
 *               each operation's latency is the batch's time / its size.
 *   lmdb        a fresh directory on /dev/shm (--dir), MDB_NOSYNC |
 *               MDB_WRITEMAP, map size 1 GiB, opened by each worker after
 *               fork; lookup: renew a per-worker read transaction, mdb_get,
 *               reset; update: a write transaction of its own.
 *   mutex       open addressing over fixed 120-byte slots (flag, key,
 *               value) in a MAP_SHARED anonymous mapping made before the
 *               fork, under ONE process-shared robust mutex (APCu /
 *               boost.interprocess); a lookup copies the value out under
 *               the lock.
 *   unlocked    the mutex table with no lock, one worker only: a lookup
 *               reads its value's first and last byte in the slot.  Each
 *               slot holds its key and value, so a lookup is one access
 *               to memory: the floor of any store in this loop.
 *
 * Timing: one CLOCK_MONOTONIC reading after each operation, its time the
 * difference from the previous one (no gaps: it includes making the key
 * and value, a few ns, and heapd's safepoint when it falls on it), in a
 * log-linear histogram per kind (exact below 64 ns, then at most 3.2 %
 * high; the maximum is exact).  Workers send their counts, first and last
 * readings and histograms through a pipe each; the parent merges the
 * histograms (p99 over every worker's operations) and reports
 * lookups_per_s = all lookups / the wall time from the first worker's
 * start to the last one's end (and the same for updates).
 * daemon_cpu_ms: utime + stime of /proc/PID/stat of --daemon-pid (heapd or
 * redis-server; Redis' own process_id without it) over the run, in 10 ms
 * ticks; "-" for lmdb, mutex and unlocked.
 *
 * Memory, sampled every SAMPLE_MS (100) during the run and at its end:
 *   mem_kib      the store's peak: heapd's committed bytes (heapd_stats,
 *                its memfds), redis-server's RSS (INFO used_memory_rss),
 *                LMDB's files' allocated blocks on tmpfs, the mutex
 *                table's mapping;
 *   live_kib     its data at the end: heapd, what a collection run after
 *                the workers exited marks (objects with headers: map,
 *                table, buckets, key and value strings), as memory_bench
 *                counts a map's live data; Redis, INFO used_memory; LMDB,
 *                the tree's pages; mutex, the slots in use;
 *   payload_kib  KEYS * (16 + 100); workers_anon_kib: the workers' RssAnon.
 *
 * Output, one line (scripts/bench makes the "Shared cache" section of
 * docs/benchmarks.md from them):
 *   RESULT cache impl=NAME workers=W update_pct=U keys=K ops=N
 *          lookups_per_s=.. updates_per_s=.. lookup_p50_ns=.. lookup_p99_ns=..
 *          lookup_max_ns=.. update_p50_ns=.. update_p99_ns=.. update_max_ns=..
 *          mem_kib=.. mem_end_kib=.. live_kib=.. payload_kib=..
 *          workers_anon_kib=.. daemon_cpu_ms=.. wall_ms=.. fill_ms=..
 *          lookups=.. updates=.. checksum=.. [gc_cycles=..
 *          committed_after_gc_kib=..] [batch=..]
 *
 * --growth (heapd only): that the map's resize does not stop readers
 * (Note [Map resize] in client/collections/map.c), and what growing costs.
 *
 *   cache_bench --impl heapd --growth [--capacity CAP] [--keys OLD]
 *               [--ops NEW] [--socket PATH] [--daemon-pid PID] [--quick]
 *
 * The parent makes the map with heapd_map_new(HEAPD_MAP_STR, CAP) (CAP 0,
 * the default: the smallest table, 8 slots) and fills OLD keys (10,000)
 * as above, then forks two workers that start together: a writer that
 * inserts NEW keys (200,000; --quick 100,000) that were not there, OLD to
 * OLD + NEW - 1, each an update's put with HEAPD_MAP_IF_ABSENT, timed
 * like an update; and a reader that looks up random OLD keys
 * (as a lookup above, heapd_safepoint every 256) from the writer's first
 * insert until its last (words in a MAP_SHARED page: no sleeps, no system
 * call).  The map doubles when it holds more keys than its table has
 * slots: with CAP 0 the fill already grows it (to 16,384 slots for the
 * default 10,000 keys), and the inserts double it on to 262,144 while the
 * reader reads (4 doublings, which migrate 245,760 of the 262,136 slots
 * all doublings from 8 migrate); with CAP = OLD + NEW it never grows.
 * The table's slots are read (not computed) through heapd_map_iter_begin,
 * which finishes a resize under way, then the iterator's nbuckets: after
 * heapd_map_new (slots_new), after the fill (slots_start) and after the
 * run (slots_end); they are checked against the rule above (a note on
 * stderr if they differ).  resizes = log2(slots_end / slots_start): the
 * doublings during the run.
 * Afterwards the parent checks every old and new key's value, that
 * heapd_map_count and heapd_map_verify say OLD + NEW, and prints:
 *   RESULT growth impl=heapd capacity=CAP old_keys=OLD new_keys=NEW
 *          inserts_per_s=.. insert_p50_ns=.. insert_p99_ns=..
 *          insert_max_ns=.. lookups_per_s=.. lookup_p50_ns=..
 *          lookup_p99_ns=.. lookup_max_ns=.. resizes=.. slots_new=..
 *          slots_start=.. slots_end=.. lookups=.. insert_ms=.. read_ms=..
 *          mem_kib=.. gc_cycles=.. daemon_cpu_ms=.. fill_ms=.. checksum=..
 * inserts_per_s: NEW / the writer's time (insert_ms); lookups_per_s: the
 * reader's lookups / its time (read_ms: from when it sees the writer
 * started to just after it sees it done).  mem_kib: heapd's committed
 * bytes at their peak (sampled as above).  --workers, --update-pct and
 * --batch do not apply.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench_util.h"
#include "cache_bench.h"
#include "heapd.h"
#include "heapd_collections.h"

#define MAX_WORKERS 64

struct opts O = {
    .impl = "heapd", .redis_sock = "/tmp/redis.sock", .dir = "/dev/shm",
    .keys = 100000, .ops = 1000000, .workers = 1, .update_pct = 20,
    .batch = 16, .sample_ms = 100, .daemon_pid = 0,
};

/* A 64-bit xorshift; each worker seeds its own. */
static inline uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* The check every key's value must pass after the run. */
void check_value(const char key[KEY_BYTES], const void *v, size_t len)
{
    if (!v)
        die("check: key %.16s is missing", key);
    if (len != VALUE_BYTES)
        die("check: key %.16s has a value of %zu bytes, not %d", key, len,
            VALUE_BYTES);
    if (memcmp(v, "val:", 4) != 0 ||
        memcmp((const char *)v + 4, key + 4, KEY_BYTES - 4) != 0)
        die("check: key %.16s holds the value \"%.16s...\"", key,
            (const char *)v);
}

/* ---- the histogram (hist_index, hist_upper: bench_util.h) ---- */
typedef struct hist {
    uint64_t count[HBUCKETS];
    uint64_t n, max;
} hist;

static inline void hist_record(hist *h, uint64_t d)
{
    h->count[hist_index(d)]++;
    h->n++;
    if (d > h->max)
        h->max = d;
}

#define hist_quantile(h, q) hist_quantile_of((h)->count, (h)->n, (h)->max, q)

static void hist_merge(hist *into, const hist *h)
{
    for (size_t i = 0; i < HBUCKETS; i++)
        into->count[i] += h->count[i];
    into->n += h->n;
    if (h->max > into->max)
        into->max = h->max;
}



/* What a worker sends the parent through its pipe. */
struct wres {
    uint64_t lookups, updates, start_ns, end_ns, checksum, anon_kib;
    hist lk, up;
};

/* ---- processes ---- */

pid_t parent_pid;

/* This process's private memory (RssAnon of /proc/self/status), kB. */
static uint64_t anon_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t v = 0;
    if (!f)
        die("/proc/self/status: %s", strerror(errno));
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "RssAnon:", 8) == 0)
            v = strtoull(line + 8, NULL, 10);
    fclose(f);
    return v;
}

/* CPU time (user + system, every thread, dead ones included) of process
 * PID, in ms. */
static uint64_t proc_cpu_ms(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        die("%s: %s (--daemon-pid)", path, strerror(errno));
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* the fields after the command's closing parenthesis: state is the
     * 3rd field of the line, utime the 14th, stime the 15th */
    char *p = strrchr(buf, ')');
    unsigned long long ut, st;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                     "%llu %llu", &ut, &st) != 2)
        die("%s: cannot read utime and stime", path);
    return (ut + st) * 1000u / (uint64_t)sysconf(_SC_CLK_TCK);
}

static void write_all(int fd, const void *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write to the parent: %s", strerror(errno));
        p = (const char *)p + w;
        n -= (size_t)w;
    }
}

/* Read what FD has of the N bytes at P, *GOT of them read before; the
 * parent drains the result pipes while it waits (a worker's 18 KiB may be
 * more than a pipe holds: it could not exit before). */
static void drain(int fd, void *p, size_t n, size_t *got)
{
    while (*got < n) {
        ssize_t r = read(fd, (char *)p + *got, n - *got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return; /* nothing more now (EAGAIN), or the end */
        *got += (size_t)r;
    }
}

/* ---- heapd ---- */

static heapd_client *h_c;
static heapd_mutator *h_m;
static void *h_map;              /* rooted in the process that uses it */
static char h_global[64];        /* the map's global: named per parent */
static uint64_t h_cycles0;
#ifdef HEAPD_HAVE_WHERE
/* Note [Where the memory is]: the heap's parts at its committed peak, and
 * the map's objects by kind once the workers are gone */
static struct bench_where h_where;
static heapd_map_footprint_t h_fp;
#endif
static uint64_t h_slots_new, h_slots_start; /* --growth: the table's slots */

static void *h_make_map(heapd_mutator *m, void *arg)
{
    return heapd_map_new(m, HEAPD_MAP_STR, *(unsigned long *)arg);
}

/* --growth: the slots of the map's table now.  heapd_map_iter_begin
 * finishes a resize under way, then its iterator knows the table's size
 * (nbuckets); the API has no other way to tell.  A safepoint: h_map is
 * rooted. */
static uint64_t h_slots(void)
{
    heapd_map_iter it;
    int rc = heapd_map_iter_begin(h_m, h_map, &it);
    if (rc < 0)
        die("heapd_map_iter_begin: %s (%s)", heapd_strerror(rc),
            heapd_last_error());
    uint64_t n = it.nbuckets;
    heapd_map_iter_end(&it);
    return n;
}

/* The map from its global, rooted: a rooted shared object stays where it
 * is, so the local may be used across safepoints from here on. */
static void h_root_map(void)
{
    h_map = heapd_global_get(h_m, h_global);
    if (!h_map)
        die("heapd: no global %s", h_global);
    if (heapd_root_push(h_m, h_map) == (size_t)-1)
        die("heapd_root_push: %s", strerror(errno));
    if (!heapd_is_map(h_map))
        die("heapd: global %s is not a map", h_global);
}

/* Insert KEY, new, with the value VAL, or die naming WHAT was under way.
 * No safepoint between the string's birth and the put, which keeps its
 * arguments alive. */
/* Set KEY to VAL with FLAGS: inline, or (--str-values) a string. */
static int h_put(const char key[KEY_BYTES], const char val[VALUE_BYTES],
                 unsigned flags)
{
    if (!O.str_values)
        return heapd_map_put_bytes(h_m, h_map, key, KEY_BYTES, val,
                                   VALUE_BYTES, flags);
    void *v = heapd_str_new(h_m, val, VALUE_BYTES);
    if (!v)
        die("heapd_str_new: %s (%s)", strerror(errno), heapd_last_error());
    return heapd_map_put_str(h_m, h_map, key, KEY_BYTES, v, flags);
}

/* KEY's value's bytes and their number, or NULL. */
static const char *h_get(const char key[KEY_BYTES], size_t *len)
{
    if (!O.str_values)
        return heapd_map_get_bytes(h_m, h_map, key, KEY_BYTES, len);
    void *v = heapd_map_get_str(h_m, h_map, key, KEY_BYTES);
    if (!v)
        return NULL;
    *len = heapd_str_len(v);
    return heapd_str_data(v);
}

static void h_insert(const char key[KEY_BYTES], const char val[VALUE_BYTES],
                     const char *what)
{
    int rc = h_put(key, val, HEAPD_MAP_IF_ABSENT);
    if (rc != 0)
        die("heapd insert of %.16s while %s: %d %s (%s)", key, what, rc,
            rc < 0 ? heapd_strerror(rc) : "replaced: the key was there",
            heapd_last_error());
}

static void heapd_fill(void)
{
    char key[KEY_BYTES], val[VALUE_BYTES];
    snprintf(h_global, sizeof h_global, "cache_bench.map.%ld",
             (long)getpid());
    heapd_open(O.sock, "cache_bench", &h_c, &h_m);
    /* sized for the keys, or for --growth's --capacity */
    unsigned long cap = O.growth ? O.capacity : O.keys;
    if (!heapd_global_once(h_m, h_global, h_make_map, &cap))
        die("heapd_map_new: %s (%s)", strerror(errno), heapd_last_error());
    h_root_map();
    if (O.growth)
        h_slots_new = h_slots();
    for (unsigned long k = 0; k < O.keys; k++) {
        key_of(key, k);
        value_of(val, key, 0, 0);
        h_insert(key, val, "filling");
    }
    if (heapd_map_count(h_map) != O.keys)
        die("heapd: the map holds %zu keys after %lu puts",
            heapd_map_count(h_map), O.keys);
    if (O.growth)
        h_slots_start = h_slots();
    /* the parent's mutator would hold up every collection while the
     * parent sleeps between samples: the global keeps the map */
    heapd_root_pop(h_m, 1);
    heapd_detach(h_m);
    h_m = NULL;
    heapd_stats_t st;
    heapd_stats_or_die(h_c, NULL, &st);
    h_cycles0 = st.heaps[0].cycles_completed;
}

static void heapd_wopen(unsigned w)
{
    char name[48];
    snprintf(name, sizeof name, "cache_bench-%u", w);
    heapd_open(O.sock, name, &h_c, &h_m);
    h_root_map();
}

static uint64_t heapd_lookup(const char key[KEY_BYTES])
{
    size_t len = 0;
    const unsigned char *d = (const unsigned char *)h_get(key, &len);
    if (!d)
        die("heapd lookup of %.16s: no value (%s)", key, heapd_last_error());
    if (len != VALUE_BYTES)
        die("heapd: key %.16s has a value of %zu bytes", key, len);
    return (uint64_t)d[0] + d[VALUE_BYTES - 1];
}

static void heapd_update(const char key[KEY_BYTES],
                         const char val[VALUE_BYTES])
{
    int rc = h_put(key, val, 0);
    if (rc != 1)
        die("heapd update of %.16s: %d %s (%s)", key, rc,
            rc < 0 ? heapd_strerror(rc) : "inserted: the key was missing",
            heapd_last_error());
}

static void heapd_every(void)
{
    heapd_safepoint(h_m);
}

static void heapd_waiting(bool start)
{
    if (start)
        heapd_blocking_enter(h_m);
    else
        heapd_blocking_leave(h_m);
}

static void heapd_wclose(void)
{
    heapd_root_pop(h_m, 1);
    heapd_detach(h_m);
    heapd_disconnect(h_c);
}

static uint64_t heapd_sample(void)
{
    heapd_stats_t st;
    heapd_stats_or_die(h_c, h_m, &st);
#ifdef HEAPD_HAVE_WHERE
    /* a new peak: where its bytes are (a mincore of every segment in the
     * daemon, some 0.2 ms for this heap) */
    if (st.heaps[0].bytes_committed > h_where.committed) {
        struct bench_where w;
        bench_where(h_c, h_m, st.heaps[0].name, &w);
        if (w.committed > h_where.committed)
            h_where = w;
    }
#endif
    return st.heaps[0].bytes_committed;
}

static void heapd_finish(struct mem *mem)
{
    char key[KEY_BYTES];
    heapd_stats_t st;
    heapd_stats_or_die(h_c, NULL, &st);
    mem->cycles = st.heaps[0].cycles_completed - h_cycles0;
    bench_attach(h_c, &h_m);
    h_root_map();
    for (unsigned long k = 0; k < O.keys; k++) {
        key_of(key, k);
        size_t len = 0;
        const char *v = h_get(key, &len);
        check_value(key, v, len);
        if (k % SAFEPOINT_EVERY == 0)
            heapd_safepoint(h_m);
    }
    int rc = heapd_map_verify(h_map);
    if (rc < 0 || (unsigned long)rc != O.keys)
        die("heapd_map_verify: %d (%s)", rc, rc < 0 ? heapd_last_error()
                                                     : "keys");
#ifdef HEAPD_HAVE_WHERE
    if ((rc = heapd_map_footprint(h_m, h_map, &h_fp)) < 0)
        die("heapd_map_footprint: %s", heapd_last_error());
#endif
    /* the live data: what one cycle run now marks (the workers are gone;
     * the map is the heap's only data) */
    rc = heapd_collect(h_m, HEAPD_COLLECT_WAIT);
    if (rc < 0)
        die("heapd_collect: %s", heapd_strerror(rc));
    heapd_stats_or_die(h_c, h_m, &st);
    mem->live = st.heaps[0].live_bytes;
    mem->after_gc = st.heaps[0].bytes_committed;
    mem->has_gc = true;
    heapd_root_pop(h_m, 1);
    rc = heapd_global_delete(h_m, h_global);
    if (rc < 0)
        die("heapd_global_delete: %s", heapd_strerror(rc));
    heapd_detach(h_m);
    heapd_disconnect(h_c);
}

/* heapd's entries (name, fill, open, lookup, update, every, waiting,
 * close, sample, finish, has_daemon); the anchors' are in
 * cache_anchors.c */
static const struct impl cache_heapd = {
    "heapd", heapd_fill, heapd_wopen, heapd_lookup, heapd_update,
    heapd_every, heapd_waiting, heapd_wclose, heapd_sample, heapd_finish,
    true};

static const struct impl *const IMPLS[] = {
    &cache_heapd, &cache_redis, &cache_redis_pipe, &cache_lmdb, &cache_mutex,
    &cache_unlocked,
};

static const struct impl *I;

/* ---- the worker ---- */

/* The operation loop, one operation at a time. */
static void run_ops(unsigned w, struct wres *res)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull * (w + 1) ^ 0x2545f4914f6cdd1dull;
    char key[KEY_BYTES], val[VALUE_BYTES];
    uint64_t sum = 0, prev = tick();
    res->start_ns = prev;
    for (unsigned long n = 0; n < O.ops; n++) {
        uint64_t r = rnd(&seed);
        unsigned long k = (unsigned long)(r >> 16) % O.keys;
        bool upd = r % 100 < O.update_pct;
        key_of(key, k);
        if (upd) {
            value_of(val, key, w, n);
            I->update(key, val);
        } else {
            sum += I->lookup(key);
        }
        if (I->every && n % SAFEPOINT_EVERY == SAFEPOINT_EVERY - 1)
            I->every();
        uint64_t t = tick();
        hist_record(upd ? &res->up : &res->lk, t - prev);
        prev = t;
    }
    res->end_ns = prev;
    res->checksum = sum;
}

/* redis_pipe's loop: batches of O.batch commands, then their replies; each
 * operation of a batch is counted as the batch's time / its size. */
static void run_pipe(unsigned w, struct wres *res)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull * (w + 1) ^ 0x2545f4914f6cdd1dull;
    char key[KEY_BYTES], val[VALUE_BYTES];
    char (*keys)[KEY_BYTES] = malloc(O.batch * KEY_BYTES);
    bool *upd = malloc(O.batch * sizeof *upd);
    if (!keys || !upd)
        die("malloc");
    uint64_t sum = 0, prev = tick();
    res->start_ns = prev;
    for (unsigned long n = 0; n < O.ops;) {
        unsigned long b = O.ops - n < O.batch ? O.ops - n : O.batch;
        for (unsigned long i = 0; i < b; i++) {
            uint64_t r = rnd(&seed);
            unsigned long k = (unsigned long)(r >> 16) % O.keys;
            upd[i] = r % 100 < O.update_pct;
            key_of(key, k);
            memcpy(keys[i], key, KEY_BYTES);
            int rc;
            if (upd[i]) {
                value_of(val, key, w, n + i);
                rc = redisAppendCommand(redis_ctx, "SET %b %b", key,
                                        (size_t)KEY_BYTES, val,
                                        (size_t)VALUE_BYTES);
            } else {
                rc = redisAppendCommand(redis_ctx, "GET %b", key,
                                        (size_t)KEY_BYTES);
            }
            if (rc != REDIS_OK)
                die("redis: %s", redis_ctx->errstr);
        }
        for (unsigned long i = 0; i < b; i++) {
            redisReply *r = redis_reply();
            if (upd[i])
                redis_check_ok(r, "SET");
            else
                sum += redis_get_sum(r, keys[i]);
        }
        uint64_t t = tick(), per = (t - prev) / b;
        for (unsigned long i = 0; i < b; i++)
            hist_record(upd[i] ? &res->up : &res->lk, per);
        prev = t;
        n += b;
    }
    res->end_ns = prev;
    res->checksum = sum;
    free(keys);
    free(upd);
}

/* ---- --growth: inserting while another process reads ---- */

/* In a MAP_SHARED page made before the fork: STARTED, set by the writer
 * before its first insert (the reader starts then, so that its lookups
 * are those made while the writer writes, even if the scheduler wakes it
 * first); DONE, set by the writer after its last insert, or by the parent
 * when a worker exits: the reader stops. */
struct gshared {
    _Atomic uint32_t started, done;
};
static struct gshared *g_sh;

/* Worker 0: insert the NEW keys OLD .. OLD + NEW - 1, none there before;
 * each insert timed with the making of its value, as an update is. */
static void growth_write(struct wres *res)
{
    char key[KEY_BYTES], val[VALUE_BYTES];
    atomic_store_explicit(&g_sh->started, 1, memory_order_release);
    uint64_t prev = tick();
    res->start_ns = prev;
    for (unsigned long n = 0; n < O.ops; n++) {
        key_of(key, O.keys + n);
        value_of(val, key, 1, 0);
        h_insert(key, val, "growing");
        uint64_t t = tick();
        hist_record(&res->up, t - prev);
        prev = t;
    }
    res->end_ns = prev;
    atomic_store_explicit(&g_sh->done, 1, memory_order_release);
}

/* Worker 1: from the writer's start, look up random OLD keys until it is
 * done (at least one); a key missing mid-resize dies in heapd_lookup. */
static void growth_read(struct wres *res)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull * 2 ^ 0x2545f4914f6cdd1dull;
    char key[KEY_BYTES];
    /* a few µs at most; a safepoint each time round, so as not to hold
     * up a collection meanwhile */
    while (!atomic_load_explicit(&g_sh->started, memory_order_acquire))
        heapd_safepoint(h_m);
    uint64_t sum = 0, prev = tick();
    res->start_ns = prev;
    for (unsigned long n = 0;; n++) {
        key_of(key, (unsigned long)(rnd(&seed) >> 16) % O.keys);
        sum += heapd_lookup(key);
        if (n % SAFEPOINT_EVERY == SAFEPOINT_EVERY - 1)
            heapd_safepoint(h_m);
        uint64_t t = tick();
        hist_record(&res->lk, t - prev);
        prev = t;
        /* one load of a line nobody writes until the end */
        if (atomic_load_explicit(&g_sh->done, memory_order_acquire))
            break;
    }
    res->end_ns = prev;
    res->checksum = sum;
}

/* The slots the map's table should have for KEYS keys, from START slots:
 * it doubles when it holds more keys than slots (Note [Map resize]). */
static uint64_t growth_expect(uint64_t start, uint64_t keys)
{
    uint64_t n = start;
    while (n < keys && n < ((uint64_t)1 << 27))
        n *= 2;
    return n;
}

/* After the run: check every key, the count and the map's invariants,
 * read the table's slots, and print the RESULT line.  RES[0] is the
 * writer's, RES[1] the reader's. */
static void growth_finish(const struct wres *res, const struct mem *mem,
                          uint64_t fill_ns, const char *cpu)
{
    char key[KEY_BYTES];
    unsigned long total = O.keys + O.ops;
    heapd_stats_t st;
    heapd_stats_or_die(h_c, NULL, &st);
    uint64_t cycles = st.heaps[0].cycles_completed - h_cycles0;
    bench_attach(h_c, &h_m);
    h_root_map();
    for (unsigned long k = 0; k < total; k++) {
        key_of(key, k);
        size_t len = 0;
        const char *v = h_get(key, &len);
        check_value(key, v, len);
        /* the writer's values end in '1', the fill's in '0' */
        if (v[VALUE_BYTES - 1] != (k < O.keys ? '0' : '1'))
            die("check: key %.16s holds another's value", key);
        if (k % SAFEPOINT_EVERY == 0)
            heapd_safepoint(h_m);
    }
    if (heapd_map_count(h_map) != total)
        die("heapd_map_count: %zu, not %lu", heapd_map_count(h_map), total);
    int rc = heapd_map_verify(h_map);
    if (rc < 0 || (unsigned long)rc != total)
        die("heapd_map_verify: %d (%s)", rc, rc < 0 ? heapd_last_error()
                                                     : "keys, not OLD + NEW");
    uint64_t slots_end = h_slots();
    uint64_t e_new = growth_expect(8, O.capacity);
    uint64_t e_start = growth_expect(e_new, O.keys);
    uint64_t e_end = growth_expect(e_start, total);
    if (h_slots_new != e_new || h_slots_start != e_start ||
        slots_end != e_end)
        fprintf(stderr, "cache_bench: note: the table had %" PRIu64 ", %"
                PRIu64 " and %" PRIu64 " slots (new, filled, at the end), "
                "not %" PRIu64 ", %" PRIu64 " and %" PRIu64 "\n",
                h_slots_new, h_slots_start, slots_end, e_new, e_start, e_end);
    heapd_root_pop(h_m, 1);
    rc = heapd_global_delete(h_m, h_global);
    if (rc < 0)
        die("heapd_global_delete: %s", heapd_strerror(rc));
    heapd_detach(h_m);
    heapd_disconnect(h_c);

    const struct wres *wr = &res[0], *rd = &res[1];
    if (wr->updates != O.ops || rd->lookups == 0)
        die("the writer made %" PRIu64 " inserts, not %lu; the reader %"
            PRIu64 " lookups", wr->updates, O.ops, rd->lookups);
    double ins_s = (double)(wr->end_ns - wr->start_ns) / 1e9;
    double rd_s = (double)(rd->end_ns - rd->start_ns) / 1e9;
    unsigned resizes = 0;
    for (uint64_t n = h_slots_start; n < slots_end; n *= 2)
        resizes++;
    printf("RESULT growth impl=heapd capacity=%lu old_keys=%lu new_keys=%lu "
           "inserts_per_s=%.0f insert_p50_ns=%" PRIu64 " insert_p99_ns=%"
           PRIu64 " insert_max_ns=%" PRIu64 " lookups_per_s=%.0f "
           "lookup_p50_ns=%" PRIu64 " lookup_p99_ns=%" PRIu64
           " lookup_max_ns=%" PRIu64 " resizes=%u slots_new=%" PRIu64
           " slots_start=%" PRIu64 " slots_end=%" PRIu64 " lookups=%" PRIu64
           " insert_ms=%.1f read_ms=%.1f mem_kib=%" PRIu64 " gc_cycles=%"
           PRIu64 " daemon_cpu_ms=%s fill_ms=%.1f checksum=%" PRIu64 "\n",
           O.capacity, O.keys, O.ops, (double)O.ops / ins_s,
           hist_quantile(&wr->up, 0.5), hist_quantile(&wr->up, 0.99),
           wr->up.max, (double)rd->lookups / rd_s,
           hist_quantile(&rd->lk, 0.5), hist_quantile(&rd->lk, 0.99),
           rd->lk.max, resizes, h_slots_new, h_slots_start, slots_end,
           rd->lookups, ins_s * 1e3, rd_s * 1e3, mem->peak / 1024, cycles,
           cpu, fill_ns / 1e6, rd->checksum);
}

static int worker(unsigned w, int ready_fd, int go_fd, int res_fd)
{
    struct wres *res = calloc(1, sizeof *res);
    if (!res)
        die("malloc");
    if (I->open)
        I->open(w);
    char c = 'r';
    write_all(ready_fd, &c, 1);
    close(ready_fd); /* the parent sees the end once all are ready or dead */
    /* every worker starts when the parent closes the go pipe */
    if (I->waiting)
        I->waiting(true);
    ssize_t r;
    while ((r = read(go_fd, &c, 1)) < 0 && errno == EINTR)
        ;
    if (I->waiting)
        I->waiting(false);
    if (r != 0)
        die("worker %u: the parent did not start the run", w);
    if (O.growth && w == 0)
        growth_write(res);
    else if (O.growth)
        growth_read(res);
    else if (strcmp(I->name, "redis_pipe") == 0)
        run_pipe(w, res);
    else
        run_ops(w, res);
    res->lookups = res->lk.n;
    res->updates = res->up.n;
    res->anon_kib = anon_kib();
    if (I->close)
        I->close();
    write_all(res_fd, res, sizeof *res);
    free(res);
    return 0;
}

/* ---- the parent ---- */

static int run(void)
{
    /* --growth: a writer (worker 0) and a reader (worker 1) */
    unsigned nw = O.growth ? 2 : (unsigned)O.workers;
    int ready[2], go[2], res_fd[MAX_WORKERS];
    size_t got[MAX_WORKERS] = {0};
    pid_t pids[MAX_WORKERS];
    struct wres *res = calloc(nw, sizeof *res);
    if (!res)
        die("malloc");
    uint64_t t0 = now_ns();
    I->fill();
    uint64_t fill_ns = now_ns() - t0;

    if (pipe(ready) != 0 || pipe(go) != 0)
        die("pipe: %s", strerror(errno));
    if (O.growth) {
        g_sh = mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (g_sh == MAP_FAILED)
            die("mmap: %s", strerror(errno));
    }
    fflush(NULL);
    for (unsigned w = 0; w < nw; w++) {
        int p[2];
        if (pipe(p) != 0)
            die("pipe: %s", strerror(errno));
        pids[w] = fork();
        if (pids[w] < 0)
            die("fork: %s", strerror(errno));
        if (pids[w] == 0) {
            close(ready[0]);
            close(go[1]);
            close(p[0]);
            for (unsigned j = 0; j < w; j++)
                close(res_fd[j]);
            _exit(worker(w, ready[1], go[0], p[1]));
        }
        close(p[1]);
        res_fd[w] = p[0];
        if (fcntl(p[0], F_SETFL, O_NONBLOCK) != 0)
            die("fcntl: %s", strerror(errno));
    }
    close(ready[1]);
    close(go[0]);
    for (unsigned w = 0; w < nw; w++) {
        char c;
        ssize_t r;
        while ((r = read(ready[0], &c, 1)) < 0 && errno == EINTR)
            ;
        if (r != 1) { /* one died: the others must not start */
            for (unsigned j = 0; j < nw; j++)
                kill(pids[j], SIGKILL);
            while (wait(NULL) > 0)
                ;
            die("a worker failed before the start");
        }
    }
    close(ready[0]);

    struct mem mem = {0};
    mem.peak = I->sample();
    uint64_t cpu0 = O.daemon_pid > 0 ? proc_cpu_ms(O.daemon_pid) : 0;
    close(go[1]); /* go */

    /* sample the store while the workers run */
    unsigned running = nw;
    bool failed = false;
    uint64_t next_sample = now_ns() + O.sample_ms * 1000000u;
    while (running > 0) {
        sleep_ms(5);
        for (unsigned w = 0; w < nw; w++)
            drain(res_fd[w], &res[w], sizeof res[w], &got[w]);
        int status;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
            running--;
            /* --growth: a writer that died must not leave the reader
             * waiting or reading forever */
            if (g_sh) {
                atomic_store_explicit(&g_sh->started, 1,
                                      memory_order_release);
                atomic_store_explicit(&g_sh->done, 1, memory_order_release);
            }
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "cache_bench: worker %d failed (status "
                        "%#x)\n", (int)p, status);
                failed = true;
            }
        }
        if (p < 0 && errno != ECHILD)
            die("waitpid: %s", strerror(errno));
        if (running > 0 && now_ns() >= next_sample) {
            uint64_t s = I->sample();
            mem.peak = s > mem.peak ? s : mem.peak;
            next_sample += O.sample_ms * 1000000u;
        }
    }
    uint64_t cpu1 = O.daemon_pid > 0 ? proc_cpu_ms(O.daemon_pid) : 0;
    if (failed)
        return 1; /* lmdb_cleanup runs at exit */
    mem.end = I->sample();
    mem.peak = mem.end > mem.peak ? mem.end : mem.peak;

    static hist lk, up; /* 9 KiB each: not on the stack */
    uint64_t lookups = 0, updates = 0, sum = 0, anon = 0;
    uint64_t start = UINT64_MAX, end = 0;
    for (unsigned w = 0; w < nw; w++) {
        const struct wres *r = &res[w];
        drain(res_fd[w], &res[w], sizeof res[w], &got[w]);
        if (got[w] != sizeof res[w])
            die("worker %u sent %zu bytes of its result", w, got[w]);
        close(res_fd[w]);
        lookups += r->lookups;
        updates += r->updates;
        sum += r->checksum;
        anon += r->anon_kib;
        start = r->start_ns < start ? r->start_ns : start;
        end = r->end_ns > end ? r->end_ns : end;
        hist_merge(&lk, &r->lk);
        hist_merge(&up, &r->up);
    }
    char cpu[32] = "-";
    if (I->has_daemon && O.daemon_pid > 0)
        snprintf(cpu, sizeof cpu, "%" PRIu64, cpu1 - cpu0);
    if (O.growth) {
        growth_finish(res, &mem, fill_ns, cpu);
        free(res);
        return 0;
    }
    free(res);
    if (lookups + updates != O.ops * nw)
        die("%" PRIu64 " operations done, not %lu", lookups + updates,
            O.ops * nw);
    I->finish(&mem);

    double wall_s = (double)(end - start) / 1e9;
    printf("RESULT cache impl=%s workers=%u update_pct=%lu keys=%lu ops=%lu "
           "lookups_per_s=%.0f updates_per_s=%.0f lookup_p50_ns=%" PRIu64
           " lookup_p99_ns=%" PRIu64 " lookup_max_ns=%" PRIu64
           " update_p50_ns=%" PRIu64 " update_p99_ns=%" PRIu64
           " update_max_ns=%" PRIu64 " mem_kib=%" PRIu64 " mem_end_kib=%" PRIu64
           " live_kib=%" PRIu64 " payload_kib=%lu workers_anon_kib=%" PRIu64
           " daemon_cpu_ms=%s wall_ms=%.1f fill_ms=%.1f lookups=%" PRIu64
           " updates=%" PRIu64 " checksum=%" PRIu64,
           I->name, nw, O.update_pct, O.keys, O.ops,
           (double)lookups / wall_s, (double)updates / wall_s,
           hist_quantile(&lk, 0.5), hist_quantile(&lk, 0.99), lk.max,
           hist_quantile(&up, 0.5), hist_quantile(&up, 0.99), up.max,
           mem.peak / 1024, mem.end / 1024, mem.live / 1024,
           O.keys * (KEY_BYTES + VALUE_BYTES) / 1024, anon, cpu,
           wall_s * 1e3, fill_ns / 1e6, lookups, updates, sum);
    if (mem.has_gc)
        printf(" gc_cycles=%" PRIu64 " committed_after_gc_kib=%" PRIu64,
               mem.cycles, mem.after_gc / 1024);
    if (strcmp(I->name, "redis_pipe") == 0)
        printf(" batch=%lu", O.batch);
#ifdef HEAPD_HAVE_WHERE
    if (strcmp(I->name, "heapd") == 0) {
        bench_where_print("where_", &h_where);
        printf(" map_table_kib=%" PRIu64 " map_bucket_kib=%" PRIu64
               " map_key_kib=%" PRIu64 " map_value_kib=%" PRIu64
               " map_header_kib=%" PRIu64 " map_slack_kib=%" PRIu64,
               (h_fp.map_bytes + h_fp.table_bytes) / 1024,
               h_fp.bucket_bytes / 1024, h_fp.key_bytes / 1024,
               h_fp.value_bytes / 1024, h_fp.header_bytes / 1024,
               h_fp.slack_bytes / 1024);
    }
#endif
    printf("\n");
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: cache_bench --impl "
               "heapd|redis|redis_pipe|lmdb|mutex|unlocked\n"
               "         [--workers W (unlocked: 1)] [--update-pct U]\n"
               "         [--ops N (per worker; --quick: 100000)] [--keys N] "
               "[--batch B] [--socket PATH]\n"
               "         [--redis-socket PATH] [--dir PATH] "
               "[--daemon-pid PID] [--sample-ms MS] [--quick]\n"
               "         [--str-values (heapd: values as strings, not "
               "inline)]\n"
               "       cache_bench --impl heapd --growth [--capacity CAP "
               "(0)] [--keys OLD (10000)]\n"
               "         [--ops NEW (200000; --quick: 100000)] "
               "[--socket PATH] [--daemon-pid PID] [--quick]\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"impl", required_argument, NULL, 'i'},
        {"workers", required_argument, NULL, 'w'},
        {"update-pct", required_argument, NULL, 'u'},
        {"ops", required_argument, NULL, 'n'},
        {"keys", required_argument, NULL, 'k'},
        {"batch", required_argument, NULL, 'b'},
        {"socket", required_argument, NULL, 's'},
        {"redis-socket", required_argument, NULL, 'r'},
        {"dir", required_argument, NULL, 'd'},
        {"daemon-pid", required_argument, NULL, 'p'},
        {"sample-ms", required_argument, NULL, 'S'},
        {"quick", no_argument, NULL, 'q'},
        {"growth", no_argument, NULL, 'g'},
        {"capacity", required_argument, NULL, 'c'},
        {"str-values", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool ops_set = false, keys_set = false, cap_set = false, quick = false;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'i': O.impl = optarg; break;
        case 'w': O.workers = parse_count("--workers", optarg); break;
        case 'u':
            /* 0 is a valid percentage: parse_count takes only > 0 */
            O.update_pct = strcmp(optarg, "0") == 0
                               ? 0
                               : parse_count("--update-pct", optarg);
            break;
        case 'n': O.ops = parse_count("--ops", optarg); ops_set = true; break;
        case 'k':
            O.keys = parse_count("--keys", optarg);
            keys_set = true;
            break;
        case 'b': O.batch = parse_count("--batch", optarg); break;
        case 's': O.sock = optarg; break;
        case 'r': O.redis_sock = optarg; break;
        case 'd': O.dir = optarg; break;
        case 'p':
            O.daemon_pid = (long)parse_count("--daemon-pid", optarg);
            break;
        case 'S': O.sample_ms = parse_count("--sample-ms", optarg); break;
        case 'q': quick = true; break;
        case 'g': O.growth = true; break;
        case 'V': O.str_values = true; break;
        case 'c':
            /* 0 (the smallest table) is the default: parse_count takes
             * only > 0 */
            O.capacity = strcmp(optarg, "0") == 0
                             ? 0
                             : parse_count("--capacity", optarg);
            cap_set = true;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (quick && !ops_set)
        O.ops = 100000;
    else if (O.growth && !ops_set)
        O.ops = 200000;
    if (O.growth && !keys_set)
        O.keys = 10000;
    if (cap_set && !O.growth)
        die("--capacity: only with --growth (the cache's map is sized for "
            "its keys)");
    if (O.update_pct > 100)
        die("--update-pct: a percentage (0..100), not %lu", O.update_pct);
    if (O.workers > MAX_WORKERS)
        die("--workers: at most %d", MAX_WORKERS);
    if (O.keys > 999999999999ul ||
        (O.growth && O.ops > 999999999999ul - O.keys))
        die("--keys%s: at most 12 digits", O.growth ? " + --ops" : "");
    for (size_t i = 0; i < sizeof IMPLS / sizeof IMPLS[0]; i++)
        if (strcmp(O.impl, IMPLS[i]->name) == 0)
            I = IMPLS[i];
    if (!I)
        die("--impl: heapd, redis, redis_pipe, lmdb, mutex or unlocked, "
            "not \"%s\"",
            O.impl);
    if (O.growth && strcmp(I->name, "heapd") != 0)
        die("--growth measures heapd's map growing (heapd_map_*): --impl "
            "heapd only, not %s", I->name);
    parent_pid = getpid();
    /* a worker that dies must not take the parent with it through a
     * closed pipe */
    signal(SIGPIPE, SIG_IGN);
    return run();
}
