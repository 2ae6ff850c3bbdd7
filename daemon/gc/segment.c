/* The daemon's segment table.
 *
 * Note [Segment supply]
 * ~~~~~~~~~~~~~~~~~~~~~
 * Clients never pick segments themselves.  A client asks for small segments
 * in batches (SegmentRequest SMALL, count) and keeps them in a reserve from
 * which its mutators take one when their current segment of a class fills
 * up; it asks again, without waiting, when the reserve runs low, so that a
 * mutator rarely waits for the socket (client/alloc.c).  A granted segment
 * is OWNED by the client and blank: its header and mark bytes read as
 * zero (the daemon zeroes them, or the segment's memory was punched and is
 * not touched at all: Note [Segments] in proto/layout.h) -- or partly free
 * and formatted (Note [Reusing partly free segments] below).  The mutator
 * that takes a blank one writes its size class into the header, and
 * allocates blocks by setting their mark bytes
 * (Note [Epoch-tagged marks]).  A full segment goes back with SegmentReturn
 * and becomes FILLED: the heap's, swept like any other.  A large object gets
 * a run of whole segments (SegmentRequest LARGE, one round trip); the run is
 * zeroed (punched) before it is granted and its single mark byte is left 0
 * until the client, running again after the grant, sets it to the current
 * epoch, so a run is never freed between its grant and its first use: sweep
 * skips a large run whose mark is 0 while its owner is connected.  Root
 * stacks are not in the heap (Note [Client control memory]).
 *
 * A grant of small segments is at most an attached mutator's share of an
 * eighth of the heap's allocation budget (the eighth divided by the
 * heap's attached mutators; at least GRANT_MIN segments, at most
 * GRANT_MAX; grant_cap in daemon/grant.c): blank segments in reserves are
 * neither allocated nor free, a reserve holds a few grants at most (its
 * batch grows only on grants that came whole: Note [Reserve sizing] in
 * client/reserve.c), and so all of them together hold well under half a
 * budget, however many clients share the heap.  An eighth per grant,
 * whatever the clients, let the shared cache's four worker processes (2
 * cores, where round trips wait for a core and reserves grow) hold some
 * 50 segments each, 17-28 MiB of room against 19 MiB live, and the heap
 * peak at 58-70 MiB; with the share, 43-59 MiB (the memory benchmark's
 * shared map: 2.2-2.3 times its live bytes, 1.99 with the share).
 *
 * Quota: max_client_bytes bounds what a client makes the heap hold: the
 * segments it holds and what survives of the objects it allocated (Note
 * [Quota]); max_size caps the heap.
 *
 * When a client's connection closes for any reason (seg_orphan), its
 * formatted segments become FILLED (the blocks it allocated stay until a
 * sweep finds them dead, but its young blocks, which are freed: Note
 * [Young blocks of a client gone]), its blank ones FREE, and its large
 * runs ownerless: nothing is lost and nothing leaks.  The FILLED
 * ones and the large runs are orphans (stats segments_orphaned) until the
 * sweep frees them or a grant gives them, partly free, to another client
 * (segments_adopted); no other state holds an orphan, so once every
 * orphan's objects are dead the two counters meet.  Adopting a FILLED
 * segment takes the adoption lock, which the daemon holds while it
 * rescans an ownerless segment (Note [Remark] in daemon/gc/remark.c).
 * Every state, flag and transition, and who makes each: Note [Segment
 * lifecycle].
 *
 * Note [Segment lifecycle]
 * ~~~~~~~~~~~~~~~~~~~~~~~~
 * Every segment from `first` on is in one state of enum seg_state, in its
 * record of the table (seg.state: stored with release by set_state, read
 * with acquire by markers and sweepers, seg_state), and a few flags of
 * the record qualify it.  The states:
 *
 *   FREE        in the pool (its bit in free_bits), owned by nobody and
 *               charged to nobody
 *   OWNED       granted to client `owner`, which allocates in it without
 *               asking; blank until the client writes its header (Note
 *               [Segments]), whose class seg_class (any thread) caches in
 *               seg.cls
 *   FILLED      the heap's: returned full, or left by a client that went;
 *               swept every cycle.  Its class may be unknown (Note [A
 *               segment leaves its owner])
 *   LARGE       the head of a large object's run (seg.run: its length),
 *               owned by the client that asked for it, by nobody once
 *               that client went
 *   LARGE_TAIL  the run's other segments (seg.run: the head)
 *   CONTROL     the control area, below `first`: never changes, and no
 *               walk of the table reaches it
 *
 * The flags, and the states each may qualify:
 *
 *   punched     FREE: its memory went back to the kernel, it reads as
 *               zero (Note [Purging free memory] in purge.c)
 *   orphan      FILLED, LARGE (the head): left with objects by a client
 *               that went, not adopted yet; orphaned - adopted counts them
 *   reusable    FILLED: a quarter of its blocks or more are free (a
 *               sixteenth under a memory limit), and
 *               grants take it first (reuse_bits; Note [Reusing partly
 *               free segments])
 *   purging     FILLED: free pages of it are being punched with the lock
 *               dropped, and no grant takes it
 *   fenced      any but FREE: held by evictions (Note [Evicted clients]
 *               in stall.c): none of its blocks is freed, nobody is
 *               granted it, and it does not become FREE
 *
 * The transitions of the states: from, to, [the function that stores the
 * new state] and who calls it.  Each is made with heap->lock held but
 * seg_format's, on a heap nobody has yet (table_take_back holds it for
 * seg_recover too, though no other thread runs then); debug builds assert
 * those set_state makes, (1) to (5), and what seg_release frees at (5).
 * "loop" is the daemon's loop thread; "sweeper" a worker of the
 * collector's sweep (Note [Sweeping] in sweep.c).
 *
 *   (new heap)   -> FREE        [seg_format]      startup (heap.c)
 *   FREE         -> OWNED       [take]            loop, grant (1)
 *   FILLED       -> OWNED       [grant_reusable]  loop, grant (2)
 *   FREE         -> LARGE, LARGE_TAIL
 *                               [take]            loop, grant (3)
 *   OWNED        -> FILLED      [unown_small]     loop; startup (4)
 *   OWNED        -> FREE        [make_free]       loop; startup (4)
 *   FILLED       -> FREE        [make_free]       sweeper (5)
 *   LARGE, LARGE_TAIL -> FREE   [make_free]       sweeper (5)
 *   LARGE, LARGE_TAIL -> FREE   [seg_recover]     startup (table.c) (6)
 *   FREE         -> FILLED, LARGE, LARGE_TAIL
 *                               [seg_load_*]      a load (load.c) (7)
 *   FILLED, LARGE, LARGE_TAIL -> FREE
 *                               [seg_unload]      a load that fails (7)
 *
 *   (1) seg_grant_small, for a SegmentRequest SMALL: a FREE segment,
 *       not fenced, nor out of the pool for a punch (committed ones
 *       first); it is blank.
 *   (2) seg_grant_small or seg_grant_reusable, under h->adoption too: a
 *       reusable FILLED segment, not fenced nor purging, of a class the
 *       client allocates in and (with a quota) charged to it or to
 *       nobody.  It keeps its class; an orphan is adopted.
 *   (3) seg_grant_large, for a SegmentRequest LARGE: a run of FREE
 *       segments not fenced, punched first unless it reads as zero.
 *   (4) unown_small, by seg_return (a SegmentReturn, or a remark answer
 *       that releases a segment its client still owns) or by seg_orphan
 *       (the client left, crashed or was evicted; a client kept across a
 *       restart did not come back, resume.c; at startup, seg_recover
 *       keeps no other owner): FILLED, or FREE if it is not fenced and
 *       blank, or empty while no cycle runs (Note [An empty segment
 *       comes back free]).
 *   (5) seg_release, from the sweep's release: the state still the one
 *       swept, not fenced, nothing in it live (or, its class unknown,
 *       nothing referred to it: Note [A segment leaves its owner]).  A
 *       LARGE run is punched, all of it.
 *   (6) a run a kill cut short (its head and tails disagree); not
 *       punched (it may hold pages).
 *   (7) Note [Loading a saved heap] in load.c: into an empty heap, no
 *       client attached, a segment at a time, punched first unless it
 *       reads as zero, owned and charged by nobody; a load that fails
 *       punches and frees every segment it took.
 *
 * The flags change thus (with heap->lock held, but seg_format's):
 *
 *   punched   set at seg_format; on FREE segments that seg_purge and
 *             seg_punch_strays (collector thread; the loop for strays)
 *             take out of free_bits to punch with the lock dropped
 *             (runs_take, runs_punch); by seg_punch on a LARGE run at (5)
 *             and before the take at (3).  Cleared by seg_set_punched at
 *             every grant, and at (6).
 *   orphan    set by seg_orphan (orphan) on what (4) left FILLED and on
 *             the heads of its LARGE runs; cleared by adopt, at (2) and
 *             at every make_free, and by seg_recover.
 *   reusable  set by seg_swept_filled (sweeper) on a FILLED segment not
 *             fenced; cleared by unfile_reusable at (2), at every
 *             make_free and by seg_fence; emptied by seg_recover, but
 *             for a table sealed at a clean stop and proved so.
 *   purging   set by page_runs_add (collector thread, seg_purge) on a
 *             FILLED segment not fenced, cleared by page_runs_punch when
 *             the punch is done; seg_recount_memory clears every one at
 *             startup.
 *   fenced    counted up by seg_fence (loop: an eviction, on every
 *             segment not FREE) and down by seg_unfence (loop: the
 *             evicted process is gone); dropped by seg_recover (they
 *             belong to the watch of the heapd that evicted).
 *
 * The owner changes without the state when seg_orphan gives a LARGE run
 * to nobody (at startup too, for a client the registry does not keep).
 * Nothing else stores a state or a flag (table_adopt takes a whole table
 * over); segtab_check (Note [Checking the segment table] in
 * segtab_check.c) holds the table to most of these rules at releases of
 * the lock.
 *
 * Note [Quota]
 * ~~~~~~~~~~~~
 * max_client_bytes bounds the bytes a client makes the heap hold, not the
 * bytes it allocates: a grant is refused (ENOMEM) unless
 *     held + live + what it asks for <= max_client_bytes
 * where held is the segments it holds now (OWNED small segments, reserve
 * included: conn.held, in whole segments) and live what
 * survived, at the last sweep, in the segments charged to it that it no
 * longer holds (FILLED ones, its large runs).  Bounding only held (as
 * before) let a client with a 16M quota make the heap hold 243 MB of live
 * objects, in full segments handed back that counted for nobody, and the
 * next client got "heap is full".  What it handed the heap since the last
 * sweep started (fresh: a returned full segment, a large run at its grant,
 * counted in full) is not refused, for only a cycle can tell what of it is
 * alive: once held + live + fresh passes the quota every grant asks for a
 * cycle, and past twice the quota a grant waits for that cycle (as a
 * paced one does: Note [Pacing]).  A grant refused for live bytes waits
 * for the next cycle too, which may find them dead, and ENOMEM stands
 * only if the quota is still reached after it, with a message that says
 * what the client holds and keeps alive.  So what a client makes the heap hold stays below
 * twice its quota plus one grant (measured: ENOMEM at 16.9 to 22.5 MB
 * live for a 16M quota), and a client whose objects die allocates on,
 * asking for a cycle every quota's worth, and waits only if it outruns
 * one by a quota.
 *
 * Each segment in the daemon's table (never its header, which any client
 * can write) names the record it is charged to (seg.charge: 16 bits, the
 * index of a seg_charge plus one), set when it is granted to a client and
 * cleared when it becomes free.  The sweep adds what survives in each
 * FILLED segment and large run into the job's tally for that record (one
 * relaxed atomic add per segment, no lock: Note [Sweeping]); the end of
 * the cycle, under heap->lock, makes the tally each record's live and
 * drops the fresh bytes that sweep covered.  A record taken or reused
 * while a sweep runs is not counted by it (its tally may be its previous
 * client's); a segment returned while the sweep runs may count in both
 * live and fresh until the next one.
 *
 * With one record per segment a segment must hold one client's objects:
 * in a heap with a quota, a partly free segment
 * (Note [Reusing partly free segments]) is reused only by the client it
 * is charged to, or, charged to nobody, by anyone, who is charged for it
 * from then on (without a quota the charges are kept but never checked,
 * and any client reuses any segment, as before).  Sharing them between
 * live clients would let a client shed its charge onto the clients that
 * fill its segments' holes; GCBench (one client) reuses as much as
 * before.
 *
 * A client that leaves takes its record with it: what it left alive is
 * charged to nobody (the daemon does not know whose objects keep it alive;
 * Note [Client lifecycle] in daemon/session.c) until its segments are
 * freed, or reused by a client that is charged for them from then on.
 * The quota is per connection: max_size, and the limits on connections,
 * bound what clients that come and go can leave behind.
 *
 * Note [Reusing partly free segments]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A FILLED segment whose blocks are mostly dead but not all would stay
 * FILLED as long as one of them lives, and a heap whose long-lived objects
 * are spread thin grows by fresh segments while most of its blocks are
 * free: GCBench ended with 197 FILLED segments (25 MB) for 8.5 MB of live
 * small objects, and every fresh page is a page fault in every client that
 * touches it.  So when the sweep leaves a FILLED segment with at least a
 * quarter of its blocks free (mark 0: a young block is in use, Note
 * [Sweeping]; a sixteenth under a memory limit, Note [Memory limit] in
 * collector.c) it becomes reusable (reuse_bits), and a refill that names
 * the size classes its client allocates in (SegmentRequest.classes) gets
 * reusable segments of those classes first, the lowest first, and blank
 * ones only for the rest.  Such a segment goes
 * to its new owner (with a quota, only the client it is charged to, or
 * anyone if it is charged to nobody: Note [Quota]) formatted: its header
 * keeps its class and kind SMALL, the grant names the class
 * (SegmentGrant.formatted, so that the client reads no header of a blank
 * segment, whose first page may not exist yet), the client files it
 * under that class (client/reserve.c), and its allocator takes only
 * blocks whose mark is 0, as it does in any segment
 * (Note [Allocation fast path]).  Everything else is what already holds
 * for an OWNED segment: the sweep and the owner never write the same mark
 * (Note [Sweeping]), a return or the owner's death makes it FILLED again,
 * and the verifier checks it like any other.  The sweep that made it reusable
 * may still be running when it is granted: a sweeper that then finds it
 * OWNED neither frees nor re-files it.
 *
 * The free pool is a bitmap searched from the lowest address, which keeps a
 * heap's memory packed towards its base; a grant takes the free segments
 * whose memory is still committed before punched ones.  After each sweep
 * the free memory the heap will not allocate again soon goes back to the
 * kernel with fallocate(PUNCH_HOLE) (Note [Purging free memory] in
 * daemon/gc/purge.c); what it keeps is granted again soon, and punching it
 * would only buy page faults and zeroing (GCBench: half its faults).
 */
