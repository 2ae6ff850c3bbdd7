/* Loading a saved heap.  See Note [Loading a saved heap] in load.c. */
#ifndef HEAPD_DAEMON_LOAD_H
#define HEAPD_DAEMON_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct heap;

struct load_result {
    uint64_t objects, object_bytes, globals, file_bytes;
    uint64_t moved;          /* objects placed at another address */
    uint64_t ns;
};

/* Is H empty: no client, no segment in use, no global?  If not, WHY (N
 * bytes) says what it holds. */
bool load_heap_empty(struct heap *h, char *why, size_t n);

/* Open PATH, a saved heap, for load_heap: its fd, or a negative errno
 * with WHY (N bytes) saying why (not a regular file: -EINVAL). */
int load_open(const char *path, char *why, size_t n);

/* Load the saved heap FD (read from its start; PATH names it in
 * messages) into H, which is empty and idle and to which no client may
 * attach meanwhile.  Returns 0 with *OUT filled, or a negative errno
 * with WHY (N bytes) giving the file offset and the reason; H is then
 * empty again.  A load is logged. */
int load_heap(struct heap *h, int fd, const char *path,
              struct load_result *out, char *why, size_t n);

/* heapctl load: what the loop thread asks of the collector thread, which
 * loads before its next cycle (the heap idle, no client let in); the
 * outcome is heap->load_last[id % LOAD_OUTCOMES]. */
#define LOAD_OUTCOMES 4
struct load_outcome {
    uint64_t id;
    int rc;
    char why[1024];
    struct load_result res;
};
/* Ask H's collector to load FD (PATH in messages; the load owns FD)
 * before its next cycle.  Returns the request's id (> 0), or -EBUSY with
 * WHY (N bytes) when a load is asked for already, or -ENOMEM. */
int64_t load_request(struct heap *h, int fd, const char *path, char *why,
                     size_t n);
/* The collector thread, before a cycle: run the load asked for, if any,
 * and post its outcome (heap->load_last). */
void load_asked_run(struct heap *h);
/* heapd is stopping: a heapctl load of H that runs ends at its next
 * chunk, failed, the heap left empty (a stop would otherwise wait for
 * it). */
void load_abort(struct heap *h);
/* Free what a closing heap holds of loads. */
void load_discard(struct heap *h);

#endif
