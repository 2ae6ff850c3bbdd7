/* Memory that follows the live data, against a real heapd: free pages of
 * partly used segments go back (Note [Purging free memory] in
 * daemon/gc/purge.c), an idle heap keeps nothing it does not hold objects in
 * (Note [Heap goal] in daemon/gc/collector.c), and a client refills the
 * holes of its size class before it takes new memory (Note [Reuse before
 * growth] in client/reserve.c). */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "check_main.h"

static struct daemon_proc D;

/* Objects of 2 KiB with their header: two blocks to a page, each block
 * straddling a page boundary (the blocks start past the marks). */
#define BIG_BYTES (2048 - 8)
#define BIG_N 4000
#define KEEP_EVERY 16

static void start(void)
{
    harness_start(&D, harness_default_config("@SOCK@", "verify = true\n"));
}

/* A rooted holder of N references, in root slot *SLOT. */
static void **holder(heapd_mutator *m, size_t n, size_t *slot)
{
    void **h = heapd_alloc(m, n, 0);
    ck_assert_msg(h, "a holder of %zu references: %s", n, heapd_last_error());
    *slot = heapd_root_push(m, h);
    ck_assert_uint_ne(*slot, (size_t)-1);
    return h;
}

static void fill(void *o, size_t n, unsigned i)
{
    memset(o, (int)(i & 0x7f) + 1, n);
}

/* Leave as every test does: M's holder popped (POP roots), M detached,
 * both clients gone, the heap sound, heapd stopped cleanly. */
static void finish(heapd_client *c, heapd_mutator *m, heapd_client *ctl,
                   size_t pop)
{
    if (pop)
        heapd_root_pop(m, pop);
    heapd_detach(m);
    heapd_disconnect(c);
    heapd_disconnect(ctl);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}

/* Stats with the heap idle: what a cycle's purge left.  Asked on M's
 * client C's own connection: the segments the waited collection gives
 * back after its cycle (Note [Reserve sizing]) go as a SegmentReturn,
 * which has no reply, and only the same connection orders a request
 * after it (over the control client's, 1 run in 7 under load saw them
 * still held). */
static heapd_stats_t idle_stats(heapd_mutator *m, heapd_client *c)
{
    harness_collect(m);
    heapd_blocking_enter(m);
    heapd_stats_t st = harness_stats(c);
    heapd_blocking_leave(m);
    return st;
}

/* The segments of the size class of blocks of OBJECT_SIZE bytes in the
 * heap, reserves included (all zero if there are none). */
static heapd_class_segments class_of(heapd_client *ctl, uint32_t object_size)
{
    static heapd_heap_segments hs[HEAPD_STATS_MAX_HEAPS];
    size_t n = 0;
    ck_assert_int_eq(heapd_segments(ctl, NULL, hs, HEAPD_STATS_MAX_HEAPS,
                                    &n), 0);
    ck_assert_uint_ge(n, 1);
    for (size_t k = 0; k < hs[0].class_count; k++)
        if (hs[0].classes[k].object_size == object_size)
            return hs[0].classes[k];
    return (heapd_class_segments){0};
}

static uint32_t class_segments(heapd_client *ctl, uint32_t object_size)
{
    return class_of(ctl, object_size).segments;
}

/* The refills of a test of what reuse saves wait for every reuse_only
 * answer (the hook of client/reserve.c's reuse_hook_ns; 10 s, a bound):
 * otherwise how many blank segments a refill takes before the first
 * answer comes is the machine's load, not the mechanism under test.
 * Before the client connects. */
static void wait_for_reuse_answers(void)
{
    ck_assert_int_eq(setenv("HEAPD_REUSE_WAIT_US", "10000000", 1), 0);
}

/* Note [Purging free memory]: a heap of 2 KiB blocks of which one in 16
 * stays alive gives back the pages no block in use overlaps, at the first
 * cycle after the drop (nobody allocated while it ran: an idle heap keeps
 * no free memory); the blocks kept are intact, new ones on punched pages
 * read as zero, and refilling the holes takes no new memory. */
