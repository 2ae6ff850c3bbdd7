/* Collection while mutators run (acceptance of the concurrent collector),
 * against a real heapd with the verifier on.  The tests only use
 * the API contract (Note [Client GC discipline] in heapd.h), so they hold
 * for the stop-the-world collector as much as for the concurrent one:
 *
 *   shared_board_under_1000_cycles: 4 processes (two of them with 2
 *     mutator threads) replace the fields of one shared "board" with
 *     heapd_write and heapd_cas, edit structures others published, hold
 *     replaced structures on their root stacks, rebuild private trees with
 *     pushes and pops, and wait in blocking regions, while a control client
 *     runs at least 1000 cycles.  Everything read is checked.
 *   young_board_under_1000_cycles: the same, where every process has a
 *     young mutator (Note [Young objects, for the program] in heapd.h)
 *     beside a shared-heap one: young structures are published into the
 *     board by writes, CASes and the board's init, and age and are
 *     promoted in the private trees, through the 1000 cycles.
 *   hot_global_overwritten_during_cycles: a writer keeps replacing global
 *     "hot" while 2 readers read, root and check it, through 200 cycles.
 *
 * Every node carries a value, its check word, the key of the structure it
 * belongs to and its position, so a freed (poisoned) or reused node is
 * noticed.  Children report failures as exit codes (E_* below) decoded in
 * the test's messages, with details on their stderr (in the test log).
 * Processes coordinate through pipes (Note [Test handshakes]). */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "heapd.h"
#include "check_main.h"

static struct daemon_proc D;

static void start(void)
{
    harness_start(&D, harness_default_config("@SOCK@", "verify = true\n"));
}

/* ---- what children report ---- */

enum {
    E_CONNECT = 10,
    E_ATTACH,
    E_THREAD,
    E_ALLOC,
    E_ROOTS,
    E_BOARD_ONCE,
    E_BOARD_INIT_ELSEWHERE,
    E_BOARD_NOT_INIT_HERE,
    E_BOARD_BAD,
    E_BOARD_FIELD_NULL,
    E_WILD_REF,
    E_NODE_SHAPE,
    E_NODE_CHECK,
    E_NODE_KEY,
    E_NODE_POS,
    E_NODE_DEEP,
    E_NODE_STAMP,
    E_TREE_COUNT,
    E_ROOT_DEPTH,
    E_GLOBAL_SET,
    E_GLOBAL_NULL,
    E_PIPE,
    E_COLLECT,
    E_LAST
};

static const char *const error_names[E_LAST] = {
    [E_CONNECT] = "heapd_connect failed",
    [E_ATTACH] = "heapd_attach failed",
    [E_THREAD] = "pthread_create failed",
    [E_ALLOC] = "heapd_alloc returned NULL",
    [E_ROOTS] = "heapd_root_push failed",
    [E_BOARD_ONCE] = "heapd_global_once(\"board\") returned NULL",
    [E_BOARD_INIT_ELSEWHERE] = "the board's init ran in a process other "
                               "than 0",
    [E_BOARD_NOT_INIT_HERE] = "process 0 did not run the board's init",
    [E_BOARD_BAD] = "the board object is not the board (shape, magic, or "
                    "another object than global \"board\")",
    [E_BOARD_FIELD_NULL] = "a board field is NULL (fields are only ever "
                           "replaced, never cleared)",
    [E_WILD_REF] = "a reference outside the heap or misaligned",
    [E_NODE_SHAPE] = "a node's nrefs/nbytes are wrong (freed or reused?)",
    [E_NODE_CHECK] = "a node's value and check word disagree (freed and "
                     "poisoned?)",
    [E_NODE_KEY] = "a node belongs to another structure (reused?)",
    [E_NODE_POS] = "a node is at the wrong position in its structure",
    [E_NODE_DEEP] = "a structure is deeper than ever built",
    [E_NODE_STAMP] = "a published tree mixes nodes of different rounds",
    [E_TREE_COUNT] = "a tree that is only ever built complete is not",
    [E_ROOT_DEPTH] = "the root stack depth changed under the mutator",
    [E_GLOBAL_SET] = "heapd_global_set failed",
    [E_GLOBAL_NULL] = "global \"hot\" is NULL after it was set",
    [E_PIPE] = "a pipe read/write failed",
    [E_COLLECT] = "heapd_collect failed",
};

/* A child's exit code: E_* + 100 * thread. */
static void describe(int st, char *out, size_t n)
{
    if (st == -1) {
        snprintf(out, n, "did not exit within %d ms (killed)",
                 HARNESS_WAIT_MS * 4);
    } else if (WIFSIGNALED(st)) {
        snprintf(out, n, "killed by signal %d (%s)", WTERMSIG(st),
                 strsignal(WTERMSIG(st)));
    } else if (WIFEXITED(st)) {
        int code = WEXITSTATUS(st), e = code % 100;
        if (code == 0)
            snprintf(out, n, "exit 0");
        else if (e >= E_CONNECT && e < E_LAST)
            snprintf(out, n, "exit %d: thread %d: %s", code, code / 100,
                     error_names[e]);
        else
            snprintf(out, n, "exit %d", code);
    } else {
        snprintf(out, n, "wait status 0x%x", st);
    }
}

