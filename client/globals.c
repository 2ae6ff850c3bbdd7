/* libheapd global roots: heapd_global_set/get/once/delete.  See Note
 * [Global roots] in proto/layout.h for the table and its states; the
 * daemon creates, deletes, releases and ends the init of entries, whose
 * names and states this library only reads, and answers from its own
 * record of them; only the values are written here. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "barrier.h"
#include "checked.h"
#include "client.h"
#include "clock.h"
#include "collections.h"
#include "errors.h"
#include "frame.h"
#include "futex.h"
#include "heapd.h"
#include "layout.h"
#include "minor.h"
#include "mutator.h"

/* The blackhole's raw bytes: what a debugger or heapctl sees while a
 * global is being initialised. */
struct blackhole {
    char magic[8];  /* "BLACKHOL" */
    int64_t pid;    /* the initialising process */
};

static int check_name(const char *name)
{
    if (!name || !name[0])
        return client_set_error(-EINVAL, "a global's name must not be empty");
    if (strlen(name) >= LAYOUT_GLOBAL_NAME)
        return client_set_error(-ENAMETOOLONG, "global name '%.20s...' is "
                                "%zu bytes; the limit is %d", name,
                                strlen(name), LAYOUT_GLOBAL_NAME - 1);
    return 0;
}

/* The value of entry G: the one word of a global a client writes, outside
 * the daemon's page (Note [Global roots]). */
static void *_Atomic *value_of(heapd_mutator *m, const struct layout_global *g)
{
    return &m->ctl->global_values[g - m->ctl->globals];
}

static struct layout_global *lookup(heapd_mutator *m, const char *name)
{
    struct layout_global *tab = m->ctl->globals;
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++) {
        uint32_t st = atomic_load_explicit(&tab[i].state, memory_order_acquire);
        if (st != LAYOUT_GLOBAL_EMPTY &&
            strncmp(tab[i].name, name, LAYOUT_GLOBAL_NAME) == 0)
            return &tab[i];
    }
    return NULL;
}

/* Ask the daemon for NAME's entry, *INDEX.  Returns the role (>= 0) or an
 * error. */
static int claim(heapd_mutator *m, const char *name, bool once,
                 uint32_t *index)
{
    Heapd__GlobalClaim gc = HEAPD__GLOBAL_CLAIM__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    int rc;

    gc.name = (char *)name;
    gc.once = once;
    req.body_case = HEAPD__ENVELOPE__BODY_GLOBAL_CLAIM;
    req.global_claim = &gc;
    if ((rc = mutator_call(m, &req, &rep)) < 0)
        return rc;
    if (rep->body_case != HEAPD__ENVELOPE__BODY_GLOBAL_CLAIMED) {
        rc = client_bad_reply(frame_body_name(&req), rep, NULL);
    } else if (rep->global_claimed->index >= LAYOUT_MAX_GLOBALS) {
        rc = client_bad_reply(frame_body_name(&req), rep, "entry %u of %u",
                              rep->global_claimed->index, LAYOUT_MAX_GLOBALS);
    } else {
        *index = rep->global_claimed->index;
        rc = (int)rep->global_claimed->role;
    }
    heapd__envelope__free_unpacked(rep, NULL);
    return rc;
}

/* Tell the daemon that this client's init of entry INDEX ended (OK: its
 * value is stored; else init failed): the daemon makes the entry SET or
 * RELEASED and wakes its waiters (Note [Global roots]).  Returns 0 or an
 * error. */
static int init_done(heapd_mutator *m, uint32_t index, bool ok)
{
    Heapd__GlobalInitDone gd = HEAPD__GLOBAL_INIT_DONE__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    int rc;

    gd.index = index;
    gd.ok = ok;
    req.body_case = HEAPD__ENVELOPE__BODY_GLOBAL_INIT_DONE;
    req.global_init_done = &gd;
    if ((rc = mutator_call(m, &req, &rep)) < 0)
        return rc;
    rc = rep->body_case == HEAPD__ENVELOPE__BODY_GLOBAL_INIT_ACK
             ? 0
             : client_bad_reply(frame_body_name(&req), rep, NULL);
    heapd__envelope__free_unpacked(rep, NULL);
    return rc;
}

