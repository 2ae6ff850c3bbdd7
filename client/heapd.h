/* libheapd: connect a process to a heapd shared garbage-collected heap.
 *
 * The names and signatures here are a contract (DESIGN.md §8).  Functions
 * that return int return 0 on success or a negative error code: either a
 * negated errno value or one of the HEAPD_E* codes below.  heapd_strerror()
 * names any of them; heapd_last_error() gives the full message of the
 * calling thread's most recent failure, with what to do about it.
 */
#ifndef HEAPD_H
#define HEAPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HEAPD_API __attribute__((visibility("default")))

/* heapd-specific error codes, below every errno value. */
enum {
    HEAPD_ENODAEMON = -1001,  /* nothing listens on the socket */
    HEAPD_EDENIED = -1002,    /* credentials not allowed on the heap */
    HEAPD_EVERSION = -1003,   /* client and daemon protocol/layout differ */
    HEAPD_EADDRTAKEN = -1004, /* the heap's address range is in use here */
    HEAPD_ENOHEAP = -1005,    /* the daemon serves no heap of that name */
    HEAPD_EPROTO = -1006,     /* the daemon sent something unexpected */
    HEAPD_ECLOSED = -1007,    /* the connection to the daemon is gone */
    HEAPD_ESHUTDOWN = -1008,  /* the daemon is shutting down */
    HEAPD_ESOCKPATH = -1009,  /* the socket path is too long */
};

typedef struct heapd_client heapd_client;

/* Options for heapd_connect.  Zero-initialise and set what you need; a NULL
 * opts means all defaults. */
typedef struct heapd_connect_opts {
    const char *socket_path;  /* NULL: $HEAPD_SOCKET, then the default */
    const char *heap;         /* NULL: "default" */
    const char *client_name;  /* NULL: the program name; shown in logs */
    unsigned flags;           /* HEAPD_CONNECT_* */
} heapd_connect_opts;

/* A control connection: stats and commands only; the heap is not mapped.
 * heapctl uses it. */
#define HEAPD_CONNECT_CONTROL 0x1u

#define HEAPD_STATS_MAX_HEAPS 16

typedef struct heapd_heap_stats {
    char name[64];
    uint64_t base;
    uint64_t reserved_bytes;   /* address space: the heap's max_size */
    uint64_t committed_bytes;  /* memory backing it now */
    uint64_t segment_size;
    uint32_t clients;          /* mutator clients connected to it */
} heapd_heap_stats;

typedef struct heapd_stats_t {
    char version[32];          /* the daemon's version */
    uint64_t uptime_ns;
    uint32_t clients_connected;
    uint64_t connections_total;
    uint64_t frames_rejected;  /* bad frames and messages since start */
    size_t heap_count;
    heapd_heap_stats heaps[HEAPD_STATS_MAX_HEAPS];
} heapd_stats_t;

/* Connect to heapd, authenticate, and (unless HEAPD_CONNECT_CONTROL) map the
 * heap at its fixed address.  On success *out is a client; on failure *out
 * is NULL and heapd_last_error() says why. */
HEAPD_API int heapd_connect(heapd_client **out, const heapd_connect_opts *opts);

/* Close the connection and unmap the heap.  NULL is ignored. */
HEAPD_API void heapd_disconnect(heapd_client *c);

/* Ask the daemon for its statistics (a round trip on the socket). */
HEAPD_API int heapd_stats(heapd_client *c, heapd_stats_t *out);

/* The mapped heap: its first byte and its size.  NULL / 0 for a control
 * connection.  Objects live inside [base, base + size). */
HEAPD_API void *heapd_heap_base(const heapd_client *c);
HEAPD_API size_t heapd_heap_size(const heapd_client *c);

/* Static text naming an error code. */
HEAPD_API const char *heapd_strerror(int err);

/* The calling thread's last error message from libheapd ("" if none). */
HEAPD_API const char *heapd_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
