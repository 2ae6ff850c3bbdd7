/* The daemon's side of the protocol: what each message means and what it is
 * answered with.
 *
 * Note [Handshake]
 * ~~~~~~~~~~~~~~~~
 * The first frame a client sends must be Hello; anything else closes the
 * connection with ERROR_UNEXPECTED.  The daemon then checks, in order:
 *   1. the client's protocol (and a mutator's layout, if it says) are
 *      this heapd's, else ERROR_VERSION naming both releases (Note
 *      [Versions across releases] in proto/version.c);
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
 * ERROR_UNEXPECTED.  What a peer may do before its Hello, and which peers
 * may send one at all, is Note [Admission] in server.c.
 *
 * Note [Per-client limits]
 * ~~~~~~~~~~~~~~~~~~~~~~~~
 * After the handshake, one connection can make the daemon hold only this
 * much, whatever it sends:
 *   - mutator slots: at most max_mutators_per_client of the heap's
 *     LAYOUT_MAX_MUTATORS (default 64 of 128), so one client cannot take
 *     them all;
 *   - requests waiting for a cycle (CollectRequest{wait}, grants held by
 *     Note [Pacing]): at most max_requests_per_client at once, counted in
 *     conn.outstanding from grant_defer until session_cycle_done answers
 *     them (or the client leaves: Note [Client lifecycle]).  Without it,
 *     10^6 waits from one raw client grew the daemon by 94 MB;
 *   - requests answered at once (stats, attach, ...): their replies are
 *     bounded by max_write_queue (Note [Connection limits]);
 *   - log lines: conn_log spends one token a line from a bucket that
 *     holds client_log_rate lines and refills at client_log_rate a
 *     second; a line without a token is dropped and counted (the
 *     connection's own count, and log_lines_suppressed), and the next line
 *     logged, or the disconnect line, first says how many were dropped.
 *     Without it, 3 s of bad UrsBatch frames wrote 228 MB of log.
 * A request over a cap is answered with an Error naming the key (the
 * connection stays open) and counted in requests_refused.  Every string
 * a client supplies is escaped before it is logged (Note [Escaped log
 * lines] in log.h).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collections.h"
#include "collector.h"
#include "daemon.h"
#include "fdstore.h"
#include "globals.h"
#include "grant.h"
#include "mark.h"
#include "heapd_build.h"
#include "load.h"
#include "log.h"
#include "remark.h"
#include "report.h"
#include "resume.h"
#include "safepoint.h"
#include "save.h"
#include "slotmem.h"
#include "table.h"
#include "validate.h"
#include "version.h"
#include "young.h"
#include "wire.h"

struct heap *daemon_find_heap(struct daemon *d, const char *name)
{
    for (size_t i = 0; i < d->n_heaps; i++)
        if (strcmp(d->heaps[i].cfg->name, name) == 0)
            return &d->heaps[i];
    return NULL;
}

static int handle_hello(struct conn *c, const Heapd__Hello *h)
{
    struct daemon *d = c->d;
    const char *heap_name = h->heap && h->heap[0] ? h->heap : DEFAULT_HEAP_NAME;
    struct heap *heap = NULL;
    char shown[4 * CONFIG_HEAP_NAME_MAX + 1]; /* heap_name, escaped */
    int rc;

    /* Note [Escaped log lines]; the credentials were read at accept (Note
     * [Admission] in server.c) */
    log_escape(c->name, sizeof c->name,
               h->client_name && h->client_name[0] ? h->client_name
                                                   : "client");
    log_escape(shown, sizeof shown, heap_name);
    /* Note [Versions across releases]: a layout of 0 is a libheapd that
     * does not say, and checks the Welcome's itself */
    char release[4 * 32 + 1], why[320];
    log_escape(release, sizeof release,
               h->library_version ? h->library_version : "");
    const struct version_side lib = {release, h->protocol_version,
                                     h->layout_version},
                              us = {HEAPD_VERSION, PROTOCOL_VERSION,
                                    LAYOUT_VERSION};
    snprintf(c->library, sizeof c->library, "%.*s",
             (int)sizeof c->library - 1, release);
    if (!version_compatible(&lib, &us,
                            h->kind == HEAPD__CLIENT_KIND__CLIENT_MUTATOR &&
                                h->layout_version != 0)) {
        version_mismatch(why, sizeof why, &lib, &us);
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_VERSION, "%s", why);
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
        c->named_heap = daemon_find_heap(d, heap_name);
        if (!c->named_heap && d->n_heaps > 0)
            c->named_heap = &d->heaps[0];
        /* an unlisted peer reads stats only: session_handle */
    } else {
        heap = daemon_find_heap(d, heap_name);
        if (heap && heap->refused) {
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                      "heap '%s' failed its verification after heapd was "
                      "killed and is served no more; restart heapd, and "
                      "'heapctl drop %s' then gives it up and serves it "
                      "empty", shown, shown);
            return -EIO;
        }
        if (heap && heap->loading) {
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                      "heap '%s' is loading a saved heap (heapctl load); "
                      "connect again once it is loaded", shown);
            return -EBUSY;
        }
        const struct unserved_heap *un =
            heap ? NULL : adopt_unserved(d, heap_name);
        if (un) { /* Note [Heaps heapd cannot adopt] in adopt.c */
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_NO_SUCH_HEAP,
                      "heap '%s' is not served: %s", shown, un->why);
            return -ENOENT;
        }
        if (!heap) {
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_NO_SUCH_HEAP,
                      "no heap named '%s' in %s; add a [heap %s] section "
                      "or connect to another heap", shown, d->cfg.path,
                      shown);
            return -ENOENT;
        }
        if (!auth_allowed(heap->cfg, &c->peer, d->uid)) {
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_DENIED,
                      "uid %u gid %u may not use heap '%s'; add the user to "
                      "allow_users or a group to allow_groups in [heap %s] "
                      "of %s", (unsigned)c->peer.uid, (unsigned)c->peer.gid,
                      shown, shown, d->cfg.path);
            return -EACCES;
        }
    }

    /* Note [Resuming clients] in resume.c */
    bool resumed = false;
    if (heap && h->resume_client != 0) {
        if (!resume_take(d, heap, c, h->resume_client, h->resume_token.data,
                         h->resume_token.len)) {
            d->requests_refused++; /* a guess, a thief, or just too late */
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_NOT_RESUMED,
                      "heapd does not keep client %llu of heap '%s' for "
                      "this process: heapd restarted without keeping it "
                      "(killed, or without a service manager), the client "
                      "did not come back within reconnect_timeout (%llu "
                      "ms), or it is another process; what the client "
                      "held is no longer its own: connect anew",
                      (unsigned long long)h->resume_client, shown,
                      (unsigned long long)heap->cfg->reconnect_timeout_ms);
            return -ESRCH;
        }
        resumed = true;
    } else if (heap) {
        resume_new_token(c->token);
        c->start = auth_process_start(c->peer.pid);
    }

    Heapd__Welcome w = HEAPD__WELCOME__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    w.protocol_version = PROTOCOL_VERSION;
    w.daemon_version = (char *)HEAPD_VERSION;
    w.client_id = c->id;
    w.resumed = resumed;
    env.body_case = HEAPD__ENVELOPE__BODY_WELCOME;
    env.welcome = &w;
    if (heap) {
        w.heap = (char *)heap->cfg->name;
        w.heap_base = heap->cfg->base;
        w.max_size = heap->cfg->max_size;
        w.memory_limit = heap->cfg->memory_limit;
        w.segment_size = heap->cfg->segment_size;
        w.layout_version = LAYOUT_VERSION;
        w.has_fd = true;
        w.regions = d->cfg.max_mutators_per_client;
        /* the heap, the daemon's page read-only (Note [The daemon's
         * page]) and the client's control memory (Note [Client control
         * memory]) */
        w.token.data = c->token;
        w.token.len = sizeof c->token;
        if (!resumed)
            c->mem_fd = slotmem_create(heap->cfg->name, c->id, w.regions);
        if (c->mem_fd < 0) {
            rc = c->mem_fd;
            c->mem_fd = -1;
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                      "cannot make this client's control memory: %s",
                      strerror(-rc));
            return rc;
        }
        /* listed alive before it can act on the Welcome (Note [Live
         * clients] in proto/layout.h, Note [Resuming clients]) */
        if (!resumed)
            resume_register(heap, c);
        int fds[3] = {heap->fd, heap->page_ro_fd, c->mem_fd};
        rc = conn_send_with_fds(c, &env, fds, 3);
        if (rc < 0 && !resumed) {
            heap_lock(heap);
            resume_unregister(heap, c->id);
            heap_unlock(heap);
        }
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
        c->named_heap = heap;
        heap->clients++;
    }
    c->state = CONN_READY;
    conn_welcomed(c);
    log_info("client %llu (%s, pid %d, uid %u) connected%s%s",
             (unsigned long long)c->id, c->name, (int)c->peer.pid,
             (unsigned)c->peer.uid, heap ? " to heap " : " (control",
             heap ? heap->cfg->name : c->unlisted ? ", stats only)" : ")");
    return 0;
}

