/* C locals are roots (Note [C locals are roots] in client/stack_roots.c):
 * a shared object that only a local variable of an attached thread
 * points to -- by its reference, inside its bytes, or one past its end --
 * lives through major cycles, whether the thread runs through their
 * stops or is blocked across them; a HEAPD_MUTATOR_PRECISE mutator's
 * locals keep nothing.  Against a real heapd with the verifier on, which
 * fills a freed block with poison and checks every cycle.
 */
#include <alloca.h>
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "heapd_collections.h"
#include "layout.h"
#include "check_main.h"

#include "young_util.h"

#define CYCLES 4
/* what the cases the Note names must survive */
#define LONG_CYCLES 100
#define KEPT_ID 4242
/* an object that fills its 64-byte block: one past its end is the start
 * of the next block */
#define FULL_BYTES (64 - 8)

/* Allocate garbage through COUNT cycles that another thread asks for:
 * the stops find this thread in heapd_alloc, where it captures. */
struct cycler {
    heapd_client *c;
    unsigned count;
    _Atomic bool done;
    int rc;
};

static void *cycle_thread(void *arg)
{
    struct cycler *cy = arg;
    for (unsigned i = 0; i < cy->count && cy->rc == 0; i++)
        cy->rc = heapd_request_collect(cy->c, HEAPD_COLLECT_WAIT);
    atomic_store(&cy->done, true);
    return NULL;
}

static void cycles_while_running(heapd_mutator *m, heapd_client *c,
                                 unsigned count)
{
    struct cycler cy = {.c = c, .count = count};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, cycle_thread, &cy), 0);
    int64_t end = harness_now_ms() + HARNESS_WAIT_MS;
    while (!atomic_load(&cy.done)) {
        ck_assert_msg(harness_now_ms() < end, "%u cycles not done in %d ms",
                      count, HARNESS_WAIT_MS);
        ck_assert_ptr_nonnull(heapd_alloc(m, 1, 48));
    }
    pthread_join(t, NULL);
    ck_assert_int_eq(cy.rc, 0);
}

/* A shared node of KEPT_ID, made in a frame of its own, so that only
 * what the caller keeps of it stays on the stack. */
static __attribute__((noinline)) void *make_kept(heapd_mutator *m,
                                                 size_t nbytes)
{
    void **n = heapd_alloc(m, 1, nbytes);
    ck_assert_ptr_nonnull(n);
    fill_payload(n, KEPT_ID);
    return n;
}

static heapd_client *start(void)
{
    harness_start_with(&D, NULL);
    return connect_plain(0);
}

/* start(), and a mutator attached with FLAGS in *M. */
static heapd_client *start_attached(heapd_mutator **m, unsigned flags)
{
    heapd_client *c = start();
    heapd_mutator_opts o = {.flags = flags};
    ck_assert_int_eq(heapd_attach_opts(c, &o, m), 0);
    return c;
}

static void finish(heapd_client *c, heapd_mutator *m)
{
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}

/* The reference in a local, through cycles taken running and blocked
 * (heapd_collect waits in a blocking region). */
START_TEST(a_local_keeps_a_shared_object)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, 0);
    void *volatile kept = make_kept(m, sizeof(struct payload));
    harness_wipe_stack();
    cycles_while_running(m, c, CYCLES);
    for (int i = 0; i < CYCLES; i++)
        ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    ck_assert_msg(node_ok(kept, 1, KEPT_ID) && mark_of(c, kept) > 0,
                  "an object only a local held was freed (mark %d)",
                  mark_of(c, kept));
    finish(c, m);
}
END_TEST

/* Only heapd_bytes(o) in a local: an interior pointer keeps O. */
START_TEST(an_interior_pointer_keeps_its_object)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, 0);
    const struct payload *volatile bytes =
        heapd_bytes(make_kept(m, sizeof(struct payload)));
    harness_wipe_stack();
    cycles_while_running(m, c, CYCLES);
    void *obj = (void *)((uintptr_t)bytes - sizeof(void *));
    ck_assert_msg(node_ok(obj, 1, KEPT_ID) && mark_of(c, obj) > 0,
                  "an object only heapd_bytes of it held was freed");
    finish(c, m);
}
END_TEST

