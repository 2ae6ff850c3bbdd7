/* save_bench: saving a large heap while a client writes, heapd's against
 * Redis' BGSAVE on the same data.
 *
 *   save_bench --impl heapd|redis [--objects N] [--chains K]
 *              [--socket PATH] [--redis-sock PATH] --file PATH
 *
 * The data: N records of 24 bytes in K chains.  In heapd, each is an
 * object with one reference (the next record) and the 24 bytes -- a 40-byte
 * block -- and a root array of K references is global "chains".  In
 * Redis, K lists of N / K elements of 24 bytes (RPUSH, pipelined).
 *
 * Then a writer thread replaces the head of a chain in a loop (heapd: a
 * new record and three writes, one into the record after it, which a save
 * has to copy first; Redis: LSET of a list's first element) and
 * times every iteration, while the main thread waits one second, saves
 * (heapd: heapd_heap_save to FILE; Redis: BGSAVE, polled until done, into
 * the server's own dir, then moved to FILE, which scripts/bench loads), and
 * waits 0.2 s more.  The figures: the save's time and file size, the
 * memory the data takes, and the writer's longest iteration before and
 * during the save.
 * Prints one line: "RESULT save impl=... key=value ...".
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"
#include "heapd.h"

static struct {
    const char *impl;
    unsigned long objects, chains;
    const char *sock, *redis_sock, *file;
} O = {"heapd", 50000000, 50000, NULL, NULL, NULL};

struct rec {
    void *next;
    uint64_t key, value, check;
};

/* the writer's longest iteration, per window: 0 before, 1 during */
static _Atomic int window;
static _Atomic bool stop;
static _Atomic uint64_t longest[2], iterations[2];

static void note_iteration(uint64_t ns)
{
    int w = atomic_load_explicit(&window, memory_order_relaxed);
    if (w > 1)
        return;
    atomic_fetch_add_explicit(&iterations[w], 1, memory_order_relaxed);
    if (ns > atomic_load_explicit(&longest[w], memory_order_relaxed))
        atomic_store_explicit(&longest[w], ns, memory_order_relaxed);
}

/* ---- heapd ---- */

static heapd_client *hc;

static void heapd_build(void)
{
    heapd_mutator *m;
    heapd_connect_opts co = {.socket_path = O.sock};
    if (heapd_connect(&hc, &co) < 0 || heapd_attach(hc, &m) < 0)
        die("heapd: %s", heapd_last_error());
    void **arr = heapd_alloc(m, O.chains, 0);
    if (!arr)
        die("alloc: %s", heapd_last_error());
    size_t slot = heapd_root_push(m, arr);
    unsigned long per = O.objects / O.chains;
    for (unsigned long c = 0; c < O.chains; c++) {
        for (unsigned long k = 0; k < per; k++) {
            struct rec *r = heapd_alloc(m, 1, 3 * sizeof(uint64_t));
            if (!r)
                die("alloc: %s", heapd_last_error());
            arr = heapd_root_get(m, slot);
            r->key = c * per + k;
            r->value = r->key * 7;
            r->check = r->key ^ r->value;
            heapd_write(m, r, &r->next, arr[c]);
            heapd_write(m, arr, &arr[c], r);
        }
    }
    if (heapd_global_set(m, "chains", heapd_root_get(m, slot)) < 0)
        die("global: %s", heapd_last_error());
    heapd_root_pop(m, 1);
    heapd_detach(m);
}

static void *heapd_writer(void *arg)
{
    (void)arg;
    heapd_mutator *m;
    if (heapd_attach(hc, &m) < 0)
        die("attach: %s", heapd_last_error());
    for (uint64_t it = 0; !atomic_load(&stop); it++) {
        uint64_t t0 = now_ns();
        void **arr = heapd_global_get(m, "chains");
        unsigned long c = (unsigned long)(it * 2654435761u) % O.chains;
        struct rec *old = arr[c];
        struct rec *r = heapd_alloc(m, 1, 3 * sizeof(uint64_t));
        if (!r)
            die("alloc: %s", heapd_last_error());
        r->key = old->key;
        r->value = it;
        r->check = r->key ^ r->value;
        arr = heapd_global_get(m, "chains");
        old = arr[c];
        heapd_write(m, r, &r->next, old->next);
        heapd_write(m, arr, &arr[c], r);
        /* and a write to an older record, which a save must copy first */
        struct rec *x = r->next;
        if (x)
            heapd_write(m, x, &x->next, x->next);
        note_iteration(now_ns() - t0);
    }
    heapd_detach(m);
    return NULL;
}