/* The DERIVED counters of Note [Counter table] (proto/heapd_counters.h),
 * one function each (a DERIVED line without one does not compile), called
 * under heap->lock. */
static uint64_t stat_mutators(const struct heap *h)
{
    return h->mutators;
}
static uint64_t stat_bytes_allocated(const struct heap *h)
{
    return collector_bytes_allocated(h);
}
static uint64_t stat_segments_free(const struct heap *h)
{
    return h->segs.n_free;
}
static uint64_t stat_segments_owned(const struct heap *h)
{
    return h->segs.n_owned;
}
static uint64_t stat_segments_filled(const struct heap *h)
{
    return h->segs.n_filled;
}
static uint64_t stat_segments_large(const struct heap *h)
{
    return h->segs.n_large;
}
static uint64_t stat_heap_age_ns(const struct heap *h)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t t = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    return t > h->stats.created_unix_ns ? t - h->stats.created_unix_ns : 0;
}

static uint64_t stat_segments_fenced(const struct heap *h)
{
    return h->segs.n_fenced; /* Note [Evicted clients] in stall.c */
}

static uint64_t stat_segments_orphaned(const struct heap *h)
{
    return h->segs.orphaned;
}
static uint64_t stat_segments_adopted(const struct heap *h)
{
    return h->segs.adopted;
}

/* Note [Memory limit] in daemon/gc/collector.c */
static uint64_t stat_memory_limit(const struct heap *h)
{
    return h->cfg->memory_limit;
}

/* Note [Memory counters] in daemon/gc/collector.c: two fstat calls */
static uint64_t stat_bytes_committed(const struct heap *h)
{
    return heap_committed_bytes(h);
}
static uint64_t stat_fragmentation_permille(const struct heap *h)
{
    uint64_t blocks = h->stats.block_bytes;
    return blocks ? heap_committed_bytes(h) * 1000u / blocks : 0;
}

/* The slots' statistics words, the attached slots' and the freed ones'
 * totals (grant_free_slot): their young words (Note [Young objects] in
 * proto/young.h) and their capture words (Note [C locals are roots] in
 * client/stack_roots.c). */
#define SLOT_WORDS_STAT(name, field)                  \
    static uint64_t stat_##name(const struct heap *h) \
    {                                                 \
        struct heap_slot_words w;                     \
        grant_slot_totals(h, &w);                     \
        return w.field;                               \
    }
SLOT_WORDS_STAT(minor_collections, minor)
SLOT_WORDS_STAT(promoted_age_bytes, promoted_age)
SLOT_WORDS_STAT(promoted_published_bytes, promoted_pub)
SLOT_WORDS_STAT(minor_pause_max_ns, pause_max_ns)
SLOT_WORDS_STAT(minor_pause_total_ns, pause_total_ns)
SLOT_WORDS_STAT(conservative_unscanned, unscanned)
SLOT_WORDS_STAT(conservative_overflows, overflows)
#undef SLOT_WORDS_STAT

