/* memory_bench: how far the memory a heap holds tracks the data it keeps,
 * on heapd, the Boehm collector and glibc malloc, side by side.
 *
 *   memory_bench map     [--impl heapd|boehm|malloc] [--keys N]
 *                        [--value BYTES] [--updates PCT] [--workers N]
 *                        [--ops N] [--socket PATH] [--sample-ms MS]
 *   memory_bench torture [--impl heapd|boehm|malloc] [--mib N]
 *                        [--free PCT] [--socket PATH]
 *
 * map: a shared string-to-string map, the first program a user writes
 * with heapd: KEYS keys of 16 bytes, values of VALUE bytes, chained in a
 * table of buckets.  heapd: the parent makes the map (a global), puts
 * every key, and forks WORKERS processes that each connect and run OPS
 * operations on random keys, UPDATES percent of them replacing a value
 * with a new string (the old one is garbage), the rest looking one up;
 * meanwhile the parent samples heapd_stats every SAMPLE_MS.  When the
 * workers have exited the parent runs one collection (heapd_collect,
 * waiting) and reads the stats again.  Boehm and malloc: one process runs
 * WORKERS * OPS operations on the same map (GC_MALLOC'd, or malloc'd with
 * the old value freed), sampling its heap (GC_get_heap_size) or its
 * resident set (/proc/self/statm).
 *
 * torture: fill a heap of MIB mebibytes of objects of mixed sizes (a size
 * mix of small objects from 16 bytes to 2 KiB, and one object in 64 of
 * 16 to 128 KiB), drop a random FREE percent of them, then refill with
 * another mix (32 bytes to 8 KiB, and one in 32 of 8 to 64 KiB) up to the
 * first total; the heap's committed memory is sampled all along, against
 * the bytes the program holds (objects, headers included, and its array).
 *
 * Output: "RESULT ..." lines (and "CURVE ..." lines for the torture) that
 * scripts/bench turns into docs/benchmarks.md.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define GC_THREADS
#include <gc.h>

#include "bench_util.h"
#include "heapd.h"

#define KEY_BYTES 16
#define ENTRY_NREFS 3   /* next, key, value */

struct opts {
    const char *impl;
    const char *sock;
    unsigned long keys, value, updates, workers, ops, sample_ms;
    unsigned long mib, free_pct;
};

/* A 64-bit xorshift; each process seeds its own. */
static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static unsigned long buckets_for(unsigned long keys)
{
    unsigned long b = 1;
    while (b < keys)
        b <<= 1;
    return b;
}

static void key_text(char out[KEY_BYTES], unsigned long i)
{
    char tmp[32];
    snprintf(tmp, sizeof tmp, "key-%012lu", i % 1000000000000ul);
    memcpy(out, tmp, KEY_BYTES);
}

static void value_text(char *out, size_t n, unsigned long key, uint64_t gen)
{
    memset(out, 'a' + (int)(gen % 26), n);
    if (n >= 16)
        snprintf(out, n, "v%lu/%" PRIu64 " ", key, gen);
}

/* Resident set of this process, bytes. */
static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (!f || fscanf(f, "%lu %lu", &size, &res) != 2)
        die("/proc/self/statm: %s", strerror(errno));
    fclose(f);
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* ---- the map on heapd ---- */

/* An entry: three reference fields (next, key, value), no bytes. */
static void *load_ref(void **field)
{
    return __atomic_load_n(field, __ATOMIC_ACQUIRE);
}

static void *hstring(heapd_mutator *m, const char *s, size_t n)
{
    void *o = heapd_alloc(m, 0, n);
    if (!o)
        die("heapd_alloc(%zu bytes): %s", n, strerror(errno));
    memcpy(heapd_bytes(o), s, n);
    return o;
}

static void **hfind(void **table, unsigned long nb, const char key[KEY_BYTES])
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < KEY_BYTES; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
    for (void **e = load_ref(&table[h & (nb - 1)]); e; e = load_ref(&e[0]))
        if (memcmp(heapd_bytes(load_ref(&e[1])), key, KEY_BYTES) == 0)
            return e;
    return NULL;
}

static unsigned long hbucket(const char key[KEY_BYTES], unsigned long nb)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < KEY_BYTES; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
    return h & (nb - 1);
}

