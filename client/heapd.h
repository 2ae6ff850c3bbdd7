/* libheapd: connect a process to a heapd shared garbage-collected heap.
 *
 * The names and signatures here are a contract.  Functions
 * that return int return 0 on success or a negative error code: either a
 * negated errno value or one of the HEAPD_E* codes below.  heapd_strerror()
 * says what any of them means and heapd_errname() names it;
 * heapd_last_error() gives the full message of the calling thread's most
 * recent failure, with what to do about it.
 */
#ifndef HEAPD_H
#define HEAPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "heapd_counters.h"
#include "heapd_errors.h"
#include "heapd_object.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Note [Calls without the PLT]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Every function here is declared noplt where the compiler has the
 * attribute (GCC): position-independent code, which Debian's compiler
 * makes by default, calls it through its GOT entry, filled in when the
 * program starts, instead of through a PLT stub that jumps there.
 * heapd_alloc, heapd_write and the root calls take a few nanoseconds, so
 * the stub's extra jump is a share of each: GCBench with no young
 * generation took 275 ms against 301 ms through the PLT (median of 6
 * runs, interleaved).  Nothing else changes for the program but that
 * these symbols are bound at its start, not at their first call.
 * libheapd's own calls of them (the collections allocate, store and
 * hash through them) are bound when it is linked, direct calls with no
 * GOT: the shared cache's lookups went from 1.89 to 2.00 M/s (8 runs
 * each, interleaved).  So a program that interposes a heapd_ function
 * (LD_PRELOAD) replaces its own calls of it, not libheapd's.
 */
#if defined(__has_attribute)
#if __has_attribute(noplt)
#define HEAPD_API __attribute__((visibility("default"), noplt))
#endif
#endif
#ifndef HEAPD_API
#define HEAPD_API __attribute__((visibility("default")))
#endif

/* Structs that grow (Note [Structs that grow] in client/abi.c): a call
 * that takes one is an inline function here that passes the struct's
 * size, as this header has it, to libheapd's _sized entry; libheapd reads
 * or fills only what a program of that size knows of.  So a program built
 * against an older heapd.h keeps working with a newer libheapd, and the
 * reverse (a newer program's options an older libheapd does not know are
 * refused with -E2BIG).  libheapd itself (HEAPD_LIBRARY_) declares the
 * plain names instead: the entries of the first stable release, 0.1.0. */
#ifdef HEAPD_LIBRARY_
#define HEAPD_SIZED_(decl) HEAPD_API decl;
#else
#define HEAPD_SIZED_(decl) static inline decl
#endif

/* heapd-specific error codes, below every errno value: HEAPD_ENODAEMON
 * (-1001) and on, each with its message and the errno a call that returns
 * a pointer sets for it, in HEAPD_ERRORS (heapd_errors.h).  See Note
 * [Error table]. */
#define HEAPD_ERROR_ENUM_(name, value, errnum, message) name = value,
enum { HEAPD_ERRORS(HEAPD_ERROR_ENUM_) };
#undef HEAPD_ERROR_ENUM_

typedef struct heapd_client heapd_client;
typedef struct heapd_mutator heapd_mutator;

/* Options for heapd_connect.  Zero-initialise and set what you need; a NULL
 * opts means all defaults.  Each process connects for itself: a client
 * does not survive fork(). */
typedef struct heapd_connect_opts {
    const char *socket_path;  /* NULL: $HEAPD_SOCKET, then the default */
    const char *heap;         /* NULL: "default" */
    const char *client_name;  /* NULL: the program name; shown in logs */
    unsigned flags;           /* HEAPD_CONNECT_* */
    unsigned reconnect_ms;    /* how long a mutator client tries to come
                                 back when heapd restarts; 0: 10000 */
} heapd_connect_opts;

/* A control connection: stats and commands only; the heap is not mapped.
 * heapctl uses it. */
#define HEAPD_CONNECT_CONTROL 0x1u
/* Checked mode, a debugging aid (also HEAPD_CHECK=1 in the environment):
 * every call that takes an object (heapd_write, heapd_cas, heapd_root_push,
 * heapd_root_set, heapd_global_set, heapd_nrefs, heapd_nbytes,
 * heapd_bytes) first checks that it is a live allocated object of the
 * heap, and aborts with a message naming the call when it is not: the
 * usual cause is a reference kept where no scan looks (malloc'd memory,
 * another thread's data) or, for a HEAPD_MUTATOR_PRECISE mutator, in a C
 * local across a safepoint (Note [Client GC discipline]).  It costs a few
 * loads per call. */
#define HEAPD_CONNECT_CHECKED 0x2u
/* When the connection to heapd ends without a word from it (heapd
 * restarted, or died), a mutator client reconnects by itself and resumes
 * as the same client, for up to reconnect_ms; its mutators keep running
 * on what they hold meanwhile, and a call that needs heapd waits (Note
 * [Reconnecting] in client/agent.c).  This flag turns that off: the
 * connection then closes at once, and calls fail with HEAPD_ECLOSED. */
#define HEAPD_CONNECT_NO_RECONNECT 0x4u
#define HEAPD_RECONNECT_MS_DEFAULT 10000u

#define HEAPD_STATS_MAX_HEAPS 16

/* A counter's field, from its line in HEAPD_HEAP_COUNTERS. */
#define HEAPD_COUNTER_FIELD_(name, type, kind, unit, source, help) type name;

/* Statistics of one heap: its memory, then the counters of
 * HEAPD_HEAP_COUNTERS in proto/heapd_counters.h, where each one says what
 * it counts (see Note [Counter table]). */
typedef struct heapd_heap_stats {
    char name[64];
    uint64_t base;
    uint64_t reserved_bytes;   /* address space: the heap's max_size */
    uint64_t committed_bytes;  /* memory backing it now */
    uint64_t segment_size;
    uint32_t clients;          /* mutator clients connected to it */
    uint32_t phase;            /* 0 idle, 1 mark, 2 sweep */
    HEAPD_HEAP_COUNTERS(HEAPD_COUNTER_FIELD_)
} heapd_heap_stats;

typedef struct heapd_stats_t {
    char version[32];          /* the daemon's version */
    uint64_t uptime_ns;
    uint32_t clients_connected;
    uint64_t connections_total;
    uint64_t frames_rejected;  /* bad frames and messages since start */
    uint64_t connections_refused;   /* over max_connections(_per_user) */
    uint64_t connections_throttled; /* reading paused: replies unread */
    uint64_t connections_timed_out; /* no hello within handshake_timeout */
    uint64_t requests_refused;      /* over a per-client cap, or denied */
    uint64_t log_lines_suppressed;  /* over client_log_rate */
    /* the heap this client is connected to (a control client: the heap
     * named in its opts, "default" if none): heaps[0]'s committed_bytes,
     * phase and counters */
    uint64_t heap_committed_bytes;
    uint32_t phase;
    HEAPD_HEAP_COUNTERS(HEAPD_COUNTER_FIELD_)
    /* every heap of the daemon */
    size_t heap_count;
    heapd_heap_stats heaps[HEAPD_STATS_MAX_HEAPS];
} heapd_stats_t;

