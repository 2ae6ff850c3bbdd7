/* The heap verifier.
 *
 * Note [Heap verifier]
 * ~~~~~~~~~~~~~~~~~~~~
 * With `verify = true` in a heap's section, or HEAPD_VERIFY=1 in heapd's
 * environment, the collector checks the heap in every cycle, inside the
 * pauses (check 1 at the end of the final sync, when marking is complete;
 * checks 2 and 3 at the next snapshot, when the sweep is), with one thread
 * and its own visited set, independently of the marker's work:
 *   1. every object reachable from every live mutator's root stack and
 *      from every global root has a dirty tag of 0 or the epoch (Note
 *      [Dirty tags]) and is a
 *      valid reference (Note [Validating references]), has mark == epoch
 *      (it survived the sweep), is not poisoned and has a header that fits
 *      its block;
 *   2. Note [Epoch-tagged marks] holds: every non-zero mark byte of every
 *      small segment and large run equals the epoch, or is a continuation
 *      in a segment of the run class (Note [Runs]), or is young (check 4);
 *   3. every byte of every free block of a small segment is poison (freed
 *      by a sweep) or zero (never written: a segment reformatted for
 *      another class has blocks that straddle old poison and old zeroes;
 *      or punched: pages punched out of the segment are not read, Note
 *      [Purging free memory] in purge.c).  A use after free that stores a
 *      pointer or data shows up here.
 *   4. young objects (Note [Young objects] in proto/young.h) are where
 *      they may be, and referenced by whom may: a YOUNG mark only in a
 *      small segment of a class other than the run class that a client
 *      owns (OWNED), or that stays fenced for a client evicted with it
 *      (Note [Young blocks of a client gone] in segment.c) -- never in a
 *      FILLED segment otherwise, nor as a large object's mark; and a
 *      young object reachable only from a young slot's roots, through
 *      young objects, in a segment the slot's client owns -- never from a
 *      shared object, a global, or another slot's roots (Note [References
 *      to young objects] in validate.c), except a shared object the slot
 *      reaches while its young_promoting word is set: a promotion in
 *      slices under way when the mutator took the stop (Note [Minor
 *      collections in slices] in client/minor.c).  Such a young object
 *      is traced but not required to be marked (its header's tag is its
 *      age), and the shared objects it references are checked as in 1:
 *      marked, for a young mutator's handshake pushes them (Note [The
 *      preparatory push] in client/minor.c).  Free segments are not read
 *      (their pages may be punched: Note [Free memory stays free] in
 *      purge.c).
 * Each failure is logged with the path from its root ("slot 2 root 5 ->
 * 0x... -> 0x...") and counted in the stats as verify_failures; the tests
 * run with the verifier on and require zero.
 * The visited set is a hash table private to the daemon; the path is
 * rebuilt from parent links kept in it.
 */
#include "verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "log.h"
#include "sweep.h"
#include "validate.h"

#define MAX_LOGGED 20
#define NO_ROOT UINT32_MAX /* a failure found by scanning segment `root` */
#define GLOBAL_ROOT (UINT32_MAX - 1) /* reached from global `root` */

struct visit {
    uintptr_t obj;      /* 0: empty */
    uintptr_t parent;   /* 0: a root */
    uint32_t slot, root;
    bool young;         /* a young object of SLOT's client (check 4) */
};

struct verifier {
    struct heap *h;
    uint8_t epoch;
    struct visit *tab;
    size_t cap, n;
    uintptr_t *stack;
    size_t sn, scap;
    uint64_t failures;
    bool oom;
};

static size_t hash(uintptr_t p, size_t cap)
{
    return (size_t)((p >> 3) * 0x9e3779b97f4a7c15ull) & (cap - 1);
}

static struct visit *find(struct verifier *v, uintptr_t obj)
{
    size_t i = hash(obj, v->cap);
    while (v->tab[i].obj && v->tab[i].obj != obj)
        i = (i + 1) & (v->cap - 1);
    return &v->tab[i];
}

