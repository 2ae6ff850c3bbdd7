/* What the service manager keeps for heapd across a restart: each heap's
 * memfds and its live table, and each mutator client's control memory
 * (Note [Heaps across restarts] in fdstore.c).  Loop thread, at start and
 * at exit. */
#ifndef HEAPD_DAEMON_FDSTORE_H
#define HEAPD_DAEMON_FDSTORE_H

#include <stdbool.h>

#define FDSTORE_MAX 4096 /* FileDescriptorStoreMax= in heapd.service */

/* The descriptors heapd was started with (sd_listen_fds_with_names). */
struct fdstore {
    int listeners[4];           /* listening Unix stream sockets */
    unsigned n_listeners;
    struct {
        char name[128];         /* FDNAME: heapd.heap.H, heapd.page.H, ... */
        int fd;
    } kept[FDSTORE_MAX];
    unsigned n_kept;
};

/* Take the descriptors passed at start: sockets apart, heapd's own by
 * name; anything else is closed with a warning.  Returns 0 or -errno. */
int fdstore_collect(struct fdstore *s);

/* The descriptor kept as KIND (heap, page, table, client) of HEAP, taken
 * out of S (the caller owns it), or -1. */
int fdstore_take(struct fdstore *s, const char *kind, const char *heap);

/* Ask the service manager to keep FD as KIND of HEAP (no-op without
 * one); forget every FD it keeps under that name first if REPLACE. */
void fdstore_keep(const char *kind, const char *heap, int fd, bool replace);
/* Ask it to forget what it keeps as KIND of HEAP. */
void fdstore_forget(const char *kind, const char *heap);

/* Leave in the store what it kept of HEAP (its memfds, its table, its
 * clients' control memory): close heapd's copies, ask nothing of the
 * service manager (Note [Heaps heapd cannot adopt] in adopt.c). */
void fdstore_leave(struct fdstore *s, const char *heap);
/* Ask the service manager to forget every descriptor of HEAP it passed
 * at start (heapctl drop). */
void fdstore_forget_heap(const struct fdstore *s, const char *heap);

/* Close what nobody took. */
void fdstore_close_rest(struct fdstore *s);

#endif