/* Only the address one past its end, the next block's start. */
START_TEST(one_past_the_end_keeps_its_object)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, 0);
    const uint8_t *volatile end =
        (const uint8_t *)heapd_bytes(make_kept(m, FULL_BYTES)) + FULL_BYTES;
    harness_wipe_stack();
    cycles_while_running(m, c, CYCLES);
    void *obj = (void *)((uintptr_t)end - FULL_BYTES - sizeof(void *));
    ck_assert_int_eq(heapd_nbytes(obj), FULL_BYTES);
    const struct payload *p = heapd_bytes(obj);
    ck_assert_msg(p->id == KEPT_ID && p->check == check_of(KEPT_ID) &&
                      mark_of(c, obj) > 0,
                  "an object only a pointer one past its end held was freed");
    finish(c, m);
}
END_TEST

/* The new user's mistake: a worker process keeps only
 * `const char *text = heapd_str_data(chunk)` across 10^4 allocations and
 * the cycles heapctl gc forces, while the process that made the chunks
 * drops every other reference and goes.  No process of the test but its
 * children connects, so that each may (TSan refuses threads in a child
 * of a process that had them). */
#define CHUNKS 64
#define CHUNK_BYTES 200
#define MISTAKE_ALLOCS 10000
#define MISTAKE_GCS 4

enum stage { MADE = 1, TAKEN, DROPPED, COLLECTED };

struct mistake {
    _Atomic int stage;
    _Atomic unsigned allocs;
};

static void chunk_text(char *out, int i)
{
    for (int k = 0; k < CHUNK_BYTES; k++)
        out[k] = (char)('a' + (i * 7 + k) % 26);
    snprintf(out, 32, "chunk %d of the text:", i);
}

/* Waits in a child for stage WANT; exits 3 past the bound. */
static void child_wait(struct mistake *x, int want, const char *who)
{
    int64_t end = harness_now_ms() + HARNESS_WAIT_MS;
    while (atomic_load(&x->stage) < want) {
        if (harness_now_ms() > end) {
            fprintf(stderr, "%s: stage %d not reached\n", who, want);
            _exit(3);
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
}

static void producer(struct mistake *x)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    void **chunks = heapd_alloc(m, CHUNKS, 0);
    char text[CHUNK_BYTES];
    for (int i = 0; i < CHUNKS; i++) {
        chunk_text(text, i);
        heapd_write(m, chunks, &chunks[i], heapd_str_new(m, text, sizeof text));
    }
    if (heapd_global_set(m, "chunks", chunks) != 0)
        _exit(4);
    chunks = NULL;
    atomic_store(&x->stage, MADE);
    child_wait(x, TAKEN, "the producer");
    if (heapd_global_delete(m, "chunks") != 0)
        _exit(5);
    heapd_detach(m);
    heapd_disconnect(c);
    atomic_store(&x->stage, DROPPED);
    _exit(0);
}

/* The chunk's bytes, and nothing else of the chunks, on the stack. */
static __attribute__((noinline)) const char *take_text(heapd_mutator *m)
{
    void **chunks = heapd_global_get(m, "chunks");
    return chunks ? heapd_str_data(chunks[CHUNKS / 2]) : NULL;
}

static void worker(struct mistake *x)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    child_wait(x, MADE, "the worker");
    const char *volatile text = take_text(m);
    if (!text)
        _exit(6);
    harness_wipe_stack();
    atomic_store(&x->stage, TAKEN);
    int64_t end = harness_now_ms() + HARNESS_WAIT_MS;
    unsigned n = 0;
    while (n < MISTAKE_ALLOCS || atomic_load(&x->stage) < COLLECTED) {
        if (!heapd_alloc(m, 1, 48) || harness_now_ms() > end)
            _exit(7);
        atomic_store(&x->allocs, ++n);
    }
    char want[CHUNK_BYTES];
    chunk_text(want, CHUNKS / 2);
    if (memcmp((const char *)text, want, sizeof want) != 0) {
        fprintf(stderr, "the text is damaged: '%.40s'\n", (const char *)text);
        _exit(8);
    }
    heapd_detach(m);
    heapd_disconnect(c);
    _exit(0);
}

