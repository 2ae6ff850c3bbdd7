/* Named global roots, daemon side.  See Note [Global roots] in
 * proto/layout.h: the daemon creates, deletes and releases entries, keeps
 * its own record of each (h->globals) and writes the shared names, states
 * and owners (read-only to clients) from it; clients read and write values
 * directly, and the initialiser ends its init with GlobalInitDone. */
#include "globals.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "futex.h"
#include "heap.h"
#include "log.h"
#include "mark.h"
#include "kept.h"

static void set_state(struct layout_global *g, uint32_t st)
{
    atomic_store(&g->state, st);
    atomic_fetch_add(&g->wake, 1);
    futex_wake_all(&g->wake);
}

static int check_name(const char *name)
{
    size_t len = strlen(name);
    if (len == 0)
        return -EINVAL;
    if (len >= LAYOUT_GLOBAL_NAME)
        return -ENAMETOOLONG;
    return 0;
}

/* The record's entry named NAME, or -1. */
static int find(const struct heap *h, const char *name)
{
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++)
        if (h->globals[i].state != LAYOUT_GLOBAL_EMPTY &&
            strncmp(h->globals[i].name, name, LAYOUT_GLOBAL_NAME) == 0)
            return (int)i;
    return -1;
}

int globals_claim(struct heap *h, uint64_t client, const char *name, bool once,
                  uint32_t *index, enum globals_role *role)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct heap_global *r;
    struct layout_global *g;
    int rc, i;

    if ((rc = check_name(name)) < 0)
        return rc;
    if ((i = find(h, name)) < 0) {
        /* an entry deleted since the last snapshot is reused only for its
         * own name: a store that raced its delete was meant for that name
         * (a loop that deletes and sets one name again fills no table) */
        for (unsigned k = 0; k < LAYOUT_MAX_GLOBALS && i < 0; k++)
            if (h->globals[k].state == LAYOUT_GLOBAL_EMPTY &&
                h->globals[k].deleted &&
                strncmp(h->globals[k].name, name, LAYOUT_GLOBAL_NAME) == 0)
                i = (int)k;
        for (unsigned k = 0; k < LAYOUT_MAX_GLOBALS && i < 0; k++)
            if (h->globals[k].state == LAYOUT_GLOBAL_EMPTY &&
                !h->globals[k].deleted)
                i = (int)k;
        if (i < 0)
            return -ENOSPC;
        r = &h->globals[i];
        g = &h->control->globals[i];
        r->deleted = false;
        memset(r->name, 0, sizeof r->name);
        memcpy(r->name, name, strlen(name));
        r->state = once ? LAYOUT_GLOBAL_INITIALIZING : LAYOUT_GLOBAL_SET;
        r->owner = once ? client : 0;
        memcpy(g->name, r->name, LAYOUT_GLOBAL_NAME);
        atomic_store(&h->control->global_values[i], NULL);
        g->owner = r->owner;
        r->static_flag = h->static_flag; /* created black (the Note) */
        set_state(g, r->state);
        *role = once ? GLOBALS_INITIALIZE : GLOBALS_READY;
        *index = (uint32_t)i;
        return 0;
    }
    r = &h->globals[i];
    g = &h->control->globals[i];
    *index = (uint32_t)i;
    switch (r->state) {
    case LAYOUT_GLOBAL_INITIALIZING:
        *role = GLOBALS_WAIT;
        break;
    case LAYOUT_GLOBAL_RELEASED:
        if (once) {
            r->state = LAYOUT_GLOBAL_INITIALIZING;
            r->owner = g->owner = client;
            *role = GLOBALS_INITIALIZE;
        } else {
            r->state = LAYOUT_GLOBAL_SET;
            atomic_store(&h->control->global_values[i], NULL);
            *role = GLOBALS_READY;
        }
        set_state(g, r->state);
        break;
    default:
        *role = GLOBALS_READY;
        break;
    }
    return 0;
}

int globals_delete(struct heap *h, const char *name)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct layout_global *g;
    int rc, i;

    if ((rc = check_name(name)) < 0)
        return rc;
    if ((i = find(h, name)) < 0)
        return -ENOENT;
    if (h->globals[i].state == LAYOUT_GLOBAL_INITIALIZING)
        return -EBUSY;
    g = &h->control->globals[i];
    /* Between the snapshot and the collector's root marking, the value is
     * a root of the cycle that nobody has marked: mark the roots now (a
     * second mark_roots in the cycle takes nothing twice).  Afterwards,
     * the value is one stored during marking, and every value it replaced
     * was logged by its writer's barrier (Note [Global roots]). */
    if (h->marking && h->globals[i].static_flag != h->static_flag)
        mark_roots(h->marking);
    /* the name stays in the record: only it may reuse the entry before
     * the next snapshot */
    h->globals[i].state = LAYOUT_GLOBAL_EMPTY;
    h->globals[i].owner = 0;
    h->globals[i].deleted = true;
    set_state(g, LAYOUT_GLOBAL_EMPTY); /* lookups skip it from here on */
    memset(g->name, 0, sizeof g->name);
    atomic_store(&h->control->global_values[i], NULL);
    g->owner = 0;
    return 0;
}

