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
 * value_i NULL for a value kept in `values`: Note [Inline values]; no
 * refs at all when every one would be NULL, the count of keys in flags:
 * Note [Buckets without references] in map.h)
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
 * update: 16 + 48 k bytes for k keys (16 + 32 k without references),
 * and the records of inline values,
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
 *   - a value a consumer popped: it was delivered to that consumer; one
 *     it leased goes back to the queue once heapd sees the consumer die
 *     (Note [Leased delivery] in client/collections/queue.c).
 * tests/test_collections_kill.c stops processes at each of these points (the
 * HEAPD_COLL_STOP_IN hook) and SIGKILLs them there.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "map.h"

bool heapd_is_map(const void *obj)
{
    return is_map(obj);
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

/* P's entry: its bucket in *B and its index, or -1. */
/* Inlined in each lookup: once it checked a cache map's words gcc made it
 * a call, and the shared cache's 1-worker lookups went from 2.51-2.83 M/s
 * to 2.46-2.65; inlined, 2.52-2.57 against 2.52-2.59 for the build
 * before (3 runs each, interleaved). */
__attribute__((always_inline)) static inline long
lookup_entry(void *map, const struct probe *p, void **b)
{
    *b = lookup_bucket(map, p->hash);
    struct coll_map_head *mm = map_meta(map);
    long i = bucket_find(mm->kind, *b, p);
    /* the map's flags, in the line is_map read: a plain map's lookup
     * reads nothing more */
    _Atomic uint64_t *w = i >= 0 && (mm->flags & COLL_MAP_WORDS)
                              ? bucket_words(*b)
                              : NULL;
    if (w) { /* Note [Map expiry], Note [Map budget] */
        uint64_t x = atomic_load_explicit(&w[i], memory_order_relaxed);
        if ((x & WORD_DUE) && (x & WORD_DUE) <= now_ms())
            return -1;
        if (!(x & WORD_REF) && mm->budget)
            atomic_store_explicit(&w[i], x | WORD_REF, memory_order_relaxed);
    }
    return i;
}

/* P's value object, or NULL: absent, or (errno EINVAL) inline. */
static void *lookup(void *map, const struct probe *p, const char *call)
{
    void *b;
    long i = lookup_entry(map, p, &b);
    if (i < 0)
        return NULL;
    void *v = entry_value(b, (size_t)i);
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
    void *v = entry_value(b, (size_t)i);
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
_Static_assert(R_MAP == 0 && R_COUNT == MAP_OP_ROOTS,
               "map_push_finished's slots are an op's");

struct op {
    heapd_mutator *m;
    size_t root;
    unsigned kind;
    void *pre;
    size_t pre_keys;
    bool pre_refs;              /* two references a key, or none (Note
                                   [Buckets without references]) */
    size_t pre_vbytes;          /* its value records' bytes */
    size_t pre_at;              /* the next record's offset in them */
    bool vinl;                  /* the value is VBYTES[0..VLEN), inline */
    const void *vbytes;
    size_t vlen;
    bool words;                 /* the map's buckets hold words (Note [Map
                                   expiry]) */
    uint64_t due;               /* a put's deadline (ms), 0: none */
    uint64_t fresh;             /* WORD_REF in a map with a budget: what
                                   a write puts is spared one turn */
    int64_t used;               /* bytes this op added (Note [Map
                                   budget]) */
};

static inline void *op_root(struct op *o, unsigned r)
{
    return heapd_root_get(o->m, o->root + r);
}

/* A fresh bucket for K keys and VB bytes of value records in o->pre
 * (K > 0), with two references a key if REFS, else none (Note [Buckets
 * without references]), unless o->pre is one.  A safepoint if it
 * allocates: returns 0 and the caller starts its step over (re-reading
 * what it had), or a negative errno; 1 if o->pre will do, its records to
 * be written from the start. */
static int op_alloc(struct op *o, size_t k, size_t vb, bool refs)
{
    refs |= k > UINT32_MAX >> BUCKET_NKEYS_SHIFT; /* past what flags count */
    if (o->pre && o->pre_keys == k && o->pre_vbytes == vb &&
        o->pre_refs == refs) {
        o->pre_at = 0;
        return 1;
    }
    o->pre = NULL;
    if (k > BUCKET_MAX_KEYS)
        return client_set_error(-E2BIG, "a map bucket would hold more than "
                                "%zu keys: too many keys share one hash",
                                BUCKET_MAX_KEYS);
    size_t nrefs = refs ? 2 * k : 0;
    size_t stride = sizeof(struct bucket_key) +
                    (o->words ? sizeof(uint64_t) : 0);
    void *b = heapd_alloc_shared(o->m, nrefs,
                                 sizeof(struct bucket_meta) + k * stride +
                                     vb);
    if (!b)
        return -errno;
    struct bucket_meta *bm = COLL_META(struct bucket_meta, b, nrefs);
    bm->tag = COLL_TAG_BUCKET;
    bm->flags = (refs ? 0 : (uint32_t)k << BUCKET_NKEYS_SHIFT) |
                (o->words ? BUCKET_WORDS : 0);
    o->pre = b;
    o->pre_keys = k;
    o->pre_vbytes = vb;
    o->pre_refs = refs;
    return 0;
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

/* Copy entry I of bucket FROM's key (and its word) into entry J of
 * o->pre. */
static inline void copy_key(struct op *o, void *from, size_t i, size_t j)
{
    void **dst = o->pre;
    if (o->pre_refs)
        heapd_write(o->m, dst, &dst[2 * j], entry_key(from, i));
    bucket_meta(dst)->keys[j] = bucket_meta(from)->keys[i];
    _Atomic uint64_t *fw = bucket_words(from), *dw = bucket_words(dst);
    if (dw)
        atomic_store_explicit(&dw[j], fw ? atomic_load(&fw[i]) : 0,
                              memory_order_relaxed);
}

/* Set entry J of o->pre's word to WORD (Note [Map expiry]). */
static inline void set_word(struct op *o, size_t j, uint64_t word)
{
    _Atomic uint64_t *w = bucket_words(o->pre);
    if (w)
        atomic_store_explicit(&w[j], word, memory_order_relaxed);
}

/* Copy entry I of bucket FROM into entry J of o->pre, with its value's
 * record if it is inline.  Entries are copied in order: the records
 * follow them. */
static inline void copy_entry(struct op *o, void *from, size_t i, size_t j)
{
    void **dst = o->pre;
    copy_key(o, from, i, j);
    void *v = entry_value(from, i);
    /* always written: a reused o->pre holds an earlier attempt's */
    if (o->pre_refs)
        heapd_write(o->m, dst, &dst[2 * j + 1], v);
    if (!v) {
        const struct value_rec *r = entry_rec(from, i);
        put_rec(o, r ? r->bytes : NULL, r ? r->len : 0);
    }
}

/* What bucket B and the objects its entries hold take, in blocks (Note
 * [Map budget]); 0 for none or a shared empty bucket. */
static uint64_t bucket_cost(heapd_mutator *m, void *b)
{
    size_t k = b ? bucket_keys(b) : 0;
    if (k == 0)
        return 0;
    uint64_t c = client_block_bytes(m, b);
    for (size_t e = 0; e < k; e++) {
        void *key = entry_key(b, e), *v = entry_value(b, e);
        c += (key ? client_block_bytes(m, key) : 0) +
             (v ? client_block_bytes(m, v) : 0);
    }
    return c;
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
        bool refs = false;
        const struct bucket_meta *fm = bucket_meta(fb);
        for (size_t e = 0; e < keys; e++)
            if (((fm->keys[e].hash & n) != 0) == half) {
                k++;
                vb += entry_vbytes(fb, e);
                refs |= entry_has_refs(fb, e);
            }
        if (k == 0) {
            void *map = op_root(o, R_MAP);
            heapd_cas(o->m, next, slot, NULL,
                      coll_load(&((void **)map)[MAP_EMPTY]));
            continue;
        }
        int rc = op_alloc(o, k, vb, refs);
        if (rc <= 0) {
            if (rc)
                return rc;
            continue; /* a safepoint: read everything again */
        }
        size_t j = 0;
        for (size_t e = 0; e < keys; e++)
            if (((fm->keys[e].hash & n) != 0) == half)
                copy_entry(o, fb, e, j++);
        if (heapd_cas(o->m, next, slot, NULL, o->pre)) {
            if (o->words) /* Note [Map budget]: a half comes */
                atomic_fetch_add(&map_meta(op_root(o, R_MAP))->used,
                                 bucket_cost(o->m, o->pre));
            o->pre = NULL;
        }
    }
    return 0;
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
        int rc = op_alloc(o, k, vb, nrefs_of(b) != 0);
        if (rc <= 0) {
            if (rc)
                return rc;
            continue;
        }
        for (size_t e = 0; e < k; e++)
            copy_entry(o, b, e, e);
        bucket_meta(o->pre)->flags |= BUCKET_FROZEN;
        if (heapd_cas(o->m, t, slot, b, o->pre)) {
            if (o->words) /* Note [Map budget]: the bucket goes */
                atomic_fetch_sub(&map_meta(op_root(o, R_MAP))->used,
                                 bucket_cost(o->m, b));
            o->pre = NULL;
            break;
        }
        bucket_meta(o->pre)->flags &= ~BUCKET_FROZEN;
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
    if (heapd_cas(o->m, map, &((void **)map)[MAP_TABLE], t,
                  coll_load(&((void **)t)[0])) &&
        o->words) /* Note [Map budget]: the old table goes */
        atomic_fetch_sub(&map_meta(map)->used, client_block_bytes(o->m, t));
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
    if (o->words) /* Note [Map budget] */
        atomic_fetch_add(&map_meta(op_root(o, R_MAP))->used,
                         client_block_bytes(o->m, next));
    coll_stop_in("map.resize.begun");
    return help_resize(o, t);
}

/* Note [Map expiry]
 * ~~~~~~~~~~~~~~~~~~
 * A map made with HEAPD_MAP_EXPIRY or a budget (heapd_map_new_opts) has
 * a word per key in its buckets, after the keys' records: the entry's
 * deadline, in ms of CLOCK_MONOTONIC (one clock for every process of the
 * machine), 0 for none, and the bit a lookup sets (Note [Map budget]).
 * An entry whose deadline has passed is absent at once: lookups and
 * iteration skip it, a write treats its key as absent.  Its memory comes
 * back when a write removes it, as any deleted entry's, at the next
 * cycle after: a write copies a bucket without its expired entries (an
 * update of the bucket, for free), and every write to the map sweeps
 * SWEEP_SLOTS more slots at the map's hand, removing what expired there,
 * so a map that is written to removes its expired entries without any
 * program scanning it; heapd_map_expire sweeps a map nobody writes.  The
 * expired entries a map still holds count in heapd_map_count until they
 * are removed, and in `expirations` once they are.  The word costs 8
 * bytes a key only in such maps (the shared cache's buckets, one key of
 * 16 bytes and a value of 100, 176 bytes: 184 with it).
 *
 * Note [Map budget]
 * ~~~~~~~~~~~~~~~~~~
 * A map with a budget counts, in `used`, the bytes of its blocks as
 * heapd_map_footprint does: at each swap, the new bucket's blocks and
 * objects less the old one's (bucket_cost), and each table as it comes
 * and goes.  A write that leaves it over the budget evicts, from the
 * map's hand on (CLOCK, "second chance"): an entry whose word has the
 * lookup bit loses the bit, one without it is removed (and an expired
 * one always), until `used` is within the budget, for at most
 * EVICT_SLOTS slots a write (what is left is the next write's: a write
 * never costs the whole table), and not while a resize runs.  A lookup
 * sets the bit with a plain store, only if it is clear, never a
 * compare-and-swap: the word's deadline never changes in a bucket, so a
 * store of the bit and the sweep's store of the word without it leave
 * one of the two; what a write puts starts with the bit.  So an insert
 * never fails for the budget: the map sheds its least recently used
 * entries instead, counted in `evictions`.  The budget may be passed by
 * what one write adds before it evicts, by each writer at once, by what
 * a resize holds twice while it runs, and after a write that found
 * EVICT_SLOTS slots of entries looked up since the hand last passed;
 * `used` may drift by a process killed between a swap and its count.
 */
#define SWEEP_SLOTS 2u
#define EVICT_SLOTS 256u

/* Sweep the slot of the map's hand, and move the hand on (Note [Map
 * expiry]): remove the slot's expired entries, and if EVICT those whose
 * lookup bit is clear, clearing the others' (Note [Map budget]).  The
 * slots of a map in a resize are left alone.  0, or a negative errno. */
static int sweep_slot(struct op *o, bool evict)
{
    void *map = op_root(o, R_MAP);
    uint64_t hand = atomic_fetch_add(&map_meta(map)->hand, 1);
    uint64_t spared = 0; /* entries whose bit this visit cleared */
    bool looked = false;
    for (;;) {
        map = op_root(o, R_MAP);
        void *t = coll_load(&((void **)map)[MAP_TABLE]);
        if (coll_load(&((void **)t)[0]))
            return 0;
        size_t n = nrefs_of(t) - 1;
        void **slot = &table_slots(t)[hand % n];
        void *b = coll_load(slot);
        _Atomic uint64_t *w = b && !frozen(b) ? bucket_words(b) : NULL;
        if (!w)
            return 0;
        size_t keys = bucket_keys(b), drop = 0, exp = 0, vb = 0;
        uint64_t now = now_ms(), gone = 0;
        bool refs = false;
        for (size_t e = 0; e < keys && e < 64; e++) {
            uint64_t x = atomic_load_explicit(&w[e], memory_order_relaxed);
            if (entry_expired(w, e, now)) {
                exp++;
            } else if (!evict || spared >> e & 1) {
                continue;
            } else if (x & WORD_REF) {
                if (!looked) { /* a second chance, once a visit */
                    atomic_store_explicit(&w[e], x & ~WORD_REF,
                                          memory_order_relaxed);
                    spared |= (uint64_t)1 << e;
                }
                continue;
            }
            gone |= (uint64_t)1 << e;
            drop++;
        }
        looked = true;
        if (drop == 0)
            return 0;
        for (size_t e = 0; e < keys; e++)
            if (!(e < 64 && gone >> e & 1)) {
                vb += entry_vbytes(b, e);
                refs |= entry_has_refs(b, e);
            }
        void *nb;
        if (drop == keys) {
            nb = coll_load(&((void **)map)[MAP_EMPTY]);
        } else {
            int rc = op_alloc(o, keys - drop, vb, refs);
            if (rc < 0)
                return rc;
            if (rc == 0)
                continue; /* a safepoint: look again */
            size_t j = 0;
            for (size_t e = 0; e < keys; e++)
                if (!(e < 64 && gone >> e & 1))
                    copy_entry(o, b, e, j++);
            nb = o->pre;
        }
        if (!heapd_cas(o->m, t, slot, b, nb))
            return 0; /* changed meanwhile: the next visit */
        if (nb == o->pre)
            o->pre = NULL;
        struct coll_map_head *mm = map_meta(map);
        atomic_fetch_sub(&mm->count, drop);
        atomic_fetch_add(&mm->expirations, exp);
        atomic_fetch_add(&mm->evictions, drop - exp);
        atomic_fetch_add(&mm->used,
                         bucket_cost(o->m, nb) - bucket_cost(o->m, b));
        return 0;
    }
}

/* After a write to a map with words: sweep SWEEP_SLOTS slots, then evict
 * while it is over its budget, at most EVICT_SLOTS slots, and none while
 * a resize runs (sweep_slot leaves its slots alone) (Note [Map expiry],
 * Note [Map budget]).  Best effort: the write is done, and what is left
 * is the next write's. */
static void tend(struct op *o)
{
    if (!o->words)
        return;
    for (unsigned i = 0; i < SWEEP_SLOTS; i++)
        if (sweep_slot(o, false) < 0)
            return;
    for (unsigned i = 0; i < EVICT_SLOTS; i++) {
        void *map = op_root(o, R_MAP);
        struct coll_map_head *mm = map_meta(map);
        void *t = coll_load(&((void **)map)[MAP_TABLE]);
        if (!mm->budget || atomic_load(&mm->used) <= mm->budget ||
            coll_load(&((void **)t)[0]))
            return;
        if (sweep_slot(o, true) < 0)
            return;
    }
}

enum op_mode { MODE_PUT, MODE_REPLACE, MODE_DELETE, MODE_ADD,
               MODE_GET_OR_PUT };

/* What MODE_ADD and MODE_GET_OR_PUT take and give besides the key and the
 * value: the delta, the counter's new value, the value found. */
struct op_io {
    int64_t delta;
    int64_t sum;
    void *found;
};

/* Note [Counters]
 * ~~~~~~~~~~~~~~~~
 * A counter is a key whose value is 8 bytes kept inline (Note [Inline
 * values]), an int64_t in the machine's byte order: heapd_map_add makes
 * one, heapd_map_put_bytes of 8 bytes too, and heapd_map_get_bytes reads
 * it.  An add is an update as any other: it reads the counter in the
 * key's bucket, builds the bucket's copy with the sum and installs it by
 * the one compare-and-swap of the slot; a swap that fails (another
 * update of the bucket came first) reads the counter again.  So an add
 * takes effect exactly once, at its swap, a process killed before it
 * added nothing, and no process can lose another's add (Note [Collections
 * survive a kill]).  Adding in place, with an atomic add on the counter's
 * bytes, would lose the adds made to a bucket between the moment another
 * update copied it and its swap; the price of the copy is an allocation
 * of the bucket per add, garbage at the next one.  Measured (release
 * build, 10^6 adds a process): one process adds 6.7 M times a second to
 * one key (148 ns an add), four on two cores 3.2 M in all to one key and
 * 4.3 M over 1,000 keys.  A delta of 0 on a counter that exists reads it
 * and writes nothing.
 */

/* Entry AT of bucket B as a counter (Note [Counters]): 0 with its value in
 * *OUT, or -EINVAL (another kind of value) / -EUCLEAN (damaged records). */
static int entry_counter(void *b, size_t at, int64_t *out)
{
    if (entry_value(b, at))
        return client_set_error(-EINVAL, "heapd_map_add: the key's value "
                                "is an object, not a counter (8 bytes kept "
                                "inline)");
    const struct value_rec *r = entry_rec(b, at);
    if (!r)
        return client_set_error(-EUCLEAN, "heapd_map_add: the bucket of "
                                "the key holds damaged value records "
                                "(heapd_map_verify)");
    if (r->len != sizeof *out)
        return client_set_error(-EINVAL, "heapd_map_add: the key's value "
                                "is %u inline bytes, not a counter (8)",
                                r->len);
    memcpy(out, r->bytes, sizeof *out);
    return 0;
}

/* One insert, replace, delete, add or get-or-put (Note [Shared map]).
 * The key, value and map are in the op's roots; BYTES/LEN is the key of a
 * *_str call whose key object is not made yet (R_KEY NULL).  EXPECTED:
 * MODE_REPLACE's; IO: MODE_ADD's and MODE_GET_OR_PUT's. */
static int update(struct op *o, enum op_mode mode, unsigned flags,
                  const void *bytes, size_t len, void *expected,
                  struct op_io *io)
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
        /* Note [Map expiry]: an expired entry is absent, and the copy
         * leaves it out */
        _Atomic uint64_t *w = o->words && b ? bucket_words(b) : NULL;
        uint64_t now = w ? now_ms() : 0;
        size_t expired = 0;
        for (size_t e = 0; w && e < keys; e++)
            expired += entry_expired(w, e, now);
        if (at >= 0 && entry_expired(w, (size_t)at, now))
            at = -1;
        size_t live = keys - expired;
        switch (mode) {
        case MODE_PUT:
            if (at >= 0 && (flags & HEAPD_MAP_IF_ABSENT))
                return -EEXIST;
            if (at < 0 && (flags & HEAPD_MAP_IF_PRESENT))
                return -ENOENT;
            if (at >= 0 && !o->vinl && !o->words &&
                entry_value(b, (size_t)at) == value)
                return 1;
            want = at >= 0 ? live : live + 1;
            break;
        case MODE_REPLACE:
            if (at < 0)
                return -ENOENT;
            if (!entry_value(b, (size_t)at))
                return client_set_error(-EINVAL, "heapd_map_replace: the "
                                        "key's value is inline bytes "
                                        "(heapd_map_put_bytes), not an "
                                        "object to compare");
            if (entry_value(b, (size_t)at) != expected)
                return -EAGAIN;
            want = live;
            break;
        case MODE_ADD: { /* Note [Counters] */
            int64_t cur = 0;
            if (at >= 0) {
                int rc = entry_counter(b, (size_t)at, &cur);
                if (rc)
                    return rc;
                if (io->delta == 0) {
                    io->sum = cur;
                    return 1;
                }
            }
            if (__builtin_add_overflow(cur, io->delta, &io->sum))
                return client_set_error(-EOVERFLOW, "heapd_map_add: "
                                        "%lld + %lld overflows the "
                                        "counter (int64_t)",
                                        (long long)cur,
                                        (long long)io->delta);
            want = at >= 0 ? live : live + 1;
            break;
        }
        case MODE_GET_OR_PUT:
            if (at >= 0) {
                io->found = entry_value(b, (size_t)at);
                if (!io->found)
                    return client_set_error(-EINVAL, "heapd_map_get_or_put:"
                                            " the key's value is inline "
                                            "bytes (heapd_map_put_bytes), "
                                            "not an object: "
                                            "heapd_map_get_bytes reads it");
                return 1;
            }
            want = live + 1;
            break;
        default:
            if (at < 0)
                return -ENOENT;
            want = live - 1;
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
            /* references if a key or a value is an object (Note [Buckets
             * without references]) */
            bool refs = mode != MODE_DELETE &&
                        (value || (at < 0 && !key_inline(o->kind, p.len)) ||
                         (at >= 0 && entry_key(b, (size_t)at)));
            for (size_t e = 0; e < keys; e++)
                if ((long)e != at && !entry_expired(w, e, now)) {
                    vb += entry_vbytes(b, e);
                    refs |= entry_has_refs(b, e);
                }
            int rc = op_alloc(o, want, vb, refs);
            if (rc <= 0) {
                if (rc)
                    return rc;
                continue;
            }
            nb = o->pre;
            size_t j = 0;
            for (size_t e = 0; e < keys; e++) {
                if ((long)e != at) {
                    if (!entry_expired(w, e, now))
                        copy_entry(o, b, e, j++);
                    continue;
                }
                if (mode == MODE_DELETE)
                    continue;
                /* the new value (DESIRED for replace) */
                copy_key(o, b, e, j);
                if (mode == MODE_PUT) /* its deadline, or none */
                    set_word(o, j, o->due | o->fresh);
                if (o->pre_refs)
                    heapd_write(o->m, nb, &((void **)nb)[2 * j + 1], value);
                if (o->vinl)
                    put_rec(o, o->vbytes, o->vlen);
                j++;
            }
            if (at < 0) {
                /* NULL for an inline key: Note [Inline keys] (a bucket
                 * built before for another entry may hold one there) */
                if (o->pre_refs) {
                    heapd_write(o->m, nb, &((void **)nb)[2 * j],
                                key_inline(o->kind, p.len) ? NULL : key);
                    heapd_write(o->m, nb, &((void **)nb)[2 * j + 1], value);
                }
                set_key(nb, j, &p);
                set_word(o, j, o->due | o->fresh);
                if (o->vinl)
                    put_rec(o, o->vbytes, o->vlen);
            }
        }
        coll_stop_in("map.update.built");
        if (!heapd_cas(o->m, t, slot, b, nb))
            continue;
        if (nb == o->pre)
            o->pre = NULL;
        struct coll_map_head *mm = map_meta(map);
        if (expired) {
            atomic_fetch_sub(&mm->count, expired);
            atomic_fetch_add(&mm->expirations, expired);
        }
        if (o->words) /* Note [Map budget] */
            atomic_fetch_add(&mm->used, bucket_cost(o->m, nb) -
                                            bucket_cost(o->m, b));
        if (mode == MODE_DELETE) {
            atomic_fetch_sub(&mm->count, 1);
            return 0;
        }
        if (at >= 0) { /* 1: replaced, added to; replace's 0 */
            tend(o);
            return mode == MODE_PUT || mode == MODE_ADD;
        }
        if (mode == MODE_GET_OR_PUT)
            io->found = value;
        atomic_fetch_add(&mm->count, 1);
        int rc = maybe_grow(o);
        if (!rc)
            tend(o);
        return rc ? rc : 0;
    }
}

