/* cache_bench.h: what the shared-cache benchmark's files share.
 *
 * cache_bench.c is the benchmark: its options, the workers and the
 * parent, heapd's map and the --growth mode; cache_anchors.c holds the
 * stores it is measured against (Redis, LMDB, one mutex over a shared
 * table).  Each store is a struct impl; the workload's keys and values,
 * and the check of every key after the run, are the same for all.
 */
#ifndef HEAPD_CACHE_BENCH_H
#define HEAPD_CACHE_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#define KEY_BYTES 16
#define VALUE_BYTES 100
#define SAFEPOINT_EVERY 256 /* heapd: operations between safepoints */

struct opts {
    const char *impl;
    const char *sock;       /* heapd's socket */
    const char *redis_sock;
    const char *dir;        /* lmdb: the parent of its directory */
    unsigned long keys, ops, workers, update_pct, batch, sample_ms;
    long daemon_pid;
    bool growth;            /* --growth: the map grows while one reads */
    unsigned long capacity; /* --growth: heapd_map_new's CAPACITY */
    bool str_values;        /* --str-values: heapd's values are strings */
};

extern struct opts O;   /* the command line */
extern pid_t parent_pid; /* the process that fills, samples and checks */

/* "key:" and K in 12 digits: exactly KEY_BYTES, no NUL. */
static inline void key_of(char out[KEY_BYTES], unsigned long k)
{
    memcpy(out, "key:", 4);
    for (int i = KEY_BYTES - 1; i >= 4; i--) {
        out[i] = (char)('0' + k % 10);
        k /= 10;
    }
}

/* Key KEY's value number GEN written by worker W: "val:" and the key's
 * digits, then filler that changes with GEN, the last byte W's digit. */
static inline void value_of(char out[VALUE_BYTES], const char key[KEY_BYTES],
                            unsigned w, uint64_t gen)
{
    memset(out, 'a' + (int)(gen % 26), VALUE_BYTES);
    memcpy(out, "val:", 4);
    memcpy(out + 4, key + 4, KEY_BYTES - 4);
    out[VALUE_BYTES - 1] = (char)('0' + w % 10);
}

/* The check every key's value must pass after the run: dies if it fails. */
void check_value(const char key[KEY_BYTES], const void *v, size_t len);

/* ---- a store ----
 * Each has: fill (the parent, before the fork), open and close (a worker,
 * after it), lookup (the sum of the value's first and last byte), update,
 * and in the parent sample (the store's memory now), finish (after the
 * workers: the live data, the check of every key, cleaning up). */

struct mem {
    uint64_t peak, end, live;    /* bytes */
    uint64_t after_gc;           /* heapd: committed after a final cycle */
    uint64_t cycles;             /* heapd: cycles during the run */
    bool has_gc;
};

struct impl {
    const char *name;
    void (*fill)(void);
    void (*open)(unsigned w);
    uint64_t (*lookup)(const char key[KEY_BYTES]);
    void (*update)(const char key[KEY_BYTES], const char val[VALUE_BYTES]);
    void (*every)(void);         /* every SAFEPOINT_EVERY operations */
    void (*waiting)(bool);       /* before and after the wait to start */
    void (*close)(void);
    uint64_t (*sample)(void);    /* the store's memory now, bytes */
    void (*finish)(struct mem *);
    bool has_daemon;
};

/* The anchors (cache_anchors.c). */
extern const struct impl cache_redis, cache_redis_pipe, cache_lmdb,
    cache_mutex, cache_unlocked;

/* Redis's connection in a worker, and its replies, for the pipelined loop
 * (cache_bench.c's run_pipe). */
extern redisContext *redis_ctx;
redisReply *redis_reply(void);
void redis_check_ok(redisReply *r, const char *what);
uint64_t redis_get_sum(redisReply *r, const char key[KEY_BYTES]);

#endif