#undef HEAPD_COUNTER_FIELD_

/* Connect to heapd, authenticate, and (unless HEAPD_CONNECT_CONTROL) map the
 * heap at its fixed address.  On success *out is a client; on failure *out
 * is NULL and heapd_last_error() says why. */
HEAPD_API int heapd_connect_sized(heapd_client **out,
                                 const heapd_connect_opts *opts, size_t size);
HEAPD_SIZED_(int heapd_connect(heapd_client **out,
                               const heapd_connect_opts *opts))
#ifndef HEAPD_LIBRARY_
{
    return heapd_connect_sized(out, opts, sizeof *opts);
}
#endif

/* Leave gracefully: detach the mutators still attached (their threads
 * must be done with them), give every segment back, tell the daemon
 * goodbye and wait for its answer, then close the connection and unmap
 * the heap.  Objects stay as long as they are reachable.  A process that
 * dies instead loses nothing either: the daemon cleans up after it (and
 * counts it in clients_crashed).  NULL is ignored. */
HEAPD_API void heapd_disconnect(heapd_client *c);

/* Ask the daemon for its statistics (a round trip on the socket). */
HEAPD_API int heapd_stats_sized(heapd_client *c, heapd_stats_t *out,
                               size_t size, size_t heap_size);
HEAPD_SIZED_(int heapd_stats(heapd_client *c, heapd_stats_t *out))
#ifndef HEAPD_LIBRARY_
{
    return heapd_stats_sized(c, out, sizeof *out, sizeof out->heaps[0]);
}
#endif

/* The mapped heap: its first byte and its size.  NULL / 0 for a control
 * connection.  Objects live inside [base, base + size). */
HEAPD_API void *heapd_heap_base(const heapd_client *c);
HEAPD_API size_t heapd_heap_size(const heapd_client *c);

/* ---- mutators, objects and roots ----
 *
 * Note [Client GC discipline]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * The one rule:
 *
 *     What a local variable or a register of an attached thread points
 *     to stays alive.  A pointer stored anywhere else -- malloc'd
 *     memory, another thread's data, a file, a static variable -- must
 *     also be in a root slot (heapd_root_*), a global (heapd_global_*),
 *     a heap object reachable from one, or a range heapd_add_roots
 *     registered, or the object may be freed.
 *
 * Each mutator's stack and registers are scanned conservatively, by the
 * mutator itself, when a collection takes its snapshot (Note [C locals
 * are roots] in client/stack_roots.c): any word that points anywhere
 * inside an object keeps it -- its reference, heapd_bytes(o),
 * heapd_str_data(s), &o->field, one past its end -- including words in
 * callers' frames and values only in registers.  So a C function may
 * keep a pointer across heapd_alloc and every other call for as long as
 * it likes.  A value that looks like a heap address keeps what it points
 * into as well: conservative roots can keep some garbage alive.
 * Limits:
 *   - a thread must make its heapd calls on the stack it attached on (not
 *     on a sigaltstack or a makecontext stack): there the stack cannot be
 *     scanned, and its locals are not roots for that cycle (counted:
 *     conservative_unscanned);
 *   - a mutator attached with HEAPD_MUTATOR_PRECISE is not scanned: for
 *     it a local keeps an object only until its next safepoint (heapd_alloc,
 *     heapd_root_push/set/pop, heapd_global_set/once, heapd_safepoint,
 *     heapd_collect, heapd_attach, a blocking region), as in heapd's
 *     precise mode, where everything reachable from the roots at the last
 *     safepoint and everything allocated since stays valid until the
 *     next one; heapd_write, heapd_cas, heapd_global_get, heapd_root_get
 *     and the accessors are no safepoints;
 *   - a blocked thread's stack is captured at heapd_blocking_enter, up to
 *     a 1 MiB stack's worth of distinct objects (past that, what only the
 *     rest hold must be rooted; counted: conservative_overflows).
 * Objects never move, young ones included.  A reference kept where no
 * scan looks may point at a freed block, which is reused later;
 * HEAPD_CHECK=1 in the
 * environment (or HEAPD_CONNECT_CHECKED) makes the library check every
 * object handed to it and abort with the name of the call (see below).
 *
 * A collection needs every mutator of every process of the heap to reach
 * a safepoint within a short while: a thread that is about to wait (I/O,
 * a lock, sleep) calls heapd_blocking_enter first and must not touch the
 * heap until heapd_blocking_leave, and a long loop that only reads the
 * heap calls heapd_safepoint every so often (each few hundred
 * microseconds of work).  Otherwise every other process waits for it;
 * the daemon's log names the process (pid, client name) that holds the
 * heap up.  A mutator that holds the heap up for longer than the heap's
 * stall_timeout gets its process ended by heapd's stall_action.  A
 * process that heapd evicts (stall_action = evict, or a process heapd
 * may not signal) is aborted (SIGABRT) at its next heapd call, or when
 * its connection's end is seen, with one message on stderr:
 *     libheapd: heapd evicted this process (pid P) from heap 'H': its
 *     mutator in slot S did not answer <what> for N ms, ... A thread that
 *     waits (I/O, a lock, sleep) must call heapd_blocking_enter first,
 *     and a long loop must call heapd_safepoint now and then; raise
 *     stall_timeout in heapd.conf if this pause was expected.
 * It cannot go on: heapd has freed its slots and orphaned its segments
 * (Note [Evicted clients, client side] in client/mutator.c).
 *
 * A mutator is one thread's handle; it must only be used by the thread
 * that attached it.  A client does not survive fork(): a child process
 * calls heapd_connect for itself (calls on an inherited client fail with
 * HEAPD_EFORKED; heapd_disconnect in the child only frees its memory).
 *
 * No call waits for a daemon that is gone.  When the connection ends (the
 * daemon died or closed it), a mutator waiting in a pause, a blocking
 * region, a write barrier or heapd_global_once is released, and from then
 * on heapd_alloc and heapd_root_push fail with errno EPIPE, heapd_collect
 * and heapd_global_set return HEAPD_ECLOSED, heapd_global_once returns
 * NULL with errno EPIPE and heapd_root_get NULL; heapd_safepoint and the
 * blocking calls return at once.  The heap stays mapped until
 * heapd_disconnect, but nothing collects it any more: disconnect and
 * connect again (Note [A dead daemon] in client/mutator.c).
 */

