/* What the young generation's end-to-end tests share: their daemon, the
 * nodes they check, and connecting and attaching (young_util.h). */
#include "young_util.h"

#include <check.h>

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
