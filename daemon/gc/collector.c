/* The collection cycle of one heap.
 *
 * Note [Collection cycle]
 * ~~~~~~~~~~~~~~~~~~~~~~~
 * One collector thread per heap runs cycles; the workers
 * (gc_threads, shared by all heaps) do the parallel parts.  Mutators stop
 * only twice per cycle, briefly:
 *   1. Trigger: a request (heapd_collect, heapctl gc, a grant that found the
 *      heap full), or allocation since the last cycle's start above
 *      gc_overhead percent of the live bytes after the last cycle, with a
 *      floor of TRIGGER_FLOOR so that a near-empty heap does not collect
 *      constantly (Go's GOGC, OCaml's space_overhead).  The loop thread
 *      checks it at every segment grant and every segment return, so it
 *      fires at most a return batch of segments late.  While a cycle runs,
 *      allocation that outruns it waits for it (Note [Pacing]).
 *   2. Snapshot pause (Note [Stop the world]): next epoch, reset every
 *      slot's stack words and empty its URS ring (Note [Straddling a
 *      cycle]), flip the static flag, phase = MARK (the write barrier is on
 *      from here).  O(mutators + globals); no root is read.
 *   3. Concurrent mark: the global roots, then the root stacks through the
 *      handshake (Note [Stack marking handshake]), then the workers
 *      (Note [Parallel marking]) while URS batches stream in
 *      (Note [Update remembered set]).  New objects are black.
 *   4. Final sync, once the workers have run dry and no remark is left at
 *      a client (Note [Remark] in daemon/gc/remark.c): stop again; read
 *      every live mutator's URS ring, mark any stack still unmarked, and
 *      drain the mark queue with a budget of FINAL_SYNC_BUDGET objects.
 *      If the budget runs out, or the drain overflowed a stack (Note
 *      [Bounded mark stacks] in mark.c), release the mutators and go back
 *      to 3 (the barrier stays on).  Marking ends only with the queue
 *      empty, every ring and stack consumed and no remark outstanding;
 *      then phase = SWEEP (barrier off, allocation still black) and
 *      release.
 *   5. Concurrent sweep of every segment (Note [Sweeping]).
 *   6. Stats, give idle memory back, phase = IDLE, tell the loop thread
 *      (pending CollectDone replies and grants wait for it).
 * With the verifier on, reachability is checked at the end of the final
 * sync and what the sweep promised at the next snapshot (Note [Heap
 * verifier]).  The heap lock is never held while waiting for mutators: the
 * loop thread needs it to free the slots of clients that die meanwhile.
 *
 * Note [Epoch reuse]
 * ~~~~~~~~~~~~~~~~~~
 * An epoch value comes back every 255 cycles; nothing may still hold it
 * then.  Mark bytes: every segment is swept every cycle (Note [Sweeping]),
 * so after a sweep every non-zero mark is the current epoch.  Dirty tags:
 * the marker clears stale tags of every object it scans, and every live
 * object is scanned each cycle (Note [Dirty tags]).  Stack words: reset at
 * every snapshot (step 2).  Static flags: one bit that flips every cycle,
 * compared for equality only.  The verifier checks the first two; the
 * many-cycles tests run past 255 cycles.
 */
#include "collector.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "globals.h"
#include "heap.h"
#include "load.h"
#include "log.h"
#include "mark.h"
#include "remark.h"
#include "safepoint.h"
#include "save.h"
#include "slotmem.h"
#include "sweep.h"
#include "table.h"
#include "verify.h"
#include "workers.h"

#define TRIGGER_FLOOR (4u << 20)
/* Objects the final sync may scan before it gives up and lets mutators run
 * again (GHC's sync-phase marking budget): bounds the final-sync pause. */
#define FINAL_SYNC_BUDGET 5000

struct collector {
    struct heap *h;
    struct workers *workers;
    pthread_t thread;
    struct hd_mutex mu;
    pthread_cond_t cv;
    bool requested;
    bool quit;
    bool running;                /* a cycle is under way; guarded by mu */
    uint64_t cycles_started;     /* guarded by mu */
    uint64_t alloc_at_last;      /* heap->lock: allocation at last start */
    uint64_t marked_last;        /* heap->lock: bytes the cycle marked, once
                                  * its marking is over (Note [Pacing]) */
    /* Note [Heap goal]; heap->lock */
    uint64_t alloc_in_last;      /* allocated while the last cycle ran */
    uint64_t alloc_between;      /* allocated from the start of the cycle
                                    before the last to the last's */
    uint64_t demand_last;        /* the last cycle's alloc_between plus
                                    alloc_in_last */
    uint64_t cap_floor;          /* committed after the last purge, plus
                                    GROWTH_MIN of a budget */
    uint64_t trigger_at;         /* allocation since the last start that
                                    starts a cycle, before the runway;
                                    0: a budget */
    _Atomic bool starved;        /* the running cycle's workers have no
                                    core mutators leave them (Note
                                    [Pacing]) */
    long cores;                  /* online CPUs, at launch (starved_now) */
    _Atomic uint64_t slot_alloc[LAYOUT_MAX_MUTATORS]; /* each slot's
                                    allocation count at the last cycle's
                                    start */
    struct notify cycle_done;    /* Note [Collector handoff] */
    struct notify outbox;
    /* Note [Recovery cycles]: the cycle before may have been cut short */
    bool unswept;
    bool sweep_only_verified;    /* sweep nothing after a verifier failure */
};

uint64_t collector_bytes_allocated(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    uint64_t n = h->stats.alloc_retired;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++)
        if (heap_slot_attached(h, i)) /* Note [Client control memory]:
                                         a reader may flag a fault */
            n += slotmem_alloc_bytes((struct heap *)h, i);
    return n;
}

void collector_retire_slot(struct heap *h, unsigned slot)
{
    ASSERT_LOCK_HELD(&h->lock);
    h->stats.alloc_retired += slotmem_alloc_bytes(h, slot);
    atomic_store(&heap_slot(h, slot)->alloc_bytes, 0);
}

