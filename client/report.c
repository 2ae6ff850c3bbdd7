/* libheapd reports: heapd_clients and heapd_segments, the round trips
 * behind `heapctl clients` and `heapctl segments` (Note [Reports] in
 * daemon/report.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "client.h"
#include "errors.h"
#include "frame.h"
#include "heapd.h"
#include "layout.h"

int heapd_clients(heapd_client *c, heapd_client_info **out, size_t *count)
{
    Heapd__ClientsRequest cr = HEAPD__CLIENTS_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    heapd_client_info *list = NULL;
    size_t n_mut = 0;
    int rc;

    if (!c || !out || !count)
        return client_set_error(-EINVAL, "heapd_clients: NULL argument");
    *out = NULL;
    *count = 0;
    req.body_case = HEAPD__ENVELOPE__BODY_CLIENTS_REQUEST;
    req.clients_request = &cr;
    if ((rc = agent_call(&c->agent, &req, &rep)) < 0)
        return rc;
    if (rep->body_case != HEAPD__ENVELOPE__BODY_CLIENTS_REPLY) {
        rc = client_bad_reply(frame_body_name(&req), rep, NULL);
        goto out;
    }
    const Heapd__ClientsReply *r = rep->clients_reply;
    for (size_t i = 0; i < r->n_clients; i++)
        n_mut += r->clients[i]->n_mutators;
    /* one block: the clients, then every mutator */
    list = calloc(1, (r->n_clients ? r->n_clients : 1) * sizeof *list +
                         n_mut * sizeof(heapd_mutator_info));
    if (!list) {
        rc = client_set_error(-ENOMEM, "heapd_clients: out of memory for "
                              "%zu connections", r->n_clients);
        goto out;
    }
    heapd_mutator_info *mut =
        (heapd_mutator_info *)(list + (r->n_clients ? r->n_clients : 1));
    for (size_t i = 0; i < r->n_clients; i++) {
        const Heapd__ClientInfo *ci = r->clients[i];
        heapd_client_info *o = &list[i];
        o->id = ci->id;
        snprintf(o->name, sizeof o->name, "%s", ci->name ? ci->name : "");
        o->pid = ci->pid;
        o->uid = ci->uid;
        snprintf(o->heap, sizeof o->heap, "%s", ci->heap ? ci->heap : "");
        o->control = ci->kind == HEAPD__CLIENT_KIND__CLIENT_CONTROL;
        o->connected_at = ci->connected_at;
        o->segments_held = ci->segments_held;
        o->bytes_granted = ci->bytes_granted;
        o->remark_outstanding = ci->remark_outstanding;
        o->remark_late_ms = ci->remark_late_ms;
        o->mutator_count = ci->n_mutators;
        o->mutators = mut;
        for (size_t k = 0; k < ci->n_mutators; k++, mut++) {
            const Heapd__MutatorInfo *mi = ci->mutators[k];
            mut->slot = mi->slot;
            /* a state or stall this library does not know reads as
             * faulted / none */
            mut->state = mi->state <= HEAPD__MUTATOR_STATE__MUTATOR_FAULTED
                             ? (heapd_mutator_state)mi->state
                             : HEAPD_MUTATOR_FAULTED;
            mut->stalled_on = mi->stalled_on <= HEAPD__STALL_ON__STALL_REMARK
                                  ? (heapd_stall_on)mi->stalled_on
                                  : HEAPD_STALL_NONE;
            mut->stalled_ms = mi->stalled_ms;
            mut->alloc_bytes = mi->alloc_bytes;
            mut->urs_backlog = mi->urs_backlog;
            mut->root_depth = mi->root_depth;
            mut->young_bytes = mi->young_bytes;
            mut->minor_collections = mi->minor_collections;
            mut->promoted_bytes = mi->promoted_bytes;
            mut->minor_pause_max_ns = mi->minor_pause_max_ns;
        }
    }
    *out = list;
    *count = r->n_clients;
    rc = 0;