START_TEST(free_pages_of_partly_used_segments_go_back)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t slot;
    start();
    wait_for_reuse_answers();
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    void **h = holder(m, BIG_N, &slot);
    for (unsigned i = 0; i < BIG_N; i++) {
        void *o = heapd_alloc(m, 0, BIG_BYTES);
        ck_assert_ptr_nonnull(o);
        fill(o, BIG_BYTES, i);
        heapd_write(m, h, &h[i], o);
    }
    heapd_stats_t full = idle_stats(m, c);
    uint64_t full_class = class_of(ctl, 2048).committed_bytes;
    for (unsigned i = 0; i < BIG_N; i++)
        if (i % KEEP_EVERY != 0)
            heapd_write(m, h, &h[i], NULL);
    heapd_stats_t sparse = idle_stats(m, c);
    uint64_t sparse_class = class_of(ctl, 2048).committed_bytes;
    /* of 8 MB of blocks, one in 16 survives; a page overlaps three
     * blocks (they start past the marks), so each survivor keeps two
     * pages: some 5 MB of pages hold nothing (4.9 to 5.0 MB punched in
     * every run seen; 3.5 MB leaves room for the client's current
     * segment, which is not punched) */
    const uint64_t freed = 7u << 19;
    fprintf(stderr, "free_pages: committed %" PRIu64 " -> %" PRIu64
            " (the class's segments %" PRIu64 " -> %" PRIu64 "), purged %"
            PRIu64 " -> %" PRIu64 "\n", full.bytes_committed,
            sparse.bytes_committed, full_class, sparse_class,
            full.purged_bytes, sparse.purged_bytes);
    ck_assert_msg(sparse.purged_bytes >= full.purged_bytes + freed,
                  "purged_bytes %" PRIu64 " -> %" PRIu64 ": the free pages "
                  "of the partly used segments were not given back",
                  full.purged_bytes, sparse.purged_bytes);
    /* the class's segments, not the heap's committed bytes: the client's
     * prefault thread maps blank segments of its reserve in when it gets
     * a core (Note [Pre-faulting]), which moved the heap's figure by up
     * to 2 MB between the two looks (an ASan run: 8.8 -> 5.8 MB) */
    ck_assert_msg(sparse_class + freed <= full_class,
                  "the class's segments held %" PRIu64 " -> %" PRIu64
                  " bytes after dropping 15 of every 16 blocks", full_class,
                  sparse_class);
    for (unsigned i = 0; i < BIG_N; i += KEEP_EVERY) {
        const unsigned char *b = h[i];
        ck_assert_msg(b[0] == (i & 0x7f) + 1 &&
                          b[BIG_BYTES - 1] == (i & 0x7f) + 1,
                      "kept block %u was damaged by the purge", i);
    }
    /* refill the holes: zeroed blocks, and no segments beyond the first
     * fill's (Note [Reuse before growth]) */
    uint32_t segs = class_segments(ctl, 2048);
    for (unsigned i = 0; i < BIG_N; i++) {
        if (i % KEEP_EVERY == 0)
            continue;
        unsigned char *o = heapd_alloc(m, 0, BIG_BYTES);
        ck_assert_ptr_nonnull(o);
        for (unsigned k = 0; k < BIG_BYTES; k += 509)
            if (o[k] != 0)
                ck_abort_msg("new block %u byte %u is %u, not 0", i, k,
                             o[k]);
        fill(o, BIG_BYTES, i);
        heapd_write(m, h, &h[i], o);
    }
    idle_stats(m, c);
    /* partly free segments are taken before blank ones (Note [Reuse
     * before growth]): a quarter more at most (twice as many without) */
    fprintf(stderr, "free_pages: the refill took %u segments for %u\n",
            class_segments(ctl, 2048), segs);
    ck_assert_msg(class_segments(ctl, 2048) <= segs + segs / 4 + 1,
                  "refilling the holes of %u segments took %u", segs,
                  class_segments(ctl, 2048));
    for (unsigned i = 0; i < BIG_N; i++) {
        const unsigned char *b = h[i];
        ck_assert_msg(b[0] == (i & 0x7f) + 1 &&
                          b[BIG_BYTES / 2] == (i & 0x7f) + 1,
                      "block %u lost its bytes", i);
    }
    finish(c, m, ctl, 1);
}
END_TEST

/* The parts of Note [Where the memory is] in daemon/report.c, of heap
 * "default" in *HS, once they add up to its committed bytes within a
 * page per segment measured: a client's prefault thread may map its
 * reserve in while they are read (Note [Pre-faulting]), so they are read
 * again, at most 100 times, until they agree. */
static void where_of(heapd_client *ctl, heapd_heap_segments *hs)
{
    uint64_t sum = 0;
    for (int tries = 0; tries < 100; tries++) {
        size_t n = 0;
        ck_assert_int_eq(heapd_segments(ctl, "default", hs, 1, &n), 0);
        ck_assert_uint_eq(n, 1);
        sum = hs->committed_control + hs->committed_free +
              hs->committed_owned + hs->committed_filled +
              hs->committed_large;
        uint64_t slack = (uint64_t)hs->total * 4096u;
        if (sum <= hs->committed_bytes + slack &&
            hs->committed_bytes <= sum + slack)
            return;
    }
    ck_abort_msg("100 segment reports in a row, none whose parts (control "
                 "%" PRIu64 ", free %" PRIu64 ", owned %" PRIu64 ", filled %"
                 PRIu64 ", large %" PRIu64 ": %" PRIu64 ") add up to its "
                 "committed bytes %" PRIu64, hs->committed_control,
                 hs->committed_free, hs->committed_owned,
                 hs->committed_filled, hs->committed_large, sum,
                 hs->committed_bytes);
}

/* Note [Where the memory is]: the segments report tells the blocks in
 * use of given-back segments from their free room, and large objects
 * from both; dropping 15 of every 16 blocks shows in the blocks in use
 * and, once purged, in the filled segments' memory. */
