/* Mutator slots, segment grants and the requests that wait for a cycle:
 * the loop thread's policy beside the segment table (segment.c).  See
 * grant.h. */
#include "grant.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collector.h"
#include "heap.h"
#include "log.h"
#include "mark.h"
#include "safepoint.h"
#include "save.h"
#include "slotmem.h"
#include "table.h"
#include "workers.h"

/* ---- mutator slots ---- */

/* *TO += *W: sums, but the longest pause, a maximum (statistics, so a
 * sum wraps rather than saturates). */
static void slot_words_add(struct heap_slot_words *to,
                           const struct heap_slot_words *w)
{
    to->minor += w->minor;
    to->promoted_age += w->promoted_age;
    to->promoted_pub += w->promoted_pub;
    to->pause_total_ns += w->pause_total_ns;
    if (w->pause_max_ns > to->pause_max_ns)
        to->pause_max_ns = w->pause_max_ns;
    to->unscanned += w->unscanned;
    to->overflows += w->overflows;
}

/* A slot's statistics words start at 0 with each attachment. */
static void slot_words_clear(struct layout_mutator *m)
{
    atomic_store_explicit(&m->capture_unscanned, 0, memory_order_relaxed);
    atomic_store_explicit(&m->capture_overflows, 0, memory_order_relaxed);
    atomic_store_explicit(&m->young_minor, 0, memory_order_relaxed);
    atomic_store_explicit(&m->young_promoted_age, 0, memory_order_relaxed);
    atomic_store_explicit(&m->young_promoted_pub, 0, memory_order_relaxed);
    atomic_store_explicit(&m->young_pause_max_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&m->young_pause_total_ns, 0, memory_order_relaxed);
}

/* Note [Slots are the daemon's]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Which mutator slots are attached, and to whom, is the daemon's own
 * record (heap->owners: client id, region, pid, uid, name), set by
 * grant_slot and cleared by grant_free_slot under heap->lock.  A slot's
 * status word says only what the mutator does (RUNNING, BLOCKED, WAITING,
 * its last ack), and its client writes it (Note [Client control memory]
 * in proto/layout.h); so attach, stops, the final sync, marking, the
 * verifier and the byte counts ask heap_slot_attached, never the status,
 * whether a slot is in use.  A FREE status on an attached slot is a fault
 * of its client, which is disconnected; meanwhile a stop counts the slot
 * as stopped and never waits for it.  (When any client could write any
 * slot, a forged RUNNING on a free slot hung every stop of the heap for
 * good, and forged BLOCKED words filled every slot.)
 */
int grant_slot(struct heap *h, uint64_t client, uint64_t slots[2], int fd,
               unsigned region, uint64_t granted, uint64_t young_bytes,
               uint32_t young_age)
{
    ASSERT_LOCK_HELD(&h->lock);
    for (int i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        /* Note [Slot windows]: not while a reader of its last owner is
         * still in its window */
        if (heap_slot_attached(h, (unsigned)i) ||
            atomic_load(&h->owners[i].readers) != 0)
            continue;
        int rc = slotmem_map(h, (unsigned)i, fd, region);
        if (rc < 0)
            return rc;
        struct layout_mutator *m = heap_slot(h, (unsigned)i);
        h->owners[i].region = region;
        /* Note [Young budgets] in daemon/gc/heap.h */
        h->owners[i].young_bytes = young_bytes;
        h->owners[i].young_age = young_bytes ? young_age : 0;
        atomic_store(&h->owners[i].alloc_bound, granted);
        atomic_store(&h->owners[i].fault, SLOT_FAULT_NONE);
        m->client_id = client; /* for a debugger; never read back */
        m->slot_epoch++;
        atomic_store(&m->alloc_bytes, 0);
        atomic_store(&m->root_depth, 0);
        atomic_store(&m->pending_root, NULL);
        atomic_store(&m->stack_marking, 0);
        atomic_store(&m->stack_marked, 0);
        atomic_store(&m->young_promoting, 0);
        atomic_store(&m->young_held_bytes, 0);
        atomic_store(&m->captured_n, 0);
        slot_words_clear(m);
        /* the URS ring starts empty: the tail catches up with the head */
        atomic_store(&m->urs_tail, atomic_load(&m->urs_head));
        /* ack 0 is never a stop generation: see Note [Stop the world] */
        atomic_store(&m->status, LAYOUT_STATUS(0, LAYOUT_MUT_RUNNING));
        /* Note [Stop the world]: asked for the stop under way, if any */
        atomic_store(&m->stop_request, h->stop_raised);
        atomic_store(&m->evicted, LAYOUT_STALL_NONE);
        atomic_store(&h->owners[i].stall_since, 0);
        atomic_store(&h->owners[i].stall_on, LAYOUT_STALL_NONE);
        /* attached only once its window shows the client's words */
        atomic_store_explicit(&h->owners[i].client_id, client,
                              memory_order_release);
        slots[i / 64] |= 1ull << (i % 64);
        h->mutators++;
        table_slot_set(h, (unsigned)i, client, region, granted);
        table_slot_young(h, (unsigned)i, h->owners[i].young_bytes,
                         h->owners[i].young_age);
        return i;
    }
    return -ENOSPC;
}

