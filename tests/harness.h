/* Test harness: start a real heapd on a private socket, talk raw frames to
 * it, and wait for things with bounded waits that fail with a message.
 *
 * Note [Test handshakes]
 * ~~~~~~~~~~~~~~~~~~~~~~
 * Tests never sleep and hope.  A started daemon is waited for through the
 * systemd notification protocol: the harness binds a datagram socket, passes
 * it as NOTIFY_SOCKET, and waits (bounded) for READY=1, as systemd would.
 * Child processes report to the test over pipes.  A condition the test
 * cannot be told about (a counter in heapd's stats, a file that goes away,
 * a thread's scheduling class) is polled with harness_wait_until or
 * harness_wait_stat, never slept for.  Every wait has one generous bound,
 * HARNESS_WAIT_MS (60 s, times $CK_TIMEOUT_MULTIPLIER, the variable that
 * scales check's own test timeouts), and fails the test naming what it
 * waited for and the last value it saw.  None of these bounds is a
 * performance assertion: they only turn a hang into a message, so they are
 * far above what any condition needs: the slowest by design, a connection
 * reaped after CLOSE_GRACE_MS (daemon/server.c), takes up to 6 s, its 5 s
 * grace and a 1 s reaper tick.
 */
#ifndef HEAPD_TESTS_HARNESS_H
#define HEAPD_TESTS_HARNESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "heapd.h"
#include "heapd.pb-c.h"

/* The bound of every wait, in ms (Note [Test handshakes]). */
int harness_wait_ms(void);
/* CLOCK_MONOTONIC in ms (monotonic_ns, proto/clock.h): the clock of every
 * bounded wait. */
int64_t harness_now_ms(void);
#define HARNESS_WAIT_MS harness_wait_ms()

/* An address held where the conservative scan of C locals does not see
 * it (Note [C locals are roots] in client/stack_roots.c), for a test that
 * needs the object to die while it remembers where it was. */
#define HARNESS_HIDE(p) ((uintptr_t)(p) ^ 0x5a5a5a5a5a5a5a5aull)
#define HARNESS_UNHIDE(h) ((void *)((uintptr_t)(h) ^ 0x5a5a5a5a5a5a5a5aull))
/* Wipe 32 KiB of the stack below the caller's frame, where the frames of
 * the calls before it left words: an object they held there would
 * otherwise be kept by a stale copy (the same Note), not by what the test
 * means to hold it. */
void harness_wipe_stack(void);

/* A base every test heap may use: it is outside the ranges ASan's and
 * TSan's shadow memory take, so it maps in plain, ASan and TSan builds. */
#define HARNESS_HEAP_BASE 0x7e8000000000ULL

/* Note [Harness file-descriptor store]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * The harness plays systemd's file-descriptor store (sd_notify(3),
 * FDSTORE=1; sd_listen_fds_with_names(3)) for the heapd it runs, so that
 * what heapd keeps across a restart can be tested without systemd:
 *   - every read of the notify socket takes the fds a datagram carries
 *     (recvmsg, SCM_RIGHTS, close-on-exec).  With FDSTORE=1 they are
 *     stored under the datagram's FDNAME= ("stored" if none), in arrival
 *     order; a file already stored (the same open file, under any name) is
 *     not stored twice, as systemd drops duplicates.  FDSTOREREMOVE=1
 *     closes and drops every fd stored under its FDNAME=.  Fds in a
 *     datagram without FDSTORE=1 are closed.  A name systemd would refuse
 *     (empty, over 255 bytes, a ':' or a non-printable byte), an
 *     FDSTOREREMOVE=1 without FDNAME=, more than HARNESS_NOTIFY_FDS fds in
 *     one datagram or more than HARNESS_STORE_MAX stored fail the test:
 *     systemd would log and drop them, and a test should see that loudly;
 *   - harness_stop serves the notify socket while it waits for heapd to
 *     exit, and drains it after: a Unix datagram socket queues only
 *     /proc/sys/net/unix/max_dgram_qlen (10 here) datagrams, and sd_notify
 *     blocks when they are unread, so a heapd storing three fds per heap
 *     at shutdown would hang in it until the bound ran out;
 *   - harness_restart hands the store to the new heapd as systemd does:
 *     stored fd i becomes fd 3 + i, LISTEN_FDS is their count,
 *     LISTEN_FDNAMES their names joined by ':', LISTEN_PID the new
 *     process's pid; none of the three is set when nothing is stored.  The
 *     harness keeps its own copies: they stay stored until FDSTOREREMOVE=1
 *     or harness_forget_store, as systemd keeps them across restarts.
 * Between the waits a thread of the harness reads the socket, every 10
 * ms at most: heapd stores each mutator client's control memory at its
 * Welcome (Note [Resuming clients] in daemon/resume.c), and a test whose
 * processes connect in a loop while it waits for them would otherwise
 * leave heapd blocked in sd_notify.  The store, the notify log and the
 * socket are read under `mu`; harness_wait_notify looks at every line
 * heapd sent since it was last started, whoever read it.
 */