/* ---- nodes and structures ----
 * A node has 2 references (children) and 4 longs: value v, ~v, the key of
 * its structure, and its position (the root is 1, the children of p are
 * 2p and 2p+1).  v is stamp * 256 + position. */

#define NODE_LONGS 4
#define NODE_BYTES (NODE_LONGS * sizeof(long))

struct walker {
    uintptr_t lo, hi; /* the heap */
    int proc, thread;
};

static void *new_node(heapd_mutator *m, long key, long pos, long stamp)
{
    void **o = heapd_alloc(m, 2, NODE_BYTES);
    if (o) {
        long *b = heapd_bytes(o);
        long v = stamp * 256 + pos;
        b[0] = v;
        b[1] = ~v;
        b[2] = key;
        b[3] = pos;
    }
    return o;
}

/* Build a complete tree of DEPTH below a node at POS into root slot R,
 * rooted at every step (a push and a pop per inner node).  0 or -E_*. */
static int build(heapd_mutator *m, size_t r, long key, long pos, int depth,
                 long stamp)
{
    void *t = new_node(m, key, pos, stamp);
    if (!t)
        return -E_ALLOC;
    heapd_root_set(m, r, t);
    if (depth == 0)
        return 0;
    size_t s = heapd_root_push(m, NULL);
    if (s == (size_t)-1)
        return -E_ROOTS;
    for (int side = 0; side < 2; side++) {
        int rc = build(m, s, key, 2 * pos + side, depth - 1, stamp);
        if (rc < 0) {
            heapd_root_pop(m, 1);
            return rc;
        }
        void **parent = heapd_root_get(m, r);
        heapd_write(m, parent, &parent[side], heapd_root_get(m, s));
    }
    heapd_root_pop(m, 1);
    return 0;
}

static void *load_ref(void **field)
{
    /* pairs with heapd_write's release store in another process */
    return __atomic_load_n(field, __ATOMIC_ACQUIRE);
}

static long bad_node(const struct walker *w, int err, void **n, long key,
                     long pos)
{
    long *b = (uintptr_t)n >= w->lo && (uintptr_t)n < w->hi
                  ? heapd_bytes(n) : NULL;
    fprintf(stderr, "process %d thread %d: %s: node %p, want key %ld pos %ld",
            w->proc, w->thread, error_names[err], (void *)n, key, pos);
    if (b && err != E_WILD_REF && err != E_NODE_SHAPE)
        fprintf(stderr, "; has v %#lx check %#lx key %ld pos %ld", b[0],
                b[1], b[2], b[3]);
    else if (err == E_NODE_SHAPE)
        fprintf(stderr, "; nrefs %zu nbytes %zu", heapd_nrefs(n),
                heapd_nbytes(n));
    fputc('\n', stderr);
    return -err;
}

/* Walk the structure at N (position POS of structure KEY), between
 * safepoints; positions stay below MAXPOS; with STAMP >= 0 every node must
 * carry it.  Returns the number of nodes or -E_*. */
static long walk(const struct walker *w, void **n, long key, long pos,
                 long maxpos, long stamp)
{
    if ((uintptr_t)n < w->lo || (uintptr_t)n >= w->hi || (uintptr_t)n % 8)
        return bad_node(w, E_WILD_REF, n, key, pos);
    if (heapd_nrefs(n) != 2 || heapd_nbytes(n) != NODE_BYTES)
        return bad_node(w, E_NODE_SHAPE, n, key, pos);
    long *b = heapd_bytes(n);
    if (b[1] != ~b[0])
        return bad_node(w, E_NODE_CHECK, n, key, pos);
    if (b[2] != key)
        return bad_node(w, E_NODE_KEY, n, key, pos);
    if (b[3] != pos || b[0] % 256 != pos)
        return bad_node(w, E_NODE_POS, n, key, pos);
    if (stamp >= 0 && b[0] != stamp * 256 + pos)
        return bad_node(w, E_NODE_STAMP, n, key, pos);
    long count = 1;
    for (int side = 0; side < 2; side++) {
        void **ch = load_ref(&n[side]);
        if (!ch)
            continue;
        if (2 * pos + side >= maxpos)
            return bad_node(w, E_NODE_DEEP, ch, key, 2 * pos + side);
        long r = walk(w, ch, key, 2 * pos + side, maxpos, stamp);
        if (r < 0)
            return r;
        count += r;
    }
    return count;
}

static bool readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) > 0;
}

/* Wait in a blocking region: on the stop pipe for up to 1 ms (a pipe read
 * standing in for I/O).  Collections go on without this mutator. */
static void wait_blocked(heapd_mutator *m, int stop_fd)
{
    heapd_blocking_enter(m);
    readable(stop_fd, 1);
    heapd_blocking_leave(m);
}

