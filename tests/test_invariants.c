/* The daemon's executable invariants catch what they claim to: each
 * checker accepts a consistent table built by hand and rejects it once
 * one counter or link is broken (Note [Checking the segment table], Note
 * [Checking remark states] in daemon/). */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "kept.h"
#include "mark.h"
#include "remark.h"
#include "segment.h"
#include "check_main.h"

enum { NSEGS = 130, FIRST = 1 };

static struct heap H;
static struct mark_job J;
static struct config_heap CFG = {.name = "invariants"};

/* A table of NSEGS segments: 2..4 OWNED, 5 FILLED and reusable, 6 a large
 * run of 3 (6 head, 7-8 tail), 10 FILLED orphan, the rest FREE;
 * high = 11. */
static void setup(void)
{
    struct segtab *t = &H.segs;
    memset(&H, 0, sizeof H);
    H.cfg = &CFG;
    hd_mutex_init(&H.lock);
    for (unsigned c = 0; c < LAYOUT_NCLASSES; c++)
        t->small_nblocks[c] = 1; /* every class usable */
    t->count = NSEGS;
    t->first = FIRST;
    t->high = 11;
    t->segs = calloc(NSEGS, sizeof *t->segs);
    t->free_bits = calloc((NSEGS + 63) / 64, sizeof(uint64_t));
    t->reuse_bits = calloc((NSEGS + 63) / 64, sizeof(uint64_t));
    ck_assert(t->segs && t->free_bits && t->reuse_bits);
    for (uint32_t i = FIRST; i < NSEGS; i++) {
        uint8_t st = SEG_FREE;
        if (i >= 2 && i <= 4)
            st = SEG_OWNED;
        else if (i == 5 || i == 10)
            st = SEG_FILLED;
        else if (i == 6)
            st = SEG_LARGE;
        else if (i == 7 || i == 8)
            st = SEG_LARGE_TAIL;
        t->segs[i].state = st;
        if (st == SEG_FREE) {
            t->free_bits[i / 64] |= 1ull << (i % 64);
            t->n_free++;
            t->segs[i].punched = 1; /* never taken, or given back */
        }
    }
    seg_recount_memory(t); /* Note [Purging free memory] */
    t->segs[6].run = 3;
    t->segs[7].run = t->segs[8].run = 6;
    t->reuse_bits[0] |= 1ull << 5;
    t->segs[10].orphan = 1;
    t->n_owned = 3;
    t->n_filled = 2;
    t->n_large = 1;
    t->n_reusable = 1;
    t->orphaned = 3;
    t->adopted = 2;

    memset(&J, 0, sizeof J);
    hd_mutex_init(&J.mu);
    J.h = &H;
    /* 3 on the global stack, 4 in the outbox, 2 SENT and flagged again */
    t->segs[3].remark = REMARK_GLOBAL;
    J.remark_global = 3;
    t->segs[4].remark = REMARK_OUTBOX;
    J.remark_outbox = 4;
    t->segs[2].remark = REMARK_SENT | REMARK_AGAIN;
    t->segs[2].remark_to = 7;
    J.remark_outstanding = 3;
}

/* remark_check with the job's mu held, as its callers run it (Note
 * [Checked lock rules] in proto/lock.h) */
static bool remark_check_locked(void)
{
    hd_mutex_lock(&J.mu);
    bool ok = remark_check(&J);
    hd_mutex_unlock(&J.mu);
    return ok;
}

static void teardown(void)
{
    free(H.segs.segs);
    free(H.segs.free_bits);
    free(H.segs.reuse_bits);
}

START_TEST(consistent_tables_pass)
{
    ck_assert(segtab_check(&H.segs));
    ck_assert(remark_check_locked());
}
END_TEST

START_TEST(segtab_counters_are_recounted)
{
    H.segs.n_owned++;
    ck_assert(!segtab_check(&H.segs));
    H.segs.n_owned--;
    H.segs.n_free--; /* the bitmap says one more */
    ck_assert(!segtab_check(&H.segs));
    H.segs.n_free++;
    H.segs.adopted++; /* one orphan more than the counters say */
    ck_assert(!segtab_check(&H.segs));
    H.segs.adopted--;
    H.segs.n_unpunched--; /* Note [Purging free memory] */
    ck_assert(!segtab_check(&H.segs));
    H.segs.n_unpunched++;
    ck_assert(segtab_check(&H.segs));
}
END_TEST