#define STAT_LOCKED(h, name) ((h)->stats.name)
#define STAT_ATOMIC(h, name) atomic_load(&(h)->stats.name)
#define STAT_DERIVED(h, name) stat_##name(h)
#define STAT_READ_(name, type, kind, unit, source, help) \
    out[HEAPD_HEAP_COUNTER_##name] = STAT_##source(h, name);

/* With heap->lock held: OUT[i] = line i of the table. */
static void heap_counters(const struct heap *h,
                          uint64_t out[HEAPD_HEAP_COUNTERS_N])
{
    ASSERT_LOCK_HELD(&h->lock);
    HEAPD_HEAP_COUNTERS(STAT_READ_)
}

#undef STAT_READ_
#undef STAT_DERIVED
#undef STAT_ATOMIC
#undef STAT_LOCKED

void session_stats_snapshot(struct daemon *d, struct stats_snapshot *s)
{
    s->d = (struct metrics_daemon){
        .version = HEAPD_VERSION,
        .uptime_ns = uv_hrtime() - d->start_ns,
        .clients_connected = d->n_conns,
        .connections_total = d->connections_total,
        .frames_rejected = d->frames_rejected,
        .connections_refused = d->connections_refused,
        .connections_throttled = d->connections_throttled,
        .connections_timed_out = d->connections_timed_out,
        .requests_refused = d->requests_refused,
        .log_lines_suppressed = d->log_lines_suppressed,
        .heaps_unserved = (uint32_t)d->n_unserved,
    };
    for (size_t i = 0; i < d->n_heaps; i++)
        s->d.heaps_unserved += d->heaps[i].refused;
    s->n = d->n_heaps;
    for (size_t i = 0; i < d->n_heaps; i++) {
        struct heap *h = &d->heaps[i];
        struct stats_heap *sh = &s->h[i];
        sh->base = h->cfg->base;
        sh->committed_bytes = heap_committed_bytes(h);
        heap_lock((struct heap *)h);
        sh->m = (struct metrics_heap){
            .name = h->cfg->name,
            .reserved_bytes = h->cfg->max_size,
            .segment_size = h->cfg->segment_size,
            .clients = h->clients,
            .phase = atomic_load(&h->control->phase),
            .counters = sh->counters,
        };
        heap_counters(h, sh->counters);
        heap_unlock((struct heap *)h);
    }
}

static int handle_stats(struct conn *c, uint64_t seq)
{
    struct daemon *d = c->d;
    static struct stats_snapshot s; /* the loop thread's only */
    Heapd__StatsReply r = HEAPD__STATS_REPLY__INIT;
    Heapd__HeapStats hs[CONFIG_MAX_HEAPS];
    Heapd__HeapStats *hp[CONFIG_MAX_HEAPS];
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;

    session_stats_snapshot(d, &s);
    r.version = (char *)s.d.version;
    r.uptime_ns = s.d.uptime_ns;
    r.clients_connected = s.d.clients_connected;
    r.frames_rejected = s.d.frames_rejected;
    r.connections_total = s.d.connections_total;
    r.connections_refused = s.d.connections_refused;
    r.connections_throttled = s.d.connections_throttled;
    r.connections_timed_out = s.d.connections_timed_out;
    r.requests_refused = s.d.requests_refused;
    r.log_lines_suppressed = s.d.log_lines_suppressed;
    for (size_t i = 0; i < s.n; i++) {
        const struct stats_heap *sh = &s.h[i];
        heapd__heap_stats__init(&hs[i]);
        hs[i].name = (char *)sh->m.name;
        hs[i].heap_base = sh->base;
        hs[i].reserved_bytes = sh->m.reserved_bytes;
        hs[i].committed_bytes = sh->committed_bytes;
        hs[i].clients = sh->m.clients;
        hs[i].segment_size = sh->m.segment_size;
        hs[i].phase = sh->m.phase;
        hs[i].n_counters = HEAPD_HEAP_COUNTERS_N;
        hs[i].counters = (uint64_t *)sh->counters;
        hp[i] = &hs[i];
    }
    /* the client's own heap first: heapd_stats reports it at top level */
    for (size_t i = 1; i < d->n_heaps; i++) {
        if (c->named_heap == &d->heaps[i]) {
            Heapd__HeapStats *t = hp[0];
            hp[0] = hp[i];
            hp[i] = t;
        }
    }
    r.n_heaps = s.n;
    r.heaps = hp;
    /* Note [Heaps heapd cannot adopt] in adopt.c: those left at start,
     * and those refused since */
    static char refused[CONFIG_MAX_HEAPS][512];
    Heapd__UnservedHeap us[CONFIG_MAX_HEAPS], *up[CONFIG_MAX_HEAPS];
    size_t nu = 0;
    for (size_t i = 0; i < d->n_unserved; i++, nu++) {
        heapd__unserved_heap__init(&us[nu]);
        us[nu].name = (char *)d->unserved[i].cfg->name;
        us[nu].why = (char *)d->unserved[i].why;
        up[nu] = &us[nu];
    }
    for (size_t i = 0; i < d->n_heaps && nu < CONFIG_MAX_HEAPS; i++) {
        const struct heap *h = &d->heaps[i];
        if (!h->refused)
            continue;
        snprintf(refused[nu], sizeof refused[nu], "its verifying cycles "
                 "after heapd was killed found %llu failures.  Its memfds "
                 "stay in the service manager's store; restart heapd, and "
                 "'heapctl drop %s' then gives it up and serves it empty",
                 (unsigned long long)h->stats.verify_failures,
                 h->cfg->name);
        heapd__unserved_heap__init(&us[nu]);
        us[nu].name = (char *)h->cfg->name;
        us[nu].why = refused[nu];
        up[nu] = &us[nu];
        nu++;
    }
    r.n_unserved = nu;
    r.unserved = up;
    env.seq = seq;
    env.body_case = HEAPD__ENVELOPE__BODY_STATS_REPLY;
    env.stats_reply = &r;
    int rc = conn_send(c, &env);
    if (rc < 0)
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                  "cannot send stats: %s", strerror(-rc));
    return rc;
}

/* ---- replies ---- */

/* The heap of a request only a mutator client may make, or NULL after
 * answering the request with an error. */
static struct heap *mutator_heap(struct conn *c, uint64_t seq,
                                 const char *what)
{
    if (c->heap)
        return c->heap;
    c->d->frames_rejected++;
    conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                "%s needs a mutator connection; this is a control "
                "connection", what);
    return NULL;
}

/* ---- requests that wait for a cycle (grant.h) ---- */

/* A SegmentRequest's size classes as a bitmap; numbers that are no class
 * are ignored (they are only a preference). */
static void class_bitmap(const Heapd__SegmentRequest *r,
                         uint64_t out[GRANT_CLASS_WORDS])
{
    memset(out, 0, GRANT_CLASS_WORDS * sizeof out[0]);
    for (size_t i = 0; r && i < r->n_classes; i++)
        if (r->classes[i] < LAYOUT_NCLASSES)
            out[r->classes[i] >> 6] |= 1ull << (r->classes[i] & 63);
}

/* Answer request SEQ once cycle TARGET has completed (0: a new cycle,
 * asked for now). */
/* May C have one more request wait for a cycle?  Else it is told (and 0
 * returned, as answering does). */
static bool may_defer(struct conn *c, uint64_t seq, int *rc)
{
    struct daemon *d = c->d;
    if (c->outstanding < d->cfg.max_requests_per_client)
        return true;
    d->requests_refused++; /* Note [Per-client limits] */
    *rc = conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_MEMORY,
                           "this client already has %u requests waiting "
                           "for a collection (max_requests_per_client in "
                           "[daemon] of %s); wait for their answers, or "
                           "raise it", c->outstanding, d->cfg.path);
    return false;
}

static int defer_id(struct conn *c, struct heap *h, uint64_t seq,
                    enum pending_kind kind, const struct grant_req *r,
                    uint64_t target, uint64_t id)
{
    struct daemon *d = c->d;
    int refused;
    if (!may_defer(c, seq, &refused))
        return refused;
    int rc = grant_defer(&d->pending, &d->workers, c, h, seq, kind, r,
                         target, id);
    if (rc < 0)
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL, "out of memory");
    else
        c->outstanding++;
    return rc;
}

static int defer(struct conn *c, struct heap *h, uint64_t seq,
                 enum pending_kind kind, const struct grant_req *r,
                 uint64_t target)
{
    return defer_id(c, h, seq, kind, r, target, 0);
}

/* ---- mutator slots (Note [Mutator slots]) ---- */

/* Note [Young budgets] in daemon/gc/heap.h: the young generation attach
 * request R asks for, a nursery budget of *BYTES (0: not young) promoting
 * at *AGE.  Returns 1, or, for a request out of range, what answering it
 * with an error returned (never 1). */
