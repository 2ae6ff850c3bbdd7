/* The live table: the daemon's records of a heap kept in a daemon-only
 * memfd, so that they outlive heapd however it ends; the one format a
 * restart reads, after a clean stop (sealed) or a kill.  See Note [The
 * live table] in table.c. */
#ifndef HEAPD_DAEMON_TABLE_H
#define HEAPD_DAEMON_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The live table's version (Note [The live table] in table.c); heapd
 * --version says it.
 * 3: a slot's nursery (young_first, young_segs, young_age)
 * 4: the clean record (Note [The live table]), appended to the header
 * 5: a slot's young budget and age instead of its nursery */
#define TABLE_VERSION 5u

struct heap;
struct resume_client;

/* A new heap's table: a memfd sized for H's geometry (seg_init ran),
 * mapped, its header written, and H's segment records, bitmaps and
 * globals' records pointed into it.  Returns 0 or a negative errno. */
int table_create(struct heap *h);

/* The table of a heap the service manager kept (FD, taken over: closed
 * on failure): mapped and pointed into as table_create does, if its header
 * is of this heapd's version, H's geometry and this heapd's record sizes
 * (Note [The live table]).  Stores nothing else into it (table_take_back
 * reads it first).  Returns 0, or -EINVAL with WHY (N bytes) saying what
 * disagreed. */
int table_adopt(struct heap *h, int fd, char *why, size_t n);

/* The adopted table taken back (Note [The live table]), under
 * heap->lock, which it takes, whether the heapd before stopped cleanly or
 * was killed: the counters, the
 * registry's clients (*KEPT, for resume_adopt: what they hold is left
 * theirs), the segment records repaired and recounted (seg_recover), the
 * globals' records (globals_recover), the control area's phase, the last
 * stop generation.  *CLEAN: the table was sealed at a clean stop and
 * proved so, and needs no verifying cycles; false: it is recovered as
 * after a kill, and the caller runs them (Note [Recovery cycles] in
 * collector.c).  Returns 0, or a negative errno with WHY saying what
 * cannot be proved (*KEPT then NULL). */
int table_take_back(struct heap *h, char *why, size_t n,
                    struct resume_client **kept, bool *clean);

/* At a clean exit, collectors stopped and every mutator client gone or
 * suspended (its registry record kept): seal H's table for the next
 * heapd (Note [The live table]).  A heap refused, or whose verifying
 * cycles have not passed, is not sealed: the next heapd proves it again.
 * Returns true if sealed.  Nothing may store into the table after it. */
bool table_seal(struct heap *h);

/* With heap->lock held: the registry's records of a mutator client
 * welcomed, gone, or granted GRANTED bytes so far; slot SLOT attached to
 * CLIENT (0: freed). */
#define TABLE_CLIENTS 1024u /* LAYOUT_LIVE_CLIENTS: Note [Live clients] */
void table_client_add(struct heap *h, uint64_t id, const uint8_t *token,
                      pid_t pid, uid_t uid, gid_t gid, uint64_t start,
                      const char *name);
void table_client_remove(struct heap *h, uint64_t id);
/* With heap->lock held: does the registry name client ID (a client heapd
 * can keep)? */
bool table_client_listed(struct heap *h, uint64_t id);
void table_client_granted(struct heap *h, uint64_t id, uint64_t granted);
void table_slot_set(struct heap *h, unsigned slot, uint64_t client,
                    unsigned region, uint64_t alloc_bound);
/* With heap->lock held: slot SLOT's young generation (Note [Young
 * budgets] in heap.h): its nursery budget BYTES (0: not young),
 * promoting at AGE. */
void table_slot_young(struct heap *h, unsigned slot, uint64_t bytes,
                      uint32_t age);
/* The collector thread asked stop generation GEN. */
void table_stop_gen(struct heap *h, uint32_t gen);

/* With heap->lock held, at a cycle's end: copy the counters into the
 * table. */
void table_save_stats(struct heap *h);

/* Unmap and close (safe when never opened); debug builds check that a
 * sealed table was not stored into after table_seal. */
void table_close(struct heap *h);

#endif