void grant_free_slot(struct heap *h, uint64_t slots[2], unsigned slot, int fd)
{
    ASSERT_LOCK_HELD(&h->lock);
    mark_urs(h, h->marking, slot);
    mark_staged(h, h->marking, slot); /* a writer that died in its barrier */
    save_slot_freed(h, slot);
    collector_retire_slot(h, slot);
    struct heap_slot_owner *o = &h->owners[slot];
    /* Note [Young objects]: its statistics words stay counted; its young
     * blocks are its client's to free (a detach) or the daemon's (its
     * client's departure: seg_orphan) */
    struct heap_slot_words w;
    grant_slot_words(h, slot, &w);
    slot_words_add(&h->stats.slot_retired, &w);
    slot_words_clear(heap_slot(h, slot));
    o->young_bytes = 0;
    o->young_age = 0;
    table_slot_young(h, slot, 0, 0);
    o->pid = 0;
    o->uid = 0;
    o->name[0] = '\0';
    atomic_store(&o->client_id, 0); /* seq_cst: Note [Slot windows] */
    safepoint_free_slot(h, slot);
    slotmem_free_region(fd, o->region);
    atomic_store(&o->fault, SLOT_FAULT_NONE);
    slots[slot / 64] &= ~(1ull << (slot % 64));
    h->mutators--;
    table_slot_set(h, slot, 0, 0, 0);
}

void grant_bound_slots(struct heap *h, const uint64_t slots[2],
                       uint64_t granted)
{
    ASSERT_LOCK_HELD(&h->lock);
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        if (!(slots[i / 64] >> (i % 64) & 1))
            continue;
        atomic_store(&h->owners[i].alloc_bound, granted);
        table_slot_set(h, i, atomic_load(&h->owners[i].client_id),
                       h->owners[i].region, granted);
    }
}

/* ---- statistics words (Note [Young objects] in proto/young.h, Note [C
 * locals are roots] in client/stack_roots.c) ---- */

void grant_slot_words(const struct heap *h, unsigned slot,
                      struct heap_slot_words *out)
{
    ASSERT_LOCK_HELD(&h->lock);
    const struct layout_mutator *m = heap_slot(h, slot);
    memset(out, 0, sizeof *out);
#define SLOT_WORD(f) atomic_load_explicit(&m->f, memory_order_relaxed)
    out->unscanned = SLOT_WORD(capture_unscanned);
    out->overflows = SLOT_WORD(capture_overflows);
    if (h->owners[slot].young_bytes == 0)
        return; /* words nobody writes, whatever a client put there */
    out->minor = SLOT_WORD(young_minor);
    out->promoted_age = SLOT_WORD(young_promoted_age);
    out->promoted_pub = SLOT_WORD(young_promoted_pub);
    out->pause_max_ns = SLOT_WORD(young_pause_max_ns);
    out->pause_total_ns = SLOT_WORD(young_pause_total_ns);
#undef SLOT_WORD
}