static int young_asked(struct conn *c, struct heap *h, uint64_t seq,
                       const Heapd__AttachRequest *r, uint64_t *bytes,
                       uint32_t *age)
{
    const struct config_heap *cfg = h->cfg;
    unsigned long long min = heap_young_min(h), max = heap_young_max(h);
    *bytes = 0;
    *age = 0;
    if (!r || !r->young)
        return 1;
    *age = r->young_age ? r->young_age : cfg->young_age;
    if (*age > LAYOUT_YOUNG_AGE_MAX) {
        c->d->frames_rejected++;
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                         "young_age %u is out of range: ask for 1 to %u, "
                         "or 0 for the young_age of heap '%s' (%u)", *age,
                         LAYOUT_YOUNG_AGE_MAX, cfg->name, cfg->young_age);
    }
    if (r->young_bytes == 0) /* the heap's, at least the least budget */
        *bytes = cfg->young_size > min ? cfg->young_size : min;
    else if ((*bytes = r->young_bytes) < min) {
        c->d->requests_refused++;
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                         "a nursery budget of %llu bytes is less than %u "
                         "segments of heap '%s': ask for %llu bytes or "
                         "more, or 0 for its young_size",
                         (unsigned long long)*bytes, HEAP_YOUNG_MIN_SEGMENTS,
                         cfg->name, min);
    }
    if (*bytes > cfg->max_size) {
        c->d->requests_refused++;
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                         "a nursery budget of %llu bytes is more than heap "
                         "'%s' holds (max_size %llu bytes): ask for %llu "
                         "bytes or less, or 0 for its young_size",
                         (unsigned long long)*bytes, cfg->name,
                         (unsigned long long)cfg->max_size, max);
    }
    if (*bytes > max) {
        c->d->requests_refused++;
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_MEMORY,
                         "a nursery budget of %llu bytes is more than this "
                         "client may hold (max_client_bytes %llu in [heap "
                         "%s] of %s): ask for %llu bytes or less, or raise "
                         "max_client_bytes", (unsigned long long)*bytes,
                         (unsigned long long)cfg->max_client_bytes,
                         cfg->name, c->d->cfg.path, max);
    }
    /* Note [Young budgets]: what kept_of will take back */
    assert(heap_young_ok(h, *bytes, *age));
    return 1;
}

static int handle_attach(struct conn *c, uint64_t seq,
                         const Heapd__AttachRequest *ar)
{
    struct heap *h = mutator_heap(c, seq, "attach");
    uint64_t young_bytes;
    uint32_t young_age;
    int slot;

    if (!h)
        return 0;
    unsigned mine = (unsigned)(__builtin_popcountll(c->slots[0]) +
                               __builtin_popcountll(c->slots[1]));
    if (mine >= c->d->cfg.max_mutators_per_client) {
        c->d->requests_refused++; /* Note [Per-client limits] */
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_SLOT,
                           "this client has %u mutators attached to heap "
                           "'%s' (max_mutators_per_client in [daemon] of "
                           "%s); detach idle threads, or raise it", mine,
                           h->cfg->name, c->d->cfg.path);
    }
    /* its lowest region no slot of it uses: there is one, for it has
     * fewer slots than regions */
    bool used[LAYOUT_MAX_MUTATORS] = {false};
    unsigned region = 0;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++)
        if (c->slots[i / 64] >> (i % 64) & 1)
            used[h->owners[i].region] = true;
    while (used[region])
        region++;
    int asked = young_asked(c, h, seq, ar, &young_bytes, &young_age);
    if (asked != 1)
        return asked;
    heap_lock(h);
    slot = grant_slot(h, c->id, c->slots, c->mem_fd, region, c->granted,
                      young_bytes, young_age);
    if (slot >= 0)
        safepoint_own_slot(h, (unsigned)slot, (int)c->peer.pid,
                           (unsigned)c->peer.uid, c->name);
    assert(grant_check_slots(h)); /* Note [Checking mutator slots] */
    heap_unlock(h);
    if (slot == -ENOSPC)
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_SLOT,
                           "heap '%s' has all %d mutator slots attached; "
                           "detach idle threads", h->cfg->name,
                           LAYOUT_MAX_MUTATORS);
    if (slot < 0)
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_MEMORY,
                           "cannot map a mutator slot of heap '%s': %s",
                           h->cfg->name, strerror(-slot));

    Heapd__AttachReply r = HEAPD__ATTACH_REPLY__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    r.slot = (uint32_t)slot;
    r.region = region;
    r.young_bytes = young_bytes;
    r.young_age = young_age;
    env.body_case = HEAPD__ENVELOPE__BODY_ATTACH_REPLY;
    env.attach_reply = &r;
    return conn_reply(c, &env, seq);
}

static int handle_detach(struct conn *c, uint64_t seq,
                         const Heapd__DetachRequest *r)
{
    struct heap *h = mutator_heap(c, seq, "detach");
    if (!h)
        return 0;
    if (r->slot >= LAYOUT_MAX_MUTATORS ||
        !(c->slots[r->slot / 64] >> (r->slot % 64) & 1)) {
        c->d->frames_rejected++;
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                           "mutator slot %u is not attached by this client",
                           r->slot);
    }
    heap_lock(h);
    grant_free_slot(h, c->slots, r->slot, c->mem_fd);
    assert(grant_check_slots(h)); /* Note [Checking mutator slots] */
    heap_unlock(h);

    Heapd__DetachReply dr = HEAPD__DETACH_REPLY__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.body_case = HEAPD__ENVELOPE__BODY_DETACH_REPLY;
    env.detach_reply = &dr;
    return conn_reply(c, &env, seq);
}

/* ---- segments (Note [Segment supply]) ---- */

static enum grant_kind grant_kind_of(Heapd__SegmentKind kind)
{
    switch (kind) {
    case HEAPD__SEGMENT_KIND__SEGMENT_SMALL: return GRANT_SMALL;
    case HEAPD__SEGMENT_KIND__SEGMENT_LARGE: return GRANT_LARGE;
    default: return GRANT_INVALID;
    }
}

/* Grant what R asks for.  If the heap is full and FINAL is false, the
 * request waits for a collection and is tried once more after it. */
static int grant(struct conn *c, struct heap *h, uint64_t seq,
                 const struct grant_req *r, bool final)
{
    struct grant g;
    uint64_t wait_cycle = 0;

    /* Note [Stalls]: no cycle can end; nothing waits for one */
    final = final || atomic_load(&h->stalled) != 0;
    heap_lock(h);
    int rc = grant_segments(h, c->id, &c->held, r, final, &g, &wait_cycle);
    if (rc == 0) {
        c->granted += (uint64_t)(r->kind == GRANT_LARGE ? g.run : (uint32_t)g.n)
                      << h->seg_shift;
        grant_bound_slots(h, c->slots, c->granted);
        table_client_granted(h, c->id, c->granted);
    }
    uint32_t held = c->held;
    uint64_t charged = seg_charged_bytes(h, c->id, true); /* Note [Quota] */
    heap_unlock(h);
    if (rc == -EAGAIN) { /* Note [Pacing]; Note [Memory limit] */
        struct grant_req again = *r;
        if (final && again.limit_waits < UINT8_MAX)
            again.limit_waits++;
        return defer(c, h, seq, PENDING_GRANT, &again, wait_cycle);
    }

    switch (rc) {
    case 0: {
        Heapd__SegmentGrant sg = HEAPD__SEGMENT_GRANT__INIT;
        Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
        sg.kind = (Heapd__SegmentKind)r->asked_kind;
        sg.n_segments = (size_t)g.n;
        sg.segments = g.segs;
        sg.run = g.run;
        sg.n_formatted = g.any_formatted ? (size_t)g.n : 0;
        sg.formatted = g.formatted;
        sg.waited = final;
        env.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_GRANT;
        env.segment_grant = &sg;
        return conn_reply(c, &env, seq);
    }
    case -ENOSPC:
        if (!final) {
            struct grant_req again = *r;
            again.count = g.count;
            return defer(c, h, seq, PENDING_GRANT, &again, 0);
        }
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_MEMORY,
                           "heap '%s' is full (max_size %llu bytes) even "
                           "after a collection; raise max_size in [heap %s] "
                           "or keep less alive", h->cfg->name,
                           (unsigned long long)h->cfg->max_size,
                           h->cfg->name);
    case -EDQUOT:
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_MEMORY,
                           "this client holds %u segments (%llu bytes) of "
                           "heap '%s' and keeps %llu bytes of objects alive "
                           "in it (as the last collection found), and "
                           "max_client_bytes is %llu; drop references to "
                           "what it no longer needs, or raise "
                           "max_client_bytes in [heap %s]", held,
                           (unsigned long long)held << h->seg_shift,
                           h->cfg->name, (unsigned long long)charged,
                           (unsigned long long)h->cfg->max_client_bytes,
                           h->cfg->name);
    case -ENOMEM: /* Note [Memory limit] in daemon/gc/collector.c */
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_MEMORY,
                           "heap '%s' reached its memory_limit (%llu bytes) "
                           "even after collections; keep less alive, or "
                           "raise memory_limit in [heap %s] of %s",
                           h->cfg->name,
                           (unsigned long long)h->cfg->memory_limit,
                           h->cfg->name, c->d->cfg.path);
    case -EFBIG:
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_MEMORY,
                           "an object of %llu bytes can never fit in heap "
                           "'%s' (max_size %llu bytes, memory_limit %llu: "
                           "0 for none)",
                           (unsigned long long)r->bytes, h->cfg->name,
                           (unsigned long long)h->cfg->max_size,
                           (unsigned long long)h->cfg->memory_limit);
    default:
        c->d->frames_rejected++;
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                           "unknown segment kind %d", r->asked_kind);
    }
}

