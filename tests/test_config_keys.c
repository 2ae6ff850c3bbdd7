/* Tests of daemon/config.c, continued: each key of heapd.conf, its values
 * and their errors (Note [Config errors] in config.c); the suite is
 * test_config.c's. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "config_util.h"
#include "layout.h"

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
                  "young_age, memory_limit, load)\n");
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

/* Note [Young budgets] in daemon/gc/heap.h: the heap's defaults for an
 * attach that asks for none */
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
                  "of max_size 512M; lower it (every young mutator that "
                  "asks for no budget allocates this much between its "
                  "minor collections)\n");
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

START_TEST(t_max_client_bytes_too_big)
{
    expect_errors(HEAP "max_client_bytes = 5G\n",
                  "heapd:t.conf:4: max_client_bytes 5G is larger than "
                  "max_size 4G; lower it or use 0 (= max_size)\n");
}
END_TEST

/* Note [Memory limit] in daemon/gc/collector.c: within max_size, and
 * at least 32 segments */
START_TEST(t_memory_limit)
{
    struct config c;
    expect_ok(HEAP "memory_limit = 64M\n", &c);
    ck_assert_uint_eq(c.heaps[0].memory_limit, 64u << 20);
    expect_ok(HEAP, &c);
    ck_assert_uint_eq(c.heaps[0].memory_limit, 0);
    expect_errors(HEAP "memory_limit = 5G\n",
                  "heapd:t.conf:4: memory_limit 5G is larger than max_size "
                  "4G; lower it, or use 0 (no limit but max_size)\n");
    expect_errors(HEAP "memory_limit = 1M\n",
                  "heapd:t.conf:4: memory_limit 1M is too small: with "
                  "segment_size 128K it must be at least 4M (32 "
                  "segments)\n");
    expect_errors(HEAP "memory_limit = plenty\n",
                  "heapd:t.conf:4: memory_limit 'plenty' is not a size (use "
                  "a number with an optional K, M or G suffix, e.g. 8M)\n");
}
END_TEST

/* Note [Loading a saved heap] in daemon/gc/load.c: an absolute path */
START_TEST(t_load)
{
    struct config c;
    expect_ok(HEAP "load = /var/lib/heapd/h.save\n", &c);
    ck_assert_str_eq(c.heaps[0].load, "/var/lib/heapd/h.save");
    expect_ok(HEAP, &c);
    ck_assert_str_eq(c.heaps[0].load, "");
    expect_errors(HEAP "load = h.save\n",
                  "heapd:t.conf:4: load file 'h.save' is relative; use an "
                  "absolute path\n");
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

TCase *config_keys_tcase(void)
{
    TCase *key = tcase_create("keys");

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
    tcase_add_test(key, t_memory_limit);
    tcase_add_test(key, t_load);
    tcase_add_test(key, t_unknown_user_and_group);
    tcase_add_test(key, t_bad_numeric_id);
    tcase_add_test(key, t_too_many_ids);
    tcase_add_test(key, t_too_many_users);
    tcase_add_test(key, t_bad_boolean);
    tcase_add_test(key, t_stall_keys);
    tcase_add_test(key, t_stall_bad_values);
    tcase_add_test(key, t_stall_timeout_below_warn);
    return key;
}
