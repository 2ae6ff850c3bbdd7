/* Reports for operators: `heapctl clients` and `heapctl segments`.
 *
 * Note [Reports]
 * ~~~~~~~~~~~~~~
 * Two requests, answered at once on the loop thread, describe the daemon's
 * state for a human: ClientsRequest (every connection, and per mutator
 * slot what it is doing and whether the collector waits for it: Note
 * [Stalls] in stall.c) and SegmentsRequest (a heap's segment table by
 * state and by size class, with the blocks in use, so that fragmentation
 * is visible).
 *
 * Who sees what.  An unlisted peer reads stats only (session_handle
 * refuses it these requests: Note [Admission] in server.c).  A privileged
 * peer (root, the daemon's user) sees every connection and every heap.
 * Any other peer sees the heaps whose ACL lets it in (Note [Connection
 * authorisation]) and the connections to them, and its own connection;
 * other control connections, which name no heap, only a privileged peer
 * sees.  A named heap it may not use is refused with ERROR_DENIED.
 *
 * What is read, and how far it is believed.  The connections' records are
 * the loop thread's own.  A slot's words are read under heap->lock, which
 * keeps its window mapped to its client's region (Note [Slot windows] in
 * slotmem.c), but they are the client's to write (Note [Client control
 * memory]): the allocated bytes are clamped to what its client was granted,
 * the URS backlog to the ring's size, the root depth to LAYOUT_MAX_ROOTS,
 * and a status that makes no sense reads as FAULTED.  The remark requests
 * a client has not answered are the SENT segments naming it, counted under
 * heap->lock and the marking job's mu (Note [Remark] in remark.c).  The
 * segment table's counts are exact (under heap->lock, one walk up to
 * segtab.high: the segments above it were never taken, so they are free
 * and punched).  The blocks in use of a size class are the non-zero mark
 * bytes of its segments (Note [Epoch-tagged marks]), counted after
 * heap->lock is dropped, from the classes noted under it: owners allocate
 * and sweepers free meanwhile, so the number is a moment's estimate (for
 * OWNED segments always, hence their count beside it), never a reading
 * of memory outside the heap's mapping.  Counting them under the lock
 * would hold every grant and every pause for the walk: the 64 MiB of marks
 * of a 1 GiB heap of 16-byte blocks took 35 ms to count on the 2-core
 * development machine.  The committed bytes of a size class are measured
 * the same way, after the lock, with one mincore call per segment on the
 * daemon's own mapping of the heap: for a shared memfd mapping mincore
 * tells which pages the memfd holds, whoever touched them, so a segment's
 * untouched tail and the holes of punched memory count as nothing.  The
 * segment table cannot say it (its punched flag is per segment, and only
 * FREE segments have it: a granted or FILLED segment may hold any part of
 * its pages), and the memfd's extent walk (Note [Free memory stays free]
 * in segment.c) costs 2.3 us an extent against 0.5 us for mincore on a
 * 128 KiB segment.  Next to it go the heap's own committed bytes (fstat)
 * and its block_bytes (Note [Memory counters] in collector.c).
 */
#include "report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "grant.h"
#include "heap.h"
#include "log.h"
#include "mark.h"
#include "remark.h"
#include "slotmem.h"

/* Note [Reports]: may C see heap H? */
static bool may_see_heap(const struct conn *c, const struct heap *h)
{
    return c->privileged || auth_allowed(h->cfg, &c->peer, c->d->uid);
}

/* ---- clients ---- */

/* With heap->lock held: what slot I of H is doing, at NOW (CLOCK_MONOTONIC
 * ns), into MI.  See Note [Reports] for what is clamped. */
