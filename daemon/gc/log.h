/* Daemon logging: one line per event on stderr, which systemd's journal or
 * the terminal collects.  Under systemd (JOURNAL_STREAM set) each line gets a
 * "<N>" syslog priority prefix so the journal keeps the level.
 *
 * Note [Escaped log lines]
 * ~~~~~~~~~~~~~~~~~~~~~~~~
 * A log line is one line: whatever a client said, it cannot start another
 * one.  Every string a client supplies (client_name, a heap or a global's
 * name) goes through log_escape before it is kept for logs or formatted
 * into a message: bytes outside printable ASCII, and the backslash, become
 * \xNN, so "\x0a" in a line can only be a client's newline.  log_msg then
 * escapes any control byte left in the formatted line the same way, for
 * the strings no caller escaped.  Without this, a refused uid's Hello with
 * a client_name holding newlines wrote whole forged lines into the log.
 */
#ifndef HEAPD_DAEMON_LOG_H
#define HEAPD_DAEMON_LOG_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

void log_set_level(enum config_log_level level);
/* True if lines of LEVEL are written. */
bool log_enabled(enum config_log_level level);
void log_msg(enum config_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Copy SRC into DST (SIZE bytes, SIZE > 0) escaped as Note [Escaped log
 * lines] says, truncated at a whole character and always NUL-terminated.
 * Returns DST. */
char *log_escape(char *dst, size_t size, const char *src);

#define log_error(...) log_msg(CONFIG_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(CONFIG_LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(CONFIG_LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(CONFIG_LOG_DEBUG, __VA_ARGS__)

#endif
