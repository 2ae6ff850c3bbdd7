/* heapctl's parts: the one-shot commands (heapctl/heapctl.c) and the live
 * view (heapctl/heapctl_top.c, Note [heapctl top]). */
#ifndef HEAPD_HEAPCTL_TOP_H
#define HEAPD_HEAPCTL_TOP_H

#include <stdint.h>

#include "heapd.h"

/* V[i] = the value of line i of the counter table in H. */
void heapctl_counter_values(const heapd_heap_stats *h,
                            uint64_t v[HEAPD_HEAP_COUNTERS_N]);

/* Run the live view on control client C until q; redraw every
 * INTERVAL_MS.  Returns heapctl's exit status. */
int heapctl_top(heapd_client *c, unsigned interval_ms);

#endif