START_TEST(a_char_pointer_alone_keeps_its_string)
{
    harness_start_with(&D, NULL);
    struct mistake *x = mmap(NULL, sizeof *x, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(x, MAP_FAILED);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        ck_assert_int_ge(kids[k], 0);
        if (kids[k] == 0) {
            if (k == 0)
                producer(x);
            worker(x);
        }
    }
    harness_wait_ok(kids[0], "the producer");
    ck_assert_int_eq(atomic_load(&x->stage), DROPPED);
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' gc 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    for (int i = 0; i < MISTAKE_GCS; i++) {
        int st = harness_run(cmd, out, sizeof out);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "heapctl gc: %s",
                      out);
    }
    atomic_store(&x->stage, COLLECTED);
    harness_wait_ok(kids[1], "the worker that kept only a char pointer");
    ck_assert_uint_ge(atomic_load(&x->allocs), MISTAKE_ALLOCS);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    munmap(x, sizeof *x);
}
END_TEST

/* The cases Note [C locals are roots] argues, each through LONG_CYCLES
 * cycles taken while the thread runs. */
struct held {
    heapd_mutator *m;
    heapd_client *c;
};

static void *make_held(void *arg)
{
    struct held *h = arg;
    return make_kept(h->m, sizeof(struct payload));
}

static void run_cycles(void *arg)
{
    struct held *h = arg;
    cycles_while_running(h->m, h->c, LONG_CYCLES);
}

/* OBJ, which only WHAT held through the cycles, is whole and marked. */
static void expect_kept(const struct held *h, void *obj, const char *what)
{
    ck_assert_msg(node_ok(obj, 1, KEPT_ID) && mark_of(h->c, obj) > 0,
                  "an object only %s held through %d cycles was freed "
                  "(mark %d)", what, LONG_CYCLES, mark_of(h->c, obj));
}

#if defined(__x86_64__)
/* void *hold_in_rbx(void *(*make)(void *), void (*run)(void *), void *arg):
 * MAKE(ARG)'s result is kept in rbx, a callee-saved register, and nowhere
 * else: the caller-saved registers and the 16 KiB of stack MAKE's frames
 * used are zeroed before RUN(ARG) runs; returns rbx.  Whatever RUN calls
 * keeps rbx in the register or in a frame's save slot, nowhere else. */
void *hold_in_rbx(void *(*make)(void *), void (*run)(void *), void *arg);
__asm__(".text\n"
        ".p2align 4\n"
        ".globl hold_in_rbx\n"
        ".type hold_in_rbx, @function\n"
        "hold_in_rbx:\n"
        "    push %rbx\n"
        "    push %r12\n"
        "    push %r13\n"
        "    mov %rsi, %r12\n"
        "    mov %rdx, %r13\n"
        "    mov %rdi, %rax\n"
        "    mov %rdx, %rdi\n"
        "    call *%rax\n"
        "    mov %rax, %rbx\n"
        "    lea -16384(%rsp), %rdi\n"
        "    mov $2048, %ecx\n"
        "    xor %eax, %eax\n"
        "    cld\n"
        "    rep stosq\n"
        "    xor %ecx, %ecx\n"
        "    xor %edx, %edx\n"
        "    xor %esi, %esi\n"
        "    xor %r8d, %r8d\n"
        "    xor %r9d, %r9d\n"
        "    xor %r10d, %r10d\n"
        "    xor %r11d, %r11d\n"
        "    pxor %xmm0, %xmm0\n"
        "    pxor %xmm1, %xmm1\n"
        "    pxor %xmm2, %xmm2\n"
        "    pxor %xmm3, %xmm3\n"
        "    mov %r13, %rdi\n"
        "    call *%r12\n"
        "    mov %rbx, %rax\n"
        "    pop %r13\n"
        "    pop %r12\n"
        "    pop %rbx\n"
        "    ret\n"
        ".size hold_in_rbx, .-hold_in_rbx\n");
