/* libheapd: the table of a heap's statistics.  Included by heapd.h; the
 * daemon includes it too (daemon/gc/heap.h).
 *
 * Note [Counter table]
 * ~~~~~~~~~~~~~~~~~~~~
 * HEAPD_HEAP_COUNTERS is the one list of the statistics heapd keeps per
 * heap: one line per counter, X(name, type, kind, unit, source, help).
 * Every other place expands it:
 *   - heapd_heap_stats's fields, and heapd_stats_t's copy of the client's
 *     own heap (client/heapd.h): NAME of C TYPE (uint32_t or uint64_t);
 *   - the daemon's struct heap_stats (daemon/gc/heap.h), by SOURCE: LOCKED, a
 *     uint64_t field written under heap->lock (the collector adds to it);
 *     ATOMIC, an _Atomic one bumped without the lock; DERIVED, worked out
 *     from other daemon state when asked (a stat_NAME function in
 *     daemon/session.c);
 *   - HeapStats.counters on the wire (proto/heapd.proto): entry i is line
 *     i of the table, as a uint64;
 *   - the copies in the daemon's stats reply and in heapd_stats;
 *   - heapctl stats, text (NAME, the value, HELP) and JSON (NAME: value);
 *   - the Prometheus text of heapctl stats --prometheus and of heapd's
 *     metrics endpoint, a metric per line named by rule (Note [Metric
 *     names] in proto/metrics.c), but the pauses_le_* lines, which are
 *     one histogram (HEAPD_PAUSE_BUCKETS);
 *   - heapctl(1)'s COUNTERS, which tests/man_keys.sh checks against it.
 * KIND is COUNTER (only grows while the daemon runs) or GAUGE (a value
 * now, of the last cycle, or a maximum); UNIT is COUNT, BYTES or NS.
 * HELP is one short phrase, for heapctl and for metrics help text.
 *
 * The rules: the order is the wire order.  Within one PROTOCOL_VERSION
 * (proto/wire.h) the table is append-only: a new counter goes at the end,
 * and since a reader copies min(entries sent, lines it knows) and takes
 * the missing ones as 0, an older daemon or client still reads the rest
 * right.  Removing, reordering or retyping a line changes what entry i
 * means: bump PROTOCOL_VERSION.  NAME is API (a field name, a JSON key):
 * never rename one.
 *
 * Why one table: adding grants_paced by hand took nine edits in six files
 * (the daemon's struct, the .proto, the daemon's copy, two structs in
 * heapd.h, two copies in client.c, two printers in heapctl), each one a
 * chance to leave a copy out; now it is a line here and the code that
 * counts.
 */
#ifndef HEAPD_COUNTERS_H
#define HEAPD_COUNTERS_H

#include <stdint.h>