/* The table starts at 4096 entries (128 KiB) and doubles: starting at
 * 65536 (2 MiB, zeroed and faulted in on every pass, and by
 * verify_segments, which never uses it) was most of the time of an
 * execution of fuzz/fuzz_shared.c, whose heaps hold a few hundred
 * objects (perf). */
static bool grow(struct verifier *v)
{
    size_t cap = v->cap ? v->cap * 2 : 1 << 12;
    struct visit *old = v->tab;
    size_t oldcap = v->cap;
    v->tab = calloc(cap, sizeof *v->tab);
    if (!v->tab) {
        v->tab = old;
        return false;
    }
    v->cap = cap;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].obj)
            *find(v, old[i].obj) = old[i];
    free(old);
    return true;
}

/* Log a failure at OBJ with its path from a root. */
static void fail(struct verifier *v, uintptr_t obj, uintptr_t parent,
                 uint32_t slot, uint32_t root, const char *what)
{
    char path[512];
    size_t len = 0;
    int hops = 0;

    if (v->failures++ >= MAX_LOGGED)
        return;
    len += (size_t)snprintf(path, sizeof path, "0x%lx", (unsigned long)obj);
    for (uintptr_t p = parent; p && hops < 8 && len < sizeof path - 40;
         hops++) {
        struct visit *e = find(v, p);
        len += (size_t)snprintf(path + len, sizeof path - len, " <- 0x%lx",
                                (unsigned long)p);
        slot = e->slot;
        root = e->root;
        p = e->parent;
    }
    if (slot == NO_ROOT)
        log_error("heap '%s': verify: %s: segment %u: %s", v->h->cfg->name,
                  what, root, path);
    else if (slot == GLOBAL_ROOT)
        log_error("heap '%s': verify: %s: global '%.63s': %s",
                  v->h->cfg->name, what, v->h->control->globals[root].name,
                  path);
    else
        log_error("heap '%s': verify: %s: mutator slot %u root %u: %s",
                  v->h->cfg->name, what, slot, root, path);
}

/* Check 4: may young object OBJ be reached from PARENT (0: a root of
 * SLOT, or of GLOBAL_ROOT)?  Only from a young slot's roots, or a young
 * object they reach, and in a segment the slot's client owns. */
static const char *young_refused(struct verifier *v, uintptr_t obj,
                                 uintptr_t parent, uint32_t slot)
{
    const struct heap *h = v->h;
    /* a promotion under way: Note [Minor collections in slices] in
     * client/minor.c */
    if (parent && !find(v, parent)->young &&
        !(slot < LAYOUT_MAX_MUTATORS &&
          atomic_load(&heap_slot(h, slot)->young_promoting)))
        return "a shared object's field references a young object";
    if (slot == GLOBAL_ROOT)
        return "a global references a young object";
    uint32_t i = (uint32_t)((obj - (uintptr_t)h->base) >> h->seg_shift);
    if (h->owners[slot].young_bytes == 0 ||
        h->segs.segs[i].state != SEG_OWNED ||
        h->segs.segs[i].owner != atomic_load(&h->owners[slot].client_id))
        return parent ? "a young object references another client's young "
                        "object"
                      : "a root references a young object not its own "
                        "mutator's";
    return NULL;
}

