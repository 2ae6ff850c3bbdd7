/* libheapd: the conservative scan of a mutator's own thread stack and
 * registers, and the resolution of an address to the heap object it lies
 * in.
 *
 * Note [Scanning a mutator's own stack]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * The rule for C code is that what a local variable or a register of an
 * attached thread points to stays alive, interior pointers included.  A
 * mutator finds those values itself:
 *   - stack_scan spills the callee-saved registers into its own frame
 *     (__builtin_unwind_init in a frame that is not inlined, and setjmp into
 *     a local jmp_buf), then reads every 8-aligned word from the frame of
 *     the function it calls up to the stack's base, so the spill is
 *     inside what it reads.  A value held only in a caller-saved register
 *     was saved on the stack by the caller before its call; a
 *     callee-saved one that no frame has saved yet is in the spill.
 *     unwind_init is the one that matters: glibc's setjmp stores rbp
 *     (and rsp, rip) mangled in the jmp_buf, and with
 *     -fomit-frame-pointer rbp is an ordinary register.  Measured with
 *     GCC 12 -O2, a walk of no frame pointer of its own: a pointer held
 *     only in rbp across the scan was missed with setjmp alone and found
 *     with unwind_init; one in r12 was found by both.  (Here the walk
 *     takes its frame address, so its prologue saves rbp as well.)
 *   - it calls VISIT only for words whose value lies in [lo, hi), one
 *     subtraction and one comparison a word: the caller passes the
 *     heap's range, and resolves what passes with
 *     stack_object_of, which accepts any address inside an object's
 *     block (Note [Resolving an interior pointer]).
 *   - the base and limit come from pthread_getattr_np, once, at attach,
 *     in the thread itself (for the main thread glibc reads
 *     /proc/self/maps and RLIMIT_STACK).
 * Own stack only: the daemon cannot read another process's stack, and one
 * thread cannot read another's registers, but the mutator is inside a
 * libheapd call when it scans, so it walks its own stack and registers
 * with plain loads and no signal.
 * The walk is what conservative collectors do (Boehm's GC, Mono's SGen),
 * so it reads memory the sanitizers consider off limits: AddressSanitizer
 * redzones between locals (built with ASan, the walk stopped at once with
 * a stack-buffer-underflow report), and words other threads write (a
 * struct on this stack that another thread fills in), which
 * ThreadSanitizer reported as a data race; the walking functions are
 * built without either.  ASan's fake stack (detect_stack_use_after_return,
 * off by default in GCC 12's runtime, on with
 * ASAN_OPTIONS=detect_stack_use_after_return=1) moves addressable locals,
 * volatile ones too, into fake frames off the thread's stack, where a
 * walk of the stack alone missed them.  Each live fake frame is
 * referenced from its function's real frame or from a register, so a
 * word that points into one has that frame's words scanned as well.
 * The limit: a thread running on another stack (a signal handler on a
 * sigaltstack, a coroutine of makecontext) has its stack pointer outside
 * [limit, base): the scan then visits nothing and returns -EINVAL, and
 * the caller must not trust it.  The exact limit, not a distance from the
 * base, is what tells: a coroutine's stack mapped just below the thread's
 * is near the base, and walking up from it would read unmapped memory.
 * Measured (GCC 12 -O2, two cores shared with other work): a scan costs
 * about 0.1 us per KiB of stack, 1.7 us for 18 KiB and 6.4 us for 64 KiB,
 * with one word in seven in range and so a call of VISIT.
 *
 * Note [False pointers]
 * ~~~~~~~~~~~~~~~~~~~~~
 * A word that is not a pointer keeps an object only if its value lies in
 * the heap's range and, inside it, in an allocated object's block
 * (Note [Resolving an interior pointer]).  The range does most of the
 * filtering, so heapd.conf(5) advises a base such as 0x7e8000000000: of
 * what a C stack holds that is not a heap pointer, no integer below
 * 2^46 (counts, sizes, indices, file descriptors, small negative numbers
 * are above the user address space), no double but denormals (the bits
 * 0x7e80... are a double of about 7e-310), no eight bytes of ASCII text
 * (a nonzero top byte, or a sixth byte of '~' before a non-ASCII fifth)
 * and no pointer into the program, its malloc heap, its stack or its
 * libraries (0x55..., 0x7f...: the kernel randomises the mmap base within
 * a terabyte below 0x7fff..., above 0x7e80...) falls in a heap there; a
 * random 64-bit value (a hash) does with odds of max_size / 2^64 (2^-30
 * for 16 GiB).  What is left is pointers: live ones and stale ones to
 * objects that died.  Measured on GCBench (young off, one run): 107,068
 * stack words read over 226 captures, 4,770 of them in the heap's range,
 * 4,210 of those in an allocated block; conservative_roots counted 0 to 6
 * objects a run that the precise roots had not reached, at most 8.8 KB
 * marked from them (docs/benchmarks.md).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "client.h"
#include "heapd.h"
#include "layout.h"
#include "runtime.h"
#include "stack.h"

#if defined(__SANITIZE_ADDRESS__)
#define STACK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STACK_ASAN 1
#endif
#endif
#ifdef STACK_ASAN
#include <sanitizer/asan_interface.h>
#endif

/* The walk reads redzones and words other threads write: see the Note. */
#define STACK_UNCHECKED __attribute__((no_sanitize("address", "thread")))

