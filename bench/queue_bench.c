/* queue_bench: a work queue between processes, heapd's against Redis's.
 *
 *   queue_bench --impl IMPL [--producers P] [--consumers C] [--items N]
 *               [--value-bytes B] [--prefill] [--socket PATH]
 *               [--redis-sock PATH]
 *
 * P producer processes push N items in all (strings of B bytes) and C
 * consumer processes take them until the queue ends; the figure is items
 * delivered per second, from the moment every process is ready to the
 * last item's delivery; with --prefill, the producers push every item
 * first and the figure is the consumers' alone, from their start to the
 * last delivery (no consumer ever waits).  IMPL:
 *   heapd        heapd_queue_push / heapd_queue_pop_wait: at most once;
 *   heapd_lease  heapd_queue_pop_lease_wait and heapd_queue_ack: at least
 *                once, a dead consumer's item delivered again (Note
 *                [Leased delivery] in client/collections/queue.c);
 *   redis        LPUSH / BRPOP on a private redis-server: at most once;
 *   redis_reliable  LPUSH / BLMOVE to a processing list, then LREM from
 *                it: Redis's reliable-queue pattern, at least once.
 * heapd's queue ends with heapd_queue_close, Redis's with one "end" item
 * per consumer.  Each consumer checks every item it takes (its producer
 * and sequence number) and the run checks that every item arrived once.
 * Prints one line: "RESULT queue impl=... items_per_s=...".
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "heapd.h"
#include "heapd_collections.h"

enum impl { HEAPD, HEAPD_LEASE, REDIS, REDIS_RELIABLE };

static struct {
    enum impl impl;
    const char *impl_name;
    unsigned producers, consumers;
    unsigned long items;
    unsigned value_bytes;
    bool prefill;
    const char *sock, *redis_sock;
} O = {HEAPD, "heapd", 1, 2, 200000, 64, false, NULL, NULL};

/* What the processes share: an anonymous MAP_SHARED page. */
struct shared {
    _Atomic unsigned ready;
    _Atomic unsigned go;
    _Atomic unsigned go_consumers; /* --prefill */
    _Atomic unsigned long taken;
    _Atomic unsigned long bad;
    _Atomic uint64_t t_start, t_end;
    _Atomic unsigned char seen[]; /* one per item */
};
static struct shared *S;
/* the queue's global: one per run, as a heap outlives runs */
static char queue_name[64];

static void make_item(char *buf, unsigned p, unsigned long seq)
{
    memset(buf, '.', O.value_bytes);
    snprintf(buf, O.value_bytes, "p%u:%lu:", p, seq);
}

/* The item number of ITEM (LEN bytes), or -1 if it is not one. */
static long item_no(const char *item, size_t len)
{
    unsigned p;
    unsigned long seq;
    if (len != O.value_bytes || sscanf(item, "p%u:%lu:", &p, &seq) != 2 ||
        p >= O.producers)
        return -1;
    unsigned long per = O.items / O.producers;
    return seq < per ? (long)(p * per + seq) : -1;
}

static void took(const char *item, size_t len)
{
    long i = item_no(item, len);
    if (i < 0 || atomic_fetch_add(&S->seen[i], 1) != 0)
        atomic_fetch_add(&S->bad, 1);
    if (atomic_fetch_add(&S->taken, 1) + 1 == (unsigned long)O.items)
        atomic_store(&S->t_end, now_ns());
}

/* Say ready, then wait for the start (M: a mutator, which waits in a
 * blocking region, so that it holds up no collection). */
static void ready_and_wait(bool consumer, heapd_mutator *m)
{
    atomic_fetch_add(&S->ready, 1);
    _Atomic unsigned *go = consumer && O.prefill ? &S->go_consumers : &S->go;
    if (m)
        heapd_blocking_enter(m);
    while (!atomic_load(go))
        sleep_ms(1);
    if (m)
        heapd_blocking_leave(m);
}

/* ---- heapd ---- */

/* A kid's connection and mutator, the run's queue rooted in *ROOT once
 * the parent has made it (waited for in a blocking region). */
static heapd_mutator *heapd_kid(heapd_client **c, size_t *root)
{
    heapd_mutator *m;
    heapd_open(O.sock, "queue_bench", c, &m);
    void *q;
    heapd_blocking_enter(m);
    while (!(q = heapd_global_get(m, queue_name)))
        sleep_ms(1);
    heapd_blocking_leave(m);
    q = heapd_global_get(m, queue_name);
    if (!q || (*root = heapd_root_push(m, q)) == (size_t)-1)
        die("the queue: %s", heapd_last_error());
    return m;
}

