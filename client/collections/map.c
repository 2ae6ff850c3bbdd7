/* The concurrent hash map shared by processes (heapd_collections.h).
 *
 * Note [Shared map]
 * ~~~~~~~~~~~~~~~~~
 * A map is four kinds of heapd objects:
 *   map     refs: table, empty, frozen_empty  bytes: tag, kind, count
 *   table   refs: next, bucket[0..n)          bytes: tag, has_prev, n, cursor
 *   bucket  refs: key0, value0, key1, ...     bytes: tag, flags, keys[],
 *                                                     values
 * (key_i NULL for a string map's key kept inline: Note [Inline keys];
 * value_i NULL for a value kept in `values`: Note [Inline values])
 * A bucket is immutable once a slot holds it: every change of a key's
 * value, every insert and every delete builds a new bucket (a copy with
 * the change) and installs it with ONE compare-and-swap of the table's
 * slot.  So:
 *   - a lookup is plain loads: the table, the slot, the bucket's hashes,
 *     then the key of a matching hash; nothing it reads changes under it;
 *   - each operation takes effect at its compare-and-swap, and a process
 *     that dies before it has changed nothing (Note [Collections survive
 *     a kill]);
 *   - a delete is safe while other processes read, with no hazard pointer
 *     and no epoch: a reader that found the old bucket holds it in a C
 *     local, which is valid until the reader's next safepoint (Note
 *     [Client GC discipline] in heapd.h), and the collector frees the
 *     bucket only after.  For the same reason there is no ABA: between
 *     the load of a slot and its compare-and-swap no safepoint is taken,
 *     so the bucket loaded cannot be freed and its address reused.
 * A slot of the first table holds NULL for "no keys"; an emptied slot
 * holds the map's shared empty bucket.  The copy costs a bucket per
 * update: 16 + 48 k bytes for k keys, and the records of inline values,
 * k about 1 at the map's load (one key per slot at most before it
 * grows).  In the shared-cache benchmark an update allocates that (and
 * the new value, unless it is kept inline), and the collector takes the
 * old ones back concurrently.
 *
 * Keys are compared by kind (heapd_collections.h).  A bucket keeps, for
 * each key, its 64-bit hash, its length and its first KEY_INLINE bytes
 * (keys[]): a lookup compares those, and reads the key object only for a
 * longer key whose hash and first bytes match.  In the shared-cache
 * benchmark (16-byte keys) a lookup then touches the table, the bucket
 * and the value, and no key: reading the key string was a quarter of its
 * time.  A value kept inline is in the bucket too (Note [Inline
 * values]).
 *
 * Note [Map resize]
 * ~~~~~~~~~~~~~~~~~
 * The map doubles, incrementally, without stopping readers or writers,
 * when it holds more keys than its table has slots.  Split-ordered lists
 * would avoid copying, but need a mark bit in a list's next pointer, and a
 * reference field here holds only object addresses (the collector
 * refuses anything else); doubling with frozen buckets needs none.
 *   1. A writer that inserts past the load allocates a table twice the
 *      size and installs it as the old table's `next` (compare-and-swap).
 *   2. Old slot i is FROZEN: replaced (compare-and-swap) by a copy of its
 *      bucket flagged frozen.  From then on no writer changes it: a writer
 *      that finds a frozen bucket goes on to `next`.
 *   3. The new slots i and i + n are FILLED from the frozen bucket, each
 *      with the keys whose hash has bit n clear or set, by a
 *      compare-and-swap from NULL: in a table with has_prev, NULL means
 *      "not filled yet", and the frozen bucket holds the truth meanwhile.
 *      A reader that meets a frozen bucket and an unfilled slot reads the
 *      frozen bucket; a writer fills the slot first.
 *   4. Writers share the work: each writer that sees a resize under way
 *      claims the next CHUNK slots (an atomic add to the old table's
 *      cursor, modulo n: claims go round in laps) and migrates them,
 *      setting each slot's bit in the old table's `done` bitmap once both
 *      new slots are filled.  The one that claims the last chunk of a lap
 *      then checks the bitmap (migrating what is not) and makes `next`
 *      the map's table.  Checking every slot's buckets instead cost that
 *      one insert 13 ns a slot, 1.7 ms at 131,072 slots; the bitmap is
 *      read a word per 64 slots.
 * Freezing and filling are idempotent, and the check at each lap's end
 * does what a writer that died mid-chunk left undone, so no death can
 * leave a resize stuck: any writer finishes it.  Readers never help and
 * never wait.  A resize costs about three allocations per old slot
 * (frozen copy, two halves; an empty one shares the map's buckets), paid
 * by the writers of the map while it runs, a chunk per write; the write
 * that starts it allocates (and zeroes) the new table.  The map never
 * shrinks.
 *
 * Note [Collections survive a kill]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A process may be SIGKILLed at any instant.  Every change to a map or a
 * queue that other processes can see is one compare-and-swap of a
 * reference, of an object the dying process filled in completely before;
 * so a death leaves each structure as it was before the operation or as
 * it is after, never between: no entry is torn or lost, and there is no
 * lock to be left held.  What a death mid-way can leave:
 *   - a map's count off by one (it is an atomic add after the swap);
 *   - a resize half done: slots frozen and not filled, a lap unchecked,
 *     the new table not installed.  Readers read frozen buckets; the next
 *     writers finish it (Note [Map resize]);
 *   - a queue whose tail lags its last node (Note [Shared queue]): the
 *     next push or pop moves it;
 *   - a value a consumer popped: it was delivered to that consumer.
 * tests/test_collections_kill.c stops processes at each of these points (the
 * HEAPD_COLL_STOP_IN hook) and SIGKILLs them there.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "coll.h"
#include "layout.h"

/* ---- the objects ---- */

enum { MAP_TABLE, MAP_EMPTY, MAP_FROZEN_EMPTY, MAP_NREFS };

struct map_meta {
    uint32_t tag;
    uint32_t kind;
    _Atomic uint64_t count;
};

struct table_meta {
    uint32_t tag;
    uint32_t has_prev;          /* NULL slots are "not filled yet" */
    uint64_t n;                 /* slots, a power of two */
    _Atomic uint64_t cursor;    /* resize claims (Note [Map resize]) */
    _Atomic uint64_t done[];    /* a bit per slot: migrated */
};

/* A table's raw bytes for N slots. */
static inline size_t table_bytes(uint64_t n)
{
    return sizeof(struct table_meta) + (n + 63) / 64 * sizeof(uint64_t);
}