void grant_slot_totals(const struct heap *h, struct heap_slot_words *out)
{
    ASSERT_LOCK_HELD(&h->lock);
    *out = h->stats.slot_retired;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        if (!heap_slot_attached(h, i))
            continue;
        struct heap_slot_words w;
        grant_slot_words(h, i, &w);
        slot_words_add(out, &w);
    }
}

/* Note [Checking mutator slots]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A slot is attached (Note [Slots are the daemon's]) exactly between
 * grant_slot and grant_free_slot, both under heap->lock, and
 * heap->mutators counts the attached ones.  (Nothing a client can write is
 * checked: a hostile client must not trip an assert.)  Debug builds check
 * the count at every
 * release of heap->lock after a slot changed: LAYOUT_MAX_MUTATORS loads,
 * cheap enough to need no sampling.
 */
bool grant_check_slots(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    unsigned attached = 0;
    bool ok = true;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++)
        if (heap_slot_attached(h, i))
            attached++;
    if (attached != h->mutators) {
        log_error("mutator slots: heap->mutators is %u, but %u slots are "
                  "attached", h->mutators, attached);
        ok = false;
    }
    return ok;
}

/* ---- segments ---- */

#define GRANT_MIN 4 /* segments: what a client may always get at once */

/* With heap->lock held: the segments CLIENT may hold beside what survived of
 * its objects at the last sweep (Note [Quota] in daemon/gc/segment.c).
 * Without max_client_bytes, max_size: max_size caps the heap. */
static uint32_t quota_segs(const struct heap *h, uint64_t client)
{
    ASSERT_LOCK_HELD(&h->lock);
    uint64_t q = h->cfg->max_client_bytes;
    if (q == 0)
        return (uint32_t)(h->cfg->max_size >> h->seg_shift);
    uint64_t live = seg_charged_bytes(h, client, false);
    uint64_t c = (live + h->cfg->segment_size - 1) >> h->seg_shift;
    q >>= h->seg_shift;
    return c >= q ? 0 : (uint32_t)(q - c);
}

/* With heap->lock held: the bytes CLIENT, holding HELD segments, makes the
 * heap hold as far as the daemon knows before the next sweep: held, live
 * and fresh (Note [Quota]), in units of max_client_bytes: 0 below it, 1
 * past it, 2 past twice it.  Always 0 without a quota. */
static unsigned quota_over(const struct heap *h, uint64_t client,
                           uint32_t held)
{
    ASSERT_LOCK_HELD(&h->lock);
    uint64_t q = h->cfg->max_client_bytes;
    if (q == 0)
        return 0;
    uint64_t all =
        ((uint64_t)held << h->seg_shift) + seg_charged_bytes(h, client, true);
    return all > 2 * q ? 2 : all > q ? 1 : 0;
}

/* Cycles a grant waits for at the memory limit before it is refused
 * (Note [Memory limit] in daemon/gc/collector.c). */
#define LIMIT_WAITS 2

/* With heap->lock held: the bytes a grant may grow the committed memory
 * by (Note [Heap goal]; punched segments and the punched pages of reused
 * ones, Note [Reused pages are growth] in daemon/gc/segment.c): what the
 * growth cap leaves, less, for a grant that has not WAITED for its cycle,
 * the waiters' room: a segment per attached mutator, at most a sixteenth
 * of the cap (Note [Pacing]). */
static uint64_t cap_room(const struct heap *h, bool waited)
{
    ASSERT_LOCK_HELD(&h->lock);
    uint64_t cap = collector_growth_cap(h), committed = collector_committed(h);
    if (!waited) {
        uint64_t n = h->mutators > 1 ? h->mutators : 1;
        uint64_t waiters = n << h->seg_shift;
        cap -= waiters < cap / 16 ? waiters : cap / 16;
    }
    return committed >= cap ? 0 : cap - committed;
}

/* With heap->lock held: what the memory limit leaves (Note [Memory
 * limit] in daemon/gc/collector.c); UINT64_MAX without one. */
static uint64_t limit_room(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    uint64_t lim = h->cfg->memory_limit, committed = collector_committed(h);
    if (!lim)
        return UINT64_MAX;
    return committed >= lim ? 0 : lim - committed;
}

