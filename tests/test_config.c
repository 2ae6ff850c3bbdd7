/* Tests of daemon/config.c: heapd.conf parsing and its error messages
 * (Note [Config errors] in config.c). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "layout.h"
#include "check_main.h"

/* A valid heap section: 3 lines. */
#define HEAP "[heap h]\nbase = 0x7e8000000000\nmax_size = 4G\n"
/* [daemon] then a valid heap: 4 lines. */
#define DAEMON_HEAP "[daemon]\n" HEAP
/* The error of a line too long, which ends the parse. */
#define LONG_LINE_ERROR(file, line)                                       \
    "heapd:" file ":" #line ": line is longer than 4096 bytes; shorten it " \
    "(heapd stopped reading the file here; is it a text file?)\n"

/* Load TEXT as "t.conf"; returns everything written to ERR (malloc'd). */
static char *load(const char *text, int *rc, struct config *c)
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
static void expect_errors(const char *text, const char *expected)
{
    struct config c;
    int rc;
    char *out = load(text, &rc, &c);

    ck_assert_str_eq(out, expected);
    ck_assert_int_eq(rc, -EINVAL);
    free(out);
}

/* TEXT must load with no output; the result is left in *C. */
static void expect_ok(const char *text, struct config *c)
{
    int rc;
    char *out = load(text, &rc, c);

    ck_assert_str_eq(out, "");
    ck_assert_int_eq(rc, 0);
    free(out);
}

static char *write_temp(const char *data, size_t len)
{
    char *path = strdup("/tmp/test_config_XXXXXX");
    int fd = mkstemp(path);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
    close(fd);
    return path;
}

static char *load_file(const char *path, int *rc, struct config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    *rc = config_load(c, path, f);
    fclose(f);
    return buf;
}

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
    ck_assert_uint_eq(c.heaps[0].young_size, 1 << 20);
    ck_assert_uint_eq(c.heaps[0].young_age, 2);
    ck_assert_uint_eq(c.heaps[0].n_allow_users, 0);
    ck_assert_uint_eq(c.heaps[0].n_allow_groups, 0);
    ck_assert(!c.heaps[0].verify);
    ck_assert_uint_eq(c.heaps[0].stall_warn_ms, 1000);
    ck_assert_uint_eq(c.heaps[0].stall_timeout_ms, 10000);
    ck_assert_int_eq(c.heaps[0].stall_action, CONFIG_STALL_KILL);
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

/* ---- keys ---- */

START_TEST(t_unknown_key_daemon)
{
    expect_errors("[daemon]\ngc_thread = 4\n" HEAP,
                  "heapd:t.conf:2: unknown key 'gc_thread' in [daemon] "
                  "(expected one of: socket, log_level, gc_threads, "
                  "max_connections, max_connections_per_user, "
                  "max_write_queue, control_reserve, "
                  "max_unlisted_connections, handshake_timeout, "
                  "max_mutators_per_client, max_requests_per_client, "
                  "client_log_rate, metrics_listen)\n");
}
END_TEST

START_TEST(t_unknown_key_heap)
{
    expect_errors(HEAP "gc_threads = 4\n",
                  "heapd:t.conf:4: unknown key 'gc_threads' in [heap h] "
                  "(expected one of: base, max_size, segment_size, "
                  "gc_overhead, mark_stack_limit, allow_users, allow_groups, "
                  "max_client_bytes, verify, stall_warn, stall_timeout, "
                  "stall_action, reconnect_timeout, young_size, "
                  "young_age)\n");
}
END_TEST

START_TEST(t_duplicate_key)
{
    expect_errors("[daemon]\ngc_threads = 4\ngc_threads = 5\n" HEAP
                  "base = 0x7f0000000000\n",
                  "heapd:t.conf:3: duplicate key 'gc_threads' in [daemon] "
                  "(first set at line 2); keep only one\n"
                  "heapd:t.conf:7: duplicate key 'base' in [heap h] (first "
                  "set at line 5); keep only one\n");
}
END_TEST

START_TEST(t_empty_value)
{
    expect_errors("[daemon]\nlog_level =\n" HEAP "segment_size = ; none\n",
                  "heapd:t.conf:2: empty value for 'log_level'; set a value "
                  "or delete the line to use the default\n"
                  "heapd:t.conf:6: empty value for 'segment_size'; set a "
                  "value or delete the line to use the default\n");
}
END_TEST