static void mutator_info(struct heap *h, unsigned i, uint64_t now,
                         Heapd__MutatorInfo *mi)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct layout_mutator *m = heap_slot(h, i);
    struct heap_slot_owner *o = &h->owners[i];
    uint32_t st = atomic_load(&m->status);
    uint32_t stop = atomic_load(&m->stop_request);
    uint64_t since = atomic_load(&o->stall_since);
    uint32_t on = atomic_load(&o->stall_on);
    uint64_t head = atomic_load(&m->urs_head);
    uint64_t tail = atomic_load(&m->urs_tail);
    uint64_t alloc = atomic_load(&m->alloc_bytes);
    uint64_t bound = atomic_load(&o->alloc_bound);
    uint64_t depth = atomic_load(&m->root_depth);

    heapd__mutator_info__init(mi);
    mi->slot = i;
    if (atomic_load(&o->fault) != 0 ||
        LAYOUT_STATUS_STATE(st) == LAYOUT_MUT_FREE) {
        mi->state = HEAPD__MUTATOR_STATE__MUTATOR_FAULTED;
    } else if (since != 0) {
        mi->state = HEAPD__MUTATOR_STATE__MUTATOR_STALLED;
        mi->stalled_ms = now > since ? (now - since) / 1000000u : 0;
        mi->stalled_on = on <= LAYOUT_STALL_REMARK
                             ? (Heapd__StallOn)on
                             : HEAPD__STALL_ON__STALL_NONE;
    } else {
        switch (LAYOUT_STATUS_STATE(st)) {
        case LAYOUT_MUT_BLOCKED:
            mi->state = HEAPD__MUTATOR_STATE__MUTATOR_BLOCKED;
            break;
        case LAYOUT_MUT_WAITING:
            mi->state = HEAPD__MUTATOR_STATE__MUTATOR_WAITING;
            break;
        default: /* RUNNING: it acked the stop asked of it, or runs */
            mi->state = stop != 0 && LAYOUT_STATUS_GEN(st) == stop
                            ? HEAPD__MUTATOR_STATE__MUTATOR_STOPPED
                            : HEAPD__MUTATOR_STATE__MUTATOR_RUNNING;
        }
    }
    mi->alloc_bytes = alloc < bound ? alloc : bound;
    /* a head behind the tail wraps to a huge difference: clamped too */
    mi->urs_backlog = head - tail < LAYOUT_URS_SIZE ? head - tail
                                                    : LAYOUT_URS_SIZE;
    mi->root_depth = depth < LAYOUT_MAX_ROOTS ? depth : LAYOUT_MAX_ROOTS;
    /* Note [Young budgets] in daemon/gc/heap.h: the budget is the
     * daemon's record, the rest the mutator's statistics */
    struct heap_slot_words w;
    grant_slot_words(h, i, &w);
    mi->young_bytes = o->young_bytes;
    mi->minor_collections = w.minor;
    mi->promoted_bytes = w.promoted_age + w.promoted_pub;
    mi->minor_pause_max_ns = w.pause_max_ns;
}

/* With heap->lock and the marking job's mu held (H is marking): INFO[k]
 * of the N clients of H shown counts one per SENT segment naming it. */
static void count_remarks(struct heap *h, Heapd__ClientInfo *info,
                          struct heap **heap_of, size_t n)
{
    ASSERT_LOCK_HELD(&h->lock);
    ASSERT_LOCK_HELD(&h->marking->mu);
    const struct segtab *t = &h->segs;
    for (uint32_t i = t->first; i < t->high; i++) {
        const struct seg *s = &t->segs[i];
        if (REMARK_STATE(s->remark) != REMARK_SENT)
            continue;
        for (size_t k = 0; k < n; k++)
            if (heap_of[k] == h && info[k].id == s->remark_to) {
                info[k].remark_outstanding++;
                break;
            }
    }
}

