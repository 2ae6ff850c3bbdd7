/* The daemon's state of a heap, saved at a clean exit and taken back by
 * the next heapd (Note [Saved state] in state.c, Note [Heaps across
 * restarts] in fdstore.c). */
#ifndef HEAPD_DAEMON_STATE_H
#define HEAPD_DAEMON_STATE_H

#include <stddef.h>

struct heap;

#define STATE_VERSION 1u

/* With no client connected and no cycle under way: a memfd holding H's
 * state, or a negative errno. */
int state_save(struct heap *h);

/* Take H's state back from FD into H, which heap_open mapped over the
 * kept memfds.  Returns 0, or a negative errno with WHY (of N bytes) set
 * to a sentence saying what is wrong with the state. */
int state_restore(struct heap *h, int fd, char *why, size_t n);

#endif
