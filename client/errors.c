/* libheapd: the calling thread's last error message, the names of the
 * error codes, and their mapping from daemon codes and to errno. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "errors.h"
#include "heapd.h"

static __thread char last_error[512];

int client_set_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

void client_clear_error(void)
{
    last_error[0] = '\0';
}

const char *heapd_last_error(void)
{
    return last_error;
}

const char *heapd_strerror(int err)
{
    switch (err) {
    case 0: return "success";
    case HEAPD_ENODAEMON: return "no heapd is listening on the socket";
    case HEAPD_EDENIED: return "not allowed to use this heap";
    case HEAPD_EVERSION: return "libheapd and heapd versions differ";
    case HEAPD_EADDRTAKEN: return "the heap's address range is already in use";
    case HEAPD_ENOHEAP: return "the daemon serves no heap of that name";
    case HEAPD_EPROTO: return "protocol error talking to heapd";
    case HEAPD_ECLOSED: return "the connection to heapd is closed";
    case HEAPD_ESHUTDOWN: return "heapd is shutting down";
    case HEAPD_ESOCKPATH: return "the socket path is too long";
    case HEAPD_EFORKED: return "the client was connected by the parent "
                               "process: connect again after fork()";
    default:
        if (err < 0 && err > HEAPD_ENODAEMON)
            return strerror(-err);
        return "unknown heapd error";
    }
}

int client_error_code(Heapd__ErrorCode code)
{
    switch (code) {
    case HEAPD__ERROR_CODE__ERROR_VERSION: return HEAPD_EVERSION;
    case HEAPD__ERROR_CODE__ERROR_NO_SUCH_HEAP: return HEAPD_ENOHEAP;
    case HEAPD__ERROR_CODE__ERROR_DENIED: return HEAPD_EDENIED;
    case HEAPD__ERROR_CODE__ERROR_SHUTTING_DOWN: return HEAPD_ESHUTDOWN;
    case HEAPD__ERROR_CODE__ERROR_NO_MEMORY: return -ENOMEM;
    case HEAPD__ERROR_CODE__ERROR_BAD_REQUEST: return -EINVAL;
    case HEAPD__ERROR_CODE__ERROR_TOO_MANY_CONNECTIONS: return -EAGAIN;
    case HEAPD__ERROR_CODE__ERROR_NO_SLOT: return -EAGAIN;
    case HEAPD__ERROR_CODE__ERROR_EVICTED: return HEAPD_ECLOSED;
    case HEAPD__ERROR_CODE__ERROR_NOT_RESUMED: return HEAPD_ECLOSED;
    default: return HEAPD_EPROTO;
    }
}

int client_errno(int rc)
{
    if (rc > HEAPD_ENODAEMON) /* a negated errno value */
        return -rc;
    switch (rc) {
    case HEAPD_ECLOSED:
    case HEAPD_ESHUTDOWN:
        return EPIPE;
    case HEAPD_EFORKED:
        return EBADF;
    default:
        return EPROTO;
    }
}
