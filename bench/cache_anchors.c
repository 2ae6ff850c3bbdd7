/* cache_anchors.c: the stores the shared-cache benchmark measures heapd's
 * map against (cache_bench.c runs them): Redis over its Unix socket, LMDB
 * in a directory every worker opens, and one robust process-shared mutex
 * over an open-addressing table in shared memory; and that table read
 * with no lock by one worker, the least a store that reads a value from
 * memory can cost in the benchmark's loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <lmdb.h>

#include "bench_util.h"
#include "cache_bench.h"

/* ---- Redis ---- */

redisContext *redis_ctx;

static redisContext *redis_connect(void)
{
    redisContext *c = redisConnectUnix(O.redis_sock);
    if (!c)
        die("redisConnectUnix(%s): out of memory", O.redis_sock);
    if (c->err)
        die("redisConnectUnix(%s): %s", O.redis_sock, c->errstr);
    return c;
}

redisReply *redis_reply(void)
{
    void *r;
    if (redisGetReply(redis_ctx, &r) != REDIS_OK || !r)
        die("redis: %s", redis_ctx->errstr[0] ? redis_ctx->errstr : "no reply");
    return r;
}

void redis_check_ok(redisReply *r, const char *what)
{
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0)
        die("redis %s: %s", what,
            r->type == REDIS_REPLY_ERROR ? r->str : "not OK");
    freeReplyObject(r);
}

/* GET's reply: first + last byte, the length checked. */
uint64_t redis_get_sum(redisReply *r, const char key[KEY_BYTES])
{
    if (r->type != REDIS_REPLY_STRING || r->len != VALUE_BYTES)
        die("redis GET %.16s: %s", key,
            r->type == REDIS_REPLY_NIL      ? "no such key"
            : r->type == REDIS_REPLY_ERROR ? r->str
                                           : "not a 100-byte string");
    const unsigned char *d = (const unsigned char *)r->str;
    uint64_t s = (uint64_t)d[0] + d[VALUE_BYTES - 1];
    freeReplyObject(r);
    return s;
}

/* INFO's field NAME (a number), or 0. */
static uint64_t redis_info(const char *section, const char *name)
{
    redisReply *r = redisCommand(redis_ctx, "INFO %s", section);
    if (!r)
        die("redis INFO: %s", redis_ctx->errstr);
    if (r->type != REDIS_REPLY_STRING)
        die("redis INFO: not a string");
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s:", name);
    const char *p = strstr(r->str, pat);
    uint64_t v = p ? strtoull(p + strlen(pat), NULL, 10) : 0;
    freeReplyObject(r);
    return v;
}

static void redis_fill(void)
{
    char key[KEY_BYTES], val[VALUE_BYTES];
    redis_ctx = redis_connect();
    redis_check_ok(redisCommand(redis_ctx, "FLUSHALL"), "FLUSHALL");
    for (unsigned long k = 0; k < O.keys; k += 1000) {
        unsigned long n = O.keys - k < 1000 ? O.keys - k : 1000;
        for (unsigned long i = 0; i < n; i++) {
            key_of(key, k + i);
            value_of(val, key, 0, 0);
            if (redisAppendCommand(redis_ctx, "SET %b %b", key, (size_t)KEY_BYTES,
                                   val, (size_t)VALUE_BYTES) != REDIS_OK)
                die("redis: %s", redis_ctx->errstr);
        }
        for (unsigned long i = 0; i < n; i++)
            redis_check_ok(redis_reply(), "SET");
    }
    if (O.daemon_pid <= 0)
        O.daemon_pid = (long)redis_info("server", "process_id");
}

static void redis_wopen(unsigned w)
{
    (void)w;
    redis_ctx = redis_connect();
}

static uint64_t redis_lookup(const char key[KEY_BYTES])
{
    redisReply *r = redisCommand(redis_ctx, "GET %b", key, (size_t)KEY_BYTES);
    if (!r)
        die("redis GET: %s", redis_ctx->errstr);
    return redis_get_sum(r, key);
}

static void redis_update(const char key[KEY_BYTES],
                         const char val[VALUE_BYTES])
{
    redisReply *r = redisCommand(redis_ctx, "SET %b %b", key, (size_t)KEY_BYTES,
                                 val, (size_t)VALUE_BYTES);
    if (!r)
        die("redis SET: %s", redis_ctx->errstr);
    redis_check_ok(r, "SET");
}

static void redis_wclose(void)
{
    redisFree(redis_ctx);
}

static uint64_t redis_sample(void)
{
    return redis_info("memory", "used_memory_rss");
}