START_TEST(t_bad_number)
{
    expect_errors("[daemon]\ngc_threads = two\n" HEAP "gc_overhead = -5\n",
                  "heapd:t.conf:2: gc_threads 'two' is not a number (use "
                  "decimal digits)\n"
                  "heapd:t.conf:6: gc_overhead '-5' is not a number (use "
                  "decimal digits)\n");
}
END_TEST

START_TEST(t_number_out_of_range)
{
    expect_errors("[daemon]\ngc_threads = 99999999999999999999999\n" HEAP
                  "gc_overhead = 10001\n",
                  "heapd:t.conf:2: gc_threads 99999999999999999999999 is out "
                  "of range (1..64)\n"
                  "heapd:t.conf:6: gc_overhead 10001 is out of range "
                  "(1..10000 percent)\n");
}
END_TEST

START_TEST(t_gc_threads_zero_and_65)
{
    expect_errors("[daemon]\ngc_threads = 0\n" HEAP,
                  "heapd:t.conf:2: gc_threads 0 is out of range (1..64)\n");
    expect_errors("[daemon]\ngc_threads = 65\n" HEAP,
                  "heapd:t.conf:2: gc_threads 65 is out of range (1..64)\n");
}
END_TEST

/* Note [Connection limits] in daemon/server.c */
START_TEST(t_connection_limits)
{
    struct config c;
    expect_ok("[daemon]\nmax_connections = 10\nmax_connections_per_user = 3\n"
              "max_write_queue = 64K\n" HEAP, &c);
    ck_assert_uint_eq(c.max_connections, 10);
    ck_assert_uint_eq(c.max_connections_per_user, 3);
    ck_assert_uint_eq(c.max_write_queue, 64 << 10);
    expect_errors("[daemon]\nmax_connections = 0\n" HEAP,
                  "heapd:t.conf:2: max_connections 0 is out of range "
                  "(1..65536)\n");
    expect_errors("[daemon]\nmax_connections_per_user = 65537\n" HEAP,
                  "heapd:t.conf:2: max_connections_per_user 65537 is out of "
                  "range (1..65536)\n");
    expect_errors("[daemon]\nmax_write_queue = 4K\n" HEAP,
                  "heapd:t.conf:2: max_write_queue 4K is too small (at least "
                  "64K)\n");
}
END_TEST

/* Note [Admission] in daemon/server.c, Note [Per-client limits] in
 * daemon/session.c */
START_TEST(t_admission_and_client_limits)
{
    struct config c;
    expect_ok("[daemon]\ncontrol_reserve = 4\nmax_unlisted_connections = 0\n"
              "handshake_timeout = 250ms\nmax_mutators_per_client = 128\n"
              "max_requests_per_client = 1\nclient_log_rate = 100\n" HEAP, &c);
    ck_assert_uint_eq(c.control_reserve, 4);
    ck_assert_uint_eq(c.max_unlisted_connections, 0);
    ck_assert_uint_eq(c.handshake_timeout_ms, 250);
    ck_assert_uint_eq(c.max_mutators_per_client, 128);
    ck_assert_uint_eq(c.max_requests_per_client, 1);
    ck_assert_uint_eq(c.client_log_rate, 100);
    expect_ok("[daemon]\nhandshake_timeout = 2\n" HEAP, &c);
    ck_assert_uint_eq(c.handshake_timeout_ms, 2000);
    expect_ok("[daemon]\nhandshake_timeout = 1m\n" HEAP, &c);
    ck_assert_uint_eq(c.handshake_timeout_ms, 60000);
    /* an unset reserve is at most a quarter of max_connections */
    expect_ok("[daemon]\nmax_connections = 3\n" HEAP, &c);
    ck_assert_uint_eq(c.control_reserve, 0);
    expect_ok("[daemon]\nmax_connections = 40\n" HEAP, &c);
    ck_assert_uint_eq(c.control_reserve, 10);
    expect_errors("[daemon]\nmax_connections = 8\ncontrol_reserve = 8\n" HEAP,
                  "heapd:t.conf:3: control_reserve 8 leaves none of "
                  "max_connections 8 to other users; lower it below "
                  "max_connections or raise max_connections\n");
    expect_errors("[daemon]\nhandshake_timeout = 5 s\n" HEAP,
                  "heapd:t.conf:2: handshake_timeout '5 s' is not a duration "
                  "(use a number and ms, s or m, e.g. 5s or 500ms)\n");
    expect_errors("[daemon]\nhandshake_timeout = 5ms\n" HEAP,
                  "heapd:t.conf:2: handshake_timeout 5ms is out of range "
                  "(10ms..3600s)\n");
    expect_errors("[daemon]\nmax_mutators_per_client = 129\n" HEAP,
                  "heapd:t.conf:2: max_mutators_per_client 129 is out of "
                  "range (1..128)\n");
    expect_errors("[daemon]\nclient_log_rate = 0\n" HEAP,
                  "heapd:t.conf:2: client_log_rate 0 is out of range "
                  "(1..100000 lines per second)\n");
}
END_TEST

