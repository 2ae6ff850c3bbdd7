/* systemd integration: the unit files verify cleanly, and heapd serves a
 * client on a socket passed by socket activation (sd_listen_fds). */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "check_main.h"

/* Copy a built unit into DIR, pointing ExecStart at the built heapd. */
static void install_unit(const char *dir, const char *name)
{
    char src[512], dst[512], line[1024];
    snprintf(src, sizeof src, "%s/systemd/%s", getenv("HEAPD_BUILD_ROOT"),
             name);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    FILE *in = fopen(src, "r"), *out = fopen(dst, "w");
    ck_assert_msg(in && out, "cannot copy %s to %s", src, dst);
    while (fgets(line, sizeof line, in)) {
        if (strncmp(line, "ExecStart=", 10) == 0)
            fprintf(out, "ExecStart=%s -c %s/heapd.conf --foreground\n",
                    harness_bin("HEAPD_BIN"), getenv("HEAPD_SOURCE_ROOT"));
        else
            fputs(line, out);
    }
    fclose(in);
    fclose(out);
}

START_TEST(units_verify)
{
    char dir[64], cmd[1024], out[8192];
    ck_assert_msg(access("/usr/bin/systemd-analyze", X_OK) == 0,
                  "systemd-analyze is missing: apt-get install systemd");
    harness_tmpdir(dir, sizeof dir);
    install_unit(dir, "heapd.service");
    install_unit(dir, "heapd.socket");
    snprintf(cmd, sizeof cmd,
             "cd %s && SYSTEMD_LOG_COLOR=0 systemd-analyze verify --man=no "
             "%s/heapd.socket %s/heapd.service 2>&1", dir, dir, dir);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "systemd-analyze verify failed:\n%s", out);
    /* unknown or misspelt keys are only warnings: refuse them too */
    ck_assert_msg(!strstr(out, "ignoring") && !strstr(out, "Unknown"),
                  "systemd-analyze warned:\n%s", out);

    /* the check itself can fail: a broken copy is refused */
    snprintf(cmd, sizeof cmd,
             "cd %s && sed -i 's/^Type=notify/Type=notiffy/' heapd.service && "
             "systemd-analyze verify --man=no %s/heapd.service 2>&1", dir, dir);
    harness_run(cmd, out, sizeof out);
    ck_assert_msg(strstr(out, "notiffy"), "broken unit not reported:\n%s", out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    harness_run(cmd, NULL, 0);
}
END_TEST

START_TEST(unit_hardening_present)
{
    char path[512], text[8192];
    snprintf(path, sizeof path, "%s/systemd/heapd.service",
             getenv("HEAPD_BUILD_ROOT"));
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    static const char *const keys[] = {
        "Type=notify\n", "RuntimeDirectory=heapd\n",
        "RuntimeDirectoryPreserve=yes\n", "NoNewPrivileges=yes\n",
        "ProtectSystem=strict\n", "ProtectHome=yes\n", "PrivateTmp=yes\n",
        "RestrictAddressFamilies=AF_UNIX\n", "MemoryDenyWriteExecute=yes\n",
        "LockPersonality=yes\n", "RestrictRealtime=yes\n",
        "SystemCallArchitectures=native\n",
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(strstr(text, keys[i]), "heapd.service lacks %s",
                      keys[i]);
}
END_TEST

static bool file_exists(void *path, char *seen, size_t seen_len)
{
    snprintf(seen, seen_len, "no %s", (const char *)path);
    return access(path, F_OK) == 0;
}

struct activated_connect {
    const char *sock;
    heapd_client *c;
    int rc;
    char error[256];
};

static bool connect_not_refused(void *arg, char *seen, size_t seen_len)
{
    struct activated_connect *ac = arg;
    heapd_connect_opts o = {.socket_path = ac->sock};
    ac->rc = heapd_connect(&ac->c, &o);
    snprintf(ac->error, sizeof ac->error, "%s", heapd_last_error());
    snprintf(seen, seen_len, "%s", ac->error);
    return ac->rc != HEAPD_ENODAEMON;
}

/* systemd-socket-activate binds the socket and execs heapd on the first
 * connection with LISTEN_FDS=1; heapd must serve on that fd. */
START_TEST(socket_activation)
{
    char dir[64], sock[108], conf[128];
    ck_assert_msg(access("/usr/bin/systemd-socket-activate", X_OK) == 0,
                  "systemd-socket-activate is missing: apt-get install "
                  "systemd");
    harness_tmpdir(dir, sizeof dir);
    snprintf(sock, sizeof sock, "%s/activated.sock", dir);
    snprintf(conf, sizeof conf, "%s/heapd.conf", dir);
    /* the config names another socket: the passed one must win */
    FILE *f = fopen(conf, "w");
    fputs(harness_default_config("/nonexistent-dir/never.sock", NULL), f);
    fclose(f);

    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* -l binds before exec; we learn it is bound when the socket file
         * exists, which the parent waits for below */
        execl("/usr/bin/systemd-socket-activate", "systemd-socket-activate",
              "-l", sock, harness_bin("HEAPD_BIN"), "-c", conf, "--foreground",
              (char *)NULL);
        _exit(127);
    }
    harness_wait_until(file_exists, sock,
                       "systemd-socket-activate to bind the socket");

    /* the file appears at bind(), a moment before listen(): retry a
     * refused connect */
    struct activated_connect ac = {.sock = sock};
    harness_wait_until(connect_not_refused, &ac,
                       "systemd-socket-activate to listen on the socket");
    heapd_client *c = ac.c;
    ck_assert_msg(ac.rc == 0, "connect via activated socket: %s",
                  ac.error);
    ck_assert_ptr_eq(heapd_heap_base(c), (void *)HARNESS_HEAP_BASE);
    heapd_stats_t st;
    ck_assert_int_eq(heapd_stats(c, &st), 0);
    ck_assert_uint_eq(st.heap_count, 1);
    heapd_disconnect(c);

    kill(pid, SIGTERM);
    int s = harness_wait_pid(pid, HARNESS_WAIT_MS);
    ck_assert_msg(WIFEXITED(s) && WEXITSTATUS(s) == 0,
                  "heapd exited with status 0x%x", s);
    /* the activated socket file belongs to systemd: heapd leaves it */
    ck_assert_int_eq(access(sock, F_OK), 0);
    unlink(sock);
    unlink(conf);
    rmdir(dir);
}
END_TEST

static Suite *systemd_suite(void)
{
    Suite *s = suite_create("systemd");
    TCase *t = tcase_create("units");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, units_verify);
    tcase_add_test(t, unit_hardening_present);
    tcase_add_test(t, socket_activation);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(systemd_suite());
}
