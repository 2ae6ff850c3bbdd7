/* Fuzz target: every message handler of the daemon, through the path a
 * client's bytes take (Note [Connection lifetime]): a real heapd state
 * (config, heaps mapped at their fixed base as heap_open does, a collector
 * thread per heap and its worker, the libuv loop) listening on a Unix
 * socket in a private directory, and per input one client connection.
 * The fuzzer is that client: it connects, writes the input's chunks one
 * at a time, and after each one runs the daemon's loop until the daemon
 * has read everything (server.c on_read -> frame_reader_feed ->
 * session_handle).  Then it half-closes its side, reads what the daemon
 * sends back (every reply must be a valid frame; the heap fd that rides on
 * a Welcome is closed) and runs the loop until the daemon has closed the
 * connection (session_closed gives back its slots, segments and pending
 * requests).  No daemon code is replaced or skipped: the seam is the
 * socket.
 *
 * The heaps live as long as the process: what one input leaves in them
 * (segments of a closed client, claimed globals) is what a real daemon
 * keeps after a client dies, and must stay valid for the next one; the
 * verifier runs after every cycle of heap "tiny" (verify = true), and a
 * collection request runs a real cycle on the collector thread.  So some
 * paths depend on timing (whether a cycle has finished yet).
 *
 * Input: byte 0 is the mode: bit 0 prepends a valid mutator Hello, bit 1
 * makes it name heap "tiny" (4 segments: ENOSPC, grants that wait for a
 * cycle) instead of "default", bit 2 makes it a control Hello.  Then
 * records, each one write(2) to the socket:
 *   op % 5 == 0: u16le N, N bytes: one frame with that payload;
 *   op % 5 == 1: u16le N, N bytes: raw bytes, written as they are;
 *   op % 5 == 2: one envelope built from the next bytes (a template per
 *                arm, so that e.g. attach-then-detach is one byte away);
 *   op % 5 == 3: u8 slot, u8 field, u64le value: the fuzzer as a client
 *                writing its mutator slot's words in its control
 *                area (URS head or ring entries), as a buggy or hostile
 *                client can; only slots this connection attached;
 *   op % 5 == 4: run the loop once more (a cycle may finish).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "collector.h"
#include "remark.h"
#include "daemon.h"
#include "fdpass.h"
#include "fuzz.h"
#include "log.h"
#include "wire.h"

#define HEAP_BASE 0x7e8000000000ull
#define TINY_BASE 0x7f0000000000ull
#define SPIN_LIMIT 100000000u /* loop turns before an input counts as hung */

static const char config_text[] =
    "[daemon]\n"
    "gc_threads = 1\n"
    "log_level = error\n"
    /* the smallest: replies to a few dozen requests pause the reader
     * (Note [Connection limits]) */
    "max_write_queue = 64K\n"
    "[heap default]\n"
    "base = 0x7e8000000000\n"
    "max_size = 64M\n"
    "segment_size = 128K\n"
    "max_client_bytes = 16M\n"
    "[heap tiny]\n"
    "base = 0x7f0000000000\n"
    "max_size = 16896K\n"      /* 128 control segments + 4 */
    "segment_size = 128K\n"
    "verify = true\n";

static struct daemon *d;
static char sock_dir[64];

static void remove_socket(void)
{
    if (d)
        unlink(d->socket_path);
    rmdir(sock_dir);
}

/* The start-up of daemon/main.c, minus daemonising, signals and systemd. */
static void setup(void)
{
    d = calloc(1, sizeof *d);
    FUZZ_CHECK(d);
    FUZZ_CHECK(config_load_string(&d->cfg, "fuzz_session", config_text,
                                  stderr) == 0);
    log_set_level(d->cfg.log_level);
    snprintf(sock_dir, sizeof sock_dir, "/tmp/heapd-fuzz-XXXXXX");
    FUZZ_CHECK(mkdtemp(sock_dir));
    snprintf(d->socket_path, sizeof d->socket_path, "%s/heapd.sock",
             sock_dir);
    atexit(remove_socket);
    d->uid = getuid();
    d->start_ns = uv_hrtime();
    FUZZ_CHECK(uv_loop_init(&d->loop) == 0);
    FUZZ_CHECK(workers_init(&d->workers, d->cfg.gc_threads) == 0);
    for (size_t i = 0; i < d->cfg.n_heaps; i++) {
        FUZZ_CHECK(heap_open(&d->heaps[i], &d->cfg.heaps[i]) == 0);
        d->n_heaps++;
        FUZZ_CHECK(handoff_collector_start(&d->heaps[i], &d->workers,
                                           &d->loop, session_cycle_done,
                                           d) == 0);
        FUZZ_CHECK(handoff_remark_start(&d->heaps[i], d) == 0);
    }
    signal(SIGPIPE, SIG_IGN);
    FUZZ_CHECK(server_listen(d) == 0);
}