#define HARNESS_STORE_MAX 32   /* fds the store holds */
#define HARNESS_NOTIFY_FDS 16  /* fds one notify datagram may carry */
#define HARNESS_NOTIFY_LINES 64 /* lines of the notify log kept */

struct harness_stored_fd {
    char name[256];        /* FDNAME= it was stored under */
    int fd;                /* the harness's copy, close-on-exec */
};

struct daemon_proc {
    pid_t pid;
    char dir[64];          /* private temp dir: socket, config, notify */
    char sock[108];
    char conf[128];
    int notify_fd;         /* our end of NOTIFY_SOCKET */
    char notify_path[108];
    bool stopping_seen;
    char log[128];         /* heapd's stderr, if started logged */
    uid_t run_as;          /* heapd's uid (harness_start_as); 0: ours */
    /* Note [Harness file-descriptor store] */
    struct harness_stored_fd store[HARNESS_STORE_MAX];
    int nstored;
    /* the last HARNESS_NOTIFY_LINES lines heapd sent, oldest first */
    char notified[HARNESS_NOTIFY_LINES][256];
    unsigned nnotified;
    char config_text[8192]; /* the config written, for a restart */
    pthread_mutex_t mu;    /* the notify socket, the store and the log */
    pthread_t server;      /* reads the notify socket between the waits */
    bool serving;
    _Atomic bool serve_stop;
    int serve_wake[2];     /* a byte stops the thread at once */
    uint64_t lines_total;  /* notify lines logged, ever */
    uint64_t spawn_mark;   /* lines_total when heapd was last started */
    bool dir_kept;         /* harness_stop kept dir, config, notify socket
                              and log for a restart: the store held fds */
};

/* A config with one heap "default" at HARNESS_HEAP_BASE (1 GiB) and the
 * daemon's socket in the private dir; EXTRA is appended verbatim. */
const char *harness_default_config(const char *sock, const char *extra);

/* Write CONFIG (printf-style %s for the socket path is not used: the
 * harness substitutes "@SOCK@") and start heapd --foreground; wait for
 * READY=1.  Fails the test on any problem.  ARGS_EXTRA may be NULL. */
void harness_start(struct daemon_proc *d, const char *config);
/* harness_start with harness_default_config, "verify = true" and EXTRA
 * (may be NULL) in heap "default"'s section. */
void harness_start_with(struct daemon_proc *d, const char *extra);
/* harness_start_with(D, NULL), with a debug build's hook (Note [Holding
 * marking for tests] in daemon/gc/collector.c): while the file HOLD (this
 * process's, LEN bytes for its path) exists, a cycle past its snapshot
 * waits before it marks anything.  The test creates it and removes it. */