int report_clients(struct conn *c, uint64_t seq)
{
    struct daemon *d = c->d;
    bool heap_seen[CONFIG_MAX_HEAPS];
    size_t n = 0, n_mut = 0, k = 0, mk = 0;
    Heapd__ClientInfo *info = NULL, **info_p = NULL;
    Heapd__MutatorInfo *mut = NULL, **mut_p = NULL;
    struct heap **heap_of = NULL;
    Heapd__ClientsReply r = HEAPD__CLIENTS_REPLY__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    uint64_t now = monotonic_ns(), now_ms = uv_now(&d->loop);
    int rc;

    for (size_t i = 0; i < d->n_heaps; i++)
        heap_seen[i] = may_see_heap(c, &d->heaps[i]);
#define SHOWN(o)                                                            \
    ((o)->state == CONN_READY &&                                            \
     ((o) == c || c->privileged ||                                          \
      ((o)->heap && heap_seen[(o)->heap - d->heaps])))
    for (struct conn *o = d->conns; o; o = o->next) {
        if (!SHOWN(o))
            continue;
        n++;
        n_mut += (size_t)(__builtin_popcountll(o->slots[0]) +
                          __builtin_popcountll(o->slots[1]));
    }
    info = calloc(n ? n : 1, sizeof *info);
    info_p = calloc(n ? n : 1, sizeof *info_p);
    heap_of = calloc(n ? n : 1, sizeof *heap_of);
    mut = calloc(n_mut ? n_mut : 1, sizeof *mut);
    mut_p = calloc(n_mut ? n_mut : 1, sizeof *mut_p);
    if (!info || !info_p || !heap_of || !mut || !mut_p) {
        rc = conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                    "the daemon is out of memory for a report of %zu "
                    "connections; try again later", n);
        goto out;
    }
    for (struct conn *o = d->conns; o && k < n; o = o->next) {
        if (!SHOWN(o))
            continue;
        Heapd__ClientInfo *ci = &info[k];
        heapd__client_info__init(ci);
        ci->id = o->id;
        ci->name = o->name;
        ci->library_version = o->library;
        ci->pid = (int32_t)o->peer.pid;
        ci->uid = (uint32_t)o->peer.uid;
        ci->heap = o->heap ? (char *)o->heap->cfg->name : (char *)"";
        ci->kind = o->kind;
        ci->connected_at = (int64_t)o->connected_at;
        ci->segments_held = o->held;
        ci->bytes_granted = o->granted;
        ci->remark_late_ms =
            o->remark_since && now_ms > o->remark_since
                ? now_ms - o->remark_since
                : 0;
        ci->mutators = &mut_p[mk];
        heap_of[k] = o->heap;
        if (o->heap) {
            struct heap *h = o->heap;
            heap_lock(h);
            for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS && mk < n_mut; i++) {
                if (!(o->slots[i / 64] >> (i % 64) & 1) ||
                    atomic_load(&h->owners[i].client_id) != o->id)
                    continue;
                mutator_info(h, i, now, &mut[mk]);
                mut_p[mk] = &mut[mk];
                mk++;
                ci->n_mutators++;
            }
            heap_unlock(h);
        }
        info_p[k] = ci;
        k++;
    }
#undef SHOWN
    for (size_t i = 0; i < d->n_heaps; i++) {
        struct heap *h = &d->heaps[i];
        if (!heap_seen[i])
            continue;
        heap_lock(h);
        struct mark_job *j = h->marking;
        if (j) {
            hd_mutex_lock(&j->mu);
            count_remarks(h, info, heap_of, k);
            hd_mutex_unlock(&j->mu);
        }
        heap_unlock(h);
    }

    r.n_clients = k;
    r.clients = info_p;
    env.body_case = HEAPD__ENVELOPE__BODY_CLIENTS_REPLY;
    env.clients_reply = &r;
    rc = conn_reply(c, &env, seq);
out:
    free(info);
    free(info_p);
    free(heap_of);
    free(mut);
    free(mut_p);
    return rc;
}

/* ---- segments ---- */

/* A segment noted under heap->lock and measured after it (Note [Reports]):
 * its state, and its size class if it is a small one of a known class,
 * else SEG_CLASS_UNKNOWN. */
struct noted_seg {
    uint32_t seg;
    uint8_t state;
    uint8_t cls;
};

/* Non-zero bytes among MARKS[0..N): the blocks in use. */
static uint64_t marks_in_use(const uint8_t *marks, uint32_t n)
{
    uint64_t k = 0;
    for (uint32_t b = 0; b < n; b++)
        k += __atomic_load_n(&marks[b], __ATOMIC_RELAXED) != 0;
    return k;
}

/* The bytes of the LEN bytes at ADDR (page-aligned) that the memfd holds
 * (Note [Reports]), VEC LEN/PAGE entries of scratch; -errno if mincore
 * fails. */
static int64_t resident_bytes(const void *addr, size_t len, size_t page,
                              unsigned char *vec)
{
    if (mincore((void *)addr, len, vec) < 0)
        return -errno;
    uint64_t n = 0;
    for (size_t k = 0; k < len / page; k++)
        n += vec[k] & 1;
    return (int64_t)(n * page);
}

