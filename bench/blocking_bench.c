/* blocking_bench: what heapd_blocking_enter costs a thread whose C stack
 * is a root (Note [C locals are roots] in client/stack_roots.c): the
 * capture of the objects its stack points into, at two stack depths,
 * against the same calls of a HEAPD_MUTATOR_PRECISE mutator, which
 * captures nothing.
 *
 * The workload: a thread with an 8 MiB stack attaches, allocates OBJS
 * shared objects (rooted), and recurses until DEPTH bytes of stack are in
 * use, each frame a 1 KiB array of words: one in eight a pointer into one
 * of the objects (its reference, or a byte inside it), the rest small
 * integers.  At the bottom it times N pairs of heapd_blocking_enter and
 * heapd_blocking_leave (no collection runs meanwhile: nothing allocates)
 * and reports the mean ns of a pair.
 *
 * With --handshake N it times the stops instead: at the bottom the thread
 * calls heapd_safepoint in a loop (so a snapshot's stop finds it running
 * and it captures its stack before it acknowledges) while another thread
 * of the process asks for N cycles, one after the other, on a control
 * connection; it reports the daemon's pauses over them (mean of all, the
 * snapshots' and the final syncs', and the longest snapshot pause).
 *
 *   blocking_bench heapd [-n N] [--handshake N] [--depth BYTES] [--precise]
 *                  [--socket PATH]
 *
 * Output: a human line, then
 *   RESULT blocking impl=heapd|heapd_precise depth=BYTES pairs=N
 *          ns_per_pair=X
 * or, with --handshake,
 *   RESULT handshake impl=heapd|heapd_precise depth=BYTES cycles=N
 *          pause_mean_ns=X snapshot_pause_max_ns=Y
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "heapd.h"

#define OBJS 64
#define FRAME_WORDS 128 /* 1 KiB a frame */

struct run {
    const char *socket;
    uint64_t pairs;
    size_t depth;
    uint64_t cycles;            /* --handshake */
    bool precise;
    double ns_per_pair;
    double pause_mean_ns;
    uint64_t snapshot_pause_max_ns;
    _Atomic bool cycled;
    int rc;
};

static heapd_mutator *bm;
static void *objs[OBJS];

static __attribute__((noinline)) void time_pairs(struct run *r)
{
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < r->pairs; i++) {
        heapd_blocking_enter(bm);
        heapd_blocking_leave(bm);
    }
    r->ns_per_pair = (double)(now_ns() - t0) / (double)r->pairs;
}

/* Asks for R->cycles cycles, one after the other, and takes the daemon's
 * pause figures over them. */
static void *cycler(void *arg)
{
    struct run *r = arg;
    heapd_client *c;
    heapd_connect_opts co = {.socket_path = r->socket,
                             .flags = HEAPD_CONNECT_CONTROL};
    heapd_stats_t a, b;
    if (heapd_connect(&c, &co) != 0 || heapd_stats(c, &a) != 0) {
        fprintf(stderr, "blocking_bench: %s\n", heapd_last_error());
        r->rc = 1;
        goto out;
    }
    for (uint64_t i = 0; i < r->cycles && r->rc == 0; i++)
        if (heapd_request_collect(c, HEAPD_COLLECT_WAIT) != 0 ||
            (i + 1 == r->cycles && heapd_stats(c, &b) != 0)) {
            fprintf(stderr, "blocking_bench: %s\n", heapd_last_error());
            r->rc = 1;
        }
    if (r->rc == 0) {
        r->pause_mean_ns = (double)(b.pause_total_ns - a.pause_total_ns) /
                           (double)(b.pause_count - a.pause_count);
        r->snapshot_pause_max_ns = b.snapshot_pause_max_ns;
    }
    heapd_disconnect(c);
out:
    atomic_store(&r->cycled, true);
    return NULL;
}

/* The thread runs through the stops of R->cycles cycles. */
static __attribute__((noinline)) void time_handshakes(struct run *r)
{
    pthread_t t;
    if (pthread_create(&t, NULL, cycler, r) != 0)
        die("pthread_create: %s", strerror(errno));
    while (!atomic_load(&r->cycled)) {
        heapd_safepoint(bm);
        sched_yield(); /* 2 cores: the daemon's threads and the cycler run */
    }
    pthread_join(t, NULL);
}

