/* libheapd's young generation: young objects in the mutator's own
 * segments, minor collections that free and promote in place, publication,
 * and the preparatory push.  The mark that makes a block young is Note
 * [Young objects] in proto/young.h.
 *
 * Note [The young invariant]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~
 * No object of the shared heap, no global and no other mutator's root
 * references a young object: only its own mutator's root slots (and the
 * parked value of a call in flight, Note [Values in flight]), its C locals
 * and its own young objects do -- and, between two slices of its minor
 * collection, objects it is promoting, which nothing else reaches yet
 * (Note [Minor collections in slices]).  Everything rests on it: the daemon never
 * needs to follow a reference to a young object, a minor collection needs
 * no remembered set (nothing old points young), and a young object may be
 * freed by its mutator alone.  So every store that could break it
 * publishes first: heapd_write and heapd_cas of a young value into a
 * shared object, heapd_global_set and heapd_global_once's result, and
 * heapd_publish itself promote the value and every young object it
 * reaches (Note [Promotion in place]), and only then store it.  The value
 * keeps its address: a C local that holds it stays valid.  A store INTO a
 * young object needs no barrier for the major collector: nothing shared
 * reaches its fields, and the preparatory push saw what they held at the
 * snapshot (Note [The preparatory push]); only its own mutator's marking
 * has one (Note [Minor collections in slices]).  The daemon enforces the rule for others
 * (Note [References to young objects] in daemon/gc/validate.c): a
 * reference to a young block met anywhere but its owner's roots is
 * counted and not followed.
 *
 * Note [Promotion in place]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~
 * A young object becomes shared where it is: its header's tag (its age)
 * becomes what a new shared object's is -- the epoch while marking
 * (black and dirty from birth, Note [Snapshot write barrier]), else 0 --
 * and then its mark byte goes from LAYOUT_MARK_YOUNG to the epoch, with
 * a release store: from then on the daemon's sweep keeps it as any
 * allocated block and its marker treats it as marked.  What it references
 * must already be shared (Note [The young invariant]), so a promotion
 * takes everything young the object reaches with it, from the top of the
 * trace's work list: at once in a publication, over the slices of a
 * minor collection (Note [Minor collections in slices]).  Nothing is
 * copied and nothing waits: a
 * promotion is a store to a header and one to a mark per object, and it
 * needs no memory, so it may happen inside heapd_write, which is not a
 * safepoint.  A process killed in the middle leaves promoted objects that
 * nothing shared references yet: garbage the next cycle frees.  The cost
 * measured: GCBench promoted 148 MiB by copying into the shared heap with
 * the copying nursery this replaced; the shared map copied every value it
 * published (55 bytes per update).
 * A promoted block counts from then on as allocated in the shared heap
 * (the slot's alloc_bytes), as heapd_alloc_shared's do: the heap paces
 * its cycles and keeps free memory committed by what enters it (Note
 * [Heap goal] in daemon/gc/collector.c).  Uncounted, a loop that
 * published each 32-byte object it made (3 million, dropped at once)
 * saw a cycle keep no free memory, as if nothing were allocated: 358 MB
 * punched and faulted back in, 33 to 37 ns an object, against 6 MB and
 * 16 to 17 ns counted.
 *
 * Note [Minor collections]
 * ~~~~~~~~~~~~~~~~~~~~~~~~
 * A young mutator allocates young blocks like shared ones (Note
 * [Allocation fast path] in client/alloc.c), with the mark
 * LAYOUT_MARK_YOUNG, counted in young_bytes and not in the slot's
 * alloc_bytes until promoted (Note [Promotion in place]): a freed young
 * block is allocated again with no grant in between, and the daemon
 * bounds alloc_bytes by what it granted (Note [Client control memory]).
 * When it has allocated its budget since the last
 * minor collection, heapd_alloc -- a safepoint, before the new object
 * exists -- collects its young objects itself, in its own thread,
 * stopping nobody else and moving nothing, in short pauses of the next
 * allocations (Note [Minor collections in slices]):
 *   1. trace from its root slots and the parked value: a young object
 *      reached gets its `live` bit; one that has now survived young_age
 *      minor collections is promoted in place, and with it what it
 *      reaches; any other one ages by one;
 *   2. trace from its C locals: the stack and registers, scanned
 *      conservatively (Note [Scanning a mutator's own stack] in
 *      client/stack.c), interior pointers included; what only they reach
 *      survives but is never promoted by age: it is the daemon's
 *      preparatory push that keeps what it references.  The major
 *      collector does keep what a C local points to (Note [C locals are
 *      roots] in client/stack_roots.c), but not for a
 *      HEAPD_MUTATOR_PRECISE mutator, and what only C locals hold is
 *      mostly a structure under construction, which dies young:
 *      promoting it at its age as well (tried, release build, 2 runs
 *      each) promoted 9-10 MiB of binary-trees' depth-18 run (its
 *      stretch tree, built over several minor collections) and took its
 *      minor pauses from 67-71 ms to 85-86 ms, and changed nothing in
 *      GCBench (the same 4 MiB promoted);
 *   3. sweep: each young block without its `live` bit is freed (its mark
 *      goes to 0); each segment then goes on its class's reuse list if it
 *      has free blocks, back to the daemon if it holds no young block and
 *      hardly a free one, and otherwise stays tracked until its young
 *      blocks are gone.
 * So an object that dies before its young_age-th minor collection never
 * reaches the shared heap (the reason for aging: GHC's Note [Aging under
 * the non-moving collector]), a survivor costs a bit and a header store,
 * not a copy, and the freed blocks are the next ones allocated, while
 * they are still in the cache.  If the stack cannot be scanned (the
 * thread runs on another stack), nothing young is freed that time.
 */
#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "barrier.h"
#include "client.h"
#include "clock.h"
#include "errors.h"
#include "heapd.h"
#include "layout.h"
#include "minor.h"
#include "mutator.h"
#include "reserve.h"
#include "stack.h"
#include "young.h"

/* Note [Stopping inside a young phase]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A test hook of debug builds: HEAPD_YOUNG_STOP_IN=minor, publish or push
 * in the environment makes a young mutator stop itself (SIGSTOP) once,
 * halfway through its first minor collection, publication or preparatory
 * push that has that far to go, so that a test can SIGKILL it exactly
 * there (tests/test_young_crash.c).  Release builds (NDEBUG) have none.
 */
enum young_phase { PHASE_MINOR = 1, PHASE_PUBLISH, PHASE_PUSH };
#ifndef NDEBUG
static void stop_in(enum young_phase phase)
{
    static _Atomic int want = -1;
    int w = atomic_load_explicit(&want, memory_order_relaxed);
    if (w < 0) {
        const char *e = getenv("HEAPD_YOUNG_STOP_IN");
        w = !e ? 0 : strcmp(e, "minor") == 0 ? PHASE_MINOR
                   : strcmp(e, "publish") == 0 ? PHASE_PUBLISH
                   : strcmp(e, "push") == 0 ? PHASE_PUSH : 0;
        atomic_store(&want, w);
    }
    if (w == (int)phase) {
        atomic_store(&want, 0); /* once */
        raise(SIGSTOP);
    }
}
#else
static inline void stop_in(enum young_phase phase)
{
    (void)phase;
}
#endif

/* Segments with fewer free blocks than 1/REUSE_SHARE of theirs are not
 * allocated in again before the daemon sweeps them. */
#define REUSE_SHARE 8
/* Note [Sizing the nursery]: the next minor collection comes after at
 * least YOUNG_GROWTH times what survived the last one. */
#define YOUNG_GROWTH 2
/* Note [Young segments]: spare segments, at most this many budgets */
#define SPARE_BUDGETS 2

