/* Stalls: the loop thread's watch of mutators that hold up a cycle, and
 * the policy that ends them.  See Note [Stalls] in stall.c. */
#ifndef HEAPD_DAEMON_STALL_H
#define HEAPD_DAEMON_STALL_H

#include <stdint.h>

struct daemon;
struct conn;

/* Watch every heap of D every tick; stall_stop frees what is left. */
void stall_start(struct daemon *d);
void stall_stop(struct daemon *d);

/* Remark requests sent to C and not answered yet. */
uint32_t stall_remarks_outstanding(struct conn *c);

#endif