/* X(name, type, kind, unit, source, help): see Note [Counter table]. */
#define HEAPD_HEAP_COUNTERS(X) \
    X(mutators, uint32_t, GAUGE, COUNT, DERIVED, "mutator threads attached") \
    X(cycles_completed, uint64_t, COUNTER, COUNT, LOCKED, "collection cycles completed") \
    X(bytes_allocated, uint64_t, COUNTER, BYTES, DERIVED, "allocated by all clients since heapd started") \
    X(live_bytes, uint64_t, GAUGE, BYTES, LOCKED, "in objects the last cycle marked") \
    X(segments_free, uint64_t, GAUGE, COUNT, DERIVED, "segments free") \
    X(segments_owned, uint64_t, GAUGE, COUNT, DERIVED, "segments in clients' reserves and root stacks") \
    X(segments_filled, uint64_t, GAUGE, COUNT, DERIVED, "small segments given back, kept until swept") \
    X(segments_large, uint64_t, GAUGE, COUNT, DERIVED, "segments in large objects") \
    X(pause_max_ns, uint64_t, GAUGE, NS, LOCKED, "longest pause (mutators stopped)") \
    X(pause_total_ns, uint64_t, COUNTER, NS, LOCKED, "all pauses together") \
    X(ttsp_max_ns, uint64_t, GAUGE, NS, LOCKED, "longest time a mutator took to stop") \
    X(verify_failures, uint64_t, COUNTER, COUNT, LOCKED, "heap verifier findings (verify = true)") \
    X(bad_refs, uint64_t, COUNTER, COUNT, ATOMIC, "invalid references met and not followed") \
    X(mark_ns_last, uint64_t, GAUGE, NS, LOCKED, "the last cycle's concurrent mark") \
    X(sweep_ns_last, uint64_t, GAUGE, NS, LOCKED, "the last cycle's concurrent sweep") \
    X(urs_entries, uint64_t, COUNTER, COUNT, LOCKED, "update remembered set entries consumed") \
    X(snapshot_pause_max_ns, uint64_t, GAUGE, NS, LOCKED, "longest snapshot pause") \
    X(final_sync_pause_max_ns, uint64_t, GAUGE, NS, LOCKED, "longest final sync pause") \
    X(final_sync_retries, uint64_t, COUNTER, COUNT, LOCKED, "final syncs that ran out of budget") \
    X(grants_paced, uint64_t, COUNTER, COUNT, LOCKED, "grants held until a cycle caught up") \
    X(remark_requests, uint64_t, COUNTER, COUNT, LOCKED, "segments sent to their owners to rescan") \
    X(remark_global, uint64_t, COUNTER, COUNT, LOCKED, "segments the daemon rescanned itself") \
    X(mark_overflows, uint64_t, COUNTER, COUNT, LOCKED, "mark stacks (or the pool) that overflowed") \
    X(clients_crashed, uint64_t, COUNTER, COUNT, LOCKED, "mutator clients gone without goodbye") \
    X(clients_disconnected, uint64_t, COUNTER, COUNT, LOCKED, "clients disconnected for nonsense in their control memory") \
    X(segments_repunched, uint64_t, COUNTER, COUNT, LOCKED, "free segments a client wrote into, given back again") \
    X(segments_orphaned, uint64_t, COUNTER, COUNT, DERIVED, "segments left with objects by clients gone") \
    X(segments_adopted, uint64_t, COUNTER, COUNT, DERIVED, "orphaned segments freed by a sweep or reused") \
    X(pause_count, uint64_t, COUNTER, COUNT, LOCKED, "pauses; pause_total_ns / pause_count is the mean") \
    X(globals_init_refused, uint64_t, COUNTER, COUNT, LOCKED, "global_init_done requests not from the initialiser, refused") \
    X(stalls, uint64_t, COUNTER, COUNT, LOCKED, "mutators named for holding up a stop or a remark past stall_warn") \
    X(stalls_killed, uint64_t, COUNTER, COUNT, LOCKED, "stalled clients killed (stall_action = kill)") \
    X(clients_evicted, uint64_t, COUNTER, COUNT, LOCKED, "stalled clients evicted (stall_action = evict, or kill not allowed)") \
    X(segments_fenced, uint64_t, GAUGE, COUNT, DERIVED, "segments kept from reuse while an evicted process lives") \
    X(restarts_survived, uint64_t, COUNTER, COUNT, LOCKED, "heapd restarts the heap was kept across") \
    X(heap_age_ns, uint64_t, GAUGE, NS, DERIVED, "since the heap was made, across restarts (uptime is the daemon's)") \
    X(crashes_recovered, uint64_t, COUNTER, COUNT, LOCKED, "restarts the heap was recovered from as after a kill (no clean stop sealed its table)") \
    X(recovery_ns, uint64_t, GAUGE, NS, LOCKED, "how long heapd took to take the heap back at its last start, its verifying cycles included") \
    X(clients_resumed, uint64_t, COUNTER, COUNT, LOCKED, "clients that came back as themselves after a restart") \
    X(minor_collections, uint64_t, COUNTER, COUNT, DERIVED, "minor collections of young generations") \
    X(promoted_age_bytes, uint64_t, COUNTER, BYTES, DERIVED, "promoted from young generations by age") \
    X(promoted_published_bytes, uint64_t, COUNTER, BYTES, DERIVED, "promoted from young generations by a store into the shared heap") \
    X(minor_pause_max_ns, uint64_t, GAUGE, NS, DERIVED, "longest minor pause (a minor collection takes one or more)") \
    X(minor_pause_total_ns, uint64_t, COUNTER, NS, DERIVED, "all minor pauses together") \
    X(young_refs_refused, uint64_t, COUNTER, COUNT, ATOMIC, "references to young objects met outside their mutator's roots, not followed") \
    X(bytes_committed, uint64_t, GAUGE, BYTES, DERIVED, "memory the heap's memfds hold now (committed_bytes; fstat)") \
    X(block_bytes, uint64_t, GAUGE, BYTES, LOCKED, "in allocated blocks (small blocks and large runs) the last sweep kept") \
    X(purged_bytes, uint64_t, COUNTER, BYTES, ATOMIC, "of heap memory punched out of the memfd (ranges, whether or not every page had memory)") \
    X(fragmentation_permille, uint64_t, GAUGE, COUNT, DERIVED, "bytes_committed per 1000 of block_bytes; 0 with no block kept") \
    X(pauses_le_50us, uint64_t, COUNTER, COUNT, LOCKED, "pauses of at most 50 us (a histogram bucket)") \
    X(pauses_le_100us, uint64_t, COUNTER, COUNT, LOCKED, "pauses of at most 100 us") \
    X(pauses_le_250us, uint64_t, COUNTER, COUNT, LOCKED, "pauses of at most 250 us") \
    X(pauses_le_500us, uint64_t, COUNTER, COUNT, LOCKED, "pauses of at most 500 us") \
    X(pauses_le_1ms, uint64_t, COUNTER, COUNT, LOCKED, "pauses of at most 1 ms") \
    X(pauses_le_2500us, uint64_t, COUNTER, COUNT, LOCKED, "pauses of at most 2.5 ms") \
    X(pauses_le_5ms, uint64_t, COUNTER, COUNT, LOCKED, "pauses of at most 5 ms") \
    X(pauses_le_10ms, uint64_t, COUNTER, COUNT, LOCKED, "pauses of at most 10 ms") \
    X(pauses_le_25ms, uint64_t, COUNTER, COUNT, LOCKED, "pauses of at most 25 ms") \
    X(pauses_le_50ms, uint64_t, COUNTER, COUNT, LOCKED, "pauses of at most 50 ms") \
    X(pauses_le_100ms, uint64_t, COUNTER, COUNT, LOCKED, "pauses of at most 100 ms") \
    X(pauses_le_250ms, uint64_t, COUNTER, COUNT, LOCKED, "pauses of at most 250 ms") \
    X(conservative_roots, uint64_t, COUNTER, COUNT, LOCKED, "objects C stack words kept that the precise roots had not reached") \
    X(conservative_bytes_retained, uint64_t, COUNTER, BYTES, LOCKED, "marked from those objects on (an upper bound of what C stack words alone kept)") \
    X(conservative_unscanned, uint64_t, COUNTER, COUNT, DERIVED, "C stack captures that could not scan the stack (a heapd call on a sigaltstack or makecontext stack): that thread's locals were no roots") \
    X(conservative_overflows, uint64_t, COUNTER, COUNT, DERIVED, "C stack captures that filled their area (LAYOUT_MAX_CAPTURED objects) and dropped the rest") \
    X(memory_limit, uint64_t, GAUGE, BYTES, DERIVED, "the heap's memory_limit (heapd.conf), 0 for none") \
    X(limit_refusals, uint64_t, COUNTER, COUNT, LOCKED, "segment requests refused at memory_limit after a collection (the allocation failed with ENOMEM)") \
    /* the end: a new line goes above this one, ending in a backslash */

