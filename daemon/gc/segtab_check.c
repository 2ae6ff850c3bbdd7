/* The segment table's checker (Note [Checking the segment table]): the
 * debug builds' recount of the table's summary against its states, run at
 * releases of heap->lock.  The table itself is segment.c. */
#include "segment.h"

#include <assert.h>
#include <stdlib.h>

#include "log.h"

/* Note [Checking the segment table]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Debug builds (no NDEBUG) check, where heap->lock is released after the
 * table changed, that its summary agrees with its states:
 *   - n_owned, n_filled, n_large are the numbers of OWNED, FILLED and
 *     LARGE segments below `high` (none above it was
 *     ever taken);
 *   - n_free is the number of bits in free_bits, and every bit set is a
 *     FREE segment (runs_take, purge.c, takes the FREE segments it
 *     punches out of both while runs_punch drops the lock, so a FREE
 *     segment may lack its bit);
 *   - n_reusable is the number of bits in reuse_bits, every one of them a
 *     FILLED segment (Note [Reusing partly free segments]);
 *   - every orphan is FILLED or LARGE, and orphaned - adopted is their
 *     number (Note [Segment supply]);
 *   - every LARGE_TAIL names a LARGE head whose run covers it;
 *   - a segment charged to a client (Note [Quota]) holds objects (is
 *     not FREE) and names a record in use.
 * Every release of heap->lock goes through heap_unlock (Note [Checked
 * lock rules] in proto/lock.h) -- but table_take_back's of a table that
 * failed recovery, which is refused as found -- and heap_unlock runs the
 * check when a segment's state changed since the last one (set_state
 * counts the changes, in debug builds only), at every
 * SEGTAB_CHECK_EVERY-th release of this table's lock besides
 * (seg_check_due, on the table's own count: fences,
 * reuse bits, charges and punched pages change without a state), and at
 * every release when the environment sets HEAPD_CHECK_ALL (a failing test
 * rerun with it finds the first bad release).  The checker logs what
 * disagrees and returns false; the assert then stops the daemon at the
 * release that broke it.
 * The recount walks the segments up to `high` (nothing above it was ever
 * taken or fenced): about 10 ns a segment in use.  Measured over the
 * collector and alloc suites, some 100,000 releases at about 550
 * segments in use: at every release the checks took 0.66 s of the
 * daemons' time (6.5 us each), in suites that run about 8 s on 2 shared
 * cores; at the releases that changed a state and every 16th (19,000 of
 * them: most releases are the markers polling rings, grants that reuse
 * nothing, reports) 80 ms.  The sweep takes the lock once per segment it
 * frees, so a cycle that frees F of N segments in use checks F times
 * O(N): at most about 0.7 s for a test heap of 8192 segments freed whole.
 * It is not tied to HEAPD_VERIFY, which turns on the verifier: that one
 * counts what it finds, in release builds too, where this is an assert
 * of debug builds.  (Before, the fences were counted over every segment,
 * O(max_size): 53 us a check, and the suites took twice as long.)
 */

