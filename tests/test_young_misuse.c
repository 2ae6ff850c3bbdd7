/* Young generations misused (Note [Young objects, for the program] in
 * client/heapd.h), against a real heapd with the verifier on: a young
 * object handed to another mutator is named in checked mode and refused by
 * heapd otherwise (young_refs_refused), while a young mutator's own use
 * of its young objects passes every check; a forked child never promotes;
 * options out of range are refused. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "young_util.h"
#include "check_main.h"

/* Two threads of one process: a young mutator that allocates one young
 * object and hands it over, then waits blocked. */
struct young_owner {
    heapd_client *c;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void *obj;      /* the young object, once made */
    bool ready, done;
    char err[256];
};

static void *own_young(void *arg)
{
    struct young_owner *o = arg;
    heapd_mutator_opts opts = {.flags = HEAPD_MUTATOR_YOUNG};
    heapd_mutator *a;
    void *obj = NULL;
    if (heapd_attach_opts(o->c, &opts, &a) != 0) {
        snprintf(o->err, sizeof o->err, "young attach: %s",
                 heapd_last_error());
    } else {
        obj = new_node(a, 1, 6);
        if (!obj || !heapd_is_young(a, obj))
            snprintf(o->err, sizeof o->err, "no young object");
    }
    pthread_mutex_lock(&o->mu);
    o->obj = obj;
    o->ready = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    if (!obj)
        return NULL;
    heapd_blocking_enter(a);
    pthread_mutex_lock(&o->mu);
    while (!o->done)
        pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
    heapd_blocking_leave(a);
    heapd_detach(a);
    return NULL;
}

static void owner_start(struct young_owner *o, heapd_client *c, pthread_t *t)
{
    memset(o, 0, sizeof *o);
    o->c = c;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    if (pthread_create(t, NULL, own_young, o) != 0)
        return;
    pthread_mutex_lock(&o->mu);
    while (!o->ready)
        pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
}

static void owner_finish(struct young_owner *o, pthread_t t)
{
    pthread_mutex_lock(&o->mu);
    o->done = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(t, NULL);
}

enum misuse { GIVE_WRITE, GIVE_ROOT_PUSH, GIVE_GLOBAL_SET, OWN_OBJECTS };

static void kid_fail(const char *what)
{
    fprintf(stderr, "young misuse kid: %s\n", what);
    _exit(1);
}

/* A checked process that makes misuse WHAT; returns its wait status and
 * its stderr in ERR. */
static int run_checked(enum misuse what, char *err, size_t errlen)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        heapd_connect_opts co = {.socket_path = D.sock,
                                 .flags = HEAPD_CONNECT_CHECKED};
        heapd_client *c;
        heapd_mutator *b;
        if (heapd_connect(&c, &co) != 0)
            kid_fail(heapd_last_error());
        heap_lo = (uintptr_t)heapd_heap_base(c);
        heap_hi = heap_lo + heapd_heap_size(c);
        if (what == OWN_OBJECTS) {
            /* a young mutator's ordinary use of its own young objects
             * passes every check */
            heapd_mutator_opts opts = {.flags = HEAPD_MUTATOR_YOUNG};
            if (heapd_attach_opts(c, &opts, &b) != 0)
                kid_fail(heapd_last_error());
            void **y = new_node(b, 1, 8);
            if (!y || !heapd_is_young(b, y))
                kid_fail("no young object");
            size_t s = heapd_root_push(b, y);
            void **z = new_node(b, 1, 9);
            y = heapd_root_get(b, s);
            heapd_write(b, z, &z[0], y);
            heapd_root_set(b, s, z);
            if (!node_ok(heapd_root_get(b, s), 1, 9))
                kid_fail("the young node is damaged");
            void **w = new_node(b, 1, 10);
            if (!w || !heapd_cas(b, w, &w[0], NULL, z) ||
                heapd_publish(b, w) != w || heapd_is_young(b, w) ||
                heapd_is_young(b, z) || heapd_is_young(b, y))
                kid_fail("heapd_publish did not promote the young graph");
            void **v = new_node(b, 1, 11);
            void **shared = heapd_alloc_shared(b, 1, 0);
            if (!v || !shared)
                kid_fail("no object");
            heapd_write(b, shared, &shared[0], v);
            if (heapd_is_young(b, v) ||
                heapd_global_set(b, "own", heapd_root_get(b, s)) != 0)
                kid_fail(heapd_last_error());
            heapd_detach(b);
            heapd_disconnect(c);
            _exit(0);
        }
        if (heapd_attach(c, &b) != 0)
            kid_fail(heapd_last_error());
        void **s = heapd_alloc(b, 1, 0);
        if (!s || heapd_root_push(b, s) == (size_t)-1)
            kid_fail("no shared object");
        struct young_owner o;
        pthread_t t;
        heapd_blocking_enter(b);
        owner_start(&o, c, &t);
        heapd_blocking_leave(b);
        if (o.err[0])
            kid_fail(o.err);
        switch (what) {
        case GIVE_WRITE:
            heapd_write(b, s, &s[0], o.obj);
            break;
        case GIVE_ROOT_PUSH:
            heapd_root_push(b, o.obj);
            break;
        case GIVE_GLOBAL_SET:
            heapd_global_set(b, "stolen", o.obj);
            break;
        case OWN_OBJECTS:
            break;
        }
        _exit(0); /* the check did not fire */
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < errlen && (r = read(fds[0], err + n, errlen - 1 - n)) > 0)
        n += (size_t)r;
    err[n] = '\0';
    close(fds[0]);
    return harness_wait_pid(kid, HARNESS_WAIT_MS);
}

