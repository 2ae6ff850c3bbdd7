/* libheapd internals shared by client.c and agent.c. */
#ifndef HEAPD_CLIENT_INTERNAL_H
#define HEAPD_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "frame.h"
#include "heapd.h"
#include "layout.h"

struct agent_call;

/* Note [Client agent]
 * ~~~~~~~~~~~~~~~~~~~
 * After the handshake, the socket belongs to one background thread, the
 * agent, which runs its own libuv loop: it writes the frames the
 * application's threads queue and reads every frame the daemon sends.  An
 * application thread never touches the socket.  To send, it packs a frame,
 * appends it to `out` under `mu` and wakes the agent with uv_async_send; to
 * make a call it also registers an agent_call under `mu` with a fresh seq,
 * and sleeps on `cv` until the agent has stored the reply whose Envelope.seq
 * matches, or the connection is gone.  When the connection ends (EOF, an
 * error frame, a bad frame, heapd_disconnect), `closed` is set under `mu`,
 * every waiting call is failed with `close_code`, and later calls fail at
 * once: nobody ever waits on a dead connection.  Replies are matched by seq
 * rather than by order so that later messages the daemon sends on its own
 * (remark requests, stop notices) can interleave with replies.
 * The agent thread does not survive fork(): a child must connect anew.
 */
struct agent {
    pthread_t thread;
    bool thread_started;
    uv_loop_t loop;
    uv_pipe_t pipe;
    uv_async_t wake;
    frame_reader reader;

    pthread_mutex_t mu;              /* guards everything below */
    pthread_cond_t cv;
    struct agent_frame *out_head, *out_tail;
    struct agent_call *calls;
    uint64_t next_seq;
    bool stop;                       /* heapd_disconnect asked to stop */
    /* Note [Remark requests] (client/remark.c), on the agent thread: a
     * RemarkRequest; a segment grant, before its caller sees it; the
     * connection's end */
    void (*on_remark)(void *arg, const Heapd__RemarkRequest *r);
    void (*on_grant)(void *arg, const Heapd__SegmentGrant *g);
    void (*on_closed)(void *arg);
    void *hook_arg;
    unsigned fork_generation;        /* Note [Clients and fork] */
    bool closed;                     /* the connection is gone */
    int close_code;                  /* why, as a heapd error code */
    char close_msg[256];
};

#define RESERVE_START 16   /* the first batch (Note [Reserve sizing]) */
#define RESERVE_BATCH 64   /* asked for at once, at most (MAX_GRANT) */
#define RESERVE_MAX (2 * RESERVE_BATCH) /* blank segments kept at most */
/* a mutator's short waits spin this long before they sleep (Note
 * [Spinning through a pause] in client/mutator.c) */
#define MUTATOR_SPIN_NS 300000u
#define RETURN_BATCH 16    /* full segments sent back in one message */

/* Blank segments granted to this client, shared by its mutators
 * (Note [Segment supply] in daemon/segment.c; client/reserve.c). */
struct reserve {
    pthread_mutex_t mu;
    uint32_t segs[RESERVE_MAX];      /* a ring: first in, first out */
    unsigned head, n;
    bool refilling;                  /* an async request is out */
    _Atomic uint32_t refills;        /* futex: bumped when its answer is in */
    uint32_t full[RETURN_BATCH];     /* full segments not yet sent back */
    unsigned nfull;
    unsigned batch, max, low;        /* Note [Reserve sizing] */
    unsigned batch_cap;
    /* partly free segments, formatted, and the size classes to ask them
     * for (Note [Reusing partly free segments] in daemon/segment.c) */
    struct {
        uint32_t seg, cls;
    } reuse[RESERVE_MAX];
    unsigned nreuse;
    uint64_t classes[(LAYOUT_NCLASSES + 63) / 64];
};

#define PREFAULT_QUEUE 256 /* segments queued for pre-faulting, at most */

/* The prefault thread (Note [Pre-faulting] in client/reserve.c): a ring
 * of segment numbers that only the agent thread writes and the prefault
 * thread claims (0: claimed or empty). */
struct prefault {
    _Atomic uint32_t queue[PREFAULT_QUEUE];
    _Atomic uint32_t tail;           /* free-running count of pushes */
    _Atomic uint32_t seq;            /* futex: bumped by pushes and stop */
    _Atomic bool stop;
    pthread_t thread;
    bool started, failed;            /* agent thread, then reserve_stop */
};

/* Note [Remark requests] in client/remark.c: the segments the daemon asked
 * this client to rescan, and the small segments it holds. */