/* An inline value of a put (Note [Inline values]). */
struct inline_value {
    const void *bytes;
    size_t len;
};

/* Push the op's roots, run it, pop them.  INL: the value, kept inline
 * (VALUE NULL), or NULL; IO: update's; DUE: a put's deadline (Note [Map
 * expiry]), 0 for none. */
static int run_op_due(heapd_mutator *m, void *map, void *key, void *value,
                      enum op_mode mode, unsigned flags, const void *bytes,
                      size_t len, void *expected,
                      const struct inline_value *inl, struct op_io *io,
                      uint64_t due)
{
    struct op o = {.m = m, .kind = map_meta(map)->kind, .vinl = inl != NULL,
                   .vbytes = inl ? inl->bytes : NULL,
                   .vlen = inl ? inl->len : 0,
                   .words = map_meta(map)->flags & COLL_MAP_WORDS,
                   .due = due,
                   .fresh = map_meta(map)->budget ? WORD_REF : 0};
    /* all at once: Note [Pushing roots without a safepoint] */
    void *refs[R_COUNT] = {[R_MAP] = map, [R_KEY] = key, [R_VALUE] = value};
    o.root = mutator_roots_push(m, refs, R_COUNT);
    if (o.root == (size_t)-1)
        return -errno;
    int rc = update(&o, mode, flags, bytes, len, expected, io);
    heapd_root_pop(m, R_COUNT);
    return rc;
}

