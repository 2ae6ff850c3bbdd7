/* heapctl clients and heapctl segments against a real heapd, run as the
 * operator runs them: the heapctl binary in a subprocess (Note [Reports]
 * in daemon/report.c). */
#include <arpa/inet.h>
#include <check.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "heapd_build.h"
#include "check_main.h"

static struct daemon_proc D;

static void start(void)
{
    harness_start(&D, harness_default_config("@SOCK@", "verify = true\n"));
}

/* Run `heapctl --socket SOCK ARGS`; it must exit 0.  OUT gets stdout and
 * stderr. */
static void heapctl(const char *args, char *out, size_t outlen)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' %s 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock, args);
    int st = harness_run(cmd, out, outlen);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "heapctl %s: status 0x%x, output: %s", args, st, out);
}

/* A mutator client in a process of its own. */
struct kid {
    pid_t pid;
    int go;         /* closing it lets the kid leave */
};

/* The write ends of the kids' pipes: a kid forked later closes them, or
 * an earlier kid's pipe would never read EOF while it lives. */
static int kids_go[8];
static unsigned n_kids_go;

/* Fork a process that connects as NAME, attaches one mutator, enters a
 * blocking region if BLOCKED, says it is ready and waits for the test to
 * close its pipe; then it leaves gracefully.  Returns once it is ready. */
static struct kid fork_client(const char *name, bool blocked)
{
    int ready[2], go[2];
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(go), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        heapd_connect_opts o = {.socket_path = D.sock, .client_name = name};
        heapd_client *c;
        heapd_mutator *m;
        char b;
        close(ready[0]);
        close(go[1]);
        for (unsigned k = 0; k < n_kids_go; k++)
            close(kids_go[k]);
        if (heapd_connect(&c, &o) < 0 || heapd_attach(c, &m) < 0)
            _exit(1);
        /* not blocked: it runs and reaches no safepoint until it leaves,
         * which holds up no stop, for no cycle is asked for meanwhile */
        if (blocked)
            heapd_blocking_enter(m);
        if (write(ready[1], "r", 1) != 1)
            _exit(1);
        if (read(go[0], &b, 1) != 0)
            _exit(1);
        if (blocked)
            heapd_blocking_leave(m);
        heapd_detach(m);
        heapd_disconnect(c);
        _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    char r;
    ck_assert_msg(read(ready[0], &r, 1) == 1,
                  "mutator client %s died before it was ready", name);
    close(ready[0]);
    ck_assert_uint_lt(n_kids_go, sizeof kids_go / sizeof kids_go[0]);
    kids_go[n_kids_go++] = go[1];
    return (struct kid){pid, go[1]};
}

static void kid_leaves(struct kid *k, const char *who)
{
    for (unsigned i = 0; i < n_kids_go; i++)
        if (kids_go[i] == k->go)
            kids_go[i] = kids_go[--n_kids_go];
    close(k->go);
    harness_wait_ok(k->pid, who);
}

/* The line of OUT that holds NEEDLE, copied into LINE (its end excluded);
 * returns a pointer just past it in OUT, or NULL. */
static const char *line_with(const char *out, const char *needle,
                             char *line, size_t n)
{
    const char *p = strstr(out, needle);
    if (!p)
        return NULL;
    const char *b = p, *e = strchr(p, '\n');
    while (b > out && b[-1] != '\n')
        b--;
    if (!e)
        e = p + strlen(p);
    snprintf(line, n, "%.*s", (int)(e - b), b);
    return *e ? e + 1 : e;
}

/* The JSON object {"id":...} of client NAME in OUT: from its "name" to
 * the end of its mutators' array, into OBJ. */
static bool client_json(const char *out, const char *name, char *obj,
                        size_t n)
{
    char key[96];
    snprintf(key, sizeof key, "\"name\":\"%s\",", name);
    const char *p = strstr(out, key);
    if (!p)
        return false;
    const char *e = strstr(p, "]}");
    if (!e)
        return false;
    snprintf(obj, n, "%.*s", (int)(e - p + 2), p);
    return true;
}