int globals_init_done(struct heap *h, uint64_t client, uint32_t index,
                      bool ok)
{
    ASSERT_LOCK_HELD(&h->lock);
    struct heap_global *r;
    struct layout_global *g;

    /* whoever asks, the record says who initialises the entry (Note
     * [Global roots]) */
    if (index >= LAYOUT_MAX_GLOBALS ||
        h->globals[index].state != LAYOUT_GLOBAL_INITIALIZING ||
        h->globals[index].owner != client) {
        h->stats.globals_init_refused++;
        /* one line for the first and then for every power of two: a
         * client that sends them in a loop cannot fill the log */
        if ((h->stats.globals_init_refused &
             (h->stats.globals_init_refused - 1)) == 0)
            log_info("heap '%s': client %llu ended the init of global entry "
                     "%u, which it is not initialising; refused (%llu so "
                     "far): a client of this heap sends global_init_done "
                     "for others' globals", h->cfg->name,
                     (unsigned long long)client, index,
                     (unsigned long long)h->stats.globals_init_refused);
        return -EPERM;
    }
    r = &h->globals[index];
    g = &h->control->globals[index];
    r->state = ok ? LAYOUT_GLOBAL_SET : LAYOUT_GLOBAL_RELEASED;
    r->owner = 0;
    g->owner = 0;
    if (!ok) /* the blackhole is garbage now */
        atomic_store(&h->control->global_values[index], NULL);
    set_state(g, r->state);
    return 0;
}

void globals_release_owner(struct heap *h, uint64_t client)
{
    ASSERT_LOCK_HELD(&h->lock);
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++) {
        struct heap_global *r = &h->globals[i];
        struct layout_global *g = &h->control->globals[i];
        if (r->state != LAYOUT_GLOBAL_INITIALIZING || r->owner != client)
            continue;
        log_info("heap '%s': client %llu left while initialising global "
                 "'%.63s'; the next caller runs init again", h->cfg->name,
                 (unsigned long long)client, r->name);
        r->state = LAYOUT_GLOBAL_RELEASED;
        r->owner = 0;
        /* the blackhole is garbage now */
        atomic_store(&h->control->global_values[i], NULL);
        g->owner = 0;
        set_state(g, LAYOUT_GLOBAL_RELEASED);
    }
}

void globals_snapshot(struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    /* every mutator is stopped outside any lookup-to-store window, so no
     * store meant for a deleted entry can land in its next tenant */
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++)
        h->globals[i].deleted = false;
    h->static_flag ^= 1;
}

int globals_recover(struct heap *h, const struct resume_client *kept,
                    char *why, size_t n)
{
    ASSERT_LOCK_HELD(&h->lock);
    /* Note [The live table] in table.c: each record is checked, then the
     * shared table is written again from it */
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++) {
        struct heap_global *r = &h->globals[i];
        if (r->state > LAYOUT_GLOBAL_RELEASED ||
            memchr(r->name, 0, sizeof r->name) == NULL ||
            (r->state != LAYOUT_GLOBAL_EMPTY && check_name(r->name) < 0)) {
            snprintf(why, n, "global entry %u of its table is in state %u "
                     "with no proper name, which no heapd writes", i,
                     r->state);
            return -EINVAL;
        }
        /* a deleted entry stays out of reuse until the next snapshot: a
         * kept client may be between a lookup and a store (claim) */
        r->deleted = r->state == LAYOUT_GLOBAL_EMPTY && r->deleted;
        r->static_flag = 0; /* unmarked: the next snapshot flips the heap's */
    }
    int released = 0;
    h->static_flag = 0;
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++) {
        struct heap_global *r = &h->globals[i];
        bool keep = false;
        for (const struct resume_client *c = kept; c && !keep; c = c->next)
            keep = c->id == r->owner;
        if (r->state == LAYOUT_GLOBAL_INITIALIZING && !keep) {
            globals_release_owner(h, r->owner); /* its client is gone */
            released++;
        }
    }
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++) {
        struct heap_global *r = &h->globals[i];
        struct layout_global *g = &h->control->globals[i];
        if (r->state == LAYOUT_GLOBAL_EMPTY) {
            memset(g->name, 0, sizeof g->name);
            atomic_store(&h->control->global_values[i], NULL);
        } else {
            memcpy(g->name, r->name, LAYOUT_GLOBAL_NAME);
        }
        if (r->state == LAYOUT_GLOBAL_RELEASED)
            atomic_store(&h->control->global_values[i], NULL);
        g->owner = r->owner;
        set_state(g, r->state);
    }
    return released;
}