/* A stack word, read whatever type was stored there. */
typedef uintptr_t __attribute__((may_alias)) stack_word;

int stack_base_of_self(uintptr_t *base, uintptr_t *limit)
{
    pthread_attr_t attr;
    void *addr;
    size_t size;
    int rc = pthread_getattr_np(pthread_self(), &attr);
    if (rc != 0)
        return client_set_error(-rc, "cannot find this thread's stack "
                                "(pthread_getattr_np: %s): libheapd scans a "
                                "mutator's stack for the objects its locals "
                                "hold, and glibc finds the main thread's in "
                                "/proc/self/maps: mount /proc, or attach from "
                                "a thread of pthread_create", strerror(rc));
    rc = pthread_attr_getstack(&attr, &addr, &size);
    pthread_attr_destroy(&attr);
    if (rc != 0 || size == 0)
        return client_set_error(rc ? -rc : -EINVAL, "cannot find this "
                                "thread's stack (pthread_attr_getstack: %s): "
                                "attach from a thread of pthread_create",
                                strerror(rc ? rc : EINVAL));
    *limit = (uintptr_t)addr;
    *base = (uintptr_t)addr + size;
    return 0;
}

/* VISIT the words of [FROM, TO) whose value lies SPAN bytes from LO. */
static STACK_UNCHECKED long scan_words(uintptr_t from, uintptr_t to,
                                       uintptr_t lo, uintptr_t span,
                                       stack_visit_fn visit, void *ctx)
{
    long n = 0;
    for (uintptr_t a = (from + 7) & ~(uintptr_t)7; a + 8 <= to; a += 8) {
        uintptr_t w = *(const stack_word *)a;
        if (w - lo < span) {
            visit(ctx, w);
            n++;
        }
    }
    return n;
}

/* The walk, from its own frame up: not inlined, so that stack_scan's frame
 * with the spilled registers lies above its frame address. */
static __attribute__((noinline)) STACK_UNCHECKED long
walk(uintptr_t base, uintptr_t limit, uintptr_t lo, uintptr_t span,
     stack_visit_fn visit, void *ctx)
{
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    if (sp < limit || sp >= base)
        return -EINVAL;
#ifdef STACK_ASAN
    void *fake = __asan_get_current_fake_stack();
    if (fake) {
        long n = 0;
        for (uintptr_t a = (sp + 7) & ~(uintptr_t)7; a + 8 <= base; a += 8) {
            uintptr_t w = *(const stack_word *)a;
            void *beg, *end;
            if (w - lo < span) {
                visit(ctx, w);
                n++;
            } else if (__asan_addr_is_in_fake_stack(fake, (void *)w, &beg,
                                                    &end)) {
                n += scan_words((uintptr_t)beg, (uintptr_t)end, lo, span,
                                visit, ctx);
            }
        }
        return n;
    }
#endif
    return scan_words(sp, base, lo, span, visit, ctx);
}

