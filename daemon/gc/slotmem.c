/* Client control memory, daemon side: each mutator client's memfd of
 * slot regions, and the windows through which the daemon sees the slots.
 * See Note [Client control memory] in proto/layout.h. */
#include "slotmem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "heap.h"
#include "log.h"

#define WINDOWS_BYTES ((size_t)LAYOUT_MAX_MUTATORS * LAYOUT_MUTATOR_BYTES)

int slotmem_reserve(struct heap *h)
{
    void *p = mmap(NULL, WINDOWS_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -errno;
    h->windows = p;
    return 0;
}

void slotmem_release(struct heap *h)
{
    if (h->windows)
        munmap(h->windows, WINDOWS_BYTES);
    h->windows = NULL;
}

int slotmem_create(const char *heap_name, uint64_t client, unsigned regions)
{
    char name[96];
    snprintf(name, sizeof name, "heapd:%s:client-%llu", heap_name,
             (unsigned long long)client);
    return heap_sealed_memfd(name, (uint64_t)regions * LAYOUT_MUTATOR_BYTES);
}

int slotmem_map(struct heap *h, unsigned slot, int fd, unsigned region)
{
    ASSERT_LOCK_HELD(&h->lock);
    void *w = heap_slot(h, slot);
    void *p = mmap(w, LAYOUT_MUTATOR_BYTES, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, fd,
                   (off_t)region * (off_t)LAYOUT_MUTATOR_BYTES);
    return p == MAP_FAILED ? -errno : 0;
}

/* Note [Slot windows]
 * ~~~~~~~~~~~~~~~~~~~~
 * A window changes mapping only at an attach, and only while no thread
 * reads it.  Under heap->lock it is read freely (grant_slot and
 * grant_free_slot hold it too); without it -- the stop loop, the
 * concurrent workers count, a worker's mark_stack -- only between
 * heap_slot_enter and heap_slot_leave, which count the thread in the
 * slot's `readers` and then find the slot attached.  grant_free_slot
 * clears the owner (a sequentially consistent store) and leaves the
 * window as it is: the freed slot's region stays mapped, its pages given
 * back.  grant_slot takes only a free slot whose `readers` is 0: a reader
 * either counted itself before the owner was cleared, and the slot is
 * passed over until it leaves, or finds the slot free and reads nothing
 * (the two orders of a Dekker pair); the new owner is set, with release,
 * only after the mmap.  Nobody ever waits for a reader: the mark workers
 * run at a low priority, and a loop thread that waited for one while
 * holding heap->lock stalled every client (a lifecycle test under TSan
 * timed out).  (TSan reported the first version, which remapped a freed
 * window while the stop loop loaded its status.)
 */
void slotmem_free_region(int fd, unsigned region)
{
    /* the root stack and ring of a detached mutator cost nothing */
    if (fd >= 0)
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  (off_t)region * (off_t)LAYOUT_MUTATOR_BYTES,
                  (off_t)LAYOUT_MUTATOR_BYTES);
}

const char *slotmem_fault_name(enum slot_fault f)
{
    switch (f) {
    case SLOT_FAULT_ROOT_DEPTH:
        return "a root depth beyond the root stack";
    case SLOT_FAULT_URS_HEAD:
        return "an update remembered set head more than a ring ahead of "
               "the daemon's tail, or behind it";
    case SLOT_FAULT_STATUS:
        return "a status of FREE while attached, or the ack of a stop "
               "never asked for";
    case SLOT_FAULT_ALLOC_BYTES:
        return "more bytes allocated than its client was ever granted";
    case SLOT_FAULT_CAPTURED:
        return "a capture of its C stack beyond the capture area";
    case SLOT_FAULT_NONE:
        break;
    }
    return "nothing";
}

uint64_t slotmem_alloc_bytes(struct heap *h, unsigned slot)
{
    uint64_t n = atomic_load_explicit(&heap_slot(h, slot)->alloc_bytes,
                                      memory_order_relaxed);
    uint64_t bound = atomic_load_explicit(&h->owners[slot].alloc_bound,
                                          memory_order_relaxed);
    if (n <= bound)
        return n;
    /* Note [Client control memory]: a young slot's word may honestly pass
     * the bound; the bound is used, and the client stays */
    if (h->owners[slot].young_bytes == 0)
        slotmem_fault(h, slot, SLOT_FAULT_ALLOC_BYTES);
    return bound;
}

uint64_t slotmem_young_held(const struct heap *h)
{
    ASSERT_LOCK_HELD(&h->lock);
    /* every young segment and spare is OWNED by its client: a word past
     * that is a client's lie or a slot still counting one it gave back */
    uint64_t owned = (uint64_t)h->segs.n_owned << h->seg_shift, n = 0;
    for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS && n < owned; i++) {
        if (!heap_slot_attached(h, i) || h->owners[i].young_bytes == 0)
            continue;
        uint64_t w = atomic_load_explicit(&heap_slot(h, i)->young_held_bytes,
                                          memory_order_relaxed);
        n += w < owned - n ? w : owned - n;
    }
    return n;
}

void slotmem_fault(struct heap *h, unsigned slot, enum slot_fault why)
{
    uint32_t none = SLOT_FAULT_NONE;
    if (atomic_compare_exchange_strong(&h->owners[slot].fault, &none,
                                       (uint32_t)why))
        notify_send(&h->fault_notify);
}
