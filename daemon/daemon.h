/* The daemon's state: configuration, heaps, the listening socket and the
 * connections.  One libuv loop thread owns all of it (collector worker
 * threads come with the collector and touch only what their Notes say). */
#ifndef HEAPD_DAEMON_DAEMON_H
#define HEAPD_DAEMON_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <uv.h>

#include "auth.h"
#include "config.h"
#include "fdstore.h"
#include "frame.h"
#include "heap.h"
#include "metrics.h"
#include "workers.h"

enum conn_state {
    CONN_AWAIT_HELLO,   /* accepted; only a Hello is acceptable */
    CONN_READY,         /* welcomed */
    CONN_CLOSING,       /* final bytes flushing; input ignored */
};

struct daemon;

struct conn {
    uv_pipe_t pipe;             /* pipe.data == this */
    struct daemon *d;
    struct conn *prev, *next;   /* d->conns */
    uint64_t id;
    enum conn_state state;
    frame_reader reader;
    unsigned writes_pending;    /* uv_write requests not yet completed */
    bool throttled;             /* reading stopped: Note [Connection limits] */
    uint64_t closing_since;     /* uv_now when it became CLOSING */
    Heapd__ClientKind kind;
    struct heap *heap;          /* mutator clients: the heap they mapped */
    struct heap *named_heap;    /* the heap Hello named (control: stats, gc) */
    uint32_t held;              /* segments held (Note [Segment supply]) */
    uint64_t granted;           /* bytes of segments ever granted: what
                                   its mutators can have allocated (Note
                                   [Client control memory]) */
    uint64_t slots[2];          /* bit i: mutator slot i is this client's */
    int mem_fd;                 /* mutator clients: their control memory
                                   (Note [Client control memory]), or -1 */
    uint8_t token[16];          /* Note [Resuming clients] in resume.c */
    uint64_t start;             /* its process's start (Note [Pidfd guard]) */
    bool gone;                  /* said Goodbye: holds nothing any more
                                   (Note [Client lifecycle]) */
    struct auth_peer peer;
    char name[64];              /* client_name from Hello, escaped (Note
                                   [Escaped log lines] in log.h) */
    char library[32];           /* its libheapd's release from Hello,
                                   escaped; "" before 0.2.0 (Note
                                   [Versions across releases]) */
    /* Note [Admission] in server.c */
    bool privileged;            /* root or the daemon's own user */
    bool unlisted;              /* on no heap's ACL: stats only */
    uv_timer_t hello_timer;     /* handshake_timeout; hello_timer.data == this */
    unsigned handles_open;      /* pipe and timer not yet closed */
    time_t connected_at;        /* wall clock, for heapctl clients */
    /* Note [Stalls] in stall.c */
    int pidfd;                  /* the peer process, taken at connect
                                   (Note [Pidfd guard]); -1 for none */
    uint64_t remark_since;      /* uv_now when the oldest remark request it
                                   has not answered was sent; 0: none */
    bool remark_warned;         /* that remark stall is named */
    bool stall_ended;           /* stall_action was taken */
    uint64_t killed_at;         /* uv_now of its SIGKILL; 0: none */
    enum layout_stall_on killed_on;
    uint64_t killed_after;      /* ms it had stalled */
    /* Note [Per-client limits] in session.c */
    unsigned outstanding;       /* its requests waiting for a cycle */
    uint64_t log_tokens;        /* thousandths of a line it may log now */
    uint64_t log_refilled;      /* uv_now of the last refill */
    uint64_t log_suppressed;    /* lines dropped since the last one logged */
};

/* The statistics of the daemon and of each heap, as heapctl stats and the
 * metrics endpoint show them (session_stats_snapshot). */
struct stats_heap {
    uint64_t base;
    uint64_t committed_bytes;
    struct metrics_heap m;      /* m.counters points at counters */
    uint64_t counters[HEAPD_HEAP_COUNTERS_N];
};
struct stats_snapshot {
    struct metrics_daemon d;
    size_t n;
    struct stats_heap h[CONFIG_MAX_HEAPS];
};