/* The slot's young_held_bytes (Note [Young memory and the heap goal] in
 * daemon/gc/collector.c): at every segment tracked, and with the
 * statistics (a segment untracked or spared shows at the next). */
static void publish_held(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    if (mutator_orphaned(m))
        return; /* Note [A dead daemon] in client/mutator.c */
    atomic_store_explicit(&m->slot->young_held_bytes,
                          (uint64_t)y->nsegs * m->c->segment_size +
                              y->spare_bytes,
                          memory_order_relaxed);
}

static void publish_stats(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    struct layout_mutator *s = m->slot;
    if (mutator_orphaned(m))
        return; /* Note [A dead daemon] in client/mutator.c */
    publish_held(m);
    atomic_store_explicit(&s->young_minor, y->minor, memory_order_relaxed);
    atomic_store_explicit(&s->young_promoted_age, y->promoted_age,
                          memory_order_relaxed);
    atomic_store_explicit(&s->young_promoted_pub, y->promoted_pub,
                          memory_order_relaxed);
    atomic_store_explicit(&s->young_pause_max_ns, y->pause_max,
                          memory_order_relaxed);
    atomic_store_explicit(&s->young_pause_total_ns, y->pause_total,
                          memory_order_relaxed);
}

/* ---- set up and tear down ---- */

int young_init(heapd_mutator *m, uint64_t budget, uint32_t age)
{
    struct young_gen *y = &m->young;
    heapd_client *c = m->c;

    memset(y, 0, sizeof *y);
    y->age = age;
    y->budget = budget;
    y->minor_at = m->fast.young_bytes;
    m->fast.young_next_minor = m->fast.young_bytes + budget;
    y->shared_due = budget;
    /* Note [Minor collections in slices] */
    y->slice_bytes = budget / 256 > 4096 ? budget / 256 : 4096;
    y->heap_segs = (uint32_t)(c->size >> c->seg_shift);
    y->segmap = calloc(y->heap_segs, sizeof *y->segmap);
    if (!y->segmap)
        return client_set_error(-ENOMEM, "out of memory for a young "
                                "generation's segment map");
    y->on = true;
    mutator_set_young_flags(m, MUTATOR_YOUNG);
    return 0;
}

static void untrack(heapd_mutator *m, struct young_seg *s);
static void cycle_abandon(heapd_mutator *m);

void young_release(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    heapd_client *c = m->c;
    uint8_t poison = (uint8_t)atomic_load_explicit(&m->ctl->poison,
                                                   memory_order_relaxed);
    /* its roots go first, once this cycle's handshake has seen them (Note
     * [The preparatory push]): a stop before heapd hears of the detach
     * must not find them naming freed blocks (the verifier did) */
    if (barrier_stack_due(m))
        barrier_stack_slow(m);
    cycle_abandon(m); /* Note [Minor collections in slices] */
    m->depth = 0;
    atomic_store_explicit(&m->slot->root_depth, 0, memory_order_release);
    atomic_store(&m->slot->pending_root, NULL);
    /* its young objects are garbage now: nothing shared references one
     * (Note [The young invariant]) */
    for (uint32_t i = 0; i < y->nsegs; i++) {
        struct young_seg *s = &y->segs[i];
        for (uint32_t b = 0; b < s->nblocks; b++)
            if (__atomic_load_n(&s->marks[b], __ATOMIC_RELAXED) ==
                LAYOUT_MARK_YOUNG)
                minor_free_block(s, b, poison);
    }
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++) {
        if (y->nspare[k])
            reserve_give_back(c, y->spare[k], y->nspare[k], false);
        y->nspare[k] = 0;
    }
    y->spare_bytes = 0;
    while (y->nsegs > 0) {
        struct young_seg *s = &y->segs[y->nsegs - 1];
        uint32_t idx = s->index;
        bool current = m->cur[s->cls].index == idx;
        untrack(m, s);
        if (!current) /* the current ones go with alloc_release_all */
            reserve_give_back(c, &idx, 1, false);
    }
    reserve_flush_returns(c);
}

void young_free(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    for (uint32_t i = 0; i < y->nsegs; i++)
        free(y->segs[i].live);
    free(y->segs);
    free(y->segmap);
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++) {
        free(y->reuse[k]);
        free(y->spare[k]);
    }
    free(y->work);
    memset(y, 0, sizeof *y);
    mutator_set_young_flags(m, 0);
}

/* ---- young segments ---- */

/* Note [Young segments]
 * ~~~~~~~~~~~~~~~~~~~~~
 * Every segment a young mutator allocates in is tracked (segs, and
 * segmap to find one from an address) from the moment it becomes a
 * current segment until a sweep finds no young block in it, so that a
 * minor collection knows every young block and every young address can
 * be told in a load or two.  A tracked segment is never given back while
 * it holds a young block (Note [Young objects] in proto/young.h): an
 * exhausted current segment stays tracked, and the sweep gives it back
 * when it is free of young blocks and nearly full of shared ones, or puts
 * it on its class's reuse list when it has room, where the allocator
 * takes it before asking the reserve.  One that holds no young block as
 * the allocator leaves it (its marks read then, eight at a time) goes
 * back at once, as a shared mutator's does, unless a collection is under
 * way (its sweep walks the tracked segments) or promotions are: a young
 * mutator that allocated with heapd_alloc_shared alone, and so never
 * collected, held every segment it filled (700 MiB for 40 KiB of live
 * objects, 57 to 101 ns an allocation, against 9 MiB and 14 to 23 ns
 * once they went back; one that also makes young objects of that size:
 * Note [Sizing the nursery]).  The work list can hold every
 * tracked block twice (a block is queued once young, and once more if a
 * promotion reaches it later), and grows when a segment is tracked,
 * where an allocation may fail cleanly, never inside a collection.  A
 * segment a sweep finds no young block in is not tracked any more: with
 * room in it, it is kept as a spare of its class (up to SPARE_BUDGETS
 * budgets of them), which the allocator tracks again before it asks the
 * reserve; without, it goes back to the daemon.  Measured on GCBench:
 * tracking every such segment made each minor collection sweep them all
 * (heapd_write's young test missed the cache on their records); giving
 * them all back made the next allocations fault fresh pages in (14 % of
 * the run in shmem faults, 438 ms against 328 ms with spares).
 *
 * Note [Sizing the nursery]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~
 * The next minor collection comes after the mutator has allocated its
 * budget (the attach's young_size, the heap's by default) or
 * YOUNG_GROWTH times what survived the last one, whichever is more (or,
 * past the budget, when it would wait for heapd: Note [Minor collections
 * before a wait]), or after as many bytes of shared blocks in its young
 * segments (young_took_shared; the slices of a collection under way
 * likewise), whichever comes first: a segment with a young
 * block in it stays tracked until a collection, and a mutator that made
 * one young object for every 100 shared ones of its size held every
 * segment it filled (712 MiB for 40 KiB of live objects, 55 to 94 ns an
 * allocation; 13 to 15 MiB and 20 to 32 ns so).  And a
 * collection traces what survives, so the work of a minor collection is
 * at most half the bytes allocated since the one before, whatever the
 * program keeps (as GHC's and OCaml's runtimes grow a nursery with its
 * survivors).  Objects are promoted at their young_age-th survival (2 by
 * default).  The default budget is 8 MiB (heapd.conf's young_size; a
 * quarter of max_size or of max_client_bytes where that is less), chosen
 * from this curve, with collections in slices (Note [Minor collections
 * in slices]; release build, 2 CPUs shared; GCBench median of 5, budgets
 * interleaved: total ms / all minor pauses ms / MiB promoted / longest
 * pause ms; binary-trees depth 18, 1 and 2 processes, median of 3, ms;
 * alloc_bench young ns per 64- and 256-byte allocation, then the same
 * process's shared heapd_alloc of 16 bytes):
 *
 *   budget | GCBench                 | binary-trees | alloc young | shared
 *   4 MiB  | 184 / 24 / 4 / 2.0 (1)  |  756 / 505   |  6.9 / 11.8 |
 *   8 MiB  | 168 / 19 / 4 / 0.11     |  701 / 449   |  7.9 / 15.0 | 10.5
 *   16 MiB | 163 / 14 / 6 / 0.18     |  693 / 470   |  7.8 / 16.9 | 19.1
 *   32 MiB | 189 / 10 / 4 / 0.11     |  662 / 549   |  9.2 / 15.6 |
 *   (1) a collection that outlasted its budget, ended in one pause
 *
 * 16 MiB runs GCBench faster (fewer collections that find a tree half
 * built, which C locals hold and which is traced at each one; 8 against
 * 16 MiB interleaved: 169.5 against 159.9 ms), but a nursery costs the
 * other mutators of its process while its own is blocked: heapd scans
 * every young block of a blocked young mutator at each cycle (Note [The
 * daemon's preparatory push] in daemon/gc/mark.c), and alloc_bench's
 * shared 16-byte allocations, beside a blocked young mutator, take 10.5
 * ns at 8 MiB and 19.1 at 16; two processes of binary-trees and 256-byte
 * young allocations are slower at 16 MiB too; at 32 MiB everything slows
 * down, the programs' reads of their trees too.  Age 2: age 1 promoted
 * GCBench's trees under construction, age 3 traced survivors once more.
 * Growth without a bound: binary-trees, whose trees only C locals hold
 * while they are built, took 757 ms of minor collections at a fixed 1
 * MiB and 263 ms with it.
 */
