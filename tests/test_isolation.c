/* What a client can damage by writing the words of the control area, or
 * of its own control memory: nothing but the objects it can reach.  Each
 * test is an attack a hostile client can make with plain stores into its
 * mapping, against a real heapd with the verifier on; afterwards the heap
 * still collects, attaches and stops, and another process's rooted list is
 * whole. */
#include <check.h>
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "check_main.h"

static struct daemon_proc D;

#define LIST 2000
#define LIST_MAGIC 0x6c697374u

/* The file that holds a cycle's marking while it exists (Note [Holding
 * marking for tests] in daemon/gc/collector.c); every heapd these tests
 * start watches it, and only debug builds have the hold. */
static char hold[64];

static void start(void)
{
    snprintf(hold, sizeof hold, "/tmp/heapd-hold-%d", (int)getpid());
    setenv("HEAPD_TEST_HOLD_MARKING", hold, 1);
    harness_start_logged(&D, harness_default_config("@SOCK@", "verify = true\n"),
                         "heapd.log");
    unsetenv("HEAPD_TEST_HOLD_MARKING");
}

/* ---- the bystander: another process's rooted, checked list ---- */

struct cell {
    void *next;
    uint32_t magic, index;
};

static void *build_list(heapd_mutator *m, size_t slot)
{
    for (uint32_t i = 0; i < LIST; i++) {
        struct cell *n = heapd_alloc(m, 1, sizeof *n - sizeof(void *));
        if (!n)
            return NULL;
        n->magic = LIST_MAGIC;
        n->index = i;
        heapd_write(m, n, &n->next, heapd_root_get(m, slot));
        heapd_root_set(m, slot, n);
    }
    return heapd_root_get(m, slot);
}

static bool list_whole(const struct cell *n)
{
    uint32_t want = LIST;
    for (; n; n = n->next)
        if (n->magic != LIST_MAGIC || n->index != --want)
            return false;
    return want == 0;
}

/* ---- the attacker: a process that maps the heap and writes ---- */

typedef void (*attack_fn)(struct layout_control *ctl);

/* Fork a client that attaches, runs ATTACK on the control area and exits
 * without saying goodbye; returns its wait status. */
static int attacker_status(attack_fn attack)
{
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        heapd_connect_opts o = {.socket_path = D.sock,
                                .client_name = "attacker"};
        heapd_client *c;
        heapd_mutator *m;
        if (heapd_connect(&c, &o) < 0 || heapd_attach(c, &m) < 0)
            _exit(2);
        attack(heapd_heap_base(c));
        _exit(0);
    }
    return harness_wait_pid(kid, HARNESS_WAIT_MS);
}

static void run_attacker(attack_fn attack)
{
    int status = attacker_status(attack);
    ck_assert_msg(status == 0, "the attacker failed (status 0x%x)", status);
}

/* A collection, an attach and a graceful leave in a process of their own,
 * which must end within the bound: the heap still works. */
static void heap_still_works(const char *after)
{
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        heapd_connect_opts o = {.socket_path = D.sock};
        heapd_client *c;
        heapd_mutator *m;
        if (heapd_connect(&c, &o) < 0 || heapd_attach(c, &m) < 0)
            _exit(2);
        if (heapd_collect(m, HEAPD_COLLECT_WAIT) < 0)
            _exit(3);
        if (!heapd_alloc(m, 1, 8))
            _exit(4);
        heapd_detach(m);
        heapd_disconnect(c);
        _exit(0);
    }
    int status = harness_wait_pid(kid, HARNESS_WAIT_MS);
    ck_assert_msg(status == 0, "after %s, a collection, an attach and a "
                  "leave did not complete (status 0x%x): the heap hangs",
                  after, status);
}

/* The bystander: a process of its own (a process with libheapd's threads
 * must not fork children that start theirs under TSan), which builds two
 * lists, one on its root stack and one that only the global "victim"
 * holds, says so on READY, waits in a blocking region until GO closes,
 * and exits 0 if both are whole. */