#define BUCKET_FROZEN 0x1u
#define KEY_INLINE 20 /* key bytes kept in the bucket */
struct bucket_key {
    uint64_t hash;
    uint32_t len;               /* the key's length (0 for IDENTITY) */
    uint8_t inl[KEY_INLINE];    /* its first bytes, zero-padded */
};
struct bucket_meta {
    uint32_t tag;
    uint32_t flags;
    struct bucket_key keys[];
};

/* Note [Inline values]
 * ~~~~~~~~~~~~~~~~~~~~~
 * heapd_map_put_bytes keeps a value of at most HEAPD_MAP_INLINE_MAX bytes
 * in the bucket itself: the entry's value reference is NULL, and the
 * bucket's bytes end with one record per such entry, in entry order, a
 * 32-bit length then the bytes, padded to 8 (value_rec).  The bucket is
 * copied on every change anyway (Note [Shared map]), so an update builds
 * one object instead of a bucket and a value, and a lookup reads the
 * value from the lines after the key it compared instead of following a
 * third reference, its third dependent cache miss; as a bucket now
 * spans three or four lines, they are prefetched together
 * (prefetch_bucket).  Measured on the shared-cache benchmark (100-byte
 * values, 1 worker, 20 % updates, 5 runs each, interleaved with string
 * values): 2.07 M lookups/s against 1.90 M, lookup p50 311 ns against
 * 375, live data 16.6 MiB against 18.9; an update costs more, 527 ns
 * against 479, as it copies the values of the other keys of its bucket
 * too (100,000 keys in 131,072 slots: half of the keys share theirs).
 * The records' bytes are exactly what the bucket has past keys[]; a
 * record that would reach past them is damage (heapd_map_verify says
 * so, lookups do not read past the bucket).  heapd_map_get_bytes reads
 * either kind of value; heapd_map_get and heapd_map_get_str, which
 * return an object, refuse an inline one, and iteration makes it a
 * string.
 */
struct value_rec {
    uint32_t len;
    uint8_t bytes[];
};

static inline size_t rec_size(size_t len)
{
    return (sizeof(struct value_rec) + len + 7) & ~(size_t)7;
}

#define MAP_MIN_SLOTS 8u
#define MAP_MAX_SLOTS ((uint64_t)1 << 27) /* a table's refs <= HEAPD_MAX_NREFS */
#define CHUNK 64u                         /* slots one resize claim migrates */
/* Keys a bucket may hold: its two refs per key fit an object. */
#define BUCKET_MAX_KEYS ((size_t)HEAPD_MAX_NREFS / 2)

/* Object headers are read directly (not through heapd_nrefs, which checked
 * mode makes check every object): these objects were found in reference
 * fields, so they are objects of the heap. */
static inline size_t nrefs_of(const void *obj)
{
    return layout_header_nrefs(
        __atomic_load_n((const uint64_t *)obj - 1, __ATOMIC_RELAXED));
}

static inline struct map_meta *map_meta(void *map)
{
    return COLL_META(struct map_meta, map, MAP_NREFS);
}

static inline void **table_slots(void *t)
{
    return (void **)t + 1;
}

static inline struct table_meta *table_meta(void *t)
{
    return COLL_META(struct table_meta, t, nrefs_of(t));
}

static inline struct bucket_meta *bucket_meta(void *b)
{
    return COLL_META(struct bucket_meta, b, nrefs_of(b));
}

static inline size_t bucket_keys(const void *b)
{
    return nrefs_of(b) / 2;
}

/* The bytes of bucket B's value records (Note [Inline values]). */
static inline size_t bucket_vbytes(const void *b)
{
    uint64_t h = __atomic_load_n((const uint64_t *)b - 1, __ATOMIC_RELAXED);
    size_t head = sizeof(struct bucket_meta) +
                  bucket_keys(b) * sizeof(struct bucket_key);
    size_t nb = layout_header_nbytes(h);
    return nb > head ? nb - head : 0;
}

static inline uint8_t *bucket_recs(void *b)
{
    return (uint8_t *)&bucket_meta(b)->keys[bucket_keys(b)];
}

/* The record of entry E of bucket B, whose value reference is NULL, or
 * NULL if the records are damaged (Note [Inline values]). */
static const struct value_rec *entry_rec(void *b, size_t e)
{
    void **refs = b;
    size_t at = 0, end = bucket_vbytes(b);
    const uint8_t *r = bucket_recs(b);
    for (size_t j = 0;; j++) {
        if (j < e && coll_load(&refs[2 * j + 1]))
            continue;
        if (at > end || end - at < sizeof(struct value_rec))
            return NULL;
        const struct value_rec *v = (const struct value_rec *)(r + at);
        if (v->len > end - at - sizeof(struct value_rec))
            return NULL;
        if (j == e)
            return v;
        at += rec_size(v->len);
    }
}

static inline bool frozen(void *b)
{
    return b && (bucket_meta(b)->flags & BUCKET_FROZEN);
}

/* heapd_is_map, inline: the lookups' first check */
static inline bool is_map(const void *obj)
{
    if (!obj)
        return false;
    uint64_t h = __atomic_load_n((const uint64_t *)obj - 1, __ATOMIC_RELAXED);
    if (layout_header_nrefs(h) != MAP_NREFS ||
        layout_header_nbytes(h) != sizeof(struct map_meta))
        return false;
    const struct map_meta *mm = map_meta((void *)obj);
    return mm->tag == COLL_TAG_MAP && mm->kind <= HEAPD_MAP_IDENTITY;
}

bool heapd_is_map(const void *obj)
{
    return is_map(obj);
}

/* ---- keys ---- */

/* What an operation looks for: the hash, and the key as bytes (STR and
 * BYTES maps) or as an address (IDENTITY). */
struct probe {
    uint64_t hash;
    const void *bytes;
    size_t len;
    const void *obj;
};

