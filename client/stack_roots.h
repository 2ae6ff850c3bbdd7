/* libheapd: the C stack as a root of the major collector
 * (client/stack_roots.c, Note [C locals are roots]). */
#ifndef HEAPD_CLIENT_STACK_ROOTS_H
#define HEAPD_CLIENT_STACK_ROOTS_H

#include <stdatomic.h>
#include <stdbool.h>

#include "client.h"
#include "heapd.h"
#include "mutator.h"

/* Whether M captures anything: its stack, or the client's registered
 * ranges (Note [Registered roots]). */
static inline bool stack_roots_wanted(const heapd_mutator *m)
{
    return m->conservative ||
           atomic_load_explicit(&m->c->nranges_any, memory_order_relaxed);
}

/* Capture the objects M's stack and registers point into, into its
 * slot's capture area: before M acknowledges a snapshot's stop, and in
 * heapd_blocking_enter.  Nothing if M is precise or orphaned, or if its
 * stack-marking handshake is due (that handshake uses the capture there
 * is).  Called in M's own thread. */
void stack_roots_capture(heapd_mutator *m);
/* M's side of the stack-marking handshake: log every captured object
 * that still is one to M's update remembered set. */
void stack_roots_log(heapd_mutator *m);

#endif