static void heapd_save(heapd_save_info *si)
{
    heapd_client *ctl;
    heapd_connect_opts co = {.socket_path = O.sock,
                             .flags = HEAPD_CONNECT_CONTROL};
    if (heapd_connect(&ctl, &co) < 0 ||
        heapd_heap_save(ctl, "default", O.file, si) < 0)
        die("save: %s", heapd_last_error());
    heapd_disconnect(ctl);
}

/* ---- redis ---- */

static redisContext *redis(void)
{
    redisContext *r = redisConnectUnix(O.redis_sock);
    if (!r || r->err)
        die("redis: %s", r ? r->errstr : "no memory");
    return r;
}

static void redis_ok(redisContext *r, redisReply *rep, const char *what)
{
    if (!rep || rep->type == REDIS_REPLY_ERROR)
        die("redis %s: %s", what, rep ? rep->str : r->errstr);
    freeReplyObject(rep);
}

static void redis_build(void)
{
    redisContext *r = redis();
    unsigned long per = O.objects / O.chains;
    const char **argv = malloc((per + 2) * sizeof *argv);
    size_t *lens = malloc((per + 2) * sizeof *lens);
    char (*vals)[24] = malloc(per * sizeof *vals);
    char key[32];
    unsigned long pending = 0;
    for (unsigned long c = 0; c < O.chains; c++) {
        snprintf(key, sizeof key, "chain:%lu", c);
        argv[0] = "RPUSH";
        lens[0] = 5;
        argv[1] = key;
        lens[1] = strlen(key);
        for (unsigned long k = 0; k < per; k++) {
            uint64_t w[3] = {c * per + k, (c * per + k) * 7, 0};
            w[2] = w[0] ^ w[1];
            memcpy(vals[k], w, 24);
            argv[k + 2] = vals[k];
            lens[k + 2] = 24;
        }
        redisAppendCommandArgv(r, (int)per + 2, argv, lens);
        if (++pending == 64 || c + 1 == O.chains) {
            for (; pending; pending--) {
                redisReply *rep;
                if (redisGetReply(r, (void **)&rep) != REDIS_OK)
                    die("redis: %s", r->errstr);
                redis_ok(r, rep, "RPUSH");
            }
        }
    }
    free(argv);
    free(lens);
    free(vals);
    redisFree(r);
}

static void *redis_writer(void *arg)
{
    (void)arg;
    redisContext *r = redis();
    for (uint64_t it = 0; !atomic_load(&stop); it++) {
        uint64_t t0 = now_ns();
        unsigned long c = (unsigned long)(it * 2654435761u) % O.chains;
        uint64_t w[3] = {c, it, c ^ it};
        redis_ok(r, redisCommand(r, "LSET chain:%lu 0 %b", c, w,
                                 (size_t)24), "LSET");
        note_iteration(now_ns() - t0);
    }
    redisFree(r);
    return NULL;
}

static uint64_t info_field(redisContext *r, const char *section,
                           const char *key)
{
    redisReply *rep = redisCommand(r, "INFO %s", section);
    if (!rep || rep->type != REDIS_REPLY_STRING)
        die("redis INFO: %s", r->errstr);
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s:", key);
    const char *p = strstr(rep->str, pat);
    uint64_t v = p ? strtoull(p + strlen(pat), NULL, 10) : 0;
    freeReplyObject(rep);
    return v;
}

/* A CONFIG GET's value (Redis 7 refuses to set dir: the server's own). */
static void config_get(redisContext *r, const char *key, char *out,
                       size_t n)
{
    redisReply *rep = redisCommand(r, "CONFIG GET %s", key);
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2)
        die("redis CONFIG GET %s: %s", key, r->errstr);
    snprintf(out, n, "%s", rep->element[1]->str);
    freeReplyObject(rep);
}

/* BGSAVE, into the server's dir and dbfilename (scripts/bench gives it
 * the same directory as heapd's file). */
