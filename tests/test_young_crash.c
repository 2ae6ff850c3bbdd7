/* A young mutator killed halfway through each of its young phases (Note
 * [Stopping inside a young phase] in client/minor.c): a minor collection,
 * a publication, a preparatory push.  The kid builds young data (a rooted
 * list of YOUNG_LIST nodes, published subgraphs, shared objects), starts
 * the phase with HEAPD_YOUNG_STOP_IN set, stops itself there (SIGSTOP),
 * and the test SIGKILLs it.  Then: heapd is alive, counts one crashed
 * client, another client's data is whole, the verifier finds nothing, and
 * within a few cycles the heap's segments are back where they were before
 * the kid connected (Note [The young invariant]: what a publication or a
 * minor collection left half done -- young blocks, objects promoted in
 * place, marks of both kinds in one segment -- is unreachable, and heapd
 * frees a dead client's young blocks in the segments it takes back).
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "young_util.h"
#include "check_main.h"

#define YOUNG_LIST 1000     /* young nodes the kid roots */
#define OTHER_N 300         /* another client's shared list */

/* A kid's exit codes: any exit means it never stopped. */
enum kid_exit {
    KID_ATTACH = 10,   /* could not connect or attach */
    KID_BUILD,         /* an allocation or a push failed */
    KID_NO_STOP,       /* the phase ran to its end without stopping */
};

/* Push a chain of N young nodes (ids BASE...) onto M's stack; returns its
 * slot. */
static size_t young_chain(heapd_mutator *m, size_t n, uint64_t base)
{
    size_t s = heapd_root_push(m, NULL);
    if (s == (size_t)-1)
        _exit(KID_BUILD);
    for (size_t i = 0; i < n; i++) {
        void **x = new_node(m, 1, base + i);
        if (!x)
            _exit(KID_BUILD);
        heapd_write(m, x, &x[0], heapd_root_get(m, s));
        heapd_root_set(m, s, x);
    }
    return s;
}

/* The kid: young data, then PHASE started; READY gets the address of
 * its young list's head when the data is built. */
static void kid(const char *phase, int ready)
{
    /* read once, at the first place it could stop */
    setenv("HEAPD_YOUNG_STOP_IN", phase, 1);
    heapd_connect_opts co = {.socket_path = D.sock,
                             .flags = HEAPD_CONNECT_NO_RECONNECT};
    heapd_client *c;
    heapd_mutator *m;
    /* young_age 1 in a minor collection: it promotes the list's head by
     * age at its first root and stops before it has followed the list
     * (Note [Promotion in place]), so that the kill leaves a promoted
     * object that references young blocks */
    bool minor = strcmp(phase, "minor") == 0;
    heapd_mutator_opts mo = {.flags = HEAPD_MUTATOR_YOUNG,
                             .young_age = minor ? 1 : 0};
    if (heapd_connect(&c, &co) != 0 || heapd_attach_opts(c, &mo, &m) != 0)
        _exit(KID_ATTACH);
    /* the young list in the first root slot, which a young phase reaches
     * before it stops halfway through the roots */
    size_t sl = young_chain(m, YOUNG_LIST, 0);
    /* shared objects, rooted by this mutator only */
    void **s = heapd_alloc_shared(m, 8, 0);
    if (!s)
        _exit(KID_BUILD);
    size_t ss = heapd_root_push(m, s);
    for (size_t k = 4; k < 8; k++) {
        void **x = heapd_alloc_shared(m, 1, 64);
        s = heapd_root_get(m, ss);
        if (!x)
            _exit(KID_BUILD);
        heapd_write(m, s, &s[k], x);
    }
    bool publish = strcmp(phase, "publish") == 0;
    if (!publish) {
        /* published subgraphs (for "publish", the first publication of
         * more than one object is the one that stops) */
        for (size_t k = 0; k < 4; k++) {
            size_t st = young_chain(m, 20, 100000 + 100 * k);
            s = heapd_root_get(m, ss);
            heapd_write(m, s, &s[k], heapd_root_get(m, st));
            heapd_root_pop(m, 1);
        }
    }
    void *head = heapd_root_get(m, sl);
    if (write(ready, &head, sizeof head) != (ssize_t)sizeof head)
        _exit(KID_BUILD);
    close(ready);
    heapd_young_stats y;
    if (minor) {
        heapd_young_stats_get(m, &y);
        uint64_t minors = y.minor_collections;
        while (y.minor_collections == minors) {
            if (!heapd_alloc(m, 0, 48))
                _exit(KID_BUILD);
            heapd_young_stats_get(m, &y);
        }
    } else if (publish) {
        /* the whole young list at once */
        (void)heapd_publish(m, heapd_root_get(m, sl));
    } else {
        /* the test starts cycles; each snapshot's stop ends in the stack
         * handshake, the push, unless heapd took it first */
        for (;;) {
            heapd_safepoint(m);
            if (heapd_root_push(m, NULL) == (size_t)-1)
                _exit(KID_BUILD);
            heapd_root_pop(m, 1);
        }
    }
    _exit(KID_NO_STOP);
}

