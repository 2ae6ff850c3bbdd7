/* The daemon's side of young objects (Note [Young objects] in
 * proto/young.h), in process: the collector's own code runs on a heap
 * table built by seg_init and table_create over anonymous memory, as in
 * test_sweep.c, and the test plays the clients -- it writes LAYOUT_MARK_YOUNG
 * into the mark bytes of blocks of segments a client owns, as a young
 * mutator allocating would -- and the loop thread (grants, returns,
 * departures, under heap->lock).  So it needs nothing of libheapd's young
 * side.  Marking runs mark_roots and mark_drain on the test's thread. */
#include <check.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "grant.h"
#include "heap.h"
#include "kept.h"
#include "layout.h"
#include "mark.h"
#include "segment.h"
#include "slotmem.h"
#include "sweep.h"
#include "table.h"
#include "validate.h"
#include "verify.h"
#include "young.h"
#include "heap_inproc.h"
#include "check_main.h"

enum { SEGS = 16, SHIFT = 17, OLD_EPOCH = 4, EPOCH = 5 };

static struct config_heap cfg;
static struct heap H;
static unsigned cls; /* the size class of the objects: two fields */
static int mem_fd = -1; /* the young client's control memory */

static void setup(void)
{
    memset(&cfg, 0, sizeof cfg);
    cfg.young_size = 2u << SHIFT;
    cfg.young_age = 2;
    cfg.mark_stack_limit = 1u << 20;
    heap_inproc_open(&H, &cfg, "young-test", SHIFT, SEGS, OLD_EPOCH);
    ck_assert_int_eq(slotmem_reserve(&H), 0);
    cls = layout_size_class((uint32_t)layout_object_size(2, 0));
    ck_assert_uint_ne(H.segs.small_nblocks[cls], 0);
    mem_fd = slotmem_create(cfg.name, 1, 4);
    ck_assert_int_ge(mem_fd, 0);
}

static void teardown(void)
{
    close(mem_fd);
    slotmem_release(&H);
    heap_inproc_close(&H, &cfg);
}

static uint8_t *marks_of(uint32_t seg)
{
    return layout_seg_marks(heap_seg_addr(&H, seg));
}

/* The first field of block B of SEG. */
static void **obj(uint32_t seg, uint32_t b)
{
    uint8_t *blocks = (uint8_t *)heap_seg_addr(&H, seg) +
                      H.segs.small_first[cls];
    return (void **)(blocks + (size_t)b * layout_class_size[cls] +
                     LAYOUT_WORD);
}

/* What a client does to allocate block B of SEG with MARK (an epoch, or
 * LAYOUT_MARK_YOUNG for a young mutator): the mark, then the object, of
 * two reference fields A and B. */
static void **allocate(uint32_t seg, uint32_t b, uint8_t mark, void *a,
                       void *f)
{
    void **o = obj(seg, b);
    __atomic_store_n(&marks_of(seg)[b], mark, __ATOMIC_RELAXED);
    memset(o - 1, 0, layout_class_size[cls]);
    ((uint64_t *)o)[-1] = layout_header(2, 0);
    o[0] = a;
    o[1] = f;
    return o;
}

/* A small segment granted to CLIENT (holding *HELD) and formatted for the
 * objects' class by it. */
static uint32_t owned_segment(uint64_t client, uint32_t *held)
{
    uint32_t seg, fmt;
    heap_lock(&H);
    ck_assert_int_eq(seg_grant_small(&H, client, held, SEGS, 1, NULL,
                                     UINT64_MAX, &seg, &fmt), 1);
    heap_unlock(&H);
    struct layout_segment *hd = heap_seg_addr(&H, seg);
    hd->size_class = cls;
    __atomic_store_n(&hd->kind, LAYOUT_SEG_SMALL, __ATOMIC_RELEASE);
    ck_assert_uint_eq(seg_class(&H, seg), cls);
    return seg;
}

/* The heap's segment for shared objects: granted to client 9, which
 * allocates OLD_EPOCH objects into it and returns it (FILLED).  Its last
 * block holds garbage of OLD_EPOCH, so that it does not come back empty
 * (Note [An empty segment comes back free] in daemon/gc/segment.c); the
 * tests allocate the rest. */