static int handle_segment_request(struct conn *c, uint64_t seq,
                                  const Heapd__SegmentRequest *r)
{
    struct heap *h = mutator_heap(c, seq, "segment_request");
    if (!h)
        return 0;
    struct grant_req gr = {.kind = grant_kind_of(r->kind),
                           .asked_kind = (int)r->kind,
                           .count = r->count,
                           .bytes = r->bytes,
                           .reuse_only = r->reuse_only};
    class_bitmap(r, gr.classes);
    return grant(c, h, seq, &gr, false);
}

static int handle_segment_return(struct conn *c, const Heapd__SegmentReturn *r)
{
    struct heap *h = c->heap;
    size_t bad = 0;

    if (!h) {
        bad = r->n_segments ? r->n_segments : 1;
    } else {
        heap_lock(h);
        for (size_t i = 0; i < r->n_segments; i++)
            if (seg_return(h, c->id, &c->held, r->segments[i]) < 0)
                bad++;
        /* full segments come back more often than grants go out: the
         * trigger overshoots by less (Note [Collection cycle]) */
        collector_check_trigger(h);
        heap_unlock(h);
    }
    if (bad) {
        c->d->frames_rejected += bad;
        conn_log(c, CONFIG_LOG_INFO, "client %llu (%s): returned %zu segment(s) that are not "
                 "its own; ignored", (unsigned long long)c->id, c->name, bad);
    }
    return 0;
}

/* ---- update remembered sets (Note [Update remembered set]) ---- */

static int handle_urs_batch(struct conn *c, const Heapd__UrsBatch *r)
{
    struct heap *h = c->heap;
    if (!h || r->slot >= LAYOUT_MAX_MUTATORS ||
        !(c->slots[r->slot / 64] >> (r->slot % 64) & 1)) {
        c->d->frames_rejected++;
        conn_log(c, CONFIG_LOG_INFO, "client %llu (%s): URS batch for slot "
                 "%u, which is not its own; ignored",
                 (unsigned long long)c->id, c->name, r->slot);
        return 0;
    }
    /* the entries are read from the slot's ring up to its real head; the
     * head in the message only says that there is something to read */
    heap_lock(h);
    mark_urs(h, h->marking, r->slot);
    heap_unlock(h);
    return 0;
}

/* ---- global roots (Note [Global roots]) ---- */

static int handle_global_claim(struct conn *c, uint64_t seq,
                               const Heapd__GlobalClaim *r)
{
    struct heap *h = mutator_heap(c, seq, "global_claim");
    uint32_t index = 0;
    enum globals_role role = GLOBALS_READY;
    int rc;

    if (!h)
        return 0;
    heap_lock(h);
    rc = globals_claim(h, c->id, r->name ? r->name : "", r->once, &index,
                       &role);
    heap_unlock(h);
    switch (rc) {
    case 0:
        break;
    case -ENOSPC:
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_MEMORY,
                           "heap '%s' has all %d global roots in use",
                           h->cfg->name, LAYOUT_MAX_GLOBALS);
    default:
        c->d->frames_rejected++;
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                           "a global's name must be 1 to %d bytes",
                           LAYOUT_GLOBAL_NAME - 1);
    }
    Heapd__GlobalClaimed gc = HEAPD__GLOBAL_CLAIMED__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    gc.index = index;
    gc.role = role == GLOBALS_INITIALIZE ? HEAPD__GLOBAL_ROLE__GLOBAL_INITIALIZE
              : role == GLOBALS_WAIT     ? HEAPD__GLOBAL_ROLE__GLOBAL_WAIT
                                         : HEAPD__GLOBAL_ROLE__GLOBAL_READY;
    env.body_case = HEAPD__ENVELOPE__BODY_GLOBAL_CLAIMED;
    env.global_claimed = &gc;
    return conn_reply(c, &env, seq);
}

static int handle_global_delete(struct conn *c, uint64_t seq,
                                const Heapd__GlobalDelete *r)
{
    struct heap *h = mutator_heap(c, seq, "global_delete");
    int rc;

    if (!h)
        return 0;
    heap_lock(h);
    rc = globals_delete(h, r->name ? r->name : "");
    heap_unlock(h);
    Heapd__GlobalDeleted gd = HEAPD__GLOBAL_DELETED__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    switch (rc) {
    case 0:
        gd.result = HEAPD__GLOBAL_DELETE_RESULT__GLOBAL_DELETE_DONE;
        break;
    case -ENOENT:
        gd.result = HEAPD__GLOBAL_DELETE_RESULT__GLOBAL_DELETE_NO_SUCH;
        break;
    case -EBUSY:
        gd.result = HEAPD__GLOBAL_DELETE_RESULT__GLOBAL_DELETE_BUSY;
        break;
    default:
        c->d->frames_rejected++;
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                           "a global's name must be 1 to %d bytes",
                           LAYOUT_GLOBAL_NAME - 1);
    }
    env.body_case = HEAPD__ENVELOPE__BODY_GLOBAL_DELETED;
    env.global_deleted = &gd;
    return conn_reply(c, &env, seq);
}

static int handle_global_init_done(struct conn *c, uint64_t seq,
                                   const Heapd__GlobalInitDone *r)
{
    struct heap *h = mutator_heap(c, seq, "global_init_done");
    int rc;

    if (!h)
        return 0;
    heap_lock(h);
    rc = globals_init_done(h, c->id, r->index, r->ok);
    heap_unlock(h);
    if (rc < 0)
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                           "global entry %u is not being initialised by "
                           "client %llu: only the client whose global_claim "
                           "was answered GLOBAL_INITIALIZE ends that init, "
                           "once", r->index, (unsigned long long)c->id);
    Heapd__GlobalInitAck ack = HEAPD__GLOBAL_INIT_ACK__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.body_case = HEAPD__ENVELOPE__BODY_GLOBAL_INIT_ACK;
    env.global_init_ack = &ack;
    return conn_reply(c, &env, seq);
}