#else
#error "test_stack_roots: write hold_in_rbx for this architecture"
#endif

START_TEST(a_pointer_only_in_a_callee_saved_register_keeps_its_object)
{
    struct held h;
    h.c = start_attached(&h.m, 0);
    expect_kept(&h, hold_in_rbx(make_held, run_cycles, &h), "rbx");
    finish(h.c, h.m);
}
END_TEST

/* DEPTH frames of 256 bytes each between the caller's local and the
 * cycles. */
static __attribute__((noinline)) uintptr_t deep(struct held *h,
                                                unsigned depth)
{
    volatile uint64_t pad[32];
    for (unsigned i = 0; i < 32; i++)
        pad[i] = depth;
    if (depth == 0) {
        run_cycles(h);
        return pad[0];
    }
    return deep(h, depth - 1) + pad[1]; /* no tail call */
}

START_TEST(a_pointer_in_a_deep_callers_frame_keeps_its_object)
{
    struct held h;
    h.c = start_attached(&h.m, 0);
    void *volatile kept = make_kept(h.m, sizeof(struct payload));
    harness_wipe_stack();
    ck_assert_uint_eq(deep(&h, 200), 200 * 201 / 2);
    expect_kept(&h, kept, "a local 200 frames up");
    finish(h.c, h.m);
}
END_TEST

START_TEST(a_pointer_to_the_last_byte_keeps_its_object)
{
    struct held h;
    h.c = start_attached(&h.m, 0);
    const uint8_t *volatile last =
        (const uint8_t *)heapd_bytes(make_kept(h.m, sizeof(struct payload))) +
        sizeof(struct payload) - 1;
    harness_wipe_stack();
    run_cycles(&h);
    expect_kept(&h, (void *)((uintptr_t)last + 1 - sizeof(struct payload) -
                             sizeof(void *)),
                "a pointer to its last byte");
    finish(h.c, h.m);
}
END_TEST

/* A thread blocked in read() across LONG_CYCLES cycles: its capture at
 * heapd_blocking_enter is its stack's roots while it waits.  With PAD
 * bytes of frames between the local and the blocking call, the capture
 * walks them all to reach it. */
struct blocked {
    heapd_client *c;
    size_t pad;
    int pipe[2];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool entered;
    bool ok;
    int mark;
};

static __attribute__((noinline)) void block_in_read(heapd_mutator *m,
                                                    struct blocked *b)
{
    heapd_blocking_enter(m);
    pthread_mutex_lock(&b->mu);
    b->entered = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    char x;
    ssize_t r;
    do
        r = read(b->pipe[0], &x, 1);
    while (r < 0 && errno == EINTR);
    heapd_blocking_leave(m);
}

/* B->pad bytes of stack, words no heap address is made of, under the
 * frame that holds the local. */
static __attribute__((noinline)) void block_under_pad(heapd_mutator *m,
                                                      struct blocked *b)
{
    if (b->pad == 0) {
        block_in_read(m, b);
        return;
    }
    volatile uint64_t *pad = alloca(b->pad);
    for (size_t i = 0; i < b->pad / sizeof *pad; i++)
        pad[i] = i * 0x10001;
    block_in_read(m, b);
    ck_assert_uint_eq(pad[1], 0x10001);
}

static void *blocked_thread(void *arg)
{
    struct blocked *b = arg;
    heapd_mutator *m;
    if (heapd_attach(b->c, &m) != 0)
        return NULL;
    void *volatile kept = make_kept(m, sizeof(struct payload));
    harness_wipe_stack();
    block_under_pad(m, b);
    b->ok = node_ok(kept, 1, KEPT_ID);
    b->mark = mark_of(b->c, kept);
    heapd_detach(m);
    return NULL;
}