static int run_op(heapd_mutator *m, void *map, void *key, void *value,
                  enum op_mode mode, unsigned flags, const void *bytes,
                  size_t len, void *expected, const struct inline_value *inl,
                  struct op_io *io)
{
    return run_op_due(m, map, key, value, mode, flags, bytes, len, expected,
                      inl, io, 0);
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
    return run_op(m, map, key, value, MODE_PUT, flags, NULL, 0, NULL, NULL,
                  NULL);
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
                  NULL, NULL);
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
                  &inl, NULL);
}

/* The deadline of a put with TTL_MS into MAP for CALL (Note [Map
 * expiry]): 0 for none, or -EINVAL in *RC. */
static uint64_t put_due(void *map, unsigned ttl_ms, const char *call,
                        int *rc)
{
    *rc = 0;
    if (!ttl_ms)
        return 0;
    if (!(map_meta(map)->flags & COLL_MAP_WORDS)) {
        *rc = client_set_error(-EINVAL, "%s: the map keeps no deadlines: "
                               "make it with heapd_map_new_opts and "
                               "HEAPD_MAP_EXPIRY", call);
        return 0;
    }
    return now_ms() + ttl_ms;
}

int heapd_map_put_ttl(heapd_mutator *m, void *map, void *key, void *value,
                      unsigned ttl_ms, unsigned flags)
{
    int rc = check_map(map, "heapd_map_put_ttl");
    if (rc)
        return rc;
    if (!value)
        return client_set_error(-EINVAL, "heapd_map_put_ttl: VALUE is NULL");
    if (flags & ~(HEAPD_MAP_IF_ABSENT | HEAPD_MAP_IF_PRESENT) ||
        flags == (HEAPD_MAP_IF_ABSENT | HEAPD_MAP_IF_PRESENT))
        return client_set_error(-EINVAL, "heapd_map_put_ttl: bad flags");
    if ((rc = check_key(map_meta(map)->kind, &key, "heapd_map_put_ttl")))
        return rc;
    uint64_t due = put_due(map, ttl_ms, "heapd_map_put_ttl", &rc);
    if (rc)
        return rc;
    return run_op_due(m, map, key, value, MODE_PUT, flags, NULL, 0, NULL,
                      NULL, NULL, due);
}

