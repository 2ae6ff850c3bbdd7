/* libheapd's shared collections: strings, a concurrent hash map and a
 * multi-producer multi-consumer queue, built on heapd.h.
 *
 * Every structure here is a graph of ordinary heapd objects: any process
 * of the heap that holds one (from a global, a root or another object)
 * may use it, and it lives as long as it is reachable.  They keep Note
 * [Client GC discipline] in heapd.h: the calls that allocate or wait
 * (marked "safepoint" below) end the life of the caller's C locals like
 * heapd_alloc does; the arguments handed to a call are kept alive by the
 * call.  The others are plain loads and compare-and-swaps: no lock, no
 * system call, never a safepoint.
 *
 * None holds a lock, so no process's death can leave one stuck; Note
 * [Collections survive a kill] in client/collections/map.c says what a death in the
 * middle of each operation leaves.  Errors: 0 or a negative errno code,
 * with heapd_last_error() saying what to do; a call returning a pointer
 * returns NULL and sets errno.
 */
#ifndef HEAPD_COLLECTIONS_H
#define HEAPD_COLLECTIONS_H

#include "heapd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- strings ----
 *
 * An immutable byte string: LEN bytes (any bytes, NUL too) and a NUL
 * after them, with its length and its 64-bit hash computed once at
 * creation.  Readers get the bytes in place (zero copy); nothing ever
 * writes them again.  The longest is HEAPD_STR_MAX bytes. */
#define HEAPD_STR_MAX ((size_t)(1u << 27))

/* A new string of BYTES[0..LEN).  Safepoint.  NULL with errno EINVAL
 * (LEN over HEAPD_STR_MAX, or BYTES NULL with LEN > 0), or heapd_alloc's
 * errors. */
HEAPD_API void *heapd_str_new(heapd_mutator *m, const void *bytes, size_t len);
/* True if OBJ is a string made by heapd_str_new (false for NULL). */
HEAPD_API bool heapd_is_str(const void *obj);
HEAPD_API size_t heapd_str_len(const void *s);
/* The bytes, NUL-terminated: valid as long as S is. */
HEAPD_API const char *heapd_str_data(const void *s);
HEAPD_API uint64_t heapd_str_hash(const void *s);
/* heapd_str_new's hash of any bytes: equal to heapd_str_hash of a string
 * of the same bytes. */
HEAPD_API uint64_t heapd_hash_bytes(const void *bytes, size_t len);
/* Byte-wise order, like memcmp then length: <0, 0 or >0. */
HEAPD_API int heapd_str_cmp(const void *a, const void *b);
HEAPD_API bool heapd_str_eq(const void *a, const void *b);

/* ---- the concurrent hash map ----
 *
 * A map from keys to values, both heapd objects, shared by every process
 * that can reach it.  What makes two keys the same is the map's kind:
 *   HEAPD_MAP_STR       keys are strings (heapd_str_new), equal by bytes;
 *                       the *_str calls look up by C bytes, no allocation
 *   HEAPD_MAP_BYTES     keys are any objects, equal by their raw bytes
 *                       (heapd_bytes, heapd_nbytes); reference fields are
 *                       not part of the key
 *   HEAPD_MAP_IDENTITY  keys are any objects, equal by address (a young
 *                       mutator's key is published first: its address is
 *                       the shared copy's)
 * Lookups are plain loads.  Insert, replace, delete, a counter's add
 * and get-or-put's insert each take effect at one compare-and-swap.  Deleting is safe while other processes read:
 * an entry a reader found stays valid until the reader's next safepoint
 * (the collector frees it only after).  The map grows (doubles) without
 * stopping anyone (Note [Map resize]).  Values are never NULL: a lookup
 * returns NULL for "no such key". */
enum {
    HEAPD_MAP_STR = 0,
    HEAPD_MAP_BYTES = 1,
    HEAPD_MAP_IDENTITY = 2,
};

/* A new empty map of KIND sized for about CAPACITY keys (0: a small
 * one; it grows as needed).  Safepoint.  NULL with errno EINVAL (unknown
 * kind) or heapd_alloc's errors.  Store it somewhere reachable (a
 * global, heapd_global_once, a root) before the next safepoint. */
HEAPD_API void *heapd_map_new(heapd_mutator *m, unsigned kind,
                              size_t capacity);
/* A map for a cache: entries that expire, a byte budget that evicts.
 * heapd_map_new is heapd_map_new_opts of {kind, capacity}. */
