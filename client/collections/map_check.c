/* The shared map's invariant checker, its footprint and its counts
 * (heapd_collections.h). */
#include <errno.h>

#include "map.h"

/* ---- the invariant checker ---- */

/* Note [Map invariants], checked by heapd_map_verify (the tests call it
 * after every kill):
 *   - the map's table has no next, or a next of twice its slots with
 *     has_prev; slot counts are powers of two;
 *   - every bucket is tagged, and a frozen one sits only in a table with
 *     a next;
 *   - a slot whose bit is set in its table's `done` bitmap is frozen, and
 *     both its slots in the next table are filled;
 *   - every key of a live (not frozen) bucket hashes to that slot, and
 *     its stored hash is its hash; no key is in the map twice, and no key
 *     is NULL but an inline one;
 *   - a NULL value's record lies inside its bucket, and the records
 *     take exactly the bucket's bytes past keys[] (Note [Inline
 *     values]).
 * It returns the number of keys, which heapd_map_count equals when no
 * operation is under way (a death mid-insert may leave the count off). */
int heapd_map_verify(const void *obj)
{
    void *map = (void *)obj;
    if (!is_map(map))
        return client_set_error(-EINVAL, "heapd_map_verify: not a map");
    unsigned kind = map_meta(map)->kind;
    void *t = coll_load(&((void **)map)[MAP_TABLE]);
    void *next = coll_load(&((void **)t)[0]);
    size_t n = nrefs_of(t) - 1, found = 0;
    if (n == 0 || (n & (n - 1)) || table_meta(t)->tag != COLL_TAG_TABLE)
        return client_set_error(-EUCLEAN, "map %p: its table has %zu slots",
                                map, n);
    if (next && (nrefs_of(next) - 1 != 2 * n || !table_meta(next)->has_prev))
        return client_set_error(-EUCLEAN, "map %p: the next table is not "
                                "twice the size", map);
    for (size_t i = 0; next && i < n; i++)
        if (migrated(t, i) && (!frozen(coll_load(&table_slots(t)[i])) ||
                               !coll_load(&table_slots(next)[i]) ||
                               !coll_load(&table_slots(next)[i + n])))
            return client_set_error(-EUCLEAN, "map %p: slot %zu is marked "
                                    "migrated but is not", map, i);
    /* every key once, through the slots of the newest table: an unfilled
     * one's keys are in the old table's bucket, which lookup reads */
    size_t span = next ? 2 * n : n;
    void *tt = next ? next : t;
    for (size_t i = 0; i < span; i++) {
        void *b = coll_load(&table_slots(tt)[i]);
        if (frozen(b))
            return client_set_error(-EUCLEAN, "map %p: a frozen bucket in "
                                    "the newest table", map);
        bool old = !b; /* the old table's, shared by two new slots */
        if (old)
            b = lookup_bucket(map, i);
        if (!b)
            continue;
        if (bucket_meta(b)->tag != COLL_TAG_BUCKET || nrefs_of(b) % 2)
            return client_set_error(-EUCLEAN, "map %p: slot %zu holds "
                                    "something that is not a bucket",
                                    map, i);
        size_t k = bucket_keys(b), vb = 0;
        if (k && !(bucket_meta(b)->flags & BUCKET_WORDS) !=
                     !(map_meta(map)->flags & COLL_MAP_WORDS))
            return client_set_error(-EUCLEAN, "map %p: slot %zu: its "
                                    "bucket %s a word a key and the map "
                                    "%s (Note [Map expiry])", map, i,
                                    bucket_words(b) ? "has" : "has not",
                                    bucket_words(b) ? "not" : "has");
        if (!nrefs_of(b) && k != bucket_meta(b)->flags >> BUCKET_NKEYS_SHIFT)
            return client_set_error(-EUCLEAN, "map %p: slot %zu: its "
                                    "bucket counts %u keys and has bytes "
                                    "for %zu", map, i,
                                    (unsigned)(bucket_meta(b)->flags >>
                                               BUCKET_NKEYS_SHIFT), k);
        for (size_t e = 0; e < k; e++)
            vb += entry_vbytes(b, e);
        if (vb != bucket_vbytes(b))
            return client_set_error(-EUCLEAN, "map %p: slot %zu: its "
                                    "bucket has %zu bytes of value records "
                                    "and %zu bytes for them", map, i, vb,
                                    bucket_vbytes(b));
        for (size_t e = 0; e < k; e++) {
            void *key = entry_key(b, e);
            void *val = entry_value(b, e);
            const struct bucket_key *bk = &bucket_meta(b)->keys[e];
            uint64_t h = bk->hash;
            if (!key && !key_inline(kind, bk->len))
                return client_set_error(-EUCLEAN, "map %p: slot %zu entry "
                                        "%zu has a NULL key", map, i, e);
            if (!val && !entry_rec(b, e))
                return client_set_error(-EUCLEAN, "map %p: slot %zu entry "
                                        "%zu: its inline value's record "
                                        "reaches past its bucket", map, i,
                                        e);
            if ((h & (span - 1)) != i) {
                if (old)
                    continue; /* the other new slot's half */
                return client_set_error(-EUCLEAN, "map %p: a key of hash "
                                        "%016llx in slot %zu", map,
                                        (unsigned long long)h, i);
            }
            if (kind == HEAPD_MAP_STR && key && !heapd_is_str(key))
                return client_set_error(-EUCLEAN, "map %p: a key that is "
                                        "not a string", map);
            struct probe p;
            probe_entry(&p, kind, b, e, key);
            if (p.hash != h)
                return client_set_error(-EUCLEAN, "map %p: slot %zu entry "
                                        "%zu: stored hash %016llx, key's "
                                        "%016llx", map, i, e,
                                        (unsigned long long)h,
                                        (unsigned long long)p.hash);
            if (!key_matches(kind, &p, bk, key))
                return client_set_error(-EUCLEAN, "map %p: slot %zu entry "
                                        "%zu: the length or first bytes "
                                        "kept beside the key are not its "
                                        "own", map, i, e);
            if (bucket_find(kind, b, &p) != (long)e)
                return client_set_error(-EUCLEAN, "map %p: a key twice in "
                                        "slot %zu", map, i);
            found++;
        }
    }
    return (int)(found > INT32_MAX ? INT32_MAX : found);
}

