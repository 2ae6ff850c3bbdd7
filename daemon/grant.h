/* What the daemon gives clients beside the segment table: mutator slots,
 * segment grants under the quota and the grant cap, and the queue of
 * requests that wait for a cycle (Note [Pacing] in collector.c).  Every
 * function here runs on the loop thread.  Nothing here sends a message:
 * session.c turns the results into replies. */
#ifndef HEAPD_DAEMON_GRANT_H
#define HEAPD_DAEMON_GRANT_H

#include <stdbool.h>
#include <stdint.h>

#include "heap.h"
#include "layout.h"

struct heap;
struct conn;
struct workers;

/* ---- mutator slots (Note [Mutator slots] in proto/layout.h) ---- */

/* With heap->lock held: give client CLIENT, granted GRANTED bytes of
 * segments so far, a free slot, whose words are region REGION of its
 * control memory FD (Note [Client control memory]),
 * marking it in SLOTS (bit i: slot i is the client's); YOUNG_BYTES > 0:
 * its mutator is young, with that nursery budget, promoting at YOUNG_AGE
 * (Note [Young budgets] in daemon/gc/heap.h, checked by the caller).
 * Returns the slot, -ENOSPC when all LAYOUT_MAX_MUTATORS are attached,
 * or another -errno when the region cannot be mapped. */
int grant_slot(struct heap *h, uint64_t client, uint64_t slots[2], int fd,
               unsigned region, uint64_t granted, uint64_t young_bytes,
               uint32_t young_age);
/* With heap->lock held: the client holding SLOTS has been granted
 * GRANTED bytes of segments so far, which bounds what each of its
 * mutators can say it allocated (Note [Client control memory]). */
void grant_bound_slots(struct heap *h, const uint64_t slots[2],
                       uint64_t granted);
/* With heap->lock held: give slot SLOT of a client whose control memory
 * is FD back.  What its mutator logged and never sent is read from its
 * ring first: nothing a mutator logged is lost, even when it died (Note
 * [Update remembered set]). */
void grant_free_slot(struct heap *h, uint64_t slots[2], unsigned slot, int fd);

/* ---- statistics words (Note [Young objects] in proto/young.h, Note [C
 * locals are roots] in client/stack_roots.c) ---- */

/* With heap->lock held: the statistics words of slot SLOT (its young
 * words 0s unless it is young) and of every slot, the freed ones'
 * included. */
void grant_slot_words(const struct heap *h, unsigned slot,
                      struct heap_slot_words *out);
void grant_slot_totals(const struct heap *h, struct heap_slot_words *out);

/* Note [Checking mutator slots] in grant.c: with heap->lock held, true
 * iff heap->mutators is the number of attached slots and every attached
 * slot names a client; logs what disagrees. */
bool grant_check_slots(const struct heap *h);

/* ---- segments (Note [Segment supply] in segment.c) ---- */

#define GRANT_MAX 64 /* segments one grant may give */
#define GRANT_CLASS_WORDS ((LAYOUT_NCLASSES + 63) / 64)

enum grant_kind { GRANT_SMALL, GRANT_LARGE, GRANT_INVALID };

struct grant_req {
    enum grant_kind kind;
    int asked_kind;         /* the kind as the client named it (messages) */
    uint32_t count;         /* SMALL: segments wanted */
    uint64_t bytes;         /* LARGE: the object's bytes, header included */
    uint64_t classes[GRANT_CLASS_WORDS]; /* SMALL: classes it allocates */
    bool reuse_only;        /* SMALL: partly free segments only, maybe none
                               (Note [Reuse before growth] in
                               client/reserve.c) */
    uint8_t limit_waits;    /* cycles it waited for at the memory limit
                               (Note [Memory limit] in collector.c) */
};

struct grant {
    int n;                  /* segments granted */
    uint32_t count;         /* SMALL: the count asked for, capped */
    uint32_t run;           /* LARGE: segments in the run */
    bool any_formatted;
    uint32_t segs[GRANT_MAX];
    uint32_t formatted[GRANT_MAX]; /* 0: blank, else 1 + its class */
};

/* With heap->lock held: grant R to CLIENT, holding *HELD segments.
 * Returns 0 with *OUT filled; -EAGAIN with *WAIT_CYCLE set when the
 * grant is paced (Note [Pacing]: it waits for that cycle), or with
 * *WAIT_CYCLE 0 (a new cycle) when CLIENT has handed the heap twice its
 * quota since the last sweep (Note [Quota] in segment.c) -- never when
 * FINAL; -ENOSPC, -EDQUOT, -EFBIG as seg_grant_*;
 * -EPROTO for GRANT_INVALID. */
int grant_segments(struct heap *h, uint64_t client, uint32_t *held,
                   const struct grant_req *r, bool final, struct grant *out,
                   uint64_t *wait_cycle);

/* ---- requests that wait for a cycle ---- */

enum pending_kind { PENDING_COLLECT, PENDING_GRANT, PENDING_SAVE,
                    PENDING_LOAD };

struct pending {
    struct pending *next;
    enum pending_kind kind;
    struct conn *c;             /* never dereferenced here */
    struct heap *h;
    uint64_t seq;
    uint64_t target;            /* cycles_completed that satisfies it */
    struct grant_req req;       /* PENDING_GRANT */
    uint64_t save_id;           /* PENDING_SAVE, _LOAD: the request's id */
};

/* Queue request SEQ of C on *Q, to be answered once heap H has completed
 * cycle TARGET (0: a new cycle, asked for now).  R: a grant to retry; ID:
 * a save's or load's request.  Returns 0 or -ENOMEM.  W's workers are
 * urgent while *Q is not empty (Note [Worker priority] in workers.c). */
int grant_defer(struct pending **q, struct workers *w, struct conn *c,
                struct heap *h, uint64_t seq, enum pending_kind kind,
                const struct grant_req *r, uint64_t target, uint64_t id);
/* Take the requests on *Q that heap H's completed cycles satisfy, in a
 * list the caller answers and frees. */
struct pending *grant_take_ready(struct pending **q, struct heap *h);
/* Take every grant of heap H waiting on *Q, whatever its cycle: the heap
 * stalled (Note [Stalls] in daemon/stall.c). */
struct pending *grant_take_grants(struct pending **q, struct heap *h);
/* Drop the requests of C: never answered now. */
void grant_drop(struct pending **q, struct workers *w, const struct conn *c);
/* *Q changed outside the functions above (after answering what
 * grant_take_ready gave). */
void grant_queue_changed(struct pending **q, struct workers *w);

#endif