START_TEST(clients_shows_mutators_in_text_and_json)
{
    char out[16384], line[512], want[128], obj[2048];
    start();
    struct kid a = fork_client("alpha", false);
    struct kid b = fork_client("beta", true);
    harness_wait_stat(&D, NULL, mutators, ==, 2);

    /* text: a line per connection with its pid, and one per mutator */
    heapctl("clients", out, sizeof out);
    ck_assert_msg(strstr(out, "CONNECTED SINCE"), "no header: %s", out);
    const char *next = line_with(out, " alpha ", line, sizeof line);
    snprintf(want, sizeof want, " %d ", (int)a.pid);
    ck_assert_msg(next && strstr(line, want) && strstr(line, " default ") &&
                      strstr(line, " " HEAPD_VERSION " "),
                  "alpha's line (pid %d, libheapd " HEAPD_VERSION ") is "
                  "wrong: %s", (int)a.pid, out);
    ck_assert_msg(strncmp(next, "       slot ", 12) == 0 &&
                      line_with(next, "\n", line, sizeof line) &&
                      strstr(line, " running; ") &&
                      strstr(line, "bytes allocated, URS backlog "),
                  "alpha's mutator line is wrong: %s", out);
    next = line_with(out, " beta ", line, sizeof line);
    snprintf(want, sizeof want, " %d ", (int)b.pid);
    ck_assert_msg(next && strstr(line, want), "beta's line (pid %d) is "
                  "wrong: %s", (int)b.pid, out);
    ck_assert_msg(strncmp(next, "       slot ", 12) == 0 &&
                      line_with(next, "\n", line, sizeof line) &&
                      strstr(line, " in a blocking region; "),
                  "beta's mutator is not shown in a blocking region: %s",
                  out);
    ck_assert_msg(strstr(out, "(control)"), "heapctl's own control "
                  "connection is not listed: %s", out);

    /* JSON: numbers as numbers, one mutator each, in different slots */
    heapctl("clients --json", out, sizeof out);
    ck_assert_msg(strncmp(out, "{\"clients\":[{\"id\":", 18) == 0, "%s",
                  out);
    unsigned slot[2];
    const char *names[2] = {"alpha", "beta"};
    const pid_t pids[2] = {a.pid, b.pid};
    const char *states[2] = {"running", "blocked"};
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(client_json(out, names[k], obj, sizeof obj),
                      "no client %s: %s", names[k], out);
        snprintf(want, sizeof want, "\"pid\":%d,", (int)pids[k]);
        ck_assert_msg(strstr(obj, want), "%s has no %s: %s", names[k], want,
                      obj);
        ck_assert_msg(strstr(obj, "\"heap\":\"default\",\"kind\":\"mutator\","),
                      "%s", obj);
        ck_assert_msg(strstr(obj, "\"library\":\"" HEAPD_VERSION "\","),
                      "%s", obj);
        const char *m = strstr(obj, "\"mutators\":[{\"slot\":");
        ck_assert_msg(m && sscanf(m, "\"mutators\":[{\"slot\":%u,", &slot[k])
                               == 1,
                      "%s has no mutator: %s", names[k], obj);
        ck_assert_msg(!strstr(m + strlen("\"mutators\":[{"), "{\"slot\":"),
                      "%s has two mutators: %s", names[k], obj);
        snprintf(want, sizeof want, "\"state\":\"%s\",\"stalled_ms\":0,",
                 states[k]);
        ck_assert_msg(strstr(m, want), "%s is not %s: %s", names[k],
                      states[k], obj);
    }
    ck_assert_msg(slot[0] != slot[1], "both in slot %u", slot[0]);

    kid_leaves(&a, "alpha");
    kid_leaves(&b, "beta");
    harness_wait_stat(&D, NULL, mutators, ==, 0);
    heapctl("clients", out, sizeof out);
    ck_assert_msg(!strstr(out, "alpha") && !strstr(out, "beta"),
                  "clients that left are still listed: %s", out);
    harness_stop_clean(&D);
}
END_TEST

