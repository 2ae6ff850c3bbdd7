/* The conservative scan of a mutator's own stack and registers, and the
 * resolution of interior pointers (client/stack.c, Note [Scanning a
 * mutator's own stack], Note [Resolving an interior pointer]), against a
 * real heapd.  client/stack.c is compiled into this program, whose
 * client_set_error below records the message.
 *
 * The value a scan looks for is never stored in memory by the test: it
 * keeps the value XOR KEY (far outside any heap), and only the holder
 * under test turns it back into the pointer, in a local or a register.
 * The stack below is scrubbed before each scan, so that a dead frame
 * holds no stale copy; a scan with no holder finds nothing, which is
 * what shows that a scan with one found the holder's. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "client.h"
#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "runtime.h"
#include "stack.h"
#include "check_main.h"

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#include <sanitizer/asan_interface.h>
/* Locals in fake frames (Note [Scanning a mutator's own stack]): off by
 * default in GCC 12's runtime, so that the scan of them is tested. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "detect_stack_use_after_return=1";
}
#endif

static struct daemon_proc D;

#define KEY ((uintptr_t)0x5a5a5a5a5a5a5a5aull)

/* ---- client_set_error for stack.c (libheapd's is hidden) ---- */

static __thread char last_error[512];

int client_set_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

/* ---- scanning ---- */

/* What a scan saw.  HIDDEN is the value looked for, XOR KEY. */
struct seen {
    heapd_client *c;      /* resolves the hits through it, if not NULL */
    uintptr_t lo, hi;
    uintptr_t hidden;
    long visits, hits, outside;
    uintptr_t resolved;   /* stack_object_of of the last hit, XOR KEY */
    bool in_fake;         /* HOLD_ADDRESSED's local was in an ASan fake
                             frame */
};

static void visit(void *ctx, uintptr_t w)
{
    struct seen *s = ctx;
    s->visits++;
    if (w < s->lo || w >= s->hi)
        s->outside++;
    if ((w ^ KEY) == s->hidden) {
        s->hits++;
        if (s->c)
            s->resolved = (uintptr_t)stack_object_of(s->c, w, NULL) ^ KEY;
    }
}

/* This thread's stack (stack_base_of_self). */
static __thread uintptr_t t_base, t_limit;

static void bounds_of_self(void)
{
    int rc = stack_base_of_self(&t_base, &t_limit);
    ck_assert_msg(rc == 0, "stack_base_of_self: %d %s", rc, last_error);
    ck_assert_uint_lt(t_limit, t_base);
}

static __attribute__((noinline)) long scan_into(struct seen *s)
{
    long n = stack_scan(t_base, t_limit, s->lo, s->hi, visit, s);
    __asm__ volatile("" : : : "memory"); /* no tail call */
    return n;
}

/* Zero the stack below the caller, where dead frames left copies. */
static __attribute__((noinline)) void scrub_stack(void)
{
    char b[64 << 10];
    memset(b, 0, sizeof b);
    __asm__ volatile("" : : "r"(b) : "memory");
}

/* DEPTH frames of a hundred bytes each, then the scan. */
static __attribute__((noinline)) long descend(struct seen *s, int depth)
{
    char pad[96];
    memset(pad, depth, sizeof pad);
    __asm__ volatile("" : : "r"(pad) : "memory");
    long n = depth == 0 ? scan_into(s) : descend(s, depth - 1);
    __asm__ volatile("" : : "r"(pad) : "memory"); /* no tail call */
    return n;
}

enum holder { HOLD_NONE, HOLD_VOLATILE, HOLD_LOCAL, HOLD_REGISTER,
              HOLD_ADDRESSED };

static __attribute__((noinline)) long hold_none(struct seen *s, int depth)
{
    long n = descend(s, depth);
    __asm__ volatile("" : : : "memory");
    return n;
}

/* The value in a volatile local: a slot of this frame. */
static __attribute__((noinline)) long hold_volatile(struct seen *s, int depth)
{
    void *volatile o = (void *)(s->hidden ^ KEY);
    long n = descend(s, depth);
    ck_assert_ptr_nonnull(o);
    return n;
}

/* The value in a plain local, live across the call: wherever the compiler
 * keeps it (a callee-saved register the frames below save, or a slot),
 * and opaque, so that it cannot be computed again from HIDDEN after. */
static __attribute__((noinline)) long hold_local(struct seen *s, int depth)
{
    void *o = (void *)(s->hidden ^ KEY);
    __asm__ volatile("" : "+r"(o));
    long n = descend(s, depth);
    __asm__ volatile("" : : "r"(o));
    return n;
}

/* The value in a local whose address is passed on, as a struct on the
 * stack is: under AddressSanitizer with detect_stack_use_after_return
 * (on in this program, below), in a fake frame off the thread's stack. */
