/* libheapd's background agent: owns the socket after the handshake.
 * See Note [Client agent] in client/agent.h. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent.h"
#include "errors.h"
#include "frame.h"
#include "futex.h"
#include "heapd.h"

struct agent_frame {
    struct agent_frame *next;
    uv_write_t req;
    uint8_t *buf;
    size_t len;
};

/* A thread asleep in agent_wait_word, on its own stack. */
struct agent_sleeper {
    struct agent_sleeper *next;
    _Atomic uint32_t *word;
};

struct agent_call {
    struct agent_call *next;
    uint64_t seq;
    bool done;
    int status;
    Heapd__Envelope *reply;
    agent_reply_fn fn;      /* async calls: run on the agent thread */
    void *arg;
    uint8_t *frame;         /* the request, sent again after a reconnect */
    size_t len;
};

static void call_free(struct agent_call *k)
{
    free(k->frame);
    free(k);
}

/* ---- agent thread side ---- */

/* Mark the connection gone and fail every waiter; async calls are moved
 * to *ASYNC for the caller to run without the lock.  Called with mu held. */
static void fail_all_locked(struct agent *a, int code, const char *msg,
                            struct agent_call **async)
{
    ASSERT_LOCK_HELD(&a->mu);
    if (!a->closed) {
        /* why, then closed: a thread that sees closed without the lock
         * reads why (agent_gone_error) */
        a->close_code = code;
        snprintf(a->close_msg, sizeof a->close_msg, "%s", msg);
        __atomic_store_n(&a->closed, true, __ATOMIC_RELEASE);
        if (a->gate) /* Note [The open gate] */
            __atomic_store_n(a->gate, 0, __ATOMIC_RELEASE);
    }
    for (struct agent_call **p = &a->calls; *p;) {
        struct agent_call *k = *p;
        if (k->fn) {
            *p = k->next;
            k->next = *async;
            *async = k;
            continue;
        }
        if (!k->done) {
            k->done = true;
            k->status = a->close_code;
        }
        p = &k->next;
    }
    pthread_cond_broadcast(&a->cv);
}

static void run_failed_async(struct agent_call *list, int code)
{
    while (list) {
        struct agent_call *k = list;
        list = k->next;
        k->fn(k->arg, code, NULL);
        call_free(k);
    }
}

static void close_connection(struct agent *a, int code, const char *msg)
{
    struct agent_call *async = NULL;
    hd_mutex_lock(&a->mu);
    fail_all_locked(a, code, msg, &async);
    code = a->close_code;
    /* Note [A dead daemon] in client/mutator.c: every thread asleep on a
     * word of the daemon's wakes, sees `closed` and stops waiting (a
     * FUTEX_WAKE writes nothing; other processes' waiters on the same word
     * wake too, look at it and sleep again) */
    for (struct agent_sleeper *s = a->sleepers; s; s = s->next)
        futex_wake_all(s->word);
    hd_mutex_unlock(&a->mu);
    run_failed_async(async, code);
    if (a->on_closed)
        a->on_closed(a->hook_arg);
    a->lost = false;
    if (!uv_is_closing((uv_handle_t *)&a->retry))
        uv_close((uv_handle_t *)&a->retry, NULL);
    if (!uv_is_closing((uv_handle_t *)&a->pipe)) {
        uv_read_stop((uv_stream_t *)&a->pipe);
        uv_close((uv_handle_t *)&a->pipe, NULL);
    }
}

