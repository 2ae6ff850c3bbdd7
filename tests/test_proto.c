/* Unit tests of proto/: framing (Note [Frames]), message round trips, fd
 * passing (Note [Passing the heap fd]), the control-area check (Note [Heap
 * mapping]), and the error tables (Note [Error table]) and messages of
 * client/errors.c, which is compiled in. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"
#include "fdpass.h"
#include "frame.h"
#include "heapd.h"
#include "layout.h"
#include "wire.h"
#include "check_main.h"

/* ---- helpers ---- */

struct collected {
    int n;
    Heapd__Envelope *env[16];
    int stop_after; /* return -EINTR after this many, 0: never */
    int keep;       /* return 1 (take ownership) */
    int pause_at;   /* or in FRAME_PAUSE at this count, 0: never */
};

static int collect(void *arg, Heapd__Envelope *env)
{
    struct collected *c = arg;
    ck_assert_int_lt(c->n, 16);
    /* copy out the facts we check: the envelope is freed after return */
    c->env[c->n] = c->keep ? env : NULL;
    c->n++;
    if (c->stop_after && c->n == c->stop_after)
        return -EINTR;
    return (c->keep ? FRAME_TAKEN : 0) |
           (c->pause_at && c->n == c->pause_at ? FRAME_PAUSE : 0);
}

static uint8_t *pack_hello(const char *heap, size_t *len)
{
    Heapd__Hello h = HEAPD__HELLO__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    uint8_t *buf;
    h.protocol_version = PROTOCOL_VERSION;
    h.heap = (char *)heap;
    h.client_name = (char *)"t";
    h.pid = 42;
    env.seq = 7;
    env.body_case = HEAPD__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    ck_assert_int_eq(frame_pack(&env, &buf, len), 0);
    return buf;
}

static void free_collected(struct collected *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->env[i])
            heapd__envelope__free_unpacked(c->env[i], NULL);
}

/* ---- framing ---- */

/* Note [Frames]: a handler that pauses stops the reader after its frame;
 * the rest of the read, a partial frame included, waits for resume. */
START_TEST(frame_pause_and_resume)
{
    size_t len;
    uint8_t *one = pack_hello("default", &len);
    uint8_t buf[4096];
    ck_assert_uint_lt(3 * len, sizeof buf);
    memcpy(buf, one, len);
    memcpy(buf + len, one, len);
    memcpy(buf + 2 * len, one, len);
    frame_reader r;
    struct collected c = {.keep = 1, .pause_at = 1};
    frame_reader_init(&r, 0);
    /* two and a half frames: pause after the first */
    ck_assert_int_eq(frame_reader_feed(&r, buf, 2 * len + len / 2, collect, &c),
                     FRAME_PAUSE);
    ck_assert_int_eq(c.n, 1);
    ck_assert_uint_eq(frame_reader_pending(&r), len + len / 2);
    /* resume: the second, then the half frame stays partial */
    ck_assert_int_eq(frame_reader_resume(&r, collect, &c), 0);
    ck_assert_int_eq(c.n, 2);
    ck_assert_uint_eq(frame_reader_pending(&r), len / 2);
    ck_assert_int_eq(frame_reader_resume(&r, collect, &c), 0); /* no-op */
    ck_assert_int_eq(frame_reader_feed(&r, buf + 2 * len + len / 2,
                                       len - len / 2, collect, &c), 0);
    ck_assert_int_eq(c.n, 3);
    ck_assert_uint_eq(frame_reader_pending(&r), 0);
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(c.env[i]->hello->heap, "default");
    /* a pause while completing a held partial frame keeps what follows */
    struct collected d = {.pause_at = 1};
    ck_assert_int_eq(frame_reader_feed(&r, buf, len - 1, collect, &d), 0);
    ck_assert_int_eq(frame_reader_feed(&r, buf + len - 1, len + 1, collect,
                                       &d), FRAME_PAUSE);
    ck_assert_int_eq(d.n, 1);
    ck_assert_uint_eq(frame_reader_pending(&r), len);
    ck_assert_int_eq(frame_reader_resume(&r, collect, &d), 0);
    ck_assert_int_eq(d.n, 2);
    free_collected(&c);
    free(one);
    frame_reader_free(&r);
}
END_TEST

