/* Daemon logging.  See log.h. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum config_log_level log_level = CONFIG_LOG_INFO;

void log_set_level(enum config_log_level level)
{
    log_level = level;
}

bool log_enabled(enum config_log_level level)
{
    return level <= log_level;
}

/* Append byte B to DST (at *N of SIZE) as itself or as \xNN; false when
 * it does not fit whole. */
static int put_byte(char *dst, size_t size, size_t *n, unsigned char b,
                    int plain)
{
    static const char hex[] = "0123456789abcdef";
    if (plain) {
        if (*n + 1 >= size)
            return 0;
        dst[(*n)++] = (char)b;
        return 1;
    }
    if (*n + 4 >= size)
        return 0;
    dst[(*n)++] = '\\';
    dst[(*n)++] = 'x';
    dst[(*n)++] = hex[b >> 4];
    dst[(*n)++] = hex[b & 15];
    return 1;
}

char *log_escape(char *dst, size_t size, const char *src)
{
    size_t n = 0;
    for (const unsigned char *s = (const unsigned char *)src; *s; s++)
        if (!put_byte(dst, size, &n, *s, *s >= 0x20 && *s < 0x7f &&
                                         *s != '\\'))
            break;
    dst[n] = '\0';
    return dst;
}

void log_msg(enum config_log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    static const int syslog_prio[] = {3, 4, 6, 7};
    char line[1024], safe[1024];
    size_t n = 0;
    va_list ap;

    if (level > log_level)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* Note [Escaped log lines]: what no caller escaped */
    for (const unsigned char *s = (const unsigned char *)line; *s; s++)
        if (!put_byte(safe, sizeof safe, &n, *s, *s >= 0x20 && *s != 0x7f))
            break;
    safe[n] = '\0';
    if (getenv("JOURNAL_STREAM"))
        fprintf(stderr, "<%d>%s\n", syslog_prio[level], safe);
    else
        fprintf(stderr, "heapd: %s: %s\n", names[level], safe);
}
