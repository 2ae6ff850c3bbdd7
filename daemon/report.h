/* Reports for operators: who is connected and what holds the heap up
 * (`heapctl clients`), and how the segments are used (`heapctl
 * segments`).  See Note [Reports] in report.c. */
#ifndef HEAPD_DAEMON_REPORT_H
#define HEAPD_DAEMON_REPORT_H

#include <stdint.h>

#include "daemon.h"

/* Answer ClientsRequest SEQ from C.  Returns 0, or a negative errno after
 * conn_fail (as session_handle's handlers do). */
int report_clients(struct conn *c, uint64_t seq);

/* Answer SegmentsRequest SEQ from C for the heap R names ("": every heap
 * C may see).  Returns as report_clients. */
int report_segments(struct conn *c, uint64_t seq,
                    const Heapd__SegmentsRequest *r);

#endif