static pid_t start_bystander(const int ready[2], const int go[2])
{
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid != 0)
        return kid;
    int ready_w = ready[1], go_r = go[0];
    close(ready[0]);
    close(go[1]); /* or GO never reads EOF */
    heapd_connect_opts o = {.socket_path = D.sock, .client_name = "bystander"};
    heapd_client *c;
    heapd_mutator *m;
    char x;
    if (heapd_connect(&c, &o) < 0 || heapd_attach(c, &m) < 0)
        _exit(2);
    size_t slot = heapd_root_push(m, NULL);
    if (slot == (size_t)-1 || !build_list(m, slot))
        _exit(3);
    size_t tmp = heapd_root_push(m, NULL);
    if (tmp == (size_t)-1 || !build_list(m, tmp) ||
        heapd_global_set(m, "victim", heapd_root_get(m, tmp)) < 0)
        _exit(3);
    heapd_root_pop(m, 1);
    heapd_blocking_enter(m); /* the collections need no ack from it */
    if (write(ready_w, "r", 1) != 1)
        _exit(4);
    while (read(go_r, &x, 1) > 0)
        ;
    heapd_blocking_leave(m);
    bool whole = list_whole(heapd_root_get(m, slot)) &&
                 list_whole(heapd_global_get(m, "victim"));
    heapd_detach(m);
    heapd_disconnect(c);
    _exit(whole ? 0 : 1);
}

/* The bystander's list survives the attack and collections after it, the
 * heap still collects and attaches, and the daemon stops on SIGTERM. */
struct bystander {
    pid_t pid;
    int go;    /* closing it lets the bystander check its lists */
};

/* Start heapd and the bystander, and wait until its lists are built. */
static struct bystander bystander_begin(void)
{
    int ready[2], go[2];
    char x;
    start();
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(go), 0);
    struct bystander b = {start_bystander(ready, go), go[1]};
    close(ready[1]);
    close(go[0]);
    ck_assert_msg(read(ready[0], &x, 1) == 1, "the bystander did not start");
    close(ready[0]);
    return b;
}

/* The bystander's lists are whole after WHAT, heapd is healthy and stops
 * on SIGTERM. */
static void bystander_end(struct bystander b, const char *what)
{
    close(b.go);
    int status = harness_wait_pid(b.pid, HARNESS_WAIT_MS);
    ck_assert_msg(status == 0, "after %s, another process's lists are "
                  "damaged or its process failed (status 0x%x)", what, status);
    harness_expect_healthy(&D);
    harness_stop_clean(&D); /* SIGTERM still stops heapd */
}

/* ---- control memory (Note [Client control memory]) ---- */

/* The start of this process's one mapping of its control memory (region
 * 0: the first mutator's slot), or NULL; *N counts such mappings. */
static uint8_t *own_control_memory(unsigned *n)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    uint8_t *first = NULL;
    *n = 0;
    if (!f)
        return NULL;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo;
        if (strstr(line, "heapd:") && strstr(line, ":client-") &&
            sscanf(line, "%lx-", &lo) == 1) {
            if (!first)
                first = (uint8_t *)lo;
            ++*n;
        }
    }
    fclose(f);
    return first;
}

/* Random bytes over every byte of the control area past the daemon's
 * page and the globals' table (where every client's slots, root chunks
 * and rings were when any client could write them): nothing of anyone
 * else's is there, and only the attacker's own control memory is mapped
 * in it (exits 7 if not). */
static void scribble_control_area(struct layout_control *ctl)
{
    unsigned n;
    if (!own_control_memory(&n) || n != 1)
        _exit(7);
    uint8_t *p = (uint8_t *)(ctl + 1);
    uint8_t *end = (uint8_t *)ctl + (uint64_t)ctl->control_segments *
                                        ctl->segment_size;
    srand(12345);
    for (; p < end; p++)
        *p = (uint8_t)rand();
}

START_TEST(random_bytes_in_the_control_area_cost_nothing)
{
    const char *what = "random bytes over the control area";
    struct bystander b = bystander_begin();
    run_attacker(scribble_control_area);
    heap_still_works(what);
    heap_still_works(what);
    /* nor memory: the 16 MiB it wrote are given back (Note [Free memory
     * stays free]) */
    harness_wait_stat(&D, NULL, heap_committed_bytes, <=, 8u << 20);
    bystander_end(b, what);
}
END_TEST

