/* Saved heaps (Note [Saving a heap at a snapshot] in daemon/gc/save.c,
 * Note [Loading a saved heap] in daemon/gc/load.c): a heap saved while
 * processes relink it comes back in a fresh heapd (a new boot: nothing in
 * the store) as it was at the save's snapshot, objects small, of the run
 * class and large; and a damaged file, a truncated one, another heap's
 * and one of a future format are each refused with the offset and the
 * reason, the heap empty and serviceable. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
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
#include "savefile.h"
#include "check_main.h"

static struct daemon_proc D;

#define NODES 3000
#define MAGIC 0x73617665642121ull
#define WRITERS 3
#define PAIRS 64 /* a writer's pairs: Note [Wide objects] is above 64 */

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

START_TEST(a_saved_heap_loads_into_a_fresh_heapd)
{
    char file[256];
    heapd_save_info si;
    start(NULL);
    with_mutator(publish);
    file_in_dir(file, sizeof file, "heap.save");
    save_ok(file, &si);
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
    ck_assert_msg(harness_log_contains(&D, "loaded"), "no 'loaded' line");
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
    uint64_t serial = (uint64_t)wfd << 40;
    size_t slot = heapd_root_push(m, NULL);
    void **arr = heapd_alloc(m, PAIRS, 0);
    ck_assert_ptr_nonnull(arr);
    heapd_root_set(m, slot, arr);
    for (int i = 0; i < PAIRS; i++) {
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
        unsigned i = (unsigned)(it * 2654435761u) % PAIRS;
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
        for (int i = 0; i < PAIRS; i++) {
            struct pair *p = arr[i];
            ck_assert_ptr_nonnull(p);
            ck_assert_msg(p->a == p->b, "%s[%d]: a %p and b %p: not as at "
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

/* heapd started on BAD refuses it saying WHY, and serves the heap
 * empty. */
static void refused(const char *bad, const char *why)
{
    start_loading(bad);
    ck_assert_msg(harness_log_contains(&D, "not loaded, the heap starts "
                                       "empty"), "no refusal logged");
    ck_assert_msg(harness_log_contains(&D, why), "the refusal does not "
                  "say '%s'", why);
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    ck_assert_ptr_null(heapd_global_get(m, "list"));
    heapd_detach(m);
    heapd_disconnect(c);
    with_mutator(publish); /* serviceable */
    with_mutator(check);
    harness_expect_healthy(&D);
}

START_TEST(damaged_files_are_refused_and_the_heap_stays_empty)
{
    char file[256], bad[256];
    heapd_save_info si;
    uint8_t *b;
    start(NULL);
    with_mutator(publish);
    file_in_dir(file, sizeof file, "good.save");
    save_ok(file, &si);
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
    tcase_add_test(t, a_save_while_processes_relink_is_their_snapshot);
    tcase_add_test(t, damaged_files_are_refused_and_the_heap_stays_empty);
    tcase_add_test(t, only_privileged_peers_save);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(suite());
}