/* Note [Reconnecting]
 * ~~~~~~~~~~~~~~~~~~~
 * A mutator client's connection that ends without a word from the daemon
 * (EOF, a failed write: heapd restarted or died) is not closed at once:
 * the agent tries to reconnect, first after RECONNECT_FIRST_MS, then at
 * doubling intervals up to RECONNECT_MAX_MS, for reconnect_ms in all, and
 * each attempt is a Hello that resumes this client (its id and token:
 * Note [Resuming clients] in daemon/resume.c), in the agent thread.
 * Meanwhile nothing is failed: `closed` stays false, so the mutators run
 * on what they hold (allocation in their segments and reserve, barriers
 * into their rings, reads and writes, stops acknowledged in their slots);
 * frames queued stay queued, and every call still unanswered keeps its
 * request, to be sent again on the new connection (replies are matched by
 * seq: a reply the old daemon never sent is asked for again).  A caller
 * waits for its reply in a blocking region (mutator_call) or on the
 * call's condition: at most reconnect_ms.  Resumed, the queued frames go
 * out and the client is what it was.  Refused (the daemon does not keep
 * it: ERROR_NOT_RESUMED, another heap, another geometry), or still gone
 * after reconnect_ms, the connection closes for good with a message that
 * says so, and Note [A dead daemon] in client/mutator.c applies.  An
 * Error frame from the daemon (SHUTTING_DOWN, EVICTED, ...) closes at
 * once: it said it is not coming back.  One-way frames written to the
 * old connection and not read are lost: they are hints (UrsBatch) or
 * answers no cycle waits for across a restart (a clean exit suspends
 * clients only with every collector idle).
 */
#define RECONNECT_FIRST_MS 10u
#define RECONNECT_MAX_MS 500u

static void try_reconnect(uv_timer_t *t);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void on_lost_pipe_closed(uv_handle_t *h)
{
    struct agent *a = h->data;
    if (a->lost && !uv_is_closing((uv_handle_t *)&a->retry))
        uv_timer_start(&a->retry, try_reconnect, a->retry_ms, 0);
}

/* The connection ended without a word: reconnect, or close if this agent
 * does not. */
static void connection_lost(struct agent *a, int code, const char *msg)
{
    bool stop;
    hd_mutex_lock(&a->mu);
    stop = a->stop;
    hd_mutex_unlock(&a->mu);
    if (!a->reconnect || stop || a->closed) {
        close_connection(a, code, msg);
        return;
    }
    if (a->lost)
        return;
    if (a->on_lost)
        a->on_lost(a->hook_arg); /* an evicted process aborts here */
    a->lost = true;
    a->lost_at = uv_now(&a->loop);
    a->retry_ms = RECONNECT_FIRST_MS;
    snprintf(a->close_msg, sizeof a->close_msg, "%s", msg);
    uv_read_stop((uv_stream_t *)&a->pipe);
    if (!uv_is_closing((uv_handle_t *)&a->pipe))
        uv_close((uv_handle_t *)&a->pipe, on_lost_pipe_closed);
}

/* The new connection SOCK is this client again: read it, and send what
 * was never answered, then what waits. */
static void resumed(struct agent *a, int sock)
{
    struct agent_frame *again = NULL, *last = NULL;

    uv_pipe_init(&a->loop, &a->pipe, 0);
    a->pipe.data = a;
    if (uv_pipe_open(&a->pipe, sock) < 0) {
        close(sock);
        close_connection(a, HEAPD_ECLOSED, "cannot use the new connection "
                         "to heapd");
        return;
    }
    frame_reader_free(&a->reader);
    frame_reader_init(&a->reader, FRAME_MAX_PAYLOAD);
    a->lost = false;
    a->reconnects++;
    hd_mutex_lock(&a->mu);
    for (struct agent_call *k = a->calls; k; k = k->next) {
        if (k->done || !k->frame)
            continue;
        struct agent_frame *f = calloc(1, sizeof *f);
        if (f && !(f->buf = malloc(k->len))) {
            free(f);
            f = NULL;
        }
        if (!f)
            continue; /* out of memory: that caller waits for the close */
        memcpy(f->buf, k->frame, k->len);
        f->len = k->len;
        if (last)
            last->next = f;
        else
            again = f;
        last = f;
    }
    /* the unanswered calls first, in no particular order (each has its
     * own seq), then the frames queued meanwhile, in order */
    if (again) {
        last->next = a->out_head;
        if (!a->out_head)
            a->out_tail = last;
        a->out_head = again;
    }
    hd_mutex_unlock(&a->mu);
    uv_read_start((uv_stream_t *)&a->pipe, on_alloc, on_read);
    uv_async_send(&a->wake);
}

