/* Named global roots, daemon side.  See Note [Global roots] in
 * proto/layout.h.  Every function runs with heap->lock held, and asserts
 * it (Note [Checked lock rules] in proto/lock.h); the daemon decides from
 * its record (struct heap_global in daemon/gc/heap.h), and writes the
 * shared table's names, states and owners from it. */
#ifndef HEAPD_DAEMON_GLOBALS_H
#define HEAPD_DAEMON_GLOBALS_H

#include <stdbool.h>
#include <stddef.h>
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

/* Empty global NAME so that the name can be created again and its entry
 * reused (after the next snapshot).  Returns 0, -ENOENT (no such global),
 * -EBUSY (being initialised), -ENAMETOOLONG or -EINVAL. */
int globals_delete(struct heap *h, const char *name);

/* CLIENT ends the init of entry INDEX: OK, it has stored the value and
 * the entry becomes SET; else init failed and the entry becomes RELEASED,
 * its value NULL.  Waiters are woken.  Returns 0, or -EPERM (counted in
 * globals_init_refused) unless the record says CLIENT initialises INDEX. */
int globals_init_done(struct heap *h, uint64_t client, uint32_t index,
                      bool ok);

/* CLIENT is gone: every entry the daemon granted it to initialise, and
 * that it has not finished, becomes RELEASED and its waiters are woken,
 * so one of them runs init again. */
void globals_release_owner(struct heap *h, uint64_t client);

/* The snapshot's part, mutators stopped: let deleted entries be reused,
 * and flip the heap's static flag (bump_static_flag). */
void globals_snapshot(struct heap *h);
/* Taking a table back (Note [The live table] in table.c): refuse
 * (-EINVAL, WHY of N bytes) a record no heapd writes; release the
 * entries clients were initialising, but KEPT's (a list: they may come
 * back), and return how many it released (a clean stop leaves none);
 * write the shared table again from the records. */
struct resume_client;
int globals_recover(struct heap *h, const struct resume_client *kept,
                    char *why, size_t n);

#endif