static struct young_seg *seg_at(const struct young_gen *y, uint32_t idx)
{
    uint32_t k = idx < y->heap_segs ? y->segmap[idx] : 0;
    return k ? &y->segs[k - 1] : NULL;
}

bool young_tracks(const heapd_mutator *m, uint32_t idx)
{
    return m->young_flags && seg_at(&m->young, idx) != NULL;
}

bool young_leave_segment(heapd_mutator *m, uint32_t idx)
{
    struct young_gen *y = &m->young;
    struct young_seg *s = m->young_flags ? seg_at(y, idx) : NULL;
    if (!s)
        return true;
    /* Note [Young segments]: one without a young block goes as it is
     * left, unless a collection is under way, whose sweep walks segs */
    if (y->phase != YOUNG_IDLE ||
        (m->young_flags & MUTATOR_YOUNG_PROMOTING) || !minor_no_young(s))
        return false;
    untrack(m, s);
    publish_held(m);
    return true;
}

static int64_t spare_find(const struct young_gen *y, unsigned cls,
                          uint32_t idx);

bool young_seg_view(const heapd_mutator *m, uint32_t idx,
                    struct alloc_seg *out)
{
    if (!m->young_flags)
        return false;
    const struct young_seg *s = seg_at(&m->young, idx);
    if (s) {
        alloc_seg_view(m->c, idx, s->cls, out);
        return true;
    }
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++) {
        if (spare_find(&m->young, k, idx) >= 0) {
            alloc_seg_view(m->c, idx, k, out);
            return true;
        }
    }
    return false;
}

void young_took_shared(heapd_mutator *m, unsigned cls)
{
    struct young_gen *y = &m->young;
    struct young_seg *s = seg_at(y, m->cur[cls].index);
    if (!s)
        return;
    s->mixed = true;
    /* Note [Sizing the nursery]: as many as the young bytes that would
     * bring the next pause bring it */
    y->shared_since += s->block_size;
    if (y->shared_since >= y->shared_due &&
        m->fast.young_next_minor > m->fast.young_bytes)
        m->fast.young_next_minor = m->fast.young_bytes;
}

static size_t tracked_blocks(const struct young_gen *y)
{
    size_t n = 0;
    for (uint32_t i = 0; i < y->nsegs; i++)
        n += y->segs[i].nblocks;
    return n;
}

int young_track(heapd_mutator *m, uint32_t idx, unsigned cls)
{
    struct young_gen *y = &m->young;
    heapd_client *c = m->c;
    struct young_seg *s = seg_at(y, idx);
    if (s) {
        assert(s->cls == cls);
        return 0;
    }
    if (y->nsegs == y->capsegs) {
        uint32_t cap = y->capsegs ? 2 * y->capsegs : 16;
        struct young_seg *v = realloc(y->segs, cap * sizeof *v);
        if (!v)
            goto nomem;
        y->segs = v;
        y->capsegs = cap;
    }
    uint32_t nblocks = c->small_nblocks[cls];
    size_t want = 2 * (tracked_blocks(y) + nblocks) + 2;
    if (want > y->capwork) {
        size_t cap = want + want / 2;
        uintptr_t *w = realloc(y->work, cap * sizeof *w);
        if (!w)
            goto nomem;
        /* the promotions' items stay at the top (promote_one) */
        memmove(w + cap - y->nforce, w + y->capwork - y->nforce,
                y->nforce * sizeof *w);
        y->work = w;
        y->capwork = cap;
    }
    /* the live bits, then the held bits */
    uint64_t *live = calloc(2 * ((nblocks + 63) / 64), sizeof *live);
    if (!live)
        goto nomem;
    uint8_t *seg = client_seg_addr(c, idx);
    s = &y->segs[y->nsegs++];
    memset(s, 0, sizeof *s);
    s->marks = layout_seg_marks(seg);
    s->blocks = seg + c->small_first[cls];
    s->live = live;
    s->held = live + (nblocks + 63) / 64;
    s->magic = c->small_magic[cls];
    s->index = idx;
    s->nblocks = nblocks;
    s->block_size = layout_class_size[cls];
    s->cls = (uint8_t)cls;
    s->mixed = !minor_young_only(s);
    y->segmap[idx] = y->nsegs;
    publish_held(m);
    return 0;
nomem:
    return client_set_error(-ENOMEM, "out of memory for a young segment's "
                            "bookkeeping");
}

static void reuse_drop(struct young_gen *y, struct young_seg *s)
{
    if (!s->reusable)
        return;
    uint32_t *v = y->reuse[s->cls];
    for (uint32_t i = 0; i < y->nreuse[s->cls]; i++) {
        if (v[i] == s->index) {
            v[i] = v[--y->nreuse[s->cls]];
            break;
        }
    }
    s->reusable = false;
}

/* Stop tracking S (which moves the last tracked segment into its place). */
static void untrack(heapd_mutator *m, struct young_seg *s)
{
    struct young_gen *y = &m->young;
    reuse_drop(y, s);
    free(s->live);
    y->segmap[s->index] = 0;
    struct young_seg *last = &y->segs[--y->nsegs];
    if (s != last) {
        *s = *last;
        y->segmap[s->index] = (uint32_t)(s - y->segs) + 1;
    }
}

static bool reuse_add(struct young_gen *y, struct young_seg *s)
{
    if (s->reusable)
        return true;
    unsigned k = s->cls;
    /* a list never holds more than the tracked segments */
    if (y->nreuse[k] % 16 == 0) {
        uint32_t *v = realloc(y->reuse[k], (y->nreuse[k] + 16) * sizeof *v);
        if (!v)
            return false; /* it stays tracked, only not reused */
        y->reuse[k] = v;
    }
    y->reuse[k][y->nreuse[k]++] = s->index;
    s->reusable = true;
    return true;
}

