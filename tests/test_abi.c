/* libheapd across releases (Note [Structs that grow] and Note [Symbol
 * versions] in client/abi.c): a program built against 0.1.0's headers
 * runs on this library and daemon; a program built for a newer libheapd
 * is answered as the rules say, its options refused or its results
 * filled with what this library knows and zero past it. */
#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "heapd.h"
#include "heapd_collections.h"
#include "check_main.h"

static struct daemon_proc D;

static void start(void)
{
    harness_start(&D, harness_default_config("@SOCK@", "verify = true\n"));
}

START_TEST(client_built_against_0_1_0)
{
    start();
    /* a client more, with a mutator, listed beside the program's */
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    const char *bin = getenv("ABI_CLIENT_0_1");
    ck_assert_msg(bin, "ABI_CLIENT_0_1 is not set (tests/meson.build)");
    char cmd[512], out[8192];
    snprintf(cmd, sizeof cmd, "HEAPD_SOCKET='%s' '%s'", D.sock, bin);
    heapd_blocking_enter(m); /* the program's cycles stop nobody here */
    int st = harness_run(cmd, out, sizeof out);
    heapd_blocking_leave(m);
    ck_assert_msg(st == 0 && strcmp(out, "ok\n") == 0,
                  "the 0.1.0 client exited %d:\n%s", st, out);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop(&D);
}
END_TEST

/* A newer program's options: a struct longer than this library's. */
struct newer_connect_opts {
    heapd_connect_opts o;
    uint64_t future;
};

START_TEST(newer_options_refused_unless_zero)
{
    start();
    heapd_client *c = NULL;
    struct newer_connect_opts n = {.o = {.socket_path = D.sock},
                                   .future = 7};
    int rc = heapd_connect_sized(&c, &n.o, sizeof n);
    ck_assert_int_eq(rc, -E2BIG);
    ck_assert_ptr_null(c);
    char want[64];
    snprintf(want, sizeof want, "at byte %zu",
             offsetof(struct newer_connect_opts, future));
    ck_assert_msg(strstr(heapd_last_error(), want) &&
                      strstr(heapd_last_error(), "newer libheapd"),
                  "%s", heapd_last_error());
    /* zero where this library knows nothing: the default */
    n.future = 0;
    ck_assert_int_eq(heapd_connect_sized(&c, &n.o, sizeof n), 0);
    /* shorter than any heapd.h's */
    heapd_client *c2 = NULL;
    ck_assert_int_eq(heapd_connect_sized(&c2, &n.o, 8), -EINVAL);

    heapd_mutator *m = NULL;
    struct {
        heapd_mutator_opts o;
        uint32_t future;
    } mo = {.o = {.flags = HEAPD_MUTATOR_YOUNG}, .future = 1};
    ck_assert_int_eq(heapd_attach_opts_sized(c, &mo.o, sizeof mo, &m),
                     -E2BIG);
    mo.future = 0;
    ck_assert_int_eq(heapd_attach_opts_sized(c, &mo.o, sizeof mo, &m), 0);

    struct {
        heapd_map_opts o;
        uint64_t future;
    } po = {.o = {.kind = HEAPD_MAP_STR}, .future = 3};
    errno = 0;
    ck_assert_ptr_null(heapd_map_new_opts_sized(m, &po.o, sizeof po));
    ck_assert_int_eq(errno, E2BIG);
    po.future = 0;
    ck_assert_ptr_nonnull(heapd_map_new_opts_sized(m, &po.o, sizeof po));
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop(&D);
}
END_TEST

/* A newer program's heapd_stats_t: one counter more in its head and in
 * each of its heaps; this library fills what it knows and zero past it,
 * and puts heap_count and heaps[] where that program has them. */
START_TEST(newer_stats_placed_by_counters)
{
    start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t own;
    ck_assert_int_eq(heapd_stats(c, &own), 0);

    const size_t heap_size = sizeof(heapd_heap_stats) + 8;
    const size_t at = offsetof(heapd_stats_t, heap_count) + 8;
    const size_t size = at + 8 + HEAPD_STATS_MAX_HEAPS * heap_size;
    unsigned char *buf = malloc(size + 64);
    ck_assert_ptr_nonnull(buf);
    memset(buf, 0xa5, size + 64);
    ck_assert_int_eq(heapd_stats_sized(c, (heapd_stats_t *)buf, size,
                                       heap_size), 0);
    const heapd_stats_t *st = (const heapd_stats_t *)buf;
    ck_assert_str_eq(st->version, own.version);
    ck_assert_uint_ge(st->cycles_completed, 1);
    uint64_t future;
    memcpy(&future, buf + offsetof(heapd_stats_t, heap_count), 8);
    ck_assert_uint_eq(future, 0);
    size_t count;
    memcpy(&count, buf + at, sizeof count);
    ck_assert_uint_eq(count, own.heap_count);
    const unsigned char *h0 = buf + at + 8;
    ck_assert_str_eq(((const heapd_heap_stats *)h0)->name, "default");
    ck_assert_uint_eq(((const heapd_heap_stats *)h0)->base,
                      own.heaps[0].base);
    memcpy(&future, h0 + sizeof(heapd_heap_stats), 8);
    ck_assert_uint_eq(future, 0);
    for (size_t i = 0; i < 64; i++)
        ck_assert_uint_eq(buf[size + i], 0xa5);
    /* sizes no heapd.h has */
    ck_assert_int_eq(heapd_stats_sized(c, (heapd_stats_t *)buf, size - 8,
                                       heap_size), -EINVAL);
    ck_assert_int_eq(heapd_stats_sized(c, (heapd_stats_t *)buf, size,
                                       heap_size - 4), -EINVAL);
    free(buf);

    /* a newer heapd_young_stats and heapd_global_info: zero past */
    struct {
        heapd_young_stats y;
        uint64_t future[2];
    } ys;
    memset(&ys, 0xa5, sizeof ys);
    heapd_young_stats_get_sized(m, &ys.y, sizeof ys);
    ck_assert_uint_eq(ys.future[0] | ys.future[1], 0);
    ck_assert_int_eq(heapd_global_set(m, "g1", NULL), 0);
    ck_assert_int_eq(heapd_global_set(m, "g2", NULL), 0);
    struct newer_global {
        heapd_global_info g;
        uint64_t future;
    } gs[2];
    memset(gs, 0xa5, sizeof gs);
    size_t n = 0;
    ck_assert_int_eq(heapd_globals_sized(c, &gs[0].g, 2, &n, sizeof gs[0]),
                     0);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(gs[0].future | gs[1].future, 0);
    ck_assert_msg(strcmp(gs[1].g.name, "g1") == 0 ||
                      strcmp(gs[1].g.name, "g2") == 0,
                  "the second entry, %zu bytes on: '%s'", sizeof gs[0],
                  gs[1].g.name);
    ck_assert_int_eq(heapd_globals_sized(c, &gs[0].g, 2, &n, 16), -EINVAL);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop(&D);
}
END_TEST

static Suite *abi_suite(void)
{
    Suite *s = suite_create("abi");
    TCase *t = tcase_create("abi");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, client_built_against_0_1_0);
    tcase_add_test(t, newer_options_refused_unless_zero);
    tcase_add_test(t, newer_stats_placed_by_counters);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(abi_suite());
}
