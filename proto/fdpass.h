/* Passing the heap's memfd over the Unix socket (SCM_RIGHTS).
 *
 * Note [Passing the heap fd]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~
 * The daemon sends the memfd of a heap exactly once per mutator client, as
 * ancillary data on the first byte of the Welcome frame.  libuv (1.44) can
 * pass only stream handles, not an arbitrary fd, so the daemon writes that
 * frame itself with sendmsg(2) on the connection's fd.  That is safe only
 * while nothing else is queued on the uv stream: otherwise the kernel would
 * see our bytes before earlier queued ones and the frames would interleave.
 * The daemon guarantees it by sending Welcome as the very first bytes on a
 * connection, in reply to Hello, and conn_send_with_fds (daemon/server.c)
 * refuses with -EBUSY if anything is queued on the connection.
 * If the kernel takes only part of the frame (it never does for a fresh
 * socket, but the code does not assume it), the fd has gone with the first
 * byte and the remainder is queued on the uv stream as ordinary bytes.
 *
 * The client reads the Welcome frame with recvmsg(2) and MSG_CMSG_CLOEXEC,
 * checks MSG_CTRUNC (a truncated control message means an fd was dropped,
 * or would leak), accepts exactly one SCM_RIGHTS message of at most
 * FDPASS_MAX descriptors (the heap's memfd, the daemon's page opened
 * read-only, the client's control memory), and closes any other fd it was handed.
 */
#ifndef HEAPD_PROTO_FDPASS_H
#define HEAPD_PROTO_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

/* Descriptors one message carries at most: the heap, the daemon's page
 * (Note [The daemon's page] in proto/layout.h) and the client's control
 * memory (Note [Client control memory]). */
#define FDPASS_MAX 3

/* Send LEN bytes of BUF on SOCK with the NFDS (1..FDPASS_MAX) descriptors
 * FDS attached to the first byte.  Returns the number of bytes the kernel
 * took (>= 1) or a negative errno.  Retries EINTR; does not wait on EAGAIN
 * (returns -EAGAIN). */
ssize_t fdpass_send(int sock, const void *buf, size_t len, const int *fds,
                    unsigned nfds);

/* Receive up to LEN bytes from SOCK.  Descriptors that arrive with them
 * (close-on-exec) are stored in FDS, *NFDS of them, the rest of FDS set
 * to -1.  Returns bytes read (0 at end of stream) or a negative errno:
 * -EBADMSG if the control data was truncated or carried anything but one
 * message of 1..FDPASS_MAX descriptors (every fd received is closed). */
ssize_t fdpass_recv(int sock, void *buf, size_t len, int fds[FDPASS_MAX],
                    unsigned *nfds);

#endif