/* ==== test 1: a shared board under 1000 cycles ==== */

enum {
    NPROC = 4,
    FIELDS = 64,
    BOARD_DEPTH = 3,   /* structures: positions below 16 */
    TREE_DEPTH = 5,    /* private trees: 63 nodes */
    NTREES = 3,
    HOT_FIELDS = 4,
    HOLD = 8,          /* board structures held on the root stack at once */
    MIN_ITERS = 64,    /* every operation runs several times */
    CYCLES = 1000,
};
#define BOARD_MAXPOS (1L << (BOARD_DEPTH + 1))
#define TREE_MAXPOS (1L << (TREE_DEPTH + 1))
#define TREE_NODES ((1L << (TREE_DEPTH + 1)) - 1)
#define BOARD_MAGIC 0x6472616f62L /* "board" */

static const int threads_of_plain[NPROC] = {1, 2, 1, 2};
/* the young board: every process has a young mutator (thread 0) and a
 * shared-heap one (thread 1), Note [Young objects, for the program] */
static const int threads_of_young[NPROC] = {2, 2, 2, 2};
static const int *threads_of = threads_of_plain;
static bool board_young;

struct report {
    int proc, thread;
    long iters, writes, cas_ok, cas_lost, inner, deletes, checked, held,
        blocked;
};

struct worker {
    heapd_client *c;
    struct walker w;
    int stop_fd, ready_fd, report_fd;
    bool may_init, init_ran;
    unsigned seed;
    long stamp;
    struct report rep;
    int rc;
};

static long tree_key(const struct worker *x, int t)
{
    return 1000 + (x->w.proc * 2 + x->w.thread) * NTREES + t;
}

/* The board's init (process 0): the board, every field a structure.  It
 * returns with the board pushed, so that nothing between its return and
 * heapd_global_once storing it is unrooted; the caller keeps that slot. */
static void *init_board(heapd_mutator *m, void *arg)
{
    struct worker *x = arg;
    x->init_ran = true;
    if (!x->may_init) {
        errno = EPERM;
        return NULL;
    }
    void **board = heapd_alloc(m, FIELDS, 2 * sizeof(long));
    if (!board)
        return NULL;
    long *b = heapd_bytes(board);
    b[0] = BOARD_MAGIC;
    b[1] = FIELDS;
    size_t r = heapd_root_push(m, board);
    size_t s = heapd_root_push(m, NULL);
    if (r == (size_t)-1 || s == (size_t)-1)
        return NULL;
    for (int f = 0; f < FIELDS; f++) {
        if (build(m, s, f, 1, f % (BOARD_DEPTH + 1), x->stamp++) < 0)
            return NULL;
        board = heapd_root_get(m, r);
        heapd_write(m, board, &board[f], heapd_root_get(m, s));
    }
    heapd_root_pop(m, 1);
    return heapd_root_get(m, r);
}

static int worker_fail(struct worker *x, int err, const char *what, long arg)
{
    fprintf(stderr, "process %d thread %d: iteration %ld: %s (%s %ld)\n",
            x->w.proc, x->w.thread, x->rep.iters, error_names[err], what,
            arg);
    return err;
}

/* Check board structure S (field F), counting it. */
static int check_struct(struct worker *x, void *s, int f)
{
    if (!s)
        return worker_fail(x, E_BOARD_FIELD_NULL, "field", f);
    long r = walk(&x->w, s, f, 1, BOARD_MAXPOS, -1);
    if (r < 0)
        return worker_fail(x, (int)-r, "field", f);
    x->rep.checked++;
    return 0;
}

static int check_board(struct worker *x, heapd_mutator *m)
{
    void **board = heapd_root_get(m, 0);
    long *b = heapd_bytes(board);
    if (heapd_nrefs(board) != FIELDS || b[0] != BOARD_MAGIC ||
        b[1] != FIELDS || heapd_global_get(m, "board") != board)
        return worker_fail(x, E_BOARD_BAD, "board at", (long)(uintptr_t)board);
    for (int f = 0; f < FIELDS; f++) {
        int rc = check_struct(x, load_ref(&board[f]), f);
        if (rc)
            return rc;
    }
    return 0;
}

static int check_trees(struct worker *x, heapd_mutator *m)
{
    for (int t = 0; t < NTREES; t++) {
        long r = walk(&x->w, heapd_root_get(m, 1 + (size_t)t),
                      tree_key(x, t), 1, TREE_MAXPOS, -1);
        if (r < 0)
            return worker_fail(x, (int)-r, "private tree", t);
        if (r != TREE_NODES)
            return worker_fail(x, E_TREE_COUNT, "private tree nodes", r);
    }
    return 0;
}

static unsigned rnd(struct worker *x, unsigned n)
{
    return (unsigned)rand_r(&x->seed) % n;
}

/* A field to change: half the time one of the HOT_FIELDS every mutator
 * fights over, so that writes and CASes really race. */
