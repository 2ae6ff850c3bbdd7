/* Daemon logging: one line per event on stderr, which systemd's journal or
 * the terminal collects.  Under systemd (JOURNAL_STREAM set) each line gets a
 * "<N>" syslog priority prefix so the journal keeps the level. */
#ifndef HEAPD_DAEMON_LOG_H
#define HEAPD_DAEMON_LOG_H

#include "config.h"

void log_set_level(enum config_log_level level);
void log_msg(enum config_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(CONFIG_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(CONFIG_LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(CONFIG_LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(CONFIG_LOG_DEBUG, __VA_ARGS__)

#endif
