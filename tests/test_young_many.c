/* Several young mutators share a table with a non-young one through major
 * cycles (Note [Young objects, for the program] in client/heapd.h): each
 * young worker links chains of young nodes into the shared table, which
 * publishes them in place, while another thread forces cycles and blocks
 * through them; every chain is whole at the end, against a real heapd
 * with the verifier on.  The single-mutator cases are tests/test_young.c.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "heapd.h"
#include "check_main.h"

#include "young_util.h"

#define MAP_SLOTS 64
#define YOUNG_WORKERS 4
#define CHAIN 3
#define MAJOR_CYCLES 20
#define MIN_ROUNDS 300
#define MIN_MINORS 3   /* minor collections of each young worker */

/* Chain ids: worker, round, place in the chain (CHAIN - 1 at the head). */
static uint64_t chain_id(uint64_t w, uint64_t round, uint64_t k)
{
    return w << 48 | round << 8 | k;
}

/* NULL if the chain from HEAD (NULL: a slot not filled yet) is whole. */
static const char *chain_broken(void *head)
{
    if (!head)
        return NULL;
    const struct payload *p0 = heapd_bytes(head);
    uint64_t base = p0->id & ~(uint64_t)0xff;
    int k = CHAIN - 1;
    for (void *n = head; n; n = field(n, 0), k--)
        if (k < 0 || !node_ok(n, 1, base | (uint64_t)k))
            return "a chain in the map is damaged";
    return k == -1 ? NULL : "a chain in the map is too short";
}

struct shared_run {
    heapd_client *c;
    _Atomic bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t cycles;        /* major cycles the collector thread saw end */
};

struct worker {
    struct shared_run *run;
    int id;
    bool young;
    uint64_t rounds;
    char err[256];
};

static bool worker_round(heapd_mutator *m, struct worker *w, size_t smap,
                         uint64_t r)
{
    size_t st = heapd_root_push(m, NULL); /* pushes and pops while marking */
    if (st == (size_t)-1) {
        snprintf(w->err, sizeof w->err, "push: %s", heapd_last_error());
        return false;
    }
    for (uint64_t k = 0; k < CHAIN; k++) {
        void **n = new_node(m, 1, chain_id((uint64_t)w->id, r, k));
        if (!n) {
            snprintf(w->err, sizeof w->err, "alloc: %s", heapd_last_error());
            return false;
        }
        heapd_write(m, n, &n[0], heapd_root_get(m, st));
        heapd_root_set(m, st, n);
    }
    for (int g = 0; g < 4; g++)
        if (!heapd_alloc(m, 0, 32)) {
            snprintf(w->err, sizeof w->err, "alloc: %s", heapd_last_error());
            return false;
        }
    void **map = heapd_root_get(m, smap);
    void *head = heapd_root_get(m, st);
    size_t i = (size_t)((r * 7 + (uint64_t)w->id * 13) % MAP_SLOTS);
    if (r % 2)
        heapd_write(m, map, &map[i], head);
    else
        heapd_cas(m, map, &map[i], field(map, i), head);
    if (w->young && heapd_is_young(m, field(map, i))) {
        snprintf(w->err, sizeof w->err, "the map holds a young object");
        return false;
    }
    const char *why = chain_broken(field(map, (i + 31) % MAP_SLOTS));
    if (!why)
        why = chain_broken(field(map, i));
    if (why) {
        snprintf(w->err, sizeof w->err, "round %llu: %s",
                 (unsigned long long)r, why);
        return false;
    }
    heapd_root_pop(m, 1);
    return true;
}

/* Wait, blocked, until the collector thread has seen one more cycle end
 * (or stopped). */
static void blocked_through_a_cycle(heapd_mutator *m, struct shared_run *run)
{
    heapd_blocking_enter(m);
    pthread_mutex_lock(&run->mu);
    uint64_t seen = run->cycles;
    while (run->cycles == seen && !atomic_load(&run->stop))
        pthread_cond_wait(&run->cv, &run->mu);
    pthread_mutex_unlock(&run->mu);
    heapd_blocking_leave(m);
}

static void *young_worker(void *arg)
{
    struct worker *w = arg;
    struct shared_run *run = w->run;
    heapd_mutator *m;
    heapd_mutator_opts o = {.flags = HEAPD_MUTATOR_YOUNG};
    if (heapd_attach_opts(run->c, w->young ? &o : NULL, &m) != 0) {
        snprintf(w->err, sizeof w->err, "attach: %s", heapd_last_error());
        return NULL;
    }
    size_t smap = heapd_root_push(m, heapd_global_get(m, "map"));
    /* until the major cycles are done, and this mutator has had its minor
     * collections */
    for (uint64_t r = 0;
         !atomic_load(&run->stop) || r < MIN_ROUNDS ||
         (w->young && young_stats(m).minor_collections < MIN_MINORS);
         r++) {
        if (!worker_round(m, w, smap, r))
            break;
        w->rounds = r + 1;
        if (w->id == 0 && r % 50 == 49)
            blocked_through_a_cycle(m, run);
    }
    heapd_detach(m);
    return NULL;
}