static int pick_field(struct worker *x)
{
    return (int)(rnd(x, 2) ? rnd(x, HOT_FIELDS) : rnd(x, FIELDS));
}

/* Replace board field F with a fresh structure, with heapd_write. */
static int op_replace_write(struct worker *x, heapd_mutator *m)
{
    int f = pick_field(x);
    size_t s = heapd_root_push(m, NULL);
    if (s == (size_t)-1)
        return E_ROOTS;
    int rc = build(m, s, f, 1, (int)rnd(x, BOARD_DEPTH + 1), x->stamp++);
    if (rc < 0)
        return -rc;
    void **board = heapd_root_get(m, 0);
    heapd_write(m, board, &board[f], heapd_root_get(m, s));
    heapd_root_pop(m, 1);
    x->rep.writes++;
    return 0;
}

/* Replace board field F with heapd_cas against what it held before the
 * new structure was built (kept rooted meanwhile, so no ABA), then check
 * the old one: after a won CAS only our root keeps it alive. */
static int op_replace_cas(struct worker *x, heapd_mutator *m)
{
    int f = pick_field(x);
    void **board = heapd_root_get(m, 0);
    size_t so = heapd_root_push(m, load_ref(&board[f]));
    size_t sn = heapd_root_push(m, NULL);
    if (so == (size_t)-1 || sn == (size_t)-1)
        return E_ROOTS;
    int rc = build(m, sn, f, 1, (int)rnd(x, BOARD_DEPTH + 1), x->stamp++);
    if (rc < 0)
        return -rc;
    /* widen the window: let the others (6 threads, maybe 2 cores) run */
    heapd_blocking_enter(m);
    sched_yield();
    heapd_blocking_leave(m);
    board = heapd_root_get(m, 0);
    if (heapd_cas(m, board, &board[f], heapd_root_get(m, so),
                  heapd_root_get(m, sn))) {
        x->rep.cas_ok++;
    } else {
        x->rep.cas_lost++; /* another mutator replaced it meanwhile */
        if ((rc = check_struct(x, load_ref(&board[f]), f)))
            return rc;
    }
    if ((rc = check_struct(x, heapd_root_get(m, so), f)))
        return rc;
    heapd_root_pop(m, 2);
    return 0;
}

/* Edit a structure another mutator may have published: replace (write or
 * CAS) or delete a child subtree of its root. */
static int op_edit_published(struct worker *x, heapd_mutator *m)
{
    int f = pick_field(x), side = (int)rnd(x, 2), rc;
    void **board = heapd_root_get(m, 0);
    void **n = load_ref(&board[f]);
    if (!n)
        return worker_fail(x, E_BOARD_FIELD_NULL, "field", f);
    size_t sr = heapd_root_push(m, n);
    size_t sc = heapd_root_push(m, load_ref(&n[side])); /* old child */
    size_t ss = heapd_root_push(m, NULL);
    if (sr == (size_t)-1 || sc == (size_t)-1 || ss == (size_t)-1)
        return E_ROOTS;
    unsigned how = rnd(x, 4);
    if (how == 0) {
        n = heapd_root_get(m, sr);
        heapd_write(m, n, &n[side], NULL);
        x->rep.deletes++;
    } else {
        rc = build(m, ss, f, 2 + side, (int)rnd(x, BOARD_DEPTH), x->stamp++);
        if (rc < 0)
            return -rc;
        n = heapd_root_get(m, sr);
        if (how == 1)
            heapd_write(m, n, &n[side], heapd_root_get(m, ss));
        else
            heapd_cas(m, n, &n[side], heapd_root_get(m, sc),
                      heapd_root_get(m, ss));
        x->rep.inner++;
    }
    if ((rc = check_struct(x, heapd_root_get(m, sr), f)))
        return rc;
    void *old = heapd_root_get(m, sc);
    if (old) {
        long r = walk(&x->w, old, f, 2 + side, BOARD_MAXPOS, -1);
        if (r < 0)
            return worker_fail(x, (int)-r, "replaced child of field", f);
    }
    heapd_root_pop(m, 3);
    return 0;
}

/* Replace a subtree of (or all of) a private tree: pushes and pops. */
static int op_private(struct worker *x, heapd_mutator *m)
{
    int t = (int)rnd(x, NTREES), rc;
    size_t slot = 1 + (size_t)t;
    if (rnd(x, 4) == 0) {
        rc = build(m, slot, tree_key(x, t), 1, TREE_DEPTH, x->stamp++);
        return rc < 0 ? -rc : 0;
    }
    int side = (int)rnd(x, 2);
    size_t s = heapd_root_push(m, NULL);
    if (s == (size_t)-1)
        return E_ROOTS;
    rc = build(m, s, tree_key(x, t), 2 + side, TREE_DEPTH - 1, x->stamp++);
    if (rc < 0)
        return -rc;
    void **root = heapd_root_get(m, slot);
    heapd_write(m, root, &root[side], heapd_root_get(m, s));
    heapd_root_pop(m, 1);
    return 0;
}