/* Limits of one object (see HEAPD_ALLOC errors). */
#define HEAPD_MAX_NREFS ((1u << 28) - 1)
#define HEAPD_MAX_NBYTES ((1u << 28) - 1)

/* Attach the calling thread to the heap as a mutator.  Returns 0, or
 * -EINVAL for a control client, -EAGAIN when the heap's mutator slots are
 * all taken, HEAPD_EFORKED in a child of the process that connected C, or
 * a connection error. */
HEAPD_API int heapd_attach(heapd_client *c, heapd_mutator **out);
/* ---- the young generation ----
 *
 * Note [Young objects, for the program]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A mutator attached with HEAPD_MUTATOR_YOUNG allocates young objects:
 * the mutator itself collects them, at its own heapd_alloc calls, each
 * time it has allocated its nursery budget (a minor collection, in pauses
 * of about 50 us spread over the next allocations), stopping no other
 * thread or process.  An object that dies before it has
 * survived young_age of these never reaches the shared heap; one that
 * lives longer is promoted into it where it is.  Nothing moves: a young
 * object keeps its address for its whole life, so C locals, interior
 * pointers (heapd_bytes(o), &o->field) and root slots stay valid exactly
 * as they do for any object.  Everything else is as for any mutator,
 * plus:
 *   - a minor collection also keeps what this thread's C locals and
 *     registers point to (its stack is scanned conservatively, interior
 *     pointers included), and never promotes what only they hold (Note
 *     [Client GC discipline]);
 *   - nothing shared ever references a young object.  heapd_write,
 *     heapd_cas and heapd_global_set of a young value into a shared
 *     object (or a global) first PUBLISH it: the value and every young
 *     object it reaches become shared, where they are.  heapd_publish does
 *     the same and returns its argument.  A publication never waits and
 *     copies nothing;
 *   - a young object belongs to its mutator: handing it to another
 *     mutator, or storing it anywhere but this mutator's roots, locals and
 *     young objects, is an error (checked mode names the call; heapd never
 *     follows such a reference, and counts it in young_refs_refused);
 *   - objects larger than a small block (16 KiB with 128 KiB segments),
 *     and those of heapd_alloc_shared, go straight to the shared heap;
 *   - heapd_write and heapd_cas into a young object are plain stores
 *     (but while a minor collection marks, a load of the old value);
 *   - the thread must run on the stack it attached on (not on a
 *     sigaltstack or a makecontext stack) when it calls heapd_alloc: a
 *     minor collection that cannot scan the stack frees nothing.
 * Mutators attached without the flag see no change.
 */
#define HEAPD_MUTATOR_YOUNG 0x1u
/* No conservative scan of this thread's stack for the major collector:
 * its locals keep an object only until its next safepoint (Note [Client
 * GC discipline]). */
#define HEAPD_MUTATOR_PRECISE 0x2u

/* Scan [start, end) of the process's own memory (globals, a malloc'd
 * table) as a root, as a thread's stack is scanned: an object a word of
 * it points into stays alive (Note [Client GC discipline]).  The range
 * is the client's, whichever of its mutators registers it; only attached
 * threads outside blocking regions may write it.  heapd_remove_roots
 * takes back exactly a registered range.  0, or -EINVAL (NULL, start >
 * end, a range inside the heap), -ENOMEM, -ENOENT (not registered). */
HEAPD_API int heapd_add_roots(heapd_mutator *m, void *start, void *end);
HEAPD_API int heapd_remove_roots(heapd_mutator *m, void *start, void *end);

typedef struct heapd_mutator_opts {
    unsigned flags;           /* HEAPD_MUTATOR_* */
    size_t young_size;        /* the nursery budget: bytes allocated
                                 between minor collections; 0: the
                                 heap's young_size */
    unsigned young_age;       /* minor collections an object survives
                                 before promotion, 1..8; 0: the heap's
                                 young_age */
    unsigned unused_;         /* never read: what was padding, so that a
                                 new option grows the struct (Note
                                 [Structs that grow] in client/abi.c) */
} heapd_mutator_opts;

/* heapd_attach with options (OPTS NULL: heapd_attach).  Fails as
 * heapd_attach does, and with -EINVAL for options out of range or unknown
 * flags. */
HEAPD_API int heapd_attach_opts_sized(heapd_client *c,
                                     const heapd_mutator_opts *opts,
                                     size_t size, heapd_mutator **out);
HEAPD_SIZED_(int heapd_attach_opts(heapd_client *c,
                                   const heapd_mutator_opts *opts,
                                   heapd_mutator **out))
#ifndef HEAPD_LIBRARY_
{
    return heapd_attach_opts_sized(c, opts, sizeof *opts, out);
}
#endif

/* heapd_alloc, in the shared heap even for a young mutator: for an
 * object that will be published anyway. */
HEAPD_API void *heapd_alloc_shared(heapd_mutator *m, size_t nrefs,
                                   size_t nbytes);

/* Make OBJ shared: a young object of M is promoted, where it is, with
 * every young object it reaches (Note [Young objects, for the program]).
 * Returns OBJ.  Not a safepoint, never waits. */
HEAPD_API void *heapd_publish(heapd_mutator *m, void *obj);

/* True if OBJ is one of M's young objects (not yet published). */
HEAPD_API bool heapd_is_young(const heapd_mutator *m, const void *obj);

typedef struct heapd_young_stats {
    uint64_t young_bytes;        /* the nursery budget, 0 if none */
    uint32_t young_age;
    uint64_t minor_collections;
    uint64_t promoted_age_bytes;
    uint64_t promoted_published_bytes;
    uint64_t minor_pause_max_ns;
    uint64_t minor_pause_total_ns;
    uint64_t minor_pause_p99_ns; /* from a log histogram: an upper bound
                                    within 25 % */
    uint64_t bytes_in_use;       /* young now: the last minor's
                                    survivors and what was allocated
                                    since */
    uint64_t minor_pauses;       /* a minor collection takes one pause or
                                    more, each bounded: the max, p99 and
                                    total above are of these */
} heapd_young_stats;

/* M's young generation so far (all zero for a mutator without one). */
HEAPD_API void heapd_young_stats_get_sized(const heapd_mutator *m,
                                           heapd_young_stats *out,
                                           size_t size);
HEAPD_SIZED_(void heapd_young_stats_get(const heapd_mutator *m,
                                        heapd_young_stats *out))
#ifndef HEAPD_LIBRARY_
{
    heapd_young_stats_get_sized(m, out, sizeof *out);
}
#endif