/* Note [Purging free memory]: only a FILLED segment is purged, and a
 * punched segment has no page punched besides. */
START_TEST(segtab_purging_is_filled_only)
{
    H.segs.segs[3].purging = 1; /* OWNED */
    ck_assert(!segtab_check(&H.segs));
    H.segs.segs[3].purging = 0;
    H.segs.segs[5].purging = 1; /* FILLED: its free pages go */
    ck_assert(segtab_check(&H.segs));
    H.segs.segs[5].purging = 0;
    ck_assert(segtab_check(&H.segs));
}
END_TEST

START_TEST(segtab_bitmaps_match_states)
{
    H.segs.segs[5].state = SEG_OWNED; /* reusable, but not FILLED */
    H.segs.n_owned++;
    H.segs.n_filled--;
    ck_assert(!segtab_check(&H.segs));
}
END_TEST

START_TEST(segtab_large_tails_name_their_head)
{
    H.segs.segs[8].run = 5; /* a FILLED segment, not the head */
    ck_assert(!segtab_check(&H.segs));
}
END_TEST

START_TEST(remark_outstanding_is_recounted)
{
    J.remark_outstanding = 2; /* one flagged segment forgotten */
    ck_assert(!remark_check_locked());
}
END_TEST

START_TEST(remark_lists_match_states)
{
    H.segs.segs[3].remark = REMARK_RESCANNING; /* still on the stack */
    ck_assert(!remark_check_locked());
    H.segs.segs[3].remark = REMARK_GLOBAL;
    H.segs.segs[3].remark_next = 3; /* a cycle in the list */
    ck_assert(!remark_check_locked());
    H.segs.segs[3].remark_next = 0;
    H.segs.segs[4].remark = REMARK_OUTBOX | REMARK_AGAIN;
    ck_assert(!remark_check_locked());
}
END_TEST

/* seg_recover as table_take_back runs it: under heap->lock, released
 * through heap_unlock's check only if the table was taken back. */
static int recover(uint64_t cycles, const struct resume_client *kept,
                   const struct seg_sealed *sealed, uint32_t *odd, char *why,
                   size_t n)
{
    heap_lock(&H);
    int rc = seg_recover(&H, cycles, kept, sealed, odd, why, n);
    if (rc == 0)
        heap_unlock(&H);
    else
        hd_mutex_unlock(&H.lock);
    return rc;
}

/* Note [Recovering the segment table]: what a heapd killed inside a
 * critical section can leave is made good; what no heapd writes is
 * refused. */
START_TEST(recovery_repairs_a_table_cut_short)
{
    struct segtab *t = &H.segs;
    char why[256] = "";
    uint32_t odd = 0;
    for (uint32_t i = 11; i < NSEGS; i++)
        t->segs[i].punched = 1; /* never touched */
    t->segs[8].state = SEG_FREE;       /* a large run given back halfway */
    t->free_bits[20 / 64] &= ~(1ull << (20 % 64)); /* a punch under way */
    t->segs[5].fenced = 1;             /* the dead heapd's watch */
    t->segs[10].charge = 3;            /* and its quota records */
    t->segs[40].free_since = 99;       /* stamped after the counters */
    ck_assert_int_eq(recover(7, NULL, NULL, &odd, why, sizeof why), 0);
    ck_assert_str_eq(why, "");
    ck_assert(segtab_check(t));
    for (uint32_t i = 6; i <= 8; i++)
        ck_assert_uint_eq(t->segs[i].state, SEG_FREE);
    ck_assert_uint_eq(t->n_large, 0);
    ck_assert_uint_eq(t->n_free, NSEGS - FIRST - 5);
    ck_assert(t->free_bits[20 / 64] & (1ull << (20 % 64)));
    ck_assert_uint_eq(t->n_reusable, 0);
    ck_assert_uint_eq(t->segs[5].fenced, 0);
    ck_assert_uint_eq(t->segs[10].charge, 0);
    ck_assert_uint_eq(t->segs[2].remark, 0);
    ck_assert_uint_eq(t->segs[40].free_since, 7);
    ck_assert_uint_eq(t->orphaned - t->adopted, 1);
    ck_assert_uint_eq(t->high, 11);
}
END_TEST

/* A table sealed at a clean stop (Note [Recovering the segment table]):
 * as the stop left it, it keeps its reuse bitmap and its orphan counts;
 * one thing a clean stop does not leave, and it is recovered as a killed
 * heapd's. */
static struct resume_client owner11 = {.id = 11};