uint64_t collector_request(struct heap *h)
{
    struct collector *gc = h->gc;
    hd_mutex_lock(&gc->mu);
    uint64_t target = gc->cycles_started + 1;
    gc->requested = true;
    pthread_cond_signal(&gc->cv);
    hd_mutex_unlock(&gc->mu);
    return target;
}

/* Note [Heap goal] and Note [Pacing] below */
#define PACE_FACTOR 2    /* budgets a cycle with a core of its own may
                            see allocated */
#define GROWTH_MIN_DEN 4 /* a quarter of a budget */
#define TRIGGER_MIN_DEN 4 /* a cycle per quarter budget, at most */
#define RUNWAY_MIN_DEN 8 /* the runway: at least an eighth of a budget, */
#define RUNWAY_MAX_DEN 2 /* at most half of one */

/* Note [Memory limit]
 * ~~~~~~~~~~~~~~~~~~~
 * A heap's memory_limit bounds the memory the segment table accounts for
 * as committed -- the figure the growth cap is measured in (Note [Heap
 * goal]) -- as Go's GOMEMLIMIT bounds its heap, so that an operator can
 * size a cache to a machine:
 *   - the budget shrinks as the live bytes near the limit: to at most
 *     what is left under it, shared by the budget allocated before a
 *     cycle and the PACE_FACTOR ones allocated while it runs, (limit -
 *     live) / (1 + PACE_FACTOR), but never below LIMIT_BUDGET_MIN_SEGS
 *     segments, so that cycles come more often near the limit, not back
 *     to back;
 *   - the growth cap is at most the limit, for every grant, one that
 *     waited for a cycle too;
 *   - a grant that has waited for a cycle and still does not fit under
 *     the limit waits for LIMIT_WAITS more (daemon/grant.c: what was
 *     allocated black while the first ran dies in the next), and is then
 *     refused: the client's allocation fails with ENOMEM, its message
 *     naming memory_limit, counted in limit_refusals.  Refused after one
 *     cycle, test_memory's garbage writer (14 MiB live under 32) was
 *     refused once in a full run of the suite, under load.
 * Memory the heap holds costs nothing: blocks of partly free segments,
 * free segments not punched yet (but for the pages a purge punched out of
 * them: Note [Reused pages are growth] in segment.c), so a program whose
 * live data fits keeps allocating whatever garbage it makes.  An object
 * that could never fit (larger than the limit) is refused at once.
 * Measured (test_memory, 14 MiB live, 640 MiB of garbage of 64 bytes to
 * 4 KiB, one client): the heap held up to 57 MiB in 37 cycles without a
 * limit, and 32.1 MiB in 101 cycles under a limit of 32 MiB, no
 * allocation refused.
 * Holes count against the limit: the free blocks of partly used pages,
 * which no purge can give back.  So under a limit a sweep makes a FILLED
 * segment reusable with a sixteenth of its blocks free (a quarter
 * otherwise: Note [Reusing partly free segments] in segment.c), a
 * client's reserve is a 256th of the limit (Note [Reserve sizing] in
 * client/reserve.c), and a mutator that asks heapd itself for a segment
 * names its size class, so that holes of that class come first: the
 * shared cache (19 MiB live) under a limit of 31 MiB failed its first
 * worker's allocations without them, and held 30 MiB (1 worker) and 29
 * MiB (2) with them; with 4 workers, whose current segments of each
 * class take room too, it still fails: a limit must leave the holes
 * room.
 */
#define LIMIT_BUDGET_MIN_SEGS 8u

/* gc_overhead percent of LIVE bytes, at least of TRIGGER_FLOOR; within
 * the memory limit (Note [Memory limit]) */
static uint64_t budget_of(const struct heap *h, uint64_t live)
{
    uint64_t b = (live > TRIGGER_FLOOR ? live : TRIGGER_FLOOR) / 100 *
                 h->cfg->gc_overhead;
    uint64_t lim = h->cfg->memory_limit;
    if (lim) {
        uint64_t room = lim > live ? (lim - live) / (1 + PACE_FACTOR) : 0;
        uint64_t least = (uint64_t)LIMIT_BUDGET_MIN_SEGS << h->seg_shift;
        room = room > least ? room : least;
        b = b < room ? b : room;
    }
    return b;
}

uint64_t collector_allocation_budget(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    return budget_of(h, h->stats.live_bytes);
}

/* With heap->lock held: the most recent lower bound of the live bytes:
 * the last cycle's, or what the running one has marked so far (Note
 * [Pacing]). */
static uint64_t live_now(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    uint64_t marked = h->marking ? atomic_load(&h->marking->marked_bytes)
                                 : h->gc->marked_last;
    return marked > h->stats.live_bytes ? marked : h->stats.live_bytes;
}

