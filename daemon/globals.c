/* Named global roots, daemon side.  See Note [Global roots] in
 * proto/layout.h: the daemon only creates entries and releases the ones a
 * dead client was initialising; clients read and write values directly. */
#include "globals.h"

#include <errno.h>
#include <string.h>

#include "futex.h"
#include "heap.h"
#include "log.h"

static void set_state(struct layout_global *g, uint32_t st)
{
    atomic_store(&g->state, st);
    atomic_fetch_add(&g->wake, 1);
    futex_wake_all(&g->wake);
}

int globals_claim(struct heap *h, uint64_t client, const char *name, bool once,
                  uint32_t *index, enum globals_role *role)
{
    struct layout_global *tab = h->control->globals, *g = NULL, *free_g = NULL;
    size_t len = strlen(name);

    if (len == 0)
        return -EINVAL;
    if (len >= LAYOUT_GLOBAL_NAME)
        return -ENAMETOOLONG;
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++) {
        uint32_t st = atomic_load(&tab[i].state);
        if (st == LAYOUT_GLOBAL_EMPTY) {
            if (!free_g)
                free_g = &tab[i];
        } else if (strncmp(tab[i].name, name, LAYOUT_GLOBAL_NAME) == 0) {
            g = &tab[i];
            break;
        }
    }
    if (!g) {
        if (!free_g)
            return -ENOSPC;
        g = free_g;
        memset(g->name, 0, sizeof g->name);
        memcpy(g->name, name, len);
        atomic_store(&g->value, NULL);
        g->owner = 0;
        g->static_flag = h->static_flag; /* created black (the Note) */
        if (once) {
            g->owner = client;
            set_state(g, LAYOUT_GLOBAL_INITIALIZING);
            *role = GLOBALS_INITIALIZE;
        } else {
            set_state(g, LAYOUT_GLOBAL_SET);
            *role = GLOBALS_READY;
        }
        *index = (uint32_t)(g - tab);
        return 0;
    }
    *index = (uint32_t)(g - tab);
    switch (atomic_load(&g->state)) {
    case LAYOUT_GLOBAL_INITIALIZING:
        *role = GLOBALS_WAIT;
        break;
    case LAYOUT_GLOBAL_RELEASED:
        if (once) {
            g->owner = client;
            set_state(g, LAYOUT_GLOBAL_INITIALIZING);
            *role = GLOBALS_INITIALIZE;
        } else {
            atomic_store(&g->value, NULL);
            set_state(g, LAYOUT_GLOBAL_SET);
            *role = GLOBALS_READY;
        }
        break;
    default:
        *role = GLOBALS_READY;
        break;
    }
    return 0;
}

void globals_release_owner(struct heap *h, uint64_t client)
{
    struct layout_global *tab = h->control->globals;
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++) {
        struct layout_global *g = &tab[i];
        if (atomic_load(&g->state) != LAYOUT_GLOBAL_INITIALIZING ||
            g->owner != client)
            continue;
        log_info("heap '%s': client %llu died initialising global '%.63s'; "
                 "the next caller runs init again", h->cfg->name,
                 (unsigned long long)client, g->name);
        atomic_store(&g->value, NULL); /* the blackhole is garbage now */
        g->owner = 0;
        set_state(g, LAYOUT_GLOBAL_RELEASED);
    }
}

void globals_bump_flag(struct heap *h)
{
    h->static_flag ^= 1;
}