START_TEST(where_the_memory_is_adds_up)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t slot;
    static heapd_heap_segments full, sparse;
    start();
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    void **h = holder(m, BIG_N + 1, &slot);
    for (unsigned i = 0; i < BIG_N; i++) {
        void *o = heapd_alloc(m, 0, BIG_BYTES);
        ck_assert_ptr_nonnull(o);
        fill(o, BIG_BYTES, i);
        heapd_write(m, h, &h[i], o);
    }
    const size_t large = 4u << 20;
    void *big = heapd_alloc(m, 0, large);
    ck_assert_ptr_nonnull(big);
    memset(big, 1, large);
    heapd_write(m, h, &h[BIG_N], big);
    idle_stats(m, c);
    where_of(ctl, &full);
    const uint64_t blocks = (uint64_t)BIG_N * 2048;
    fprintf(stderr, "where: committed %" PRIu64 ": control %" PRIu64
            ", free %" PRIu64 ", owned %" PRIu64 " (in use %" PRIu64
            "), filled %" PRIu64 " (in use %" PRIu64 "), large %" PRIu64
            "\n", full.committed_bytes, full.committed_control,
            full.committed_free, full.committed_owned, full.in_use_owned,
            full.committed_filled, full.in_use_filled, full.committed_large);
    ck_assert_msg(full.committed_control > 0, "no control area counted");
    ck_assert_msg(full.committed_large >= large &&
                      full.committed_large <= large + full.segment_size,
                  "a large object of %zu bytes: %" PRIu64 " bytes of large "
                  "segments", large, full.committed_large);
    /* every 2 KiB block is in use, in the client's current segment or a
     * given-back one; nothing else of that size was made */
    uint64_t in_use = full.in_use_owned + full.in_use_filled;
    ck_assert_msg(in_use >= blocks && in_use <= blocks + 2 * full.segment_size,
                  "%u blocks of 2 KiB in use: %" PRIu64 " bytes in blocks in "
                  "use counted", BIG_N, in_use);
    ck_assert_msg(full.in_use_filled <= full.committed_filled &&
                      full.committed_filled <=
                          full.in_use_filled + full.filled * 8192u,
                  "filled segments hold %" PRIu64 " bytes, %" PRIu64
                  " of them in blocks in use: full segments have no room",
                  full.committed_filled, full.in_use_filled);
    for (unsigned i = 0; i < BIG_N; i++)
        if (i % KEEP_EVERY != 0)
            heapd_write(m, h, &h[i], NULL);
    idle_stats(m, c);
    where_of(ctl, &sparse);
    fprintf(stderr, "where, sparse: filled %" PRIu64 " (in use %" PRIu64
            "), owned %" PRIu64 " (in use %" PRIu64 ")\n",
            sparse.committed_filled, sparse.in_use_filled,
            sparse.committed_owned, sparse.in_use_owned);
    in_use = sparse.in_use_owned + sparse.in_use_filled;
    ck_assert_msg(in_use >= blocks / KEEP_EVERY &&
                      in_use <= blocks / KEEP_EVERY + 2 * sparse.segment_size,
                  "%u blocks of 2 KiB kept: %" PRIu64 " bytes in blocks in "
                  "use counted", BIG_N / KEEP_EVERY, in_use);
    /* Note [Purging free memory]: most free pages went (see
     * free_pages_of_partly_used_segments_go_back for how many) */
    ck_assert_msg(sparse.committed_filled + (3u << 20) <=
                      full.committed_filled,
                  "the filled segments held %" PRIu64 " -> %" PRIu64
                  " bytes after 15 of every 16 blocks died",
                  full.committed_filled, sparse.committed_filled);
    ck_assert_uint_ge(sparse.committed_large, large);
    finish(c, m, ctl, 1);
}
END_TEST

/* Note [Where the memory is]: a young mutator's nursery is counted as
 * what it says it holds (its young_held_bytes: its tracked segments),
 * at most the segments its client holds. */
START_TEST(where_counts_nurseries)
{
    heapd_client *c;
    heapd_mutator *m;
    static heapd_heap_segments hs;
    start();
    harness_attach(&D, &c, &m);
    heapd_mutator *y;
    heapd_mutator_opts yo = {.flags = HEAPD_MUTATOR_YOUNG,
                             .young_size = 64u << 20};
    ck_assert_int_eq(heapd_attach_opts(c, &yo, &y), 0);
    heapd_client *ctl = harness_control(&D);
    const size_t young = 2u << 20;
    for (size_t k = 0; k < young / 256; k++)
        ck_assert_ptr_nonnull(heapd_alloc(y, 0, 256 - 8));
    heapd_blocking_enter(y);
    heapd_blocking_enter(m);
    size_t n = 0;
    ck_assert_int_eq(heapd_segments(ctl, "default", &hs, 1, &n), 0);
    fprintf(stderr, "where, young: held %" PRIu64 ", owned %" PRIu64
            " (in use %" PRIu64 ")\n", hs.young_held, hs.committed_owned,
            hs.in_use_owned);
    ck_assert_msg(hs.young_held >= young &&
                      hs.young_held <= (uint64_t)hs.owned * hs.segment_size,
                  "a nursery of %zu bytes of young objects: young_held %"
                  PRIu64 ", %" PRIu32 " owned segments", young,
                  hs.young_held, hs.owned);
    heapd_blocking_leave(m);
    heapd_blocking_leave(y);
    heapd_detach(y);
    finish(c, m, ctl, 0);
}
END_TEST

/* A node of NBYTES raw bytes and one reference, made the head of the
 * list whose head root slot SLOT of M holds; NULL (errno set) if it
 * cannot be allocated. */
static void *list_push(heapd_mutator *m, size_t slot, size_t nbytes)
{
    void **o = heapd_alloc(m, 1, nbytes);
    if (o) {
        heapd_write(m, o, &o[0], heapd_root_get(m, slot));
        heapd_root_set(m, slot, o);
    }
    return o;
}

/* Note [Memory limit] in daemon/gc/collector.c: LIMIT_MIB of it */
#define LIMIT_MIB 32u

static void start_limited(void)
{
    char extra[64];
    snprintf(extra, sizeof extra, "verify = true\nmemory_limit = %uM\n",
             LIMIT_MIB);
    harness_start(&D, harness_default_config("@SOCK@", extra));
}

/* The heap's committed bytes now, M blocked while it asks. */
static uint64_t committed_now(heapd_mutator *m, heapd_client *ctl)
{
    heapd_blocking_enter(m);
    heapd_stats_t st = harness_stats(ctl);
    heapd_blocking_leave(m);
    return st.bytes_committed;
}

/* Note [Memory limit]: a writer whose live data (14 MiB, whose goal at
 * gc_overhead 100 is twice that, and its cap more) fits keeps allocating
 * garbage, 20 times the limit of objects of 64 bytes to 4 KiB, and is
 * never refused; the heap never holds more than the limit (its control
 * area aside, a few pages with one client). */