static void *make_table(heapd_mutator *m, void *arg)
{
    unsigned long nb = *(unsigned long *)arg;
    return heapd_alloc(m, nb, 0);
}

/* Put every key (the parent, before the workers start).  The new key,
 * value and entry are rooted until the entry is stored into the table:
 * heapd_alloc is a safepoint (Note [Client GC discipline] in heapd.h). */
static void **hmap_fill(heapd_mutator *m, const struct opts *o)
{
    unsigned long nb = buckets_for(o->keys);
    void **table = heapd_global_once(m, "memory_bench.map", make_table, &nb);
    char key[KEY_BYTES], *val = malloc(o->value);
    if (!table || !val)
        die("the map's table: %s", strerror(errno));
    for (unsigned long i = 0; i < o->keys; i++) {
        key_text(key, i);
        value_text(val, o->value, i, 0);
        size_t r = heapd_root_push(m, hstring(m, key, KEY_BYTES));
        heapd_root_push(m, hstring(m, val, o->value));
        void **e = heapd_alloc(m, ENTRY_NREFS, 0);
        if (!e)
            die("heapd_alloc(entry): %s", strerror(errno));
        unsigned long b = hbucket(key, nb);
        heapd_write(m, e, &e[0], load_ref(&table[b]));
        heapd_write(m, e, &e[1], heapd_root_get(m, r));
        heapd_write(m, e, &e[2], heapd_root_get(m, r + 1));
        heapd_write(m, table, &table[b], e);
        heapd_root_pop(m, 2);
    }
    free(val);
    return table;
}

static int hmap_worker(const struct opts *o, unsigned w)
{
    heapd_client *c;
    heapd_mutator *m;
    char name[32];
    snprintf(name, sizeof name, "memory_bench-%u", w);
    heapd_open(o->sock, name, &c, &m);
    void **table = heapd_global_get(m, "memory_bench.map");
    if (!table)
        die("worker %u: no global memory_bench.map", w);
    unsigned long nb = heapd_nrefs(table);
    uint64_t seed = 0x9e3779b97f4a7c15ull * (w + 1), sum = 0;
    char key[KEY_BYTES], *val = malloc(o->value);
    if (!val)
        die("malloc");
    for (unsigned long n = 0; n < o->ops; n++) {
        uint64_t r = rnd(&seed);
        unsigned long k = (unsigned long)(r >> 16) % o->keys;
        key_text(key, k);
        if (r % 100 < o->updates) {
            value_text(val, o->value, k, n);
            /* no safepoint between the allocation and the store */
            void *v = hstring(m, val, o->value);
            void **e = hfind(table, nb, key);
            if (!e)
                die("worker %u: key %lu is missing", w, k);
            heapd_write(m, e, &e[2], v);
        } else {
            void **e = hfind(table, nb, key);
            if (!e)
                die("worker %u: key %lu is missing", w, k);
            sum += *(unsigned char *)heapd_bytes(load_ref(&e[2]));
        }
    }
    free(val);
    heapd_detach(m);
    heapd_disconnect(c);
    return sum == 0; /* never 0 with these values: keeps the loop */
}

struct samples {
    double *ratio;
    size_t n, cap;
    uint64_t committed_max, live_at_max;
};

static void sample_add(struct samples *s, uint64_t committed, uint64_t live)
{
    if (live == 0)
        return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->ratio = realloc(s->ratio, s->cap * sizeof *s->ratio);
        if (!s->ratio)
            die("malloc");
    }
    s->ratio[s->n++] = (double)committed / (double)live;
    if (committed > s->committed_max) {
        s->committed_max = committed;
        s->live_at_max = live;
    }
}

static double ratio_max(const struct samples *s)
{
    double x = 0;
    for (size_t i = 0; i < s->n; i++)
        x = s->ratio[i] > x ? s->ratio[i] : x;
    return x;
}

static double ratio_median(struct samples *s)
{
    return s->n ? median(s->ratio, s->n) : 0;
}

static const heapd_heap_stats *own_heap(const heapd_stats_t *st)
{
    return &st->heaps[0];
}