#define HEAPD_MAP_EXPIRY 0x1u /* entries may have a deadline
                                 (heapd_map_put_ttl) */
typedef struct heapd_map_opts {
    unsigned kind;      /* HEAPD_MAP_STR, _BYTES or _IDENTITY */
    size_t capacity;    /* keys to size the first table for */
    uint64_t budget;    /* bytes the map may take, as heapd_map_footprint
                           counts them; 0: no budget.  Over it, a write
                           evicts the least recently used entries (CLOCK:
                           Note [Map budget] in client/collections/map.c),
                           so an insert never fails for want of room */
    unsigned flags;     /* HEAPD_MAP_EXPIRY */
    unsigned unused_;   /* never read: what was padding, so that a new
                           option grows the struct (Note [Structs that
                           grow] in client/abi.c) */
} heapd_map_opts;
/* A new empty map as OPTS says.  Safepoint.  NULL with errno EINVAL
 * (unknown kind or flags) or heapd_alloc's errors.  A map with a budget
 * or HEAPD_MAP_EXPIRY keeps 8 bytes more a key. */
HEAPD_API void *heapd_map_new_opts_sized(heapd_mutator *m,
                                         const heapd_map_opts *opts,
                                         size_t size);
HEAPD_SIZED_(void *heapd_map_new_opts(heapd_mutator *m,
                                      const heapd_map_opts *opts))
#ifndef HEAPD_LIBRARY_
{
    return heapd_map_new_opts_sized(m, opts, sizeof *opts);
}
#endif
/* True if OBJ is a map made by heapd_map_new. */
HEAPD_API bool heapd_is_map(const void *obj);

/* The value of KEY, or NULL.  Not a safepoint: plain loads; the value may
 * be used until the caller's next safepoint.  NULL with errno EINVAL also
 * for a value kept inline (heapd_map_put_bytes), which is not an object:
 * heapd_map_get_bytes reads it. */
HEAPD_API void *heapd_map_get(heapd_mutator *m, void *map, const void *key);
/* The same for a key of BYTES[0..LEN) in a HEAPD_MAP_STR or
 * HEAPD_MAP_BYTES map. */
HEAPD_API void *heapd_map_get_str(heapd_mutator *m, void *map,
                                  const void *bytes, size_t len);
/* The bytes of the value of the key KEY[0..KLEN) (a HEAPD_MAP_STR or
 * HEAPD_MAP_BYTES map), with their number in *LEN: a value kept inline
 * (heapd_map_put_bytes), a string's characters, or another object's raw
 * bytes (heapd_bytes).  Not a safepoint: plain loads, no copy.  The bytes
 * stay as they are, and valid, while the caller holds the pointer, as
 * any pointer into an object (Note [Client GC discipline] in heapd.h);
 * a later update of the key makes a new copy.  NULL with errno ENOENT (no
 * such key), EINVAL (bad arguments) or EUCLEAN (a damaged entry). */
HEAPD_API const void *heapd_map_get_bytes(heapd_mutator *m, void *map,
                                          const void *key, size_t klen,
                                          size_t *len);

/* Flags of heapd_map_put. */
#define HEAPD_MAP_IF_ABSENT 0x1u  /* insert only: -EEXIST if KEY is there
                                     (heapd_map_get_or_put returns it) */
#define HEAPD_MAP_IF_PRESENT 0x2u /* replace only: -ENOENT if it is not */

/* Set KEY to VALUE (not NULL).  Safepoint.  Returns 1 if it replaced a
 * value, 0 if it inserted KEY, or -EEXIST / -ENOENT (FLAGS), -EINVAL (a
 * NULL value, a key the map's kind does not take, not a map, unknown
 * flags), -ENOMEM, -EPIPE (the daemon is gone). */
HEAPD_API int heapd_map_put(heapd_mutator *m, void *map, void *key,
                            void *value, unsigned flags);
/* heapd_map_put with a key of BYTES[0..LEN), made a string only if it is
 * inserted (HEAPD_MAP_STR maps only). */
HEAPD_API int heapd_map_put_str(heapd_mutator *m, void *map,
                                const void *bytes, size_t len, void *value,
                                unsigned flags);
/* The largest value heapd_map_put_bytes keeps inline. */
#define HEAPD_MAP_INLINE_MAX 1024
/* heapd_map_put_str with VALUE[0..VLEN) (at most HEAPD_MAP_INLINE_MAX
 * bytes) kept in the map's own entry: no value object, one allocation
 * per update, and one memory access less per lookup (Note [Inline
 * values] in client/collections/map.c).  Safepoint.  The returns of
 * heapd_map_put, and -E2BIG for a longer value. */
