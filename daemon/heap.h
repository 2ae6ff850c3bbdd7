/* The daemon's side of a shared heap: its memfd, its mapping at the fixed
 * base, and its control area.  See Note [Heap mapping] in proto/layout.h. */
#ifndef HEAPD_DAEMON_HEAP_H
#define HEAPD_DAEMON_HEAP_H

#include <stdint.h>

#include "config.h"
#include "layout.h"

struct heap {
    const struct config_heap *cfg;
    int fd;                          /* sealed memfd, -1 when closed */
    void *base;                      /* == (void *)cfg->base when open */
    struct layout_control *control;  /* == base */
    unsigned clients;                /* mutator clients connected */
};

/* Create the memfd, seal it, map it at cfg->base and lay out the control
 * area.  Returns 0 or a negative errno after logging a message that names
 * the heap, the range and the config key to change (-EEXIST when the range
 * is already mapped in the daemon). */
int heap_open(struct heap *h, const struct config_heap *cfg);

/* Unmap and close.  Safe on a heap that failed to open or is closed. */
void heap_close(struct heap *h);

/* Bytes of the memfd backed by memory now (pages touched and not punched). */
uint64_t heap_committed_bytes(const struct heap *h);

#endif