/* What the attacker writes into its own slot (region 0 of its control
 * memory), in a blocking region so that no stop waits for it. */
enum nonsense {
    DEEP_ROOTS,
    URS_AHEAD,
    FREE_STATUS,
    ALLOC_AHEAD,
    ACK_AHEAD,
    CAPTURE_PAST
};

static void write_nonsense(heapd_mutator *m, void *arg)
{
    unsigned n;
    heapd_blocking_enter(m);
    struct layout_mutator *s = (struct layout_mutator *)own_control_memory(&n);
    if (!s || n != 1)
        _exit(7);
    switch (*(const enum nonsense *)arg) {
    case DEEP_ROOTS:
        atomic_store(&s->root_depth, (uint64_t)LAYOUT_MAX_ROOTS + 1);
        break;
    case URS_AHEAD:
        atomic_store(&s->urs_head,
                     atomic_load(&s->urs_tail) + 10 * LAYOUT_URS_SIZE);
        break;
    case FREE_STATUS:
        atomic_store(&s->status, LAYOUT_STATUS(0, LAYOUT_MUT_FREE));
        break;
    case ALLOC_AHEAD: /* would make every grant of the heap wait for cycles */
        atomic_store(&s->alloc_bytes, (uint64_t)1 << 60);
        break;
    case CAPTURE_PAST:
        atomic_store(&s->captured_n, (uint64_t)LAYOUT_MAX_CAPTURED + 1);
        break;
    case ACK_AHEAD: { /* running, off any safepoint: a stop would wait */
        uint32_t gen = LAYOUT_STATUS_GEN(atomic_load(&s->status));
        atomic_store(&s->status, LAYOUT_STATUS((gen + 1000) & LAYOUT_GEN_MASK,
                                               LAYOUT_MUT_RUNNING));
        break;
    }
    }
}

/* Each kind of nonsense in a client's own slot gets it disconnected and
 * counted by the next cycle, and costs the others nothing: the heap
 * collects and attaches, the bystander's lists are whole, no bad
 * reference was followed. */
START_TEST(nonsense_in_own_slot_disconnects_the_client)
{
    static const struct {
        enum nonsense what;
        const char *name;
    } cases[] = {
        {DEEP_ROOTS, "a root depth past the root stack"},
        {URS_AHEAD, "a ring head ten rings ahead"},
        {FREE_STATUS, "a FREE status while attached"},
        {ALLOC_AHEAD, "2^60 bytes allocated"},
        {ACK_AHEAD, "RUNNING with the ack of a stop 1000 ahead"},
        {CAPTURE_PAST, "a C stack capture past its area"},
    };
    struct bystander b = bystander_begin();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pid_t kid = harness_fork_mutator(&D, write_nonsense,
                                         (void *)&cases[i].what);
        heap_still_works(cases[i].name); /* runs a cycle */
        heap_still_works(cases[i].name);
        kill(kid, SIGKILL);
        harness_wait_pid(kid, HARNESS_WAIT_MS);
    }
    harness_wait_stat(&D, NULL, clients_disconnected, ==, 6);
    ck_assert_uint_lt(harness_daemon_stats(&D).bytes_allocated, 1ull << 40);
    ck_assert_msg(harness_log_contains(&D, "into mutator slot"),
                  "heapd's log does not name the disconnected client");
    bystander_end(b, "nonsense in the attackers' own slots");
}
END_TEST

/* Garbage in a client's own capture of its C stack (Note [C locals are
 * roots] in client/stack_roots.c): words that are no object's are
 * dropped, not counted as bad references nor followed, the client stays,
 * and the others' lists are whole. */
#define CAPTURE_GARBAGE 4096

