/* Tests of daemon/config.c: heapd.conf parsing and its error messages
 * (Note [Config errors] in config.c): valid files, the file itself, its
 * syntax and its sections here; each key's values in
 * test_config_keys.c. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "config.h"
#include "config_util.h"
#include "layout.h"

/* ---- valid files ---- */

START_TEST(t_full_config_values)
{
    struct config c;
    expect_ok("; comment\n"
              "# another\n"
              "[daemon]\n"
              "socket = /tmp/h.sock\n"
              "log_level = debug\n"
              "gc_threads = 8\n"
              "[heap one]\n"
              "base = 0x7e8000000000\n"
              "max_size = 4G\n"
              "segment_size = 256K\n"
              "gc_overhead = 250\n"
              "mark_stack_limit = 16M\n"
              "allow_users = root, 1000 1001\n"
              "allow_groups = 0,42\n"
              "max_client_bytes = 1G\n"
              "verify = yes\n"
              "[heap two]\n"
              "base = 137438953472\n"
              "max_size = 0x40000000\n", &c);
    ck_assert_str_eq(c.path, "t.conf");
    ck_assert_str_eq(c.socket, "/tmp/h.sock");
    ck_assert_int_eq(c.log_level, CONFIG_LOG_DEBUG);
    ck_assert_uint_eq(c.gc_threads, 8);
    ck_assert_uint_eq(c.n_heaps, 2);
    const struct config_heap *h = &c.heaps[0];
    ck_assert_str_eq(h->name, "one");
    ck_assert_int_eq(h->line, 7);
    ck_assert_uint_eq(h->base, 0x7e8000000000ULL);
    ck_assert_uint_eq(h->max_size, 4ULL << 30);
    ck_assert_uint_eq(h->segment_size, 256 << 10);
    ck_assert_uint_eq(h->gc_overhead, 250);
    ck_assert_uint_eq(h->mark_stack_limit, 16 << 20);
    ck_assert_uint_eq(h->n_allow_users, 3);
    ck_assert_uint_eq(h->allow_users[0], 0);
    ck_assert_uint_eq(h->allow_users[1], 1000);
    ck_assert_uint_eq(h->allow_users[2], 1001);
    ck_assert_uint_eq(h->n_allow_groups, 2);
    ck_assert_uint_eq(h->allow_groups[0], 0);
    ck_assert_uint_eq(h->allow_groups[1], 42);
    ck_assert_uint_eq(h->max_client_bytes, 1ULL << 30);
    ck_assert(h->verify);
    h = &c.heaps[1];
    ck_assert_str_eq(h->name, "two");
    ck_assert_int_eq(h->line, 17);
    ck_assert_uint_eq(h->base, 0x2000000000ULL);
    ck_assert_uint_eq(h->max_size, 1ULL << 30);
}
END_TEST

START_TEST(t_defaults)
{
    struct config c;
    expect_ok(HEAP, &c);
    ck_assert_str_eq(c.socket, CONFIG_DEFAULT_SOCKET);
    ck_assert_int_eq(c.log_level, CONFIG_LOG_INFO);
    ck_assert_uint_eq(c.gc_threads, 2);
    ck_assert_uint_eq(c.max_connections, 1024);
    ck_assert_uint_eq(c.max_connections_per_user, 256);
    ck_assert_uint_eq(c.max_write_queue, 4 << 20);
    ck_assert_uint_eq(c.control_reserve, 16);
    ck_assert_uint_eq(c.max_unlisted_connections, 16);
    ck_assert_uint_eq(c.handshake_timeout_ms, 5000);
    ck_assert_uint_eq(c.max_mutators_per_client, 64);
    ck_assert_uint_eq(c.max_requests_per_client, 256);
    ck_assert_uint_eq(c.client_log_rate, 10);
    ck_assert_uint_eq(c.n_heaps, 1);
    ck_assert_uint_eq(c.heaps[0].segment_size, 128 << 10);
    ck_assert_uint_eq(c.heaps[0].gc_overhead, 100);
    ck_assert_uint_eq(c.heaps[0].mark_stack_limit, 8 << 20);
    ck_assert_uint_eq(c.heaps[0].max_client_bytes, 0);
    ck_assert_uint_eq(c.heaps[0].young_size, 8 << 20);
    ck_assert_uint_eq(c.heaps[0].young_age, 2);
    ck_assert_uint_eq(c.heaps[0].n_allow_users, 0);
    ck_assert_uint_eq(c.heaps[0].n_allow_groups, 0);
    ck_assert(!c.heaps[0].verify);
    ck_assert_uint_eq(c.heaps[0].stall_warn_ms, 1000);
    ck_assert_uint_eq(c.heaps[0].stall_timeout_ms, 10000);
    ck_assert_int_eq(c.heaps[0].stall_action, CONFIG_STALL_KILL);
}
END_TEST