static void try_reconnect(uv_timer_t *t)
{
    struct agent *a = t->data;
    char why[256] = "";
    int sock = -1;

    if (!a->lost)
        return;
    uint64_t spent = uv_now(&a->loop) - a->lost_at;
    int rc = a->reconnect(a->reconnect_arg, &sock, why, sizeof why);
    if (rc == 0) {
        resumed(a, sock);
        return;
    }
    if (rc != -EAGAIN) {
        close_connection(a, HEAPD_ECLOSED, why);
        return;
    }
    uv_update_time(&a->loop);
    spent = uv_now(&a->loop) - a->lost_at;
    if (spent >= a->reconnect_ms) {
        char msg[sizeof a->close_msg + sizeof why + 64];
        snprintf(msg, sizeof msg, "%s, and heapd did not come back within "
                 "%llu ms (%s)", a->close_msg,
                 (unsigned long long)a->reconnect_ms, why);
        close_connection(a, HEAPD_ECLOSED, msg);
        return;
    }
    uint64_t wait = a->retry_ms;
    if (wait > a->reconnect_ms - spent)
        wait = a->reconnect_ms - spent;
    a->retry_ms = a->retry_ms * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS
                                                     : a->retry_ms * 2;
    uv_timer_start(&a->retry, try_reconnect, wait, 0);
}

static int on_frame(void *arg, Heapd__Envelope *env)
{
    struct agent *a = arg;
    struct agent_call *k;
    bool taken = false;

    if (env->seq == 0) {
        /* Not a reply: remark requests (Note [Remark requests] in
         * client/remark.c), and connection-level errors, after which the
         * daemon closes. */
        if (env->body_case == HEAPD__ENVELOPE__BODY_REMARK_REQUEST &&
            a->on_remark) {
            a->on_remark(a->hook_arg, env->remark_request);
            return 0;
        }
        if (env->body_case == HEAPD__ENVELOPE__BODY_ERROR) {
            close_connection(a, client_error_code(env->error->code),
                             env->error->message);
            return -ECANCELED;
        }
        close_connection(a, HEAPD_EPROTO, "the daemon sent an unexpected "
                         "message; closing the connection");
        return -EPROTO;
    }
    /* small segments are the client's from the moment their grant is
     * read, before any later frame: Note [Remark requests] */
    if (env->body_case == HEAPD__ENVELOPE__BODY_SEGMENT_GRANT && a->on_grant)
        a->on_grant(a->hook_arg, env->segment_grant);
    hd_mutex_lock(&a->mu);
    struct agent_call **p = &a->calls;
    for (k = *p; k && k->seq != env->seq; k = *p)
        p = &k->next;
    if (k && k->fn) {
        *p = k->next; /* an async call: answered here, on this thread */
        hd_mutex_unlock(&a->mu);
        bool err = env->body_case == HEAPD__ENVELOPE__BODY_ERROR;
        k->fn(k->arg, err ? client_error_code(env->error->code) : 0, env);
        call_free(k);
        return 0;
    }
    if (k && !k->done) {
        k->reply = env;
        k->done = true;
        k->status = 0;
        taken = true;
        pthread_cond_broadcast(&a->cv);
    }
    hd_mutex_unlock(&a->mu);
    return taken ? 1 : 0; /* 1: the envelope now belongs to the call */
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h;
    buf->base = malloc(suggested);
    buf->len = buf->base ? suggested : 0;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct agent *a = s->data;

    if (n > 0) {
        int rc = frame_reader_feed(&a->reader, (const uint8_t *)buf->base,
                                   (size_t)n, on_frame, a);
        if (rc == -EMSGSIZE || rc == -EBADMSG || rc == -ENOMEM)
            close_connection(a, HEAPD_EPROTO,
                             "the daemon sent a bad frame; reconnect");
    } else if (n < 0) {
        connection_lost(a, HEAPD_ECLOSED,
                        n == UV_EOF ? "heapd closed the connection"
                                    : uv_strerror((int)n));
    }
    free(buf->base);
}

static void on_written(uv_write_t *req, int status)
{
    struct agent_frame *f = req->data;
    struct agent *a = req->handle->data;

    free(f->buf);
    free(f);
    if (status < 0 && status != UV_ECANCELED)
        connection_lost(a, HEAPD_ECLOSED, uv_strerror(status));
}

