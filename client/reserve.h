/* libheapd's reserve: the blank (and partly free) segments granted to a
 * client and shared by its mutators, the queue of full segments going
 * back, and the prefault thread (client/reserve.c: Note [Reserve sizing],
 * Note [Pre-faulting]). */
#ifndef HEAPD_CLIENT_RESERVE_H
#define HEAPD_CLIENT_RESERVE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "heapd.h"
#include "layout.h"
#include "lock.h"

#define RESERVE_START 2    /* the first batch (Note [Reserve sizing]) */
#define RESERVE_BATCH 64   /* asked for at once, at most (MAX_GRANT) */
#define RESERVE_MAX (2 * RESERVE_BATCH) /* blank segments kept at most */
#define RETURN_BATCH 16    /* full segments sent back in one message */
#define REUSE_WAIT_NS 200000u /* a reuse_only answer waited for, at most
                                 (Note [Reuse before growth]) */

/* Blank segments granted to this client, shared by its mutators
 * (Note [Segment supply] in daemon/gc/segment.c; client/reserve.c). */
struct reserve {
    struct hd_mutex mu;
    uint32_t segs[RESERVE_MAX];      /* a ring: first in, first out */
    unsigned head, n;
    bool refilling;                  /* an async request is out */
    bool starved;                    /* a mutator found the ready reserve
                                        empty since the last refill */
    uint32_t asked;                  /* segments the refill out asks for */
    _Atomic uint32_t refills;        /* futex: bumped when its answer is in */
    uint32_t full[RETURN_BATCH];     /* full segments not yet sent back */
    unsigned nfull;
    unsigned batch, max, low;        /* Note [Reserve sizing] */
    unsigned batch_cap;
    /* partly free segments, formatted, and the size classes to ask them
     * for (Note [Reusing partly free segments] in daemon/gc/segment.c) */
    struct {
        uint32_t seg, cls;
    } reuse[RESERVE_MAX];
    unsigned nreuse;
    uint64_t classes[(LAYOUT_NCLASSES + 63) / 64];
    /* Note [Reuse before growth] in client/reserve.c */
    bool reusing;                    /* a reuse_only request is out */
    uint32_t reusing_cls;            /* its class */
    uint32_t reuse_dry[LAYOUT_NCLASSES]; /* the cycle stamp at which the
                                        heap had no partly free segment of
                                        the class; 0: none known */
    bool reuse_hit[LAYOUT_NCLASSES]; /* the class's last answer had some */
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

/* Note [Reserve sizing], Note [Pre-faulting] */
void reserve_init(heapd_client *c);
/* Stop the prefault thread (heapd_disconnect, after the agent). */
void reserve_stop(heapd_client *c);
/* A segment for class CLS: partly free and already formatted for CLS
 * (*FORMATTED set), or blank, waiting for the daemon if need be.
 * FORMATTED NULL: a blank one only. */
/* True if a segment of class CLS could be taken now, without waiting for
 * heapd: a blank one, or a partly free one of CLS. */
bool reserve_ready(heapd_client *c, unsigned cls);
int reserve_take(heapd_mutator *m, unsigned cls, uint32_t *out,
                 bool *formatted);
/* Queue full segments to go back, sent RETURN_BATCH at a time or now. */
void reserve_give_back(heapd_client *c, const uint32_t *segs, size_t n,
                       bool flush);
/* Send the full segments queued for return now. */
void reserve_flush_returns(heapd_client *c);
/* Give the reserve back to the daemon; returns how many segments. */
int reserve_drain(heapd_client *c);
/* After M waited for a collection: wait for a refill still out (a grant
 * paced by that cycle comes at its end), then give back what the reserve
 * holds (Note [Reserve sizing]).  A safepoint: a blocking region. */
void reserve_settle(heapd_mutator *m);
/* Take segment S out of the reserve if it waits there (1; the caller
 * returns it), or say it waits in the queue of full segments (2; flush
 * it), or is not there (0). */
int reserve_take_back(heapd_client *c, uint32_t s);

#endif