#include "segment.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heap.h"
#include "log.h"
#include "kept.h"
#include "sweep.h"


/* The transitions set_state makes (Note [Segment lifecycle], (1) to
 * (5)): bit TO of seg_next[FROM]. */
#define SEG_TO(st) (1u << (st))
static const uint8_t seg_next[SEG_STATE_MAX + 1] __attribute__((unused)) = {
    [SEG_FREE] = SEG_TO(SEG_OWNED) | SEG_TO(SEG_LARGE) |
                 SEG_TO(SEG_LARGE_TAIL) | SEG_TO(SEG_FILLED),
    [SEG_OWNED] = SEG_TO(SEG_FILLED) | SEG_TO(SEG_FREE),
    [SEG_FILLED] = SEG_TO(SEG_OWNED) | SEG_TO(SEG_FREE),
    [SEG_LARGE] = SEG_TO(SEG_FREE),
    [SEG_LARGE_TAIL] = SEG_TO(SEG_FREE),
};
#undef SEG_TO

/* Every store of a state but those at startup: See Note [Segment
 * lifecycle], whose transitions debug builds assert here.  Each is
 * counted for Note [Checking the segment table] in segtab_check.c. */
static void set_state(struct segtab *t, struct seg *s, enum seg_state st)
{
    assert(s->state <= SEG_STATE_MAX && (seg_next[s->state] >> st & 1));
#ifndef NDEBUG
    t->state_changes++;
#endif
    __atomic_store_n(&s->state, (uint8_t)st, __ATOMIC_RELEASE);
}