/* Detach: gives the mutator's segments back; its roots stop being roots. */
HEAPD_API void heapd_detach(heapd_mutator *m);

/* Allocate an object with NREFS reference fields (NULL) then NBYTES raw
 * bytes (zero).  Returns the address of its first field, or NULL with errno
 * ENOMEM (the heap's max_size or the client's max_client_bytes is reached),
 * EINVAL (NREFS or NBYTES over the limits) or EPIPE (the daemon is gone). */
HEAPD_API void *heapd_alloc(heapd_mutator *m, size_t nrefs, size_t nbytes);

/* Store VAL into reference field FIELD of OBJ (the write barrier).  A
 * macro runs its fast path in the caller (Note [Inline write fast
 * path]); (heapd_write)(...) always calls the function. */
HEAPD_API void heapd_write(heapd_mutator *m, void *obj, void **field,
                           void *val);

/* Note [Inline write fast path]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Most stores need no barrier: every store while no cycle marks, and a
 * young mutator's stores into its own young objects while no minor
 * collection marks.  For those, heapd_write is a plain release store in
 * the caller's code; the function is called for every other store.  The
 * test reads what the library keeps at the very start of each
 * heapd_mutator, struct heapd_fast_:
 *   write_mode  HEAPD_FAST_CALL_: call the function for every store
 *               (checked mode, a young mutator whose minor collection
 *               marks);
 *               HEAPD_FAST_UNLESS_MARKING_: store at once while the
 *               heap's phase word is not HEAPD_FAST_PHASE_MARK_ (a
 *               mutator without a nursery);
 *               HEAPD_FAST_YOUNG_: store at once when OBJ's header tag
 *               (its top byte) is HEAPD_FAST_YOUNG_TAG_ or above, a young
 *               object (a young mutator, not marking, promotions under
 *               way: a promoted object may reference young ones until
 *               they end, Note [Minor collections in slices] in
 *               client/minor.c);
 *               HEAPD_FAST_YOUNG_ANY_: the same, and also store at once
 *               into any other object a VAL that is NULL or not young
 *               while the phase word is not HEAPD_FAST_PHASE_MARK_ (a
 *               young mutator, not marking, no promotion under way).
 *   phase       the heap's phase word, which heapd writes.
 * The mutator's own thread sets write_mode whenever one of these changes
 * (or another thread, while the mutator is blocked and held).  This is
 * part of libheapd's ABI: a library whose mutators cannot serve it keeps
 * write_mode HEAPD_FAST_CALL_ at offset 0, and a program built with this
 * header then calls the function for every store; one built with a
 * header that lacks a mode calls it when it sees that mode.  Define
 * HEAPD_NO_INLINE before including heapd.h to call it always.
 * Measured on GCBench, two stores per node and 15 million nodes
 * (release build, 5 runs each interleaved with the build before):
 * young, 157-200 ms (median 174) -> 130-173 ms (median 137); young off,
 * median 258 -> 247 ms.  A bump allocator with no collector at all, in
 * a library, makes the same trees in about 130 ms when the stores are
 * calls and 105 ms when they are inline.  A young mutator's store of a
 * shared object into a shared one, as the shared map's bucket copies
 * make, in a loop into a shared ring of 1024 while the heap is idle (3
 * runs each): 3.83-3.86 ns as a call, 1.37-1.38 ns inline (a mutator
 * without a nursery: 0.91-0.92 ns). */
struct heapd_fast_ {
    unsigned char write_mode;
    unsigned char alloc_mode; /* Note [Inline allocation fast path] */
    unsigned char zero_ymm;   /* Note [Inline allocation fast path] */
    unsigned char reserved_[5];
    const uint32_t *phase;
    /* Note [Inline allocation fast path] */
    struct heapd_run_ *runs;
    const unsigned char *open;
    uint64_t young_bytes;
    uint64_t young_next_minor;
};
#define HEAPD_FAST_CALL_ 0
#define HEAPD_FAST_UNLESS_MARKING_ 1
#define HEAPD_FAST_YOUNG_ 2
#define HEAPD_FAST_YOUNG_ANY_ 3
#define HEAPD_FAST_PHASE_MARK_ 1u
#define HEAPD_FAST_YOUNG_TAG_ 0xf0u

/* Note [Inline allocation fast path]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A young mutator's allocation is done in the caller's code while
 * struct heapd_fast_ says it may be:
 *   alloc_mode   HEAPD_FAST_ALLOC_YOUNG_ while the mutator has a nursery
 *                and no minor collection under way, in a client that is
 *                not checked; HEAPD_FAST_CALL_ otherwise (the library
 *                sets it where it sets write_mode);
 *   runs         the mutator's free run of each size class: blocks
 *                [cursor, limit) of the segment at blocks, block_size
 *                apart, whose mark bytes at marks are 0 (Note [Free
 *                runs] in client/alloc.c); a run ends within 64 KiB, so
 *                a stop or remark heapd asks for, which the function
 *                sees, waits for no more than that (Note [Young runs
 *                are capped] in client/alloc.c);
 *   open         0 once the connection is gone, and in a child of
 *                fork() (Note [The open gate] in client/agent.c);
 *   young_bytes, young_next_minor  the nursery's budget: a minor
 *                collection is due when the first reaches the second.
 *   zero_ymm     the CPU has AVX2: a program built for plain x86-64
 *                zeroes an object over 64 bytes with 32-byte stores all
 *                the same (256 B young, in a loop as alloc_bench's: 8.5
 *                ns where 16-byte stores took 9.7).
 * The inline path allocates block cursor exactly as the function's fast
 * path does: its mark byte young, then its header, young-tagged, its
 * fields and bytes zero, young_bytes grown by block_size; before it
 * zeroes, it prefetches the blocks a few objects ahead (Note [Zeroing an
 * object] in client/alloc.c).  Anything else is the function's.  This is part of libheapd's ABI, as write_mode: a
 * library that cannot serve it keeps alloc_mode HEAPD_FAST_CALL_, and a
 * program built with this header calls heapd_alloc for every object.
 * Sanitizer builds and HEAPD_NO_INLINE call it always.  Measured
 * (alloc_bench, young, ring of 1000, the runs of scripts/bench before and
 * after): 256 B 10.7 -> 8.8 ns, 64 B 6.9 -> 4.9 ns, 16 B 5.7 -> 4.0 ns;
 * the call into another shared object alone was 1.7 ns of the 256-byte
 * case.
 */
