/* libheapd: an object's header word, its size and its size class, as
 * heapd.h's inline allocation writes them (Note [Inline allocation fast
 * path] in heapd.h).  Included by heapd.h, installed with it; layout.h
 * builds the shared layout's object functions on these. */
#ifndef HEAPD_OBJECT_H
#define HEAPD_OBJECT_H

#include <stdint.h>

#define HEAPD_OBJ_WORD_ 8u
#define HEAPD_OBJ_FIELD_BITS_ 28
#define HEAPD_OBJ_TAG_SHIFT_ 56
#define HEAPD_OBJ_MIN_BLOCK_ 16u
/* a young object's header tag and mark byte (Note [Young objects] in
 * proto/young.h) */
#define HEAPD_OBJ_YOUNG_TAG_ 0xf0u
#define HEAPD_OBJ_MARK_YOUNG_ 254u
/* size classes: 16..128 bytes in steps of 8, then per doubling the
 * power of two and a header, and 8 steps up to 16 KiB ("size classes"
 * in proto/layout.h) */
#define HEAPD_OBJ_NCLASSES_ 79

/* The header of an object with NREFS reference fields and NBYTES raw
 * bytes, untagged. */
static inline uint64_t heapd_obj_header_(uint64_t nrefs, uint64_t nbytes)
{
    return nbytes | nrefs << HEAPD_OBJ_FIELD_BITS_;
}

/* Bytes the object occupies, header included (an 8-byte multiple). */
static inline uint64_t heapd_obj_size_(uint64_t nrefs, uint64_t nbytes)
{
    return HEAPD_OBJ_WORD_ + nrefs * HEAPD_OBJ_WORD_ +
           ((nbytes + 7) & ~(uint64_t)7);
}

/* The class of an object of SIZE bytes (16 <= SIZE <= 16384, a multiple
 * of 8). */
static inline unsigned heapd_obj_class_(uint32_t size)
{
    if (__builtin_expect(size <= 128, 1))
        return size <= HEAPD_OBJ_MIN_BLOCK_ ? 0 : (size >> 3) - 2;
    uint32_t s = size - 1, past;
    unsigned p = 31u - (unsigned)__builtin_clz(s); /* 7..13 */
    past = s - (1u << p); /* SIZE - 1 - 2^p */
    /* 2^p + 8 (a power-of-two payload and its header), then 2^p + k/8 */
    return 15u + (p - 7u) * 9u +
           (past < HEAPD_OBJ_WORD_ ? 0u : 1u + (past >> (p - 3u)));
}

#endif
