/* Heaps across restarts (Note [Heaps across restarts] in daemon/fdstore.c,
 * Note [The live table] in daemon/gc/table.c): the harness plays the
 * service manager's fd store; a heap survives a clean restart with every
 * object a global holds, from its table sealed at the stop, and a
 * restart after a kill from the table as the kill left it; a client
 * connected at either resumes; a sealed table stored into after its seal
 * is recovered as after a kill; one sealed while an evicted young
 * client's segments were fenced comes back without its young blocks; a
 * table damaged or of another version, and the heap of the release
 * before, are not served and left in the store untouched, until heapctl
 * drop gives them up; a heap of another layout is served again by a
 * heapd that reads it (Note [Heaps heapd cannot adopt] in
 * daemon/adopt.c). */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "harness.h"
#include "heapd.h"
#include "heapd_build.h"
#include "layout.h"
#include "wire.h"
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

/* Does heapd list client ID alive in the daemon's page (Note [Live
 * clients] in proto/layout.h)?  Asked by a client of this process. */
static bool listed_alive(uint64_t id)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    bool alive = layout_client_alive(heapd_heap_base(c), id);
    heapd_detach(m);
    heapd_disconnect(c);
    return alive;
}

/* The highest id heapd has listed in the daemon's page, and the least
 * id listed now other than KEPT's, as a client of this process sees them
 * (its own id among them). */
static void listed_ids(uint64_t kept, uint64_t *max, uint64_t *least)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    const struct layout_control *ctl = heapd_heap_base(c);
    *max = atomic_load(&ctl->live_id_max);
    *least = UINT64_MAX;
    for (unsigned i = 0; i < LAYOUT_LIVE_CLIENTS; i++) {
        uint64_t id = atomic_load(&ctl->live[i]);
        if (id && id != kept && id < *least)
            *least = id;
    }
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
        heapd_stats_t before = harness_daemon_stats(&D);
        harness_stop_clean(&D);
        ck_assert_int_eq(harness_stored(&D, "heapd.heap.default"), 1);
        ck_assert_int_eq(harness_stored(&D, "heapd.page.default"), 1);
        ck_assert_int_eq(harness_stored(&D, "heapd.table.default"), 1);
        ck_assert_int_eq(harness_stored(&D, "heapd.state.default"), 0);
        harness_restart(&D);
        ck_assert_msg(harness_log_contains(&D, "'default': recovered from "
                                           "the table the heapd before "
                                           "sealed at a clean stop"),
                      "heapd did not say it recovered the sealed heap");
        /* the daemon is new, the heap is not; nothing was lost, and no
         * verifying cycle ran */
        heapd_stats_t st = harness_daemon_stats(&D);
        ck_assert_uint_eq(st.restarts_survived, (uint64_t)round + 1);
        ck_assert_uint_eq(st.crashes_recovered, 0);
        ck_assert_uint_eq(st.cycles_completed, before.cycles_completed);
        ck_assert_uint_eq(st.segments_orphaned, before.segments_orphaned);
        ck_assert_uint_eq(st.segments_adopted, before.segments_adopted);
        ck_assert_msg(st.heap_age_ns > st.uptime_ns, "the heap's age %llu ns "
                      "is not above the daemon's uptime %llu ns",
                      (unsigned long long)st.heap_age_ns,
                      (unsigned long long)st.uptime_ns);
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

/* A heapd killed after a clean restart: the new heapd cleared the seal
 * with its first store, so the next one recovers the heap as after a
 * kill (its verifying cycles run), never as the clean stop left it. */
START_TEST(kill_after_a_clean_restart_is_a_kill)
{
    start();
    with_client(publish_list);
    harness_stop_clean(&D);
    harness_restart(&D);
    with_client(publish_list); /* the table changes after the seal */
    heapd_stats_t before = harness_daemon_stats(&D);
    harness_kill(&D);
    harness_restart(&D);
    ck_assert_msg(harness_log_contains(&D, "'default': recovered from the "
                                       "table as after a kill"),
                  "heapd did not recover the heap as after a kill");
    /* known by its clean word, which the first store cleared, not by a
     * checksum that the stores since no longer match */
    ck_assert_msg(!harness_log_contains(&D, "its checksum does not match"),
                  "the table still said it was sealed at a clean stop");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.restarts_survived, 2);
    ck_assert_uint_eq(st.crashes_recovered, 1);
    ck_assert_uint_eq(st.verify_failures, 0);
    ck_assert_uint_ge(st.cycles_completed, before.cycles_completed + 2);
    with_client(check_list);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* A client kept at a clean stop whose process dies while heapd is down:
 * the next heapd drops it (it leaves as a crashed one: Note [Resuming
 * clients] in daemon/resume.c), and what a global holds is recovered. */
static void publish_and_block(heapd_mutator *m, void *arg)
{
    (void)arg;
    publish_list(m);
    heapd_blocking_enter(m);
}