__attribute__((noinline)) STACK_UNCHECKED long
stack_scan(uintptr_t base, uintptr_t limit, uintptr_t lo, uintptr_t hi,
           stack_visit_fn visit, void *ctx)
{
    jmp_buf regs;
    /* the spill (Note [Scanning a mutator's own stack]) */
    __builtin_unwind_init();
    (void)setjmp(regs);
    long n = walk(base, limit, lo, hi > lo ? hi - lo : 0, visit, ctx);
    /* REGS stays live over the walk, and the walk is no tail call that
     * would pop this frame first */
    __asm__ volatile("" : : "r"(&regs) : "memory");
    if (n < 0)
        return client_set_error(-EINVAL, "a mutator's call into libheapd "
                                "ran on a stack other than its thread's "
                                "own (a signal handler on a sigaltstack, "
                                "or a makecontext coroutine): make heapd "
                                "calls on the stack of the attached thread");
    return n;
}

long stack_scan_range(uintptr_t from, uintptr_t to, uintptr_t lo,
                      uintptr_t hi, stack_visit_fn visit, void *ctx)
{
    return scan_words(from, to, lo, hi > lo ? hi - lo : 0, visit, ctx);
}

/* Note [Resolving an interior pointer]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * stack_object_of reads only the heap, with relaxed atomics, and trusts
 * nothing: any process may have written any of it (Note [Segments]).  P
 * is outside the heap, in the control area, in a segment header and its
 * marks, past a small segment's last block, or in a block whose mark is
 * not in use: NULL.  Otherwise P's segment header says:
 *   - SMALL with a class that has blocks: the block is the offset past
 *     the first block divided by the class size; in the run class it
 *     walks back over LAYOUT_MARK_CONT marks to the object's first block
 *     (Note [Runs]), never past block 0.
 *   - LARGE, with a length of whole segments inside the heap: its one
 *     object at LAYOUT_LARGE_OBJECT, mark 0 of the segment.
 *   - anything else: P's segment may be a later segment of a large run,
 *     whose header is not a header but the object's bytes; nothing in the
 *     heap marks such a segment (only the daemon's table knows it).  So
 *     the segments before it are read back, as far as the longest run the
 *     heap has had (Note [The longest large run] in proto/layout.h), for
 *     the first recognised header: a LARGE one whose run covers P gives
 *     its object; any other means P is in no object.
 * Measured: 7 ns for an address in a small segment; back over a run,
 * 0.2 us from 100 segments into it, 7.7 us from 999.
 * Limits that follow from the heap holding no record of a run's later
 * segments:
 *   - a later segment whose bytes happen to read as a SMALL or LARGE
 *     header (an array of int32 ones reads as a SMALL header of class 1)
 *     is taken for one: P resolves to a block of that, or to nothing,
 *     instead of to the large object;
 *   - an address in free memory under which no header is recognised
 *     reads back as far as the longest run, and the first read of a
 *     header in a punched segment commits a page of the memfd (measured:
 *     4 KiB each), which the daemon punches again (Note [Free memory
 *     stays free] in daemon/gc/purge.c): in a heap that never had a
 *     large run, only P's own segment's.
 * A record per segment of its run's head, written by the daemon, would
 * end both.
 */

/* A block whose mark is this holds an object (Note [Epoch-tagged
 * marks]): the one test of it here. */
static inline bool mark_in_use(uint8_t mark)
{
    return layout_mark_in_use(mark);
}

enum header_kind {
    HEADER_UNKNOWN,  /* blank, or not a header (Note [Resolving ...]) */
    HEADER_SMALL,    /* *CLS: a class with blocks */
    HEADER_LARGE,    /* *RUN: the run's segments, inside the heap */
};

/* What the header of segment I (of NSEGS) says. */
static enum header_kind read_header(const heapd_client *c, uint32_t i,
                                    uint32_t nsegs, unsigned *cls,
                                    uint64_t *run)
{
    const struct layout_segment *hd = client_seg_addr(c, i);
    /* the kind, then what it makes valid (Note [Segments]) */
    uint32_t kind = __atomic_load_n(&hd->kind, __ATOMIC_ACQUIRE);
    if (kind == LAYOUT_SEG_SMALL) {
        uint32_t k = __atomic_load_n(&hd->size_class, __ATOMIC_RELAXED);
        if (k >= LAYOUT_NCLASSES || c->small_nblocks[k] == 0)
            return HEADER_UNKNOWN;
        *cls = k;
        return HEADER_SMALL;
    }
    if (kind == LAYOUT_SEG_LARGE) {
        uint64_t bytes = __atomic_load_n(&hd->large_bytes, __ATOMIC_RELAXED);
        uint64_t segs = bytes >> c->seg_shift;
        if (segs == 0 || (bytes & (c->segment_size - 1)) != 0 ||
            segs > nsegs - i)
            return HEADER_UNKNOWN;
        *run = segs;
        return HEADER_LARGE;
    }
    return HEADER_UNKNOWN;
}