static void on_wake(uv_async_t *w)
{
    struct agent *a = w->data;
    struct agent_frame *list;
    bool stop;

    hd_mutex_lock(&a->mu);
    stop = a->stop;
    /* Note [Reconnecting]: while lost, what is queued waits */
    list = a->lost && !stop ? NULL : a->out_head;
    if (list)
        a->out_head = a->out_tail = NULL;
    hd_mutex_unlock(&a->mu);

    while (list) {
        struct agent_frame *f = list;
        list = f->next;
        uv_buf_t b = uv_buf_init((char *)f->buf, (unsigned)f->len);
        f->req.data = f;
        if (uv_is_closing((uv_handle_t *)&a->pipe) ||
            uv_write(&f->req, (uv_stream_t *)&a->pipe, &b, 1, on_written) < 0) {
            free(f->buf);
            free(f);
        }
    }
    if (stop) {
        close_connection(a, HEAPD_ECLOSED, "disconnected by the application");
        uv_close((uv_handle_t *)&a->wake, NULL);
    }
}

static void *agent_main(void *arg)
{
    struct agent *a = arg;
    sigset_t pipe_only;

    pthread_setname_np(pthread_self(), "heapd-agent");

    /* libuv writes with write(2), not send(MSG_NOSIGNAL): a daemon that
     * died would kill the application with SIGPIPE.  A library must not
     * change the process's signal dispositions, so the agent blocks it for
     * itself: the write then fails with EPIPE, and the SIGPIPE it raises
     * stays pending on this thread alone, never delivered. */
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, NULL);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* ---- application side ---- */

/* Note [Clients and fork]
 * ~~~~~~~~~~~~~~~~~~~~~~~
 * A child of fork() inherits a copy of its parent's clients: the socket,
 * the mapping, the mutexes (perhaps held by the agent thread at the fork),
 * but not the agent thread, which alone reads the daemon's replies.  A
 * call in the child would wait for ever on a reply nobody reads, or on a
 * mutex nobody unlocks, and what it wrote on the socket would mix with
 * the parent's frames.  So a pthread_atfork child handler bumps
 * agent_fork_generation, every agent remembers the generation it started in,
 * and every call through the agent first checks it and fails with
 * HEAPD_EFORKED, before it takes a lock.  heapd_disconnect in the child
 * only closes and frees what the child's copy holds.  A child that wants
 * the heap connects for itself.
 */
unsigned agent_fork_generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
    agent_fork_generation++;
}

static void fork_watch(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}


/* Note [The open gate]
 * ~~~~~~~~~~~~~~~~~~~~~
 * heapd_alloc's inline path (Note [Inline allocation fast path] in
 * heapd.h) must not run in a child of fork(), nor on a closed connection,
 * and asks both with one byte: the gate, 1 from agent_start until the
 * connection closes (set to 0 where `closed` is set; remark_closed then
 * asks every mutator for a remark too), on a private page of its own
 * marked MADV_WIPEONFORK, so that a child's copy reads 0 without any
 * handler having to find the mutators.  Where the kernel refuses the
 * advice, the gate is a byte that is always 0 and every allocation calls
 * the function, which asks `closed` and agent_forked itself.  Measured
 * (a loop as alloc_bench's young one, 3-5 interleaved runs, the best of
 * each): one load for the two tests it replaces, 16 B 4.29 -> 3.82 ns,
 * 256 B 8.58 -> 8.49 ns. */
static const unsigned char gate_shut;

static void gate_open(struct agent *a)
{
    long page = sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return;
    if (madvise(p, (size_t)page, MADV_WIPEONFORK) != 0) {
        munmap(p, (size_t)page);
        return;
    }
    a->gate = p;
    __atomic_store_n(a->gate, 1, __ATOMIC_RELEASE);
}

static void gate_free(struct agent *a)
{
    if (a->gate)
        munmap(a->gate, (size_t)sysconf(_SC_PAGESIZE));
    a->gate = NULL;
}

const unsigned char *agent_gate(const struct agent *a)
{
    return a->gate ? a->gate : &gate_shut;
}

static int forked_error(void)
{
    return client_set_error(HEAPD_EFORKED, "this heapd client was connected "
                            "by the parent process (pid %d is a child of "
                            "fork()): call heapd_connect in the child",
                            (int)getpid());
}