/* Spare segment IDX of M: its index in spare[CLS], or -1. */
static int64_t spare_find(const struct young_gen *y, unsigned cls,
                          uint32_t idx)
{
    for (uint32_t i = 0; i < y->nspare[cls]; i++)
        if (y->spare[cls][i] == idx)
            return i;
    return -1;
}

static void spare_remove(heapd_mutator *m, unsigned cls, uint32_t i)
{
    struct young_gen *y = &m->young;
    y->spare[cls][i] = y->spare[cls][--y->nspare[cls]];
    y->spare_bytes -= m->c->segment_size;
}

/* Keep segment IDX of CLS as a spare, if there is room in the list and
 * in the bound; false: the caller gives it back. */
static bool spare_add(heapd_mutator *m, unsigned cls, uint32_t idx,
                      uint64_t bound)
{
    struct young_gen *y = &m->young;
    /* the classes the program allocates now keep theirs: another class's
     * spares go back first (a run of 16-byte objects left the bound full
     * for 256-byte ones, whose segments then went back and came in again
     * faulted: 120 ns an allocation instead of 12) */
    for (unsigned k = 0; k < LAYOUT_NCLASSES &&
                         y->spare_bytes + m->c->segment_size > bound;
         k++) {
        if (k == cls || y->nspare[k] == 0)
            continue;
        reserve_give_back(m->c, y->spare[k], y->nspare[k], false);
        y->spare_bytes -= (uint64_t)y->nspare[k] * m->c->segment_size;
        y->nspare[k] = 0;
    }
    if (y->spare_bytes + m->c->segment_size > bound)
        return false;
    if (y->nspare[cls] == y->capspare[cls]) {
        uint32_t cap = y->capspare[cls] ? 2 * y->capspare[cls] : 8;
        uint32_t *v = realloc(y->spare[cls], cap * sizeof *v);
        if (!v)
            return false;
        y->spare[cls] = v;
        y->capspare[cls] = cap;
    }
    y->spare[cls][y->nspare[cls]++] = idx;
    y->spare_bytes += m->c->segment_size;
    return true;
}

const uint32_t *young_spares(const heapd_mutator *m, unsigned cls,
                             uint32_t *n)
{
    *n = m->young_flags ? m->young.nspare[cls] : 0;
    return m->young.spare[cls];
}

static void sweep_on_demand(heapd_mutator *m, unsigned cls);

int64_t young_reuse_take(heapd_mutator *m, unsigned cls)
{
    struct young_gen *y = &m->young;
    if (y->phase == YOUNG_SWEEP)
        sweep_on_demand(m, cls);
    if (y->nreuse[cls] > 0) {
        uint32_t idx = y->reuse[cls][--y->nreuse[cls]];
        struct young_seg *s = seg_at(y, idx);
        assert(s && s->reusable);
        s->reusable = false;
        return idx;
    }
    if (y->nspare[cls] == 0)
        return 0;
    uint32_t idx = y->spare[cls][y->nspare[cls] - 1];
    spare_remove(m, cls, y->nspare[cls] - 1);
    int rc = young_track(m, idx, cls);
    if (rc < 0) {
        reserve_give_back(m->c, &idx, 1, false);
        return rc;
    }
    return idx;
}

/* ---- telling young objects ---- */

/* The block of young segment S that address P is anywhere inside (an
 * interior pointer), or UINT32_MAX. */
static inline uint32_t block_at(const struct young_seg *s, uintptr_t p)
{
    uint64_t b = (uint64_t)(p - (uintptr_t)s->blocks);
    if (b >= (uint64_t)s->nblocks * s->block_size)
        return UINT32_MAX;
    uint32_t idx = (uint32_t)((b * s->magic) >> 32);
    if ((uint64_t)idx * s->block_size > b)
        idx--; /* the multiply may be one high off a block's start */
    return idx;
}

/* ---- the trace (Note [Minor collections]) ---- */

enum visit_mode {
    VISIT_AGE,      /* from the roots: survive, age, promote when old */
    VISIT_KEEP,     /* from C locals only: survive, never promote */
    VISIT_PUSH,     /* the preparatory push: only reach, and log */
};

/* A work item is an object pointer (8-aligned) with this bit set if its
 * fields are reached in VISIT_KEEP mode, whatever the drain's mode. */
#define ITEM_KEEP ((uintptr_t)1)

static inline bool test_set_live(struct young_seg *s, uint32_t b)
{
    uint64_t bit = (uint64_t)1 << (b & 63);
    bool was = (s->live[b >> 6] & bit) != 0;
    s->live[b >> 6] |= bit;
    return was;
}

static inline void push_work(struct young_gen *y, uintptr_t item)
{
    /* Note [Young segments]: room for every tracked block twice */
    assert(y->nwork < y->capwork);
    y->work[y->nwork++] = item;
}

/* Note [Promotion in place]: make object OBJ, of young block B of S, a
 * shared one (its header H's tag, then its mark), and count it.  What it
 * references is the caller's. */
static void promote_mark(heapd_mutator *m, struct young_seg *s, uint32_t b,
                         void *obj, uint64_t h, bool by_age)
{
    struct young_gen *y = &m->young;
    uint8_t epoch = (uint8_t)atomic_load_explicit(&m->ctl->epoch,
                                                  memory_order_relaxed);
    __atomic_store_n((uint64_t *)obj - 1,
                     layout_header_with_tag(h, barrier_on(m) ? epoch : 0),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&s->marks[b], epoch, __ATOMIC_RELEASE);
    s->mixed = true; /* Note [Sweeping a segment of young blocks only] */
    if (by_age)
        y->promoted_age += s->block_size;
    else
        y->promoted_pub += s->block_size;
    /* Note [Promotion in place]: allocated in the shared heap now */
    m->alloc_bytes += s->block_size;
    atomic_store_explicit(&m->slot->alloc_bytes, m->alloc_bytes,
                          memory_order_relaxed);
}

/* Note [Promotion in place]: object OBJ, of young block B of S, and then
 * what it references. */
static void promote_one(heapd_mutator *m, struct young_seg *s, uint32_t b,
                        void *obj, bool by_age)
{
    struct young_gen *y = &m->young;
    promote_mark(m, s, b, obj,
                 __atomic_load_n((uint64_t *)obj - 1, __ATOMIC_RELAXED),
                 by_age);
    /* its fields next, from the top of the work list (Note [Young
     * segments]: room for every tracked block twice) */
    assert(y->nwork + y->nforce < y->capwork);
    y->work[y->capwork - ++y->nforce] = (uintptr_t)obj | by_age;
    if (!(m->young_flags & MUTATOR_YOUNG_PROMOTING)) {
        mutator_set_young_flags(m,
                                m->young_flags | MUTATOR_YOUNG_PROMOTING);
        atomic_store(&m->slot->young_promoting, 1); /* before any ack */
    }
}

/* Promote what up to BUDGET promoted objects reference that is young
 * (Note [Promotion in place]); returns how many it took.  PHASE: the
 * test hook's (Note [Stopping inside a young phase]), or 0. */
static size_t promote_some(heapd_mutator *m, size_t budget,
                           enum young_phase phase)
{
    struct young_gen *y = &m->young;
    size_t done = 0;
    while (y->nforce > 0 && done < budget) {
        if (phase && done == 1)
            stop_in(phase);
        uintptr_t item = y->work[y->capwork - y->nforce--];
        void **obj = (void **)(item & ~(uintptr_t)1);
        size_t n = layout_header_nrefs(
            __atomic_load_n((uint64_t *)obj - 1, __ATOMIC_RELAXED));
        for (size_t k = 0; k < n; k++) {
            void *v = __atomic_load_n(&obj[k], __ATOMIC_RELAXED);
            struct young_seg *vs = v ? young_seg_of(m, (uintptr_t)v) : NULL;
            uint32_t vb;
            if (vs && (vb = young_block_of(vs, (uintptr_t)v)) != UINT32_MAX &&
                young_block_is_young(vs, vb))
                promote_one(m, vs, vb, v, item & 1);
        }
        done++;
    }
    if (y->nforce == 0 && (m->young_flags & MUTATOR_YOUNG_PROMOTING)) {
        mutator_set_young_flags(
            m, m->young_flags & (uint8_t)~MUTATOR_YOUNG_PROMOTING);
        atomic_store(&m->slot->young_promoting, 0);
    }
    return done;
}