struct heapd_run_ {
    unsigned char *marks;
    unsigned char *blocks;
    uint32_t cursor;
    uint32_t limit;
    uint32_t nblocks_;
    uint32_t block_size;
    uint32_t index_;
    unsigned char cls_;
};
#define HEAPD_FAST_ALLOC_YOUNG_ 1
/* the function's fast path takes fewer references than this, and fewer
 * raw bytes than 4 times it: small objects in every segment size */
#define HEAPD_FAST_ALLOC_FIELDS_ 256u

/* Is object OBJ young (its header's tag)? */
static inline int heapd_header_young_(const void *obj)
{
    return (__atomic_load_n((const uint64_t *)obj - 1, __ATOMIC_RELAXED) >>
            56) >= HEAPD_FAST_YOUNG_TAG_;
}

/* Does a store by M of VAL into OBJ need no barrier?  The test both the
 * macro and the function make. */
static inline int heapd_store_is_plain_(const heapd_mutator *m,
                                        const void *obj, const void *val)
{
    const struct heapd_fast_ *f = (const struct heapd_fast_ *)(const void *)m;
    unsigned mode = f->write_mode;
    if (mode == HEAPD_FAST_YOUNG_ || mode == HEAPD_FAST_YOUNG_ANY_) {
        if (heapd_header_young_(obj))
            return 1;
        if (mode == HEAPD_FAST_YOUNG_ || (val && heapd_header_young_(val)))
            return 0;
    } else if (mode != HEAPD_FAST_UNLESS_MARKING_) {
        return 0;
    }
    return __atomic_load_n(f->phase, __ATOMIC_RELAXED) !=
           HEAPD_FAST_PHASE_MARK_;
}

#ifndef HEAPD_NO_INLINE
static inline void heapd_write_inline_(heapd_mutator *m, void *obj,
                                       void **field, void *val)
{
    if (heapd_store_is_plain_(m, obj, val)) {
        /* release: a process that loads VAL sees its object initialised */
        __atomic_store_n(field, val, __ATOMIC_RELEASE);
        return;
    }
    (heapd_write)(m, obj, field, val);
}
#define heapd_write(m, obj, field, val) heapd_write_inline_(m, obj, field, val)
#endif

/* A sanitizer sees the library's allocations, not the program's. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define HEAPD_SANITIZED_ 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define HEAPD_SANITIZED_ 1
#endif
#endif

/* Prefetch for writing the SIZE bytes HEAPD_PREFETCH_AHEAD_ objects of
 * SIZE past the one at B, for SIZE over 32 bytes and up to 512 (Note
 * [Zeroing an object] in client/alloc.c). */
#define HEAPD_PREFETCH_AHEAD_ 4u
static inline void heapd_prefetch_ahead_(const unsigned char *b,
                                         uint64_t size)
{
    if (size <= 32 || size > 512)
        return;
    const unsigned char *ahead = b + HEAPD_PREFETCH_AHEAD_ * size;
    for (uint64_t o = 0; o < size; o += 64)
        __builtin_prefetch(ahead + o, 1, 3);
}

/* Zero [P, END), an 8-byte multiple at an 8-aligned P: 32 bytes a store,
 * as many as fit, then 16 and 8.  The inline allocation's and libheapd's
 * own (Note [Zeroing an object] in client/alloc.c). */
typedef uint64_t heapd_zero16_
    __attribute__((vector_size(16), aligned(8), may_alias));
typedef uint64_t heapd_zero32_
    __attribute__((vector_size(32), aligned(8), may_alias));
static inline void heapd_zero_(unsigned char *p, unsigned char *end)
{
    heapd_zero32_ z32 = {0, 0, 0, 0};
    heapd_zero16_ z16 = {0, 0};
    for (; p + 32 <= end; p += 32) {
        __asm__("" : "+r"(p)); /* stores, not a call to memset */
        *(heapd_zero32_ *)(void *)p = z32;
    }
    if (p + 16 <= end) {
        *(heapd_zero16_ *)(void *)p = z16;
        p += 16;
    }
    if (p < end)
        *(uint64_t *)(void *)p = 0;
}

#if !defined(HEAPD_NO_INLINE) && !defined(HEAPD_SANITIZED_)
#if defined(__x86_64__) && !defined(__AVX__)
/* Zero [P, END), over 64 bytes, with 32-byte stores in a program built
 * for plain x86-64, where the CPU has them (Note [Inline allocation fast
 * path]). */
static inline void heapd_zero_ymm_(unsigned char *p, unsigned char *end)
{
    __asm__ volatile("vpxor %%xmm0, %%xmm0, %%xmm0\n\t"
                     "1:\n\t"
                     "vmovdqu %%ymm0, (%[p])\n\t"
                     "add $32, %[p]\n\t"
                     "cmp %[last], %[p]\n\t"
                     "jb 1b\n\t"
                     "vmovdqu %%ymm0, (%[last])\n\t"
                     "vzeroupper"
                     : [p] "+r"(p)
                     : [last] "r"(end - 32)
                     : "xmm0", "cc", "memory");
}
#endif

/* Note [Inline allocation fast path] */
static inline void *heapd_alloc_inline_(heapd_mutator *m, size_t nrefs,
                                        size_t nbytes)
{
    struct heapd_fast_ *f = (struct heapd_fast_ *)(void *)m;
    if (__builtin_expect((nrefs | nbytes >> 2) < HEAPD_FAST_ALLOC_FIELDS_ &&
                             f->alloc_mode == HEAPD_FAST_ALLOC_YOUNG_,
                         1)) {
        uint64_t size = heapd_obj_size_(nrefs, nbytes);
        struct heapd_run_ *r = &f->runs[heapd_obj_class_((uint32_t)size)];
        uint32_t i = r->cursor;
        if (__builtin_expect(
                i < r->limit && f->young_bytes < f->young_next_minor &&
                    __atomic_load_n(f->open, __ATOMIC_RELAXED),
                1)) {
            unsigned char *b = r->blocks + (size_t)i * r->block_size;
            r->cursor = i + 1;
            __atomic_store_n(&r->marks[i], HEAPD_OBJ_MARK_YOUNG_,
                             __ATOMIC_RELAXED);
            *(uint64_t *)(void *)b =
                heapd_obj_header_(nrefs, nbytes) |
                (uint64_t)HEAPD_OBJ_YOUNG_TAG_ << HEAPD_OBJ_TAG_SHIFT_;
            f->young_bytes += r->block_size;
            heapd_prefetch_ahead_(b, size);
#if defined(__x86_64__) && !defined(__AVX__)
            if (size > 64 + HEAPD_OBJ_WORD_ && f->zero_ymm)
                heapd_zero_ymm_(b + HEAPD_OBJ_WORD_, b + size);
            else
#endif
                heapd_zero_(b + HEAPD_OBJ_WORD_, b + size);
            return b + HEAPD_OBJ_WORD_;
        }
    }
    return (heapd_alloc)(m, nrefs, nbytes);
}
#define heapd_alloc(m, nrefs, nbytes) heapd_alloc_inline_(m, nrefs, nbytes)
#endif
/* Compare-and-swap reference field FIELD of OBJ; true if it was EXPECTED
 * and is now DESIRED. */