int seg_init(struct heap *h)
{
    struct segtab *t = &h->segs;
    uint64_t segsize = h->cfg->segment_size;

    memset(t, 0, sizeof *t);
    t->count = (uint32_t)(h->cfg->max_size / segsize);
    t->first = layout_control_segments(segsize);
    t->high = t->first;
    t->small_max = layout_small_max(segsize);
    /* Note [Purging free memory] in purge.c */
    long page = sysconf(_SC_PAGESIZE);
    t->page_shift = (unsigned)__builtin_ctzl(page > 0 ? (unsigned long)page
                                                      : 4096ul);
    t->seg_pages = (uint32_t)(segsize >> t->page_shift);
    t->page_words = (t->seg_pages + 63) / 64;
    size_t words = (size_t)t->count * t->page_words;
    t->page_free = calloc(words, sizeof *t->page_free);
    t->page_purged = calloc(words, sizeof *t->page_purged);
    for (unsigned c = 0; c < LAYOUT_NCLASSES; c++) {
        /* Note [Runs]: the run class above the others, if it holds more */
        if (c == LAYOUT_CLASS_RUN
                ? layout_run_max(segsize) <= t->small_max
                : layout_class_size[c] > t->small_max)
            continue;
        layout_small_geometry(segsize, c, &t->small_nblocks[c],
                              &t->small_first[c]);
        t->small_magic[c] = layout_block_magic(layout_class_size[c]);
    }
    if (!t->page_free || !t->page_purged) {
        seg_destroy(h);
        return -ENOMEM;
    }
    return 0;
}

void seg_format(struct heap *h)
{
    struct segtab *t = &h->segs;
    /* See Note [Segment lifecycle]: a new heap */
    for (uint32_t i = t->first; i < t->count; i++) {
        t->segs[i].state = SEG_FREE;
        t->segs[i].punched = 1; /* never touched: reads as zero */
        seg_bit_set(t->free_bits, i);
    }
    t->n_free = t->count - t->first;
    seg_recount_memory(t);
}

void seg_destroy(struct heap *h)
{
    free(h->segs.charges);
    h->segs.charges = NULL;
    h->segs.n_charges = 0;
    free((void *)h->segs.page_free);
    free(h->segs.page_purged);
    h->segs.page_free = NULL;
    h->segs.page_purged = NULL;
}

/* See Note [Segment lifecycle]: the flag punched. */
void seg_set_punched(struct heap *h, uint32_t i, bool punched)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    struct seg *s = &t->segs[i];
    uint64_t *pp = seg_pages_purged(t, i);
    _Atomic uint64_t *pf = seg_pages_free(t, i);
    /* whole or in use again: its punched pages are forgotten */
    t->pages_purged -= seg_popcount(pp, t->page_words);
    memset(pp, 0, t->page_words * sizeof *pp);
    for (uint32_t k = 0; k < t->page_words; k++)
        atomic_store_explicit(&pf[k], 0, memory_order_relaxed);
    if (s->punched != punched)
        t->n_unpunched += punched ? (uint32_t)-1 : 1u;
    s->punched = punched;
}

void seg_recount_memory(struct segtab *t)
{
    t->n_unpunched = 0;
    t->pages_purged = 0;
    for (uint32_t i = t->first; i < t->count; i++) {
        t->n_unpunched += !t->segs[i].punched;
        t->segs[i].purging = 0; /* no punch outlives its heapd */
    }
    if (t->page_purged)
        memset(t->page_purged, 0,
               (size_t)t->count * t->page_words * sizeof *t->page_purged);
}

/* Lowest segment at or after FROM whose bit is set in BITS, or 0. */
static uint32_t find_bit(const struct segtab *t, const uint64_t *bitmap,
                         uint32_t from)
{
    for (uint32_t w = from >> 6; w < (t->count + 63) / 64; w++) {
        uint64_t bits = bitmap[w];
        if (w == from >> 6)
            bits &= ~0ull << (from & 63);
        if (bits) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
            return i < t->count ? i : 0;
        }
    }
    return 0;
}

static uint32_t find_free(const struct segtab *t, uint32_t from)
{
    return find_bit(t, t->free_bits, from);
}

/* Take free segment I into state ST: transitions (1) and (3) of
 * Note [Segment lifecycle].  Everything a reader of the table needs is
 * written before the state is published (release). */
static void take(struct segtab *t, uint32_t i, enum seg_state st,
                 uint64_t owner, uint16_t charge, uint32_t run)
{
    struct seg *s = &t->segs[i];
    seg_bit_clear(t->free_bits, i);
    t->n_free--;
    if (i >= t->high)
        __atomic_store_n(&t->high, i + 1, __ATOMIC_RELEASE);
    s->owner = owner;
    __atomic_store_n(&s->charge, charge, __ATOMIC_RELAXED);
    __atomic_store_n(&s->cls, SEG_CLASS_UNKNOWN, __ATOMIC_RELAXED);
    s->run = run;
    set_state(t, s, st);
}

static uint32_t quota_left(uint32_t held, uint32_t quota)
{
    return held >= quota ? 0 : quota - held;
}

/* ---- Note [Quota] ---- */

/* The record of OWNER, plus 1; a new one if CREATE and it has none.  0:
 * none (or no memory for one). */
static uint16_t charge_find(struct heap *h, uint64_t owner, bool create)
{
    struct segtab *t = &h->segs;
    uint32_t spare = t->n_charges;

    if (owner == 0)
        return 0;
    for (uint32_t k = 0; k < t->n_charges; k++) {
        if (t->charges[k].client == owner)
            return (uint16_t)(k + 1);
        if (t->charges[k].client == 0 && spare == t->n_charges)
            spare = k;
    }
    if (!create)
        return 0;
    if (spare == t->n_charges) {
        uint32_t n = t->n_charges ? 2 * t->n_charges : 16;
        n = n > SEG_CHARGES_MAX ? SEG_CHARGES_MAX : n;
        struct seg_charge *c =
            n > t->n_charges ? realloc(t->charges, n * sizeof *c) : NULL;
        if (!c) {
            log_error("heap '%s': no room for the quota record of client "
                      "%llu (%u records); its grants are refused until "
                      "clients leave", h->cfg->name,
                      (unsigned long long)owner, t->n_charges);
            return 0;
        }
        memset(c + t->n_charges, 0, (n - t->n_charges) * sizeof *c);
        t->charges = c;
        t->n_charges = n;
    }
    /* counted stays false: a sweep under way may have tallied this
     * record's previous client (Note [Quota]) */
    t->charges[spare] = (struct seg_charge){.client = owner};
    return (uint16_t)(spare + 1);
}

/* Segment S went to the heap with BYTES of its owner's (Note [Quota]). */
static void charge_fresh(struct segtab *t, const struct seg *s,
                         uint64_t bytes)
{
    if (s->charge != 0 && s->charge <= t->n_charges)
        t->charges[s->charge - 1].fresh += bytes;
}

uint64_t seg_charged_bytes(const struct heap *h, uint64_t owner, bool all)
{
    ASSERT_LOCK_HELD(&h->lock);
    const struct segtab *t = &h->segs;
    for (uint32_t k = 0; owner != 0 && k < t->n_charges; k++) {
        const struct seg_charge *c = &t->charges[k];
        if (c->client == owner)
            return c->live + (all ? c->fresh + c->fresh_swept : 0);
    }
    return 0;
}

uint32_t seg_sweep_start(struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    for (uint32_t k = 0; k < t->n_charges; k++) {
        struct seg_charge *c = &t->charges[k];
        if (c->client == 0)
            continue;
        c->fresh_swept += c->fresh;
        c->fresh = 0;
        c->counted = true;
    }
    return t->n_charges;
}

void seg_sweep_charged(struct heap *h, const _Atomic uint64_t *tally,
                       uint32_t n)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    for (uint32_t k = 0; k < t->n_charges; k++) {
        struct seg_charge *c = &t->charges[k];
        if (c->client == 0)
            continue;
        if (tally && c->counted && k < n)
            c->live = atomic_load_explicit(&tally[k], memory_order_relaxed);
        else
            c->fresh += c->fresh_swept; /* not counted: still unswept */
        c->fresh_swept = 0;
        c->counted = false;
    }
}