static void as_a_clean_stop_leaves_it(void)
{
    for (uint32_t i = 2; i <= 4; i++) {
        H.segs.segs[i].owner = owner11.id; /* a suspended client's */
        H.segs.segs[i].remark = 0;         /* no cycle under way */
        H.segs.segs[i].remark_to = 0;
    }
}

START_TEST(recovery_keeps_what_a_clean_stop_sealed)
{
    struct segtab *t = &H.segs;
    struct seg_sealed sealed = {.orphaned = 3, .adopted = 2};
    char why[256] = "";
    uint32_t odd = 99;
    as_a_clean_stop_leaves_it();
    ck_assert_int_eq(recover(0, &owner11, &sealed, &odd, why, sizeof why),
                     0);
    ck_assert_uint_eq(odd, 0);
    ck_assert(segtab_check(t));
    ck_assert_uint_eq(t->n_reusable, 1);
    ck_assert(t->reuse_bits[0] & (1ull << 5));
    ck_assert_uint_eq(t->orphaned, 3);
    ck_assert_uint_eq(t->adopted, 2);
    ck_assert_uint_eq(t->n_owned, 3);
}
END_TEST

START_TEST(recovery_of_a_sealed_table_not_as_sealed)
{
    struct segtab *t = &H.segs;
    struct seg_sealed sealed = {.orphaned = 3, .adopted = 2};
    char why[256] = "";
    uint32_t odd = 0;
    as_a_clean_stop_leaves_it();
    t->free_bits[20 / 64] &= ~(1ull << (20 % 64)); /* a punch under way */
    ck_assert_int_eq(recover(0, &owner11, &sealed, &odd, why, sizeof why),
                     0);
    ck_assert_uint_gt(odd, 0);
    ck_assert(segtab_check(t));
    ck_assert_uint_eq(t->n_reusable, 0);
    ck_assert_uint_eq(t->orphaned - t->adopted, 1);
    /* the orphan counts a clean stop sealed disagree with the records */
    teardown();
    setup();
    as_a_clean_stop_leaves_it();
    sealed.adopted = 1;
    odd = 0;
    ck_assert_int_eq(recover(0, &owner11, &sealed, &odd, why, sizeof why),
                     0);
    ck_assert_uint_gt(odd, 0);
    ck_assert_uint_eq(t->n_reusable, 0);
    ck_assert_uint_eq(t->orphaned, 1);
    ck_assert_uint_eq(t->adopted, 0);
    /* an owner the registry does not name */
    teardown();
    setup();
    as_a_clean_stop_leaves_it();
    sealed.adopted = 2;
    odd = 0;
    ck_assert_int_eq(recover(0, NULL, &sealed, &odd, why, sizeof why), 0);
    ck_assert_uint_gt(odd, 0);
    ck_assert_uint_eq(t->n_owned, 0);
}
END_TEST

START_TEST(recovery_refuses_what_no_heapd_writes)
{
    char why[256] = "";
    uint32_t odd = 0;
    H.segs.segs[9].state = 17;
    ck_assert_int_eq(recover(0, NULL, NULL, &odd, why, sizeof why),
                     -EINVAL);
    ck_assert_msg(strstr(why, "segment 9") && strstr(why, "state 17"),
                  "the refusal does not name the record: %s", why);
    H.segs.segs[9].state = SEG_FILLED;
    H.segs.segs[9].cls = 200;
    ck_assert_int_eq(recover(0, NULL, NULL, &odd, why, sizeof why),
                     -EINVAL);
    ck_assert_msg(strstr(why, "size class 200"),
                  "the refusal does not name the class: %s", why);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("invariants");
    TCase *t = tcase_create("checkers");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, consistent_tables_pass);
    tcase_add_test(t, segtab_counters_are_recounted);
    tcase_add_test(t, segtab_purging_is_filled_only);
    tcase_add_test(t, segtab_bitmaps_match_states);
    tcase_add_test(t, segtab_large_tails_name_their_head);
    tcase_add_test(t, remark_outstanding_is_recounted);
    tcase_add_test(t, remark_lists_match_states);
    tcase_add_test(t, recovery_repairs_a_table_cut_short);
    tcase_add_test(t, recovery_keeps_what_a_clean_stop_sealed);
    tcase_add_test(t, recovery_of_a_sealed_table_not_as_sealed);
    tcase_add_test(t, recovery_refuses_what_no_heapd_writes);
    suite_add_tcase(s, t);
    return check_main(s);
}
