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
 *   blocking_bench heapd [-n N] [--depth BYTES] [--precise] [--socket PATH]
 *
 * Output: a human line, then
 *   RESULT blocking impl=heapd|heapd_precise depth=BYTES pairs=N
 *          ns_per_pair=X
 */
#include <errno.h>
#include <pthread.h>
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
    bool precise;
    double ns_per_pair;
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
        fprintf(stderr, "usage: blocking_bench heapd [-n N] [--depth BYTES] "
                        "[--precise] [--socket PATH]\n");
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            r.pairs = strtoull(argv[++i], NULL, 10);
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
    printf("%s: %zu bytes of stack, %llu blocking_enter/leave pairs: %.0f ns "
           "a pair\n", impl, r.depth, (unsigned long long)r.pairs,
           r.ns_per_pair);
    printf("RESULT blocking impl=%s depth=%zu pairs=%llu ns_per_pair=%.1f\n",
           impl, r.depth, (unsigned long long)r.pairs, r.ns_per_pair);
    return 0;
}