int heapd_map_put_bytes_ttl(heapd_mutator *m, void *map, const void *key,
                            size_t klen, const void *value, size_t vlen,
                            unsigned ttl_ms, unsigned flags)
{
    const char *call = "heapd_map_put_bytes_ttl";
    int rc = check_put_str(map, key, klen, flags, call);
    if (rc)
        return rc;
    if ((!value && vlen) || vlen > HEAPD_MAP_INLINE_MAX)
        return client_set_error(vlen > HEAPD_MAP_INLINE_MAX ? -E2BIG
                                                            : -EINVAL,
                                "%s: %s", call,
                                vlen > HEAPD_MAP_INLINE_MAX
                                    ? "the value is longer than "
                                      "HEAPD_MAP_INLINE_MAX"
                                    : "VALUE is NULL");
    uint64_t due = put_due(map, ttl_ms, call, &rc);
    if (rc)
        return rc;
    struct inline_value inl = {value, vlen};
    return run_op_due(m, map, NULL, NULL, MODE_PUT, flags, key, klen, NULL,
                      &inl, NULL, due);
}

long heapd_map_expire(heapd_mutator *m, void *map)
{
    int rc = check_map(map, "heapd_map_expire");
    if (rc)
        return rc;
    struct coll_map_head *mm = map_meta(map);
    if (!(mm->flags & COLL_MAP_WORDS))
        return 0;
    struct op o = {.m = m, .kind = mm->kind, .words = true};
    void *refs[R_COUNT] = {[R_MAP] = map};
    o.root = mutator_roots_push(m, refs, R_COUNT);
    if (o.root == (size_t)-1)
        return -errno;
    uint64_t before = atomic_load(&mm->expirations);
    void *t = coll_load(&((void **)map)[MAP_TABLE]);
    size_t n = nrefs_of(t) - 1;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = sweep_slot(&o, false);
    mm = map_meta(op_root(&o, R_MAP));
    long gone = (long)(atomic_load(&mm->expirations) - before);
    heapd_root_pop(m, R_COUNT);
    return rc ? rc : gone;
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
                  NULL, NULL);
}

