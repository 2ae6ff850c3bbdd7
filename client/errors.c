/* libheapd: the calling thread's last error message, the messages and
 * names of the error codes, and their mapping from daemon codes and to
 * errno, all from the tables of Note [Error table] (proto/heapd_errors.h,
 * proto/wire.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "errors.h"
#include "frame.h"
#include "heapd.h"
#include "wire.h"

static __thread char last_error[512];

int client_set_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

int client_bad_reply(const char *request, const Heapd__Envelope *rep,
                     const char *fmt, ...)
{
    char detail[256] = "";

    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        detail[0] = ':';
        detail[1] = ' ';
        vsnprintf(detail + 2, sizeof detail - 2, fmt, ap);
        va_end(ap);
    }
    return client_set_error(HEAPD_EPROTO, "heapd answered %s with %s%s; use a "
                            "libheapd built with the daemon's proto/",
                            request, frame_body_name(rep), detail);
}

void client_clear_error(void)
{
    last_error[0] = '\0';
}

const char *heapd_last_error(void)
{
    return last_error;
}

/* Every HEAPD_E* value is below this, every negated errno value at or
 * above it.  See Note [Error table]. */
#define ERRNO_FLOOR (-1000)

/* The expansions of HEAPD_ERRORS and HEAPD_WIRE_ERRORS below are switches:
 * two lines of one value are a compile error.  See Note [Error table]. */
#define ERROR_MESSAGE_(name, value, errnum, message) \
    case name: return message;
#define ERROR_NAME_(name, value, errnum, message) \
    case name: return #name;
#define ERROR_ERRNO_(name, value, errnum, message) \
    case name: return errnum;
#define WIRE_ERROR_(wire, code) \
    case HEAPD__ERROR_CODE__ERROR_##wire: return code;

/* Is ERR a negated errno value this libc knows?  -500 is neither one nor
 * a heapd code: it is "unknown" to every function below. */
static bool is_errno(int err)
{
    return err < 0 && err >= ERRNO_FLOOR && strerrorname_np(-err) != NULL;
}

const char *heapd_strerror(int err)
{
    switch (err) {
    case 0: return "success";
    HEAPD_ERRORS(ERROR_MESSAGE_)
    default:
        return is_errno(err) ? strerror(-err) : "unknown heapd error";
    }
}

const char *heapd_errname(int err)
{
    switch (err) {
    HEAPD_ERRORS(ERROR_NAME_)
    default:
        return is_errno(err) ? strerrorname_np(-err) : "unknown";
    }
}

int client_error_code(Heapd__ErrorCode code)
{
    switch (code) {
    HEAPD_WIRE_ERRORS(WIRE_ERROR_)
    default: return HEAPD_EPROTO; /* a code newer than this libheapd */
    }
}

int client_errno(int rc)
{
    if (rc == 0 || is_errno(rc))
        return -rc;
    switch (rc) {
    HEAPD_ERRORS(ERROR_ERRNO_)
    default: return EPROTO;
    }
}