static void write_capture_garbage(heapd_mutator *m, void *arg)
{
    unsigned n;
    uintptr_t base = (uintptr_t)arg;
    heapd_blocking_enter(m);
    struct layout_mutator *s = (struct layout_mutator *)own_control_memory(&n);
    if (!s || n != 1)
        _exit(7);
    void *_Atomic *cap = layout_mutator_captured(s);
    srand(4242);
    for (unsigned i = 0; i < CAPTURE_GARBAGE; i++) {
        uintptr_t w = (uintptr_t)rand() << 33 ^ (uintptr_t)rand() << 3;
        /* half of them into the heap's first 256 MiB, 8-aligned */
        if (i % 2)
            w = base + (w & ((1u << 28) - 8));
        atomic_store(&cap[i], (void *)w);
    }
    atomic_store(&s->captured_n, CAPTURE_GARBAGE);
}

/* A kid that writes WHAT with BODY into its own slot (the heap's base
 * its argument) and stays: two cycles later nothing was counted as bad,
 * nobody was disconnected, the bystander's lists are whole.  The stats
 * before and after are in *BEFORE and *AFTER. */
static void own_garbage_costs_nothing(void (*body)(heapd_mutator *, void *),
                                      const char *what,
                                      heapd_stats_t *before,
                                      heapd_stats_t *after)
{
    struct bystander b = bystander_begin();
    *before = harness_daemon_stats(&D);
    pid_t kid = harness_fork_mutator(&D, body,
                                     (void *)(uintptr_t)HARNESS_HEAP_BASE);
    heap_still_works(what);
    heap_still_works(what);
    *after = harness_daemon_stats(&D);
    ck_assert_uint_eq(after->bad_refs, before->bad_refs);
    ck_assert_uint_eq(after->clients_disconnected,
                      before->clients_disconnected);
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    bystander_end(b, what);
}

START_TEST(garbage_in_own_capture_is_dropped)
{
    heapd_stats_t before, after;
    own_garbage_costs_nothing(write_capture_garbage, "garbage in a capture",
                              &before, &after);
}
END_TEST

/* Garbage a client logs as captured (LAYOUT_URS_CAPTURED entries of its
 * own update remembered set, Note [Marking C stack captures last] in
 * daemon/gc/mark.c) while a cycle marks: dropped or marked as a root, never
 * followed nor counted as bad, and the client stays.  Blocked, the kid
 * logs nothing of its own, so its ring is all the garbage's.  In a debug
 * build the kid holds the cycle's marking while it writes, so the first
 * batch lands; without the hold, a long list gives it TAGGED_ROUNDS
 * chances (a kid that is not scheduled while a cycle marks misses one). */
#define TAGGED_ROUNDS 20
#define TAGGED_BATCH 2048
#define TAGGED_LIST 200000

/* The kid's exit with CODE once it may hold a cycle: the hold goes
 * first, or each cycle of the failing test's heapd waits for it. */
static void __attribute__((noreturn)) unhold_exit(int code)
{
    unlink(hold);
    _exit(code);
}

