/* libheapd's error reporting: the calling thread's last error message
 * (heapd_last_error, heapd_strerror in heapd.h) and the mapping of daemon
 * and internal codes to what the public API returns.  See client/errors.c. */
#ifndef HEAPD_CLIENT_ERRORS_H
#define HEAPD_CLIENT_ERRORS_H

#include "heapd.pb-c.h"
#include "runtime.h"    /* client_set_error */

/* Forget the calling thread's error message (heapd_connect, on entry). */
void client_clear_error(void);
/* REP is no answer to request REQUEST (as frame_body_name names it): record
 * HEAPD_EPROTO with a message naming both, and FMT's detail when REP is of
 * the right kind but says something impossible (FMT NULL: none).  Returns
 * HEAPD_EPROTO. */
int client_bad_reply(const char *request, const Heapd__Envelope *rep,
                     const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* What a call returns for a daemon Error code: a HEAPD_E* code or a
 * negated errno value (HEAPD_WIRE_ERRORS; see Note [Error table]). */
int client_error_code(Heapd__ErrorCode code);
/* The errno value for an error code (functions that return NULL): -RC for
 * a negated errno value, a HEAPD_E* code's ERRNUM (HEAPD_ERRORS). */
int client_errno(int rc);

#endif