static __attribute__((noinline)) long hold_addressed(struct seen *s,
                                                     int depth)
{
    void *box[2] = {(void *)(s->hidden ^ KEY), NULL};
    __asm__ volatile("" : : "r"(box) : "memory");
#ifdef TEST_ASAN
    void *fake = __asan_get_current_fake_stack();
    s->in_fake = fake && __asan_addr_is_in_fake_stack(fake, box, NULL, NULL);
#endif
    long n = descend(s, depth);
    __asm__ volatile("" : : "r"(box) : "memory");
    return n;
}

#if defined(__x86_64__)
#define HOLD_REGS 1
#define REG_A "r12"
#define REG_B "r15"
#elif defined(__aarch64__)
#define HOLD_REGS 1
#define REG_A "x19"
#define REG_B "x28"
#endif

#ifdef HOLD_REGS
/* The value in callee-saved registers only, and the scan called right
 * away: found in the spill of stack_scan, or of a frame in between. */
static __attribute__((noinline)) long hold_register(struct seen *s)
{
    register uintptr_t a __asm__(REG_A) = s->hidden ^ KEY;
    register uintptr_t b __asm__(REG_B) = s->hidden ^ KEY;
    __asm__ volatile("" : "+r"(a), "+r"(b));
    long n = scan_into(s);
    __asm__ volatile("" : : "r"(a), "r"(b));
    return n;
}
#endif

static long hold(enum holder h, struct seen *s, int depth)
{
    scrub_stack();
    switch (h) {
    case HOLD_NONE: return hold_none(s, depth);
    case HOLD_VOLATILE: return hold_volatile(s, depth);
    case HOLD_LOCAL: return hold_local(s, depth);
    case HOLD_ADDRESSED: return hold_addressed(s, depth);
    case HOLD_REGISTER:
#ifdef HOLD_REGS
        (void)depth; /* the scan right below the registers */
        return hold_register(s);
#else
        return hold_local(s, depth);
#endif
    }
    return -1;
}

/* An object of NREFS references and NBYTES bytes, XOR KEY: the test
 * never holds its address.  Out of line, and its frame scrubbed later. */
static __attribute__((noinline)) uintptr_t alloc_hidden(heapd_mutator *m,
                                                        size_t nrefs,
                                                        size_t nbytes)
{
    void *o = heapd_alloc(m, nrefs, nbytes);
    ck_assert_msg(o != NULL, "heapd_alloc: %s", heapd_last_error());
    return (uintptr_t)o ^ KEY;
}

/* Scan for HIDDEN (XOR KEY) held by H, DEPTH frames above the scan, over
 * C's heap. */
static struct seen scan_for(heapd_client *c, enum holder h, uintptr_t hidden,
                            int depth)
{
    struct seen s = {
        .c = c,
        .lo = (uintptr_t)heapd_heap_base(c),
        .hi = (uintptr_t)heapd_heap_base(c) + heapd_heap_size(c),
        .hidden = hidden,
    };
    long n = hold(h, &s, depth);
    ck_assert_int_ge(n, 0);
    ck_assert_int_eq(n, s.visits);
    ck_assert_int_eq(s.outside, 0);
    return s;
}

/* An object (or an address inside it) held only in a local or a register,
 * right above the scan and a hundred frames up, is visited and resolves
 * to its object; with no holder, nothing is found. */