/* ---- the client side ---- */

struct client {
    int fd;
    bool eof;              /* the daemon closed its side */
    frame_reader replies;
    unsigned n_replies;
};

static int on_reply(void *arg, Heapd__Envelope *env)
{
    struct client *cl = arg;
    cl->n_replies++;
    /* the daemon only ever sends what a client may receive */
    FUZZ_CHECK(env->body_case != HEAPD__ENVELOPE__BODY_HELLO &&
               env->body_case != HEAPD__ENVELOPE__BODY_STATS_REQUEST &&
               env->body_case != HEAPD__ENVELOPE__BODY_ATTACH_REQUEST &&
               env->body_case != HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST &&
               env->body_case != HEAPD__ENVELOPE__BODY_GLOBAL_CLAIM &&
               env->body_case != HEAPD__ENVELOPE__BODY_REMARK_DONE);
    return 0;
}

/* Read what the daemon sent so far; close any fd that came with it. */
static void drain(struct client *cl)
{
    uint8_t buf[65536];
    int fds[FDPASS_MAX];
    unsigned nfds;

    while (!cl->eof) {
        ssize_t n = fdpass_recv(cl->fd, buf, sizeof buf, fds, &nfds);
        for (unsigned i = 0; i < nfds; i++)
            close(fds[i]);
        if (n == -EAGAIN || n == -EWOULDBLOCK)
            return;
        if (n == -ECONNRESET || n == 0) {
            cl->eof = true;
            return;
        }
        FUZZ_CHECK(n > 0);
        FUZZ_CHECK(frame_reader_feed(&cl->replies, buf, (size_t)n, on_reply,
                                     cl) == 0);
    }
}

static void turn(struct client *cl)
{
    uv_run(&d->loop, UV_RUN_NOWAIT);
    drain(cl);
}

/* The connection, while the daemon has it open and is reading. */
static struct conn *reading_conn(void)
{
    struct conn *c = d->conns;
    return c && c->state != CONN_CLOSING ? c : NULL;
}

/* Write BUF, then run the loop until the daemon has read all of it (or
 * stopped reading: it failed the connection). */
static void send_chunk(struct client *cl, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    unsigned spins = 0;

    while (len > 0 && reading_conn()) {
        ssize_t n = send(cl->fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            FUZZ_CHECK(errno == EAGAIN || errno == EPIPE ||
                       errno == ECONNRESET);
            if (errno != EAGAIN)
                return;
            n = 0;
        }
        p += n;
        len -= (size_t)n;
        turn(cl);
        FUZZ_CHECK(++spins < SPIN_LIMIT);
    }
    for (;;) {
        struct conn *c = reading_conn();
        uv_os_fd_t sock;
        int unread = 0;
        if (!c || uv_fileno((uv_handle_t *)&c->pipe, &sock) < 0 ||
            ioctl(sock, FIONREAD, &unread) < 0 || unread == 0)
            break;
        turn(cl);
        FUZZ_CHECK(++spins < SPIN_LIMIT);
    }
}

static void send_envelope(struct client *cl, const Heapd__Envelope *env)
{
    uint8_t *buf;
    size_t len;
    if (frame_pack(env, &buf, &len) == 0) {
        send_chunk(cl, buf, len);
        free(buf);
    }
}

static void send_hello(struct client *cl, uint8_t mode)
{
    Heapd__Hello h = HEAPD__HELLO__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    h.protocol_version = PROTOCOL_VERSION;
    h.heap = (char *)(mode & 2 ? "tiny" : "default");
    h.client_name = (char *)"fuzz";
    h.pid = (int32_t)getpid();
    h.kind = mode & 4 ? HEAPD__CLIENT_KIND__CLIENT_CONTROL
                      : HEAPD__CLIENT_KIND__CLIENT_MUTATOR;
    env.body_case = HEAPD__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    send_envelope(cl, &env);
}

/* ---- reading the input ---- */

struct input {
    const uint8_t *p;
    size_t n;
};