static void redis_finish(struct mem *mem)
{
    char key[KEY_BYTES];
    mem->live = redis_info("memory", "used_memory");
    for (unsigned long k = 0; k < O.keys; k += 1000) {
        unsigned long n = O.keys - k < 1000 ? O.keys - k : 1000;
        for (unsigned long i = 0; i < n; i++) {
            key_of(key, k + i);
            if (redisAppendCommand(redis_ctx, "GET %b", key,
                                   (size_t)KEY_BYTES) != REDIS_OK)
                die("redis: %s", redis_ctx->errstr);
        }
        for (unsigned long i = 0; i < n; i++) {
            redisReply *r = redis_reply();
            key_of(key, k + i);
            check_value(key, r->type == REDIS_REPLY_STRING ? r->str : NULL,
                        (size_t)r->len);
            freeReplyObject(r);
        }
    }
    redisFree(redis_ctx);
}

/* redis_pipe: the worker loop batches (see run_pipe); the rest is redis's */

/* ---- LMDB ---- */

static MDB_env *l_env;
static MDB_dbi l_dbi;
static MDB_txn *l_rtxn;
static char l_dir[256];

#define LMDB_FLAGS (MDB_NOSYNC | MDB_WRITEMAP)
#define LMDB_MAPSIZE ((size_t)1 << 30)

static void lmdb_ok(int rc, const char *what)
{
    if (rc != 0)
        die("lmdb %s: %s", what, mdb_strerror(rc));
}

static void lmdb_open_env(void)
{
    lmdb_ok(mdb_env_create(&l_env), "mdb_env_create");
    lmdb_ok(mdb_env_set_mapsize(l_env, LMDB_MAPSIZE), "mdb_env_set_mapsize");
    lmdb_ok(mdb_env_set_maxreaders(l_env, 256), "mdb_env_set_maxreaders");
    lmdb_ok(mdb_env_open(l_env, l_dir, LMDB_FLAGS, 0600), "mdb_env_open");
    MDB_txn *t;
    lmdb_ok(mdb_txn_begin(l_env, NULL, MDB_RDONLY, &t), "mdb_txn_begin");
    lmdb_ok(mdb_dbi_open(t, NULL, 0, &l_dbi), "mdb_dbi_open");
    lmdb_ok(mdb_txn_commit(t), "mdb_txn_commit");
}

