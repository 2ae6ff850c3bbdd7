/* libheapd's promises to programs built against another heapd.h: the
 * public structs passed with their size, and the entries of the first
 * stable release, 0.1.0, kept under their plain names.
 *
 * Note [Structs that grow]
 * ~~~~~~~~~~~~~~~~~~~~~~~~
 * A public struct that may grow reaches libheapd with the size the
 * caller's compiler gave it: heapd.h's inline wrappers (heapd_stats,
 * heapd_connect, ...) pass sizeof to the _sized entries, as clone3 is
 * passed its args' size.  The rules, for whoever changes heapd.h:
 *   - A struct grows only at its end.  A field never changes its place,
 *     its type or its meaning; a removed one stays, unused.
 *   - Options libheapd reads (heapd_connect_opts, heapd_mutator_opts,
 *     heapd_map_opts): what a shorter struct lacks reads as zero, which is
 *     every new option's default; a longer struct (a program built for a
 *     newer libheapd) is refused with -E2BIG unless the tail this library
 *     does not know is zero.  Shorter than 0.1.0's is -EINVAL.  They end
 *     with no padding (asserted below; the padding two of them had is a
 *     field, unused_, never read), so a new option always grows sizeof:
 *     one in the padding would reach an older libheapd unrefused.
 *   - Results libheapd writes: min(the caller's size, its own) bytes, and
 *     zero past its own: a program gets what it knows of, and a newer
 *     program's new fields read 0 from an older libheapd.
 *   - Arrays are strided by the caller's element size: heapd_globals' and
 *     heapd_segments' OUT, heapd_clients' entries and their mutators.
 *   - heapd_stats_t holds HEAPD_HEAP_COUNTERS twice: in its head and in
 *     each heap.  Each ends with them, every counter after the first is a
 *     uint64_t, and a new statistic is a new counter (Note [Counter
 *     table]); then the caller's heap size tells how many counters it
 *     knows, and so where its heap_count and heaps[] are
 *     (abi_stats_place).
 *   - heapd_class_segments, heapd_map_iter and heapd_lease never grow:
 *     the first is an array inside a struct, the others are state a
 *     program keeps for the library.  Nor do the arrays' lengths,
 *     HEAPD_STATS_MAX_HEAPS and HEAPD_SEGMENTS_MAX_CLASSES.
 * A program built against 0.1.0's heapd.h calls the plain names, which
 * this file and client/collections/coll_abi.c keep with 0.1.0's sizes
 * (symbol version HEAPD_0.1, client/libheapd.map).  Why: one counter more
 * grows heapd_stats_t by
 * 17 × 8 = 136 bytes, which such a program had not set aside: libheapd
 * wrote past its struct before these rules (tests/abi checks a 0.1.0
 * program with a guard after each struct).
 */
/* Note [Symbol versions]
 * ~~~~~~~~~~~~~~~~~~~~~~
 * libheapd exports heapd_* only, each at the version node of the release
 * that added it (client/libheapd.map: HEAPD_0.1, HEAPD_0.2, ...), and an
 * entry never moves to another node.  The SONAME, libheapd.so.0, changes
 * only when a release breaks a program built against an older heapd.h:
 * a symbol removed, or a call or struct changed other than as Note
 * [Structs that grow] allows.  Then:
 *   - a program built against an older heapd.h runs on a newer libheapd,
 *     through the entries of its own release (a program linked before
 *     symbol versions, 0.1.0's, binds to the first node, HEAPD_0.1);
 *   - a program that uses a newer call, on an older libheapd, is refused
 *     by the loader at its start, naming the missing node, instead of
 *     crashing in the call: "version `HEAPD_0.3' not found" from a
 *     versioned libheapd, "undefined symbol: heapd_connect_sized, version
 *     HEAPD_0.2" from 0.1.0's, which had no versions.
 * Measured: tests/abi builds a client against 0.1.0's headers and runs it
 * on this libheapd; tests/packaging.sh checks each 0.1.0 symbol is still
 * at HEAPD_0.1.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "heapd.h"
#include "runtime.h"

_Static_assert(sizeof(heapd_class_segments) == 56,
               "it never grows: Note [Structs that grow]");
_Static_assert(sizeof(heapd_connect_opts) ==
                       offsetof(heapd_connect_opts, reconnect_ms) +
                           sizeof(unsigned) &&
                   sizeof(heapd_mutator_opts) ==
                       offsetof(heapd_mutator_opts, unused_) +
                           sizeof(unsigned),
               "options end with no padding: Note [Structs that grow]");

#define ABI_COUNTER_WIDTH_(name, type, kind, unit, source, help) \
    _Static_assert(HEAPD_HEAP_COUNTER_##name == 0 || sizeof(type) == 8, \
                   "counters after the first are uint64_t: " #name);
HEAPD_HEAP_COUNTERS(ABI_COUNTER_WIDTH_)
#undef ABI_COUNTER_WIDTH_

/* the first counter, the second, and where each struct's counters end */
#define ABI_FIRST_ mutators
#define ABI_SECOND_ cycles_completed
_Static_assert(HEAPD_HEAP_COUNTER_mutators == 0 &&
                   HEAPD_HEAP_COUNTER_cycles_completed == 1,
               "stats_place knows the first two counters by name");