/* Recurse until LEFT bytes more of stack are in use, then time. */
static __attribute__((noinline)) void deep(struct run *r, size_t left,
                                           unsigned seed)
{
    volatile uintptr_t words[FRAME_WORDS];
    for (unsigned i = 0; i < FRAME_WORDS; i++) {
        unsigned k = (seed + i) % OBJS;
        words[i] = i % 8 == 0 ? (uintptr_t)objs[k] + (i % 16 ? 8 : 0)
                              : (uintptr_t)(seed * 131u + i);
    }
    if (left > sizeof words)
        deep(r, left - sizeof words, seed + 1);
    else if (r->cycles)
        time_handshakes(r);
    else
        time_pairs(r);
    __asm__ volatile("" : : "r"(words) : "memory");
}

static void *thread_main(void *arg)
{
    struct run *r = arg;
    heapd_client *c;
    heapd_connect_opts co = {.socket_path = r->socket};
    heapd_mutator_opts mo = {.flags = r->precise ? HEAPD_MUTATOR_PRECISE
                                                 : 0};
    if (heapd_connect(&c, &co) != 0 ||
        heapd_attach_opts(c, &mo, &bm) != 0) {
        fprintf(stderr, "blocking_bench: %s\n", heapd_last_error());
        r->rc = 1;
        return NULL;
    }
    void **all = heapd_alloc(bm, OBJS, 0);
    heapd_root_push(bm, all);
    for (int i = 0; i < OBJS; i++) {
        objs[i] = heapd_alloc(bm, 1, 48);
        all = heapd_root_get(bm, 0);
        heapd_write(bm, all, &all[i], objs[i]);
    }
    deep(r, r->depth, 1);
    heapd_detach(bm);
    heapd_disconnect(c);
    return NULL;
}

int main(int argc, char **argv)
{
    struct run r = {.pairs = 200000, .depth = 8192};
    if (argc < 2 || strcmp(argv[1], "heapd") != 0) {
        fprintf(stderr, "usage: blocking_bench heapd [-n N] [--handshake N] "
                        "[--depth BYTES] [--precise] [--socket PATH]\n");
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            r.pairs = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--handshake") == 0 && i + 1 < argc)
            r.cycles = parse_count("--handshake", argv[++i]);
        else if (strcmp(argv[i], "--depth") == 0 && i + 1 < argc)
            r.depth = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--precise") == 0)
            r.precise = true;
        else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
            r.socket = argv[++i];
        else {
            fprintf(stderr, "blocking_bench: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (r.pairs == 0 || r.depth > (6u << 20)) {
        fprintf(stderr, "blocking_bench: -n must be positive and --depth at "
                        "most 6 MiB (the thread's stack is 8 MiB)\n");
        return 2;
    }
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 8u << 20);
    if (pthread_create(&t, &attr, thread_main, &r) != 0) {
        fprintf(stderr, "blocking_bench: pthread_create: %s\n",
                strerror(errno));
        return 1;
    }
    pthread_join(t, NULL);
    if (r.rc)
        return r.rc;
    const char *impl = r.precise ? "heapd_precise" : "heapd";
    if (r.cycles) {
        printf("%s: %zu bytes of stack, %llu cycles: pauses %.1f us on "
               "average, the longest snapshot pause %.1f us\n", impl, r.depth,
               (unsigned long long)r.cycles, r.pause_mean_ns / 1e3,
               (double)r.snapshot_pause_max_ns / 1e3);
        printf("RESULT handshake impl=%s depth=%zu cycles=%llu "
               "pause_mean_ns=%.0f snapshot_pause_max_ns=%llu\n", impl,
               r.depth, (unsigned long long)r.cycles, r.pause_mean_ns,
               (unsigned long long)r.snapshot_pause_max_ns);
        return 0;
    }
    printf("%s: %zu bytes of stack, %llu blocking_enter/leave pairs: %.0f ns "
           "a pair\n", impl, r.depth, (unsigned long long)r.pairs,
           r.ns_per_pair);
    printf("RESULT blocking impl=%s depth=%zu pairs=%llu ns_per_pair=%.1f\n",
           impl, r.depth, (unsigned long long)r.pairs, r.ns_per_pair);
    return 0;
}
