/* heapd daemon configuration: heapd.conf parsed with inih.
 *
 * See heapd.conf at the top of the tree for every key, its default and its
 * range.  All errors are reported as "heapd:FILE:LINE: message" (LINE is 0
 * for errors that belong to the file as a whole, such as "cannot open").
 */
#ifndef HEAPD_DAEMON_CONFIG_H
#define HEAPD_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

#define CONFIG_MAX_HEAPS 16      /* [heap NAME] sections in one file */
#define CONFIG_HEAP_NAME_MAX 63  /* bytes, without the terminating NUL */
#define CONFIG_MAX_IDS 64        /* entries in allow_users / allow_groups */
#define CONFIG_PATH_MAX 4096     /* bytes of a file's path, NUL included */
#define CONFIG_DEFAULT_SOCKET "/run/heapd/heapd.sock"
#define CONFIG_DEFAULT_CONTROL_RESERVE 16

enum config_log_level {
    CONFIG_LOG_ERROR = 0,
    CONFIG_LOG_WARN = 1,
    CONFIG_LOG_INFO = 2,
    CONFIG_LOG_DEBUG = 3,
};

/* What ends a stall (Note [Stalls] in daemon/stall.c). */
enum config_stall_action {
    CONFIG_STALL_KILL = 0,      /* SIGKILL through the client's pidfd */
    CONFIG_STALL_EVICT = 1,     /* the client is treated as gone and its
                                   library aborts it at its next call */
    CONFIG_STALL_WAIT = 2,      /* only warn */
};

/* The least memory_limit: this many segments. */
#define MEMORY_LIMIT_MIN_SEGS 32u

struct config_heap {
    char name[CONFIG_HEAP_NAME_MAX + 1];
    int line;                   /* line of the [heap NAME] header */
    uint64_t base;              /* fixed virtual address, segment-aligned */
    uint64_t max_size;          /* bytes, multiple of segment_size */
    uint64_t segment_size;      /* bytes, power of two */
    uint32_t gc_overhead;       /* percent */
    uint64_t mark_stack_limit;  /* bytes of mark stack per worker */
    uint64_t max_client_bytes;  /* bytes one client may hold; 0 = max_size */
    uint64_t memory_limit;      /* bytes the heap's committed memory may
                                   reach; 0 = none but max_size (Note
                                   [Memory limit] in daemon/gc/collector.c) */
    bool verify;                /* run the heap verifier after each cycle */
    /* a saved heap to load when the heap starts empty, or "" (Note
     * [Loading a saved heap] in daemon/gc/load.c) */
    char load[CONFIG_PATH_MAX];
    /* Note [Stalls] in daemon/stall.c */
    uint64_t stall_warn_ms;     /* a mutator this late is named */
    uint64_t stall_timeout_ms;  /* ... and then ended; 0 = never */
    enum config_stall_action stall_action;
    /* Note [Resuming clients] in daemon/resume.c */
    uint64_t reconnect_timeout_ms; /* a restart keeps a client this long */
    /* Note [Young budgets] in daemon/gc/heap.h: what an attach asks for
     * with 0 */
    uint64_t young_size;        /* a nursery budget's bytes */
    uint32_t young_age;         /* minor collections before promotion */
    size_t n_allow_users;
    uid_t allow_users[CONFIG_MAX_IDS];
    size_t n_allow_groups;
    gid_t allow_groups[CONFIG_MAX_IDS];
};

struct config {
    char path[4096];            /* the file it was read from */
    char socket[108];           /* sun_path, NUL-terminated, checked length */
    enum config_log_level log_level;
    unsigned gc_threads;
    /* Note [Connection limits] in daemon/server.c */
    unsigned max_connections;
    unsigned max_connections_per_user;
    uint64_t max_write_queue;   /* bytes of replies queued per connection */
    /* Note [Admission] in daemon/server.c */
    unsigned control_reserve;   /* connections only root and the daemon's
                                   user may take; effective value */
    unsigned max_unlisted_connections; /* from peers on no heap's ACL */
    uint64_t handshake_timeout_ms;
    /* Note [Per-client limits] in daemon/session.c */
    unsigned max_mutators_per_client;
    unsigned max_requests_per_client; /* requests waiting for a cycle */
    unsigned client_log_rate;   /* log lines per second per connection */
    /* Note [Metrics endpoint] in daemon/metrics_http.c: ADDRESS:PORT, ""
     * for none (the default) */
    char metrics_listen[64];
    size_t n_heaps;
    struct config_heap heaps[CONFIG_MAX_HEAPS];
};

/* Parse a metrics_listen value, ADDRESS:PORT (numeric IPv4) or
 * [ADDRESS]:PORT (numeric IPv6), into *OUT (if not NULL).  0 or -EINVAL. */
int config_parse_listen(const char *v, struct sockaddr_storage *out);

/* Read and validate FILE into *out.  On failure returns a negative errno
 * (-ENOENT, -EACCES for an unreadable file, -EISDIR for a directory;
 * -EINVAL for any other file that is not a regular one, or a content error)
 * after writing every error found, one per line, as
 * "heapd:FILE:LINE: message\n" to ERR (which may be NULL to stay quiet).
 * *out is fully initialised with defaults before parsing. */
int config_load(struct config *out, const char *file, FILE *err);

/* Same, from a string held in memory; FILE is only used in messages.
 * Used by the tests and by the fuzzer. */
int config_load_string(struct config *out, const char *file, const char *text,
                       FILE *err);

/* Parse a size with an optional K, M or G suffix (powers of 1024).  Returns 0
 * or -EINVAL (not a number, bad suffix) or -ERANGE (overflows 64 bits). */
int config_parse_size(const char *s, uint64_t *out);

const struct config_heap *config_find_heap(const struct config *c,
                                           const char *name);

const char *config_log_level_name(enum config_log_level l);

#endif
