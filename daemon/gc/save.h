/* Saving a heap at a cycle's snapshot.  See Note [Saving a heap at a
 * snapshot] in save.c; the file is Note [Saved heap files] in
 * proto/savefile.c. */
#ifndef HEAPD_DAEMON_SAVE_H
#define HEAPD_DAEMON_SAVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct heap;
struct save_job;

/* What a save did; heap->save_last[id % SAVE_OUTCOMES], written when the
 * saver ends. */
#define SAVE_OUTCOMES 8
struct save_result {
    uint64_t id;             /* the request's, from save_request */
    int rc;                  /* 0 or a negative errno */
    char why[512];           /* rc < 0: what went wrong, what to do */
    uint64_t objects, object_bytes, globals, file_bytes;
    uint64_t inexact;        /* objects copied as read, not as at the
                                snapshot (Note [Saving under the barrier]) */
    uint64_t bad_refs;       /* references not to an object: saved as 0 */
    uint64_t records;        /* save records the writers logged */
    uint64_t record_bytes_max; /* the memory they held at the end */
    uint64_t ns;             /* from the snapshot to the file's fsync */
    uint64_t sync_ns;        /* of which syncing and renaming it */
};

/* The loop thread asks for a save of H into PATH, written as TMP (opened
 * as FD, which the save now owns) and renamed to PATH once synced.
 * Returns the request's id (> 0), or -EBUSY with WHY (N bytes) when a
 * save of H is already asked for or running, or -ENOMEM.  The next cycle
 * that starts takes it; heap->save_last has its outcome once that cycle
 * has completed. */
int64_t save_request(struct heap *h, int fd, const char *path,
                     const char *tmp, char *why, size_t n);

/* The collector, in the snapshot pause with heap->lock held, after the
 * epoch moved to EPOCH: start the save asked for, if any. */
void save_snapshot(struct heap *h, uint8_t epoch);
/* The collector, once the roots are marked: the saver runs meanwhile. */
void save_start(struct heap *h);
/* The collector, before the cycle's first final sync: wait for the saver
 * and post its outcome (heap->save_last).  True if a save ran. */
bool save_finish(struct heap *h);

/* mark_urs, heap->lock held: a save record for OBJ, its N fields at
 * RING[AT..] (wrapping at LAYOUT_URS_SIZE). */
void save_take_record(struct heap *h, uintptr_t obj, void *_Atomic *ring,
                      uint64_t at, uint64_t n);

/* mark_urs, heap->lock held: a chunk of a wide object's record (Note
 * [Saving under the barrier] in client/barrier.c), N fields from field K
 * at RING[AT..], of the chunks that began at ring position FIRST of
 * SLOT; and the commit of those chunks. */
void save_take_chunk(struct heap *h, unsigned slot, uintptr_t obj,
                     uint64_t first, uint64_t k, void *_Atomic *ring,
                     uint64_t at, uint64_t n);
void save_take_commit(struct heap *h, unsigned slot, uintptr_t obj,
                      uint64_t first);
/* heap->lock held: SLOT is freed; a wide record its chunks were building
 * is dropped (the slot's next owner may begin at the same position). */
void save_slot_freed(struct heap *h, unsigned slot);

/* heapd is stopping: a save of H that runs ends at its next object,
 * failed, its file removed (a stop would otherwise wait for it). */
void save_abort(struct heap *h);

/* Free what a closing heap still holds of saves. */
void save_discard(struct heap *h);

#endif