static inline uint64_t identity_hash(const void *obj)
{
    uint64_t x = (uint64_t)(uintptr_t)obj;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* KEY's bytes in a map of KIND (KIND is not IDENTITY). */
static inline void key_bytes(unsigned kind, void *key, const void **bytes,
                             size_t *len)
{
    if (kind == HEAPD_MAP_STR) {
        *bytes = heapd_str_data(key);
        *len = heapd_str_len(key);
    } else {
        *bytes = (void **)key + nrefs_of(key);
        *len = layout_header_nbytes(
            __atomic_load_n((const uint64_t *)key - 1, __ATOMIC_RELAXED));
    }
}

/* Fill P for key object KEY.  The caller checked KEY against the kind. */
static void probe_key(struct probe *p, unsigned kind, void *key)
{
    p->obj = key;
    if (kind == HEAPD_MAP_IDENTITY) {
        p->bytes = NULL;
        p->len = 0;
        p->hash = identity_hash(key);
        return;
    }
    key_bytes(kind, key, &p->bytes, &p->len);
    p->hash = kind == HEAPD_MAP_STR ? heapd_str_hash(key)
                                    : heapd_hash_bytes(p->bytes, p->len);
}

/* Are the first N (at most KEY_INLINE) bytes of A and B alike?  Eight
 * at a time, inline: memcmp's call for a variable N took 5 % of the
 * shared-cache benchmark's samples (1 worker, 20 % updates); inline, its
 * lookups went from 2.36 to 2.43 M/s (medians of 12 runs, interleaved).
 * B is read no further than N. */
static inline bool inline_eq(const uint8_t *a, const uint8_t *b, size_t n)
{
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t x, y;
        memcpy(&x, a + k, 8);
        memcpy(&y, b + k, 8);
        if (x != y)
            return false;
    }
    for (; k < n; k++)
        if (a[k] != b[k])
            return false;
    return true;
}

/* Is entry BK (key object STORED) P's key? */
static inline bool key_matches(unsigned kind, const struct probe *p,
                               const struct bucket_key *bk, void *stored)
{
    if (bk->hash != p->hash)
        return false;
    if (kind == HEAPD_MAP_IDENTITY)
        return stored == p->obj;
    if (bk->len != p->len)
        return false;
    size_t in = p->len < KEY_INLINE ? p->len : KEY_INLINE;
    if (!inline_eq(bk->inl, p->bytes, in))
        return false;
    if (p->len <= KEY_INLINE)
        return true;
    const void *b;
    size_t n;
    key_bytes(kind, stored, &b, &n);
    return n == p->len && memcmp(b, p->bytes, n) == 0;
}

/* Index of P's key in bucket B, or -1. */
static long bucket_find(unsigned kind, void *b, const struct probe *p)
{
    if (!b)
        return -1;
    size_t k = bucket_keys(b);
    const struct bucket_meta *bm = bucket_meta(b);
    void **refs = b;
    for (size_t i = 0; i < k; i++)
        if (key_matches(kind, p, &bm->keys[i], coll_load(&refs[2 * i])))
            return (long)i;
    return -1;
}

/* Entry J of bucket B's key record for P. */
static inline void set_key(void *b, size_t j, const struct probe *p)
{
    struct bucket_key *bk = &bucket_meta(b)->keys[j];
    bk->hash = p->hash;
    bk->len = (uint32_t)p->len;
    memset(bk->inl, 0, KEY_INLINE);
    if (p->len)
        memcpy(bk->inl, p->bytes, p->len < KEY_INLINE ? p->len : KEY_INLINE);
}

/* Note [Inline keys]
 * ~~~~~~~~~~~~~~~~~~
 * A key of a HEAPD_MAP_STR map that fits in its entry's KEY_INLINE bytes
 * is kept there only: the entry's key reference is NULL, and no string
 * object holds it.  Equality is by bytes in a string map, so the bytes
 * are the key: a lookup compared them already (key_matches), and what
 * needs a key object -- iteration -- makes one (heapd_map_iter_next).  A
 * longer key, and any key of the other kinds, is an object referenced
 * from its entry as before.  In the shared-cache benchmark (16-byte
 * keys) the key strings were 4.6 MiB of the map's 23.4 MiB.
 */
static inline bool key_inline(unsigned kind, size_t len)
{
    return kind == HEAPD_MAP_STR && len <= KEY_INLINE;
}

/* The probe of entry E of bucket B, whose key object is KEY (NULL for an
 * inline key: Note [Inline keys]). */
static void probe_entry(struct probe *p, unsigned kind, void *b, size_t e,
                        void *key)
{
    if (key) {
        probe_key(p, kind, key);
        return;
    }
    const struct bucket_key *bk = &bucket_meta(b)->keys[e];
    size_t len = bk->len < KEY_INLINE ? bk->len : KEY_INLINE;
    *p = (struct probe){.hash = heapd_hash_bytes(bk->inl, len),
                        .bytes = bk->inl, .len = len};
}

/* Check KEY against MAP's kind.  0 or -EINVAL. */
static int check_key(unsigned kind, void **key, const char *call)
{
    if (!*key)
        return client_set_error(-EINVAL, "%s: KEY is NULL", call);
    if (kind == HEAPD_MAP_STR && !heapd_is_str(*key))
        return client_set_error(-EINVAL, "%s: the map's keys are strings "
                                "(HEAPD_MAP_STR): make KEY with "
                                "heapd_str_new", call);
    return 0;
}

/* ---- lookups: plain loads ---- */

/* Ask for the lines of bucket B past the one its header is in, before
 * that header's load says how long B is: a key's records and an inline
 * value take three or four lines, and read one after another they are
 * misses in a row (Note [Inline values]).  Past a short bucket's end the
 * prefetches are wasted, never wrong: a prefetch does not fault. */
static inline void prefetch_bucket(const void *b)
{
    for (unsigned line = 1; line <= 4; line++)
        __builtin_prefetch((const char *)b - LAYOUT_WORD + 64 * line);
}

/* The bucket that holds P's key now, or NULL: the first bucket on the
 * path that is not frozen, or the last frozen one when the next table's
 * slot is not filled yet (Note [Map resize]). */
static void *lookup_bucket(void *map, uint64_t hash)
{
    void *t = coll_load(&((void **)map)[MAP_TABLE]);
    void *parent = NULL;
    for (;;) {
        size_t n = nrefs_of(t) - 1;
        void *b = coll_load(&table_slots(t)[hash & (n - 1)]);
        if (!b)
            return parent;
        prefetch_bucket(b);
        if (!frozen(b))
            return b;
        parent = b;
        t = coll_load(&((void **)t)[0]);
        if (!t) /* a frozen bucket's table has a next: damage */
            return parent;
    }
}

/* P's entry: its bucket in *B and its index, or -1. */
static long lookup_entry(void *map, const struct probe *p, void **b)
{
    *b = lookup_bucket(map, p->hash);
    return bucket_find(map_meta(map)->kind, *b, p);
}

/* P's value object, or NULL: absent, or (errno EINVAL) inline. */
static void *lookup(void *map, const struct probe *p, const char *call)
{
    void *b;
    long i = lookup_entry(map, p, &b);
    if (i < 0)
        return NULL;
    void *v = coll_load(&((void **)b)[2 * i + 1]);
    if (!v) {
        client_set_error(-EINVAL, "%s: the key's value is inline bytes "
                         "(heapd_map_put_bytes): read it with "
                         "heapd_map_get_bytes", call);
        errno = EINVAL;
    }
    return v;
}

