/* Internals shared by libheapd's collections (str.c, map.c, queue.c in
 * client/collections/): the tags that tell their objects apart, and the test
 * hook that stops a process in the middle of an operation. */
#ifndef HEAPD_CLIENT_COLL_H
#define HEAPD_CLIENT_COLL_H

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collections.h"
#include "heapd_collections.h"
#include "runtime.h"

/* The first word of a collection object's raw bytes says what it is
 * (COLL_TAG_*, and the heads the daemon reads too, in proto/collections.h:
 * Note [Collections seen by the daemon]).  A tag is a check, not a
 * guarantee: any client can write raw bytes, and the collections read
 * objects that other processes wrote; they never follow a reference they
 * did not find in a reference field, so a forged tag costs only the
 * objects its writer could reach. */

/* OBJ's raw bytes as a T (after its NREFS reference fields). */
#define COLL_META(T, obj, nrefs) ((T *)((void **)(obj) + (nrefs)))

/* Load a reference field another process may store: acquire, so that the
 * object it points to is seen initialised (heapd_write and heapd_cas
 * store with release). */
static inline void *coll_load(void *const *field)
{
    return __atomic_load_n(field, __ATOMIC_ACQUIRE);
}

/* A test hook of debug builds: HEAPD_COLL_STOP_IN=POINT in the
 * environment makes the process stop itself (SIGSTOP) the first time it
 * reaches POINT, so that a test can SIGKILL it exactly there
 * (tests/test_collections_kill.c).  Release builds (NDEBUG) have none. */
#ifndef NDEBUG
static inline void coll_stop_in(const char *point)
{
    /* read every time: a test forks the process that is to stop from one
     * that has run the collections already */
    static _Atomic int done;
    const char *e = getenv("HEAPD_COLL_STOP_IN");
    if (e && strcmp(e, point) == 0 && !atomic_exchange(&done, 1))
        raise(SIGSTOP);
}
#else
static inline void coll_stop_in(const char *point)
{
    (void)point;
}
#endif

#endif