static void log_tagged_garbage(heapd_mutator *m, void *arg)
{
    unsigned n;
    const uintptr_t base = (uintptr_t)arg;
    const struct layout_control *ctl = (const void *)base;
    void *own = heapd_alloc(m, 0, 16);
    /* a list long enough that marking lasts while the kid writes */
    size_t r = heapd_root_push(m, NULL);
    for (unsigned i = 0; i < TAGGED_LIST; i++) {
        void **cell = heapd_alloc(m, 1, 8);
        if (!cell)
            _exit(6);
        heapd_write(m, cell, &cell[0], heapd_root_get(m, r));
        heapd_root_set(m, r, cell);
    }
    heapd_blocking_enter(m);
    struct layout_mutator *s = (struct layout_mutator *)own_control_memory(&n);
    if (!s || n != 1)
        _exit(7);
    heapd_client *control = harness_control(&D);
    srand(777);
    bool landed = false;
    for (int round = 0; round < TAGGED_ROUNDS && !landed; round++) {
        uint32_t before = atomic_load(&ctl->epoch), epoch;
        bool marking;
        FILE *f = fopen(hold, "w"); /* absent in release builds: harmless */
        if (!f || fclose(f) != 0)
            _exit(13);
        if (heapd_request_collect(control, 0) != 0)
            unhold_exit(8);
        int64_t end = harness_now_ms() + HARNESS_WAIT_MS;
        do { /* marking, or the cycle asked for has begun */
            if (harness_now_ms() > end)
                unhold_exit(9);
            sched_yield();
            marking = atomic_load(&ctl->phase) == LAYOUT_PHASE_MARK;
            epoch = atomic_load(&ctl->epoch);
        } while (!marking && epoch == before);
        uint64_t head = atomic_load(&s->urs_head);
        while (head - atomic_load(&s->urs_tail) >
               LAYOUT_URS_SIZE - TAGGED_BATCH) {
            if (harness_now_ms() > end)
                unhold_exit(10);
            sched_yield();
        }
        for (unsigned i = 0; i < TAGGED_BATCH; i++) {
            uintptr_t w;
            switch (i % 6) {
            case 0: w = 0x10000 + 8 * i; break;          /* outside */
            case 1: w = base + 64; break;                 /* control area */
            case 2: w = base + (900u << 20); break;       /* free segment */
            case 3: w = (uintptr_t)own + 8; break;        /* interior */
            case 4: w = (uintptr_t)own; break;            /* fine */
            default: /* anywhere in the heap's first 256 MiB, aligned */
                w = base + (((uintptr_t)rand() << 3) & ((1u << 28) - 8));
            }
            atomic_store_explicit(&s->urs[(head + i) % LAYOUT_URS_SIZE],
                                  (void *)(w | LAYOUT_URS_CAPTURED),
                                  memory_order_relaxed);
        }
        atomic_store_explicit(&s->urs_head, head + TAGGED_BATCH,
                              memory_order_release);
        if (unlink(hold) != 0)
            _exit(14);
        /* landed if marking consumed it: a blocked kid is not stopped by
         * a final sync, which may have drained the ring already (phase
         * still MARK); then the next snapshot drops it uncounted, after
         * it moves the epoch on (Note [Straddling a cycle]) */
        if (heapd_request_collect(control, 0) != 0)
            _exit(8);
        uint64_t until = head + TAGGED_BATCH;
        while (atomic_load(&s->urs_tail) < until &&
               atomic_load(&ctl->epoch) == epoch) {
            if (harness_now_ms() > end)
                _exit(10);
            sched_yield();
        }
        landed = marking && atomic_load(&s->urs_tail) >= until &&
                 atomic_load(&ctl->epoch) == epoch;
        if (heapd_request_collect(control, HEAPD_COLLECT_WAIT) != 0)
            _exit(11);
    }
    if (!landed)
        _exit(12); /* no batch landed in marking in TAGGED_ROUNDS cycles */
    heapd_disconnect(control);
}

START_TEST(tagged_garbage_in_own_ring_is_dropped)
{
    heapd_stats_t before, after;
    own_garbage_costs_nothing(log_tagged_garbage, "tagged garbage in a ring",
                              &before, &after);
    ck_assert_uint_gt(after.urs_entries, before.urs_entries);
}
END_TEST

/* A client whose slot says promotions are under way for good (the
 * young_promoting word, Note [Minor collections in slices] in
 * client/minor.c) and that never takes its own stack handshake: heapd
 * leaves the handshake to it while marking, and takes it in the final
 * sync's pause, so the list its root slot holds stays whole through the
 * cycles, and nobody else waits for it. */
static void promote_forever(heapd_mutator *m, void *arg)
{
    unsigned n;
    size_t slot = heapd_root_push(m, NULL);
    void *list = slot == (size_t)-1 ? NULL : build_list(m, slot);
    if (!list)
        _exit(6);
    *(void *volatile *)arg = list;
    heapd_blocking_enter(m);
    struct layout_mutator *s = (struct layout_mutator *)own_control_memory(&n);
    if (!s || n != 1)
        _exit(7);
    atomic_store(&s->young_promoting, 1);
}

