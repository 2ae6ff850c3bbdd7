/* Clients that outlive a restart of heapd.
 *
 * Note [Resuming clients]
 * ~~~~~~~~~~~~~~~~~~~~~~~
 * A mutator client does not lose its heap when heapd restarts cleanly
 * (SIGTERM, systemctl restart, an upgrade) under a service manager that
 * keeps the heap (Note [Heaps across restarts] in fdstore.c):
 *   - the exiting heapd stops listening, holds every collector (no cycle
 *     starts; the one under way ends, answered by the connected clients),
 *     and once all are idle suspends each mutator client: its record in
 *     the live table's registry (id, the token its Welcome carried, pid,
 *     uid, process start, name, bytes granted; each slot's client, region,
 *     bound and young generation) stays, its slots stay attached and its
 *     segments OWNED, and its connection closes with nothing given back;
 *     requests it had waiting are dropped (the client sends again what
 *     was never answered).  Its control memory is in the store
 *     (heapd.client.HEAP.ID) from its Welcome to its departure.  Then the
 *     table is sealed (Note [The live table] in table.c).  A client the
 *     registry had no room for (TABLE_CLIENTS on one heap) is not
 *     suspended but told to connect anew: nothing would keep it;
 *   - the next heapd, taking the table back, makes a record of each
 *     client the registry names (kept_of in table.c, the one place one is
 *     made) and attaches its slots again over the same windows if the
 *     store kept its control memory and its process still lives (pidfd,
 *     uid and start time: Note [Pidfd guard] in auth.c); the others leave
 *     as crashed ones (Note [Client lifecycle] in session.c).  No cycle
 *     starts while a client is kept: its stack and its ring are in memory
 *     the next heapd maps, but the remark requests of a cycle could not
 *     reach it;
 *   - the client reconnects by itself (Note [Reconnecting] in
 *     client/agent.c) with a Hello naming its id and token; a connection
 *     from the same pid and uid with both right becomes the client again
 *     (Welcome resumed, same id), anything else gets ERROR_NOT_RESUMED;
 *   - a kept client that has not resumed after reconnect_timeout, or whose
 *     process exits, leaves as a crashed one.
 * A killed heapd suspends nobody, but its registry names every client
 * connected at the kill with its token and slots, so the next heapd keeps
 * them the same way, from the same records; its verifying cycles then
 * wait until the kept clients are back (Note [Recovery cycles] in
 * collector.c).  The token is 16 bytes from getrandom: another process of
 * the same uid cannot take a client over by guessing it.
 */
#include "resume.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "auth.h"
#include "collector.h"
#include "daemon.h"
#include "fdstore.h"
#include "globals.h"
#include "grant.h"
#include "heap.h"
#include "log.h"
#include "remark.h"
#include "segment.h"
#include "slotmem.h"
#include "table.h"

void resume_new_token(uint8_t token[RESUME_TOKEN_BYTES])
{
    size_t got = 0;
    while (got < RESUME_TOKEN_BYTES) {
        ssize_t n = getrandom(token + got, RESUME_TOKEN_BYTES - got, 0);
        if (n > 0)
            got += (size_t)n;
        else if (n < 0 && errno != EINTR)
            abort(); /* getrandom cannot fail on a sized buffer */
    }
}

static void client_key(char *buf, size_t n, const struct heap *h,
                       uint64_t id)
{
    snprintf(buf, n, "%s.%llu", h->cfg->name, (unsigned long long)id);
}

void resume_register(struct heap *h, struct conn *c)
{
    char key[96];
    heap_lock(h);
    table_client_add(h, c->id, c->token, c->peer.pid, c->peer.uid,
                     c->peer.gid, c->start, c->name);
    heap_unlock(h);
    client_key(key, sizeof key, h, c->id);
    fdstore_keep("client", key, c->mem_fd, true);
}