int heapd_map_delete(heapd_mutator *m, void *map, const void *key)
{
    int rc = check_map(map, "heapd_map_delete");
    if (rc)
        return rc;
    void *k = (void *)key;
    if ((rc = check_key(map_meta(map)->kind, &k, "heapd_map_delete")))
        return rc;
    return run_op(m, map, k, NULL, MODE_DELETE, 0, NULL, 0, NULL, NULL,
                  NULL);
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
                  NULL, NULL);
}

int heapd_map_add(heapd_mutator *m, void *map, void *key, int64_t delta,
                  int64_t *result)
{
    int rc = check_map(map, "heapd_map_add");
    if (rc)
        return rc;
    if ((rc = check_key(map_meta(map)->kind, &key, "heapd_map_add")))
        return rc;
    /* Note [Counters]: the sum is the op's inline value */
    struct op_io io = {.delta = delta};
    struct inline_value inl = {&io.sum, sizeof io.sum};
    rc = run_op(m, map, key, NULL, MODE_ADD, 0, NULL, 0, NULL, &inl, &io);
    if (rc >= 0 && result)
        *result = io.sum;
    return rc;
}

int heapd_map_add_str(heapd_mutator *m, void *map, const void *bytes,
                      size_t len, int64_t delta, int64_t *result)
{
    int rc = check_put_str(map, bytes, len, 0, "heapd_map_add_str");
    if (rc)
        return rc;
    struct op_io io = {.delta = delta};
    struct inline_value inl = {&io.sum, sizeof io.sum};
    rc = run_op(m, map, NULL, NULL, MODE_ADD, 0, bytes, len, NULL, &inl,
                &io);
    if (rc >= 0 && result)
        *result = io.sum;
    return rc;
}