void harness_start_holding(struct daemon_proc *d, char *hold, size_t len);
/* The same with heapd's stderr in a file LOG_NAME of the private dir. */
void harness_start_logged(struct daemon_proc *d, const char *config,
                          const char *log_name);
/* The same, heapd running as UID (a root test only): its directory is
 * UID's, and its notify socket open to it. */
void harness_start_as(struct daemon_proc *d, const char *config,
                      const char *log_name, uid_t uid);
/* True if heapd's log (harness_start_logged) contains TEXT. */
bool harness_log_contains(const struct daemon_proc *d, const char *text);
/* Start heapd with ARGV (argv[0] ignored; the heapd binary is used) and
 * the notify socket, without waiting.  Used for start-up error tests. */
pid_t harness_spawn(struct daemon_proc *d, char *const argv[], int stderr_fd);
/* Wait for a notify datagram containing WHAT (e.g. "READY=1").  Returns
 * true if it came within the bound. */
bool harness_wait_notify(struct daemon_proc *d, const char *what, char *got,
                         size_t gotlen);
/* SIGTERM, wait for exit (bounded) while serving the notify socket, then
 * drain it (harness_drain_notify); returns the wait status.  The private
 * dir is removed, unless the store holds fds: then dir, config, notify
 * socket and log stay for harness_restart, and harness_forget_store
 * removes them (Note [Harness file-descriptor store]). */
int harness_stop(struct daemon_proc *d);
/* Read every notify datagram already queued, without waiting: store or
 * drop the fds they carry, log their lines, note STOPPING=1. */
void harness_drain_notify(struct daemon_proc *d);
/* True if a line heapd sent on the notify socket (of the last
 * HARNESS_NOTIFY_LINES) contains TEXT. */
bool harness_notified(const struct daemon_proc *d, const char *text);
/* After harness_stop: start heapd again with the same dir, config,
 * socket, notify socket and log (appended to), handing it the store
 * (LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID); wait for READY=1 as
 * harness_start does.  The store keeps its fds. */
void harness_restart(struct daemon_proc *d);
/* SIGKILL heapd, as a crash: what it stored stays, and so does its
 * directory, for harness_restart. */
void harness_kill(struct daemon_proc *d);
/* The same with another program: BINARY run with ARGV (argv[0] passed as
 * is), the store handed over, NOTIFY_SOCKET set; it must send READY=1. */
void harness_restart_with(struct daemon_proc *d, const char *binary,
                          char *const argv[]);
/* Keep a copy of FD in the store under NAME, as the service manager
 * would had heapd sent it (a test standing in for another heapd). */
void harness_store_keep(struct daemon_proc *d, const char *name, int fd);
/* The same, dropping (and closing) what was stored under NAME first. */
void harness_store_replace(struct daemon_proc *d, const char *name, int fd);
/* How many fds are stored under NAME. */
int harness_stored(const struct daemon_proc *d, const char *name);
/* The first fd stored under NAME (the harness's copy: do not close it),
 * or -1. */
int harness_stored_fd(const struct daemon_proc *d, const char *name);
/* Close and drop every stored fd; if harness_stop kept the private dir for
 * a restart, remove it.  A test that leaves fds stored calls it at its
 * end; harness_start* starts with an empty store. */
void harness_forget_store(struct daemon_proc *d);
/* Wait for PID to exit, bounded; returns its wait status or -1 on time-out
 * (after SIGKILL). */
int harness_wait_pid(pid_t pid, int ms);

/* Wait until PRED(ARG, SEEN, SEEN_LEN) returns true, polling it (every
 * millisecond at first, backing off to every 10 ms); fail the test if it
 * has not within HARNESS_WAIT_MS, naming WHAT ("the killed client's
 * connection is closed") and what PRED last wrote into SEEN (empty if it
 * writes nothing).  PRED may do work (read a pipe, retry a connect) and
 * may fail the test itself. */