/* Note [Heap goal]
 * ~~~~~~~~~~~~~~~~
 * A heap's goal is the memory it may hold: its live bytes plus
 * gc_overhead percent of them (the live bytes at least TRIGGER_FLOOR),
 * the bound gc_overhead stands for (Go's heap goal under GOGC).  What is
 * measured against it is the memory the segment table accounts for as
 * committed (seg_committed: segments not punched, less the pages punched
 * out of them).
 * Where the heap's collector has no core of its own -- as many mutators
 * allocating as there are cores, so that its workers run only when
 * mutators wait (Note [Worker priority]) -- these rules keep the heap near
 * its goal (where it has one, pacing is looser: Note [Pacing]):
 *   - start when the memory is used up: after a sweep, the next cycle is
 *     due once the mutators have allocated what the heap holds free --
 *     the free memory grants hand out first (seg_purge's `usable`) and
 *     the segments clients hold -- plus the room left under the goal,
 *     counted from the cycle's start (so with what it allocated while it
 *     ran), between TRIGGER_MIN of a budget and a budget.  The trigger of
 *     a budget alone left the free blocks partly used segments keep
 *     (fragmentation, reserves) on top of the goal: 2.3 times the live
 *     bytes on the shared map below, against 1.9 with this rule;
 *   - a runway early: it starts when that allocation less the runway is
 *     reached, the runway being what the heap allocated while its last
 *     cycle ran (between RUNWAY_MIN and RUNWAY_MAX of a budget): what is
 *     allocated during a cycle survives it (Go's trigger);
 *   - where the collector has a core of its own, a cycle starts after a
 *     budget (Note [Pacing]), or sooner -- after TRIGGER_MIN of one at
 *     the soonest -- once the committed memory comes within a runway of
 *     the goal (near_goal): holes the allocation cannot refill make it
 *     take fresh memory long before a budget is reached.  The shared
 *     cache (one worker, 20 % updates) held 2.3 to 2.4 times its live
 *     bytes with a budget at a time, 1.8 to 1.9 with this rule (12
 *     cycles instead of 3, lookups unchanged).  Not for a heap under
 *     TRIGGER_FLOOR, not for one that a purge left past its goal
 *     (cap_floor: more cycles would not bring it back), and not while a
 *     cycle lasts as long as the allocation between two (less than twice
 *     alloc_in_last allocated since the last start): latency_bench ran
 *     twice the cycles and 22 to 30 % slower with a live set of 50,000
 *     nodes or of a million;
 *   - pace within it: while a cycle runs, grants wait once a runway has
 *     been allocated since it started, and a grant that would take the
 *     committed memory past the cap waits at any time (Note [Pacing]).
 *     The cap is the goal, or, where what the last cycle's purge left in
 *     use -- committed memory less what grants can hand out again --
 *     is more than that (live blocks spread thin, or a live set that
 *     grew since its mark), that plus GROWTH_MIN of a budget, so that
 *     such a heap still grows a little each cycle instead of making
 *     every grant wait (the free memory it keeps does not count: it
 *     grew the cap a quarter budget a cycle, for good);
 *   - and, for every heap, give the rest back: after the sweep, free
 *     memory stays committed
 *     only as far as the heap will allocate it again soon -- what it
 *     allocated from the start of the cycle before to the end of this
 *     one, the larger of the last two such figures, at most two budgets
 *     -- and the rest is punched (Note [Purging free memory] in
 *     purge.c).  A cycle nobody allocated during keeps nothing: an idle
 *     heap holds its live blocks and little more.
 * Measured on the shared-map workload (100,000 keys, 2 worker
 * processes, gc_overhead 100): with pacing by allocation alone (grants
 * waited once a running cycle had seen two budgets allocated) the heap
 * held 5 to 7 times its 17.8 MB live set, its markers starved by the
 * workers: a cycle took 1 to 2 s while they ran, 18 ms after.
 *
 * Note [Pacing]
 * ~~~~~~~~~~~~~
 * A concurrent collector that mutators outrun never catches up: the heap
 * grows by whatever they allocate while a cycle runs, the next cycle has
 * more to mark and sweep and takes longer, and so on until max_size (seen
 * under ThreadSanitizer: 480 MB committed for 8 MB live).  So allocation
 * is paced by the segment supply, the one place every mutator comes to
 * for memory: a grant waits for the cycle under way once that cycle has
 * seen too much allocated, and one that would take the heap's committed
 * memory past its cap waits for it, or for a new one (grant_segments in
 * daemon/grant.c); the mutators that need the grant wait with it, in
 * blocking regions (Note [Segment supply]), and a request that waits
 * makes the collector's workers urgent (Note [Worker priority]), so the
 * cycle they wait for ends soon.  How much is too much depends on
 * whether the collector has a core of its own (fewer mutators allocated
 * since the last cycle started than there are cores, judged at each
 * cycle's start, and at each grant while the cycle runs, as it may lose
 * its core then: the memory benchmark's two workers joined a cycle their
 * parent's fill had started, whose idle-class sweep then took 160 ms
 * instead of 2 while they allocated two budgets, and the heap kept the
 * 41 MiB it reached, 2.4-2.6 times its live bytes, in about one run of
 * four; 0 of 28 runs once grants judge again, 1.98-1.99 times):
 *   - without one, the heap keeps to its goal (Note [Heap goal]): a
 *     runway allocated during a cycle, the goal as the cap, the next
 *     cycle when the memory the heap holds is used up.  Its workers run
 *     only when mutators wait, so only pacing makes a cycle end: the
 *     shared map's two workers on two cores held 5 to 7 times the live
 *     set while a cycle took 1 to 2 s;
 *   - with one, PACE_FACTOR budgets may be allocated during a cycle and
 *     the cap is as many budgets past the goal, a cycle a budget (or
 *     sooner near the goal: Note [Heap goal]): the
 *     workers keep up on their core, and pacing a mutator to the goal
 *     only makes it wait (latency_bench's longest iteration went from
 *     0.7 ms to 4-25 ms, GCBench took twice as long).  A grant that waited
 * is given when the cycle ends without being paced again, so no client
 * waits longer than one cycle; it grows the heap by no more than the cap
 * leaves, or by one segment when the cap leaves none and no partly free
 * segment of its classes is there either (the shared cache's two workers
 * at 50 % updates, each taking a whole grant past the cap after every
 * wait, held 39-41 MiB, 35 MiB with this rule; one blank segment besides
 * the partly free ones made a cache of 8M updates creep from 33.2 to 36.6
 * MiB in 70 cycles, for a goal of 33.2).  It is one segment, so that the
 * partly free ones the cycle left go round the waiters; and the grants
 * that have not waited keep below the cap by a segment per attached
 * mutator (at most a sixteenth of the cap), the room the waiters'
 * segments past it take (the cache's four workers at 50 % updates,
 * waiters given four segments each and the others paced to the cap
 * itself: 2.00-2.06 times the live bytes at the peak in 9 runs; one
 * segment: 1.98-2.01 in 4; both rules: 1.95-1.98 in 11, updates/s the
 * same within the runs' spread).  Allocation into blocks the heap
 * already holds (partly free segments, Note [Reusing partly free segments])
 * never waits: it costs no memory, but for the pages a purge punched out
 * of them (Note [Reused pages are growth] in segment.c).  (Go's GC
 * assists and OCaml's major slices pace the same way, by making the
 * allocator pay.)
 *
 * The live bytes here are the most recent lower bound: the last cycle's,
 * or what the running cycle has marked so far when that is more (the
 * workers add to it every few hundred objects).  A program whose live set
 * has just grown -- a cache filled since the last cycle -- would otherwise
 * be held to the old, small goal while the collector marks the new one,
 * and wait for most of that cycle (measured: 12 ms in latency_bench right
 * after filling a ring of a million nodes).
 */