/* Note [Where the memory is]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~
 * The segments report splits the heap's committed memory by the kind of
 * segment whose pages hold it, each measured with mincore as a class's
 * is (Note [Reports]):
 *   control  the control area (slots, root stacks, rings, captures, the
 *            daemon's page);
 *   free     FREE segments whose pages were not punched yet (Note
 *            [Purging free memory] in daemon/gc/purge.c);
 *   owned    segments in clients' hands: reserves, current segments,
 *            nurseries;
 *   filled   small segments given back, blocks in use and free ones;
 *   large    the runs of large objects;
 * and, of the owned and the filled, the bytes of blocks in use (non-zero
 * marks, times the class's size), and what young mutators say their
 * nurseries hold now (young_held).  With the last cycle's live bytes
 * beside them, a reader tells apart live objects, garbage
 * not yet collected, free blocks of partly used segments, free room in
 * clients' reserves, nurseries and free pages not given back yet, which
 * are the different things to change to make a heap smaller: the shared
 * cache's 57 MiB peak (2 workers, 20 % updates) was 24 MiB live, 8 MiB
 * garbage and 26 MiB of holes in given-back segments, which committed
 * over live alone (2.4x) could not tell apart.  The parts are read after
 * heap->lock, while clients allocate, so their sum is committed_bytes
 * (fstat) up to what moved meanwhile.
 */
struct where {
    uint64_t committed[SEG_STATE_MAX + 1];
    uint64_t in_use[SEG_STATE_MAX + 1];
};

/* Heap H's segments into HS, its classes into CLS (LAYOUT_NCLASSES
 * entries, CLS_P their pointers).  Returns 0, -ENOMEM, or the -errno of
 * a failed mincore. */
static int heap_segments(struct heap *h, Heapd__HeapSegments *hs,
                         Heapd__SizeClassSegments *cls,
                         Heapd__SizeClassSegments **cls_p)
{
    struct segtab *t = &h->segs;
    struct noted_seg *noted = NULL;
    unsigned char *vec = NULL;
    size_t n_noted = 0;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t seg_bytes = (size_t)h->cfg->segment_size;
    struct where w = {{0}, {0}};
    uint64_t control = 0;
    int rc = 0;

    heapd__heap_segments__init(hs);
    hs->name = (char *)h->cfg->name;
    hs->segment_size = h->cfg->segment_size;
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++) {
        heapd__size_class_segments__init(&cls[k]);
        cls[k].size_class = k;
        cls[k].object_size = layout_class_size[k];
    }
    vec = malloc(seg_bytes / page);
    if (!vec)
        return -ENOMEM;
    heap_lock(h);
    uint32_t high = t->high > t->first ? t->high : t->first;
    noted = malloc(((size_t)(high - t->first) + 1) * sizeof *noted);
    if (!noted) {
        heap_unlock(h);
        rc = -ENOMEM;
        goto out;
    }
    hs->block_bytes = h->stats.block_bytes;
    hs->segments_young = h->young_segments; /* Note [Sweeping] */
    hs->young_bytes = h->young_bytes;
    hs->young_held = slotmem_young_held(h);
    hs->segments_total = t->count - t->first;
    /* never taken: free and punched (Note [Reports]) */
    hs->segments_free = t->count - high;
    hs->segments_punched = t->count - high;
    for (uint32_t i = t->first; i < high; i++) {
        const struct seg *s = &t->segs[i];
        hs->segments_orphaned += s->orphan != 0;
        hs->segments_punched += s->punched != 0;
        uint8_t k = SEG_CLASS_UNKNOWN;
        switch (s->state) {
        case SEG_FREE:
            hs->segments_free++;
            break;
        case SEG_LARGE:
            hs->segments_large++;
            break;
        case SEG_LARGE_TAIL:
            hs->segments_large_tail++;
            break;
        case SEG_OWNED:
        case SEG_FILLED:
            if (s->state == SEG_OWNED)
                hs->segments_owned++;
            else
                hs->segments_filled++;
            k = seg_class(h, i);
            if (k >= LAYOUT_NCLASSES || t->small_nblocks[k] == 0) {
                hs->segments_unformatted++;
                k = SEG_CLASS_UNKNOWN;
                break;
            }
            cls[k].segments++;
            cls[k].segments_owned += s->state == SEG_OWNED;
            cls[k].blocks += t->small_nblocks[k];
            break;
        default:
            continue;
        }
        /* a punched free segment holds no page: not worth a mincore */
        if (s->state != SEG_FREE || !s->punched)
            noted[n_noted++] = (struct noted_seg){i, s->state, k};
    }
    heap_unlock(h);
    hs->committed_bytes = heap_committed_bytes(h);

    /* Note [Where the memory is]; the geometry per class never changes
     * after seg_init, nor the control area's */
    for (uint32_t i = 0; i < t->first; i++) {
        int64_t r = resident_bytes(heap_seg_addr(h, i), seg_bytes, page, vec);
        if (r < 0) {
            rc = (int)r;
            goto out;
        }
        control += (uint64_t)r;
    }
    for (size_t s = 0; s < n_noted; s++) {
        const struct noted_seg *ns = &noted[s];
        const uint8_t *seg = heap_seg_addr(h, ns->seg);
        int64_t r = resident_bytes(seg, seg_bytes, page, vec);
        if (r < 0) {
            rc = (int)r;
            goto out;
        }
        w.committed[ns->state] += (uint64_t)r;
        if (ns->cls == SEG_CLASS_UNKNOWN)
            continue;
        Heapd__SizeClassSegments *k = &cls[ns->cls];
        uint64_t used = marks_in_use(layout_seg_marks((void *)seg),
                                     t->small_nblocks[ns->cls]);
        k->blocks_in_use += used;
        k->committed_bytes += (uint64_t)r;
        w.in_use[ns->state] += used * k->object_size;
    }
    hs->committed_control = control;
    hs->committed_free = w.committed[SEG_FREE];
    hs->committed_owned = w.committed[SEG_OWNED];
    hs->committed_filled = w.committed[SEG_FILLED];
    hs->committed_large =
        w.committed[SEG_LARGE] + w.committed[SEG_LARGE_TAIL];
    hs->in_use_owned = w.in_use[SEG_OWNED];
    hs->in_use_filled = w.in_use[SEG_FILLED];
    for (unsigned k = 0; k < LAYOUT_NCLASSES; k++)
        if (cls[k].segments)
            cls_p[hs->n_classes++] = &cls[k];
    hs->classes = cls_p;
