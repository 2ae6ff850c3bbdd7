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
struct coll_map_head {
    uint32_t tag;
    uint32_t kind;
    _Atomic uint64_t count;
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
};

enum coll_kind {
    COLL_KIND_OTHER = 0,
    COLL_KIND_MAP = 1,
    COLL_KIND_QUEUE = 2,
    COLL_KIND_STRING = 3,
};

/* What an object of NREFS reference fields and NBYTES raw bytes at RAW
 * is (Note [Collections seen by the daemon]), and in *SIZE a map's keys,
 * a queue's length or a string's bytes (0 for any other object), in
 * *HELD a queue's leases held (0 for any other).  Reads
 * only RAW[0..NBYTES), with relaxed loads: another process may be
 * changing it. */
static inline enum coll_kind coll_kind_of(uint64_t nrefs, uint64_t nbytes,
                                          const void *raw, uint64_t *size,
                                          uint64_t *held)
{
    uint32_t tag = 0;
    *size = 0;
    *held = 0;
    if (nbytes >= sizeof tag)
        tag = __atomic_load_n((const uint32_t *)raw, __ATOMIC_RELAXED);
    if (nrefs == COLL_MAP_NREFS && nbytes == sizeof(struct coll_map_head) &&
        tag == COLL_TAG_MAP) {
        const struct coll_map_head *m = raw;
        if (__atomic_load_n(&m->kind, __ATOMIC_RELAXED) >= COLL_MAP_KINDS)
            return COLL_KIND_OTHER;
        *size = atomic_load_explicit(&m->count, memory_order_relaxed);
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
        uint64_t released = atomic_load_explicit(&q->released,
                                                 memory_order_relaxed);
        uint64_t leased = atomic_load_explicit(&q->leased,
                                               memory_order_relaxed);
        *held = leased > released ? leased - released : 0;
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