HEAPD_API int heapd_map_put_bytes(heapd_mutator *m, void *map,
                                  const void *key, size_t klen,
                                  const void *value, size_t vlen,
                                  unsigned flags);
/* Set KEY's value to DESIRED if it is EXPECTED (compared by address).
 * Safepoint.  Returns 0 if it did, -EAGAIN if KEY's value is another,
 * -ENOENT if KEY is absent, -EINVAL if its value is kept inline, or the
 * errors of heapd_map_put. */
/* heapd_map_put and heapd_map_put_bytes with a time to live: the entry
 * is absent from TTL_MS ms on (0: never; a put without a TTL clears the
 * key's), and its memory comes back once a write to the map, or
 * heapd_map_expire, removes it (Note [Map expiry] in
 * client/collections/map.c).  Safepoints.  As those, and -EINVAL for a
 * TTL in a map made without HEAPD_MAP_EXPIRY or a budget. */
HEAPD_API int heapd_map_put_ttl(heapd_mutator *m, void *map, void *key,
                                void *value, unsigned ttl_ms,
                                unsigned flags);
HEAPD_API int heapd_map_put_bytes_ttl(heapd_mutator *m, void *map,
                                      const void *key, size_t klen,
                                      const void *value, size_t vlen,
                                      unsigned ttl_ms, unsigned flags);
/* What a cache map counts (Note [Map budget]): keys (expired ones that
 * are still held too), its budget and the bytes it counts used,
 * evictions and expirations so far.  Plain loads. */
typedef struct heapd_map_stats {
    uint64_t count;
    uint64_t budget;
    uint64_t used;
    uint64_t evictions;
    uint64_t expirations;
} heapd_map_stats_t;
/* 0, or -EINVAL if MAP is not a map or OUT is NULL. */
HEAPD_API int heapd_map_stats_sized(const void *map, heapd_map_stats_t *out,
                                    size_t size);
HEAPD_SIZED_(int heapd_map_stats(const void *map, heapd_map_stats_t *out))
#ifndef HEAPD_LIBRARY_
{
    return heapd_map_stats_sized(map, out, sizeof *out);
}
#endif
/* Remove every entry of MAP that has expired, now: for a map nobody
 * writes to (writes sweep a few slots each).  Safepoint.  The entries
 * removed, or a negative errno. */
HEAPD_API long heapd_map_expire(heapd_mutator *m, void *map);
HEAPD_API int heapd_map_replace(heapd_mutator *m, void *map, void *key,
                                void *expected, void *desired);
/* Remove KEY.  Safepoint.  Returns 0, -ENOENT, or the errors of
 * heapd_map_put. */
HEAPD_API int heapd_map_delete(heapd_mutator *m, void *map, const void *key);
HEAPD_API int heapd_map_delete_str(heapd_mutator *m, void *map,
                                   const void *bytes, size_t len);
/* Keys in the map: exact when no operation is under way; a process that
 * dies inside an insert or a delete may leave it off by one. */
HEAPD_API size_t heapd_map_count(const void *map);

/* Add DELTA to the counter of KEY, made with the value DELTA if KEY is
 * absent; the counter's new value in *RESULT (if not NULL).  A counter is
 * 8 bytes kept inline, an int64_t in the machine's byte order, which
 * heapd_map_get_bytes reads and heapd_map_put_bytes may set; one add
 * takes effect exactly once, at its one compare-and-swap, and a process
 * killed before it added nothing (Note [Counters] in
 * client/collections/map.c).  A DELTA of 0 on an existing counter reads
 * it and writes nothing.  Safepoint.  Returns 1 if KEY's counter was
 * there, 0 if this call inserted KEY, -EINVAL if KEY's value is not a
 * counter (an object, or inline bytes of another length), -EOVERFLOW if
 * the sum would not fit an int64_t (nothing changed), or the errors of
 * heapd_map_put. */
HEAPD_API int heapd_map_add(heapd_mutator *m, void *map, void *key,
                            int64_t delta, int64_t *result);
/* heapd_map_add with a key of BYTES[0..LEN), made a string only if it is
 * inserted and longer than what a bucket keeps inline (HEAPD_MAP_STR
 * maps only). */
HEAPD_API int heapd_map_add_str(heapd_mutator *m, void *map,
                                const void *bytes, size_t len, int64_t delta,
                                int64_t *result);