/* Note [Memory counters]
 * ~~~~~~~~~~~~~~~~~~~~~~~
 * Four lines of the counter table (Note [Counter table] in
 * proto/heapd_counters.h) say how far the memory a heap holds tracks
 * what is in it:
 *   - bytes_committed: what the heap's memfds hold now, from fstat's
 *     st_blocks (heap_committed_bytes), the same figure as the stats
 *     reply's committed_bytes, as a line so that metrics see it;
 *   - block_bytes: the bytes in the blocks the last sweep kept, small
 *     blocks at their class size and large runs whole (the sweep's
 *     live_bytes), set with live_bytes at the cycle's end.  It is not
 *     live_bytes, which is what the marker reached at the snapshot: the
 *     sweep also keeps the blocks allocated black during the cycle, and
 *     that memory is held as much as the marked one;
 *   - purged_bytes: every range punched out of the heap's memfd
 *     (punch_memory, and the unused part of the control area), counted
 *     by its length when fallocate succeeds.  A range may hold pages only
 *     in part (a grant punches a run when any of it has pages), so it is
 *     an upper bound of what went back: committed memory never falls by
 *     more than purged_bytes grows, since nothing else frees the memfd's
 *     pages;
 *   - fragmentation_permille: bytes_committed per 1000 bytes of
 *     block_bytes, 0 before a sweep kept anything.  1000 is a heap whose
 *     memory is all in blocks; the reserves, the free pool kept committed
 *     (Note [Segment supply]) and the free blocks of partly used segments
 *     make it more, and a large run's pages past its object, which no one
 *     writes and so hold no memory, less (a run counts whole in
 *     block_bytes): test_heapctl's heap of 4000 small blocks and a 1 MiB
 *     object held 937 permille once its client's reserve was 2 segments.
 * `heapctl segments` breaks the same figures down by size class (Note
 * [Reports] in daemon/report.c).  Why the sweep's figure and not the
 * marker's: in tests/test_heapctl.c's heap of 4000 blocks of 72 bytes and
 * one 1 MiB object the cycle marked 1,336,584 bytes while the blocks kept
 * held 1,467,648, the object's run of 9 segments being 131,072 bytes more
 * than the object; the memory held is the run.
 */

uint64_t collector_allocated_this_cycle(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    return collector_bytes_allocated(h) - h->gc->alloc_at_last;
}

uint64_t collector_running(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    uint64_t running =
        __atomic_load_n(&h->gc->cycles_started, __ATOMIC_ACQUIRE);
    return running > h->stats.cycles_completed ? running : 0;
}

/* With heap->lock held: whether the heap's collector has no core of its
 * own: judged at the cycle's start, or, if it had one then, as many
 * mutators as there are cores have allocated since (Note [Pacing]). */
static bool starved_now(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    if (atomic_load(&h->gc->starved))
        return true;
    long allocating = 0;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++)
        if (heap_slot_attached(h, i))
            allocating += slotmem_alloc_bytes((struct heap *)h, i) !=
                          atomic_load_explicit(&h->gc->slot_alloc[i],
                                               memory_order_relaxed);
    if (allocating < h->gc->cores)
        return false;
    atomic_store(&h->gc->starved, true); /* until the next cycle starts */
    return true;
}

/* With heap->lock held: the runway (Note [Heap goal]): what the heap
 * allocated while its last cycle ran, within RUNWAY_MIN_DEN and
 * RUNWAY_MAX_DEN of a budget of the live bytes LIVE. */
static uint64_t runway_of(const struct heap *h, uint64_t live)
{
    ASSERT_LOCK_HELD(&h->lock);
    uint64_t budget = budget_of(h, live), r = h->gc->alloc_in_last;
    return r < budget / RUNWAY_MIN_DEN   ? budget / RUNWAY_MIN_DEN
           : r > budget / RUNWAY_MAX_DEN ? budget / RUNWAY_MAX_DEN
                                         : r;
}

uint64_t collector_paced_until(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    /* Note [Recovery cycles]: nothing is granted before they passed */
    uint32_t left = atomic_load(&h->recovery_left);
    if (left)
        return h->stats.cycles_completed + left;
    /* Note [Pacing]: a cycle under way may see a runway allocated, or
     * PACE_FACTOR budgets where its workers have a core of their own */
    uint64_t running = collector_running(h);
    uint64_t live = live_now(h);
    uint64_t lim = starved_now(h) ? runway_of(h, live)
                                                : PACE_FACTOR * budget_of(h, live);
    return running && collector_allocated_this_cycle(h) > lim ? running : 0;
}

/* The goal for LIVE bytes: Note [Heap goal] */
static uint64_t goal_of(const struct heap *h, uint64_t live)
{
    return (live > TRIGGER_FLOOR ? live : TRIGGER_FLOOR) +
           budget_of(h, live);
}

