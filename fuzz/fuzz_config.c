/* Fuzz target: the config parser, through config_load_string (the same
 * parser config_load runs on a file; see Note [Config errors]).
 *
 * Input: the config text (up to its first NUL, as a C string).  Each
 * input is parsed twice, once reporting to a memory stream and once with
 * ERR == NULL, and must give the same result.  Then, per Note [Config
 * errors]: success prints nothing and yields a config whose every heap
 * has a valid geometry (segment_size a power of two in range, base and
 * max_size multiples of it, below the 47-bit user space, no overlaps);
 * failure is -EINVAL (or -ENOMEM) with at least one line, each
 * "heapd:fuzz.conf:LINE: message" with LINE between 0 and the number of
 * lines, in order.  ASan and LSan see the rest (crashes, leaks). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz.h"
#include "layout.h"

#define FILE_NAME "fuzz.conf"

static void check_config(const struct config *c)
{
    FUZZ_CHECK(c->n_heaps >= 1 && c->n_heaps <= CONFIG_MAX_HEAPS);
    FUZZ_CHECK(c->socket[0] == '/');
    FUZZ_CHECK(memchr(c->socket, '\0', sizeof c->socket));
    FUZZ_CHECK(c->gc_threads >= 1 && c->gc_threads <= 64);
    FUZZ_CHECK(c->log_level <= CONFIG_LOG_DEBUG);
    for (size_t i = 0; i < c->n_heaps; i++) {
        const struct config_heap *h = &c->heaps[i];
        uint64_t seg = h->segment_size;
        FUZZ_CHECK(h->name[0] != '\0');
        FUZZ_CHECK(strlen(h->name) <= CONFIG_HEAP_NAME_MAX);
        FUZZ_CHECK(config_find_heap(c, h->name) == h);
        FUZZ_CHECK(seg >= LAYOUT_MIN_SEGMENT_SIZE &&
                   seg <= LAYOUT_MAX_SEGMENT_SIZE && (seg & (seg - 1)) == 0);
        FUZZ_CHECK(h->base != 0 && h->base % seg == 0);
        FUZZ_CHECK(h->max_size != 0 && h->max_size % seg == 0);
        FUZZ_CHECK(h->base + h->max_size > h->base);
        FUZZ_CHECK(h->base + h->max_size < UINT64_C(0x800000000000));
        FUZZ_CHECK(h->max_client_bytes <= h->max_size);
        FUZZ_CHECK(h->gc_overhead >= 1 && h->gc_overhead <= 10000);
        FUZZ_CHECK(h->n_allow_users <= CONFIG_MAX_IDS);
        FUZZ_CHECK(h->n_allow_groups <= CONFIG_MAX_IDS);
        for (size_t j = 0; j < i; j++) {
            const struct config_heap *o = &c->heaps[j];
            FUZZ_CHECK(o->base >= h->base + h->max_size ||
                       h->base >= o->base + o->max_size);
        }
    }
}

/* Every line of OUT is "heapd:fuzz.conf:LINE: message", LINE in
 * 0..MAX_LINE, non-decreasing.  Returns the number of lines. */
static unsigned check_report(const char *out, size_t len, long max_line)
{
    static const char prefix[] = "heapd:" FILE_NAME ":";
    unsigned n = 0;
    long last = -1;

    FUZZ_CHECK(len == 0 || out[len - 1] == '\n');
    for (const char *s = out; s < out + len; n++) {
        const char *nl = memchr(s, '\n', (size_t)(out + len - s));
        char *end;
        FUZZ_CHECK(nl);
        FUZZ_CHECK(strncmp(s, prefix, sizeof prefix - 1) == 0);
        long line = strtol(s + sizeof prefix - 1, &end, 10);
        FUZZ_CHECK(end > s + sizeof prefix - 1 && end[0] == ':' &&
                   end[1] == ' ' && end + 2 < nl);
        FUZZ_CHECK(line >= 0 && line <= max_line && line >= last);
        last = line;
        s = nl + 1;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct config c1, c2; /* 200 KiB: not on the stack */
    char *text = malloc(size + 1), *out = NULL;
    size_t out_len = 0;
    FILE *err;

    FUZZ_CHECK(text);
    memcpy(text, data, size);
    text[size] = '\0';
    long lines = 1;
    for (const char *s = text; *s; s++)
        lines += *s == '\n';

    err = open_memstream(&out, &out_len);
    FUZZ_CHECK(err);
    int rc = config_load_string(&c1, FILE_NAME, text, err);
    FUZZ_CHECK(fclose(err) == 0);
    int rc_quiet = config_load_string(&c2, FILE_NAME, text, NULL);

    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    FUZZ_CHECK(rc_quiet == rc || rc == -ENOMEM || rc_quiet == -ENOMEM);
    if (rc == 0) {
        FUZZ_CHECK(out_len == 0);
        check_config(&c1);
        FUZZ_CHECK(c2.n_heaps == c1.n_heaps);
        for (size_t i = 0; i < c1.n_heaps; i++) {
            FUZZ_CHECK(strcmp(c1.heaps[i].name, c2.heaps[i].name) == 0);
            FUZZ_CHECK(c1.heaps[i].base == c2.heaps[i].base);
            FUZZ_CHECK(c1.heaps[i].max_size == c2.heaps[i].max_size);
        }
    } else if (rc == -EINVAL) {
        FUZZ_CHECK(check_report(out, out_len, lines) >= 1);
    }
    free(out);
    free(text);
    return 0;
}
