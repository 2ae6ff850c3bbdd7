/* Shared-memory layout of a heapd heap: the contract between the daemon,
 * which lays it out, and every client, which maps it and checks it.
 *
 * Note [Heap mapping]
 * ~~~~~~~~~~~~~~~~~~~
 * A heap is one memfd of max_size bytes, sparse (pages cost nothing until
 * touched), sealed against shrinking and growing, and mapped MAP_SHARED at
 * the same fixed address `base` in the daemon and in every client, with
 * MAP_FIXED_NOREPLACE so that it never silently replaces another mapping.
 * Because the address is the same everywhere, a reference stored in the heap
 * is a plain C pointer that means the same object in every process
 * (DESIGN.md §3).  Consequences every module relies on:
 *
 *   - base is a multiple of segment_size, and segment k starts at
 *     base + k * segment_size, so a segment's header is found by masking a
 *     pointer with ~(segment_size - 1).
 *   - The control area occupies the first control_segments segments; the
 *     first segment available for objects is segment control_segments.
 *   - The memfd is sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) before
 *     any client sees it: a client cannot ftruncate it and make the daemon
 *     fault with SIGBUS on a page that vanished.
 *   - A client trusts nothing in the mapping until it has checked magic,
 *     layout_version and the geometry against its Welcome
 *     (layout_check_control).
 *
 * Note [Control area]
 * ~~~~~~~~~~~~~~~~~~~
 * The control area holds the words every process shares: identity and
 * geometry (written once by the daemon before any client maps it, read-only
 * afterwards), then the collector's state words.  Fields are only ever
 * appended; any change of meaning or position bumps LAYOUT_VERSION.  Fields
 * the collector shares with running mutators are _Atomic and 8-byte aligned.
 */
#ifndef HEAPD_PROTO_LAYOUT_H
#define HEAPD_PROTO_LAYOUT_H

#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LAYOUT_MAGIC 0x0031504145484448ULL /* bytes "HDHEAP1\0" in memory */
#define LAYOUT_VERSION 1u

#define LAYOUT_MIN_SEGMENT_SIZE (16u * 1024u)
#define LAYOUT_MAX_SEGMENT_SIZE (1u << 30)
#define LAYOUT_CONTROL_BYTES (64u * 1024u) /* bytes the control area needs */

/* Phases of a collection cycle, stored in control->phase. */
enum layout_phase {
    LAYOUT_PHASE_IDLE = 0,
    LAYOUT_PHASE_MARK = 1,
    LAYOUT_PHASE_SWEEP = 2,
};

struct layout_control {
    /* identity and geometry: written once, before any client maps */
    uint64_t magic;
    uint32_t layout_version;
    uint32_t header_bytes;        /* sizeof(struct layout_control) */
    uint64_t base;
    uint64_t max_size;
    uint64_t segment_size;
    uint32_t control_segments;    /* segments taken by the control area */
    uint32_t segment_count;       /* max_size / segment_size */
    char heap_name[64];

    /* collector state, shared with running mutators */
    alignas(8) _Atomic uint32_t epoch;   /* never 0; see DESIGN.md §4 */
    _Atomic uint32_t phase;              /* enum layout_phase */
};

/* Segments the control area occupies for a given segment size. */
static inline uint32_t layout_control_segments(uint64_t segment_size)
{
    return (uint32_t)((LAYOUT_CONTROL_BYTES + segment_size - 1) / segment_size);
}

/* Check a mapped control area against the geometry the daemon announced.
 * Returns 0, or -EPROTO for a bad magic, -EPROTONOSUPPORT for another
 * layout version, -EINVAL for a geometry that disagrees.  Used by the client
 * before it touches anything else in the heap (Note [Heap mapping]). */
int layout_check_control(const struct layout_control *c, uint64_t base,
                         uint64_t max_size, uint64_t segment_size);

/* Fill a fresh control area (daemon side). */
void layout_init_control(struct layout_control *c, const char *heap_name,
                         uint64_t base, uint64_t max_size,
                         uint64_t segment_size);

#endif