START_TEST(a_slot_promoting_for_good_keeps_its_roots)
{
    void **list = mmap(NULL, sizeof *list, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(list, MAP_FAILED);
    struct bystander b = bystander_begin();
    pid_t kid = harness_fork_mutator(&D, promote_forever, list);
    heap_still_works("a slot promoting for good");
    heap_still_works("a slot promoting for good");
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m); /* maps the heap, at its one address */
    ck_assert_msg(list_whole(*list), "the list only the root slot of a "
                  "client that says it promotes for good held was freed");
    heapd_detach(m);
    heapd_disconnect(c);
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    munmap(list, sizeof *list);
    bystander_end(b, "a slot promoting for good");
}
END_TEST

/* A young slot's bytes allocated may honestly pass its grants (a young
 * mutator allocates again the blocks its segments get back: Note [Client
 * control memory]), so 2^60 written there does not disconnect the client:
 * heapd uses the grants instead, and the pacing stays sane. */
START_TEST(young_slot_alloc_bytes_past_its_grants_are_bounded)
{
    int ready[2], go[2];
    start();
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(go), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        close(ready[0]);
        close(go[1]);
        heapd_client *c = harness_connect_ok(D.sock, 0);
        heapd_mutator_opts o = {.flags = HEAPD_MUTATOR_YOUNG};
        heapd_mutator *m;
        unsigned n;
        if (!c || heapd_attach_opts(c, &o, &m) < 0)
            _exit(2);
        heapd_blocking_enter(m);
        struct layout_mutator *sl =
            (struct layout_mutator *)own_control_memory(&n);
        if (!sl || n != 1)
            _exit(7);
        atomic_store(&sl->alloc_bytes, (uint64_t)1 << 60);
        char r;
        if (write(ready[1], "r", 1) != 1 || read(go[0], &r, 1) != 1)
            _exit(3);
        heapd_blocking_leave(m);
        _exit(heapd_alloc(m, 0, 16) ? 0 : 4); /* still connected */
    }
    close(ready[1]);
    close(go[0]);
    char r;
    ck_assert_int_eq(read(ready[0], &r, 1), 1);
    heap_still_works("2^60 bytes allocated by a young slot"); /* a cycle */
    heap_still_works("2^60 bytes allocated by a young slot");
    ck_assert_int_eq(write(go[1], "g", 1), 1);
    ck_assert_int_eq(harness_wait_pid(kid, HARNESS_WAIT_MS), 0);
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_uint_eq(st.clients_disconnected, 0);
    ck_assert_uint_lt(st.bytes_allocated, 1ull << 40);
    close(ready[0]);
    close(go[1]);
}
END_TEST

/* ---- segment headers (Note [A segment leaves its owner]) ---- */

#define SEGMENT_SIZE (128u << 10) /* harness_default_config */

/* In a blocking region (no stop waits for it), write a kind and a class
 * that mean nothing into the header of O's segment. */
static void scribble_header_of(heapd_mutator *m, void *o)
{
    heapd_blocking_enter(m);
    struct layout_segment *hd =
        (struct layout_segment *)((uintptr_t)o & ~(uintptr_t)(SEGMENT_SIZE - 1));
    __atomic_store_n(&hd->kind, 22u, __ATOMIC_RELEASE);
    hd->size_class = 200;
}

/* Allocate in a fresh segment, then, before any cycle has parsed it,
 * write a kind and a class that mean nothing into its header. */
static void scribble_own_header(heapd_mutator *m, void *arg)
{
    (void)arg;
    void *o = heapd_alloc(m, 0, 64);
    if (!o)
        _exit(8);
    scribble_header_of(m, o);
}

/* The bystander's lists are whole, and no segment is left orphaned: the
 * scribbled one is gone.  Reads stats in this process, so only after the
 * last fork. */
static heapd_stats_t scribbled_segment_gone(struct bystander b)
{
    close(b.go);
    ck_assert_msg(harness_wait_pid(b.pid, HARNESS_WAIT_MS) == 0,
                  "after a scribbled segment header, another process's "
                  "lists are damaged");
    heapd_stats_t st = harness_daemon_stats(&D);
    ck_assert_msg(st.segments_orphaned == st.segments_adopted,
                  "a dead client's scribbled segment stays while nothing "
                  "references it: %llu orphaned, %llu adopted",
                  (unsigned long long)st.segments_orphaned,
                  (unsigned long long)st.segments_adopted);
    return st;
}