static int map_heapd(const struct opts *o)
{
    heapd_client *c;
    heapd_mutator *m;
    heapd_stats_t st;
    heapd_open(o->sock, "memory_bench", &c, &m);
    uint64_t t0 = now_ns();
    hmap_fill(m, o);
    heapd_detach(m);
    uint64_t fill_ns = now_ns() - t0;

    pid_t pids[64];
    if (o->workers > 64)
        die("--workers: at most 64");
    fflush(NULL);
    heapd_stats_or_die(c, NULL, &st);
    uint64_t cycles0 = own_heap(&st)->cycles_completed;
    t0 = now_ns();
    for (unsigned w = 0; w < o->workers; w++) {
        pids[w] = fork();
        if (pids[w] < 0)
            die("fork: %s", strerror(errno));
        if (pids[w] == 0)
            _exit(hmap_worker(o, w));
    }
    /* steady state: once three cycles have run since the workers began
     * (the first values replaced, the trigger following the live set) */
    struct samples steady = {0};
    uint64_t live_max = 0, committed_peak = 0;
#ifdef HEAPD_HAVE_WHERE
    struct bench_where where_max = {0}, where_exit;
#endif
    unsigned running = (unsigned)o->workers;
    bool failed = false;
    while (running > 0) {
        sleep_ms(o->sample_ms);
        heapd_stats_or_die(c, NULL, &st);
        const heapd_heap_stats *h = own_heap(&st);
        if (h->bytes_committed > committed_peak)
            committed_peak = h->bytes_committed;
        if (h->cycles_completed >= cycles0 + 3) {
#ifdef HEAPD_HAVE_WHERE
            /* a new steady maximum: where its bytes are */
            if (h->bytes_committed > steady.committed_max)
                bench_where(c, NULL, h->name, &where_max);
#endif
            sample_add(&steady, h->bytes_committed, h->live_bytes);
            live_max = h->live_bytes > live_max ? h->live_bytes : live_max;
        }
        int status;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
            running--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "memory_bench: worker %d failed (status "
                        "%#x)\n", (int)p, status);
                failed = true;
            }
        }
    }
    uint64_t run_ns = now_ns() - t0;
    heapd_stats_or_die(c, NULL, &st);
    uint64_t cycles_run = own_heap(&st)->cycles_completed - cycles0;
    uint64_t committed_exit = own_heap(&st)->bytes_committed;

    /* the workers are gone: one cycle, then what the heap holds */
    if (heapd_attach(c, &m) < 0)
        die("heapd_attach: %s", heapd_last_error());
    int rc = heapd_collect(m, HEAPD_COLLECT_WAIT);
    if (rc < 0)
        die("heapd_collect: %s", heapd_strerror(rc));
    heapd_stats_or_die(c, m, &st);
    const heapd_heap_stats *h = own_heap(&st);
#ifdef HEAPD_HAVE_WHERE
    bench_where(c, m, h->name, &where_exit);
#endif
    printf("RESULT map impl=heapd keys=%lu value=%lu updates=%lu workers=%lu "
           "ops=%lu fill_ms=%.1f run_ms=%.1f cycles=%" PRIu64
           " samples=%zu live_max=%" PRIu64 " committed_peak=%" PRIu64
           " steady_committed_max=%" PRIu64 " steady_live_at_max=%" PRIu64
           " steady_ratio_max=%.3f steady_ratio_median=%.3f"
           " committed_at_exit=%" PRIu64 " after_cycle_committed=%" PRIu64
           " after_cycle_live=%" PRIu64 " after_cycle_blocks=%" PRIu64
           " after_cycle_ratio=%.3f segments_owned=%" PRIu64
           " purged=%" PRIu64 " grants_paced=%" PRIu64,
           o->keys, o->value, o->updates, o->workers, o->ops,
           fill_ns / 1e6, run_ns / 1e6, cycles_run, steady.n, live_max,
           committed_peak, steady.committed_max, steady.live_at_max,
           ratio_max(&steady), ratio_median(&steady), committed_exit,
           h->bytes_committed, h->live_bytes, h->block_bytes,
           h->live_bytes ? (double)h->bytes_committed / (double)h->live_bytes
                         : 0,
           h->segments_owned, h->purged_bytes, h->grants_paced);
#ifdef HEAPD_HAVE_WHERE
    bench_where_print("where_", &where_max);
    bench_where_print("exit_", &where_exit);
#endif
    printf("\n");
    heapd_detach(m);
    heapd_disconnect(c);
    free(steady.ratio);
    return failed;
}