/* Note [Map footprint]
 * ~~~~~~~~~~~~~~~~~~~~
 * heapd_map_footprint counts every object of the map once, by kind, in
 * the bytes of the block it takes (client_block_bytes): the map and its
 * two shared buckets; its table and, in a resize, the next one; every
 * bucket a slot of either holds but the shared ones (a bucket sits in one
 * slot only: a resize makes new halves, and an unfilled slot of the next
 * table holds nothing); and the key and value of each entry, found as
 * heapd_map_verify finds every key once (through the newest table's
 * slots, an unfilled one's half of its frozen bucket).  A value that
 * several keys hold is counted for each of them, and what a value
 * references is not counted: the map cannot tell whose it is.  A value
 * kept inline is part of its bucket (Note [Inline values]).  Headers
 * and the room past each object's end are counted apart too, so that a
 * layout's overhead shows beside the data: the shared-cache benchmark's
 * map of 100,000 keys is the table of the numbers in docs/benchmarks.md.
 */
static void count_object(heapd_mutator *m, const void *obj, uint64_t *bytes,
                         heapd_map_footprint_t *f)
{
    uint64_t h = __atomic_load_n((const uint64_t *)obj - 1, __ATOMIC_RELAXED);
    uint64_t size = layout_object_size(layout_header_nrefs(h),
                                       layout_header_nbytes(h));
    uint64_t block = client_block_bytes(m, obj);
    *bytes += block;
    f->header_bytes += LAYOUT_WORD;
    f->slack_bytes += block > size ? block - size : 0;
}

/* The buckets of table T's slots but the map's shared ones. */
static void count_buckets(heapd_mutator *m, void *t, const void *empty,
                          const void *frozen_empty, heapd_map_footprint_t *f)
{
    size_t n = nrefs_of(t) - 1;
    for (size_t i = 0; i < n; i++) {
        void *b = coll_load(&table_slots(t)[i]);
        if (b && b != empty && b != frozen_empty)
            count_object(m, b, &f->bucket_bytes, f);
    }
}

/* See Note [Structs that grow] in client/abi.c. */
int heapd_map_footprint_sized(heapd_mutator *m, const void *obj,
                              heapd_map_footprint_t *caller, size_t size)
{
    void *map = (void *)obj;
    if (!caller || !is_map(map))
        return client_set_error(-EINVAL, "heapd_map_footprint: %s",
                                caller ? "not a map" : "OUT is NULL");
    heapd_map_footprint_t f = {0};
    void **refs = map;
    void *empty = coll_load(&refs[MAP_EMPTY]);
    void *frozen_empty = coll_load(&refs[MAP_FROZEN_EMPTY]);
    count_object(m, map, &f.map_bytes, &f);
    if (empty)
        count_object(m, empty, &f.map_bytes, &f);
    if (frozen_empty)
        count_object(m, frozen_empty, &f.map_bytes, &f);
    void *t = coll_load(&refs[MAP_TABLE]);
    void *next = coll_load(&((void **)t)[0]);
    count_object(m, t, &f.table_bytes, &f);
    count_buckets(m, t, empty, frozen_empty, &f);
    if (next) {
        count_object(m, next, &f.table_bytes, &f);
        count_buckets(m, next, empty, frozen_empty, &f);
    }
    /* each entry once, as heapd_map_verify finds them */
    void *tt = next ? next : t;
    size_t span = nrefs_of(tt) - 1;
    for (size_t i = 0; i < span; i++) {
        void *b = coll_load(&table_slots(tt)[i]);
        bool old = !b;
        if (old && !(b = lookup_bucket(map, i)))
            continue;
        size_t k = bucket_keys(b);
        for (size_t e = 0; e < k; e++) {
            if (old && (bucket_meta(b)->keys[e].hash & (span - 1)) != i)
                continue; /* the other new slot's half */
            void *key = entry_key(b, e);
            void *val = entry_value(b, e);
            if (key)
                count_object(m, key, &f.key_bytes, &f);
            if (val)
                count_object(m, val, &f.value_bytes, &f);
            f.keys++;
        }
    }
    abi_out(caller, size, &f, sizeof f);
    return 0;
}

/* ---- what a cache map counts (Note [Map budget] in map.c) ---- */

/* See Note [Structs that grow] in client/abi.c. */
int heapd_map_stats_sized(const void *map, heapd_map_stats_t *caller,
                          size_t size)
{
    struct coll_info ci;
    if (!caller || !map ||
        coll_kind_of(heapd_nrefs(map), heapd_nbytes(map),
                     heapd_bytes((void *)map), &ci) != COLL_KIND_MAP)
        return client_set_error(-EINVAL, "heapd_map_stats: %s",
                                caller ? "MAP is not a map" : "OUT is NULL");
    heapd_map_stats_t out = {ci.size, ci.budget, ci.used, ci.evictions,
                             ci.expirations};
    abi_out(caller, size, &out, sizeof out);
    return 0;
}
