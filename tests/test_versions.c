/* A client and heapd of different releases (Note [Versions across
 * releases] in proto/version.c): they work together, or the connection
 * fails at its handshake naming both releases and what to upgrade.
 * Case "wire" plays the other release by hand (a Hello, a fake heapd);
 * case "previous" runs the previous release, built from its commit by
 * tests/prev_release.sh, against this one both ways. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "heapd_build.h"
#include "layout.h"
#include "wire.h"
#include "check_main.h"

static struct daemon_proc D;

static void start(void)
{
    harness_start(&D, harness_default_config("@SOCK@", "verify = true\n"));
}

/* A Hello from a libheapd of RELEASE speaking PROTOCOL and LAYOUT. */
static int hello_from(const char *release, uint32_t protocol,
                      uint32_t layout, Heapd__ClientKind kind)
{
    int fd = harness_raw_connect(D.sock);
    Heapd__Hello h = HEAPD__HELLO__INIT;
    Heapd__Envelope e = HEAPD__ENVELOPE__INIT;
    h.protocol_version = protocol;
    h.layout_version = layout;
    h.library_version = (char *)release;
    h.heap = (char *)"default";
    h.kind = kind;
    e.body_case = HEAPD__ENVELOPE__BODY_HELLO;
    e.hello = &h;
    harness_send_env(fd, &e);
    return fd;
}

