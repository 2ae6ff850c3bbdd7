/* libheapd: the table of its error codes.  Included by heapd.h, which
 * declares the codes from it; installed with it.
 *
 * Note [Error table]
 * ~~~~~~~~~~~~~~~~~~
 * HEAPD_ERRORS is the one list of libheapd's own error codes, the HEAPD_E*
 * values a call returns besides negated errno values: one line per code,
 * X(name, value, errnum, message).  Every other place expands it:
 *   - the enum of heapd.h: NAME = VALUE;
 *   - heapd_strerror (MESSAGE) and heapd_errname ("NAME"), client/errors.c;
 *   - client_errno, client/errors.c: a call that returns a pointer fails
 *     with errno ERRNUM for the code;
 *   - libheapd(3)'s ERRORS, which tests/man_keys.sh checks against it, names
 *     and values.
 * HEAPD_WIRE_ERRORS (proto/wire.h) is its other half: one line per
 * ErrorCode of heapd.proto, the daemon's reason for refusing, X(wire,
 * code): CODE is what the call returns, a NAME of this table or a negated
 * errno value.  client_error_code (client/errors.c) expands it.  The
 * daemon picks its ErrorCode for what the caller should see: an attach
 * over max_mutators_per_client sends NO_SLOT, which is -EAGAIN, not
 * NO_MEMORY's -ENOMEM.  test_proto walks both tables, and checks these
 * rules.
 *
 * The rules: VALUE is ABI: never change or reuse one; a new code takes the
 * next value down.  Every VALUE is below -1000, under every negated errno
 * value (Linux's are above -134): that is how heapd_strerror, heapd_errname
 * and client_errno tell the two kinds apart.  NAME is API.  MESSAGE is a
 * short phrase saying what happened; heapd_last_error says what to do.
 * Every ErrorCode has exactly one line in HEAPD_WIRE_ERRORS, so that a new
 * one is mapped on purpose rather than falling to HEAPD_EPROTO.
 *
 * Why one table: the codes were three lists kept by hand, the enum and the
 * switches of heapd_strerror and client_errno, plus the man page; adding
 * HEAPD_EFORKED took an edit in each of the three, and client_errno once
 * took every code above -4096 for an errno, so heapd_alloc set errno 1007
 * for HEAPD_ECLOSED instead of EPIPE.
 */
#ifndef HEAPD_ERRORS_H
#define HEAPD_ERRORS_H

#include <errno.h>

/* X(name, value, errnum, message): see Note [Error table]. */
#define HEAPD_ERRORS(X) \
    X(HEAPD_ENODAEMON, -1001, EPROTO, "no heapd is listening on the socket") \
    X(HEAPD_EDENIED, -1002, EPROTO, "not allowed to use this heap") \
    X(HEAPD_EVERSION, -1003, EPROTO, "libheapd and heapd versions differ") \
    X(HEAPD_EADDRTAKEN, -1004, EPROTO, "the heap's address range is already in use") \
    X(HEAPD_ENOHEAP, -1005, EPROTO, "the daemon serves no heap of that name") \
    X(HEAPD_EPROTO, -1006, EPROTO, "protocol error talking to heapd") \
    X(HEAPD_ECLOSED, -1007, EPIPE, "the connection to heapd is closed") \
    X(HEAPD_ESHUTDOWN, -1008, EPIPE, "heapd is shutting down") \
    X(HEAPD_ESOCKPATH, -1009, EPROTO, "the socket path is too long") \
    X(HEAPD_EFORKED, -1010, EBADF, "the client was connected by the parent process: connect again after fork()")

#endif