static void redis_save(uint64_t *ns, uint64_t *bytes)
{
    redisContext *r = redis();
    char dir[2048], name[1024], path[4096];
    config_get(r, "dir", dir, sizeof dir);
    config_get(r, "dbfilename", name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    uint64_t t0 = now_ns();
    redis_ok(r, redisCommand(r, "BGSAVE"), "BGSAVE");
    while (info_field(r, "persistence", "rdb_bgsave_in_progress") != 0)
        sleep_ms(5);
    *ns = now_ns() - t0;
    redisReply *rep = redisCommand(r, "INFO persistence");
    if (!rep || !strstr(rep->str, "rdb_last_bgsave_status:ok"))
        die("BGSAVE failed");
    freeReplyObject(rep);
    struct stat st;
    if (stat(path, &st) < 0)
        die("%s: %s", path, strerror(errno));
    *bytes = (uint64_t)st.st_size;
    if (rename(path, O.file) < 0) /* for the load that scripts/bench times */
        die("%s -> %s: %s", path, O.file, strerror(errno));
    redisFree(r);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--impl") && i + 1 < argc)
            O.impl = argv[++i];
        else if (!strcmp(argv[i], "--objects") && i + 1 < argc)
            O.objects = parse_count("--objects", argv[++i]);
        else if (!strcmp(argv[i], "--chains") && i + 1 < argc)
            O.chains = parse_count("--chains", argv[++i]);
        else if (!strcmp(argv[i], "--socket") && i + 1 < argc)
            O.sock = argv[++i];
        else if (!strcmp(argv[i], "--redis-sock") && i + 1 < argc)
            O.redis_sock = argv[++i];
        else if (!strcmp(argv[i], "--file") && i + 1 < argc)
            O.file = argv[++i];
        else
            die("usage: save_bench --impl heapd|redis [--objects N] "
                "[--chains K] [--socket PATH] [--redis-sock PATH] --file "
                "PATH");
    }
    bool heapd = strcmp(O.impl, "heapd") == 0;
    if (!O.file || (!heapd && strcmp(O.impl, "redis") != 0) ||
        (!heapd && !O.redis_sock) || O.chains == 0 ||
        O.objects < O.chains)
        die("save_bench: --file, --impl heapd|redis (redis with "
            "--redis-sock), and --objects >= --chains");
    uint64_t t0 = now_ns();
    if (heapd)
        heapd_build();
    else
        redis_build();
    uint64_t build_ns = now_ns() - t0;
    pthread_t w;
    pthread_create(&w, NULL, heapd ? heapd_writer : redis_writer, NULL);
    sleep_ms(1000);
    atomic_store(&window, 1);
    heapd_save_info si = {0};
    uint64_t save_ns = 0, file_bytes = 0, live = 0, mem = 0, pause = 0;
    uint64_t sync_ns = 0;
    if (heapd) {
        heapd_save(&si);
        save_ns = si.ns;
        sync_ns = si.sync_ns;
        file_bytes = si.file_bytes;
    } else {
        redis_save(&save_ns, &file_bytes);
    }
    atomic_store(&window, 2);
    sleep_ms(200);
    atomic_store(&stop, true);
    pthread_join(w, NULL);
    if (heapd) {
        heapd_stats_t st;
        if (heapd_stats(hc, &st) < 0)
            die("stats: %s", heapd_last_error());
        live = st.live_bytes;
        mem = st.bytes_committed;
        pause = st.pause_max_ns;
        heapd_disconnect(hc);
    } else {
        redisContext *r = redis();
        live = info_field(r, "memory", "used_memory");
        mem = info_field(r, "memory", "used_memory_rss");
        pause = info_field(r, "stats", "latest_fork_usec") * 1000;
        redisFree(r);
    }
    printf("RESULT save impl=%s objects=%lu build_ms=%.0f save_ms=%.0f "
           "sync_ms=%.0f file_bytes=%llu live_bytes=%llu memory_bytes=%llu "
           "written_during=%llu record_bytes=%llu inexact=%llu "
           "longest_before_us=%.0f longest_during_us=%.0f "
           "iterations_during=%llu stop_us=%.0f\n",
           O.impl, O.objects, build_ns / 1e6, save_ns / 1e6, sync_ns / 1e6,
           (unsigned long long)file_bytes, (unsigned long long)live,
           (unsigned long long)mem, (unsigned long long)si.records,
           (unsigned long long)si.record_bytes,
           (unsigned long long)si.inexact, longest[0] / 1e3,
           longest[1] / 1e3, (unsigned long long)iterations[1],
           pause / 1e3);
    return 0;
}