void *heapd_map_get(heapd_mutator *m, void *map, const void *key)
{
    (void)m;
    if (!is_map(map) || !key) {
        client_set_error(-EINVAL, "heapd_map_get: %s",
                         key ? "MAP is not a map" : "KEY is NULL");
        errno = EINVAL;
        return NULL;
    }
    unsigned kind = map_meta(map)->kind;
    void *k = (void *)key;
    if (kind == HEAPD_MAP_STR && !heapd_is_str(k)) {
        client_set_error(-EINVAL, "heapd_map_get: the map's keys are "
                         "strings: make KEY with heapd_str_new, or use "
                         "heapd_map_get_str");
        errno = EINVAL;
        return NULL;
    }
    struct probe p;
    probe_key(&p, kind, k);
    return lookup(map, &p, "heapd_map_get");
}

/* The probe of a key of BYTES[0..LEN) in MAP for CALL, or false with
 * errno EINVAL. */
static bool probe_bytes(struct probe *p, void *map, const void *bytes,
                        size_t len, const char *call)
{
    if (!is_map(map) || map_meta(map)->kind == HEAPD_MAP_IDENTITY ||
        (!bytes && len)) {
        client_set_error(-EINVAL, "%s: %s", call,
                         !is_map(map) ? "MAP is not a map"
                         : (!bytes && len) ? "BYTES is NULL"
                                           : "an IDENTITY map has no "
                                             "keys by bytes");
        errno = EINVAL;
        return false;
    }
    *p = (struct probe){.hash = heapd_hash_bytes(bytes, len), .bytes = bytes,
                        .len = len, .obj = NULL};
    return true;
}

void *heapd_map_get_str(heapd_mutator *m, void *map, const void *bytes,
                        size_t len)
{
    (void)m;
    struct probe p;
    if (!probe_bytes(&p, map, bytes, len, "heapd_map_get_str"))
        return NULL;
    return lookup(map, &p, "heapd_map_get_str");
}

const void *heapd_map_get_bytes(heapd_mutator *m, void *map,
                                const void *key, size_t klen, size_t *len)
{
    (void)m;
    struct probe p;
    if (!len) {
        client_set_error(-EINVAL, "heapd_map_get_bytes: LEN is NULL");
        errno = EINVAL;
        return NULL;
    }
    if (!probe_bytes(&p, map, key, klen, "heapd_map_get_bytes"))
        return NULL;
    void *b;
    long i = lookup_entry(map, &p, &b);
    if (i < 0) {
        errno = ENOENT;
        return NULL;
    }
    void *v = coll_load(&((void **)b)[2 * i + 1]);
    if (v) { /* an object: a string's bytes, or its raw bytes */
        if (heapd_is_str(v)) {
            *len = heapd_str_len(v);
            return heapd_str_data(v);
        }
        *len = heapd_nbytes(v);
        return heapd_bytes(v);
    }
    const struct value_rec *r = entry_rec(b, (size_t)i);
    if (!r) {
        client_set_error(-EUCLEAN, "heapd_map_get_bytes: map %p: the "
                         "bucket of the key holds damaged value records "
                         "(heapd_map_verify)", map);
        errno = EUCLEAN;
        return NULL;
    }
    *len = r->len;
    return r->bytes;
}

size_t heapd_map_count(const void *map)
{
    if (!is_map(map))
        return 0;
    return (size_t)atomic_load_explicit(&map_meta((void *)map)->count,
                                        memory_order_relaxed);
}

/* ---- writers ---- */

/* A writer's state.  Its references live in four root slots, from ROOT:
 * the map, the key, the value and the table being migrated, so that they
 * survive the allocations (safepoints) of the operation; C locals are
 * read back from them after each.  PRE is a bucket allocated for the
 * next copy: valid only until the next allocation, so every path that
 * allocates drops it first. */
enum { R_MAP, R_KEY, R_VALUE, R_TABLE, R_COUNT };

struct op {
    heapd_mutator *m;
    size_t root;
    unsigned kind;
    void *pre;
    size_t pre_keys;
    size_t pre_vbytes;          /* its value records' bytes */
    size_t pre_at;              /* the next record's offset in them */
    bool vinl;                  /* the value is VBYTES[0..VLEN), inline */
    const void *vbytes;
    size_t vlen;
};

static inline void *op_root(struct op *o, unsigned r)
{
    return heapd_root_get(o->m, o->root + r);
}

/* A fresh bucket for K keys and VB bytes of value records in o->pre
 * (K > 0), unless o->pre is one.  A safepoint if it allocates: returns 0
 * and the caller starts its step over (re-reading what it had), or a
 * negative errno; 1 if o->pre will do, its records to be written from
 * the start. */
static int op_alloc(struct op *o, size_t k, size_t vb)
{
    if (o->pre && o->pre_keys == k && o->pre_vbytes == vb) {
        o->pre_at = 0;
        return 1;
    }
    o->pre = NULL;
    if (k > BUCKET_MAX_KEYS)
        return client_set_error(-E2BIG, "a map bucket would hold more than "
                                "%zu keys: too many keys share one hash",
                                BUCKET_MAX_KEYS);
    void *b = heapd_alloc_shared(o->m, 2 * k,
                                 sizeof(struct bucket_meta) +
                                     k * sizeof(struct bucket_key) + vb);
    if (!b)
        return -errno;
    struct bucket_meta *bm = COLL_META(struct bucket_meta, b, 2 * k);
    bm->tag = COLL_TAG_BUCKET;
    o->pre = b;
    o->pre_keys = k;
    o->pre_vbytes = vb;
    return 0;
}

/* The record bytes entry E of bucket B takes in a copy (Note [Inline
 * values]); a damaged record is copied empty. */
static size_t entry_vbytes(void *b, size_t e)
{
    if (coll_load(&((void **)b)[2 * e + 1]))
        return 0;
    const struct value_rec *r = entry_rec(b, e);
    return rec_size(r ? r->len : 0);
}

/* Append a record of BYTES[0..LEN) to o->pre's: empty if it does not fit
 * what op_alloc sized, which only damage met meanwhile can cause. */
static void put_rec(struct op *o, const void *bytes, size_t len)
{
    size_t room = o->pre_vbytes - o->pre_at;
    if (rec_size(len) > room) {
        if (room < sizeof(struct value_rec))
            return;
        len = 0;
    }
    struct value_rec *r =
        (struct value_rec *)(bucket_recs(o->pre) + o->pre_at);
    r->len = (uint32_t)len;
    if (len)
        memcpy(r->bytes, bytes, len);
    o->pre_at += rec_size(len);
}