START_TEST(checked_mode_names_a_young_object_handed_over)
{
    static const struct {
        enum misuse what;
        const char *call;
    } cases[] = {
        {GIVE_WRITE, "heapd_write: VAL"},
        {GIVE_ROOT_PUSH, "heapd_root_push: REF"},
        {GIVE_GLOBAL_SET, "heapd_global_set: REF"},
    };
    char err[4096];
    harness_start_with(&D, NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int status = run_checked(cases[i].what, err, sizeof err);
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
                      "case %s: the checked process was not aborted "
                      "(status 0x%x): %s", cases[i].call, status, err);
        ck_assert_msg(strstr(err, cases[i].call) &&
                          strstr(err, "young object"),
                      "case %s: the message does not name the call and "
                      "'young object': %s", cases[i].call, err);
    }
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(checked_mode_passes_own_young_objects)
{
    char err[4096];
    harness_start_with(&D, NULL);
    int status = run_checked(OWN_OBJECTS, err, sizeof err);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "a checked young mutator using its own young objects "
                  "failed (status 0x%x): %s", status, err);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

#define OTHER_N 200

/* Another client's shared list under global "other", OTHER_N nodes. */
static void build_other_list(void)
{
    heapd_client *c = connect_plain(0);
    heapd_mutator *m;
    ck_assert_int_eq(heapd_attach(c, &m), 0);
    size_t r = heapd_root_push(m, NULL);
    for (uint64_t i = 0; i < OTHER_N; i++) {
        void **n = new_node(m, 1, 1000 + i);
        ck_assert_ptr_nonnull(n);
        heapd_write(m, n, &n[0], heapd_root_get(m, r));
        heapd_root_set(m, r, n);
    }
    ck_assert_int_eq(heapd_global_set(m, "other", heapd_root_get(m, r)), 0);
    heapd_detach(m);
    heapd_disconnect(c);
}

static void expect_other_list(heapd_mutator *m)
{
    uint64_t want = 1000 + OTHER_N - 1, n = 0;
    for (void *p = heapd_global_get(m, "other"); p; p = field(p, 0), n++)
        ck_assert_msg(n < OTHER_N && node_ok(p, 1, want - n),
                      "another client's list is damaged at node %llu",
                      (unsigned long long)n);
    ck_assert_uint_eq(n, OTHER_N);
}

/* Unchecked, the store lands; the daemon refuses to follow it and counts
 * it, and the verifier names the field; nobody else is harmed, and once
 * the field is cleared the heap is whole again. */
