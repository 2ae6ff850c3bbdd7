/* What the young generation's end-to-end tests share: their daemon, the
 * nodes they check, connecting and attaching, and marks (young_util.h). */
#include "young_util.h"

#include <check.h>

#include "client.h"
#include "layout.h"

struct daemon_proc D;

uint64_t check_of(uint64_t id)
{
    return (id * 0x9e3779b97f4a7c15ull) ^ MAGIC;
}

void fill_payload(void *n, uint64_t id)
{
    struct payload *p = heapd_bytes(n);
    p->id = id;
    p->check = check_of(id);
}

/* A young node (for a young mutator) with ID; NULL if heapd_alloc
 * failed. */
void **new_node(heapd_mutator *m, size_t nrefs, uint64_t id)
{
    void **n = heapd_alloc(m, nrefs, sizeof(struct payload));
    if (n)
        fill_payload(n, id);
    return n;
}

void **new_shared_node(heapd_mutator *m, size_t nrefs, uint64_t id)
{
    void **n = heapd_alloc_shared(m, nrefs, sizeof(struct payload));
    if (n)
        fill_payload(n, id);
    return n;
}

uintptr_t heap_lo, heap_hi;

bool in_heap(const void *p)
{
    return (uintptr_t)p - heap_lo < heap_hi - heap_lo &&
           ((uintptr_t)p & 7) == 0;
}

bool node_ok(void *n, size_t nrefs, uint64_t id)
{
    if (!n || !in_heap(n) || heapd_nrefs(n) != nrefs ||
        heapd_nbytes(n) != sizeof(struct payload))
        return false;
    const struct payload *p = heapd_bytes(n);
    return p->id == id && p->check == check_of(id);
}

/* Field K of OBJ; NULL if OBJ is not in the heap (a damaged reference:
 * the check that follows fails). */
void *field(void *obj, size_t k)
{
    if (!in_heap(obj))
        return NULL;
    return __atomic_load_n(&((void **)obj)[k], __ATOMIC_ACQUIRE);
}

/* Connect to the test's heapd (fails the test on error). */
heapd_client *connect_plain(unsigned flags)
{
    heapd_client *c = harness_connect_ok(D.sock, flags);
    heap_lo = (uintptr_t)heapd_heap_base(c);
    heap_hi = heap_lo + heapd_heap_size(c);
    return c;
}

/* Attach the calling thread to C as a young mutator. */
heapd_mutator *attach_young(heapd_client *c, size_t size, unsigned age)
{
    heapd_mutator_opts o = {.flags = HEAPD_MUTATOR_YOUNG,
                            .young_size = size,
                            .young_age = age};
    heapd_mutator *m;
    int rc = heapd_attach_opts(c, &o, &m);
    ck_assert_msg(rc == 0, "a young attach failed (%s): %s",
                  heapd_strerror(rc), heapd_last_error());
    return m;
}

heapd_young_stats young_stats(const heapd_mutator *m)
{
    heapd_young_stats y;
    heapd_young_stats_get(m, &y);
    return y;
}

int mark_of(const heapd_client *c, const void *obj)
{
    uint64_t off = (uint64_t)((uintptr_t)obj - (uintptr_t)c->base);
    if (off >= c->size)
        return -1;
    uint32_t i = (uint32_t)(off >> c->seg_shift);
    if (i < c->first_segment)
        return -1;
    uint8_t *seg = client_seg_addr(c, i);
    const struct layout_segment *hd = (const struct layout_segment *)seg;
    if (__atomic_load_n(&hd->kind, __ATOMIC_ACQUIRE) != LAYOUT_SEG_SMALL)
        return -1;
    uint32_t cls = __atomic_load_n(&hd->size_class, __ATOMIC_RELAXED);
    if (cls >= LAYOUT_CLASS_RUN)
        return -1;
    uint32_t b = layout_small_block((uint64_t)((const uint8_t *)obj - seg),
                                    c->small_first[cls],
                                    c->small_nblocks[cls],
                                    layout_class_size[cls],
                                    c->small_magic[cls]);
    if (b == UINT32_MAX)
        return -1;
    return __atomic_load_n(layout_seg_marks(seg) + b, __ATOMIC_ACQUIRE);
}

bool promoted(const heapd_client *c, const heapd_mutator *m, const void *obj)
{
    int mk = mark_of(c, obj);
    return !heapd_is_young(m, obj) && mk > 0 &&
           layout_mark_is_epoch((uint8_t)mk);
}

bool still_young(const heapd_client *c, const heapd_mutator *m,
                 const void *obj)
{
    return heapd_is_young(m, obj) && mark_of(c, obj) == LAYOUT_MARK_YOUNG;
}

heapd_mutator *deep_blocked_helper(heapd_client *c)
{
    heapd_mutator *h;
    ck_assert_int_eq(heapd_attach(c, &h), 0);
    size_t s = heapd_root_push(h, heapd_alloc(h, 0, 8));
    for (size_t i = 1; i < HELPER_ROOTS; i++)
        ck_assert_uint_ne(heapd_root_push(h, heapd_root_get(h, s)),
                          (size_t)-1);
    heapd_blocking_enter(h);
    return h;
}

void helper_leave(heapd_mutator *h)
{
    heapd_blocking_leave(h);
    heapd_detach(h);
}

void young_finish(heapd_client *c, heapd_mutator *m)
{
    heapd_detach(m);
    heapd_disconnect(c);
    harness_expect_healthy(&D);
    harness_stop_clean(&D);
}

void minor_now(heapd_mutator *m)
{
    heapd_young_stats a = young_stats(m), b;
    /* each a block of 56 bytes: the budget runs out within young_bytes /
     * 56 of them, and the collection it starts ends at its first slice
     * past as many more (Note [Minor collections in slices]): slices
     * of the sweep come every 16 of a 256th of the budget, 4 KiB at
     * least, apart */
    uint64_t slice = a.young_bytes / 256 > 4096 ? a.young_bytes / 256 : 4096;
    uint64_t bound = 2 * (a.young_bytes / 56) + 16 * slice / 56 + 64;
    for (uint64_t k = 0;; k++) {
        ck_assert_msg(k < bound, "no minor collection after %llu "
                      "allocations of 56 bytes in a nursery of %llu bytes",
                      (unsigned long long)k,
                      (unsigned long long)a.young_bytes);
        ck_assert_ptr_nonnull(heapd_alloc(m, 0, 48));
        b = young_stats(m);
        if (b.minor_collections != a.minor_collections)
            break;
    }
    ck_assert_uint_eq(b.minor_collections, a.minor_collections + 1);
}

uint64_t block_bytes(size_t nrefs, size_t nbytes)
{
    return layout_class_size[layout_size_class(
        (uint32_t)layout_object_size(nrefs, nbytes))];
}