struct client_remark {
    pthread_mutex_t mu;              /* guards queued, n, lo, hi */
    uint64_t *queued;                /* bit i: segment i asked for */
    size_t n;                        /* bits set in queued */
    uint32_t lo, hi;                 /* queued bits lie in [lo, hi) */
    _Atomic uint64_t *owned;         /* bit i: small segment i granted to
                                        this client and not returned */
    uint32_t nsegs;                  /* segments in the heap */
};

struct heapd_client {
    struct agent agent;
    uint64_t client_id;
    char heap_name[64];
    void *base;                      /* mapping, NULL for control clients */
    size_t size;
    int heap_fd;
    /* mutator clients: the heap's geometry and shared state */
    struct layout_control *ctl;
    uint64_t segment_size;
    unsigned seg_shift;
    uint32_t small_max;
    uint32_t small_nblocks[LAYOUT_NCLASSES];
    uint32_t small_first[LAYOUT_NCLASSES];
    uint64_t small_magic[LAYOUT_NCLASSES]; /* layout_block_magic */
    uint32_t first_segment;          /* past the control area */
    struct reserve reserve;
    struct prefault prefault;
    struct client_remark remark;
    pthread_mutex_t mutators_mu;
    struct heapd_mutator *mutators;  /* attached, for heapd_disconnect */
    bool checked;                    /* Note [Checked mode] */
};

/* A mutator's current segment of one size class. */
struct alloc_seg {
    uint8_t *marks;
    uint8_t *blocks;
    uint32_t cursor;      /* next block to look at */
    uint32_t nblocks;
    uint32_t block_size;
    uint32_t index;       /* segment index, 0 = none */
};

struct heapd_mutator {
    heapd_client *c;
    struct layout_control *ctl;
    struct layout_mutator *slot;
    unsigned slot_index;
    struct heapd_mutator *next;      /* c->mutators */
    uint64_t alloc_bytes;            /* mirrored into slot->alloc_bytes */
    /* root stack: chunk k holds slots [k << root_shift, (k+1) << ...) */
    void **chunks[LAYOUT_ROOT_CHUNKS];
    unsigned nchunks;
    unsigned root_shift;
    size_t depth;
    /* Note [Remark requests]: set when the daemon asks this client to
     * rescan; the mutator looks at its next safepoint */
    _Atomic uint32_t remark_pending;
    /* held by the agent while it takes segments from this mutator, which
     * is blocked; heapd_blocking_leave takes it to run again */
    pthread_mutex_t hold;
    uint64_t urs_head;               /* entries written to the URS ring */
    uint64_t urs_notified;           /* head sent in the last UrsBatch */
    struct alloc_seg cur[LAYOUT_NCLASSES];
};

static inline void **mutator_root_slot(heapd_mutator *m, size_t i)
{
    return &m->chunks[i >> m->root_shift]
                     [i & (((size_t)1 << m->root_shift) - 1)];
}

/* The address of segment I of the heap. */
static inline void *client_seg_addr(const heapd_client *c, uint32_t i)
{
    return (char *)c->base + ((uint64_t)i << c->seg_shift);
}

static inline bool agent_is_closed(struct agent *a)
{
    return __atomic_load_n(&a->closed, __ATOMIC_ACQUIRE);
}

/* barrier.c: Note [Snapshot write barrier], Note [Stack marking
 * handshake], Note [Update remembered set] */
void barrier_log(heapd_mutator *m, void *ref);
void barrier_write_slow(heapd_mutator *m, void *obj, void **field);
void barrier_stack_slow(heapd_mutator *m);
void barrier_global_slow(heapd_mutator *m, void *_Atomic *value);

static inline bool barrier_on(const heapd_mutator *m)
{
    return __builtin_expect(atomic_load_explicit(&m->ctl->phase,
                                                 memory_order_relaxed) ==
                                LAYOUT_PHASE_MARK, 0);
}
/* Note [Values in flight]: VAL waits in the slot's pending root, a root of
 * the stack, while a safepoint call that is to store it runs. */