void resume_unregister(struct heap *h, uint64_t id)
{
    ASSERT_LOCK_HELD(&h->lock);
    char key[96];
    table_client_remove(h, id);
    client_key(key, sizeof key, h, id);
    fdstore_forget("client", key);
}

unsigned resume_suspend_all(struct daemon *d)
{
    unsigned n = 0;
    for (struct conn *c = d->conns; c; c = c->next) {
        struct heap *h = c->heap;
        if (!h || c->gone || c->state != CONN_READY || c->mem_fd < 0)
            continue;
        heap_lock(h);
        bool listed = table_client_listed(h, c->id);
        heap_unlock(h);
        if (!listed) { /* the registry was full at its Welcome */
            conn_fail(c, HEAPD__ERROR_CODE__ERROR_SHUTTING_DOWN,
                      "heapd is shutting down, and its table had no room "
                      "to keep this client; connect anew");
            continue;
        }
        /* its record stays in the registry for the next heapd, its
         * control memory in the store since its Welcome */
        grant_drop(&d->pending, &d->workers, c);
        c->outstanding = 0;
        c->gone = true; /* it gives nothing back: Note [Resuming clients] */
        conn_finish(c);
        n++;
    }
    return n;
}

/* R leaves its heap as a crashed client: WHY for the log.  ATTACHED: its
 * slots were attached again. */
static void drop(struct daemon *d, struct resume_client *r, bool attached,
                 const char *why)
{
    struct heap *h = r->heap;
    heap_lock(h);
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        if (!(r->slots[i / 64] >> (i % 64) & 1))
            continue;
        table_slot_set(h, i, 0, 0, 0);
        table_slot_young(h, i, 0, 0);
        if (attached) {
            grant_free_slot(h, r->slots, i, r->mem_fd);
        } else { /* kept_of's records, never attached */
            h->owners[i].young_bytes = 0;
            h->owners[i].young_age = 0;
        }
    }
    seg_orphan(h, r->id);
    remark_client_gone(h, r->id);
    globals_release_owner(h, r->id);
    h->stats.clients_crashed++;
    assert(grant_check_slots(h)); /* Note [Checking mutator slots] */
    heap_unlock(h);
    seg_punch_strays(h); /* Note [Free memory stays free] */
    log_info("heap '%s': client %llu (%s, pid %d) kept across the restart "
             "%s; its segments are orphaned", h->cfg->name,
             (unsigned long long)r->id, r->name, (int)r->pid, why);
    heap_lock(h);
    resume_unregister(h, r->id);
    heap_unlock(h);
    if (r->mem_fd >= 0)
        close(r->mem_fd);
    if (r->pidfd >= 0)
        close(r->pidfd);
    (void)d;
    free(r);
}

/* Attach R's slots again over their windows (heap->owners holds their
 * records from the table, young generations included).  With heap->lock
 * held. */
static int attach_again(struct heap *h, struct resume_client *r)
{
    ASSERT_LOCK_HELD(&h->lock);
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
        if (!(r->slots[i / 64] >> (i % 64) & 1))
            continue;
        struct heap_slot_owner *o = &h->owners[i];
        int rc = slotmem_map(h, i, r->mem_fd, o->region);
        if (rc < 0)
            return rc;
        o->pid = r->pid;
        o->uid = r->uid;
        snprintf(o->name, sizeof o->name, "%s", r->name);
        atomic_store(&o->fault, SLOT_FAULT_NONE);
        atomic_store(&o->stall_since, 0);
        atomic_store(&o->stall_on, LAYOUT_STALL_NONE);
        /* Note [Stop the world]: no stop is under way */
        atomic_store(&heap_slot(h, i)->stop_request, 0);
        atomic_store_explicit(&o->client_id, r->id, memory_order_release);
        h->mutators++;
    }
    return 0;
}