/* Another client's list under global "other", then it leaves. */
static void build_other_list(void)
{
    heapd_client *c = connect_plain(0);
    heapd_mutator *m;
    ck_assert_int_eq(heapd_attach(c, &m), 0);
    size_t r = heapd_root_push(m, NULL);
    for (uint64_t i = 0; i < OTHER_N; i++) {
        void **n = new_shared_node(m, 1, 5000 + i);
        ck_assert_ptr_nonnull(n);
        heapd_write(m, n, &n[0], heapd_root_get(m, r));
        heapd_root_set(m, r, n);
    }
    ck_assert_int_eq(heapd_global_set(m, "other", heapd_root_get(m, r)), 0);
    heapd_detach(m);
    heapd_disconnect(c);
}

static void expect_other_list(void)
{
    heapd_client *c = connect_plain(0);
    heapd_mutator *m;
    ck_assert_int_eq(heapd_attach(c, &m), 0);
    uint64_t n = 0;
    for (void *p = heapd_global_get(m, "other"); p; p = field(p, 0), n++)
        ck_assert_msg(n < OTHER_N && node_ok(p, 1, 5000 + OTHER_N - 1 - n),
                      "another client's list is damaged at node %llu",
                      (unsigned long long)n);
    ck_assert_uint_eq(n, OTHER_N);
    heapd_detach(m);
    heapd_disconnect(c);
}

/* Where the kid stopped, as its young list from HEAD shows it (read in
 * C's mapping of the heap): a minor collection at young_age 1 has
 * promoted the head, which its first root reaches, and not yet followed
 * it; a publication of the list has promoted the head and the node it
 * reached first; a preparatory push promotes nothing (Note [Promotion in
 * place] in client/minor.c).  The rest is young. */
static void expect_stopped_list(heapd_client *c, const char *phase,
                                void *head)
{
    size_t promoted_n = strcmp(phase, "minor") == 0     ? 1
                        : strcmp(phase, "publish") == 0 ? 2
                                                        : 0;
    size_t n = 0;
    for (void *p = head; p && n < YOUNG_LIST; p = field(p, 0), n++) {
        int mk = mark_of(c, p);
        bool want_promoted = n < promoted_n;
        ck_assert_msg(node_ok(p, 1, YOUNG_LIST - 1 - n),
                      "%s: node %zu of the stopped kid's list is damaged",
                      phase, n);
        ck_assert_msg(want_promoted ? mk > 0 && layout_mark_is_epoch(
                                                    (uint8_t)mk)
                                    : mk == LAYOUT_MARK_YOUNG,
                      "%s: node %zu of the stopped kid's list has the mark "
                      "%d, not %s", phase, n, mk,
                      want_promoted ? "an epoch" : "young");
    }
    ck_assert_uint_eq(n, YOUNG_LIST);
}

struct segs {
    uint64_t free, owned, filled;
};

static struct segs segs_of(heapd_client *ctl)
{
    heapd_stats_t st = harness_stats(ctl);
    return (struct segs){st.segments_free, st.segments_owned,
                         st.segments_filled};
}

struct back_to {
    heapd_client *ctl;
    struct segs want;
};

