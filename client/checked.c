/* libheapd's checked mode: every object handed to the library is checked
 * to be a live allocated object before it is used.
 *
 * Note [Checked mode]
 * ~~~~~~~~~~~~~~~~~~~
 * The misuse users hit most is a reference kept in a C local across a
 * safepoint (Note [Client GC discipline] in heapd.h): the block it points
 * at may have been swept, and is reused later, so the program reads or
 * links a dead object with no error.  With HEAPD_CHECK=1 in the
 * environment, or HEAPD_CONNECT_CHECKED, every call that takes an object
 * checks, before anything else, that it is the start of an allocated
 * block of one of the heap's small segments or the object of a large run,
 * and that its mark byte says it is live (Note [Epoch-tagged marks]):
 *   - IDLE or SWEEP: the mark is the current epoch; during a sweep a
 *     block with any other non-zero mark is garbage not yet reclaimed;
 *   - MARK: the mark is the current epoch or the one before (a completed
 *     sweep left every live block with the epoch before this cycle's).
 * Epoch and phase cannot change under the caller, which is between two of
 * its safepoints, so the check is exact for the block as it is now; a
 * block already reused by a new allocation passes, like any live object.
 * Failure prints what is wrong with the reference and the call, and
 * aborts, so that a debugger or a core dump shows the call site.  The
 * check reads the segment header and one mark byte: a few loads per call.
 * The accessors (heapd_nrefs, heapd_nbytes, heapd_bytes) have no client
 * argument, so checked clients are also listed here, by address range.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "client.h"
#include "heapd.h"
#include "layout.h"
#include "mutator.h"

#define CHECKED_MAX 8 /* checked clients per process */

static heapd_client *_Atomic checked_clients[CHECKED_MAX];
_Atomic bool checked_any;

bool checked_wanted(const heapd_connect_opts *o)
{
    const char *e = getenv("HEAPD_CHECK");
    return (o && (o->flags & HEAPD_CONNECT_CHECKED)) ||
           (e && e[0] && strcmp(e, "0") != 0);
}

void checked_register(heapd_client *c)
{
    c->checked = true;
    for (unsigned i = 0; i < CHECKED_MAX; i++) {
        heapd_client *none = NULL;
        if (atomic_compare_exchange_strong(&checked_clients[i], &none, c)) {
            atomic_store(&checked_any, true);
            return;
        }
    }
    /* more checked clients than slots: the accessors skip this one's
     * objects; the calls that take a mutator still check them */
}

void checked_forget(heapd_client *c)
{
    for (unsigned i = 0; i < CHECKED_MAX; i++) {
        heapd_client *self = c;
        atomic_compare_exchange_strong(&checked_clients[i], &self, NULL);
    }
}

/* The message for a young object met where it may not be. */
static const char young_msg[] =
    "it is a young object of another mutator (a thread attached with "
    "HEAPD_MUTATOR_YOUNG), which only that mutator may hold: publish it "
    "first in that thread (heapd_publish, or store it into a shared "
    "object)";

/* Why REF is not a live object of C's heap, or NULL if it is one; a young
 * one (another mutator's: the caller has ruled out its own) is one only
 * if YOUNG_OK. */