START_TEST(locals_are_found)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start_with(&D, NULL);
    harness_attach(&D, &c, &m);
    bounds_of_self();
    uintptr_t obj = alloc_hidden(m, 2, 40);
    /* heapd_bytes(o) + 5: a string's sixth byte, say */
    uintptr_t inner = (((obj ^ KEY) + 2 * 8) + 5) ^ KEY;

    static const enum holder holders[] = {HOLD_VOLATILE, HOLD_LOCAL,
                                          HOLD_REGISTER, HOLD_ADDRESSED};
    static const char *const names[] = {"volatile local", "local",
                                        "register", "addressed local"};
    for (unsigned i = 0; i < 4; i++) {
        for (int depth = 0; depth <= 100; depth += 100) {
            struct seen s = scan_for(c, holders[i], obj, depth);
#ifdef TEST_ASAN
            ck_assert_msg(holders[i] != HOLD_ADDRESSED || s.in_fake,
                          "the addressed local is on the thread's stack: "
                          "no fake frame was tested");
#endif
            ck_assert_msg(s.hits >= 1, "%s %d frames up: not visited",
                          names[i], depth);
            ck_assert_msg(s.resolved == obj, "%s %d frames up: resolved to "
                          "%#lx, not the object", names[i], depth,
                          (unsigned long)(s.resolved ^ KEY));
            s = scan_for(c, holders[i], inner, depth);
            ck_assert_msg(s.hits >= 1, "%s %d frames up: the interior "
                          "pointer was not visited", names[i], depth);
            ck_assert_msg(s.resolved == obj, "%s %d frames up: the interior "
                          "pointer resolved to %#lx", names[i], depth,
                          (unsigned long)(s.resolved ^ KEY));
        }
    }
    /* nobody holds it: no copy anywhere on the stack */
    for (int depth = 0; depth <= 100; depth += 100) {
        struct seen s = scan_for(c, HOLD_NONE, obj, depth);
        ck_assert_msg(s.hits == 0, "no holder, %d frames: visited %ld "
                      "times", depth, s.hits);
        s = scan_for(c, HOLD_NONE, inner, depth);
        ck_assert_int_eq(s.hits, 0);
    }
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* VISIT sees exactly the words in [lo, hi), and the count is its calls. */
START_TEST(the_filter_bounds_what_is_visited)
{
    bounds_of_self();
    const uintptr_t L = (uintptr_t)0x0000123400000000ull;
    const uintptr_t H = L + 0x10000;
    volatile uintptr_t plant[] = {L - 8, L - 1, L, L + 8, H - 8, H - 1, H,
                                  H + 8, 0, UINTPTR_MAX};
    struct seen s = {.lo = L, .hi = H, .hidden = (H - 1) ^ KEY};
    long n = hold(HOLD_NONE, &s, 3);
    ck_assert_int_eq(n, s.visits);
    ck_assert_int_eq(s.outside, 0);
    ck_assert_int_ge(s.hits, 1); /* H - 1, the last address in range */
    /* L, L + 8, H - 8 and H - 1 are planted (and the scan's own frame
     * holds L): at least four visits */
    ck_assert_int_ge(s.visits, 4);

    /* H itself is outside */
    s = (struct seen){.lo = L, .hi = H, .hidden = H ^ KEY};
    n = hold(HOLD_NONE, &s, 3);
    ck_assert_int_eq(s.hits, 0);
    ck_assert_int_eq(s.outside, 0);

    /* a wider range takes in the planted H and H + 8 */
    s = (struct seen){.lo = L, .hi = H + 16, .hidden = (H + 8) ^ KEY};
    n = hold(HOLD_NONE, &s, 3);
    ck_assert_int_ge(s.hits, 1);
    ck_assert_int_eq(s.outside, 0);

    /* an empty range, and one upside down, visit nothing */
    s = (struct seen){.lo = L, .hi = L};
    ck_assert_int_eq(hold(HOLD_NONE, &s, 3), 0);
    ck_assert_int_eq(s.visits, 0);
    s = (struct seen){.lo = H, .hi = L};
    ck_assert_int_eq(hold(HOLD_NONE, &s, 3), 0);
    ck_assert_int_eq(s.visits, 0);
    ck_assert_uint_eq(plant[2], L);
}
END_TEST

/* ---- stack_object_of ---- */

static void *object_of(heapd_client *c, uintptr_t p, uint8_t *mark)
{
    return stack_object_of(c, p, mark);
}

static uintptr_t seg_of(heapd_client *c, const void *p)
{
    return (uintptr_t)p & ~(uintptr_t)(c->segment_size - 1);
}

/* Every address of a small object's block resolves to it; the segment's
 * header and marks, a free block, the bytes past the last block, the
 * control area and addresses outside the heap resolve to nothing. */