START_TEST(older_libheapd_refused_naming_both)
{
    char want[256];
    start();
    int fd = hello_from("0.0.1", PROTOCOL_VERSION - 1, LAYOUT_VERSION - 1,
                        HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    snprintf(want, sizeof want,
             "libheapd 0.0.1 (protocol %u, layout %u) cannot use heapd %s "
             "(protocol %u, layout %u): upgrade the program's libheapd to "
             "%s", PROTOCOL_VERSION - 1, LAYOUT_VERSION - 1, HEAPD_VERSION,
             PROTOCOL_VERSION, LAYOUT_VERSION, HEAPD_VERSION);
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_VERSION,
                                   want);
    ck_assert_uint_eq(harness_still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(newer_libheapd_refused_naming_both)
{
    char want[256];
    start();
    int fd = hello_from("9.9.9", PROTOCOL_VERSION + 1, LAYOUT_VERSION,
                        HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    snprintf(want, sizeof want, "libheapd 9.9.9 (protocol %u, layout %u) "
             "cannot use heapd %s (protocol %u, layout %u): upgrade heapd "
             "to 9.9.9", PROTOCOL_VERSION + 1, LAYOUT_VERSION,
             HEAPD_VERSION, PROTOCOL_VERSION, LAYOUT_VERSION);
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_VERSION,
                                   want);
    /* a mutator of another layout is refused; heapctl, which maps
     * nothing, is not */
    fd = hello_from("9.9.9", PROTOCOL_VERSION, LAYOUT_VERSION + 1,
                    HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    harness_expect_error_and_close(fd, HEAPD__ERROR_CODE__ERROR_VERSION,
                                   "upgrade heapd to 9.9.9");
    fd = hello_from("9.9.9", PROTOCOL_VERSION, LAYOUT_VERSION + 1,
                    HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    Heapd__Envelope *w = harness_read_env(fd, NULL);
    ck_assert_msg(w && w->body_case == HEAPD__ENVELOPE__BODY_WELCOME,
                  "a control client of another layout is welcomed");
    ck_assert_str_eq(w->welcome->daemon_version, HEAPD_VERSION);
    heapd__envelope__free_unpacked(w, NULL);
    close(fd);
    harness_stop_clean(&D);
}
END_TEST

/* A Hello's release is the client's to write: 4,000 bytes of control
 * characters and quotes are welcomed (the protocol is heapd's), kept
 * escaped and cut to 31 bytes, and shown so by heapctl clients; a drop of
 * a heap named in such bytes is refused with them escaped. */
START_TEST(hostile_release_and_heap_names)
{
    static char junk[4001];
    for (size_t i = 0; i < sizeof junk - 1; i++)
        junk[i] = (char)(i % 3 == 0 ? 0x01 : i % 3 == 1 ? '"' : 0x7f);
    start();
    int fd = hello_from(junk, PROTOCOL_VERSION, LAYOUT_VERSION,
                        HEAPD__CLIENT_KIND__CLIENT_CONTROL);
    Heapd__Envelope *w = harness_read_env(fd, NULL);
    ck_assert_msg(w && w->body_case == HEAPD__ENVELOPE__BODY_WELCOME,
                  "a Hello with a hostile release is welcomed");
    heapd__envelope__free_unpacked(w, NULL);
    char cmd[512], out[16384];
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' clients --json",
             harness_bin("HEAPCTL_BIN"), D.sock);
    ck_assert_int_eq(harness_run(cmd, out, sizeof out), 0);
    const char *lib = strstr(out, "\"library\":\"\\\\x01");
    ck_assert_msg(lib, "the release is not shown escaped: %s", out);
    const char *end = strchr(lib + 11, '"');
    ck_assert_msg(end && end - (lib + 11) <= 2 * 31, "the release is not "
                  "cut to 31 bytes: %s", out);
    close(fd);
    /* heapctl drop of a heap named in junk: refused, escaped */
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' drop \"$(printf "
             "'a\\001b')\" 2>&1", harness_bin("HEAPCTL_BIN"), D.sock);
    ck_assert_int_ne(harness_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "heap 'a\\x01b' is not configured"),
                  "heapctl drop says: %s", out);
    ck_assert_uint_ge(harness_still_serving(D.sock), 1);
    harness_stop_clean(&D);
}
END_TEST

/* A heapd of another release, played by hand: it answers one Hello with
 * REPLY and closes. */
struct fake_heapd {
    int listen_fd;
    char dir[64];
    char path[108];
    Heapd__Envelope *reply;
    const char *failed;
};

static void *fake_serve(void *arg)
{
    struct fake_heapd *f = arg;
    int fd = accept(f->listen_fd, NULL, NULL);
    f->failed = "accept";
    if (fd < 0)
        return NULL;
    Heapd__Envelope *in = harness_read_env(fd, NULL);
    f->failed = "no hello";
    if (in && in->body_case == HEAPD__ENVELOPE__BODY_HELLO &&
        strcmp(in->hello->library_version, HEAPD_VERSION) == 0 &&
        in->hello->layout_version == LAYOUT_VERSION) {
        harness_send_env(fd, f->reply);
        f->failed = NULL;
    }
    heapd__envelope__free_unpacked(in, NULL);
    close(fd);
    return NULL;
}

/* heapd_connect to a fake heapd that answers with REPLY: its result. */
static int connect_to_fake(Heapd__Envelope *reply, unsigned flags)
{
    struct fake_heapd f = {.reply = reply};
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    pthread_t t;
    harness_tmpdir(f.dir, sizeof f.dir);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/fake.sock", f.dir);
    f.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(f.listen_fd, 0);
    ck_assert_int_eq(bind(f.listen_fd, (struct sockaddr *)&sa, sizeof sa),
                     0);
    ck_assert_int_eq(listen(f.listen_fd, 1), 0);
    ck_assert_int_eq(pthread_create(&t, NULL, fake_serve, &f), 0);
    heapd_client *c = NULL;
    heapd_connect_opts o = {.socket_path = sa.sun_path,
                            .flags = flags | HEAPD_CONNECT_NO_RECONNECT};
    int rc = heapd_connect(&c, &o);
    pthread_join(t, NULL);
    ck_assert_msg(f.failed == NULL, "the fake heapd: %s", f.failed);
    if (c)
        heapd_disconnect(c);
    close(f.listen_fd);
    unlink(sa.sun_path);
    rmdir(f.dir);
    return rc;
}

START_TEST(newer_heapd_refused_by_libheapd)
{
    Heapd__Welcome w = HEAPD__WELCOME__INIT;
    Heapd__Envelope e = HEAPD__ENVELOPE__INIT;
    w.protocol_version = PROTOCOL_VERSION + 1;
    w.layout_version = LAYOUT_VERSION + 1;
    w.daemon_version = (char *)"9.9.9";
    w.heap = (char *)"default";
    e.body_case = HEAPD__ENVELOPE__BODY_WELCOME;
    e.welcome = &w;
    ck_assert_int_eq(connect_to_fake(&e, HEAPD_CONNECT_CONTROL),
                     HEAPD_EVERSION);
    char want[256];
    snprintf(want, sizeof want, "libheapd %s (protocol %u, layout %u) "
             "cannot use heapd 9.9.9 (protocol %u, layout %u): upgrade the "
             "program's libheapd to 9.9.9", HEAPD_VERSION, PROTOCOL_VERSION,
             LAYOUT_VERSION, PROTOCOL_VERSION + 1, LAYOUT_VERSION + 1);
    ck_assert_msg(strstr(heapd_last_error(), want), "%s",
                  heapd_last_error());
    /* the same protocol and another layout: a mutator client refuses it
     * before it maps anything */
    w.protocol_version = PROTOCOL_VERSION;
    ck_assert_int_eq(connect_to_fake(&e, 0), HEAPD_EVERSION);
    ck_assert_msg(strstr(heapd_last_error(), "upgrade the program's "
                                             "libheapd to 9.9.9"),
                  "%s", heapd_last_error());
}
END_TEST

/* A heapd before 0.2.0 refuses with its own words, which do not name this
 * libheapd: libheapd adds its release. */
START_TEST(older_heapd_refusal_names_this_libheapd)
{
    Heapd__Error er = HEAPD__ERROR__INIT;
    Heapd__Envelope e = HEAPD__ENVELOPE__INIT;
    er.code = HEAPD__ERROR_CODE__ERROR_VERSION;
    er.message = (char *)"protocol version 6 is not supported by heapd "
                         "0.1.0 (it speaks version 5); use a libheapd that "
                         "matches the daemon";
    e.body_case = HEAPD__ENVELOPE__BODY_ERROR;
    e.error = &er;
    ck_assert_int_eq(connect_to_fake(&e, 0), HEAPD_EVERSION);
    ck_assert_msg(strstr(heapd_last_error(), "heapd 0.1.0") &&
                      strstr(heapd_last_error(),
                             "(this is libheapd " HEAPD_VERSION ")"),
                  "%s", heapd_last_error());
}
END_TEST

/* ---- the previous release, built from its commit ---- */

static char prev[256];

static const char *prev_release(void)
{
    if (prev[0])
        return prev;
    const char *src = getenv("HEAPD_SOURCE_ROOT");
    const char *build = getenv("HEAPD_BUILD_ROOT");
    ck_assert_msg(src && build, "HEAPD_SOURCE_ROOT, HEAPD_BUILD_ROOT unset");
    snprintf(prev, sizeof prev, "%s/prev-release", build);
    /* its own bound, well above a build of 0.1.0's heapd, heapctl and
     * libheapd on a loaded machine (about 7 s idle), and its words */
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "timeout -k 5 800 bash "
             "'%s/tests/prev_release.sh' '%s' '%s' 2>&1", src, src, prev);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    char sink[4096];
    while (fread(sink, 1, sizeof sink, f) > 0)
        ;
    int st = pclose(f);
    ck_assert_msg(st == 0, "building the previous release (status %#x): %s",
                  st, out);
    return prev;
}