/* The number after "KEY": in OUT, or UINT64_MAX. */
static uint64_t json_number(const char *out, const char *key)
{
    char k[96];
    unsigned long long v;
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(out, k);
    if (!p || sscanf(p + strlen(k), "%llu", &v) != 1)
        return UINT64_MAX;
    return v;
}

#define OBJECTS 2000
#define OBJECT_BYTES 40 /* with the header: 48, the class of 48 bytes */

START_TEST(segments_match_stats_and_show_occupancy)
{
    static char out[65536], stats[65536];
    char line[512];
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    for (int i = 0; i < OBJECTS; i++) {
        void *o = heapd_alloc(m, 0, OBJECT_BYTES);
        ck_assert_ptr_nonnull(o);
        ck_assert_uint_ne(heapd_root_push(m, o), (size_t)-1);
    }
    /* nothing changes the table while heapctl reads it */
    heapd_blocking_enter(m);

    heapctl("segments --json", out, sizeof out);
    heapctl("stats --json", stats, sizeof stats);
    static const char *const same[] = {"segments_free", "segments_owned",
                                       "segments_filled", "segments_large"};
    for (size_t k = 0; k < 4; k++) {
        uint64_t a = json_number(out, same[k]), b = json_number(stats,
                                                                same[k]);
        ck_assert_msg(a != UINT64_MAX && a == b,
                      "%s: segments says %" PRIu64 ", stats %" PRIu64
                      "\nsegments: %s\nstats: %s", same[k], a, b, out,
                      stats);
    }
    ck_assert_msg(json_number(out, "segments_owned") >= 1, "%s", out);

    /* the class of 48-byte blocks holds exactly the rooted objects */
    const char *cls = strstr(out, "\"object_size\":48,");
    ck_assert_msg(cls, "no class of 48 bytes: %s", out);
    uint64_t segs = json_number(cls, "segments");
    uint64_t blocks = json_number(cls, "blocks");
    uint64_t in_use = json_number(cls, "blocks_in_use");
    ck_assert_msg(segs >= 1 && json_number(cls, "segments_owned") == segs &&
                      in_use == OBJECTS && blocks >= in_use,
                  "class of 48 bytes: %" PRIu64 " segments, %" PRIu64
                  " blocks, %" PRIu64 " in use (want %d): %s", segs, blocks,
                  in_use, OBJECTS, out);

    /* text: the same class line, with its occupancy, marked an estimate */
    heapctl("segments --heap default", out, sizeof out);
    unsigned t_cls, t_size, t_segs, t_owned;
    unsigned long long t_blocks, t_use;
    double occ;
    const char *p = out;
    bool found = false;
    while ((p = line_with(p, "%", line, sizeof line)) != NULL) {
        if (sscanf(line, " %u %u %u %u %llu %llu %lf%%", &t_cls, &t_size,
                   &t_segs, &t_owned, &t_blocks, &t_use, &occ) == 7 &&
            t_size == 48) {
            found = true;
            break;
        }
    }
    ck_assert_msg(found, "no class line of 48 bytes: %s", out);
    ck_assert_msg(t_use == OBJECTS && t_blocks == blocks &&
                      occ > 0 && strstr(line, "~"),
                  "class line of 48 bytes is wrong: %s\n%s", line, out);
    ck_assert_msg(strstr(out, "heap default: ") &&
                      strstr(out, "~ estimate"), "%s", out);

    /* a heap that does not exist: exit 1 and what to do */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' segments --heap nope 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1 &&
                      strstr(out, "no heap named 'nope'"),
                  "status 0x%x: %s", st, out);
    /* and for the commands that take --heap */
    const char *cmds[] = {"gc", "globals", "stats"};
    for (size_t k = 0; k < 3; k++) {
        snprintf(cmd, sizeof cmd, "'%s' --socket '%s' --heap nope %s 2>&1",
                 harness_bin("HEAPCTL_BIN"), D.sock, cmds[k]);
        st = harness_run(cmd, out, sizeof out);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1 &&
                          strstr(out, "no heap named 'nope'; heapd serves "
                                      "'default'"),
                      "%s: status 0x%x: %s", cmds[k], st, out);
    }
    heapctl("--heap default stats", out, sizeof out);

    heapd_blocking_leave(m);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* Stats on CTL once bytes_committed agrees with the reply's own
 * committed_bytes and fragmentation_permille with both (three fstat
 * calls of the daemon's: a page the client's reserve prefaults between
 * them makes them differ, so ask again, a bounded number of times). */
