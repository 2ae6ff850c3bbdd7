/* Validating references.
 *
 * Note [Validating references]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * The daemon shares its heap with processes it does not trust to be bug
 * free, so every reference it reads (a root slot, a reference field) is
 * checked before it is followed:
 *   - 8-byte aligned and inside [base, base + max_size);
 *   - in a segment the daemon's own table says holds objects (OWNED or
 *     FILLED small segments whose class the daemon knows, or the first
 *     segment of a large run) -- never a header, the control
 *     area or a free segment;
 *   - exactly the first-field address of a block of that segment;
 *   - whose mark byte is an epoch (the block is allocated; 0 is free and
 *     LAYOUT_MARK_CONT the inside of a run object, Note [Runs]).
 * The geometry comes from the daemon's table and layout_small_geometry,
 * never from the segment header, so nothing a client writes can make a
 * marker read outside the heap.  A bad reference is counted (stats
 * `bad_refs`) and not followed; marking goes on.  An object whose header
 * claims more reference fields or bytes than its block holds (a run
 * object: than its span) is counted the same way and its fields are not
 * traced.
 */
#include "validate.h"

#include "heap.h"

bool validate_ref(const struct heap *h, uintptr_t r, struct valid_ref *out)
{
    const struct segtab *t = &h->segs;
    uintptr_t base = (uintptr_t)h->base;
    uint32_t i, idx;
    uintptr_t seg, off;

    if ((r & 7) || r < base || r - base >= h->cfg->max_size)
        return false;
    i = (uint32_t)((r - base) >> h->seg_shift);
    seg = base + ((uintptr_t)i << h->seg_shift);
    off = r - seg;
    switch (seg_state(t, i)) {
    case SEG_OWNED:
    case SEG_FILLED: {
        uint8_t cls = seg_class((struct heap *)h, i);
        if (cls >= LAYOUT_NCLASSES || t->small_nblocks[cls] == 0) {
            seg_note_unknown_ref(h, i); /* Note [A segment leaves its owner] */
            return false;
        }
        idx = layout_small_block(off, t->small_first[cls],
                                 t->small_nblocks[cls], layout_class_size[cls],
                                 t->small_magic[cls]);
        if (idx == UINT32_MAX)
            return false;
        /* Note [Runs]: the object's extent, from the marks */
        out->block_size = layout_block_span(layout_seg_marks((void *)seg),
                                            idx, t->small_nblocks[cls], cls);
        break;
    }
    case SEG_LARGE:
        if (off != LAYOUT_LARGE_OBJECT + LAYOUT_WORD)
            return false;
        idx = 0;
        out->block_size = ((uint64_t)t->segs[i].run << h->seg_shift) -
                          LAYOUT_LARGE_OBJECT;
        break;
    default:
        return false;
    }
    out->obj = r;
    out->mark = layout_seg_marks((void *)seg) + idx;
    return layout_mark_in_use(__atomic_load_n(out->mark, __ATOMIC_RELAXED));
}

uint64_t validate_header(const struct valid_ref *ref)
{
    uint64_t hdr = __atomic_load_n((uint64_t *)(ref->obj - LAYOUT_WORD),
                                   __ATOMIC_RELAXED);
    uint64_t size = layout_object_size(layout_header_nrefs(hdr),
                                       layout_header_nbytes(hdr));
    return size <= ref->block_size ? hdr : 0;
}

const char *validate_diagnose(const struct heap *h, uintptr_t r)
{
    uintptr_t base = (uintptr_t)h->base;
    struct valid_ref ref = {0};
    if (r & 7)
        return "not 8-byte aligned";
    if (r < base || r - base >= h->cfg->max_size)
        return "outside the heap";
    uint32_t i = (uint32_t)((r - base) >> h->seg_shift);
    uintptr_t off = (r - base) & (((uintptr_t)1 << h->seg_shift) - 1);
    switch (seg_state(&h->segs, i)) {
    case SEG_CONTROL: return "in the control area";
    case SEG_FREE: return "in a free segment";
    case SEG_LARGE_TAIL: return "inside a large object";
    case SEG_LARGE:
        if (off < LAYOUT_LARGE_OBJECT + LAYOUT_WORD)
            return "in a segment's header";
        break;
    case SEG_OWNED:
    case SEG_FILLED: {
        uint8_t cls = seg_class((struct heap *)h, i);
        if (cls < LAYOUT_NCLASSES &&
            off < (uintptr_t)h->segs.small_first[cls] + LAYOUT_WORD)
            return "in a segment's header or mark bytes";
        break;
    }
    default: break;
    }
    ref.mark = NULL; /* validate_ref sets it for a block's first field */
    if (!validate_ref(h, r, &ref))
        return ref.mark ? "a free block" : "not the first field of a block";
    return "an object freed meanwhile";
}