START_TEST(client_dead_at_the_restart_is_dropped)
{
    start();
    pid_t kid = harness_fork_mutator(&D, publish_and_block, NULL);
    uint64_t max_before, least;
    for (int i = 0; i < 10; i++) /* ids the heap has listed and dropped */
        listed_ids(0, &max_before, &least);
    harness_stop_clean(&D);
    ck_assert_int_eq(harness_stored(&D, "heapd.client.default.1"), 1);
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    harness_restart(&D);
    ck_assert_msg(harness_log_contains(&D, "did not live through it"),
                  "heapd did not say it dropped the dead client");
    ck_assert_msg(!listed_alive(1), "the dropped client is listed alive");
    /* Note [Live clients]: the new heapd gives no id the heap listed */
    uint64_t max_after;
    listed_ids(0, &max_after, &least);
    ck_assert_msg(least > max_before, "a new client got id %" PRIu64
                  " after a restart; the heap had listed up to %" PRIu64,
                  least, max_before);
    with_client(check_list);
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.clients_resumed, 0);
    ck_assert_uint_eq(st.clients_crashed, 1);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* ---- clients that resume (Note [Reconnecting] in client/agent.c) ---- */

enum resumer_exit {
    RESUMER_OK = 0,
    RESUMER_SETUP = 10,   /* connect, attach or the list failed */
    RESUMER_LIST,         /* its list is not whole after the restart */
    RESUMER_CALL,         /* a call after the restart failed */
    RESUMER_NOT_CLOSED,   /* a call that had to fail did not */
    RESUMER_MESSAGE,      /* ... or failed without saying why */
};

/* The list rooted in slot SLOT of M is whole. */
static bool list_whole(heapd_mutator *m, size_t slot)
{
    uint64_t n = 0;
    for (struct node *p = heapd_root_get(m, slot); p; p = p->next, n++)
        if (p->index != NODES - 1 - n || p->check != (p->index ^ MAGIC))
            return false;
    return n == NODES;
}

struct resumer {
    pid_t pid;
    int go;       /* the test writes a byte: heapd was restarted */
    uint64_t id;  /* its client id and token, as its Welcome gave them */
    uint8_t token[16];
};

/* In a kid: connect to heapd with RECONNECT_MS, attach (YOUNG: with a
 * small budget, so that the list is partly young and partly promoted
 * when heapd goes, Note [Young objects]) and push NODES nodes on a list
 * under a new root, whose slot goes to *SLOT; a young mutator's head must
 * be young.  Anything failing ends the kid (RESUMER_SETUP). */
static heapd_mutator *kid_start(unsigned reconnect_ms, bool young,
                                heapd_client **c, size_t *slot)
{
    heapd_connect_opts o = {.socket_path = D.sock,
                            .reconnect_ms = reconnect_ms};
    heapd_mutator_opts mo = {.flags = HEAPD_MUTATOR_YOUNG,
                             .young_size = 256 * 1024, .young_age = 3};
    heapd_mutator *m;
    if (heapd_connect(c, &o) != 0 ||
        heapd_attach_opts(*c, young ? &mo : NULL, &m) != 0)
        _exit(RESUMER_SETUP);
    *slot = heapd_root_push(m, NULL);
    for (uint64_t i = 0; i < NODES; i++) {
        struct node *n = heapd_alloc(m, 1, 2 * sizeof(uint64_t));
        if (!n)
            _exit(RESUMER_SETUP);
        n->index = i;
        n->check = i ^ MAGIC;
        heapd_write(m, n, &n->next, heapd_root_get(m, *slot));
        heapd_root_set(m, *slot, n);
    }
    if (young && !heapd_is_young(m, heapd_root_get(m, *slot)))
        _exit(RESUMER_SETUP);
    return m;
}

/* A kid that builds a list under its own root, says so, waits in a
 * blocking region for the test's word (heapd restarts meanwhile), and
 * then EXPECT: true, carries on as if nothing happened (its list whole,
 * allocation and a cycle work); false, sees its next call fail with
 * HEAPD_ECLOSED and a message containing SAYS. */
static bool resumer_young; /* the kid's mutator is young */

static struct resumer fork_resumer(bool expect, const char *says,
                                   unsigned reconnect_ms)
{
    int ready[2], go[2];
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(go), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        heapd_client *c;
        size_t slot;
        char b;
        close(ready[0]);
        close(go[1]);
        heapd_mutator *m = kid_start(reconnect_ms, resumer_young, &c, &slot);
        heapd_blocking_enter(m);
        if (write(ready[1], &c->client_id, sizeof c->client_id) !=
                (ssize_t)sizeof c->client_id ||
            write(ready[1], c->token, sizeof c->token) !=
                (ssize_t)sizeof c->token ||
            read(go[0], &b, 1) != 1)
            _exit(RESUMER_SETUP);
        heapd_blocking_leave(m);
        if (!expect) {
            int rc = heapd_collect(m, HEAPD_COLLECT_WAIT);
            if (rc != HEAPD_ECLOSED)
                _exit(RESUMER_NOT_CLOSED);
            _exit(strstr(heapd_last_error(), says) ? RESUMER_OK
                                                    : RESUMER_MESSAGE);
        }
        if (!list_whole(m, slot))
            _exit(RESUMER_LIST);
        for (int i = 0; i < 20000; i++) { /* new segments, new heapd */
            if (!heapd_alloc(m, 2, 48)) {
                fprintf(stderr, "resumer: heapd_alloc: %s (%s)\n",
                        strerror(errno), heapd_last_error());
                _exit(RESUMER_CALL);
            }
        }
        int rc = heapd_collect(m, HEAPD_COLLECT_WAIT);
        if (rc != 0) {
            fprintf(stderr, "resumer: heapd_collect: %s (%s)\n",
                    heapd_strerror(rc), heapd_last_error());
            _exit(RESUMER_CALL);
        }
        if (!list_whole(m, slot))
            _exit(RESUMER_LIST);
        heapd_root_pop(m, 1);
        heapd_detach(m);
        heapd_disconnect(c);
        _exit(RESUMER_OK);
    }
    close(ready[1]);
    close(go[0]);
    struct resumer k = {.pid = kid, .go = go[1]};
    ck_assert_msg(read(ready[0], &k.id, sizeof k.id) == (ssize_t)sizeof k.id &&
                      read(ready[0], k.token, sizeof k.token) ==
                          (ssize_t)sizeof k.token,
                  "the resuming kid died before it was ready");
    close(ready[0]);
    return k;
}

