/* The collections' entries of the first stable release, 0.1.0: the calls
 * that take a struct that grows, under their plain names, with 0.1.0's
 * sizes (Note [Structs that grow] in client/abi.c). */
#include <stddef.h>

#include "heapd.h"
#include "heapd_collections.h"
#include "runtime.h"

_Static_assert(sizeof(heapd_map_iter) == 40 && sizeof(heapd_lease) == 16,
               "they never grow: Note [Structs that grow] in client/abi.c");
_Static_assert(sizeof(heapd_map_opts) ==
                   offsetof(heapd_map_opts, unused_) + sizeof(unsigned),
               "options end with no padding: Note [Structs that grow] in "
               "client/abi.c");

void *heapd_map_new_opts(heapd_mutator *m, const heapd_map_opts *opts)
{
    return heapd_map_new_opts_sized(m, opts, ABI_0_1_MAP_OPTS);
}

int heapd_map_stats(const void *map, heapd_map_stats_t *out)
{
    return heapd_map_stats_sized(map, out, ABI_0_1_MAP_STATS);
}

int heapd_map_footprint(heapd_mutator *m, const void *map,
                        heapd_map_footprint_t *out)
{
    return heapd_map_footprint_sized(m, map, out, ABI_0_1_MAP_FOOTPRINT);
}