/* FILLED segment I is no longer reusable (granted, freed or fenced).
 * See Note [Segment lifecycle]: the flag reusable. */
static void unfile_reusable(struct segtab *t, uint32_t i)
{
    if (seg_bit_test(t->reuse_bits, i)) {
        seg_bit_clear(t->reuse_bits, i);
        t->n_reusable--;
    }
}

#define REUSE_MIN_FREE_NUM 1 /* a quarter of the blocks: Note [Reusing */
#define REUSE_MIN_FREE_DEN 4 /* partly free segments] */
/* under a memory limit, a sixteenth (Note [Memory limit] in collector.c) */
#define REUSE_LIMITED_MIN_FREE_DEN 16

void seg_swept_filled(struct heap *h, uint32_t i, uint32_t nfree,
                      uint32_t nblocks)
{
    struct segtab *t = &h->segs;
    uint64_t den = h->cfg->memory_limit ? REUSE_LIMITED_MIN_FREE_DEN
                                        : REUSE_MIN_FREE_DEN;
    if ((uint64_t)nfree * den < (uint64_t)nblocks * REUSE_MIN_FREE_NUM)
        return;
    heap_lock(h);
    /* the flag reusable: See Note [Segment lifecycle] */
    if (t->segs[i].state == SEG_FILLED && !t->segs[i].fenced &&
        !seg_bit_test(t->reuse_bits, i)) {
        seg_bit_set(t->reuse_bits, i);
        t->n_reusable++;
    }
    heap_unlock(h);
}

/* An orphan is taken back into use (Note [Segment supply]), or freed.
 * See Note [Segment lifecycle]: the flag orphan. */
static void adopt(struct segtab *t, struct seg *s)
{
    if (s->orphan) {
        s->orphan = 0;
        t->adopted++;
    }
}

/* Zero the first N bytes (rounded up to words) of a free segment: its
 * header and mark bytes.  With atomic stores: a sweeper that saw the
 * segment OWNED in a previous life -- a crashed client's blank segment is
 * freed at once, even while a sweep runs -- may still read its kind and
 * marks; it finds a blank segment and leaves it. */
static void zero_header(void *seg, size_t n)
{
    uint64_t *w = seg;
    for (size_t k = 0; k < (n + 7) / 8; k++)
        __atomic_store_n(&w[k], 0, __ATOMIC_RELAXED);
}

/* Note [Reused pages are growth]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A partly free segment's punched pages (Note [Purging free memory] in
 * purge.c) are forgotten when it is granted again: its new owner may
 * touch any of them, so the committed memory the heap goal is measured
 * by grows by them at once.  So they are growth, as a punched blank
 * segment is (Note [Heap goal] in collector.c): a grant takes a reusable
 * segment only while its punched pages fit in the room the cap leaves,
 * and one that does not fit is left for a later grant (a committed blank
 * segment is taken instead, or the grant waits for a cycle).  Taken past
 * the cap, they put the shared cache (2 workers, 50 % updates) up to
 * 0.5 MB over its goal of twice its live bytes: 1.95-2.12 times them at
 * its peak (5 runs), 1.975-1.993 with this rule (10 runs, lookups within
 * the noise).  What grants that waited for a cycle take past the cap is
 * Note [Pacing]'s.
 */

/* Take GROWS bytes of *ROOM (UINT64_MAX: no bound) if they fit; else set
 * *HELD_BACK (Note [Reused pages are growth]). */
static bool take_room(uint64_t *room, uint64_t grows, bool *held_back)
{
    if (grows > *room) {
        *held_back = true;
        return false;
    }
    if (*room != UINT64_MAX)
        *room -= grows;
    return true;
}

/* Grant reusable segments of CLASSES to OWNER, at most MAX, whose punched
 * pages fit in *ROOM bytes (less them after; UINT64_MAX: no bound), and
 * set *HELD_BACK if one did not (Note [Reused pages are growth]).  Under
 * the adoption lock: no FILLED segment becomes OWNED while the daemon
 * rescans it (Note [Remark] in daemon/gc/remark.c). */
static uint32_t grant_reusable(struct heap *h, uint64_t owner,
                               uint16_t charge, const uint64_t *classes,
                               uint32_t max, uint64_t *room, bool *held_back,
                               uint32_t *out, uint32_t *out_formatted)
{
    struct segtab *t = &h->segs;
    uint32_t n = 0, i = t->first;
    hd_mutex_lock(&h->adoption);
    while (n < max && t->n_reusable > 0 &&
           (i = find_bit(t, t->reuse_bits, i)) != 0) {
        struct seg *s = &t->segs[i];
        uint8_t cls = __atomic_load_n(&s->cls, __ATOMIC_RELAXED);
        /* with a quota, only the client's own, or nobody's: Note
         * [Quota] */
        bool ours = h->cfg->max_client_bytes == 0 || s->charge == 0 ||
                    s->charge == charge;
        if (ours && !s->fenced && !s->purging && cls < LAYOUT_NCLASSES &&
            (classes[cls >> 6] >> (cls & 63) & 1) &&
            take_room(room, seg_purged_bytes(t, i), held_back)) {
            adopt(t, s);
            /* its new owner may touch any page: Note [Purging free
             * memory] */
            seg_set_punched(h, i, false);
            __atomic_store_n(&s->charge, charge, __ATOMIC_RELAXED);
            unfile_reusable(t, i);
            t->n_filled--;
            t->n_owned++;
            s->owner = owner;
            /* See Note [Segment lifecycle], (2) */
            set_state(t, s, SEG_OWNED); /* class and header stay */
            out_formatted[n] = 1u + cls;
            out[n++] = i;
        }
        i++;
    }
    hd_mutex_unlock(&h->adoption);
    return n;
}

int seg_grant_reusable(struct heap *h, uint64_t owner, uint32_t *held,
                       uint32_t quota_segs, uint32_t count,
                       const uint64_t *classes, uint64_t room, uint32_t *out,
                       uint32_t *out_formatted)
{
    ASSERT_LOCK_HELD(&h->lock);
    if (count > quota_left(*held, quota_segs))
        count = quota_left(*held, quota_segs);
    uint16_t charge = count ? charge_find(h, owner, true) : 0;
    if (charge == 0)
        return -EDQUOT;
    bool held_back = false; /* none that fits: none, as none at all */
    uint32_t n = grant_reusable(h, owner, charge, classes, count, &room,
                                &held_back, out, out_formatted);
    *held += n;
    return (int)n;
}

int seg_grant_small(struct heap *h, uint64_t owner, uint32_t *held,
                    uint32_t quota_segs, uint32_t count,
                    const uint64_t *classes, uint64_t room, uint32_t *out,
                    uint32_t *out_formatted)
{
    ASSERT_LOCK_HELD(&h->lock);
    bool held_back = false; /* a segment left for want of ROOM */
    struct segtab *t = &h->segs;
    uint32_t n = 0, i = t->first;
    /* bytes a blank small segment must have zeroed: the largest mark
     * array (class 0) after the header */
    size_t hdr_bytes = LAYOUT_SEG_MARKS + t->small_nblocks[0];
    off_t cur[2] = {(off_t)INT64_MAX, 0}; /* has_pages */

    if (count > quota_left(*held, quota_segs))
        count = quota_left(*held, quota_segs);
    if (count == 0)
        return -EDQUOT;
    uint16_t charge = charge_find(h, owner, true);
    if (charge == 0)
        return -EDQUOT;
    uint32_t reused = classes ? grant_reusable(h, owner, charge, classes,
                                               count, &room, &held_back, out,
                                               out_formatted)
                              : 0;
    n = reused;
    /* committed free segments first, then punched ones: Note [Purging
     * free memory] in purge.c keeps the first to be used before any new
     * memory */
    for (int pass = 0; pass < 2; pass++, i = t->first)
    while (n < count && (i = find_free(t, i)) != 0) {
        bool punched = t->segs[i].punched;
        if (t->segs[i].fenced || punched != pass) {
            /* Note [Evicted clients]; or not in this pass */
            if (pass == 0 && i >= t->high)
                break; /* none above high is committed */
            i++;
            continue;
        }
        /* Note [Heap goal] in collector.c: punched memory is growth, a
         * whole punched segment or the pages punched out of a free one
         * (Note [Reused pages are growth]) */
        if (!take_room(&room,
                       punched ? (uint64_t)1 << h->seg_shift
                               : seg_purged_bytes(t, i),
                       &held_back)) {
            if (punched)
                break; /* every one left grows by as much */
            i++;
            continue;
        }
        /* the header is blank before the state says OWNED: a sweeper or
         * marker that sees OWNED must never read the class of the
         * segment's previous life (seg_class caches it) */
        /* a punched segment reads as zero and so is blank already: not
         * one of its pages is touched here (Note [Segments]), unless a
         * client wrote there (Note [Free memory stays free]) */
        if (!t->segs[i].punched || seg_has_pages(h, i, 1, cur))
            zero_header(heap_seg_addr(h, i), hdr_bytes);
        take(t, i, SEG_OWNED, owner, charge, 0);
        seg_set_punched(h, i, false);
        out_formatted[n] = 0;
        out[n++] = i;
        i++;
    }
    if (n == 0)
        return held_back ? -EAGAIN : -ENOSPC;
    t->n_owned += n - reused; /* grant_reusable counted its own */
    *held += n;
    return (int)n;
}

