/* libheapd: the conservative scan of a mutator's own thread stack and
 * registers.
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
 *     heap's range, or its nursery's, and resolves what passes to
 *     objects.
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
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

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
