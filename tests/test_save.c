/* Saved heaps (Note [Saving a heap at a snapshot] in daemon/gc/save.c,
 * Note [Loading a saved heap] in daemon/gc/load.c): a heap saved while
 * processes relink it comes back in a fresh heapd (a new boot: nothing in
 * the store) as it was at the save's snapshot, objects small, of the run
 * class and large; and a damaged file, a truncated one, another heap's
 * and one of a future format are each refused with the offset and the
 * reason, the heap empty and serviceable. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "savefile.h"
#include "check_main.h"

static struct daemon_proc D;

#define NODES 3000
#define MAGIC 0x73617665642121ull
#define WRITERS 3
/* a writer's pairs: writer 0's array is too wide to stage in a ring
 * (chunks, Note [Saving under the barrier]), the others' narrow */
#define PAIRS_OF(w) ((w) == 0 ? 9000u : 64u)

struct node {
    void *next;
    uint64_t index, check;
};

static void start(const char *extra)
{
    char conf[8192];
    snprintf(conf, sizeof conf, "verify = true\n%s", extra ? extra : "");
    harness_start_logged(&D, harness_default_config("@SOCK@", conf),
                         "heapd.log");
}

/* The text of the harness's config CONF with FROM replaced by TO. */
static void swap_line(char *conf, size_t n, const char *from, const char *to)
{
    char *at = strstr(conf, from);
    ck_assert_ptr_nonnull(at);
    size_t tail = strlen(at + strlen(from)) + 1;
    ck_assert_uint_lt(strlen(conf) - strlen(from) + strlen(to), n);
    memmove(at + strlen(to), at + strlen(from), tail);
    memcpy(at, to, strlen(to));
}

/* start(EXTRA) with segments of SEG and a max_size of MAX instead of the
 * harness's 128K and 1G. */
static void start_sized(const char *seg, const char *max, const char *extra)
{
    char conf[8192], line[64];
    snprintf(conf, sizeof conf, "%s", harness_default_config("@SOCK@",
             "verify = true\n"));
    snprintf(line, sizeof line, "segment_size = %s\n", seg);
    swap_line(conf, sizeof conf, "segment_size = 128K\n", line);
    snprintf(line, sizeof line, "max_size = %s\n", max);
    swap_line(conf, sizeof conf, "max_size = 1G\n", line);
    ck_assert_uint_lt(strlen(conf) + strlen(extra), sizeof conf);
    strcat(conf, extra);
    harness_start_logged(&D, conf, "heapd.log");
}

/* A fresh heapd (as after a reboot: nothing kept) loading FILE. */
static void start_loading(const char *file)
{
    char extra[4200];
    harness_stop_clean(&D);
    harness_forget_store(&D);
    snprintf(extra, sizeof extra, "load = %s\n", file);
    start(extra);
}

static void save_ok(const char *file, heapd_save_info *si)
{
    heapd_client *c = harness_connect_ok(D.sock, HEAPD_CONNECT_CONTROL);
    int rc = heapd_heap_save(c, "default", file, si);
    ck_assert_msg(rc == 0, "save: %s", heapd_last_error());
    heapd_disconnect(c);
}

/* ---- a list, a run object, a large object ---- */

static void publish(heapd_mutator *m, void *arg)
{
    (void)arg;
    size_t slot = heapd_root_push(m, NULL);
    for (uint64_t i = 0; i < NODES; i++) {
        struct node *n = heapd_alloc(m, 1, 2 * sizeof(uint64_t));
        ck_assert_msg(n != NULL, "alloc: %s", heapd_last_error());
        n->index = i;
        n->check = i ^ MAGIC;
        heapd_write(m, n, &n->next, heapd_root_get(m, slot));
        heapd_root_set(m, slot, n);
        if (i % 3 == 0) /* and garbage, which is not saved */
            ck_assert_ptr_nonnull(heapd_alloc(m, 0, 100));
    }
    ck_assert_int_eq(heapd_global_set(m, "list", heapd_root_get(m, slot)), 0);
    /* 40 KiB of bytes: the run class; 4 MiB and a reference: large */
    uint8_t *run = heapd_alloc(m, 0, 40 * 1024);
    ck_assert_ptr_nonnull(run);
    for (size_t k = 0; k < 40 * 1024; k++)
        run[k] = (uint8_t)(k * 7);
    ck_assert_int_eq(heapd_global_set(m, "run", run), 0);
    void **big = heapd_alloc(m, 1, 4u << 20);
    ck_assert_ptr_nonnull(big);
    for (size_t k = 0; k < (4u << 20) / 8; k++)
        ((uint64_t *)(big + 1))[k] = k ^ MAGIC;
    heapd_write(m, big, &big[0], heapd_global_get(m, "list"));
    ck_assert_int_eq(heapd_global_set(m, "big", big), 0);
    heapd_root_pop(m, 1);
}

/* 20,000 more nodes under global "moreN", N counting up (a save of many
 * objects, for the stop test) */
static void publish_more(heapd_mutator *m, void *arg)
{
    static int n;
    char name[16];
    (void)arg;
    snprintf(name, sizeof name, "more%d", n++);
    size_t slot = heapd_root_push(m, NULL);
    for (uint64_t i = 0; i < 20000; i++) {
        struct node *x = heapd_alloc(m, 1, 2 * sizeof(uint64_t));
        ck_assert_ptr_nonnull(x);
        heapd_write(m, x, &x->next, heapd_root_get(m, slot));
        heapd_root_set(m, slot, x);
    }
    ck_assert_int_eq(heapd_global_set(m, name, heapd_root_get(m, slot)), 0);
    heapd_root_pop(m, 1);
}

