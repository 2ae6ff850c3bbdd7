/* A program built against 0.1.0's headers (tests/abi/0.1.0/, the first
 * stable release's heapd.h and its tables), linked with this libheapd:
 * every call that takes a struct that grows, each struct followed by a
 * guard the library must not touch (Note [Structs that grow] in
 * client/abi.c).  Run by tests/test_abi.c against a started heapd
 * ($HEAPD_SOCKET); prints "ok" and exits 0, or names what failed and
 * exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heapd.h"
#include "heapd_collections.h"

#define GUARD 512

static int failed;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                     \
            printf(__VA_ARGS__);                                            \
            printf(" (%s)\n", heapd_last_error());                          \
            failed = 1;                                                     \
        }                                                                   \
    } while (0)

static void guard_set(unsigned char *g)
{
    memset(g, 0xa5, GUARD);
}

static int guard_ok(const unsigned char *g)
{
    for (size_t i = 0; i < GUARD; i++)
        if (g[i] != 0xa5)
            return 0;
    return 1;
}

static struct {
    heapd_stats_t st;
    unsigned char guard[GUARD];
} stats;
static struct {
    heapd_global_info g[2];
    unsigned char guard[GUARD];
} globals;
static struct {
    heapd_heap_segments s[1];
    unsigned char guard[GUARD];
} segments;

int main(void)
{
    heapd_connect_opts co = {.client_name = "abi-0.1"};
    heapd_client *c;
    heapd_mutator *m;
    int rc = heapd_connect(&c, &co);
    if (rc < 0) {
        printf("FAIL connect: %s\n", heapd_last_error());
        return 1;
    }
    heapd_mutator_opts mo = {.flags = HEAPD_MUTATOR_YOUNG,
                             .young_size = 1u << 20, .young_age = 2};
    if ((rc = heapd_attach_opts(c, &mo, &m)) < 0) {
        printf("FAIL attach: %s\n", heapd_last_error());
        return 1;
    }
    void *a = heapd_alloc_shared(m, 1, 16);
    CHECK(a && heapd_global_set(m, "abi_a", a) == 0, "global abi_a");
    CHECK(heapd_global_set(m, "abi_b", a) == 0, "global abi_b");
    CHECK(heapd_collect(m, HEAPD_COLLECT_WAIT) == 0, "collect");

    /* heapd_stats: the head, the counters, heap_count and heaps[] all in
     * 0.1.0's places */
    guard_set(stats.guard);
    CHECK(heapd_stats(c, &stats.st) == 0, "heapd_stats");
    CHECK(guard_ok(stats.guard), "heapd_stats wrote past 0.1.0's struct");
    CHECK(stats.st.version[0] != '\0', "version");
    CHECK(stats.st.heap_count == 1, "heap_count %zu", stats.st.heap_count);
    CHECK(strcmp(stats.st.heaps[0].name, "default") == 0, "heaps[0] '%s'",
          stats.st.heaps[0].name);
    CHECK(stats.st.cycles_completed >= 1 &&
              stats.st.cycles_completed ==
                  stats.st.heaps[0].cycles_completed,
          "cycles %llu / %llu",
          (unsigned long long)stats.st.cycles_completed,
          (unsigned long long)stats.st.heaps[0].cycles_completed);
    CHECK(stats.st.mutators == 2 && stats.st.heaps[0].mutators == 2,
          "mutators %u: this one and the test's", stats.st.mutators);
    CHECK(stats.st.heaps[0].base != 0 && stats.st.heaps[1].base == 0,
          "heaps[] placed");

    /* heapd_young_stats_get */
    struct {
        heapd_young_stats y;
        unsigned char guard[GUARD];
    } ys;
    guard_set(ys.guard);
    heapd_young_stats_get(m, &ys.y);
    CHECK(guard_ok(ys.guard), "heapd_young_stats_get wrote past");
    CHECK(ys.y.young_bytes == 1u << 20 && ys.y.young_age == 2,
          "young %llu age %u", (unsigned long long)ys.y.young_bytes,
          ys.y.young_age);

    /* heapd_globals: entries 152 bytes apart, as 0.1.0 has them */
    guard_set(globals.guard);
    size_t n = 0;
    CHECK(heapd_globals(c, globals.g, 2, &n) == 0 && n == 2, "globals %zu",
          n);
    CHECK(guard_ok(globals.guard), "heapd_globals wrote past");
    CHECK(strncmp(globals.g[0].name, "abi_", 4) == 0 &&
              strncmp(globals.g[1].name, "abi_", 4) == 0 &&
              strcmp(globals.g[0].name, globals.g[1].name) != 0 &&
              globals.g[1].target == (uintptr_t)a,
          "globals '%s' '%s'", globals.g[0].name, globals.g[1].name);

    /* heapd_clients: the library's block, strided as 0.1.0's */
    heapd_client_info *ci = NULL;
    size_t nc = 0;
    CHECK(heapd_clients(c, &ci, &nc) == 0, "clients");
    int seen = 0;
    CHECK(nc >= 2, "%zu clients: the test keeps one more connected", nc);
    for (size_t i = 0; ci && i < nc; i++) {
        /* every entry where 0.1.0 has it: 208 bytes apart */
        CHECK(ci[i].id != 0 && ci[i].pid > 0 &&
                  memchr(ci[i].name, '\0', sizeof ci[i].name) &&
                  ci[i].name[0] && ci[i].mutator_count <= 256,
              "entry %zu of %zu is not a client (id %llu, pid %d)", i, nc,
              (unsigned long long)ci[i].id, (int)ci[i].pid);
        if (strcmp(ci[i].name, "abi-0.1") == 0 && ci[i].mutator_count == 1 &&
            ci[i].mutators[0].young_bytes == 1u << 20)
            seen = 1;
    }
    CHECK(seen, "this client and its young mutator in %zu clients", nc);
    heapd_clients_free(ci);

    /* heapd_segments */
    guard_set(segments.guard);
    CHECK(heapd_segments(c, "default", segments.s, 1, &n) == 0 && n == 1,
          "segments");
    CHECK(guard_ok(segments.guard), "heapd_segments wrote past");
    CHECK(strcmp(segments.s[0].name, "default") == 0 &&
              segments.s[0].total > 0 && segments.s[0].class_count > 0,
          "segments '%s' %u", segments.s[0].name, segments.s[0].total);

    /* the collections' structs */
    heapd_map_opts opts = {.kind = HEAPD_MAP_STR, .budget = 1u << 20};
    void *map = heapd_map_new_opts(m, &opts);
    CHECK(map != NULL, "heapd_map_new_opts");
    if (map) {
        size_t r = heapd_root_push(m, map);
        void *v = heapd_alloc_shared(m, 0, 8);
        CHECK(v && heapd_map_put_str(m, map, "k", 1, v, 0) == 0, "put");
        struct {
            heapd_map_stats_t s;
            unsigned char guard[GUARD];
        } ms;
        guard_set(ms.guard);
        CHECK(heapd_map_stats(map, &ms.s) == 0 && ms.s.count == 1 &&
                  ms.s.budget == 1u << 20,
              "map stats");
        CHECK(guard_ok(ms.guard), "heapd_map_stats wrote past");
        struct {
            heapd_map_footprint_t f;
            unsigned char guard[GUARD];
        } fp;
        guard_set(fp.guard);
        CHECK(heapd_map_footprint(m, map, &fp.f) == 0 && fp.f.keys == 1,
              "footprint");
        CHECK(guard_ok(fp.guard), "heapd_map_footprint wrote past");
        heapd_root_pop(m, 1);
        (void)r;
    }
    heapd_detach(m);
    heapd_disconnect(c);
    if (!failed)
        printf("ok\n");
    return failed;
}