/* Hold HOLD board structures on the root stack while others replace them
 * and this mutator allocates and blocks, then check them. */
static int op_hold(struct worker *x, heapd_mutator *m, int stop_fd)
{
    int fields[HOLD], rc;
    size_t first = heapd_root_depth(m);
    for (int i = 0; i < HOLD; i++) {
        fields[i] = (int)rnd(x, FIELDS);
        void **board = heapd_root_get(m, 0);
        if (heapd_root_push(m, load_ref(&board[fields[i]])) == (size_t)-1)
            return E_ROOTS;
    }
    if ((rc = op_private(x, m)))
        return rc;
    if (rnd(x, 2)) {
        wait_blocked(m, stop_fd);
        x->rep.blocked++;
    }
    for (int i = 0; i < HOLD; i++)
        if ((rc = check_struct(x, heapd_root_get(m, first + (size_t)i),
                               fields[i])))
            return rc;
    heapd_root_pop(m, HOLD);
    x->rep.held += HOLD;
    return 0;
}

static int work(struct worker *x, heapd_mutator *m)
{
    int rc;
    void **board = heapd_global_once(m, "board", init_board, x);
    if (x->init_ran && !x->may_init)
        return worker_fail(x, E_BOARD_INIT_ELSEWHERE, "errno", errno);
    if (!board)
        return worker_fail(x, E_BOARD_ONCE, "errno", errno);
    if (x->may_init && !x->init_ran)
        return E_BOARD_NOT_INIT_HERE;
    /* init_board left the board in slot 0; elsewhere root it there */
    if (!x->init_ran && heapd_root_push(m, board) != 0)
        return E_ROOTS;
    if (heapd_root_depth(m) != 1 || heapd_root_get(m, 0) != board)
        return worker_fail(x, E_ROOT_DEPTH, "depth", (long)heapd_root_depth(m));
    for (int t = 0; t < NTREES; t++) {
        size_t s = heapd_root_push(m, NULL);
        if (s == (size_t)-1)
            return E_ROOTS;
        if ((rc = build(m, s, tree_key(x, t), 1, TREE_DEPTH, x->stamp++)))
            return -rc;
    }
    const size_t depth = heapd_root_depth(m);
    if ((rc = check_board(x, m)) || (rc = check_trees(x, m)))
        return rc;
    if (write(x->ready_fd, "r", 1) != 1)
        return E_PIPE;

    for (long it = 0;; it++) {
        x->rep.iters = it;
        if (it >= MIN_ITERS && readable(x->stop_fd, 0))
            break;
        switch (it % 8) {
        case 0: case 4: rc = op_replace_write(x, m); break;
        case 1: case 5: rc = op_replace_cas(x, m); break;
        case 2: case 6: rc = op_edit_published(x, m); break;
        case 3: rc = op_hold(x, m, x->stop_fd); break;
        default: rc = op_private(x, m); break;
        }
        if (rc)
            return rc;
        if (heapd_root_depth(m) != depth)
            return worker_fail(x, E_ROOT_DEPTH, "depth", (long)heapd_root_depth(m));
        if (it % 16 == 15) {
            wait_blocked(m, x->stop_fd);
            x->rep.blocked++;
        }
        if (it % 64 == 37 && x->w.thread == 1 &&
            heapd_collect(m, 0) < 0) /* a request from a mutator too */
            return E_COLLECT;
        if (it % 4 == 3 && ((rc = check_board(x, m)) ||
                            (rc = check_trees(x, m))))
            return rc;
    }
    if ((rc = check_board(x, m)) || (rc = check_trees(x, m)))
        return rc;
    if (write(x->report_fd, &x->rep, sizeof x->rep) != sizeof x->rep)
        return E_PIPE;
    return 0;
}

static void *worker_thread(void *arg)
{
    struct worker *x = arg;
    heapd_mutator *m;
    /* small nurseries: many minor collections; ages 1 and 2 */
    heapd_mutator_opts o = {.flags = HEAPD_MUTATOR_YOUNG,
                            .young_size = 256 * 1024,
                            .young_age = 1 + (unsigned)(x->w.proc % 2)};
    bool young = board_young && x->w.thread == 0;
    if (heapd_attach_opts(x->c, young ? &o : NULL, &m) < 0) {
        fprintf(stderr, "process %d thread %d: attach: %s\n", x->w.proc,
                x->w.thread, heapd_last_error());
        x->rc = E_ATTACH;
        return NULL;
    }
    x->rc = work(x, m);
    heapd_detach(m);
    return NULL;
}