START_TEST(frame_whole)
{
    size_t len;
    uint8_t *buf = pack_hello("default", &len);
    frame_reader r;
    struct collected c = {.keep = 1};
    frame_reader_init(&r, 0);
    ck_assert_int_eq(frame_reader_feed(&r, buf, len, collect, &c), 0);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.env[0]->body_case, HEAPD__ENVELOPE__BODY_HELLO);
    ck_assert_str_eq(c.env[0]->hello->heap, "default");
    ck_assert_uint_eq(c.env[0]->seq, 7);
    ck_assert_uint_eq(frame_reader_pending(&r), 0);
    free_collected(&c);
    frame_reader_free(&r);
    free(buf);
}
END_TEST

/* Every split point of a stream of three frames delivers the same three. */
START_TEST(frame_split_everywhere)
{
    size_t l1, l2, l3;
    uint8_t *a = pack_hello("a", &l1), *b = pack_hello("bb", &l2),
            *c3 = pack_hello("ccc", &l3);
    size_t total = l1 + l2 + l3;
    uint8_t *s = malloc(total);
    memcpy(s, a, l1);
    memcpy(s + l1, b, l2);
    memcpy(s + l1 + l2, c3, l3);
    for (size_t cut1 = 0; cut1 <= total; cut1++) {
        for (size_t cut2 = cut1; cut2 <= total; cut2 += 3) {
            frame_reader r;
            struct collected c = {.keep = 1};
            frame_reader_init(&r, 0);
            ck_assert_int_eq(frame_reader_feed(&r, s, cut1, collect, &c), 0);
            ck_assert_int_eq(
                frame_reader_feed(&r, s + cut1, cut2 - cut1, collect, &c), 0);
            ck_assert_int_eq(
                frame_reader_feed(&r, s + cut2, total - cut2, collect, &c), 0);
            ck_assert_int_eq(c.n, 3);
            ck_assert_str_eq(c.env[0]->hello->heap, "a");
            ck_assert_str_eq(c.env[1]->hello->heap, "bb");
            ck_assert_str_eq(c.env[2]->hello->heap, "ccc");
            ck_assert_uint_eq(frame_reader_pending(&r), 0);
            free_collected(&c);
            frame_reader_free(&r);
        }
    }
    free(s);
    free(a);
    free(b);
    free(c3);
}
END_TEST

START_TEST(frame_one_byte_at_a_time)
{
    size_t len;
    uint8_t *buf = pack_hello("default", &len);
    frame_reader r;
    struct collected c = {0};
    frame_reader_init(&r, 0);
    for (size_t i = 0; i < len; i++) {
        ck_assert_int_eq(c.n, 0);
        ck_assert_int_eq(frame_reader_feed(&r, buf + i, 1, collect, &c), 0);
    }
    ck_assert_int_eq(c.n, 1);
    frame_reader_free(&r);
    free(buf);
}
END_TEST

START_TEST(frame_oversized_rejected_before_payload)
{
    /* a header announcing 2 GiB: rejected on its 4 bytes alone */
    uint8_t hdr[4] = {0x80, 0, 0, 0};
    frame_reader r;
    struct collected c = {0};
    frame_reader_init(&r, 0);
    ck_assert_int_eq(frame_reader_feed(&r, hdr, 4, collect, &c), -EMSGSIZE);
    ck_assert_int_eq(c.n, 0);
    ck_assert_uint_lt(r.cap, 1024); /* nothing sized for the payload */
    frame_reader_free(&r);

    /* the same header split across reads */
    frame_reader_init(&r, 0);
    ck_assert_int_eq(frame_reader_feed(&r, hdr, 2, collect, &c), 0);
    ck_assert_int_eq(frame_reader_feed(&r, hdr + 2, 2, collect, &c),
                     -EMSGSIZE);
    frame_reader_free(&r);

    /* one byte over the limit */
    uint32_t n = FRAME_MAX_PAYLOAD + 1;
    uint8_t h2[4] = {n >> 24, n >> 16, n >> 8, n};
    frame_reader_init(&r, 0);
    ck_assert_int_eq(frame_reader_feed(&r, h2, 4, collect, &c), -EMSGSIZE);
    frame_reader_free(&r);
}
END_TEST