static const char *why_not_live(const heapd_client *c, const void *ref,
                                bool young_ok, char *buf, size_t n)
{
    uint64_t off = (uint64_t)((uintptr_t)ref - (uintptr_t)c->base);
    if (off >= c->size)
        return "it is not inside the heap";
    if (((uintptr_t)ref & 7) != 0)
        return "it is not 8-byte aligned";
    uint32_t i = (uint32_t)(off >> c->seg_shift);
    if (i < c->first_segment)
        return "it points into the heap's control area";
    uint8_t *seg = client_seg_addr(c, i);
    const struct layout_segment *hd = (const struct layout_segment *)seg;
    uint32_t kind = __atomic_load_n(&hd->kind, __ATOMIC_ACQUIRE);
    uint8_t mark;
    if (kind == LAYOUT_SEG_SMALL) {
        uint32_t cls = __atomic_load_n(&hd->size_class, __ATOMIC_RELAXED);
        if (cls >= LAYOUT_NCLASSES)
            return "its segment's header is corrupt";
        uint32_t idx = layout_small_block((uint64_t)((uint8_t *)ref - seg),
                                          c->small_first[cls],
                                          c->small_nblocks[cls],
                                          layout_class_size[cls],
                                          c->small_magic[cls]);
        if (idx == UINT32_MAX)
            return "it is not the start of an object (an interior pointer?)";
        mark = __atomic_load_n(layout_seg_marks(seg) + idx, __ATOMIC_RELAXED);
        if (mark == LAYOUT_MARK_CONT && cls == LAYOUT_CLASS_RUN)
            return "it points inside a larger object (an interior "
                   "pointer?)"; /* Note [Runs] */
    } else if (kind == LAYOUT_SEG_LARGE) {
        if ((uint8_t *)ref != seg + LAYOUT_LARGE_OBJECT + LAYOUT_WORD)
            return "it is not the start of an object (an interior pointer?)";
        mark = __atomic_load_n(layout_seg_marks(seg), __ATOMIC_RELAXED);
    } else {
        return "its segment holds no objects (freed, or never allocated)";
    }
    uint32_t epoch = atomic_load(&c->ctl->epoch);
    uint32_t before = layout_prev_epoch(epoch);
    bool marking = atomic_load(&c->ctl->phase) == LAYOUT_PHASE_MARK;
    if (mark == 0)
        return "its block is free: a collection freed it";
    /* Note [The young invariant] in client/minor.c */
    if (mark == LAYOUT_MARK_YOUNG)
        return young_ok ? NULL : young_msg;
    if (mark != epoch && !(marking && mark == before)) {
        snprintf(buf, n, "its block is garbage the collector is freeing "
                 "(mark %u, epoch %u)", mark, epoch);
        return buf;
    }
    return NULL;
}

static void fail(const char *call, const char *what, const void *ref,
                 const char *why)
{
    fprintf(stderr, "heapd checked mode: %s: %s %p is not a live object: "
            "%s.  A reference kept in a C local across a safepoint is the "
            "usual cause: root it (heapd_root_push) or link it from a rooted "
            "object first (Note [Client GC discipline] in heapd.h)\n",
            call, what, ref, why);
    abort();
}

void checked_object(const heapd_client *c, const void *ref, bool null_ok,
                    const char *call, const char *what)
{
    char buf[256];
    if (!ref) {
        if (!null_ok)
            fail(call, what, ref, "it is NULL");
        return;
    }
    const char *why = why_not_live(c, ref, false, buf, sizeof buf);
    if (why)
        fail(call, what, ref, why);
}

void checked_field(const heapd_client *c, const void *obj, void *const *field,
                   const char *call)
{
    checked_object(c, obj, false, call, "OBJ");
    uintptr_t f = (uintptr_t)field, o = (uintptr_t)obj;
    size_t nrefs = layout_header_nrefs(
        __atomic_load_n((const uint64_t *)obj - 1, __ATOMIC_RELAXED));
    if (f < o || f >= o + nrefs * LAYOUT_WORD || (f & 7) != 0) {
        fprintf(stderr, "heapd checked mode: %s: FIELD %p is not one of the "
                "%zu reference fields of OBJ %p\n", call, (void *)field,
                nrefs, obj);
        abort();
    }
}

void checked_accessor(const void *obj, const char *call)
{
    for (unsigned i = 0; i < CHECKED_MAX; i++) {
        const heapd_client *c = atomic_load(&checked_clients[i]);
        if (c && (uintptr_t)obj - (uintptr_t)c->base < c->size) {
            /* a young object: an accessor may read any (it cannot tell
             * which mutator asks) */
            char buf[256];
            const char *why = why_not_live(c, obj, true, buf, sizeof buf);
            if (why)
                fail(call, "OBJ", obj, why);
            return;
        }
    }
}