/* A Hello from this process that resumes client ID with TOKEN: the
 * daemon must refuse it with ERROR_NOT_RESUMED. */
static void resume_refused(uint64_t id, const uint8_t *token, size_t len)
{
    Heapd__Hello h = HEAPD__HELLO__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    h.protocol_version = PROTOCOL_VERSION;
    h.heap = (char *)"default";
    h.client_name = (char *)"thief";
    h.kind = HEAPD__CLIENT_KIND__CLIENT_MUTATOR;
    h.resume_client = id;
    h.resume_token.data = (uint8_t *)token;
    h.resume_token.len = len;
    env.body_case = HEAPD__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    int fd = harness_raw_connect(D.sock);
    harness_send_env(fd, &env);
    Heapd__Envelope *r = harness_read_env(fd, NULL);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->body_case, HEAPD__ENVELOPE__BODY_ERROR);
    ck_assert_int_eq(r->error->code, HEAPD__ERROR_CODE__ERROR_NOT_RESUMED);
    heapd__envelope__free_unpacked(r, NULL);
    close(fd);
}

static void resumer_ends(struct resumer k, const char *what)
{
    ck_assert_int_eq(write(k.go, "g", 1), 1);
    close(k.go);
    int st = harness_wait_pid(k.pid, HARNESS_WAIT_MS);
    ck_assert_msg(st != -1, "%s: the kid did not end within %d ms", what,
                  HARNESS_WAIT_MS);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == RESUMER_OK,
                  "%s: the kid ended with %d (signal %d)", what,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                  WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* A client connected across a clean restart is the same client after
 * it: its stack, its slot and its segments, without an error. */
START_TEST(client_connected_at_the_restart_resumes)
{
    start();
    struct resumer k = fork_resumer(true, NULL, 0);
    harness_stop_clean(&D);
    ck_assert_int_eq(harness_stored(&D, "heapd.client.default.1"), 1);
    harness_restart(&D);
    /* kept: alive all along, for its leases' sake */
    ck_assert_msg(listed_alive(k.id), "the kept client is not listed");
    resumer_ends(k, "resuming after a clean restart");
    ck_assert_msg(harness_log_contains(&D, "resumed after"),
                  "heapd did not say the client resumed");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.clients_resumed, 1);
    ck_assert_uint_eq(st.clients_crashed, 0);
    ck_assert_uint_eq(st.verify_failures, 0);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* The same for a client whose mutator is young: its young blocks stay in
 * its segments across the restart (Note [Young blocks of a client gone]
 * in daemon/gc/segment.c), its slot young with its budget (Note [Young
 * budgets] in daemon/gc/heap.h), and what they reference is kept by the
 * new heapd (Note [The daemon's preparatory push] in daemon/gc/mark.c),
 * after a clean restart and after a kill. */
START_TEST(young_client_resumes_after_a_restart)
{
    start();
    resumer_young = true;
    struct resumer k = fork_resumer(true, NULL, 0);
    harness_stop_clean(&D);
    harness_restart(&D);
    resumer_ends(k, "a young client resuming after a clean restart");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.clients_resumed, 1);
    ck_assert_uint_eq(st.clients_crashed, 0);
    ck_assert_uint_gt(st.minor_collections, 0);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

START_TEST(young_client_resumes_after_a_kill)
{
    start();
    resumer_young = true;
    struct resumer k = fork_resumer(true, NULL, 0);
    harness_kill(&D);
    harness_restart(&D);
    resumer_ends(k, "a young client connected when heapd was killed");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.clients_resumed, 1);
    ck_assert_uint_eq(st.crashes_recovered, 1);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* Another process of the same user cannot take a kept client over, with
 * its token or without: refused, and the client still resumes. */
START_TEST(a_kept_client_is_resumed_by_itself_only)
{
    start();
    struct resumer k = fork_resumer(true, NULL, 0);
    harness_stop_clean(&D);
    harness_restart(&D);
    uint8_t wrong[16];
    memcpy(wrong, k.token, sizeof wrong);
    wrong[7] ^= 1;
    resume_refused(k.id, wrong, sizeof wrong);      /* a guess */
    resume_refused(k.id, k.token, 8);               /* half of it */
    resume_refused(k.id, k.token, sizeof k.token);  /* stolen: another pid */
    resume_refused(k.id + 1, k.token, sizeof k.token);
    resumer_ends(k, "resuming after others tried to take it over");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.clients_resumed, 1);
    ck_assert_uint_eq(st.requests_refused, 4); /* each attempt counted */
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* A client that heapd does not keep (its table refused: the heap is not
 * served) is told so, never left waiting. */
static void garbage(int fd);

START_TEST(client_not_kept_is_told)
{
    start();
    struct resumer k = fork_resumer(false, "is not served", 0);
    harness_stop_clean(&D);
    garbage(harness_stored_fd(&D, "heapd.table.default"));
    harness_restart(&D);
    resumer_ends(k, "a client the new heapd does not keep");
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* A client connected when heapd is killed is kept from the live table's
 * registry (Note [Resuming clients]): it resumes as itself, and the
 * verifying cycles run once it is back (Note [Recovery cycles]). */
START_TEST(client_connected_at_a_kill_resumes)
{
    start();
    struct resumer k = fork_resumer(true, NULL, 0);
    harness_kill(&D);
    ck_assert_int_eq(harness_stored(&D, "heapd.client.default.1"), 1);
    harness_restart(&D);
    resumer_ends(k, "a client connected when heapd was killed");
    ck_assert_msg(harness_log_contains(&D, "recovered from the table"),
                  "heapd did not recover the heap from its table");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.clients_resumed, 1);
    ck_assert_uint_eq(st.crashes_recovered, 1);
    ck_assert_uint_eq(st.verify_failures, 0);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* heapd stops and does not come back: a call fails after reconnect_ms
 * with HEAPD_ECLOSED, saying so. */
START_TEST(client_gives_up_after_reconnect_ms)
{
    start();
    struct resumer k = fork_resumer(false, "did not come back within 300 ms",
                                    300);
    harness_stop_clean(&D);
    resumer_ends(k, "heapd never comes back");
    harness_forget_store(&D);
}
END_TEST

/* After SIGKILL heapd recovers the heap from its live table (Note [The
 * live table], Note [Recovery cycles]): what a global holds is whole, the
 * garbage is gone, the counters say so, and it goes on. */
START_TEST(killed_daemon_recovers_the_heap)
{
    start();
    with_client(publish_list);
    heapd_stats_t before = harness_daemon_stats(&D);
    harness_kill(&D);
    ck_assert_int_eq(harness_stored(&D, "heapd.state.default"), 0);
    ck_assert_int_eq(harness_stored(&D, "heapd.table.default"), 1);
    harness_restart(&D);
    ck_assert_msg(harness_log_contains(&D, "recovered from the table"),
                  "heapd did not say it recovered the heap from its table");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.crashes_recovered, 1);
    ck_assert_uint_eq(st.restarts_survived, 1);
    ck_assert_uint_eq(st.verify_failures, 0);
    ck_assert_msg(st.cycles_completed >= before.cycles_completed + 2,
                  "%llu cycles before the kill, %llu after the recovery: "
                  "the two recovery cycles did not run",
                  (unsigned long long)before.cycles_completed,
                  (unsigned long long)st.cycles_completed);
    ck_assert_uint_gt(st.recovery_ns, 0);
    with_client(check_list);
    with_client(publish_list);
    with_client(check_list);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* SIGKILL while a client holds segments and is in the middle of its
 * work: its segments are orphaned by the recovery as if it had crashed;
 * the client itself sees the connection end. */
static void publish_and_hold(heapd_mutator *m, void *arg)
{
    (void)arg;
    publish_list(m);
    for (int i = 0; i < 500; i++) /* owned segments, partly used */
        ck_assert_ptr_nonnull(heapd_alloc(m, 2, 40));
    heapd_blocking_enter(m);
}

START_TEST(killed_daemon_orphans_what_clients_held)
{
    start();
    pid_t kid = harness_fork_mutator(&D, publish_and_hold, NULL);
    harness_kill(&D);
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    harness_restart(&D);
    ck_assert_msg(harness_log_contains(&D, "recovered from the table"),
                  "heapd did not say it recovered the heap from its table");
    with_client(check_list);
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.verify_failures, 0);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* What heapd says of the unserved heap NAME (Note [Heaps heapd cannot
 * adopt] in daemon/adopt.c): to a client that names it (HEAPD_ENOHEAP), and
 * in heapctl stats, both holding WHY. */
static void expect_unserved(const char *name, const char *why)
{
    heapd_client *c = NULL;
    heapd_connect_opts o = {.socket_path = D.sock, .heap = name,
                            .flags = HEAPD_CONNECT_NO_RECONNECT};
    ck_assert_int_eq(heapd_connect(&c, &o), HEAPD_ENOHEAP);
    ck_assert_msg(strstr(heapd_last_error(), "is not served") &&
                      strstr(heapd_last_error(), why) &&
                      strstr(heapd_last_error(), "heapctl drop"),
                  "a client of heap '%s' was told: %s", name,
                  heapd_last_error());
    char cmd[512], out[16384], want[128];
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' stats",
             harness_bin("HEAPCTL_BIN"), D.sock);
    ck_assert_int_eq(harness_run(cmd, out, sizeof out), 0);
    snprintf(want, sizeof want, "%-16s NOT SERVED: ", name);
    ck_assert_msg(strstr(out, want) && strstr(out, why),
                  "heapctl stats says:\n%s", out);
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' stats --prometheus",
             harness_bin("HEAPCTL_BIN"), D.sock);
    ck_assert_int_eq(harness_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\nheapd_heaps_unserved 1\n"),
                  "heapctl stats --prometheus says:\n%s", out);
}

/* A hash of what the store keeps as NAME: the whole file, up to its
 * first 4 MiB (a heap's control area and first segments; the rest of a
 * 1 GiB heap is holes). */
static uint64_t stored_hash(const char *name)
{
    int fd = harness_stored_fd(&D, name);
    ck_assert_msg(fd >= 0, "the store holds no %s", name);
    uint64_t h = 1469598103934665603ull;
    static unsigned char buf[65536];
    for (off_t at = 0; at < (4 << 20);) {
        ssize_t got = pread(fd, buf, sizeof buf, at);
        ck_assert_int_ge(got, 0);
        if (got == 0)
            break;
        for (ssize_t i = 0; i < got; i++)
            h = (h ^ buf[i]) * 1099511628211ull;
        at += got;
    }
    return h;
}

/* The three memfds heapd keeps of heap NAME, hashed (stored_hash) */
struct kept_hash {
    uint64_t heap, page, table;
};

static struct kept_hash kept_hash(const char *heap)
{
    char n[3][96];
    snprintf(n[0], sizeof n[0], "heapd.heap.%s", heap);
    snprintf(n[1], sizeof n[1], "heapd.page.%s", heap);
    snprintf(n[2], sizeof n[2], "heapd.table.%s", heap);
    return (struct kept_hash){stored_hash(n[0]), stored_hash(n[1]),
                              stored_hash(n[2])};
}

static void expect_untouched(const char *heap, struct kept_hash before)
{
    struct kept_hash now = kept_hash(heap);
    ck_assert_msg(now.heap == before.heap, "heapd wrote heap '%s'", heap);
    ck_assert_msg(now.page == before.page, "heapd wrote the daemon's page "
                  "of heap '%s'", heap);
    ck_assert_msg(now.table == before.table, "heapd wrote the table of "
                  "heap '%s'", heap);
}

/* heapctl drop NAME, as heapd's own user: 0, or what heapctl printed */
static int heapctl_drop(const char *name, char *out, size_t n)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' drop '%s'",
             harness_bin("HEAPCTL_BIN"), D.sock, name);
    return harness_run(cmd, out, n);
}