struct collector_arg {
    struct shared_run *run;
    char err[256];
};

static void *collector(void *arg)
{
    struct collector_arg *ca = arg;
    struct shared_run *run = ca->run;
    heapd_mutator *m;
    if (heapd_attach(run->c, &m) != 0) {
        snprintf(ca->err, sizeof ca->err, "attach: %s", heapd_last_error());
        goto out;
    }
    for (int k = 0; k < MAJOR_CYCLES; k++) {
        if (heapd_collect(m, HEAPD_COLLECT_WAIT) != 0) {
            snprintf(ca->err, sizeof ca->err, "collect: %s",
                     heapd_last_error());
            break;
        }
        void **map = heapd_global_get(m, "map");
        for (size_t i = 0; i < MAP_SLOTS && !ca->err[0]; i++) {
            const char *why = chain_broken(field(map, i));
            if (why)
                snprintf(ca->err, sizeof ca->err, "cycle %d: %s", k, why);
        }
        pthread_mutex_lock(&run->mu);
        run->cycles++;
        pthread_cond_broadcast(&run->cv);
        pthread_mutex_unlock(&run->mu);
        if (ca->err[0])
            break;
    }
    heapd_detach(m);
out:
    pthread_mutex_lock(&run->mu);
    atomic_store(&run->stop, true);
    pthread_cond_broadcast(&run->cv);
    pthread_mutex_unlock(&run->mu);
    return NULL;
}

START_TEST(young_mutators_share_a_map_through_major_cycles)
{
    harness_start_with(&D, "young_size = 256K\n");
    heapd_client *c = connect_plain(0);
    heapd_mutator *m;
    ck_assert_int_eq(heapd_attach(c, &m), 0);
    ck_assert_int_eq(heapd_global_set(m, "map",
                                      heapd_alloc(m, MAP_SLOTS, 0)), 0);
    heapd_detach(m);
    struct shared_run run = {.c = c};
    pthread_mutex_init(&run.mu, NULL);
    pthread_cond_init(&run.cv, NULL);
    struct worker w[YOUNG_WORKERS + 1];
    pthread_t t[YOUNG_WORKERS + 2];
    struct collector_arg ca = {.run = &run};
    for (int i = 0; i <= YOUNG_WORKERS; i++) {
        w[i] = (struct worker){.run = &run, .id = i,
                               .young = i < YOUNG_WORKERS};
        ck_assert_int_eq(pthread_create(&t[i], NULL, young_worker, &w[i]), 0);
    }
    ck_assert_int_eq(pthread_create(&t[YOUNG_WORKERS + 1], NULL, collector,
                                    &ca), 0);
    for (int i = 0; i < YOUNG_WORKERS + 2; i++)
        pthread_join(t[i], NULL);
    ck_assert_msg(ca.err[0] == '\0', "the collecting thread: %s", ca.err);
    for (int i = 0; i <= YOUNG_WORKERS; i++) {
        ck_assert_msg(w[i].err[0] == '\0', "worker %d (%s): %s", i,
                      w[i].young ? "young" : "not young", w[i].err);
        ck_assert_uint_ge(w[i].rounds, MIN_ROUNDS);
    }
    heapd_stats_t st = harness_stats(c);
    ck_assert_uint_ge(st.minor_collections, YOUNG_WORKERS * MIN_MINORS);
    ck_assert_uint_gt(st.promoted_published_bytes, 0);
    ck_assert_int_eq(heapd_attach(c, &m), 0);
    harness_collect(m);
    void **map = heapd_global_get(m, "map");
    size_t filled = 0;
    for (size_t i = 0; i < MAP_SLOTS; i++) {
        const char *why = chain_broken(field(map, i));
        ck_assert_msg(!why, "slot %zu at the end: %s", i, why);
        filled += field(map, i) != NULL;
    }
    ck_assert_uint_gt(filled, MAP_SLOTS / 2);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("young_many");
    TCase *t = tcase_create("many");
    /* a bound on a hang, not on speed */
    tcase_set_timeout(t, 600);
    tcase_add_test(t, young_mutators_share_a_map_through_major_cycles);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
