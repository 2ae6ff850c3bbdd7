/* Loading a saved heap.  See Note [Loading a saved heap] in load.c. */
#ifndef HEAPD_DAEMON_LOAD_H
#define HEAPD_DAEMON_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct heap;

struct load_result {
    uint64_t objects, object_bytes, globals, file_bytes;
    uint64_t ns;
};

/* Is H empty: no client, no segment in use, no global?  If not, WHY (N
 * bytes) says what it holds. */
bool load_heap_empty(struct heap *h, char *why, size_t n);

/* Load the saved heap FD (read from its start; PATH names it in
 * messages) into H, which is empty and idle and to which no client may
 * attach meanwhile.  Returns 0 with *OUT filled, or a negative errno
 * with WHY (N bytes) giving the file offset and the reason; H is then
 * empty again. */
int load_heap(struct heap *h, int fd, const char *path,
              struct load_result *out, char *why, size_t n);

#endif