/* A node under global "one", in a heap too small for publish's. */
static void one_node(heapd_mutator *m, void *arg)
{
    (void)arg;
    ck_assert_ptr_null(heapd_global_get(m, "one"));
    struct node *n = heapd_alloc(m, 1, 2 * sizeof(uint64_t));
    ck_assert_ptr_nonnull(n);
    n->check = MAGIC;
    ck_assert_int_eq(heapd_global_set(m, "one", n), 0);
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    ck_assert_uint_eq(((struct node *)heapd_global_get(m, "one"))->check,
                      MAGIC);
}

static void check(heapd_mutator *m, void *arg)
{
    (void)arg;
    struct node *p = heapd_global_get(m, "list");
    uint64_t n = 0;
    ck_assert_msg(p != NULL, "global 'list' is gone");
    for (; p; p = p->next, n++) {
        ck_assert_uint_eq(p->index, NODES - 1 - n);
        ck_assert_uint_eq(p->check, p->index ^ MAGIC);
    }
    ck_assert_uint_eq(n, NODES);
    uint8_t *run = heapd_global_get(m, "run");
    ck_assert_ptr_nonnull(run);
    for (size_t k = 0; k < 40 * 1024; k++)
        ck_assert_uint_eq(run[k], (uint8_t)(k * 7));
    void **big = heapd_global_get(m, "big");
    ck_assert_ptr_nonnull(big);
    ck_assert_ptr_eq(big[0], heapd_global_get(m, "list"));
    for (size_t k = 0; k < (4u << 20) / 8; k++)
        ck_assert_uint_eq(((uint64_t *)(big + 1))[k], k ^ MAGIC);
}

static void with_mutator(void (*body)(heapd_mutator *m, void *arg))
{
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    body(m, NULL);
    ck_assert_int_eq(heapd_collect(m, HEAPD_COLLECT_WAIT), 0);
    heapd_detach(m);
    heapd_disconnect(c);
}

static void file_in_dir(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", D.dir, name);
}

/* A heapd with publish's objects, saved to NAME in its dir: FILE (N
 * bytes), *SI. */
static void saved_list(char *file, size_t n, const char *name,
                       heapd_save_info *si)
{
    start(NULL);
    with_mutator(publish);
    file_in_dir(file, n, name);
    save_ok(file, si);
}

START_TEST(a_saved_heap_loads_into_a_fresh_heapd)
{
    char file[256];
    heapd_save_info si;
    saved_list(file, sizeof file, "heap.save", &si);
    ck_assert_uint_eq(si.objects, NODES + 2);
    ck_assert_uint_eq(si.globals, 3);
    ck_assert_uint_eq(si.inexact, 0);
    ck_assert_uint_eq(si.bad_refs, 0);
    struct stat st;
    ck_assert_int_eq(stat(file, &st), 0);
    ck_assert_uint_eq((uint64_t)st.st_size, si.file_bytes);
    /* the file is under a quarter of the heap's 4.3 MB of live objects
     * more than their bytes (headers, framing) */
    ck_assert_uint_lt(si.file_bytes, si.object_bytes + si.object_bytes / 4);
    start_loading(file);
    char line[128];
    snprintf(line, sizeof line, "%" PRIu64 " objects (%" PRIu64 " bytes, 0 "
             "placed anew)", si.objects, si.object_bytes);
    ck_assert_msg(harness_log_contains(&D, line), "no line '%s' in the log",
                  line);
    with_mutator(check);
    /* and it goes on: more objects, cycles, the verifier */
    with_mutator(check);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* ---- a save while writers relink ---- */

/* A writer's pairs: each pair's two references always name the same
 * leaf at a snapshot, for the writer writes both with no safepoint
 * between them; a copy made field by field over time would not. */
struct pair {
    void *a, *b;
    uint64_t serial, check;
};

static void relink(heapd_mutator *m, void *arg)
{
    int wfd = (int)(intptr_t)arg;
    char name[16];
    snprintf(name, sizeof name, "pairs%d", wfd % 100);
    const unsigned pairs = PAIRS_OF(wfd % 100);
    uint64_t serial = (uint64_t)wfd << 40;
    size_t slot = heapd_root_push(m, NULL);
    void **arr = heapd_alloc(m, pairs, 0);
    ck_assert_ptr_nonnull(arr);
    heapd_root_set(m, slot, arr);
    for (unsigned i = 0; i < pairs; i++) {
        struct pair *p = heapd_alloc(m, 2, 16);
        ck_assert_ptr_nonnull(p);
        p->serial = ++serial;
        p->check = p->serial ^ MAGIC;
        heapd_write(m, arr, &arr[i], p);
    }
    ck_assert_int_eq(heapd_global_set(m, name, arr), 0);
    heapd_root_pop(m, 1);
    ck_assert_int_eq(write(wfd, "r", 1), 1); /* running */
    for (uint64_t it = 0;; it++) {
        arr = heapd_global_get(m, name);
        unsigned i = (unsigned)(it * 2654435761u) % pairs;
        if (it % 5 == 0) { /* a new pair in the array */
            struct pair *p = heapd_alloc(m, 2, 16);
            ck_assert_ptr_nonnull(p);
            p->serial = ++serial;
            p->check = p->serial ^ MAGIC;
            arr = heapd_global_get(m, name);
            heapd_write(m, arr, &arr[i], p);
            continue;
        }
        struct node *leaf = heapd_alloc(m, 0, 16);
        ck_assert_ptr_nonnull(leaf);
        leaf->next = (void *)(uintptr_t)(++serial); /* raw here */
        leaf->index = serial ^ MAGIC;
        arr = heapd_global_get(m, name);
        struct pair *p = arr[i];
        heapd_write(m, p, &p->a, leaf);
        heapd_write(m, p, &p->b, leaf);
    }
}

static void check_pairs(heapd_mutator *m, void *arg)
{
    (void)arg;
    for (int w = 0; w < WRITERS; w++) {
        char name[16];
        snprintf(name, sizeof name, "pairs%d", w);
        void **arr = heapd_global_get(m, name);
        ck_assert_msg(arr != NULL, "global %s is gone", name);
        for (unsigned i = 0; i < PAIRS_OF(w); i++) {
            struct pair *p = arr[i];
            ck_assert_ptr_nonnull(p);
            ck_assert_msg(p->a == p->b, "%s[%u]: a %p and b %p: not as at "
                          "one snapshot", name, i, p->a, p->b);
            ck_assert_uint_eq(p->check, p->serial ^ MAGIC);
            struct node *leaf = p->a;
            if (leaf)
                ck_assert_uint_eq(leaf->index,
                                  (uint64_t)(uintptr_t)leaf->next ^ MAGIC);
        }
    }
}

START_TEST(a_save_while_processes_relink_is_their_snapshot)
{
    char file[256];
    pid_t kids[WRITERS];
    heapd_save_info si = {0};
    start(NULL);
    with_mutator(publish);
    for (int w = 0; w < WRITERS; w++) {
        int p[2];
        char c;
        ck_assert_int_eq(pipe(p), 0);
        /* the write end's number names the writer's global: dup it */
        int fd = fcntl(p[1], F_DUPFD, 100 + w);
        ck_assert_int_eq(fd, 100 + w);
        close(p[1]);
        kids[w] = fork();
        ck_assert_int_ge(kids[w], 0);
        if (kids[w] == 0) {
            heapd_client *kc;
            heapd_mutator *m;
            close(p[0]);
            harness_attach(&D, &kc, &m);
            relink(m, (void *)(intptr_t)fd); /* until killed */
            _exit(0);
        }
        close(fd);
        ck_assert_int_eq(read(p[0], &c, 1), 1);
        close(p[0]);
    }
    file_in_dir(file, sizeof file, "torture.save");
    for (int round = 0; round < 3; round++)
        save_ok(file, &si);
    for (int w = 0; w < WRITERS; w++) {
        kill(kids[w], SIGKILL);
        waitpid(kids[w], NULL, 0);
    }
    ck_assert_uint_eq(si.inexact, 0);
    ck_assert_uint_eq(si.bad_refs, 0);
    ck_assert_uint_eq(si.globals, 3 + WRITERS);
    start_loading(file);
    with_mutator(check);
    with_mutator(check_pairs);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* ---- files heapd must refuse ---- */

static size_t slurp(const char *path, uint8_t **out)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    uint8_t *b = malloc((size_t)st.st_size);
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(read(fd, b, (size_t)st.st_size), st.st_size);
    close(fd);
    *out = b;
    return (size_t)st.st_size;
}

static void spit(const char *path, const uint8_t *b, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, b, n), (ssize_t)n);
    close(fd);
}

