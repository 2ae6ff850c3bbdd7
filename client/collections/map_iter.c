/* Iteration of the shared map (heapd_collections.h): Note [Map
 * iteration].  The resize it finishes first is map.c's. */
#include <errno.h>

#include "map.h"

/* An iteration's root slots, from heapd_map_iter.root: the ones
 * map_push_finished pushed. */
enum { IT_TABLE, IT_BUCKET, IT_KEY, IT_VALUE, IT_COUNT };
_Static_assert((int)IT_COUNT == MAP_OP_ROOTS,
               "an iteration keeps the op's roots");

int heapd_map_iter_begin(heapd_mutator *m, void *map, heapd_map_iter *it)
{
    if (!is_map(map))
        return client_set_error(-EINVAL, "heapd_map_iter_begin: MAP is "
                                "not a map made by heapd_map_new");
    /* finish a resize under way: then every frozen slot the iteration
     * meets was frozen after it began, and holds what the slot held then
     * (Note [Map iteration]) */
    size_t root;
    int rc = map_push_finished(m, map, &root);
    if (rc)
        return rc;
    /* the four iteration roots are the op's: the table, the bucket, a
     * key made for an inline one (Note [Inline keys]), a value made for
     * an inline one (Note [Inline values]); the map is in the first */
    map = heapd_root_get(m, root + IT_TABLE);
    heapd_root_set(m, root + IT_TABLE,
                   coll_load(&((void **)map)[MAP_TABLE]));
    heapd_root_set(m, root + IT_BUCKET, NULL);
    heapd_root_set(m, root + IT_KEY, NULL);
    heapd_root_set(m, root + IT_VALUE, NULL);
    void *t = heapd_root_get(m, root + IT_TABLE);
    *it = (heapd_map_iter){.m = m, .root = root, .bucket = 0, .pos = 0,
                           .nbuckets = nrefs_of(t) - 1};
    return 0;
}

/* Note [Map iteration]
 * ~~~~~~~~~~~~~~~~~~~~
 * The iteration reads the slots of the table that was the map's when it
 * began, in order, each once, and takes each slot's bucket whole (held
 * in a root while its keys are handed out).  A key lives in exactly one
 * slot of a table, so no key is seen twice.  A key that is in the map for
 * the whole iteration is in its slot's bucket when the slot is read:
 * either the slot is live then, or it was frozen during the iteration
 * (begin finished any earlier resize) and the frozen copy holds what the
 * slot held at that moment. */
bool heapd_map_iter_next(heapd_map_iter *it, void **key, void **value)
{
    errno = 0;
    for (;;) {
        void *b = heapd_root_get(it->m, it->root + IT_BUCKET);
        if (b && it->pos < bucket_keys(b)) {
            if (entry_expired(bucket_words(b), it->pos, now_ms())) {
                it->pos++; /* Note [Map expiry]: absent */
                continue;
            }
            void *k = entry_key(b, it->pos);
            if (!k) { /* Note [Inline keys]: a string of its bytes */
                const struct bucket_key *bk = &bucket_meta(b)->keys[it->pos];
                k = heapd_str_new(it->m, bk->inl,
                                  bk->len < KEY_INLINE ? bk->len
                                                       : KEY_INLINE);
                if (!k)
                    return false; /* errno set */
                heapd_root_set(it->m, it->root + IT_KEY, k);
                b = heapd_root_get(it->m, it->root + IT_BUCKET);
            }
            void *v = entry_value(b, it->pos);
            if (!v) { /* Note [Inline values]: a string of its bytes */
                const struct value_rec *r = entry_rec(b, it->pos);
                v = heapd_str_new(it->m, r ? r->bytes : NULL,
                                  r ? r->len : 0);
                if (!v)
                    return false; /* errno set */
                heapd_root_set(it->m, it->root + IT_VALUE, v);
                /* read again after the safepoint, as above */
                b = heapd_root_get(it->m, it->root + IT_BUCKET);
                k = entry_key(b, it->pos);
                if (!k)
                    k = heapd_root_get(it->m, it->root + IT_KEY);
            }
            *key = k;
            *value = v;
            it->pos++;
            return true;
        }
        if (it->bucket >= it->nbuckets)
            return false;
        void *t = heapd_root_get(it->m, it->root + IT_TABLE);
        b = coll_load(&table_slots(t)[it->bucket]);
        it->bucket++;
        it->pos = 0;
        heapd_root_set(it->m, it->root + IT_BUCKET, b);
    }
}

void heapd_map_iter_end(heapd_map_iter *it)
{
    heapd_root_pop(it->m, heapd_root_depth(it->m) - it->root);
}