/* The default young_size stays within a quarter of max_size and of
 * max_client_bytes; one that is set is taken as it is, or refused. */
START_TEST(t_young_size_default_fits_the_heap)
{
    struct config c;
    expect_ok("[heap h]\nbase = 0x7e8000000000\nmax_size = 24M\n", &c);
    ck_assert_uint_eq(c.heaps[0].young_size, 6 << 20);
    expect_ok(HEAP "max_client_bytes = 8M\n", &c);
    ck_assert_uint_eq(c.heaps[0].young_size, 2 << 20);
    expect_ok(HEAP "max_client_bytes = 8M\nyoung_size = 6M\n", &c);
    ck_assert_uint_eq(c.heaps[0].young_size, 6 << 20);
    expect_errors("[heap h]\nbase = 0x7e8000000000\nmax_size = 32M\n"
                  "young_size = 9M\n",
                  "heapd:t.conf:4: young_size 9M is more than a quarter of "
                  "max_size 32M; lower it (every young mutator that asks "
                  "for no budget allocates this much between its minor "
                  "collections)\n");
}
END_TEST

START_TEST(t_shipped_conf)
{
    const char *root = getenv("HEAPD_SOURCE_ROOT");
    char path[4096];
    struct config c;
    int rc;

    if (!root || !*root)
        root = "..";
    snprintf(path, sizeof path, "%s/heapd.conf", root);
    ck_assert_msg(access(path, R_OK) == 0, "cannot read %s: set "
                  "HEAPD_SOURCE_ROOT to the source tree", path);
    char *out = load_file(path, &rc, &c);
    ck_assert_str_eq(out, "");
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(config_find_heap(&c, "default"));
    ck_assert_str_eq(c.socket, CONFIG_DEFAULT_SOCKET);
    /* it shows the stall keys at their defaults */
    const struct config_heap *h = config_find_heap(&c, "default");
    ck_assert_uint_eq(h->stall_warn_ms, 1000);
    ck_assert_uint_eq(h->stall_timeout_ms, 10000);
    ck_assert_int_eq(h->stall_action, CONFIG_STALL_KILL);
    free(out);
}
END_TEST

START_TEST(t_inline_comments_and_separators)
{
    struct config c;
    expect_ok("[daemon] ; the daemon\n"
              "gc_threads: 3 ; colon works too\n"
              "  log_level = warn\n"
              HEAP, &c);
    ck_assert_uint_eq(c.gc_threads, 3);
    ck_assert_int_eq(c.log_level, CONFIG_LOG_WARN);
}
END_TEST

START_TEST(t_bom_and_crlf)
{
    struct config c;
    expect_ok("\xEF\xBB\xBF[daemon]\r\ngc_threads = 5\r\n[heap h]\r\n"
              "base = 0x7e8000000000\r\nmax_size = 4G\r\n", &c);
    ck_assert_uint_eq(c.gc_threads, 5);
    ck_assert_uint_eq(c.heaps[0].max_size, 4ULL << 30);
    /* a BOM is only skipped at the very start, as inih does */
    expect_errors(HEAP "\xEF\xBB\xBF[daemon]\n",
                  "heapd:t.conf:4: syntax error: '\xEF\xBB\xBF[daemon]' is "
                  "neither '[section]' nor 'key = value' (comments start "
                  "with ';' or '#')\n");
}
END_TEST

START_TEST(t_limits_accepted)
{
    struct config c;
    char text[1024], sock[200];

    memset(sock, 'a', sizeof sock);
    sock[0] = '/';
    sock[107] = '\0';       /* 107 bytes: the most sun_path holds */
    snprintf(text, sizeof text, "[daemon]\nsocket = %s\ngc_threads = 64\n"
             "[heap %s]\nbase = 0x10000\nmax_size = 1024G\n"
             "segment_size = 16K\ngc_overhead = 10000\n"
             "mark_stack_limit = 64K\n",
             sock, "cdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
             "0123456789_.-");   /* 63 bytes, every allowed character */
    expect_ok(text, &c);
    ck_assert_uint_eq(strlen(c.socket), 107);
    ck_assert_uint_eq(c.gc_threads, 64);
    ck_assert_uint_eq(strlen(c.heaps[0].name), 63);
    ck_assert_uint_eq(c.heaps[0].max_size, 1ULL << 40);
}
END_TEST