/* True if G is still global NAME: a delete empties an entry and a later
 * claim may give it to another name (Note [Global roots]). */
static bool entry_is(struct layout_global *g, const char *name)
{
    return atomic_load_explicit(&g->state, memory_order_acquire) !=
               LAYOUT_GLOBAL_EMPTY &&
           strncmp(g->name, name, LAYOUT_GLOBAL_NAME) == 0;
}

int heapd_global_set(heapd_mutator *m, const char *name, void *ref)
{
    struct layout_global *g;
    bool parked = false;
    uint32_t index;
    int rc;

    if ((rc = check_name(name)) < 0)
        return rc;
    /* Note [Evicted clients, client side] in client/mutator.c */
    mutator_check_evicted(m);
    if (mutator_orphaned(m)) /* Note [A dead daemon] in client/mutator.c */
        return mutator_orphan_error(m);
    /* a global is shared: Note [The young invariant] in client/minor.c */
    ref = young_publish(m, ref);
    if (CHECKED(m->c)) /* Note [Checked mode] */
        checked_object(m->c, ref, true, "heapd_global_set", "REF");
    /* the safepoint first, REF parked through it and through the claim,
     * which waits for the daemon (Note [Values in flight]) */
    mutator_enter(m, ref, &parked);
    for (;;) {
        g = lookup(m, name);
        /* the state is the daemon's word (Note [Global roots]) */
        if (!g || atomic_load(&g->state) == LAYOUT_GLOBAL_RELEASED) {
            if (ref && !parked) {
                barrier_park(m, ref);
                parked = true;
            }
            rc = claim(m, name, false, &index);
            if (rc < 0)
                goto out;
            g = &m->ctl->globals[index];
            mutator_enter(m, ref, &parked);
        }
        if (atomic_load(&g->state) == LAYOUT_GLOBAL_INITIALIZING) {
            rc = client_set_error(-EBUSY, "global '%s' is being initialised "
                                  "by heapd_global_once", name);
            goto out;
        }
        /* while marking, the old value is logged first: another process
         * may have just read it (Note [Global roots]) */
        if (barrier_on(m))
            barrier_global_slow(m, value_of(m, g));
        /* no safepoint from this check to the store: a deleted entry is
         * reused only after a snapshot (Note [Global roots]) */
        if (entry_is(g, name))
            break;
    }
    atomic_store_explicit(value_of(m, g), ref, memory_order_release);
    rc = 0;
out:
    if (parked)
        barrier_unpark(m);
    return rc;
}

int heapd_global_delete(heapd_mutator *m, const char *name)
{
    Heapd__GlobalDelete gd = HEAPD__GLOBAL_DELETE__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    int rc;

    if (!m)
        return client_set_error(-EINVAL, "heapd_global_delete: NULL mutator");
    if ((rc = check_name(name)) < 0)
        return rc;
    /* the daemon empties the entry and keeps its old value alive for a
     * cycle that is marking: no barrier here (Note [Global roots]) */
    gd.name = (char *)name;
    req.body_case = HEAPD__ENVELOPE__BODY_GLOBAL_DELETE;
    req.global_delete = &gd;
    if ((rc = mutator_call(m, &req, &rep)) < 0)
        return rc;
    if (rep->body_case != HEAPD__ENVELOPE__BODY_GLOBAL_DELETED) {
        rc = client_bad_reply(frame_body_name(&req), rep, NULL);
        goto out;
    }
    switch (rep->global_deleted->result) {
    case HEAPD__GLOBAL_DELETE_RESULT__GLOBAL_DELETE_DONE:
        rc = 0;
        break;
    case HEAPD__GLOBAL_DELETE_RESULT__GLOBAL_DELETE_NO_SUCH:
        rc = client_set_error(-ENOENT, "no global named '%s' in this heap",
                              name);
        break;
    case HEAPD__GLOBAL_DELETE_RESULT__GLOBAL_DELETE_BUSY:
        rc = client_set_error(-EBUSY, "global '%s' is being initialised by "
                              "heapd_global_once; delete it after that "
                              "returns", name);
        break;
    default:
        rc = client_bad_reply(frame_body_name(&req), rep, "result %d",
                              (int)rep->global_deleted->result);
        break;
    }
out:
    heapd__envelope__free_unpacked(rep, NULL);
    return rc;
}

