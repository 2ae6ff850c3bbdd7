/* The daemon's side of a shared heap: its memfd, its mapping at the fixed
 * base, and its control area.  See Note [Heap mapping] in proto/layout.h. */
#ifndef HEAPD_DAEMON_HEAP_H
#define HEAPD_DAEMON_HEAP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* the counter table is public: see Note [Counter table] */
#include "heapd_counters.h"
#include "config.h"
#include "layout.h"
#include "lock.h"
#include "notify.h"
#include "segment.h"
#include "young.h"

struct collector;
struct mark_job;
struct handoff;

/* The field a line of HEAPD_HEAP_COUNTERS gives the daemon, by its source
 * (see Note [Counter table] in proto/heapd_counters.h): LOCKED ones are
 * written under heap->lock, ATOMIC ones bumped without it, DERIVED ones
 * are computed by the stats reply (daemon/session.c). */
#define HEAP_STATS_FIELD_LOCKED(name) uint64_t name;
#define HEAP_STATS_FIELD_ATOMIC(name) _Atomic uint64_t name;
#define HEAP_STATS_FIELD_DERIVED(name)
#define HEAP_STATS_FIELD_(name, type, kind, unit, source, help) \
    HEAP_STATS_FIELD_##source(name)

/* A slot's statistics words (struct layout_mutator): its young
 * generation's (Note [Young objects] in proto/young.h) and its C stack
 * captures' (Note [C locals are roots] in client/stack_roots.c), or their
 * totals: sums, but pause_max_ns, a maximum.  Client-written statistics:
 * read relaxed, trusted for nothing else. */
struct heap_slot_words {
    uint64_t minor, promoted_age, promoted_pub, pause_max_ns, pause_total_ns;
    uint64_t unscanned, overflows;
};

/* Counters of a heap: the table's, and the daemon's own bookkeeping.
 * table_save_stats (daemon/gc/table.c) copies them field by field: a field
 * added here is added there. */
struct heap_stats {
    HEAPD_HEAP_COUNTERS(HEAP_STATS_FIELD_)
    uint64_t alloc_retired;      /* bytes allocated by slots now freed;
                                    heap->lock */
    struct heap_slot_words slot_retired; /* the statistics words of
                                    slots now freed, folded in by
                                    grant_free_slot; heap->lock */
    uint64_t created_unix_ns;    /* CLOCK_REALTIME when the heap was made:
                                    kept across restarts (Note [The live
                                    table] in daemon/gc/table.c) */
};

#undef HEAP_STATS_FIELD_
#undef HEAP_STATS_FIELD_DERIVED
#undef HEAP_STATS_FIELD_ATOMIC
#undef HEAP_STATS_FIELD_LOCKED

/* Who holds a mutator slot, in the daemon's memory (Note [Slots are the
 * daemon's] in daemon/grant.c). */
struct heap_slot_owner {
    _Atomic uint64_t client_id;      /* 0: free; set and cleared under
                                        heap->lock, read without it */
    _Atomic uint32_t fault;          /* enum slot_fault: what the client
                                        wrote that makes no sense (Note
                                        [Client control memory]); 0 none */
    unsigned region;                 /* its region of the client's control
                                        memory */
    _Atomic uint32_t readers;        /* threads reading its window without
                                        heap->lock (Note [Slot windows] in
                                        daemon/gc/slotmem.c) */
    _Atomic uint64_t alloc_bound;    /* bytes of segments granted to its
                                        client so far: more allocated is
                                        a fault (Note [Client control
                                        memory]) */
    /* Note [Stalls] in daemon/stall.c: written by the collector thread,
     * read by the loop thread */
    _Atomic uint64_t stall_since;    /* CLOCK_MONOTONIC ns since the
                                        collector waits for it; 0: it
                                        does not */
    _Atomic uint32_t stall_on;       /* enum layout_stall_on */
    /* Note [Young objects] in proto/young.h: the slot's young
     * generation as its attach set it, the daemon's own record (never
     * read back from shared memory).  heap->lock */
    uint64_t young_bytes;            /* its nursery budget; 0: not young */
    uint32_t young_age;              /* the age it promotes at */
    int pid;                         /* the rest: heap->lock */
    unsigned uid;
    char name[64];                   /* client_name from Hello */
};

/* A global root as the daemon knows it (Note [Global roots]): what the
 * daemon decides about an entry rests on this record, from which it
 * writes the shared table's words. */
struct heap_global {
    char name[LAYOUT_GLOBAL_NAME];   /* "" when EMPTY */
    uint32_t state;                  /* enum layout_global_state */
    uint64_t owner;                  /* INITIALIZING: the client running
                                        init, by the daemon's grant */
    bool deleted;                    /* EMPTY since a delete after the
                                        last snapshot: not reused yet */
    uint8_t static_flag;             /* marked this cycle iff equal to the
                                        heap's (Note [Global roots]) */
};

