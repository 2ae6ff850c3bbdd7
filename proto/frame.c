/* Framing of the heapd wire protocol.  See Note [Frames] in frame.h. */
#include "frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void frame_reader_init(frame_reader *r, size_t max_payload)
{
    memset(r, 0, sizeof *r);
    r->max_payload = max_payload ? max_payload : FRAME_MAX_PAYLOAD;
}

void frame_reader_free(frame_reader *r)
{
    free(r->buf);
    free(r->held);
    r->buf = r->held = NULL;
    r->len = r->cap = r->held_len = 0;
}

size_t frame_reader_pending(const frame_reader *r)
{
    return r->len + r->held_len;
}

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

Heapd__Envelope *frame_decode(const uint8_t *payload, size_t len)
{
    Heapd__Envelope *env = heapd__envelope__unpack(NULL, len, payload);
    if (env && env->body_case == HEAPD__ENVELOPE__BODY__NOT_SET) {
        heapd__envelope__free_unpacked(env, NULL);
        env = NULL;
    }
    return env;
}

/* Hand one complete payload to the handler.  Returns 0, FRAME_PAUSE or a
 * negative errno. */
static int deliver(const uint8_t *payload, size_t len, frame_handler handler,
                   void *arg)
{
    Heapd__Envelope *env = frame_decode(payload, len);
    if (!env)
        return -EBADMSG;
    int rc = handler(arg, env);
    if (rc < 0 || !(rc & FRAME_TAKEN))
        heapd__envelope__free_unpacked(env, NULL);
    return rc < 0 ? rc : rc & FRAME_PAUSE;
}

/* A handler paused: keep the N bytes after its frame (Note [Frames]). */
static int hold(frame_reader *r, const uint8_t *data, size_t n)
{
    if (n > 0) {
        if (!(r->held = malloc(n)))
            return -ENOMEM;
        memcpy(r->held, data, n);
        r->held_len = n;
    }
    return FRAME_PAUSE;
}

int frame_reader_resume(frame_reader *r, frame_handler handler, void *arg)
{
    uint8_t *data = r->held;
    size_t n = r->held_len;
    r->held = NULL;
    r->held_len = 0;
    int rc = data ? frame_reader_feed(r, data, n, handler, arg) : 0;
    free(data);
    return rc;
}

/* The payload length announced by a complete header, or -EMSGSIZE. */
static long long checked_length(const frame_reader *r, const uint8_t *hdr)
{
    uint32_t n = get_be32(hdr);
    if (n == 0 || n > r->max_payload)
        return -EMSGSIZE;
    return n;
}

static int reserve(frame_reader *r, size_t need)
{
    if (need <= r->cap)
        return 0;
    size_t cap = r->cap ? r->cap : 256;
    while (cap < need)
        cap *= 2;
    uint8_t *nb = realloc(r->buf, cap);
    if (!nb)
        return -ENOMEM;
    r->buf = nb;
    r->cap = cap;
    return 0;
}

int frame_reader_feed(frame_reader *r, const uint8_t *data, size_t n,
                      frame_handler handler, void *arg)
{
    int rc = 0;

    /* First complete the partial frame held from earlier reads, if any. */
    while (r->len > 0 && n > 0) {
        size_t want = FRAME_HEADER_SIZE;
        if (r->len >= FRAME_HEADER_SIZE) {
            long long plen = checked_length(r, r->buf);
            want += (size_t)plen; /* checked when the header completed */
        }
        size_t take = want - r->len < n ? want - r->len : n;
        if ((rc = reserve(r, r->len + take)) < 0)
            goto out;
        memcpy(r->buf + r->len, data, take);
        r->len += take;
        data += take;
        n -= take;
        if (r->len == FRAME_HEADER_SIZE) {
            long long plen = checked_length(r, r->buf);
            if (plen < 0) {
                rc = (int)plen;
                goto out;
            }
            continue; /* header done; now the payload */
        }
        if (r->len == want) {
            r->len = 0; /* buf stays allocated for the next partial frame */
            if ((rc = deliver(r->buf + FRAME_HEADER_SIZE,
                              want - FRAME_HEADER_SIZE, handler, arg)) < 0)
                goto out;
            if (rc == FRAME_PAUSE) {
                rc = hold(r, data, n);
                goto out;
            }
        }
    }

    /* Then whole frames straight from the caller's buffer. */
    while (n >= FRAME_HEADER_SIZE) {
        long long plen = checked_length(r, data);
        if (plen < 0) {
            rc = (int)plen;
            goto out;
        }
        if (n - FRAME_HEADER_SIZE < (size_t)plen)
            break;
        if ((rc = deliver(data + FRAME_HEADER_SIZE, (size_t)plen, handler,
                          arg)) < 0)
            goto out;
        data += FRAME_HEADER_SIZE + (size_t)plen;
        n -= FRAME_HEADER_SIZE + (size_t)plen;
        if (rc == FRAME_PAUSE) {
            rc = hold(r, data, n);
            goto out;
        }
    }

    /* Keep the tail: at most one partial frame.  Its length (if the header
     * is complete) has been checked above, so the copy is bounded. */
    if (n > 0) {
        if ((rc = reserve(r, n)) < 0)
            goto out;
        memcpy(r->buf, data, n);
        r->len = n;
    }
out:
    return rc;
}

