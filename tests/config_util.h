/* The config suite's helpers and fixtures (config_util.c). */
#ifndef HEAPD_TESTS_CONFIG_UTIL_H
#define HEAPD_TESTS_CONFIG_UTIL_H

#include <check.h>

#include "config.h"

/* A valid heap section: 3 lines. */
#define HEAP "[heap h]\nbase = 0x7e8000000000\nmax_size = 4G\n"
/* [daemon] then a valid heap: 4 lines. */
#define DAEMON_HEAP "[daemon]\n" HEAP
/* The error of a line too long, which ends the parse. */
#define LONG_LINE_ERROR(file, line)                                       \
    "heapd:" file ":" #line ": line is longer than 4096 bytes; shorten it " \
    "(heapd stopped reading the file here; is it a text file?)\n"

/* Load TEXT as "t.conf"; returns everything written to ERR (malloc'd). */
char *load(const char *text, int *rc, struct config *c);
/* TEXT must be rejected with exactly the error output EXPECTED. */
void expect_errors(const char *text, const char *expected);
/* TEXT must load with no output; the result is left in *C. */
void expect_ok(const char *text, struct config *c);
/* DATA written to a new temporary file; its path (malloc'd). */
char *write_temp(const char *data, size_t len);
/* Load the file PATH; returns everything written to ERR (malloc'd). */
char *load_file(const char *path, int *rc, struct config *c);

/* test_config_keys.c: the keys' test case. */
TCase *config_keys_tcase(void);

#endif