static heapd_stats_t settled_stats(heapd_client *ctl)
{
    heapd_stats_t st;
    for (int tries = 0; tries < 1000; tries++) {
        st = harness_stats(ctl);
        uint64_t frag = st.block_bytes
                            ? st.bytes_committed * 1000u / st.block_bytes
                            : 0;
        if (st.bytes_committed == st.heap_committed_bytes &&
            st.fragmentation_permille == frag)
            return st;
    }
    ck_abort_msg("bytes_committed %" PRIu64 " never agreed with "
                 "committed_bytes %" PRIu64 " (fragmentation_permille %"
                 PRIu64 ", block_bytes %" PRIu64 ") in 1000 replies",
                 st.bytes_committed, st.heap_committed_bytes,
                 st.fragmentation_permille, st.block_bytes);
    return st;
}

#define SMALL_N 4000
#define SMALL_BYTES 64
#define LARGE_BYTES (1u << 20)

/* Note [Memory counters] in daemon/gc/collector.c, and the committed bytes
 * per size class of Note [Reports]: each against a figure the test knows
 * (what it allocated and rooted, what it let die). */
START_TEST(memory_counters_follow_blocks_and_punches)
{
    static char out[65536];
    heapd_client *c;
    heapd_mutator *m;
    start();
    harness_attach(&D, &c, &m);
    heapd_client *ctl = harness_control(&D);

    for (int i = 0; i < SMALL_N; i++) {
        void *o = heapd_alloc(m, 0, SMALL_BYTES);
        ck_assert_ptr_nonnull(o);
        memset(o, 0x5a, SMALL_BYTES);
        ck_assert_uint_ne(heapd_root_push(m, o), (size_t)-1);
    }
    void *big = heapd_alloc(m, 0, LARGE_BYTES);
    ck_assert_ptr_nonnull(big);
    memset(big, 0x5a, LARGE_BYTES); /* every page of it committed */
    ck_assert_uint_ne(heapd_root_push(m, big), (size_t)-1);
    harness_collect(m);
    heapd_blocking_enter(m); /* nothing allocates while the test reads */

    heapd_stats_t st = settled_stats(ctl);
    ck_assert_msg(st.block_bytes >= (uint64_t)SMALL_N * SMALL_BYTES +
                                        LARGE_BYTES,
                  "block_bytes %" PRIu64 " after a cycle that kept %d "
                  "blocks of %d bytes and one of %u", st.block_bytes,
                  SMALL_N, SMALL_BYTES, LARGE_BYTES);
    /* what the test wrote holds memory; block_bytes may count more (the
     * large run's unwritten tail: Note [Memory counters]) */
    ck_assert_msg(st.bytes_committed >=
                      (uint64_t)SMALL_N * SMALL_BYTES + LARGE_BYTES,
                  "committed %" PRIu64 " < the %d bytes the test wrote",
                  st.bytes_committed, SMALL_N * SMALL_BYTES + LARGE_BYTES);

    /* per class: in blocks is in use times size, committed between that
     * and the class's segments, all classes within the heap's */
    heapctl("segments --json", out, sizeof out);
    uint64_t heap_committed = json_number(out, "committed_bytes");
    uint64_t seg_size = json_number(out, "segment_size");
    const char *cls = strstr(out, "\"classes\":[");
    ck_assert_msg(cls && heap_committed != UINT64_MAX &&
                      json_number(out, "block_bytes") == st.block_bytes,
                  "heap figures missing or not the stats' (block_bytes %"
                  PRIu64 "): %s", st.block_bytes, out);
    uint64_t sum = 0, ours = 0;
    for (const char *p = cls; (p = strstr(p, "{\"size_class\"")) != NULL;
         p++) {
        uint64_t size = json_number(p, "object_size");
        uint64_t segs = json_number(p, "segments");
        uint64_t in_use = json_number(p, "blocks_in_use");
        uint64_t com = json_number(p, "committed_bytes");
        uint64_t inb = json_number(p, "block_bytes");
        uint64_t frag = json_number(p, "fragmentation_permille");
        ck_assert_msg(inb == in_use * size && com >= inb &&
                          com <= segs * seg_size &&
                          frag == (inb ? com * 1000u / inb : 0),
                      "class of %" PRIu64 " bytes: %" PRIu64 " in use, %"
                      PRIu64 " in blocks, %" PRIu64 " committed in %" PRIu64
                      " segments, fragmentation %" PRIu64 ": %s", size,
                      in_use, inb, com, segs, frag, out);
        sum += com;
        if (size >= SMALL_BYTES && in_use >= SMALL_N)
            ours = inb;
    }
    ck_assert_msg(ours >= (uint64_t)SMALL_N * SMALL_BYTES,
                  "no class holds the %d rooted blocks: %s", SMALL_N, out);
    ck_assert_msg(sum <= heap_committed,
                  "the classes' committed bytes %" PRIu64 " exceed the "
                  "heap's %" PRIu64 ": %s", sum, heap_committed, out);
    heapctl("segments", out, sizeof out);
    ck_assert_msg(strstr(out, "COMMITTED") && strstr(out, "IN BLOCKS") &&
                      strstr(out, "FRAG") && strstr(out, "committed "),
                  "%s", out);

    /* the large object dies: its run is punched at the sweep */
    heapd_blocking_leave(m);
    heapd_root_pop(m, 1);
    harness_collect(m);
    heapd_blocking_enter(m);
    heapd_stats_t after = settled_stats(ctl);
    ck_assert_msg(after.purged_bytes >= st.purged_bytes + LARGE_BYTES,
                  "purged_bytes %" PRIu64 " -> %" PRIu64 " after a large "
                  "object of %u bytes died", st.purged_bytes,
                  after.purged_bytes, LARGE_BYTES);
    ck_assert_msg(after.block_bytes + LARGE_BYTES <= st.block_bytes,
                  "block_bytes %" PRIu64 " -> %" PRIu64, st.block_bytes,
                  after.block_bytes);
    /* nothing but a punch frees the memfd's pages */
    ck_assert_msg(st.bytes_committed <= after.bytes_committed ||
                      st.bytes_committed - after.bytes_committed <=
                          after.purged_bytes - st.purged_bytes,
                  "committed fell by %" PRIu64 ", more than the %" PRIu64
                  " purged", st.bytes_committed - after.bytes_committed,
                  after.purged_bytes - st.purged_bytes);

    heapd_blocking_leave(m);
    heapd_disconnect(ctl);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* ---- Prometheus (Note [Metric names] in proto/metrics.c) ---- */

/* Run CMD; it must exit 0 and promtool must find nothing wrong with what
 * it printed.  OUT gets the metrics. */
static void expect_valid_metrics(const char *cmd, char *out, size_t outlen)
{
    char check[1024];
    int st = harness_run(cmd, out, outlen);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "%s: status 0x%x, output: %.300s", cmd, st, out);
    char dir[64];
    harness_tmpdir(dir, sizeof dir);
    char file[128];
    snprintf(file, sizeof file, "%s/metrics.txt", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fputs(out, f);
    ck_assert_int_eq(fclose(f), 0);
    char res[4096];
    snprintf(check, sizeof check,
             "command -v promtool >/dev/null || { echo 'promtool is not "
             "installed (Debian: apt-get install prometheus)'; exit 3; }; "
             "promtool check metrics < '%s' 2>&1", file);
    st = harness_run(check, res, sizeof res);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "promtool check metrics: status 0x%x: %s", st, res);
    unlink(file);
    rmdir(dir);
}