static void release_before(int fd);

/* Restart, after a clean stop or a kill (KILLED), with the stored table
 * changed by SPOIL: the heap is not served, with WHY (and WHY_TOO, if not
 * NULL) in the log; its memfds stay in the store under their names (Note
 * [Heaps heapd cannot adopt]); heapctl drop gives it up and heapd serves
 * it empty. */
static void refused_case(bool killed, void (*spoil)(int fd), const char *why,
                         const char *why_too)
{
    start();
    with_client(publish_list);
    if (killed)
        harness_kill(&D);
    else
        harness_stop_clean(&D);
    int fd = harness_stored_fd(&D, "heapd.table.default");
    ck_assert_int_ge(fd, 0);
    spoil(fd);
    struct kept_hash spoiled = kept_hash("default");
    harness_restart(&D);
    ck_assert_msg(harness_log_contains(&D, "'default': not served: "),
                  "heapd did not say the heap is not served");
    ck_assert_msg(harness_log_contains(&D, why), "heapd's log does not say "
                  "'%s'", why);
    ck_assert_msg(!why_too || harness_log_contains(&D, why_too),
                  "heapd's log does not say '%s'", why_too);
    harness_drain_notify(&D);
    ck_assert_int_eq(harness_stored(&D, "heapd.heap.default"), 1);
    ck_assert_int_eq(harness_stored(&D, "heapd.page.default"), 1);
    ck_assert_int_eq(harness_stored(&D, "heapd.table.default"), 1);
    ck_assert_int_eq(harness_stored(&D, "heapd.lost-heap.default"), 0);
    expect_untouched("default", spoiled);
    expect_unserved("default", why);
    /* the saved state of an earlier release stays with the heap, until
     * the drop */
    if (spoil == release_before)
        ck_assert_int_eq(harness_stored(&D, "heapd.state.default"), 1);
    char out[4096];
    ck_assert_msg(heapctl_drop("default", out, sizeof out) == 0 &&
                      strstr(out, "heap default: given up"),
                  "heapctl drop: %s", out);
    ck_assert_msg(harness_log_contains(&D, "'default': dropped as heapctl "
                                       "asked"), "heapd did not log the drop");
    harness_drain_notify(&D);
    ck_assert_int_eq(harness_stored(&D, "heapd.state.default"), 0);
    with_client(no_list);
    with_client(publish_list);
    with_client(check_list);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}