void young_promote_pending(heapd_mutator *m)
{
    promote_some(m, SIZE_MAX, 0);
}

/* Reach young object OBJ (block B of S) in MODE. */
static void visit(heapd_mutator *m, struct young_seg *s, uint32_t b,
                  void *obj, enum visit_mode mode)
{
    struct young_gen *y = &m->young;
    /* allocated since the collection began, it is live already, and what
     * it references was reachable then (Note [Minor collections in
     * slices]) */
    if (test_set_live(s, b))
        return;
    if (mode == VISIT_PUSH) {
        push_work(y, (uintptr_t)obj);
        return;
    }
    if (mode == VISIT_KEEP) { /* never promoted: its age does not matter */
        y->traced += s->block_size;
        push_work(y, (uintptr_t)obj | ITEM_KEEP);
        return;
    }
    uint64_t *hp = (uint64_t *)obj - 1;
    uint64_t h = __atomic_load_n(hp, __ATOMIC_RELAXED);
    unsigned age = layout_header_tag(h) - LAYOUT_YOUNG_TAG + 1u;
    if (age >= y->age) {
        promote_one(m, s, b, obj, true);
        return;
    }
    if (age > LAYOUT_YOUNG_AGE_MAX)
        age = LAYOUT_YOUNG_AGE_MAX;
    __atomic_store_n(hp,
                     layout_header_with_tag(h, (uint8_t)(LAYOUT_YOUNG_TAG +
                                                         age)),
                     __ATOMIC_RELAXED);
    y->traced += s->block_size;
    push_work(y, (uintptr_t)obj);
}

/* Reach reference V (an object pointer) in MODE if it is young; in
 * VISIT_PUSH mode log it otherwise. */
static inline void reach(heapd_mutator *m, void *v, enum visit_mode mode)
{
    if (!v)
        return;
    struct young_seg *s = young_seg_of(m, (uintptr_t)v);
    uint32_t b;
    if (s && (b = young_block_of(s, (uintptr_t)v)) != UINT32_MAX &&
        young_block_is_young(s, b)) {
        visit(m, s, b, v, mode);
        return;
    }
    if (mode == VISIT_PUSH)
        barrier_log(m, v);
}

/* Take up to BUDGET objects off the work list and reach their fields, in
 * MODE or as the item says; returns how many it took. */
static size_t drain(heapd_mutator *m, enum visit_mode mode, size_t budget)
{
    struct young_gen *y = &m->young;
    size_t done = 0;
    while (y->nwork > 0 && done < budget) {
        uintptr_t item = y->work[--y->nwork];
        void **obj = (void **)(item & ~ITEM_KEEP);
        enum visit_mode fm = (item & ITEM_KEEP) ? VISIT_KEEP : mode;
        size_t n = layout_header_nrefs(
            __atomic_load_n((uint64_t *)obj - 1, __ATOMIC_RELAXED));
        for (size_t k = 0; k < n; k++)
            reach(m, __atomic_load_n(&obj[k], __ATOMIC_RELAXED), fm);
        done++;
    }
    return done;
}

static void clear_live(struct young_gen *y)
{
    for (uint32_t i = 0; i < y->nsegs; i++)
        memset(y->segs[i].live, 0,
               2 * young_bitmap_words(&y->segs[i]) * sizeof(uint64_t));
    y->nwork = 0;
}

/* From the root slots and the parked value (Note [Values in flight] in
 * client/barrier.c), in MODE. */
static void reach_roots(heapd_mutator *m, enum visit_mode mode,
                        enum young_phase phase)
{
    for (size_t i = 0; i < m->depth; i++) {
        if (i == m->depth / 2 && i > 0)
            stop_in(phase); /* Note [Stopping inside a young phase] */
        reach(m, atomic_load_explicit(&m->roots[i], memory_order_relaxed),
              mode);
    }
    reach(m, atomic_load(&m->slot->pending_root), mode);
}

struct stack_ctx {
    heapd_mutator *m;
    enum visit_mode mode;
    bool hold;                  /* only set held bits */
};

/* A word of the stack: whatever young block it points into is reached,
 * or held. */
static void stack_word(void *ctx, uintptr_t w)
{
    struct stack_ctx *sc = ctx;
    struct young_seg *s = young_seg_of(sc->m, w);
    uint32_t b;
    if (!s || (b = block_at(s, w)) >= s->nblocks ||
        !young_block_is_young(s, b))
        return;
    if (sc->hold)
        s->held[b >> 6] |= (uint64_t)1 << (b & 63);
    else
        visit(sc->m, s, b,
              s->blocks + (size_t)b * s->block_size + LAYOUT_WORD, sc->mode);
}

/* What the stack and registers hold: reached in MODE and drained, or
 * only held (HOLD).  Every young block if the stack cannot be scanned. */
static void reach_stack(heapd_mutator *m, enum visit_mode mode, bool hold)
{
    struct young_gen *y = &m->young;
    struct stack_ctx sc = {m, mode, hold};
    uintptr_t lo = (uintptr_t)m->c->base;
    if (stack_scan(m->stack_base, m->stack_limit, lo, lo + m->c->size,
                   stack_word, &sc) < 0) {
        for (uint32_t i = 0; i < y->nsegs; i++) {
            struct young_seg *s = &y->segs[i];
            for (uint32_t b = 0; b < s->nblocks; b++)
                if (young_block_is_young(s, b))
                    stack_word(&sc, (uintptr_t)(s->blocks + (size_t)b *
                                                s->block_size));
            if (!hold)
                drain(m, mode, SIZE_MAX);
        }
    }
    if (!hold)
        drain(m, mode, SIZE_MAX);
}

/* ---- minor collections ---- */

static void record_pause(struct young_gen *y, uint64_t ns)
{
    y->pauses++;
    y->pause_total += ns;
    if (ns > y->pause_max)
        y->pause_max = ns;
    /* 4 buckets per power of two: bucket 4*log2(ns) + the next 2 bits */
    unsigned b = 0;
    if (ns >= 4) {
        unsigned lg = 63u - (unsigned)__builtin_clzll(ns);
        b = 4 * lg + (unsigned)((ns >> (lg - 2)) & 3);
    }
    y->hist[b < YOUNG_HIST ? b : YOUNG_HIST - 1]++;
}