/* Copy entry I of bucket FROM's key into entry J of o->pre. */
static inline void copy_key(struct op *o, void *from, size_t i, size_t j)
{
    void **src = from, **dst = o->pre;
    heapd_write(o->m, dst, &dst[2 * j], coll_load(&src[2 * i]));
    bucket_meta(dst)->keys[j] = bucket_meta(from)->keys[i];
}

/* Copy entry I of bucket FROM into entry J of o->pre, with its value's
 * record if it is inline.  Entries are copied in order: the records
 * follow them. */
static inline void copy_entry(struct op *o, void *from, size_t i, size_t j)
{
    void **src = from, **dst = o->pre;
    copy_key(o, from, i, j);
    void *v = coll_load(&src[2 * i + 1]);
    /* always written: a reused o->pre holds an earlier attempt's */
    heapd_write(o->m, dst, &dst[2 * j + 1], v);
    if (!v) {
        const struct value_rec *r = entry_rec(from, i);
        put_rec(o, r ? r->bytes : NULL, r ? r->len : 0);
    }
}

static int migrate(struct op *o, size_t i);

/* Fill the two slots of the next table that old slot I of the table in
 * R_TABLE splits into, from its frozen bucket (Note [Map resize]). */
static int fill(struct op *o, size_t i)
{
    for (unsigned half = 0; half < 2;) {
        void *t = op_root(o, R_TABLE);
        size_t n = nrefs_of(t) - 1;
        void *next = coll_load(&((void **)t)[0]);
        void **slot = &table_slots(next)[i + half * n];
        void *fb = coll_load(&table_slots(t)[i]);
        if (coll_load(slot)) {
            half++;
            continue;
        }
        size_t keys = bucket_keys(fb), k = 0, vb = 0;
        const struct bucket_meta *fm = bucket_meta(fb);
        for (size_t e = 0; e < keys; e++)
            if (((fm->keys[e].hash & n) != 0) == half) {
                k++;
                vb += entry_vbytes(fb, e);
            }
        if (k == 0) {
            void *map = op_root(o, R_MAP);
            heapd_cas(o->m, next, slot, NULL,
                      coll_load(&((void **)map)[MAP_EMPTY]));
            continue;
        }
        int rc = op_alloc(o, k, vb);
        if (rc <= 0) {
            if (rc)
                return rc;
            continue; /* a safepoint: read everything again */
        }
        size_t j = 0;
        for (size_t e = 0; e < keys; e++)
            if (((fm->keys[e].hash & n) != 0) == half)
                copy_entry(o, fb, e, j++);
        if (heapd_cas(o->m, next, slot, NULL, o->pre))
            o->pre = NULL;
    }
    return 0;
}

static inline bool migrated(void *t, size_t i)
{
    return atomic_load_explicit(&table_meta(t)->done[i / 64],
                                memory_order_acquire) &
           ((uint64_t)1 << (i % 64));
}

/* Freeze old slot I of the table in R_TABLE, then fill its two new slots,
 * then mark it migrated (Note [Map resize]). */
static int migrate(struct op *o, size_t i)
{
    if (migrated(op_root(o, R_TABLE), i))
        return 0;
    for (;;) {
        void *t = op_root(o, R_TABLE);
        void **slot = &table_slots(t)[i];
        void *b = coll_load(slot);
        if (frozen(b))
            break;
        size_t k = b ? bucket_keys(b) : 0;
        if (k == 0) {
            void *map = op_root(o, R_MAP);
            if (heapd_cas(o->m, t, slot, b,
                          coll_load(&((void **)map)[MAP_FROZEN_EMPTY])))
                break;
            continue;
        }
        size_t vb = 0;
        for (size_t e = 0; e < k; e++)
            vb += entry_vbytes(b, e);
        int rc = op_alloc(o, k, vb);
        if (rc <= 0) {
            if (rc)
                return rc;
            continue;
        }
        for (size_t e = 0; e < k; e++)
            copy_entry(o, b, e, e);
        bucket_meta(o->pre)->flags = BUCKET_FROZEN;
        if (heapd_cas(o->m, t, slot, b, o->pre)) {
            o->pre = NULL;
            break;
        }
        bucket_meta(o->pre)->flags = 0;
    }
    coll_stop_in("map.resize.frozen");
    int rc = fill(o, i);
    if (rc)
        return rc;
    void *t = op_root(o, R_TABLE);
    atomic_fetch_or_explicit(&table_meta(t)->done[i / 64],
                             (uint64_t)1 << (i % 64), memory_order_release);
    return 0;
}

/* The end of a lap: migrate whatever is not (a word of the bitmap at a
 * time), then install the next table as the map's. */
static int finish_resize(struct op *o)
{
    void *t = op_root(o, R_TABLE);
    size_t n = nrefs_of(t) - 1;
    for (size_t w = 0; w < (n + 63) / 64; w++) {
        t = op_root(o, R_TABLE);
        uint64_t all = n - 64 * w >= 64 ? ~(uint64_t)0
                                        : ((uint64_t)1 << (n - 64 * w)) - 1;
        if ((atomic_load(&table_meta(t)->done[w]) & all) == all)
            continue;
        for (size_t i = 64 * w; i < n && i < 64 * w + 64; i++) {
            int rc = migrate(o, i);
            if (rc)
                return rc;
        }
    }
    coll_stop_in("map.resize.switch");
    t = op_root(o, R_TABLE);
    void *map = op_root(o, R_MAP);
    heapd_cas(o->m, map, &((void **)map)[MAP_TABLE], t,
              coll_load(&((void **)t)[0]));
    return 0;
}

/* Migrate one chunk of the resize of table T (Note [Map resize]). */
static int help_resize(struct op *o, void *t)
{
    heapd_root_set(o->m, o->root + R_TABLE, t);
    o->pre = NULL;
    t = op_root(o, R_TABLE);
    size_t n = nrefs_of(t) - 1;
    size_t chunk = n < CHUNK ? n : CHUNK;
    uint64_t c = atomic_fetch_add(&table_meta(t)->cursor, chunk);
    size_t start = (size_t)(c % n);
    coll_stop_in("map.resize.claimed");
    for (size_t i = start; i < start + chunk; i++) {
        int rc = migrate(o, i);
        if (rc)
            return rc;
    }
    return start + chunk == n ? finish_resize(o) : 0;
}