/* A board process: NTHREADS mutator threads on one connection. */
static int board_process(int proc, int stop_fd, int ready_fd, int report_fd)
{
    char name[32];
    snprintf(name, sizeof name, "board-%d", proc);
    heapd_connect_opts o = {.socket_path = D.sock, .client_name = name};
    heapd_client *c;
    if (heapd_connect(&c, &o) < 0) {
        fprintf(stderr, "process %d: connect: %s\n", proc,
                heapd_last_error());
        return E_CONNECT;
    }
    struct worker xs[2];
    pthread_t th[2];
    int n = threads_of[proc];
    for (int t = 0; t < n; t++) {
        struct worker *x = &xs[t];
        memset(x, 0, sizeof *x);
        x->c = c;
        x->w.lo = (uintptr_t)heapd_heap_base(c);
        x->w.hi = x->w.lo + heapd_heap_size(c);
        x->w.proc = proc;
        x->w.thread = t;
        x->stop_fd = stop_fd;
        x->ready_fd = ready_fd;
        x->report_fd = report_fd;
        x->may_init = proc == 0 && t == 0;
        x->seed = 7919u * (unsigned)(proc * 2 + t + 1);
        x->stamp = (long)(proc * 2 + t + 1) << 40;
        x->rep.proc = proc;
        x->rep.thread = t;
    }
    for (int t = 1; t < n; t++)
        if (pthread_create(&th[t], NULL, worker_thread, &xs[t]) != 0)
            return E_THREAD;
    worker_thread(&xs[0]);
    for (int t = 1; t < n; t++)
        pthread_join(th[t], NULL);
    heapd_disconnect(c);
    for (int t = 0; t < n; t++)
        if (xs[t].rc)
            return xs[t].rc + 100 * t;
    return 0;
}

struct kid {
    pid_t pid;
    char name[32];
    int status;
    bool done;
};

static void check_kids_running(struct kid *kids, int n)
{
    for (int i = 0; i < n; i++) {
        if (kids[i].done || kids[i].pid <= 0)
            continue;
        int st;
        if (waitpid(kids[i].pid, &st, WNOHANG) == kids[i].pid) {
            kids[i].done = true;
            kids[i].status = st;
            char why[256];
            describe(st, why, sizeof why);
            ck_abort_msg("%s ended while it should still run: %s (details "
                         "in the test log)", kids[i].name, why);
        }
    }
}

static void wait_kids(struct kid *kids, int n)
{
    for (int i = 0; i < n; i++) {
        if (!kids[i].done) {
            kids[i].status = harness_wait_pid(kids[i].pid, HARNESS_WAIT_MS * 4);
            kids[i].done = true;
        }
    }
    for (int i = 0; i < n; i++) {
        char why[256];
        describe(kids[i].status, why, sizeof why);
        ck_assert_msg(kids[i].status != -1 && WIFEXITED(kids[i].status) &&
                          WEXITSTATUS(kids[i].status) == 0,
                      "%s: %s (details in the test log)", kids[i].name, why);
    }
}

struct ready_wait {
    int fd, n, got;
    struct kid *kids;
    int nkids;
    const char *what;
};

static bool all_ready(void *arg, char *seen, size_t seen_len)
{
    struct ready_wait *w = arg;
    check_kids_running(w->kids, w->nkids);
    while (w->got < w->n && readable(w->fd, 0)) {
        char buf[16];
        size_t want = (size_t)(w->n - w->got);
        ssize_t r = read(w->fd, buf, want < sizeof buf ? want : sizeof buf);
        ck_assert_msg(r > 0, "ready pipe: %s", r ? strerror(errno) : "EOF");
        w->got += (int)r;
    }
    snprintf(seen, seen_len, "%d of %d %s ready", w->got, w->n, w->what);
    return w->got == w->n;
}

/* Read N ready bytes (bounded), failing at once if a kid dies first. */
static void wait_ready(int fd, int n, struct kid *kids, int nkids,
                       const char *what)
{
    char desc[128];
    struct ready_wait w = {fd, n, 0, kids, nkids, what};
    snprintf(desc, sizeof desc, "%d %s to be ready", n, what);
    harness_wait_until(all_ready, &w, desc);
}

/* Run collections from control client C until CYCLES more completed,
 * checking that the kids still run. */
static void run_cycles(heapd_client *c, uint64_t cycles, struct kid *kids,
                       int nkids)
{
    uint64_t before = harness_stats(c).cycles_completed, now = before;
    for (uint64_t calls = 0; now < before + cycles; calls++) {
        /* each call waits for a cycle that starts after it */
        ck_assert_msg(calls <= cycles, "%llu collect calls but cycles went "
                      "only from %llu to %llu",
                      (unsigned long long)calls, (unsigned long long)before,
                      (unsigned long long)now);
        int rc = heapd_request_collect(c, HEAPD_COLLECT_WAIT);
        ck_assert_msg(rc == 0, "collect: %s", heapd_last_error());
        if (calls % 10 == 0)
            check_kids_running(kids, nkids);
        now = harness_stats(c).cycles_completed;
    }
    check_kids_running(kids, nkids);
}