static void garbage(int fd)
{
    char junk[256];
    memset(junk, 0x5a, sizeof junk);
    ck_assert_int_eq(pwrite(fd, junk, sizeof junk, 0), (ssize_t)sizeof junk);
}

static void newer_version(int fd)
{
    uint32_t v = 99;
    ck_assert_int_eq(pwrite(fd, &v, sizeof v, 8), (ssize_t)sizeof v);
}

/* A byte of the table's first page past the header's fields: in a record
 * the take-back checks no further (a free slot's) */
static void flipped_byte(int fd)
{
    off_t at = 4096;
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, at), 1);
    b ^= 0xff;
    ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
}

/* The table's bytes, whole, in a memfd nobody sealed, stored in its
 * place: heapd takes no table that may still change size */
static void unsealed_copy(int fd)
{
    struct stat sb;
    ck_assert_int_eq(fstat(fd, &sb), 0);
    int copy = memfd_create("heapd-test-table", MFD_CLOEXEC);
    ck_assert_int_ge(copy, 0);
    char buf[65536];
    for (off_t at = 0; at < sb.st_size;) {
        ssize_t got = pread(fd, buf, sizeof buf, at);
        ck_assert_int_gt(got, 0);
        ck_assert_int_eq(pwrite(copy, buf, (size_t)got, at), got);
        at += got;
    }
    harness_store_replace(&D, "heapd.table.default", copy);
    close(copy);
}

