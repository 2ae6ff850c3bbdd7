/* Shared by the fuzz targets that run a daemon in their own process
 * (fuzz_session.c, fuzz_shared.c): the start-up of daemon/main.c behind a
 * real Unix socket, raw-protocol clients of it, and the reading of an
 * input.  The seam is the socket: no daemon code is replaced or skipped.
 *
 * Everything runs on the fuzzer's one thread, which is also the daemon's
 * loop thread: a client writes, then runs the loop (fuzz_turn) until the
 * daemon has read it; the collector and its worker are real threads. */
#ifndef HEAPD_FUZZ_FUZZ_DAEMON_H
#define HEAPD_FUZZ_FUZZ_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "fdpass.h"
#include "frame.h"

/* Loop turns before an input counts as hung. */
#define FUZZ_SPIN_LIMIT 100000000u

/* The daemon, once fuzz_daemon_start has run. */
extern struct daemon *fuzz_d;

/* Start a daemon as daemon/main.c does (minus daemonising, signals and
 * systemd): CONFIG_TEXT parsed as a file named NAME, every heap opened at
 * its base with its collector thread, listening on a socket in a private
 * /tmp/heapd-fuzz-* directory removed at exit. */
void fuzz_daemon_start(const char *name, const char *config_text);

/* One client connection, the fuzzer at its end. */
struct fuzz_client {
    int fd;
    uint64_t id;              /* the daemon's conn id (conn.id) */
    bool eof;                 /* the daemon closed its side */
    frame_reader replies;
    unsigned n_replies;
    /* called for every reply after the common checks; may be NULL */
    int (*on_reply)(struct fuzz_client *cl, Heapd__Envelope *env);
    void *arg;
    /* descriptors that came with replies, kept when keep_fds is set
     * (else closed at once); the owner closes them */
    bool keep_fds;
    int fds[FDPASS_MAX];
    unsigned nfds;
};

/* Connect CL and run the loop until the daemon has accepted it. */
void fuzz_connect(struct fuzz_client *cl);
/* CL's connection while the daemon has it open and is reading, or NULL. */
struct conn *fuzz_conn(const struct fuzz_client *cl);
/* Run the loop once, then read what the daemon sent CL. */
void fuzz_turn(struct fuzz_client *cl);
/* Run the loop, waiting at most about a millisecond for an event: for
 * waits on the collector thread, which a busy loop would slow down. */
void fuzz_turn_wait(struct fuzz_client *cl);
/* Write BUF, then run the loop until the daemon has read all of it (or
 * stopped reading: it failed the connection). */
void fuzz_send_chunk(struct fuzz_client *cl, const void *buf, size_t len);
void fuzz_send_envelope(struct fuzz_client *cl, const Heapd__Envelope *env);
/* A valid Hello for heap HEAP, of a mutator or a control client. */
void fuzz_send_hello(struct fuzz_client *cl, const char *heap, bool control);
/* Half-close, read to the end and run the loop until the daemon has freed
 * the connection; then close the socket, every kept descriptor and the
 * reader. */
void fuzz_close(struct fuzz_client *cl);

/* ---- reading the input ---- */

struct fuzz_input {
    const uint8_t *p;
    size_t n;
};

/* The next BYTES (<= 8) bytes, little-endian; zeros past the end. */
uint64_t fuzz_take(struct fuzz_input *in, unsigned bytes);
/* The next WANT bytes, or what is left. */
void fuzz_take_bytes(struct fuzz_input *in, size_t want, const uint8_t **p,
                     size_t *len);

#endif
