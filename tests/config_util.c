/* The helpers of the config suite (test_config.c, test_config_keys.c):
 * load a text or a file and compare what heapd would print. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "config_util.h"

/* Load TEXT as "t.conf"; returns everything written to ERR (malloc'd). */
char *load(const char *text, int *rc, struct config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    ck_assert_ptr_nonnull(f);
    *rc = config_load_string(c, "t.conf", text, f);
    fclose(f);
    return buf;
}

/* TEXT must be rejected with exactly the error output EXPECTED. */
void expect_errors(const char *text, const char *expected)
{
    struct config c;
    int rc;
    char *out = load(text, &rc, &c);

    ck_assert_str_eq(out, expected);
    ck_assert_int_eq(rc, -EINVAL);
    free(out);
}

/* TEXT must load with no output; the result is left in *C. */
void expect_ok(const char *text, struct config *c)
{
    int rc;
    char *out = load(text, &rc, c);

    ck_assert_str_eq(out, "");
    ck_assert_int_eq(rc, 0);
    free(out);
}

char *write_temp(const char *data, size_t len)
{
    char *path = strdup("/tmp/test_config_XXXXXX");
    int fd = mkstemp(path);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
    close(fd);
    return path;
}

char *load_file(const char *path, int *rc, struct config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    *rc = config_load(c, path, f);
    fclose(f);
    return buf;
}