/* Note [Young memory and the heap goal]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A young block is its mutator's to free (Note [Young objects] in
 * proto/young.h): no cycle marks it, and no cycle frees it; nor can a
 * cycle take back a segment a young generation holds.  So the memory
 * young generations hold is not measured against the heap's goal: the
 * cap a grant must stay under (Note [Pacing]) is the goal plus the larger
 * of two figures:
 *   - the bytes of the young blocks the last sweep found in OWNED
 *     segments (heap->young_bytes), the one place a young mutator keeps
 *     them: a client that marks blocks young elsewhere (in a segment it
 *     returned, in a large run) raises the cap by nothing;
 *   - what the attached young slots say their generations hold now, their
 *     young segments and spares (young_held_bytes, written as a segment is
 *     tracked and at each minor collection), the sum at most the bytes of
 *     the heap's OWNED segments (slotmem_young_held): a client that lies
 *     raises the cap by no more than what clients hold, each within its
 *     quota.
 * The first alone made every grant a growing nursery took after a sweep
 * wait for a cycle that could free none of it, and each such cycle took
 * the waiting mutator's stack handshake (Note [The daemon's preparatory
 * push] in mark.c): GCBench young, whose nursery grew to 40 MB on its
 * stretch tree (C locals hold it while it is built) against a goal of 8
 * MB, had 15 grants paced and waited for 12 cycles of 5-9 ms each,
 * 231-236 ms in all against 179-184 with it; and binary-trees, depth 18,
 * whose workers' nurseries grow between sweeps, still ran 6-9 cycles
 * every one started by a paced grant, 725-905 ms (median 765, 2
 * processes) and 1222-1414 ms (median 1280, 1 process), against 1-2
 * cycles and 592-865 ms (median 705) and 1078-1497 ms (median 1092) with
 * the second (5 runs each, interleaved; GCBench young unchanged).
 * The young memory a mutator keeps is bounded by its own rule (Note
 * [Sizing the nursery] in client/minor.c), and by max_size and its
 * quota, as any client's memory is.  The trigger needs no such term: the
 * segments young blocks are in are OWNED, held by their client, and count
 * both in what the heap holds and in what it has committed.
 */
static uint64_t cap_goal_of(const struct heap *h, uint64_t live)
{
    uint64_t held = slotmem_young_held(h);
    return goal_of(h, live) + (held > h->young_bytes ? held : h->young_bytes);
}

uint64_t collector_growth_cap(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    /* Note [Young memory and the heap goal] */
    uint64_t live = live_now(h), goal = cap_goal_of(h, live);
    /* Note [Pacing]: a cycle with a core of its own, PACE_FACTOR budgets
     * more */
    if (!starved_now(h))
        goal += PACE_FACTOR * budget_of(h, live);
    uint64_t cap = goal > h->gc->cap_floor ? goal : h->gc->cap_floor;
    /* Note [Memory limit] */
    uint64_t lim = h->cfg->memory_limit;
    return lim && cap > lim ? lim : cap;
}

uint64_t collector_committed(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    return seg_committed(&h->segs, h->seg_shift);
}

/* With heap->lock held: a heap whose collector has a core of its own,
 * DONE bytes allocated since its last cycle started, holds memory within
 * a runway of its goal, and a cycle now would keep it there (Note [Heap
 * goal]). */
static bool near_goal(const struct heap *h, uint64_t live, uint64_t done)
{
    ASSERT_LOCK_HELD(&h->lock);
    if (live < TRIGGER_FLOOR || h->gc->cap_floor ||
        done < budget_of(h, live) / TRIGGER_MIN_DEN ||
        done < 2 * h->gc->alloc_in_last)
        return false;
    return collector_committed(h) + runway_of(h, live) >=
           cap_goal_of(h, live);
}

void collector_check_trigger(struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    /* Note [Heap goal]: when the memory the heap holds is used up, a
     * runway early */
    uint64_t live = h->stats.live_bytes;
    /* Note [Pacing]: a heap whose collector has a core of its own
     * collects a budget at a time */
    bool starved = starved_now(h);
    uint64_t at = h->gc->trigger_at && starved ? h->gc->trigger_at
                                               : budget_of(h, live);
    uint64_t runway = starved ? runway_of(h, live) : 0;
    uint64_t done = collector_allocated_this_cycle(h);
    if (done + runway >= at || (!starved && near_goal(h, live, done)))
        collector_request(h);
}

static void record_pause(struct heap *h, uint64_t pause, uint64_t ttsp,
                         uint64_t *kind_max)
{
    h->stats.pause_count++;
    h->stats.pause_total_ns += pause;
#define PAUSE_BUCKET_(line, ns) \
    if (pause <= (ns))          \
        h->stats.line++;
    HEAPD_PAUSE_BUCKETS(PAUSE_BUCKET_)
#undef PAUSE_BUCKET_
    if (pause > h->stats.pause_max_ns)
        h->stats.pause_max_ns = pause;
    if (pause > *kind_max)
        *kind_max = pause;
    if (ttsp > h->stats.ttsp_max_ns)
        h->stats.ttsp_max_ns = ttsp;
}

/* Step 2: the snapshot pause.  O(mutators + globals) work only. */
static uint8_t snapshot(struct collector *gc, struct mark_job *mj)
{
    struct heap *h = gc->h;
    uint64_t t0, ttsp, failures = 0;
    uint8_t epoch;

    safepoint_stop(h, SAFEPOINT_SNAPSHOT, &ttsp, &t0);
    heap_lock(h);
    /* the previous cycle's sweep is complete and mutators are stopped:
     * the moment to check what sweeping promised (Note [Heap verifier]) */
    if (h->verify && h->stats.cycles_completed > 0 && !gc->unswept)
        failures = verify_segments(h, (uint8_t)h->control->epoch);
    h->stats.verify_failures += failures;
    epoch = (uint8_t)layout_next_epoch(h->control->epoch);
    atomic_store(&h->control->epoch, epoch);
    /* Note [Epoch reuse]: the stack words are reset at every snapshot;
     * Note [Straddling a cycle]: what the rings hold now was logged after
     * the last final sync and is dropped */
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        if (!heap_slot_attached(h, i))
            continue; /* a free slot's window is nobody's: keep it untouched */
        atomic_store(&heap_slot(h, i)->stack_marking, 0);
        atomic_store(&heap_slot(h, i)->stack_marked, 0);
        mark_urs(h, NULL, i);
    }
    /* Note [Saving a heap at a snapshot]: before globals_snapshot, which
     * lets deleted entries be reused */
    save_snapshot(h, epoch);
    globals_snapshot(h); /* Note [Global roots] */
    atomic_store(&h->bad_logged, 0);
    uint64_t allocated = collector_bytes_allocated(h);
    gc->alloc_between = allocated - gc->alloc_at_last;
    gc->alloc_at_last = allocated;
    mark_job_init(mj, h, epoch, gc->workers->n);
    mj->outbox_notify = gc->outbox;
    h->marking = mj;
    atomic_store(&h->control->phase, LAYOUT_PHASE_MARK); /* barrier on */
    record_pause(h, monotonic_ns() - t0, ttsp, &h->stats.snapshot_pause_max_ns);
    heap_unlock(h);
    safepoint_release(h);
    return epoch;
}

