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

/* See Note [Structs that grow] in client/abi.c: one block of the
 * caller's SIZE-byte entries, then its MUTATOR_SIZE-byte mutators, each
 * filled in libheapd's own struct and copied. */
int heapd_clients_sized(heapd_client *c, heapd_client_info **out,
                        size_t *count, size_t size, size_t mutator_size)
{
    Heapd__ClientsRequest cr = HEAPD__CLIENTS_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    char *list = NULL;
    size_t n_mut = 0;
    int rc;

    if (!c || !out || !count)
        return client_set_error(-EINVAL, "heapd_clients: NULL argument");
    if (size < ABI_0_1_CLIENT_INFO || mutator_size < ABI_0_1_MUTATOR_INFO ||
        size % _Alignof(heapd_client_info) ||
        mutator_size % _Alignof(heapd_mutator_info))
        return client_set_error(-EINVAL, "heapd_clients: entries of %zu "
                                "and %zu bytes are no heapd.h's; pass "
                                "sizeof heapd_client_info and "
                                "heapd_mutator_info", size, mutator_size);
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
    list = calloc(1, (r->n_clients ? r->n_clients : 1) * size +
                         n_mut * mutator_size);
    if (!list) {
        rc = client_set_error(-ENOMEM, "heapd_clients: out of memory for "
                              "%zu connections", r->n_clients);
        goto out;
    }
    char *mut = list + (r->n_clients ? r->n_clients : 1) * size;
    for (size_t i = 0; i < r->n_clients; i++) {
        const Heapd__ClientInfo *ci = r->clients[i];
        heapd_client_info own = {0}, *o = &own;
        o->id = ci->id;
        snprintf(o->name, sizeof o->name, "%s", ci->name ? ci->name : "");
        snprintf(o->library, sizeof o->library, "%s",
                 ci->library_version ? ci->library_version : "");
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
        o->mutators = (heapd_mutator_info *)mut;
        for (size_t k = 0; k < ci->n_mutators; k++, mut += mutator_size) {
            const Heapd__MutatorInfo *mi = ci->mutators[k];
            heapd_mutator_info mown = {0}, *m = &mown;
            m->slot = mi->slot;
            /* a state or stall this library does not know reads as
             * faulted / none */
            m->state = mi->state <= HEAPD__MUTATOR_STATE__MUTATOR_FAULTED
                             ? (heapd_mutator_state)mi->state
                             : HEAPD_MUTATOR_FAULTED;
            m->stalled_on = mi->stalled_on <= HEAPD__STALL_ON__STALL_REMARK
                                  ? (heapd_stall_on)mi->stalled_on
                                  : HEAPD_STALL_NONE;
            m->stalled_ms = mi->stalled_ms;
            m->alloc_bytes = mi->alloc_bytes;
            m->urs_backlog = mi->urs_backlog;
            m->root_depth = mi->root_depth;
            m->young_bytes = mi->young_bytes;
            m->minor_collections = mi->minor_collections;
            m->promoted_bytes = mi->promoted_bytes;
            m->minor_pause_max_ns = mi->minor_pause_max_ns;
            abi_out(mut, mutator_size, m, sizeof *m);
        }
        abi_out(list + i * size, size, o, sizeof *o);
    }
    *out = (heapd_client_info *)list;
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

/* See Note [Structs that grow] in client/abi.c: each heap is filled in
 * libheapd's own struct, then copied to the caller's, SIZE bytes apart. */
int heapd_segments_sized(heapd_client *c, const char *heap,
                         heapd_heap_segments *caller, size_t max,
                         size_t *count, size_t size)
{
    Heapd__SegmentsRequest sr = HEAPD__SEGMENTS_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    heapd_heap_segments *o = NULL;
    int rc;

    if (!c || (!caller && max) || !count)
        return client_set_error(-EINVAL, "heapd_segments: NULL argument");
    if (size < ABI_0_1_HEAP_SEGMENTS)
        return client_set_error(-EINVAL, "heapd_segments: entries of %zu "
                                "bytes are no heapd.h's; pass sizeof "
                                "heapd_heap_segments", size);
    if (!(o = malloc(sizeof *o)))
        return client_set_error(-ENOMEM, "heapd_segments: out of memory");
    sr.heap = (char *)(heap ? heap : "");
    req.body_case = HEAPD__ENVELOPE__BODY_SEGMENTS_REQUEST;
    req.segments_request = &sr;
    if ((rc = agent_call(&c->agent, &req, &rep)) < 0)
        goto out;
    if (rep->body_case != HEAPD__ENVELOPE__BODY_SEGMENTS_REPLY) {
        rc = client_bad_reply(frame_body_name(&req), rep, NULL);
        goto out;
    }
    const Heapd__SegmentsReply *r = rep->segments_reply;
    *count = r->n_heaps;
    for (size_t i = 0; i < r->n_heaps && i < max; i++) {
        const Heapd__HeapSegments *h = r->heaps[i];
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
        abi_out((char *)caller + i * size, size, o, sizeof *o);
    }
    rc = 0;
out:
    heapd__envelope__free_unpacked(rep, NULL);
    free(o);
    return rc;
}

/* See Note [Structs that grow] in client/abi.c. */
int heapd_unserved_heaps_sized(heapd_client *c, heapd_unserved_heap *caller,
                               size_t max, size_t *count, size_t size)
{
    Heapd__Envelope *rep = NULL;
    int rc;

    if (!c || (!caller && max) || !count)
        return client_set_error(-EINVAL, "heapd_unserved_heaps: NULL "
                                "argument");
    if (size < sizeof(heapd_unserved_heap))
        return client_set_error(-EINVAL, "heapd_unserved_heaps: entries of "
                                "%zu bytes are no heapd.h's; pass sizeof "
                                "heapd_unserved_heap", size);
    if ((rc = client_stats_call(c, &rep)) < 0)
        goto out;
    const Heapd__StatsReply *r = rep->stats_reply;
    *count = r->n_unserved;
    for (size_t i = 0; i < r->n_unserved && i < max; i++) {
        heapd_unserved_heap o;
        memset(&o, 0, sizeof o);
        snprintf(o.name, sizeof o.name, "%s", r->unserved[i]->name);
        snprintf(o.why, sizeof o.why, "%s", r->unserved[i]->why);
        abi_out((char *)caller + i * size, size, &o, sizeof o);
    }
    rc = 0;
out:
    heapd__envelope__free_unpacked(rep, NULL);
    return rc;
}

int heapd_heap_drop(heapd_client *c, const char *heap)
{
    Heapd__DropRequest dr = HEAPD__DROP_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    int rc;

    if (!c || !heap || !heap[0])
        return client_set_error(-EINVAL, "heapd_heap_drop: no heap named");
    dr.heap = (char *)heap;
    req.body_case = HEAPD__ENVELOPE__BODY_DROP_REQUEST;
    req.drop_request = &dr;
    if ((rc = agent_call(&c->agent, &req, &rep)) < 0)
        goto out;
    if (rep->body_case != HEAPD__ENVELOPE__BODY_DROP_REPLY)
        rc = client_bad_reply(frame_body_name(&req), rep, NULL);
out:
    heapd__envelope__free_unpacked(rep, NULL);
    return rc;
}

int heapd_heap_save_sized(heapd_client *c, const char *heap,
                          const char *path, heapd_save_info *out, size_t size)
{
    Heapd__SaveRequest sr = HEAPD__SAVE_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    int rc;

    if (!c || !heap || !heap[0] || !path || path[0] != '/')
        return client_set_error(-EINVAL, "heapd_heap_save: name a heap and "
                                "an absolute path");
    sr.heap = (char *)heap;
    sr.path = (char *)path;
    req.body_case = HEAPD__ENVELOPE__BODY_SAVE_REQUEST;
    req.save_request = &sr;
    if ((rc = agent_call(&c->agent, &req, &rep)) < 0)
        goto out;
    if (rep->body_case != HEAPD__ENVELOPE__BODY_SAVE_REPLY) {
        rc = client_bad_reply(frame_body_name(&req), rep, NULL);
        goto out;
    }
    const Heapd__SaveReply *r = rep->save_reply;
    heapd_save_info info = {
        .objects = r->objects, .object_bytes = r->object_bytes,
        .globals = r->globals, .file_bytes = r->file_bytes,
        .inexact = r->inexact, .bad_refs = r->bad_refs,
        .records = r->records, .record_bytes = r->record_bytes,
        .ns = r->ns, .sync_ns = r->sync_ns,
    };
    if (out)
        abi_out(out, size, &info, sizeof info); /* Note [Structs that grow] */
out:
    heapd__envelope__free_unpacked(rep, NULL);
    return rc;
}

int heapd_heap_load_sized(heapd_client *c, const char *heap,
                          const char *path, heapd_load_info *out, size_t size)
{
    Heapd__LoadRequest lr = HEAPD__LOAD_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    int rc;

    if (!c || !heap || !heap[0] || !path || path[0] != '/')
        return client_set_error(-EINVAL, "heapd_heap_load: name a heap and "
                                "an absolute path");
    lr.heap = (char *)heap;
    lr.path = (char *)path;
    req.body_case = HEAPD__ENVELOPE__BODY_LOAD_REQUEST;
    req.load_request = &lr;
    if ((rc = agent_call(&c->agent, &req, &rep)) < 0)
        goto out;
    if (rep->body_case != HEAPD__ENVELOPE__BODY_LOAD_REPLY) {
        rc = client_bad_reply(frame_body_name(&req), rep, NULL);
        goto out;
    }
    const Heapd__LoadReply *r = rep->load_reply;
    heapd_load_info info = {
        .objects = r->objects, .object_bytes = r->object_bytes,
        .globals = r->globals, .file_bytes = r->file_bytes, .ns = r->ns,
        .moved = r->moved,
    };
    if (out)
        abi_out(out, size, &info, sizeof info); /* Note [Structs that grow] */
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
