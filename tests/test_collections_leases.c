/* Leased delivery from the shared queue (heapd_collections.h:
 * heapd_queue_pop_lease, heapd_queue_ack; Note [Leased delivery] in
 * client/collections/queue.c) and the live clients it relies on (Note
 * [Live clients] in proto/layout.h), with real processes SIGKILLed on a
 * real heapd that runs its verifier after every cycle.
 *
 * The promise under test: a value leased by a consumer that dies, or
 * whose lease runs out, is delivered again, once, ahead of every value
 * pushed after it; one acked is never delivered again; so a word-count
 * pool whose consumers are killed after any of their pops counts every
 * chunk exactly once, with no bookkeeping of its own.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll_util.h"
#include "collections.h"
#include "harness.h"
#include "heapd.h"
#include "heapd_collections.h"
#include "layout.h"
#include "check_main.h"

/* ---- the live clients ---- */

static const struct layout_control *control_of(heapd_client *c)
{
    return heapd_heap_base(c);
}

/* The ids listed alive in CTL, into OUT (at most LAYOUT_LIVE_CLIENTS). */
static size_t live_ids(const struct layout_control *ctl, uint64_t *out)
{
    size_t n = 0;
    for (unsigned i = 0; i < LAYOUT_LIVE_CLIENTS; i++) {
        uint64_t id = atomic_load(&ctl->live[i]);
        if (id)
            out[n++] = id;
    }
    return n;
}

static uint64_t live_ids_buf[2][LAYOUT_LIVE_CLIENTS];

/* The one id in NOW's list that is not in WAS's: a client that came. */
static uint64_t new_id(const uint64_t *was, size_t nwas, const uint64_t *now,
                       size_t nnow)
{
    uint64_t found = 0;
    for (size_t i = 0; i < nnow; i++) {
        bool old = false;
        for (size_t j = 0; j < nwas; j++)
            old |= was[j] == now[i];
        if (!old) {
            ck_assert_msg(found == 0, "two clients came, one expected");
            found = now[i];
        }
    }
    ck_assert_msg(found != 0, "no client came into the live list");
    return found;
}

struct gone_wait {
    const struct layout_control *ctl;
    uint64_t id;
    uint32_t gen;
};

static bool id_gone(void *arg, char *seen, size_t n)
{
    struct gone_wait *w = arg;
    if (!layout_client_alive(w->ctl, w->id) &&
        atomic_load(&w->ctl->live_gen) != w->gen)
        return true;
    snprintf(seen, n, "client %" PRIu64 " %s, live_gen %u", w->id,
             layout_client_alive(w->ctl, w->id) ? "listed" : "gone",
             atomic_load(&w->ctl->live_gen));
    return false;
}

static int listed_body(heapd_mutator *m, void *arg, int fd)
{
    (void)m;
    (void)arg;
    send_u64(fd, 1);
    pause(); /* until killed */
    return 0;
}

/* Note [Live clients]: a client is listed from its Welcome on, the test
 * process too, and once SIGKILLed it leaves the list, live_gen moving. */
START_TEST(live_clients_listed)
{
    coll_start();
    int fd, go;
    pid_t k = fork_kid(listed_body, NULL, false, &fd, &go, NULL);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    const struct layout_control *ctl = control_of(c);
    size_t nwas = live_ids(ctl, live_ids_buf[0]);
    ck_assert_uint_eq(nwas, 1); /* this process */
    kid_go(go);
    ck_assert_uint_eq(recv_u64(fd, "attached"), 1);
    size_t nnow = live_ids(ctl, live_ids_buf[1]);
    ck_assert_uint_eq(nnow, 2);
    struct gone_wait w = {ctl, new_id(live_ids_buf[0], nwas,
                                      live_ids_buf[1], nnow),
                          atomic_load(&ctl->live_gen)};
    ck_assert(layout_client_alive(ctl, live_ids_buf[0][0]));
    ck_assert_int_eq(kill(k, SIGKILL), 0);
    harness_wait_pid(k, HARNESS_WAIT_MS);
    close(fd);
    harness_wait_until(id_gone, &w, "the killed client's id to leave the "
                                    "live list");
    ck_assert(layout_client_alive(ctl, live_ids_buf[0][0]));
    coll_finish(c, m, 0);
}
END_TEST

/* ---- one process ---- */