void *heapd_map_get_or_put(heapd_mutator *m, void *map, void *key,
                           void *value, bool *inserted)
{
    int rc = check_map(map, "heapd_map_get_or_put");
    if (!rc && !value)
        rc = client_set_error(-EINVAL, "heapd_map_get_or_put: VALUE is "
                              "NULL");
    if (!rc)
        rc = check_key(map_meta(map)->kind, &key, "heapd_map_get_or_put");
    struct op_io io = {0};
    if (!rc)
        rc = run_op(m, map, key, value, MODE_GET_OR_PUT, 0, NULL, 0, NULL,
                    NULL, &io);
    if (rc < 0) {
        errno = -rc;
        return NULL;
    }
    if (inserted)
        *inserted = rc == 0;
    return io.found;
}

void *heapd_map_get_or_put_str(heapd_mutator *m, void *map,
                               const void *bytes, size_t len, void *value,
                               bool *inserted)
{
    int rc = check_put_str(map, bytes, len, 0, "heapd_map_get_or_put_str");
    if (!rc && !value)
        rc = client_set_error(-EINVAL, "heapd_map_get_or_put_str: VALUE "
                              "is NULL");
    struct op_io io = {0};
    if (!rc)
        rc = run_op(m, map, NULL, value, MODE_GET_OR_PUT, 0, bytes, len,
                    NULL, NULL, &io);
    if (rc < 0) {
        errno = -rc;
        return NULL;
    }
    if (inserted)
        *inserted = rc == 0;
    return io.found;
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
    heapd_map_opts o = {.kind = kind, .capacity = capacity};
    return heapd_map_new_opts_sized(m, &o, sizeof o);
}