out:
    free(noted);
    free(vec);
    return rc;
}

int report_segments(struct conn *c, uint64_t seq,
                    const Heapd__SegmentsRequest *r)
{
    struct daemon *d = c->d;
    const char *want = r && r->heap ? r->heap : "";
    Heapd__HeapSegments hs[CONFIG_MAX_HEAPS];
    Heapd__HeapSegments *hs_p[CONFIG_MAX_HEAPS];
    Heapd__SizeClassSegments(*cls)[LAYOUT_NCLASSES] = NULL;
    Heapd__SizeClassSegments *(*cls_p)[LAYOUT_NCLASSES] = NULL;
    Heapd__SegmentsReply rep = HEAPD__SEGMENTS_REPLY__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    size_t n = 0;
    int rc;

    if (want[0]) {
        struct heap *h = daemon_find_heap(d, want);
        char shown[4 * CONFIG_HEAP_NAME_MAX + 1];
        log_escape(shown, sizeof shown, want);
        if (!h) {
            rc = conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_SUCH_HEAP,
                        "no heap named '%s' in %s; `heapctl stats` lists "
                        "the heaps", shown, d->cfg.path);
            goto out;
        }
        if (!may_see_heap(c, h)) {
            d->requests_refused++;
            rc = conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_DENIED,
                        "uid %u gid %u may not use heap '%s', so not see "
                        "its segments either; add the user to allow_users "
                        "or a group to allow_groups in [heap %s] of %s",
                        (unsigned)c->peer.uid, (unsigned)c->peer.gid, shown,
                        shown, d->cfg.path);
            goto out;
        }
    }
    cls = calloc(CONFIG_MAX_HEAPS, sizeof *cls);
    cls_p = calloc(CONFIG_MAX_HEAPS, sizeof *cls_p);
    if (!cls || !cls_p) {
        rc = conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                    "the daemon is out of memory for a segment report; "
                    "try again later");
        goto out;
    }
    for (size_t i = 0; i < d->n_heaps; i++) {
        struct heap *h = &d->heaps[i];
        if (want[0] ? strcmp(h->cfg->name, want) != 0 : !may_see_heap(c, h))
            continue;
        int e = heap_segments(h, &hs[n], cls[n], cls_p[n]);
        if (e == -ENOMEM) {
            rc = conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                        "the daemon is out of memory for the segment "
                        "report of heap '%s'; try again later",
                        h->cfg->name);
            goto out;
        }
        if (e < 0) {
            rc = conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                        "the daemon cannot measure the committed memory of "
                        "heap '%s' (mincore: %s); report it with the "
                        "daemon's log", h->cfg->name, strerror(-e));
            goto out;
        }
        hs_p[n] = &hs[n];
        n++;
    }

    rep.n_heaps = n;
    rep.heaps = hs_p;
    env.body_case = HEAPD__ENVELOPE__BODY_SEGMENTS_REPLY;
    env.segments_reply = &rep;
    rc = conn_reply(c, &env, seq);
out:
    free(cls);
    free(cls_p);
    return rc;
}