static int handle_globals_request(struct conn *c, uint64_t seq)
{
    struct heap *h = c->heap ? c->heap : c->named_heap;
    Heapd__GlobalInfo info[LAYOUT_MAX_GLOBALS];
    Heapd__GlobalInfo *ptr[LAYOUT_MAX_GLOBALS];
    char names[LAYOUT_MAX_GLOBALS][LAYOUT_GLOBAL_NAME];
    size_t n = 0;

    if (!h)
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_SUCH_HEAP,
                           "this daemon serves no heap");
    heap_lock(h);
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++) {
        struct layout_global *g = &h->control->globals[i];
        uint32_t st = atomic_load(&g->state);
        if (st == LAYOUT_GLOBAL_EMPTY)
            continue;
        heapd__global_info__init(&info[n]);
        memcpy(names[n], g->name, LAYOUT_GLOBAL_NAME);
        names[n][LAYOUT_GLOBAL_NAME - 1] = '\0';
        info[n].name = names[n];
        info[n].state = st;
        info[n].target =
            (uint64_t)(uintptr_t)atomic_load(&h->control->global_values[i]);
        struct valid_ref ref;
        if (info[n].target && validate_ref(h, info[n].target, &ref)) {
            uint64_t hdr = validate_header(&ref);
            uint64_t nrefs = layout_header_nrefs(hdr);
            uint64_t nbytes = layout_header_nbytes(hdr);
            info[n].target_bytes = layout_object_size(nrefs, nbytes);
            /* Note [Collections seen by the daemon]: the object's own
             * bytes, as numbers */
            struct coll_info ci;
            info[n].kind = coll_kind_of(
                nrefs, nbytes, (const void *const *)ref.obj + nrefs, &ci);
            info[n].size = ci.size;
            info[n].leases = ci.leases;
            info[n].budget = ci.budget;
            info[n].used = ci.used;
            info[n].evictions = ci.evictions;
            info[n].expirations = ci.expirations;
        }
        info[n].owner = st == LAYOUT_GLOBAL_INITIALIZING ? g->owner : 0;
        ptr[n] = &info[n];
        n++;
    }
    heap_unlock(h);
    Heapd__GlobalsReply r = HEAPD__GLOBALS_REPLY__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    r.n_globals = n;
    r.globals = ptr;
    env.body_case = HEAPD__ENVELOPE__BODY_GLOBALS_REPLY;
    env.globals_reply = &r;
    return conn_reply(c, &env, seq);
}

/* ---- collections ---- */

static int reply_collect_done(struct conn *c, struct heap *h, uint64_t seq)
{
    Heapd__CollectDone done = HEAPD__COLLECT_DONE__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    heap_lock(h);
    done.cycle = h->stats.cycles_completed;
    heap_unlock(h);
    env.body_case = HEAPD__ENVELOPE__BODY_COLLECT_DONE;
    env.collect_done = &done;
    return conn_reply(c, &env, seq);
}

static int handle_collect(struct conn *c, uint64_t seq,
                          const Heapd__CollectRequest *r)
{
    struct heap *h = c->heap ? c->heap : c->named_heap;
    if (!h)
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_SUCH_HEAP,
                           "this daemon serves no heap");
    if (r->wait)
        return defer(c, h, seq, PENDING_COLLECT, NULL, 0);
    collector_request(h);
    return reply_collect_done(c, h, seq);
}

/* heapctl save and load: a privileged peer (heapd reads or writes the
 * file with its own rights), a heap it serves, an absolute PATH of under
 * MAX bytes, and room for one more request waiting for a cycle.  Returns
 * 1 with *H and SHOWN (the heap's name, escaped: 4 * CONFIG_HEAP_NAME_MAX
 * + 1 bytes), or what answering with an error returned. */
static int file_request_ok(struct conn *c, uint64_t seq, const char *verb,
                           const char *heap, const char *path, size_t max,
                           char *shown, struct heap **h)
{
    struct daemon *d = c->d;
    int rc;
    log_escape(shown, 4 * CONFIG_HEAP_NAME_MAX + 1, heap ? heap : "");
    if (!c->privileged) {
        d->requests_refused++;
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_DENIED,
                                "uid %u may not %s heap '%s': only root "
                                "or heapd's own user may", c->peer.uid,
                                verb, shown);
    }
    if (!(*h = daemon_find_heap(d, heap ? heap : "")))
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_SUCH_HEAP,
                                "heapd serves no heap named '%s'", shown);
    if (path[0] != '/' || strlen(path) >= max)
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                                "%s heap '%s': the file must be an "
                                "absolute path of under %zu bytes", verb,
                                shown, max);
    if (!may_defer(c, seq, &rc))
        return rc;
    return 1;
}

/* ---- heapctl save (Note [Saving a heap at a snapshot] in save.c) ---- */

static int reply_save(struct conn *c, struct heap *h, uint64_t seq,
                      uint64_t id)
{
    struct save_result r = {0};
    bool have;
    heap_lock(h);
    have = h->save_last && h->save_last[id % SAVE_OUTCOMES].id == id;
    if (have)
        r = h->save_last[id % SAVE_OUTCOMES];
    heap_unlock(h);
    if (!have)
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                                "heap '%s': the cycle that was to save it "
                                "did not run (heapd is stopping?); ask "
                                "again", h->cfg->name);
    if (r.rc < 0)
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                                "heap '%s' not saved: %s", h->cfg->name,
                                r.why);
    Heapd__SaveReply sr = HEAPD__SAVE_REPLY__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    sr.objects = r.objects;
    sr.object_bytes = r.object_bytes;
    sr.globals = r.globals;
    sr.file_bytes = r.file_bytes;
    sr.inexact = r.inexact;
    sr.bad_refs = r.bad_refs;
    sr.records = r.records;
    sr.record_bytes = r.record_bytes_max;
    sr.ns = r.ns;
    sr.sync_ns = r.sync_ns;
    env.body_case = HEAPD__ENVELOPE__BODY_SAVE_REPLY;
    env.save_reply = &sr;
    return conn_reply(c, &env, seq);
}

/* Root or heapd's own user only: heapd writes the file with its rights,
 * and the file holds every object of the heap. */
static int handle_save(struct conn *c, uint64_t seq,
                       const Heapd__SaveRequest *r)
{
    char shown[4 * CONFIG_HEAP_NAME_MAX + 1], why[640], tmp[4200];
    const char *path = r->path ? r->path : "";
    struct heap *h;
    int rc = file_request_ok(c, seq, "save", r->heap, path,
                             CONFIG_PATH_MAX - 16, shown, &h);
    if (rc != 1)
        return rc;
    /* a name of its own beside PATH: no other save's file is touched */
    snprintf(tmp, sizeof tmp, "%s.partial-XXXXXX", path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        log_escape(why, sizeof why, tmp);
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                                "save heap '%s': heapd cannot create %s: %s",
                                shown, why, strerror(e));
    }
    int64_t id = save_request(h, fd, path, tmp, why, sizeof why);
    if (id < 0) {
        close(fd);
        unlink(tmp);
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                                "%s", why);
    }
    collector_request(h); /* even if the answer cannot wait */
    defer_id(c, h, seq, PENDING_SAVE, NULL, 0, (uint64_t)id);
    return 0;
}

