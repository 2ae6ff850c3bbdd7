/* Writes the seed corpus of fuzz/corpus/frame, fuzz/corpus/session and
 * fuzz/corpus/shared (the config seeds are plain text, kept by hand): a
 * valid frame of every envelope arm and a few broken streams, client
 * sessions that reach every handler, and attackers that write each kind
 * of shared word.  Run by `scripts/fuzz --seed`; its output is committed,
 * this program's only.  The input formats are described at the top of
 * fuzz_frame.c, fuzz_session.c and fuzz_shared.c.
 *
 * usage: fuzz_seed CORPUS_DIR
 * (writes CORPUS_DIR/{frame,session,shared}/seed-*) */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "wire.h"

struct buf {
    uint8_t b[8192];
    size_t n;
};

static void put(struct buf *b, const void *p, size_t n)
{
    if (b->n + n > sizeof b->b) {
        fprintf(stderr, "fuzz_seed: a seed outgrew its buffer\n");
        exit(1);
    }
    memcpy(b->b + b->n, p, n);
    b->n += n;
}

static void put8(struct buf *b, unsigned v)
{
    uint8_t c = (uint8_t)v;
    put(b, &c, 1);
}

static void put16(struct buf *b, size_t v)
{
    put8(b, (unsigned)(v & 0xff));
    put8(b, (unsigned)(v >> 8));
}

