/* The daemon's side of young generations (Note [Young objects] in
 * proto/young.h), over the raw protocol and a real heapd, so that it
 * needs nothing of libheapd's young side: an attach with young = true is
 * granted no memory but a nursery budget and an age (Note [Young budgets]
 * in daemon/gc/heap.h), and requests out of range are refused; a raw
 * client plays a young mutator by writing LAYOUT_MARK_YOUNG into blocks of
 * a segment it was granted, through the heap's mapping.  Then: the sweep
 * leaves its young blocks and counts their segment; a shared object only
 * they reference survives while the mutator is blocked (Note [The
 * daemon's preparatory push] in daemon/gc/mark.c) and is freed once the
 * client has gone (Note [Young blocks of a client gone] in
 * daemon/gc/segment.c); references to them from anything shared are
 * refused and counted in young_refs_refused (Note [References to young
 * objects] in daemon/gc/validate.c); a young block in a segment returned
 * is a verifier failure (Note [Heap verifier]). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_main.h"
#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "wire.h"
#include "young.h"

static struct daemon_proc D;

#define SEG (128u << 10) /* harness_default_config's segment_size */

static void raw_detach(struct harness_raw *r, uint32_t slot)
{
    Heapd__DetachRequest dr = HEAPD__DETACH_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    dr.slot = slot;
    env.seq = 77;
    env.body_case = HEAPD__ENVELOPE__BODY_DETACH_REQUEST;
    env.detach_request = &dr;
    harness_send_env(r->sock, &env);
    Heapd__Envelope *e = harness_read_env(r->sock, NULL);
    ck_assert_msg(e && e->body_case == HEAPD__ENVELOPE__BODY_DETACH_REPLY,
                  "detach of slot %u was not answered", slot);
    heapd__envelope__free_unpacked(e, NULL);
}

/* The segments holding young blocks at the last sweep, as the report
 * counts them. */
static uint32_t young_segments(heapd_client *ctl)
{
    heapd_heap_segments hs[2];
    size_t n = 0;
    ck_assert_int_eq(heapd_segments(ctl, "default", hs, 2, &n), 0);
    ck_assert_uint_eq(n, 1);
    return hs[0].young;
}

/* The young blocks the last sweep counted, in bytes and segments. */
static void young_counted(heapd_client *ctl, uint64_t *bytes, uint32_t *segs)
{
    heapd_heap_segments hs[2];
    size_t n = 0;
    ck_assert_int_eq(heapd_segments(ctl, "default", hs, 2, &n), 0);
    ck_assert_uint_eq(n, 1);
    *bytes = hs[0].young_bytes;
    *segs = hs[0].young;
}

struct young_seen {
    heapd_client *ctl;
    uint32_t want;
};

static bool young_is(void *arg, char *seen, size_t len)
{
    struct young_seen *y = arg;
    uint32_t now = young_segments(y->ctl);
    snprintf(seen, len, "%u segments holding young blocks", now);
    return now == y->want;
}

/* Wait (bounded) until the report counts WANT segments holding young
 * blocks. */
static void wait_young(heapd_client *ctl, uint32_t want, const char *what)
{
    struct young_seen y = {ctl, want};
    harness_wait_until(young_is, &y, what);
}

/* Raw client R beside this process's libheapd client, on the heap it has
 * mapped, plays a blocked young mutator; returns its slot's words. */
static struct layout_mutator *raw_blocked_young(struct harness_raw *r)
{
    harness_raw_mutator(D.sock, r);
    harness_raw_map(r); /* the libheapd client's mapping, in fact */
    return harness_raw_young_mutator(r, true);
}

static void expect_error(Heapd__Envelope *e, Heapd__ErrorCode code,
                         const char *substr)
{
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ERROR);
    ck_assert_int_eq(e->error->code, code);
    ck_assert_msg(strstr(e->error->message, substr), "message: %s",
                  e->error->message);
    heapd__envelope__free_unpacked(e, NULL);
}