/* After an insert: start a resize if the map holds more keys than its
 * table has slots (Note [Map resize]), and do a chunk of it. */
static int maybe_grow(struct op *o)
{
    void *map = op_root(o, R_MAP);
    void *t = coll_load(&((void **)map)[MAP_TABLE]);
    size_t n = nrefs_of(t) - 1;
    if (coll_load(&((void **)t)[0]) || n >= MAP_MAX_SLOTS ||
        atomic_load_explicit(&map_meta(map)->count, memory_order_relaxed) <= n)
        return 0;
    heapd_root_set(o->m, o->root + R_TABLE, t);
    o->pre = NULL;
    void *next = heapd_alloc_shared(o->m, 2 * n + 1, table_bytes(2 * n));
    if (!next)
        return -errno;
    struct table_meta *nm = COLL_META(struct table_meta, next, 2 * n + 1);
    nm->tag = COLL_TAG_TABLE;
    nm->has_prev = 1;
    nm->n = 2 * n;
    t = op_root(o, R_TABLE);
    if (!heapd_cas(o->m, t, &((void **)t)[0], NULL, next))
        return 0; /* another writer started it */
    coll_stop_in("map.resize.begun");
    return help_resize(o, t);
}

enum op_mode { MODE_PUT, MODE_REPLACE, MODE_DELETE };

/* One insert, replace or delete (Note [Shared map]).  The key, value and
 * map are in the op's roots; BYTES/LEN is the key of a *_str call whose
 * key object is not made yet (R_KEY NULL).  EXPECTED: MODE_REPLACE's. */
static int update(struct op *o, enum op_mode mode, unsigned flags,
                  const void *bytes, size_t len, void *expected)
{
    bool helped = false;
    for (;;) {
        void *map = op_root(o, R_MAP);
        void *key = op_root(o, R_KEY);
        struct probe p;
        if (key)
            probe_key(&p, o->kind, key);
        else
            p = (struct probe){.hash = heapd_hash_bytes(bytes, len),
                               .bytes = bytes, .len = len};
        void *t = coll_load(&((void **)map)[MAP_TABLE]);
        if (!helped && coll_load(&((void **)t)[0])) {
            helped = true; /* one chunk per operation */
            int rc = help_resize(o, t);
            if (rc)
                return rc;
            continue;
        }
        /* the slot to change: past frozen buckets, filled first */
        void **slot, *b;
        for (;;) {
            size_t n = nrefs_of(t) - 1;
            size_t i = p.hash & (n - 1);
            slot = &table_slots(t)[i];
            b = coll_load(slot);
            if (b)
                prefetch_bucket(b);
            if (!frozen(b))
                break;
            void *next = coll_load(&((void **)t)[0]);
            void *nb = coll_load(&table_slots(next)[p.hash & (2 * n - 1)]);
            if (!nb) {
                heapd_root_set(o->m, o->root + R_TABLE, t);
                o->pre = NULL;
                int rc = fill(o, i);
                if (rc)
                    return rc;
                slot = NULL;
                break;
            }
            t = next;
        }
        if (!slot)
            continue; /* fill took safepoints */
        long at = bucket_find(o->kind, b, &p);
        void *value = op_root(o, R_VALUE);
        size_t keys = b ? bucket_keys(b) : 0, want;
        switch (mode) {
        case MODE_PUT:
            if (at >= 0 && (flags & HEAPD_MAP_IF_ABSENT))
                return -EEXIST;
            if (at < 0 && (flags & HEAPD_MAP_IF_PRESENT))
                return -ENOENT;
            if (at >= 0 && !o->vinl &&
                coll_load(&((void **)b)[2 * at + 1]) == value)
                return 1;
            want = at >= 0 ? keys : keys + 1;
            break;
        case MODE_REPLACE:
            if (at < 0)
                return -ENOENT;
            if (!coll_load(&((void **)b)[2 * at + 1]))
                return client_set_error(-EINVAL, "heapd_map_replace: the "
                                        "key's value is inline bytes "
                                        "(heapd_map_put_bytes), not an "
                                        "object to compare");
            if (coll_load(&((void **)b)[2 * at + 1]) != expected)
                return -EAGAIN;
            want = keys;
            break;
        default:
            if (at < 0)
                return -ENOENT;
            want = keys - 1;
            break;
        }
        /* a *_str insert: make the key now, unless it is inline (Note
         * [Inline keys]) */
        if (at < 0 && !key && !key_inline(o->kind, p.len)) {
            o->pre = NULL;
            void *s = heapd_str_new(o->m, bytes, len);
            if (!s)
                return -errno;
            heapd_root_set(o->m, o->root + R_KEY, s);
            continue;
        }
        void *nb;
        if (want == 0) {
            nb = coll_load(&((void **)map)[MAP_EMPTY]);
        } else {
            /* the records of the entries kept, then the new one's
             * (Note [Inline values]) */
            size_t vb = o->vinl && mode != MODE_DELETE ? rec_size(o->vlen)
                                                       : 0;
            for (size_t e = 0; e < keys; e++)
                if ((long)e != at)
                    vb += entry_vbytes(b, e);
            int rc = op_alloc(o, want, vb);
            if (rc <= 0) {
                if (rc)
                    return rc;
                continue;
            }
            nb = o->pre;
            size_t j = 0;
            for (size_t e = 0; e < keys; e++) {
                if ((long)e != at) {
                    copy_entry(o, b, e, j++);
                    continue;
                }
                if (mode == MODE_DELETE)
                    continue;
                /* the new value (DESIRED for replace) */
                copy_key(o, b, e, j);
                heapd_write(o->m, nb, &((void **)nb)[2 * j + 1], value);
                if (o->vinl)
                    put_rec(o, o->vbytes, o->vlen);
                j++;
            }
            if (at < 0) {
                /* NULL for an inline key: Note [Inline keys] (a bucket
                 * built before for another entry may hold one there) */
                heapd_write(o->m, nb, &((void **)nb)[2 * j],
                            key_inline(o->kind, p.len) ? NULL : key);
                heapd_write(o->m, nb, &((void **)nb)[2 * j + 1], value);
                set_key(nb, j, &p);
                if (o->vinl)
                    put_rec(o, o->vbytes, o->vlen);
            }
        }
        coll_stop_in("map.update.built");
        if (!heapd_cas(o->m, t, slot, b, nb))
            continue;
        if (nb == o->pre)
            o->pre = NULL;
        if (mode == MODE_DELETE) {
            atomic_fetch_sub(&map_meta(map)->count, 1);
            return 0;
        }
        if (at >= 0)
            return mode == MODE_PUT; /* 1: replaced; replace's 0 */
        atomic_fetch_add(&map_meta(map)->count, 1);
        int rc = maybe_grow(o);
        return rc ? rc : 0;
    }
}