START_TEST(t_min_max_size)
{
    struct config c;
    /* the control area (LAYOUT_CONTROL_BYTES, 16M) takes 1024 segments of
     * 16K, so 1025 segments = 16400K */
    ck_assert_uint_eq(LAYOUT_CONTROL_BYTES, 16 << 20);
    expect_ok("[heap h]\nbase = 0x7e8000000000\nmax_size = 16400K\n"
              "segment_size = 16K\n", &c);
    ck_assert_uint_eq(c.heaps[0].max_size, 16400 << 10);
    expect_errors("[heap h]\nbase = 0x7e8000000000\nmax_size = 16M\n"
                  "segment_size = 16K\n",
                  "heapd:t.conf:3: max_size 16M is too small: with "
                  "segment_size 16K it must be at least 16400K (1024 control "
                  "segments + 1)\n");
}
END_TEST

START_TEST(t_bool_values)
{
    static const char *const yes[] = { "true", "Yes", "on", "1" };
    static const char *const no[] = { "false", "NO", "off", "0" };
    char text[256];
    struct config c;

    for (int i = 0; i < 4; i++) {
        snprintf(text, sizeof text, HEAP "verify = %s\n", yes[i]);
        expect_ok(text, &c);
        ck_assert(c.heaps[0].verify);
        snprintf(text, sizeof text, HEAP "verify = %s\n", no[i]);
        expect_ok(text, &c);
        ck_assert(!c.heaps[0].verify);
    }
}
END_TEST

START_TEST(t_ids_numeric_and_root)
{
    struct config c;
    expect_ok(HEAP "allow_users = root 1000,,4294967294\n"
              "allow_groups = root\n", &c);
    ck_assert_uint_eq(c.heaps[0].n_allow_users, 3);
    ck_assert_uint_eq(c.heaps[0].allow_users[0], 0);
    ck_assert_uint_eq(c.heaps[0].allow_users[1], 1000);
    ck_assert_uint_eq(c.heaps[0].allow_users[2], 4294967294u);
    ck_assert_uint_eq(c.heaps[0].n_allow_groups, 1);
    ck_assert_uint_eq(c.heaps[0].allow_groups[0], 0);
}
END_TEST

START_TEST(t_ids_empty_allowed)
{
    struct config c;
    expect_ok(HEAP "allow_users =\nallow_groups = ;none\n", &c);
    ck_assert_uint_eq(c.heaps[0].n_allow_users, 0);
    ck_assert_uint_eq(c.heaps[0].n_allow_groups, 0);
}
END_TEST

START_TEST(t_find_heap_and_level_names)
{
    struct config c;
    expect_ok(HEAP "[heap g]\nbase = 0x7f0000000000\nmax_size = 1G\n", &c);
    ck_assert_ptr_eq(config_find_heap(&c, "g"), &c.heaps[1]);
    ck_assert_ptr_eq(config_find_heap(&c, "h"), &c.heaps[0]);
    ck_assert_ptr_null(config_find_heap(&c, "x"));
    ck_assert_str_eq(config_log_level_name(CONFIG_LOG_ERROR), "error");
    ck_assert_str_eq(config_log_level_name(CONFIG_LOG_WARN), "warn");
    ck_assert_str_eq(config_log_level_name(CONFIG_LOG_INFO), "info");
    ck_assert_str_eq(config_log_level_name(CONFIG_LOG_DEBUG), "debug");
    ck_assert_str_eq(config_log_level_name((enum config_log_level)9),
                     "unknown");
}
END_TEST

/* ---- config_parse_size ---- */