/* Step 4: the final sync.  Returns true when marking is complete. */
static bool final_sync(struct collector *gc, struct mark_job *mj)
{
    struct heap *h = gc->h;
    uint64_t t0, ttsp, failures = 0;
    bool done;

    safepoint_stop(h, SAFEPOINT_FINAL_SYNC, &ttsp, &t0);
    heap_lock(h);
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        /* Note [Slots are the daemon's] in daemon/grant.c */
        if (!heap_slot_attached(h, i))
            continue;
        mark_urs(h, mj, i);          /* every flush is in */
        mark_stack(mj, i, true);     /* a stack nobody marked yet */
    }
    mark_captures(mj); /* Note [Marking C stack captures last] */
    heap_unlock(h);
    done = mark_drain(mj, FINAL_SYNC_BUDGET);
    heap_lock(h);
    hd_mutex_lock(&mj->mu);
    /* Note [Remark]: no flagged segment may be left */
    done = done && mj->pool == NULL && remark_none_locked(mj);
    hd_mutex_unlock(&mj->mu);
    if (done) {
        assert(remark_check_clear(h));
        if (h->verify)
            failures = verify_reachable(h, mj->epoch);
        h->stats.verify_failures += failures;
        h->stats.remark_requests += mj->remark_sent;
        h->stats.remark_global += mj->remark_daemon;
        h->stats.mark_overflows += atomic_load(&mj->overflows);
        h->marking = NULL;
        gc->marked_last = atomic_load(&mj->marked_bytes);
        h->stats.urs_entries += atomic_load(&mj->urs_entries);
        h->stats.conservative_roots += mj->captured_first;
        h->stats.conservative_bytes_retained += mark_captures_bytes(mj);
        /* barrier off; allocation stays black until the sweep is done */
        atomic_store(&h->control->phase, LAYOUT_PHASE_SWEEP);
    } else {
        h->stats.final_sync_retries++;
    }
    record_pause(h, monotonic_ns() - t0, ttsp, &h->stats.final_sync_pause_max_ns);
    heap_unlock(h);
    safepoint_release(h);
    return done;
}

/* The CPUs online, at least 1. */
static long online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n;
}

/* Note [Leaving cores to mutators]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Concurrent marking and sweeping share the cores with the mutators.  A
 * worker that takes a running mutator's core preempts it for a scheduler
 * slice, a pause that no stop accounts for.  So the concurrent phases use
 * only as many workers as there are cores not taken by running mutators
 * (at least one, at most gc_threads); the workers also run at a lower
 * priority (Note [Worker priority]).
 */
static unsigned concurrent_workers(struct heap *h, unsigned max)
{
    /* read at each start, not cached: with the figure cached at launch,
     * latency_bench's cycles marked for 3.4-3.8 ms instead of 2.3-2.5
     * (measured, not understood: the read is a few system calls before
     * the workers start) */
    long cores = online_cores();
    long running = 0, allocating = 0;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        uint64_t a = 0;
        if (heap_slot_enter(h, i)) { /* Note [Slot windows] */
            running += LAYOUT_STATUS_STATE(
                           atomic_load(&heap_slot(h, i)->status)) ==
                       LAYOUT_MUT_RUNNING;
            a = slotmem_alloc_bytes(h, i);
            heap_slot_leave(h, i);
        }
        /* Note [Pacing]: the mutators that allocated since the last
         * cycle started, not those running now: one that waits at the
         * snapshot's end runs again a moment later, one in a long
         * blocking region allocates nothing */
        allocating += a != atomic_load_explicit(&h->gc->slot_alloc[i],
                                                memory_order_relaxed);
        atomic_store_explicit(&h->gc->slot_alloc[i], a,
                              memory_order_relaxed);
    }
    long n = cores - running;
    atomic_store(&h->gc->starved, allocating >= cores);
    return n < 1 ? 1 : n > (long)max ? max : (unsigned)n;
}

#ifndef NDEBUG
/* Note [Holding marking for tests]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Debug builds only: while the file HEAPD_TEST_HOLD_MARKING names exists
 * (at most HOLD_MARKING_MS), a cycle past its snapshot waits before it
 * marks anything, its mutators running, so that a test can make them do
 * what a long concurrent phase lets them do (test_alloc's
 * a_cycle_that_loses_its_core_paces_to_the_goal); the test removes the
 * file to let it go on. */
#define HOLD_MARKING_MS 60000
static void hold_marking_for_tests(void)
{
    const char *path = getenv("HEAPD_TEST_HOLD_MARKING");
    for (unsigned ms = 0; path && ms < HOLD_MARKING_MS &&
                          access(path, F_OK) == 0; ms++)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
}
#endif