/* One more whole cycle; then are the segments as they were? */
static bool segments_back(void *arg, char *seen, size_t n)
{
    struct back_to *b = arg;
    ck_assert_int_eq(heapd_request_collect(b->ctl, HEAPD_COLLECT_WAIT), 0);
    struct segs s = segs_of(b->ctl);
    snprintf(seen, n, "free %llu owned %llu filled %llu, before the kid "
             "free %llu owned %llu filled %llu",
             (unsigned long long)s.free, (unsigned long long)s.owned,
             (unsigned long long)s.filled, (unsigned long long)b->want.free,
             (unsigned long long)b->want.owned,
             (unsigned long long)b->want.filled);
    return s.free == b->want.free && s.owned == b->want.owned &&
           s.filled == b->want.filled;
}

struct stop_wait {
    pid_t kid;
    heapd_client *ctl;
    bool cycles;        /* the phase needs snapshots: ask for them */
    int status;
};

/* Has the kid stopped itself?  A kid that exited fails the test. */
static bool kid_stopped(void *arg, char *seen, size_t n)
{
    struct stop_wait *w = arg;
    pid_t r = waitpid(w->kid, &w->status, WUNTRACED | WNOHANG);
    ck_assert_int_ge(r, 0);
    if (r == w->kid) {
        ck_assert_msg(WIFSTOPPED(w->status), "the kid ended before it "
                      "stopped (status 0x%x, exit %d)", w->status,
                      WIFEXITED(w->status) ? WEXITSTATUS(w->status) : -1);
        return true;
    }
    if (w->cycles)
        ck_assert_int_eq(heapd_request_collect(w->ctl, 0), 0);
    snprintf(seen, n, "the kid runs");
    return false;
}

static void killed_in(const char *phase)
{
    harness_start_with(&D, "young_size = 512K\n"
                           /* the test, not heapd, ends the stopped kid */
                           "stall_timeout = 3600s\n");
    heapd_client *ctl = harness_control(&D);
    build_other_list();
    /* a blocked mutator with a deep stack: heapd marks its stack before
     * the kid's (a lower slot), so that the kid's own handshake, the
     * push, usually wins */
    heapd_client *hc = connect_plain(0);
    heapd_mutator *helper = deep_blocked_helper(hc);
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    ck_assert_int_eq(heapd_request_collect(ctl, HEAPD_COLLECT_WAIT), 0);
    struct segs before = segs_of(ctl);
    uint64_t crashed = harness_stats(ctl).clients_crashed;

    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t k = fork();
    ck_assert_int_ge(k, 0);
    if (k == 0) {
        close(ready[0]);
        kid(phase, ready[1]);
    }
    close(ready[1]);
    void *head;
    ck_assert_msg(read(ready[0], &head, sizeof head) == (ssize_t)sizeof head,
                  "the kid died building its young data");
    close(ready[0]);
    struct stop_wait w = {.kid = k, .ctl = ctl,
                          .cycles = strcmp(phase, "push") == 0};
    char what[96];
    snprintf(what, sizeof what, "the young kid to stop itself in its %s",
             phase);
    harness_wait_until(kid_stopped, &w, what);
    expect_stopped_list(hc, phase, head);
    ck_assert_int_eq(kill(k, SIGKILL), 0);
    int st = harness_wait_pid(k, HARNESS_WAIT_MS);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                  "the kid was not killed (status 0x%x)", st);

    harness_wait_stat(&D, ctl, clients_crashed, >=, crashed + 1);
    ck_assert_uint_eq(harness_stats(ctl).clients_crashed, crashed + 1);
    harness_still_serving(D.sock);
    expect_other_list();
    harness_expect_healthy(&D);
    struct back_to b = {ctl, before};
    harness_wait_until(segments_back, &b, "the heap's segments to be back "
                       "where they were before the kid connected");
    harness_expect_healthy(&D);
    expect_other_list();
    helper_leave(helper);
    heapd_disconnect(hc);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}

START_TEST(killed_in_minor_collection)
{
    killed_in("minor");
}
END_TEST

START_TEST(killed_in_publication)
{
    killed_in("publish");
}
END_TEST

START_TEST(killed_in_preparatory_push)
{
    killed_in("push");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("young_crash");
    TCase *t = tcase_create("kill");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, killed_in_minor_collection);
    tcase_add_test(t, killed_in_publication);
    tcase_add_test(t, killed_in_preparatory_push);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
