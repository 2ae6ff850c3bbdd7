/* Constants of the wire contract shared by heapd and libheapd. */
#ifndef HEAPD_PROTO_WIRE_H
#define HEAPD_PROTO_WIRE_H

/* Bumped on any incompatible change to heapd.proto or to the meaning of a
 * message.  Hello and Welcome carry it; see daemon/session.c. */
/* 2: the daemon sends RemarkRequest on its own, and a mutator client must
 * answer it (Note [Remark requests] in client/remark.c); Goodbye.
 * 3: a heap's counters travel as HeapStats.counters, in the order of the
 * table (Note [Counter table] in proto/heapd_counters.h).
 * 4: GlobalInitDone and GlobalInitAck: a once-initialiser ends its init
 * by asking the daemon (Note [Global roots] in proto/layout.h); the
 * counter globals_init_refused, and globals_repaired is no more.
 * 5: a mutator client's slots are in control memory of its own, sent with
 * the Welcome (Note [Client control memory] in proto/layout.h); there are
 * no root-chunk segments. */
#define PROTOCOL_VERSION 5u

#define DEFAULT_HEAP_NAME "default"

/* X(wire, code): what a call returns when heapd refuses it with ErrorCode
 * ERROR_<wire> of heapd.proto, a HEAPD_E* code or a negated errno value.
 * One line per ErrorCode; see Note [Error table] in proto/heapd_errors.h. */
#define HEAPD_WIRE_ERRORS(X) \
    X(NONE, HEAPD_EPROTO) \
    X(BAD_FRAME, HEAPD_EPROTO) \
    X(UNEXPECTED, HEAPD_EPROTO) \
    X(VERSION, HEAPD_EVERSION) \
    X(NO_SUCH_HEAP, HEAPD_ENOHEAP) \
    X(DENIED, HEAPD_EDENIED) \
    X(INTERNAL, HEAPD_EPROTO) \
    X(SHUTTING_DOWN, HEAPD_ESHUTDOWN) \
    X(NO_MEMORY, -ENOMEM) \
    X(BAD_REQUEST, -EINVAL) \
    X(TOO_MANY_CONNECTIONS, -EAGAIN) \
    X(EVICTED, HEAPD_ECLOSED) \
    X(NOT_RESUMED, HEAPD_ECLOSED) \
    X(NO_SLOT, -EAGAIN)

#endif