out:
    heapd__envelope__free_unpacked(rep, NULL);
    return rc;
}

void heapd_clients_free(heapd_client_info *clients)
{
    free(clients);
}

int heapd_segments(heapd_client *c, const char *heap,
                   heapd_heap_segments *out, size_t max, size_t *count)
{
    Heapd__SegmentsRequest sr = HEAPD__SEGMENTS_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    int rc;

    if (!c || (!out && max) || !count)
        return client_set_error(-EINVAL, "heapd_segments: NULL argument");
    sr.heap = (char *)(heap ? heap : "");
    req.body_case = HEAPD__ENVELOPE__BODY_SEGMENTS_REQUEST;
    req.segments_request = &sr;
    if ((rc = agent_call(&c->agent, &req, &rep)) < 0)
        return rc;
    if (rep->body_case != HEAPD__ENVELOPE__BODY_SEGMENTS_REPLY) {
        rc = client_bad_reply(frame_body_name(&req), rep, NULL);
        goto out;
    }
    const Heapd__SegmentsReply *r = rep->segments_reply;
    *count = r->n_heaps;
    for (size_t i = 0; i < r->n_heaps && i < max; i++) {
        const Heapd__HeapSegments *h = r->heaps[i];
        heapd_heap_segments *o = &out[i];
        memset(o, 0, sizeof *o);
        snprintf(o->name, sizeof o->name, "%s", h->name ? h->name : "");
        o->segment_size = h->segment_size;
        o->total = h->segments_total;
        o->free = h->segments_free;
        o->owned = h->segments_owned;
        o->filled = h->segments_filled;
        o->large = h->segments_large;
        o->large_tail = h->segments_large_tail;
        o->orphaned = h->segments_orphaned;
        o->punched = h->segments_punched;
        o->unformatted = h->segments_unformatted;
        o->young = h->segments_young;
        o->young_bytes = h->young_bytes;
        o->committed_bytes = h->committed_bytes;
        o->block_bytes = h->block_bytes;
        o->committed_control = h->committed_control;
        o->committed_free = h->committed_free;
        o->committed_owned = h->committed_owned;
        o->committed_filled = h->committed_filled;
        o->committed_large = h->committed_large;
        o->in_use_owned = h->in_use_owned;
        o->in_use_filled = h->in_use_filled;
        o->young_held = h->young_held;
        for (size_t k = 0;
             k < h->n_classes && k < HEAPD_SEGMENTS_MAX_CLASSES; k++) {
            const Heapd__SizeClassSegments *s = h->classes[k];
            heapd_class_segments *d = &o->classes[o->class_count++];
            d->size_class = s->size_class;
            d->object_size = s->object_size;
            d->segments = s->segments;
            d->segments_owned = s->segments_owned;
            d->blocks = s->blocks;
            d->blocks_in_use = s->blocks_in_use;
            d->committed_bytes = s->committed_bytes;
            d->block_bytes = s->blocks_in_use * s->object_size;
            d->fragmentation_permille =
                d->block_bytes ? d->committed_bytes * 1000u / d->block_bytes
                               : 0;
        }
    }
    rc = 0;
out:
    heapd__envelope__free_unpacked(rep, NULL);
    return rc;
}

_Static_assert(HEAPD_STALL_SNAPSHOT == (int)LAYOUT_STALL_SNAPSHOT &&
                   HEAPD_STALL_FINAL_SYNC == (int)LAYOUT_STALL_FINAL_SYNC &&
                   HEAPD_STALL_HANDSHAKE == (int)LAYOUT_STALL_HANDSHAKE &&
                   HEAPD_STALL_REMARK == (int)LAYOUT_STALL_REMARK,
               "heapd_stall_on mirrors enum layout_stall_on");

const char *heapd_stall_what(heapd_stall_on on)
{
    return layout_stall_what((enum layout_stall_on)on);
}