/* The object of the block of small segment SEG of class CLS that holds
 * P, or NULL; *MARK the mark read. */
static void *small_object(const heapd_client *c, uint8_t *seg, unsigned cls,
                          uintptr_t p, uint8_t *mark)
{
    uint64_t off = p - (uintptr_t)seg;
    uint32_t first = c->small_first[cls], n = c->small_nblocks[cls];
    uint32_t bs = layout_class_size[cls];
    if (off < first)
        return NULL; /* the header, the marks, the padding */
    uint64_t b = off - first;
    /* b < 2^30: the multiply overshoots by at most one (layout.h) */
    uint32_t idx = (uint32_t)((b * c->small_magic[cls]) >> 32);
    if ((uint64_t)idx * bs > b)
        idx--;
    if (idx >= n)
        return NULL; /* past the last block */
    const uint8_t *marks = layout_seg_marks(seg);
    uint8_t m = __atomic_load_n(&marks[idx], __ATOMIC_RELAXED);
    if (cls == LAYOUT_CLASS_RUN) /* Note [Runs] */
        while (m == LAYOUT_MARK_CONT && idx > 0)
            m = __atomic_load_n(&marks[--idx], __ATOMIC_RELAXED);
    *mark = m;
    if (!mark_in_use(m))
        return NULL;
    return seg + first + (uint64_t)idx * bs + LAYOUT_WORD;
}

/* The object of the large run at HEAD holding P (past its header), or
 * NULL; *MARK the mark read. */
static void *large_object(uint8_t *head, uintptr_t p, uint8_t *mark)
{
    if (p < (uintptr_t)head + LAYOUT_LARGE_OBJECT)
        return NULL; /* the header and the mark */
    uint8_t m = __atomic_load_n(layout_seg_marks(head), __ATOMIC_RELAXED);
    *mark = m;
    return mark_in_use(m) ? head + LAYOUT_LARGE_OBJECT + LAYOUT_WORD : NULL;
}

void *stack_object_of(heapd_client *c, uintptr_t p, uint8_t *mark)
{
    uint8_t m = 0;
    void *obj = NULL;
    uintptr_t base = (uintptr_t)c->base;
    uint32_t nsegs = (uint32_t)(c->size >> c->seg_shift);
    unsigned cls = 0;
    uint64_t run = 0;

    if (!c->base || p - base >= (uint64_t)nsegs << c->seg_shift)
        goto out;
    uint32_t s = (uint32_t)((p - base) >> c->seg_shift);
    if (s < c->first_segment)
        goto out; /* the control area */
    switch (read_header(c, s, nsegs, &cls, &run)) {
    case HEADER_SMALL:
        obj = small_object(c, client_seg_addr(c, s), cls, p, &m);
        goto out;
    case HEADER_LARGE:
        obj = large_object(client_seg_addr(c, s), p, &m);
        goto out;
    case HEADER_UNKNOWN:
        break;
    }
    /* a later segment of a large run, or no object's: read back as far
     * as the longest run the heap has had, never past what the largest
     * object needs (Note [The longest large run] in proto/layout.h) */
    uint64_t longest =
        (LAYOUT_LARGE_OBJECT +
         layout_object_size(LAYOUT_FIELD_MAX, LAYOUT_FIELD_MAX) +
         c->segment_size - 1) >> c->seg_shift;
    uint32_t had = atomic_load_explicit(&c->ctl->large_run_max,
                                        memory_order_acquire);
    longest = had < longest ? had : longest;
    uint32_t stop = s - c->first_segment < longest
                        ? c->first_segment
                        : (uint32_t)(s - longest + 1);
    for (uint32_t k = s; k-- > stop;) {
        enum header_kind h = read_header(c, k, nsegs, &cls, &run);
        if (h == HEADER_UNKNOWN)
            continue;
        if (h == HEADER_LARGE && k + run > s)
            obj = large_object(client_seg_addr(c, k), p, &m);
        break;
    }
out:
    if (mark)
        *mark = m;
    return obj;
}