START_TEST(small_objects_and_what_is_no_object)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start_with(&D, NULL);
    harness_attach(&D, &c, &m);
    uint8_t mark = 99;

    void **a = heapd_alloc(m, 2, 40); /* 64 bytes: a class of its own */
    void **b = heapd_alloc(m, 2, 40);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    uintptr_t seg = seg_of(c, a);
    const struct layout_segment *hd = (const void *)seg;
    ck_assert_uint_eq(hd->kind, LAYOUT_SEG_SMALL);
    unsigned cls = hd->size_class;
    uint32_t bs = layout_class_size[cls];
    ck_assert_uint_eq(bs, 64);
    ck_assert_ptr_eq((char *)b, (char *)a + bs); /* next block */
    uint8_t epoch = (uint8_t)atomic_load(&c->ctl->epoch);

    uintptr_t blk = (uintptr_t)a - 8;
    uintptr_t in[] = {(uintptr_t)a, blk, (uintptr_t)&a[1],
                      (uintptr_t)heapd_bytes(a),
                      (uintptr_t)heapd_bytes(a) + 39, blk + bs - 1};
    for (unsigned i = 0; i < sizeof in / sizeof in[0]; i++) {
        mark = 0;
        ck_assert_msg(object_of(c, in[i], &mark) == a,
                      "offset %ld of the block", (long)(in[i] - blk));
        ck_assert_uint_eq(mark, epoch);
    }
    ck_assert_ptr_eq(object_of(c, blk + bs, NULL), b);
    ck_assert_ptr_eq(object_of(c, blk + 2 * bs - 1, NULL), b);

    /* the block after b was never allocated: free, mark 0 */
    mark = 99;
    ck_assert_ptr_null(object_of(c, blk + 2 * bs, &mark));
    ck_assert_uint_eq(mark, 0);
    ck_assert_ptr_null(object_of(c, blk + 2 * bs + 8, NULL));

    /* the header, the marks, the padding before block 0 */
    uint32_t first = c->small_first[cls], n = c->small_nblocks[cls];
    uintptr_t no[] = {seg, seg + 8, seg + LAYOUT_SEG_MARKS,
                      seg + LAYOUT_SEG_MARKS + n - 1, seg + first - 1};
    for (unsigned i = 0; i < sizeof no / sizeof no[0]; i++) {
        mark = 99;
        ck_assert_msg(object_of(c, no[i], &mark) == NULL,
                      "offset %ld of the segment", (long)(no[i] - seg));
        ck_assert_uint_eq(mark, 0);
    }
    /* past the last block, when the segment has room there */
    ck_assert_uint_lt(first + (uint64_t)n * bs, c->segment_size);
    ck_assert_ptr_null(object_of(c, seg + first + (uint64_t)n * bs, NULL));
    ck_assert_ptr_null(object_of(c, seg + c->segment_size - 1, NULL));

    /* the control area, the heap's edges, the stack */
    uintptr_t base = (uintptr_t)heapd_heap_base(c);
    uintptr_t size = heapd_heap_size(c);
    uintptr_t out[] = {base, base + 4096, base + LAYOUT_DAEMON_BYTES + 8,
                       base + ((uintptr_t)c->first_segment << c->seg_shift) - 1,
                       base - 8, base + size, base + size + 8, 0, 8,
                       (uintptr_t)&mark, UINTPTR_MAX};
    for (unsigned i = 0; i < sizeof out / sizeof out[0]; i++)
        ck_assert_msg(object_of(c, out[i], NULL) == NULL, "%#lx",
                      (unsigned long)out[i]);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* Run objects (Note [Runs]): an object of 20 KiB in 128 KiB segments
 * takes 21 granules of the run class; every address of its span resolves
 * to it, from its continuation marks back to its first block, the next
 * object's to that one, and the free granules after them to nothing. */
START_TEST(run_objects_resolve_from_inside)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start_with(&D, NULL);
    harness_attach(&D, &c, &m);
    size_t nbytes = 20 << 10;
    uint64_t size = layout_object_size(1, nbytes);
    ck_assert_uint_gt(size, c->small_max);
    ck_assert_uint_le(size, c->run_max);
    uint64_t span = (size + LAYOUT_RUN_GRANULE - 1) / LAYOUT_RUN_GRANULE *
                    LAYOUT_RUN_GRANULE;

    void **a = heapd_alloc(m, 1, nbytes);
    void **b = heapd_alloc(m, 1, nbytes);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    uintptr_t seg = seg_of(c, a);
    const struct layout_segment *hd = (const void *)seg;
    ck_assert_uint_eq(hd->kind, LAYOUT_SEG_SMALL);
    ck_assert_uint_eq(hd->size_class, LAYOUT_CLASS_RUN);
    ck_assert_uint_eq(seg_of(c, b), seg);
    uintptr_t ablk = (uintptr_t)a - 8, bblk = (uintptr_t)b - 8;
    ck_assert_uint_eq(bblk, ablk + span);

    uint8_t mark = 0;
    for (uint64_t off = 0; off < span; off += 512) {
        ck_assert_msg(object_of(c, ablk + off, &mark) == a, "offset %lu",
                      (unsigned long)off);
        ck_assert(layout_mark_in_use(mark));
    }
    ck_assert_ptr_eq(object_of(c, (uintptr_t)heapd_bytes(a) + nbytes - 1,
                               NULL), a);
    ck_assert_ptr_eq(object_of(c, ablk + span - 1, NULL), a);
    ck_assert_ptr_eq(object_of(c, bblk, NULL), b);
    ck_assert_ptr_eq(object_of(c, bblk + span / 2, NULL), b);
    ck_assert_ptr_eq(object_of(c, bblk + span - 1, NULL), b);
    /* the granules after b are free */
    mark = 99;
    ck_assert_ptr_null(object_of(c, bblk + span, &mark));
    ck_assert_uint_eq(mark, 0);
    ck_assert_ptr_null(object_of(c, bblk + span + 3 * LAYOUT_RUN_GRANULE,
                                 NULL));
    /* a continuation mark that follows no object (Note [Runs]): the free
     * granule after b made one, as a client writing marks could */
    uint8_t *marks = layout_seg_marks((void *)seg);
    uint32_t next = (uint32_t)((bblk + span - seg - c->small_first[
                                    LAYOUT_CLASS_RUN]) / LAYOUT_RUN_GRANULE);
    ck_assert_uint_eq(marks[next], 0);
    __atomic_store_n(&marks[next + 1], LAYOUT_MARK_CONT, __ATOMIC_RELAXED);
    ck_assert_ptr_null(object_of(c, bblk + span + LAYOUT_RUN_GRANULE + 8,
                                 NULL));
    __atomic_store_n(&marks[next + 1], 0, __ATOMIC_RELAXED);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* Large objects: every address of the run past its header resolves to
 * its one object, in its first segment and in the later ones, whose
 * headers are the object's bytes, zero or not. */