/* heapctl stats --prometheus: every counter of every heap, valid for
 * promtool, named by the rule, with the heap's values. */
START_TEST(stats_in_prometheus_format)
{
    harness_start(&D, harness_default_config("@SOCK@", ""));
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    harness_collect(m);
    harness_collect(m);
    heapd_stats_t st = harness_stats(c);
    static char out[1 << 16];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' stats --prometheus",
             harness_bin("HEAPCTL_BIN"), D.sock);
    heapd_blocking_enter(m);
    expect_valid_metrics(cmd, out, sizeof out);
    heapd_blocking_leave(m);
    char want[160];
    snprintf(want, sizeof want,
             "\nheapd_cycles_completed_total{heap=\"default\"} %" PRIu64 "\n",
             st.cycles_completed);
    ck_assert_msg(strstr(out, want), "no line %s in:\n%.2000s", want, out);
    /* the histogram's +Inf bucket and count are the pauses */
    snprintf(want, sizeof want,
             "heapd_pause_duration_seconds_bucket{heap=\"default\",le=\"+Inf\"}"
             " %" PRIu64 "\nheapd_pause_duration_seconds_sum", st.pause_count);
    ck_assert_msg(strstr(out, want), "no line %s in:\n%.2000s", want, out);
    const char *names[] = {
        "# TYPE heapd_allocated_bytes_total counter\n",
        "# TYPE heapd_pause_seconds_total counter\n",
        "# TYPE heapd_pause_max_seconds gauge\n",
        "# TYPE heapd_mark_last_seconds gauge\n",
        "# TYPE heapd_committed_bytes gauge\n",
        "# TYPE heapd_pause_duration_seconds histogram\n",
        "heapd_pause_duration_seconds_bucket{heap=\"default\",le=\"0.000050\"} ",
        "# TYPE heapd_minor_pause_duration_seconds summary\n",
        "heapd_build_info{version=\"",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        ck_assert_msg(strstr(out, names[i]), "no %s in:\n%.2000s", names[i],
                      out);
    /* --prometheus is for stats only */
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' clients --prometheus 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    int rc = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "status 0x%x: %s",
                  rc, out);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