bool segtab_check(const struct segtab *t)
{
    uint32_t n[SEG_STATE_MAX + 1] = {0};
    uint64_t orphans = 0, purged = 0;
    uint32_t unpunched = 0, fenced = 0;
    bool ok = true;

#define SEGTAB_BAD(...)                                                     \
    do {                                                                    \
        log_error("segment table: " __VA_ARGS__);                           \
        ok = false;                                                         \
    } while (0)
    if (t->first > t->high || t->high > t->count)
        SEGTAB_BAD("first %u, high %u, count %u out of order", t->first,
                   t->high, t->count);
    for (uint32_t i = t->first; i < t->high && ok; i++) {
        const struct seg *s = &t->segs[i];
        uint8_t st = s->state;
        if (st > SEG_STATE_MAX || st == SEG_CONTROL) {
            SEGTAB_BAD("segment %u has state %u", i, st);
            break;
        }
        n[st]++;
        fenced += s->fenced != 0;
        if (seg_bit_test(t->free_bits, i) && st != SEG_FREE)
            SEGTAB_BAD("segment %u is in free_bits but has state %u", i, st);
        if (s->fenced && (st == SEG_FREE || seg_bit_test(t->reuse_bits, i)))
            SEGTAB_BAD("segment %u is fenced but %s", i,
                       st == SEG_FREE ? "free" : "reusable");
        if (seg_bit_test(t->reuse_bits, i) && st != SEG_FILLED)
            SEGTAB_BAD("segment %u is in reuse_bits but has state %u", i,
                       st);
        /* Note [Quota]: only segments that may hold objects are
         * charged, and to a record in use */
        if (s->charge != 0 &&
            (s->charge > t->n_charges ||
             t->charges[s->charge - 1].client == 0 || st == SEG_FREE))
            SEGTAB_BAD("segment %u (state %u) is charged to record %u: "
                       "not a segment for objects, or not a record in use",
                       i, st, s->charge);
        if (s->orphan) {
            orphans++;
            if (st != SEG_FILLED && st != SEG_LARGE)
                SEGTAB_BAD("segment %u is an orphan in state %u", i, st);
        }
        if (st == SEG_LARGE_TAIL &&
            (s->run >= i || s->run < t->first ||
             t->segs[s->run].state != SEG_LARGE ||
             s->run + t->segs[s->run].run <= i))
            SEGTAB_BAD("large tail %u names head %u, which does not cover it",
                       i, s->run);
        /* Note [Purging free memory] in purge.c */
        if (s->purging && st != SEG_FILLED)
            SEGTAB_BAD("segment %u is being purged in state %u", i, st);
        uint32_t pp = seg_popcount(seg_pages_purged(t, i), t->page_words);
        if (pp && s->punched)
            SEGTAB_BAD("punched segment %u has %u pages punched besides", i,
                       pp);
        unpunched += !s->punched;
        purged += pp;
    }
    if (!ok)
        return false;
    if (n[SEG_OWNED] != t->n_owned)
        SEGTAB_BAD("n_owned %u, but %u segments are OWNED", t->n_owned,
                   n[SEG_OWNED]);
    if (n[SEG_FILLED] != t->n_filled)
        SEGTAB_BAD("n_filled %u, but %u segments are FILLED", t->n_filled,
                   n[SEG_FILLED]);
    if (n[SEG_LARGE] != t->n_large)
        SEGTAB_BAD("n_large %u, but %u segments are LARGE", t->n_large,
                   n[SEG_LARGE]);
    uint32_t nfree = seg_popcount(t->free_bits, (t->count + 63) / 64);
    if (nfree != t->n_free)
        SEGTAB_BAD("n_free %u, but free_bits has %u bits set", t->n_free,
                   nfree);
    uint32_t nreuse = seg_popcount(t->reuse_bits, (t->count + 63) / 64);
    if (nreuse != t->n_reusable)
        SEGTAB_BAD("n_reusable %u, but reuse_bits has %u bits set",
                   t->n_reusable, nreuse);
    if (fenced != t->n_fenced)
        SEGTAB_BAD("n_fenced %u, but %u segments are fenced", t->n_fenced,
                   fenced);
    if (unpunched != t->n_unpunched || purged != t->pages_purged)
        SEGTAB_BAD("n_unpunched %u and pages_purged %llu, but %u segments "
                   "are not punched and %llu pages of theirs are",
                   t->n_unpunched, (unsigned long long)t->pages_purged,
                   unpunched, (unsigned long long)purged);
    if (t->orphaned - t->adopted != orphans)
        SEGTAB_BAD("orphaned %llu - adopted %llu, but %llu segments are "
                   "orphans", (unsigned long long)t->orphaned,
                   (unsigned long long)t->adopted,
                   (unsigned long long)orphans);
#undef SEGTAB_BAD
    return ok;
}

#ifndef NDEBUG
bool seg_check_due(uint64_t *releases)
{
    static _Atomic int all = -1;
    if (all < 0)
        all = getenv("HEAPD_CHECK_ALL") != NULL;
    return all || (*releases)++ % SEGTAB_CHECK_EVERY == 0;
}

void segtab_assert(struct segtab *t)
{
    bool due = seg_check_due(&t->releases);
    if (!due && t->state_changes == t->checked_at)
        return;
    t->checked_at = t->state_changes;
    assert(segtab_check(t));
}
#endif
