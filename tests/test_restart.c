/* Heaps across restarts (Note [Heaps across restarts] in daemon/fdstore.c,
 * Note [Saved state] in daemon/state.c): the harness plays the service
 * manager's fd store; a heap survives a clean restart with every object a
 * global holds, a client connected at the restart is dropped and the heap
 * still recovered, and a heap whose state is missing (heapd was killed),
 * damaged, truncated or of another version is refused, kept for an
 * operator, and started empty. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "check_main.h"

static struct daemon_proc D;

#define NODES 2000
#define MAGIC 0x7265737461727421ull

struct node {
    void *next;
    uint64_t index, check;
};

static void start(void)
{
    harness_start_logged(&D, harness_default_config("@SOCK@",
                                                    "verify = true\n"),
                         "heapd.log");
}

/* Under a temporary root, a list of NODES published as global "list". */
static void publish_list(heapd_mutator *m)
{
    size_t slot = heapd_root_push(m, NULL);
    ck_assert_uint_ne(slot, (size_t)-1);
    for (uint64_t i = 0; i < NODES; i++) {
        struct node *n = heapd_alloc(m, 1, 2 * sizeof(uint64_t));
        ck_assert_msg(n != NULL, "alloc: %s", heapd_last_error());
        n->index = i;
        n->check = i ^ MAGIC;
        heapd_write(m, n, &n->next, heapd_root_get(m, slot));
        heapd_root_set(m, slot, n);
        if (i % 3 == 0) /* and some garbage */
            ck_assert_ptr_nonnull(heapd_alloc(m, 0, 100));
    }
    ck_assert_int_eq(heapd_global_set(m, "list", heapd_root_get(m, slot)), 0);
    heapd_root_pop(m, 1);
}

/* The list under global "list" is whole: NODES nodes, newest first. */
static void check_list(heapd_mutator *m)
{
    struct node *p = heapd_global_get(m, "list");
    uint64_t n = 0;
    ck_assert_msg(p != NULL, "global 'list' is gone");
    for (; p; p = p->next, n++) {
        ck_assert_uint_eq(p->index, NODES - 1 - n);
        ck_assert_uint_eq(p->check, p->index ^ MAGIC);
    }
    ck_assert_uint_eq(n, NODES);
}

static void with_client(void (*body)(heapd_mutator *m))
{
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    body(m);
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    heapd_detach(m);
    heapd_disconnect(c);
}

static void no_list(heapd_mutator *m)
{
    ck_assert_ptr_null(heapd_global_get(m, "list"));
}

START_TEST(objects_survive_clean_restarts)
{
    start();
    with_client(publish_list);
    for (int round = 0; round < 3; round++) {
        harness_stop_clean(&D);
        ck_assert_int_eq(harness_stored(&D, "heapd.heap.default"), 1);
        ck_assert_int_eq(harness_stored(&D, "heapd.page.default"), 1);
        ck_assert_int_eq(harness_stored(&D, "heapd.state.default"), 1);
        harness_restart(&D);
        ck_assert_msg(harness_log_contains(&D, "'default': recovered"),
                      "heapd did not say it recovered the heap");
        /* the daemon is new, the heap is not */
        heapd_stats_t st = harness_daemon_stats(&D);
        ck_assert_uint_eq(st.restarts_survived, (uint64_t)round + 1);
        ck_assert_msg(st.heap_age_ns > st.uptime_ns, "the heap's age %llu ns "
                      "is not above the daemon's uptime %llu ns",
                      (unsigned long long)st.heap_age_ns,
                      (unsigned long long)st.uptime_ns);
        /* forgotten at once: a crash now must not bring it back */
        harness_drain_notify(&D);
        ck_assert_int_eq(harness_stored(&D, "heapd.state.default"), 0);
        with_client(check_list);
        /* and it goes on: a cycle, the verifier, more allocation */
        with_client(publish_list);
        with_client(check_list);
        harness_expect_healthy(&D);
    }
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* A client still connected when heapd stops: dropped (it leaves as a
 * crashed one), and what a global holds is recovered. */
/* The kid's body: publish, then wait in a blocking region. */
static void publish_and_block(heapd_mutator *m, void *arg)
{
    (void)arg;
    publish_list(m);
    heapd_blocking_enter(m);
}

START_TEST(client_connected_at_the_restart_is_dropped)
{
    start();
    pid_t kid = harness_fork_mutator(&D, publish_and_block, NULL);
    harness_stop_clean(&D);
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    harness_restart(&D);
    with_client(check_list);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* Restart after STOP (SIGKILL: no state saved), or after a clean stop
 * with the stored state changed by SPOIL: the heap is refused with WHY in
 * the log, kept for an operator, and started empty. */
static void refused_case(bool kill_it, void (*spoil)(int fd), const char *why)
{
    start();
    with_client(publish_list);
    if (kill_it) {
        harness_kill(&D);
        ck_assert_int_eq(harness_stored(&D, "heapd.state.default"), 0);
    } else {
        harness_stop_clean(&D);
        int fd = harness_stored_fd(&D, "heapd.state.default");
        ck_assert_int_ge(fd, 0);
        spoil(fd);
    }
    harness_restart(&D);
    ck_assert_msg(harness_log_contains(&D, "not recovered"),
                  "heapd did not say the heap was not recovered");
    ck_assert_msg(harness_log_contains(&D, why), "heapd's log does not say "
                  "'%s'", why);
    harness_drain_notify(&D);
    ck_assert_int_eq(harness_stored(&D, "heapd.lost-heap.default"), 1);
    ck_assert_int_eq(harness_stored(&D, "heapd.lost-page.default"), 1);
    ck_assert_int_eq(harness_stored(&D, "heapd.state.default"), 0);
    with_client(no_list);
    with_client(publish_list);
    with_client(check_list);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}

START_TEST(killed_daemon_leaves_the_heap_to_an_operator)
{
    refused_case(true, NULL, "did not save its state");
}
END_TEST

static void garbage(int fd)
{
    char junk[256];
    memset(junk, 0x5a, sizeof junk);
    ck_assert_int_eq(pwrite(fd, junk, sizeof junk, 0), (ssize_t)sizeof junk);
}

static void truncated(int fd)
{
    ck_assert_int_eq(ftruncate(fd, 100), 0);
}

static void newer_version(int fd)
{
    uint32_t v = 99;
    ck_assert_int_eq(pwrite(fd, &v, sizeof v, 8), (ssize_t)sizeof v);
}

static void flipped_byte(int fd)
{
    off_t at = 4096;
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, at), 1);
    b ^= 0xff;
    ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
}

START_TEST(garbage_state_is_refused)
{
    refused_case(false, garbage, "not heapd's");
}
END_TEST

START_TEST(truncated_state_is_refused)
{
    refused_case(false, truncated, "shorter than its header");
}
END_TEST

START_TEST(state_of_another_version_is_refused)
{
    refused_case(false, newer_version,
                 "version 99, and this heapd reads version 1");
}
END_TEST

START_TEST(damaged_state_is_refused)
{
    refused_case(false, flipped_byte, "checksum does not match");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("restart");
    TCase *t = tcase_create("restart");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, objects_survive_clean_restarts);
    tcase_add_test(t, client_connected_at_the_restart_is_dropped);
    tcase_add_test(t, killed_daemon_leaves_the_heap_to_an_operator);
    tcase_add_test(t, garbage_state_is_refused);
    tcase_add_test(t, truncated_state_is_refused);
    tcase_add_test(t, state_of_another_version_is_refused);
    tcase_add_test(t, damaged_state_is_refused);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
