/* The live table: the daemon's records of a heap kept in a daemon-only
 * memfd, so that they outlive a heapd that is killed.  See Note [The live
 * table] in table.c. */
#ifndef HEAPD_DAEMON_TABLE_H
#define HEAPD_DAEMON_TABLE_H

#include <stddef.h>
#include <stdint.h>

struct heap;

/* A new heap's table: a memfd sized for H's geometry (seg_init ran),
 * mapped, its header written, and H's segment records, bitmaps and
 * globals' records pointed into it.  Returns 0 or a negative errno. */
int table_create(struct heap *h);

/* The table of a heap the service manager kept (FD, taken over: closed
 * on failure): mapped and pointed into as table_create does, if its header
 * matches H's geometry and this heapd's record sizes.  Returns 0, or
 * -EINVAL with WHY (N bytes) saying what disagreed. */
int table_adopt(struct heap *h, int fd, char *why, size_t n);

/* After a heapd was killed (Note [The live table]): the counters of the
 * last cycle that ended, the segment records repaired (seg_recover), the
 * globals' records (globals_recover), the control area's phase.  Returns 0,
 * or -EINVAL with WHY saying what cannot be proved. */
int table_recover(struct heap *h, char *why, size_t n);

/* heap->lock held, at a cycle's end: copy the counters into the table. */
void table_save_stats(struct heap *h);

/* Unmap and close (safe when never opened). */
void table_close(struct heap *h);

#endif