/* See Note [Structs that grow] in client/abi.c. */
void *heapd_map_new_opts_sized(heapd_mutator *m, const heapd_map_opts *in,
                               size_t size)
{
    heapd_map_opts own;
    const heapd_map_opts *opts = NULL;
    if (in) {
        int rc = abi_in(&own, sizeof own, in, size, ABI_0_1_MAP_OPTS,
                        "heapd_map_new_opts");
        if (rc < 0) {
            errno = -rc;
            return NULL;
        }
        opts = &own;
    }
    if (!opts || opts->kind > HEAPD_MAP_IDENTITY ||
        (opts->flags & ~HEAPD_MAP_EXPIRY)) {
        client_set_error(-EINVAL, "heapd_map_new: %s",
                         !opts ? "OPTS is NULL"
                         : opts->kind > HEAPD_MAP_IDENTITY
                             ? "unknown kind: HEAPD_MAP_STR, "
                               "HEAPD_MAP_BYTES or HEAPD_MAP_IDENTITY"
                             : "unknown flags: HEAPD_MAP_EXPIRY");
        errno = EINVAL;
        return NULL;
    }
    unsigned kind = opts->kind;
    size_t capacity = opts->capacity;
    uint64_t n = MAP_MIN_SLOTS;
    while (n < capacity && n < MAP_MAX_SLOTS)
        n *= 2;
    void *map = heapd_alloc_shared(m, MAP_NREFS, sizeof(struct coll_map_head));
    if (!map)
        return NULL;
    struct coll_map_head *mm = map_meta(map);
    mm->tag = COLL_TAG_MAP;
    mm->kind = kind;
    /* Note [Map expiry], Note [Map budget] */
    mm->flags = opts->budget || (opts->flags & HEAPD_MAP_EXPIRY)
                    ? COLL_MAP_WORDS
                    : 0;
    mm->budget = opts->budget;
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
    /* Note [Map budget]: what the map takes empty, its table and its
     * shared buckets */
    uint64_t used = client_block_bytes(m, map);
    for (unsigned r = 0; r < MAP_NREFS; r++)
        used += client_block_bytes(m, coll_load(&((void **)map)[r]));
    atomic_store(&map_meta(map)->used, used);
    out = map;
out:
    {
        int e = errno;
        heapd_root_pop(m, 1);
        errno = e;
    }
    return out;
}

/* ---- for the iteration (map_iter.c) ---- */

int map_push_finished(heapd_mutator *m, void *map, size_t *root)
{
    /* a resize it finishes copies words as any writer's (Note [Map
     * expiry]) */
    struct op o = {.m = m, .kind = map_meta(map)->kind,
                   .words = map_meta(map)->flags & COLL_MAP_WORDS};
    void *refs[R_COUNT] = {[R_MAP] = map};
    o.root = mutator_roots_push(m, refs, R_COUNT);
    if (o.root == (size_t)-1)
        return -errno;
    for (;;) {
        void *t = coll_load(&((void **)op_root(&o, R_MAP))[MAP_TABLE]);
        if (!coll_load(&((void **)t)[0]))
            break;
        int rc = help_resize(&o, t);
        if (rc) {
            heapd_root_pop(m, heapd_root_depth(m) - o.root);
            return rc;
        }
    }
    *root = o.root;
    return 0;
}
