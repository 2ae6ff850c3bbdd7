/* libheapd's error reporting: the calling thread's last error message
 * (heapd_last_error, heapd_strerror in heapd.h) and the mapping of daemon
 * and internal codes to what the public API returns.  See client/errors.c. */
#ifndef HEAPD_CLIENT_ERRORS_H
#define HEAPD_CLIENT_ERRORS_H

#include "heapd.pb-c.h"
#include "runtime.h"    /* client_set_error */

/* Forget the calling thread's error message (heapd_connect, on entry). */
void client_clear_error(void);

/* Map a daemon Error code to a heapd error code. */
int client_error_code(Heapd__ErrorCode code);
/* The errno value for a heapd error code (functions that return NULL). */
int client_errno(int rc);

#endif