/* A client that scribbles on its own segment's header and dies leaves no
 * segment behind: with nothing referencing it, the sweep of a cycle that
 * began after it left frees it (it had stayed FILLED with no class, never
 * swept, orphaned for good), counted as one bad reference, and it costs
 * the bystander nothing. */
START_TEST(scribbled_segment_header_leaves_nothing)
{
    struct bystander b = bystander_begin();
    pid_t kid = harness_fork_mutator(&D, scribble_own_header, NULL);
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    harness_wait_stat(&D, NULL, clients_crashed, ==, 1);
    heap_still_works("a scribbled segment header"); /* runs a cycle */
    heap_still_works("a scribbled segment header");
    heap_still_works("a scribbled segment header");
    heapd_stats_t st = scribbled_segment_gone(b);
    ck_assert_uint_eq(st.bad_refs, 1);
    ck_assert_uint_eq(st.verify_failures, 0);
    harness_stop_clean(&D);
}
END_TEST

/* The same, but the object it made there is held by a global: the
 * segment stays, and the object's bytes with it, while anything
 * references it; once nothing does, it goes. */
#define HELD_MAGIC 0x68656c64u

static void scribble_held_header(heapd_mutator *m, void *arg)
{
    (void)arg;
    uint32_t *o = heapd_alloc(m, 0, 64);
    if (!o)
        _exit(8);
    for (int i = 0; i < 16; i++)
        o[i] = HELD_MAGIC;
    if (heapd_global_set(m, "held", o) < 0)
        _exit(9);
    scribble_header_of(m, o);
}

/* In a process of its own: "held" still names the object with its bytes
 * and the segment is still orphaned (KEPT), or the global is set to NULL
 * (!KEPT).  Exits 0, or the step that failed. */
static void held_step(bool kept)
{
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        heapd_connect_opts o = {.socket_path = D.sock};
        heapd_client *c;
        heapd_mutator *m;
        heapd_stats_t st;
        if (heapd_connect(&c, &o) < 0 || heapd_attach(c, &m) < 0)
            _exit(2);
        if (kept) {
            const uint32_t *x = heapd_global_get(m, "held");
            if (!x)
                _exit(3);
            for (int i = 0; i < 16; i++)
                if (x[i] != HELD_MAGIC)
                    _exit(4); /* its memory was given to another object */
            if (heapd_stats(c, &st) < 0 ||
                st.segments_orphaned == st.segments_adopted)
                _exit(5); /* freed while referenced */
        } else if (heapd_global_set(m, "held", NULL) < 0) {
            _exit(6);
        }
        heapd_detach(m);
        heapd_disconnect(c);
        _exit(0);
    }
    int status = harness_wait_pid(kid, HARNESS_WAIT_MS);
    ck_assert_msg(status == 0, "held object step (kept %d) failed: status "
                  "0x%x (4: its bytes changed, 5: its segment was freed "
                  "while a global held it)", kept, status);
}

START_TEST(scribbled_segment_is_kept_while_referenced)
{
    struct bystander b = bystander_begin();
    pid_t kid = harness_fork_mutator(&D, scribble_held_header, NULL);
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    for (int i = 0; i < 3; i++) /* cycles, each allocating */
        heap_still_works("a scribbled, referenced segment header");
    held_step(true);
    held_step(false); /* the global lets it go */
    for (int i = 0; i < 3; i++)
        heap_still_works("a scribbled segment header, let go");
    scribbled_segment_gone(b);
    harness_stop_clean(&D);
}
END_TEST

/* ---- the daemon's page (Note [The daemon's page]) ---- */

/* Making the daemon's page writable is refused (exits 5 or 6 if not);
 * the fault that follows kills this process plainly (a sanitizer's own
 * SEGV report would read as a bug of the build). */
static void try_mprotect(struct layout_control *ctl)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGSEGV, &dfl, NULL);
    if (mprotect(ctl, LAYOUT_DAEMON_BYTES, PROT_READ | PROT_WRITE) == 0)
        _exit(5);
    if (errno != EACCES)
        _exit(6);
}