int frame_pack(const Heapd__Envelope *env, uint8_t **out, size_t *out_len)
{
    size_t plen = heapd__envelope__get_packed_size(env);
    if (plen == 0 || plen > FRAME_MAX_PAYLOAD)
        return -EMSGSIZE;
    uint8_t *buf = malloc(FRAME_HEADER_SIZE + plen);
    if (!buf)
        return -ENOMEM;
    put_be32(buf, (uint32_t)plen);
    heapd__envelope__pack(env, buf + FRAME_HEADER_SIZE);
    *out = buf;
    *out_len = FRAME_HEADER_SIZE + plen;
    return 0;
}

const char *frame_body_name(const Heapd__Envelope *env)
{
    switch (env->body_case) {
    case HEAPD__ENVELOPE__BODY_HELLO: return "hello";
    case HEAPD__ENVELOPE__BODY_WELCOME: return "welcome";
    case HEAPD__ENVELOPE__BODY_ERROR: return "error";
    case HEAPD__ENVELOPE__BODY_STATS_REQUEST: return "stats_request";
    case HEAPD__ENVELOPE__BODY_STATS_REPLY: return "stats_reply";
    case HEAPD__ENVELOPE__BODY_SEGMENT_REQUEST: return "segment_request";
    case HEAPD__ENVELOPE__BODY_SEGMENT_GRANT: return "segment_grant";
    case HEAPD__ENVELOPE__BODY_SEGMENT_RETURN: return "segment_return";
    case HEAPD__ENVELOPE__BODY_COLLECT_REQUEST: return "collect_request";
    case HEAPD__ENVELOPE__BODY_COLLECT_DONE: return "collect_done";
    case HEAPD__ENVELOPE__BODY_ATTACH_REQUEST: return "attach_request";
    case HEAPD__ENVELOPE__BODY_ATTACH_REPLY: return "attach_reply";
    case HEAPD__ENVELOPE__BODY_DETACH_REQUEST: return "detach_request";
    case HEAPD__ENVELOPE__BODY_DETACH_REPLY: return "detach_reply";
    case HEAPD__ENVELOPE__BODY_URS_BATCH: return "urs_batch";
    case HEAPD__ENVELOPE__BODY_GLOBAL_CLAIM: return "global_claim";
    case HEAPD__ENVELOPE__BODY_GLOBAL_CLAIMED: return "global_claimed";
    case HEAPD__ENVELOPE__BODY_GLOBALS_REQUEST: return "globals_request";
    case HEAPD__ENVELOPE__BODY_GLOBALS_REPLY: return "globals_reply";
    case HEAPD__ENVELOPE__BODY_GLOBAL_DELETE: return "global_delete";
    case HEAPD__ENVELOPE__BODY_GLOBAL_DELETED: return "global_deleted";
    case HEAPD__ENVELOPE__BODY_GLOBAL_INIT_DONE: return "global_init_done";
    case HEAPD__ENVELOPE__BODY_GLOBAL_INIT_ACK: return "global_init_ack";
    case HEAPD__ENVELOPE__BODY_REMARK_REQUEST: return "remark_request";
    case HEAPD__ENVELOPE__BODY_REMARK_DONE: return "remark_done";
    case HEAPD__ENVELOPE__BODY_GOODBYE: return "goodbye";
    case HEAPD__ENVELOPE__BODY_CLIENTS_REQUEST: return "clients_request";
    case HEAPD__ENVELOPE__BODY_CLIENTS_REPLY: return "clients_reply";
    case HEAPD__ENVELOPE__BODY_SEGMENTS_REQUEST: return "segments_request";
    case HEAPD__ENVELOPE__BODY_SEGMENTS_REPLY: return "segments_reply";
    case HEAPD__ENVELOPE__BODY_DROP_REQUEST: return "drop_request";
    case HEAPD__ENVELOPE__BODY_DROP_REPLY: return "drop_reply";
    case HEAPD__ENVELOPE__BODY_SAVE_REQUEST: return "save_request";
    case HEAPD__ENVELOPE__BODY_SAVE_REPLY: return "save_reply";
    case HEAPD__ENVELOPE__BODY_LOAD_REQUEST: return "load_request";
    case HEAPD__ENVELOPE__BODY_LOAD_REPLY: return "load_reply";
    case HEAPD__ENVELOPE__BODY__NOT_SET: return "(empty)";
    default: return "(unknown)";
    }
}