/* Note [Minor collections in slices]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A minor collection is cut into pauses of about SLICE_NS each, taken in
 * heapd_alloc (a safepoint) every slice_bytes of young allocation (a
 * 256th of the budget), so that a program holding a large young
 * structure is not stopped for the whole trace of it.  Its phases
 * (y->phase):
 *
 *   phase  entered by                 a slice does             left when
 *   IDLE   the end; attach            -                        the budget
 *                                                              is spent
 *   MARK   the start: live and held   promotions under way,    all three
 *          bits cleared, free blocks  then the work list, then done
 *          of allocatable segments    the held blocks nothing
 *          live, root slots reached,  reached, in KEEP mode
 *          the stack scanned into
 *          held bits
 *   SWEEP  the mark's end             sweeps segments, 16      all swept
 *                                     times less often: the
 *                                     allocation sweeps them
 *                                     on demand
 *
 * The mark is snapshot-at-the-beginning, as the major collector's (the
 * seed's Note [Snapshot write barrier], for one thread's objects): what
 * was reachable at the start survives, and so does what is allocated
 * since.  The rules that make it so:
 *   - C locals are taken at the start: the stack scan sets the held bit
 *     of every young block a stack word or register points into; they
 *     are reached after the root slots' trace, so that what a root slot
 *     also holds still ages (Note [Minor collections]);
 *   - the young barrier: while marking (MUTATOR_YOUNG_MARKING), heapd_write
 *     and heapd_cas into a young object first reach, in KEEP mode, the
 *     young object the field holds -- the program may have moved it into
 *     a C local before it cuts this path; nothing else can lose a path to
 *     a young object, for root slots are read at the start and nothing
 *     shared references one;
 *   - allocate black: while a collection is under way
 *     (MUTATOR_YOUNG_COLLECTING), heapd_alloc sets the live bit of the
 *     young block it takes, so that what is allocated before the sweep
 *     is live, and the trace does not enter it (what a new object
 *     references was reachable at the start, or is new too).  The bit is
 *     set at the allocation, not ahead of it for the blocks free at the
 *     start: heapd's sweep frees blocks of the mutator's segments
 *     (promoted objects that died) while it marks, and the young objects
 *     allocated into them were freed (young_many under ThreadSanitizer,
 *     2 runs in 15);
 *   - promotions in slices: an old object is promoted where the trace
 *     meets it, and what it references later, from the top of the work
 *     list (Note [Promotion in place]), so that between two slices a
 *     promoted object may reference a young one -- which only this
 *     mutator can reach.  MUTATOR_YOUNG_PROMOTING says so, and the
 *     promotions end first (young_promote_pending) before anything it
 *     does could show one to another process: a store into a shared
 *     object or a global, a blocking region, where heapd may read its
 *     roots, and the stack handshake after a snapshot's stop, which the
 *     mutator takes as the stop ends (young_resume).  heapd would take
 *     that handshake first more often than not, and trace a promoted
 *     object to a young one it refuses (young_slices' snapshot test: 2
 *     runs in 12, each one young reference refused and logged), so the
 *     slot's young_promoting word says so too, and heapd leaves a running
 *     mutator's handshake to it while the word is set (mark_stack in
 *     daemon/gc/mark.c; a final sync's pause takes it whatever the word,
 *     so a client that sets the word and never takes its handshake holds
 *     nothing up); any other stop may find promotions under way, and the
 *     heap verifier lets the slot whose word is set reach a young object
 *     from a promoted one (check 4 of Note [Heap verifier] in
 *     daemon/gc/verify.c: a recovery cycle refused the heap of a young
 *     client resuming after a kill, test_restart under ThreadSanitizer,
 *     about 1 run in 7);
 *   - a lazy sweep, as Boehm's: the allocation's slow path, needing a
 *     segment of a class, sweeps up to SWEEP_ON_DEMAND segments for one
 *     with room (a few microseconds each, its own marks it then reads,
 *     not counted as a pause); slices sweep what it leaves;
 *   - the preparatory push, a detach and a surrender end the promotions
 *     and give the rest of the collection up (its live bits become the
 *     push's; it freed nothing it should not have; what it aged is only
 *     older); a collection still going after a whole budget ends in the
 *     next pause, and so does one when heapd refuses a segment (Note
 *     [Minor collections before a wait]).
 * Measured on GCBench young (8 MiB nursery, release build): in one pause
 * per collection the longest took 2.45 ms and p99 was 2.62 ms (a tree
 * half built traced whole; an 8 MiB sweep alone about 120 us); in slices
 * of 50 us the longest pause is 0.09-0.26 ms and p99 57-98 us.  What the
 * slices cost the run is within this machine's noise in some hours and
 * up to 9 % in others (the same binary, one pause against slices, 9 runs
 * interleaved: 148.0 against 150.7 ms; against the build before, 156.2
 * against 154.2 ms, and 155.1 against 169.5 in a noisier hour): memory
 * allocated while a collection is under way is not reused before it
 * ends, and each slice leaves the mutator's data out of the cache.  The
 * lazy sweep took GCBench (16 MiB) from 269-313 pauses to 160-179,
 * 166.4 -> 162.9 ms.
 */

/* Slices of the sweep come this many times further apart than the
 * mark's. */
#define SWEEP_SPACING 16
/* A slice's length: it stops at its first check past this (a chunk of
 * CHUNK objects, or a segment swept, a few microseconds each). */
#define SLICE_NS 50000u
#define CHUNK 256u

/* At most this many chunks in a slice: no bound in a release build; in
 * a debug build what HEAPD_YOUNG_SLICE says (a test hook: 1 cuts a
 * collection into as many slices as it has chunks). */
static size_t slice_chunks(void)
{
#ifndef NDEBUG
    static _Atomic size_t want;
    size_t w = atomic_load_explicit(&want, memory_order_relaxed);
    if (w == 0) {
        const char *e = getenv("HEAPD_YOUNG_SLICE");
        w = e && atoll(e) > 0 ? (size_t)atoll(e) : SIZE_MAX;
        atomic_store(&want, w);
    }
    return w;
#else
    return SIZE_MAX;
#endif
}

/* Enter phase PH, with the flags that say so to the allocation and the
 * barriers. */
static void set_phase(heapd_mutator *m, enum young_phase_state ph)
{
    uint8_t f = m->young_flags & (uint8_t)~(MUTATOR_YOUNG_MARKING |
                                            MUTATOR_YOUNG_COLLECTING);
    if (ph == YOUNG_MARK)
        f |= MUTATOR_YOUNG_MARKING;
    if (ph != YOUNG_IDLE)
        f |= MUTATOR_YOUNG_COLLECTING;
    mutator_set_young_flags(m, f);
    m->young.phase = ph;
}

void *young_allocated_black(heapd_mutator *m, unsigned cls, void *obj)
{
    const struct alloc_seg *a = &m->cur[cls];
    struct young_seg *s = seg_at(&m->young, a->index);
    uint32_t b = a->cursor - 1;
    /* Note [Young segments]: a current segment is tracked */
    assert(s && b < s->nblocks &&
           __atomic_load_n(&s->marks[b], __ATOMIC_RELAXED) ==
               LAYOUT_MARK_YOUNG);
    s->live[b >> 6] |= (uint64_t)1 << (b & 63);
    return obj;
}

/* The start (Note [Minor collections in slices]). */
static void cycle_start(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    y->cycle_at = m->fast.young_bytes;
    y->traced = 0;
    y->at_seg = 0;
    clear_live(y);
    set_phase(m, YOUNG_MARK);
    reach_roots(m, VISIT_AGE, PHASE_MINOR);
    reach_stack(m, VISIT_KEEP, true);
}

/* The held bits of the next segment: its blocks that nothing has reached
 * yet, in KEEP mode (what they reach is left on the work list).  False
 * once every segment was seen. */
static bool reach_held(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    if (y->at_seg >= y->nsegs)
        return false;
    struct young_seg *s = &y->segs[y->at_seg++];
    for (uint32_t w = 0; w < young_bitmap_words(s); w++) {
        for (uint64_t p = s->held[w] & ~s->live[w]; p; p &= p - 1) {
            uint32_t b = w * 64 + (uint32_t)__builtin_ctzll(p);
            if (b < s->nblocks && young_block_is_young(s, b))
                visit(m, s, b,
                      s->blocks + (size_t)b * s->block_size + LAYOUT_WORD,
                      VISIT_KEEP);
        }
    }
    return true;
}