void harness_wait_until(bool (*pred)(void *arg, char *seen, size_t seen_len),
                        void *arg, const char *what);

/* Make a private directory under /tmp (short, for sun_path). */
void harness_tmpdir(char *out, size_t n);

/* Raw protocol access. */
int harness_raw_connect(const char *sock);
void harness_send_bytes(int fd, const void *p, size_t n);
void harness_send_env(int fd, const Heapd__Envelope *env);
/* Send a Hello for heap NAME (kind mutator) with the given version. */
void harness_send_hello(int fd, const char *heap, uint32_t version,
                        Heapd__ClientKind kind);
/* Connect to SOCK, say Hello for heap "default" as KIND with this
 * build's protocol version, and check the answer is a Welcome; returns
 * the socket.  A mutator's heap fd is closed. */
int harness_raw_welcomed(const char *sock, Heapd__ClientKind kind);
/* Read one envelope (bounded); NULL at EOF.  *fd_out gets a passed fd or
 * -1 (may be NULL). */
Heapd__Envelope *harness_read_env(int fd, int *fd_out);

/* A raw mutator client that keeps its Welcome's descriptors, for tests
 * that play a mutator by hand -- a young one too, writing young marks
 * into blocks of its own segments as libheapd's allocator would (Note
 * [Young objects] in proto/young.h). */
struct harness_raw {
    int sock, heap_fd, mem_fd;
    uint64_t base, max_size, segment_size;
};
struct layout_mutator;
/* Hello to heap "default" of SOCK as a mutator, and its Welcome. */
void harness_raw_mutator(const char *sock, struct harness_raw *r);
void harness_raw_close(struct harness_raw *r);
/* AttachRequest{YOUNG, BYTES, AGE} as SEQ; the reply (caller frees). */
Heapd__Envelope *harness_raw_attach(struct harness_raw *r, uint64_t seq,
                                    bool young, uint64_t bytes, uint32_t age);
/* Attach young with the heap's budget (seq 1); the slot's words, mapped
 * (munmap LAYOUT_MUTATOR_BYTES), BLOCKED if BLOCKED: the daemon then takes
 * its stack handshake (Note [Stack marking handshake]). */
struct layout_mutator *harness_raw_young_mutator(struct harness_raw *r,
                                                 bool blocked);
/* Map the heap at its base in this process, unless something (a libheapd
 * client) has. */
void harness_raw_map(struct harness_raw *r);
/* One small segment granted to R (request SEQ), formatted by hand for the
 * class of objects of two reference fields; the heap mapped at base. */
uint32_t harness_raw_segment(struct harness_raw *r, uint64_t seq);
/* Send a SegmentRequest for COUNT small segments as SEQ on FD. */
void harness_raw_ask_segments(int fd, uint64_t seq, uint32_t count);
/* Send a SegmentReturn of SEGS[0..N) as SEQ on FD (no reply comes). */
void harness_raw_return_segments(int fd, uint64_t seq, uint32_t *segs,
                                 size_t n);
/* Block B of segment SEG (from harness_raw_segment) made young, with
 * fields A and F: the mark first, as libheapd's allocator sets it.
 * Returns the object. */
void **harness_raw_young(struct harness_raw *r, uint32_t seg, uint32_t b,
                         void *a, void *f);
/* The mark of block B of SEG. */
uint8_t harness_raw_mark(struct harness_raw *r, uint32_t seg, uint32_t b);
/* True if the peer closes the connection (EOF) within the bound. */
bool harness_wait_eof(int fd);

/* Path of a built binary from the environment (HEAPD_BIN, HEAPCTL_BIN). */
const char *harness_bin(const char *envname);

/* Run CMD through sh, capture stdout+stderr into OUT; returns exit status. */
int harness_run(const char *cmd, char *out, size_t outlen);