static void lmdb_cleanup(void)
{
    char path[300];
    if (!l_dir[0] || getpid() != parent_pid)
        return;
    snprintf(path, sizeof path, "%s/data.mdb", l_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/lock.mdb", l_dir);
    unlink(path);
    rmdir(l_dir);
    l_dir[0] = 0;
}

static void lmdb_fill(void)
{
    char key[KEY_BYTES], val[VALUE_BYTES];
    snprintf(l_dir, sizeof l_dir, "%s/cache_bench.XXXXXX", O.dir);
    if (!mkdtemp(l_dir))
        die("mkdtemp(%s): %s", l_dir, strerror(errno));
    atexit(lmdb_cleanup);
    lmdb_open_env();
    MDB_txn *t;
    lmdb_ok(mdb_txn_begin(l_env, NULL, 0, &t), "mdb_txn_begin");
    for (unsigned long k = 0; k < O.keys; k++) {
        key_of(key, k);
        value_of(val, key, 0, 0);
        MDB_val mk = {KEY_BYTES, key}, mv = {VALUE_BYTES, val};
        lmdb_ok(mdb_put(t, l_dbi, &mk, &mv, 0), "mdb_put");
    }
    lmdb_ok(mdb_txn_commit(t), "mdb_txn_commit");
    /* an environment must not be used across fork: each worker opens it */
    mdb_env_close(l_env);
    l_env = NULL;
}

static void lmdb_wopen(unsigned w)
{
    (void)w;
    lmdb_open_env();
    lmdb_ok(mdb_txn_begin(l_env, NULL, MDB_RDONLY, &l_rtxn), "mdb_txn_begin");
    mdb_txn_reset(l_rtxn);
}

static uint64_t lmdb_lookup(const char key[KEY_BYTES])
{
    MDB_val mk = {KEY_BYTES, (void *)key}, mv;
    lmdb_ok(mdb_txn_renew(l_rtxn), "mdb_txn_renew");
    int rc = mdb_get(l_rtxn, l_dbi, &mk, &mv);
    if (rc != 0)
        die("lmdb mdb_get(%.16s): %s", key, mdb_strerror(rc));
    if (mv.mv_size != VALUE_BYTES)
        die("lmdb: key %.16s has a value of %zu bytes", key, mv.mv_size);
    const unsigned char *d = mv.mv_data;
    uint64_t s = (uint64_t)d[0] + d[VALUE_BYTES - 1];
    mdb_txn_reset(l_rtxn);
    return s;
}

static void lmdb_update(const char key[KEY_BYTES],
                        const char val[VALUE_BYTES])
{
    MDB_txn *t;
    MDB_val mk = {KEY_BYTES, (void *)key}, mv = {VALUE_BYTES, (void *)val};
    lmdb_ok(mdb_txn_begin(l_env, NULL, 0, &t), "mdb_txn_begin");
    lmdb_ok(mdb_put(t, l_dbi, &mk, &mv, 0), "mdb_put");
    lmdb_ok(mdb_txn_commit(t), "mdb_txn_commit");
}

static void lmdb_wclose(void)
{
    mdb_txn_abort(l_rtxn);
    mdb_env_close(l_env);
}

/* The data and lock files' allocated blocks: tmpfs pages are memory. */
static uint64_t lmdb_sample(void)
{
    char path[300];
    uint64_t b = 0;
    struct stat st;
    snprintf(path, sizeof path, "%s/data.mdb", l_dir);
    if (stat(path, &st) != 0)
        die("stat(%s): %s", path, strerror(errno));
    b += (uint64_t)st.st_blocks * 512;
    snprintf(path, sizeof path, "%s/lock.mdb", l_dir);
    if (stat(path, &st) == 0)
        b += (uint64_t)st.st_blocks * 512;
    return b;
}

static void lmdb_finish(struct mem *mem)
{
    char key[KEY_BYTES];
    lmdb_open_env();
    MDB_stat ms;
    MDB_txn *t;
    lmdb_ok(mdb_txn_begin(l_env, NULL, MDB_RDONLY, &t), "mdb_txn_begin");
    lmdb_ok(mdb_stat(t, l_dbi, &ms), "mdb_stat");
    if (ms.ms_entries != O.keys)
        die("lmdb: %zu entries after the run, not %lu", ms.ms_entries,
            O.keys);
    mem->live = (uint64_t)(ms.ms_branch_pages + ms.ms_leaf_pages +
                           ms.ms_overflow_pages) * ms.ms_psize;
    for (unsigned long k = 0; k < O.keys; k++) {
        key_of(key, k);
        MDB_val mk = {KEY_BYTES, key}, mv = {0, NULL};
        int rc = mdb_get(t, l_dbi, &mk, &mv);
        if (rc != 0 && rc != MDB_NOTFOUND)
            die("lmdb mdb_get: %s", mdb_strerror(rc));
        check_value(key, rc ? NULL : mv.mv_data, mv.mv_size);
    }
    mdb_txn_abort(t);
    mdb_env_close(l_env);
    lmdb_cleanup();
}

/* ---- one mutex over a shared table ---- */

struct mslot {
    uint32_t used;
    char key[KEY_BYTES];
    char val[VALUE_BYTES];
};

struct mtable {
    pthread_mutex_t lock;
    uint64_t nslots;
    struct mslot slots[];
};

static struct mtable *m_t;
static size_t m_bytes;
static bool m_unlocked; /* the "unlocked" anchor: one worker, no lock */

static inline uint64_t m_hash(const char key[KEY_BYTES])
{
    uint64_t a, b;
    memcpy(&a, key, 8);
    memcpy(&b, key + 8, 8);
    __uint128_t r = (__uint128_t)(a ^ 0xa0761d6478bd642full) *
                    (b ^ 0xe7037ed1a0b428dbull);
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static void m_lock(void)
{
    if (m_unlocked)
        return;
    int rc = pthread_mutex_lock(&m_t->lock);
    if (rc == EOWNERDEAD) {
        /* a worker died holding it: a value it was copying may be torn,
         * which a cache may take; the table's structure never is (a slot
         * is marked used after its key is written) */
        rc = pthread_mutex_consistent(&m_t->lock);
    }
    if (rc != 0)
        die("pthread_mutex_lock: %s", strerror(rc));
}

static void m_unlock(void)
{
    if (!m_unlocked)
        pthread_mutex_unlock(&m_t->lock);
}

/* KEY's slot, or the empty slot where it would go.  Under the lock. */
static struct mslot *m_find(const char key[KEY_BYTES])
{
    uint64_t mask = m_t->nslots - 1;
    for (uint64_t i = m_hash(key) & mask;; i = (i + 1) & mask) {
        struct mslot *s = &m_t->slots[i];
        if (!s->used || memcmp(s->key, key, KEY_BYTES) == 0)
            return s;
    }
}

static void mutex_fill(void)
{
    char key[KEY_BYTES];
    uint64_t n = 1;
    while (n < O.keys + O.keys / 3)
        n <<= 1;
    m_bytes = sizeof(struct mtable) + n * sizeof(struct mslot);
    void *p = mmap(NULL, m_bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("mmap(%zu): %s", m_bytes, strerror(errno));
    m_t = p;
    m_t->nslots = n;
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a) ||
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) ||
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) ||
        pthread_mutex_init(&m_t->lock, &a))
        die("a process-shared robust mutex: not supported");
    pthread_mutexattr_destroy(&a);
    for (unsigned long k = 0; k < O.keys; k++) {
        key_of(key, k);
        struct mslot *s = m_find(key);
        memcpy(s->key, key, KEY_BYTES);
        value_of(s->val, key, 0, 0);
        s->used = 1;
    }
}

