/* Futexes on words in the shared heap mapping.  The mapping is MAP_SHARED,
 * so these are process-shared futexes: never FUTEX_PRIVATE_FLAG. */
#ifndef HEAPD_PROTO_FUTEX_H
#define HEAPD_PROTO_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

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

/* Spin (with a pause instruction) while *WORD == VAL, for up to SPIN_NS
 * (0: one look).  True once the value differs, false if it still equals
 * VAL when the time is up. */
static inline bool futex_spin(_Atomic uint32_t *word, uint32_t val,
                              uint64_t spin_ns)
{
    uint64_t t0 = spin_ns ? monotonic_ns() : 0;
    for (unsigned i = 1; __atomic_load_n((uint32_t *)word, __ATOMIC_SEQ_CST) ==
                         val;
         i++) {
        if (spin_ns == 0)
            return false;
        __builtin_ia32_pause();
        if ((i & 63) == 0 && monotonic_ns() - t0 > spin_ns)
            return false;
    }
    return true;
}

/* Wait while *WORD == VAL, as futex_wait, but spin first (futex_spin) for
 * up to SPIN_NS, keeping the core: for a wait that is usually short,
 * sleeping costs more than the wait (Note [Spinning through a pause] in
 * client/mutator.c). */
static inline int futex_spin_wait(_Atomic uint32_t *word, uint32_t val,
                                  uint64_t spin_ns, uint64_t timeout_ns)
{
    if (futex_spin(word, val, spin_ns))
        return 0;
    return futex_wait(word, val, timeout_ns);
}

/* Sleep while *W1 == V1 and *W2 == V2, at most TIMEOUT_NS (0: no limit):
 * futex_wait on two words (futex_waitv, Linux 5.16).  Returns as
 * futex_wait.  A kernel without futex_waitv sleeps on W1 alone for at
 * most 10 ms a time, and the caller looks again. */
static inline int futex_wait2(_Atomic uint32_t *w1, uint32_t v1,
                              _Atomic uint32_t *w2, uint32_t v2,
                              uint64_t timeout_ns)
{
    struct futex_waitv wv[2] = {
        {.val = v1, .uaddr = (uintptr_t)w1, .flags = FUTEX_32},
        {.val = v2, .uaddr = (uintptr_t)w2, .flags = FUTEX_32},
    };
    struct timespec ts;
    if (timeout_ns) { /* futex_waitv's timeout is absolute */
        uint64_t at = monotonic_ns() + timeout_ns;
        ts.tv_sec = (time_t)(at / 1000000000u);
        ts.tv_nsec = (long)(at % 1000000000u);
    }
    long r = syscall(__NR_futex_waitv, wv, 2u, 0u, timeout_ns ? &ts : NULL,
                     CLOCK_MONOTONIC);
    if (r >= 0 || errno == EAGAIN)
        return 0;
    if (errno == ENOSYS)
        return futex_wait(w1, v1, timeout_ns && timeout_ns < 10000000u
                                      ? timeout_ns
                                      : 10000000u);
    return -errno;
}

static inline void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

#endif