/* A TCP port free now on 127.0.0.1 (the kernel's choice). */
static unsigned free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* curl's status code and body for METHOD of URL into OUT. */
static unsigned http(const char *method, const char *url, char *out,
                     size_t outlen)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "command -v curl >/dev/null || { echo 'curl is not installed'; "
             "exit 3; }; curl -s -S -X %s --max-time 30 -w '\\n%%{http_code}' "
             "'%s' 2>&1", method, url);
    int st = harness_run(cmd, out, outlen);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "curl %s: 0x%x %s",
                  url, st, out);
    char *last = strrchr(out, '\n');
    ck_assert_ptr_nonnull(last);
    unsigned code = (unsigned)atoi(last + 1);
    *last = '\0';
    return code;
}

struct scrape {
    const char *url;
    char out[1 << 14];
};

/* Does GET of SC->url answer 200?  A refused or reset connection is a
 * "not yet", not a failure. */
static bool scrape_ok(void *arg, char *seen, size_t n)
{
    struct scrape *sc = arg;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "curl -s -o /dev/null --max-time 10 "
             "-w '%%{http_code}' '%s' 2>&1", sc->url);
    harness_run(cmd, sc->out, sizeof sc->out);
    snprintf(seen, n, "curl said %s", sc->out);
    return strcmp(sc->out, "200") == 0;
}

/* Note [Metrics endpoint]: heapd serves GET /metrics on metrics_listen
 * with libmicrohttpd, valid for promtool, and nothing else. */
