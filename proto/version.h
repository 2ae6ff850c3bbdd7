/* What a client and heapd of different releases say to each other when
 * they cannot work together: see Note [Versions across releases] in
 * proto/version.c. */
#ifndef HEAPD_PROTO_VERSION_H
#define HEAPD_PROTO_VERSION_H

#include <stddef.h>
#include <stdint.h>

/* One side of a connection: its release ("" or NULL when it did not say:
 * a release before 0.2.0), its PROTOCOL_VERSION and LAYOUT_VERSION (0
 * when it did not say). */
struct version_side {
    const char *release;
    uint32_t protocol;
    uint32_t layout;
};

/* True if LIB and DAEMON work together: the same protocol and, for a
 * client that maps the heap (MAPS), the same layout. */
int version_compatible(const struct version_side *lib,
                       const struct version_side *daemon, int maps);

/* Write into BUF (N bytes) why LIB and DAEMON cannot work together,
 * naming both releases and which one to upgrade. */
void version_mismatch(char *buf, size_t n, const struct version_side *lib,
                      const struct version_side *daemon);

#endif