START_TEST(memory_limit_holds_under_a_garbage_writer)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t slot;
    start_limited();
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    const unsigned keep = 3584;
    void **h = holder(m, keep, &slot);
    for (unsigned i = 0; i < keep; i++) {
        void *o = heapd_alloc(m, 0, 4096 - 8);
        ck_assert_ptr_nonnull(o);
        heapd_write(m, h, &h[i], o);
    }
    uint64_t cycles0 = harness_stats(ctl).cycles_completed;
    uint64_t most = 0, made = 0, seed = 42;
    const uint64_t total = (uint64_t)20 * LIMIT_MIB << 20;
    while (made < total) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 64 + (size_t)(seed >> 33) % (4096 - 64);
        void *o = heapd_alloc(m, 0, n);
        ck_assert_msg(o, "refused after %" PRIu64 " bytes: %s", made,
                      heapd_last_error());
        memset(o, 1, n);
        if ((made / (1u << 20)) != ((made + n) / (1u << 20))) {
            uint64_t now = committed_now(m, ctl);
            most = now > most ? now : most;
        }
        made += n;
    }
    heapd_stats_t st = harness_stats(ctl);
    fprintf(stderr, "memory_limit %u MiB: %" PRIu64 " MiB of garbage, "
            "committed at most %" PRIu64 " KiB, %" PRIu64 " cycles, %" PRIu64
            " refusals\n", LIMIT_MIB, total >> 20, most >> 10,
            st.cycles_completed - cycles0, st.limit_refusals);
    ck_assert_uint_eq(st.memory_limit, (uint64_t)LIMIT_MIB << 20);
    ck_assert_uint_eq(st.limit_refusals, 0);
    /* the control area: a page or two per slot touched, the daemon's */
    ck_assert_msg(most <= ((uint64_t)LIMIT_MIB << 20) + (1u << 20),
                  "the heap held %" PRIu64 " bytes, its limit %u MiB", most,
                  LIMIT_MIB);
    for (unsigned i = 0; i < keep; i++)
        ck_assert_ptr_nonnull(h[i]);
    finish(c, m, ctl, 1);
}
END_TEST

/* Note [Memory limit]: live data that outgrows the limit is refused, with
 * ENOMEM and a message naming memory_limit, after collections; an object
 * larger than the limit at once; the heap stays sound, and what is freed
 * can be allocated again. */
START_TEST(memory_limit_refuses_what_cannot_fit)
{
    heapd_client *c;
    heapd_mutator *m;
    start_limited();
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    size_t slot = heapd_root_push(m, NULL);
    ck_assert_uint_ne(slot, (size_t)-1);
    uint64_t kept = 0;
    void *o;
    /* a list of 1 KiB nodes, each the head, until one is refused */
    while ((o = list_push(m, slot, 1024 - 16)) != NULL) {
        kept += 1024;
        ck_assert_msg(kept <= 2 * ((uint64_t)LIMIT_MIB << 20),
                      "%" PRIu64 " bytes kept alive under a limit of %u "
                      "MiB, none refused", kept, LIMIT_MIB);
    }
    int e = errno;
    const char *why = heapd_last_error();
    fprintf(stderr, "memory_limit: refused after %" PRIu64 " KiB kept: %s\n",
            kept >> 10, why);
    ck_assert_int_eq(e, ENOMEM);
    ck_assert_msg(strstr(why, "memory_limit"), "the message names no key: %s",
                  why);
    ck_assert_uint_ge(kept, ((uint64_t)LIMIT_MIB << 20) / 2);
    ck_assert_uint_ge(harness_stats(ctl).limit_refusals, 1);
    /* larger than the limit: never */
    errno = 0;
    ck_assert_ptr_null(heapd_alloc(m, 0, (size_t)(LIMIT_MIB + 1) << 20));
    ck_assert_int_eq(errno, ENOMEM);
    ck_assert_msg(strstr(heapd_last_error(), "can never fit"), "%s",
                  heapd_last_error());
    /* every node kept is whole; dropped, they make room again */
    uint64_t n = 0;
    for (void *p = heapd_root_get(m, slot); p; p = ((void **)p)[0])
        n++;
    ck_assert_uint_eq(n * 1024, kept);
    heapd_root_set(m, slot, NULL);
    harness_collect(m);
    for (unsigned i = 0; i < 4096; i++)
        ck_assert_msg(heapd_alloc(m, 0, 4096 - 8), "refused after the drop: "
                      "%s", heapd_last_error());
    finish(c, m, ctl, 1);
}
END_TEST

/* Note [Memory limit]: at the limit, a new client allocates in the holes
 * of partly free segments of its class, which are all the room there is:
 * one client fills the heap to its limit with 1 KiB objects and drops
 * every other one (each page keeps two: nothing to purge), and a second
 * client, its reserve empty, then allocates half as much again, all of
 * it in those holes (Note [Reuse before growth]: the request it makes
 * itself names its class). */
START_TEST(memory_limit_leaves_the_holes_to_new_clients)
{
    heapd_client *c, *c2;
    heapd_mutator *m, *m2;
    start_limited();
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    const size_t n = ((size_t)LIMIT_MIB << 20) / 1024;
    size_t slot;
    void **h = holder(m, n, &slot);
    size_t kept = 0;
    for (; kept < n; kept++) {
        void *o = heapd_alloc(m, 0, 1024 - 8);
        if (!o)
            break;
        heapd_write(m, h, &h[kept], o);
    }
    ck_assert_msg(kept < n, "%zu objects of 1 KiB under a limit of %u MiB, "
                  "none refused", kept, LIMIT_MIB);
    ck_assert_int_eq(errno, ENOMEM);
    for (size_t i = 0; i < kept; i += 2)
        heapd_write(m, h, &h[i], NULL);
    harness_collect(m);
    uint64_t refused = harness_stats(ctl).limit_refusals;
    harness_attach(&D, &c2, &m2);
    /* a list of 1 KiB nodes, each the head: no holder of another class */
    size_t slot2 = heapd_root_push(m2, NULL);
    ck_assert_uint_ne(slot2, (size_t)-1);
    for (size_t i = 0; i < kept / 4; i++)
        ck_assert_msg(list_push(m2, slot2, 1024 - 16), "the second client "
                      "was refused after %zu of %zu objects, with %zu holes "
                      "of its class: %s", i, kept / 4, kept / 2,
                      heapd_last_error());
    ck_assert_uint_eq(harness_stats(ctl).limit_refusals, refused);
    for (size_t i = 1; i < kept; i += 2)
        ck_assert_ptr_nonnull(h[i]);
    heapd_root_pop(m2, 1);
    heapd_detach(m2);
    heapd_disconnect(c2);
    finish(c, m, ctl, 1);
}
END_TEST