/* Note [Metrics endpoint] in daemon/metrics_http.c */
START_TEST(t_metrics_listen)
{
    struct config c;
    expect_ok(HEAP, &c);
    ck_assert_str_eq(c.metrics_listen, "");
    expect_ok("[daemon]\nmetrics_listen = 127.0.0.1:9465\n" HEAP, &c);
    ck_assert_str_eq(c.metrics_listen, "127.0.0.1:9465");
    expect_ok("[daemon]\nmetrics_listen = [::1]:9465\n" HEAP, &c);
    ck_assert_str_eq(c.metrics_listen, "[::1]:9465");
    const char *bad[] = {"localhost:9465", "127.0.0.1", "127.0.0.1:0",
                         "127.0.0.1:65536", "[::1]9465", "::1:9465",
                         "127.0.0.1:94a5", "127.0.0.1:-1", ":9465",
                         "[127.0.0.1]:9465", "127.0.0.1:+9465"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[256], want[512];
        snprintf(text, sizeof text, "[daemon]\nmetrics_listen = %s\n" HEAP,
                 bad[i]);
        snprintf(want, sizeof want,
                 "heapd:t.conf:2: metrics_listen '%s' is not an address and "
                 "port: use ADDRESS:PORT with a numeric IPv4 address "
                 "(127.0.0.1:9465) or [IPv6]:PORT ([::1]:9465), port 1 to "
                 "65535\n", bad[i]);
        expect_errors(text, want);
    }
}
END_TEST

START_TEST(t_bad_size_suffix)
{
    expect_errors(HEAP "mark_stack_limit = 12KB\n",
                  "heapd:t.conf:4: mark_stack_limit '12KB' has a bad size "
                  "suffix (use K, M or G, powers of 1024, e.g. 8M)\n");
}
END_TEST

START_TEST(t_size_not_a_number)
{
    expect_errors(HEAP "max_client_bytes = lots\n",
                  "heapd:t.conf:4: max_client_bytes 'lots' is not a size (use "
                  "a number with an optional K, M or G suffix, e.g. 8M)\n");
}
END_TEST

START_TEST(t_size_overflow)
{
    expect_errors(HEAP "max_client_bytes = 17179869184G\n",
                  "heapd:t.conf:4: max_client_bytes '17179869184G' overflows "
                  "64 bits; use a smaller size\n");
}
END_TEST

START_TEST(t_mark_stack_range)
{
    expect_errors(HEAP "mark_stack_limit = 2K\n",
                  "heapd:t.conf:4: mark_stack_limit 2K is too small (at "
                  "least 4K)\n");
    expect_errors(HEAP "mark_stack_limit = 2G\n",
                  "heapd:t.conf:4: mark_stack_limit 2G is too large (at most "
                  "1G)\n");
}
END_TEST

/* Note [Nurseries] in proto/young.h: the heap's defaults for an attach
 * that asks for none */
