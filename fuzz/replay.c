/* Replays a fuzz target's corpus without libFuzzer: every file of every
 * directory (or file) named on the command line goes through
 * LLVMFuzzerTestOneInput once, in name order.  Built with each fuzz_NAME.c
 * in the normal build and run by `meson test` (suite fuzz-replay), so the
 * seeds and every crash input kept in fuzz/corpus/NAME are regression
 * tests.  A crash or sanitizer report ends the process; otherwise it prints
 * one line in check's format, which scripts/test adds up:
 *   100%: Checks: N, Failures: 0, Errors: E
 * where N counts the inputs run and E the paths it could not read. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Read all of PATH into a malloc'd buffer.  Returns 0 or a negative errno. */
static int read_file(const char *path, uint8_t **out, size_t *out_len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;

    if (!f)
        return -errno;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                rc = -ENOMEM;
                goto out;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        rc = -EIO;
        goto out;
    }
    *out = buf;
    *out_len = len;
    buf = NULL;
out:
    free(buf);
    fclose(f);
    return rc;
}

static int run_file(const char *path)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = read_file(path, &buf, &len);
    if (rc < 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(-rc));
        return rc;
    }
    /* a copy of exactly LEN bytes: ASan sees any read past the input */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return -ENOMEM;
    }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
    unsigned checks = 0, errors = 0;

    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            errors++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) < 0)
                errors++;
            else
                checks++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, NULL, by_name);
        if (n < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            errors++;
            continue;
        }
        unsigned in_dir = 0;
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
            if (names[k]->d_name[0] != '.' && stat(path, &st) == 0 &&
                S_ISREG(st.st_mode)) {
                if (run_file(path) < 0)
                    errors++;
                else
                    in_dir++;
            }
            free(names[k]);
        }
        free(names);
        if (in_dir == 0) {
            fprintf(stderr, "replay: %s: no inputs (an empty corpus tests "
                    "nothing)\n", argv[i]);
            errors++;
        }
        checks += in_dir;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR|FILE...\n", argv[0]);
        errors++;
    }
    printf("100%%: Checks: %u, Failures: 0, Errors: %u\n", checks + errors,
           errors);
    return errors ? 1 : 0;
}