static void run_cycle(struct collector *gc)
{
    struct heap *h = gc->h;
    struct mark_job mj;
    struct sweep_job sj;
    uint64_t t_mark, t_sweep, t_end;
    unsigned rounds = 0, nworkers;
    /* Note [Recovery cycles], when they had to wait for kept clients */
    uint32_t left = atomic_load(&h->recovery_left);
    uint64_t failures = h->stats.verify_failures;
    if (left) {
        h->verify = true;
        gc->unswept = left == 2;
        gc->sweep_only_verified = true;
    }

    load_asked_run(h); /* Note [Loading a saved heap]: before it */
    uint8_t epoch = snapshot(gc, &mj);
    nworkers = concurrent_workers(h, gc->workers->n);
    mj.nworkers = nworkers;
#ifndef NDEBUG
    hold_marking_for_tests(); /* Note [Holding marking for tests] */
#endif

    /* Step 3: concurrent marking from the roots, then the workers until
     * they run dry; the final sync decides whether that was all. */
    t_mark = monotonic_ns();
    heap_lock(h);
    mark_roots(&mj);
    heap_unlock(h);
    save_start(h); /* Note [Saving a heap at a snapshot] */
    bool saved = false;
    for (;;) {
        /* remark work that clients still do is waited for here, with
         * the mutators running (Note [Remark]) */
        do {
            mark_round_reset(&mj);
            workers_run_n(gc->workers, mark_worker, &mj, nworkers);
            rounds++;
        } while (remark_wait(&mj));
        /* Note [Marking C stack captures last] in mark.c */
        heap_lock(h);
        bool more = mark_captures(&mj);
        heap_unlock(h);
        if (!saved) {
            /* no block is freed before the saver's last copy, and what
             * its waits drained is marked in the next round */
            saved = true;
            if (save_finish(h))
                continue;
        }
        if (!more && final_sync(gc, &mj))
            break;
    }
    gc->unswept = false;
    if (gc->sweep_only_verified && h->stats.verify_failures > failures) {
        /* Note [Recovery cycles]: keep the heap as it was found */
        heap_lock(h);
        atomic_store(&h->control->phase, LAYOUT_PHASE_IDLE);
        if (left) {
            h->recovery_failed = true;
            atomic_store(&h->recovery_left, 0);
            h->verify = h->recovery_verify;
        }
        heap_unlock(h);
        mark_job_destroy(&mj);
        notify_send(&gc->cycle_done);
        return;
    }

    /* Step 5: concurrent sweep */
    t_sweep = monotonic_ns();
    sweep_job_init(&sj, h, epoch);
    workers_run_n(gc->workers, sweep_worker, &sj, nworkers);
    t_end = monotonic_ns();

    heap_lock(h);
    sweep_job_finish(&sj); /* Note [Quota] in daemon/gc/segment.c */
    h->stats.cycles_completed++;
    /* what was reachable at the snapshot; the blocks that survived also
     * hold what mutators allocated (black) during the cycle, and a budget
     * made of those would grow with every cycle (Note [Pacing]) */
    h->stats.live_bytes = atomic_load(&mj.marked_bytes);
    /* Note [Memory counters] */
    h->stats.block_bytes = atomic_load(&sj.live_bytes);
    h->stats.mark_ns_last = t_sweep - t_mark;
    h->stats.sweep_ns_last = t_end - t_sweep;
    uint64_t cycle = h->stats.cycles_completed;
    /* Note [Heap goal]: what is kept of the free memory */
    uint64_t budget = collector_allocation_budget(h);
    gc->alloc_in_last = collector_bytes_allocated(h) - gc->alloc_at_last;
    uint64_t demand = gc->alloc_between + gc->alloc_in_last;
    uint64_t d2 = demand > gc->demand_last ? demand : gc->demand_last;
    gc->demand_last = demand;
    demand = gc->alloc_in_last == 0 ? 0 : d2 < 2 * budget ? d2 : 2 * budget;
    uint64_t goal = goal_of(h, h->stats.live_bytes);
    gc->cap_floor = 0; /* the goal alone, until the purge says more */
    atomic_store(&h->control->phase, LAYOUT_PHASE_IDLE);
    if (left) { /* one verifying cycle passed */
        atomic_store(&h->recovery_left, left - 1);
        if (left == 1) {
            h->verify = h->recovery_verify;
            gc->sweep_only_verified = false;
            /* the heap is served in full from now on */
            h->stats.recovery_ns = monotonic_ns() - h->recovery_t0;
            log_info("heap '%s': its verifying cycles passed, %llu ms "
                     "after heapd began to take it back", h->cfg->name,
                     (unsigned long long)(h->stats.recovery_ns / 1000000));
        }
    }
    table_save_stats(h); /* Note [The live table] */
    heap_unlock(h);
    struct seg_purged purged;
    seg_purge(h, demand, &purged);
    heap_lock(h);
    uint64_t committed = collector_committed(h);
    /* Note [Heap goal]: past the goal with what it cannot hand out again
     * (live blocks spread thin, a live set that grew), a heap may still
     * grow a little each cycle */
    uint64_t in_use = committed > purged.usable ? committed - purged.usable
                                                : 0;
    if (in_use > cap_goal_of(h, h->stats.live_bytes))
        gc->cap_floor = in_use + budget / GROWTH_MIN_DEN;
    /* the next cycle starts when what the heap holds free -- the free
     * memory grants hand out first and the segments clients hold -- and
     * the room under its goal are allocated (what this cycle allocated
     * counts from its start), between TRIGGER_MIN of a budget and a
     * budget */
    uint64_t held = (uint64_t)h->segs.n_owned << h->seg_shift;
    int64_t at = (int64_t)(purged.usable + held + gc->alloc_in_last + goal) -
                 (int64_t)committed;
    int64_t least = (int64_t)(budget / TRIGGER_MIN_DEN);
    gc->trigger_at = (uint64_t)(at < least               ? least
                                : at > (int64_t)budget ? (int64_t)budget
                                                       : at);
    heap_unlock(h);

    log_debug("heap '%s': cycle %llu: epoch %u, %llu objects marked in %u "
              "round(s) (%llu URS entries), %llu blocks and %llu segments "
              "freed, %llu bytes marked, %llu in surviving blocks, %u "
              "segments and %llu pages given back, %llu committed (goal "
              "%llu, %llu free to grant first), next at %llu allocated; "
              "mark %llu us, sweep %llu us",
              h->cfg->name,
              (unsigned long long)cycle, epoch,
              (unsigned long long)atomic_load(&mj.marked), rounds,
              (unsigned long long)atomic_load(&mj.urs_entries),
              (unsigned long long)atomic_load(&sj.freed_blocks),
              (unsigned long long)atomic_load(&sj.freed_segments),
              (unsigned long long)atomic_load(&mj.marked_bytes),
              (unsigned long long)atomic_load(&sj.live_bytes),
              purged.segments, (unsigned long long)purged.pages,
              (unsigned long long)committed, (unsigned long long)goal,
              (unsigned long long)purged.usable,
              (unsigned long long)gc->trigger_at,
              (unsigned long long)((t_sweep - t_mark) / 1000),
              (unsigned long long)((t_end - t_sweep) / 1000));
    mark_job_destroy(&mj);
    notify_send(&gc->cycle_done);
}