uint64_t seg_run_segments(const struct heap *h, uint64_t bytes)
{
    return (LAYOUT_LARGE_OBJECT + bytes + h->cfg->segment_size - 1) >>
           h->seg_shift;
}

/* FREE segments [I, I + N), about to be taken, read as zero after this:
 * punched now unless every one is and the memfd has no page there. */
static void zero_free_run(struct heap *h, uint32_t i, uint32_t n)
{
    bool all_punched = true;
    for (uint32_t k = i; k < i + n; k++)
        all_punched &= h->segs.segs[k].punched;
    off_t cur[2] = {(off_t)INT64_MAX, 0};
    if (!all_punched || seg_has_pages(h, i, n, cur))
        seg_punch(h, i, n);
}

/* With heap->lock held: the first run of NEED free segments none of which
 * is fenced, made to read as zero (Note [Free memory stays free]: a large
 * object must), into *START;
 * -ENOSPC if there is none.  The caller takes the run. */
static int free_run_zeroed(struct heap *h, uint32_t need, uint32_t *start)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    uint32_t len = 0;

    for (uint32_t i = t->first; i < t->count && len < need; i++) {
        if (seg_bit_test(t->free_bits, i) && !t->segs[i].fenced) {
            if (len++ == 0)
                *start = i;
        } else {
            len = 0;
        }
    }
    if (len < need)
        return -ENOSPC;
    zero_free_run(h, *start, need);
    return 0;
}

/* Raise the heap's longest large run to RUN segments if it is shorter:
 * Note [The longest large run] in proto/layout.h. */
static void publish_run(struct heap *h, uint32_t run)
{
    ASSERT_LOCK_HELD(&h->lock);
    _Atomic uint32_t *max = &h->control->large_run_max;
    if (atomic_load_explicit(max, memory_order_relaxed) < run)
        atomic_store_explicit(max, run, memory_order_release);
}

int seg_grant_large(struct heap *h, uint64_t owner, uint32_t *held,
                    uint32_t quota_segs, uint64_t bytes, uint32_t *first,
                    uint32_t *run)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    uint64_t need = seg_run_segments(h, bytes);
    uint32_t start = 0;

    if (need > t->count - t->first)
        return -EFBIG;
    if (need > quota_left(*held, quota_segs))
        return -EDQUOT;
    uint16_t charge = charge_find(h, owner, true);
    if (charge == 0)
        return -EDQUOT;
    int rc = free_run_zeroed(h, (uint32_t)need, &start);
    if (rc < 0)
        return rc;
    struct layout_segment *hd = heap_seg_addr(h, start);
    /* atomic: a sweeper that saw one of these segments OWNED before a
     * crashed client's blank segments were freed may still read the kind
     * (header_class); it finds no small class and leaves it */
    __atomic_store_n(&hd->kind, LAYOUT_SEG_LARGE, __ATOMIC_RELEASE);
    hd->large_bytes = need << h->seg_shift;
    /* the run's shape before its state (as for small grants) */
    for (uint32_t i = start; i < start + need; i++) {
        take(t, i, i == start ? SEG_LARGE : SEG_LARGE_TAIL, owner, charge,
             i == start ? (uint32_t)need : start);
        seg_set_punched(h, i, false);
    }
    t->n_large++;
    charge_fresh(t, &t->segs[start], need << h->seg_shift);
    publish_run(h, (uint32_t)need); /* before the grant's answer */
    *first = start;
    *run = (uint32_t)need;
    return 0;
}

/* Segment I becomes FREE: transitions (4) and (5) of Note [Segment
 * lifecycle]. */
static void make_free(struct heap *h, uint32_t i)
{
    struct seg *s = &h->segs.segs[i];
    adopt(&h->segs, s);
    unfile_reusable(&h->segs, i);
    s->owner = 0;
    __atomic_store_n(&s->charge, 0, __ATOMIC_RELAXED);
    /* workers read it without the lock (seg_class) */
    __atomic_store_n(&s->cls, SEG_CLASS_UNKNOWN, __ATOMIC_RELAXED);
    s->run = 0;
    s->free_since = h->stats.cycles_completed;
    set_state(&h->segs, s, SEG_FREE);
    seg_bit_set(h->segs.free_bits, i);
    h->segs.n_free++;
}

/* The class an owner wrote into a small segment's header, if valid. */
static uint8_t header_class(const struct heap *h, uint32_t i)
{
    const struct layout_segment *hd = heap_seg_addr(h, i);
    /* Note [Segments]: the kind, then the class it makes valid */
    if (__atomic_load_n(&hd->kind, __ATOMIC_ACQUIRE) != LAYOUT_SEG_SMALL)
        return SEG_CLASS_UNKNOWN;
    uint32_t c = __atomic_load_n(&hd->size_class, __ATOMIC_RELAXED);
    if (c < LAYOUT_NCLASSES && h->segs.small_nblocks[c] != 0)
        return (uint8_t)c;
    return SEG_CLASS_UNKNOWN;
}

uint8_t seg_class(struct heap *h, uint32_t i)
{
    struct seg *s = &h->segs.segs[i];
    uint8_t c = __atomic_load_n(&s->cls, __ATOMIC_ACQUIRE);
    if (c == SEG_CLASS_UNKNOWN && seg_state(&h->segs, i) == SEG_OWNED) {
        c = header_class(h, i);
        if (c != SEG_CLASS_UNKNOWN)
            __atomic_store_n(&s->cls, c, __ATOMIC_RELEASE);
    }
    return c;
}

/* Note [A segment leaves its owner]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * An OWNED small segment that is returned, or whose owner goes away,
 * becomes FILLED with the class the daemon has parsed it by (seg.cls,
 * cached by seg_class from the first valid header it read), or, if it
 * never read one, with the class the header says now; a blank one
 * becomes FREE, and so does an empty one while no cycle runs (Note [An
 * empty segment comes back free]).  A header that gives no class (its
 * owner scribbled on it before any cycle parsed it) leaves the segment
 * FILLED with no class,
 * counted in bad_refs: the daemon cannot tell its blocks apart, and other
 * clients may still hold references to the objects its owner made there.
 * Such a segment is freed by the sweep of the first cycle that (a) began
 * after it left its owner (unknown_since < cycles_completed), so that no
 * object in it is newer than the cycle's snapshot, and (b) met no
 * reference into it while marking: validate_ref notes in unknown_ref the
 * epoch in which it refused one for want of a class.  Everything a
 * mutator can still reach was reachable at that snapshot, so a complete
 * mark that met no reference into the segment proves nothing does.  A
 * referenced one stays (and costs one segment) while it is referenced;
 * freeing it at once let the memory of objects others still pointed to
 * be granted again.  (Before, it was never freed: each client that
 * scribbled on its own header before leaving took a segment out of the
 * heap for good; fuzz/fuzz_shared.c met that within its first 300
 * inputs.)
 */