static void heapd_producer(unsigned p)
{
    heapd_client *c;
    size_t r;
    heapd_mutator *m = heapd_kid(&c, &r);
    char buf[4096];
    ready_and_wait(false, m);
    unsigned long per = O.items / O.producers;
    for (unsigned long s = 0; s < per; s++) {
        make_item(buf, p, s);
        void *v = heapd_str_new(m, buf, O.value_bytes);
        if (!v)
            die("heapd_str_new: %s", heapd_last_error());
        int rc = heapd_queue_push(m, heapd_root_get(m, r), v);
        if (rc < 0)
            die("heapd_queue_push: %s", heapd_last_error());
    }
    heapd_detach(m);
    heapd_disconnect(c);
}

static void heapd_consumer(void)
{
    heapd_client *c;
    size_t r;
    heapd_mutator *m = heapd_kid(&c, &r);
    ready_and_wait(true, m);
    for (;;) {
        heapd_lease l;
        void *v = O.impl == HEAPD_LEASE
                      ? heapd_queue_pop_lease_wait(m, heapd_root_get(m, r), 0,
                                                   0, &l)
                      : heapd_queue_pop_wait(m, heapd_root_get(m, r), 0);
        if (!v) {
            if (errno == ESHUTDOWN)
                break;
            die("heapd_queue_pop: %s", strerror(errno));
        }
        took(heapd_str_data(v), heapd_str_len(v));
        if (O.impl == HEAPD_LEASE &&
            heapd_queue_ack(m, heapd_root_get(m, r), &l) != 0)
            die("heapd_queue_ack: %s", heapd_last_error());
    }
    heapd_detach(m);
    heapd_disconnect(c);
}

/* ---- Redis ---- */

static redisContext *redis_open(void)
{
    redisContext *c = redisConnectUnix(O.redis_sock);
    if (!c || c->err)
        die("redisConnectUnix(%s): %s", O.redis_sock,
            c ? c->errstr : "out of memory");
    return c;
}

static void redis_expect(redisContext *c, redisReply *r, const char *what)
{
    if (!r)
        die("redis %s: %s", what, c->errstr);
    if (r->type == REDIS_REPLY_ERROR)
        die("redis %s: %s", what, r->str);
    freeReplyObject(r);
}

static void redis_producer(unsigned p)
{
    redisContext *c = redis_open();
    char buf[4096];
    ready_and_wait(false, NULL);
    unsigned long per = O.items / O.producers;
    for (unsigned long s = 0; s < per; s++) {
        make_item(buf, p, s);
        redis_expect(c, redisCommand(c, "LPUSH bq %b", buf,
                                     (size_t)O.value_bytes),
                     "LPUSH");
    }
    redisFree(c);
}

static void redis_consumer(unsigned k)
{
    redisContext *c = redis_open();
    char proc[32];
    snprintf(proc, sizeof proc, "bq.processing.%u", k);
    ready_and_wait(true, NULL);
    for (;;) {
        redisReply *r =
            O.impl == REDIS_RELIABLE
                ? redisCommand(c, "BLMOVE bq %s RIGHT LEFT 0", proc)
                : redisCommand(c, "BRPOP bq 0");
        if (!r || r->type == REDIS_REPLY_ERROR)
            die("redis pop: %s", r ? r->str : c->errstr);
        const redisReply *item =
            O.impl == REDIS_RELIABLE ? r : r->element[1];
        bool end = item->len == 3 && memcmp(item->str, "end", 3) == 0;
        if (!end)
            took(item->str, item->len);
        if (O.impl == REDIS_RELIABLE) /* the ack */
            redis_expect(c, redisCommand(c, "LREM %s 1 %b", proc, item->str,
                                         item->len),
                         "LREM");
        freeReplyObject(r);
        if (end)
            break;
    }
    redisFree(c);
}

/* ---- the run ---- */

/* Wait for KIDS[FROM..TO): how many did not exit with 0. */
static int reap(const pid_t *kids, unsigned from, unsigned to)
{
    int failed = 0;
    for (unsigned i = from; i < to; i++) {
        int st;
        if (waitpid(kids[i], &st, 0) < 0 || !WIFEXITED(st) ||
            WEXITSTATUS(st) != 0)
            failed++;
    }
    return failed;
}

static void usage(void)
{
    die("usage: queue_bench --impl heapd|heapd_lease|redis|redis_reliable "
        "[--producers P] [--consumers C] [--items N] [--value-bytes B] "
        "[--prefill] [--socket PATH] [--redis-sock PATH]");
}

