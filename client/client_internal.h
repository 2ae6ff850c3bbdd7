/* Every libheapd internal header, for code outside client/ that has not
 * yet named the ones it uses: tests/test_lifecycle.c reads struct
 * heapd_mutator (client/mutator.h).  client/ itself includes the module
 * headers directly; delete this file once nothing includes it. */
#ifndef HEAPD_CLIENT_INTERNAL_H
#define HEAPD_CLIENT_INTERNAL_H

#include "agent.h"
#include "alloc.h"
#include "barrier.h"
#include "checked.h"
#include "client.h"
#include "error.h"
#include "mutator.h"
#include "remark.h"
#include "reserve.h"

#endif
