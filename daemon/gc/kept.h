/* What heapd keeps of a mutator client while it has no connection: the
 * record table.c's kept_of makes from the live table's registry, and the
 * loop side's resume.c lives by (Note [Resuming clients] in resume.c).
 * A neutral header: the collector's files (table.c, segment.c,
 * globals.c) read these records during recovery without including the
 * loop side. */
#ifndef HEAPD_GC_KEPT_H
#define HEAPD_GC_KEPT_H

#include <stdint.h>
#include <sys/types.h>

struct heap;

#define RESUME_TOKEN_BYTES 16

/* What heapd keeps of a client while it has no connection.  The
 * per-slot records (region, alloc_bound) stay in heap->owners. */
struct resume_client {
    struct resume_client *next;
    struct heap *heap;
    uint64_t id;
    uint8_t token[RESUME_TOKEN_BYTES];
    pid_t pid;
    uid_t uid;
    gid_t gid;
    uint64_t start;             /* its process's start (Note [Pidfd guard]) */
    char name[64];
    uint32_t held;
    uint64_t granted;
    uint64_t slots[2];
    int mem_fd;                 /* its control memory; -1 until
                                   resume_adopt takes it from the store */
    int pidfd;                  /* -1 until resume_adopt */
    uint64_t since;             /* uv_now when this heapd took it back */
};

#endif