START_TEST(large_objects_resolve_from_inside)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start_with(&D, NULL);
    harness_attach(&D, &c, &m);
    static const size_t sizes[] = {300 << 10, 5 << 20};
    for (unsigned k = 0; k < 2; k++) {
        size_t nbytes = sizes[k];
        ck_assert_uint_gt(layout_object_size(0, nbytes), c->run_max);
        void **o = heapd_alloc(m, 0, nbytes);
        ck_assert_ptr_nonnull(o);
        uintptr_t head = seg_of(c, o);
        ck_assert_uint_eq((uintptr_t)o, head + LAYOUT_LARGE_OBJECT + 8);
        const struct layout_segment *hd = (const void *)head;
        ck_assert_uint_eq(hd->kind, LAYOUT_SEG_LARGE);
        uint64_t run = hd->large_bytes;
        ck_assert_uint_ge(run, LAYOUT_LARGE_OBJECT + 8 + nbytes);
        ck_assert_uint_gt(run, c->segment_size);

        for (int pass = 0; pass < 2; pass++) {
            /* pass 1: the bytes written, so no later header reads blank */
            if (pass == 1)
                memset(heapd_bytes(o), 0xab, nbytes);
            uint8_t *bytes = heapd_bytes(o);
            uintptr_t in[] = {(uintptr_t)o, (uintptr_t)o - 8,
                              (uintptr_t)bytes + 5,
                              head + c->segment_size, /* a later header */
                              head + c->segment_size + 64,
                              (uintptr_t)bytes + nbytes / 2,
                              (uintptr_t)bytes + nbytes - 1,
                              head + run - 1};
            for (unsigned i = 0; i < sizeof in / sizeof in[0]; i++) {
                uint8_t mark = 0;
                ck_assert_msg(object_of(c, in[i], &mark) == o,
                              "%zu bytes, pass %d: offset %lu of the run",
                              nbytes, pass, (unsigned long)(in[i] - head));
                ck_assert(layout_mark_in_use(mark));
            }
            /* the header and the mark of the run's first segment */
            uintptr_t no[] = {head, head + LAYOUT_SEG_MARKS,
                              head + LAYOUT_LARGE_OBJECT - 1};
            for (unsigned i = 0; i < sizeof no / sizeof no[0]; i++)
                ck_assert_ptr_null(object_of(c, no[i], NULL));
            /* the segment after the run is not this object's */
            ck_assert_ptr_ne(object_of(c, head + run, NULL), o);
        }
    }
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* A large run whose mark is not in use (the sweep freed the object and
 * the segments are not given out yet) resolves to nothing, from its
 * first segment and from its later ones. */
START_TEST(a_freed_large_run_is_no_object)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start_with(&D, NULL);
    harness_attach(&D, &c, &m);
    size_t nbytes = 400 << 10;
    void **o = heapd_alloc(m, 0, nbytes);
    ck_assert_ptr_nonnull(o);
    uintptr_t head = seg_of(c, o);
    uint8_t *mk = layout_seg_marks((void *)head);
    uintptr_t in = (uintptr_t)heapd_bytes(o) + nbytes - 1;
    ck_assert_ptr_eq(object_of(c, in, NULL), o);
    /* Note [The longest large run]: heapd said so before the grant */
    ck_assert_uint_ge(atomic_load(&c->ctl->large_run_max),
                      (in >> c->seg_shift) - (head >> c->seg_shift) + 1);
    uint8_t was = __atomic_load_n(mk, __ATOMIC_RELAXED);
    __atomic_store_n(mk, 0, __ATOMIC_RELAXED);
    uint8_t mark = 99;
    ck_assert_ptr_null(object_of(c, in, &mark));
    ck_assert_uint_eq(mark, 0);
    ck_assert_ptr_null(object_of(c, (uintptr_t)o, NULL));
    __atomic_store_n(mk, LAYOUT_MARK_CONT, __ATOMIC_RELAXED);
    ck_assert_ptr_null(object_of(c, in, NULL));
    __atomic_store_n(mk, was, __ATOMIC_RELAXED);
    ck_assert_ptr_eq(object_of(c, in, NULL), o);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* ---- headers another process wrote ---- */

/* A client over SEGS anonymous segments of 2^SHIFT bytes, segment 0 its
 * control area, with the geometry alloc_client_init gives a real one:
 * headers written here are what a corrupt or hostile process could leave
 * in a heap. */
