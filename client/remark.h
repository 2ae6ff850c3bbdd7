/* libheapd's side of remark: the segments the daemon asked this client to
 * rescan (client/remark.c, Note [Remark requests]). */
#ifndef HEAPD_CLIENT_REMARK_H
#define HEAPD_CLIENT_REMARK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "lock.h"
#include "heapd.h"

/* Note [Remark requests] in client/remark.c: the segments the daemon asked
 * this client to rescan, and the small segments it holds. */
struct client_remark {
    struct hd_mutex mu;              /* guards queued, n, lo, hi */
    uint64_t *queued;                /* bit i: segment i asked for */
    size_t n;                        /* bits set in queued */
    uint32_t lo, hi;                 /* queued bits lie in [lo, hi) */
    _Atomic uint64_t *owned;         /* bit i: small segment i granted to
                                        this client and not returned */
    uint32_t nsegs;                  /* segments in the heap */
};

int remark_client_init(heapd_client *c);
void remark_client_free(heapd_client *c);
/* Small segments granted (OWN) or returned (!OWN). */
void remark_owned(heapd_client *c, const uint32_t *segs, size_t n, bool own);
/* Send MSG, the SegmentReturn of SEGS, and make them not owned, as one
 * step under the remark lock (Note [Remark requests]). */
void remark_send_return(heapd_client *c, const uint32_t *segs, size_t n,
                        Heapd__Envelope *msg);
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
void remark_recheck(heapd_mutator *m);

#endif
