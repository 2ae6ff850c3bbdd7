/* Fuzz target: the frame reader (Note [Frames]) and envelope decoding, as
 * a connection uses them (daemon/server.c on_read -> frame_reader_feed ->
 * frame_decode -> the handler).
 *
 * Input: byte 0 picks the reader's max_payload (0: FRAME_MAX_PAYLOAD, as
 * the daemon and libheapd use, else a small limit so that oversized
 * lengths are reachable with small inputs) and byte 1 seeds the chunking;
 * the rest is the byte stream.  The stream is fed twice, once whole and
 * once in chunks of 1..64 bytes, and both feeds must agree: the same
 * envelopes delivered (compared by their canonical repacking), the same
 * return code, the same bytes pending.  An envelope's repacking, if it
 * decodes, must repack to the same bytes; handlers sometimes keep
 * an envelope (FRAME_TAKEN), sometimes pause the reader (FRAME_PAUSE, then
 * the feed resumes it until it stops pausing, as the daemon does when the
 * peer has read its replies: Note [Connection limits]) and sometimes stop
 * the feed (return < 0).  Pausing must change nothing in what is
 * delivered. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "fuzz.h"

#define STOP_AT_SEQ 0x5107u /* an envelope with this seq stops the feed */

struct seen {
    unsigned count;
    uint64_t hash;
    Heapd__Envelope *kept[8];
    unsigned n_kept;
};

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int on_envelope(void *arg, Heapd__Envelope *env)
{
    struct seen *s = arg;
    uint8_t *buf, *buf2;
    size_t len, len2;

    FUZZ_CHECK(env->body_case != HEAPD__ENVELOPE__BODY__NOT_SET);
    FUZZ_CHECK(frame_body_name(env)[0] != '\0');
    /* what a peer unpacked, repacked: if that decodes again (it need not:
     * protobuf-c keeps an unknown field numbered 0, written as a
     * non-minimal varint tag, and packs it into a tag 0 it then refuses),
     * it repacks to the same bytes */
    int rc = frame_pack(env, &buf, &len);
    FUZZ_CHECK(rc == 0 || rc == -EMSGSIZE);
    if (rc == 0) {
        Heapd__Envelope *again =
            frame_decode(buf + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE);
        if (again) {
            FUZZ_CHECK(frame_pack(again, &buf2, &len2) == 0);
            FUZZ_CHECK(len2 == len && memcmp(buf, buf2, len) == 0);
            free(buf2);
            heapd__envelope__free_unpacked(again, NULL);
        }
        s->hash = fnv(s->hash, buf, len);
        free(buf);
    }
    s->count++;
    if (env->seq == STOP_AT_SEQ)
        return -ECANCELED;
    int pause = env->seq & 2 ? FRAME_PAUSE : 0;
    if (env->seq & 1 && s->n_kept < 8) {
        s->kept[s->n_kept++] = env; /* freed by the caller, later */
        return FRAME_TAKEN | pause;
    }
    return pause;
}

/* Resume a paused reader until it stops pausing; the final return. */
static int unpause(frame_reader *r, int rc, struct seen *s)
{
    while (rc == FRAME_PAUSE)
        rc = frame_reader_resume(r, on_envelope, s);
    return rc;
}

static void release(struct seen *s)
{
    for (unsigned i = 0; i < s->n_kept; i++)
        heapd__envelope__free_unpacked(s->kept[i], NULL);
    s->n_kept = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t max_payload = data[0] == 0 ? 0 : (size_t)data[0] * 4;
    uint32_t rng = data[1] * 2654435761u + 1;
    data += 2;
    size -= 2;

    /* whole */
    frame_reader r;
    struct seen whole = {0, 0xcbf29ce484222325ull, {0}, 0};
    frame_reader_init(&r, max_payload);
    int rc_whole = unpause(&r, frame_reader_feed(&r, data, size, on_envelope,
                                                 &whole), &whole);
    size_t pending_whole = rc_whole == 0 ? frame_reader_pending(&r) : 0;
    frame_reader_free(&r);
    release(&whole);

    /* in chunks, as reads from a socket arrive */
    struct seen chunked = {0, 0xcbf29ce484222325ull, {0}, 0};
    int rc_chunked = 0;
    frame_reader_init(&r, max_payload);
    for (size_t off = 0; off < size && rc_chunked == 0;) {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        size_t n = 1 + rng % 64;
        if (n > size - off)
            n = size - off;
        rc_chunked = unpause(&r, frame_reader_feed(&r, data + off, n,
                                                   on_envelope, &chunked),
                             &chunked);
        off += n;
    }
    size_t pending_chunked = rc_chunked == 0 ? frame_reader_pending(&r) : 0;
    size_t limit = max_payload ? max_payload : FRAME_MAX_PAYLOAD;
    FUZZ_CHECK(pending_chunked < FRAME_HEADER_SIZE + limit);
    frame_reader_free(&r);
    release(&chunked);

    FUZZ_CHECK(rc_whole == 0 || rc_whole == -EMSGSIZE || rc_whole == -EBADMSG ||
           rc_whole == -ECANCELED);
    FUZZ_CHECK(rc_chunked == rc_whole);
    FUZZ_CHECK(chunked.count == whole.count);
    FUZZ_CHECK(chunked.hash == whole.hash);
    FUZZ_CHECK(pending_chunked == pending_whole);
    return 0;
}