static void board_test(bool young)
{
    int stop[2], ready[2], report[2];
    board_young = young;
    threads_of = young ? threads_of_young : threads_of_plain;
    struct kid kids[NPROC];
    start();
    ck_assert_int_eq(pipe(stop), 0);
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(report), 0);
    memset(kids, 0, sizeof kids);
    int nthreads = 0;
    for (int p = 0; p < NPROC; p++) {
        snprintf(kids[p].name, sizeof kids[p].name, "process %d", p);
        kids[p].pid = fork();
        ck_assert_int_ge(kids[p].pid, 0);
        if (kids[p].pid == 0) {
            close(stop[1]); /* EOF on stop[0] is the signal to stop */
            close(ready[0]);
            close(report[0]);
            _exit(board_process(p, stop[0], ready[1], report[1]));
        }
        nthreads += threads_of[p];
        /* process 0 makes the board before anyone else asks for it */
        if (p == 0)
            wait_ready(ready[0], 1, kids, 1, "board makers");
    }
    close(stop[0]);
    close(ready[1]);
    close(report[1]);
    wait_ready(ready[0], nthreads - 1, kids, NPROC, "mutator threads");

    heapd_client *c = harness_control(&D);
    heapd_stats_t st = harness_stats(c);
    ck_assert_uint_eq(st.mutators, (uint32_t)nthreads);
    uint64_t before = st.cycles_completed;
    run_cycles(c, CYCLES, kids, NPROC);
    close(stop[1]);
    wait_kids(kids, NPROC);

    struct report r, total = {0};
    int reports = 0;
    while (read(report[0], &r, sizeof r) == sizeof r) {
        fprintf(stderr, "process %d thread %d: %ld iterations, %ld writes, "
                "%ld CAS won, %ld lost, %ld inner edits, %ld deletes, %ld "
                "structures checked, %ld held, %ld blocked\n", r.proc,
                r.thread, r.iters, r.writes, r.cas_ok, r.cas_lost, r.inner,
                r.deletes, r.checked, r.held, r.blocked);
        total.cas_lost += r.cas_lost;
        reports++;
    }
    ck_assert_int_eq(reports, nthreads);
    st = harness_stats(c);
    fprintf(stderr, "board: %llu cycles (%llu during the test), %d mutators"
            ", %ld CAS lost to a race; pause max %llu ns, ttsp max %llu ns\n",
            (unsigned long long)st.cycles_completed,
            (unsigned long long)(st.cycles_completed - before), nthreads,
            total.cas_lost, (unsigned long long)st.pause_max_ns,
            (unsigned long long)st.ttsp_max_ns);
    ck_assert_uint_ge(st.cycles_completed, before + CYCLES);
    if (young) {
        fprintf(stderr, "young board: %llu minor collections, %llu bytes "
                "promoted by age, %llu by publication, longest minor %llu "
                "ns\n", (unsigned long long)st.minor_collections,
                (unsigned long long)st.promoted_age_bytes,
                (unsigned long long)st.promoted_published_bytes,
                (unsigned long long)st.minor_pause_max_ns);
        ck_assert_msg(st.minor_collections > 0 &&
                          st.promoted_age_bytes > 0 &&
                          st.promoted_published_bytes > 0,
                      "the young mutators collected %llu times, promoted "
                      "%llu bytes by age and %llu by publication: the young "
                      "paths were not exercised",
                      (unsigned long long)st.minor_collections,
                      (unsigned long long)st.promoted_age_bytes,
                      (unsigned long long)st.promoted_published_bytes);
    }
    harness_expect_healthy(&D);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}

START_TEST(shared_board_under_1000_cycles)
{
    board_test(false);
}
END_TEST

/* The same board with a young and a shared-heap mutator in every
 * process: publications race with writes and CASes of the others. */
START_TEST(young_board_under_1000_cycles)
{
    board_test(true);
}
END_TEST

/* ==== test 2: a global overwritten during cycles ==== */

enum { HOT_DEPTH = 4, HOT_CYCLES = 200, HOT_READERS = 2 };
#define HOT_KEY 5000L
#define HOT_MAXPOS (1L << (HOT_DEPTH + 1))
#define HOT_NODES ((1L << (HOT_DEPTH + 1)) - 1)

static int hot_fail(const struct walker *w, int err, long round)
{
    fprintf(stderr, "process %d: round %ld: %s\n", w->proc, round,
            error_names[err]);
    return err;
}

/* Check a published "hot" tree: complete, every node of one round. */
static int check_hot(const struct walker *w, void **g, long round)
{
    if (!g)
        return hot_fail(w, E_GLOBAL_NULL, round);
    long r = walk(w, g, HOT_KEY, 1, HOT_MAXPOS, -1);
    if (r < 0)
        return -(int)r;
    long stamp = ((long *)heapd_bytes(g))[0] / 256;
    if ((r = walk(w, g, HOT_KEY, 1, HOT_MAXPOS, stamp)) < 0)
        return -(int)r;
    if (r != HOT_NODES)
        return hot_fail(w, E_TREE_COUNT, round);
    return 0;
}