static inline void barrier_park(heapd_mutator *m, void *val)
{
    atomic_store_explicit(&m->slot->pending_root, val, memory_order_release);
}
static inline void barrier_unpark(heapd_mutator *m)
{
    atomic_store_explicit(&m->slot->pending_root, NULL, memory_order_release);
}
/* Note [Wide objects] in barrier.c */
#define BARRIER_WIDE 64
/* Before a store to FIELD of OBJ.  An object already tagged dirty in this
 * cycle -- by an earlier write, or from birth if it was allocated while
 * marking -- needs nothing: its fields were logged, and no new cycle can
 * begin before the store (Note [Waiting in a barrier] in
 * daemon/safepoint.c).  Most writes while marking take this path: in
 * GCBench, without it, the barrier was most of what each cycle cost the
 * mutator.  The value stored needs no barrier of its own: it was
 * reachable at the caller's last safepoint or allocated since, so it is
 * marked or black (Note [Client GC discipline] in heapd.h). */
static inline void barrier_write(heapd_mutator *m, void *obj, void **field)
{
    if (!barrier_on(m))
        return;
    uint64_t h = __atomic_load_n((const uint64_t *)obj - 1, __ATOMIC_ACQUIRE);
    if (layout_header_tag(h) ==
            (uint8_t)atomic_load_explicit(&m->ctl->epoch,
                                          memory_order_relaxed) &&
        layout_header_nrefs(h) <= BARRIER_WIDE)
        return;
    barrier_write_slow(m, obj, field);
}
/* M's root stack must be marked for this cycle before it changes (Note
 * [Stack marking handshake]). */
static inline bool barrier_stack_due(const heapd_mutator *m)
{
    return barrier_on(m) &&
           atomic_load_explicit(&m->slot->stack_marked,
                                memory_order_acquire) !=
               atomic_load_explicit(&m->ctl->epoch, memory_order_relaxed);
}

/* mutator.c */
void mutator_stop_slow(heapd_mutator *m);
void mutator_safepoint_slow(heapd_mutator *m);
static inline bool mutator_poll_due(const heapd_mutator *m)
{
    return __builtin_expect(
        (atomic_load_explicit(&m->ctl->stop_request, memory_order_relaxed) |
         atomic_load_explicit(&m->remark_pending, memory_order_relaxed)) != 0,
        0);
}
/* The safepoint poll (Note [Stop the world] in daemon/safepoint.c), which
 * also services remark requests (Note [Remark requests]). */
static inline void mutator_poll(heapd_mutator *m)
{
    if (mutator_poll_due(m))
        mutator_safepoint_slow(m);
}
/* The entry of a safepoint call that is to store VAL (NULL: none): the
 * safepoint, then the stack barrier, VAL parked through whatever of them
 * runs (Note [Client GC discipline] in heapd.h, Note [Values in flight]).
 * *PARKED says whether VAL is parked: barrier_unpark once it is stored.
 * Run it again after any wait of the call (PARKED already true). */
static inline void mutator_enter(heapd_mutator *m, void *val, bool *parked)
{
    if (mutator_poll_due(m)) {
        if (val && !*parked) {
            barrier_park(m, val);
            *parked = true;
        }
        mutator_safepoint_slow(m);
    }
    if (barrier_stack_due(m)) {
        if (val && !*parked) {
            barrier_park(m, val);
            *parked = true;
        }
        barrier_stack_slow(m);
    }
}
/* Enter a blocking region without servicing remark requests (inside the
 * library, where the caller may be servicing one); heapd_blocking_leave
 * ends it. */
void mutator_block(heapd_mutator *m);
/* Wait inside a barrier: Note [Waiting in a barrier] in
 * daemon/safepoint.c; mutator_resume ends the wait. */
void mutator_wait_begin(heapd_mutator *m);
/* Running again after a blocking region or a wait: takes any stop under
 * way (heapd_blocking_leave). */
void mutator_resume(heapd_mutator *m);
/* A call to the daemon from a mutator thread: inside a blocking region,
 * so that the mutator never holds up a stop while it waits. */
int mutator_call(heapd_mutator *m, Heapd__Envelope *req,
                 Heapd__Envelope **reply);
/* Ask for a segment of KIND (and BYTES for large): a blocking call. */
int mutator_request_segments(heapd_mutator *m, Heapd__SegmentKind kind,
                             uint32_t count, uint64_t bytes, uint32_t *out,
                             uint32_t max, uint32_t *run);

/* remark.c: Note [Remark requests] */
int remark_client_init(heapd_client *c);
void remark_client_free(heapd_client *c);
/* Small segments granted (OWN) or returned (!OWN). */
void remark_owned(heapd_client *c, const uint32_t *segs, size_t n, bool own);
/* Segments SEGS were just returned: answer their requests, if any. */
void remark_returned(heapd_client *c, const uint32_t *segs, size_t n);
/* Agent thread: the daemon asks (an agent on_remark callback). */
void remark_request(void *arg, const Heapd__RemarkRequest *r);
/* Agent thread: a grant arrived (on_grant); the connection ended
 * (on_closed). */
