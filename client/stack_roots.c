/* libheapd: the C stack as a root of the major collector -- a mutator's
 * capture of the objects its stack and registers point into, and its use
 * at the stack-marking handshake.
 *
 * Note [C locals are roots]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~
 * What a local variable or a register of an attached thread points to
 * stays alive through every cycle, as a root slot's object does.  The
 * daemon cannot read a process's stack, so each mutator captures its own:
 * it scans its stack and registers conservatively (Note [Scanning a
 * mutator's own stack] in client/stack.c), resolves every word to the
 * object whose block it points into (Note [Resolving an interior
 * pointer]), and writes the distinct objects into its slot's capture
 * area (captured_n of them, at most LAYOUT_MAX_CAPTURED).  The capture is
 * the C stack's part of the snapshot, under three rules:
 *   - it is taken when the daemon may take the snapshot without the
 *     thread running: before the mutator acknowledges a snapshot's stop,
 *     and in heapd_blocking_enter before it says it is blocked.  Either
 *     way the thread runs no program code until the snapshot is past, so
 *     the capture is its stack at the snapshot;
 *   - it is a root of the stack-marking handshake (Note [Stack marking
 *     handshake] in client/barrier.c), with the root slots: whichever side
 *     takes the handshake, the mutator logs it to its update remembered
 *     set, the daemon marks it (validated as any reference: a word no
 *     object's any more is dropped, not counted as bad);
 *   - a new capture replaces the old only once no handshake is due: a
 *     blocking region entered while a cycle marks takes the handshake
 *     first, and a stop finds none due (the phase is not MARK).
 * Then, as for the root slots, the snapshot write barrier covers what the
 * thread loads later: reachable at the snapshot, or allocated black.  The
 * cases:
 *   - a pointer only in a callee-saved register: the scan spills them
 *     into its own frame first; one in a caller-saved register was saved
 *     in its caller's frame before the call into libheapd;
 *   - a pointer in a caller's frame: the scan reads every frame from its
 *     own up to the stack's base;
 *   - a pointer the compiler derived: any address inside an object's
 *     block keeps the object (heapd_bytes(o), heapd_str_data(s),
 *     &o->field), and an address at a block's start keeps the object of
 *     the block before as well (one past its end);
 *   - a heapd call from a signal handler running on the thread's stack
 *     scans the handler's frames and the interrupted ones under them; on
 *     a sigaltstack or a makecontext stack the scan cannot run: nothing
 *     of the stack is captured, and the thread's locals are not roots
 *     for that cycle (counted: conservative_unscanned).
 * Young objects are not captured: a young mutator's own handshake traces
 * them from its stack (Note [The preparatory push] in client/minor.c).
 * Past LAYOUT_MAX_CAPTURED distinct objects (a 1 MiB stack of nothing
 * but distinct heap pointers) the rest are dropped (counted:
 * conservative_overflows): what only they hold must be in a root slot.  A
 * HEAPD_MUTATOR_PRECISE mutator captures only the ranges heapd_add_roots
 * registered (Note [Registered roots]).
 */
#include <stdlib.h>
#include <string.h>

#include "barrier.h"
#include "client.h"
#include "errors.h"
#include "heapd.h"
#include "layout.h"
#include "mutator.h"
#include "stack.h"
#include "stack_roots.h"

struct capture {
    heapd_client *c;
    uintptr_t *out;             /* the slot's capture area */
    uint64_t n;
    uintptr_t *seen;            /* STACK_ROOTS_SEEN words seen lately */
    bool overflowed;            /* an object dropped past the bound */
};