/* With heap->lock held: the most small segments one grant gives: an
 * attached mutator's share of an eighth of the allocation budget, at
 * least GRANT_MIN segments.  See Note [Segment supply] in
 * daemon/gc/segment.c. */
static uint32_t grant_cap(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    uint64_t n = collector_allocation_budget(h) / 8 >> h->seg_shift;
    n /= h->mutators > 1 ? h->mutators : 1;
    return n < GRANT_MIN ? GRANT_MIN : n > GRANT_MAX ? GRANT_MAX : (uint32_t)n;
}

int grant_segments(struct heap *h, uint64_t client, uint32_t *held,
                   const struct grant_req *r, bool final, struct grant *out,
                   uint64_t *wait_cycle)
{
    ASSERT_LOCK_HELD(&h->lock);
    uint32_t count = r->count;
    int rc;

    out->n = 0;
    out->count = count;
    out->run = 0;
    out->any_formatted = false;
    /* Note [Pacing]: allocation waits for the cycle that is behind */
    uint64_t paced = final ? 0 : collector_paced_until(h);
    if (paced) {
        h->stats.grants_paced++;
        log_debug("heap '%s': grant paced: %llu bytes allocated since the "
                  "cycle started, %llu live at the last one", h->cfg->name,
                  (unsigned long long)collector_allocated_this_cycle(h),
                  (unsigned long long)h->stats.live_bytes);
        *wait_cycle = paced;
        return -EAGAIN;
    }
    /* Note [Quota]: what a client handed over since the last sweep counts
     * in full until a sweep says what of it is alive: past its quota a
     * grant asks for that cycle, past twice it waits for it */
    unsigned over = quota_over(h, client, *held);
    if (over == 2 && atomic_load(&h->stalled))
        return -EDQUOT; /* Note [Stalls]: no cycle can come */
    if (over == 2 && !final) {
        *wait_cycle = 0; /* a new cycle */
        return -EAGAIN;
    }
    if (over > 0)
        collector_request(h);
    /* Note [Heap goal]: growth within the cap; a small grant that has
     * waited for its cycle too, but it takes one segment past it if
     * nothing partly free is there for it, the memory limit allowing
     * (Note [Pacing]) */
    uint64_t grow = final ? limit_room(h) : cap_room(h, false), at_least = 0;
    if (final && r->kind == GRANT_SMALL) {
        uint64_t within = cap_room(h, true), seg = 1ull << h->seg_shift;
        at_least = grow < seg ? grow : seg;
        grow = within < grow ? within : grow;
    }
    switch (r->kind) {
    case GRANT_SMALL:
        count = count < 1 ? 1 : count > GRANT_MAX ? GRANT_MAX : count;
        count = count > grant_cap(h) ? grant_cap(h) : count;
        /* Note [Pacing]: what the cycle left goes round the waiters */
        count = final ? 1 : count;
        out->count = count;
        rc = r->reuse_only
                 ? seg_grant_reusable(h, client, held, quota_segs(h, client),
                                      count, r->classes, grow, out->segs,
                                      out->formatted)
                 : seg_grant_small(h, client, held, quota_segs(h, client),
                                   count, r->classes, grow, out->segs,
                                   out->formatted);
        if (rc == -EAGAIN && at_least) /* it took nothing: one, then */
            rc = seg_grant_small(h, client, held, quota_segs(h, client),
                                 count, r->classes, at_least, out->segs,
                                 out->formatted);
        out->n = rc > 0 ? rc : 0;
        for (int k = 0; k < out->n; k++)
            out->any_formatted |= out->formatted[k] != 0;
        rc = rc >= 0 ? 0 : rc; /* none may be an answer: reuse_only */
        break;
    case GRANT_LARGE: {
        /* a run is new memory, all of it (it is punched to read as zero);
         * one past the memory limit can never fit (Note [Memory limit]) */
        uint64_t lim = h->cfg->memory_limit;
        uint64_t run = r->bytes == 0 || r->bytes > h->cfg->max_size
                           ? 0
                           : seg_run_segments(h, r->bytes);
        rc = run == 0 || (lim && run << h->seg_shift > lim) ? -EFBIG
             : run > grow >> h->seg_shift                   ? -EAGAIN
                 : seg_grant_large(h, client, held, quota_segs(h, client),
                                   r->bytes, &out->segs[0], &out->run);
        out->n = rc == 0;
        break;
    }
    default:
        rc = -EPROTO;
        break;
    }
    if (rc == -EAGAIN && final) {
        /* Note [Memory limit]: it waited for its cycle, and the limit
         * holds it still: one more cycle frees what was allocated while
         * the first ran, then it is refused (at once on a stalled heap,
         * where no cycle comes) */
        if (r->limit_waits < LIMIT_WAITS && !atomic_load(&h->stalled)) {
            *wait_cycle = 0; /* a new cycle */
            return -EAGAIN;
        }
        h->stats.limit_refusals++;
        return -ENOMEM;
    }
    if (rc == -EAGAIN) { /* Note [Pacing] */
        h->stats.grants_paced++;
        log_debug("heap '%s': grant paced: %llu bytes committed, the cap "
                  "%llu, %llu live at the last cycle", h->cfg->name,
                  (unsigned long long)collector_committed(h),
                  (unsigned long long)collector_growth_cap(h),
                  (unsigned long long)h->stats.live_bytes);
        *wait_cycle = collector_running(h); /* or a new one: 0 */
        return -EAGAIN;
    }
    if (rc == -EDQUOT && r->reuse_only)
        rc = 0; /* none: the client takes a blank segment, or is refused
                   that (Note [Reuse before growth]) */
    if (rc == -EDQUOT && !final && seg_charged_bytes(h, client, false) > 0) {
        /* refused for what it keeps alive as of the last sweep: the
         * next one may find it dead (as a full heap waits for one) */
        *wait_cycle = 0;
        return -EAGAIN;
    }
    if (rc == 0)
        collector_check_trigger(h);
    return rc;
}