/* Get or insert: KEY's value if KEY is in MAP, else VALUE (not NULL),
 * inserted by one compare-and-swap.  Returns the value in the map after
 * the call, with *INSERTED (if not NULL) true if this call inserted it;
 * as any object a C local holds, it stays valid while the caller holds it
 * (Note [C locals are roots] in client/stack_roots.c).  Safepoint.  NULL
 * with errno EINVAL (a NULL value, a key the map's kind does not take,
 * not a map, or KEY's value is kept inline: heapd_map_get_bytes reads
 * it), or heapd_map_put's errors. */
HEAPD_API void *heapd_map_get_or_put(heapd_mutator *m, void *map, void *key,
                                     void *value, bool *inserted);
/* heapd_map_get_or_put with a key of BYTES[0..LEN), made a string only if
 * it is inserted (HEAPD_MAP_STR maps only). */
HEAPD_API void *heapd_map_get_or_put_str(heapd_mutator *m, void *map,
                                         const void *bytes, size_t len,
                                         void *value, bool *inserted);

/* Check MAP's invariants (Note [Map invariants] in client/collections/map.c): the
 * number of keys it holds, or -EUCLEAN with heapd_last_error() naming the
 * first damage, -EINVAL if MAP is not a map.  Plain loads, O(size): for
 * tests and for a program that wants to know after a crash. */
HEAPD_API int heapd_map_verify(const void *map);

/* What a map takes of the heap, in bytes of the blocks that hold its
 * objects (an object's size rounded up to its size class: Note [Map
 * footprint] in client/collections/map.c). */
typedef struct heapd_map_footprint {
    uint64_t keys;              /* entries */
    uint64_t map_bytes;         /* the map object and its shared buckets */
    uint64_t table_bytes;       /* its table, and the next one in a resize */
    uint64_t bucket_bytes;      /* buckets, frozen copies of a resize too */
    uint64_t key_bytes;         /* the key objects */
    uint64_t value_bytes;       /* the values, once per key that holds one;
                                   not what a value references */
    uint64_t header_bytes;      /* of all of the above, object headers */
    uint64_t slack_bytes;       /* of all of the above, what blocks hold
                                   past their objects' ends */
} heapd_map_footprint_t;

/* Measure MAP into *OUT.  Not a safepoint: plain loads, O(size), as
 * heapd_map_verify (about 10 ms for 100,000 keys), so a caller holds a
 * collection's stop up that long.  0, or -EINVAL if MAP is not a map or
 * OUT is NULL. */
HEAPD_API int heapd_map_footprint_sized(heapd_mutator *m, const void *map,
                                        heapd_map_footprint_t *out,
                                        size_t size);
HEAPD_SIZED_(int heapd_map_footprint(heapd_mutator *m, const void *map,
                                     heapd_map_footprint_t *out))
#ifndef HEAPD_LIBRARY_
{
    return heapd_map_footprint_sized(m, map, out, sizeof *out);
}
#endif

/* Iteration: every key that is in the map for the whole iteration is
 * seen exactly once, whatever is inserted, deleted or resized meanwhile;
 * a key inserted or deleted meanwhile is seen at most once.  The value
 * seen is one the key had during the iteration.  heapd_map_iter_begin
 * pushes four root slots (the table and the bucket being read, a key
 * string made for a short key of a HEAPD_MAP_STR map, which the map keeps
 * as bytes only, and a string made of a value kept inline) and
 * heapd_map_iter_end pops them: the caller's
 * own pushes in between must be popped before.  Begin, next and end are
 * safepoints; a key and value next returns stay valid until the next
 * call of next or end. */
typedef struct heapd_map_iter {
    heapd_mutator *m;
    size_t root;        /* the first of the four root slots */
    size_t bucket;      /* the next bucket of the table to read */
    size_t pos;         /* the next entry of the bucket in the root */
    size_t nbuckets;
} heapd_map_iter;

HEAPD_API int heapd_map_iter_begin(heapd_mutator *m, void *map,
                                   heapd_map_iter *it);
/* True with *KEY and *VALUE set; false at the end (errno 0), or when a
 * key string could not be made (errno ENOMEM or heapd_alloc's). */
HEAPD_API bool heapd_map_iter_next(heapd_map_iter *it, void **key,
                                   void **value);
HEAPD_API void heapd_map_iter_end(heapd_map_iter *it);