START_TEST(budget_given_with_the_slot)
{
    harness_start_with(&D, "young_size = 512K\n");
    heapd_client *ctl = harness_control(&D);
    struct harness_raw r;
    harness_raw_mutator(D.sock, &r);

    /* the heap's young_size and young_age */
    Heapd__Envelope *e = harness_raw_attach(&r, 1, true, 0, 0);
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ATTACH_REPLY);
    ck_assert_uint_eq(e->attach_reply->young_bytes, 512u << 10);
    ck_assert_uint_eq(e->attach_reply->young_age, 2);
    uint32_t slot = e->attach_reply->slot;
    heapd__envelope__free_unpacked(e, NULL);

    /* asked for: a budget need not be whole segments; the age as asked */
    e = harness_raw_attach(&r, 2, true, 300u << 10, 5);
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ATTACH_REPLY);
    ck_assert_uint_eq(e->attach_reply->young_bytes, 300u << 10);
    ck_assert_uint_eq(e->attach_reply->young_age, 5);
    heapd__envelope__free_unpacked(e, NULL);

    /* a plain attach is as before, whatever it says of a budget */
    e = harness_raw_attach(&r, 3, false, 1u << 20, 0);
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ATTACH_REPLY);
    ck_assert_uint_eq(e->attach_reply->young_bytes, 0);
    ck_assert_uint_eq(e->attach_reply->young_age, 0);
    heapd__envelope__free_unpacked(e, NULL);

    /* no memory was granted for any of them */
    ck_assert_uint_eq(harness_stats(ctl).segments_owned, 0);

    /* the clients report shows the budget */
    heapd_client_info *info = NULL;
    size_t n = 0;
    ck_assert_int_eq(heapd_clients(ctl, &info, &n), 0);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < info[i].mutator_count; k++)
            if (info[i].mutators[k].slot == slot) {
                ck_assert_uint_eq(info[i].mutators[k].young_bytes,
                                  512u << 10);
                found = true;
            }
    ck_assert_msg(found, "the clients report lacks slot %u", slot);
    heapd_clients_free(info);
    raw_detach(&r, slot);
    harness_raw_close(&r);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

/* A young_size below the least budget (two segments) is raised to it. */
START_TEST(a_small_young_size_is_raised_to_two_segments)
{
    harness_start_with(&D, "young_size = 64K\n");
    struct harness_raw r;
    harness_raw_mutator(D.sock, &r);
    Heapd__Envelope *e = harness_raw_attach(&r, 1, true, 0, 0);
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ATTACH_REPLY);
    ck_assert_uint_eq(e->attach_reply->young_bytes, 2 * SEG);
    heapd__envelope__free_unpacked(e, NULL);
    harness_raw_close(&r);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(budget_requests_out_of_range_are_refused)
{
    harness_start_with(&D, "max_client_bytes = 1M\n");
    struct harness_raw r;
    harness_raw_mutator(D.sock, &r);
    heapd_stats_t before = harness_daemon_stats(&D);
    expect_error(harness_raw_attach(&r, 1, true, 0,
                                    LAYOUT_YOUNG_AGE_MAX + 1),
                 HEAPD__ERROR_CODE__ERROR_BAD_REQUEST, "young_age 9");
    heapd_stats_t after = harness_daemon_stats(&D);
    ck_assert_uint_eq(after.frames_rejected, before.frames_rejected + 1);
    /* less than two segments: it says what to ask for */
    expect_error(harness_raw_attach(&r, 2, true, SEG, 0),
                 HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                 "ask for 262144 bytes or more");
    /* more than the heap (max_size 1G) */
    expect_error(harness_raw_attach(&r, 3, true, 2ull << 30, 0),
                 HEAPD__ERROR_CODE__ERROR_BAD_REQUEST, "max_size");
    /* more than the client may hold */
    expect_error(harness_raw_attach(&r, 4, true, 2u << 20, 0),
                 HEAPD__ERROR_CODE__ERROR_NO_MEMORY,
                 "ask for 1048576 bytes or less, or raise max_client_bytes");
    after = harness_daemon_stats(&D);
    ck_assert_uint_eq(after.requests_refused, before.requests_refused + 3);
    /* a budget is no memory: two of the quota's size fit */
    for (uint64_t seq = 5; seq < 7; seq++) {
        Heapd__Envelope *e =
            harness_raw_attach(&r, seq, true, 1u << 20, 0);
        ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ATTACH_REPLY);
        heapd__envelope__free_unpacked(e, NULL);
    }
    harness_raw_close(&r);
    harness_stop_clean(&D);
}
END_TEST