/* ---- heapctl load (Note [Loading a saved heap] in load.c) ---- */

static int reply_load(struct conn *c, struct heap *h, uint64_t seq,
                      uint64_t id)
{
    struct load_outcome o = {0};
    bool have;
    heap_lock(h);
    have = h->load_last && h->load_last[id % LOAD_OUTCOMES].id == id;
    if (have)
        o = h->load_last[id % LOAD_OUTCOMES];
    heap_unlock(h);
    if (!have)
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                                "heap '%s': the load did not run (heapd is "
                                "stopping?); ask again", h->cfg->name);
    if (o.rc < 0)
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                                "heap '%s' not loaded, it stays empty: %s",
                                h->cfg->name, o.why);
    Heapd__LoadReply lr = HEAPD__LOAD_REPLY__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    lr.objects = o.res.objects;
    lr.object_bytes = o.res.object_bytes;
    lr.globals = o.res.globals;
    lr.file_bytes = o.res.file_bytes;
    lr.ns = o.res.ns;
    lr.moved = o.res.moved;
    env.body_case = HEAPD__ENVELOPE__BODY_LOAD_REPLY;
    env.load_reply = &lr;
    return conn_reply(c, &env, seq);
}

/* Root or heapd's own user only: heapd reads the file with its rights.
 * The heap must be empty, and stays closed to mutators until the load
 * has run (the collector runs it before its next cycle). */
static int handle_load(struct conn *c, uint64_t seq,
                       const Heapd__LoadRequest *r)
{
    char shown[4 * CONFIG_HEAP_NAME_MAX + 1], why[1100];
    const char *path = r->path ? r->path : "";
    struct heap *h;
    int rc = file_request_ok(c, seq, "load", r->heap, path, CONFIG_PATH_MAX,
                             shown, &h);
    if (rc != 1)
        return rc;
    if (h->loading || !load_heap_empty(h, why, sizeof why))
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                                "load heap '%s': %s; a saved heap loads "
                                "into an empty heap only", shown,
                                h->loading ? "a load of it runs" : why);
    int fd = load_open(path, why, sizeof why);
    if (fd < 0) {
        char escaped[4 * CONFIG_PATH_MAX + 1];
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                                "load heap '%s': heapd cannot read %s: %s",
                                shown, log_escape(escaped, sizeof escaped,
                                                  path), why);
    }
    int64_t id = load_request(h, fd, path, why, sizeof why);
    if (id < 0) {
        close(fd);
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_BAD_REQUEST,
                                "%s", why);
    }
    h->loading = (uint64_t)id;
    log_info("heap '%s': loading a saved heap for client %llu; mutators "
             "are refused until it is loaded", h->cfg->name,
             (unsigned long long)c->id);
    /* a cycle runs it even if the answer cannot wait (no memory): the
     * heap is closed to mutators until it has */
    collector_request(h);
    defer_id(c, h, seq, PENDING_LOAD, NULL, 0, (uint64_t)id);
    return 0;
}

/* Note [Recovery cycles] in collector.c: a heap taken back after a kill
 * that failed its verifying cycles is served no more, and left in the
 * store as it is (Note [Heaps heapd cannot adopt] in adopt.c). */
static void refuse_heap(struct daemon *d, struct heap *h)
{
    h->refused = true;
    log_error("heap '%s': the verifying cycles after heapd was killed found "
              "%llu failures (the log names them); its clients are "
              "disconnected and it is served no more.  Its memfds stay in "
              "the service manager's store: restart heapd, and "
              "'heapctl drop %s' then gives it up and serves it empty",
              h->cfg->name, (unsigned long long)h->stats.verify_failures,
              h->cfg->name);
    for (struct conn *c = d->conns; c; c = c->next)
        if (c->heap == h)
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                      "heap '%s' failed its verification after heapd was "
                      "killed; it is served no more", h->cfg->name);
}

void session_cycle_done(struct heap *h, void *daemon)
{
    struct daemon *d = daemon;
    if (h->recovery_failed && !h->refused)
        refuse_heap(d, h);
    /* Note [Loading a saved heap]: mutators are let in again once the
     * load asked for has run */
    if (h->loading) {
        heap_lock(h);
        if (h->load_last &&
            h->load_last[h->loading % LOAD_OUTCOMES].id == h->loading)
            h->loading = 0;
        heap_unlock(h);
    }
    /* take the satisfied ones out first: answering may defer anew */
    struct pending *ready = grant_take_ready(&d->pending, h);
    while (ready) {
        struct pending *p = ready;
        ready = p->next;
        p->c->outstanding--;
        if (p->kind == PENDING_COLLECT)
            reply_collect_done(p->c, h, p->seq);
        else if (p->kind == PENDING_SAVE)
            reply_save(p->c, h, p->seq, p->save_id);
        else if (p->kind == PENDING_LOAD)
            reply_load(p->c, h, p->seq, p->save_id);
        else
            grant(p->c, h, p->seq, &p->req, true);
        free(p);
    }
    grant_queue_changed(&d->pending, &d->workers);
}

/* Note [Client lifecycle]
 * ~~~~~~~~~~~~~~~~~~~~~~~
 * (After OCaml's "Fixing remarking to be safe with parallel domains".)
 * A mutator client leaves in one of two ways, and the daemon ends up in
 * the same state:
 *   - Gracefully (heapd_disconnect): the client detaches its mutators
 *     (each detach consumes the slot's URS ring and frees its root
 *     chunks), returns its reserve and the segments its mutators held --
 *     which also answers every remark request it had (Note [Remark
 *     requests] in client/remark.c) -- and sends Goodbye, then closes.
 *   - By dying (SIGKILL at any instant) or by a broken connection: only
 *     the socket's close tells the daemon; the client counts in
 *     clients_crashed.
 * Either way, in one step under heap->lock (client_leaves), the daemon
 * frees the client's slots -- reading what is left in their URS rings from
 * shared memory, so that nothing a mutator logged is lost, and releasing
 * its stack words: a dead mutator holds up no stop (Note [Stop the
 * world]) -- orphans its segments (Note [Segment supply]), its young
 * blocks freed (Note [Young blocks of a client gone]), moves the
 * remark work it was asked for to the global stack and stops sending it
 * requests (Note [Remark]), and releases the global roots it was
 * initialising (Note [Global roots]); its requests still waiting for a
 * cycle (a paced grant, say) are dropped, for a grant to a client that is
 * gone would be a segment nobody orphans.  Goodbye takes that step at once,
 * so a client that said it is leaving is never asked to rescan again,
 * and one that said nothing takes it when its socket closes.  Nothing it
 * held is lost or kept: its orphaned segments are swept by the next cycle
 * and freed, or reused by other clients when partly live
 * (segments_orphaned, segments_adopted).
 */
