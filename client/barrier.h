/* libheapd's write barriers, inline fast paths and their slow paths in
 * client/barrier.c: Note [Snapshot write barrier], Note [Stack marking
 * handshake], Note [Update remembered set]. */
#ifndef HEAPD_CLIENT_BARRIER_H
#define HEAPD_CLIENT_BARRIER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "heapd.h"
#include "layout.h"
#include "mutator.h"

void barrier_log(heapd_mutator *m, void *ref);
/* The same for a reference a C stack capture holds, which the daemon
 * marks last (Note [Marking C stack captures last] in daemon/gc/mark.c). */
void barrier_log_captured(heapd_mutator *m, void *ref);
void barrier_write_slow(heapd_mutator *m, void *obj, void **field);
void barrier_stack_slow(heapd_mutator *m);
void barrier_global_slow(heapd_mutator *m, void *_Atomic *value);

static inline bool barrier_on(const heapd_mutator *m)
{
    return __builtin_expect(atomic_load_explicit(&m->ctl->phase,
                                                 memory_order_relaxed) ==
                                LAYOUT_PHASE_MARK, 0);
}
/* Note [Values in flight]: VAL waits in the slot's pending root, a root of
 * the stack, while a safepoint call that is to store it runs. */
static inline void barrier_park(heapd_mutator *m, void *val)
{
    atomic_store_explicit(&m->slot->pending_root, val, memory_order_release);
}
static inline void barrier_unpark(heapd_mutator *m)
{
    atomic_store_explicit(&m->slot->pending_root, NULL, memory_order_release);
}
/* Note [Wide objects] in barrier.c */
#define BARRIER_WIDE 64
/* Before a store to FIELD of OBJ.  An object already tagged dirty in this
 * cycle -- by an earlier write, or from birth if it was allocated while
 * marking -- needs nothing: its fields were logged, and no new cycle can
 * begin before the store (Note [Waiting in a barrier] in
 * daemon/gc/safepoint.c).  Most writes while marking take this path: in
 * GCBench, without it, the barrier was most of what each cycle cost the
 * mutator.  The value stored needs no barrier of its own: it was
 * reachable at the caller's last safepoint or allocated since, so it is
 * marked or black (Note [Client GC discipline] in heapd.h). */
static inline void barrier_write(heapd_mutator *m, void *obj, void **field)
{
    if (!barrier_on(m))
        return;
    uint64_t h = __atomic_load_n((const uint64_t *)obj - 1, __ATOMIC_ACQUIRE);
    if (layout_header_tag(h) ==
            (uint8_t)atomic_load_explicit(&m->ctl->epoch,
                                          memory_order_relaxed) &&
        layout_header_nrefs(h) <= BARRIER_WIDE)
        return;
    barrier_write_slow(m, obj, field);
}
/* M's root stack must be marked for this cycle before it changes (Note
 * [Stack marking handshake]). */
static inline bool barrier_stack_due(const heapd_mutator *m)
{
    return barrier_on(m) &&
           atomic_load_explicit(&m->slot->stack_marked,
                                memory_order_acquire) !=
               atomic_load_explicit(&m->ctl->epoch, memory_order_relaxed);
}

/* The entry of a safepoint call that is to store VAL (NULL: none): the
 * safepoint, then the stack barrier, VAL parked through whatever of them
 * runs (Note [Client GC discipline] in heapd.h, Note [Values in flight]).
 * *PARKED says whether VAL is parked: barrier_unpark once it is stored.
 * Run it again after any wait of the call (PARKED already true).  It is a
 * mutator_ function, but it runs the barrier, so it lives here, where
 * both halves are visible. */
static inline void mutator_enter(heapd_mutator *m, void *val, bool *parked)
{
    if (mutator_poll_due(m)) {
        if (val && !*parked) {
            barrier_park(m, val);
            *parked = true;
        }
        mutator_safepoint_slow(m);
    }
    if (barrier_stack_due(m)) {
        if (val && !*parked) {
            barrier_park(m, val);
            *parked = true;
        }
        barrier_stack_slow(m);
    }
}

#endif