struct metrics_http;

/* A configured heap heapd does not serve: what the service manager kept
 * of it could not be taken back (Note [Heaps heapd cannot adopt] in
 * adopt.c). */
struct unserved_heap {
    const struct config_heap *cfg;
    char why[1024];             /* and what to do */
};

struct daemon {
    struct config cfg;
    char socket_path[108];      /* effective path (config or --socket) */
    uv_loop_t loop;
    uv_pipe_t listener;
    bool listening;
    bool socket_activated;      /* listener came from systemd: keep file */
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t watchdog;
    uv_timer_t strays;          /* Note [Free memory stays free] */
    uv_timer_t grace;           /* shutdown deadline for draining */
    bool watchdog_on;
    size_t n_heaps;
    struct heap heaps[CONFIG_MAX_HEAPS];
    size_t n_unserved;          /* Note [Heaps heapd cannot adopt] */
    struct unserved_heap unserved[CONFIG_MAX_HEAPS];
    struct conn *conns;
    unsigned n_conns;
    uint64_t next_client_id;
    uint64_t connections_total;
    uint64_t connections_refused;   /* Note [Connection limits] */
    uint64_t connections_throttled;
    uv_timer_t reaper;          /* closes connections stuck closing */
    bool reaper_on;
    uint64_t frames_rejected;
    uint64_t connections_timed_out; /* no Hello in handshake_timeout */
    uint64_t requests_refused;  /* over a per-client cap, or not allowed */
    uint64_t log_lines_suppressed; /* over client_log_rate */
    uint64_t start_ns;
    uid_t uid;
    bool stopping;
    struct workers workers;
    struct pending *pending;    /* requests waiting for a cycle */
    struct fdstore fds;         /* what heapd was started with (Note
                                   [Heaps across restarts] in fdstore.c) */
    /* Note [Stalls] in stall.c */
    uv_timer_t stall_timer;
    struct stall_fence *fences; /* evicted processes still alive */
    /* Note [Resuming clients] in resume.c */
    bool fd_store;              /* a service manager keeps the heaps */
    struct resume_client *suspended; /* clients kept without a connection */
    uv_timer_t quiesce;         /* shutdown: waits for idle collectors */
    bool quiesce_on;
    uint64_t stall_warned[CONFIG_MAX_HEAPS][LAYOUT_MAX_MUTATORS];
                                /* the stall_since each slot was named for */
    /* Note [Metrics endpoint] in metrics_http.c; NULL when off */
    struct metrics_http *metrics;
};

/* session.c: the statistics, on the loop thread */
void session_stats_snapshot(struct daemon *d, struct stats_snapshot *s);
/* metrics_http.c: the scrape endpoint, if metrics_listen is set */
int metrics_http_start(struct daemon *d);
/* Release the scrapes that wait and stop the HTTP thread (the loop's
 * handles are closed after); free it once the loop is closed. */
void metrics_http_stop(struct daemon *d);
void metrics_http_free(struct daemon *d);

/* server.c: transport */
int server_listen(struct daemon *d);
/* Stop listening and close every connection, but (KEEP_MUTATORS) those of
 * mutator clients, which a clean exit suspends (Note [Resuming
 * clients]). */
void server_stop(struct daemon *d, bool keep_mutators);
/* Close every connection now, dropping unsent bytes (shutdown deadline). */
void server_abort_all(struct daemon *d);
/* The connection of client ID on heap H, or NULL: in d->conns until its
 * close callback (Note [Connection lifetime] in server.c), so it may be
 * closing. */