struct heap {
    const struct config_heap *cfg;
    int fd;                          /* sealed memfd, -1 when closed */
    int page_fd;                     /* the daemon's page (Note [The
                                        daemon's page]), read-write */
    int page_ro_fd;                  /* the same, opened read-only: what
                                        clients get */
    void *base;                      /* == (void *)cfg->base when open */
    struct layout_control *control;  /* == base */
    uint8_t *windows;                /* a window of LAYOUT_MUTATOR_BYTES per
                                        slot (Note [Client control
                                        memory]): heap_slot */
    struct notify fault_notify;      /* a slot's fault is set: the loop
                                        thread disconnects its client */
    unsigned clients;                /* mutator clients connected */
    unsigned mutators;               /* attached mutator slots */
    unsigned seg_shift;              /* log2(segment_size) */
    uint32_t stop_gen;               /* collector thread: last stop gen */
    uint32_t stop_raised;            /* the stop a newly attached slot is
                                        asked for (Note [Stop the world]);
                                        heap->lock */
    _Atomic uint32_t stalled;        /* HEAP_STALLED_*: Note [Stalls] */
    _Atomic uint32_t cycle_holds;    /* no cycle starts while > 0 (Note
                                        [Resuming clients] in resume.c) */
    _Atomic uint32_t recovery_left;  /* Note [Recovery cycles] in
                                        collector.c: verifying cycles still
                                        to run; grants wait for them */
    bool recovery_failed;            /* ... and one of them found failures */
    bool recovery_verify;            /* h->verify before them */
    uint64_t recovery_t0;            /* CLOCK_MONOTONIC ns heapd began to
                                        take the heap back */
    bool refused;                    /* served no more (session.c) */
    char why[512];                   /* heap_open's failure, as logged */
    bool poison;                     /* poison freed blocks (verify/debug) */
    bool verify;                     /* run the verifier after each cycle */
    uint8_t static_flag;             /* Note [Global roots]; heap->lock */
    struct hd_mutex lock;            /* table, slots, stats: heap_lock */
    struct hd_mutex adoption;        /* Note [Remark] in daemon/gc/remark.c:
                                        no FILLED segment is granted while
                                        the daemon rescans one; taken
                                        after lock, never before it */
    struct segtab segs;
    struct heap_slot_owner owners[LAYOUT_MAX_MUTATORS];
    struct heap_global *globals;     /* LAYOUT_MAX_GLOBALS of them, in the
                                        live table; heap->lock */
    void *table;                     /* Note [The live table] in table.c:
                                        the records' memfd, mapped */
    size_t table_bytes;
    int table_fd;
    struct heap_stats stats;
    struct collector *gc;
    struct mark_job *marking;        /* the cycle's job while phase is MARK */
    struct handoff *handoff;         /* daemon/handoff.c: the loop
                                        thread's end of the collector
                                        (Note [Collector handoff]) */
    _Atomic uint32_t bad_logged;     /* bad references logged this cycle */
    uint32_t young_segments;         /* segments holding a young block at
                                        the last sweep (Note [Sweeping] in
                                        sweep.c); heap->lock */
    uint64_t young_bytes;            /* and the bytes of their young blocks
                                        (Note [Young memory and the heap
                                        goal] in collector.c); heap->lock */
    /* Note [Saving a heap at a snapshot] in save.c; heap->lock */
    struct save_job *save_asked;     /* for the next cycle to take */
    struct save_job *saving;         /* the running cycle's */
    struct save_result *save_last;   /* the last ones' outcomes, by id */
    /* Note [Loading a saved heap] in load.c: heapctl load; heap->lock */
    struct load_job *load_asked;     /* for the collector to run */
    struct load_outcome *load_last;  /* the last ones' outcomes, by id */
    uint64_t loading;                /* loop thread: the id of the load
                                        asked for and not answered, 0 */
    _Atomic bool load_stop;          /* heapd stops: a load ends (load_abort) */
};

/* heap->lock, taken and released only through these (Note [Checked lock
 * rules] in proto/lock.h); a release checks the segment table in debug
 * builds (Note [Checking the segment table] in segtab_check.c). */
#define heap_lock(h) hd_mutex_lock(&(h)->lock)
#define heap_trylock(h) hd_mutex_trylock(&(h)->lock)
#define heap_unlock(h) heap_unlock_((h), __func__, __FILE__, __LINE__)
static inline void heap_unlock_(struct heap *h, const char *func,
                                const char *file, int line)
{
#ifndef NDEBUG
    if (!hd_mutex_held(&h->lock))
        hd_lock_broken_("heap->lock", true, func, file, line);
#endif
    segtab_assert(&h->segs);
    hd_mutex_unlock_(&h->lock, "heap->lock", func, file, line);
}

/* heap->stalled: a stall keeps the heap's cycle from ending, so its
 * grants are not paced (Note [Stalls] in daemon/stall.c). */
#define HEAP_STALLED_STOP 1u     /* the collector parked a stop */
#define HEAP_STALLED_REMARK 2u   /* a remark request is late */