static uint64_t mutex_lookup(const char key[KEY_BYTES])
{
    unsigned char v[VALUE_BYTES];
    m_lock();
    struct mslot *s = m_find(key);
    bool found = s->used;
    if (found)
        memcpy(v, s->val, VALUE_BYTES);
    m_unlock();
    if (!found)
        die("mutex: key %.16s is missing", key);
    return (uint64_t)v[0] + v[VALUE_BYTES - 1];
}

static void mutex_update(const char key[KEY_BYTES],
                         const char val[VALUE_BYTES])
{
    m_lock();
    struct mslot *s = m_find(key);
    bool found = s->used;
    if (found)
        memcpy(s->val, val, VALUE_BYTES);
    m_unlock();
    if (!found)
        die("mutex: key %.16s is missing", key);
}

/* The unlocked table: the mutex table's slots, which hold each key with
 * its value, read by one worker with no lock, and its lookup reads the
 * value's first and last byte where they are, as heapd's zero-copy
 * lookup does: one slot, the one access to memory a random key needs,
 * is all a lookup touches. */
static void unlocked_fill(void)
{
    if (O.workers != 1)
        die("--impl unlocked: one worker only (--workers 1): it has no "
            "lock");
    m_unlocked = true;
    mutex_fill();
}

static uint64_t unlocked_lookup(const char key[KEY_BYTES])
{
    struct mslot *s = m_find(key);
    if (!s->used)
        die("unlocked: key %.16s is missing", key);
    return (uint64_t)(unsigned char)s->val[0] +
           (unsigned char)s->val[VALUE_BYTES - 1];
}

static uint64_t mutex_sample(void)
{
    return m_bytes;
}

static void mutex_finish(struct mem *mem)
{
    char key[KEY_BYTES];
    uint64_t used = 0;
    for (uint64_t i = 0; i < m_t->nslots; i++)
        used += m_t->slots[i].used;
    if (used != O.keys)
        die("mutex: %" PRIu64 " slots in use, not %lu", used, O.keys);
    mem->live = used * sizeof(struct mslot);
    for (unsigned long k = 0; k < O.keys; k++) {
        key_of(key, k);
        struct mslot *s = m_find(key);
        check_value(key, s->used ? s->val : NULL, VALUE_BYTES);
    }
    munmap(m_t, m_bytes);
}

/* name, fill, open, lookup, update, every, waiting, close, sample, finish,
 * has_daemon (mutex's workers inherit the mapping: no open, no close) */
const struct impl cache_redis = {
    "redis", redis_fill, redis_wopen, redis_lookup, redis_update, NULL, NULL,
    redis_wclose, redis_sample, redis_finish, true};
const struct impl cache_redis_pipe = {
    "redis_pipe", redis_fill, redis_wopen, redis_lookup, redis_update, NULL,
    NULL, redis_wclose, redis_sample, redis_finish, true};
const struct impl cache_lmdb = {
    "lmdb", lmdb_fill, lmdb_wopen, lmdb_lookup, lmdb_update, NULL, NULL,
    lmdb_wclose, lmdb_sample, lmdb_finish, false};
const struct impl cache_mutex = {
    "mutex", mutex_fill, NULL, mutex_lookup, mutex_update, NULL, NULL, NULL,
    mutex_sample, mutex_finish, false};
const struct impl cache_unlocked = {
    "unlocked", unlocked_fill, NULL, unlocked_lookup, mutex_update, NULL,
    NULL, NULL, mutex_sample, mutex_finish, false};