int agent_start(struct agent *a, int sock, const struct agent_reconnect *re)
{
    int rc;

    memset(a, 0, sizeof *a);
    if (re) { /* Note [Reconnecting] */
        a->reconnect = re->fn;
        a->reconnect_arg = re->arg;
        a->reconnect_ms = re->ms;
    }
    pthread_once(&fork_once, fork_watch);
    a->fork_generation = __atomic_load_n(&agent_fork_generation,
                                         __ATOMIC_RELAXED);
    gate_open(a); /* before the agent thread, which may close it */
    hd_mutex_init(&a->mu);
    pthread_cond_init(&a->cv, NULL);
    frame_reader_init(&a->reader, FRAME_MAX_PAYLOAD);
    a->next_seq = 1;
    if ((rc = uv_loop_init(&a->loop)) < 0)
        goto fail_sock;
    uv_pipe_init(&a->loop, &a->pipe, 0);
    a->pipe.data = a;
    if ((rc = uv_pipe_open(&a->pipe, sock)) < 0) {
        uv_close((uv_handle_t *)&a->pipe, NULL);
        uv_run(&a->loop, UV_RUN_DEFAULT);
        uv_loop_close(&a->loop);
        goto fail_sock;
    }
    uv_async_init(&a->loop, &a->wake, on_wake);
    a->wake.data = a;
    uv_timer_init(&a->loop, &a->retry);
    a->retry.data = a;
    uv_read_start((uv_stream_t *)&a->pipe, on_alloc, on_read);
    if ((rc = pthread_create(&a->thread, NULL, agent_main, a)) != 0) {
        rc = -rc;
        uv_close((uv_handle_t *)&a->pipe, NULL);
        uv_close((uv_handle_t *)&a->wake, NULL);
        uv_close((uv_handle_t *)&a->retry, NULL);
        uv_run(&a->loop, UV_RUN_DEFAULT);
        uv_loop_close(&a->loop);
        goto out;
    }
    a->thread_started = true;
    return 0;
fail_sock:
    close(sock);
out:
    frame_reader_free(&a->reader);
    gate_free(a);
    return rc;
}

/* Note [Clients and fork]: in the child, the lists and buffers may be
 * half-changed by an agent thread that is not there, so they are left
 * alone (memory only); the descriptors are the child's own and closed. */
void agent_forget(struct agent *a)
{
    uv_os_fd_t fd;
    if (!a->thread_started)
        return;
    if (uv_fileno((const uv_handle_t *)&a->pipe, &fd) == 0)
        close(fd);
    int backend = uv_backend_fd(&a->loop);
    if (backend >= 0)
        close(backend);
    a->thread_started = false;
    gate_free(a);
}

void agent_stop(struct agent *a)
{
    if (!a->thread_started)
        return;
    hd_mutex_lock(&a->mu);
    a->stop = true;
    hd_mutex_unlock(&a->mu);
    uv_async_send(&a->wake);
    pthread_join(a->thread, NULL);
    a->thread_started = false;
    /* Async calls the daemon never answered (it closed first). */
    for (struct agent_call *k = a->calls, *n; k; k = n) {
        n = k->next;
        if (k->fn) {
            k->fn(k->arg, HEAPD_ECLOSED, NULL);
            call_free(k);
        }
    }
    a->calls = NULL;
    /* Frames queued after the stop was seen were never written. */
    for (struct agent_frame *f = a->out_head, *n; f; f = n) {
        n = f->next;
        free(f->buf);
        free(f);
    }
    uv_loop_close(&a->loop);
    frame_reader_free(&a->reader);
    pthread_cond_destroy(&a->cv);
    hd_mutex_destroy(&a->mu);
    gate_free(a);
}

/* Queue MSG for the agent to write, with a fresh seq if CALL is set (which
 * is then registered for the reply).  Called with mu held. */
static int enqueue_locked(struct agent *a, Heapd__Envelope *msg,
                          struct agent_call *call)
{
    ASSERT_LOCK_HELD(&a->mu);
    struct agent_frame *f;
    int rc;