HEAPD_API bool heapd_cas(heapd_mutator *m, void *obj, void **field,
                         void *expected, void *desired);

HEAPD_API size_t heapd_nrefs(const void *obj);
HEAPD_API size_t heapd_nbytes(const void *obj);
/* The first raw byte, after the reference fields (8-aligned). */
HEAPD_API void *heapd_bytes(void *obj);
/* Note [Atomics on raw bytes]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * An object's raw bytes are plain shared memory, the same pages in every
 * process of the heap.  C11 atomics and GCC's __atomic builtins of 1, 2,
 * 4 and 8 bytes, at addresses aligned to their size, work on them
 * between processes as between threads, in any memory order, and are no
 * safepoints; 16-byte ones need a 16-aligned address, which no object
 * promises.  The collector never reads nor writes a reachable object's
 * raw bytes (it reads headers and reference fields, and writes only the
 * blocks it frees), so no cycle tears or undoes such an atomic, and none
 * needs a barrier: heapd_write and heapd_cas are for reference fields,
 * and an object's address kept in raw bytes keeps nothing alive.  Four
 * processes fetch-and-adding one word 10^6 times each while cycles run
 * lose none (tests/test_collections_counters.c).  A map's counters need
 * no object of their own: heapd_map_add in heapd_collections.h. */

/* The root stack: slots hold references the collector starts from.
 * heapd_root_push returns the new slot's index, or (size_t)-1 with errno
 * ENOMEM when the stack cannot grow (64 root segments of segment_size / 16
 * slots each are in use, or the heap is full).  heapd_root_set of a slot
 * at or past the depth does nothing; heapd_root_pop of more slots than
 * there are empties the stack.  Each is a safepoint taken before the
 * stack changes (Note [Client GC discipline]). */
HEAPD_API size_t heapd_root_push(heapd_mutator *m, void *ref);
HEAPD_API void heapd_root_set(heapd_mutator *m, size_t slot, void *ref);
HEAPD_API void *heapd_root_get(heapd_mutator *m, size_t slot);
HEAPD_API void heapd_root_pop(heapd_mutator *m, size_t n);
/* Slots in use. */
HEAPD_API size_t heapd_root_depth(const heapd_mutator *m);

HEAPD_API void heapd_safepoint(heapd_mutator *m);
HEAPD_API void heapd_blocking_enter(heapd_mutator *m);
HEAPD_API void heapd_blocking_leave(heapd_mutator *m);

/* Ask for a collection.  With HEAPD_COLLECT_WAIT, return once a cycle that
 * started after the call has completed; the client first gives back the
 * free segments it holds in reserve for its mutators (Note [Reserve
 * sizing] in client/reserve.c), so that the cycle returns them to the
 * system too, and its next allocations refill it. */
#define HEAPD_COLLECT_WAIT 0x1
HEAPD_API int heapd_collect(heapd_mutator *m, int flags);

/* The same from any client, control clients included (heapctl gc): asks
 * for a collection of the client's heap. */
HEAPD_API int heapd_request_collect(heapd_client *c, int flags);

/* ---- global roots ----
 * Named references every process of the heap can find (Note [Global roots]
 * in proto/layout.h).  Names are 1 to 63 bytes; a heap has 256 of them.
 * A global is a root: what it references stays alive. */

/* Set global NAME to REF, creating it if needed.  Returns 0, -ENAMETOOLONG,
 * -EINVAL (empty name), -ENOMEM (the table is full), -EBUSY (NAME is being
 * initialised by heapd_global_once) or a connection error. */
HEAPD_API int heapd_global_set(heapd_mutator *m, const char *name, void *ref);
/* The reference in global NAME, or NULL (unset, or no such global).  Not a
 * safepoint: the result may be used until the caller's next safepoint, and
 * must be rooted to outlive it. */
HEAPD_API void *heapd_global_get(heapd_mutator *m, const char *name);
/* Global NAME, initialised exactly once across all processes: the first
 * caller runs INIT(m, ARG) and stores its result; concurrent callers in any
 * process wait for it (in a blocking region) and return the same object.
 * If the initialising process dies, or INIT returns NULL, the next caller
 * runs INIT again.  Returns NULL with errno on error. */
HEAPD_API void *heapd_global_once(heapd_mutator *m, const char *name,
                                  void *(*init)(heapd_mutator *, void *),
                                  void *arg);
/* Delete global NAME: heapd_global_get returns NULL for it from here on,
 * the name can be created again, and its entry is reused (after the next
 * collection starts).  The object it referenced stays alive while
 * anything else references it: processes that read the global hold the
 * object, not the global.  Returns 0, -ENOENT (no such global), -EBUSY
 * (heapd_global_once is initialising it), -ENAMETOOLONG, -EINVAL (empty
 * name) or a connection error. */
HEAPD_API int heapd_global_delete(heapd_mutator *m, const char *name);

/* What a global's object is, as heapd reads it (heapd_collections.h's
 * collections, told by their shape and tag). */
typedef enum heapd_global_kind {
    HEAPD_GLOBAL_OTHER = 0,
    HEAPD_GLOBAL_MAP = 1,
    HEAPD_GLOBAL_QUEUE = 2,
    HEAPD_GLOBAL_STRING = 3,
} heapd_global_kind;

typedef struct heapd_global_info {
    char name[64];
    int state;              /* 1 set, 2 initialising, 3 released */
    uint64_t target;        /* the reference, 0 for NULL */
    uint64_t target_bytes;  /* size of the object it references */
    uint64_t owner;         /* initialising: the client id running init */
    heapd_global_kind kind;
    uint64_t size;          /* a map's keys, a queue's length, a string's
                               bytes; 0 for any other object */
    uint64_t leases;        /* a queue's leases held; 0 for any other */
    uint64_t budget;        /* a map's budget in bytes (0: none), and */
    uint64_t used;          /* the bytes it counts used */
    uint64_t evictions;     /* a map's entries evicted for its budget */
    uint64_t expirations;   /* and removed once expired */
} heapd_global_info;

/* List the heap's globals (heapctl globals): up to MAX into OUT, the total
 * number in *COUNT. */
HEAPD_API int heapd_globals_sized(heapd_client *c, heapd_global_info *out,
                                  size_t max, size_t *count, size_t size);