#define MAGIC 0x5eed5eed5eed5eedull

struct poisoned_wait {
    heapd_mutator *m;
    const uint64_t *word;
};

/* Collect until *WORD is no longer MAGIC (the sweep poisoned it: the
 * tests run with HEAPD_VERIFY=1). */
static bool word_freed(void *arg, char *seen, size_t len)
{
    struct poisoned_wait *w = arg;
    ck_assert_int_eq(heapd_collect(w->m, HEAPD_COLLECT_WAIT), 0);
    uint64_t v = __atomic_load_n(w->word, __ATOMIC_RELAXED);
    snprintf(seen, len, "the object's word is 0x%llx", (unsigned long long)v);
    return v != MAGIC;
}

/* A shared object S that only a young block of a blocked young mutator
 * references lives through cycles; the block's segment counts as holding
 * young blocks; once the client goes, its young block is freed and S
 * with it. */
START_TEST(what_a_blocked_young_mutator_holds_lives)
{
    harness_start_with(&D, NULL);
    heapd_client *c, *ctl = harness_control(&D);
    heapd_mutator *mu;
    /* S must die once the young block is gone, with S in a local */
    harness_attach_precise(&D, &c, &mu);
    uint64_t *s = heapd_alloc(mu, 0, sizeof(uint64_t));
    ck_assert_ptr_nonnull(s);
    *s = MAGIC;
    struct harness_raw r;
    struct layout_mutator *m = raw_blocked_young(&r);
    uint32_t seg = harness_raw_segment(&r, 2);
    void **y = harness_raw_young(&r, seg, 0, s, NULL);
    /* S is the young object's alone from here (C locals may hold it
     * still, but nothing the daemon reads) */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(heapd_collect(mu, HEAPD_COLLECT_WAIT), 0);
    ck_assert_msg(__atomic_load_n(s, __ATOMIC_RELAXED) == MAGIC,
                  "an object a blocked young mutator's young object "
                  "references was freed (0x%llx)",
                  (unsigned long long)*s);
    ck_assert_ptr_eq(y[0], s);
    ck_assert_uint_eq(harness_raw_mark(&r, seg, 0),
                      LAYOUT_MARK_YOUNG);
    wait_young(ctl, 1, "the young block's segment is counted");
    harness_expect_healthy(&D);

    munmap(m, LAYOUT_MUTATOR_BYTES);
    harness_raw_close(&r); /* a crash, for heapd */
    struct poisoned_wait w = {mu, s};
    harness_wait_until(word_freed, &w, "the object the young block of a "
                       "client gone referenced is freed");
    ck_assert_uint_eq(harness_raw_mark(&r, seg, 0), 0);
    wait_young(ctl, 0, "no segment holds young blocks");
    harness_expect_healthy(&D);
    heapd_detach(mu);
    heapd_disconnect(c);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

/* Another client plants a young object's address in a shared field, a
 * global and its own root stack: each is refused at every cycle (counted
 * in young_refs_refused, not bad_refs, and reported by the verifier), the
 * young block is never marked, and the object that holds the field lives
 * on unchanged; once all three are gone, nothing more is refused. */
START_TEST(references_to_young_objects_are_refused)
{
    harness_start_with(&D, NULL);
    heapd_client *c;
    heapd_mutator *mu;
    harness_attach(&D, &c, &mu);
    struct harness_raw r;
    struct layout_mutator *m = raw_blocked_young(&r);
    uint32_t seg = harness_raw_segment(&r, 2);
    void *young = harness_raw_young(&r, seg, 0, NULL, NULL);

    void **obj = heapd_alloc(mu, 1, 0);
    ck_assert_ptr_nonnull(obj);
    size_t held = heapd_root_push(mu, obj);
    obj[0] = young; /* no barrier: that is the bug */
    ck_assert_int_eq(heapd_global_set(mu, "young-ref", young), 0);
    heapd_root_push(mu, young);
    heapd_stats_t before = harness_stats(c);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(heapd_collect(mu, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t after = harness_stats(c);
    ck_assert_uint_ge(after.young_refs_refused,
                      before.young_refs_refused + 3 * 3);
    ck_assert_uint_eq(after.bad_refs, before.bad_refs);
    ck_assert_uint_gt(after.verify_failures, before.verify_failures);
    ck_assert_uint_eq(harness_raw_mark(&r, seg, 0),
                      LAYOUT_MARK_YOUNG);
    ck_assert_ptr_eq(heapd_root_get(mu, held), obj);
    ck_assert_ptr_eq(obj[0], young);
    ck_assert_uint_eq(heapd_nrefs(obj), 1);

    heapd_write(mu, obj, &obj[0], NULL);
    ck_assert_int_eq(heapd_global_set(mu, "young-ref", NULL), 0);
    heapd_root_pop(mu, 1);
    ck_assert_int_eq(heapd_collect(mu, HEAPD_COLLECT_WAIT), 0);
    before = harness_stats(c);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(heapd_collect(mu, HEAPD_COLLECT_WAIT), 0);
    after = harness_stats(c);
    ck_assert_uint_eq(after.young_refs_refused, before.young_refs_refused);
    ck_assert_uint_eq(after.verify_failures, before.verify_failures);

    munmap(m, LAYOUT_MUTATOR_BYTES);
    harness_raw_close(&r);
    heapd_detach(mu);
    heapd_disconnect(c);
    ck_assert_uint_gt(harness_still_serving(D.sock), 0);
    harness_stop_clean(&D);
}
END_TEST

struct mark_wait {
    struct harness_raw *r;
    uint32_t seg;
};

static bool mark_freed(void *arg, char *seen, size_t len)
{
    struct mark_wait *w = arg;
    uint8_t m = harness_raw_mark(w->r, w->seg, 0);
    snprintf(seen, len, "its mark is %u", m);
    return m == 0;
}

/* A client that returns a segment with a young block in it breaks Note
 * [Young objects]: the verifier reports the young block in a FILLED
 * segment at the next cycles, and the daemon frees it when the client
 * goes. */
START_TEST(a_young_block_returned_is_a_verifier_failure)
{
    harness_start_with(&D, NULL);
    heapd_client *c;
    heapd_mutator *mu;
    harness_attach(&D, &c, &mu);
    struct harness_raw r;
    struct layout_mutator *m = raw_blocked_young(&r);
    uint32_t seg = harness_raw_segment(&r, 2);
    harness_raw_young(&r, seg, 0, NULL, NULL);
    harness_raw_return_segments(r.sock, 3, &seg, 1);
    heapd_stats_t before = harness_stats(c);
    /* the second cycle starts after the return was read (the first may
     * have started before) */
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(heapd_collect(mu, HEAPD_COLLECT_WAIT), 0);
    ck_assert_uint_gt(harness_stats(c).verify_failures,
                      before.verify_failures);
    ck_assert_uint_eq(harness_raw_mark(&r, seg, 0),
                      LAYOUT_MARK_YOUNG);
    /* it holds a young block, but a returned segment's young blocks
     * raise no cap (Note [Young memory and the heap goal]) */
    uint64_t bytes;
    uint32_t segs;
    young_counted(c, &bytes, &segs);
    ck_assert_uint_eq(segs, 1);
    ck_assert_uint_eq(bytes, 0);

    munmap(m, LAYOUT_MUTATOR_BYTES);
    harness_raw_close(&r);
    /* freed with the client: no cycle reports it again */
    struct mark_wait w = {&r, seg};
    harness_wait_until(mark_freed, &w,
                       "the young block of a client gone is freed");
    before = harness_stats(c);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(heapd_collect(mu, HEAPD_COLLECT_WAIT), 0);
    ck_assert_uint_eq(harness_stats(c).verify_failures,
                      before.verify_failures);
    heapd_detach(mu);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* Segment S of R's heap, as mapped. */
static uint8_t *raw_seg_at(const struct harness_raw *r, uint32_t s)
{
    return (uint8_t *)(uintptr_t)(r->base + (uint64_t)s * r->segment_size);
}

struct returned_wait {
    heapd_client *c;
    uint64_t owned_before;
    uint64_t n;
};

static bool all_returned(void *arg, char *seen, size_t len)
{
    struct returned_wait *w = arg;
    uint64_t owned = harness_stats(w->c).segments_owned;
    snprintf(seen, len, "%llu segments owned, %llu before the return",
             (unsigned long long)owned, (unsigned long long)w->owned_before);
    return owned + w->n == w->owned_before;
}

/* Return SEGS[0..N) of raw client R as SEQ, and wait until the daemon
 * has read it (C's stats: the segments owned). */
static void raw_return(struct harness_raw *r, heapd_client *c, uint64_t seq,
                       uint32_t *segs, size_t n)
{
    struct returned_wait w = {c, harness_stats(c).segments_owned, n};
    harness_raw_return_segments(r->sock, seq, segs, n);
    harness_wait_until(all_returned, &w, "the segments are returned");
}

/* Note [An empty segment comes back free] in daemon/gc/segment.c: of three
 * formatted segments a nursery gives back while no cycle runs, the one
 * never used and the one whose young block it freed are FREE at once; the
 * one with a block in it is FILLED.  The next grant hands the empty ones
 * out again, blank, though their client wrote into them since.  An empty
 * one given back while a cycle marks (held: Note [Holding marking for
 * tests]) is FILLED. */
START_TEST(an_empty_segment_comes_back_free)
{
    char hold[64];
    harness_start_holding(&D, hold, sizeof hold);
    heapd_client *c;
    heapd_mutator *mu;
    harness_attach(&D, &c, &mu);
    struct harness_raw r;
    struct layout_mutator *m = raw_blocked_young(&r);
    uint32_t unused = harness_raw_segment(&r, 2);
    uint32_t freed = harness_raw_segment(&r, 3);
    uint32_t used = harness_raw_segment(&r, 4);
    harness_raw_young(&r, freed, 5, NULL, NULL);
    harness_raw_young(&r, used, 5, NULL, NULL);
    /* as a minor collection frees the one and promotes the other (an
     * epoch: Note [Epoch-tagged marks]) */
    __atomic_store_n(&layout_seg_marks(raw_seg_at(&r, freed))[5], 0,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&layout_seg_marks(raw_seg_at(&r, used))[5], 1,
                     __ATOMIC_RELAXED);
    heapd_stats_t before = harness_stats(c);
    ck_assert_uint_eq(before.phase, 0);
    uint32_t segs[3] = {unused, freed, used};
    raw_return(&r, c, 5, segs, 3);
    heapd_stats_t after = harness_stats(c);
    ck_assert_msg(after.cycles_completed == before.cycles_completed,
                  "a cycle ran (%llu -> %llu): it could have freed them",
                  (unsigned long long)before.cycles_completed,
                  (unsigned long long)after.cycles_completed);
    ck_assert_uint_eq(after.segments_filled, before.segments_filled + 1);
    ck_assert_uint_eq(after.segments_free, before.segments_free + 2);

    /* its last owner scribbles on what it gave back: a mark, a class */
    for (int k = 0; k < 2; k++) {
        uint8_t *seg = raw_seg_at(&r, k ? freed : unused);
        __atomic_store_n(&layout_seg_marks(seg)[5], 7, __ATOMIC_RELAXED);
        ((struct layout_segment *)seg)->size_class = 9999;
    }
    /* granted again first (committed), and blank all the same */
    harness_raw_ask_segments(r.sock, 6, 2);
    Heapd__Envelope *g = harness_read_env(r.sock, NULL);
    ck_assert_msg(g && g->body_case == HEAPD__ENVELOPE__BODY_SEGMENT_GRANT,
                  "no grant for the raw client");
    ck_assert_uint_eq(g->segment_grant->n_segments, 2);
    for (size_t k = 0; k < 2; k++) {
        uint32_t s = g->segment_grant->segments[k];
        ck_assert_msg(s == unused || s == freed,
                      "segment %u granted, not %u or %u", s, unused, freed);
        const struct layout_segment *hd = (const void *)raw_seg_at(&r, s);
        ck_assert_uint_eq(__atomic_load_n(&hd->kind, __ATOMIC_ACQUIRE),
                          LAYOUT_SEG_BLANK);
        ck_assert_uint_eq(harness_raw_mark(&r, s, 5), 0);
    }

    /* while a cycle marks, an empty one is FILLED as before */
    uint32_t again = g->segment_grant->segments[0];
    heapd__envelope__free_unpacked(g, NULL);
    struct layout_segment *ahd = (void *)raw_seg_at(&r, again);
    ahd->size_class =
        ((const struct layout_segment *)raw_seg_at(&r, used))->size_class;
    __atomic_store_n(&ahd->kind, LAYOUT_SEG_SMALL, __ATOMIC_RELEASE);
    FILE *f = fopen(hold, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    heapd_blocking_enter(mu); /* the snapshot's stop need not wait for us */
    ck_assert_int_eq(heapd_request_collect(c, 0), 0);
    harness_wait_stat(&D, c, phase, ==, 1); /* held in its mark */
    before = harness_stats(c);
    raw_return(&r, c, 7, &again, 1);
    after = harness_stats(c);
    unlink(hold);
    heapd_blocking_leave(mu);
    ck_assert_uint_eq(after.segments_filled, before.segments_filled + 1);
    ck_assert_uint_eq(after.segments_free, before.segments_free);

    munmap(m, LAYOUT_MUTATOR_BYTES);
    harness_raw_close(&r);
    heapd_detach(mu);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

#define YOUNG_SEGS 192 /* 24 MiB of young blocks: three goals of an empty
                          heap (4 MiB counted live, gc_overhead 100) */
#define MORE_SEGS 64   /* and 8 MiB more */

/* Young blocks are their mutator's to free, so their memory is not held
 * to the heap's goal (Note [Young memory and the heap goal] in
 * daemon/gc/collector.c): a blocked young mutator holds 24 MiB of young
 * blocks in an empty heap, whose goal is 8 MiB; once a sweep has counted
 * them (the segments report says how many bytes), 8 MiB more are granted
 * without a wait for a cycle, which could free none of them. */
START_TEST(young_memory_is_not_held_to_the_goal)
{
    harness_start_with(&D, NULL);
    heapd_client *c, *ctl = harness_control(&D);
    heapd_mutator *mu;
    harness_attach(&D, &c, &mu);
    struct harness_raw r;
    struct layout_mutator *m = raw_blocked_young(&r);
    unsigned cls = layout_size_class((uint32_t)layout_object_size(2, 0));
    uint32_t nblocks, first;
    layout_small_geometry(SEG, cls, &nblocks, &first);
    uint64_t seq = 2;
    for (unsigned k = 0; k < YOUNG_SEGS; k++) {
        uint32_t seg = harness_raw_segment(&r, seq++);
        for (uint32_t b = 0; b < nblocks; b++)
            harness_raw_young(&r, seg, b, NULL, NULL);
    }
    /* the second cycle starts after the last young block was made */
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(heapd_collect(mu, HEAPD_COLLECT_WAIT), 0);
    uint64_t bytes;
    uint32_t segs;
    young_counted(ctl, &bytes, &segs);
    ck_assert_uint_eq(segs, YOUNG_SEGS);
    ck_assert_uint_eq(bytes, (uint64_t)YOUNG_SEGS * nblocks *
                                 layout_class_size[cls]);

    heapd_stats_t before = harness_stats(c);
    for (unsigned k = 0; k < MORE_SEGS; k++)
        harness_raw_segment(&r, seq++);
    heapd_stats_t after = harness_stats(c);
    ck_assert_msg(after.grants_paced == before.grants_paced,
                  "%llu of %u grants waited for a cycle with %llu bytes "
                  "of young blocks counted",
                  (unsigned long long)(after.grants_paced -
                                       before.grants_paced),
                  MORE_SEGS, (unsigned long long)bytes);
    harness_expect_healthy(&D);

    munmap(m, LAYOUT_MUTATOR_BYTES);
    harness_raw_close(&r);
    heapd_detach(mu);
    heapd_disconnect(c);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

static Suite *young_daemon_suite(void)
{
    Suite *s = suite_create("young_daemon");
    TCase *t = tcase_create("young_daemon");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, budget_given_with_the_slot);
    tcase_add_test(t, a_small_young_size_is_raised_to_two_segments);
    tcase_add_test(t, budget_requests_out_of_range_are_refused);
    tcase_add_test(t, what_a_blocked_young_mutator_holds_lives);
    tcase_add_test(t, references_to_young_objects_are_refused);
    tcase_add_test(t, a_young_block_returned_is_a_verifier_failure);
    tcase_add_test(t, young_memory_is_not_held_to_the_goal);
    tcase_add_test(t, an_empty_segment_comes_back_free);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(young_daemon_suite());
}