START_TEST(unsealed_table_is_refused)
{
    refused_case(false, unsealed_copy, "its table is not a sealed memfd",
                 NULL);
}
END_TEST

START_TEST(garbage_table_after_a_stop_is_refused)
{
    refused_case(false, garbage, "its table is not heapd's", NULL);
}
END_TEST

START_TEST(table_of_another_version_is_refused)
{
    refused_case(false, newer_version,
                 "its table is of version 99, and this heapd reads version 5 "
                 "only", NULL);
}
END_TEST

START_TEST(garbage_table_after_a_kill_is_refused)
{
    refused_case(true, garbage, "its table is not heapd's", NULL);
}
END_TEST

/* Restart after a clean stop with the sealed table changed by SPOIL
 * (given its fd): heapd says WHY (and WHY_TOO, if not NULL), recovers
 * the heap as after a kill (its verifying cycles run) and loses nothing. */
static void recovered_as_killed(void (*spoil)(int fd), const char *why,
                                const char *why_too)
{
    start();
    with_client(publish_list);
    heapd_stats_t before = harness_daemon_stats(&D);
    harness_stop_clean(&D);
    spoil(harness_stored_fd(&D, "heapd.table.default"));
    harness_restart(&D);
    ck_assert_msg(harness_log_contains(&D, why), "heapd's log does not say "
                  "'%s'", why);
    ck_assert_msg(!why_too || harness_log_contains(&D, why_too),
                  "heapd's log does not say '%s'", why_too);
    ck_assert_msg(harness_log_contains(&D, "'default': recovered from the "
                                       "table as after a kill"),
                  "heapd did not recover the heap as after a kill");
    ck_assert(!harness_log_contains(&D, "not recovered"));
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.crashes_recovered, 1);
    ck_assert_uint_eq(st.verify_failures, 0);
    ck_assert_uint_ge(st.cycles_completed, before.cycles_completed + 2);
    harness_drain_notify(&D);
    ck_assert_int_eq(harness_stored(&D, "heapd.lost-table.default"), 0);
    ck_assert_int_eq(harness_stored(&D, "heapd.state.default"), 0);
    with_client(check_list);
    with_client(publish_list);
    with_client(check_list);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}

/* Note [The live table]: the seal's checksum tells a store after it */
START_TEST(sealed_table_stored_into_is_recovered_as_killed)
{
    recovered_as_killed(flipped_byte, "its checksum does not match", NULL);
}
END_TEST

/* The heap of the release before: layout 13 (its epoch 254 is this
 * layout's young mark), its table of version 4, and the saved state of the
 * release before that beside them.  heapd refuses the heap's control area
 * before it reads its table (Note [The live table]), keeps the heap for an
 * operator, starts it empty, and drops the state unread. */
static void release_before(int fd)
{
    uint32_t v = 4, layout = 13;
    ck_assert_int_eq(pwrite(fd, &v, sizeof v, 8), (ssize_t)sizeof v);
    /* the control area's identity is in the daemon's page (Note [The
     * daemon's page]) */
    int page = harness_stored_fd(&D, "heapd.page.default");
    ck_assert_int_ge(page, 0);
    ck_assert_int_eq(pwrite(page, &layout, sizeof layout,
                            offsetof(struct layout_control, layout_version)),
                     (ssize_t)sizeof layout);
    int state = memfd_create("heapd:default:state", MFD_CLOEXEC);
    ck_assert_int_ge(state, 0);
    garbage(state);
    harness_store_keep(&D, "heapd.state.default", state);
    close(state);
}

#define OTHER_BASE 0x7ec000000000ull

/* with_client on heap NAME */
static void with_client_of(const char *name, void (*body)(heapd_mutator *m))
{
    heapd_client *c = NULL;
    heapd_mutator *m;
    heapd_connect_opts o = {.socket_path = D.sock, .heap = name};
    ck_assert_msg(heapd_connect(&c, &o) == 0, "connect to '%s': %s", name,
                  heapd_last_error());
    ck_assert_int_eq(heapd_attach(c, &m), 0);
    body(m);
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    heapd_detach(m);
    heapd_disconnect(c);
}

static void set_layout(const char *page_name, uint32_t layout)
{
    int page = harness_stored_fd(&D, page_name);
    ck_assert_int_ge(page, 0);
    ck_assert_int_eq(pwrite(page, &layout, sizeof layout,
                            offsetof(struct layout_control, layout_version)),
                     (ssize_t)sizeof layout);
}

static ino_t stored_inode(const char *name)
{
    struct stat sb;
    int fd = harness_stored_fd(&D, name);
    ck_assert_msg(fd >= 0, "the store holds no %s", name);
    ck_assert_int_eq(fstat(fd, &sb), 0);
    return sb.st_ino;
}