START_TEST(metrics_endpoint_serves_prometheus)
{
    unsigned port = free_port();
    char config[512];
    snprintf(config, sizeof config,
             "[daemon]\nsocket = @SOCK@\nlog_level = debug\n"
             "metrics_listen = 127.0.0.1:%u\n\n[heap default]\nbase = 0x%llx\n"
             "max_size = 1G\nsegment_size = 128K\n", port,
             (unsigned long long)HARNESS_HEAP_BASE);
    harness_start_logged(&D, config, "heapd.log");
    ck_assert(harness_log_contains(&D, "metrics: http://127.0.0.1:"));
    heapd_client *c;
    heapd_mutator *m;
    harness_attach(&D, &c, &m);
    harness_collect(m);
    heapd_blocking_enter(m);
    static char out[1 << 16];
    char url[128], cmd[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metrics", port);
    snprintf(cmd, sizeof cmd, "curl -s -S --max-time 30 '%s'", url);
    expect_valid_metrics(cmd, out, sizeof out);
    ck_assert_msg(strstr(out, "\nheapd_heap_clients{heap=\"default\"} 1\n"),
                  "no heap_clients 1 in:\n%.2000s", out);
    ck_assert_uint_eq(http("GET", url, out, sizeof out), 200);
    ck_assert_uint_eq(http("POST", url, out, sizeof out), 405);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/", port);
    ck_assert_uint_eq(http("GET", url, out, sizeof out), 404);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metrics/../etc", port);
    ck_assert_uint_eq(http("GET", url, out, sizeof out), 404);

    /* hostile peers: more idle connections than the endpoint takes, one
     * sending garbage; heapd's own socket and its clients do not notice,
     * and once they go the endpoint answers again */
    enum { IDLE = 24 };
    int idle[IDLE];
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int i = 0; i < IDLE; i++) {
        idle[i] = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(idle[i], 0);
        /* the kernel's backlog takes them even when heapd does not */
        ck_assert_int_eq(connect(idle[i], (struct sockaddr *)&a, sizeof a),
                         0);
    }
    static const char junk[] = "\x00\xff\x7fNOT HTTP\r\n\r\n";
    ck_assert_int_eq(write(idle[0], junk, sizeof junk - 1),
                     (ssize_t)(sizeof junk - 1));
    harness_still_serving(D.sock);
    heapd_blocking_leave(m);
    harness_collect(m);
    heapd_blocking_enter(m);
    for (int i = 0; i < IDLE; i++)
        close(idle[i]);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metrics", port);
    struct scrape sc = {.url = url};
    harness_wait_until(scrape_ok, &sc, "the endpoint to answer 200 again "
                       "once the idle connections closed");
    heapd_blocking_leave(m);
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}
END_TEST

/* An address heapd cannot listen on stops it at start-up, with a message
 * that names it. */
START_TEST(metrics_endpoint_refuses_a_foreign_address)
{
    char cfg[1024];
    char dir[64];
    harness_tmpdir(dir, sizeof dir);
    snprintf(cfg, sizeof cfg, "%s/heapd.conf", dir);
    FILE *f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    /* 192.0.2.1: TEST-NET-1, never an address of this machine */
    fprintf(f, "[daemon]\nsocket = %s/s\nmetrics_listen = 192.0.2.1:9465\n\n"
            "[heap default]\nbase = 0x%llx\nmax_size = 1G\n", dir,
            (unsigned long long)HARNESS_HEAP_BASE);
    ck_assert_int_eq(fclose(f), 0);
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "'%s' -c '%s' --foreground 2>&1",
             harness_bin("HEAPD_BIN"), cfg);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 0,
                  "heapd started with metrics_listen on a foreign address "
                  "(status 0x%x): %s", st, out);
    ck_assert_msg(strstr(out, "metrics_listen 192.0.2.1:9465: cannot listen"),
                  "no message naming the address: %s", out);
    unlink(cfg);
    char sock[128];
    snprintf(sock, sizeof sock, "%s/s", dir);
    unlink(sock);
    rmdir(dir);
}
END_TEST

/* ---- heapctl top (Note [heapctl top]) ---- */

struct screen {
    char sock[96];      /* tmux's server socket (tmux -S) */
    char text[8192];    /* the last capture */
};

/* The screen of tmux session "top" into S->text; false if tmux has none. */
static bool capture(struct screen *s)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux -S '%s' capture-pane -p -t top 2>&1",
             s->sock);
    int st = harness_run(cmd, s->text, sizeof s->text);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Does the screen show alpha stalled, above beta? */
