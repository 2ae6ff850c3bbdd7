/* Immutable shared byte strings (heapd_collections.h).
 *
 * Note [Shared strings]
 * ~~~~~~~~~~~~~~~~~~~~~
 * A string is an object with no reference field and raw bytes
 *     tag (u32) | len (u32) | hash (u64) | LEN bytes | NUL
 * written once by heapd_str_new before the object is returned, and never
 * again: a reader in any process uses the bytes in place, with no copy
 * and no lock, because nothing can change them under it.  The hash is
 * computed once, here, so that a map lookup hashes the probe only and
 * compares a stored key's hash before any byte of it: in the shared-cache
 * benchmark a lookup then touches the key string only on a hit.  The hash
 * has no per-process seed (every process must agree on it) and no secret
 * one: a map whose keys an adversary chooses can be given long buckets.
 */
#include <errno.h>
#include <string.h>

#include "coll.h"

/* a string's head: proto/collections.h (Note [Collections seen by the
 * daemon]); its bytes follow it */

static inline struct coll_str_head *head_of(const void *s)
{
    return (struct coll_str_head *)s; /* no reference fields */
}

static inline char *str_bytes(const struct coll_str_head *h)
{
    return (char *)(h + 1);
}

/* A 64-bit multiply-fold: the high and low halves of the product, xored. */
static inline uint64_t fold(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

uint64_t heapd_hash_bytes(const void *bytes, size_t len)
{
    const unsigned char *p = bytes;
    uint64_t h = 0x243f6a8885a308d3ull ^ fold(len, 0x9e3779b97f4a7c15ull);
    size_t n = len;

    for (; n >= 16; n -= 16, p += 16)
        h = fold(load64(p) ^ 0xa0761d6478bd642full ^ h,
                 load64(p + 8) ^ 0xe7037ed1a0b428dbull);
    uint64_t a = 0, b = 0;
    if (n > 8) {
        a = load64(p);
        memcpy(&b, p + 8, n - 8);
    } else if (n) {
        memcpy(&a, p, n);
    }
    h = fold(a ^ 0x8ebc6af09c88c6e3ull ^ h, b ^ 0x589965cc75374cc3ull);
    return fold(h ^ 0x1d8e4e27c47d124full, len ^ 0xa0761d6478bd642full);
}

void *heapd_str_new(heapd_mutator *m, const void *bytes, size_t len)
{
    if (len > HEAPD_STR_MAX || (!bytes && len)) {
        client_set_error(-EINVAL, "heapd_str_new: %s",
                         len > HEAPD_STR_MAX
                             ? "the string is longer than HEAPD_STR_MAX"
                             : "BYTES is NULL");
        errno = EINVAL;
        return NULL;
    }
    void *s = heapd_alloc(m, 0, sizeof(struct coll_str_head) + len + 1);
    if (!s)
        return NULL;
    /* a young mutator's string is young: written here before anything
     * can move it (no safepoint in between) */
    struct coll_str_head *h = head_of(s);
    h->tag = COLL_TAG_STR;
    h->len = (uint32_t)len;
    h->hash = heapd_hash_bytes(bytes, len);
    if (len)
        memcpy(str_bytes(h), bytes, len);
    /* the NUL is there already: heapd_alloc zeroes */
    return s;
}

bool heapd_is_str(const void *obj)
{
    struct coll_info ci;
    return obj && coll_kind_of(heapd_nrefs(obj), heapd_nbytes(obj),
                               heapd_bytes((void *)obj),
                               &ci) == COLL_KIND_STRING;
}

size_t heapd_str_len(const void *s)
{
    return head_of(s)->len;
}

const char *heapd_str_data(const void *s)
{
    return str_bytes(head_of(s));
}

uint64_t heapd_str_hash(const void *s)
{
    return head_of(s)->hash;
}

int heapd_str_cmp(const void *a, const void *b)
{
    const struct coll_str_head *x = head_of(a), *y = head_of(b);
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(str_bytes(x), str_bytes(y), n);
    if (c)
        return c;
    return (x->len > y->len) - (x->len < y->len);
}

bool heapd_str_eq(const void *a, const void *b)
{
    const struct coll_str_head *x = head_of(a), *y = head_of(b);
    return a == b || (x->hash == y->hash && x->len == y->len &&
                      memcmp(str_bytes(x), str_bytes(y), x->len) == 0);
}