    if (a->closed)
        return client_set_error(a->close_code, "%s", a->close_msg);
    if (!(f = calloc(1, sizeof *f)))
        return client_set_error(-ENOMEM, "out of memory");
    msg->seq = call ? a->next_seq++ : 0;
    if ((rc = frame_pack(msg, &f->buf, &f->len)) < 0) {
        free(f);
        return client_set_error(rc, "cannot encode %s: %s",
                                frame_body_name(msg), strerror(-rc));
    }
    /* Note [Reconnecting]: kept until answered, to be sent again */
    if (call && a->reconnect) {
        if (!(call->frame = malloc(f->len))) {
            free(f->buf);
            free(f);
            return client_set_error(-ENOMEM, "out of memory");
        }
        memcpy(call->frame, f->buf, f->len);
        call->len = f->len;
    }
    if (a->out_tail)
        a->out_tail->next = f;
    else
        a->out_head = f;
    a->out_tail = f;
    if (call) {
        call->seq = msg->seq;
        call->next = a->calls;
        a->calls = call;
    }
    uv_async_send(&a->wake);
    return 0;
}

int agent_send(struct agent *a, Heapd__Envelope *msg)
{
    if (agent_forked(a))
        return forked_error();
    hd_mutex_lock(&a->mu);
    int rc = enqueue_locked(a, msg, NULL);
    hd_mutex_unlock(&a->mu);
    return rc;
}

int agent_call_async(struct agent *a, Heapd__Envelope *req,
                     agent_reply_fn fn, void *arg)
{
    if (agent_forked(a))
        return forked_error();
    struct agent_call *k = calloc(1, sizeof *k);
    if (!k)
        return client_set_error(-ENOMEM, "out of memory");
    k->fn = fn;
    k->arg = arg;
    hd_mutex_lock(&a->mu);
    int rc = enqueue_locked(a, req, k);
    hd_mutex_unlock(&a->mu);
    if (rc < 0)
        free(k);
    return rc;
}

int agent_gone_error(const struct agent *a)
{
    if (agent_forked(a))
        return forked_error();
    /* written before `closed` is set, and never again (fail_all_locked) */
    return client_set_error(a->close_code, "the connection to heapd is "
                            "closed (%s): this client's heap is not "
                            "collected any more; heapd_disconnect and "
                            "connect again", a->close_msg);
}

int agent_wait_word(struct agent *a, _Atomic uint32_t *word, uint32_t val,
                    uint64_t spin_ns)
{
    struct agent_sleeper me = {.word = word};
    bool closed;

    /* Note [Clients and fork]: a child never takes the mutex */
    if (agent_forked(a))
        return agent_gone_error(a);
    if (futex_spin(word, val, spin_ns))
        return 0;
    hd_mutex_lock(&a->mu);
    if (a->closed) {
        hd_mutex_unlock(&a->mu);
        return agent_gone_error(a);
    }
    me.next = a->sleepers;
    a->sleepers = &me;
    hd_mutex_unlock(&a->mu);
    /* a close between the unlock and the sleep wakes before this thread
     * sleeps: the bound ends that sleep (Note [A dead daemon]) */
    futex_wait(word, val, AGENT_SLEEP_NS);
    hd_mutex_lock(&a->mu);
    for (struct agent_sleeper **p = &a->sleepers; *p; p = &(*p)->next) {
        if (*p == &me) {
            *p = me.next;
            break;
        }
    }
    closed = a->closed;
    hd_mutex_unlock(&a->mu);
    return closed ? agent_gone_error(a) : 0;
}

int agent_call(struct agent *a, Heapd__Envelope *req, Heapd__Envelope **reply)
{
    struct agent_call call = {0};
    int rc;

    *reply = NULL;
    if (agent_forked(a))
        return forked_error();
    hd_mutex_lock(&a->mu);
    if ((rc = enqueue_locked(a, req, &call)) < 0)
        goto out_locked;
    while (!call.done)
        hd_cond_wait(&a->cv, &a->mu);
    /* unlink */
    for (struct agent_call **p = &a->calls; *p; p = &(*p)->next) {
        if (*p == &call) {
            *p = call.next;
            break;
        }
    }
    free(call.frame);
    rc = call.status;
    if (rc < 0) {
        client_set_error(rc, "%s", a->close_msg);
    } else if (call.reply->body_case == HEAPD__ENVELOPE__BODY_ERROR) {
        rc = client_set_error(client_error_code(call.reply->error->code), "%s",
                              call.reply->error->message);
        heapd__envelope__free_unpacked(call.reply, NULL);
    } else {
        *reply = call.reply;
    }
out_locked:
    hd_mutex_unlock(&a->mu);
    return rc;
}
