/* Daemon logging.  See log.h. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static enum config_log_level log_level = CONFIG_LOG_INFO;

void log_set_level(enum config_log_level level)
{
    log_level = level;
}

void log_msg(enum config_log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    static const int syslog_prio[] = {3, 4, 6, 7};
    char line[1024];
    va_list ap;

    if (level > log_level)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (getenv("JOURNAL_STREAM"))
        fprintf(stderr, "<%d>%s\n", syslog_prio[level], line);
    else
        fprintf(stderr, "heapd: %s: %s\n", names[level], line);
}