START_TEST(previous_heapd_serves_this_libheapd)
{
    char bin[512], old_bin[512];
    snprintf(bin, sizeof bin, "%s/build/daemon/heapd", prev_release());
    snprintf(old_bin, sizeof old_bin, "%s", harness_bin("HEAPD_BIN"));
    setenv("HEAPD_BIN", bin, 1);
    start();
    setenv("HEAPD_BIN", old_bin, 1);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    void **o = heapd_alloc(m, 1, 8);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(heapd_global_set(m, "kept", o), 0);
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    ck_assert_ptr_eq(heapd_global_get(m, "kept"), o);
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(c, &st), 0);
    ck_assert_str_ne(st.version, HEAPD_VERSION);
    ck_assert_uint_ge(st.cycles_completed, 1);
    heapd_detach(m);
    heapd_disconnect(c);
    /* this heapctl too */
    char cmd[512], out[8192];
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' stats",
             harness_bin("HEAPCTL_BIN"), D.sock);
    int rc = harness_run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0 && strstr(out, "cycles_completed"), "%s", out);
    harness_stop_clean(&D);
}
END_TEST

/* Run the previous release's client (tests/abi/client_0_1.c) against
 * D with ENV before it: "ok" and 0, or the test fails saying WHAT.  A
 * client of this process is connected meanwhile, in a blocking region,
 * as the program expects one more. */