START_TEST(frame_custom_limit)
{
    size_t len;
    uint8_t *buf = pack_hello("a-heap-name-long-enough", &len);
    frame_reader r;
    struct collected c = {0};
    frame_reader_init(&r, 8);
    ck_assert_int_eq(frame_reader_feed(&r, buf, len, collect, &c), -EMSGSIZE);
    frame_reader_free(&r);
    free(buf);
}
END_TEST

START_TEST(frame_zero_length)
{
    uint8_t hdr[4] = {0, 0, 0, 0};
    frame_reader r;
    struct collected c = {0};
    frame_reader_init(&r, 0);
    ck_assert_int_eq(frame_reader_feed(&r, hdr, 4, collect, &c), -EMSGSIZE);
    frame_reader_free(&r);
}
END_TEST

START_TEST(frame_garbage_payload)
{
    uint8_t f[4 + 8] = {0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff,
                        0xff, 0xff, 0xff, 0xff};
    frame_reader r;
    struct collected c = {0};
    frame_reader_init(&r, 0);
    ck_assert_int_eq(frame_reader_feed(&r, f, sizeof f, collect, &c),
                     -EBADMSG);
    ck_assert_int_eq(c.n, 0);
    frame_reader_free(&r);
}
END_TEST

/* A valid protobuf with no body arm (only seq) is not a message. */
START_TEST(frame_empty_envelope)
{
    uint8_t f[4 + 2] = {0, 0, 0, 2, 0x08, 0x05}; /* seq = 5 */
    frame_reader r;
    struct collected c = {0};
    frame_reader_init(&r, 0);
    ck_assert_int_eq(frame_reader_feed(&r, f, sizeof f, collect, &c),
                     -EBADMSG);
    frame_reader_free(&r);
}
END_TEST

/* Every arm of the envelope has a name for the log (a new arm without
 * one was logged as "(unknown)"). */
START_TEST(every_arm_is_named)
{
    const ProtobufCMessageDescriptor *d = &heapd__envelope__descriptor;
    unsigned arms = 0;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
            continue;
        Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
        env.body_case = (Heapd__Envelope__BodyCase)f->id;
        ck_assert_msg(strcmp(frame_body_name(&env), "(unknown)") != 0,
                      "envelope arm %s (%u) has no name in frame_body_name",
                      f->name, f->id);
        arms++;
    }
    ck_assert_uint_gt(arms, 20);
}
END_TEST

/* An arm from a newer protocol (field 99, unused) is not understood. */
START_TEST(frame_unknown_arm)
{
    uint8_t f[4 + 2] = {0, 0, 0, 2, 0x9a, 0x06}; /* field 99, len-delim.. */
    uint8_t g[4 + 3] = {0, 0, 0, 3, 0x9a, 0x06, 0x00}; /* ..empty */
    frame_reader r;
    struct collected c = {0};
    frame_reader_init(&r, 0);
    ck_assert_int_eq(frame_reader_feed(&r, f, sizeof f, collect, &c),
                     -EBADMSG);
    frame_reader_free(&r);
    frame_reader_init(&r, 0);
    ck_assert_int_eq(frame_reader_feed(&r, g, sizeof g, collect, &c),
                     -EBADMSG);
    frame_reader_free(&r);
}
END_TEST

START_TEST(frame_truncated_pending)
{
    size_t len;
    uint8_t *buf = pack_hello("default", &len);
    frame_reader r;
    struct collected c = {0};
    frame_reader_init(&r, 0);
    ck_assert_int_eq(frame_reader_feed(&r, buf, len - 1, collect, &c), 0);
    ck_assert_int_eq(c.n, 0);
    ck_assert_uint_eq(frame_reader_pending(&r), len - 1);
    frame_reader_free(&r);
    free(buf);
}
END_TEST

START_TEST(frame_handler_stops)
{
    size_t len;
    uint8_t *buf = pack_hello("x", &len);
    uint8_t two[256];
    memcpy(two, buf, len);
    memcpy(two + len, buf, len);
    frame_reader r;
    struct collected c = {.stop_after = 1};
    frame_reader_init(&r, 0);
    ck_assert_int_eq(frame_reader_feed(&r, two, 2 * len, collect, &c), -EINTR);
    ck_assert_int_eq(c.n, 1);
    frame_reader_free(&r);
    free(buf);
}
END_TEST

/* ---- message round trips ---- */