/* Note [Heap goal]: memory freed by a cycle nobody allocated during is
 * not kept for allocation that will not come: 40 MB of small objects,
 * all dropped, leave the heap holding less than 4 MB beside the segments
 * the client holds (its reserve, Note [Reserve sizing]). */
START_TEST(an_idle_heap_keeps_no_free_memory)
{
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    size_t r = heapd_root_push(m, NULL);
    for (unsigned i = 0; i < 40u * 1024 * 1024 / 64; i++) {
        void **o = heapd_alloc(m, 1, 48);
        ck_assert_ptr_nonnull(o);
        heapd_write(m, o, &o[0], heapd_root_get(m, r));
        heapd_root_set(m, r, o);
    }
    heapd_stats_t full = idle_stats(m, c);
    ck_assert_uint_ge(full.bytes_committed, 40u << 20);
    heapd_root_set(m, r, NULL);
    heapd_stats_t empty = idle_stats(m, c);
    const struct layout_control *ctl_area = heapd_heap_base(c);
    uint64_t held = empty.segments_owned * ctl_area->segment_size;
    fprintf(stderr, "idle heap: committed %" PRIu64 " -> %" PRIu64
            " (%" PRIu64 " bytes in blocks, %" PRIu64 " held)\n",
            full.bytes_committed, empty.bytes_committed, empty.block_bytes,
            held);
    ck_assert_msg(empty.bytes_committed < held + (4u << 20),
                  "an idle heap of no live objects holds %" PRIu64
                  " bytes, %" PRIu64 " of them in segments its client "
                  "holds", empty.bytes_committed, held);
    finish(c, m, ctl, 0);
}
END_TEST

/* Note [Heap goal]: a heap whose collector has a core of its own (one
 * mutator on this 2-CPU machine) starts a cycle early, before a budget is
 * allocated, once the memory it holds nears its goal -- twice its live
 * bytes at gc_overhead 100 -- so that a steady stream of updates keeps
 * it there: 16 MiB of 168-byte objects, each update replacing a random
 * one, eight times the live data in all.  The fill and the updates stop
 * whenever a cycle is under way until it ends, so that what the heap
 * holds is what the trigger decided, not how fast the collector ran
 * beside them (a loaded machine, a sanitizer): a cycle a budget at a time
 * held 2.3 to 2.4 times the live bytes so.  (A fill that did not stop ran
 * beside the stall suite once to 2.75 times, a cycle that a core's loss
 * let the fill outrun, its holes purged only a dozen cycles later.) */
#define UPD_HOLDERS 16u
#define UPD_PER_HOLDER 6144u
#define UPD_BYTES 160u

/* After every 256 KiB MADE allocated: the heap's stats, and the end of
 * the cycle under way if one is; committed memory past the fill's
 * transient (two cycles after CYCLES0) raises *MOST. */
static void upd_pace(heapd_mutator *m, heapd_client *ctl, uint64_t *made,
                     uint64_t cycles0, uint64_t *most)
{
    if ((*made += UPD_BYTES + 8) < (256u << 10))
        return;
    *made = 0;
    heapd_blocking_enter(m);
    heapd_stats_t st = harness_stats(ctl);
    if (most && st.cycles_completed >= cycles0 + 2 &&
        st.bytes_committed > *most)
        *most = st.bytes_committed;
    if (st.phase != LAYOUT_PHASE_IDLE)
        harness_wait_stat(&D, ctl, cycles_completed, >=,
                          st.cycles_completed + 1);
    heapd_blocking_leave(m);
}

START_TEST(updates_keep_a_heap_with_a_core_to_its_goal)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t slot;
    start();
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    void **top = holder(m, UPD_HOLDERS, &slot);
    uint64_t made = 0;
    for (unsigned k = 0; k < UPD_HOLDERS; k++) {
        void **h = heapd_alloc(m, UPD_PER_HOLDER, 0);
        ck_assert_ptr_nonnull(h);
        top = heapd_root_get(m, slot);
        heapd_write(m, top, &top[k], h);
        for (unsigned i = 0; i < UPD_PER_HOLDER; i++) {
            void *o = heapd_alloc(m, 0, UPD_BYTES);
            ck_assert_ptr_nonnull(o);
            fill(o, UPD_BYTES, i);
            h = ((void **)heapd_root_get(m, slot))[k];
            heapd_write(m, h, &h[i], o);
            upd_pace(m, ctl, &made, 0, NULL);
        }
    }
    const uint64_t n = (uint64_t)UPD_HOLDERS * UPD_PER_HOLDER;
    /* what a cycle marks: the objects, the holders, their headers */
    const uint64_t live = n * (UPD_BYTES + 8) + UPD_HOLDERS *
                          (UPD_PER_HOLDER * 8 + 8) + UPD_HOLDERS * 8 + 8;
    uint64_t cycles0 = harness_stats(ctl).cycles_completed;
    uint64_t most = 0, seed = 7;
    for (uint64_t u = 0; u < 8 * n; u++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        unsigned k = (unsigned)(seed >> 33) % UPD_HOLDERS;
        unsigned i = (unsigned)(seed >> 40) % UPD_PER_HOLDER;
        void *o = heapd_alloc(m, 0, UPD_BYTES);
        if (!o)
            ck_abort_msg("update %" PRIu64 ": %s", u, heapd_last_error());
        fill(o, UPD_BYTES, (unsigned)u);
        void **h = ((void **)heapd_root_get(m, slot))[k];
        heapd_write(m, h, &h[i], o);
        upd_pace(m, ctl, &made, cycles0, &most);
    }
    heapd_stats_t st = harness_stats(ctl);
    fprintf(stderr, "updates: %" PRIu64 " KiB live, committed at most %"
            PRIu64 " KiB (%.2f times), %" PRIu64 " cycles\n", live >> 10,
            most >> 10, (double)most / (double)live,
            st.cycles_completed - cycles0);
    ck_assert_uint_gt(most, 0);
    ck_assert_msg(most <= 2 * live + (1u << 20),
                  "a heap of %" PRIu64 " live bytes held %" PRIu64
                  " under updates, past its goal of twice that", live, most);
    finish(c, m, ctl, 1);
}
END_TEST

