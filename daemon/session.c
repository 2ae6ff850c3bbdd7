/* The daemon's side of the protocol: what each message means and what it is
 * answered with.
 *
 * Note [Handshake]
 * ~~~~~~~~~~~~~~~~
 * The first frame a client sends must be Hello; anything else closes the
 * connection with ERROR_UNEXPECTED.  The daemon then checks, in order:
 *   1. protocol_version == PROTOCOL_VERSION, else ERROR_VERSION;
 *   2. the heap named exists (control clients may name none), else
 *      ERROR_NO_SUCH_HEAP;
 *   3. the peer may use it (Note [Connection authorisation]), else
 *      ERROR_DENIED.
 * and answers Welcome.  For a mutator the Welcome carries the heap's memfd
 * (Note [Passing the heap fd]) and the geometry the client must verify
 * against the control area (Note [Heap mapping]).  Every refusal is an Error
 * frame whose message says what to do, followed by closing that connection;
 * the daemon and its other clients carry on.  A second Hello, or a message
 * the daemon sends but never receives (Welcome, StatsReply, ...), is
 * ERROR_UNEXPECTED.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon.h"
#include "heapd_build.h"
#include "log.h"
#include "wire.h"

struct heap *daemon_find_heap(struct daemon *d, const char *name)
{
    for (size_t i = 0; i < d->n_heaps; i++)
        if (strcmp(d->heaps[i].cfg->name, name) == 0)
            return &d->heaps[i];
    return NULL;
}

static bool allowed_anywhere(struct daemon *d, const struct auth_peer *p)
{
    for (size_t i = 0; i < d->n_heaps; i++)
        if (auth_allowed(d->heaps[i].cfg, p, d->uid))
            return true;
    return false;
}

static int handle_hello(struct conn *c, const Heapd__Hello *h)
{
    struct daemon *d = c->d;
    const char *heap_name = h->heap && h->heap[0] ? h->heap : DEFAULT_HEAP_NAME;
    struct heap *heap = NULL;
    int rc;

    snprintf(c->name, sizeof c->name, "%s",
             h->client_name && h->client_name[0] ? h->client_name : "client");
    uv_os_fd_t sock;
    if ((rc = uv_fileno((uv_handle_t *)&c->pipe, &sock)) < 0 ||
        (rc = auth_read_peer(sock, &c->peer)) < 0) {
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                  "cannot read peer credentials: %s", strerror(-rc));
        return rc;
    }
    if (h->protocol_version != PROTOCOL_VERSION) {
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_VERSION,
                  "protocol version %u is not supported by heapd %s "
                  "(it speaks version %u); use a libheapd that matches the "
                  "daemon", h->protocol_version, HEAPD_VERSION,
                  PROTOCOL_VERSION);
        return -EPROTONOSUPPORT;
    }
    if (h->kind != HEAPD__CLIENT_KIND__CLIENT_MUTATOR &&
        h->kind != HEAPD__CLIENT_KIND__CLIENT_CONTROL) {
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                  "unknown client kind %d", (int)h->kind);
        return -EPROTO;
    }
    c->kind = h->kind;

    if (c->kind == HEAPD__CLIENT_KIND__CLIENT_CONTROL) {
        if (!allowed_anywhere(d, &c->peer)) {
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_DENIED,
                      "uid %u may not use any heap of this daemon; add it to "
                      "allow_users or allow_groups of a heap in %s",
                      (unsigned)c->peer.uid, d->cfg.path);
            return -EACCES;
        }
    } else {
        heap = daemon_find_heap(d, heap_name);
        if (!heap) {
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_NO_SUCH_HEAP,
                      "no heap named '%s' in %s; add a [heap %s] section "
                      "or connect to another heap", heap_name, d->cfg.path,
                      heap_name);
            return -ENOENT;
        }
        if (!auth_allowed(heap->cfg, &c->peer, d->uid)) {
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_DENIED,
                      "uid %u gid %u may not use heap '%s'; add the user to "
                      "allow_users or a group to allow_groups in [heap %s] "
                      "of %s", (unsigned)c->peer.uid, (unsigned)c->peer.gid,
                      heap_name, heap_name, d->cfg.path);
            return -EACCES;
        }
    }

    Heapd__Welcome w = HEAPD__WELCOME__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    w.protocol_version = PROTOCOL_VERSION;
    w.client_id = c->id;
    env.body_case = HEAPD__ENVELOPE__BODY_WELCOME;
    env.welcome = &w;
    if (heap) {
        w.heap = (char *)heap->cfg->name;
        w.heap_base = heap->cfg->base;
        w.max_size = heap->cfg->max_size;
        w.segment_size = heap->cfg->segment_size;
        w.layout_version = LAYOUT_VERSION;
        w.has_fd = true;
        rc = conn_send_with_fd(c, &env, heap->fd);
    } else {
        w.heap = (char *)"";
        rc = conn_send(c, &env);
    }
    if (rc < 0) {
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                  "cannot send welcome: %s", strerror(-rc));
        return rc;
    }
    if (heap) {
        c->heap = heap;
        heap->clients++;
    }
    c->state = CONN_READY;
    log_info("client %llu (%s, pid %d, uid %u) connected%s%s",
             (unsigned long long)c->id, c->name, (int)c->peer.pid,
             (unsigned)c->peer.uid, heap ? " to heap " : " (control)",
             heap ? heap->cfg->name : "");
    return 0;
}

static int handle_stats(struct conn *c, uint64_t seq)
{
    struct daemon *d = c->d;
    Heapd__StatsReply r = HEAPD__STATS_REPLY__INIT;
    Heapd__HeapStats hs[CONFIG_MAX_HEAPS];
    Heapd__HeapStats *hp[CONFIG_MAX_HEAPS];
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;

    r.version = (char *)HEAPD_VERSION;
    r.uptime_ns = uv_hrtime() - d->start_ns;
    r.clients_connected = d->n_conns;
    r.frames_rejected = d->frames_rejected;
    r.connections_total = d->connections_total;
    for (size_t i = 0; i < d->n_heaps; i++) {
        const struct heap *h = &d->heaps[i];
        heapd__heap_stats__init(&hs[i]);
        hs[i].name = (char *)h->cfg->name;
        hs[i].heap_base = h->cfg->base;
        hs[i].reserved_bytes = h->cfg->max_size;
        hs[i].committed_bytes = heap_committed_bytes(h);
        hs[i].clients = h->clients;
        hs[i].segment_size = h->cfg->segment_size;
        hp[i] = &hs[i];
    }
    r.n_heaps = d->n_heaps;
    r.heaps = hp;
    env.seq = seq;
    env.body_case = HEAPD__ENVELOPE__BODY_STATS_REPLY;
    env.stats_reply = &r;
    int rc = conn_send(c, &env);
    if (rc < 0)
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                  "cannot send stats: %s", strerror(-rc));
    return rc;
}

int session_handle(struct conn *c, Heapd__Envelope *env)
{
    if (c->state == CONN_AWAIT_HELLO) {
        if (env->body_case == HEAPD__ENVELOPE__BODY_HELLO)
            return handle_hello(c, env->hello);
        c->d->frames_rejected++;
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                  "expected hello as the first message, got %s",
                  frame_body_name(env));
        return -EPROTO;
    }
    switch (env->body_case) {
    case HEAPD__ENVELOPE__BODY_STATS_REQUEST:
        return handle_stats(c, env->seq);
    default:
        c->d->frames_rejected++;
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                  "unexpected %s message from a client", frame_body_name(env));
        return -EPROTO;
    }
}