START_TEST(t_young_keys)
{
    struct config c;
    expect_ok(HEAP "young_size = 4M\nyoung_age = 8\n", &c);
    ck_assert_uint_eq(c.heaps[0].young_size, 4 << 20);
    ck_assert_uint_eq(c.heaps[0].young_age, 8);
    expect_ok(HEAP "young_size = 64K\nyoung_age = 1\n", &c);
    ck_assert_uint_eq(c.heaps[0].young_size, 64 << 10);
    ck_assert_uint_eq(c.heaps[0].young_age, 1);
    expect_errors(HEAP "young_size = 32K\n",
                  "heapd:t.conf:4: young_size 32K is too small (at least "
                  "64K)\n");
    expect_errors(HEAP "young_size = 512M\n",
                  "heapd:t.conf:4: young_size 512M is too large (at most "
                  "256M)\n");
    expect_errors(HEAP "young_size = big\n",
                  "heapd:t.conf:4: young_size 'big' is not a size (use a "
                  "number with an optional K, M or G suffix, e.g. 8M)\n");
    expect_errors("[heap h]\nbase = 0x7e8000000000\nmax_size = 512M\n"
                  "young_size = 256M\n",
                  "heapd:t.conf:4: young_size 256M is more than a quarter "
                  "of max_size 512M; lower it (a nursery is a mutator's "
                  "own, and at most a quarter of the heap)\n");
    expect_errors(HEAP "young_age = 0\n",
                  "heapd:t.conf:4: young_age 0 is out of range (1..8)\n");
    expect_errors(HEAP "young_age = 9\n",
                  "heapd:t.conf:4: young_age 9 is out of range (1..8)\n");
    expect_errors(HEAP "young_age = old\n",
                  "heapd:t.conf:4: young_age 'old' is not a number (use "
                  "decimal digits)\n");
}
END_TEST

START_TEST(t_log_level)
{
    struct config c;
    expect_errors("[daemon]\nlog_level = verbose\n" HEAP,
                  "heapd:t.conf:2: log_level 'verbose' is not one of: error, "
                  "warn, info, debug\n");
    expect_ok("[daemon]\nlog_level = error\n" HEAP, &c);
    ck_assert_int_eq(c.log_level, CONFIG_LOG_ERROR);
}
END_TEST

START_TEST(t_socket_relative)
{
    expect_errors("[daemon]\nsocket = run/heapd.sock\n" HEAP,
                  "heapd:t.conf:2: socket path 'run/heapd.sock' is relative; "
                  "use an absolute path such as /run/heapd/heapd.sock\n");
}
END_TEST

START_TEST(t_socket_too_long)
{
    char sock[131], text[400];
    struct config c;

    memset(sock, 's', 130);
    sock[0] = '/';
    sock[130] = '\0';
    snprintf(text, sizeof text, "[daemon]\nsocket = %s\n" HEAP, sock);
    expect_errors(text, "heapd:t.conf:2: socket path is 130 bytes; the limit "
                  "is 107 (sun_path)\n");
    sock[108] = '\0';
    snprintf(text, sizeof text, "[daemon]\nsocket = %s\n" HEAP, sock);
    expect_errors(text, "heapd:t.conf:2: socket path is 108 bytes; the limit "
                  "is 107 (sun_path)\n");
    sock[107] = '\0';
    snprintf(text, sizeof text, "[daemon]\nsocket = %s\n" HEAP, sock);
    expect_ok(text, &c);
    ck_assert_str_eq(c.socket, sock);
}
END_TEST

START_TEST(t_segment_not_power_of_two)
{
    expect_errors(HEAP "segment_size = 100K\n",
                  "heapd:t.conf:4: segment_size '100K' is not a power of two "
                  "(e.g. 64K, 128K, 256K)\n");
}
END_TEST

START_TEST(t_segment_size_range)
{
    expect_errors(HEAP "segment_size = 8K\n",
                  "heapd:t.conf:4: segment_size 8K is too small (at least "
                  "16K)\n");
    expect_errors(HEAP "segment_size = 2G\n",
                  "heapd:t.conf:4: segment_size 2G is too large (at most "
                  "1G)\n");
}
END_TEST

START_TEST(t_base_not_aligned)
{
    expect_errors("[heap h]\nbase = 0x7e8000001000\nmax_size = 4G\n",
                  "heapd:t.conf:2: base 0x7e8000001000 is not a multiple of "
                  "segment_size 128K\n");
    /* the default segment size is what it is checked against */
    expect_errors("[heap h]\nbase = 0x7e8000020000\nmax_size = 4G\n"
                  "segment_size = 256K\n",
                  "heapd:t.conf:2: base 0x7e8000020000 is not a multiple of "
                  "segment_size 256K\n");
}
END_TEST