static void blocked_across_cycles(size_t pad)
{
    heapd_client *c = start();
    struct blocked b = {.c = c, .pad = pad};
    ck_assert_int_eq(pipe(b.pipe), 0);
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    ck_assert_int_eq(pthread_attr_setstacksize(&attr, pad + (1u << 20)), 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, &attr, blocked_thread, &b), 0);
    pthread_attr_destroy(&attr);
    pthread_mutex_lock(&b.mu);
    while (!b.entered)
        pthread_cond_wait(&b.cv, &b.mu);
    pthread_mutex_unlock(&b.mu);
    heapd_mutator *m;
    ck_assert_int_eq(heapd_attach(c, &m), 0);
    cycles_while_running(m, c, LONG_CYCLES);
    ck_assert_int_eq(write(b.pipe[1], "x", 1), 1);
    pthread_join(t, NULL);
    ck_assert_msg(b.ok && b.mark > 0, "an object only a local of a thread "
                  "blocked in read() under %zu bytes of frames across %d "
                  "cycles held was freed (mark %d)", pad, LONG_CYCLES,
                  b.mark);
    close(b.pipe[0]);
    close(b.pipe[1]);
    finish(c, m);
}

START_TEST(a_blocked_threads_locals_keep_their_objects)
{
    blocked_across_cycles(0);
}
END_TEST

START_TEST(a_blocked_threads_locals_under_1_mib_of_frames_keep_theirs)
{
    blocked_across_cycles(1u << 20);
}
END_TEST

/* Has OBJ been freed?  Asks for one more cycle first (from a thread
 * whose mutator, if any, is blocked). */
struct freed_wait {
    const heapd_client *c;
    const void *obj;
};

static bool freed_now(void *arg, char *seen, size_t len)
{
    struct freed_wait *f = arg;
    int mark = mark_of(f->c, f->obj);
    ck_assert_int_eq(heapd_request_collect((heapd_client *)f->c,
                                           HEAPD_COLLECT_WAIT), 0);
    snprintf(seen, len, "mark %d", mark);
    return mark == 0;
}

/* HEAPD_MUTATOR_PRECISE: the local keeps nothing, the object is freed
 * (so the tests above fail if the capture is taken out). */
START_TEST(a_precise_mutators_locals_keep_nothing)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, HEAPD_MUTATOR_PRECISE);
    void *volatile kept = make_kept(m, sizeof(struct payload));
    cycles_while_running(m, c, CYCLES);
    struct freed_wait f = {c, kept};
    heapd_blocking_enter(m);
    harness_wait_until(freed_now, &f, "the object only a precise mutator's "
                       "local held is freed");
    heapd_blocking_leave(m);
    finish(c, m);
}
END_TEST

/* A list only a local holds, LIST nodes: each cycle counts it as what C
 * stack words kept (conservative_roots, conservative_bytes_retained); a
 * precise mutator's list is not kept, and counted nowhere. */
#define LIST 1000

static __attribute__((noinline)) void *make_list(heapd_mutator *m)
{
    void **head = NULL;
    size_t r = heapd_root_push(m, NULL);
    ck_assert_uint_ne(r, (size_t)-1);
    for (int i = 0; i < LIST; i++) {
        void **n = heapd_alloc(m, 1, sizeof(struct payload));
        ck_assert_ptr_nonnull(n);
        fill_payload(n, (uint64_t)i);
        heapd_write(m, n, &n[0], heapd_root_get(m, r));
        heapd_root_set(m, r, n);
        head = n;
    }
    heapd_root_pop(m, 1);
    return head;
}

static void counted(bool precise)
{
    heapd_mutator *m;
    heapd_client *c =
        start_attached(&m, precise ? HEAPD_MUTATOR_PRECISE : 0);
    void *volatile list = make_list(m);
    harness_wipe_stack();
    heapd_stats_t a = harness_stats(c);
    for (int i = 0; i < CYCLES; i++)
        ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t b = harness_stats(c);
    uint64_t roots = b.conservative_roots - a.conservative_roots;
    uint64_t bytes = b.conservative_bytes_retained -
                     a.conservative_bytes_retained;
    if (precise) {
        ck_assert_msg(roots == 0 && bytes == 0, "a precise mutator's locals "
                      "counted: %llu objects, %llu bytes",
                      (unsigned long long)roots, (unsigned long long)bytes);
    } else {
        /* every cycle keeps the whole list through its head */
        ck_assert_msg(roots >= CYCLES && bytes >= (uint64_t)CYCLES * LIST * 32,
                      "%d cycles counted %llu objects and %llu bytes kept by "
                      "C stack words, for a list of %d nodes only a local "
                      "held", CYCLES, (unsigned long long)roots,
                      (unsigned long long)bytes, LIST);
        uint64_t n = 0;
        for (void *p = list; p; p = field(p, 0), n++)
            ck_assert_msg(n < LIST && node_ok(p, 1, LIST - 1 - n),
                          "node %llu of the list a local held is damaged",
                          (unsigned long long)n);
        ck_assert_uint_eq(n, LIST);
    }
    finish(c, m);
}