/* The one step of Note [Client lifecycle].  CRASHED: without Goodbye. */
static void client_leaves(struct conn *c, struct heap *h, bool crashed)
{
    /* a grant waiting for a cycle would give a client that is gone
     * segments nobody orphans */
    grant_drop(&c->d->pending, &c->d->workers, c);
    c->outstanding = 0;
    heap_lock(h);
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++)
        if (c->slots[i / 64] >> (i % 64) & 1)
            grant_free_slot(h, c->slots, i, c->mem_fd);
    seg_orphan(h, c->id);
    remark_client_gone(h, c->id);
    globals_release_owner(h, c->id);
    resume_unregister(h, c->id);
    c->held = 0;
    h->stats.clients_crashed += crashed;
    assert(grant_check_slots(h)); /* Note [Checking mutator slots] */
    heap_unlock(h);
    seg_punch_strays(h); /* Note [Free memory stays free] */
}

void session_leave(struct conn *c)
{
    if (!c->heap || c->gone)
        return;
    client_leaves(c, c->heap, true);
    c->gone = true;
}

void session_stalled(struct heap *h, void *daemon)
{
    struct daemon *d = daemon;
    struct pending *ready = grant_take_grants(&d->pending, h);
    while (ready) {
        struct pending *p = ready;
        ready = p->next;
        p->c->outstanding--;
        grant(p->c, h, p->seq, &p->req, false);
        free(p);
    }
    grant_queue_changed(&d->pending, &d->workers);
}

static int handle_goodbye(struct conn *c, uint64_t seq)
{
    Heapd__Goodbye gb = HEAPD__GOODBYE__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    if (c->heap) {
        client_leaves(c, c->heap, false);
        c->gone = true;
    }
    env.body_case = HEAPD__ENVELOPE__BODY_GOODBYE;
    env.goodbye = &gb;
    return conn_reply(c, &env, seq);
}

void session_closed(struct conn *c)
{
    struct heap *h = c->heap;

    grant_drop(&c->d->pending, &c->d->workers, c);
    c->outstanding = 0;
    if (!h || c->gone)
        return;
    client_leaves(c, h, true);
    log_info("client %llu (%s, pid %d) went away without saying goodbye; "
             "its segments are orphaned", (unsigned long long)c->id,
             c->name, (int)c->peer.pid);
}

/* heapctl drop (Note [Heaps heapd cannot adopt] in adopt.c): root or
 * heapd's own user only, as the store is theirs. */
static int handle_drop(struct conn *c, uint64_t seq,
                       const Heapd__DropRequest *r)
{
    struct daemon *d = c->d;
    char shown[4 * CONFIG_HEAP_NAME_MAX + 1], why[512];
    log_escape(shown, sizeof shown, r->heap ? r->heap : "");
    if (!c->privileged) {
        d->requests_refused++;
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_DENIED,
                                "uid %u may not drop heap '%s': only root "
                                "or heapd's own user may", c->peer.uid,
                                shown);
    }
    if (d->stopping)
        return conn_reply_error(c, seq,
                                HEAPD__ERROR_CODE__ERROR_SHUTTING_DOWN,
                                "heapd is stopping; drop heap '%s' after "
                                "it starts again", shown);
    int rc = adopt_drop(d, r->heap ? r->heap : "", why, sizeof why);
    if (rc == -ENOENT)
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_NO_SUCH_HEAP,
                                "%s", why);
    if (rc < 0)
        return conn_reply_error(c, seq, HEAPD__ERROR_CODE__ERROR_INTERNAL,
                                "%s", why);
    Heapd__DropReply dr = HEAPD__DROP_REPLY__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    env.body_case = HEAPD__ENVELOPE__BODY_DROP_REPLY;
    env.drop_reply = &dr;
    return conn_reply(c, &env, seq);
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
    if (c->gone) { /* Note [Client lifecycle]: it holds nothing any more */
        c->d->frames_rejected++;
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                  "%s after goodbye", frame_body_name(env));
        return -EPROTO;
    }
    if (c->unlisted && env->body_case != HEAPD__ENVELOPE__BODY_STATS_REQUEST &&
        env->body_case != HEAPD__ENVELOPE__BODY_GOODBYE) {
        /* Note [Admission] in server.c: stats only */
        c->d->requests_refused++;
        return conn_reply_error(c, env->seq, HEAPD__ERROR_CODE__ERROR_DENIED,
                           "uid %u gid %u is on no heap's ACL and may only "
                           "read stats (%s refused); add the user to "
                           "allow_users or a group to allow_groups of a "
                           "heap in %s", (unsigned)c->peer.uid,
                           (unsigned)c->peer.gid, frame_body_name(env),
                           c->d->cfg.path);
    }
    switch (env->body_case) {
    case HEAPD__ENVELOPE__BODY_STATS_REQUEST:
        return handle_stats(c, env->seq);
    case HEAPD__ENVELOPE__BODY_COLLECT_REQUEST:
        return handle_collect(c, env->seq, env->collect_request);
    case HEAPD__ENVELOPE__BODY_ATTACH_REQUEST:
        return handle_attach(c, env->seq, env->attach_request);
    case HEAPD__ENVELOPE__BODY_DETACH_REQUEST:
        return handle_detach(c, env->seq, env->detach_request);
    case HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST:
        return handle_segment_request(c, env->seq, env->segment_request);
    case HEAPD__ENVELOPE__BODY_SEGMENT_RETURN:
        return handle_segment_return(c, env->segment_return);
    case HEAPD__ENVELOPE__BODY_URS_BATCH:
        return handle_urs_batch(c, env->urs_batch);
    case HEAPD__ENVELOPE__BODY_GLOBAL_CLAIM:
        return handle_global_claim(c, env->seq, env->global_claim);
    case HEAPD__ENVELOPE__BODY_GLOBAL_DELETE:
        return handle_global_delete(c, env->seq, env->global_delete);
    case HEAPD__ENVELOPE__BODY_GLOBAL_INIT_DONE:
        return handle_global_init_done(c, env->seq, env->global_init_done);
    case HEAPD__ENVELOPE__BODY_GLOBALS_REQUEST:
        return handle_globals_request(c, env->seq);
    case HEAPD__ENVELOPE__BODY_CLIENTS_REQUEST:
        return report_clients(c, env->seq);
    case HEAPD__ENVELOPE__BODY_DROP_REQUEST:
        return handle_drop(c, env->seq, env->drop_request);
    case HEAPD__ENVELOPE__BODY_SAVE_REQUEST:
        return handle_save(c, env->seq, env->save_request);
    case HEAPD__ENVELOPE__BODY_LOAD_REQUEST:
        return handle_load(c, env->seq, env->load_request);
    case HEAPD__ENVELOPE__BODY_SEGMENTS_REQUEST:
        return report_segments(c, env->seq, env->segments_request);
    case HEAPD__ENVELOPE__BODY_REMARK_DONE:
        remark_done(c, env->remark_done);
        return 0;
    case HEAPD__ENVELOPE__BODY_GOODBYE:
        return handle_goodbye(c, env->seq);
    default:
        c->d->frames_rejected++;
        conn_fail(c, HEAPD__ERROR_CODE__ERROR_UNEXPECTED,
                  "unexpected %s message from a client", frame_body_name(env));
        return -EPROTO;
    }
}