/* The heap holds no list, takes publish's and keeps it, verified. */
static void empty_and_serviceable(void)
{
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    ck_assert_ptr_null(heapd_global_get(m, "list"));
    heapd_detach(m);
    heapd_disconnect(c);
    with_mutator(publish);
    with_mutator(check);
    harness_expect_healthy(&D);
}

/* heapd started on BAD refuses it saying WHY, and serves the heap
 * empty. */
static void refused(const char *bad, const char *why)
{
    start_loading(bad);
    ck_assert_msg(harness_log_contains(&D, "not loaded, the heap starts "
                                       "empty"), "no refusal logged");
    ck_assert_msg(harness_log_contains(&D, why), "the refusal does not "
                  "say '%s'", why);
    empty_and_serviceable();
}

START_TEST(damaged_files_are_refused_and_the_heap_stays_empty)
{
    char file[256], bad[256];
    heapd_save_info si;
    uint8_t *b;
    saved_list(file, sizeof file, "good.save", &si);
    size_t n = slurp(file, &b);
    file_in_dir(bad, sizeof bad, "bad.save");

    spit(bad, b, n / 2); /* truncated */
    refused(bad, "it is truncated");

    b[n / 2] ^= 0x10; /* a flipped byte */
    spit(bad, b, n);
    b[n / 2] ^= 0x10;
    refused(bad, "does not match: the file is damaged");

    uint8_t h[SAVE_HEADER_BYTES];
    memcpy(h, b, sizeof h);
    save_put64(b + 16, HARNESS_HEAP_BASE + (1ull << 32)); /* another base */
    save_put32(b + 60, save_crc32c(0, b, 60));
    spit(bad, b, n);
    refused(bad, "the file is of a heap at base 0x7e8100000000");

    memcpy(b, h, sizeof h);
    save_put32(b + 8, SAVE_FORMAT + 1); /* a future format */
    save_put32(b + 60, save_crc32c(0, b, 60));
    spit(bad, b, n);
    refused(bad, "load it with the heapd that saved it, or a newer one");

    /* no file there, and a directory (a FIFO would be refused alike,
     * never opened for long) */
    file_in_dir(bad, sizeof bad, "missing.save");
    refused(bad, "No such file or directory");
    refused("/tmp", "not a regular file");
    file_in_dir(bad, sizeof bad, "bad.save");

    memcpy(b, h, sizeof h); /* and the file itself still loads */
    spit(bad, b, n);
    start_loading(bad);
    with_mutator(check);
    harness_expect_healthy(&D);
    free(b);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* heapctl as an operator runs it: save, a load into a heap that holds
 * objects refused, a load into an empty heap of a fresh heapd. */
static int heapctl(const char *args, char *out, size_t n)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --socket %s %s 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock, args);
    return harness_run(cmd, out, n);
}

