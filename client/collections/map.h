/* The shared map's objects and its lookup path, which map.c (the
 * operations) and map_check.c (the invariant checker and the footprint)
 * read alike.  Private to client/collections/. */
#ifndef HEAPD_COLL_MAP_H
#define HEAPD_COLL_MAP_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "clock.h"
#include "coll.h"
#include "layout.h"

/* ---- the objects ---- */

enum { MAP_TABLE, MAP_EMPTY, MAP_FROZEN_EMPTY, MAP_NREFS };

/* the map's head: proto/collections.h (Note [Collections seen by the
 * daemon]) */
_Static_assert(MAP_NREFS == COLL_MAP_NREFS &&
                   COLL_MAP_KINDS == HEAPD_MAP_IDENTITY + 1,
               "the map's shape is proto/collections.h's");

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
#define BUCKET_WORDS 0x2u /* a word a key after keys[]: Note [Map expiry] */
#define BUCKET_NKEYS_SHIFT 8 /* a bucket without references: its keys */
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

static inline struct coll_map_head *map_meta(void *map)
{
    return COLL_META(struct coll_map_head, map, MAP_NREFS);
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

/* Note [Buckets without references]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A bucket whose every entry has an inline key (Note [Inline keys]) and
 * an inline value (Note [Inline values]) has no reference field: every
 * one would be NULL.  Its header says 0 references, and its flags, from
 * bit BUCKET_NKEYS_SHIFT, how many keys it holds; its entries' key and
 * value references read as NULL (entry_key, entry_value).  Any other
 * bucket has two references per key, and its flags hold no count.  A
 * count that reaches past the bucket's bytes is damage: its keys stop
 * at the bytes (heapd_map_verify says so).  The shared cache's buckets
 * (16-byte keys, 100-byte values) held 16 of a one-key bucket's 176
 * bytes in two NULL references: without them its live data is 15.1 MiB,
 * not 16.6, and the heap's goal with it.
 */
/* The bytes a key takes in bucket B's head: its record and, in a map
 * that has them, its word (Note [Map expiry]). */
static inline size_t key_stride(const void *b)
{
    return sizeof(struct bucket_key) +
           (bucket_meta((void *)b)->flags & BUCKET_WORDS ? sizeof(uint64_t)
                                                         : 0);
}

static inline size_t bucket_keys(const void *b)
{
    size_t n = nrefs_of(b);
    if (n)
        return n / 2;
    const struct bucket_meta *bm = b;
    uint64_t h = __atomic_load_n((const uint64_t *)b - 1, __ATOMIC_RELAXED);
    size_t nb = layout_header_nbytes(h), k = bm->flags >> BUCKET_NKEYS_SHIFT;
    size_t room = nb > sizeof *bm ? nb - sizeof *bm : 0;
    /* two divisions by constants, not one by a variable: a lookup
     * counts a bucket's keys several times */
    size_t most = bm->flags & BUCKET_WORDS
                      ? room / (sizeof(struct bucket_key) + sizeof(uint64_t))
                      : room / sizeof(struct bucket_key);
    return k < most ? k : most;
}

/* Entry E of bucket B's key reference (NULL: inline) and its value's
 * (NULL: inline), NULL both in a bucket without references (Note
 * [Buckets without references]). */
static inline void *entry_key(void *b, size_t e)
{
    return nrefs_of(b) ? coll_load(&((void **)b)[2 * e]) : NULL;
}

static inline void *entry_value(void *b, size_t e)
{
    return nrefs_of(b) ? coll_load(&((void **)b)[2 * e + 1]) : NULL;
}

/* Does entry E of bucket B need references: a key or a value object? */
static inline bool entry_has_refs(void *b, size_t e)
{
    return entry_key(b, e) || entry_value(b, e);
}

/* The bytes of bucket B's value records (Note [Inline values]). */
static inline size_t bucket_vbytes(const void *b)
{
    uint64_t h = __atomic_load_n((const uint64_t *)b - 1, __ATOMIC_RELAXED);
    size_t head = sizeof(struct bucket_meta) +
                  bucket_keys(b) * key_stride(b);
    size_t nb = layout_header_nbytes(h);
    return nb > head ? nb - head : 0;
}

static inline uint8_t *bucket_recs(void *b)
{
    return (uint8_t *)&bucket_meta(b)->keys[0] + bucket_keys(b) *
                                                    key_stride(b);
}

/* Bucket B's words, one a key (Note [Map expiry]), or NULL if it has
 * none. */
static inline _Atomic uint64_t *bucket_words(void *b)
{
    if (!(bucket_meta(b)->flags & BUCKET_WORDS))
        return NULL;
    return (_Atomic uint64_t *)&bucket_meta(b)->keys[bucket_keys(b)];
}

/* An entry's word: bit 63 set by a lookup (Note [Map budget]), the rest
 * its deadline in ms of CLOCK_MONOTONIC, 0 for none. */
#define WORD_REF ((uint64_t)1 << 63)
#define WORD_DUE (WORD_REF - 1)

static inline uint64_t now_ms(void)
{
    return monotonic_ns() / 1000000u;
}

/* Has entry E of bucket B (of words W, NULL: none) expired at NOW? */
static inline bool entry_expired(_Atomic uint64_t *w, size_t e, uint64_t now)
{
    if (!w)
        return false;
    uint64_t due = atomic_load_explicit(&w[e], memory_order_relaxed) &
                   WORD_DUE;
    return due && due <= now;
}

/* The record of entry E of bucket B, whose value reference is NULL, or
 * NULL if the records are damaged (Note [Inline values]). */
static inline const struct value_rec *entry_rec(void *b, size_t e)
{
    size_t at = 0, end = bucket_vbytes(b);
    const uint8_t *r = bucket_recs(b);
    void **refs = nrefs_of(b) ? b : NULL;
    for (size_t j = 0;; j++) {
        if (j < e && refs && coll_load(&refs[2 * j + 1]))
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
        layout_header_nbytes(h) != sizeof(struct coll_map_head))
        return false;
    const struct coll_map_head *mm = map_meta((void *)obj);
    return mm->tag == COLL_TAG_MAP && mm->kind <= HEAPD_MAP_IDENTITY;
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
static inline void probe_key(struct probe *p, unsigned kind, void *key)
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
    if (!stored)
        return false; /* a long key with no object: damage (verify) */
    const void *b;
    size_t n;
    key_bytes(kind, stored, &b, &n);
    return n == p->len && memcmp(b, p->bytes, n) == 0;
}

/* Index of P's key in bucket B, or -1. */
static inline long bucket_find(unsigned kind, void *b, const struct probe *p)
{
    if (!b)
        return -1;
    size_t k = bucket_keys(b);
    const struct bucket_meta *bm = bucket_meta(b);
    void **refs = nrefs_of(b) ? b : NULL; /* read once: the lookup path */
    for (size_t i = 0; i < k; i++)
        if (key_matches(kind, p, &bm->keys[i],
                        refs ? coll_load(&refs[2 * i]) : NULL))
            return (long)i;
    return -1;
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
static inline void probe_entry(struct probe *p, unsigned kind, void *b, size_t e,
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

/* ---- the lookup path ---- */

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
static inline void *lookup_bucket(void *map, uint64_t hash)
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

/* The record bytes entry E of bucket B takes in a copy (Note [Inline
 * values]); a damaged record is copied empty. */
static inline size_t entry_vbytes(void *b, size_t e)
{
    if (entry_value(b, e))
        return 0;
    const struct value_rec *r = entry_rec(b, e);
    return rec_size(r ? r->len : 0);
}

/* Has old slot I of table T been migrated (Note [Map resize])? */
static inline bool migrated(void *t, size_t i)
{
    return atomic_load_explicit(&table_meta(t)->done[i / 64],
                                memory_order_acquire) &
           ((uint64_t)1 << (i % 64));
}

/* Push MAP_OP_ROOTS root slots for M, the first holding MAP, once any
 * resize of MAP under way is finished (Note [Map resize]): 0 with the
 * first slot in *ROOT, or a negative errno and nothing pushed.
 * Safepoints.  For the iteration (map_iter.c). */
#define MAP_OP_ROOTS 4
int map_push_finished(heapd_mutator *m, void *map, size_t *root);

#endif