static void parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--prefill") == 0) {
            O.prefill = true;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (strcmp(a, "--impl") == 0) {
            static const char *const names[] = {"heapd", "heapd_lease",
                                                "redis", "redis_reliable"};
            unsigned k;
            for (k = 0; k < 4 && strcmp(v, names[k]) != 0; k++)
                ;
            if (k == 4)
                usage();
            O.impl = (enum impl)k;
            O.impl_name = names[k];
        } else if (strcmp(a, "--producers") == 0) {
            O.producers = (unsigned)parse_count(a, v);
        } else if (strcmp(a, "--consumers") == 0) {
            O.consumers = (unsigned)parse_count(a, v);
        } else if (strcmp(a, "--items") == 0) {
            O.items = parse_count(a, v);
        } else if (strcmp(a, "--value-bytes") == 0) {
            O.value_bytes = (unsigned)parse_count(a, v);
        } else if (strcmp(a, "--socket") == 0) {
            O.sock = v;
        } else if (strcmp(a, "--redis-sock") == 0) {
            O.redis_sock = v;
        } else {
            usage();
        }
    }
    if (O.value_bytes < 32 || O.value_bytes > 4000)
        die("--value-bytes: 32 to 4000");
    O.items -= O.items % O.producers;
    if ((O.impl == REDIS || O.impl == REDIS_RELIABLE) && !O.redis_sock)
        die("--redis-sock is needed for %s", O.impl_name);
}

int main(int argc, char **argv)
{
    parse(argc, argv);
    snprintf(queue_name, sizeof queue_name, "bench.queue.%d", (int)getpid());
    bool redis = O.impl == REDIS || O.impl == REDIS_RELIABLE;
    size_t bytes = sizeof *S + O.items;
    S = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
             -1, 0);
    if (S == MAP_FAILED)
        die("mmap: %s", strerror(errno));
    unsigned n = O.producers + O.consumers;
    pid_t *kids = calloc(n, sizeof *kids);
    if (!kids)
        die("out of memory");
    /* the kids first: none inherits this process's connection */
    for (unsigned i = 0; i < n; i++) {
        if ((kids[i] = fork()) < 0)
            die("fork: %s", strerror(errno));
        if (kids[i] == 0) {
            bool prod = i < O.producers;
            unsigned k = prod ? i : i - O.producers;
            if (redis)
                prod ? redis_producer(k) : redis_consumer(k);
            else
                prod ? heapd_producer(k) : heapd_consumer();
            _exit(0);
        }
    }
    heapd_client *c = NULL;
    heapd_mutator *m = NULL;
    redisContext *rc = NULL;
    size_t root = 0;
    if (redis) {
        rc = redis_open();
        redis_expect(rc, redisCommand(rc, "FLUSHALL"), "FLUSHALL");
    } else {
        heapd_open(O.sock, "queue_bench", &c, &m);
        root = heapd_root_push(m, heapd_queue_new(m));
        if (!heapd_root_get(m, root) ||
            heapd_global_set(m, queue_name, heapd_root_get(m, root)) < 0)
            die("the queue: %s", heapd_last_error());
    }
    if (m) /* waiting for the kids holds up no collection */
        heapd_blocking_enter(m);
    while (atomic_load(&S->ready) < n)
        sleep_ms(1);
    atomic_store(&S->t_start, now_ns());
    atomic_store(&S->go, 1);
    int failed = reap(kids, 0, O.producers);
    /* the producers are done: end the queue */
    if (m)
        heapd_blocking_leave(m);
    if (redis) {
        for (unsigned i = 0; i < O.consumers; i++)
            redis_expect(rc, redisCommand(rc, "LPUSH bq end"), "LPUSH");
    } else if (heapd_queue_close(m, heapd_root_get(m, root)) < 0) {
        die("heapd_queue_close: %s", heapd_last_error());
    }
    if (O.prefill) {
        atomic_store(&S->t_start, now_ns());
        atomic_store(&S->go_consumers, 1);
    }
    if (m)
        heapd_blocking_enter(m);
    failed += reap(kids, O.producers, n);
    if (m)
        heapd_blocking_leave(m);
    if (failed)
        die("%d of its processes failed", failed);
    unsigned long missing = 0;
    for (unsigned long i = 0; i < O.items; i++)
        missing += atomic_load(&S->seen[i]) == 0;
    if (missing || atomic_load(&S->bad))
        die("%lu items missing, %lu delivered twice or not items", missing,
            (unsigned long)atomic_load(&S->bad));
    double secs = (double)(atomic_load(&S->t_end) - S->t_start) / 1e9;
    printf("RESULT queue impl=%s producers=%u consumers=%u items=%lu "
           "value_bytes=%u prefill=%d seconds=%.3f items_per_s=%.0f\n",
           O.impl_name, O.producers, O.consumers, O.items, O.value_bytes,
           O.prefill, secs, (double)O.items / secs);
    if (redis) {
        redisFree(rc);
    } else {
        heapd_root_pop(m, 1);
        heapd_detach(m);
        heapd_disconnect(c);
    }
    return 0;
}