START_TEST(heapctl_saves_and_loads)
{
    char file[256], args[512], out[4096];
    start(NULL);
    with_mutator(publish);
    file_in_dir(file, sizeof file, "ctl.save");
    snprintf(args, sizeof args, "save default %s", file);
    ck_assert_msg(heapctl(args, out, sizeof out) == 0, "save: %s", out);
    ck_assert_msg(strstr(out, "3002 objects"), "save said: %s", out);
    snprintf(args, sizeof args, "load default %s", file);
    ck_assert_msg(heapctl(args, out, sizeof out) != 0, "a load into a heap "
                  "with objects was taken: %s", out);
    ck_assert_msg(strstr(out, "holds objects"), "the refusal: %s", out);
    harness_stop_clean(&D);
    harness_forget_store(&D);
    start(NULL);
    ck_assert_msg(heapctl(args, out, sizeof out) == 0, "load: %s", out);
    ck_assert_msg(strstr(out, "loaded") && strstr(out, "3002 objects") &&
                  strstr(out, "0 placed anew"), "load said: %s", out);
    with_mutator(check);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* A heapd of another segment size (an upgrade that changes the layout)
 * loads the file anew: every object in a block of its own layout, every
 * reference rewritten; saved there and loaded back into the first
 * layout, the same again. */
START_TEST(a_heap_saved_with_another_layout_loads_moved)
{
    char file[256], back[256];
    heapd_save_info si;
    heapd_load_info li;
    saved_list(file, sizeof file, "heap.save", &si);
    harness_stop_clean(&D);
    harness_forget_store(&D);
    start_sized("256K", "1G", "");
    heapd_client *c = harness_connect_ok(D.sock, HEAPD_CONNECT_CONTROL);
    int rc = heapd_heap_load(c, "default", file, &li);
    ck_assert_msg(rc == 0, "load: %s", heapd_last_error());
    heapd_disconnect(c);
    ck_assert_uint_eq(li.objects, NODES + 2);
    ck_assert_uint_eq(li.moved, NODES + 2);
    ck_assert_uint_eq(li.globals, 3);
    ck_assert_msg(harness_log_contains(&D, "was saved with another layout"),
                  "the log does not say why the objects moved");
    with_mutator(check);
    harness_expect_healthy(&D);
    /* and back: a 256K heap's file into a 128K heapd, by load = */
    file_in_dir(back, sizeof back, "back.save");
    save_ok(back, &si);
    ck_assert_uint_eq(si.objects, NODES + 2);
    ck_assert_uint_eq(si.inexact, 0);
    start_loading(back);
    ck_assert_msg(harness_log_contains(&D, "3002 placed anew"),
                  "no load that moved every object in the log");
    with_mutator(check);
    with_mutator(check);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* A file of the records REC (N words) at HARNESS_HEAP_BASE, with
 * checksums and totals right: what a hostile writer can make. */
static void craft(const char *path, const uint64_t *rec, size_t n,
                  uint64_t objects, uint64_t object_bytes, uint64_t globals)
{
    uint8_t head[SAVE_HEADER_BYTES], prefix[8], crc[4], end[32];
    struct save_header hd = {.format = SAVE_FORMAT, .base = HARNESS_HEAP_BASE};
    uint8_t *payload = malloc(n * 8);
    for (size_t k = 0; k < n; k++)
        save_put64(payload + 8 * k, rec[k]);
    save_header_encode(&hd, head);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, head, sizeof head), (ssize_t)sizeof head);
    save_chunk_prefix(prefix, SAVE_CHUNK_DATA, (uint32_t)(n * 8));
    save_put32(crc, save_chunk_crc(prefix, payload, (uint32_t)(n * 8)));
    ck_assert_int_eq(write(fd, prefix, 8), 8);
    ck_assert_int_eq(write(fd, payload, n * 8), (ssize_t)(n * 8));
    ck_assert_int_eq(write(fd, crc, 4), 4);
    save_put64(end, objects);
    save_put64(end + 8, object_bytes);
    save_put64(end + 16, globals);
    save_put64(end + 24, n * 8);
    save_chunk_prefix(prefix, SAVE_CHUNK_END, 32);
    save_put32(crc, save_chunk_crc(prefix, end, 32));
    ck_assert_int_eq(write(fd, prefix, 8), 8);
    ck_assert_int_eq(write(fd, end, 32), 32);
    ck_assert_int_eq(write(fd, crc, 4), 4);
    close(fd);
    free(payload);
}

/* The crafted pair: global "pair" names an object whose one reference
 * names one whose reference names it back, and whose 8 bytes are these. */
#define PAIR_BYTES 0x7061697262797465ull

static void check_pair(heapd_mutator *m, void *arg)
{
    (void)arg;
    void **a = heapd_global_get(m, "pair");
    ck_assert_ptr_nonnull(a);
    void **b = a[0];
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_eq(b[0], a);
    ck_assert_uint_eq(((uint64_t *)b)[1], PAIR_BYTES);
}

/* Files of two objects at X and Y of BLK, each with one reference,
 * refused as they refer to no object of the file: one by a reference,
 * one by a global; loaded MOVED or in place. */