struct conn *conn_find(struct daemon *d, const struct heap *h, uint64_t id);
int conn_send(struct conn *c, const Heapd__Envelope *env);
/* Send ENV with NFDS descriptors attached (Note [Passing the heap fd]). */
int conn_send_with_fds(struct conn *c, const Heapd__Envelope *env,
                       const int *fds, unsigned nfds);
/* Send an Error frame answering request SEQ (0: not an answer). */
int conn_send_error(struct conn *c, uint64_t seq, Heapd__ErrorCode code,
                    const char *msg);
/* Answer request SEQ with ENV; a failure to send fails the connection. */
int conn_reply(struct conn *c, Heapd__Envelope *env, uint64_t seq);
/* Answer request SEQ with an Error (logged at debug); the connection
 * stays open. */
int conn_reply_error(struct conn *c, uint64_t seq, Heapd__ErrorCode code,
                     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Send an Error (if the stream still works), then close after it flushed. */
void conn_fail(struct conn *c, Heapd__ErrorCode code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Flush pending writes, then close. */
void conn_finish(struct conn *c);
/* C's Hello was answered with a Welcome: no handshake timeout any more,
 * and frames up to FRAME_MAX_PAYLOAD (Note [Admission] in server.c). */
void conn_welcomed(struct conn *c);
/* A log line about C, within its client_log_rate (Note [Per-client
 * limits] in session.c); what it drops is counted and reported with the
 * next line it logs. */
void conn_log(struct conn *c, enum config_log_level level, const char *fmt,
              ...) __attribute__((format(printf, 3, 4)));
/* A frame of the size of Hello: the largest a peer may send before it
 * (Note [Admission] in server.c). */
#define CONN_HELLO_MAX_PAYLOAD 4096u

/* session.c: the protocol, one envelope at a time.  Returns 0, or a negative
 * errno after it has called conn_fail (the connection is closing). */
int session_handle(struct conn *c, Heapd__Envelope *env);
struct heap *daemon_find_heap(struct daemon *d, const char *name);

/* adopt.c: at start, each configured heap is taken back from what the
 * service manager kept, opened empty, or left unserved (Note [Heaps heapd
 * cannot adopt]); its collector and remark threads start.  0, or -errno
 * (logged) when heapd cannot go on. */
int adopt_heaps(struct daemon *d);
/* The unserved heap NAME, or NULL. */
const struct unserved_heap *adopt_unserved(const struct daemon *d,
                                           const char *name);
/* heapctl drop NAME: give the unserved heap NAME up and serve it empty.
 * 0, or -ENOENT / -errno with WHY (N bytes) saying why not. */
int adopt_drop(struct daemon *d, const char *name, char *why, size_t n);

/* The connection is closing: give back everything it held. */
void session_closed(struct conn *c);
/* C leaves now, as a crashed client, before its connection closes (Note
 * [Stalls] in stall.c). */
void session_leave(struct conn *c);
/* Heap H stalled: its grants waiting for a cycle are answered now. */
void session_stalled(struct heap *h, void *daemon);
/* Loop thread, after a heap's collector completed cycles. */
void session_cycle_done(struct heap *h, void *daemon);

/* handoff.c: the loop thread's end of the collector (Note [Collector
 * handoff]).  Start heap H's collector thread; ON_DONE(H, ARG) runs on
 * LOOP's thread after cycles complete (coalesced). */
typedef void (*collector_done_fn)(struct heap *h, void *arg);
int handoff_collector_start(struct heap *h, struct workers *w,
                            uv_loop_t *loop, collector_done_fn on_done,
                            void *arg);
/* Send heap H's remark outbox to the clients of D from now on. */
int handoff_remark_start(struct heap *h, struct daemon *d);
/* The loop has stopped with no client left: route what waits in the
 * outbox (to the global stack: nobody owns anything), finish any cycle
 * under way, stop the collector thread and close the loop handles. */
void handoff_stop(struct heap *h);
/* Client C answered a RemarkRequest. */
void remark_done(struct conn *c, const Heapd__RemarkDone *r);

#endif