static Heapd__Envelope *round_trip(const Heapd__Envelope *in)
{
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(frame_pack(in, &buf, &len), 0);
    ck_assert_uint_eq(len, 4 + heapd__envelope__get_packed_size(in));
    Heapd__Envelope *out = frame_decode(buf + 4, len - 4);
    free(buf);
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(out->body_case, in->body_case);
    ck_assert_uint_eq(out->seq, in->seq);
    return out;
}

START_TEST(proto_welcome)
{
    Heapd__Welcome w = HEAPD__WELCOME__INIT;
    Heapd__Envelope e = HEAPD__ENVELOPE__INIT;
    w.protocol_version = PROTOCOL_VERSION;
    w.client_id = 99;
    w.heap = (char *)"h";
    w.heap_base = 0x7e8000000000ULL;
    w.max_size = 1ULL << 40;
    w.segment_size = 128 * 1024;
    w.layout_version = LAYOUT_VERSION;
    w.has_fd = true;
    e.body_case = HEAPD__ENVELOPE__BODY_WELCOME;
    e.welcome = &w;
    Heapd__Envelope *o = round_trip(&e);
    ck_assert_uint_eq(o->welcome->client_id, 99);
    ck_assert_uint_eq(o->welcome->heap_base, 0x7e8000000000ULL);
    ck_assert_uint_eq(o->welcome->max_size, 1ULL << 40);
    ck_assert_uint_eq(o->welcome->segment_size, 128 * 1024);
    ck_assert(o->welcome->has_fd);
    ck_assert_str_eq(o->welcome->heap, "h");
    heapd__envelope__free_unpacked(o, NULL);
}
END_TEST

START_TEST(proto_error)
{
    Heapd__Error er = HEAPD__ERROR__INIT;
    Heapd__Envelope e = HEAPD__ENVELOPE__INIT;
    er.code = HEAPD__ERROR_CODE__ERROR_DENIED;
    er.message = (char *)"no";
    e.seq = 3;
    e.body_case = HEAPD__ENVELOPE__BODY_ERROR;
    e.error = &er;
    Heapd__Envelope *o = round_trip(&e);
    ck_assert_int_eq(o->error->code, HEAPD__ERROR_CODE__ERROR_DENIED);
    ck_assert_str_eq(o->error->message, "no");
    heapd__envelope__free_unpacked(o, NULL);
}
END_TEST

START_TEST(proto_stats)
{
    Heapd__StatsRequest sr = HEAPD__STATS_REQUEST__INIT;
    Heapd__Envelope e = HEAPD__ENVELOPE__INIT;
    e.seq = 11;
    e.body_case = HEAPD__ENVELOPE__BODY_STATS_REQUEST;
    e.stats_request = &sr;
    Heapd__Envelope *o = round_trip(&e);
    heapd__envelope__free_unpacked(o, NULL);

    Heapd__HeapStats h1 = HEAPD__HEAP_STATS__INIT, h2 = HEAPD__HEAP_STATS__INIT;
    Heapd__HeapStats *hs[2] = {&h1, &h2};
    Heapd__StatsReply r = HEAPD__STATS_REPLY__INIT;
    h1.name = (char *)"a";
    h1.committed_bytes = 4096;
    h2.name = (char *)"b";
    h2.clients = 3;
    r.version = (char *)"0.1.0";
    r.uptime_ns = 123456789;
    r.clients_connected = 2;
    r.n_heaps = 2;
    r.heaps = hs;
    e.body_case = HEAPD__ENVELOPE__BODY_STATS_REPLY;
    e.stats_reply = &r;
    o = round_trip(&e);
    ck_assert_uint_eq(o->stats_reply->n_heaps, 2);
    ck_assert_str_eq(o->stats_reply->heaps[0]->name, "a");
    ck_assert_uint_eq(o->stats_reply->heaps[0]->committed_bytes, 4096);
    ck_assert_uint_eq(o->stats_reply->heaps[1]->clients, 3);
    ck_assert_uint_eq(o->stats_reply->uptime_ns, 123456789);
    heapd__envelope__free_unpacked(o, NULL);
}
END_TEST