static heapd_client *fake_heap(unsigned shift, uint32_t segs)
{
    heapd_client *c = calloc(1, sizeof *c);
    ck_assert_ptr_nonnull(c);
    c->segment_size = (uint64_t)1 << shift;
    c->seg_shift = shift;
    c->size = (size_t)segs << shift;
    c->base = mmap(NULL, c->size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ck_assert_ptr_ne(c->base, MAP_FAILED);
    c->first_segment = 1;
    /* segment 0 is the control area; the daemon would have granted runs
     * as long as the heap (Note [The longest large run]) */
    c->ctl = c->base;
    atomic_store(&c->ctl->large_run_max, segs);
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++) {
        layout_small_geometry(c->segment_size, k, &c->small_nblocks[k],
                              &c->small_first[k]);
        c->small_magic[k] = layout_block_magic(layout_class_size[k]);
    }
    return c;
}

static void fake_heap_free(heapd_client *c)
{
    munmap(c->base, c->size);
    free(c);
}

static struct layout_segment *fake_seg(heapd_client *c, uint32_t i)
{
    return client_seg_addr(c, i);
}

/* Nonsense in headers and marks resolves to nothing, and what a header
 * says is checked against the heap before it is believed. */
START_TEST(nonsense_resolves_to_nothing)
{
    heapd_client *c = fake_heap(17, 16);
    uintptr_t seg4 = (uintptr_t)client_seg_addr(c, 4);
    uintptr_t p = seg4 + 5000;

    /* blank all the way down to the control area */
    ck_assert_ptr_null(object_of(c, p, NULL));
    /* a class out of range, a kind that is none */
    fake_seg(c, 4)->size_class = 200;
    fake_seg(c, 4)->kind = LAYOUT_SEG_SMALL;
    ck_assert_ptr_null(object_of(c, p, NULL));
    fake_seg(c, 4)->kind = 77;
    ck_assert_ptr_null(object_of(c, p, NULL));

    /* a large run at segment 2 of three segments covers segment 4 */
    struct layout_segment *h2 = fake_seg(c, 2);
    uint8_t *mark2 = layout_seg_marks(h2);
    void *obj2 = (char *)h2 + LAYOUT_LARGE_OBJECT + LAYOUT_WORD;
    h2->kind = LAYOUT_SEG_LARGE;
    h2->large_bytes = 3 * c->segment_size;
    *mark2 = 7;
    uint8_t mark = 0;
    ck_assert_ptr_eq(object_of(c, p, &mark), obj2); /* over segment 3 */
    ck_assert_uint_eq(mark, 7);
    memset(fake_seg(c, 3), 0xab, 256); /* its bytes, no header */
    ck_assert_ptr_eq(object_of(c, p, NULL), obj2);
    /* lengths that are no run's */
    uint64_t bad[] = {0, 2 * c->segment_size, 3 * c->segment_size - 8,
                      15 * c->segment_size, UINT64_MAX & ~(c->segment_size - 1)};
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h2->large_bytes = bad[i];
        ck_assert_msg(object_of(c, p, NULL) == NULL, "large_bytes %#llx",
                      (unsigned long long)bad[i]);
    }
    h2->large_bytes = 3 * c->segment_size;
    *mark2 = 0;
    ck_assert_ptr_null(object_of(c, p, NULL));
    *mark2 = LAYOUT_MARK_CONT;
    ck_assert_ptr_null(object_of(c, p, NULL));
    *mark2 = 7;
    /* Note [The longest large run]: no walk past the longest run the
     * heap has had */
    atomic_store(&c->ctl->large_run_max, 2);
    ck_assert_ptr_null(object_of(c, p, NULL));
    atomic_store(&c->ctl->large_run_max, 0);
    ck_assert_ptr_null(object_of(c, p, NULL));
    atomic_store(&c->ctl->large_run_max, 3);
    ck_assert_ptr_eq(object_of(c, p, NULL), obj2);
    /* a recognised header in between ends the walk: a small segment */
    fake_seg(c, 3)->kind = LAYOUT_SEG_SMALL;
    fake_seg(c, 3)->size_class = 3;
    ck_assert_ptr_null(object_of(c, p, NULL));
    memset(fake_seg(c, 3), 0, 256);
    ck_assert_ptr_eq(object_of(c, p, NULL), obj2);
    /* a large header in the control area is never read */
    h2->kind = 0;
    fake_seg(c, 0)->kind = LAYOUT_SEG_LARGE;
    fake_seg(c, 0)->large_bytes = 8 * c->segment_size;
    *layout_seg_marks(fake_seg(c, 0)) = 7;
    ck_assert_ptr_null(object_of(c, p, NULL));

    /* a run segment whose marks are all continuations: never past
     * block 0 */
    struct layout_segment *h6 = fake_seg(c, 6);
    h6->size_class = LAYOUT_CLASS_RUN;
    h6->kind = LAYOUT_SEG_SMALL;
    uint32_t n = c->small_nblocks[LAYOUT_CLASS_RUN];
    memset(layout_seg_marks(h6), LAYOUT_MARK_CONT, n);
    uintptr_t b6 = (uintptr_t)h6 + c->small_first[LAYOUT_CLASS_RUN];
    ck_assert_ptr_null(object_of(c, b6 + 40 * LAYOUT_RUN_GRANULE, NULL));
    layout_seg_marks(h6)[0] = 9;
    ck_assert_ptr_eq(object_of(c, b6 + 40 * LAYOUT_RUN_GRANULE + 3, NULL),
                     (void *)(b6 + 8));
    fake_heap_free(c);
}
END_TEST