static uint32_t shared_segment(void)
{
    uint32_t held = 0, seg = owned_segment(9, &held);
    uint32_t last = H.segs.small_nblocks[cls] - 1;
    allocate(seg, last, OLD_EPOCH, NULL, NULL);
    heap_lock(&H);
    ck_assert_int_eq(seg_return(&H, 9, &held, seg), 0);
    heap_unlock(&H);
    ck_assert_uint_eq(H.segs.segs[seg].state, SEG_FILLED);
    return seg;
}

/* Attach a slot of CLIENT, young with the heap's budget if YOUNG. */
static unsigned attach(uint64_t client, uint64_t slots[2], bool young)
{
    heap_lock(&H);
    unsigned region = (unsigned)(__builtin_popcountll(slots[0]));
    int slot = grant_slot(&H, client, slots, mem_fd, region, 0,
                          young ? cfg.young_size : 0,
                          young ? cfg.young_age : 0);
    heap_unlock(&H);
    ck_assert_int_ge(slot, 0);
    return (unsigned)slot;
}

static void push_root(unsigned slot, void *ref)
{
    struct layout_mutator *m = heap_slot(&H, slot);
    void *_Atomic *roots = layout_mutator_roots(m);
    uint64_t d = atomic_load(&m->root_depth);
    atomic_store(&roots[d], ref);
    atomic_store(&m->root_depth, d + 1);
}

static void log_urs(unsigned slot, void *ref)
{
    struct layout_mutator *m = heap_slot(&H, slot);
    uint64_t head = atomic_load(&m->urs_head);
    atomic_store(&m->urs[head % LAYOUT_URS_SIZE], ref);
    atomic_store(&m->urs_head, head + 1);
}

/* Global I set to REF, a root of the next marking. */
static void set_global(unsigned i, void *ref)
{
    H.globals[i].state = LAYOUT_GLOBAL_SET;
    H.globals[i].static_flag = (uint8_t)(H.static_flag + 1);
    atomic_store(&H.control->global_values[i], ref);
}

/* A cycle's marking, as the collector runs it (Note [Collection cycle]):
 * the snapshot's new epoch, the roots, the URS rings of SLOTS, the drain;
 * the marks stay for the caller to read. */
static void mark_cycle(void)
{
    struct mark_job mj;
    atomic_store(&H.control->epoch, EPOCH);
    atomic_store(&H.control->phase, LAYOUT_PHASE_MARK);
    mark_job_init(&mj, &H, EPOCH, 1);
    heap_lock(&H);
    mark_roots(&mj);
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++)
        if (heap_slot_attached(&H, i))
            mark_urs(&H, &mj, i);
    heap_unlock(&H);
    ck_assert(mark_drain(&mj, UINT64_MAX));
    mark_job_destroy(&mj);
    atomic_store(&H.control->phase, LAYOUT_PHASE_IDLE);
}

static uint64_t refused(void)
{
    return atomic_load(&H.stats.young_refs_refused);
}

/* ---- Note [References to young objects] in daemon/gc/validate.c ---- */

/* Client 1's young object Y, referenced from everywhere but its own
 * mutator: a shared object's field, a global, another mutator's root and
 * URS entry.  Each is refused and counted, none marks Y (whose mark stays
 * YOUNG) nor follows it (what Y references stays unmarked); the shared
 * object itself is marked. */
START_TEST(references_to_a_young_object_are_refused)
{
    uint32_t held = 0, own = owned_segment(1, &held);
    uint32_t shared = shared_segment();
    void **x = allocate(shared, 0, OLD_EPOCH, NULL, NULL);
    void **y = allocate(own, 0, LAYOUT_MARK_YOUNG, x, NULL);
    void **s = allocate(shared, 1, OLD_EPOCH, y, NULL);
    set_global(0, s);
    set_global(1, y);
    uint64_t slots[2] = {0};
    unsigned other = attach(2, slots, false);
    push_root(other, y);
    log_urs(other, y);

    struct valid_ref ref;
    ck_assert(!validate_ref(&H, (uintptr_t)y, &ref));
    ck_assert(ref.young);
    ck_assert_str_eq(validate_diagnose(&H, (uintptr_t)y),
                     "a young object (its own mutator's: nothing shared may "
                     "reference one)");
    ck_assert(validate_ref(&H, (uintptr_t)s, &ref) && !ref.young);

    uint64_t before = refused();
    mark_cycle();
    ck_assert_uint_eq(marks_of(own)[0], LAYOUT_MARK_YOUNG);
    ck_assert_uint_eq(marks_of(shared)[1], EPOCH);
    ck_assert_msg(marks_of(shared)[0] == OLD_EPOCH, "what only a young "
                  "object references was marked through it (%u)",
                  marks_of(shared)[0]);
    ck_assert_uint_eq(refused() - before, 4);
    uint64_t bad = atomic_load(&H.stats.bad_refs);
    ck_assert_uint_eq(bad, 0);
}
END_TEST

