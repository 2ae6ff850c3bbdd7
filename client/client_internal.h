/* libheapd internals shared by client.c and agent.c. */
#ifndef HEAPD_CLIENT_INTERNAL_H
#define HEAPD_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "frame.h"
#include "heapd.h"
#include "layout.h"

struct agent_call;

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

    pthread_mutex_t mu;              /* guards everything below */
    pthread_cond_t cv;
    struct agent_frame *out_head, *out_tail;
    struct agent_call *calls;
    uint64_t next_seq;
    bool stop;                       /* heapd_disconnect asked to stop */
    bool closed;                     /* the connection is gone */
    int close_code;                  /* why, as a heapd error code */
    char close_msg[256];
};

struct heapd_client {
    struct agent agent;
    uint64_t client_id;
    char heap_name[64];
    void *base;                      /* mapping, NULL for control clients */
    size_t size;
    int heap_fd;
};

/* Record the calling thread's error message; returns CODE. */
int client_set_error(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Map a daemon Error code to a heapd error code. */
int client_error_code(Heapd__ErrorCode code);

/* Start the agent on a connected socket (taken over, even on failure). */
int agent_start(struct agent *a, int sock);
/* Stop the agent, close the socket, join the thread. */
void agent_stop(struct agent *a);
/* Send REQ and wait for the reply with the same seq.  On success *reply is
 * the reply (free with heapd__envelope__free_unpacked).  An Error reply is
 * turned into its code, with its message as the thread's last error. */
int agent_call(struct agent *a, Heapd__Envelope *req,
               Heapd__Envelope **reply);

#endif
