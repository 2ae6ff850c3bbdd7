/* The daemon's state of a heap, saved at a clean exit and taken back by
 * the next heapd (Note [Saved state] in state.c, Note [Heaps across
 * restarts] in fdstore.c). */
#ifndef HEAPD_DAEMON_STATE_H
#define HEAPD_DAEMON_STATE_H

#include <stddef.h>

struct heap;
struct resume_client;

/* 3: each kept slot's nursery (Note [Nurseries] in proto/young.h) */
#define STATE_VERSION 3u

/* With no cycle under way, every client gone or suspended (KEPT, a list
 * over all heaps: those of H are saved, Note [Resuming clients] in
 * resume.c): a memfd holding H's state, or a negative errno. */
int state_save(struct heap *h, const struct resume_client *kept);

/* Take H's state back from FD into H, which heap_open mapped over the
 * kept memfds; *KEPT gets the suspended clients' records (malloc'd, for
 * resume_adopt).  Returns 0, or a negative errno with WHY (of N bytes) set
 * to a sentence saying what is wrong with the state. */
int state_restore(struct heap *h, int fd, char *why, size_t n,
                  struct resume_client **kept);

#endif