/* ---- the map on Boehm and malloc, in one process ---- */

struct pentry {
    struct pentry *next;
    char *key;
    char *value;
};

static struct pentry **pfind_slot(struct pentry **table, unsigned long nb,
                                  const char key[KEY_BYTES])
{
    return &table[hbucket(key, nb)];
}

static int map_process(const struct opts *o, bool boehm)
{
    unsigned long nb = buckets_for(o->keys);
    struct pentry **table;
    char key[KEY_BYTES];
    if (boehm) {
        GC_INIT();
        table = GC_MALLOC(nb * sizeof *table);
    } else {
        table = calloc(nb, sizeof *table);
    }
    if (!table)
        die("the table: out of memory");
    uint64_t t0 = now_ns();
    for (unsigned long i = 0; i < o->keys; i++) {
        struct pentry *e = boehm ? GC_MALLOC(sizeof *e) : malloc(sizeof *e);
        e->key = boehm ? GC_MALLOC_ATOMIC(KEY_BYTES) : malloc(KEY_BYTES);
        e->value = boehm ? GC_MALLOC_ATOMIC(o->value) : malloc(o->value);
        if (!e || !e->key || !e->value)
            die("out of memory");
        key_text(e->key, i);
        value_text(e->value, o->value, i, 0);
        struct pentry **slot = pfind_slot(table, nb, e->key);
        e->next = *slot;
        *slot = e;
    }
    uint64_t fill_ns = now_ns() - t0;
    /* the live data, as the program counts it */
    uint64_t live = nb * sizeof *table +
                    o->keys * (sizeof(struct pentry) + KEY_BYTES + o->value);
    uint64_t seed = 0x9e3779b97f4a7c15ull, sum = 0;
    unsigned long total = o->ops * o->workers, every = total / 400 + 1;
    struct samples steady = {0};
    uint64_t peak = 0;
    t0 = now_ns();
    for (unsigned long n = 0; n < total; n++) {
        uint64_t r = rnd(&seed);
        unsigned long k = (unsigned long)(r >> 16) % o->keys;
        key_text(key, k);
        struct pentry *e = *pfind_slot(table, nb, key);
        while (e && memcmp(e->key, key, KEY_BYTES) != 0)
            e = e->next;
        if (!e)
            die("key %lu is missing", k);
        if (r % 100 < o->updates) {
            char *v = boehm ? GC_MALLOC_ATOMIC(o->value) : malloc(o->value);
            if (!v)
                die("out of memory");
            value_text(v, o->value, k, n);
            if (!boehm)
                free(e->value);
            e->value = v;
        } else {
            sum += (unsigned char)e->value[0];
        }
        if (n % every == 0) {
            uint64_t held = boehm ? GC_get_heap_size() : rss_bytes();
            peak = held > peak ? held : peak;
            if (n >= total / 4)
                sample_add(&steady, held, live);
        }
    }
    uint64_t run_ns = now_ns() - t0;
    if (boehm)
        GC_gcollect();
    uint64_t after = boehm ? GC_get_heap_size() : rss_bytes();
    printf("RESULT map impl=%s keys=%lu value=%lu updates=%lu workers=%lu "
           "ops=%lu fill_ms=%.1f run_ms=%.1f cycles=%lu samples=%zu "
           "live=%" PRIu64 " committed_peak=%" PRIu64
           " steady_committed_max=%" PRIu64 " steady_ratio_max=%.3f"
           " steady_ratio_median=%.3f after_cycle_committed=%" PRIu64
           " after_cycle_ratio=%.3f checksum=%" PRIu64 "\n",
           boehm ? "boehm" : "malloc", o->keys, o->value, o->updates,
           o->workers, o->ops, fill_ns / 1e6, run_ns / 1e6,
           boehm ? (unsigned long)GC_get_gc_no() : 0ul, steady.n, live, peak,
           steady.committed_max, ratio_max(&steady), ratio_median(&steady),
           after, (double)after / (double)live, sum);
    free(steady.ratio);
    return 0;
}

/* ---- the fragmentation torture ---- */

/* An object size, header and fields included, for mix MIX (0: the
 * first fill, 1: the refill). */
