/* Fuzz target: every message handler of the daemon, through the path a
 * client's bytes take (Note [Connection lifetime]): a real heapd state
 * (config, heaps mapped at their fixed base as heap_open does, a collector
 * thread per heap and its worker, the libuv loop) listening on a Unix
 * socket in a private directory (fuzz_daemon.c), and per input one client
 * connection.
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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_daemon.h"
#include "wire.h"

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

/* op 2: an envelope of arm ARM with fields from the input. */
static void send_template(struct fuzz_client *cl, struct fuzz_input *in)
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

    unsigned arm = (unsigned)fuzz_take(in, 1);
    env.seq = fuzz_take(in, 1);
    switch (arm % 13) {
    case 0:
        env.body_case = HEAPD__ENVELOPE__BODY_STATS_REQUEST;
        env.stats_request = &stats;
        break;
    case 1:
        collect.wait = fuzz_take(in, 1) & 1;
        env.body_case = HEAPD__ENVELOPE__BODY_COLLECT_REQUEST;
        env.collect_request = &collect;
        break;
    case 2:
        env.body_case = HEAPD__ENVELOPE__BODY_ATTACH_REQUEST;
        env.attach_request = &attach;
        break;
    case 3:
        detach.slot = (uint32_t)fuzz_take(in, 1);
        env.body_case = HEAPD__ENVELOPE__BODY_DETACH_REQUEST;
        env.detach_request = &detach;
        break;
    case 4:
        segreq.kind = (Heapd__SegmentKind)(fuzz_take(in, 1) % 4);
        segreq.count = (uint32_t)fuzz_take(in, 1);
        segreq.bytes = fuzz_take(in, 1) << fuzz_take(in, 1) % 40;
        /* size classes, real ones and not (Note [Reusing partly free
         * segments]): a byte each, 0xff standing for UINT32_MAX */
        segreq.n_classes = fuzz_take(in, 1) % 4;
        for (size_t i = 0; i < segreq.n_classes; i++) {
            uint32_t b = (uint32_t)fuzz_take(in, 1);
            classes[i] = b == 0xff ? UINT32_MAX : b;
        }
        segreq.classes = classes;
        env.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST;
        env.segment_request = &segreq;
        break;
    case 5:
        /* data segments start at 128 in both heaps (16M control area) */
        segret.n_segments = fuzz_take(in, 1) % 16;
        for (size_t i = 0; i < segret.n_segments; i++)
            segs[i] = 120 + (uint32_t)fuzz_take(in, 1) % 400;
        segret.segments = segs;
        env.body_case = HEAPD__ENVELOPE__BODY_SEGMENT_RETURN;
        env.segment_return = &segret;
        break;
    case 6:
        urs.slot = (uint32_t)fuzz_take(in, 1);
        urs.head = fuzz_take(in, 2);
        env.body_case = HEAPD__ENVELOPE__BODY_URS_BATCH;
        env.urs_batch = &urs;
        break;
    case 7:
        claim.once = fuzz_take(in, 1) & 1;
        fuzz_take_bytes(in, fuzz_take(in, 1) % 72, &bytes, &len);
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
        uint8_t b = (uint8_t)fuzz_take(in, 1);
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
        rdone.n_rescanned = fuzz_take(in, 1) % 8;
        rdone.n_released = fuzz_take(in, 1) % 8;
        for (size_t i = 0; i < rdone.n_rescanned + rdone.n_released; i++)
            segs[i] = 120 + (uint32_t)fuzz_take(in, 1) % 400;
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
    fuzz_send_envelope(cl, &env);
}

/* op 3: the client writes words of its own mutator slot. */
static void poke_slot(struct fuzz_input *in)
{
    unsigned slot = (unsigned)fuzz_take(in, 1) % LAYOUT_MAX_MUTATORS;
    unsigned field = (unsigned)fuzz_take(in, 1);
    uint64_t value = fuzz_take(in, 8);
    struct conn *c = fuzz_d->conns;

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
    struct fuzz_client cl = {.fd = -1};
    struct fuzz_input in = {data, size};

    if (!fuzz_d)
        fuzz_daemon_start("fuzz_session", config_text);
    FUZZ_CHECK(fuzz_d->n_conns == 0);
    fuzz_connect(&cl);

    uint8_t mode = (uint8_t)fuzz_take(&in, 1);
    if (mode & 1)
        fuzz_send_hello(&cl, mode & 2 ? "tiny" : "default", mode & 4);
    while (in.n > 0 && fuzz_conn(&cl)) {
        const uint8_t *bytes;
        size_t len;
        switch (fuzz_take(&in, 1) % 5) {
        case 0: {
            fuzz_take_bytes(&in, (size_t)fuzz_take(&in, 2), &bytes, &len);
            uint8_t *frame = malloc(FRAME_HEADER_SIZE + len);
            FUZZ_CHECK(frame);
            frame[0] = (uint8_t)(len >> 24);
            frame[1] = (uint8_t)(len >> 16);
            frame[2] = (uint8_t)(len >> 8);
            frame[3] = (uint8_t)len;
            memcpy(frame + FRAME_HEADER_SIZE, bytes, len);
            fuzz_send_chunk(&cl, frame, FRAME_HEADER_SIZE + len);
            free(frame);
            break;
        }
        case 1:
            fuzz_take_bytes(&in, (size_t)fuzz_take(&in, 2), &bytes, &len);
            fuzz_send_chunk(&cl, bytes, len);
            break;
        case 2:
            send_template(&cl, &in);
            break;
        case 3:
            poke_slot(&in);
            break;
        default:
            fuzz_turn(&cl);
            break;
        }
    }

    /* end of stream: the daemon closes the connection and frees it */
    fuzz_close(&cl);
    FUZZ_CHECK(fuzz_d->n_conns == 0);
    return 0;
}