static void visit(struct verifier *v, uintptr_t obj, uintptr_t parent,
                  uint32_t slot, uint32_t root)
{
    struct valid_ref ref;
    bool shared = validate_ref(v->h, obj, &ref);
    if (!shared && !ref.young) {
        fail(v, obj, parent, slot, root,
             "reachable reference is not an allocated object");
        return;
    }
    const char *why = shared ? NULL : young_refused(v, obj, parent, slot);
    if (why) { /* check 4 */
        fail(v, obj, parent, slot, root, why);
        return;
    }
    if ((v->n + 1) * 2 > v->cap && !grow(v)) {
        v->oom = true;
        return;
    }
    struct visit *e = find(v, obj);
    if (e->obj)
        return;
    *e = (struct visit){obj, parent, slot, root, !shared};
    v->n++;
    if (shared && *ref.mark != v->epoch)
        fail(v, obj, parent, slot, root, "reachable object is not marked");
    uint64_t hdr = *(uint64_t *)(obj - LAYOUT_WORD);
    uint8_t tag = layout_header_tag(hdr);
    if (hdr == 0xdbdbdbdbdbdbdbdbull)
        fail(v, obj, parent, slot, root, "reachable object is poisoned");
    else if (validate_header(&ref) == 0)
        fail(v, obj, parent, slot, root, "object header exceeds its block");
    else if (shared && tag != 0 && tag != v->epoch)
        /* Note [Dirty tags]: marking scanned it, so no stale tag is left */
        fail(v, obj, parent, slot, root, "reachable object keeps a stale "
                                         "dirty tag");
    if (v->sn == v->scap) {
        size_t cap = v->scap ? v->scap * 2 : 4096;
        uintptr_t *s = realloc(v->stack, cap * sizeof *s);
        if (!s) {
            v->oom = true;
            return;
        }
        v->stack = s;
        v->scap = cap;
    }
    v->stack[v->sn++] = obj;
}

static void trace(struct verifier *v)
{
    while (v->sn > 0 && !v->oom) {
        uintptr_t obj = v->stack[--v->sn];
        struct valid_ref ref;
        if (!validate_ref(v->h, obj, &ref) && !ref.young)
            continue; /* freed meanwhile: nothing runs in the pause */
        uint64_t hdr = validate_header(&ref);
        if (hdr == 0)
            continue;
        struct visit *self = find(v, obj);
        uint32_t slot = self->slot, root = self->root;
        void **f = (void **)obj;
        for (size_t k = 0; k < layout_header_nrefs(hdr); k++)
            if (f[k])
                visit(v, (uintptr_t)f[k], obj, slot, root);
    }
}

static void check_roots(struct verifier *v)
{
    struct heap *h = v->h;
    for (uint32_t i = 0; i < LAYOUT_MAX_GLOBALS; i++) {
        uint32_t st = h->globals[i].state; /* the daemon's record */
        void *val = atomic_load(&h->control->global_values[i]);
        if ((st == LAYOUT_GLOBAL_SET || st == LAYOUT_GLOBAL_INITIALIZING) &&
            val) {
            visit(v, (uintptr_t)val, 0, GLOBAL_ROOT, i);
            trace(v);
        }
    }
    for (uint32_t i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        struct layout_mutator *m = heap_slot(h, i);
        if (!heap_slot_attached(h, i))
            continue;
        uint64_t depth = m->root_depth;
        void *_Atomic *roots = layout_mutator_roots(m);
        if (m->pending_root)
            visit(v, (uintptr_t)m->pending_root, 0, i, UINT32_MAX - 2);
        trace(v);
        /* a deeper stack is a fault the marker reports (Note [Client
         * control memory]) */
        if (depth > LAYOUT_MAX_ROOTS)
            depth = LAYOUT_MAX_ROOTS;
        for (uint64_t r = 0; r < depth; r++) {
            void *p = atomic_load_explicit(&roots[r], memory_order_relaxed);
            if (p)
                visit(v, (uintptr_t)p, 0, i, (uint32_t)r);
            trace(v);
        }
    }
}

/* Is every byte of the free block at OFF (BS bytes) of segment I poison
 * or zero?  Pages punched out of the segment are not read: they read as
 * zero, and reading them would commit them again (Note [Purging free
 * memory] in purge.c). */
static bool free_block_clean(const struct heap *h, uint32_t i, uint64_t off,
                             uint32_t bs)
{
    const struct segtab *t = &h->segs;
    const uint8_t *seg = heap_seg_addr(h, i);
    uint64_t page = (uint64_t)1 << t->page_shift;
    for (uint64_t o = off; o < off + bs;) {
        uint64_t next = (o | (page - 1)) + 1;
        uint64_t end = next < off + bs ? next : off + bs;
        if (!seg_page_purged(t, i, (uint32_t)(o >> t->page_shift)))
            for (uint64_t k = o; k < end; k++)
                if (seg[k] != 0 && seg[k] != SWEEP_POISON)
                    return false;
        o = end;
    }
    return true;
}