void *heapd_global_get(heapd_mutator *m, const char *name)
{
    struct layout_global *g = name ? lookup(m, name) : NULL;
    if (!g || atomic_load(&g->state) != LAYOUT_GLOBAL_SET)
        return NULL;
    return atomic_load_explicit(value_of(m, g), memory_order_acquire);
}

/* Note [Global roots]: a waiter asks the daemon after this long without
 * a change, then after twice as long, up to the maximum. */
#define ONCE_RECHECK_MIN_NS 10000000ull   /* 10 ms */
#define ONCE_RECHECK_MAX_NS 1000000000ull /* 1 s */

/* Sleep, blocked, until G is no longer being initialised (1), for about
 * TIMEOUT_NS at most (0), or until the connection is gone (an error:
 * Note [A dead daemon] in client/mutator.c, an initialiser that dies with
 * the daemon never changes G). */
static int wait_initialised(heapd_mutator *m, struct layout_global *g,
                            uint64_t timeout_ns)
{
    uint64_t t0 = monotonic_ns();
    int rc = 0;

    heapd_blocking_enter(m);
    for (;;) {
        uint32_t w = atomic_load(&g->wake);
        if (atomic_load(&g->state) != LAYOUT_GLOBAL_INITIALIZING) {
            rc = 1;
            break;
        }
        if (monotonic_ns() - t0 >= timeout_ns)
            break;
        /* init runs for as long as it likes: no spinning */
        if ((rc = agent_wait_word(&m->c->agent, &g->wake, w, 0)) < 0)
            break;
    }
    heapd_blocking_leave(m);
    return rc;
}

void *heapd_global_once(heapd_mutator *m, const char *name,
                        void *(*init)(heapd_mutator *, void *), void *arg)
{
    int rc;
    if ((rc = check_name(name)) < 0 || !init) {
        errno = rc < 0 ? -rc : EINVAL;
        return NULL;
    }
    mutator_poll(m); /* Note [Client GC discipline]: on entry */
    uint64_t patience = ONCE_RECHECK_MIN_NS;
    for (;;) {
        if (mutator_orphaned(m)) { /* Note [A dead daemon] */
            errno = client_errno(mutator_orphan_error(m));
            return NULL;
        }
        struct layout_global *g = lookup(m, name);
        uint32_t st = g ? atomic_load(&g->state) : LAYOUT_GLOBAL_EMPTY;
        if (st == LAYOUT_GLOBAL_SET)
            return atomic_load_explicit(value_of(m, g), memory_order_acquire);
        if (st == LAYOUT_GLOBAL_INITIALIZING) {
            rc = wait_initialised(m, g, patience);
            if (rc < 0) {
                errno = client_errno(rc);
                return NULL;
            }
            if (rc > 0)
                continue;
            /* no change for a while: the daemon answers from its record
             * (Note [Global roots]) */
            patience = patience * 2 < ONCE_RECHECK_MAX_NS
                           ? patience * 2 : ONCE_RECHECK_MAX_NS;
        }
        uint32_t index;
        rc = claim(m, name, true, &index);
        if (rc < 0) {
            errno = client_errno(rc);
            return NULL;
        }
        if (rc == HEAPD__GLOBAL_ROLE__GLOBAL_WAIT ||
            rc == HEAPD__GLOBAL_ROLE__GLOBAL_READY)
            continue; /* read it, or wait for it, above */
        g = &m->ctl->globals[index];

        /* this mutator initialises: a blackhole marks the entry as ours
         * in the heap itself, then init runs (it may allocate and collect;
         * the entry is a root all along) */
        struct blackhole *bh = heapd_alloc_shared(m, 0, sizeof *bh);
        if (bh) {
            memcpy(bh->magic, "BLACKHOL", 8);
            bh->pid = (int64_t)getpid();
            atomic_store_explicit(value_of(m, g), (void *)bh,
                                  memory_order_release);
        }
        void *result = bh ? init(m, arg) : NULL;
        /* Note [The young invariant] in client/minor.c */
        result = young_publish(m, result);
        if (!result) {
            int saved = bh ? errno : ENOMEM;
            atomic_store(value_of(m, g), NULL);
            /* the daemon releases it: the next caller retries */
            if ((rc = init_done(m, index, false)) < 0)
                saved = client_errno(rc);
            errno = saved ? saved : EAGAIN;
            return NULL;
        }
        /* RESULT is valid until the next safepoint, and a global is a
         * root: no barrier (Note [Client GC discipline]).  Once SET, the
         * entry may be overwritten while the daemon's answer is on its
         * way, a wait a cycle can pass: RESULT, which the caller gets,
         * is parked through it (Note [Values in flight]). */
        atomic_store_explicit(value_of(m, g), result, memory_order_release);
        bool parked = true;
        barrier_park(m, result);
        rc = init_done(m, index, true);
        if (rc >= 0)
            mutator_enter(m, result, &parked);
        barrier_unpark(m);
        if (rc < 0) {
            errno = client_errno(rc);
            return NULL;
        }
        return result;
    }
}