static void forge_phase(struct layout_control *ctl)
{
    try_mprotect(ctl);
    atomic_store(&ctl->phase, LAYOUT_PHASE_MARK); /* faults */
}

static void forge_epoch(struct layout_control *ctl)
{
    try_mprotect(ctl);
    atomic_store(&ctl->epoch, 0); /* faults */
}

static void forge_magic(struct layout_control *ctl)
{
    try_mprotect(ctl);
    ctl->magic = 0; /* faults */
}

/* The page of WORD, one of the globals' words, cannot be made writable
 * either (exits 5 or 6 if it can). */
static void try_mprotect_page(const void *word)
{
    long page = sysconf(_SC_PAGESIZE);
    void *p = (void *)((uintptr_t)word & ~(uintptr_t)(page - 1));
    if (mprotect(p, (size_t)page, PROT_READ | PROT_WRITE) == 0)
        _exit(5);
    if (errno != EACCES)
        _exit(6);
}

/* The bystander's global "victim", in the daemon's part of the table. */
static struct layout_global *victim(struct layout_control *ctl)
{
    for (unsigned i = 0; i < LAYOUT_MAX_GLOBALS; i++)
        if (strcmp(ctl->globals[i].name, "victim") == 0)
            return &ctl->globals[i];
    _exit(7);
}

static void forge_global_state(struct layout_control *ctl)
{
    struct layout_global *g = victim(ctl);
    try_mprotect(ctl);
    try_mprotect_page(&g->state);
    atomic_store(&g->state, LAYOUT_GLOBAL_INITIALIZING); /* faults */
}

static void forge_global_owner(struct layout_control *ctl)
{
    struct layout_global *g = victim(ctl);
    try_mprotect(ctl);
    try_mprotect_page(&g->owner);
    g->owner = 12345678; /* faults */
}

static void forge_global_name(struct layout_control *ctl)
{
    struct layout_global *g = victim(ctl);
    try_mprotect(ctl);
    try_mprotect_page(g->name);
    g->name[0] = 'V'; /* faults */
}

/* Each store into the daemon's page kills only the process that made
 * it: the heap collects, attaches and stops, the bystander's lists are
 * whole, and a new client is not refused (a bad magic or epoch of 0
 * outlived the writer before). */
START_TEST(daemons_page_is_read_only)
{
    static const struct {
        attack_fn attack;
        const char *what;
    } forgeries[] = {
        {forge_phase, "a forged phase"},
        {forge_epoch, "an epoch of 0"},
        {forge_magic, "a bad magic"},
        {forge_global_state, "INITIALIZING forged into a global's state"},
        {forge_global_owner, "another owner forged into a global"},
        {forge_global_name, "a global's name overwritten"},
    };
    struct bystander b = bystander_begin();
    for (size_t i = 0; i < sizeof forgeries / sizeof forgeries[0]; i++) {
        int status = attacker_status(forgeries[i].attack);
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
                      "%s: the attacker was not stopped by a fault (status "
                      "0x%x; exit 5: mprotect made the page writable, 6: it "
                      "failed with another error than EACCES, 7: no global "
                      "'victim' in the table)",
                      forgeries[i].what, status);
        heap_still_works(forgeries[i].what);
    }
    bystander_end(b, "the forgeries");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("isolation");
    TCase *t = tcase_create("slots");
    tcase_add_test(t, random_bytes_in_the_control_area_cost_nothing);
    tcase_add_test(t, nonsense_in_own_slot_disconnects_the_client);
    tcase_add_test(t, garbage_in_own_capture_is_dropped);
    tcase_add_test(t, tagged_garbage_in_own_ring_is_dropped);
    tcase_add_test(t, a_slot_promoting_for_good_keeps_its_roots);
    tcase_add_test(t, young_slot_alloc_bytes_past_its_grants_are_bounded);
    tcase_add_test(t, daemons_page_is_read_only);
    tcase_add_test(t, scribbled_segment_header_leaves_nothing);
    tcase_add_test(t, scribbled_segment_is_kept_while_referenced);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