HEAPD_SIZED_(int heapd_globals(heapd_client *c, heapd_global_info *out,
                               size_t max, size_t *count))
#ifndef HEAPD_LIBRARY_
{
    return heapd_globals_sized(c, out, max, count, sizeof *out);
}
#endif

/* ---- reports (heapctl clients, heapctl segments) ----
 * What the daemon sees of its connections and of a heap's segments (Note
 * [Reports] in daemon/report.c).  A peer that is not root or the daemon's
 * user sees the heaps it may use and the connections to them. */

typedef enum heapd_mutator_state {
    HEAPD_MUTATOR_RUNNING = 0,  /* may touch the heap; polls safepoints */
    HEAPD_MUTATOR_BLOCKED = 1,  /* in a blocking region */
    HEAPD_MUTATOR_WAITING = 2,  /* waiting inside a write barrier */
    HEAPD_MUTATOR_STOPPED = 3,  /* acknowledged the stop asked of it */
    HEAPD_MUTATOR_STALLED = 4,  /* the collector waits for it: stalled_on */
    HEAPD_MUTATOR_FAULTED = 5,  /* its client wrote words that make no
                                   sense; the daemon disconnects it */
} heapd_mutator_state;

/* What a stalled mutator has not answered. */
typedef enum heapd_stall_on {
    HEAPD_STALL_NONE = 0,
    HEAPD_STALL_SNAPSHOT = 1,   /* the stop of a snapshot */
    HEAPD_STALL_FINAL_SYNC = 2, /* the stop of a final sync */
    HEAPD_STALL_HANDSHAKE = 3,  /* the same, while it holds its
                                   stack-marking handshake */
    HEAPD_STALL_REMARK = 4,     /* its client's remark request */
} heapd_stall_on;
/* What a mutator stalled on ON has not done, as the rest of a sentence
 * ("has not acknowledged the snapshot's stop"): the daemon's log and
 * libheapd's abort message say the same. */
HEAPD_API const char *heapd_stall_what(heapd_stall_on on);

typedef struct heapd_mutator_info {
    uint32_t slot;
    heapd_mutator_state state;
    heapd_stall_on stalled_on;  /* STALLED: what it has not answered */
    uint64_t stalled_ms;        /* STALLED: for how long */
    uint64_t alloc_bytes;       /* allocated in the shared heap so far
                                   (a young mutator: promoted so far too) */
    uint64_t urs_backlog;       /* URS entries not yet consumed */
    uint64_t root_depth;        /* root slots in use */
    uint64_t young_bytes;       /* its nursery budget, 0: not young */
    uint64_t minor_collections;
    uint64_t promoted_bytes;    /* by age and by publication */
    uint64_t minor_pause_max_ns;
} heapd_mutator_info;

typedef struct heapd_client_info {
    uint64_t id;
    char name[64];              /* its client_name, escaped */
    int32_t pid;                /* from the kernel, not from the client */
    uint32_t uid;
    char heap[64];              /* "" for a control connection */
    bool control;               /* a control connection (heapctl) */
    int64_t connected_at;       /* unix seconds */
    uint32_t segments_held;
    uint64_t bytes_granted;     /* bytes of segments ever granted */
    uint32_t remark_outstanding; /* remark requests not yet answered */
    uint64_t remark_late_ms;    /* since the oldest of them was sent */
    size_t mutator_count;
    heapd_mutator_info *mutators;
    char library[32];           /* its libheapd's release ("0.2.0"); ""
                                   from one before 0.2.0, which does not
                                   say (new in 0.2.0: Note [Structs that
                                   grow] in client/abi.c) */
} heapd_client_info;

/* The daemon's connections (heapctl clients): *OUT gets an array of
 * *COUNT entries, each with its mutators, to be freed with
 * heapd_clients_free. */
HEAPD_API int heapd_clients_sized(heapd_client *c, heapd_client_info **out,
                                  size_t *count, size_t size,
                                  size_t mutator_size);
HEAPD_SIZED_(int heapd_clients(heapd_client *c, heapd_client_info **out,
                               size_t *count))
#ifndef HEAPD_LIBRARY_
{
    return heapd_clients_sized(c, out, count, sizeof **out,
                               sizeof *(*out)->mutators);
}
#endif
/* Free what heapd_clients gave.  NULL is ignored. */
HEAPD_API void heapd_clients_free(heapd_client_info *clients);

#define HEAPD_SEGMENTS_MAX_CLASSES 128

/* One size class of a heap: its small segments and their blocks. */
typedef struct heapd_class_segments {
    uint32_t size_class;
    uint32_t object_size;       /* bytes of one block */
    uint32_t segments;
    uint32_t segments_owned;    /* of them, in a client's reserve: their
                                   blocks in use are an estimate */
    uint64_t blocks;
    uint64_t blocks_in_use;
    uint64_t committed_bytes;   /* the memory its segments hold (mincore
                                   on the daemon's mapping) */
    uint64_t block_bytes;       /* blocks_in_use * object_size */
    uint64_t fragmentation_permille; /* committed_bytes per 1000 of
                                   block_bytes; 0 with no block in use */
} heapd_class_segments;

typedef struct heapd_heap_segments {
    char name[64];
    uint64_t segment_size;
    uint32_t total;             /* every segment but the control area's */
    uint32_t free, owned, filled;
    uint32_t large, large_tail; /* first and other segments of large runs */
    uint32_t orphaned;          /* left by a client gone, not yet adopted */
    uint32_t punched;           /* memory given back */
    uint32_t unformatted;       /* owned or filled, no size class known */
    uint32_t young;             /* holding young blocks, last sweep */
    uint64_t young_bytes;       /* in those young blocks */
    uint64_t committed_bytes;   /* what the heap's memory holds, all of it */
    uint64_t block_bytes;       /* in blocks the last sweep kept (the
                                   block_bytes counter) */
    size_t class_count;         /* classes that have segments */
    heapd_class_segments classes[HEAPD_SEGMENTS_MAX_CLASSES];
    /* Where the committed memory is: what the pages of each kind of
     * segment hold, and the bytes of blocks in use in the segments
     * clients hold and in those they gave back.  Read while clients run:
     * they sum to committed_bytes up to what moved meanwhile. */
    uint64_t committed_control; /* the control area */
    uint64_t committed_free;    /* free segments not given back yet */
    uint64_t committed_owned;   /* in clients' hands: reserves, current
                                   segments, nurseries */
    uint64_t committed_filled;  /* small segments given back */
    uint64_t committed_large;   /* large objects */
    uint64_t in_use_owned;      /* in blocks in use, of committed_owned
                                   (an estimate: owners allocate) */
    uint64_t in_use_filled;     /* in blocks in use, of committed_filled */
    uint64_t young_held;        /* in young blocks now, as their mutators
                                   say (at most their owned segments) */
} heapd_heap_segments;

