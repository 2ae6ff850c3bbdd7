/* Framing of the heapd wire protocol, shared by the daemon and libheapd.
 *
 * Note [Frames]
 * ~~~~~~~~~~~~~
 * The socket carries a stream of frames.  A frame is a 4-byte big-endian
 * payload length N followed by N bytes: one packed heapd.Envelope
 * (proto/heapd.proto).  The rules both sides obey:
 *
 *   - 0 < N <= FRAME_MAX_PAYLOAD.  The length is checked as soon as its four
 *     bytes have arrived, *before* any buffer is sized for the payload, so a
 *     peer can never make the other side allocate more than FRAME_MAX_PAYLOAD
 *     plus one read's worth of bytes.  A bad length is -EMSGSIZE.
 *   - A payload that protobuf-c cannot unpack, or an Envelope with no body
 *     arm set, is -EBADMSG.
 *   - End of stream in the middle of a frame is a truncated frame: the
 *     receiver reports it (frame_reader_pending() != 0 at EOF) and treats it
 *     as -EBADMSG.
 *   - After any of these errors the stream is out of step and cannot be
 *     resynchronised: the receiver sends an Error reply if it can and closes
 *     that one connection.  No other connection is affected.
 *
 * The reader never holds more than one partial frame: whole frames found in a
 * read are handed out straight from the caller's buffer without a copy.
 * The one exception is a pause: a handler that returns FRAME_PAUSE stops
 * the reader after its frame, and the rest of that read (whole frames and
 * the partial one) is kept, at most one read's worth, until
 * frame_reader_resume hands it out.  The daemon pauses a connection whose
 * replies its peer does not read (Note [Connection limits] in
 * daemon/server.c).
 */
#ifndef HEAPD_PROTO_FRAME_H
#define HEAPD_PROTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "heapd.pb-c.h"

#define FRAME_HEADER_SIZE 4u
#define FRAME_MAX_PAYLOAD (1u << 20) /* 1 MiB, see Note [Frames] */

/* Called once per complete, decoded envelope.  Return 0 to continue (the
 * envelope is freed after the call), FRAME_TAKEN to continue having taken
 * ownership of the envelope (the handler frees it later with
 * heapd__envelope__free_unpacked), with FRAME_PAUSE or'ed in to stop after
 * this frame and keep the rest for frame_reader_resume, or a negative errno
 * to stop feeding: frame_reader_feed then returns that value. */
typedef int (*frame_handler)(void *arg, Heapd__Envelope *env);
#define FRAME_TAKEN 1
#define FRAME_PAUSE 2

typedef struct frame_reader {
    uint8_t *buf;      /* partial frame: header and part of its payload */
    size_t len;        /* bytes held in buf */
    size_t cap;        /* bytes allocated for buf */
    uint8_t *held;     /* the rest of a read when a handler paused */
    size_t held_len;
    size_t max_payload;
} frame_reader;

void frame_reader_init(frame_reader *r, size_t max_payload);
void frame_reader_free(frame_reader *r);

/* Feed N bytes read from the stream.  Calls HANDLER for every complete frame.
 * Returns 0, FRAME_PAUSE when a handler paused (the rest is held: call
 * frame_reader_resume, not feed, next), a handler's negative return,
 * -EMSGSIZE (bad length), -EBADMSG (undecodable payload) or -ENOMEM.  After
 * a negative return the reader must not be fed again (see Note [Frames]). */
int frame_reader_feed(frame_reader *r, const uint8_t *data, size_t n,
                      frame_handler handler, void *arg);

/* Hand out what a pause held back, as frame_reader_feed would; the same
 * returns.  0 at once when nothing is held. */
int frame_reader_resume(frame_reader *r, frame_handler handler, void *arg);

/* Bytes of an incomplete frame held: non-zero at end of stream means the
 * peer sent a truncated frame. */
size_t frame_reader_pending(const frame_reader *r);

/* Decode one payload (without its header).  Returns the envelope (free with
 * heapd__envelope__free_unpacked(env, NULL)) or NULL if it is undecodable or
 * carries no body. */
Heapd__Envelope *frame_decode(const uint8_t *payload, size_t len);

/* Pack ENV into a fresh buffer with its 4-byte header.  On success *out is a
 * malloc'd buffer of *out_len bytes.  Returns 0, -EMSGSIZE if the packed
 * envelope exceeds FRAME_MAX_PAYLOAD, or -ENOMEM. */
int frame_pack(const Heapd__Envelope *env, uint8_t **out, size_t *out_len);

/* Human-readable name of an envelope's body arm, for logs and errors. */
const char *frame_body_name(const Heapd__Envelope *env);

#endif