_Static_assert(offsetof(heapd_heap_stats, ABI_SECOND_) +
                       8 * (HEAPD_HEAP_COUNTERS_N - 1) ==
                   sizeof(heapd_heap_stats),
               "heapd_heap_stats ends with its counters");
_Static_assert(offsetof(heapd_stats_t, ABI_SECOND_) +
                       8 * (HEAPD_HEAP_COUNTERS_N - 1) ==
                   offsetof(heapd_stats_t, heap_count),
               "heapd_stats_t's head ends with its counters");

int abi_in(void *dst, size_t own, const void *src, size_t size, size_t min,
           const char *call)
{
    if (size < min)
        return client_set_error(-EINVAL, "%s: options of %zu bytes, fewer "
                                "than any heapd.h gives them (%zu); pass "
                                "sizeof the struct", call, size, min);
    for (size_t i = own; i < size; i++)
        if (((const unsigned char *)src)[i])
            return client_set_error(-E2BIG, "%s: the options set a field "
                                    "at byte %zu that this libheapd does "
                                    "not know (it knows %zu bytes); the "
                                    "program was built for a newer "
                                    "libheapd: install that one", call, i,
                                    own);
    memcpy(dst, src, size < own ? size : own);
    if (size < own)
        memset((char *)dst + size, 0, own - size);
    return 0;
}

void abi_out(void *dst, size_t size, const void *src, size_t own)
{
    memcpy(dst, src, size < own ? size : own);
    if (size > own)
        memset((char *)dst + own, 0, size - own);
}

/* Copy SRC, libheapd's own heapd_stats_t, into the caller's DST of SIZE
 * bytes whose heaps are HEAP_SIZE bytes each (Note [Structs that grow]). */
int abi_stats_place(heapd_stats_t *dst, size_t size, size_t heap_size,
                    const heapd_stats_t *src)
{
    const size_t first = offsetof(heapd_heap_stats, ABI_SECOND_);
    if (heap_size < ABI_0_1_HEAP_STATS || (heap_size - first) % 8)
        return client_set_error(-EINVAL, "heapd_stats: a heapd_heap_stats "
                                "of %zu bytes is no heapd.h's; pass sizeof "
                                "heapd_stats_t and of its heaps[0]",
                                heap_size);
    /* the caller's counter bytes in its head, where its heap_count is */
    const size_t counters = offsetof(heapd_stats_t, ABI_SECOND_) -
                            offsetof(heapd_stats_t, ABI_FIRST_) +
                            (heap_size - first);
    const size_t at = offsetof(heapd_stats_t, ABI_FIRST_) + counters;
    const size_t heaps = at + sizeof(size_t);
    if (size != heaps + HEAPD_STATS_MAX_HEAPS * heap_size)
        return client_set_error(-EINVAL, "heapd_stats: a heapd_stats_t of "
                                "%zu bytes does not hold %d heaps of %zu; "
                                "pass sizeof heapd_stats_t and of its "
                                "heaps[0]", size, HEAPD_STATS_MAX_HEAPS,
                                heap_size);
    char *d = (char *)dst;
    memcpy(d, src, offsetof(heapd_stats_t, ABI_FIRST_));
    abi_out(d + offsetof(heapd_stats_t, ABI_FIRST_), counters,
            &src->ABI_FIRST_,
            offsetof(heapd_stats_t, heap_count) -
                offsetof(heapd_stats_t, ABI_FIRST_));
    memcpy(d + at, &src->heap_count, sizeof src->heap_count);
    for (size_t i = 0; i < HEAPD_STATS_MAX_HEAPS; i++)
        abi_out(d + heaps + i * heap_size, heap_size, &src->heaps[i],
                sizeof src->heaps[i]);
    return 0;
}

/* ---- 0.1.0's entries ---- */

int heapd_connect(heapd_client **out, const heapd_connect_opts *opts)
{
    return heapd_connect_sized(out, opts, ABI_0_1_CONNECT_OPTS);
}

int heapd_stats(heapd_client *c, heapd_stats_t *out)
{
    return heapd_stats_sized(c, out, ABI_0_1_STATS, ABI_0_1_HEAP_STATS);
}

int heapd_attach_opts(heapd_client *c, const heapd_mutator_opts *opts,
                      heapd_mutator **out)
{
    return heapd_attach_opts_sized(c, opts, ABI_0_1_MUTATOR_OPTS, out);
}

void heapd_young_stats_get(const heapd_mutator *m, heapd_young_stats *out)
{
    heapd_young_stats_get_sized(m, out, ABI_0_1_YOUNG_STATS);
}

int heapd_globals(heapd_client *c, heapd_global_info *out, size_t max,
                  size_t *count)
{
    return heapd_globals_sized(c, out, max, count, ABI_0_1_GLOBAL_INFO);
}

int heapd_clients(heapd_client *c, heapd_client_info **out, size_t *count)
{
    return heapd_clients_sized(c, out, count, ABI_0_1_CLIENT_INFO,
                               ABI_0_1_MUTATOR_INFO);
}

int heapd_segments(heapd_client *c, const char *heap,
                   heapd_heap_segments *out, size_t max, size_t *count)
{
    return heapd_segments_sized(c, heap, out, max, count,
                                ABI_0_1_HEAP_SEGMENTS);
}