static void *chunk(heapd_mutator *m, unsigned i)
{
    char s[64];
    snprintf(s, sizeof s, "chunk%02u the cat sat on the mat", i);
    void *v = heapd_str_new(m, s, strlen(s));
    ck_assert_ptr_nonnull(v);
    return v;
}

/* Chunk I's number, or -1 if V is no chunk. */
static int chunk_no(const void *v)
{
    unsigned i;
    if (!v || !heapd_is_str(v) ||
        sscanf(heapd_str_data(v), "chunk%02u ", &i) != 1)
        return -1;
    return (int)i;
}

static size_t queue_with(heapd_mutator *m, unsigned n)
{
    size_t r = heapd_root_push(m, heapd_queue_new(m));
    ck_assert_ptr_nonnull(heapd_root_get(m, r));
    ck_assert_int_eq(heapd_global_set(m, "t.queue", heapd_root_get(m, r)), 0);
    for (unsigned i = 0; i < n; i++)
        ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r),
                                          chunk(m, i)),
                         0);
    return r;
}

/* A consumer kid running BODY (stopping at HOOK, if not NULL) and this
 * process attached with a queue of 3 chunks; the kid has leased chunk 0
 * when this returns.  *FD reads the kid's reports. */
static pid_t leasing_kid(int (*body)(heapd_mutator *, void *, int),
                         const char *hook, int *fd,
                         heapd_client **c, heapd_mutator **m, size_t *r)
{
    int go;
    pid_t k = fork_kid(body, NULL, false, fd, &go, hook);
    harness_attach(&D, c, m);
    *r = queue_with(*m, 3);
    kid_go(go);
    ck_assert_int_eq(recv_u64(*fd, "the chunk leased"), 0);
    return k;
}

/* What the calls do and refuse, a lease that runs out, and a closed
 * queue that waits for its leases. */
START_TEST(leases)
{
    coll_start();
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t r = queue_with(m, 3);
    heapd_lease l0, l1, l2;
    /* refusals */
    errno = 0;
    ck_assert_ptr_null(heapd_queue_pop_lease(m, heapd_root_get(m, r), 0,
                                             NULL));
    ck_assert_int_eq(errno, EINVAL);
    void *s = chunk(m, 99);
    errno = 0;
    ck_assert_ptr_null(heapd_queue_pop_lease(m, s, 0, &l0));
    ck_assert_int_eq(errno, EINVAL);
    /* leased: out of the length, in the leases */
    ck_assert_int_eq(chunk_no(heapd_queue_pop_lease(m, heapd_root_get(m, r),
                                                    0, &l0)),
                     0);
    ck_assert_uint_eq(heapd_queue_length(heapd_root_get(m, r)), 2);
    ck_assert_uint_eq(heapd_queue_leases(heapd_root_get(m, r)), 1);
    ck_assert_int_eq(chunk_no(heapd_queue_pop(m, heapd_root_get(m, r))), 1);
    ck_assert_int_eq(heapd_queue_ack(m, heapd_root_get(m, r), &l0), 0);
    ck_assert_uint_eq(heapd_queue_leases(heapd_root_get(m, r)), 0);
    ck_assert_int_eq(heapd_queue_ack(m, heapd_root_get(m, r), &l0), -EINVAL);
    ck_assert_int_eq(heapd_queue_ack(m, s, &l0), -EINVAL);
    ck_assert_int_eq(heapd_queue_ack(m, heapd_root_get(m, r), NULL), -EINVAL);
    /* a lease of 30 ms runs out: a waiting pop wakes for it (no push
     * wakes it: chunk 2 is the queue's last), and the ack of the lease
     * that ran out fails */
    ck_assert_int_eq(chunk_no(heapd_queue_pop_lease(m, heapd_root_get(m, r),
                                                    30, &l1)),
                     2);
    heapd_lease l1_copy = l1;
    ck_assert_int_eq(chunk_no(heapd_queue_pop_lease_wait(
                         m, heapd_root_get(m, r), 0, HARNESS_WAIT_MS, &l2)),
                     2);
    ck_assert_int_eq(heapd_queue_ack(m, heapd_root_get(m, r), &l1_copy),
                     -ESTALE);
    ck_assert_uint_eq(heapd_queue_leases(heapd_root_get(m, r)), 1);
    ck_assert_int_eq(heapd_queue_ack(m, heapd_root_get(m, r), &l2), 0);
    for (unsigned i = 3; i < 6; i++)
        ck_assert_int_eq(heapd_queue_push(m, heapd_root_get(m, r),
                                          chunk(m, i)),
                         0);
    /* no deadline, no death: it stays leased */
    ck_assert_int_eq(chunk_no(heapd_queue_pop_lease(m, heapd_root_get(m, r),
                                                    0, &l1)),
                     3);
    ck_assert_int_eq(chunk_no(heapd_queue_pop(m, heapd_root_get(m, r))), 4);
    ck_assert_int_eq(chunk_no(heapd_queue_pop(m, heapd_root_get(m, r))), 5);
    /* closed with a lease out: pops wait for it, not ESHUTDOWN */
    ck_assert_int_eq(heapd_queue_close(m, heapd_root_get(m, r)), 0);
    errno = 0;
    ck_assert_ptr_null(heapd_queue_pop(m, heapd_root_get(m, r)));
    ck_assert_int_eq(errno, EAGAIN);
    errno = 0;
    ck_assert_ptr_null(heapd_queue_pop_wait(m, heapd_root_get(m, r), 20));
    ck_assert_int_eq(errno, ETIMEDOUT);
    harness_collect(m); /* the leased node lives through a cycle */
    ck_assert_int_eq(heapd_queue_ack(m, heapd_root_get(m, r), &l1), 0);
    errno = 0;
    ck_assert_ptr_null(heapd_queue_pop_lease(m, heapd_root_get(m, r), 0,
                                             &l1));
    ck_assert_int_eq(errno, ESHUTDOWN);
    ck_assert_uint_eq(heapd_queue_length(heapd_root_get(m, r)), 0);
    ck_assert_uint_eq(heapd_queue_leases(heapd_root_get(m, r)), 0);
    coll_finish(c, m, 1);
}
END_TEST