void remark_granted(void *arg, const Heapd__SegmentGrant *g);
void remark_closed(void *arg);
/* At a safepoint of M (running), or in the agent (M NULL). */
void remark_service(heapd_client *c, heapd_mutator *m);
/* M took a new current segment: look again at the next safepoint. */
static inline void remark_recheck(heapd_mutator *m)
{
    if (__atomic_load_n(&m->c->remark.n, __ATOMIC_RELAXED) != 0)
        atomic_store_explicit(&m->remark_pending, 1, memory_order_relaxed);
}

/* checked.c: Note [Checked mode] */
extern _Atomic bool checked_any;
bool checked_wanted(const heapd_connect_opts *o);
void checked_register(heapd_client *c);
void checked_forget(heapd_client *c);
/* Abort with a message naming CALL unless REF (NULL if NULL_OK) is a live
 * object of C's heap; WHAT names the argument. */
void checked_object(const heapd_client *c, const void *ref, bool null_ok,
                    const char *call, const char *what);
/* The same for OBJ, and FIELD must be one of its reference fields. */
void checked_field(const heapd_client *c, const void *obj, void *const *field,
                   const char *call);
/* For the accessors, which have no client: OBJ in a checked heap. */
void checked_accessor(const void *obj, const char *call);
#define CHECKED(c) __builtin_expect((c)->checked, 0)

/* alloc.c */
void alloc_client_init(heapd_client *c);
/* reserve.c: Note [Reserve sizing], Note [Pre-faulting] */
void reserve_init(heapd_client *c);
/* Stop the prefault thread (heapd_disconnect, after the agent). */
void reserve_stop(heapd_client *c);
/* A blank segment for M, waiting for the daemon if need be. */
/* A segment for class CLS: partly free and already formatted for CLS
 * (*FORMATTED set), or blank. */
int reserve_take(heapd_mutator *m, unsigned cls, uint32_t *out,
                 bool *formatted);
/* Queue full segments to go back, sent RETURN_BATCH at a time or now. */
void reserve_give_back(heapd_client *c, const uint32_t *segs, size_t n,
                       bool flush);
/* Send the full segments queued for return now. */
void reserve_flush_returns(heapd_client *c);
/* Give the reserve back to the daemon; returns how many segments. */
int reserve_drain(heapd_client *c);
/* Take segment S out of the reserve if it waits there (1; the caller
 * returns it), or say it waits in the queue of full segments (2; flush
 * it), or is not there (0). */
int reserve_take_back(heapd_client *c, uint32_t s);
/* Give back the mutator's current segments (detach). */
void alloc_release_all(heapd_mutator *m);

/* Record the calling thread's error message; returns CODE. */
int client_set_error(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Map a daemon Error code to a heapd error code. */
int client_error_code(Heapd__ErrorCode code);
/* The errno value for a heapd error code (functions that return NULL). */
int client_errno(int rc);
/* heapd_disconnect: free mutators the application did not detach. */
void mutator_free_all(heapd_client *c);

/* A reply to an async call, on the agent thread: STATUS is 0 with REPLY
 * (freed after the call) or a heapd error code with REPLY NULL or the
 * Error envelope. */
typedef void (*agent_reply_fn)(void *arg, int status, Heapd__Envelope *reply);

/* This process is a child of the one that started A (Note [Clients and
 * fork] in client/agent.c). */
bool agent_forked(const struct agent *a);
/* The child's heapd_disconnect: close A's descriptors, free its memory. */
void agent_forget(struct agent *a);
/* Start the agent on a connected socket (taken over, even on failure). */
int agent_start(struct agent *a, int sock);
/* Stop the agent, close the socket, join the thread. */
void agent_stop(struct agent *a);
/* Send REQ and wait for the reply with the same seq.  On success *reply is
 * the reply (free with heapd__envelope__free_unpacked).  An Error reply is
 * turned into its code, with its message as the thread's last error. */
int agent_call(struct agent *a, Heapd__Envelope *req,
               Heapd__Envelope **reply);
/* Send REQ; FN runs on the agent thread with the reply. */
int agent_call_async(struct agent *a, Heapd__Envelope *req,
                     agent_reply_fn fn, void *arg);
/* Send MSG, which has no reply. */
int agent_send(struct agent *a, Heapd__Envelope *msg);

#endif