void resume_adopt(struct daemon *d, struct heap *h,
                  struct resume_client *list, struct fdstore *fds)
{
    while (list) {
        struct resume_client *r = list;
        char key[96];
        list = r->next;
        r->next = NULL;
        r->heap = h;
        if (r->id >= d->next_client_id)
            d->next_client_id = r->id;
        client_key(key, sizeof key, h, r->id);
        r->mem_fd = fdstore_take(fds, "client", key);
        if (r->mem_fd < 0) {
            drop(d, r, false, "has no control memory in the store");
            continue;
        }
        r->pidfd = auth_process_pidfd(r->pid, r->uid, r->start);
        if (r->pidfd < 0) {
            r->pidfd = -1;
            drop(d, r, false, "did not live through it");
            continue;
        }
        heap_lock(h);
        int rc = attach_again(h, r);
        heap_unlock(h);
        if (rc < 0) {
            drop(d, r, true, "could not have its slots mapped again");
            continue;
        }
        r->since = uv_now(&d->loop);
        r->next = d->suspended;
        d->suspended = r;
        collector_hold(h, true);
        log_info("heap '%s': client %llu (%s, pid %d) is kept for %llu ms "
                 "to resume", h->cfg->name, (unsigned long long)r->id,
                 r->name, (int)r->pid,
                 (unsigned long long)h->cfg->reconnect_timeout_ms);
    }
}

bool resume_take(struct daemon *d, struct heap *h, struct conn *c,
                 uint64_t id, const uint8_t *token, size_t token_len)
{
    for (struct resume_client **p = &d->suspended; *p; p = &(*p)->next) {
        struct resume_client *r = *p;
        if (r->heap != h || r->id != id)
            continue;
        if (token_len != RESUME_TOKEN_BYTES ||
            memcmp(token, r->token, RESUME_TOKEN_BYTES) != 0 ||
            c->peer.pid != r->pid || c->peer.uid != r->uid)
            return false;
        *p = r->next;
        c->id = r->id;
        memcpy(c->token, r->token, sizeof c->token);
        c->start = r->start;
        c->held = r->held;
        c->granted = r->granted;
        c->slots[0] = r->slots[0];
        c->slots[1] = r->slots[1];
        c->mem_fd = r->mem_fd;
        heap_lock(h);
        h->stats.clients_resumed++;
        table_save_stats(h); /* a kill before the next cycle keeps it */
        heap_unlock(h);
        log_info("heap '%s': client %llu (%s, pid %d) resumed after %llu ms",
                 h->cfg->name, (unsigned long long)r->id, r->name,
                 (int)r->pid,
                 (unsigned long long)(uv_now(&d->loop) - r->since));
        close(r->pidfd); /* its control memory stays in the store */
        free(r);
        collector_hold(h, false);
        return true;
    }
    return false;
}

bool resume_keeps(const struct daemon *d, const struct heap *h)
{
    for (const struct resume_client *r = d->suspended; r; r = r->next)
        if (r->heap == h)
            return true;
    return false;
}

void resume_watch(struct daemon *d, uint64_t now)
{
    for (struct resume_client **p = &d->suspended; *p;) {
        struct resume_client *r = *p;
        struct pollfd pf = {.fd = r->pidfd, .events = POLLIN};
        bool exited = poll(&pf, 1, 0) > 0;
        bool late = now - r->since > r->heap->cfg->reconnect_timeout_ms;
        if (!exited && !late) {
            p = &r->next;
            continue;
        }
        *p = r->next;
        struct heap *h = r->heap;
        drop(d, r, true, exited ? "exited before it resumed"
                                : "did not resume within reconnect_timeout");
        collector_hold(h, false);
    }
}

void resume_free_all(struct daemon *d)
{
    while (d->suspended) {
        struct resume_client *r = d->suspended;
        d->suspended = r->next;
        if (r->mem_fd >= 0)
            close(r->mem_fd);
        if (r->pidfd >= 0)
            close(r->pidfd);
        free(r);
    }
}