/* ---- a consumer heapd evicts ---- */

/* Lease the first chunk, say so, then stop, attached and not blocking:
 * the stall policy's case. */
static int staller_body(heapd_mutator *m, void *arg, int fd)
{
    (void)arg;
    heapd_lease l;
    void *v = heapd_queue_pop_lease(m, global_of(m, "t.queue"), 0, &l);
    send_u64(fd, (uint64_t)chunk_no(v));
    raise(SIGSTOP);
    return 0;
}

/* Note [Leased delivery]: a consumer that stalls a collection holding a
 * lease and is evicted for it (stall_action = evict) has left for
 * heapd, and its value comes back to the others, first. */
START_TEST(lease_of_an_evicted_consumer)
{
    harness_start_with(&D, "stall_warn = 50ms\nstall_timeout = 300ms\n"
                           "stall_action = evict\n");
    int fd;
    heapd_client *c;
    heapd_mutator *m;
    size_t r;
    pid_t k = leasing_kid(staller_body, NULL, &fd, &c, &m, &r);
    wait_stopped(k, "SIGSTOP");
    /* the cycle waits for the stopped kid until heapd evicts it */
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    heapd_lease l;
    ck_assert_int_eq(chunk_no(heapd_queue_pop_lease_wait(
                         m, heapd_root_get(m, r), 0, HARNESS_WAIT_MS, &l)),
                     0);
    ck_assert_int_eq(heapd_queue_ack(m, heapd_root_get(m, r), &l), 0);
    ck_assert_int_eq(chunk_no(heapd_queue_pop(m, heapd_root_get(m, r))), 1);
    kill(k, SIGKILL);
    harness_wait_pid(k, HARNESS_WAIT_MS);
    close(fd);
    heapd_root_pop(m, 1);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

#ifndef NDEBUG /* the stop hook is in debug builds only */
/* ---- killed in an ack ---- */

/* Lease the first chunk and ack it, stopping after the ack's swap
 * (queue.ack.done), before the value is cleared. */
static int acker_body(heapd_mutator *m, void *arg, int fd)
{
    (void)arg;
    void *q = global_of(m, "t.queue");
    heapd_lease l;
    void *v = heapd_queue_pop_lease(m, q, 0, &l);
    send_u64(fd, (uint64_t)chunk_no(v));
    return heapd_queue_ack(m, q, &l) == 0 ? 80 : 81; /* never stopped */
}

/* A consumer killed right after its ack's swap acked: its value is
 * never delivered again, and the queue moves on. */
START_TEST(killed_after_an_ack)
{
    coll_start();
    int fd;
    heapd_client *c;
    heapd_mutator *m;
    size_t r;
    pid_t k = leasing_kid(acker_body, "queue.ack.done", &fd, &c, &m, &r);
    kill_stopped(k, "queue.ack.done");
    close(fd);
    harness_collect(m);
    heapd_lease l;
    for (unsigned i = 1; i < 3; i++) {
        ck_assert_int_eq(chunk_no(heapd_queue_pop_lease(
                             m, heapd_root_get(m, r), 0, &l)),
                         (int)i);
        ck_assert_int_eq(heapd_queue_ack(m, heapd_root_get(m, r), &l), 0);
    }
    errno = 0;
    ck_assert_ptr_null(heapd_queue_pop_lease(m, heapd_root_get(m, r), 0,
                                             &l));
    ck_assert_int_eq(errno, EAGAIN);
    ck_assert_uint_eq(heapd_queue_leases(heapd_root_get(m, r)), 0);
    coll_finish(c, m, 1);
}
END_TEST

/* ---- the word-count pool ---- */

/* Count chunk V's words into map COUNTS (rooted in slot CR). */
static int count_words(heapd_mutator *m, size_t cr, const void *v)
{
    const char *p = heapd_str_data(v);
    size_t len = heapd_str_len(v);
    char buf[64];
    if (len >= sizeof buf)
        return -1;
    memcpy(buf, p, len);
    buf[len] = '\0';
    for (char *save, *w = strtok_r(buf, " ", &save); w;
         w = strtok_r(NULL, " ", &save))
        if (heapd_map_add_str(m, heapd_root_get(m, cr), w, strlen(w), 1,
                              NULL) < 0)
            return -1;
    return 0;
}

/* A consumer killed after its ARG-th pop: it counts and acks the chunks
 * before, reporting each one's number, then stops itself once that pop
 * has taken its node (queue.pop_lease.taken), where the test kills it. */
static int victim_body(heapd_mutator *m, void *arg, int fd)
{
    unsigned die_at = (unsigned)(uintptr_t)arg;
    size_t qr = heapd_root_push(m, global_of(m, "t.queue"));
    size_t cr = heapd_root_push(m, global_of(m, "t.counts"));
    for (unsigned i = 1;; i++) {
        if (i == die_at)
            setenv("HEAPD_COLL_STOP_IN", "queue.pop_lease.taken", 1);
        heapd_lease l;
        void *v = heapd_queue_pop_lease(m, heapd_root_get(m, qr), 0, &l);
        if (i == die_at)
            return 60; /* it should have stopped */
        if (!v || count_words(m, cr, v) < 0)
            return 61;
        if (heapd_queue_ack(m, heapd_root_get(m, qr), &l) != 0)
            return 62;
        send_u64(fd, (uint64_t)chunk_no(v));
    }
}

/* A consumer of the pool: count every chunk until the queue is closed
 * and drained, sending the number of each. */
static int survivor_body(heapd_mutator *m, void *arg, int fd)
{
    (void)arg;
    size_t qr = heapd_root_push(m, global_of(m, "t.queue"));
    size_t cr = heapd_root_push(m, global_of(m, "t.counts"));
    for (;;) {
        heapd_lease l;
        void *v = heapd_queue_pop_lease_wait(m, heapd_root_get(m, qr), 0, 0,
                                             &l);
        if (!v)
            return errno == ESHUTDOWN ? 0 : 63;
        if (count_words(m, cr, v) < 0)
            return 64;
        if (heapd_queue_ack(m, heapd_root_get(m, qr), &l) != 0)
            return 65;
        send_u64(fd, (uint64_t)chunk_no(v));
    }
}

#define CHUNKS 16
#define VICTIMS 4

struct waiters_wait {
    const struct coll_queue_head *qm;
    unsigned want;
};

static bool waiting(void *arg, char *seen, size_t n)
{
    struct waiters_wait *w = arg;
    uint32_t k = atomic_load(&w->qm->waiters);
    if (k >= w->want)
        return true;
    snprintf(seen, n, "%u waiting", k);
    return false;
}

/* The word-count pool of libheapd(3), its consumers SIGKILLed after
 * their 1st, 2nd, 3rd and 4th pop in turn, and a last one killed while
 * two others wait on the closed queue for its lease: every chunk is
 * counted exactly once, each lost one is taken back before any chunk
 * pushed after it, and the waiters wake when heapd sees the death. */
START_TEST(word_count_pool_with_kills)
{
    coll_start();
    int vfd[VICTIMS + 1], vgo[VICTIMS + 1], sfd[2], sgo[2];
    pid_t v[VICTIMS + 1], s[2];
    for (unsigned j = 0; j <= VICTIMS; j++)
        v[j] = fork_kid(victim_body,
                        (void *)(uintptr_t)(j < VICTIMS ? j + 1 : 1), false,
                        &vfd[j], &vgo[j], NULL);
    for (unsigned j = 0; j < 2; j++)
        s[j] = fork_kid(survivor_body, NULL, j == 1, &sfd[j], &sgo[j],
                        NULL);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    size_t cr = heapd_root_push(m, heapd_map_new(m, HEAPD_MAP_STR, 0));
    ck_assert_int_eq(heapd_global_set(m, "t.counts", heapd_root_get(m, cr)),
                     0);
    size_t qr = queue_with(m, CHUNKS);
    unsigned counted[CHUNKS] = {0};
    /* victim j counts j chunks, then is killed after its pop j + 1: it
     * first takes back the chunk its predecessor died holding */
    int lost = -1, next = 0;
    for (unsigned j = 0; j < VICTIMS; j++) {
        kid_go(vgo[j]);
        for (unsigned i = 0; i < j; i++) {
            int want = i == 0 && lost >= 0 ? lost : next++;
            ck_assert_int_eq((int)recv_u64(vfd[j], "a counted chunk"),
                             want);
            counted[want]++;
        }
        kill_stopped(v[j], "queue.pop_lease.taken");
        close(vfd[j]);
        lost = next++;
    }
    /* the last victim takes back the last lost chunk and stops holding
     * it; the survivors count the rest and wait on the closed queue */
    kid_go(vgo[VICTIMS]);
    wait_stopped(v[VICTIMS], "queue.pop_lease.taken");
    ck_assert_int_eq(heapd_queue_close(m, heapd_root_get(m, qr)), 0);
    kid_go(sgo[0]);
    kid_go(sgo[1]);
    struct waiters_wait ww = {heapd_bytes(heapd_root_get(m, qr)), 2};
    harness_wait_until(waiting, &ww, "both survivors to wait for the "
                                     "last victim's lease");
    ck_assert_uint_eq(heapd_queue_length(heapd_root_get(m, qr)), 0);
    ck_assert_uint_eq(heapd_queue_leases(heapd_root_get(m, qr)), 1);
    ck_assert_int_eq(kill(v[VICTIMS], SIGKILL), 0);
    harness_wait_pid(v[VICTIMS], HARNESS_WAIT_MS);
    close(vfd[VICTIMS]);
    for (unsigned j = 0; j < 2; j++) {
        expect_exit0(s[j], j ? "the young survivor" : "the survivor");
        for (;;) {
            uint64_t x;
            ssize_t got = read(sfd[j], &x, sizeof x);
            if (got == 0)
                break;
            ck_assert_int_eq(got, sizeof x);
            ck_assert_uint_lt(x, CHUNKS);
            counted[x]++;
        }
        close(sfd[j]);
    }
    for (unsigned i = 0; i < CHUNKS; i++)
        ck_assert_msg(counted[i] == 1, "chunk %u counted %u times", i,
                      counted[i]);
    /* what the map says: each chunk's own word once, the others once a
     * chunk */
    for (unsigned i = 0; i < CHUNKS; i++) {
        char w[16];
        int64_t x = 0;
        snprintf(w, sizeof w, "chunk%02u", i);
        ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, cr), w,
                                           strlen(w), 0, &x),
                         1);
        ck_assert_msg(x == 1, "%s counted %" PRId64 " times", w, x);
    }
    int64_t the = 0;
    ck_assert_int_eq(heapd_map_add_str(m, heapd_root_get(m, cr), "the", 3, 0,
                                       &the),
                     1);
    ck_assert_int_eq(the, 2 * CHUNKS);
    ck_assert_uint_eq(heapd_queue_leases(heapd_root_get(m, qr)), 0);
    errno = 0;
    ck_assert_ptr_null(heapd_queue_pop(m, heapd_root_get(m, qr)));
    ck_assert_int_eq(errno, ESHUTDOWN);
    coll_finish(c, m, 2);
}
END_TEST
#endif

static Suite *suite(void)
{
    Suite *s = suite_create("collections_leases");
    TCase *t = tcase_create("use");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, live_clients_listed);
    tcase_add_test(t, leases);
    tcase_add_test(t, lease_of_an_evicted_consumer);
#ifndef NDEBUG /* the stop hook is in debug builds only */
    tcase_add_test(t, killed_after_an_ack);
    tcase_add_test(t, word_count_pool_with_kills);
#endif
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