static bool top_shows_stall(void *arg, char *seen, size_t n)
{
    struct screen *s = arg;
    ck_assert_msg(capture(s), "heapctl top's tmux session is gone: %s",
                  s->text);
    snprintf(seen, n, "%s", s->text);
    const char *a = strstr(s->text, " alpha "), *b = strstr(s->text, " beta ");
    return a && b && a < b && strstr(a, "STALLED: no answer to the ") &&
           strstr(s->text, "default ") && strstr(s->text, "PAUSE P99");
}

static bool session_gone(void *arg, char *seen, size_t n)
{
    struct screen *s = arg;
    char cmd[256], out[256];
    snprintf(cmd, sizeof cmd, "tmux -S '%s' has-session -t top 2>&1",
             s->sock);
    int st = harness_run(cmd, out, sizeof out);
    snprintf(seen, n, "%s", out);
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* heapctl top in a real terminal (tmux): the heap's line, and the client
 * whose mutator holds a collection up first, marked STALLED; q quits. */
START_TEST(top_shows_heaps_and_stalled_clients_first)
{
    harness_start(&D, harness_default_config("@SOCK@",
                                             "stall_warn = 100ms\n"
                                             "stall_timeout = 3600s\n"));
    struct kid b = fork_client("beta", true);
    /* alpha runs and reaches no safepoint: it stalls the next stop */
    struct kid a = fork_client("alpha", false);
    heapd_client *ctl = harness_control(&D);
    ck_assert_int_eq(heapd_request_collect(ctl, 0), 0);
    harness_wait_stat(&D, ctl, stalls, >=, 1);

    struct screen s;
    char dir[64], cmd[1024], out[1024];
    harness_tmpdir(dir, sizeof dir);
    snprintf(s.sock, sizeof s.sock, "%s/tmux", dir);
    snprintf(cmd, sizeof cmd,
             "command -v tmux >/dev/null || { echo 'tmux is not installed'; "
             "exit 3; }; TERM=xterm tmux -S '%s' new-session -d -s top "
             "-x 150 -y 30 \"'%s' --socket '%s' top --interval 200\" 2>&1",
             s.sock, harness_bin("HEAPCTL_BIN"), D.sock);
    int st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "tmux: 0x%x %s", st,
                  out);
    harness_wait_until(top_shows_stall, &s, "heapctl top to show alpha "
                       "STALLED above beta");
    ck_assert_msg(strstr(s.text, "heapd "), "no title: %s", s.text);
    snprintf(cmd, sizeof cmd, "tmux -S '%s' send-keys -t top q 2>&1",
             s.sock);
    st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "send-keys: %s",
                  out);
    harness_wait_until(session_gone, &s, "heapctl top to quit on q");
    snprintf(cmd, sizeof cmd, "tmux -S '%s' kill-server >/dev/null 2>&1; "
             "rm -f '%s'", s.sock, s.sock);
    harness_run(cmd, out, sizeof out);
    rmdir(dir);

    /* without a terminal it says what to use instead */
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' top < /dev/null 2>&1",
             harness_bin("HEAPCTL_BIN"), D.sock);
    st = harness_run(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2 &&
                      strstr(out, "top needs a terminal"),
                  "0x%x: %s", st, out);
    kid_leaves(&a, "alpha");
    kid_leaves(&b, "beta");
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

static Suite *heapctl_suite(void)
{
    Suite *s = suite_create("heapctl");
    TCase *t = tcase_create("heapctl");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, clients_shows_mutators_in_text_and_json);
    tcase_add_test(t, segments_match_stats_and_show_occupancy);
    tcase_add_test(t, memory_counters_follow_blocks_and_punches);
    tcase_add_test(t, stats_in_prometheus_format);
    tcase_add_test(t, metrics_endpoint_serves_prometheus);
    tcase_add_test(t, metrics_endpoint_refuses_a_foreign_address);
    tcase_add_test(t, top_shows_heaps_and_stalled_clients_first);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(heapctl_suite());
}