static int write_seed(const char *dir, const char *target, const char *name,
                      const struct buf *b)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/seed-%s", dir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b->b, 1, b->n, f) != b->n || fclose(f) != 0) {
        fprintf(stderr, "fuzz_seed: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- one envelope of each arm ---- */

static Heapd__Hello hello = HEAPD__HELLO__INIT;
static Heapd__Welcome welcome = HEAPD__WELCOME__INIT;
static Heapd__Error error = HEAPD__ERROR__INIT;
static Heapd__StatsRequest stats_request = HEAPD__STATS_REQUEST__INIT;
static Heapd__StatsReply stats_reply = HEAPD__STATS_REPLY__INIT;
static Heapd__HeapStats heap_stats = HEAPD__HEAP_STATS__INIT;
static Heapd__HeapStats *heap_stats_p[1] = {&heap_stats};
static Heapd__SegmentRequest segment_request = HEAPD__SEGMENT_REQUEST__INIT;
static Heapd__SegmentGrant segment_grant = HEAPD__SEGMENT_GRANT__INIT;
static Heapd__SegmentReturn segment_return = HEAPD__SEGMENT_RETURN__INIT;
static Heapd__UrsBatch urs_batch = HEAPD__URS_BATCH__INIT;
static Heapd__CollectRequest collect_request = HEAPD__COLLECT_REQUEST__INIT;
static Heapd__CollectDone collect_done = HEAPD__COLLECT_DONE__INIT;
static Heapd__AttachRequest attach_request = HEAPD__ATTACH_REQUEST__INIT;
static Heapd__AttachReply attach_reply = HEAPD__ATTACH_REPLY__INIT;
static Heapd__DetachRequest detach_request = HEAPD__DETACH_REQUEST__INIT;
static Heapd__DetachReply detach_reply = HEAPD__DETACH_REPLY__INIT;
static Heapd__GlobalClaim global_claim = HEAPD__GLOBAL_CLAIM__INIT;
static Heapd__GlobalClaimed global_claimed = HEAPD__GLOBAL_CLAIMED__INIT;
static Heapd__GlobalsRequest globals_request = HEAPD__GLOBALS_REQUEST__INIT;
static Heapd__GlobalsReply globals_reply = HEAPD__GLOBALS_REPLY__INIT;
static Heapd__GlobalInfo global_info = HEAPD__GLOBAL_INFO__INIT;
static Heapd__GlobalInfo *global_info_p[1] = {&global_info};
static Heapd__RemarkRequest remark_request = HEAPD__REMARK_REQUEST__INIT;
static Heapd__RemarkDone remark_done = HEAPD__REMARK_DONE__INIT;
static Heapd__Goodbye goodbye = HEAPD__GOODBYE__INIT;
static uint32_t grant_segs[2] = {128, 129};
static uint32_t return_segs[2] = {128, 129};

static void init_messages(void)
{
    hello.protocol_version = PROTOCOL_VERSION;
    hello.heap = (char *)"default";
    hello.client_name = (char *)"seed";
    hello.pid = 1;
    welcome.protocol_version = PROTOCOL_VERSION;
    welcome.client_id = 1;
    welcome.heap = (char *)"default";
    welcome.heap_base = 0x7e8000000000ull;
    welcome.max_size = 64u << 20;
    welcome.segment_size = 128u << 10;
    welcome.has_fd = 1;
    error.code = HEAPD__ERROR_CODE__ERROR_BAD_REQUEST;
    error.message = (char *)"seed";
    heap_stats.name = (char *)"default";
    stats_reply.version = (char *)"0.1.0";
    stats_reply.n_heaps = 1;
    stats_reply.heaps = heap_stats_p;
    segment_request.count = 4;
    segment_grant.n_segments = 2;
    segment_grant.segments = grant_segs;
    segment_return.n_segments = 2;
    segment_return.segments = return_segs;
    urs_batch.head = 3;
    collect_request.wait = 1;
    collect_done.cycle = 2;
    attach_reply.slot = 0;
    global_claim.name = (char *)"g";
    global_claim.once = 1;
    global_claimed.role = HEAPD__GLOBAL_ROLE__GLOBAL_INITIALIZE;
    global_info.name = (char *)"g";
    globals_reply.n_globals = 1;
    globals_reply.globals = global_info_p;
    remark_request.n_segments = 2;
    remark_request.segments = grant_segs;
    remark_done.n_rescanned = 1;
    remark_done.rescanned = grant_segs;
    remark_done.n_released = 1;
    remark_done.released = grant_segs + 1;
}

struct arm {
    const char *name;
    Heapd__Envelope env;
};

#define ARM(field, CASE) \
    { #field, { .body_case = HEAPD__ENVELOPE__BODY_##CASE, .field = &field } }

static struct arm arms[22];

static void init_arms(void)
{
    struct arm a[] = {
        ARM(hello, HELLO), ARM(welcome, WELCOME), ARM(error, ERROR),
        ARM(stats_request, STATS_REQUEST), ARM(stats_reply, STATS_REPLY),
        ARM(segment_request, SEGMENT_REQUEST),
        ARM(segment_grant, SEGMENT_GRANT),
        ARM(segment_return, SEGMENT_RETURN), ARM(urs_batch, URS_BATCH),
        ARM(collect_request, COLLECT_REQUEST),
        ARM(collect_done, COLLECT_DONE), ARM(attach_request, ATTACH_REQUEST),
        ARM(attach_reply, ATTACH_REPLY), ARM(detach_request, DETACH_REQUEST),
        ARM(detach_reply, DETACH_REPLY), ARM(global_claim, GLOBAL_CLAIM),
        ARM(global_claimed, GLOBAL_CLAIMED),
        ARM(globals_request, GLOBALS_REQUEST),
        ARM(globals_reply, GLOBALS_REPLY),
        ARM(remark_request, REMARK_REQUEST), ARM(remark_done, REMARK_DONE),
        ARM(goodbye, GOODBYE),
    };
    _Static_assert(sizeof a / sizeof *a == sizeof arms / sizeof *arms,
                   "one seed per arm");
    for (size_t i = 0; i < sizeof a / sizeof *a; i++) {
        arms[i] = a[i];
        arms[i].env.base = (ProtobufCMessage)PROTOBUF_C_MESSAGE_INIT(
            &heapd__envelope__descriptor);
        arms[i].env.seq = i + 1;
    }
}

static Heapd__Envelope *arm(const char *name)
{
    for (size_t i = 0; i < sizeof arms / sizeof *arms; i++)
        if (strcmp(arms[i].name, name) == 0)
            return &arms[i].env;
    fprintf(stderr, "fuzz_seed: no arm %s\n", name);
    exit(1);
}

/* A whole frame, header included. */
static void put_frame(struct buf *b, const Heapd__Envelope *env)
{
    uint8_t *f;
    size_t n;
    if (frame_pack(env, &f, &n) < 0) {
        fprintf(stderr, "fuzz_seed: cannot pack %s\n", frame_body_name(env));
        exit(1);
    }
    put(b, f, n);
    free(f);
}

/* fuzz_session op 0: a frame with this envelope as its payload. */
static void op_frame(struct buf *b, const Heapd__Envelope *env)
{
    uint8_t *f;
    size_t n;
    if (frame_pack(env, &f, &n) < 0)
        exit(1);
    put8(b, 0);
    put16(b, n - FRAME_HEADER_SIZE);
    put(b, f + FRAME_HEADER_SIZE, n - FRAME_HEADER_SIZE);
    free(f);
}

/* fuzz_session op 2: template ARM with field bytes F. */
static void op_template(struct buf *b, unsigned arm_no, unsigned seq,
                        const uint8_t *f, size_t n)
{
    put8(b, 2);
    put8(b, arm_no);
    put8(b, seq);
    put(b, f, n);
}

enum { T_STATS, T_COLLECT, T_ATTACH, T_DETACH, T_SEGREQ, T_SEGRET, T_URS,
       T_CLAIM, T_GLOBALS, T_HELLO, T_REMARK_DONE, T_GOODBYE,
       T_DAEMON_ONLY };

#define TEMPLATE(b, arm_no, seq, ...)                                        \
    do {                                                                     \
        const uint8_t f_[] = {0, ##__VA_ARGS__};                             \
        op_template((b), (arm_no), (seq), f_ + 1, sizeof f_ - 1);            \
    } while (0)

static int frame_seeds(const char *dir)
{
    struct buf b;
    int rc = 0;

    /* one valid frame of every arm, fed in one piece and in chunks */
    for (size_t i = 0; i < sizeof arms / sizeof *arms; i++) {
        b.n = 0;
        put8(&b, 0);
        put8(&b, (unsigned)i);
        put_frame(&b, &arms[i].env);
        rc |= write_seed(dir, "frame", arms[i].name, &b);
    }
    /* a client's session: hello, attach, grant, return, detach */
    b.n = 0;
    put8(&b, 0);
    put8(&b, 7);
    put_frame(&b, arm("hello"));
    put_frame(&b, arm("attach_request"));
    put_frame(&b, arm("segment_request"));
    put_frame(&b, arm("segment_return"));
    put_frame(&b, arm("detach_request"));
    rc |= write_seed(dir, "frame", "stream", &b);
    /* a frame longer than the small max_payload of byte 0 */
    b.n = 0;
    put8(&b, 1);
    put8(&b, 3);
    put_frame(&b, arm("stats_reply"));
    rc |= write_seed(dir, "frame", "oversized", &b);
    /* length 0; then a truncated frame; then an undecodable payload */
    b.n = 0;
    put8(&b, 0);
    put8(&b, 0);
    put(&b, "\0\0\0\0", 4);
    rc |= write_seed(dir, "frame", "zero-length", &b);
    b.n = 0;
    put8(&b, 0);
    put8(&b, 9);
    put_frame(&b, arm("hello"));
    b.n -= 3;
    rc |= write_seed(dir, "frame", "truncated", &b);
    b.n = 0;
    put8(&b, 0);
    put8(&b, 1);
    put(&b, "\0\0\0\3\xff\xff\xff", 7);
    rc |= write_seed(dir, "frame", "undecodable", &b);
    /* an envelope with no body arm (only seq) */
    b.n = 0;
    put8(&b, 0);
    put8(&b, 1);
    put(&b, "\0\0\0\2\x08\x05", 6);
    rc |= write_seed(dir, "frame", "no-body", &b);
    return rc;
}

static int session_seeds(const char *dir)
{
    struct buf b;
    int rc = 0;

    /* every arm as a frame after a valid mutator hello */
    b.n = 0;
    put8(&b, 1);
    for (size_t i = 1; i < sizeof arms / sizeof *arms; i++)
        if (strstr(arms[i].name, "request") || strstr(arms[i].name, "return")
            || strstr(arms[i].name, "batch") || strstr(arms[i].name, "claim"))
            if (strcmp(arms[i].name, "global_claimed") != 0)
                op_frame(&b, &arms[i].env);
    rc |= write_seed(dir, "session", "every-request", &b);

    /* each arm alone after hello, as a frame (the daemon-only ones fail
     * the connection) */
    for (size_t i = 0; i < sizeof arms / sizeof *arms; i++) {
        b.n = 0;
        put8(&b, i == 0 ? 0 : 1);
        op_frame(&b, &arms[i].env);
        rc |= write_seed(dir, "session", arms[i].name, &b);
    }

    /* a mutator's life: attach, grants of each kind, return, globals,
     * URS batch, detach */
    b.n = 0;
    put8(&b, 1);
    TEMPLATE(&b, T_ATTACH, 1);
    TEMPLATE(&b, T_SEGREQ, 2, 0, 8, 0, 0, 0);
    TEMPLATE(&b, T_SEGREQ, 3, 1, 0, 1, 20, 0);
    TEMPLATE(&b, T_SEGREQ, 4, 2, 0, 0, 0, 0);
    TEMPLATE(&b, T_SEGRET, 0, 2, 8, 9);
    TEMPLATE(&b, T_CLAIM, 5, 1, 1, 'a');
    TEMPLATE(&b, T_CLAIM, 6, 0, 1, 'a');
    TEMPLATE(&b, T_GLOBALS, 7);
    TEMPLATE(&b, T_URS, 0, 0, 1, 0);
    TEMPLATE(&b, T_STATS, 8);
    TEMPLATE(&b, T_DETACH, 9, 0);
    rc |= write_seed(dir, "session", "mutator-life", &b);

    /* remark answers for segments it owns, does not own, never was
     * asked about; then goodbye, and a request after it */
    b.n = 0;
    put8(&b, 1);
    TEMPLATE(&b, T_ATTACH, 1);
    TEMPLATE(&b, T_SEGREQ, 2, 0, 8, 0, 0, 0);
    TEMPLATE(&b, T_REMARK_DONE, 0, 2, 1, 8, 9, 200);
    TEMPLATE(&b, T_COLLECT, 3, 0);
    TEMPLATE(&b, T_REMARK_DONE, 0, 0, 2, 8, 255);
    TEMPLATE(&b, T_GOODBYE, 4);
    TEMPLATE(&b, T_STATS, 5);
    rc |= write_seed(dir, "session", "remark-goodbye", &b);

    /* the tiny heap runs out: a grant waits for a collection */
    b.n = 0;
    put8(&b, 3);
    TEMPLATE(&b, T_ATTACH, 1);
    for (unsigned i = 0; i < 3; i++)
        TEMPLATE(&b, T_SEGREQ, 2 + i, 0, 4, 0, 0, 0);
    TEMPLATE(&b, T_SEGREQ, 6, 1, 0, 1, 20, 0);
    TEMPLATE(&b, T_COLLECT, 7, 1);
    put8(&b, 4);
    put8(&b, 4);
    rc |= write_seed(dir, "session", "tiny-full", &b);

    /* a control client: stats, collections, globals; mutator requests are
     * refused */
    b.n = 0;
    put8(&b, 5);
    TEMPLATE(&b, T_STATS, 1);
    TEMPLATE(&b, T_COLLECT, 2, 0);
    TEMPLATE(&b, T_COLLECT, 3, 1);
    TEMPLATE(&b, T_GLOBALS, 4);
    TEMPLATE(&b, T_ATTACH, 5);
    TEMPLATE(&b, T_SEGREQ, 6, 0, 1, 0, 0, 3, 2, 200, 0xff);
    TEMPLATE(&b, T_SEGRET, 0, 1, 8);
    TEMPLATE(&b, T_URS, 0, 0, 1, 0);
    TEMPLATE(&b, T_CLAIM, 7, 0, 1, 'b');
    TEMPLATE(&b, T_DETACH, 8, 0);
    rc |= write_seed(dir, "session", "control", &b);

    /* refused hellos: version, heap, a second hello, no hello */
    static const uint8_t hellos[] = {0x08 | 0x20, 0x02, 0x00, 0x05};
    for (unsigned i = 0; i < sizeof hellos; i++) {
        char name[32];
        b.n = 0;
        put8(&b, i == 2 ? 1 : 0);
        TEMPLATE(&b, T_HELLO, 1, hellos[i]);
        TEMPLATE(&b, T_STATS, 2);
        snprintf(name, sizeof name, "hello-%u", i);
        rc |= write_seed(dir, "session", name, &b);
    }
    b.n = 0;
    put8(&b, 0);
    TEMPLATE(&b, T_STATS, 1);
    rc |= write_seed(dir, "session", "no-hello", &b);

    /* the client writes its URS ring, then says so */
    b.n = 0;
    put8(&b, 1);
    TEMPLATE(&b, T_ATTACH, 1);
    put8(&b, 3);
    put8(&b, 0);
    put8(&b, 1);
    put(&b, "\x00\x00\x80\x7e\x80\x7e\x00\x00", 8);
    put8(&b, 3);
    put8(&b, 0);
    put8(&b, 0);
    put(&b, "\x03\0\0\0\0\0\0\0", 8);
    TEMPLATE(&b, T_URS, 0, 0, 3, 0);
    rc |= write_seed(dir, "session", "urs-ring", &b);

    /* framing errors on a live connection: bad length, truncated frame,
     * undecodable payload, a frame split over two writes */
    b.n = 0;
    put8(&b, 1);
    put8(&b, 1);
    put16(&b, 4);
    put(&b, "\xff\xff\xff\xff", 4);
    rc |= write_seed(dir, "session", "bad-length", &b);
    b.n = 0;
    put8(&b, 1);
    put8(&b, 1);
    put16(&b, 6);
    put(&b, "\0\0\0\x10\x08\x01", 6);
    rc |= write_seed(dir, "session", "truncated", &b);
    b.n = 0;
    put8(&b, 1);
    put8(&b, 0);
    put16(&b, 3);
    put(&b, "\xff\xff\xff", 3);
    rc |= write_seed(dir, "session", "undecodable", &b);
    b.n = 0;
    put8(&b, 1);
    put8(&b, 1);
    put16(&b, 5);
    put(&b, "\0\0\0\x02\x6a", 5);
    put8(&b, 1);
    put16(&b, 1);
    put(&b, "\x00", 1);
    rc |= write_seed(dir, "session", "split-frame", &b);
    return rc;
}

/* ---- fuzz_shared: attackers (Note [Fuzzing the shared words]) ---- */

enum { S_CONTROL, S_HEAP, S_ALLOCATE, S_REQUEST, S_TURNS, S_ACK, S_STATUS };
enum { R_ATTACH, R_DETACH, R_SMALL, R_CLASS_OR_LARGE, R_RETURN, R_COLLECT,
       R_URS, R_REMARK_DONE, R_STATS };
/* value kinds of take_value */
enum { V_RAW8, V_SMALL, V_HEAP_ADDR, V_OWN_OBJECT, V_BYSTANDER, V_EPOCH };
/* word indices of struct layout_mutator's head (8-byte words) */
enum { W_STATUS = 0, W_ROOT_DEPTH = 9, W_URS_HEAD = 10, W_PENDING_ROOT = 11,
       W_STACK_MARKING = 16, W_URS_TAIL = 24 };

static void put_u32(struct buf *b, uint32_t v)
{
    put16(b, v & 0xffff);
    put16(b, v >> 16);
}

/* A value of kind KIND with argument ARG (see take_value). */
static void put_value(struct buf *b, unsigned kind, uint64_t arg)
{
    put8(b, kind);
    switch (kind) {
    case V_RAW8:
        put_u32(b, (uint32_t)arg);
        put_u32(b, (uint32_t)(arg >> 32));
        break;
    case V_SMALL:
    case V_EPOCH:
        put8(b, (unsigned)arg);
        break;
    case V_HEAP_ADDR:
        put_u32(b, (uint32_t)arg);
        break;
    case V_OWN_OBJECT: /* segment, block, class */
        put8(b, 0);
        put16(b, arg);
        put8(b, 2);
        break;
    default:
        put16(b, arg);
        break;
    }
}

/* take_write: the value's low SIZE_LOG2 power of two bytes. */
static void put_word(struct buf *b, unsigned size_log2, unsigned kind,
                     uint64_t arg)
{
    put8(b, size_log2 * 2);
    put_value(b, kind, arg);
}

static void put_raw(struct buf *b, const void *p, unsigned n)
{
    put8(b, 1 + (n - 1) * 2);
    put(b, p, n);
}

/* op 0, a word of a slot's head: WHERE's bits 5-6 are 0. */
static void op_slot_word(struct buf *b, unsigned word, unsigned kind,
                         uint64_t arg)
{
    put8(b, S_CONTROL);
    put8(b, 0);
    put16(b, word);
    put_word(b, 3, kind, arg);
}

static void op_heap(struct buf *b, unsigned where, uint32_t which)
{
    put8(b, S_HEAP);
    put8(b, where);
    put_u32(b, which);
}

static void op_allocate(struct buf *b, unsigned cls, unsigned n,
                        unsigned nrefs)
{
    put8(b, S_ALLOCATE);
    put8(b, 0);
    put8(b, cls);
    put8(b, n);
    put8(b, nrefs);
    /* every field: a bystander's cell, or the object before it */
    for (unsigned k = 0; k < n * nrefs; k++) {
        put8(b, 1);
        put_value(b, V_BYSTANDER, k * 7);
    }
}

/* op 4 with bit 7: a cycle, waited for */
static void op_cycle(struct buf *b)
{
    put8(b, S_TURNS);
    put8(b, 0x80);
}

static void op_request(struct buf *b, unsigned arm_no, unsigned arg)
{
    put8(b, S_REQUEST);
    put8(b, arm_no);
    put8(b, arg);
    if (arm_no == R_URS)
        put16(b, 5);
}

static int shared_seeds(const char *dir)
{
    struct buf b;
    int rc = 0;
    /* mode: slots attached, bit 2 a grant, bit 3 Goodbye, bit 4 RUNNING */

    /* comes and goes: with and without Goodbye, with every slot */
    b.n = 0;
    put8(&b, 1);
    rc |= write_seed(dir, "shared", "quiet", &b);
    b.n = 0;
    put8(&b, 3 | 4 | 8);
    rc |= write_seed(dir, "shared", "goodbye", &b);

    /* objects of its in its own segment, rooted, holding bystander cells;
     * collections meanwhile */
    b.n = 0;
    put8(&b, 1 | 4);
    op_allocate(&b, 2, 12, 2);
    op_cycle(&b);
    op_allocate(&b, 4, 3, 3);
    op_request(&b, R_COLLECT, 0);
    put8(&b, S_TURNS);
    put8(&b, 15);
    op_cycle(&b);
    rc |= write_seed(dir, "shared", "allocate", &b);

    /* Note [A segment leaves its owner]: a formatted segment whose header
     * it scribbles on, then leaves */
    b.n = 0;
    put8(&b, 1 | 4);
    op_allocate(&b, 3, 5, 1);
    op_heap(&b, 1, 0); /* a segment of its, header word 0: the kind */
    put_raw(&b, "\x16\0\0\0", 4);
    rc |= write_seed(dir, "shared", "header-kind", &b);
    /* the class alone, before the daemon read it */
    b.n = 0;
    put8(&b, 1 | 4 | 8);
    op_heap(&b, 1, 0);
    put_raw(&b, "\x01\0\0\0\xc8\0\0\0", 8);
    rc |= write_seed(dir, "shared", "header-class", &b);

    /* its slot's words: each one the daemon reads */
    static const struct {
        const char *name;
        unsigned word, kind;
        uint64_t arg;
    } words[] = {
        {"status-free", W_STATUS, V_SMALL, 0},
        {"status-running", W_STATUS, V_SMALL, 1},
        {"root-depth", W_ROOT_DEPTH, V_RAW8, 0x100000000ull},
        {"urs-head", W_URS_HEAD, V_RAW8, 0xffffffffffull},
        {"pending-root", W_PENDING_ROOT, V_HEAP_ADDR, 0x1000040},
        {"stack-marking", W_STACK_MARKING, V_EPOCH, 1},
        {"urs-tail", W_URS_TAIL, V_SMALL, 200},
    };
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        char name[48];
        b.n = 0;
        put8(&b, 1 | 4);
        op_allocate(&b, 1, 4, 1);
        op_cycle(&b);
        op_slot_word(&b, words[i].word, words[i].kind, words[i].arg);
        op_request(&b, R_URS, 0);
        op_cycle(&b);
        op_cycle(&b);
        snprintf(name, sizeof name, "slot-%s", words[i].name);
        rc |= write_seed(dir, "shared", name, &b);
    }
    /* its URS ring and root stack, then a batch that names them */
    b.n = 0;
    put8(&b, 2);
    put8(&b, S_CONTROL);
    put8(&b, 1 << 5); /* the ring */
    put16(&b, 3);
    put_word(&b, 3, V_BYSTANDER, 9);
    put8(&b, S_CONTROL);
    put8(&b, 2 << 5); /* the root stack */
    put16(&b, 0);
    put_word(&b, 3, V_HEAP_ADDR, 0x1020048);
    op_slot_word(&b, W_URS_HEAD, V_SMALL, 4);
    op_slot_word(&b, W_ROOT_DEPTH, V_SMALL, 1);
    op_request(&b, R_URS, 0);
    op_cycle(&b);
    rc |= write_seed(dir, "shared", "ring-and-roots", &b);

    /* the heap memfd: marks of its own blocks forged to this epoch and
     * the next, free segments' headers and marks, the globals' values */
    b.n = 0;
    put8(&b, 1 | 4);
    op_allocate(&b, 2, 8, 1);
    op_heap(&b, 1 | 1 << 2, 20); /* a segment of its, a mark byte */
    put_word(&b, 0, V_EPOCH, 1);
    op_heap(&b, 1 | 1 << 2, 21);
    put_word(&b, 0, V_EPOCH, 0);
    op_heap(&b, 2 | 0 << 2, 0x1f00); /* any segment's header */
    put_raw(&b, "\x01\0\0\0\x02\0\0\0", 8);
    op_heap(&b, 2 | 1 << 2, 0x1e00); /* any segment's marks */
    put_raw(&b, "\xff\xff\xff\xff\xff\xff\xff\xff", 8);
    op_heap(&b, 3 | 3 << 2, 0x55aa77); /* any byte of any segment */
    put_raw(&b, "0123456789abcdef0123456789abcdef", 32);
    op_heap(&b, 4, 0); /* global_values[0], the bystander's global */
    put_word(&b, 3, V_BYSTANDER, 3);
    op_heap(&b, 4, 0);
    put_word(&b, 3, V_HEAP_ADDR, 0x1000010);
    op_heap(&b, 0, 0x12345); /* the rest of the control area */
    put_raw(&b, "\xde\xad\xbe\xef", 4);
    op_cycle(&b);
    op_cycle(&b);
    rc |= write_seed(dir, "shared", "heap-words", &b);

    /* a large run: its header and mark forged */
    b.n = 0;
    put8(&b, 1);
    op_request(&b, R_CLASS_OR_LARGE, 1 | 8 << 1);
    op_heap(&b, 1 | 2 << 2, 0); /* the object's header */
    put_word(&b, 3, V_RAW8, 0x00ffffffffffffffull);
    op_heap(&b, 1 | 1 << 2, 0); /* its mark */
    put_word(&b, 0, V_EPOCH, 0);
    op_cycle(&b);
    rc |= write_seed(dir, "shared", "large", &b);

    /* the other requests: detach, returns (its own and not), remark
     * answers never asked for, stats, a partly free segment, attach */
    b.n = 0;
    put8(&b, 2 | 4 | 8);
    op_request(&b, R_REMARK_DONE, 0);
    op_request(&b, R_REMARK_DONE, 1);
    op_request(&b, R_RETURN, 0);
    op_request(&b, R_RETURN, 0x80);
    op_request(&b, R_DETACH, 0);
    op_request(&b, R_DETACH, 0x85);
    op_request(&b, R_STATS, 0);
    op_request(&b, R_CLASS_OR_LARGE, 2 << 1);
    op_request(&b, R_SMALL, 3);
    op_request(&b, R_ATTACH, 0);
    put8(&b, S_ACK);
    rc |= write_seed(dir, "shared", "requests", &b);

    /* RUNNING slots hold up the stops until it leaves */
    b.n = 0;
    put8(&b, 2 | 16);
    op_request(&b, R_COLLECT, 0);
    put8(&b, S_TURNS);
    put8(&b, 15);
    op_cycle(&b);
    put8(&b, S_STATUS);
    put8(&b, 1);
    put_value(&b, V_SMALL, 1);
    op_request(&b, R_COLLECT, 0);
    rc |= write_seed(dir, "shared", "running", &b);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seed CORPUS_DIR\n");
        return 2;
    }
    init_messages();
    init_arms();
    return frame_seeds(argv[1]) | session_seeds(argv[1]) |
                   shared_seeds(argv[1])
               ? 1
               : 0;
}