START_TEST(what_locals_alone_keep_is_counted)
{
    counted(false);
}
END_TEST

START_TEST(a_precise_mutator_counts_nothing)
{
    counted(true);
}
END_TEST

/* heapd_add_roots (Note [Registered roots]): a word of a registered
 * malloc'd table keeps its object, through cycles taken running and
 * blocked; one of a table not registered does not, nor once the range is
 * removed.  The mutator is precise: no stack word keeps anything. */

START_TEST(a_registered_range_keeps_its_objects)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, HEAPD_MUTATOR_PRECISE);
    void **table = calloc(16, sizeof *table);
    void **other = calloc(16, sizeof *other);
    ck_assert(table && other);
    ck_assert_int_eq(heapd_add_roots(m, table, table + 16), 0);
    table[5] = make_kept(m, sizeof(struct payload));
    other[5] = make_kept(m, sizeof(struct payload));
    cycles_while_running(m, c, CYCLES);
    heapd_blocking_enter(m); /* every mutator of the process blocked */
    for (int i = 0; i < CYCLES; i++)
        ck_assert_int_eq(heapd_request_collect(c, HEAPD_COLLECT_WAIT), 0);
    heapd_blocking_leave(m);
    ck_assert_msg(node_ok(table[5], 1, KEPT_ID) && mark_of(c, table[5]) > 0,
                  "an object only a registered range held was freed");
    /* blocked while the waits ask for cycles */
    struct freed_wait f = {c, other[5]};
    heapd_blocking_enter(m);
    harness_wait_until(freed_now, &f, "the object only a table not "
                       "registered held is freed");
    heapd_blocking_leave(m);
    ck_assert_int_eq(heapd_remove_roots(m, table, table + 16), 0);
    f.obj = table[5];
    heapd_blocking_enter(m);
    harness_wait_until(freed_now, &f, "the object only a removed range "
                       "held is freed");
    heapd_blocking_leave(m);
    free(table);
    free(other);
    finish(c, m);
}
END_TEST

START_TEST(registering_nonsense_is_refused)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, 0);
    uint64_t words[4];
    ck_assert_int_eq(heapd_add_roots(NULL, words, words + 4), -EINVAL);
    ck_assert_int_eq(heapd_add_roots(m, NULL, words), -EINVAL);
    ck_assert_int_eq(heapd_add_roots(m, words + 4, words), -EINVAL);
    char *base = heapd_heap_base(c);
    ck_assert_int_eq(heapd_add_roots(m, base + 4096, base + 8192), -EINVAL);
    ck_assert_msg(strstr(heapd_last_error(), "inside the heap"),
                  "the error does not say why: %s", heapd_last_error());
    ck_assert_int_eq(heapd_remove_roots(m, words, words + 4), -ENOENT);
    ck_assert_int_eq(heapd_add_roots(m, words, words + 4), 0);
    ck_assert_int_eq(heapd_remove_roots(m, words, words + 4), 0);
    ck_assert_int_eq(heapd_remove_roots(m, words, words + 4), -ENOENT);
    finish(c, m);
}
END_TEST

/* What a capture cannot keep is counted (Note [C locals are roots]): a
 * heapd call on a makecontext stack, whose stack cannot be scanned
 * (conservative_unscanned), and a capture of more distinct objects than
 * its area holds (conservative_overflows). */
static heapd_mutator *ctx_m;
static ucontext_t ctx_main, ctx_other;