/* In a segment of 1 GiB, offsets reach past where dividing by a class
 * size by multiplying is exact (layout_small_block): the last byte of a
 * block late in the segment is still that block's. */
START_TEST(interior_pointers_in_a_huge_segment)
{
    heapd_client *c = fake_heap(30, 2);
    struct layout_segment *h = fake_seg(c, 1);
    unsigned cls = 1; /* 24 bytes */
    h->size_class = cls;
    h->kind = LAYOUT_SEG_SMALL;
    uint32_t bs = layout_class_size[cls], n = c->small_nblocks[cls];
    uintptr_t blocks = (uintptr_t)h + c->small_first[cls];
    uint8_t *marks = layout_seg_marks(h);
    unsigned checked = 0;
    for (uint32_t k = n - 1; k > n - 4000000; k -= 997) {
        uintptr_t last = blocks + (uint64_t)k * bs + bs - 1;
        uint64_t b = last - blocks;
        if (((b * c->small_magic[cls]) >> 32) == k)
            continue; /* exact here */
        marks[k] = 5;
        ck_assert_ptr_eq(object_of(c, last, NULL),
                         (void *)(blocks + (uint64_t)k * bs + 8));
        ck_assert_ptr_null(object_of(c, last + 1, NULL)); /* block k+1 */
        marks[k] = 0;
        checked++;
    }
    ck_assert_uint_gt(checked, 100);
    fake_heap_free(c);
}
END_TEST

/* ---- threads and other stacks ---- */

struct thread_arg {
    heapd_client *c;
    uintptr_t main_base, main_limit;
    uintptr_t mine, mains;          /* XOR KEY */
    int rc;
    uintptr_t base, limit;
    struct seen found_mine, found_mains;
    long on_mains;                  /* a scan with the main thread's bounds */
    char on_mains_error[512];
};

static void *thread_body(void *p)
{
    struct thread_arg *a = p;
    a->rc = stack_base_of_self(&t_base, &t_limit);
    a->base = t_base;
    a->limit = t_limit;
    if (a->rc != 0)
        return NULL;
    struct seen s = {.c = a->c,
                     .lo = (uintptr_t)heapd_heap_base(a->c),
                     .hi = (uintptr_t)heapd_heap_base(a->c) +
                           heapd_heap_size(a->c)};
    s.hidden = a->mine;
    hold(HOLD_LOCAL, &s, 10);
    a->found_mine = s;
    /* the main thread holds its own: not on this stack */
    s = (struct seen){.c = a->c, .lo = s.lo, .hi = s.hi, .hidden = a->mains};
    hold(HOLD_NONE, &s, 10);
    a->found_mains = s;
    s.hidden = a->mine;
    a->on_mains = stack_scan(a->main_base, a->main_limit, s.lo, s.hi, visit,
                             &s);
    snprintf(a->on_mains_error, sizeof a->on_mains_error, "%s", last_error);
    return NULL;
}

/* A second thread's stack is its own: its base differs from the main
 * thread's, its scan finds its locals and not the main thread's, and a
 * scan with the main thread's bounds refuses to run. */
START_TEST(a_thread_scans_its_own_stack)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_start_with(&D, NULL);
    harness_attach(&D, &c, &m);
    bounds_of_self();
    struct thread_arg a = {.c = c, .main_base = t_base,
                           .main_limit = t_limit,
                           .mine = alloc_hidden(m, 1, 8),
                           .mains = alloc_hidden(m, 1, 8)};
    /* the main thread holds its object while the thread scans */
    void *volatile held = (void *)(a.mains ^ KEY);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, thread_body, &a), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_ptr_nonnull(held);

    ck_assert_int_eq(a.rc, 0);
    ck_assert_uint_ne(a.base, t_base);
    ck_assert_msg(a.base <= t_limit || a.limit >= t_base,
                  "the thread's stack [%#lx, %#lx) overlaps the main "
                  "thread's [%#lx, %#lx)", (unsigned long)a.limit,
                  (unsigned long)a.base, (unsigned long)t_limit,
                  (unsigned long)t_base);
    ck_assert_int_ge(a.found_mine.hits, 1);
    ck_assert_uint_eq(a.found_mine.resolved, a.mine);
    ck_assert_int_eq(a.found_mine.outside, 0);
    ck_assert_int_eq(a.found_mains.hits, 0);
    ck_assert_int_eq(a.on_mains, -EINVAL);
    ck_assert_msg(strstr(a.on_mains_error, "stack") != NULL, "%s",
                  a.on_mains_error);
    /* and the main thread's own scan still finds its object */
    struct seen s = scan_for(c, HOLD_LOCAL, a.mains, 5);
    ck_assert_int_ge(s.hits, 1);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* A word of this stack another thread writes, as a struct on the stack
 * that a helper thread fills in: the scan reads it with no
 * synchronisation, which is what a conservative scan does, and
 * ThreadSanitizer must not take it for a race of the program's. */