static size_t torture_size(uint64_t *seed, int mix)
{
    uint64_t r = rnd(seed);
    if (mix == 0) {
        if (r % 64 == 0)
            return 16384 + (size_t)((r >> 8) % (112 * 1024));
        return 16 + 8 * (size_t)((r >> 8) % 255);
    }
    if (r % 32 == 0)
        return 8192 + (size_t)((r >> 8) % (56 * 1024));
    return 32 + 8 * (size_t)((r >> 8) % 1021);
}

struct torture {
    const struct opts *o;
    int impl;            /* 0 heapd, 1 boehm, 2 malloc */
    heapd_client *c;
    heapd_mutator *m;
    void **arr;          /* heapd: a rooted object of N references */
    size_t *sizes;
    size_t n;
    uint64_t live;       /* bytes the program holds */
    double worst;        /* the highest committed / live met */
    const char *worst_at;
};

static uint64_t held_bytes(struct torture *t)
{
    if (t->impl == 0) {
        heapd_stats_t st;
        heapd_stats_or_die(t->c, t->m, &st);
        return own_heap(&st)->bytes_committed;
    }
    return t->impl == 1 ? GC_get_heap_size() : rss_bytes();
}

static void curve(struct torture *t, const char *phase, double progress)
{
    uint64_t held = held_bytes(t);
    double r = (double)held / (double)t->live;
    if (r > t->worst) {
        t->worst = r;
        t->worst_at = phase;
    }
    printf("CURVE torture impl=%s phase=%s progress=%.2f live=%" PRIu64
           " committed=%" PRIu64 " ratio=%.3f\n",
           t->impl == 0 ? "heapd" : t->impl == 1 ? "boehm" : "malloc", phase,
           progress, t->live, held, r);
}

static void *torture_alloc(struct torture *t, size_t size)
{
    /* SIZE includes an 8-byte header, as heapd's objects do */
    size_t nbytes = size - 8;
    if (t->impl == 0) {
        void *p = heapd_alloc(t->m, 0, nbytes);
        if (!p)
            die("heapd_alloc(%zu): %s", nbytes, strerror(errno));
        memset(p, 0x5a, nbytes); /* a program writes what it allocates */
        return p;
    }
    void *p = t->impl == 1 ? GC_MALLOC_ATOMIC(nbytes) : malloc(nbytes);
    if (!p)
        die("out of memory (%zu bytes)", nbytes);
    memset(p, 0x5a, nbytes);
    return p;
}

static void torture_set(struct torture *t, size_t i, void *p)
{
    if (t->impl == 0)
        heapd_write(t->m, t->arr, &t->arr[i], p);
    else
        t->arr[i] = p;
}

static void torture_fill(struct torture *t, uint64_t *seed, int mix,
                         uint64_t target, const char *phase)
{
    uint64_t start = t->live, step = (target - start) / 20 + 1;
    uint64_t next = start + step;
    for (size_t i = 0; i < t->n && t->live < target; i++) {
        if (t->sizes[i])
            continue;
        size_t s = torture_size(seed, mix);
        /* the allocation is a safepoint; the new object is stored
         * before the next one */
        torture_set(t, i, torture_alloc(t, s));
        t->sizes[i] = s;
        t->live += s;
        if (t->live >= next) {
            curve(t, phase, (double)(t->live - start) /
                                (double)(target - start));
            next += step;
        }
    }
}