/* An upgrade across a layout change, played by the test: heap "other"
 * is kept as a heap of the next layout (its daemon's page says so).  The
 * heapd that cannot read it serves "default" with its objects, refuses
 * "other" saying why, and leaves every descriptor of "other" in the store
 * as it was, unwritten; a heapd that reads it (the same layout once more:
 * as the release that wrote it would) serves it again with every object
 * (Note [Heaps heapd cannot adopt] in daemon/adopt.c). */
START_TEST(heap_of_another_layout_is_kept_untouched)
{
    char conf[1024];
    snprintf(conf, sizeof conf, "verify = true\n[heap other]\nbase = 0x%llx\n"
             "max_size = 1G\nverify = true\n",
             (unsigned long long)OTHER_BASE);
    harness_start_logged(&D, harness_default_config("@SOCK@", conf),
                         "heapd.log");
    with_client(publish_list);
    with_client_of("other", publish_list);
    harness_stop_clean(&D);
    ino_t heap = stored_inode("heapd.heap.other");
    ino_t table = stored_inode("heapd.table.other");
    set_layout("heapd.page.other", LAYOUT_VERSION + 1);
    struct kept_hash kept = kept_hash("other");

    harness_restart(&D);
    char why[160];
    snprintf(why, sizeof why, "it is of layout version %u, and this heapd "
             "(%s) reads layout %u only", LAYOUT_VERSION + 1,
             HEAPD_VERSION, LAYOUT_VERSION);
    ck_assert_msg(harness_log_contains(&D, why), "heapd's log does not say "
                  "'%s'", why);
    expect_unserved("other", why);
    with_client(check_list);
    harness_expect_healthy(&D);
    harness_drain_notify(&D);
    ck_assert_uint_eq(stored_inode("heapd.heap.other"), heap);
    ck_assert_uint_eq(stored_inode("heapd.table.other"), table);
    expect_untouched("other", kept);
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' --heap other gc 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    ck_assert_msg(harness_run(cmd, out, sizeof out) != 0 &&
                      strstr(out, "heap 'other' is not served: it is of "
                                  "layout version"),
                  "heapctl --heap other gc says: %s", out);
    ck_assert_int_eq(harness_stored(&D, "heapd.lost-heap.other"), 0);
    /* only root and heapd's own user may give a heap up */
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        heapd_client *c = NULL;
        heapd_connect_opts o = {.socket_path = D.sock,
                                .flags = HEAPD_CONNECT_CONTROL};
        if (setgid(65534) < 0 || setuid(65534) < 0 ||
            heapd_connect(&c, &o) < 0)
            _exit(2);
        _exit(heapd_heap_drop(c, "other") == HEAPD_EDENIED ? 0 : 1);
    }
    int st;
    ck_assert_int_eq(waitpid(kid, &st, 0), kid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "an unprivileged drop was not refused (%#x)", st);
    harness_stop_clean(&D);

    set_layout("heapd.page.other", LAYOUT_VERSION);
    harness_restart(&D);
    with_client_of("other", check_list);
    with_client(check_list);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

START_TEST(heap_of_the_release_before_is_refused)
{
    refused_case(false, release_before, "it is of layout version 13, and "
                 "this heapd", NULL);
}
END_TEST

/* ---- a fence standing at a clean stop (Note [Evicted clients] in
 * daemon/stall.c) ---- */

/* A young mutator's kid, played by hand (struct harness_raw): three young
 * blocks in a segment it was granted; it says so through a pipe and stops
 * itself (SIGSTOP) with its slot RUNNING, so the next stop stalls on it.
 * Returns once it is stopped. */
static pid_t fork_young_and_stop(void)
{
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        struct harness_raw r;
        close(ready[0]);
        harness_raw_mutator(D.sock, &r);
        harness_raw_map(&r);
        harness_raw_young_mutator(&r, false);
        uint32_t seg = harness_raw_segment(&r, 2);
        for (uint32_t b = 0; b < 3; b++)
            harness_raw_young(&r, seg, b, NULL, NULL);
        if (write(ready[1], "r", 1) != 1)
            _exit(RESUMER_SETUP);
        for (;;)
            raise(SIGSTOP);
    }
    close(ready[1]);
    char r;
    ck_assert_msg(read(ready[0], &r, 1) == 1,
                  "the young kid died before its young blocks were made");
    close(ready[0]);
    int st;
    ck_assert_int_eq(waitpid(kid, &st, WUNTRACED), kid);
    ck_assert_msg(WIFSTOPPED(st), "the young kid ended (%#x) instead of "
                  "stopping", st);
    return kid;
}

/* Segments of heap "default" holding young blocks at the last sweep
 * (heapctl segments). */
static uint32_t young_segments(heapd_client *ctl)
{
    heapd_heap_segments seg;
    size_t n = 0;
    ck_assert_int_eq(heapd_segments(ctl, "default", &seg, 1, &n), 0);
    ck_assert_uint_eq(n, 1);
    return seg.young;
}

static void delete_list(heapd_mutator *m)
{
    ck_assert_int_eq(heapd_global_delete(m, "list"), 0);
}

/* A young client evicted while stopped: its segment, FILLED once it is
 * gone, keeps its young blocks while the fence stands (Note [Young blocks
 * of a client gone] in daemon/gc/segment.c).  heapd stops cleanly while
 * the fence stands (the process is alive, stopped).  The next heapd drops
 * the fence with the watch of the heapd that set it, frees those young
 * blocks, which no client it serves owns (Note [Recovering the segment
 * table]), says so, and takes the heap back as clean otherwise; what a
 * global holds for a client connected across the restart is whole.  The
 * evicted process dies later, unknown to the new heapd, and every segment
 * comes back. */