struct cell_arg {
    volatile uintptr_t *cell;
    uintptr_t value;
    atomic_int written;
};

static void *write_cell(void *p)
{
    struct cell_arg *a = p;
    *a->cell = a->value;
    atomic_store_explicit(&a->written, 1, memory_order_relaxed);
    return NULL;
}

START_TEST(a_word_another_thread_writes)
{
    bounds_of_self();
    const uintptr_t L = (uintptr_t)0x0000567800000000ull;
    volatile uintptr_t cell = 0;
    struct cell_arg a = {.cell = &cell, .value = L + 64};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, write_cell, &a), 0);
    /* relaxed: no happens-before from the write to the scan */
    while (!atomic_load_explicit(&a.written, memory_order_relaxed))
        sched_yield();
    struct seen s = {.lo = L, .hi = L + 4096, .hidden = (L + 64) ^ KEY};
    ck_assert_int_ge(hold(HOLD_NONE, &s, 2), 1);
    ck_assert_int_ge(s.hits, 1);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_uint_eq(cell, L + 64);
}
END_TEST

static char *alt_stack;
static const size_t alt_size = 256 << 10;
static volatile long alt_rc;
static volatile int alt_on;

static void on_alt_signal(int sig)
{
    (void)sig;
    /* the frame, not a local's address: ASan may keep locals in a fake
     * frame */
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    alt_on = here - (uintptr_t)alt_stack < alt_size;
    struct seen s = {.lo = 0x1000, .hi = 0x2000};
    alt_rc = stack_scan(t_base, t_limit, s.lo, s.hi, visit, &s);
}

/* A scan from a signal handler on a sigaltstack is refused, with a
 * message saying what to do; the same scan on the thread's stack runs. */
START_TEST(a_scan_on_another_stack_is_refused)
{
    bounds_of_self();
    alt_stack = malloc(alt_size);
    ck_assert_ptr_nonnull(alt_stack);
    stack_t ss = {.ss_sp = alt_stack, .ss_size = alt_size};
    ck_assert_int_eq(sigaltstack(&ss, NULL), 0);
    struct sigaction sa = {.sa_handler = on_alt_signal,
                           .sa_flags = SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    last_error[0] = '\0';
    alt_rc = 1;
    ck_assert_int_eq(raise(SIGUSR1), 0);
    ck_assert_msg(alt_on, "the handler did not run on the sigaltstack");
    ck_assert_int_eq(alt_rc, -EINVAL);
    ck_assert_msg(strstr(last_error, "sigaltstack") != NULL, "%s",
                  last_error);

    struct seen s = {.lo = 0x1000, .hi = 0x2000};
    ck_assert_int_ge(hold(HOLD_NONE, &s, 1), 0);
    /* nor does a stack whose limit is above the scan */
    ck_assert_int_eq(stack_scan(t_base, t_base - 64, s.lo, s.hi, visit, &s),
                     -EINVAL);
    ck_assert_int_eq(stack_scan(t_limit, t_limit - (1 << 20), s.lo, s.hi,
                                visit, &s), -EINVAL);
}
END_TEST

static Suite *stack_suite(void)
{
    Suite *s = suite_create("stack");
    TCase *t = tcase_create("stack");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, locals_are_found);
    tcase_add_test(t, the_filter_bounds_what_is_visited);
    tcase_add_test(t, small_objects_and_what_is_no_object);
    tcase_add_test(t, run_objects_resolve_from_inside);
    tcase_add_test(t, large_objects_resolve_from_inside);
    tcase_add_test(t, a_freed_large_run_is_no_object);
    tcase_add_test(t, nonsense_resolves_to_nothing);
    tcase_add_test(t, interior_pointers_in_a_huge_segment);
    tcase_add_test(t, a_thread_scans_its_own_stack);
    tcase_add_test(t, a_word_another_thread_writes);
    tcase_add_test(t, a_scan_on_another_stack_is_refused);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(stack_suite());
}