static int torture(const struct opts *o, int impl)
{
    struct torture t = {.o = o, .impl = impl};
    uint64_t target = (uint64_t)o->mib << 20, seed = 0x2545f4914f6cdd1dull;
    /* enough slots for the smallest mean object size of both mixes */
    t.n = (size_t)(target / 200) + 1024;
    t.sizes = calloc(t.n, sizeof *t.sizes);
    if (!t.sizes)
        die("malloc");
    if (impl == 0) {
        heapd_open(o->sock, "memory_bench-torture", &t.c, &t.m);
        t.arr = heapd_alloc(t.m, t.n, 0);
        if (!t.arr)
            die("heapd_alloc(array): %s", strerror(errno));
        heapd_root_push(t.m, t.arr);
    } else {
        if (impl == 1)
            GC_INIT();
        t.arr = impl == 1 ? GC_MALLOC(t.n * sizeof(void *))
                          : calloc(t.n, sizeof(void *));
        if (!t.arr)
            die("out of memory");
    }
    t.live = 8 + t.n * sizeof(void *);
    uint64_t t0 = now_ns();
    torture_fill(&t, &seed, 0, target, "fill");
    /* drop a random FREE percent */
    for (size_t i = 0; i < t.n; i++) {
        if (t.sizes[i] && rnd(&seed) % 100 < o->free_pct) {
            if (impl == 2)
                free(t.arr[i]);
            torture_set(&t, i, NULL);
            t.live -= t.sizes[i];
            t.sizes[i] = 0;
        }
    }
    /* two cycles: the first finds the dropped objects dead, the next
     * sees what the heap gives back after them */
    for (int k = 0; k < 2; k++) {
        if (impl == 0) {
            int rc = heapd_collect(t.m, HEAPD_COLLECT_WAIT);
            if (rc < 0)
                die("heapd_collect: %s", heapd_strerror(rc));
        } else if (impl == 1) {
            GC_gcollect();
        }
        curve(&t, k ? "freed+2" : "freed+1", 1.0);
    }
    torture_fill(&t, &seed, 1, target, "refill");
    uint64_t ns = now_ns() - t0;
    printf("RESULT torture impl=%s mib=%lu free_pct=%lu live_end=%" PRIu64
           " committed_end=%" PRIu64 " worst_ratio=%.3f worst_at=%s "
           "total_ms=%.1f\n",
           impl == 0 ? "heapd" : impl == 1 ? "boehm" : "malloc", o->mib,
           o->free_pct, t.live, held_bytes(&t), t.worst,
           t.worst_at ? t.worst_at : "-", ns / 1e6);
    if (impl == 0) {
        heapd_root_pop(t.m, 1);
        heapd_detach(t.m);
        heapd_disconnect(t.c);
    }
    free(t.sizes);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memory_bench map [--impl heapd|boehm|malloc] [--keys N] "
            "[--value BYTES]\n"
            "                        [--updates PCT] [--workers N] "
            "[--ops N] [--socket PATH] [--sample-ms MS]\n"
            "       memory_bench torture [--impl heapd|boehm|malloc] "
            "[--mib N] [--free PCT] [--socket PATH]\n");
}

int main(int argc, char **argv)
{
    struct opts o = {.impl = "heapd", .keys = 100000, .value = 100,
                     .updates = 20, .workers = 2, .ops = 2000000,
                     .sample_ms = 20, .mib = 256, .free_pct = 90};
    static const struct option longopts[] = {
        {"impl", required_argument, NULL, 'i'},
        {"socket", required_argument, NULL, 's'},
        {"keys", required_argument, NULL, 'k'},
        {"value", required_argument, NULL, 'v'},
        {"updates", required_argument, NULL, 'u'},
        {"workers", required_argument, NULL, 'w'},
        {"ops", required_argument, NULL, 'n'},
        {"sample-ms", required_argument, NULL, 'S'},
        {"mib", required_argument, NULL, 'm'},
        {"free", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *mode = argv[1];
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'i': o.impl = optarg; break;
        case 's': o.sock = optarg; break;
        case 'k': o.keys = parse_count("--keys", optarg); break;
        case 'v': o.value = parse_count("--value", optarg); break;
        case 'u': o.updates = parse_count("--updates", optarg); break;
        case 'w': o.workers = parse_count("--workers", optarg); break;
        case 'n': o.ops = parse_count("--ops", optarg); break;
        case 'S': o.sample_ms = parse_count("--sample-ms", optarg); break;
        case 'm': o.mib = parse_count("--mib", optarg); break;
        case 'f': o.free_pct = parse_count("--free", optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (o.updates > 100 || o.free_pct > 100)
        die("--updates and --free are percentages (1..100)");
    int impl = strcmp(o.impl, "heapd") == 0    ? 0
               : strcmp(o.impl, "boehm") == 0  ? 1
               : strcmp(o.impl, "malloc") == 0 ? 2
                                               : -1;
    if (impl < 0)
        die("--impl: heapd, boehm or malloc, not \"%s\"", o.impl);
    if (strcmp(mode, "map") == 0)
        return impl == 0 ? map_heapd(&o) : map_process(&o, impl == 1);
    if (strcmp(mode, "torture") == 0)
        return torture(&o, impl);
    usage(stderr);
    return 2;
}