/* ---- the multi-producer multi-consumer queue ----
 *
 * A FIFO of heapd objects (not NULL) that any process may push to and pop
 * from: lock-free (a linked list of nodes: Note [Shared queue] in
 * client/collections/queue.c).  heapd_queue_pop_wait sleeps on a futex in the queue
 * itself, inside a blocking region, so a waiting consumer never holds up
 * a collection. */
HEAPD_API void *heapd_queue_new(heapd_mutator *m);
HEAPD_API bool heapd_is_queue(const void *obj);
/* Append VALUE.  Safepoint.  0, -EINVAL (NULL value, not a queue),
 * -ESHUTDOWN (the queue is closed), -ENOMEM, -EPIPE. */
HEAPD_API int heapd_queue_push(heapd_mutator *m, void *queue, void *value);
/* The oldest value, removed, or NULL when the queue is empty (errno
 * EAGAIN), closed and empty (errno ESHUTDOWN) or on a bad argument
 * (errno EINVAL).  Not a safepoint. */
HEAPD_API void *heapd_queue_pop(heapd_mutator *m, void *queue);
/* heapd_queue_pop, waiting for a value up to TIMEOUT_MS (0: no limit).
 * Safepoint.  NULL with errno ETIMEDOUT, ESHUTDOWN (closed and empty: a
 * close wakes every waiter), EINVAL, EPIPE (the connection to
 * heapd is gone: heapd_last_error says why) or EBADF (M was attached by
 * the parent of this process). */
HEAPD_API void *heapd_queue_pop_wait(heapd_mutator *m, void *queue,
                                     unsigned timeout_ms);
/* Close QUEUE: no push succeeds after it (-ESHUTDOWN), every value
 * pushed before it can still be popped, and once they are, pops return
 * NULL with errno ESHUTDOWN instead of waiting: a way to end consumers
 * with no poison value (Note [Closing a queue] in
 * client/collections/queue.c).  Safepoint.  0 if this call closed it, 1
 * if it was closed already, -EINVAL (not a queue), -ENOMEM, -EPIPE. */
HEAPD_API int heapd_queue_close(heapd_mutator *m, void *queue);
/* Values in the queue now: a snapshot, exact when nothing is under way;
 * a process killed inside a push or a pop leaves it off by one. */
HEAPD_API size_t heapd_queue_length(const void *queue);

/* Leased delivery: at least once, with nothing lost to a consumer that
 * dies (Note [Leased delivery] in client/collections/queue.c).
 * heapd_queue_pop_lease takes the oldest value as heapd_queue_pop does,
 * but under a lease owned by the caller's client, which *LEASE names
 * (keep it in a local or a root, as any reference, until the ack).
 * heapd_queue_ack ends the lease.  If heapd sees the client leave first
 * (killed, crashed, evicted, disconnected) or LEASE_MS passes (0: no
 * deadline), the value is delivered again to the next pop of either kind,
 * ahead of every value pushed after it, once; a plain pop's delivery
 * stays at most once.  A value leased out counts in heapd_queue_leases,
 * not in heapd_queue_length; a closed queue says ESHUTDOWN only once every
 * lease has ended. */
typedef struct heapd_lease {
    void *node_;     /* private */
    uint64_t token_; /* private */
} heapd_lease;
/* As heapd_queue_pop, and errno EUSERS if heapd does not list this client
 * among the heap's live clients (more than it can list).  Not a
 * safepoint. */
HEAPD_API void *heapd_queue_pop_lease(heapd_mutator *m, void *queue,
                                      unsigned lease_ms, heapd_lease *lease);
/* As heapd_queue_pop_wait, and errno EUSERS as heapd_queue_pop_lease; a
 * waiter wakes when a lease comes back.  Safepoint. */
HEAPD_API void *heapd_queue_pop_lease_wait(heapd_mutator *m, void *queue,
                                           unsigned lease_ms,
                                           unsigned timeout_ms,
                                           heapd_lease *lease);
/* End LEASE: 0, -ESTALE if it had ended already (its deadline passed or
 * heapd counted this client gone, and the value went to another
 * consumer), -EINVAL (not a queue, not a lease, acked already).  Not a
 * safepoint. */
HEAPD_API int heapd_queue_ack(heapd_mutator *m, void *queue,
                              heapd_lease *lease);
/* Leases QUEUE's consumers hold now: a snapshot. */
HEAPD_API size_t heapd_queue_leases(const void *queue);

#ifdef __cplusplus
}
#endif

#endif /* HEAPD_COLLECTIONS_H */
