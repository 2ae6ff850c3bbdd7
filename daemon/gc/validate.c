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
 *   - whose mark byte is an epoch (the block is allocated; 0 is free,
 *     LAYOUT_MARK_CONT the inside of a run object, Note [Runs], and
 *     LAYOUT_MARK_YOUNG a young object, Note [References to young
 *     objects]).  The mark is read once, and what was read is what the
 *     caller decides by (valid_ref.seen).
 * The geometry comes from the daemon's table and layout_small_geometry,
 * never from the segment header, so nothing a client writes can make a
 * marker read outside the heap.  A bad reference is counted (stats
 * `bad_refs`) and not followed; marking goes on.  An object whose header
 * claims more reference fields or bytes than its block holds (a run
 * object: than its span) is counted the same way and its fields are not
 * traced.
 *
 * Note [References to young objects]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A block whose mark is LAYOUT_MARK_YOUNG holds a young object (Note
 * [Young objects] in proto/young.h): its own mutator may reference it --
 * from its roots, its C locals, its other young objects -- and nothing
 * shared may (Note [The young invariant] in client/minor.c: a young value
 * is promoted before it is stored anywhere shared).  So validate_ref
 * refuses a reference to a young block wherever the daemon meets it: a
 * shared object's field, a global, a URS entry, a block a remark rescans,
 * any slot's roots, a young block's fields.  Such a reference is not
 * marked and not followed, counted in young_refs_refused (not bad_refs,
 * so that the counters tell a young object that escaped, a bug of its
 * client's program, from memory that is no object at all) and logged as
 * a bad reference is, a few a cycle.  The one place the daemon takes a
 * young reference is a young slot's own stack handshake: its roots into
 * its client's young blocks are skipped there, and those blocks scanned
 * instead (Note [The daemon's preparatory push] in mark.c).
 * Refusing is safe for everyone but the client that broke the invariant,
 * which is the client's to keep: the young object is not marked, so its
 * owner's minor collection frees it as if nothing else held it (or
 * promotes it, black), and the shared object keeps a dangling reference
 * that validation refuses from then on (a free block, or one its client
 * allocated again) -- the program that follows it meets its own bug, and
 * the collector frees nothing another client reaches because of it.
 * Marking it instead would write the epoch over a mark only its mutator
 * writes: the object would be shared behind its mutator's back, which
 * would still free it at its next minor collection.
 * The marker never turns a YOUNG mark into an epoch.  mark_one stores the
 * epoch only if the one load validate_ref made read another epoch (a
 * shared object not yet marked); between that load and the store the mark
 * cannot become YOUNG, for only its owner writes a YOUNG mark, only over
 * a 0 (an allocation), and an epoch becomes 0 only by a sweep, which
 * never runs while marking (Note [Epoch-tagged marks] in proto/layout.h;
 * a mutator frees only its own young blocks).  A mark read as YOUNG is
 * never written; that its owner promotes it (YOUNG -> the epoch, black)
 * right after is benign: the object is shared from then on, and a
 * reference read before the promotion was stored before it, against the
 * invariant (a mutator promotes, with release order, before it stores:
 * a marker that reads the reference reads the promoted mark).
 */
#include "validate.h"

#include "heap.h"

bool validate_ref(const struct heap *h, uintptr_t r, struct valid_ref *out)
{
    const struct segtab *t = &h->segs;
    out->young = false;
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
    out->seen = __atomic_load_n(out->mark, __ATOMIC_RELAXED);
    /* Note [References to young objects] */
    out->young = out->seen == LAYOUT_MARK_YOUNG;
    return layout_mark_is_epoch(out->seen);
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
    if (validate_ref(h, r, &ref))
        return "an object freed meanwhile";
    if (ref.young) /* Note [References to young objects] */
        return "a young object (its own mutator's: nothing shared may "
               "reference one)";
    return ref.mark ? "a free block" : "not the first field of a block";
}