START_TEST(t_base_zero)
{
    expect_errors("[heap h]\nbase = 0\nmax_size = 4G\n",
                  "heapd:t.conf:2: base must not be 0; choose a fixed address "
                  "such as 0x7e8000000000\n");
}
END_TEST

START_TEST(t_base_above_user_space)
{
    expect_errors("[heap h]\nbase = 0x800000000000\nmax_size = 4G\n",
                  "heapd:t.conf:2: base 0x800000000000 is not below "
                  "0x800000000000 (47-bit user address space)\n");
    expect_errors("[heap h]\nbase = 0x100000000000000000\nmax_size = 4G\n",
                  "heapd:t.conf:2: base '0x100000000000000000' overflows 64 "
                  "bits; use an address below 0x800000000000\n");
}
END_TEST

START_TEST(t_base_not_a_number)
{
    expect_errors("[heap h]\nbase = 4G\nmax_size = 4G\n",
                  "heapd:t.conf:2: base '4G' is not an address (use hex such "
                  "as 0x7e8000000000, or decimal)\n");
}
END_TEST

START_TEST(t_base_plus_max_size_beyond)
{
    expect_errors("[heap h]\nbase = 0x7fff00000000\nmax_size = 8G\n",
                  "heapd:t.conf:2: heap 'h' would end at or beyond "
                  "0x800000000000 (base 0x7fff00000000 + max_size 8G, 47-bit "
                  "user address space); lower base or max_size\n");
    /* ending exactly at the limit is also refused */
    expect_errors("[heap h]\nbase = 0x7fff00000000\nmax_size = 4G\n",
                  "heapd:t.conf:2: heap 'h' would end at or beyond "
                  "0x800000000000 (base 0x7fff00000000 + max_size 4G, 47-bit "
                  "user address space); lower base or max_size\n");
    struct config c;
    expect_ok("[heap h]\nbase = 0x7fff00000000\nmax_size = 0xFFFE0000\n", &c);
}
END_TEST

START_TEST(t_max_size_not_multiple)
{
    expect_errors("[heap h]\nbase = 0x7e8000000000\nmax_size = 1000000\n",
                  "heapd:t.conf:3: max_size 1000000 is not a multiple of "
                  "segment_size 128K\n");
}
END_TEST

