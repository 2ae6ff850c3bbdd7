/* The daemon's executable invariants catch what they claim to: each
 * checker accepts a consistent table built by hand and rejects it once
 * one counter or link is broken (Note [Checking the segment table], Note
 * [Checking remark states] in daemon/gc/); and in a debug build a broken
 * lock rule, or a table broken by the time heap->lock is released, stops
 * the process with a message (Note [Checked lock rules] in proto/lock.h). */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "heap.h"
#include "kept.h"
#include "mark.h"
#include "remark.h"
#include "segment.h"
#include "check_main.h"

enum { NSEGS = 130, FIRST = 1, SHIFT = 16 };

static struct heap H;
static struct mark_job J;
static struct config_heap CFG = {.name = "invariants"};

/* A table of NSEGS segments: 2..4 OWNED, each with its one block in use,
 * 5 FILLED and reusable, 6 a large run of 3 (6 head, 7-8 tail), 10
 * FILLED orphan, the rest FREE; high = 11.  The rest of their memory
 * reads as zero (recovery reads the marks of the segments it orphans:
 * Note [Young blocks of a client gone]; an empty one would come back FREE:
 * Note [An empty segment comes back free]), and no cycle runs. */
static struct layout_control CONTROL;
static void setup(void)
{
    struct segtab *t = &H.segs;
    memset(&H, 0, sizeof H);
    memset(&CONTROL, 0, sizeof CONTROL);
    H.control = &CONTROL;
    H.cfg = &CFG;
    H.seg_shift = SHIFT;
    H.base = mmap(NULL, (size_t)NSEGS << SHIFT, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ck_assert(H.base != MAP_FAILED);
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
    for (uint32_t i = 2; i <= 4; i++) /* an epoch: a block in use */
        layout_seg_marks((uint8_t *)H.base + ((size_t)i << SHIFT))[0] = 1;
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
    munmap(H.base, (size_t)NSEGS << SHIFT);
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
    /* a reuse bit of no segment: the control area's (segment 0) */
    teardown();
    setup();
    as_a_clean_stop_leaves_it();
    t->reuse_bits[0] |= 1;
    odd = 0;
    ck_assert_int_eq(recover(0, &owner11, &sealed, &odd, why, sizeof why),
                     0);
    ck_assert_uint_gt(odd, 0);
    ck_assert(segtab_check(t));
    ck_assert_uint_eq(t->n_reusable, 0);
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

#ifndef NDEBUG
/* Run FN in a child of this test, its stderr read into OUT (N bytes, the
 * rest drained); returns its wait status. */
static int run_child(void (*fn)(void), char *out, size_t n)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core); /* an abort is the expected end */
        dup2(p[1], STDERR_FILENO);
        close(p[0]);
        close(p[1]);
        fn();
        fflush(stderr);
        _exit(0);
    }
    close(p[1]);
    size_t got = 0;
    char scratch[256];
    ssize_t r;
    while ((r = read(p[0], got + 1 < n ? out + got : scratch,
                     got + 1 < n ? n - 1 - got : sizeof scratch)) > 0)
        got += got + 1 < n ? (size_t)r : 0;
    out[got] = 0;
    close(p[0]);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return st;
}

static bool aborted(int st)
{
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static bool exited_0(int st)
{
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* the sweep frees FILLED segment 10 (Note [Segment lifecycle], (5)) */
static void release_unlocked(void)
{
    seg_release(&H, 10);
}
static void release_locked(void)
{
    heap_lock(&H);
    seg_release(&H, 10);
    heap_unlock(&H);
    if (H.segs.segs[10].state != SEG_FREE) {
        fprintf(stderr, "seg_release left segment 10 in state %u\n",
                H.segs.segs[10].state);
        _exit(1);
    }
}
static void remark_unlocked(void)
{
    (void)remark_none_locked(&J);
}
static void lock_twice(void)
{
    heap_lock(&H);
    heap_lock(&H);
}

/* Note [Checked lock rules]: a function documented as run with a lock
 * held aborts, naming itself and the lock, when it runs without; with
 * the lock it runs.  Taking a lock twice aborts rather than hangs. */
START_TEST(a_broken_lock_rule_aborts_naming_the_lock)
{
    char out[2048];
    int st = run_child(release_unlocked, out, sizeof out);
    ck_assert_msg(aborted(st), "seg_release without heap->lock ended with "
                  "wait status %#x, not SIGABRT: %s", st, out);
    ck_assert_msg(strstr(out, "lock rule broken in seg_release") &&
                      strstr(out, "&h->lock is not held"),
                  "the abort does not name the function and the lock: %s",
                  out);
    st = run_child(release_locked, out, sizeof out);
    ck_assert_msg(exited_0(st), "seg_release with heap->lock held ended "
                  "with wait status %#x: %s", st, out);

    st = run_child(remark_unlocked, out, sizeof out);
    ck_assert_msg(aborted(st) && strstr(out, "remark_none_locked") &&
                      strstr(out, "&j->mu is not held"),
                  "remark_none_locked without the job's mu: wait status "
                  "%#x: %s", st, out);

    st = run_child(lock_twice, out, sizeof out);
    ck_assert_msg(aborted(st) && strstr(out, "lock_twice") &&
                      strstr(out, "is already held"),
                  "heap->lock taken twice by one thread: wait status %#x: "
                  "%s", st, out);
}
END_TEST

/* A counter a release forgot, as a stray store would leave it, found at
 * the next release of heap->lock after a state changed */
static void corrupt_then_release(void)
{
    heap_lock(&H);
    /* the release below is no sampled one (1 % SEGTAB_CHECK_EVERY): only
     * the state change can make it check */
    H.segs.releases = 1;
    H.segs.n_owned++;
    seg_release(&H, 10);
    heap_unlock(&H);
}
/* The same without a state change: found within SEGTAB_CHECK_EVERY
 * releases */
static void corrupt_then_idle(void)
{
    heap_lock(&H);
    H.segs.segs[2].fenced = 1; /* fenced, but n_fenced says none */
    heap_unlock(&H);
    for (int k = 0; k < SEGTAB_CHECK_EVERY; k++) {
        heap_lock(&H);
        heap_unlock(&H);
    }
}

/* Note [Checking the segment table]: heap_unlock runs the checker in a
 * debug build, and its assert stops the process at the release. */
START_TEST(a_broken_table_aborts_at_the_next_unlock)
{
    char out[2048];
    int st = run_child(corrupt_then_release, out, sizeof out);
    ck_assert_msg(aborted(st), "a release after n_owned went wrong ended "
                  "with wait status %#x, not SIGABRT: %s", st, out);
    ck_assert_msg(strstr(out, "n_owned 4, but 3 segments are OWNED") &&
                      strstr(out, "segtab_check"),
                  "the checker did not say what disagrees: %s", out);

    st = run_child(corrupt_then_idle, out, sizeof out);
    ck_assert_msg(aborted(st), "%d releases after a stray fence ended with "
                  "wait status %#x, not SIGABRT: %s",
                  SEGTAB_CHECK_EVERY + 1, st, out);
    ck_assert_msg(strstr(out, "n_fenced 0, but 1 segments are fenced"),
                  "the checker did not say what disagrees: %s", out);
}
END_TEST
#endif

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
#ifndef NDEBUG
    TCase *a = tcase_create("asserted");
    tcase_add_checked_fixture(a, setup, teardown);
    tcase_add_test(a, a_broken_lock_rule_aborts_naming_the_lock);
    tcase_add_test(a, a_broken_table_aborts_at_the_next_unlock);
    suite_add_tcase(s, a);
#endif
    return check_main(s);
}