/* Sweep the next segment, and put it where it belongs (Note [Young
 * segments]); returns the blocks it looked at. */
static uint32_t sweep_next(heapd_mutator *m, uint8_t poison)
{
    struct young_gen *y = &m->young;
    heapd_client *c = m->c;
    struct young_seg *s = &y->segs[y->at_seg];
    uint32_t n = s->nblocks;
    uint32_t free_blocks = minor_sweep_seg(s, poison);
    if (m->cur[s->cls].index == s->index) {
        /* its holes are the next blocks (Note [Free runs] in
         * client/alloc.c) */
        m->cur[s->cls].cursor = 0;
        m->cur[s->cls].limit = 0;
    } else if (s->young == 0) {
        uint32_t idx = s->index;
        unsigned cls = s->cls;
        bool room = free_blocks * REUSE_SHARE >= s->nblocks;
        untrack(m, s); /* moves the last one here: look at it next */
        /* spares for what a nursery allocates (Note [Young segments]) */
        if (!room || !spare_add(m, cls, idx, SPARE_BUDGETS * y->budget))
            reserve_give_back(c, &idx, 1, false);
        return n;
    } else if (free_blocks * REUSE_SHARE >= s->nblocks) {
        reuse_add(y, s);
    } else {
        reuse_drop(y, s);
    }
    y->at_seg++;
    return n;
}

static void cycle_end(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    set_phase(m, YOUNG_IDLE);
    y->minor++;
    y->survived = y->traced;
    /* Note [Sizing the nursery] */
    uint64_t grown = y->survived * YOUNG_GROWTH;
    y->minor_at = m->fast.young_bytes;
    m->fast.young_next_minor =
        m->fast.young_bytes + (grown > y->budget ? grown : y->budget);
}

/* Segments the allocation's slow path sweeps, at most, looking for one
 * with room for its class (Note [Minor collections in slices]). */
#define SWEEP_ON_DEMAND 4

static void sweep_on_demand(heapd_mutator *m, unsigned cls)
{
    struct young_gen *y = &m->young;
    uint8_t poison = (uint8_t)atomic_load_explicit(&m->ctl->poison,
                                                   memory_order_relaxed);
    for (int k = 0; k < SWEEP_ON_DEMAND && y->nreuse[cls] == 0 &&
                    y->at_seg < y->nsegs;
         k++)
        sweep_next(m, poison);
    if (y->at_seg >= y->nsegs) {
        cycle_end(m);
        publish_stats(m);
    }
}

/* Work of the collection under way, until the clock passes DEADLINE
 * (or for CHUNKS chunks). */
static void cycle_work(heapd_mutator *m, uint64_t deadline, size_t chunks)
{
    struct young_gen *y = &m->young;
    uint8_t poison = (uint8_t)atomic_load_explicit(&m->ctl->poison,
                                                   memory_order_relaxed);
    for (size_t n = 0; n < chunks && y->phase != YOUNG_IDLE; n++) {
        if (n > 0 && monotonic_ns() >= deadline)
            break;
        if (y->phase == YOUNG_SWEEP) {
            if (y->at_seg < y->nsegs)
                sweep_next(m, poison);
            else
                cycle_end(m);
        } else if (y->nforce > 0) {
            promote_some(m, CHUNK, 0);
        } else if (y->nwork > 0) {
            drain(m, VISIT_AGE, CHUNK);
        } else if (!reach_held(m)) {
            set_phase(m, YOUNG_SWEEP);
            y->at_seg = 0;
        }
    }
}

/* Give up the collection under way (Note [Minor collections in slices]):
 * the next allocation starts another. */
static void cycle_abandon(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    if (y->phase == YOUNG_IDLE)
        return;
    young_promote_pending(m);
    y->nwork = 0;
    set_phase(m, YOUNG_IDLE);
    m->fast.young_next_minor = m->fast.young_bytes;
}

/* A pause: start a collection if none is under way, and do a slice of
 * it, or all of it (ALL). */
static void young_pause(heapd_mutator *m, bool all)
{
    struct young_gen *y = &m->young;
    uint64_t t0 = monotonic_ns();
    if (y->phase == YOUNG_IDLE)
        cycle_start(m);
    /* one that has taken a whole budget ends now: what was allocated
     * since it began is not reused before it ends */
    if (m->fast.young_bytes - y->cycle_at >= y->budget)
        all = true;
    if (all)
        cycle_work(m, UINT64_MAX, SIZE_MAX);
    else
        cycle_work(m, t0 + SLICE_NS, slice_chunks());
    /* the sweep is mostly the allocation's, on demand: its slices come
     * less often */
    if (y->phase != YOUNG_IDLE)
        m->fast.young_next_minor =
            m->fast.young_bytes + (y->phase == YOUNG_SWEEP
                                       ? SWEEP_SPACING * y->slice_bytes
                                       : y->slice_bytes);
    /* Note [Sizing the nursery] */
    y->shared_since = 0;
    y->shared_due = m->fast.young_next_minor - m->fast.young_bytes;
    record_pause(y, monotonic_ns() - t0);
    publish_stats(m);
}

void young_collect(heapd_mutator *m)
{
    young_pause(m, false);
}

void young_barrier_slow(heapd_mutator *m, void *old)
{
    struct young_seg *s = young_seg_of(m, (uintptr_t)old);
    uint32_t b;
    if (s && (b = young_block_of(s, (uintptr_t)old)) != UINT32_MAX &&
        young_block_is_young(s, b))
        visit(m, s, b, old, VISIT_KEEP);
}

/* Note [Minor collections before a wait]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A young mutator that needs a segment of a class, has none of its own
 * with room (no reuse and no spare segment of the class), finds nothing
 * it could take from the reserve without waiting for heapd, and has
 * allocated at least its budget since its last minor collection, starts
 * its next collection there (whose slices then free what died) rather
 * than at its grown budget.  Its nursery may have grown past the budget
 * (Note [Sizing the nursery]) on survivors that have died since, and a
 * wait for heapd is a wait in a blocking region: for a grant that pacing
 * holds until a cycle ends, which cannot free a young block, and whose
 * stack handshake heapd then takes, scanning every young block the
 * client has (Note [The daemon's preparatory push] in daemon/gc/mark.c).
 * The budget bounds the extra collections to one per budget allocated,
 * only while heapd is behind.  And if heapd refuses the segment
 * (max_client_bytes, max_size), the mutator ends the collection under
 * way, or runs a whole one, in one pause, and asks once more: memory a
 * collection can free never fails an allocation.  Measured on
 * binary-trees, depth 18, 2 processes: collecting nothing early, 550-566
 * ms; a whole collection in one pause, 486-487 ms (in slices since,
 * 415-430 ms, with pauses up to 6 ms); starting one, 436-471 ms, pauses
 * up to 0.2 ms but for collections that outlast their budget.
 */
void young_collect_early(heapd_mutator *m, unsigned cls)
{
    struct young_gen *y = &m->young;
    if (y->phase == YOUNG_IDLE &&
        m->fast.young_bytes - y->minor_at >= y->budget &&
        !reserve_ready(m->c, cls))
        young_pause(m, false);
}

bool young_collect_all(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    if (y->phase == YOUNG_IDLE && m->fast.young_bytes == y->minor_at)
        return false; /* the last one found what there is */
    young_pause(m, true);
    return true;
}

/* ---- publication (Note [The young invariant]) ---- */