START_TEST(t_max_size_too_small_or_large)
{
    /* the control area (16M) takes 128 segments of 128K */
    ck_assert_uint_eq(LAYOUT_CONTROL_BYTES, 16 << 20);
    expect_errors("[heap h]\nbase = 0x7e8000000000\nmax_size = 16M\n",
                  "heapd:t.conf:3: max_size 16M is too small: with "
                  "segment_size 128K it must be at least 16512K (128 control "
                  "segments + 1)\n");
    expect_errors("[heap h]\nbase = 0x7e8000000000\nmax_size = 0\n",
                  "heapd:t.conf:3: max_size 0 is too small: with "
                  "segment_size 128K it must be at least 16512K (128 control "
                  "segments + 1)\n");
    expect_errors("[heap h]\nbase = 0x7e8000000000\nmax_size = 1025G\n",
                  "heapd:t.conf:3: max_size 1025G is too large (at most "
                  "1024G)\n");
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

START_TEST(t_max_client_bytes_too_big)
{
    expect_errors(HEAP "max_client_bytes = 5G\n",
                  "heapd:t.conf:4: max_client_bytes 5G is larger than "
                  "max_size 4G; lower it or use 0 (= max_size)\n");
}
END_TEST

START_TEST(t_unknown_user_and_group)
{
    expect_errors(HEAP "allow_users = root, heapd_no_such_user_x\n"
                  "allow_groups = heapd_no_such_group_y 0\n",
                  "heapd:t.conf:4: unknown user 'heapd_no_such_user_x' in "
                  "allow_users; create it or give a numeric uid\n"
                  "heapd:t.conf:5: unknown group 'heapd_no_such_group_y' in "
                  "allow_groups; create it or give a numeric gid\n");
}
END_TEST

START_TEST(t_too_many_users)
{
    char text[1024];
    size_t len = (size_t)snprintf(text, sizeof text, HEAP "allow_users = ");

    for (int i = 0; i < CONFIG_MAX_IDS + 6; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%d,", i);
    snprintf(text + len, sizeof text - len, "\n");
    expect_errors(text, "heapd:t.conf:4: allow_users lists 70 entries; the "
                  "limit is 64 (allow a group instead)\n");
}
END_TEST

START_TEST(t_bad_numeric_id)
{
    expect_errors(HEAP "allow_users = 4294967295\n",
                  "heapd:t.conf:4: user '4294967295' in allow_users is not a "
                  "valid numeric uid (use 0..4294967294 or a user name)\n");
}
END_TEST

START_TEST(t_too_many_ids)
{
    char text[1024];
    size_t len = (size_t)snprintf(text, sizeof text, HEAP "allow_groups =");
    struct config c;

    for (int i = 0; i < CONFIG_MAX_IDS + 1; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, " %d", i);
    snprintf(text + len, sizeof text - len, "\n");
    expect_errors(text, "heapd:t.conf:4: allow_groups lists 65 entries; the "
                  "limit is 64\n");
    /* 64 is fine */
    *strrchr(text, ' ') = '\0';
    strcat(text, "\n");
    expect_ok(text, &c);
    ck_assert_uint_eq(c.heaps[0].n_allow_groups, CONFIG_MAX_IDS);
    ck_assert_uint_eq(c.heaps[0].allow_groups[63], 63);
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

START_TEST(t_bad_boolean)
{
    expect_errors(HEAP "verify = maybe\n",
                  "heapd:t.conf:4: verify 'maybe' is not a boolean (use true "
                  "or false)\n");
}
END_TEST

/* Note [Stalls] in daemon/stall.c */
START_TEST(t_stall_keys)
{
    struct config c;
    const struct config_heap *h;

    expect_ok(HEAP "stall_warn = 250ms\nstall_timeout = 30s\n"
              "stall_action = evict\n", &c);
    ck_assert_uint_eq(c.heaps[0].stall_warn_ms, 250);
    ck_assert_uint_eq(c.heaps[0].stall_timeout_ms, 30000);
    ck_assert_int_eq(c.heaps[0].stall_action, CONFIG_STALL_EVICT);
    /* a bare number is seconds; names are case-insensitive like log_level */
    expect_ok(HEAP "stall_warn = 2\nstall_timeout = 1m\nstall_action = Wait\n",
              &c);
    ck_assert_uint_eq(c.heaps[0].stall_warn_ms, 2000);
    ck_assert_uint_eq(c.heaps[0].stall_timeout_ms, 60000);
    ck_assert_int_eq(c.heaps[0].stall_action, CONFIG_STALL_WAIT);
    expect_ok(HEAP "stall_action = kill\n", &c);
    ck_assert_int_eq(c.heaps[0].stall_action, CONFIG_STALL_KILL);
    /* each end of each range */
    expect_ok(HEAP "stall_warn = 10ms\nstall_timeout = 10ms\n", &c);
    ck_assert_uint_eq(c.heaps[0].stall_warn_ms, 10);
    ck_assert_uint_eq(c.heaps[0].stall_timeout_ms, 10);
    expect_ok(HEAP "stall_warn = 60m\nstall_timeout = 86400s\n", &c);
    ck_assert_uint_eq(c.heaps[0].stall_warn_ms, 3600 * 1000);
    ck_assert_uint_eq(c.heaps[0].stall_timeout_ms, 86400 * 1000);
    /* 0 waits for ever, whatever stall_warn is */
    expect_ok(HEAP "stall_warn = 3600s\nstall_timeout = 0\n", &c);
    ck_assert_uint_eq(c.heaps[0].stall_warn_ms, 3600 * 1000);
    ck_assert_uint_eq(c.heaps[0].stall_timeout_ms, 0);
    expect_ok(HEAP "stall_timeout = 0ms\n", &c);
    ck_assert_uint_eq(c.heaps[0].stall_timeout_ms, 0);
    /* per heap: the next heap starts from the defaults again */
    expect_ok(HEAP "stall_warn = 20s\nstall_timeout = 0s\n"
              "stall_action = wait\n"
              "[heap g]\nbase = 0x7f0000000000\nmax_size = 1G\n", &c);
    h = config_find_heap(&c, "h");
    ck_assert_uint_eq(h->stall_warn_ms, 20000);
    ck_assert_uint_eq(h->stall_timeout_ms, 0);
    ck_assert_int_eq(h->stall_action, CONFIG_STALL_WAIT);
    h = config_find_heap(&c, "g");
    ck_assert_uint_eq(h->stall_warn_ms, 1000);
    ck_assert_uint_eq(h->stall_timeout_ms, 10000);
    ck_assert_int_eq(h->stall_action, CONFIG_STALL_KILL);
}
END_TEST

START_TEST(t_stall_bad_values)
{
    expect_errors(HEAP "stall_action = term\n",
                  "heapd:t.conf:4: stall_action 'term' is not one of: kill, "
                  "evict, wait\n");
    expect_errors(HEAP "stall_action = 0\n",
                  "heapd:t.conf:4: stall_action '0' is not one of: kill, "
                  "evict, wait\n");
    expect_errors(HEAP "stall_action =\n",
                  "heapd:t.conf:4: empty value for 'stall_action'; set a "
                  "value or delete the line to use the default\n");
    expect_errors(HEAP "stall_warn = -1s\nstall_timeout = soon\n",
                  "heapd:t.conf:4: stall_warn '-1s' is not a duration (use a "
                  "number and ms, s or m, e.g. 5s or 500ms)\n"
                  "heapd:t.conf:5: stall_timeout 'soon' is not a duration "
                  "(use a number and ms, s or m, e.g. 10s or 500ms, or 0 for "
                  "never)\n");
    expect_errors(HEAP "stall_timeout = -5\n",
                  "heapd:t.conf:4: stall_timeout '-5' is not a duration (use "
                  "a number and ms, s or m, e.g. 10s or 500ms, or 0 for "
                  "never)\n");
    expect_errors(HEAP "stall_warn = 1.5s\n",
                  "heapd:t.conf:4: stall_warn '1.5s' is not a duration (use a "
                  "number and ms, s or m, e.g. 5s or 500ms)\n");
    expect_errors(HEAP "stall_warn = 9ms\n",
                  "heapd:t.conf:4: stall_warn 9ms is out of range "
                  "(10ms..3600s)\n");
    expect_errors(HEAP "stall_warn = 3601s\nstall_timeout = 0\n",
                  "heapd:t.conf:4: stall_warn 3601s is out of range "
                  "(10ms..3600s)\n");
    expect_errors(HEAP "stall_warn = 0\n",
                  "heapd:t.conf:4: stall_warn 0 is out of range "
                  "(10ms..3600s)\n");
    expect_errors(HEAP "stall_timeout = 9ms\n",
                  "heapd:t.conf:4: stall_timeout 9ms is out of range (0 = "
                  "never, or 10ms..86400s)\n");
    expect_errors(HEAP "stall_timeout = 1441m\n",
                  "heapd:t.conf:4: stall_timeout 1441m is out of range (0 = "
                  "never, or 10ms..86400s)\n");
    expect_errors(HEAP "stall_timeout = 99999999999999999999ms\n",
                  "heapd:t.conf:4: stall_timeout 99999999999999999999ms is "
                  "out of range (0 = never, or 10ms..86400s)\n");
}
END_TEST

/* A non-zero stall_timeout must not be shorter than stall_warn, counting
 * defaults; the error is on the line of the key that was set. */
START_TEST(t_stall_timeout_below_warn)
{
    struct config c;

    expect_errors(HEAP "stall_warn = 5s\nstall_timeout = 2s\n",
                  "heapd:t.conf:5: stall_timeout 2s is shorter than "
                  "stall_warn 5s; raise stall_timeout to at least 5s, lower "
                  "stall_warn, or use stall_timeout = 0 (never end a "
                  "stall)\n");
    expect_errors(HEAP "stall_timeout = 1500ms\nstall_warn = 2s\n",
                  "heapd:t.conf:4: stall_timeout 1500ms is shorter than "
                  "stall_warn 2s; raise stall_timeout to at least 2s, lower "
                  "stall_warn, or use stall_timeout = 0 (never end a "
                  "stall)\n");
    expect_errors(HEAP "stall_timeout = 500ms\n",
                  "heapd:t.conf:4: stall_timeout 500ms is shorter than "
                  "stall_warn 1s (the default); raise stall_timeout to at "
                  "least 1s, lower stall_warn, or use stall_timeout = 0 "
                  "(never end a stall)\n");
    expect_errors(HEAP "stall_warn = 30s\n",
                  "heapd:t.conf:4: stall_warn 30s is longer than "
                  "stall_timeout 10s (the default); lower stall_warn or set "
                  "stall_timeout to at least 30s (or 0 to never end a "
                  "stall)\n");
    /* a rejected value is left out of the check (no cascade) */
    expect_errors(HEAP "stall_warn = 2h\nstall_timeout = 1s\n",
                  "heapd:t.conf:4: stall_warn '2h' is not a duration (use a "
                  "number and ms, s or m, e.g. 5s or 500ms)\n");
    expect_errors(HEAP "stall_warn = 60m\nstall_timeout = 5ms\n",
                  "heapd:t.conf:5: stall_timeout 5ms is out of range (0 = "
                  "never, or 10ms..86400s)\n");
    /* in file order with the other errors, once per heap */
    expect_errors("[heap a]\nbase = 0x7e8000000000\nmax_size = 4G\n"
                  "stall_warn = 1m\nverify = perhaps\n"
                  "[heap b]\nbase = 0x7f0000000000\nmax_size = 1G\n"
                  "stall_timeout = 20ms\nstall_warn = 20ms\n",
                  "heapd:t.conf:4: stall_warn 60s is longer than "
                  "stall_timeout 10s (the default); lower stall_warn or set "
                  "stall_timeout to at least 60s (or 0 to never end a "
                  "stall)\n"
                  "heapd:t.conf:5: verify 'perhaps' is not a boolean (use "
                  "true or false)\n");
    /* equal is fine */
    expect_ok(HEAP "stall_warn = 2s\nstall_timeout = 2000ms\n", &c);
    ck_assert_uint_eq(c.heaps[0].stall_timeout_ms, c.heaps[0].stall_warn_ms);
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
    TCase *key = tcase_create("keys");

    tcase_add_test(ok, t_full_config_values);
    tcase_add_test(ok, t_defaults);
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

    tcase_add_test(key, t_unknown_key_daemon);
    tcase_add_test(key, t_unknown_key_heap);
    tcase_add_test(key, t_duplicate_key);
    tcase_add_test(key, t_empty_value);
    tcase_add_test(key, t_bad_number);
    tcase_add_test(key, t_number_out_of_range);
    tcase_add_test(key, t_gc_threads_zero_and_65);
    tcase_add_test(key, t_connection_limits);
    tcase_add_test(key, t_admission_and_client_limits);
    tcase_add_test(key, t_metrics_listen);
    tcase_add_test(key, t_bad_size_suffix);
    tcase_add_test(key, t_size_not_a_number);
    tcase_add_test(key, t_size_overflow);
    tcase_add_test(key, t_mark_stack_range);
    tcase_add_test(key, t_young_keys);
    tcase_add_test(key, t_log_level);
    tcase_add_test(key, t_socket_relative);
    tcase_add_test(key, t_socket_too_long);
    tcase_add_test(key, t_segment_not_power_of_two);
    tcase_add_test(key, t_segment_size_range);
    tcase_add_test(key, t_base_not_aligned);
    tcase_add_test(key, t_base_zero);
    tcase_add_test(key, t_base_above_user_space);
    tcase_add_test(key, t_base_not_a_number);
    tcase_add_test(key, t_base_plus_max_size_beyond);
    tcase_add_test(key, t_max_size_not_multiple);
    tcase_add_test(key, t_max_size_too_small_or_large);
    tcase_add_test(key, t_max_client_bytes_too_big);
    tcase_add_test(key, t_unknown_user_and_group);
    tcase_add_test(key, t_bad_numeric_id);
    tcase_add_test(key, t_too_many_ids);
    tcase_add_test(key, t_too_many_users);
    tcase_add_test(key, t_bad_boolean);
    tcase_add_test(key, t_stall_keys);
    tcase_add_test(key, t_stall_bad_values);
    tcase_add_test(key, t_stall_timeout_below_warn);
    suite_add_tcase(s, key);
    return s;
}

int main(void)
{
    return check_main(config_suite());
}