static void refs_to_nothing(const char *bad, uint64_t x, uint64_t y,
                            uint64_t blk, bool moved)
{
    uint64_t one_ref = layout_header(1, 0);
    uint64_t dangling[] = {x | SAVE_REC_OBJECT, blk, one_ref, y + 64};
    craft(bad, dangling, 4, 1, 16, 0);
    refused(bad, "which the file holds no object at");
    ck_assert(harness_log_contains(&D, "saved with another layout") ==
              moved);
    uint64_t global[] = {x | SAVE_REC_OBJECT, blk, one_ref, y,
                         y | SAVE_REC_OBJECT, blk, one_ref, x,
                         SAVE_REC_GLOBAL, y + 64, 5, 0x676e6f7277ull};
    craft(bad, global, 12, 2, 32, 1);
    refused(bad, "global 'wrong' refers to");
    ck_assert(harness_log_contains(&D, "saved with another layout") ==
              moved);
}

/* Files whose checksums hold and whose records lie: each refused before
 * or after anything is placed, the heap empty and serviceable. */
START_TEST(crafted_files_are_refused_and_the_heap_stays_empty)
{
    char bad[256];
    const uint64_t seg = HARNESS_HEAP_BASE + (200ull << 17); /* 128K */
    const uint64_t hdr0 = 0; /* no refs, no bytes: 8 bytes */
    start(NULL);
    file_in_dir(bad, sizeof bad, "crafted.save");

    /* a run of 2^32 + 2 granules (a span that would wrap in 32 bits) and
     * a large run of 2^32 + 1 segments: blocks larger than the heap */
    uint64_t run[] = {(seg + 1024 + 8) | SAVE_REC_OBJECT,
                      (1024ull * ((1ull << 32) + 2)) |
                          (uint64_t)SAVE_BLOCK_RUN << SAVE_BLOCK_KIND_SHIFT,
                      hdr0};
    craft(bad, run, 3, 1, 8, 0);
    refused(bad, "more than the heap's max_size");

    uint64_t large[] = {(seg + 128 + 8) | SAVE_REC_OBJECT,
                        ((((1ull << 32) + 1) << 17) - 128) |
                            (uint64_t)SAVE_BLOCK_LARGE
                                << SAVE_BLOCK_KIND_SHIFT,
                        hdr0};
    craft(bad, large, 3, 1, 8, 0);
    refused(bad, "more than the heap's max_size");

    /* objects of the 16-byte class at blocks 0 and 1 of segment 200 */
    uint32_t nblocks, first;
    unsigned c16 = layout_size_class(16);
    layout_small_geometry(128u << 10, c16, &nblocks, &first);
    uint64_t b0 = seg + first + 8, b1 = b0 + 16;
    uint64_t blk = 16 | (uint64_t)SAVE_BLOCK_SMALL << SAVE_BLOCK_KIND_SHIFT;
    uint64_t one_ref = layout_header(1, 0);

    /* two objects on one block */
    uint64_t twice[] = {b0 | SAVE_REC_OBJECT, blk, one_ref, b0,
                        b0 | SAVE_REC_OBJECT, blk, one_ref, 0};
    craft(bad, twice, 8, 2, 32, 0);
    refused(bad, "overlaps another object of the file where it was saved");
    /* references to nothing, at blocks of this layout, then inside blocks
     * of the 16-byte class, which this layout has no block at: found
     * once they are moved (Note [Loading a heap saved with another
     * layout]), and so an overlap of two 16-byte objects there */
    refs_to_nothing(bad, b0, b1, blk, false);
    uint64_t m0 = b0 + 8;
    refs_to_nothing(bad, m0, b0 + 40, blk, true);
    uint64_t moverlap[] = {m0 | SAVE_REC_OBJECT, blk, one_ref, 0,
                           (m0 + 8) | SAVE_REC_OBJECT, blk, one_ref, 0};
    craft(bad, moverlap, 8, 2, 32, 0);
    refused(bad, "overlaps another object of the file where it was saved");
    /* an object at no address a heap at this base has */
    uint64_t below[] = {(HARNESS_HEAP_BASE - 64) | SAVE_REC_OBJECT, blk,
                        one_ref, 0};
    craft(bad, below, 4, 1, 16, 0);
    refused(bad, "is at no address of a heap at 0x7e8000000000");
    uint64_t above[] = {(LAYOUT_USER_SPACE_END + 8) | SAVE_REC_OBJECT, blk,
                        one_ref, 0};
    craft(bad, above, 4, 1, 16, 0);
    refused(bad, "is at no address of a heap at 0x7e8000000000");

    /* two objects of two classes on one segment: a load in place finds
     * it taken, and starts again moving, the global set again */
    unsigned c24 = layout_size_class(24);
    uint32_t nb24, first24;
    layout_small_geometry(128u << 10, c24, &nb24, &first24);
    uint64_t o24 = seg + first24 + 8;
    uint64_t blk24 = layout_class_size[c24] |
                     (uint64_t)SAVE_BLOCK_SMALL << SAVE_BLOCK_KIND_SHIFT;
    uint64_t two[] = {b0 | SAVE_REC_OBJECT, blk, one_ref, o24,
                      o24 | SAVE_REC_OBJECT, blk24, layout_header(1, 8), b0,
                      PAIR_BYTES, SAVE_REC_GLOBAL, b0, 4, 0x72696170ull};
    craft(bad, two, 13, 2, 40, 1);
    start_loading(bad);
    ck_assert_msg(harness_log_contains(&D, "2 placed anew"), "the two were "
                  "not loaded moved");
    ck_assert_msg(harness_log_contains(&D, "another object of the file took "
                                       "in this heapd's layout"),
                  "the load did not start again from one in place");
    with_mutator(check_pair);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);

    /* objects that, moved, do not fit the smallest heap: two of 100 KiB
     * in the run class, where its one segment past the control area
     * holds one */
    enum { RAW = 100 * 1024, WORDS = 3 + RAW / 8 };
    uint64_t *big = calloc(2 * WORDS, sizeof *big);
    ck_assert_ptr_nonnull(big);
    for (unsigned k = 0; k < 2; k++) {
        uint64_t *rec = big + k * WORDS;
        rec[0] = (HARNESS_HEAP_BASE + (2ull << 30) + k * (1u << 20)) |
                 SAVE_REC_OBJECT;
        rec[1] = 101 * 1024 |
                 (uint64_t)SAVE_BLOCK_RUN << SAVE_BLOCK_KIND_SHIFT;
        rec[2] = layout_header(0, RAW);
    }
    craft(bad, big, 2 * WORDS, 2, 2 * layout_object_size(0, RAW), 0);
    free(big);
    char extra[300];
    snprintf(extra, sizeof extra, "load = %s\n", bad);
    start_sized("128K", "16512K", extra);
    ck_assert(harness_log_contains(&D, "does not fit in what is left of "
                                   "heap 'default'"));
    with_mutator(one_node); /* serviceable */
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* ---- a client that forges save records ---- */