/* The segments of heap HEAP (NULL or "": of every heap the caller may
 * see; heapctl segments): up to MAX heaps into OUT, their number in
 * *COUNT. */
HEAPD_API int heapd_segments_sized(heapd_client *c, const char *heap,
                                   heapd_heap_segments *out, size_t max,
                                   size_t *count, size_t size);
HEAPD_SIZED_(int heapd_segments(heapd_client *c, const char *heap,
                                heapd_heap_segments *out, size_t max,
                                size_t *count))
#ifndef HEAPD_LIBRARY_
{
    return heapd_segments_sized(c, heap, out, max, count, sizeof *out);
}
#endif

/* A heap heapd is configured to serve and does not: what the service
 * manager kept of it could not be taken back (another layout, a check
 * that failed), and heapd left it there (heapctl stats). */
typedef struct heapd_unserved_heap {
    char name[64];
    char why[1024];             /* why, and what to do */
} heapd_unserved_heap;

/* The heaps heapd does not serve: up to MAX into OUT, their number in
 * *COUNT (0 when it serves every heap it is configured with). */
HEAPD_API int heapd_unserved_heaps_sized(heapd_client *c,
                                         heapd_unserved_heap *out,
                                         size_t max, size_t *count,
                                         size_t size);
#ifndef HEAPD_LIBRARY_
/* (new in 0.2.0: no plain entry of 0.1.0's to keep) */
static inline int heapd_unserved_heaps(heapd_client *c,
                                       heapd_unserved_heap *out, size_t max,
                                       size_t *count)
{
    return heapd_unserved_heaps_sized(c, out, max, count, sizeof *out);
}
#endif

/* Give up HEAP, a heap heapd does not serve (heapctl drop): heapd asks
 * the service manager to forget what it kept of it and serves the heap
 * empty.  Its objects are lost.  0, HEAPD_ENOHEAP (HEAP is served or not
 * configured), HEAPD_EDENIED (only root and heapd's own user may),
 * HEAPD_ESHUTDOWN (heapd is stopping), HEAPD_EPROTO (heapd could not open
 * the new heap: its log says why), or a connection error. */
HEAPD_API int heapd_heap_drop(heapd_client *c, const char *heap);

/* What heapd_heap_save did. */
typedef struct heapd_save_info {
    uint64_t objects;       /* objects saved (reachable at the snapshot) */
    uint64_t object_bytes;  /* their bytes, headers included */
    uint64_t globals;
    uint64_t file_bytes;
    uint64_t inexact;       /* objects copied as read, not as at the
                               snapshot: a writer died in its barrier, or
                               runs a libheapd before 0.2 (0 normally) */
    uint64_t bad_refs;      /* references to no object, saved as NULL */
    uint64_t records;       /* objects mutators wrote during the save */
    uint64_t record_bytes;  /* the memory heapd held for them */
    uint64_t ns;            /* from the snapshot to the file's sync */
    uint64_t sync_ns;       /* of which syncing the file and its name */
} heapd_save_info;

/* Save HEAP (heapctl save) to PATH, an absolute path heapd itself writes
 * (as PATH.partial-XXXXXX, synced, then renamed), as it is at the next
 * cycle's snapshot, while its clients go on; returns once the file is synced,
 * with *OUT (may be NULL) filled.  0, HEAPD_ENOHEAP, HEAPD_EDENIED (only
 * root and heapd's own user may), HEAPD_EBUSY (a save of HEAP runs),
 * HEAPD_EINVAL (a relative path), HEAPD_EPROTO (the save failed: the
 * message says why), or a connection error. */
HEAPD_API int heapd_heap_save_sized(heapd_client *c, const char *heap,
                                    const char *path, heapd_save_info *out,
                                    size_t size);
#ifndef HEAPD_LIBRARY_
/* (new in 0.2.0: no plain entry of 0.1.0's to keep) */
static inline int heapd_heap_save(heapd_client *c, const char *heap,
                                  const char *path, heapd_save_info *out)
{
    return heapd_heap_save_sized(c, heap, path, out, sizeof *out);
}
#endif

/* What heapd_heap_load did. */
typedef struct heapd_load_info {
    uint64_t objects;       /* objects loaded */
    uint64_t object_bytes;  /* their bytes, headers included */
    uint64_t globals;
    uint64_t file_bytes;
    uint64_t ns;            /* the load's time */
    uint64_t moved;         /* objects placed at another address than they
                               were saved at: the file is of another
                               segment size or size class table */
} heapd_load_info;

/* Load the saved heap PATH (heapctl load), an absolute path heapd itself
 * reads, into HEAP, which must be empty (no client, no object, no
 * global); no mutator may connect to HEAP until it is done.  Every object
 * goes back at its address, so HEAP must have the base it was saved at;
 * a file saved by a heapd of another segment size or size class table
 * is placed anew and its references rewritten (OUT->moved).
 * Returns once loaded, with *OUT (may be NULL) filled.  0, HEAPD_ENOHEAP,
 * HEAPD_EDENIED (only root and heapd's own user may), HEAPD_EPROTO (the
 * heap is not empty, or the file was refused: the message gives its
 * offset and why; the heap stays empty), or a connection error. */
HEAPD_API int heapd_heap_load_sized(heapd_client *c, const char *heap,
                                    const char *path, heapd_load_info *out,
                                    size_t size);
#ifndef HEAPD_LIBRARY_
/* (new in 0.2.0: no plain entry of 0.1.0's to keep) */
static inline int heapd_heap_load(heapd_client *c, const char *heap,
                                  const char *path, heapd_load_info *out)
{
    return heapd_heap_load_sized(c, heap, path, out, sizeof *out);
}
#endif

/* Static text saying what error code ERR means: the message of a HEAPD_E*
 * code (HEAPD_ERRORS), strerror's for a negated errno value, "success" for
 * 0, "unknown heapd error" for anything else. */
HEAPD_API const char *heapd_strerror(int err);

/* The name of error code ERR as C spells it, a static string: "HEAPD_EPROTO"
 * for HEAPD_EPROTO, "ENOMEM" for -ENOMEM; "unknown" for anything else (0, a
 * positive number, a negative one that is neither).  Never NULL.  For logs
 * and test output, where a number says little and a message is hard to
 * look up. */
HEAPD_API const char *heapd_errname(int err);

/* The calling thread's last error message from libheapd ("" if none). */
HEAPD_API const char *heapd_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