/* Note [Publishing a leaf]
 * ~~~~~~~~~~~~~~~~~~~~~~~~
 * A young object with no reference field reaches nothing young, so its
 * publication is its own promotion and nothing else: the header and the
 * mark (promote_mark), its bytes counted, and the two counters that moved
 * (promoted, allocated) stored in the slot.  No promotion is ever under
 * way because of it, so it neither queues work nor raises
 * MUTATOR_YOUNG_PROMOTING and the slot's young_promoting word (two
 * sequentially consistent stores, which tell heapd to leave the stack
 * handshake to this mutator: Note [Minor collections in slices]);
 * promotions a collection left under way are ended first, as for any
 * publication.  Strings are leaves: the shared map publishes one per
 * update, and its young run took 587 ms against 568 ms this way (5
 * million operations, 3 runs each; young off 553-562 ms).
 */

void *young_publish(heapd_mutator *m, void *r)
{
    /* heapd_global_set and heapd_global_once call it for every mutator:
     * one without a young generation has no segment map to look in */
    if (!m->young_flags)
        return r;
    /* Note [Minor collections in slices]: before anything is stored
     * where others see it */
    if ((m->young_flags & MUTATOR_YOUNG_PROMOTING))
        young_promote_pending(m);
    struct young_seg *s = young_seg_of(m, (uintptr_t)r);
    uint32_t b;
    if (!s || (b = young_block_of(s, (uintptr_t)r)) == UINT32_MAX ||
        !young_block_is_young(s, b))
        return r;
    /* Note [A dead daemon], Note [Clients and fork]: the segments are not
     * this mutator's to change any more; the young reference is stored as
     * it is, and a heapd that meets it refuses it */
    if (mutator_orphaned(m))
        return r;
    /* Note [Publishing a leaf] */
    uint64_t h = __atomic_load_n((uint64_t *)r - 1, __ATOMIC_RELAXED);
    if (layout_header_nrefs(h) == 0) {
        promote_mark(m, s, b, r, h, false);
        atomic_store_explicit(&m->slot->young_promoted_pub,
                              m->young.promoted_pub, memory_order_relaxed);
        return r;
    }
    /* with the promotions of a collection under way: R may reach them */
    promote_one(m, s, b, r, false);
    promote_some(m, SIZE_MAX, PHASE_PUBLISH);
    publish_stats(m);
    return r;
}

/* ---- the preparatory push ---- */

/* Note [The preparatory push]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * (GHC's Note [Aging under the non-moving collector], for processes.)
 * While the daemon marks, an old object C may be reachable at the
 * snapshot only through young objects of some mutator, which the marker
 * never follows.  So the stack handshake of a young mutator (Note [Stack
 * marking handshake] in client/barrier.c) is also the preparatory push:
 *   - the mutator itself traces its young objects from its roots and its
 *     C locals (the same trace as a minor collection's, without aging,
 *     promoting or freeing) and logs every shared reference they and its
 *     roots hold;
 *   - the daemon, when it takes the handshake from a mutator that is
 *     blocked, stopped or dead, cannot see its C locals, so it treats
 *     every young block of the client as live and marks what each
 *     references (Note [Scanning young blocks] in proto/young.h).
 * Two rules make that enough:
 *   - a young mutator takes its handshake before it changes any young
 *     object or its root stack after a snapshot: on the way out of the
 *     snapshot's stop, and out of a blocking region that a snapshot
 *     passed (young_resume), and at attach; so its young objects are as
 *     they were at the snapshot when they are traced, and every shared
 *     reference stored into one later was reachable at the snapshot or is
 *     black;
 *   - young blocks are in the heap, which the daemon maps, so a mutator
 *     blocked through a whole cycle, stopped by a signal right after a
 *     snapshot, or dead, never holds up marking.
 * Objects promoted while marking are black (Note [Promotion in place]),
 * so the marker needs nothing from them.
 */
bool young_push_roots(heapd_mutator *m)
{
    struct young_gen *y = &m->young;
    if (!m->young_flags)
        return false;
    cycle_abandon(m); /* Note [Minor collections in slices] */
    clear_live(y);
    reach_roots(m, VISIT_PUSH, PHASE_PUSH);
    drain(m, VISIT_PUSH, SIZE_MAX);
    reach_stack(m, VISIT_PUSH, false);
    return true;
}

void young_resume(heapd_mutator *m)
{
    if (!m->young_flags)
        return;
    /* Note [The preparatory push]: before the program runs on */
    if (barrier_stack_due(m))
        barrier_stack_slow(m);
}

bool young_surrender(heapd_mutator *m, uint32_t idx)
{
    struct young_gen *y = &m->young;
    struct young_seg *s = seg_at(y, idx);
    if (!s) {
        for (unsigned k = 0; k < LAYOUT_NCLASSES; k++) {
            int64_t i = spare_find(y, k, idx);
            if (i >= 0)
                spare_remove(m, k, (uint32_t)i);
        }
        return true;
    }
    /* promoted black, its young blocks' fields must have been pushed
     * (Note [The preparatory push]).  What only the blocked thread's C
     * locals hold may be promoted here, and a later cycle then frees it:
     * the blocking region was a safepoint, after which a C local keeps
     * no shared object (Note [Client GC discipline] in heapd.h).  Rare:
     * the daemon asks only after its mark stack overflowed. */
    if (barrier_on(m) &&
        atomic_load(&m->slot->stack_marked) != atomic_load(&m->ctl->epoch))
        return false;
    cycle_abandon(m); /* Note [Minor collections in slices] */
    for (uint32_t b = 0; b < s->nblocks; b++) {
        if (!young_block_is_young(s, b))
            continue;
        /* and what it reaches */
        promote_one(m, s, b,
                    s->blocks + (size_t)b * s->block_size + LAYOUT_WORD,
                    false);
        young_promote_pending(m);
    }
    s = seg_at(y, idx); /* reach did not untrack, but be exact */
    untrack(m, s);
    publish_stats(m);
    return true;
}

/* ---- the public calls ---- */

void *heapd_publish(heapd_mutator *m, void *obj)
{
    if (!m || !m->young_flags)
        return obj;
    mutator_check_evicted(m); /* Note [Evicted clients, client side] */
    return young_publish(m, obj);
}

bool heapd_is_young(const heapd_mutator *m, const void *obj)
{
    return m && young_is_mine(m, obj);
}

static void young_stats(const heapd_mutator *m, heapd_young_stats *out);

/* See Note [Structs that grow] in client/abi.c. */
void heapd_young_stats_get_sized(const heapd_mutator *m,
                                 heapd_young_stats *caller, size_t size)
{
    heapd_young_stats out;
    young_stats(m, &out);
    abi_out(caller, size, &out, sizeof out);
}

static void young_stats(const heapd_mutator *m, heapd_young_stats *out)
{
    const struct young_gen *y = &m->young;
    memset(out, 0, sizeof *out);
    if (!y->on)
        return;
    out->young_bytes = y->budget;
    out->young_age = y->age;
    out->minor_collections = y->minor;
    out->promoted_age_bytes = y->promoted_age;
    out->promoted_published_bytes = y->promoted_pub;
    out->minor_pause_max_ns = y->pause_max;
    out->minor_pause_total_ns = y->pause_total;
    out->minor_pauses = y->pauses;
    out->bytes_in_use = y->survived + (m->fast.young_bytes - y->minor_at);
    /* p99: the upper end of the bucket the 99th percentile falls in */
    uint64_t seen = 0, want = y->pauses - y->pauses / 100;
    for (unsigned b = 0; b < YOUNG_HIST && y->pauses; b++) {
        seen += y->hist[b];
        if (seen >= want) {
            unsigned lg = b / 4, q = b % 4;
            out->minor_pause_p99_ns =
                lg < 2 ? 4 : ((uint64_t)(4 + q + 1) << lg) / 4;
            break;
        }
    }
}