static uint64_t take(struct input *in, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++) {
        uint8_t b = 0;
        if (in->n) {
            b = *in->p++;
            in->n--;
        }
        v |= (uint64_t)b << (8 * i);
    }
    return v;
}

static void take_bytes(struct input *in, size_t want, const uint8_t **p,
                       size_t *len)
{
    *len = want < in->n ? want : in->n;
    *p = in->p;
    in->p += *len;
    in->n -= *len;
}

/* op 2: an envelope of arm ARM with fields from the input. */
static void send_template(struct client *cl, struct input *in)
{
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    Heapd__StatsRequest stats = HEAPD__STATS_REQUEST__INIT;
    Heapd__CollectRequest collect = HEAPD__COLLECT_REQUEST__INIT;
    Heapd__AttachRequest attach = HEAPD__ATTACH_REQUEST__INIT;
    Heapd__DetachRequest detach = HEAPD__DETACH_REQUEST__INIT;
    Heapd__SegmentRequest segreq = HEAPD__SEGMENT_REQUEST__INIT;
    Heapd__SegmentReturn segret = HEAPD__SEGMENT_RETURN__INIT;
    Heapd__UrsBatch urs = HEAPD__URS_BATCH__INIT;
    Heapd__GlobalClaim claim = HEAPD__GLOBAL_CLAIM__INIT;
    Heapd__GlobalsRequest globals = HEAPD__GLOBALS_REQUEST__INIT;
    Heapd__Hello hello = HEAPD__HELLO__INIT;
    Heapd__RemarkDone rdone = HEAPD__REMARK_DONE__INIT;
    Heapd__Goodbye bye = HEAPD__GOODBYE__INIT;
    uint32_t segs[16], classes[4];
    char name[80];
    const uint8_t *bytes;
    size_t len;

    unsigned arm = (unsigned)take(in, 1);
    env.seq = take(in, 1);
    switch (arm % 13) {
    case 0:
        env.body_case = HEAPD__ENVELOPE__BODY_STATS_REQUEST;
        env.stats_request = &stats;
        break;
    case 1:
        collect.wait = take(in, 1) & 1;
        env.body_case = HEAPD__ENVELOPE__BODY_COLLECT_REQUEST;
        env.collect_request = &collect;
        break;
    case 2:
        env.body_case = HEAPD__ENVELOPE__BODY_ATTACH_REQUEST;
        env.attach_request = &attach;
        break;
    case 3:
        detach.slot = (uint32_t)take(in, 1);
        env.body_case = HEAPD__ENVELOPE__BODY_DETACH_REQUEST;
        env.detach_request = &detach;
        break;
    case 4:
        segreq.kind = (Heapd__SegmentKind)(take(in, 1) % 4);
        segreq.count = (uint32_t)take(in, 1);
        segreq.bytes = take(in, 1) << take(in, 1) % 40;
        /* size classes, real ones and not (Note [Reusing partly free
         * segments]): a byte each, 0xff standing for UINT32_MAX */
        segreq.n_classes = take(in, 1) % 4;
        for (size_t i = 0; i < segreq.n_classes; i++) {
            uint32_t b = (uint32_t)take(in, 1);
            classes[i] = b == 0xff ? UINT32_MAX : b;
        }
        segreq.classes = classes;
        env.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST;
        env.segment_request = &segreq;
        break;
    case 5:
        /* data segments start at 128 in both heaps (16M control area) */
        segret.n_segments = take(in, 1) % 16;
        for (size_t i = 0; i < segret.n_segments; i++)
            segs[i] = 120 + (uint32_t)take(in, 1) % 400;
        segret.segments = segs;
        env.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_RETURN;
        env.segment_return = &segret;
        break;
    case 6:
        urs.slot = (uint32_t)take(in, 1);
        urs.head = take(in, 2);
        env.body_case = HEAPD__ENVELOPE__BODY_URS_BATCH;
        env.urs_batch = &urs;
        break;
    case 7:
        claim.once = take(in, 1) & 1;
        take_bytes(in, take(in, 1) % 72, &bytes, &len);
        memcpy(name, bytes, len);
        name[len] = '\0';
        claim.name = name;
        env.body_case = HEAPD__ENVELOPE__BODY_GLOBAL_CLAIM;
        env.global_claim = &claim;
        break;
    case 8:
        env.body_case = HEAPD__ENVELOPE__BODY_GLOBALS_REQUEST;
        env.globals_request = &globals;
        break;
    case 9: {
        uint8_t b = (uint8_t)take(in, 1);
        hello.protocol_version = b & 8 ? b >> 4 : PROTOCOL_VERSION;
        hello.heap = (char *)(b & 1 ? "tiny" : b & 2 ? "nosuch" : "");
        hello.kind = (Heapd__ClientKind)(b >> 2 & 1);
        env.body_case = HEAPD__ENVELOPE__BODY_HELLO;
        env.hello = &hello;
        break;
    }
    case 10:
        /* answers to remark requests never made, or made: segments the
         * client may or may not own (Note [Remark]) */
        rdone.n_rescanned = take(in, 1) % 8;
        rdone.n_released = take(in, 1) % 8;
        for (size_t i = 0; i < rdone.n_rescanned + rdone.n_released; i++)
            segs[i] = 120 + (uint32_t)take(in, 1) % 400;
        rdone.rescanned = segs;
        rdone.released = segs + rdone.n_rescanned;
        env.body_case = HEAPD__ENVELOPE__BODY_REMARK_DONE;
        env.remark_done = &rdone;
        break;
    case 11:
        /* and anything after it is refused (Note [Client lifecycle]) */
        env.body_case = HEAPD__ENVELOPE__BODY_GOODBYE;
        env.goodbye = &bye;
        break;
    default: {
        /* a message only the daemon sends */
        static Heapd__CollectDone done = HEAPD__COLLECT_DONE__INIT;
        env.body_case = HEAPD__ENVELOPE__BODY_COLLECT_DONE;
        env.collect_done = &done;
        break;
    }
    }
    send_envelope(cl, &env);
}