/* The kid's slot: the first window of its own control memory, as
 * /proc/self/maps names it (Note [Client control memory]). */
static struct layout_mutator *own_slot(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long lo = 0;
    while (f && fgets(line, sizeof line, f) && !lo)
        if (!(strstr(line, "heapd:") && strstr(line, ":client-") &&
              sscanf(line, "%lx-", &lo) == 1))
            lo = 0;
    if (f)
        fclose(f);
    return (struct layout_mutator *)lo;
}

static char hold[64];

/* While the save's cycle is held after its snapshot, the kid writes into
 * its own ring every save record a client can get wrong: a count past the
 * ring, a record of no object, one of its own object with a wrong count
 * and garbage fields, the same again, one of another client's object (the
 * list's head) with garbage fields, wide records' chunks short,
 * out of place, too long or begun 1,000 times, and last a record cut
 * short by the head. */
static void forge(heapd_mutator *m, void *arg)
{
    int done = (int)(intptr_t)arg;
    const struct layout_control *ctl = (const void *)HARNESS_HEAP_BASE;
    struct layout_mutator *s = own_slot();
    void **mine = heapd_alloc(m, 2, 8);
    if (!s || !mine || heapd_global_set(m, "mine", mine) < 0)
        _exit(5);
    uintptr_t list = (uintptr_t)heapd_global_get(m, "list");
    heapd_blocking_enter(m); /* it holds up no stop */
    int64_t end = harness_now_ms() + HARNESS_WAIT_MS;
    while (!(atomic_load(&ctl->phase) == LAYOUT_PHASE_MARK &&
             atomic_load(&ctl->save_epoch) == atomic_load(&ctl->epoch)))
        if (harness_now_ms() > end)
            _exit(6);
    const uintptr_t saved = (uintptr_t)mine | LAYOUT_URS_SAVED;
    uintptr_t w[] = {
        0x1000 | LAYOUT_URS_SAVED, 100000,
        (HARNESS_HEAP_BASE + 64) | LAYOUT_URS_SAVED, 1, 0xdead0,
        saved, 5, 0xbad0, 0xbad8, 8, 16, 24,
        saved, 2, 0xbee0, 0xbee8,
        list | LAYOUT_URS_SAVED, 1, 0xfeed0,
        /* chunks (Note [Saving under the barrier]): one short and
         * committed, one out of place, one past its object */
        saved, LAYOUT_URS_CHUNK | 1, 777, 0, 0x1230,
        saved, LAYOUT_URS_COMMIT | 777,
        saved, LAYOUT_URS_CHUNK | 1, 888, 5, 0x4560,
        saved, LAYOUT_URS_CHUNK | 3, 999, 0, 1, 2, 3,
        saved, LAYOUT_URS_COMMIT | 999,
        saved, LAYOUT_URS_CHUNK | 100000, 1, 0,
    };
    /* and 1,000 empty chunks, each a wide record begun anew */
    uint64_t head = atomic_load(&s->urs_head), at = head;
    for (uintptr_t k = 0; k < 1000; k++) {
        uintptr_t c[4] = {saved, LAYOUT_URS_CHUNK, 5000 + k, 0};
        for (int i = 0; i < 4; i++)
            atomic_store(&s->urs[at++ % LAYOUT_URS_SIZE], (void *)c[i]);
    }
    size_t n = sizeof w / sizeof w[0];
    for (size_t k = 0; k < n; k++)
        atomic_store(&s->urs[(at + k) % LAYOUT_URS_SIZE], (void *)w[k]);
    n += at - head;
    atomic_store(&s->urs_head, head + n);
    if (write(done, "f", 1) != 1)
        _exit(7);
    for (;;)
        pause();
}

static void *save_in_background(void *arg)
{
    static heapd_save_info si;
    heapd_client *c = harness_connect_ok(D.sock, HEAPD_CONNECT_CONTROL);
    int rc = heapd_heap_save(c, "default", arg, &si);
    heapd_disconnect(c);
    return rc == 0 ? &si : NULL;
}

static void *load_in_background(void *arg)
{
    heapd_client *c = harness_connect_ok(D.sock, HEAPD_CONNECT_CONTROL);
    int rc = heapd_heap_load(c, "default", arg, NULL);
    heapd_disconnect(c);
    return rc == 0 ? arg : NULL;
}

/* heapctl load closes the heap to mutators until it is loaded (the
 * cycle after the load is held, so "until" lasts): one that connects
 * meanwhile is refused saying so, and gets the loaded heap after. */