START_TEST(proto_pack_too_big)
{
    Heapd__Error er = HEAPD__ERROR__INIT;
    Heapd__Envelope e = HEAPD__ENVELOPE__INIT;
    char *big = malloc(FRAME_MAX_PAYLOAD + 1);
    memset(big, 'x', FRAME_MAX_PAYLOAD);
    big[FRAME_MAX_PAYLOAD] = '\0';
    er.message = big;
    e.body_case = HEAPD__ENVELOPE__BODY_ERROR;
    e.error = &er;
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(frame_pack(&e, &buf, &len), -EMSGSIZE);
    free(big);
}
END_TEST

/* ---- fd passing ---- */

START_TEST(fdpass_memfd)
{
    int sv[2], fd, got[FDPASS_MAX];
    unsigned n;
    char buf[8];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fd = memfd_create("t", MFD_CLOEXEC);
    ck_assert_int_eq(ftruncate(fd, 12345), 0);
    ck_assert_int_eq(fdpass_send(sv[0], "abcd", 4, &fd, 1), 4);
    ck_assert_int_eq(fdpass_recv(sv[1], buf, sizeof buf, got, &n), 4);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_ge(got[0], 0);
    ck_assert_int_ne(got[0], fd);
    ck_assert_int_eq(got[1], -1);
    struct stat st;
    ck_assert_int_eq(fstat(got[0], &st), 0);
    ck_assert_int_eq(st.st_size, 12345);
    ck_assert_int_ne(fcntl(got[0], F_GETFD) & FD_CLOEXEC, 0);
    close(got[0]);
    close(fd);
    /* no fd: plain bytes */
    ck_assert_int_eq(send(sv[0], "zz", 2, 0), 2);
    ck_assert_int_eq(fdpass_recv(sv[1], buf, sizeof buf, got, &n), 2);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(got[0], -1);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

/* The heap and the daemon's page in one message, the second read-only. */
START_TEST(fdpass_two_fds)
{
    int sv[2], fds[2], got[FDPASS_MAX];
    unsigned n;
    char buf[8];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fds[0] = memfd_create("heap", MFD_CLOEXEC);
    fds[1] = memfd_create("page", MFD_CLOEXEC);
    ck_assert_int_eq(ftruncate(fds[1], 4096), 0);
    ck_assert_int_eq(fdpass_send(sv[0], "w", 1, fds, 2), 1);
    ck_assert_int_eq(fdpass_recv(sv[1], buf, sizeof buf, got, &n), 1);
    ck_assert_uint_eq(n, 2);
    struct stat a, b;
    ck_assert_int_eq(fstat(got[1], &a), 0);
    ck_assert_int_eq(fstat(fds[1], &b), 0);
    ck_assert_uint_eq(a.st_ino, b.st_ino);
    for (int i = 0; i < 2; i++) {
        close(got[i]);
        close(fds[i]);
    }
    ck_assert_int_eq(fdpass_send(sv[0], "w", 1, fds, FDPASS_MAX + 1), -EINVAL);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

/* More fds than the receiver accepts: refused, and none leaks. */
START_TEST(fdpass_too_many)
{
    int sv[2], got[FDPASS_MAX], fds[8];
    unsigned n;
    char buf[8];
    union {
        char b[CMSG_SPACE(sizeof fds)];
        struct cmsghdr a;
    } ctl;
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    for (int i = 0; i < 8; i++)
        fds[i] = memfd_create("t", MFD_CLOEXEC);
    struct iovec iov = {.iov_base = "x", .iov_len = 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cm), fds, sizeof fds);
    ck_assert_int_eq(sendmsg(sv[0], &m, 0), 1);
    for (int i = 0; i < 8; i++)
        close(fds[i]);

    int probe = dup(0);
    close(probe); /* the lowest free fd number now */
    ck_assert_int_eq(fdpass_recv(sv[1], buf, sizeof buf, got, &n), -EBADMSG);
    ck_assert_int_eq(got[0], -1);
    ck_assert_uint_eq(n, 0);
    int after = dup(0);
    ck_assert_int_eq(after, probe); /* nothing received was left open */
    close(after);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(fdpass_two_messages_of_one_fd)
{
    /* two fds in two SCM_RIGHTS blocks on the same byte range */
    int sv[2], got[FDPASS_MAX];
    unsigned n;
    char buf[8];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int a = memfd_create("a", 0), b = memfd_create("b", 0);
    ck_assert_int_eq(fdpass_send(sv[0], "1", 1, &a, 1), 1);
    ck_assert_int_eq(fdpass_send(sv[0], "2", 1, &b, 1), 1);
    /* stream sockets do not merge segments carrying fds */
    ck_assert_int_eq(fdpass_recv(sv[1], buf, sizeof buf, got, &n), 1);
    ck_assert_int_ge(got[0], 0);
    close(got[0]);
    ck_assert_int_eq(fdpass_recv(sv[1], buf, sizeof buf, got, &n), 1);
    ck_assert_int_ge(got[0], 0);
    close(got[0]);
    close(a);
    close(b);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

/* ---- control area ---- */

START_TEST(layout_checks)
{
    /* the control area is page-aligned (Note [The daemon's page]) */
    struct layout_control *c = aligned_alloc(LAYOUT_DAEMON_BYTES, sizeof *c);
    ck_assert_ptr_nonnull(c);
    memset(c, 0, sizeof *c);
    const uint64_t base = 0x7e8000000000ULL, max = 1ULL << 30, seg = 1 << 17;
    layout_init_control(c, "default", base, max, seg);
    ck_assert_int_eq(layout_check_control(c, base, max, seg), 0);
    ck_assert_uint_eq(c->epoch, 1);
    ck_assert_uint_eq(c->control_segments, LAYOUT_CONTROL_BYTES / seg);
    ck_assert_uint_eq(c->segment_count, max / seg);
    ck_assert_int_eq(layout_check_control(c, base + seg, max, seg), -EINVAL);
    ck_assert_int_eq(layout_check_control(c, base, max / 2, seg), -EINVAL);
    ck_assert_int_eq(layout_check_control(c, base, max, seg * 2), -EINVAL);
    c->layout_version++;
    ck_assert_int_eq(layout_check_control(c, base, max, seg),
                     -EPROTONOSUPPORT);
    c->layout_version--;
    c->magic ^= 1;
    ck_assert_int_eq(layout_check_control(c, base, max, seg), -EPROTO);
    free(c);
    ck_assert_uint_eq(layout_control_segments(16 * 1024),
                      LAYOUT_CONTROL_BYTES / (16 * 1024));
}
END_TEST

/* ---- the error tables (Note [Error table]) ---- */

struct error_row {
    int value, errnum;
    const char *name, *message;
};
#define ERROR_ROW_(name, value, errnum, message) {value, errnum, #name, message},
static const struct error_row error_rows[] = {HEAPD_ERRORS(ERROR_ROW_)};
#undef ERROR_ROW_
#define N_ERRORS (sizeof error_rows / sizeof error_rows[0])

struct wire_row {
    Heapd__ErrorCode wire;
    const char *name;
    int code;
};
#define WIRE_ROW_(wire, code) {HEAPD__ERROR_CODE__ERROR_##wire, #wire, code},
static const struct wire_row wire_rows[] = {HEAPD_WIRE_ERRORS(WIRE_ROW_)};
#undef WIRE_ROW_
#define N_WIRE (sizeof wire_rows / sizeof wire_rows[0])

/* The row of HEAPD_ERRORS for CODE, or NULL. */
static const struct error_row *error_row_of(int code)
{
    for (size_t i = 0; i < N_ERRORS; i++)
        if (error_rows[i].value == code)
            return &error_rows[i];
    return NULL;
}

/* Each code: a name as the man page and man_keys.sh spell it
 * (HEAPD_E[A-Z]+), the next value down from -1001 (so none is reused or an
 * errno), a message, a real errno; and libheapd's functions give the
 * row's. */
/* The class of every small size is the smallest that holds it, wasting
 * at most 1/8 of its block; a power-of-two payload with its header has a
 * class of its own size; and every class is usable in the default
 * segments (at least one block). */
START_TEST(size_classes)
{
    for (unsigned c = 1; c < LAYOUT_CLASS_RUN; c++)
        ck_assert_uint_lt(layout_class_size[c - 1], layout_class_size[c]);
    ck_assert_uint_eq(layout_class_size[LAYOUT_CLASS_RUN - 1],
                      LAYOUT_MAX_SMALL);
    for (uint32_t size = 16; size <= LAYOUT_MAX_SMALL; size += 8) {
        unsigned c = layout_size_class(size);
        ck_assert_msg(c < LAYOUT_CLASS_RUN, "size %u: class %u", size, c);
        uint32_t bs = layout_class_size[c];
        ck_assert_msg(bs >= size && (c == 0 || layout_class_size[c - 1] < size),
                      "size %u: class %u of %u bytes is not the smallest "
                      "that holds it", size, c, bs);
        ck_assert_msg((uint64_t)(bs - size) * 8 <= bs,
                      "size %u wastes %u of %u bytes", size, bs - size, bs);
    }
    for (uint32_t p = 16; p < LAYOUT_MAX_SMALL; p *= 2)
        ck_assert_uint_eq(
            layout_class_size[layout_size_class(p + LAYOUT_WORD)],
            p + LAYOUT_WORD);
    for (unsigned c = 0; c < LAYOUT_NCLASSES; c++) {
        uint32_t n, first;
        layout_small_geometry(128 * 1024, c, &n, &first);
        ck_assert_msg(n >= 1, "class %u has no block", c);
    }
}
END_TEST

START_TEST(error_table_rows)
{
    ck_assert_uint_ge(N_ERRORS, 10);
    for (size_t i = 0; i < N_ERRORS; i++) {
        const struct error_row *e = &error_rows[i];
        ck_assert_msg(strncmp(e->name, "HEAPD_E", 7) == 0 &&
                          e->name[7] != '\0' &&
                          strspn(e->name + 7, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") ==
                              strlen(e->name + 7),
                      "%s: not HEAPD_E and capitals", e->name);
        ck_assert_msg(e->value == -1001 - (int)i,
                      "%s is %d, not the next value down (%d)", e->name,
                      e->value, -1001 - (int)i);
        ck_assert_msg(e->message && e->message[0], "%s has no message",
                      e->name);
        ck_assert_str_eq(heapd_strerror(e->value), e->message);
        ck_assert_str_eq(heapd_errname(e->value), e->name);
        ck_assert_msg(e->errnum > 0 &&
                          strcmp(heapd_errname(-e->errnum), "unknown") != 0,
                      "%s: errno %d is not an errno value", e->name,
                      e->errnum);
        ck_assert_int_eq(client_errno(e->value), e->errnum);
    }
}
END_TEST

/* Every ErrorCode of heapd.proto has one line of HEAPD_WIRE_ERRORS, and
 * what it gives is a code of HEAPD_ERRORS or a negated errno value; through
 * client_error_code and back through client_errno, each agrees with its
 * table. */
START_TEST(error_table_wire)
{
    const ProtobufCEnumDescriptor *d = &heapd__error_code__descriptor;
    for (unsigned i = 0; i < d->n_values; i++) {
        unsigned lines = 0;
        for (size_t j = 0; j < N_WIRE; j++)
            lines += wire_rows[j].wire == (Heapd__ErrorCode)d->values[i].value;
        ck_assert_msg(lines == 1, "ErrorCode %s has %u lines in "
                      "HEAPD_WIRE_ERRORS, not 1", d->values[i].name, lines);
    }
    ck_assert_uint_eq(N_WIRE, d->n_values);

    unsigned heapd_codes = 0;
    for (size_t j = 0; j < N_WIRE; j++) {
        const struct wire_row *w = &wire_rows[j];
        int rc = client_error_code(w->wire);
        const struct error_row *e = error_row_of(rc);
        if (e) {
            /* heapd code -> ErrorCode -> the same heapd code, and its errno */
            heapd_codes++;
            ck_assert_int_eq(client_errno(rc), e->errnum);
        } else {
            ck_assert_msg(rc < 0 && rc >= -1000 &&
                              strcmp(heapd_errname(rc), "unknown") != 0,
                          "ERROR_%s gives %d: neither a HEAPD_E* code nor a "
                          "negated errno value", w->name, rc);
            ck_assert_int_eq(client_errno(rc), -rc);
            ck_assert_str_eq(heapd_strerror(rc), strerror(-rc));
        }
    }
    ck_assert_uint_gt(heapd_codes, 0);
    /* an ErrorCode newer than this libheapd */
    ck_assert_int_eq(client_error_code((Heapd__ErrorCode)1000), HEAPD_EPROTO);
}
END_TEST

/* What heapd.h promises for what no table has. */
START_TEST(error_table_outside)
{
    const int past = error_rows[N_ERRORS - 1].value - 1;
    ck_assert_str_eq(heapd_errname(-ENOMEM), "ENOMEM");
    ck_assert_str_eq(heapd_errname(-EAGAIN), "EAGAIN");
    ck_assert_int_eq(client_errno(-ENOMEM), ENOMEM);
    ck_assert_str_eq(heapd_strerror(0), "success");
    ck_assert_str_eq(heapd_errname(0), "unknown");
    ck_assert_str_eq(heapd_errname(7), "unknown");
    ck_assert_str_eq(heapd_errname(-1000), "unknown");
    /* negative, above every HEAPD_E* code, yet no errno value: unknown to
     * all three, not glibc's "Unknown error 500" nor errno 500 */
    for (int bad = -1000; bad <= -500; bad += 500) {
        ck_assert_str_eq(heapd_errname(bad), "unknown");
        ck_assert_str_eq(heapd_strerror(bad), "unknown heapd error");
        ck_assert_int_eq(client_errno(bad), EPROTO);
    }
    ck_assert_str_eq(heapd_errname(past), "unknown");
    ck_assert_str_eq(heapd_strerror(past), "unknown heapd error");
    ck_assert_str_eq(heapd_strerror(7), "unknown heapd error");
    ck_assert_int_eq(client_errno(past), EPROTO);
}
END_TEST

/* The message of a reply that answers nothing it should, with and without
 * a detail. */
START_TEST(bad_reply_message)
{
    Heapd__Envelope rep = HEAPD__ENVELOPE__INIT;
    rep.body_case = HEAPD__ENVELOPE__BODY_GLOBAL_DELETED;
    ck_assert_int_eq(client_bad_reply("global_delete", &rep, "result %d", 7),
                     HEAPD_EPROTO);
    ck_assert_str_eq(heapd_last_error(),
                     "heapd answered global_delete with global_deleted: "
                     "result 7; use a libheapd built with the daemon's proto/");
    rep.body_case = HEAPD__ENVELOPE__BODY_STATS_REPLY;
    ck_assert_int_eq(client_bad_reply("collect_request", &rep, NULL),
                     HEAPD_EPROTO);
    ck_assert_str_eq(heapd_last_error(),
                     "heapd answered collect_request with stats_reply; use a "
                     "libheapd built with the daemon's proto/");
}
END_TEST

static Suite *proto_suite(void)
{
    Suite *s = suite_create("proto");
    TCase *f = tcase_create("frame");
    tcase_add_test(f, frame_whole);
    tcase_add_test(f, frame_pause_and_resume);
    tcase_add_test(f, frame_split_everywhere);
    tcase_add_test(f, frame_one_byte_at_a_time);
    tcase_add_test(f, frame_oversized_rejected_before_payload);
    tcase_add_test(f, frame_custom_limit);
    tcase_add_test(f, frame_zero_length);
    tcase_add_test(f, frame_garbage_payload);
    tcase_add_test(f, frame_empty_envelope);
    tcase_add_test(f, frame_unknown_arm);
    tcase_add_test(f, every_arm_is_named);
    tcase_add_test(f, frame_truncated_pending);
    tcase_add_test(f, frame_handler_stops);
    tcase_set_timeout(f, 60);
    suite_add_tcase(s, f);
    TCase *m = tcase_create("messages");
    tcase_add_test(m, proto_welcome);
    tcase_add_test(m, proto_error);
    tcase_add_test(m, proto_stats);
    tcase_add_test(m, proto_pack_too_big);
    suite_add_tcase(s, m);
    TCase *p = tcase_create("fdpass");
    tcase_add_test(p, fdpass_memfd);
    tcase_add_test(p, fdpass_two_fds);
    tcase_add_test(p, fdpass_too_many);
    tcase_add_test(p, fdpass_two_messages_of_one_fd);
    suite_add_tcase(s, p);
    TCase *l = tcase_create("layout");
    tcase_add_test(l, layout_checks);
    tcase_add_test(l, size_classes);
    suite_add_tcase(s, l);
    TCase *e = tcase_create("errors");
    tcase_add_test(e, error_table_rows);
    tcase_add_test(e, error_table_wire);
    tcase_add_test(e, error_table_outside);
    tcase_add_test(e, bad_reply_message);
    suite_add_tcase(s, e);
    return s;
}

int main(void)
{
    return check_main(proto_suite());
}