static void check_segments(struct verifier *v)
{
    struct heap *h = v->h;
    const struct segtab *t = &h->segs;
    for (uint32_t i = t->first; i < t->high; i++) {
        uint8_t st = t->segs[i].state;
        uint8_t *seg = heap_seg_addr(h, i);
        uint8_t *marks = layout_seg_marks(seg);
        if (st == SEG_LARGE) {
            if (marks[0] == LAYOUT_MARK_YOUNG) /* check 4 */
                fail(v, (uintptr_t)(seg + LAYOUT_LARGE_OBJECT + 8), 0,
                     NO_ROOT, i, "a large object is young");
            else if (marks[0] != 0 && marks[0] != v->epoch)
                fail(v, (uintptr_t)(seg + LAYOUT_LARGE_OBJECT + 8), 0,
                     NO_ROOT, i,
                     "large object survived a sweep with a stale mark");
            continue;
        }
        if (st != SEG_OWNED && st != SEG_FILLED)
            continue;
        uint8_t cls = seg_class(h, i);
        if (cls >= LAYOUT_NCLASSES || t->small_nblocks[cls] == 0)
            continue;
        uint32_t bs = layout_class_size[cls], n = t->small_nblocks[cls];
        uint8_t *blocks = seg + t->small_first[cls];
        /* check 4: young blocks where a live client allocates, or kept
         * by a fence */
        const char *young_bad =
            cls == LAYOUT_CLASS_RUN ? "a run object is young"
            : st == SEG_OWNED || seg_fenced(t, i)
                ? NULL
                : "a young block is in a segment no client owns";
        for (uint32_t b = 0; b < n; b++) {
            uintptr_t obj = (uintptr_t)(blocks + (size_t)b * bs + 8);
            if (marks[b] == v->epoch || marks[b] == LAYOUT_MARK_YOUNG) {
                if (marks[b] == LAYOUT_MARK_YOUNG && young_bad)
                    fail(v, obj, 0, NO_ROOT, i, young_bad);
                /* and its continuations: Note [Runs] */
                b += (uint32_t)(layout_block_span(marks, b, n, cls) / bs) -
                     1;
            } else if (marks[b] != 0 && (cls != LAYOUT_CLASS_RUN ||
                                       marks[b] != LAYOUT_MARK_CONT))
                /* a continuation that follows no object is a client's,
                 * left to the segment's next life (Note [Runs]) */
                fail(v, obj, 0, NO_ROOT, i, "block survived a sweep with a "
                                            "stale mark");
            else if (h->poison &&
                     !free_block_clean(h, i,
                                       t->small_first[cls] + (uint64_t)b * bs,
                                       bs))
                fail(v, obj, 0, NO_ROOT, i, "free block was written after it "
                                            "was freed");
        }
    }
}

static uint64_t finish(struct verifier *v, const char *what)
{
    if (v->oom)
        log_error("heap '%s': verify: out of memory; the check is partial",
                  v->h->cfg->name);
    if (v->failures > MAX_LOGGED)
        log_error("heap '%s': verify: %llu more failures not logged",
                  v->h->cfg->name,
                  (unsigned long long)(v->failures - MAX_LOGGED));
    log_debug("heap '%s': verify %s: %zu reachable objects checked, %llu "
              "failures", v->h->cfg->name, what, v->n,
              (unsigned long long)v->failures);
    free(v->tab);
    free(v->stack);
    return v->failures;
}

uint64_t verify_reachable(struct heap *h, uint8_t epoch)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct verifier v = {.h = h, .epoch = epoch};
    if (!grow(&v)) {
        log_error("heap '%s': verify: out of memory", h->cfg->name);
        return 0;
    }
    check_roots(&v);
    return finish(&v, "reachable");
}

uint64_t verify_segments(struct heap *h, uint8_t epoch)
{
    ASSERT_LOCK_HELD(&h->lock);
    /* no table: its failures name no path (fail with no parent) */
    struct verifier v = {.h = h, .epoch = epoch};
    check_segments(&v);
    return finish(&v, "segments");
}