/* ---- requests that wait for a cycle ---- */

void grant_queue_changed(struct pending **q, struct workers *w)
{
    /* a request waiting for a cycle makes the collector's workers urgent
     * (Note [Worker priority] in daemon/gc/workers.c) */
    workers_set_urgent(w, WORKERS_WAIT_REQUEST, *q != NULL);
}

int grant_defer(struct pending **q, struct workers *w, struct conn *c,
                struct heap *h, uint64_t seq, enum pending_kind kind,
                const struct grant_req *r, uint64_t target, uint64_t id)
{
    struct pending *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->kind = kind;
    p->save_id = id;
    p->c = c;
    p->h = h;
    p->seq = seq;
    if (r)
        p->req = *r;
    p->target = target ? target : collector_request(h);
    p->next = *q;
    *q = p;
    grant_queue_changed(q, w);
    return 0;
}

struct pending *grant_take_ready(struct pending **q, struct heap *h)
{
    struct pending *ready = NULL;
    uint64_t cycles;

    heap_lock(h);
    cycles = h->stats.cycles_completed;
    heap_unlock(h);
    for (struct pending **pp = q; *pp;) {
        struct pending *p = *pp;
        if (p->h == h && cycles >= p->target) {
            *pp = p->next;
            p->next = ready;
            ready = p;
        } else {
            pp = &p->next;
        }
    }
    return ready;
}

struct pending *grant_take_grants(struct pending **q, struct heap *h)
{
    struct pending *taken = NULL;
    for (struct pending **pp = q; *pp;) {
        struct pending *p = *pp;
        if (p->h == h && p->kind == PENDING_GRANT) {
            *pp = p->next;
            p->next = taken;
            taken = p;
        } else {
            pp = &p->next;
        }
    }
    return taken;
}

void grant_drop(struct pending **q, struct workers *w, const struct conn *c)
{
    for (struct pending **pp = q; *pp;) {
        struct pending *p = *pp;
        if (p->c == c) {
            *pp = p->next;
            free(p);
        } else {
            pp = &p->next;
        }
    }
    grant_queue_changed(q, w);
}
