/* The shapes of the shared collections' head objects (libheapd's
 * heapd_collections.h), the part of them the daemon reads too: `heapctl
 * globals` names a global's kind and size from them (Note [Collections
 * seen by the daemon]).
 *
 * Note [Collections seen by the daemon]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A string, a map and a queue are told apart by their shape (reference
 * fields, raw bytes) and the tag that starts their raw bytes; their head
 * holds what a report wants: a string's length, a map's key count, a
 * queue's pushes and pops.  The daemon reads these words of a global's
 * object, which any client of the heap may write, as untrusted input:
 * only within the object's bytes (validated as any reference), as plain
 * numbers it never follows, so a forged head costs only a wrong line in a
 * report.  The collections in client/collections/ lay their objects out
 * with these structures, so the two sides cannot drift apart.
 */
#ifndef HEAPD_PROTO_COLLECTIONS_H
#define HEAPD_PROTO_COLLECTIONS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The first word of a collection object's raw bytes says what it is. */
#define COLL_TAG_STR 0x52545348u    /* "HSTR" */
#define COLL_TAG_MAP 0x50414d48u    /* "HMAP" */
#define COLL_TAG_TABLE 0x42415448u  /* "HTAB" */
#define COLL_TAG_BUCKET 0x4b554248u /* "HBUK" */
#define COLL_TAG_QUEUE 0x55455148u  /* "HQUE" */
#define COLL_TAG_NODE 0x444f4e48u   /* "HNOD" */

/* A string: no reference field, this head, its bytes and a NUL. */
struct coll_str_head {
    uint32_t tag;
    uint32_t len;
    uint64_t hash;
};

/* A map: COLL_MAP_NREFS reference fields (table, empty, frozen empty),
 * then this head, and nothing else. */
#define COLL_MAP_NREFS 3
#define COLL_MAP_KINDS 3 /* HEAPD_MAP_STR, _BYTES, _IDENTITY */
#define COLL_MAP_WORDS 0x1u /* its buckets hold a word a key: Note [Map
                               expiry] in client/collections/map.c */
struct coll_map_head {
    uint32_t tag;
    uint32_t kind;
    _Atomic uint64_t count;
    uint32_t flags;                /* COLL_MAP_WORDS */
    uint32_t unused;
    uint64_t budget;               /* bytes, 0: none (Note [Map budget]) */
    _Atomic uint64_t used;         /* bytes, as the writers count them */
    _Atomic uint64_t evictions;
    _Atomic uint64_t expirations;
    _Atomic uint64_t hand;         /* the next slot a sweep looks at */
};

/* A queue: COLL_QUEUE_NREFS reference fields (head, tail, cursor), then
 * this head, and nothing else. */
#define COLL_QUEUE_NREFS 3
struct coll_queue_head {
    uint32_t tag;
    _Atomic uint32_t seq;       /* the futex word */
    _Atomic uint32_t waiters;
    _Atomic uint32_t seen_gen;  /* live_gen at the last lease scan */
    _Atomic uint64_t pushed;
    _Atomic uint64_t popped;    /* values taken from the waiting ones */
    _Atomic uint64_t leased;    /* leases granted, taken back ones too */
    _Atomic uint64_t released;  /* leases ended: acked or taken back */
    _Atomic uint64_t next_due;  /* ms: the soonest lease deadline */
    _Atomic uint32_t grants;    /* lease grants, numbered per queue */
    _Atomic uint32_t due_grants; /* grants with a deadline */
};

/* What a report says of a collection (coll_kind_of). */
struct coll_info {
    uint64_t size;        /* a map's keys, a queue's length, a string's
                             bytes */
    uint64_t leases;      /* a queue's leases held */
    uint64_t budget;      /* a map's budget, and what it counts used */
    uint64_t used;
    uint64_t evictions;   /* a map's */
    uint64_t expirations;
};

enum coll_kind {
    COLL_KIND_OTHER = 0,
    COLL_KIND_MAP = 1,
    COLL_KIND_QUEUE = 2,
    COLL_KIND_STRING = 3,
};

#define COLL_LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

/* What an object of NREFS reference fields and NBYTES raw bytes at RAW
 * is (Note [Collections seen by the daemon]), and in *INFO what a report
 * says of it (zeros for any other object).  Reads only RAW[0..NBYTES),
 * with relaxed loads: another process may be changing it. */
static inline enum coll_kind coll_kind_of(uint64_t nrefs, uint64_t nbytes,
                                          const void *raw,
                                          struct coll_info *info)
{
    uint32_t tag = 0;
    *info = (struct coll_info){0};
    uint64_t *size = &info->size;
    if (nbytes >= sizeof tag)
        tag = __atomic_load_n((const uint32_t *)raw, __ATOMIC_RELAXED);
    if (nrefs == COLL_MAP_NREFS && nbytes == sizeof(struct coll_map_head) &&
        tag == COLL_TAG_MAP) {
        const struct coll_map_head *m = raw;
        if (__atomic_load_n(&m->kind, __ATOMIC_RELAXED) >= COLL_MAP_KINDS)
            return COLL_KIND_OTHER;
        *size = COLL_LOAD(m->count);
        info->budget = __atomic_load_n(&m->budget, __ATOMIC_RELAXED);
        info->used = COLL_LOAD(m->used);
        info->evictions = COLL_LOAD(m->evictions);
        info->expirations = COLL_LOAD(m->expirations);
        return COLL_KIND_MAP;
    }
    if (nrefs == COLL_QUEUE_NREFS &&
        nbytes == sizeof(struct coll_queue_head) && tag == COLL_TAG_QUEUE) {
        const struct coll_queue_head *q = raw;
        uint64_t popped = atomic_load_explicit(&q->popped,
                                               memory_order_relaxed);
        uint64_t pushed = atomic_load_explicit(&q->pushed,
                                               memory_order_relaxed);
        *size = pushed > popped ? pushed - popped : 0;
        uint64_t released = COLL_LOAD(q->released);
        uint64_t leased = COLL_LOAD(q->leased);
        info->leases = leased > released ? leased - released : 0;
        return COLL_KIND_QUEUE;
    }
    if (nrefs == 0 && nbytes > sizeof(struct coll_str_head) &&
        tag == COLL_TAG_STR) {
        const struct coll_str_head *s = raw;
        uint32_t len = __atomic_load_n(&s->len, __ATOMIC_RELAXED);
        if ((uint64_t)len + sizeof *s + 1 != nbytes)
            return COLL_KIND_OTHER;
        *size = len;
        return COLL_KIND_STRING;
    }
    return COLL_KIND_OTHER;
}

#endif
