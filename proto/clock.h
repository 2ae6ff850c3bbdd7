/* The monotonic clock, read the one way both sides of the contract (and the
 * tests) read it. */
#ifndef HEAPD_PROTO_CLOCK_H
#define HEAPD_PROTO_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in ns.  clock_gettime cannot fail for CLOCK_MONOTONIC on
 * Linux (a valid clock id and timespec), so there is no error to return. */
static inline uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