START_TEST(young_object_stored_by_another_mutator_is_refused)
{
    harness_start_with(&D, NULL);
    build_other_list();
    heapd_client *c = connect_plain(0);
    heapd_mutator *b;
    ck_assert_int_eq(heapd_attach(c, &b), 0);
    size_t ss = heapd_root_push(b, heapd_alloc(b, 1, 0));
    struct young_owner o;
    pthread_t t;
    heapd_blocking_enter(b);
    owner_start(&o, c, &t);
    heapd_blocking_leave(b);
    ck_assert_msg(o.err[0] == '\0', "the young thread: %s", o.err);
    void **s = heapd_root_get(b, ss);
    heapd_write(b, s, &s[0], o.obj);
    ck_assert_ptr_eq(field(s, 0), o.obj);
    heapd_stats_t st0 = harness_stats(c);
    harness_collect(b);
    heapd_stats_t st1 = harness_stats(c);
    ck_assert_msg(st1.young_refs_refused > st0.young_refs_refused,
                  "young_refs_refused %llu -> %llu",
                  (unsigned long long)st0.young_refs_refused,
                  (unsigned long long)st1.young_refs_refused);
    ck_assert_uint_eq(st1.bad_refs, st0.bad_refs);
    ck_assert_msg(st1.verify_failures > st0.verify_failures,
                  "the verifier did not report a shared object that "
                  "references a young object");
    expect_other_list(b);
    /* repaired: no more refusals, no more failures */
    s = heapd_root_get(b, ss);
    heapd_write(b, s, &s[0], NULL);
    harness_collect(b);
    heapd_stats_t st2 = harness_stats(c);
    harness_collect(b);
    heapd_stats_t st3 = harness_stats(c);
    ck_assert_uint_eq(st3.young_refs_refused, st2.young_refs_refused);
    ck_assert_uint_eq(st3.verify_failures, st2.verify_failures);
    ck_assert_uint_eq(st3.bad_refs, 0);
    expect_other_list(b);
    heapd_blocking_enter(b);
    owner_finish(&o, t);
    heapd_blocking_leave(b);
    heapd_detach(b);
    heapd_disconnect(c);
    harness_still_serving(D.sock); /* fails the test if heapd is gone */
    harness_stop_clean(&D);
}
END_TEST

/* A child of fork() holding its parent's young mutator never promotes:
 * a promotion writes headers and marks of the parent's segments, which
 * are not the child's to change (Note [Clients and fork] in
 * client/agent.c).  Its store puts the young address there as it is,
 * which the parent then takes back out. */
START_TEST(forked_child_never_promotes)
{
    harness_start_with(&D, NULL);
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = attach_young(c, 0, 0);
    size_t ss = heapd_root_push(m, new_shared_node(m, 1, 1));
    void **y1 = new_node(m, 0, 3);
    void **y = new_node(m, 1, 2);
    ck_assert(y && y1);
    heapd_write(m, y, &y[0], y1);
    size_t sy = heapd_root_push(m, y);
    void **s = heapd_root_get(m, ss);
    ck_assert(still_young(c, m, y) && still_young(c, m, y1) &&
              !heapd_is_young(m, s));
    uint64_t pub = young_stats(m).promoted_published_bytes;
    uint64_t pub_daemon = harness_stats(c).promoted_published_bytes;
    heapd_blocking_enter(m);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        heapd_write(m, s, &s[0], y); /* shared memory: the parent sees it */
        (void)heapd_publish(m, y1);
        _exit(field(s, 0) != y ? 1 : !heapd_is_young(m, y) ? 2
                                   : !heapd_is_young(m, y1) ? 3 : 0);
    }
    int st = harness_wait_pid(kid, HARNESS_WAIT_MS);
    heapd_blocking_leave(m);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the forked child stored nothing, or promoted a young "
                  "value (status 0x%x)", (unsigned)st);
    ck_assert_ptr_eq(field(s, 0), y);
    /* the marks, headers and counters are shared: nothing changed */
    ck_assert_msg(still_young(c, m, y) && still_young(c, m, y1),
                  "the forked child promoted its parent's young objects "
                  "(marks %d, %d)", mark_of(c, y), mark_of(c, y1));
    ck_assert_uint_eq(layout_header_tag(((uint64_t *)y)[-1]), LAYOUT_YOUNG_TAG);
    ck_assert_uint_eq(young_stats(m).promoted_published_bytes, pub);
    ck_assert_uint_eq(harness_stats(c).promoted_published_bytes, pub_daemon);
    heapd_write(m, s, &s[0], NULL); /* the young address out again */
    ck_assert_ptr_eq(heapd_root_get(m, sy), y);
    ck_assert(node_ok(y, 1, 2) && node_ok(y1, 0, 3));
    ck_assert(still_young(c, m, y));
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* Note [Young budgets] in daemon/gc/heap.h: a budget of two segments to
 * max_size, within max_client_bytes; an age of 1 to 8. */