/* Note [Young budgets]
 * ~~~~~~~~~~~~~~~~~~~~
 * A mutator attached young (Note [Young objects] in proto/young.h) is
 * granted no memory for it: its young objects live in the segments its
 * client is granted as any client is.  What the attach settles is the
 * mutator's nursery budget -- the bytes it allocates between two of its
 * minor collections -- and the age it promotes at, which the daemon
 * keeps in the slot's owner record and in the live table, reports, and
 * tells the mutator in the AttachReply.  An attach that asks for 0 gets
 * the heap's young_size (raised to the least budget below) and
 * young_age.  A budget is refused below HEAP_YOUNG_MIN_SEGMENTS segments'
 * worth (its minor collections would run before the mutator filled one
 * segment of a class, each paying its fixed cost for a handful of
 * blocks) and above max_size, or above max_client_bytes where one is
 * set: a mutator that must allocate more than its client may hold
 * before it collects runs out of memory first.
 */
#define HEAP_YOUNG_MIN_SEGMENTS 2u
static inline uint64_t heap_young_min(const struct heap *h)
{
    return (uint64_t)HEAP_YOUNG_MIN_SEGMENTS << h->seg_shift;
}
static inline uint64_t heap_young_max(const struct heap *h)
{
    uint64_t q = h->cfg->max_client_bytes;
    return q != 0 && q < h->cfg->max_size ? q : h->cfg->max_size;
}
/* A budget and an age an attach may be given (Note [Young budgets]). */
static inline bool heap_young_ok(const struct heap *h, uint64_t bytes,
                                 uint32_t age)
{
    return bytes >= heap_young_min(h) && bytes <= heap_young_max(h) &&
           age >= 1 && age <= LAYOUT_YOUNG_AGE_MAX;
}

/* Slot I is attached, by the daemon's own record (Note [Slots are the
 * daemon's] in daemon/grant.c), whatever its shared status word says. */
static inline bool heap_slot_attached(const struct heap *h, unsigned i)
{
    return atomic_load_explicit(&h->owners[i].client_id,
                                memory_order_acquire) != 0;
}

/* The words of slot I: its client's region while attached; a freed
 * slot's window keeps its last region, pages given back, until the next
 * attach (Note [Slot windows] in daemon/gc/slotmem.c). */
static inline struct layout_mutator *heap_slot(const struct heap *h,
                                               unsigned i)
{
    return (struct layout_mutator *)(h->windows +
                                     (size_t)i * LAYOUT_MUTATOR_BYTES);
}

/* Without heap->lock: begin reading slot I's window if it is attached
 * (false: it is not, and nothing may be read); heap_slot_leave ends it.
 * Sequentially consistent, against grant_free_slot's clearing of the
 * owner and grant_slot's check of the readers (Note [Slot windows]). */
static inline bool heap_slot_enter(struct heap *h, unsigned i)
{
    atomic_fetch_add(&h->owners[i].readers, 1);
    if (atomic_load(&h->owners[i].client_id) != 0)
        return true;
    atomic_fetch_sub_explicit(&h->owners[i].readers, 1, memory_order_release);
    return false;
}
static inline void heap_slot_leave(struct heap *h, unsigned i)
{
    atomic_fetch_sub_explicit(&h->owners[i].readers, 1, memory_order_release);
}

static inline void *heap_seg_addr(const struct heap *h, uint32_t i)
{
    return (char *)h->base + ((uint64_t)i << h->seg_shift);
}

/* Create the memfd, seal it, map it at cfg->base and lay out the control
 * area and the live table (Note [The live table] in daemon/gc/table.c).
 * Returns 0 or a negative errno after logging a message that names the
 * heap, the range and the config key to change (kept in h->why too) (-EEXIST when the range
 * is already mapped in the daemon).  With KEPT_HEAP and KEPT_PAGE >= 0 (a
 * heap the service manager kept: Note [Heaps across restarts] in
 * daemon/fdstore.c), those are mapped instead, checked, and taken over
 * (closed on failure), and so is KEPT_TABLE (>= 0 then), as it was left,
 * for table_take_back to make good. */
int heap_open(struct heap *h, const struct config_heap *cfg, int kept_heap,
              int kept_page, int kept_table);

/* Unmap and close.  Safe on a heap that failed to open or is closed. */
void heap_close(struct heap *h);

/* A sealed memfd of SIZE bytes named NAME (Note [Heap mapping]), or a
 * negative errno. */
int heap_sealed_memfd(const char *name, uint64_t size);
/* FD is a memfd of SIZE bytes sealed as heap_sealed_memfd seals. */
bool heap_sealed_as(int fd, uint64_t size);

/* Bytes of the memfd backed by memory now (pages touched and not punched). */
uint64_t heap_committed_bytes(const struct heap *h);

#ifndef NDEBUG
/* Note [Holding a save or a load for tests] in heap.c: while the file the
 * environment variable ENV names exists, and *UNLESS is false, wait
 * (WHAT, "save" or "load", in the log line that says so). */
void heap_hold_for_tests(const struct heap *h, const char *env,
                         const char *what, const _Atomic bool *unless);
#endif

#endif