/* Note [Reserve sizing]: a program that waits for a collection gives its
 * reserve and its current segments back first, and that cycle's purge
 * returns them to the system.  After 40 MB of small objects allocated as
 * fast as one thread can (the reserve grows to several batches), all
 * dropped, the client holds no segment, and the heap little beside its
 * control area; and the mutator allocates again. */
/* A chain of 40 MB of small objects in root slot R, in a frame of its
 * own, gone before the collection scans the stack; the most segments
 * the client held meanwhile. */
static __attribute__((noinline)) uint64_t fill_chain(heapd_mutator *m,
                                                    heapd_client *ctl,
                                                    size_t r)
{
    uint64_t most_held = 0;
    for (unsigned i = 0; i < 40u * 1024 * 1024 / 64; i++) {
        void **o = heapd_alloc(m, 1, 48);
        ck_assert_ptr_nonnull(o);
        heapd_write(m, o, &o[0], heapd_root_get(m, r));
        heapd_root_set(m, r, o);
        if (i % 65536 == 0) {
            heapd_blocking_enter(m);
            heapd_stats_t st = harness_stats(ctl);
            heapd_blocking_leave(m);
            if (st.segments_owned > most_held)
                most_held = st.segments_owned;
        }
    }
    heapd_root_set(m, r, NULL);
    return most_held;
}

START_TEST(a_waited_collection_takes_the_reserve_back)
{
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    const struct layout_control *ctl_area = heapd_heap_base(c);
    size_t r = heapd_root_push(m, NULL);
    uint64_t most_held = fill_chain(m, ctl, r);
    heapd_stats_t empty = idle_stats(m, c);
    fprintf(stderr, "waited collection: the client held up to %" PRIu64
            " segments while it allocated, %" PRIu64 " after; committed "
            "%" PRIu64 "\n", most_held, empty.segments_owned,
            empty.bytes_committed);
    ck_assert_msg(most_held > 2, "the reserve never grew past %" PRIu64
                  " segments: nothing to take back", most_held);
    ck_assert_msg(empty.segments_owned == 0, "after a waited collection "
                  "the client holds %" PRIu64 " segments: its reserve or "
                  "its current one", empty.segments_owned);
    ck_assert_msg(empty.bytes_committed <
                      ctl_area->segment_size + (4u << 20),
                  "an idle heap of no live objects holds %" PRIu64
                  " bytes", empty.bytes_committed);
    void **o = heapd_alloc(m, 1, 48);
    ck_assert_msg(o, "after a waited collection: %s", heapd_last_error());
    ck_assert_ptr_null(o[0]);
    finish(c, m, ctl, 0);
}
END_TEST

/* Note [Reuse before growth]: a client that drops half its objects of a
 * size class at random and then allocates as many again fills the holes:
 * the class's segments grow by an eighth at most. */
START_TEST(holes_are_refilled_before_new_segments)
{
    enum { N = 60000 };
    heapd_client *c;
    heapd_mutator *m;
    size_t slot;
    start();
    wait_for_reuse_answers();
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    void **h = holder(m, N, &slot);
    const uint32_t size = 104; /* 96 bytes and the header: class 104 */
    for (unsigned i = 0; i < N; i++) {
        void *o = heapd_alloc(m, 0, size - 8);
        ck_assert_ptr_nonnull(o);
        heapd_write(m, h, &h[i], o);
    }
    uint64_t seed = 88172645463325252ull;
    for (unsigned i = 0; i < N; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        if (seed & 1)
            heapd_write(m, h, &h[i], NULL);
    }
    idle_stats(m, c);
    uint32_t before = class_segments(ctl, size);
    for (unsigned i = 0; i < N; i++) {
        if (h[i])
            continue;
        void *o = heapd_alloc(m, 0, size - 8);
        ck_assert_ptr_nonnull(o);
        heapd_write(m, h, &h[i], o);
    }
    idle_stats(m, c);
    uint32_t after = class_segments(ctl, size);
    fprintf(stderr, "holes: %u segments of class %u before the refill, %u "
            "after\n", before, size, after);
    /* an eighth more at most (Note [Reuse before growth]); without
     * partly free segments it took a quarter more */
    ck_assert_msg(after <= before + before / 8 + 1,
                  "refilling the holes of %u segments of class %u took %u "
                  "new ones", before, size, after - before);
    finish(c, m, ctl, 1);
}
END_TEST

/* The grant of request SEQ on FD: its segments, and whether it waited. */
static uint32_t raw_grant(int fd, uint64_t seq, bool *waited)
{
    Heapd__Envelope *g = harness_read_env(fd, NULL);
    ck_assert_msg(g && g->body_case == HEAPD__ENVELOPE__BODY_SEGMENT_GRANT &&
                      g->seq == seq,
                  "request %" PRIu64 ": no grant (%d)", seq,
                  g ? (int)g->body_case : -1);
    uint32_t n = (uint32_t)g->segment_grant->n_segments;
    ck_assert_uint_ge(n, 1);
    *waited = g->segment_grant->waited;
    heapd__envelope__free_unpacked(g, NULL);
    return n;
}

/* The raw client's last request is answered (readable on FD), or heapd
 * has paced one more grant than PACED0. */
struct answered_or_paced {
    int fd;
    heapd_client *ctl;
    uint64_t paced0;
};

static bool answered_or_paced(void *arg, char *seen, size_t n)
{
    struct answered_or_paced *a = arg;
    struct pollfd pfd = {.fd = a->fd, .events = POLLIN};
    if (poll(&pfd, 1, 0) == 1)
        return true;
    uint64_t paced = harness_stats(a->ctl).grants_paced;
    snprintf(seen, n, "%" PRIu64 " grants paced", paced);
    return paced > a->paced0;
}