_Static_assert((int)HEAPD_GLOBAL_MAP == COLL_KIND_MAP &&
                   (int)HEAPD_GLOBAL_QUEUE == COLL_KIND_QUEUE &&
                   (int)HEAPD_GLOBAL_STRING == COLL_KIND_STRING,
               "heapd_global_kind is proto/collections.h's enum coll_kind");

/* See Note [Structs that grow] in client/abi.c: each entry is filled in
 * libheapd's own struct, then copied to the caller's, SIZE bytes apart. */
int heapd_globals_sized(heapd_client *c, heapd_global_info *caller,
                        size_t max, size_t *count, size_t size)
{
    Heapd__GlobalsRequest gr = HEAPD__GLOBALS_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;
    int rc;

    if (!c || (!caller && max) || !count)
        return client_set_error(-EINVAL, "heapd_globals: NULL argument");
    if (size < ABI_0_1_GLOBAL_INFO)
        return client_set_error(-EINVAL, "heapd_globals: entries of %zu "
                                "bytes are no heapd.h's; pass sizeof "
                                "heapd_global_info", size);
    req.body_case = HEAPD__ENVELOPE__BODY_GLOBALS_REQUEST;
    req.globals_request = &gr;
    if ((rc = agent_call(&c->agent, &req, &rep)) < 0)
        return rc;
    if (rep->body_case != HEAPD__ENVELOPE__BODY_GLOBALS_REPLY) {
        rc = client_bad_reply(frame_body_name(&req), rep, NULL);
        goto out;
    }
    const Heapd__GlobalsReply *r = rep->globals_reply;
    *count = r->n_globals;
    for (size_t i = 0; i < r->n_globals && i < max; i++) {
        const Heapd__GlobalInfo *g = r->globals[i];
        heapd_global_info o = {0};
        snprintf(o.name, sizeof o.name, "%s", g->name);
        o.state = (int)g->state;
        o.target = g->target;
        o.target_bytes = g->target_bytes;
        o.owner = g->owner;
        o.kind = g->kind <= HEAPD_GLOBAL_STRING ? (heapd_global_kind)g->kind
                                                : HEAPD_GLOBAL_OTHER;
        o.size = g->size;
        o.leases = g->leases;
        o.budget = g->budget;
        o.used = g->used;
        o.evictions = g->evictions;
        o.expirations = g->expirations;
        abi_out((char *)caller + i * size, size, &o, sizeof o);
    }
out:
    heapd__envelope__free_unpacked(rep, NULL);
    return rc;
}