START_TEST(a_mutator_waits_for_a_load)
{
    char file[256];
    heapd_save_info si;
    pthread_t t;
    void *res;
    saved_list(file, sizeof file, "waits.save", &si);
    harness_stop_clean(&D);
    harness_forget_store(&D);
    snprintf(hold, sizeof hold, "/tmp/heapd-hold-%d", (int)getpid());
    setenv("HEAPD_TEST_HOLD_MARKING", hold, 1);
    start(NULL);
    unsetenv("HEAPD_TEST_HOLD_MARKING");
    FILE *f = fopen(hold, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(pthread_create(&t, NULL, load_in_background, file), 0);
    int64_t end = harness_now_ms() + HARNESS_WAIT_MS;
    while (!harness_log_contains(&D, "loading a saved heap for client")) {
        if (harness_now_ms() > end) {
            unlink(hold);
            ck_abort_msg("heapd never said it was loading");
        }
        sched_yield();
    }
    heapd_client *c;
    heapd_connect_opts co = {.socket_path = D.sock};
    int rc = heapd_connect(&c, &co);
    const char *err = rc < 0 ? heapd_last_error() : "";
    bool said = strstr(err, "is loading a saved heap") != NULL;
    if (rc == 0)
        heapd_disconnect(c);
    unlink(hold);
    ck_assert_int_eq(pthread_join(t, &res), 0);
    ck_assert_msg(rc < 0 && said, "a mutator connected during the load "
                  "(rc %d: %s)", rc, err);
    ck_assert_msg(res != NULL, "the load failed");
    with_mutator(check);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

START_TEST(forged_save_records_cost_nobody_else)
{
    char file[256];
    int p[2];
    char ch;
    pthread_t t;
    void *res;
    harness_start_holding(&D, hold, sizeof hold);
    with_mutator(publish);
    ck_assert_int_eq(pipe(p), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        heapd_client *kc;
        heapd_mutator *m;
        close(p[0]);
        harness_attach(&D, &kc, &m);
        forge(m, (void *)(intptr_t)p[1]);
    }
    close(p[1]);
    FILE *f = fopen(hold, "w"); /* the save's cycle waits after its pause */
    ck_assert_ptr_nonnull(f);
    fclose(f);
    file_in_dir(file, sizeof file, "forged.save");
    ck_assert_int_eq(pthread_create(&t, NULL, save_in_background, file), 0);
    ck_assert_int_eq(read(p[0], &ch, 1), 1); /* forged */
    unlink(hold);
    ck_assert_int_eq(pthread_join(t, &res), 0);
    ck_assert_msg(res != NULL, "the save failed: %s", heapd_last_error());
    /* the forged records were read, and their garbage counted */
    ck_assert_uint_gt(harness_daemon_stats(&D).bad_refs, 0);
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    start_loading(file);
    with_mutator(check); /* the list as it was, whatever was forged */
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* No file named NAME.partial-* is left in the private dir. */
static void no_partial_left(const char *name)
{
    char cmd[512], out[1024];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c '^%s.partial-' || true",
             D.dir, name);
    harness_run(cmd, out, sizeof out);
    ck_assert_msg(atoi(out) == 0, "partial files of %s left: %s", name, out);
}

/* Note [Holding a save or a load for tests] in daemon/gc/heap.c: a heapd
 * that holds what it is asked for (WHAT, "save" or "load") while the
 * file PATH (this process's, N bytes) exists; the file is made here. */
static void start_holding_a(const char *what, char *path, size_t n)
{
    char env[64];
    snprintf(path, n, "/tmp/heapd-%s-hold-%d", what, (int)getpid());
    int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    snprintf(env, sizeof env, "HEAPD_TEST_HOLD_%s",
             strcmp(what, "save") == 0 ? "SAVE" : "LOAD");
    setenv(env, path, 1);
    start(NULL);
    unsetenv(env);
}

static bool log_says(void *arg, char *seen, size_t n)
{
    snprintf(seen, n, "no line '%s' in heapd's log yet", (char *)arg);
    return harness_log_contains(&D, arg);
}

/* A forked process asks for REQUEST(FILE); once heapd holds it (WHAT),
 * the process is killed, so that no connection's grace ends it either,
 * and heapd is stopped: it must exit 0 while the file PATH holds it. */
static void stop_while_held(const char *what, const char *path,
                            void *(*request)(void *), char *file)
{
    char line[64];
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        request(file);
        _exit(0);
    }
    snprintf(line, sizeof line, "the %s waits while", what);
    harness_wait_until(log_says, line, line);
    kill(kid, SIGKILL);
    harness_wait_pid(kid, HARNESS_WAIT_MS);
    harness_stop_clean(&D);
    unlink(path);
    ck_assert_msg(harness_log_contains(&D, "heapd is stopping"), "the %s "
                  "was not ended by the stop", what);
}

/* SIGTERM while the saver waits before its first object, nobody waiting
 * for the save: heapd ends the save rather than wait for it with the
 * cycle, exits 0 before the hold would end, and leaves neither the file
 * nor a partial one. */
START_TEST(a_stop_ends_a_save_under_way)
{
    char file[256], hold_save[64];
    start_holding_a("save", hold_save, sizeof hold_save);
    with_mutator(publish);
    file_in_dir(file, sizeof file, "held.save");
    stop_while_held("save", hold_save, save_in_background, file);
    no_partial_left("held.save");
    ck_assert_int_ne(access(file, F_OK), 0);
    harness_forget_store(&D);
}
END_TEST

/* SIGTERM while a heapctl load waits after its first pass, nobody
 * waiting for it: heapd ends the load rather than wait for it, exits 0
 * before the hold would end, and the heap it keeps is empty, as a
 * refused load leaves it. */
START_TEST(a_stop_ends_a_load_under_way)
{
    char file[256], hold_load[64];
    heapd_save_info si;
    saved_list(file, sizeof file, "held.save", &si);
    harness_stop_clean(&D);
    harness_forget_store(&D);
    start_holding_a("load", hold_load, sizeof hold_load);
    stop_while_held("load", hold_load, load_in_background, file);
    harness_restart(&D); /* the heap kept in the store */
    empty_and_serviceable();
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* A file rewritten between a load's first pass and its second, into
 * one of another layout (objects inside this layout's 32-byte blocks):
 * the second pass finds that out, starts again moving, and checks
 * everything again; the rewritten file's pair is what is loaded. */
START_TEST(a_file_changed_during_a_load_is_checked_again)
{
    char file[256], hold_load[64];
    heapd_save_info si;
    pthread_t t;
    void *res;
    saved_list(file, sizeof file, "changed.save", &si);
    harness_stop_clean(&D);
    harness_forget_store(&D);
    start_holding_a("load", hold_load, sizeof hold_load);
    ck_assert_int_eq(pthread_create(&t, NULL, load_in_background, file), 0);
    harness_wait_until(log_says, "the load waits while", "the load to wait");
    uint32_t nb32, first32;
    unsigned c32 = layout_size_class(32);
    layout_small_geometry(128u << 10, c32, &nb32, &first32);
    uint64_t x = HARNESS_HEAP_BASE + (200ull << 17) + first32 + 8 + 8;
    uint64_t y = x + 64;
    uint64_t blk32 = layout_class_size[c32] |
                     (uint64_t)SAVE_BLOCK_SMALL << SAVE_BLOCK_KIND_SHIFT;
    uint64_t pair[] = {x | SAVE_REC_OBJECT, blk32, layout_header(1, 0), y,
                       y | SAVE_REC_OBJECT, blk32, layout_header(1, 8), x,
                       PAIR_BYTES, SAVE_REC_GLOBAL, x, 4, 0x72696170ull};
    craft(file, pair, 13, 2, 40, 1);
    unlink(hold_load);
    ck_assert_int_eq(pthread_join(t, &res), 0);
    ck_assert_msg(res != NULL, "the rewritten file was not loaded");
    ck_assert(harness_log_contains(&D, "saved with another layout"));
    ck_assert(harness_log_contains(&D, "2 placed anew"));
    with_mutator(check_pair);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

/* SIGTERM while a save runs: heapd stops (the saver ends at its next
 * object, save_abort) and exits 0, no partial file is left, and a file
 * that was renamed loads.  Whichever comes first, the stop or the save's
 * end, these hold. */
START_TEST(a_stop_during_a_save_leaves_no_partial_file)
{
    char file[256];
    pthread_t t;
    void *res;
    start(NULL);
    with_mutator(publish);
    for (int k = 0; k < 20; k++)
        with_mutator(publish_more);
    file_in_dir(file, sizeof file, "stopped.save");
    ck_assert_int_eq(pthread_create(&t, NULL, save_in_background, file), 0);
    /* the request is in once its file exists */
    char cmd[512], out[256];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c '^stopped.save' || true",
             D.dir);
    int64_t end = harness_now_ms() + HARNESS_WAIT_MS;
    do {
        ck_assert_msg(harness_now_ms() < end, "no save file appeared");
        harness_run(cmd, out, sizeof out);
    } while (atoi(out) == 0);
    harness_stop_clean(&D);
    ck_assert_int_eq(pthread_join(t, &res), 0);
    no_partial_left("stopped.save");
    harness_forget_store(&D);
    /* a save that ended first renamed a whole file (its answer may have
     * been lost to the stop); one the stop ended left none */
    if (access(file, F_OK) == 0) {
        char extra[512];
        snprintf(extra, sizeof extra, "load = %s\n", file);
        start(extra); /* a fresh heapd: the other is gone */
        with_mutator(check);
        harness_stop_clean(&D);
        harness_forget_store(&D);
    } else {
        ck_assert_ptr_null(res);
    }
}
END_TEST

START_TEST(only_privileged_peers_save)
{
    /* root runs the other tests; here an unprivileged child asks */
    if (geteuid() != 0)
        return;
    char file[256];
    start(NULL);
    file_in_dir(file, sizeof file, "denied.save");
    pid_t kid = fork();
    if (kid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(2);
        heapd_client *c;
        heapd_connect_opts co = {.socket_path = D.sock,
                                 .flags = HEAPD_CONNECT_CONTROL};
        if (heapd_connect(&c, &co) < 0)
            _exit(3);
        int rc = heapd_heap_save(c, "default", file, NULL);
        _exit(rc == HEAPD_EDENIED ? 0 : 4);
    }
    harness_wait_ok(kid, "the unprivileged saver");
    ck_assert_int_ne(access(file, F_OK), 0);
    harness_stop_clean(&D);
    harness_forget_store(&D);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("save");
    TCase *t = tcase_create("save");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, a_saved_heap_loads_into_a_fresh_heapd);
    tcase_add_test(t, a_heap_saved_with_another_layout_loads_moved);
    tcase_add_test(t, a_save_while_processes_relink_is_their_snapshot);
    tcase_add_test(t, damaged_files_are_refused_and_the_heap_stays_empty);
    tcase_add_test(t, crafted_files_are_refused_and_the_heap_stays_empty);
    tcase_add_test(t, heapctl_saves_and_loads);
    tcase_add_test(t, forged_save_records_cost_nobody_else);
    tcase_add_test(t, a_mutator_waits_for_a_load);
    tcase_add_test(t, a_stop_during_a_save_leaves_no_partial_file);
    tcase_add_test(t, a_stop_ends_a_save_under_way);
    tcase_add_test(t, a_stop_ends_a_load_under_way);
    tcase_add_test(t, a_file_changed_during_a_load_is_checked_again);
    tcase_add_test(t, only_privileged_peers_save);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