START_TEST(t_parse_size)
{
    uint64_t v = 7;

    ck_assert_int_eq(config_parse_size("0", &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(config_parse_size("1", &v), 0);
    ck_assert_uint_eq(v, 1);
    ck_assert_int_eq(config_parse_size("4K", &v), 0);
    ck_assert_uint_eq(v, 4096);
    ck_assert_int_eq(config_parse_size("4k", &v), 0);
    ck_assert_uint_eq(v, 4096);
    ck_assert_int_eq(config_parse_size("3M", &v), 0);
    ck_assert_uint_eq(v, 3ULL << 20);
    ck_assert_int_eq(config_parse_size("1G", &v), 0);
    ck_assert_uint_eq(v, 1ULL << 30);
    ck_assert_int_eq(config_parse_size("0x10K", &v), 0);
    ck_assert_uint_eq(v, 16ULL << 10);
    ck_assert_int_eq(config_parse_size("18446744073709551615", &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    ck_assert_int_eq(config_parse_size("17179869183G", &v), 0);
    ck_assert_uint_eq(v, 17179869183ULL << 30);
}
END_TEST

START_TEST(t_parse_size_errors)
{
    uint64_t v = 7;

    ck_assert_int_eq(config_parse_size("18446744073709551616", &v), -ERANGE);
    ck_assert_int_eq(config_parse_size("17179869184G", &v), -ERANGE); /* 16E */
    ck_assert_int_eq(config_parse_size("16777216T", &v), -EINVAL);
    ck_assert_int_eq(config_parse_size("16E", &v), -EINVAL);
    ck_assert_int_eq(config_parse_size("12KB", &v), -EINVAL);
    ck_assert_int_eq(config_parse_size("-1", &v), -EINVAL);
    ck_assert_int_eq(config_parse_size("+1", &v), -EINVAL);
    ck_assert_int_eq(config_parse_size("", &v), -EINVAL);
    ck_assert_int_eq(config_parse_size("K", &v), -EINVAL);
    ck_assert_int_eq(config_parse_size("0x", &v), -EINVAL);
    ck_assert_int_eq(config_parse_size("garbage", &v), -EINVAL);
    ck_assert_int_eq(config_parse_size(" 4K", &v), -EINVAL);
    ck_assert_int_eq(config_parse_size("4 K", &v), -EINVAL);
    ck_assert_int_eq(config_parse_size("1.5G", &v), -EINVAL);
    ck_assert_int_eq(config_parse_size(NULL, &v), -EINVAL);
    ck_assert_uint_eq(v, 7);    /* untouched on failure */
}
END_TEST

/* ---- file level ---- */

START_TEST(t_file_not_found)
{
    struct config c;
    int rc;
    char *out = load_file("/nonexistent/heapd.conf", &rc, &c);

    ck_assert_int_eq(rc, -ENOENT);
    ck_assert_str_eq(out, "heapd:/nonexistent/heapd.conf:0: cannot open: No "
                     "such file or directory; pass -c PATH or create it\n");
    ck_assert_str_eq(c.socket, CONFIG_DEFAULT_SOCKET);  /* defaults set */
    free(out);
}
END_TEST

START_TEST(t_file_is_directory)
{
    struct config c;
    int rc;
    char *out = load_file("/tmp", &rc, &c);

    ck_assert_int_eq(rc, -EISDIR);
    ck_assert_str_eq(out, "heapd:/tmp:0: cannot open: Is a directory; pass "
                     "-c PATH or create it\n");
    free(out);
}
END_TEST

/* Not a regular file: an error at once, without reading (Note [Config
 * input is bounded]); /dev/zero used to be read forever. */
START_TEST(t_file_dev_zero)
{
    struct config c;
    int rc;
    char *out = load_file("/dev/zero", &rc, &c);

    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_str_eq(out, "heapd:/dev/zero:0: not a regular file (a "
                     "character device); pass -c PATH of a config file\n");
    free(out);
}
END_TEST

/* A FIFO nobody writes to: a blocking open would never return (the test
 * would end at its timeout). */
START_TEST(t_file_fifo)
{
    char dir[] = "/tmp/test_config_XXXXXX", path[64], expected[160];
    struct config c;
    int rc;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    char *out = load_file(path, &rc, &c);
    unlink(path);
    rmdir(dir);
    ck_assert_int_eq(rc, -EINVAL);
    snprintf(expected, sizeof expected, "heapd:%s:0: not a regular file (a "
             "FIFO or pipe); pass -c PATH of a config file\n", path);
    ck_assert_str_eq(out, expected);
    free(out);
}
END_TEST

/* A regular file of zero bytes with no '\n': the first 4097 bytes are
 * read, then it is an error. */
START_TEST(t_file_without_newline)
{
    size_t n = 1 << 20;
    char *zeros = calloc(1, n), *path = write_temp(zeros, n), expected[200];
    struct config c;
    int rc;
    char *out = load_file(path, &rc, &c);

    ck_assert_int_eq(rc, -EINVAL);
    snprintf(expected, sizeof expected, LONG_LINE_ERROR("%s", 1), path);
    ck_assert_str_eq(out, expected);
    unlink(path);
    free(path);
    free(zeros);
    free(out);
}
END_TEST

START_TEST(t_file_same_as_string)
{
    static const char text[] = "[daemon]\ngc_threads = 0\nbogus\n"
        "[heap a]\nbase = 0x7e8000001000\nmax_size = 4G\n"
        "[heap b]\nbase = 0x7e8000000000\nmax_size = 1G\nverify = maybe";
    char *path = write_temp(text, sizeof text - 1);
    struct config c1, c2;
    int rc1, rc2;
    char *out1 = load_file(path, &rc1, &c1);
    char *out2 = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out2, &len);

    rc2 = config_load_string(&c2, path, text, f);
    fclose(f);
    ck_assert_int_eq(rc1, -EINVAL);
    ck_assert_int_eq(rc2, rc1);
    ck_assert_str_eq(out1, out2);
    ck_assert_ptr_nonnull(strstr(out1, ":10: verify 'maybe'"));
    ck_assert_int_eq(memcmp(&c1, &c2, sizeof c1), 0);
    unlink(path);
    free(path);
    free(out1);
    free(out2);
}
END_TEST

START_TEST(t_nul_byte_in_file)
{
    static const char text[] = "[daemon]\ngc_threads = 2\0x\n" HEAP;
    char *path = write_temp(text, sizeof text - 1);
    struct config c;
    int rc;
    char *out = load_file(path, &rc, &c);
    char expect[4200];

    snprintf(expect, sizeof expect, "heapd:%s:2: line contains a NUL byte; "
             "the file must be text\n", path);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_str_eq(out, expect);
    unlink(path);
    free(path);
    free(out);
}
END_TEST

START_TEST(t_no_heap_section)
{
    expect_errors("[daemon]\ngc_threads = 2\n",
                  "heapd:t.conf:0: no [heap NAME] section; declare at least "
                  "one heap with base and max_size\n");
    expect_errors("",
                  "heapd:t.conf:0: no [heap NAME] section; declare at least "
                  "one heap with base and max_size\n");
}
END_TEST

START_TEST(t_null_err_stream)
{
    struct config c;
    ck_assert_int_eq(config_load_string(&c, "t.conf", "[daemon]\nx = 1\n",
                                        NULL), -EINVAL);
    ck_assert_int_eq(config_load_string(&c, "t.conf", HEAP, NULL), 0);
    ck_assert_int_eq(config_load(&c, "/nonexistent/x", NULL), -ENOENT);
}
END_TEST

/* ---- syntax ---- */

START_TEST(t_syntax_error)
{
    expect_errors(DAEMON_HEAP "foo bar\n",
                  "heapd:t.conf:5: syntax error: 'foo bar' is neither "
                  "'[section]' nor 'key = value' (comments start with ';' "
                  "or '#')\n");
}
END_TEST

START_TEST(t_syntax_errors_all_reported)
{
    expect_errors("[daemon]\nfoo\ngc_threads = 2\nbar ; x = 1\n" HEAP,
                  "heapd:t.conf:2: syntax error: 'foo' is neither "
                  "'[section]' nor 'key = value' (comments start with ';' "
                  "or '#')\n"
                  "heapd:t.conf:4: syntax error: 'bar ; x = 1' is neither "
                  "'[section]' nor 'key = value' (comments start with ';' "
                  "or '#')\n");
}
END_TEST

START_TEST(t_no_multiline_continuation)
{
    expect_errors("[daemon]\nsocket = /run/a\n    /b.sock\n" HEAP,
                  "heapd:t.conf:3: syntax error: '/b.sock' is neither "
                  "'[section]' nor 'key = value' (comments start with ';' "
                  "or '#')\n");
}
END_TEST

START_TEST(t_hash_is_not_inline_comment)
{
    expect_errors("[daemon]\ngc_threads = 4 # four\n" HEAP,
                  "heapd:t.conf:2: gc_threads '4 # four' is not a number "
                  "(use decimal digits)\n");
}
END_TEST

/* A line too long ends the parse (Note [Config input is bounded]): errors
 * before it are reported, nothing after it is read, and the cut-off heap
 * section is not reported as missing keys. */
START_TEST(t_long_line)
{
    size_t n = 5000;
    char *text = malloc(n + 200);

    strcpy(text, "[daemon]\ngc_threads = 0\n[heap h]\nsocket = /");
    size_t len = strlen(text);

    memset(text + len, 'x', n);
    strcpy(text + len + n, "\ngc_threads = 0\n" HEAP);
    expect_errors(text,
                  "heapd:t.conf:2: gc_threads 0 is out of range (1..64)\n"
                  LONG_LINE_ERROR("t.conf", 4));
    free(text);
}
END_TEST

/* 4096 bytes before the '\n' are accepted, 4097 are not. */
START_TEST(t_long_line_limit)
{
    char *text = malloc(4200);
    struct config c;

    strcpy(text, "[daemon]\n;");
    memset(text + 10, 'x', 4095);
    strcpy(text + 4105, "\n" HEAP);
    expect_ok(text, &c);
    ck_assert_uint_eq(c.n_heaps, 1);
    text[4105] = 'x';   /* the comment line is now 4097 bytes */
    expect_errors(text, LONG_LINE_ERROR("t.conf", 2));
    free(text);
}
END_TEST

START_TEST(t_unterminated_section)
{
    expect_errors("[daemon\ngc_threads = 0\n" HEAP,
                  "heapd:t.conf:1: section header '[daemon' has no closing "
                  "']'; write [daemon] or [heap NAME]\n");
}
END_TEST

START_TEST(t_section_trailing_text)
{
    expect_errors("[daemon] # daemon\ngc_threads = 0\n" HEAP,
                  "heapd:t.conf:1: unexpected text '# daemon' after ']' "
                  "(comments start with ';')\n"
                  "heapd:t.conf:2: gc_threads 0 is out of range (1..64)\n");
}
END_TEST

START_TEST(t_key_before_section)
{
    expect_errors("socket = /run/x.sock\n" DAEMON_HEAP,
                  "heapd:t.conf:1: key 'socket' is outside any section; put "
                  "it under [daemon] or [heap NAME]\n");
}
END_TEST

START_TEST(t_empty_key_name)
{
    expect_errors("[daemon]\n= 5\n" HEAP,
                  "heapd:t.conf:2: missing key name before '='; write "
                  "'key = value'\n");
}
END_TEST

/* ---- sections ---- */

START_TEST(t_unknown_section)
{
    expect_errors("[deamon]\ngc_threads = 0\n" HEAP,
                  "heapd:t.conf:1: unknown section '[deamon]' (expected "
                  "[daemon] or [heap NAME])\n");
}
END_TEST

START_TEST(t_heap_without_name)
{
    expect_errors(HEAP "[heap]\nbase = 0x7f0000000000\nmax_size = 1G\n",
                  "heapd:t.conf:4: heap section has no name; write "
                  "[heap NAME] (NAME: 1..63 of A-Z a-z 0-9 _ . -)\n");
}
END_TEST

START_TEST(t_heap_bad_name)
{
    expect_errors(HEAP "[heap a/b]\nbase = 0x7f0000000000\nmax_size = 1G\n",
                  "heapd:t.conf:4: heap name 'a/b' contains '/'; use only "
                  "A-Z a-z 0-9 _ . -\n");
    expect_errors(HEAP "[heap a b]\n",
                  "heapd:t.conf:4: heap name 'a b' contains ' '; use only "
                  "A-Z a-z 0-9 _ . -\n"
                  "heapd:t.conf:4: heap 'a b' has no base; add 'base = "
                  "0x...' (a segment-aligned address below 0x800000000000)\n"
                  "heapd:t.conf:4: heap 'a b' has no max_size; add "
                  "'max_size = SIZE' (e.g. 4G)\n");
}
END_TEST

START_TEST(t_heap_name_too_long)
{
    char text[512];

    snprintf(text, sizeof text, HEAP "[heap %s]\nbase = 0x7f0000000000\n"
             "max_size = 1G\n",
             "01234567890123456789012345678901"
             "23456789012345678901234567890123");
    expect_errors(text, "heapd:t.conf:4: heap name '0123456789012345678901234"
                  "567890123456789012345678901234567890123' is 64 bytes; the "
                  "limit is 63\n");
}
END_TEST

START_TEST(t_duplicate_heap)
{
    expect_errors(HEAP "\n[heap h]\nbase = 0x7f0000000000\nmax_size = 1G\n"
                  "gc_overhead = 0\n",
                  "heapd:t.conf:5: duplicate heap 'h' (first declared at "
                  "line 1); give each heap a unique name\n"
                  "heapd:t.conf:8: gc_overhead 0 is out of range (1..10000 "
                  "percent)\n");
}
END_TEST

START_TEST(t_too_many_heaps)
{
    char text[8192];
    size_t len = 0;
    struct config c;

    for (int i = 0; i < CONFIG_MAX_HEAPS + 1; i++)
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "[heap h%d]\nbase = 0x%x00000000\n"
                                "max_size = 1G\n", i, i + 1);
    expect_errors(text, "heapd:t.conf:49: too many heaps: 'h16' would be "
                  "number 17; at most 16 [heap NAME] sections are allowed\n");
    /* the first 16 are fine */
    len = 0;
    for (int i = 0; i < CONFIG_MAX_HEAPS; i++)
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "[heap h%d]\nbase = 0x%x00000000\n"
                                "max_size = 1G\n", i, i + 1);
    expect_ok(text, &c);
    ck_assert_uint_eq(c.n_heaps, CONFIG_MAX_HEAPS);
}
END_TEST

START_TEST(t_missing_required_keys)
{
    expect_errors("[daemon]\n[heap h]\nmax_size = 4G\n",
                  "heapd:t.conf:2: heap 'h' has no base; add 'base = 0x...' "
                  "(a segment-aligned address below 0x800000000000)\n");
    expect_errors("[daemon]\n[heap h]\nbase = 0x7e8000000000\n",
                  "heapd:t.conf:2: heap 'h' has no max_size; add 'max_size = "
                  "SIZE' (e.g. 4G)\n");
}
END_TEST

START_TEST(t_overlapping_heaps)
{
    expect_errors("[heap a]\nbase = 0x7e8000000000\nmax_size = 4G\n"
                  "[heap b]\nbase = 0x7e8080000000\nmax_size = 4G\n",
                  "heapd:t.conf:4: heap 'b' [0x7e8080000000,0x7e8180000000) "
                  "overlaps heap 'a' declared at line 1; change base or "
                  "max_size so they are disjoint\n");
    struct config c;    /* adjacent is fine */
    expect_ok("[heap a]\nbase = 0x7e8000000000\nmax_size = 4G\n"
              "[heap b]\nbase = 0x7e9000000000\nmax_size = 4G\n", &c);
}
END_TEST

/* ---- many errors ---- */

START_TEST(t_multiple_errors_in_line_order)
{
    /* section-level errors (line 5) are found after key errors of later
     * lines but are printed in line order; the last heap overlaps */
    expect_errors("[daemon]\n"                      /* 1 */
                  "log_level = loud\n"              /* 2 */
                  "gc_thread = 3\n"                 /* 3 */
                  "oops\n"                          /* 4 */
                  "[heap a]\n"                      /* 5 */
                  "max_size = 4G\n"                 /* 6 */
                  "segment_size = 3K\n"             /* 7 */
                  "verify = perhaps\n"              /* 8 */
                  "[heap b]\n"                      /* 9 */
                  "base = 0x7e8000000000\n"         /* 10 */
                  "max_size = 1G\n"                 /* 11 */
                  "[heap c]\n"                      /* 12 */
                  "base = 0x7e8000000000\n"         /* 13 */
                  "max_size = 1G\n"                 /* 14 */
                  "[nope]\n",                       /* 15 */
                  "heapd:t.conf:2: log_level 'loud' is not one of: error, "
                  "warn, info, debug\n"
                  "heapd:t.conf:3: unknown key 'gc_thread' in [daemon] "
                  "(expected one of: socket, log_level, gc_threads, "
                  "max_connections, max_connections_per_user, "
                  "max_write_queue, control_reserve, "
                  "max_unlisted_connections, handshake_timeout, "
                  "max_mutators_per_client, max_requests_per_client, "
                  "client_log_rate, metrics_listen)\n"
                  "heapd:t.conf:4: syntax error: 'oops' is neither "
                  "'[section]' nor 'key = value' (comments start with ';' "
                  "or '#')\n"
                  "heapd:t.conf:5: heap 'a' has no base; add 'base = 0x...' "
                  "(a segment-aligned address below 0x800000000000)\n"
                  "heapd:t.conf:7: segment_size '3K' is not a power of two "
                  "(e.g. 64K, 128K, 256K)\n"
                  "heapd:t.conf:8: verify 'perhaps' is not a boolean (use "
                  "true or false)\n"
                  "heapd:t.conf:12: heap 'c' [0x7e8000000000,0x7e8040000000) "
                  "overlaps heap 'b' declared at line 9; change base or "
                  "max_size so they are disjoint\n"
                  "heapd:t.conf:15: unknown section '[nope]' (expected "
                  "[daemon] or [heap NAME])\n");
}
END_TEST

/* Arbitrary bytes never crash the parser (run under ASan/UBSan). */
START_TEST(t_garbage_does_not_crash)
{
    static const char *const bits[] = {
        "[", "]", "[heap ", "[daemon]", "=", ":", ";", "#", " ", "\n", "\r",
        "base", "max_size", "0x7e8000000000", "4G", "99999999999999999999",
        "allow_users", "root,", "\xEF\xBB\xBF", "\t", "segment_size", "K",
        "verify", "socket", "/", "gc_threads", "\x01", "\xff", "heap",
        "stall_warn", "stall_timeout", "stall_action", "kill", "0", "ms",
    };
    char text[600];
    unsigned seed = 12345;

    for (int round = 0; round < 3000; round++) {
        size_t len = 0;
        struct config c;
        while (len < sizeof text - 32) {
            seed = seed * 1103515245u + 12345u;
            const char *b = bits[(seed >> 16) % (sizeof bits / sizeof *bits)];
            size_t n = strlen(b);
            memcpy(text + len, b, n);
            len += n;
            if ((seed >> 8) % 97 == 0)
                break;
        }
        text[len] = '\0';
        FILE *null = fopen("/dev/null", "w");
        int rc = config_load_string(&c, "fuzz", text, null);
        fclose(null);
        ck_assert(rc == 0 || rc == -EINVAL);
        ck_assert_uint_le(c.n_heaps, CONFIG_MAX_HEAPS);
    }
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *ok = tcase_create("valid");
    TCase *file = tcase_create("file");
    TCase *syn = tcase_create("syntax");
    TCase *sec = tcase_create("sections");

    tcase_add_test(ok, t_full_config_values);
    tcase_add_test(ok, t_defaults);
    tcase_add_test(ok, t_young_size_default_fits_the_heap);
    tcase_add_test(ok, t_shipped_conf);
    tcase_add_test(ok, t_inline_comments_and_separators);
    tcase_add_test(ok, t_bom_and_crlf);
    tcase_add_test(ok, t_limits_accepted);
    tcase_add_test(ok, t_min_max_size);
    tcase_add_test(ok, t_bool_values);
    tcase_add_test(ok, t_ids_numeric_and_root);
    tcase_add_test(ok, t_ids_empty_allowed);
    tcase_add_test(ok, t_find_heap_and_level_names);
    tcase_add_test(ok, t_parse_size);
    tcase_add_test(ok, t_parse_size_errors);
    suite_add_tcase(s, ok);

    tcase_add_test(file, t_file_not_found);
    tcase_add_test(file, t_file_is_directory);
    tcase_add_test(file, t_file_dev_zero);
    tcase_add_test(file, t_file_fifo);
    tcase_add_test(file, t_file_without_newline);
    tcase_add_test(file, t_file_same_as_string);
    tcase_add_test(file, t_nul_byte_in_file);
    tcase_add_test(file, t_no_heap_section);
    tcase_add_test(file, t_null_err_stream);
    tcase_add_test(file, t_multiple_errors_in_line_order);
    tcase_add_test(file, t_garbage_does_not_crash);
    tcase_set_timeout(file, 60);
    suite_add_tcase(s, file);

    tcase_add_test(syn, t_syntax_error);
    tcase_add_test(syn, t_syntax_errors_all_reported);
    tcase_add_test(syn, t_no_multiline_continuation);
    tcase_add_test(syn, t_hash_is_not_inline_comment);
    tcase_add_test(syn, t_long_line);
    tcase_add_test(syn, t_long_line_limit);
    tcase_add_test(syn, t_unterminated_section);
    tcase_add_test(syn, t_section_trailing_text);
    tcase_add_test(syn, t_key_before_section);
    tcase_add_test(syn, t_empty_key_name);
    suite_add_tcase(s, syn);

    tcase_add_test(sec, t_unknown_section);
    tcase_add_test(sec, t_heap_without_name);
    tcase_add_test(sec, t_heap_bad_name);
    tcase_add_test(sec, t_heap_name_too_long);
    tcase_add_test(sec, t_duplicate_heap);
    tcase_add_test(sec, t_too_many_heaps);
    tcase_add_test(sec, t_missing_required_keys);
    tcase_add_test(sec, t_overlapping_heaps);
    suite_add_tcase(s, sec);

    suite_add_tcase(s, config_keys_tcase());
    return s;
}

int main(void)
{
    return check_main(config_suite());
}