/* Note [An empty segment comes back free]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * An OWNED small segment given back (or left by a client that went) while
 * no cycle runs, with every mark byte 0, holds no block: it becomes FREE
 * at once, committed, not FILLED until a sweep finds it empty.  Its header
 * is zeroed when it is granted again, as every committed FREE segment's is
 * (seg_grant_small), whatever its last owner wrote there since.  A mark 0
 * is a free block in every life of a segment (Note [Epoch-tagged marks]:
 * no epoch is 0), and between cycles no mark goes from 0 to another value
 * but by an owner's allocation, nor from another value to 0 but by a young
 * mutator's own sweep or, for a client gone, the daemon's under the lock
 * (Note [Young blocks of a client gone]): what the scan reads is settled,
 * and nothing in the segment can be live, nor become so (the marker
 * follows no reference to a block whose mark is 0: validate.c).  While a
 * cycle runs, such a return stays FILLED, as every return did before: a
 * sweeper frees blocks of OWNED segments without the heap lock, on a mark
 * it read before it poisons and frees the block, so the scan reads marks
 * on the move, and a segment granted again meanwhile (its marks zeroed,
 * blocks allocated by its new owner) would lose those blocks to the
 * sweeper's stale reads.  Measured with the rule at every phase: the scan
 * called empty segments in which a byte-by-byte rescan found 329-3445
 * marks set, all during a sweep, and test_discipline's pattern failed 2
 * runs of 5 (a broken chain, 635 verify failures).  These are a young
 * generation's segments, mostly: a nursery that grew for a large structure
 * under construction returns what its spares cannot keep once the
 * structure dies.  Kept FILLED, they counted against the heap's cap until
 * a cycle swept them, and the nursery's next growth waited for that cycle:
 * binary-trees, depth 20, 2 processes, each worker waited 290-350 ms of
 * its 2.7 s for grants paced three times, with both cores idle meanwhile.
 */
static bool marks_all_free(const uint8_t *marks, uint32_t n)
{
    /* all the same as the first, and the first 0: memcmp's speed */
    return n == 0 || (__atomic_load_n(&marks[0], __ATOMIC_RELAXED) == 0 &&
                      memcmp(marks, marks + 1, n - 1) == 0);
}

static void unown_small(struct heap *h, uint32_t i)
{
    struct seg *s = &h->segs.segs[i];
    const struct layout_segment *hd = heap_seg_addr(h, i);
    h->segs.n_owned--;
    uint8_t cls = __atomic_load_n(&s->cls, __ATOMIC_ACQUIRE);
    if (cls == SEG_CLASS_UNKNOWN)
        cls = header_class(h, i);
    /* a fenced one stays out of the pool, however blank it looks: its
     * evicted owner may still format it (Note [Evicted clients]) */
    if (cls == SEG_CLASS_UNKNOWN && !s->fenced &&
        __atomic_load_n(&hd->kind, __ATOMIC_ACQUIRE) == LAYOUT_SEG_BLANK) {
        make_free(h, i); /* never used */
        return;
    }
    /* Note [An empty segment comes back free] */
    if (cls != SEG_CLASS_UNKNOWN && !s->fenced &&
        atomic_load(&h->control->phase) == LAYOUT_PHASE_IDLE &&
        marks_all_free(layout_seg_marks((void *)hd),
                       h->segs.small_nblocks[cls])) {
        make_free(h, i);
        return;
    }
    if (cls == SEG_CLASS_UNKNOWN) {
        if (!s->fenced) /* a fenced blank one is not a scribble */
            atomic_fetch_add_explicit(&h->stats.bad_refs, 1,
                                      memory_order_relaxed);
        s->unknown_since = h->stats.cycles_completed;
        /* no epoch is 0: a note left from an earlier life of the segment
         * would keep it a cycle longer whenever the epochs come round */
        __atomic_store_n(&s->unknown_ref, 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&s->cls, cls, __ATOMIC_RELEASE); /* see seg_class */
    s->owner = 0;
    /* See Note [Segment lifecycle], (4) */
    set_state(&h->segs, s, SEG_FILLED);
    h->segs.n_filled++;
}

bool seg_unknown_unreferenced(const struct heap *h, uint32_t i, uint8_t epoch)
{
    const struct seg *s = &h->segs.segs[i];
    return s->unknown_since < h->stats.cycles_completed &&
           __atomic_load_n(&s->unknown_ref, __ATOMIC_RELAXED) != epoch;
}

void seg_note_unknown_ref(const struct heap *h, uint32_t i)
{
    struct seg *s = &((struct heap *)h)->segs.segs[i];
    __atomic_store_n(&s->unknown_ref,
                     (uint8_t)atomic_load(&h->control->epoch),
                     __ATOMIC_RELAXED);
}

/* See Note [Segment lifecycle]: the flag orphan. */
static void orphan(struct segtab *t, struct seg *s)
{
    if (!s->orphan) {
        s->orphan = 1;
        t->orphaned++;
    }
}

/* Segment I leaves its owner: an owned small segment.  Returns false
 * (and changes nothing) for any other state. */
static bool unown(struct heap *h, uint32_t i)
{
    if (h->segs.segs[i].state != SEG_OWNED)
        return false;
    unown_small(h, i);
    return true;
}

int seg_return(struct heap *h, uint64_t owner, uint32_t *held, uint32_t i)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    if (i < t->first || i >= t->count || t->segs[i].owner != owner ||
        !unown(h, i))
        return -EINVAL;
    (*held)--;
    /* full: its blocks are the heap's now, charged until a sweep counts
     * what survives (Note [Quota]) */
    if (t->segs[i].state == SEG_FILLED)
        charge_fresh(t, &t->segs[i], h->cfg->segment_size);
    return 0;
}

/* Note [Young blocks of a client gone]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Young blocks (Note [Young objects] in proto/young.h) are no state of
 * the table: a segment that holds them is OWNED by the client whose
 * mutator allocated them, and only that mutator frees or promotes them.
 * When the client goes -- its socket closes, it dies, it is evicted, a
 * restart does not keep it, or a kept one does not come back -- its young
 * objects are garbage (nothing shared may reference one: Note [The young
 * invariant] in client/minor.c) that nobody else would ever free.  So
 * seg_orphan frees them, under heap->lock, before its segments become
 * FILLED (or FREE): every YOUNG mark in the segments it owned becomes 0,
 * the block poisoned first where the heap poisons, as the sweep frees a
 * block; and so in the FILLED segments still charged to it, which it
 * returned with young blocks in them, against the contract.  A fenced
 * segment keeps them until its last fence lifts (seg_unfence): the
 * evicted process may still write into them (Note [Evicted clients] in
 * stall.c); then a FILLED one charged to nobody, or a large run owned by
 * nobody, loses them.  seg_recover frees those of every FILLED segment and
 * ownerless large run (a restart drops the fences; no client is alive yet
 * whose mutator could use them) and, through seg_orphan, those of every
 * client it does not keep; a kept client's stay with its segments, for its
 * mutators to go on with.  A clean detach of one young mutator frees its
 * own young blocks on the client's side, and the daemon does nothing then:
 * the client's other mutators allocate in the same segments.
 */
static uint32_t free_young(struct heap *h, uint32_t i)
{
    const struct segtab *t = &h->segs;
    const struct seg *s = &t->segs[i];
    uint8_t *seg = heap_seg_addr(h, i);
    uint8_t *marks = layout_seg_marks(seg);
    uint32_t freed = 0;
    if (s->state == SEG_LARGE) {
        if (__atomic_load_n(marks, __ATOMIC_RELAXED) != LAYOUT_MARK_YOUNG)
            return 0;
        __atomic_store_n(marks, 0, __ATOMIC_RELEASE); /* the sweep frees it */
        return 1;
    }
    if (s->state != SEG_OWNED && s->state != SEG_FILLED)
        return 0;
    uint8_t cls = seg_class(h, i);
    if (cls >= LAYOUT_NCLASSES || t->small_nblocks[cls] == 0)
        return 0; /* blank, or no block to tell apart */
    uint32_t n = t->small_nblocks[cls], bs = layout_class_size[cls];
    uint8_t *blocks = seg + t->small_first[cls];
    for (uint32_t b = 0; b < n; b++) {
        if (__atomic_load_n(&marks[b], __ATOMIC_RELAXED) != LAYOUT_MARK_YOUNG)
            continue;
        /* as the sweep frees a block (Note [Sweeping]): its span poisoned,
         * then its marks, the first last */
        uint32_t k = (uint32_t)(layout_block_span(marks, b, n, cls) / bs);
        if (h->poison)
            memset(blocks + (size_t)b * bs, SWEEP_POISON, (size_t)k * bs);
        for (uint32_t x = b + k - 1; x > b; x--)
            __atomic_store_n(&marks[x], 0, __ATOMIC_RELEASE);
        __atomic_store_n(&marks[b], 0, __ATOMIC_RELEASE);
        freed++;
        b += k - 1;
    }
    return freed;
}

