/* libheapd's agent: the background thread that owns the socket after the
 * handshake (client/agent.c). */
#ifndef HEAPD_CLIENT_AGENT_H
#define HEAPD_CLIENT_AGENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "frame.h"
#include "lock.h"

struct agent_frame;
struct agent_call;
struct agent_sleeper;

/* Note [Client agent]
 * ~~~~~~~~~~~~~~~~~~~
 * After the handshake, the socket belongs to one background thread, the
 * agent, which runs its own libuv loop: it writes the frames the
 * application's threads queue and reads every frame the daemon sends.  An
 * application thread never touches the socket.  To send, it packs a frame,
 * appends it to `out` under `mu` and wakes the agent with uv_async_send; to
 * make a call it also registers an agent_call under `mu` with a fresh seq,
 * and sleeps on `cv` until the agent has stored the reply whose Envelope.seq
 * matches, or the connection is gone.  When the connection ends (EOF, an
 * error frame, a bad frame, heapd_disconnect), `closed` is set under `mu`,
 * every waiting call is failed with `close_code`, and later calls fail at
 * once: nobody ever waits on a dead connection.  Replies are matched by seq
 * rather than by order so that later messages the daemon sends on its own
 * (remark requests, stop notices) can interleave with replies.
 * The agent thread does not survive fork(): a child must connect anew.
 */
struct agent {
    pthread_t thread;
    bool thread_started;
    uv_loop_t loop;
    uv_pipe_t pipe;
    uv_async_t wake;
    frame_reader reader;

    struct hd_mutex mu;              /* guards everything below */
    pthread_cond_t cv;
    struct agent_frame *out_head, *out_tail;
    struct agent_call *calls;
    uint64_t next_seq;
    bool stop;                       /* heapd_disconnect asked to stop */
    /* Note [Remark requests] (client/remark.c), on the agent thread: a
     * RemarkRequest; a segment grant, before its caller sees it; the
     * connection's end */
    void (*on_remark)(void *arg, const Heapd__RemarkRequest *r);
    void (*on_grant)(void *arg, const Heapd__SegmentGrant *g);
    void (*on_closed)(void *arg);
    void (*on_lost)(void *arg);      /* Note [Reconnecting]: it ended */
    void *hook_arg;
    unsigned fork_generation;        /* Note [Clients and fork] */
    /* Note [The open gate] in client/agent.c: 1 while this process's
     * connection is open, on a MADV_WIPEONFORK page (NULL: none) */
    unsigned char *gate;
    /* threads asleep on a futex word through agent_wait_word, woken when
     * the connection ends (Note [A dead daemon] in client/mutator.c) */
    struct agent_sleeper *sleepers;
    bool closed;                     /* the connection is gone */
    int close_code;                  /* why, as a heapd error code */
    char close_msg[256];
    /* Note [Reconnecting] in client/agent.c: set before the agent runs
     * (reconnect NULL: a lost connection is closed at once) */
    int (*reconnect)(void *arg, int *sock, char *why, size_t n);
    void *reconnect_arg;
    uint64_t reconnect_ms;           /* how long to try */
    bool lost;                       /* reconnecting; agent thread only */
    uint64_t lost_at;                /* uv_now when it was lost */
    uint64_t retry_ms;               /* the next wait between attempts */
    uv_timer_t retry;
    unsigned reconnects;             /* connections taken back */
};

static inline bool agent_is_closed(const struct agent *a)
{
    return __atomic_load_n(&a->closed, __ATOMIC_ACQUIRE);
}

/* A reply to an async call, on the agent thread: STATUS is 0 with REPLY
 * (freed after the call) or a heapd error code with REPLY NULL or the
 * Error envelope. */
typedef void (*agent_reply_fn)(void *arg, int status, Heapd__Envelope *reply);

/* Bumped in a child of fork() (Note [Clients and fork] in client/agent.c). */
extern unsigned agent_fork_generation;
/* This process is a child of the one that started A.  Inline: heapd_alloc's
 * fast path asks (a load and a compare). */
static inline bool agent_forked(const struct agent *a)
{
    return a->fork_generation != __atomic_load_n(&agent_fork_generation,
                                                 __ATOMIC_RELAXED);
}
/* The byte heapd_alloc's inline path reads: nonzero while A's connection
 * is open in the process that opened it (Note [The open gate]). */
const unsigned char *agent_gate(const struct agent *a);
/* The child's heapd_disconnect: close A's descriptors, free its memory. */
void agent_forget(struct agent *a);
/* How a lost connection is taken back (Note [Reconnecting] in agent.c):
 * FN(ARG, &sock, why, n) makes a new connection that resumes this client
 * (0, *sock set), or says why not: -EAGAIN to try again later, any other
 * negative code for good; for MS milliseconds in all. */
struct agent_reconnect {
    int (*fn)(void *arg, int *sock, char *why, size_t n);
    void *arg;
    uint64_t ms;
};
/* Start the agent on a connected socket (taken over, even on failure);
 * RE NULL: a lost connection closes at once. */
int agent_start(struct agent *a, int sock, const struct agent_reconnect *re);
/* Stop the agent, close the socket, join the thread. */
void agent_stop(struct agent *a);
/* Send REQ and wait for the reply with the same seq.  On success *reply is
 * the reply (free with heapd__envelope__free_unpacked).  An Error reply is
 * turned into its code, with its message as the thread's last error. */
int agent_call(struct agent *a, Heapd__Envelope *req,
               Heapd__Envelope **reply);
/* Send REQ; FN runs on the agent thread with the reply. */
int agent_call_async(struct agent *a, Heapd__Envelope *req,
                     agent_reply_fn fn, void *arg);
/* Send MSG, which has no reply. */
int agent_send(struct agent *a, Heapd__Envelope *msg);
/* A wait on the daemon that the connection's end interrupts (Note [A dead
 * daemon] in client/mutator.c): spin for up to SPIN_NS while *WORD ==
 * VAL, then sleep on it for at most AGENT_SLEEP_NS.  Returns 0 (the word
 * may have changed: the caller looks again), or, once the connection is
 * closed (or in a child of fork()), the error agent_gone_error gives. */
int agent_wait_word(struct agent *a, _Atomic uint32_t *word, uint32_t val,
                    uint64_t spin_ns);
/* The connection is closed or this process is a child of the one that
 * made it: set the thread's error and return its code (the close code,
 * HEAPD_ECLOSED when the daemon went away; HEAPD_EFORKED). */
int agent_gone_error(const struct agent *a);
/* The longest sleep of agent_wait_word. */
#define AGENT_SLEEP_NS 100000000u

#endif