START_TEST(attach_opts_out_of_range)
{
    harness_start_with(&D, "max_client_bytes = 4M\n");
    heapd_client *c = connect_plain(0);
    heapd_mutator *m = NULL;
    heapd_mutator_opts o = {.flags = 0x80};
    ck_assert_int_eq(heapd_attach_opts(c, &o, &m), -EINVAL);
    ck_assert_ptr_null(m);
    o = (heapd_mutator_opts){.flags = HEAPD_MUTATOR_YOUNG, .young_age = 9};
    ck_assert_int_eq(heapd_attach_opts(c, &o, &m), -EINVAL);
    ck_assert_msg(strstr(heapd_last_error(), "young_age"), "%s",
                  heapd_last_error());
    /* less than two segments */
    o = (heapd_mutator_opts){.flags = HEAPD_MUTATOR_YOUNG,
                             .young_size = 64u << 10};
    int rc = heapd_attach_opts(c, &o, &m);
    ck_assert_msg(rc == -EINVAL, "a budget of one segment's half: %s (%d): "
                  "%s", heapd_strerror(rc), rc, heapd_last_error());
    /* more than the heap */
    o = (heapd_mutator_opts){.flags = HEAPD_MUTATOR_YOUNG,
                             .young_size = (size_t)2 << 30};
    rc = heapd_attach_opts(c, &o, &m);
    ck_assert_msg(rc == -EINVAL, "a budget of twice the heap: %s (%d): %s",
                  heapd_strerror(rc), rc, heapd_last_error());
    ck_assert_msg(strstr(heapd_last_error(), "max_size"), "%s",
                  heapd_last_error());
    /* more than the client's quota */
    o = (heapd_mutator_opts){.flags = HEAPD_MUTATOR_YOUNG,
                             .young_size = 8u << 20};
    rc = heapd_attach_opts(c, &o, &m);
    ck_assert_msg(rc == -ENOMEM, "a budget over max_client_bytes: %s (%d): "
                  "%s", heapd_strerror(rc), rc, heapd_last_error());
    ck_assert_msg(strstr(heapd_last_error(), "max_client_bytes"), "%s",
                  heapd_last_error());
    ck_assert_ptr_null(m);
    /* and the client attaches what fits, and gets what it asked */
    o = (heapd_mutator_opts){.flags = HEAPD_MUTATOR_YOUNG,
                             .young_size = 1u << 20, .young_age = 3};
    ck_assert_int_eq(heapd_attach_opts(c, &o, &m), 0);
    heapd_young_stats y = young_stats(m);
    ck_assert_uint_eq(y.young_bytes, 1u << 20);
    ck_assert_uint_eq(y.young_age, 3);
    void **n = new_node(m, 0, 1);
    ck_assert(n && still_young(c, m, n));
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("young_misuse");
    TCase *t = tcase_create("misuse");
    tcase_add_test(t, checked_mode_names_a_young_object_handed_over);
    tcase_add_test(t, checked_mode_passes_own_young_objects);
    tcase_add_test(t, young_object_stored_by_another_mutator_is_refused);
    tcase_add_test(t, forked_child_never_promotes);
    tcase_add_test(t, attach_opts_out_of_range);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