/* Note [Pacing]: a grant that waited for its cycle is one segment.  A
 * raw client takes blank segments four at a time until a grant says it
 * waited (the heap is at its cap).  The next cycle is held before it
 * marks (Note [Holding marking for tests]) while the client asks for
 * eight more grants of four, one at a time: each is answered at once
 * while the cap leaves room, or waits for that cycle.  When it ends, the
 * waited ones are given one segment each, not four each (28 for 7
 * before the rule).  Held, they all wait for one cycle: asked at once,
 * beside a loaded machine's other tests, they waited for four, each of
 * which left room. */
START_TEST(waited_grants_grow_the_heap_by_a_segment_each)
{
    enum { ASK = 4, BURST = 8 };
    struct harness_raw r;
    char hold[64];
    snprintf(hold, sizeof hold, "/tmp/heapd-hold-%d", (int)getpid());
    setenv("HEAPD_TEST_HOLD_MARKING", hold, 1);
    start();
    unsetenv("HEAPD_TEST_HOLD_MARKING");
    heapd_client *ctl = harness_control(&D);
    harness_raw_mutator(D.sock, &r);
    uint64_t seq = 1, held = 0;
    for (bool waited = false; !waited; seq++) {
        ck_assert_msg(seq < 4096, "%" PRIu64 " segments taken and no "
                      "grant waited: the heap has no cap", held);
        harness_raw_ask_segments(r.sock, seq, ASK);
        held += raw_grant(r.sock, seq, &waited);
    }
    FILE *f = fopen(hold, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    uint64_t cycles0 = harness_stats(ctl).cycles_completed;
    uint64_t given = 0, n_waited = 0;
    for (unsigned k = 0; k < BURST; k++) {
        struct answered_or_paced a = {r.sock, ctl,
                                      harness_stats(ctl).grants_paced};
        harness_raw_ask_segments(r.sock, seq + k, ASK);
        harness_wait_until(answered_or_paced, &a, "a grant or its wait");
        struct pollfd pfd = {.fd = r.sock, .events = POLLIN};
        if (poll(&pfd, 1, 0) == 1 && n_waited == 0) {
            bool waited;
            raw_grant(r.sock, seq + k, &waited);
            ck_assert(!waited); /* the cycle is held */
        } else {
            n_waited++;
        }
    }
    unlink(hold);
    for (unsigned k = BURST - (unsigned)n_waited; k < BURST; k++) {
        bool waited;
        uint32_t n = raw_grant(r.sock, seq + k, &waited);
        ck_assert(waited);
        ck_assert_msg(n == 1, "a grant that waited was %u segments", n);
        given += n;
    }
    uint64_t cycles = harness_stats(ctl).cycles_completed - cycles0;
    fprintf(stderr, "waited grants: %" PRIu64 " segments held at the cap, "
            "%" PRIu64 " of %d requests waited, given %" PRIu64
            " segments, %" PRIu64 " cycle(s)\n", held, n_waited, BURST,
            given, cycles);
    ck_assert_msg(n_waited >= 2, "too few waited (%" PRIu64 ") to tell",
                  n_waited);
    harness_raw_close(&r);
    heapd_disconnect(ctl);
    harness_still_serving(D.sock);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* SegmentRequest.reuse_only over the raw protocol: partly free segments
 * only, possibly none -- an empty grant, at once, never a blank segment
 * and never an error -- whatever classes it names. */
START_TEST(reuse_only_requests_are_answered_at_once)
{
    harness_start_with(&D, NULL);
    int fd = harness_raw_welcomed(D.sock, HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    Heapd__SegmentRequest sr = HEAPD__SEGMENT_REQUEST__INIT;
    uint32_t classes[4] = {3, LAYOUT_NCLASSES, 9999, UINT32_MAX};
    sr.kind = HEAPD__SEGMENT_KIND__SEGMENT_SMALL;
    sr.reuse_only = true;
    env.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST;
    env.segment_request = &sr;
    for (unsigned k = 0; k < 3; k++) {
        /* a class, classes that are none, and none at all; a count of
         * 0 and one far above any grant */
        sr.n_classes = k == 0 ? 1 : k == 1 ? 4 : 0;
        sr.classes = classes;
        sr.count = k == 1 ? 0 : 1000000;
        env.seq = 10 + k;
        harness_send_env(fd, &env);
        Heapd__Envelope *g = harness_read_env(fd, NULL);
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(g->body_case, HEAPD__ENVELOPE__BODY_SEGMENT_GRANT);
        ck_assert_uint_eq(g->seq, 10 + k);
        ck_assert_uint_eq(g->segment_grant->n_segments, 0);
        heapd__envelope__free_unpacked(g, NULL);
    }
    close(fd);
    harness_still_serving(D.sock);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* Note [Runs] in proto/layout.h: objects of 16 to 127 KiB take blocks of
 * the run class in their mutator's segments -- no segment of their own --
 * waste less than a granule each, hold references the collector follows,
 * and give their blocks back when they die. */
START_TEST(run_objects_share_segments)
{
    enum { N = 300 };
    heapd_client *c;
    heapd_mutator *m;
    size_t slot;
    start();
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    void **h = holder(m, N, &slot);
    uint64_t seed = 0x2545f4914f6cdd1dull, bytes = 0;
    heapd_stats_t before = harness_stats(ctl);
    for (unsigned i = 0; i < N; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        size_t nbytes = 16400 + (size_t)(seed % (110u * 1024));
        /* a reference field: the previous run object, so the objects
         * form a chain the marker walks */
        void **o = heapd_alloc(m, 1, nbytes);
        ck_assert_ptr_nonnull(o);
        memset(heapd_bytes(o), (int)(i & 0x7f) + 1, nbytes);
        heapd_write(m, o, &o[0], i ? h[i - 1] : NULL);
        heapd_write(m, h, &h[i], o);
        bytes += 8 + 8 + nbytes;
    }
    heapd_stats_t full = idle_stats(m, c);
    fprintf(stderr, "runs: %u objects, %" PRIu64 " bytes, %" PRIu64
            " in blocks, large runs %" PRIu64 " -> %" PRIu64 "\n", N, bytes,
            full.block_bytes, before.segments_large, full.segments_large);
    ck_assert_msg(full.segments_large <= before.segments_large + 1,
                  "%u objects of 16 to 127 KiB took %" PRIu64 " large runs",
                  N, full.segments_large - before.segments_large);
    /* less than a granule each, beside the holder */
    ck_assert_msg(full.block_bytes <= bytes + N * 1024u + 8 * N + 4096,
                  "%" PRIu64 " bytes in blocks for %" PRIu64 " of objects",
                  full.block_bytes, bytes);
    /* the chain from the last one reaches every object, intact */
    unsigned seen = 0;
    for (void **o = h[N - 1]; o; o = o[0], seen++) {
        unsigned i = N - 1 - seen;
        const unsigned char *b = heapd_bytes(o);
        ck_assert_msg(b[0] == (i & 0x7f) + 1 &&
                          b[heapd_nbytes(o) - 1] == (i & 0x7f) + 1,
                      "run object %u lost its bytes", i);
    }
    ck_assert_uint_eq(seen, N);
    /* all but the chain's head die: their blocks go back */
    for (unsigned i = 0; i < N - 1; i++)
        heapd_write(m, h, &h[i], NULL);
    heapd_stats_t chain = idle_stats(m, c);
    ck_assert_uint_ge(chain.block_bytes, bytes - 8192); /* the chain holds */
    void **last = h[N - 1];
    heapd_write(m, last, &last[0], NULL);
    heapd_stats_t one = idle_stats(m, c);
    ck_assert_msg(one.block_bytes < 256u * 1024 + 8 * N + 4096,
                  "%" PRIu64 " bytes in blocks with one run object left",
                  one.block_bytes);
    finish(c, m, ctl, 1);
}
END_TEST

/* A reference into the middle of a run object (a block whose mark is
 * LAYOUT_MARK_CONT), and continuation marks a client wrote where no
 * object is: the reference is counted and not followed, the marks cost
 * nothing but their blocks, and the heap stays sound (Note [Runs]). */
START_TEST(run_marks_a_client_forges_are_harmless)
{
    heapd_client *c;
    heapd_mutator *m;
    size_t slot;
    harness_start(&D, harness_default_config("@SOCK@", ""));
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);
    void **h = holder(m, 2, &slot);
    void **o = heapd_alloc(m, 1, 40000);
    ck_assert_ptr_nonnull(o);
    heapd_write(m, h, &h[0], o);
    /* the run class's segment, and the block of O */
    const struct layout_control *ctl_area = heapd_heap_base(c);
    uintptr_t seg = (uintptr_t)o & ~(uintptr_t)(ctl_area->segment_size - 1);
    uint8_t *marks = layout_seg_marks((void *)seg);
    const struct layout_segment *hd = (const void *)seg;
    ck_assert_uint_eq(hd->size_class, LAYOUT_CLASS_RUN);
    heapd_stats_t before = harness_stats(ctl);
    /* forged continuations past the last block in use: nothing to see */
    uint32_t n, first;
    layout_small_geometry(ctl_area->segment_size, LAYOUT_CLASS_RUN, &n,
                          &first);
    for (uint32_t b = n - 4; b < n; b++)
        if (__atomic_load_n(&marks[b], __ATOMIC_RELAXED) == 0)
            __atomic_store_n(&marks[b], LAYOUT_MARK_CONT, __ATOMIC_RELAXED);
    harness_collect(m);
    harness_collect(m);
    heapd_stats_t forged = harness_stats(ctl);
    ck_assert_uint_eq(forged.verify_failures, before.verify_failures);
    ck_assert_uint_eq(forged.bad_refs, before.bad_refs);
    /* an interior reference, one granule in: counted, not followed (the
     * verifier names it too: a program's bug) */
    heapd_write(m, h, &h[1], (char *)o + LAYOUT_RUN_GRANULE);
    harness_collect(m);
    heapd_stats_t after = harness_stats(ctl);
    ck_assert_msg(after.bad_refs > forged.bad_refs,
                  "an interior reference into a run object was not counted");
    ck_assert_uint_eq(*(uint64_t *)((char *)o - 8) & 0xfffffff, 40000);
    heapd_write(m, h, &h[1], NULL);
    heapd_root_pop(m, 1);
    heapd_detach(m);
    heapd_disconnect(c);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

static Suite *memory_suite(void)
{
    Suite *s = suite_create("memory");
    TCase *t = tcase_create("memory");
    tcase_add_test(t, free_pages_of_partly_used_segments_go_back);
    tcase_add_test(t, where_the_memory_is_adds_up);
    tcase_add_test(t, where_counts_nurseries);
    tcase_add_test(t, memory_limit_holds_under_a_garbage_writer);
    tcase_add_test(t, memory_limit_refuses_what_cannot_fit);
    tcase_add_test(t, memory_limit_leaves_the_holes_to_new_clients);
    tcase_add_test(t, an_idle_heap_keeps_no_free_memory);
    tcase_add_test(t, a_waited_collection_takes_the_reserve_back);
    tcase_add_test(t, updates_keep_a_heap_with_a_core_to_its_goal);
    tcase_add_test(t, holes_are_refilled_before_new_segments);
    tcase_add_test(t, reuse_only_requests_are_answered_at_once);
    tcase_add_test(t, waited_grants_grow_the_heap_by_a_segment_each);
    tcase_add_test(t, run_objects_share_segments);
    tcase_add_test(t, run_marks_a_client_forges_are_harmless);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(memory_suite());
}