void seg_orphan(struct heap *h, uint64_t owner)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    uint16_t charge = charge_find(h, owner, false);
    uint32_t young = 0;
    for (uint32_t i = t->first; i < t->high; i++) {
        struct seg *s = &t->segs[i];
        /* what it left is charged to nobody: Note [Quota]; its young
         * blocks are garbage: Note [Young blocks of a client gone] */
        if (charge != 0 && s->charge == charge) {
            __atomic_store_n(&s->charge, 0, __ATOMIC_RELAXED);
            if (s->state == SEG_FILLED && !s->fenced)
                young += free_young(h, i);
        }
        if (s->owner != owner)
            continue;
        if (!s->fenced)
            young += free_young(h, i);
        if (unown(h, i)) {
            if (s->state == SEG_FILLED)
                orphan(t, s);
            continue;
        }
        if (s->state == SEG_LARGE)
            orphan(t, s);
        if (s->state == SEG_LARGE || s->state == SEG_LARGE_TAIL)
            s->owner = 0;
    }
    if (charge != 0)
        memset(&t->charges[charge - 1], 0, sizeof t->charges[0]);
    if (young)
        log_debug("heap '%s': client %llu left %u young blocks; freed",
                  h->cfg->name, (unsigned long long)owner, young);
}

/* Note [Recovering the segment table]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * The records the heapd before left (Note [The live table] in table.c)
 * are, after a kill, the last stores it made: at most one critical
 * section of heap->lock cut short.  seg_recover keeps what a record says
 * of itself and rebuilds everything derived from the records:
 *   - a state no heapd writes, or a class no size class has, refuses the
 *     heap: that is not a cut-short store but damage;
 *   - a large run whose head and tails disagree was being granted or given
 *     back (seg_grant_large writes the run's shape before its states, a
 *     release the states one by one): a grant's reply is sent only after
 *     its critical section, and a run given back is dead, so no client
 *     holds such a run and its segments become free (not punched: they may
 *     hold pages);
 *   - the free bitmap, the counts and `high` are recounted from the states
 *     (a punch takes its segments out of the bitmap while it runs without
 *     the lock; a never-touched free segment is the only one with the
 *     punched flag and no higher segment in use); the reuse bitmap is
 *     emptied, for the next sweep to refile; fences, remark marks and
 *     charges are dropped (they belong to the watch and the quotas of the
 *     heapd that died); the cycle stamps are capped at CYCLES, the counters'
 *     cycle, so that idle segments are still punched in time;
 *   - every client is gone with its connection, but those the live
 *     table's registry names (KEPT: Note [Resuming clients] in resume.c
 *     then decides whether they come back): each other owner's segments
 *     are orphaned as seg_orphan does for a client that crashed, its
 *     young blocks freed, and so are the young blocks of every FILLED
 *     segment (Note [Young blocks of a client gone]); a kept client's
 *     stay young.
 * A table sealed at a clean stop (SEALED) goes through the same steps,
 * which then find nothing to do: no run to repair, no free bit to fix, no
 * remark mark, no owner the registry does not name, no reuse bit on a
 * segment that is not FILLED, and the orphans the seal counted (orphaned
 * - adopted) are the records' orphans.  Then, and only then, it keeps its
 * reuse bitmap (its sweep had finished) and the two counters (they are
 * segments_orphaned and segments_adopted); anything else counts in *ODD
 * and the table is recovered as a killed heapd's.
 * Then segtab_check must pass.  The critical sections are short: in 100
 * kills at every moment of the cycle (tests/test_crash.c) no record was
 * ever found torn, so each repair is checked on a table cut short by hand
 * (tests/test_invariants.c); what is repaired is logged.
 */
int seg_recover(struct heap *h, uint64_t cycles,
                const struct resume_client *kept,
                const struct seg_sealed *sealed, uint32_t *odd, char *why,
                size_t n)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    size_t words = ((size_t)t->count + 63) / 64;
    uint32_t repaired = 0, unbitted = 0, misfiled = 0, remarked = 0;
    uint32_t gone = 0;

    for (uint32_t i = t->first; i < t->count; i++) {
        unbitted += (t->segs[i].state == SEG_FREE) !=
                    seg_bit_test(t->free_bits, i);
        misfiled += seg_bit_test(t->reuse_bits, i) &&
                    t->segs[i].state != SEG_FILLED;
    }
    /* and a reuse bit of no segment: the control area's, or past count in
     * the last word (a sealed table's bitmap is kept whole) */
    for (uint64_t i = 0; i < (uint64_t)words * 64; i++)
        misfiled += (i < t->first || i >= t->count) &&
                    seg_bit_test(t->reuse_bits, (uint32_t)i);
    memset(t->free_bits, 0, words * sizeof(uint64_t));
    if (!sealed)
        memset(t->reuse_bits, 0, words * sizeof(uint64_t));
    t->high = t->first;
    t->n_free = t->n_owned = t->n_filled = t->n_large = 0;
    t->n_reusable = t->n_fenced = 0;
    t->orphaned = t->adopted = 0;
    for (uint32_t i = t->first; i < t->count; i++) {
        struct seg *s = &t->segs[i];
        if (s->state == SEG_CONTROL || s->state > SEG_STATE_MAX) {
            snprintf(why, n, "segment %u of its table is in state %u, "
                     "which no heapd writes", i, s->state);
            return -EINVAL;
        }
        if ((s->state == SEG_OWNED || s->state == SEG_FILLED) &&
            s->cls != SEG_CLASS_UNKNOWN &&
            (s->cls >= LAYOUT_NCLASSES || t->small_nblocks[s->cls] == 0)) {
            snprintf(why, n, "segment %u of its table has size class %u, "
                     "which no heapd writes", i, s->cls);
            return -EINVAL;
        }
        remarked += s->remark != 0;
        s->fenced = 0; /* See Note [Segment lifecycle]: the flag fenced */
        s->charge = 0;
        s->remark = 0;
        s->remark_next = 0;
        s->remark_to = 0;
        if (s->free_since > cycles)
            s->free_since = cycles;
        if (s->unknown_since > cycles)
            s->unknown_since = cycles;
    }
    /* large runs whose head and tails disagree */
    for (uint32_t i = t->first; i < t->count; i++) {
        struct seg *s = &t->segs[i];
        bool bad = false;
        if (s->state == SEG_LARGE) {
            bad = s->run == 0 || s->run > t->count - i;
            for (uint32_t k = i + 1; !bad && k < i + s->run; k++)
                bad = t->segs[k].state != SEG_LARGE_TAIL ||
                      t->segs[k].run != i;
        } else if (s->state == SEG_LARGE_TAIL) {
            uint32_t hd = s->run;
            bad = hd < t->first || hd >= i || t->segs[hd].state != SEG_LARGE ||
                  hd + t->segs[hd].run <= i;
        }
        if (!bad)
            continue;
        uint32_t end = s->state == SEG_LARGE ? i + s->run : i + 1;
        for (uint32_t k = i; k < end && k < t->count; k++) {
            struct seg *x = &t->segs[k];
            if (k > i && (x->state != SEG_LARGE_TAIL || x->run != i))
                break;
            /* See Note [Segment lifecycle], (6) */
            x->state = SEG_FREE;
            x->owner = 0;
            x->orphan = 0;
            x->run = 0;
            x->punched = 0;
            x->free_since = cycles;
            repaired++;
        }
    }
    for (uint32_t i = t->first; i < t->count; i++) {
        struct seg *s = &t->segs[i];
        switch (s->state) {
        case SEG_FREE:
            seg_bit_set(t->free_bits, i);
            t->n_free++;
            s->owner = 0;
            s->orphan = 0;
            break;
        case SEG_OWNED: t->n_owned++; break;
        case SEG_FILLED: t->n_filled++; break;
        case SEG_LARGE: t->n_large++; break;
        default: break;
        }
        if (s->orphan)
            t->orphaned++;
        if (s->state != SEG_FREE || !s->punched)
            t->high = i + 1;
    }
    /* every owner but the kept ones is gone: Note [Client lifecycle] in
     * session.c */
    for (uint32_t i = t->first; i < t->high; i++) {
        uint64_t owner = t->segs[i].owner;
        bool keep = false;
        for (const struct resume_client *r = kept; r && !keep; r = r->next)
            keep = r->id == owner;
        if (owner != 0 && !keep) {
            seg_orphan(h, owner);
            gone++;
        }
    }
    /* Note [Young blocks of a client gone]: no FILLED segment or
     * ownerless run is any live client's */
    uint32_t young = 0;
    for (uint32_t i = t->first; i < t->high; i++)
        if (t->segs[i].state == SEG_FILLED ||
            (t->segs[i].state == SEG_LARGE && t->segs[i].owner == 0))
            young += free_young(h, i);
    if (young)
        log_warn("heap '%s': %u young blocks were in segments no client "
                 "owns (a client returned them, or left while evicted); "
                 "freed", h->cfg->name, young);
    if (repaired)
        log_warn("heap '%s': %u segments of large runs are free again: a "
                 "kill cut them short", h->cfg->name, repaired);
    if (unbitted)
        log_info("heap '%s': %u segments' free bits disagreed with their "
                 "states when heapd died (a punch or a grant under way); "
                 "recounted", h->cfg->name, unbitted);
    *odd = repaired + unbitted + misfiled + remarked + gone;
    if (sealed && *odd == 0 && sealed->adopted <= sealed->orphaned &&
        sealed->orphaned - sealed->adopted == t->orphaned) {
        /* Note [Recovering the segment table]: as a clean stop left it */
        t->n_reusable = seg_popcount(t->reuse_bits, words);
        t->orphaned = sealed->orphaned;
        t->adopted = sealed->adopted;
    } else if (sealed) {
        if (misfiled || remarked || gone)
            log_warn("heap '%s': the sealed table has %u reuse bits on "
                     "segments not FILLED, %u remark marks and %u owners "
                     "its registry does not name", h->cfg->name, misfiled,
                     remarked, gone);
        if (*odd == 0) {
            log_warn("heap '%s': the sealed table counted %llu orphans "
                     "less %llu adopted, and its records hold %llu",
                     h->cfg->name, (unsigned long long)sealed->orphaned,
                     (unsigned long long)sealed->adopted,
                     (unsigned long long)t->orphaned);
            *odd = 1;
        }
        memset(t->reuse_bits, 0, words * sizeof(uint64_t));
    }
    seg_recount_memory(t);
    if (!segtab_check(t)) {
        snprintf(why, n, "its segment table disagrees with itself after "
                 "repair (the log says how)");
        return -EINVAL;
    }
    return 0;
}

