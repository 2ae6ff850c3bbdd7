/* libheapd: the conservative scan of a mutator's own thread stack and
 * registers, and the object an address inside the heap lies in
 * (client/stack.c, Note [Scanning a mutator's own stack]). */
#ifndef HEAPD_CLIENT_STACK_H
#define HEAPD_CLIENT_STACK_H

#include <stdint.h>

#include "heapd.h"

/* The calling thread's stack: its base *BASE, the highest address (stacks
 * grow down), and its limit *LIMIT, the lowest address it may grow to,
 * from pthread_getattr_np (the main thread's too).  Called at attach, in
 * the attaching thread.  Returns 0, or a negative errno with the
 * calling thread's error message set (client_set_error). */
int stack_base_of_self(uintptr_t *base, uintptr_t *limit);

typedef void (*stack_visit_fn)(void *ctx, uintptr_t word);

/* Spill the callee-saved registers onto the stack, then call VISIT for
 * every 8-aligned word from the current frame up to BASE whose value lies
 * in [LO, HI) (under AddressSanitizer, the words of the thread's live fake
 * frames too).  A word may be visited more than once, and the scan's own
 * frame holds LO and HI: VISIT sees what the stack holds, nothing is
 * promised about what it means.  Returns the number of words visited, or
 * -EINVAL (the message set) if the current stack pointer is not inside
 * [LIMIT, BASE) of stack_base_of_self: the thread runs on another stack
 * (sigaltstack, makecontext), nothing was visited, and the caller must
 * not trust the scan.  See Note [Scanning a mutator's own stack]. */
long stack_scan(uintptr_t base, uintptr_t limit, uintptr_t lo, uintptr_t hi,
                stack_visit_fn visit, void *ctx);

/* VISIT every 8-aligned word of [FROM, TO) whose value lies in [LO, HI):
 * memory other threads may write (a range heapd_add_roots registered),
 * read as the stack is (Note [Scanning a mutator's own stack]).
 * Returns the words visited. */
long stack_scan_range(uintptr_t from, uintptr_t to, uintptr_t lo,
                      uintptr_t hi, stack_visit_fn visit, void *ctx);

/* The object (its reference: the address of its first field, Note
 * [Objects]) whose block in client C's shared heap contains address P, or
 * NULL.  P may point anywhere in the block: its header word, a field,
 * heapd_bytes(o), the last byte.  The block's mark must say it is in use;
 * *MARK (if MARK is not NULL) gets the mark byte read, 0 if none was.
 * Trusts nothing it reads (Note [Resolving an interior pointer]). */
void *stack_object_of(heapd_client *c, uintptr_t p, uint8_t *mark);

#endif
