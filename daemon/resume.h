/* Clients that outlive a restart of heapd: suspended at a clean exit,
 * kept by the next heapd until they resume or reconnect_timeout passes.
 * See Note [Resuming clients] in resume.c. */
#ifndef HEAPD_DAEMON_RESUME_H
#define HEAPD_DAEMON_RESUME_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kept.h"
#include "layout.h"

struct conn;
struct daemon;
struct fdstore;
struct heap;


/* A new mutator client's token (getrandom). */
void resume_new_token(uint8_t token[RESUME_TOKEN_BYTES]);

/* A mutator client C of H is welcomed (resume_register, which takes
 * heap->lock): its record into the live table's registry, its control
 * memory into the service manager's store (heapd.client.HEAP.ID), so
 * that a heapd killed from now on leaves it to the next.
 * resume_unregister, with heap->lock held: it is gone. */
void resume_register(struct heap *h, struct conn *c);
void resume_unregister(struct heap *h, uint64_t id);

/* At a clean exit, once every collector is idle and held: every mutator
 * client of D the live table's registry names leaves its connection but
 * not its heap: its record stays in the registry for the next heapd, its
 * control memory in the service manager's store, and its connection
 * closes without giving anything back (one the registry had no room for
 * is told to connect anew).  Returns the clients suspended. */
unsigned resume_suspend_all(struct daemon *d);

/* At start, after table_take_back gave LIST (the registry's records,
 * mem_fd and pidfd -1): each client whose control memory the store kept and whose
 * process lives is attached again to its slots, and kept until it
 * resumes; the others leave as crashed ones.  Takes LIST over. */
void resume_adopt(struct daemon *d, struct heap *h,
                  struct resume_client *list, struct fdstore *fds);

/* Does D keep a client of H for resuming? */
bool resume_keeps(const struct daemon *d, const struct heap *h);

/* Hello from C resumes client ID with TOKEN: if H keeps it for C's
 * process, C becomes it (its id, slots, segments, control memory) and
 * true is returned; false: no such client (C is left as it was). */
bool resume_take(struct daemon *d, struct heap *h, struct conn *c,
                 uint64_t id, const uint8_t *token, size_t token_len);

/* Loop thread, every stall tick: clients gone or past reconnect_timeout
 * leave as crashed ones. */
void resume_watch(struct daemon *d, uint64_t now);

/* At exit: what is still kept is let go (memory and descriptors only:
 * the registry still names it, for the next heapd). */
void resume_free_all(struct daemon *d);

#endif
