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

static inline void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

#endif
