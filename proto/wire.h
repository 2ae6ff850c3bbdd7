/* Constants of the wire contract shared by heapd and libheapd. */
#ifndef HEAPD_PROTO_WIRE_H
#define HEAPD_PROTO_WIRE_H

/* Bumped on any incompatible change to heapd.proto or to the meaning of a
 * message.  Hello and Welcome carry it; see daemon/session.c. */
#define PROTOCOL_VERSION 1u

#define DEFAULT_HEAP_NAME "default"

#endif