static void on_other_stack(void)
{
    heapd_blocking_enter(ctx_m);
    heapd_blocking_leave(ctx_m);
}

START_TEST(a_capture_on_another_stack_is_counted)
{
    heapd_client *c = start_attached(&ctx_m, 0);
    uint64_t before = harness_stats(c).conservative_unscanned;
    size_t size = 256 * 1024;
    void *stack = malloc(size);
    ck_assert_ptr_nonnull(stack);
    ck_assert_int_eq(getcontext(&ctx_other), 0);
    ctx_other.uc_stack.ss_sp = stack;
    ctx_other.uc_stack.ss_size = size;
    ctx_other.uc_link = &ctx_main;
    makecontext(&ctx_other, on_other_stack, 0);
    ck_assert_int_eq(swapcontext(&ctx_main, &ctx_other), 0);
    free(stack);
    uint64_t after = harness_stats(c).conservative_unscanned;
    ck_assert_msg(after == before + 1, "conservative_unscanned went from "
                  "%llu to %llu for one capture on a makecontext stack",
                  (unsigned long long)before, (unsigned long long)after);
    /* on its own stack again, it scans */
    heapd_blocking_enter(ctx_m);
    heapd_blocking_leave(ctx_m);
    ck_assert_uint_eq(harness_stats(c).conservative_unscanned, after);
    /* counted still once its slot is freed */
    heapd_detach(ctx_m);
    ck_assert_uint_eq(harness_stats(c).conservative_unscanned, after);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

#define OVERFLOW_OBJS ((size_t)LAYOUT_MAX_CAPTURED + 64)

START_TEST(a_capture_past_its_area_is_counted)
{
    heapd_mutator *m;
    heapd_client *c = start_attached(&m, HEAPD_MUTATOR_PRECISE);
    void **table = calloc(OVERFLOW_OBJS, sizeof *table);
    ck_assert_ptr_nonnull(table);
    ck_assert_int_eq(heapd_add_roots(m, table, table + OVERFLOW_OBJS), 0);
    for (size_t i = 0; i < OVERFLOW_OBJS; i++) {
        table[i] = heapd_alloc(m, 0, 8);
        ck_assert_ptr_nonnull(table[i]);
    }
    uint64_t before = harness_stats(c).conservative_overflows;
    heapd_blocking_enter(m);
    heapd_blocking_leave(m);
    uint64_t after = harness_stats(c).conservative_overflows;
    ck_assert_msg(after == before + 1, "conservative_overflows went from "
                  "%llu to %llu for one capture of %zu objects",
                  (unsigned long long)before, (unsigned long long)after,
                  OVERFLOW_OBJS);
    ck_assert_int_eq(heapd_remove_roots(m, table, table + OVERFLOW_OBJS), 0);
    free(table);
    finish(c, m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("stack_roots");
    TCase *t = tcase_create("locals");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, a_local_keeps_a_shared_object);
    tcase_add_test(t, an_interior_pointer_keeps_its_object);
    tcase_add_test(t, one_past_the_end_keeps_its_object);
    tcase_add_test(t, a_char_pointer_alone_keeps_its_string);
    tcase_add_test(t, a_pointer_only_in_a_callee_saved_register_keeps_its_object);
    tcase_add_test(t, a_pointer_in_a_deep_callers_frame_keeps_its_object);
    tcase_add_test(t, a_pointer_to_the_last_byte_keeps_its_object);
    tcase_add_test(t, a_blocked_threads_locals_keep_their_objects);
    tcase_add_test(t, a_blocked_threads_locals_under_1_mib_of_frames_keep_theirs);
    tcase_add_test(t, a_precise_mutators_locals_keep_nothing);
    tcase_add_test(t, what_locals_alone_keep_is_counted);
    tcase_add_test(t, a_precise_mutator_counts_nothing);
    tcase_add_test(t, a_registered_range_keeps_its_objects);
    tcase_add_test(t, registering_nonsense_is_refused);
    tcase_add_test(t, a_capture_on_another_stack_is_counted);
    tcase_add_test(t, a_capture_past_its_area_is_counted);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