/* An inline value of a put (Note [Inline values]). */
struct inline_value {
    const void *bytes;
    size_t len;
};

/* Push the op's roots, run it, pop them.  INL: the value, kept inline
 * (VALUE NULL), or NULL. */
static int run_op(heapd_mutator *m, void *map, void *key, void *value,
                  enum op_mode mode, unsigned flags, const void *bytes,
                  size_t len, void *expected, const struct inline_value *inl)
{
    struct op o = {.m = m, .kind = map_meta(map)->kind, .vinl = inl != NULL,
                   .vbytes = inl ? inl->bytes : NULL,
                   .vlen = inl ? inl->len : 0};
    /* all at once: Note [Pushing roots without a safepoint] */
    void *refs[R_COUNT] = {[R_MAP] = map, [R_KEY] = key, [R_VALUE] = value};
    o.root = mutator_roots_push(m, refs, R_COUNT);
    if (o.root == (size_t)-1)
        return -errno;
    int rc = update(&o, mode, flags, bytes, len, expected);
    heapd_root_pop(m, R_COUNT);
    return rc;
}

static int check_map(void *map, const char *call)
{
    if (!is_map(map))
        return client_set_error(-EINVAL, "%s: MAP is not a map made by "
                                "heapd_map_new", call);
    return 0;
}

int heapd_map_put(heapd_mutator *m, void *map, void *key, void *value,
                  unsigned flags)
{
    int rc = check_map(map, "heapd_map_put");
    if (rc)
        return rc;
    if (!value)
        return client_set_error(-EINVAL, "heapd_map_put: VALUE is NULL "
                                "(heapd_map_delete removes a key)");
    if (flags & ~(HEAPD_MAP_IF_ABSENT | HEAPD_MAP_IF_PRESENT) ||
        flags == (HEAPD_MAP_IF_ABSENT | HEAPD_MAP_IF_PRESENT))
        return client_set_error(-EINVAL, "heapd_map_put: flags 0x%x: "
                                "HEAPD_MAP_IF_ABSENT or HEAPD_MAP_IF_PRESENT, "
                                "not both", flags);
    if ((rc = check_key(map_meta(map)->kind, &key, "heapd_map_put")))
        return rc;
    return run_op(m, map, key, value, MODE_PUT, flags, NULL, 0, NULL, NULL);
}

/* The checks of a put with a key of BYTES[0..LEN) in a string map. */
static int check_put_str(void *map, const void *bytes, size_t len,
                         unsigned flags, const char *call)
{
    int rc = check_map(map, call);
    if (rc)
        return rc;
    if (map_meta(map)->kind != HEAPD_MAP_STR)
        return client_set_error(-EINVAL, "%s: the map's keys are not "
                                "strings (HEAPD_MAP_STR)", call);
    if ((!bytes && len) || len > HEAPD_STR_MAX ||
        flags & ~(HEAPD_MAP_IF_ABSENT | HEAPD_MAP_IF_PRESENT) ||
        flags == (HEAPD_MAP_IF_ABSENT | HEAPD_MAP_IF_PRESENT))
        return client_set_error(-EINVAL, "%s: %s", call,
                                (!bytes && len) ? "BYTES is NULL"
                                : len > HEAPD_STR_MAX ? "the key is longer "
                                                        "than HEAPD_STR_MAX"
                                                      : "bad flags");
    return 0;
}

int heapd_map_put_str(heapd_mutator *m, void *map, const void *bytes,
                      size_t len, void *value, unsigned flags)
{
    int rc = check_put_str(map, bytes, len, flags, "heapd_map_put_str");
    if (rc)
        return rc;
    if (!value)
        return client_set_error(-EINVAL, "heapd_map_put_str: VALUE is "
                                "NULL (heapd_map_delete_str removes a key)");
    return run_op(m, map, NULL, value, MODE_PUT, flags, bytes, len, NULL,
                  NULL);
}

int heapd_map_put_bytes(heapd_mutator *m, void *map, const void *key,
                        size_t klen, const void *value, size_t vlen,
                        unsigned flags)
{
    int rc = check_put_str(map, key, klen, flags, "heapd_map_put_bytes");
    if (rc)
        return rc;
    if (!value && vlen)
        return client_set_error(-EINVAL, "heapd_map_put_bytes: VALUE is "
                                "NULL");
    if (vlen > HEAPD_MAP_INLINE_MAX)
        return client_set_error(-E2BIG, "heapd_map_put_bytes: a value of "
                                "%zu bytes: at most HEAPD_MAP_INLINE_MAX "
                                "(%d) are kept inline; store a string "
                                "with heapd_map_put_str", vlen,
                                HEAPD_MAP_INLINE_MAX);
    struct inline_value inl = {value, vlen};
    return run_op(m, map, NULL, NULL, MODE_PUT, flags, key, klen, NULL,
                  &inl);
}

int heapd_map_replace(heapd_mutator *m, void *map, void *key,
                      void *expected, void *desired)
{
    int rc = check_map(map, "heapd_map_replace");
    if (rc)
        return rc;
    if (!expected || !desired)
        return client_set_error(-EINVAL, "heapd_map_replace: EXPECTED and "
                                "DESIRED are values, not NULL");
    if ((rc = check_key(map_meta(map)->kind, &key, "heapd_map_replace")))
        return rc;
    /* EXPECTED needs no root: it is only compared, never stored */
    return run_op(m, map, key, desired, MODE_REPLACE, 0, NULL, 0, expected,
                  NULL);
}

int heapd_map_delete(heapd_mutator *m, void *map, const void *key)
{
    int rc = check_map(map, "heapd_map_delete");
    if (rc)
        return rc;
    void *k = (void *)key;
    if ((rc = check_key(map_meta(map)->kind, &k, "heapd_map_delete")))
        return rc;
    return run_op(m, map, k, NULL, MODE_DELETE, 0, NULL, 0, NULL, NULL);
}

int heapd_map_delete_str(heapd_mutator *m, void *map, const void *bytes,
                         size_t len)
{
    int rc = check_map(map, "heapd_map_delete_str");
    if (rc)
        return rc;
    if (map_meta(map)->kind == HEAPD_MAP_IDENTITY || (!bytes && len))
        return client_set_error(-EINVAL, "heapd_map_delete_str: %s",
                                (!bytes && len) ? "BYTES is NULL"
                                                : "an IDENTITY map has no "
                                                  "keys by bytes");
    /* delete never makes the key: R_KEY stays NULL */
    return run_op(m, map, NULL, NULL, MODE_DELETE, 0, bytes, len, NULL,
                  NULL);
}