int seg_fence(struct heap *h, uint32_t **out, uint32_t *n)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    uint32_t k = 0, *segs = malloc(((size_t)t->high + 1) * sizeof *segs);
    if (!segs)
        return -ENOMEM;
    for (uint32_t i = t->first; i < t->high; i++) {
        struct seg *s = &t->segs[i];
        if (s->state == SEG_FREE || s->fenced == UINT8_MAX)
            continue; /* 255 evictions at once: it stays fenced */
        /* sweepers read it without the lock; See Note [Segment
         * lifecycle]: the flag fenced */
        __atomic_store_n(&s->fenced, (uint8_t)(s->fenced + 1),
                         __ATOMIC_RELAXED);
        if (s->fenced == 1)
            t->n_fenced++;
        if (seg_bit_test(t->reuse_bits, i))
            unfile_reusable(t, i);
        segs[k++] = i;
    }
    *out = segs;
    *n = k;
    return 0;
}

void seg_unfence(struct heap *h, const uint32_t *segs, uint32_t n)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    for (uint32_t k = 0; k < n; k++) {
        struct seg *s = &t->segs[segs[k]];
        if (s->fenced == 0 || s->fenced == UINT8_MAX)
            continue;
        /* See Note [Segment lifecycle]: the flag fenced */
        __atomic_store_n(&s->fenced, (uint8_t)(s->fenced - 1),
                         __ATOMIC_RELAXED);
        if (s->fenced != 0)
            continue;
        t->n_fenced--;
        /* Note [Young blocks of a client gone]: the evicted process is
         * gone */
        if ((s->state == SEG_FILLED && s->charge == 0) ||
            (s->state == SEG_LARGE && s->owner == 0))
            free_young(h, segs[k]);
    }
}

/* See Note [Segment lifecycle], (5) */
void seg_release(struct heap *h, uint32_t i)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    struct seg *s = &t->segs[i];
    /* See Note [Segment lifecycle], (5): FILLED or the head of a large
     * run, not fenced, and no punch of its free pages under way (seg_purge
     * runs after the sweep, on the same thread) */
    assert(s->state == SEG_FILLED || s->state == SEG_LARGE);
    assert(!s->fenced && !s->purging);
    if (s->state == SEG_LARGE) {
        uint32_t n = s->run;
        t->n_large--;
        seg_punch(h, i, n); /* a large run's memory goes back at once */
        for (uint32_t k = i; k < i + n; k++)
            make_free(h, k);
        return;
    }
    if (s->state == SEG_FILLED) {
        t->n_filled--;
        make_free(h, i);
    }
}

/* ---- (7): Note [Loading a saved heap] in load.c ---- */

/* FREE segments [I, I + N) read as zero and are used from now on. */
static void load_zeroed(struct heap *h, uint32_t i, uint32_t n)
{
    zero_free_run(h, i, n);
    for (uint32_t k = i; k < i + n; k++)
        seg_set_punched(h, k, false);
}

int seg_load_small(struct heap *h, uint32_t i, uint8_t cls)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    if (i < t->first || i >= t->count || !seg_bit_test(t->free_bits, i) ||
        t->segs[i].fenced)
        return -EBUSY;
    load_zeroed(h, i, 1);
    struct layout_segment *hd = heap_seg_addr(h, i);
    hd->size_class = cls;
    __atomic_store_n(&hd->kind, LAYOUT_SEG_SMALL, __ATOMIC_RELEASE);
    take(t, i, SEG_FILLED, 0, 0, 0);
    __atomic_store_n(&t->segs[i].cls, cls, __ATOMIC_RELEASE);
    t->n_filled++;
    return 0;
}

int seg_load_large(struct heap *h, uint32_t i, uint32_t run)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    if (i < t->first || run == 0 || run > t->count - i)
        return -EBUSY;
    for (uint32_t k = i; k < i + run; k++)
        if (!seg_bit_test(t->free_bits, k) || t->segs[k].fenced)
            return -EBUSY;
    load_zeroed(h, i, run);
    struct layout_segment *hd = heap_seg_addr(h, i);
    __atomic_store_n(&hd->kind, LAYOUT_SEG_LARGE, __ATOMIC_RELEASE);
    hd->large_bytes = (uint64_t)run << h->seg_shift;
    for (uint32_t k = i; k < i + run; k++)
        take(t, k, k == i ? SEG_LARGE : SEG_LARGE_TAIL, 0, 0,
             k == i ? run : i);
    t->n_large++;
    publish_run(h, run);
    return 0;
}

void seg_unload(struct heap *h, uint32_t i)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct segtab *t = &h->segs;
    uint8_t st = t->segs[i].state;
    uint32_t n = st == SEG_LARGE ? t->segs[i].run : 1;
    if (st == SEG_FILLED)
        t->n_filled--;
    else if (st == SEG_LARGE)
        t->n_large--;
    else
        return; /* FREE already, or a tail its head frees */
    for (uint32_t k = i; k < i + n; k++)
        make_free(h, k);
    seg_punch(h, i, n);
}