/* ---- Note [The daemon's preparatory push] in daemon/gc/mark.c ---- */

/* Client 1's young objects, in a segment it owns: Y0 under a root of its
 * young slot, Y1 reached from Y0 alone, Y2 from nothing the daemon sees
 * (a C local's, say); between them they reference the shared S1 and S2,
 * client 3's young object Z, and a word that is no object.  Returns the
 * shared segment (S1 block 1, S2 block 2, S3 -- referenced by nothing --
 * block 3). */
static uint32_t young_graph(unsigned slot, uint32_t *own)
{
    uint32_t held = 0, other_held = 0;
    *own = owned_segment(1, &held);
    uint32_t theirs = owned_segment(3, &other_held);
    uint32_t shared = shared_segment();
    void **s1 = allocate(shared, 1, OLD_EPOCH, NULL, NULL);
    void **s2 = allocate(shared, 2, OLD_EPOCH, NULL, NULL);
    allocate(shared, 3, OLD_EPOCH, NULL, NULL);
    void **z = allocate(theirs, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    void **y1 = allocate(*own, 1, LAYOUT_MARK_YOUNG, s1, z);
    void **y0 = allocate(*own, 0, LAYOUT_MARK_YOUNG, y1, NULL);
    allocate(*own, 2, LAYOUT_MARK_YOUNG, s2,
             (void *)0xdbdbdbdbdbdbdbdbull);
    push_root(slot, y0);
    return shared;
}

/* The daemon takes the handshake of a young slot (its mutator blocked):
 * every young block of its client is taken as live, so S1 and S2 are
 * marked, and S3 is not; its root into its own young block is skipped,
 * Z refused, the junk word dropped, and no young mark written. */
START_TEST(the_daemons_push_marks_what_young_objects_reference)
{
    uint64_t slots[2] = {0};
    unsigned slot = attach(1, slots, true);
    uint32_t own, shared = young_graph(slot, &own);
    uint64_t before = refused();
    mark_cycle();
    ck_assert_uint_eq(atomic_load(&heap_slot(&H, slot)->stack_marked),
                      EPOCH); /* the daemon took it */
    ck_assert_msg(marks_of(shared)[1] == EPOCH && marks_of(shared)[2] ==
                      EPOCH, "what young objects reference was not marked "
                  "(S1 %u, S2 %u)", marks_of(shared)[1],
                  marks_of(shared)[2]);
    ck_assert_uint_eq(marks_of(shared)[3], OLD_EPOCH);
    for (uint32_t b = 0; b < 3; b++)
        ck_assert_uint_eq(marks_of(own)[b], LAYOUT_MARK_YOUNG);
    ck_assert_uint_eq(refused() - before, 1); /* Z, client 3's */
    uint64_t bad = atomic_load(&H.stats.bad_refs);
    ck_assert_uint_eq(bad, 0);
}
END_TEST

/* The same objects under a slot of client 1 that is not young: its root
 * into a young block is refused, and nothing is pushed for it. */
START_TEST(an_old_slot_gets_no_push)
{
    uint64_t slots[2] = {0};
    unsigned slot = attach(1, slots, false);
    uint32_t own, shared = young_graph(slot, &own);
    uint64_t before = refused();
    mark_cycle();
    ck_assert_uint_eq(marks_of(shared)[1], OLD_EPOCH);
    ck_assert_uint_eq(marks_of(shared)[2], OLD_EPOCH);
    ck_assert_uint_eq(refused() - before, 1); /* its root */
}
END_TEST

/* ---- Note [Sweeping] in daemon/gc/sweep.c ---- */

/* The sweep of the cycle of EPOCH, on the test's thread. */
static void sweep_cycle(void)
{
    struct sweep_job sj;
    atomic_store(&H.control->epoch, EPOCH);
    atomic_store(&H.control->phase, LAYOUT_PHASE_SWEEP);
    sweep_job_init(&sj, &H, EPOCH);
    sweep_worker(&sj, 0);
    heap_lock(&H);
    sweep_job_finish(&sj);
    heap_unlock(&H);
    atomic_store(&H.control->phase, LAYOUT_PHASE_IDLE);
}

/* A young block is never freed nor written by a sweep, and is in use:
 * in a segment its client owns, beside a dead block (freed) and a live
 * one; and in a FILLED segment (its client returned it with a young block
 * in it, against Note [Young objects]), which is not freed for it.  Both
 * count in segments_young. */
START_TEST(the_sweep_leaves_young_blocks_alone)
{
    uint32_t held = 0, own = owned_segment(1, &held);
    uint32_t filled = shared_segment();
    void **y = allocate(own, 0, LAYOUT_MARK_YOUNG, (void *)0x1234, NULL);
    allocate(own, 1, LAYOUT_MARK_YOUNG, NULL, NULL);
    allocate(own, 2, OLD_EPOCH, NULL, NULL);
    allocate(own, 3, EPOCH, NULL, NULL);
    allocate(filled, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    sweep_cycle();
    ck_assert_uint_eq(marks_of(own)[0], LAYOUT_MARK_YOUNG);
    ck_assert_uint_eq(marks_of(own)[1], LAYOUT_MARK_YOUNG);
    ck_assert_msg(y[0] == (void *)0x1234 &&
                      ((uint64_t *)y)[-1] == layout_header(2, 0),
                  "the sweep wrote into a young block");
    ck_assert_uint_eq(marks_of(own)[2], 0);
    ck_assert_uint_eq(marks_of(own)[3], EPOCH);
    ck_assert_uint_eq(H.segs.segs[filled].state, SEG_FILLED);
    ck_assert_uint_eq(marks_of(filled)[0], LAYOUT_MARK_YOUNG);
    ck_assert_uint_eq(H.young_segments, 2);
}
END_TEST

/* An evicted client's segments are fenced (Note [Evicted clients] in
 * daemon/stall.c): a dead block is kept with the epoch, a young one with
 * its mark. */
START_TEST(a_fenced_segment_keeps_its_young_marks)
{
    uint32_t held = 0, own = owned_segment(4, &held);
    allocate(own, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    allocate(own, 1, OLD_EPOCH, NULL, NULL);
    uint32_t *fenced, n;
    heap_lock(&H);
    ck_assert_int_eq(seg_fence(&H, &fenced, &n), 0);
    heap_unlock(&H);
    sweep_cycle();
    ck_assert_uint_eq(marks_of(own)[0], LAYOUT_MARK_YOUNG);
    ck_assert_uint_eq(marks_of(own)[1], EPOCH);
    heap_lock(&H);
    seg_unfence(&H, fenced, n);
    heap_unlock(&H);
    free(fenced);
}
END_TEST

/* A shared object that only a young object of a blocked young mutator
 * references survives the cycle (the daemon's push marks it, the sweep
 * keeps it), and one nothing references does not. */
START_TEST(what_only_a_young_object_keeps_survives_a_cycle)
{
    uint64_t slots[2] = {0};
    unsigned slot = attach(1, slots, true);
    uint32_t own, shared = young_graph(slot, &own);
    mark_cycle();
    sweep_cycle();
    ck_assert_uint_eq(marks_of(shared)[1], EPOCH);
    ck_assert_uint_eq(marks_of(shared)[2], EPOCH);
    ck_assert_msg(marks_of(shared)[3] == 0, "an object nothing references "
                  "survived the cycle (mark %u)", marks_of(shared)[3]);
    ck_assert_uint_eq(H.segs.segs[shared].state, SEG_FILLED);
}
END_TEST

/* ---- Note [Young blocks of a client gone] in daemon/gc/segment.c ---- */

static bool poisoned(void **o)
{
    const uint8_t *b = (const uint8_t *)(o - 1);
    for (size_t k = 0; k < layout_class_size[cls]; k++)
        if (b[k] != SWEEP_POISON)
            return false;
    return true;
}

/* Client 1 goes: the young blocks of the segment it owned and of one it
 * returned with a young block in it are freed (poisoned, mark 0) before
 * the segments are FILLED; its shared block is the sweep's to judge, and
 * client 2's young block is client 2's. */
START_TEST(a_departed_clients_young_blocks_are_freed)
{
    uint32_t held = 0, held2 = 0;
    uint32_t own = owned_segment(1, &held);
    uint32_t returned = owned_segment(1, &held);
    uint32_t theirs = owned_segment(2, &held2);
    void **y = allocate(own, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    allocate(own, 1, OLD_EPOCH, NULL, NULL);
    void **r = allocate(returned, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    allocate(theirs, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    heap_lock(&H);
    ck_assert_int_eq(seg_return(&H, 1, &held, returned), 0);
    ck_assert_uint_eq(marks_of(returned)[0], LAYOUT_MARK_YOUNG);
    seg_orphan(&H, 1);
    heap_unlock(&H);
    ck_assert_uint_eq(H.segs.segs[own].state, SEG_FILLED);
    ck_assert_msg(marks_of(own)[0] == 0 && poisoned(y), "a young block of "
                  "a client gone was not freed (mark %u)", marks_of(own)[0]);
    ck_assert_uint_eq(marks_of(own)[1], OLD_EPOCH);
    ck_assert_msg(marks_of(returned)[0] == 0 && poisoned(r), "a young "
                  "block of a segment it returned was not freed (mark %u)",
                  marks_of(returned)[0]);
    ck_assert_uint_eq(marks_of(theirs)[0], LAYOUT_MARK_YOUNG);
}
END_TEST

/* An evicted client's fenced segment keeps its young blocks while the
 * fence stands -- through its departure and a sweep -- and loses them
 * when the fence lifts (its process is gone). */
START_TEST(an_evicted_clients_young_blocks_wait_for_the_fence)
{
    uint32_t held = 0, own = owned_segment(4, &held);
    allocate(own, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    uint32_t *fenced, n;
    heap_lock(&H);
    ck_assert_int_eq(seg_fence(&H, &fenced, &n), 0);
    seg_orphan(&H, 4);
    heap_unlock(&H);
    ck_assert_uint_eq(H.segs.segs[own].state, SEG_FILLED);
    ck_assert_uint_eq(marks_of(own)[0], LAYOUT_MARK_YOUNG);
    sweep_cycle();
    ck_assert_uint_eq(marks_of(own)[0], LAYOUT_MARK_YOUNG);
    heap_lock(&H);
    seg_unfence(&H, fenced, n);
    heap_unlock(&H);
    free(fenced);
    ck_assert_msg(marks_of(own)[0] == 0, "an evicted client's young block "
                  "outlived its fence (mark %u)", marks_of(own)[0]);
}
END_TEST

/* Note [Recovering the segment table]: a restart keeps the young blocks
 * of the client it keeps (1), and frees those of the client it does not
 * (2), whose segment they leave empty and so FREE (Note [An empty segment
 * comes back free] in daemon/gc/segment.c), and of a FILLED segment. */
START_TEST(a_restart_keeps_young_blocks_of_kept_clients_only)
{
    uint32_t held1 = 0, held2 = 0;
    uint32_t kept_seg = owned_segment(1, &held1);
    uint32_t gone_seg = owned_segment(2, &held2);
    uint32_t filled = shared_segment();
    allocate(kept_seg, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    allocate(gone_seg, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    allocate(filled, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    struct resume_client kept = {.id = 1};
    char why[256] = "";
    uint32_t odd = 0;
    heap_lock(&H);
    ck_assert_int_eq(seg_recover(&H, 0, &kept, NULL, &odd, why, sizeof why),
                     0);
    heap_unlock(&H);
    ck_assert_uint_eq(H.segs.segs[kept_seg].state, SEG_OWNED);
    ck_assert_uint_eq(marks_of(kept_seg)[0], LAYOUT_MARK_YOUNG);
    ck_assert_uint_eq(H.segs.segs[gone_seg].state, SEG_FREE);
    ck_assert_uint_eq(marks_of(gone_seg)[0], 0);
    ck_assert_uint_eq(marks_of(filled)[0], 0);
}
END_TEST

/* Note [The live table]: a young slot of a client the registry keeps
 * comes back young, with its budget and age (kept_of), and so do the
 * young blocks of its segments; a client not in the registry is gone,
 * and its young blocks with it.  A slot whose young words are no budget
 * an attach grants comes back, but not young. */
START_TEST(a_kept_young_slot_comes_back_young)
{
    uint8_t token[RESUME_TOKEN_BYTES] = {1};
    uint64_t slots[2] = {0}, gone_slots[2] = {0};
    heap_lock(&H);
    table_client_add(&H, 1, token, 100, 0, 0, 1, "kept");
    heap_unlock(&H);
    unsigned slot = attach(1, slots, true);
    unsigned odd_slot = attach(1, slots, true);
    attach(2, gone_slots, true);
    uint32_t held1 = 0, held2 = 0;
    uint32_t kept_seg = owned_segment(1, &held1);
    uint32_t gone_seg = owned_segment(2, &held2);
    allocate(kept_seg, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    allocate(gone_seg, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    heap_lock(&H);
    table_slot_young(&H, odd_slot, 1, 2); /* a budget of one byte */
    heap_unlock(&H);
    /* the next heapd: nothing of this one's private records */
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        atomic_store(&H.owners[i].client_id, 0);
        H.owners[i].young_bytes = 0;
        H.owners[i].young_age = 0;
    }
    struct resume_client *kept = NULL;
    char why[256] = "";
    bool clean = true;
    ck_assert_int_eq(table_take_back(&H, why, sizeof why, &kept, &clean), 0);
    ck_assert_ptr_nonnull(kept);
    ck_assert_uint_eq(kept->id, 1);
    ck_assert_ptr_null(kept->next);
    ck_assert(!clean);
    ck_assert(kept->slots[slot / 64] >> (slot % 64) & 1);
    ck_assert_uint_eq(H.owners[slot].young_bytes, cfg.young_size);
    ck_assert_uint_eq(H.owners[slot].young_age, cfg.young_age);
    ck_assert(kept->slots[odd_slot / 64] >> (odd_slot % 64) & 1);
    ck_assert_uint_eq(H.owners[odd_slot].young_bytes, 0);
    ck_assert_uint_eq(marks_of(kept_seg)[0], LAYOUT_MARK_YOUNG);
    ck_assert_uint_eq(marks_of(gone_seg)[0], 0);
    free(kept);
}
END_TEST

/* ---- Note [Heap verifier] in daemon/gc/verify.c, check 4 ---- */

static uint64_t verify_reachable_now(void)
{
    heap_lock(&H);
    uint64_t f = verify_reachable(&H, EPOCH);
    heap_unlock(&H);
    return f;
}

static uint64_t verify_segments_now(void)
{
    heap_lock(&H);
    uint64_t f = verify_segments(&H, EPOCH);
    heap_unlock(&H);
    return f;
}

/* After a sweep, a young block may be in a segment its client owns, and
 * nowhere else: one in a FILLED segment is a failure. */
START_TEST(the_verifier_wants_young_blocks_in_owned_segments)
{
    uint32_t held = 0, own = owned_segment(1, &held);
    allocate(own, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    sweep_cycle();
    ck_assert_uint_eq(verify_segments_now(), 0);
    uint32_t filled = shared_segment();
    allocate(filled, 0, LAYOUT_MARK_YOUNG, NULL, NULL);
    sweep_cycle();
    ck_assert_uint_eq(verify_segments_now(), 1);
}
END_TEST

/* Client 1's young slot (*SLOT, of SLOTS), and in a segment it owns
 * (*OWN) a young object, returned, whose field references a shared object
 * marked MARK, in a segment of its own (*SHARED). */
static void **young_over_shared(uint64_t slots[2], unsigned *slot,
                                uint32_t *own, uint32_t *shared, uint8_t mark)
{
    uint32_t held = 0;
    *slot = attach(1, slots, true);
    *own = owned_segment(1, &held);
    *shared = shared_segment();
    void **s1 = allocate(*shared, 1, mark, NULL, NULL);
    return allocate(*own, 1, LAYOUT_MARK_YOUNG, s1, NULL);
}

/* A young slot's roots may reach its client's young objects, and what
 * they reference must be marked; a global, a shared object or another
 * slot's root that references a young object is a failure. */
START_TEST(verify_follows_young_objects_from_their_slot)
{
    uint64_t slots[2] = {0};
    unsigned slot;
    uint32_t own, shared;
    void **y1 = young_over_shared(slots, &slot, &own, &shared, OLD_EPOCH);
    void **y0 = allocate(own, 0, LAYOUT_MARK_YOUNG, y1, NULL);
    push_root(slot, y0);
    /* not marked yet: S1 is reached through two young objects */
    ck_assert_uint_eq(verify_reachable_now(), 1);
    mark_cycle();
    ck_assert_uint_eq(verify_reachable_now(), 0);
    set_global(0, y1);
    ck_assert_uint_eq(verify_reachable_now(), 1);
    set_global(0, allocate(shared, 2, EPOCH, y1, NULL));
    ck_assert_uint_eq(verify_reachable_now(), 1);
    set_global(0, NULL);
    unsigned other = attach(2, slots, false);
    push_root(other, y0);
    ck_assert_uint_eq(verify_reachable_now(), 1);
}
END_TEST

/* A promotion in slices under way when the mutator took the stop (Note
 * [Minor collections in slices] in client/minor.c): a promoted object its
 * roots reach references a young one.  No failure while the slot's
 * young_promoting word says so; one when it does not, or when a global
 * reaches the promoted object. */
START_TEST(verify_lets_a_slot_finish_its_promotions)
{
    uint64_t slots[2] = {0};
    unsigned slot;
    uint32_t own, shared;
    void **y1 = young_over_shared(slots, &slot, &own, &shared, EPOCH);
    void **p = allocate(own, 0, EPOCH, y1, NULL); /* promoted, black */
    push_root(slot, p);
    ck_assert_uint_eq(verify_reachable_now(), 1);
    atomic_store(&heap_slot(&H, slot)->young_promoting, 1);
    ck_assert_uint_eq(verify_reachable_now(), 0);
    set_global(0, p);
    ck_assert_uint_eq(verify_reachable_now(), 1);
}
END_TEST

/* ---- Note [Young memory and the heap goal] in daemon/gc/collector.c ---- */

static uint64_t young_held_now(void)
{
    heap_lock(&H);
    uint64_t n = slotmem_young_held(&H);
    heap_unlock(&H);
    return n;
}

/* What the young slots say their young generations hold counts up to
 * what the heap's OWNED segments hold, whatever a slot writes; an old
 * slot's word counts for nothing. */
START_TEST(young_held_is_bounded_by_owned_segments)
{
    uint64_t slots[2] = {0}, seg = (uint64_t)1 << SHIFT;
    unsigned young = attach(1, slots, true);
    unsigned old = attach(2, slots, false);
    atomic_store(&heap_slot(&H, old)->young_held_bytes, 5 * seg);
    atomic_store(&heap_slot(&H, young)->young_held_bytes, UINT64_MAX);
    ck_assert_uint_eq(young_held_now(), 0);
    uint32_t held = 0;
    owned_segment(1, &held);
    owned_segment(1, &held);
    ck_assert_uint_eq(young_held_now(), 2 * seg);
    atomic_store(&heap_slot(&H, young)->young_held_bytes, seg);
    ck_assert_uint_eq(young_held_now(), seg);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("young_marks");
    TCase *t = tcase_create("young marks");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, references_to_a_young_object_are_refused);
    tcase_add_test(t, the_daemons_push_marks_what_young_objects_reference);
    tcase_add_test(t, an_old_slot_gets_no_push);
    tcase_add_test(t, the_sweep_leaves_young_blocks_alone);
    tcase_add_test(t, a_fenced_segment_keeps_its_young_marks);
    tcase_add_test(t, what_only_a_young_object_keeps_survives_a_cycle);
    tcase_add_test(t, a_departed_clients_young_blocks_are_freed);
    tcase_add_test(t, an_evicted_clients_young_blocks_wait_for_the_fence);
    tcase_add_test(t, a_restart_keeps_young_blocks_of_kept_clients_only);
    tcase_add_test(t, a_kept_young_slot_comes_back_young);
    tcase_add_test(t, the_verifier_wants_young_blocks_in_owned_segments);
    tcase_add_test(t, verify_follows_young_objects_from_their_slot);
    tcase_add_test(t, verify_lets_a_slot_finish_its_promotions);
    tcase_add_test(t, young_held_is_bounded_by_owned_segments);
    suite_add_tcase(s, t);
    return check_main(s);
}