START_TEST(fenced_young_blocks_at_a_clean_restart)
{
    harness_start_logged(&D, harness_default_config("@SOCK@",
                         "verify = true\nstall_warn = 200ms\n"
                         "stall_timeout = 1s\nstall_action = evict\n"),
                         "heapd.log");
    pid_t healthy = harness_fork_mutator(&D, publish_and_block, NULL);
    pid_t young = fork_young_and_stop();
    /* the forks are done: the test's own client may start threads */
    heapd_client *ctl = harness_control(&D);
    ck_assert_int_eq(heapd_request_collect(ctl, 0), 0);
    harness_wait_stat(&D, ctl, clients_evicted, ==, 1);
    /* the stalled cycle ends without it, and the next sweeps its segment */
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t st = harness_stats(ctl);
    ck_assert_uint_gt(st.segments_fenced, 0);
    ck_assert_uint_eq(young_segments(ctl), 1); /* fenced, kept young */
    uint64_t crashed = st.clients_crashed; /* the eviction's */
    heapd_disconnect(ctl);

    harness_stop_clean(&D);
    int ws;
    ck_assert_msg(waitpid(young, &ws, WNOHANG) == 0,
                  "the evicted process was gone at the stop: no fence stood");
    /* the healthy client is kept, the evicted one is not */
    ck_assert_int_eq(harness_stored(&D, "heapd.client.default.1"), 1);
    ck_assert_int_eq(harness_stored(&D, "heapd.client.default.2"), 0);
    harness_restart(&D);
    ck_assert_msg(!harness_log_contains(&D, "not recovered"),
                  "the heap was refused after a clean stop with a fence");
    ck_assert_msg(harness_log_contains(&D, "3 young blocks were in "
                                       "segments no client owns"),
                  "heapd did not say it freed the evicted client's young "
                  "blocks");
    harness_drain_notify(&D);
    ck_assert_int_eq(harness_stored(&D, "heapd.lost-table.default"), 0);
    ck_assert_int_eq(harness_stored(&D, "heapd.table.default"), 1);
    harness_wait_stat(&D, NULL, clients_resumed, ==, 1);
    with_client(check_list);
    ctl = harness_control(&D);
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    st = harness_stats(ctl);
    ck_assert_uint_eq(st.restarts_survived, 1);
    ck_assert_uint_eq(st.crashes_recovered, 0);
    ck_assert_uint_eq(st.clients_crashed, crashed);
    ck_assert_uint_eq(st.verify_failures, 0);
    ck_assert_uint_eq(st.segments_fenced, 0);
    ck_assert_uint_eq(young_segments(ctl), 0);
    harness_expect_healthy(&D);

    /* the evicted process goes: nothing of the new heapd's was its */
    ck_assert_int_eq(kill(young, SIGKILL), 0);
    ck_assert_msg(harness_wait_pid(young, HARNESS_WAIT_MS) != -1,
                  "the evicted process was not reaped");
    ck_assert_int_eq(kill(healthy, SIGKILL), 0);
    ck_assert_msg(harness_wait_pid(healthy, HARNESS_WAIT_MS) != -1,
                  "the healthy client was not reaped");
    harness_wait_stat(&D, ctl, clients_crashed, ==, crashed + 1);
    with_client(delete_list);
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    st = harness_stats(ctl);
    ck_assert_uint_eq(st.segments_owned, 0);
    ck_assert_uint_eq(st.segments_filled, 0);
    ck_assert_uint_eq(st.segments_large, 0);
    ck_assert_uint_eq(st.segments_fenced, 0);
    ck_assert_uint_eq(young_segments(ctl), 0);
    harness_expect_healthy(&D);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("restart");
    TCase *t = tcase_create("restart");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, objects_survive_clean_restarts);
    tcase_add_test(t, kill_after_a_clean_restart_is_a_kill);
    tcase_add_test(t, client_dead_at_the_restart_is_dropped);
    tcase_add_test(t, client_connected_at_the_restart_resumes);
    tcase_add_test(t, a_kept_client_is_resumed_by_itself_only);
    tcase_add_test(t, young_client_resumes_after_a_restart);
    tcase_add_test(t, young_client_resumes_after_a_kill);
    tcase_add_test(t, client_not_kept_is_told);
    tcase_add_test(t, client_connected_at_a_kill_resumes);
    tcase_add_test(t, client_gives_up_after_reconnect_ms);
    tcase_add_test(t, killed_daemon_recovers_the_heap);
    tcase_add_test(t, killed_daemon_orphans_what_clients_held);
    tcase_add_test(t, garbage_table_after_a_stop_is_refused);
    tcase_add_test(t, unsealed_table_is_refused);
    tcase_add_test(t, table_of_another_version_is_refused);
    tcase_add_test(t, heap_of_another_layout_is_kept_untouched);
    tcase_add_test(t, garbage_table_after_a_kill_is_refused);
    tcase_add_test(t, sealed_table_stored_into_is_recovered_as_killed);
    tcase_add_test(t, heap_of_the_release_before_is_refused);
    tcase_add_test(t, fenced_young_blocks_at_a_clean_restart);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