/* Note [Recovery cycles]
 * ~~~~~~~~~~~~~~~~~~~~~~
 * A heap taken back from the table of a heapd that was killed (Note [The
 * live table] in table.c) is served only after two full cycles, run with
 * the verifier on, before the daemon listens, have found nothing wrong.
 * The first cycle's snapshot does not check the sweep before it (that
 * sweep may have been cut short); its final sync checks every reachable
 * object, and if one fails the cycle sweeps nothing, so the heap is
 * refused as it was found, for an operator to save.  The second cycle's
 * snapshot checks what the first one's sweep left, and its final sync the
 * reachable objects again.  Every client is gone then, so the roots are
 * the globals: what they reach is kept, the rest was reachable only from
 * processes that lost their connection with the daemon -- unless clients
 * are kept for resuming (Note [Resuming clients] in resume.c): their
 * stacks are roots and only they can answer their remark requests, so
 * then the two cycles run after heapd listens, once every kept client has
 * resumed or been dropped, and until they pass no grant is answered
 * (collector_paced_until); if one fails, it sweeps nothing, and the loop
 * thread disconnects the heap's clients and serves it no more
 * (session_cycle_done).  The cost is the
 * first cycle's sweep of what those processes left: in two runs of 100
 * kills of a heapd under 5 allocating processes (tests/test_crash.c, 2
 * shared cores) recovery took a median of 244 and 179 ms, at most 1.4 and
 * 2.5 s (the second under a load average of up to 11.6), sweeping up to
 * 6.4 million blocks; the figures follow the garbage and the load.
 */
int collector_recover(struct heap *h, struct workers *w)
{
    struct collector gc = {.h = h, .workers = w, .unswept = true,
                           .sweep_only_verified = true,
                           .cores = online_cores()};
    bool verify = h->verify;
    uint64_t failures = h->stats.verify_failures;

    h->gc = &gc;
    h->verify = true;
    h->stats.verify_failures = 0;
    for (int k = 0; k < 2 && h->stats.verify_failures == 0; k++)
        run_cycle(&gc);
    uint64_t found = h->stats.verify_failures;
    h->stats.verify_failures = failures + found;
    h->verify = verify;
    h->gc = NULL;
    return found == 0 ? 0 : -EUCLEAN;
}

static void *collector_main(void *arg)
{
    pthread_setname_np(pthread_self(), "heapd-cycle");
    struct collector *gc = arg;
    hd_mutex_lock(&gc->mu);
    for (;;) {
        /* Note [Resuming clients]: none starts while a hold is on */
        while ((!gc->requested || atomic_load(&gc->h->cycle_holds) != 0) &&
               !gc->quit)
            hd_cond_wait(&gc->cv, &gc->mu);
        if (gc->quit)
            break;
        gc->requested = false;
        gc->running = true;
        /* atomic: collector_paced_until reads it without mu */
        __atomic_store_n(&gc->cycles_started, gc->cycles_started + 1,
                         __ATOMIC_RELEASE);
        hd_mutex_unlock(&gc->mu);
        run_cycle(gc);
        hd_mutex_lock(&gc->mu);
        gc->running = false;
        if (atomic_load(&gc->h->recovery_left))
            gc->requested = true; /* Note [Recovery cycles]: the next */
    }
    hd_mutex_unlock(&gc->mu);
    return NULL;
}

void collector_hold(struct heap *h, bool hold)
{
    struct collector *gc = h->gc;
    if (hold)
        atomic_fetch_add(&h->cycle_holds, 1);
    else
        atomic_fetch_sub(&h->cycle_holds, 1);
    if (gc) {
        hd_mutex_lock(&gc->mu);
        /* Note [Recovery cycles]: they start once nothing holds them */
        if (atomic_load(&h->recovery_left))
            gc->requested = true;
        pthread_cond_signal(&gc->cv);
        hd_mutex_unlock(&gc->mu);
    }
}

void collector_recover_later(struct heap *h)
{
    h->recovery_verify = h->verify;
    atomic_store(&h->recovery_left, 2);
}

bool collector_idle(struct heap *h)
{
    struct collector *gc = h->gc;
    if (!gc)
        return true;
    hd_mutex_lock(&gc->mu);
    bool idle = !gc->running;
    hd_mutex_unlock(&gc->mu);
    return idle;
}

int collector_launch(struct heap *h, struct workers *w,
                     struct notify cycle_done, struct notify outbox)
{
    struct collector *gc = calloc(1, sizeof *gc);
    sigset_t all, old;
    int rc;

    if (!gc)
        return -ENOMEM;
    gc->h = h;
    gc->workers = w;
    gc->cycle_done = cycle_done;
    gc->outbox = outbox;
    gc->cores = online_cores();
    hd_mutex_init(&gc->mu);
    pthread_cond_init(&gc->cv, NULL);
    h->gc = gc;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&gc->thread, NULL, collector_main, gc);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        h->gc = NULL;
        free(gc);
        return -rc;
    }
    return 0;
}

void collector_stopping(struct heap *h)
{
    save_abort(h);
    load_abort(h);
}

void collector_join(struct heap *h)
{
    struct collector *gc = h->gc;
    if (!gc)
        return;
    hd_mutex_lock(&gc->mu);
    gc->quit = true;
    pthread_cond_signal(&gc->cv);
    hd_mutex_unlock(&gc->mu);
    collector_stopping(h);
    pthread_join(gc->thread, NULL);
    h->gc = NULL;
    hd_mutex_destroy(&gc->mu);
    pthread_cond_destroy(&gc->cv);
    free(gc);
}
