/* Mutexes that know their owner, for heapd and libheapd.
 *
 * Note [Checked lock rules]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~
 * (After GHC's ASSERT_LOCK_HELD in rts/include/rts/OSThreads.h.)  A
 * function that must run with a lock held says so in its comment ("With
 * heap->lock held: ...") and asserts it at entry: ASSERT_LOCK_HELD(&lock).
 * A function that takes the lock itself may assert ASSERT_LOCK_NOT_HELD,
 * and taking a lock the thread holds already aborts instead of hanging.
 * So every mutex of the daemon and the client with such a rule is a
 * struct hd_mutex, taken and released only through this header:
 *   - in debug builds (NDEBUG not defined: the default debugoptimized
 *     build keeps assert()) it records the thread that holds it, written
 *     by that thread after it locks and cleared before it unlocks, and
 *     hd_cond_wait/hd_cond_timedwait clear and restore it around the wait,
 *     during which the mutex is not held;
 *   - the owner is a relaxed atomic: the only question asked of it is
 *     "is it me?".  Only a thread writes its own id there, and only while
 *     it holds the mutex, which it clears before letting go; a thread
 *     reads its own stores in order (coherence), and no other thread
 *     stores there while it holds the mutex.  So it reads its id exactly
 *     while it holds the mutex, with no fence -- and ThreadSanitizer sees
 *     an atomic, not a race;
 *   - in release builds the struct is the bare pthread_mutex_t and every
 *     check compiles to nothing.
 * The owner is pthread_self() as an integer: it means something only
 * inside one process, so no process-shared or robust mutex may be an
 * hd_mutex; heapd and libheapd have none (what waits in shared memory
 * waits on futex words clients may write, never trusted: Note [Client
 * control memory] in proto/layout.h).  A forked child's thread has the id
 * of the thread that forked, and holds what that thread held, as the
 * mutexes themselves say.
 * A broken rule aborts with the lock, the function and the place, e.g.
 *     heapd: lock rule broken in seg_release (../daemon/gc/segment.c:1198):
 *     &h->lock is not held by this thread
 * Why: a change that breaks such a rule stops at the call, where a race
 * on the segment table would show cycles later, if ever.
 */
#ifndef HEAPD_PROTO_LOCK_H
#define HEAPD_PROTO_LOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#ifndef NDEBUG
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#endif

_Static_assert(sizeof(pthread_t) <= sizeof(uintptr_t),
               "pthread_t fits the owner word of struct hd_mutex");

struct hd_mutex {
    pthread_mutex_t m;
#ifndef NDEBUG
    _Atomic uintptr_t owner; /* the holder's pthread_self(), 0: none */
#endif
};

#define HD_MUTEX_INITIALIZER {.m = PTHREAD_MUTEX_INITIALIZER}

#ifndef NDEBUG
static inline uintptr_t hd_self_(void)
{
    return (uintptr_t)pthread_self();
}

static inline void hd_own_(struct hd_mutex *mu, uintptr_t who)
{
    atomic_store_explicit(&mu->owner, who, memory_order_relaxed);
}

/* Does this thread hold MU?  Debug builds only. */
static inline bool hd_mutex_held(const struct hd_mutex *mu)
{
    return atomic_load_explicit(&((struct hd_mutex *)mu)->owner,
                                memory_order_relaxed) == hd_self_();
}

__attribute__((noreturn, cold)) static inline void
hd_lock_broken_(const char *lock, bool want, const char *func,
                const char *file, int line)
{
    fprintf(stderr,
            "heapd: lock rule broken in %s (%s:%d): %s is %s by this "
            "thread\n",
            func, file, line, lock, want ? "not held" : "already held");
    fflush(stderr);
    abort();
}

#define ASSERT_LOCK_HELD(mu)                                                \
    (hd_mutex_held(mu) ? (void)0                                            \
                       : hd_lock_broken_(#mu, true, __func__, __FILE__,    \
                                         __LINE__))
#define ASSERT_LOCK_NOT_HELD(mu)                                            \
    (!hd_mutex_held(mu) ? (void)0                                           \
                        : hd_lock_broken_(#mu, false, __func__, __FILE__,  \
                                          __LINE__))
#else
#define hd_own_(mu, who) ((void)(mu))
#define ASSERT_LOCK_HELD(mu) ((void)sizeof(mu))
#define ASSERT_LOCK_NOT_HELD(mu) ((void)sizeof(mu))
#endif

static inline int hd_mutex_init(struct hd_mutex *mu)
{
    hd_own_(mu, 0);
    return pthread_mutex_init(&mu->m, NULL);
}

static inline void hd_mutex_destroy(struct hd_mutex *mu)
{
    ASSERT_LOCK_NOT_HELD(mu);
    pthread_mutex_destroy(&mu->m);
}

/* The caller's names for the checks: the lock as the caller spells it. */
#define hd_mutex_lock(mu) hd_mutex_lock_(mu, #mu, __func__, __FILE__, __LINE__)
#define hd_mutex_unlock(mu)                                                 \
    hd_mutex_unlock_(mu, #mu, __func__, __FILE__, __LINE__)

static inline void hd_mutex_lock_(struct hd_mutex *mu, const char *name,
                                  const char *func, const char *file,
                                  int line)
{
#ifndef NDEBUG
    if (hd_mutex_held(mu)) /* it would never return */
        hd_lock_broken_(name, false, func, file, line);
#else
    (void)name, (void)func, (void)file, (void)line;
#endif
    pthread_mutex_lock(&mu->m);
    hd_own_(mu, hd_self_());
}

/* True if MU was free and is now held. */
static inline bool hd_mutex_trylock(struct hd_mutex *mu)
{
    ASSERT_LOCK_NOT_HELD(mu); /* it would fail, and look taken by another */
    if (pthread_mutex_trylock(&mu->m) != 0)
        return false;
    hd_own_(mu, hd_self_());
    return true;
}

static inline void hd_mutex_unlock_(struct hd_mutex *mu, const char *name,
                                    const char *func, const char *file,
                                    int line)
{
#ifndef NDEBUG
    if (!hd_mutex_held(mu))
        hd_lock_broken_(name, true, func, file, line);
#else
    (void)name, (void)func, (void)file, (void)line;
#endif
    hd_own_(mu, 0);
    pthread_mutex_unlock(&mu->m);
}

/* pthread_cond_wait and pthread_cond_timedwait on MU, which the caller
 * holds: not held while waiting, held again on return. */
static inline void hd_cond_wait(pthread_cond_t *cv, struct hd_mutex *mu)
{
    ASSERT_LOCK_HELD(mu);
    hd_own_(mu, 0);
    pthread_cond_wait(cv, &mu->m);
    hd_own_(mu, hd_self_());
}

static inline int hd_cond_timedwait(pthread_cond_t *cv, struct hd_mutex *mu,
                                    const struct timespec *deadline)
{
    ASSERT_LOCK_HELD(mu);
    hd_own_(mu, 0);
    int rc = pthread_cond_timedwait(cv, &mu->m, deadline);
    hd_own_(mu, hd_self_());
    return rc;
}

#endif
