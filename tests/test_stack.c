/* The conservative scan of a mutator's own stack and registers
 * (client/stack.c, Note [Scanning a mutator's own stack]), against a real
 * heapd.  client/stack.c is compiled into this program, whose
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

#include "harness.h"
#include "heapd.h"
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
    uintptr_t lo, hi;
    uintptr_t hidden;
    long visits, hits, outside;
    bool in_fake;         /* HOLD_ADDRESSED's local was in an ASan fake
                             frame */
};

static void visit(void *ctx, uintptr_t w)
{
    struct seen *s = ctx;
    s->visits++;
    if (w < s->lo || w >= s->hi)
        s->outside++;
    if ((w ^ KEY) == s->hidden)
        s->hits++;
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
 * right above the scan and a hundred frames up, is visited; with no
 * holder, nothing is found. */
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
            s = scan_for(c, holders[i], inner, depth);
            ck_assert_msg(s.hits >= 1, "%s %d frames up: the interior "
                          "pointer was not visited", names[i], depth);
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
    struct seen s = {.lo = (uintptr_t)heapd_heap_base(a->c),
                     .hi = (uintptr_t)heapd_heap_base(a->c) +
                           heapd_heap_size(a->c)};
    s.hidden = a->mine;
    hold(HOLD_LOCAL, &s, 10);
    a->found_mine = s;
    /* the main thread holds its own: not on this stack */
    s = (struct seen){.lo = s.lo, .hi = s.hi, .hidden = a->mains};
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