static void run_previous_client(const char *p, const char *env,
                                const char *what)
{
    heapd_client *c;
    heapd_mutator *m;
    char cmd[1024], out[8192];
    harness_attach(&D, &c, &m);
    snprintf(cmd, sizeof cmd, "HEAPD_SOCKET='%s' %s '%s/client'", D.sock,
             env, p);
    heapd_blocking_enter(m);
    int rc = harness_run(cmd, out, sizeof out);
    heapd_blocking_leave(m);
    heapd_detach(m);
    heapd_disconnect(c);
    ck_assert_msg(rc == 0 && strcmp(out, "ok\n") == 0, "%s: %d\n%s", what,
                  rc, out);
}

START_TEST(previous_clients_use_this_heapd)
{
    const char *p = prev_release();
    start();
    /* a program built against the previous release's headers and its own
     * libheapd, which its run path names: meson test's LD_LIBRARY_PATH
     * (this build's libheapd) would come first */
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "env -u LD_LIBRARY_PATH ldd '%s/client' "
             "'%s/build/heapctl/heapctl'", p, p);
    int rc = harness_run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0, "ldd: %s", out);
    const char *at = out;
    for (int k = 0; k < 2; k++) {
        const char *arrow = strstr(at, "libheapd.so.0 => ");
        ck_assert_msg(arrow && strncmp(arrow + 17, p, strlen(p)) == 0,
                      "the previous release's programs do not load its "
                      "libheapd (under %s):\n%s", p, out);
        at = arrow + 17;
    }
    run_previous_client(p, "env -u LD_LIBRARY_PATH",
                        "the previous release's client");
    snprintf(cmd, sizeof cmd, "env -u LD_LIBRARY_PATH "
             "'%s/build/heapctl/heapctl' --socket '%s' stats", p, D.sock);
    rc = harness_run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0 && strstr(out, "heapd " HEAPD_VERSION ", up "),
                  "the previous release's heapctl: %d\n%s", rc, out);
    harness_stop_clean(&D);
}
END_TEST

/* A program linked against the previous release's libheapd, which had no
 * symbol versions, on this libheapd (meson test's LD_LIBRARY_PATH puts
 * this build's first): its unversioned references bind to HEAPD_0.1, the
 * entries with 0.1.0's sizes (Note [Symbol versions] in client/abi.c). */
START_TEST(previous_binary_runs_on_this_libheapd)
{
    const char *p = prev_release();
    const char *ld = getenv("LD_LIBRARY_PATH");
    ck_assert_msg(ld && ld[0], "meson test sets LD_LIBRARY_PATH to this "
                  "build's libheapd");
    start();
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "ldd '%s/client'", p);
    int rc = harness_run(cmd, out, sizeof out);
    const char *arrow = strstr(out, "libheapd.so.0 => ");
    ck_assert_msg(rc == 0 && arrow && strncmp(arrow + 17, p, strlen(p)) != 0,
                  "the previous release's client does not load this "
                  "libheapd:\n%s", out);
    run_previous_client(p, "", "0.1.0's client on this libheapd");
    harness_stop_clean(&D);
}
END_TEST

static Suite *versions_suite(void)
{
    Suite *s = suite_create("versions");
    TCase *t = tcase_create("wire");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, older_libheapd_refused_naming_both);
    tcase_add_test(t, newer_libheapd_refused_naming_both);
    tcase_add_test(t, newer_heapd_refused_by_libheapd);
    tcase_add_test(t, older_heapd_refusal_names_this_libheapd);
    tcase_add_test(t, hostile_release_and_heap_names);
    suite_add_tcase(s, t);
    t = tcase_create("previous");
    tcase_set_timeout(t, 900);
    tcase_add_test(t, previous_heapd_serves_this_libheapd);
    tcase_add_test(t, previous_clients_use_this_heapd);
    tcase_add_test(t, previous_binary_runs_on_this_libheapd);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(versions_suite());
}