static int cmp_ref(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Sort V[0..N) and drop repeats; returns how many are left. */
static uint64_t compact(uintptr_t *v, uint64_t n)
{
    if (n < 2)
        return n;
    qsort(v, n, sizeof *v, cmp_ref);
    uint64_t k = 1;
    for (uint64_t i = 1; i < n; i++)
        if (v[i] != v[k - 1])
            v[k++] = v[i];
    return k;
}

/* Note [Capturing without sorting]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A stack holds few values many times (a frame's locals, the same
 * pointer saved in frame after frame), so a word is resolved and its
 * object kept only if the same value is not in a direct-mapped table of
 * the words seen lately (STACK_ROOTS_SEEN entries, by hash).  Repeats
 * that slip through (a value evicted from the table, two words inside
 * one object) cost a second mark, and are compacted away only if the
 * area fills.  Measured with blocking_bench (frames of 1 KiB, one word
 * in eight a pointer into one of 64 objects), a heapd_blocking_enter and
 * leave: sorting every capture to drop repeats, 3.4 us at 8 KiB of stack
 * and 573 us at 1 MiB (70 % in the sort); a table of objects, 2.0 and
 * 169 us (most in resolving every word); a table of words, 1.4 and 121
 * us, the walk itself most of it (a precise mutator's pair: 0.15 us).
 */
static void keep(struct capture *cp, void *obj, uint8_t mark)
{
    if (!obj || mark == LAYOUT_MARK_YOUNG)
        return;
    if (cp->n == LAYOUT_MAX_CAPTURED) {
        cp->n = compact(cp->out, cp->n);
        if (cp->n == LAYOUT_MAX_CAPTURED) {
            cp->overflowed = true; /* Note [C locals are roots] */
            return;
        }
    }
    cp->out[cp->n++] = (uintptr_t)obj;
}

/* A stack word W in the heap's range: the object it points into, and
 * the one it may end (Note [C locals are roots]). */
static void capture_word(void *ctx, uintptr_t w)
{
    struct capture *cp = ctx;
    /* Note [Capturing without sorting] */
    uintptr_t *seen = &cp->seen[(w >> 3) * 0x9e3779b97f4a7c15ull >>
                                (64 - STACK_ROOTS_SEEN_LOG)];
    if (*seen == w)
        return;
    *seen = w;
    uint8_t mark = 0;
    void *obj = stack_object_of(cp->c, w, &mark);
    keep(cp, obj, mark);
    if (!obj || w == (uintptr_t)obj - LAYOUT_WORD) {
        uint8_t before = 0;
        void *prev = stack_object_of(cp->c, w - 1, &before);
        if (prev != obj)
            keep(cp, prev, before);
    }
}

void stack_roots_capture(heapd_mutator *m)
{
    struct layout_mutator *s = m->slot;
    if (mutator_orphaned(m))
        return;
    /* Note [C locals are roots]: the capture the handshake due will use
     * stays */
    if (barrier_stack_due(m))
        return;
    if (!stack_roots_wanted(m)) {
        /* its last ranges removed: what they held is not kept any more */
        if (m->captured_last) {
            atomic_store_explicit(&s->captured_n, 0, memory_order_release);
            m->captured_last = 0;
        }
        return;
    }
    atomic_store_explicit(&s->captured_n, 0, memory_order_relaxed);
    memset(m->capture_seen, 0, sizeof m->capture_seen);
    struct capture cp = {m->c, (uintptr_t *)layout_mutator_captured(s), 0,
                         m->capture_seen, false};
    uintptr_t lo = (uintptr_t)m->c->base;
    if (m->conservative &&
        stack_scan(m->stack_base, m->stack_limit, lo, lo + m->c->size,
                   capture_word, &cp) < 0) {
        cp.n = 0; /* Note [C locals are roots]: another stack */
        atomic_fetch_add_explicit(&s->capture_unscanned, 1,
                                  memory_order_relaxed);
    }
    /* the ranges, by every mutator of the client (Note [Registered
     * roots]) */
    hd_mutex_lock(&m->c->roots_mu);
    for (size_t i = 0; i < m->c->nranges; i++)
        stack_scan_range(m->c->ranges[i].lo, m->c->ranges[i].hi, lo,
                         lo + m->c->size, capture_word, &cp);
    hd_mutex_unlock(&m->c->roots_mu);
    if (cp.overflowed)
        atomic_fetch_add_explicit(&s->capture_overflows, 1,
                                  memory_order_relaxed);
    m->captured_last = cp.n;
    atomic_store_explicit(&s->captured_n, cp.n, memory_order_release);
}

void stack_roots_log(heapd_mutator *m)
{
    struct layout_mutator *s = m->slot;
    void *_Atomic *cap = layout_mutator_captured(s);
    uint64_t n = atomic_load_explicit(&s->captured_n, memory_order_acquire);
    for (uint64_t i = 0; i < n && i < LAYOUT_MAX_CAPTURED; i++) {
        void *ref = atomic_load_explicit(&cap[i], memory_order_relaxed);
        uint8_t mark = 0;
        /* a stale word may have named an object that died since: one no
         * object's any more is not logged (Note [C locals are roots]) */
        if (stack_object_of(m->c, (uintptr_t)ref, &mark) == ref &&
            mark != LAYOUT_MARK_YOUNG)
            barrier_log_captured(m, ref);
    }
}

/* Note [Registered roots]
 * ~~~~~~~~~~~~~~~~~~~~~~~~
 * heapd_add_roots registers a range of the process's memory (its data
 * and bss, a malloc'd table) whose words are roots as a stack's are.  A
 * process's data and bss are not scanned unless it asks: they are
 * mostly not pointers, a libheapd linked into a large program would
 * scan megabytes of them at every capture, and a scan of another
 * library's data would race with its writers.  The range is captured
 * with the stack, at every capture of every mutator of the client (and
 * of a HEAPD_MUTATOR_PRECISE one, which captures only the ranges), which
 * makes it safe when several threads write it, under one rule: only
 * attached threads outside blocking regions write it.  At a snapshot
 * every such thread has acknowledged the stop, each after its own
 * capture, and a thread that writes the range after another captured it
 * captures it later itself; so the last capture of each thread that
 * wrote it sees what it holds at the snapshot.  The cost: a capture
 * reads every registered word (about 0.1 us per KiB).
 */
static bool heap_overlaps(const heapd_client *c, uintptr_t lo, uintptr_t hi)
{
    uintptr_t b = (uintptr_t)c->base;
    return lo < b + c->size && b < hi;
}

int heapd_add_roots(heapd_mutator *m, void *start, void *end)
{
    int rc = 0;
    if (!m || !start || !end || (uintptr_t)start > (uintptr_t)end)
        return client_set_error(-EINVAL, "heapd_add_roots: a mutator and a "
                                "range [start, end) with start <= end, "
                                "neither NULL");
    heapd_client *c = m->c;
    uintptr_t lo = ((uintptr_t)start + 7) & ~(uintptr_t)7;
    uintptr_t hi = (uintptr_t)end & ~(uintptr_t)7;
    if (heap_overlaps(c, (uintptr_t)start, (uintptr_t)end))
        return client_set_error(-EINVAL, "heapd_add_roots: [%p, %p) is "
                                "inside the heap: heap objects are traced "
                                "already; register memory of the process's "
                                "own", start, end);
    hd_mutex_lock(&c->roots_mu);
    if (c->nranges == c->capranges) {
        size_t cap = c->capranges ? 2 * c->capranges : 8;
        struct root_range *v = realloc(c->ranges, cap * sizeof *v);
        if (!v) {
            rc = client_set_error(-ENOMEM, "heapd_add_roots: out of memory");
            goto out;
        }
        c->ranges = v;
        c->capranges = cap;
    }
    c->ranges[c->nranges++] = (struct root_range){lo, hi > lo ? hi : lo};
    atomic_store_explicit(&c->nranges_any, c->nranges, memory_order_relaxed);
out:
    hd_mutex_unlock(&c->roots_mu);
    return rc;
}

int heapd_remove_roots(heapd_mutator *m, void *start, void *end)
{
    int rc = -ENOENT;
    if (!m)
        return client_set_error(-EINVAL, "heapd_remove_roots: NULL mutator");
    heapd_client *c = m->c;
    uintptr_t lo = ((uintptr_t)start + 7) & ~(uintptr_t)7;
    uintptr_t hi = (uintptr_t)end & ~(uintptr_t)7;
    if (hi < lo)
        hi = lo;
    hd_mutex_lock(&c->roots_mu);
    for (size_t i = 0; i < c->nranges; i++) {
        if (c->ranges[i].lo == lo && c->ranges[i].hi == hi) {
            c->ranges[i] = c->ranges[--c->nranges];
            atomic_store_explicit(&c->nranges_any, c->nranges,
                                  memory_order_relaxed);
            rc = 0;
            break;
        }
    }
    hd_mutex_unlock(&c->roots_mu);
    if (rc < 0)
        return client_set_error(rc, "heapd_remove_roots: [%p, %p) was not "
                                "registered by heapd_add_roots", start, end);
    return 0;
}