/* ---- for suites that use libheapd against a started daemon ---- */
/* Connect to SOCK with FLAGS (fails the test on error). */
heapd_client *harness_connect_ok(const char *sock, unsigned flags);
/* The same, but while heapd refuses it for want of connections (EAGAIN:
 * connections it has closed may not be freed yet), try again, bounded. */
heapd_client *harness_connect_when_room(const char *sock, unsigned flags);
/* The daemon still works: a fresh control client gets stats; returns how
 * many clients are connected. */
uint32_t harness_still_serving(const char *sock);
/* An Error reply with CODE whose message holds SUBSTR, then EOF; closes
 * FD. */
void harness_expect_error_and_close(int fd, Heapd__ErrorCode code,
                                    const char *substr);
/* SIGTERM, and heapd must exit 0. */
void harness_stop_clean(struct daemon_proc *d);
/* Connect and attach one mutator (fails the test on error). */
void harness_attach(const struct daemon_proc *d, heapd_client **c,
                    heapd_mutator **m);
/* The same with a HEAPD_MUTATOR_PRECISE mutator, whose C locals keep
 * nothing (Note [C locals are roots] in client/stack_roots.c): for a test
 * that needs the objects its locals last held to die. */
void harness_attach_precise(const struct daemon_proc *d, heapd_client **c,
                            heapd_mutator **m);
/* Connect, attach a mutator *M and leave it in a blocking region, and
 * attach a young mutator *Y beside it: the usual setting of a young
 * test.  harness_detach_young undoes it (detaches both, disconnects). */
void harness_attach_young(const struct daemon_proc *d, heapd_client **c,
                          heapd_mutator **m, heapd_mutator **y);
void harness_detach_young(heapd_client *c, heapd_mutator *m, heapd_mutator *y);
/* A control connection (stats, gc). */
heapd_client *harness_control(const struct daemon_proc *d);
heapd_stats_t harness_stats(heapd_client *c);
/* A whole cycle of M's heap, asked for by M and waited for (fails the
 * test on error). */
void harness_collect(heapd_mutator *m);
/* Stats through a fresh control connection. */
heapd_stats_t harness_daemon_stats(const struct daemon_proc *d);
/* Wait (harness_wait_until) until heapd_stats field FIELD (an integer
 * member of heapd_stats_t) compares OP (==, !=, >= or <=) to VALUE,
 * reading stats on control client C, or on a control connection of its
 * own to D if C is NULL (a connection of the wait's own counts in
 * clients_connected).  The failure names the field and its last value. */
#define harness_wait_stat(d, c, field, op, value)                            \
    harness_wait_stat_field((d), (c), offsetof(heapd_stats_t, field),        \
                            sizeof(((heapd_stats_t *)0)->field), #field, #op, \
                            (uint64_t)(value))
void harness_wait_stat_field(const struct daemon_proc *d, heapd_client *c,
                             size_t offset, size_t size, const char *name,
                             const char *op, uint64_t value);
/* No verifier failure and no bad reference so far. */
void harness_expect_healthy(const struct daemon_proc *d);
/* PID exits 0 within the bound, or the test fails naming WHO. */
void harness_wait_ok(pid_t pid, const char *who);
/* Root in SLOT of M a wide object of N children, each with a leaf:
 * child i holds {i, MAGIC}, its leaf i * 7 + MAGIC.  NULL if an
 * allocation fails.  With a tiny mark_stack_limit its marking overflows
 * and remarks (Note [Remark]). */
void **harness_build_fan(heapd_mutator *m, size_t slot, size_t n,
                         uint64_t magic);
/* Fork a process that attaches a mutator, runs BODY(m, ARG) (if not NULL)
 * and then stays attached without ever reaching a safepoint until it is
 * killed; returns its pid once BODY is done (a kid that dies early fails
 * the test). */
pid_t harness_fork_mutator(const struct daemon_proc *d,
                           void (*body)(heapd_mutator *m, void *arg),
                           void *arg);

#endif
