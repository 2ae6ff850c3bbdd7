/* Named global roots, daemon side.  See Note [Global roots] in
 * proto/layout.h.  Every function is called with heap->lock held. */
#ifndef HEAPD_DAEMON_GLOBALS_H
#define HEAPD_DAEMON_GLOBALS_H

#include <stdbool.h>
#include <stdint.h>

struct heap;

enum globals_role {
    GLOBALS_READY,       /* the entry is SET */
    GLOBALS_INITIALIZE,  /* the caller must run init */
    GLOBALS_WAIT,        /* another client runs init */
};

/* Find NAME or create it.  ONCE asks for the right to initialise it.
 * Returns 0 with *index and *role set, -ENAMETOOLONG, -EINVAL (empty name)
 * or -ENOSPC (the table is full). */
int globals_claim(struct heap *h, uint64_t client, const char *name, bool once,
                  uint32_t *index, enum globals_role *role);

/* CLIENT is gone: every entry it was initialising becomes RELEASED and its
 * waiters are woken, so one of them runs init again. */
void globals_release_owner(struct heap *h, uint64_t client);

/* Flip the heap's static flag at the start of a cycle (bump_static_flag). */
void globals_bump_flag(struct heap *h);

#endif