/* ---- making one ---- */

static void *new_bucket0(heapd_mutator *m, uint32_t flags)
{
    void *b = heapd_alloc_shared(m, 0, sizeof(struct bucket_meta));
    if (b) {
        struct bucket_meta *bm = COLL_META(struct bucket_meta, b, 0);
        bm->tag = COLL_TAG_BUCKET;
        bm->flags = flags;
    }
    return b;
}

void *heapd_map_new(heapd_mutator *m, unsigned kind, size_t capacity)
{
    if (kind > HEAPD_MAP_IDENTITY) {
        client_set_error(-EINVAL, "heapd_map_new: unknown kind %u: "
                         "HEAPD_MAP_STR, HEAPD_MAP_BYTES or "
                         "HEAPD_MAP_IDENTITY", kind);
        errno = EINVAL;
        return NULL;
    }
    uint64_t n = MAP_MIN_SLOTS;
    while (n < capacity && n < MAP_MAX_SLOTS)
        n *= 2;
    void *map = heapd_alloc_shared(m, MAP_NREFS, sizeof(struct map_meta));
    if (!map)
        return NULL;
    struct map_meta *mm = map_meta(map);
    mm->tag = COLL_TAG_MAP;
    mm->kind = kind;
    size_t root = heapd_root_push(m, map);
    if (root == (size_t)-1)
        return NULL;
    void *out = NULL;
    void *t = heapd_alloc_shared(m, n + 1, table_bytes(n));
    if (!t)
        goto out;
    struct table_meta *tm = COLL_META(struct table_meta, t, n + 1);
    tm->tag = COLL_TAG_TABLE;
    tm->n = n;
    map = heapd_root_get(m, root);
    heapd_write(m, map, &((void **)map)[MAP_TABLE], t);
    void *b = new_bucket0(m, 0);
    if (!b)
        goto out;
    map = heapd_root_get(m, root);
    heapd_write(m, map, &((void **)map)[MAP_EMPTY], b);
    if (!(b = new_bucket0(m, BUCKET_FROZEN)))
        goto out;
    map = heapd_root_get(m, root);
    heapd_write(m, map, &((void **)map)[MAP_FROZEN_EMPTY], b);
    out = map;
out:
    {
        int e = errno;
        heapd_root_pop(m, 1);
        errno = e;
    }
    return out;
}

/* ---- iteration ---- */

/* An iteration's root slots, from heapd_map_iter.root. */
enum { IT_TABLE, IT_BUCKET, IT_KEY, IT_VALUE, IT_COUNT };
_Static_assert((int)IT_COUNT == (int)R_COUNT,
               "an iteration keeps the op's roots");

int heapd_map_iter_begin(heapd_mutator *m, void *map, heapd_map_iter *it)
{
    int rc = check_map(map, "heapd_map_iter_begin");
    if (rc)
        return rc;
    /* finish a resize under way: then every frozen slot the iteration
     * meets was frozen after it began, and holds what the slot held then
     * (Note [Map iteration]) */
    struct op o = {.m = m, .kind = map_meta(map)->kind};
    void *refs[R_COUNT] = {[R_MAP] = map};
    o.root = mutator_roots_push(m, refs, R_COUNT);
    if (o.root == (size_t)-1)
        return -errno;
    for (;;) {
        void *t = coll_load(&((void **)op_root(&o, R_MAP))[MAP_TABLE]);
        if (!coll_load(&((void **)t)[0]))
            break;
        if ((rc = help_resize(&o, t)))
            goto out;
    }
    /* the four iteration roots are the op's: the table, the bucket, a
     * key made for an inline one (Note [Inline keys]), a value made for
     * an inline one (Note [Inline values]) */
    map = op_root(&o, R_MAP);
    heapd_root_set(m, o.root + IT_TABLE,
                   coll_load(&((void **)map)[MAP_TABLE]));
    heapd_root_set(m, o.root + IT_BUCKET, NULL);
    heapd_root_set(m, o.root + IT_KEY, NULL);
    heapd_root_set(m, o.root + IT_VALUE, NULL);
    void *t = heapd_root_get(m, o.root + IT_TABLE);
    *it = (heapd_map_iter){.m = m, .root = o.root, .bucket = 0, .pos = 0,
                           .nbuckets = nrefs_of(t) - 1};
    return 0;
out:
    heapd_root_pop(m, heapd_root_depth(m) - o.root);
    return rc;
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
            void *k = coll_load(&((void **)b)[2 * it->pos]);
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
            void *v = coll_load(&((void **)b)[2 * it->pos + 1]);
            if (!v) { /* Note [Inline values]: a string of its bytes */
                const struct value_rec *r = entry_rec(b, it->pos);
                v = heapd_str_new(it->m, r ? r->bytes : NULL,
                                  r ? r->len : 0);
                if (!v)
                    return false; /* errno set */
                heapd_root_set(it->m, it->root + IT_VALUE, v);
                /* read again after the safepoint, as above */
                b = heapd_root_get(it->m, it->root + IT_BUCKET);
                k = coll_load(&((void **)b)[2 * it->pos]);
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
        for (size_t e = 0; e < k; e++)
            vb += entry_vbytes(b, e);
        if (vb != bucket_vbytes(b))
            return client_set_error(-EUCLEAN, "map %p: slot %zu: its "
                                    "bucket has %zu bytes of value records "
                                    "and %zu bytes for them", map, i, vb,
                                    bucket_vbytes(b));
        for (size_t e = 0; e < k; e++) {
            void *key = coll_load(&((void **)b)[2 * e]);
            void *val = coll_load(&((void **)b)[2 * e + 1]);
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

int heapd_map_footprint(heapd_mutator *m, const void *obj,
                        heapd_map_footprint_t *out)
{
    void *map = (void *)obj;
    if (!out || !is_map(map))
        return client_set_error(-EINVAL, "heapd_map_footprint: %s",
                                out ? "not a map" : "OUT is NULL");
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
            void *key = coll_load(&((void **)b)[2 * e]);
            void *val = coll_load(&((void **)b)[2 * e + 1]);
            if (key)
                count_object(m, key, &f.key_bytes, &f);
            if (val)
                count_object(m, val, &f.value_bytes, &f);
            f.keys++;
        }
    }
    *out = f;
    return 0;
}