/* The pause histogram's buckets, B(line, upper bound in ns): the lines
 * pauses_le_* above count the pauses of at most that long (cumulative, as
 * Prometheus' buckets; pause_count is the +Inf one).  Prometheus shows
 * them as one histogram, heapd_pause_duration_seconds (proto/metrics.c). */
#define HEAPD_PAUSE_BUCKETS(B) \
    B(pauses_le_50us, 50000) B(pauses_le_100us, 100000) \
    B(pauses_le_250us, 250000) B(pauses_le_500us, 500000) \
    B(pauses_le_1ms, 1000000) B(pauses_le_2500us, 2500000) \
    B(pauses_le_5ms, 5000000) B(pauses_le_10ms, 10000000) \
    B(pauses_le_25ms, 25000000) B(pauses_le_50ms, 50000000) \
    B(pauses_le_100ms, 100000000) B(pauses_le_250ms, 250000000)

/* The columns KIND and UNIT, for printers: HEAPD_KIND_##kind,
 * HEAPD_UNIT_##unit. */
typedef enum heapd_counter_kind {
    HEAPD_KIND_COUNTER,  /* only grows while the daemon runs */
    HEAPD_KIND_GAUGE,    /* a value now, of the last cycle, or a maximum */
} heapd_counter_kind;

typedef enum heapd_counter_unit {
    HEAPD_UNIT_COUNT,
    HEAPD_UNIT_BYTES,
    HEAPD_UNIT_NS,
} heapd_counter_unit;

/* HEAPD_HEAP_COUNTER_<name>: a counter's line in the table, its index on
 * the wire; HEAPD_HEAP_COUNTERS_N: how many lines. */
#define HEAPD_COUNTER_INDEX_(name, type, kind, unit, source, help) \
    HEAPD_HEAP_COUNTER_##name,
enum { HEAPD_HEAP_COUNTERS(HEAPD_COUNTER_INDEX_) HEAPD_HEAP_COUNTERS_N };
#undef HEAPD_COUNTER_INDEX_

#endif