static int hot_connect(int proc, heapd_client **c, heapd_mutator **m,
                       struct walker *w)
{
    heapd_connect_opts o = {.socket_path = D.sock};
    if (heapd_connect(c, &o) < 0)
        return E_CONNECT;
    if (heapd_attach(*c, m) < 0)
        return E_ATTACH;
    w->lo = (uintptr_t)heapd_heap_base(*c);
    w->hi = w->lo + heapd_heap_size(*c);
    w->proc = proc;
    return 0;
}

/* Publish a fresh tree under "hot", again and again. */
static int hot_writer(int stop_fd, int ready_fd)
{
    heapd_client *c;
    heapd_mutator *m;
    struct walker w = {0};
    int rc = hot_connect(0, &c, &m, &w);
    if (rc)
        return rc;
    for (long round = 1;; round++) {
        if (round > MIN_ITERS && readable(stop_fd, 0))
            break;
        size_t s = heapd_root_push(m, NULL);
        if (s == (size_t)-1)
            return E_ROOTS;
        if ((rc = build(m, s, HOT_KEY, 1, HOT_DEPTH, round)))
            return -rc;
        if (heapd_global_set(m, "hot", heapd_root_get(m, s)) < 0) {
            fprintf(stderr, "writer: global_set: %s\n", heapd_last_error());
            return E_GLOBAL_SET;
        }
        heapd_root_pop(m, 1);
        /* the global alone keeps it now */
        if ((rc = check_hot(&w, heapd_global_get(m, "hot"), round)))
            return rc;
        if (round == 1 && write(ready_fd, "r", 1) != 1)
            return E_PIPE;
        if (round % 8 == 0)
            wait_blocked(m, stop_fd);
    }
    heapd_detach(m);
    heapd_disconnect(c);
    return 0;
}

/* Read "hot" and check it; now and then hold it on the root stack through
 * allocation and a blocking region while the writer replaces it. */
static int hot_reader(int proc, int stop_fd)
{
    heapd_client *c;
    heapd_mutator *m;
    struct walker w = {0};
    int rc = hot_connect(proc, &c, &m, &w);
    if (rc)
        return rc;
    for (long round = 0;; round++) {
        if (round >= MIN_ITERS && readable(stop_fd, 0))
            break;
        void **g = heapd_global_get(m, "hot");
        if ((rc = check_hot(&w, g, round)))
            return rc;
        if (round % 4 != 0) {
            heapd_safepoint(m);
            continue;
        }
        long stamp = ((long *)heapd_bytes(g))[0] / 256;
        size_t s = heapd_root_push(m, g);
        if (s == (size_t)-1)
            return E_ROOTS;
        for (int i = 0; i < 32; i++) /* garbage: safepoints, cycles */
            if (!heapd_alloc(m, 1, 64))
                return E_ALLOC;
        if (round % 16 == 0)
            wait_blocked(m, stop_fd);
        g = heapd_root_get(m, s);
        if ((rc = check_hot(&w, g, round)))
            return rc;
        if (((long *)heapd_bytes(g))[0] / 256 != stamp)
            return hot_fail(&w, E_NODE_STAMP, round);
        heapd_root_pop(m, 1);
    }
    heapd_detach(m);
    heapd_disconnect(c);
    return 0;
}

START_TEST(hot_global_overwritten_during_cycles)
{
    int stop[2], ready[2];
    struct kid kids[1 + HOT_READERS];
    start();
    ck_assert_int_eq(pipe(stop), 0);
    ck_assert_int_eq(pipe(ready), 0);
    memset(kids, 0, sizeof kids);
    for (int p = 0; p < 1 + HOT_READERS; p++) {
        snprintf(kids[p].name, sizeof kids[p].name,
                 p == 0 ? "writer (process %d)" : "reader (process %d)", p);
        kids[p].pid = fork();
        ck_assert_int_ge(kids[p].pid, 0);
        if (kids[p].pid == 0) {
            close(stop[1]);
            close(ready[0]);
            _exit(p == 0 ? hot_writer(stop[0], ready[1])
                         : hot_reader(p, stop[0]));
        }
        /* readers start once "hot" is set */
        if (p == 0)
            wait_ready(ready[0], 1, kids, 1, "writers");
    }
    close(stop[0]);
    close(ready[1]);
    heapd_client *c = harness_control(&D);
    run_cycles(c, HOT_CYCLES, kids, 1 + HOT_READERS);
    close(stop[1]);
    wait_kids(kids, 1 + HOT_READERS);
    harness_expect_healthy(&D);
    heapd_disconnect(c);
    harness_stop_clean(&D);
}
END_TEST

static Suite *concurrent_suite(void)
{
    Suite *s = suite_create("concurrent");
    TCase *t = tcase_create("concurrent");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, shared_board_under_1000_cycles);
    tcase_add_test(t, hot_global_overwritten_during_cycles);
    suite_add_tcase(s, t);
    TCase *y = tcase_create("young"); /* CK_RUN_CASE=young */
    tcase_set_timeout(y, 600);
    tcase_add_test(y, young_board_under_1000_cycles);
    suite_add_tcase(s, y);
    return s;
}

int main(void)
{
    return check_main(concurrent_suite());
}
