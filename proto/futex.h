/* Futexes on words in the shared heap mapping.  The mapping is MAP_SHARED,
 * so these are process-shared futexes: never FUTEX_PRIVATE_FLAG. */
#ifndef HEAPD_PROTO_FUTEX_H
#define HEAPD_PROTO_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleep while *WORD == VAL, at most TIMEOUT_NS (0: no limit).  Returns 0
 * when woken or the value differed, -ETIMEDOUT, or -EINTR. */
static inline int futex_wait(_Atomic uint32_t *word, uint32_t val,
                             uint64_t timeout_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(timeout_ns / 1000000000u),
                          .tv_nsec = (long)(timeout_ns % 1000000000u)};
    long r = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, val,
                     timeout_ns ? &ts : NULL, NULL, 0);
    if (r == 0 || errno == EAGAIN)
        return 0;
    return -errno;
}

static inline void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

#endif