/* op 3: the client writes words of its own mutator slot. */
static void poke_slot(struct input *in)
{
    unsigned slot = (unsigned)take(in, 1) % LAYOUT_MAX_MUTATORS;
    unsigned field = (unsigned)take(in, 1);
    uint64_t value = take(in, 8);
    struct conn *c = d->conns;

    if (!c || !c->heap || !(c->slots[slot / 64] >> (slot % 64) & 1))
        return;
    struct layout_mutator *m = heap_slot(c->heap, slot);
    if (field % 2 == 0)
        atomic_store(&m->urs_head, atomic_load(&m->urs_tail) + value % 64 +
                                       (field & 0x80 ? value : 0));
    else
        atomic_store(&m->urs[(field >> 1) % LAYOUT_URS_SIZE],
                     (void *)(uintptr_t)value);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct client cl = {.fd = -1};
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct input in = {data, size};
    unsigned spins = 0;

    if (!d)
        setup();
    FUZZ_CHECK(d->n_conns == 0);
    frame_reader_init(&cl.replies, 0);
    cl.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(cl.fd >= 0);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", d->socket_path);
    FUZZ_CHECK(connect(cl.fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    while (d->n_conns == 0) { /* on_connection accepts it */
        turn(&cl);
        FUZZ_CHECK(++spins < SPIN_LIMIT);
    }

    uint8_t mode = (uint8_t)take(&in, 1);
    if (mode & 1)
        send_hello(&cl, mode);
    while (in.n > 0 && reading_conn()) {
        const uint8_t *bytes;
        size_t len;
        switch (take(&in, 1) % 5) {
        case 0: {
            take_bytes(&in, (size_t)take(&in, 2), &bytes, &len);
            uint8_t *frame = malloc(FRAME_HEADER_SIZE + len);
            FUZZ_CHECK(frame);
            frame[0] = (uint8_t)(len >> 24);
            frame[1] = (uint8_t)(len >> 16);
            frame[2] = (uint8_t)(len >> 8);
            frame[3] = (uint8_t)len;
            memcpy(frame + FRAME_HEADER_SIZE, bytes, len);
            send_chunk(&cl, frame, FRAME_HEADER_SIZE + len);
            free(frame);
            break;
        }
        case 1:
            take_bytes(&in, (size_t)take(&in, 2), &bytes, &len);
            send_chunk(&cl, bytes, len);
            break;
        case 2:
            send_template(&cl, &in);
            break;
        case 3:
            poke_slot(&in);
            break;
        default:
            turn(&cl);
            break;
        }
    }

    /* end of stream: the daemon closes the connection and frees it */
    shutdown(cl.fd, SHUT_WR);
    spins = 0;
    while (d->n_conns > 0 || !cl.eof) {
        turn(&cl);
        FUZZ_CHECK(++spins < SPIN_LIMIT);
    }
    close(cl.fd);
    frame_reader_free(&cl.replies);
    return 0;
}
