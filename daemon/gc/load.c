/* Loading a saved heap (load = FILE, heapctl load).
 *
 * Note [Loading a saved heap]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A saved heap (Note [Saved heap files] in proto/savefile.c) goes back
 * into an empty heap at the same base, every object at its address, so
 * every reference in it, and in the globals, stays what it was -- unless
 * this heapd's layout has no such block there (Note [Loading a heap saved
 * with another layout]).  The loader trusts nothing in the file and
 * either loads all of it or leaves the heap empty:
 *   1. a first pass reads the whole file and writes nothing: the header
 *      (magic, checksum, a format this heapd reads, the heap's base), each
 *      chunk's checksum, each record's fields (a block no layout of this
 *      heap could have is damage), whether this heapd's layout has a
 *      block of the record's kind and size at its address, the END totals
 *      against what it read, and that nothing follows END.  A truncated
 *      file, a flipped byte, another heap's file, a future format: each
 *      is refused here, with the file offset;
 *   2. a second pass places the objects: a FREE segment becomes FILLED
 *      with the object's class, or a large run, reading as zero
 *      (transition (7) of Note [Segment lifecycle] in segment.c); the
 *      object's block gets the heap's epoch as its mark (continuation
 *      marks after it in the run class) and its header a tag of 0, which
 *      is what an object allocated before this cycle looks like (Note
 *      [Epoch-tagged marks]).  Two objects on one block, or a segment
 *      wanted for two classes, stop it;
 *   3. a third pass checks, in the heap, that every reference of every
 *      object and every global is 0 or an object the file placed.
 * A load runs alone: before the collector starts (load =), or on the
 * collector's thread before its next cycle with mutators refused (heapctl
 * load), into a heap with no client; so the segments it takes and their
 * marks are its own until it returns.
 * A failure in 2 or 3 frees every segment the load took (punched) and
 * deletes the globals it set: the heap is empty and serviceable again.
 * So does a stop of heapd, which ends a load at its next chunk
 * (load_abort) rather than wait for it.
 * The heap's first cycle then marks from the globals what the save found
 * reachable, all of it.
 *
 * Note [Loading a heap saved with another layout]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A heapd whose segment size or size class table differs from the saver's
 * (an upgrade that changes the layout, a config that changes
 * segment_size) has no block at some saved addresses, or two saved
 * objects on one of its blocks.  Then every object is placed anew, as
 * its allocator would place it: the class for its size, in segments
 * taken in order from the heap's first.  A map from each saved address
 * to the new one (16 bytes an object, sorted once) then serves pass 3,
 * which checks that no two objects overlapped where they were saved and
 * rewrites every reference and every global, refusing one that names no
 * object of the file.  Only references move: bytes are copied as they
 * are, so an address a program kept among an object's bytes is stale.
 * The rule is all or nothing -- one object that does not fit moves them
 * all -- because a moved object could take the block of one not yet
 * placed.  Measured, 5e6 records of 40-byte blocks (a 280 MB file),
 * loaded by a heapd of 128K segments and by one of 256K: 0.60 s in
 * place, 1.12 s moved (median of 3; the lookups are a fifth of it), and
 * a map of 80 MB while it loads (twice that while it is sorted).
 */
#include "load.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "globals.h"
#include "heap.h"
#include "log.h"
#include "savefile.h"
#include "validate.h"

/* Where a load that moves objects puts the next one (Note [Loading a
 * heap saved with another layout]), and where it put each. */
struct moved {
    uint64_t from, to;
};
struct mover {
    uint32_t next_seg;                   /* the next segment to take */
    uint32_t seg[LAYOUT_NCLASSES];       /* each class's current segment */
    uint32_t idx[LAYOUT_NCLASSES];       /* and its next block */
    struct moved *map;                   /* one a placed object */
    size_t n, cap;
    char first[400];                     /* why the first did not fit */
};

struct reader {
    struct heap *h;
    int fd;
    const char *path;
    uint64_t off;            /* file offset of the next byte to read */
    uint64_t chunk_off;      /* the current chunk's */
    uint8_t *buf;            /* its payload and checksum */
    uint32_t len, pos;
    bool end;                /* END read */
    uint8_t totals[32];
    uint64_t data_bytes;
    bool apply;              /* pass 2 */
    bool move;               /* objects placed anew: Note [Loading a heap
                                saved with another layout] */
    bool retry;              /* pass 2 in place found that it must move */
    uint32_t last_seg;       /* the last small object's segment (0: none) */
    uint8_t last_cls;        /* and its class */
    uint8_t epoch;
    struct mover mv;
    uint32_t *taken;         /* segments the load made FILLED or LARGE */
    size_t ntaken, cap;
    char names[LAYOUT_MAX_GLOBALS][LAYOUT_GLOBAL_NAME];
    unsigned nglobals;
    struct load_result res;
    char *why;
    size_t n;
};

static int fail(struct reader *r, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct reader *r, uint64_t off, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->why, r->n, "%s: at offset %llu: %s", r->path,
             (unsigned long long)off, msg);
    return -EINVAL;
}

/* Read N bytes of WHAT at the current offset: 0, or -EINVAL naming the
 * truncation, or a read's error. */
static int read_in(struct reader *r, void *p, size_t n, const char *what)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(r->fd, (uint8_t *)p + got, n - got,
                          (off_t)(r->off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int e = errno;
            snprintf(r->why, r->n, "%s: reading at offset %llu: %s",
                     r->path, (unsigned long long)(r->off + got),
                     strerror(e));
            return -e;
        }
        if (k == 0)
            return fail(r, r->off + got, "the file ends inside %s: it is "
                        "truncated", what);
        got += (size_t)k;
    }
    r->off += n;
    return 0;
}

static int next_chunk(struct reader *r)
{
    uint8_t prefix[8], crc[4];
    int rc;
    if (atomic_load_explicit(&r->h->load_stop, memory_order_relaxed)) {
        snprintf(r->why, r->n, "%s: heapd is stopping; load it again once "
                 "heapd runs", r->path);
        return -ECANCELED;
    }
    r->chunk_off = r->off;
    if ((rc = read_in(r, prefix, 8, "a chunk's header (no END chunk "
                      "came)")) < 0)
        return rc;
    uint32_t type = save_get32(prefix), len = save_get32(prefix + 4);
    if (type != SAVE_CHUNK_DATA && type != SAVE_CHUNK_END)
        return fail(r, r->chunk_off, "a chunk of unknown type %u: the file "
                    "is damaged", type);
    if (len > SAVE_CHUNK_MAX || (type == SAVE_CHUNK_END && len != 32))
        return fail(r, r->chunk_off + 4, "a chunk of %u bytes, which no "
                    "saver writes: the file is damaged", len);
    if ((rc = read_in(r, r->buf, len, "a chunk")) < 0 ||
        (rc = read_in(r, crc, 4, "a chunk's checksum")) < 0)
        return rc;
    if (save_get32(crc) != save_chunk_crc(prefix, r->buf, len))
        return fail(r, r->chunk_off, "the checksum of this chunk (%u "
                    "bytes) does not match: the file is damaged", len);
    r->pos = 0;
    if (type == SAVE_CHUNK_END) {
        memcpy(r->totals, r->buf, 32);
        r->len = 0;
        r->end = true;
        uint8_t more;
        ssize_t k = pread(r->fd, &more, 1, (off_t)r->off);
        if (k != 0)
            return fail(r, r->off, "bytes follow the END chunk: the file "
                        "is damaged");
        return 0;
    }
    r->len = len;
    r->data_bytes += len;
    return 0;
}

/* The record offset the reader is at, for messages. */
static uint64_t here(const struct reader *r)
{
    return r->chunk_off + 8 + r->pos;
}

/* N bytes of the records into P (NULL: skipped). */
static int take(struct reader *r, void *p, uint64_t n)
{
    uint8_t *d = p;
    while (n > 0) {
        if (r->pos == r->len) {
            if (r->end)
                return fail(r, r->chunk_off, "a record is cut short by the "
                            "END chunk: the file is damaged");
            int rc = next_chunk(r);
            if (rc < 0)
                return rc;
            continue;
        }
        uint64_t k = r->len - r->pos;
        if (k > n)
            k = n;
        if (d) {
            memcpy(d, r->buf + r->pos, k);
            d += k;
        }
        r->pos += (uint32_t)k;
        n -= k;
    }
    return 0;
}

static int take64(struct reader *r, uint64_t *v)
{
    uint8_t b[8];
    if (r->len - r->pos >= 8) { /* most: no chunk's end to cross */
        *v = save_get64(r->buf + r->pos);
        r->pos += 8;
        return 0;
    }
    int rc = take(r, b, 8);
    *v = save_get64(b);
    return rc;
}

/* ---- placing an object ---- */

struct place {
    uint32_t seg, idx, span, run;
    uint8_t cls;
    bool large;
};

/* What the file says of an object at ADDR of SIZE bytes in BLOCK (kind
 * and bytes) that no layout of a heap like this one could hold: 0, or
 * -EINVAL, the file damaged. */
static int check_block(struct reader *r, uint64_t at, uint64_t addr,
                       uint64_t block, uint64_t size)
{
    uint64_t kind = block >> SAVE_BLOCK_KIND_SHIFT;
    uint64_t bytes = block & SAVE_BLOCK_BYTES_MASK;
    uint64_t base = (uint64_t)(uintptr_t)r->h->base;
    if (addr & 7)
        return fail(r, at, "object 0x%llx is not 8-byte aligned: the file "
                    "is damaged", (unsigned long long)addr);
    /* no heap at this base has it (and so its end cannot wrap) */
    if (addr < base + LAYOUT_WORD || addr >= LAYOUT_USER_SPACE_END)
        return fail(r, at, "object 0x%llx is at no address of a heap at "
                    "0x%llx: the file is damaged", (unsigned long long)addr,
                    (unsigned long long)base);
    if (kind != SAVE_BLOCK_SMALL && kind != SAVE_BLOCK_RUN &&
        kind != SAVE_BLOCK_LARGE)
        return fail(r, at, "object 0x%llx has a block of unknown kind "
                    "%llu: the file is damaged", (unsigned long long)addr,
                    (unsigned long long)kind);
    if (size > bytes)
        return fail(r, at, "object 0x%llx of %llu bytes does not fit its "
                    "block of %llu: the file is damaged",
                    (unsigned long long)addr, (unsigned long long)size,
                    (unsigned long long)bytes);
    if (bytes >= r->h->cfg->max_size)
        return fail(r, at, "object 0x%llx has a block of %llu bytes, more "
                    "than the heap's max_size (%llu): the file is damaged, "
                    "or of a larger heap (give this one its max_size)",
                    (unsigned long long)addr, (unsigned long long)bytes,
                    (unsigned long long)r->h->cfg->max_size);
    return 0;
}

/* Where this heapd's layout has the block of BLOCK (kind and bytes) at
 * ADDR: true with *P, or false with WHY (N bytes), when this heapd's
 * segments or size classes are not those the file was saved with. */
static bool where_to(struct reader *r, uint64_t addr, uint64_t block,
                     struct place *p, char *why, size_t n)
{
    struct heap *h = r->h;
    const struct segtab *t = &h->segs;
    uint64_t base = (uint64_t)(uintptr_t)h->base;
    uint64_t kind = block >> SAVE_BLOCK_KIND_SHIFT;
    uint64_t bytes = block & SAVE_BLOCK_BYTES_MASK;
    unsigned long long ssize = h->cfg->segment_size;
    memset(p, 0, sizeof *p);
    if (addr < base + ((uint64_t)t->first << h->seg_shift) ||
        addr - base >= h->cfg->max_size) {
        snprintf(why, n, "object 0x%llx is not in this heap's segments "
                 "(0x%llx, %llu bytes)", (unsigned long long)addr,
                 (unsigned long long)base,
                 (unsigned long long)h->cfg->max_size);
        return false;
    }
    p->seg = (uint32_t)((addr - base) >> h->seg_shift);
    uint64_t off = (addr - base) & (((uint64_t)1 << h->seg_shift) - 1);
    unsigned c = LAYOUT_NCLASSES;
    if (kind == SAVE_BLOCK_LARGE) {
        uint64_t run = (bytes + LAYOUT_LARGE_OBJECT) >> h->seg_shift;
        if (off != LAYOUT_LARGE_OBJECT + LAYOUT_WORD ||
            (bytes + LAYOUT_LARGE_OBJECT) & (((uint64_t)1 << h->seg_shift) -
                                             1) ||
            run == 0 || run > (uint64_t)(t->count - p->seg)) {
            snprintf(why, n, "large object 0x%llx of a %llu-byte run is "
                     "not where this heapd's layout puts one (segments of "
                     "%llu bytes)", (unsigned long long)addr,
                     (unsigned long long)bytes, ssize);
            return false;
        }
        p->large = true;
        p->run = (uint32_t)run;
        return true;
    }
    if (kind == SAVE_BLOCK_SMALL) {
        for (unsigned k = 0; k < LAYOUT_CLASS_RUN && c == LAYOUT_NCLASSES;
             k++)
            if (t->small_nblocks[k] && layout_class_size[k] == bytes)
                c = k;
        p->span = 1;
    } else if (t->small_nblocks[LAYOUT_CLASS_RUN] && bytes > 0 &&
               bytes % LAYOUT_RUN_GRANULE == 0 &&
               bytes / LAYOUT_RUN_GRANULE <=
                   t->small_nblocks[LAYOUT_CLASS_RUN]) {
        c = LAYOUT_CLASS_RUN; /* a span past the blocks is refused above,
                                 in 64 bits, before it is narrowed */
        p->span = (uint32_t)(bytes / LAYOUT_RUN_GRANULE);
    }
    if (c == LAYOUT_NCLASSES) {
        snprintf(why, n, "object 0x%llx has a block of %llu bytes, which "
                 "this heapd's layout has no size class for",
                 (unsigned long long)addr, (unsigned long long)bytes);
        return false;
    }
    p->cls = (uint8_t)c;
    p->idx = layout_small_block(off, t->small_first[c], t->small_nblocks[c],
                                layout_class_size[c], t->small_magic[c]);
    if (p->idx == UINT32_MAX ||
        (uint64_t)p->idx + p->span > t->small_nblocks[c]) {
        snprintf(why, n, "object 0x%llx is not at a block of %llu bytes in "
                 "this heapd's layout (segments of %llu bytes)",
                 (unsigned long long)addr, (unsigned long long)bytes, ssize);
        return false;
    }
    return true;
}

/* Pass 2 of a load that moves objects: the block this heapd's layout
 * gives an object of SIZE bytes (the class its allocator would choose),
 * in segments taken in order from the heap's first, as *P, and the
 * object's address there, *TO. */
static int move_to(struct reader *r, uint64_t at, uint64_t addr,
                   uint64_t size, struct place *p, uint64_t *to)
{
    struct heap *h = r->h;
    const struct segtab *t = &h->segs;
    struct mover *mv = &r->mv;
    uint64_t seg_bytes = (uint64_t)1 << h->seg_shift;
    memset(p, 0, sizeof *p);
    if (mv->next_seg < t->first)
        mv->next_seg = t->first;
    if (size > layout_run_max(h->cfg->segment_size)) {
        uint64_t run = (size + LAYOUT_LARGE_OBJECT + seg_bytes - 1) >>
                       h->seg_shift;
        if (run > (uint64_t)(t->count - mv->next_seg))
            goto full;
        p->large = true;
        p->seg = mv->next_seg;
        p->run = (uint32_t)run;
        mv->next_seg += (uint32_t)run;
        *to = (uint64_t)(uintptr_t)heap_seg_addr(h, p->seg) +
              LAYOUT_LARGE_OBJECT + LAYOUT_WORD;
        return 0;
    }
    unsigned c = size > t->small_max ? LAYOUT_CLASS_RUN
                                     : layout_size_class((uint32_t)size);
    uint32_t span = c == LAYOUT_CLASS_RUN
                        ? (uint32_t)((size + LAYOUT_RUN_GRANULE - 1) /
                                     LAYOUT_RUN_GRANULE)
                        : 1;
    if (t->small_nblocks[c] < span)
        return fail(r, at, "object 0x%llx of %llu bytes has no block in "
                    "this heapd's layout", (unsigned long long)addr,
                    (unsigned long long)size);
    /* segment 0 is the control area's: 0 means no segment yet */
    if (mv->seg[c] == 0 || mv->idx[c] + span > t->small_nblocks[c]) {
        if (mv->next_seg >= t->count)
            goto full;
        mv->seg[c] = mv->next_seg++;
        mv->idx[c] = 0;
    }
    p->seg = mv->seg[c];
    p->cls = (uint8_t)c;
    p->idx = mv->idx[c];
    p->span = span;
    mv->idx[c] += span;
    *to = (uint64_t)(uintptr_t)heap_seg_addr(h, p->seg) + t->small_first[c] +
          (uint64_t)p->idx * layout_class_size[c] + LAYOUT_WORD;
    return 0;
full:
    return fail(r, at, "object 0x%llx of %llu bytes does not fit in what is "
                "left of heap '%s' (max_size %llu): give it a larger "
                "max_size", (unsigned long long)addr,
                (unsigned long long)size, h->cfg->name,
                (unsigned long long)h->cfg->max_size);
}

/* Remember that the object saved at FROM is at TO now. */
static int moved_add(struct reader *r, uint64_t from, uint64_t to)
{
    struct mover *mv = &r->mv;
    if (mv->n == mv->cap) {
        size_t cap = mv->cap ? 2 * mv->cap : 1024;
        struct moved *m = realloc(mv->map, cap * sizeof *m);
        if (!m) {
            snprintf(r->why, r->n, "out of memory while loading");
            return -ENOMEM;
        }
        mv->map = m;
        mv->cap = cap;
    }
    mv->map[mv->n++] = (struct moved){from, to};
    return 0;
}

/* Pass 2: take P's segment(s) if they are free and claim its block, for
 * the object saved at FROM, to be at ADDR.  -EAGAIN when a load in place
 * finds it taken. */
static int place(struct reader *r, uint64_t at, uint64_t from, uint64_t addr,
                 const struct place *p)
{
    struct heap *h = r->h;
    int rc = 0;
    if (r->ntaken == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 256;
        uint32_t *t = realloc(r->taken, cap * sizeof *t);
        if (!t) {
            snprintf(r->why, r->n, "out of memory while loading");
            return -ENOMEM;
        }
        r->taken = t;
        r->cap = cap;
    }
    /* the last object's segment and class: no state to change, and its
     * marks are the load's alone (Note [Loading a saved heap]: a load runs
     * alone) -- the lock taken for each object was a tenth of its time */
    bool same = !p->large && p->seg == r->last_seg && p->cls == r->last_cls;
    uint8_t *marks = layout_seg_marks(heap_seg_addr(h, p->seg));
    if (!same) {
        heap_lock(h);
        uint8_t st = seg_state(&h->segs, p->seg);
        if (st == SEG_FREE) {
            rc = p->large ? seg_load_large(h, p->seg, p->run)
                          : seg_load_small(h, p->seg, p->cls);
            if (rc == 0)
                r->taken[r->ntaken++] = p->seg;
        } else if (p->large || st != SEG_FILLED ||
                   h->segs.segs[p->seg].cls != p->cls) {
            rc = -EBUSY;
        }
        heap_unlock(h);
    }
    for (uint32_t k = 0; rc == 0 && k < p->span; k++)
        if (marks[p->idx + k] != 0)
            rc = -EBUSY;
    if (rc == 0) {
        for (uint32_t k = 1; k < p->span; k++)
            marks[p->idx + k] = LAYOUT_MARK_CONT;
        __atomic_store_n(&marks[p->idx], r->epoch, __ATOMIC_RELEASE);
        if (!p->large) {
            r->last_seg = p->seg;
            r->last_cls = p->cls;
        }
    }
    if (rc < 0 && r->move)
        return fail(r, at, "object 0x%llx cannot be placed at 0x%llx: the "
                    "block is taken", (unsigned long long)from,
                    (unsigned long long)addr);
    if (rc < 0) { /* another layout's, or damaged: moving will tell */
        snprintf(r->mv.first, sizeof r->mv.first, "object 0x%llx is on a "
                 "block or segment another object of the file took in this "
                 "heapd's layout", (unsigned long long)addr);
        r->retry = true;
        return -EAGAIN;
    }
    return 0;
}

/* ---- records ---- */

static int object_record(struct reader *r, uint64_t addr)
{
    uint64_t at = here(r) - 8, block, hdr, v, to = addr;
    struct place p;
    char why[400];
    int rc;
    if ((rc = take64(r, &block)) < 0 || (rc = take64(r, &hdr)) < 0)
        return rc;
    uint64_t nrefs = layout_header_nrefs(hdr);
    uint64_t nbytes = layout_header_nbytes(hdr);
    uint64_t size = layout_object_size(nrefs, nbytes);
    if (layout_header_tag(hdr) != 0)
        return fail(r, at, "object 0x%llx has a header tag, which no saver "
                    "writes: the file is damaged", (unsigned long long)addr);
    if ((rc = check_block(r, at, addr, block, size)) < 0)
        return rc;
    if (!r->move && !where_to(r, addr, block, &p, why, sizeof why)) {
        snprintf(r->mv.first, sizeof r->mv.first, "%s", why);
        if (!r->apply) {
            r->move = true;
        } else { /* the file changed since pass 1: move, checking again */
            r->retry = true;
            return -EAGAIN;
        }
    }
    if (r->apply && r->move &&
        ((rc = move_to(r, at, addr, size, &p, &to)) < 0 ||
         (rc = moved_add(r, addr, to)) < 0))
        return rc;
    if (r->apply && (rc = place(r, at, addr, to, &p)) < 0)
        return rc;
    uint64_t *obj = (uint64_t *)(uintptr_t)to;
    for (uint64_t k = 0; k < nrefs; k++) {
        if ((rc = take64(r, &v)) < 0)
            return rc;
        if (v & 7)
            return fail(r, here(r) - 8, "reference %llu of object 0x%llx "
                        "is not 8-byte aligned: the file is damaged",
                        (unsigned long long)k, (unsigned long long)addr);
        if (r->apply)
            obj[k] = v;
    }
    if ((rc = take(r, r->apply ? (void *)(obj + nrefs) : NULL, nbytes)) < 0 ||
        (rc = take(r, NULL, (8 - nbytes % 8) % 8)) < 0)
        return rc;
    if (r->apply)
        __atomic_store_n(obj - 1, layout_header(nrefs, nbytes),
                         __ATOMIC_RELEASE);
    r->res.objects++;
    r->res.object_bytes += layout_object_size(nrefs, nbytes);
    return 0;
}

static int global_record(struct reader *r)
{
    uint64_t at = here(r) - 8, value, len;
    char name[LAYOUT_GLOBAL_NAME + 8] = {0};
    int rc;
    if ((rc = take64(r, &value)) < 0 || (rc = take64(r, &len)) < 0)
        return rc;
    if (len == 0 || len >= LAYOUT_GLOBAL_NAME)
        return fail(r, at, "a global's name of %llu bytes: the file is "
                    "damaged", (unsigned long long)len);
    if ((rc = take(r, name, (len + 7) & ~(uint64_t)7)) < 0)
        return rc;
    if (strlen(name) != len)
        return fail(r, at, "a global's name holds a NUL: the file is "
                    "damaged");
    if (r->res.globals == LAYOUT_MAX_GLOBALS)
        return fail(r, at, "more than %u globals: the file is damaged",
                    LAYOUT_MAX_GLOBALS);
    char shown[4 * LAYOUT_GLOBAL_NAME + 1]; /* the file's bytes, for logs */
    log_escape(shown, sizeof shown, name);
    for (unsigned g = 0; g < r->nglobals; g++)
        if (strcmp(r->names[g], name) == 0)
            return fail(r, at, "global '%s' twice: the file is damaged",
                        shown);
    memcpy(r->names[r->nglobals++], name, len + 1);
    if (r->apply) {
        uint32_t idx;
        enum globals_role role;
        heap_lock(r->h);
        rc = globals_claim(r->h, 0, name, false, &idx, &role);
        if (rc == 0)
            atomic_store(&r->h->control->global_values[idx],
                         (void *)(uintptr_t)value);
        heap_unlock(r->h);
        if (rc < 0)
            return fail(r, at, "global '%s' cannot be set: %s", shown,
                        strerror(-rc));
    }
    r->res.globals++;
    return 0;
}

/* One pass over the records (Note [Loading a saved heap], 1 and 2). */
static int pass(struct reader *r)
{
    uint8_t head[SAVE_HEADER_BYTES];
    struct save_header hd;
    int rc;
    r->off = 0;
    r->len = r->pos = 0;
    r->chunk_off = 0;
    r->end = false;
    r->data_bytes = 0;
    r->nglobals = 0;
    memset(&r->res, 0, sizeof r->res);
    if ((rc = read_in(r, head, sizeof head, "its header")) < 0)
        return rc;
    if ((rc = save_header_decode(head, &hd, r->why, r->n)) < 0) {
        char inner[400];
        snprintf(inner, sizeof inner, "%s", r->why);
        snprintf(r->why, r->n, "%s: %s", r->path, inner);
        return rc;
    }
    if (hd.base != (uint64_t)(uintptr_t)r->h->base)
        return fail(r, 16, "the file is of a heap at base 0x%llx, and heap "
                    "'%s' is at 0x%llx: load it into a heap whose section "
                    "says base = 0x%llx", (unsigned long long)hd.base,
                    r->h->cfg->name,
                    (unsigned long long)(uintptr_t)r->h->base,
                    (unsigned long long)hd.base);
    for (;;) {
        if (r->pos == r->len) {
            if (r->end)
                break;
            if ((rc = next_chunk(r)) < 0)
                return rc;
            continue;
        }
        uint64_t first, type;
        if ((rc = take64(r, &first)) < 0)
            return rc;
        type = first & SAVE_REC_TYPE_MASK;
        if (type == SAVE_REC_OBJECT)
            rc = object_record(r, first & ~SAVE_REC_TYPE_MASK);
        else if (first == SAVE_REC_GLOBAL)
            rc = global_record(r);
        else
            rc = fail(r, here(r) - 8, "a record of unknown type %llu: the "
                      "file is damaged", (unsigned long long)type);
        if (rc < 0)
            return rc;
    }
    if (save_get64(r->totals) != r->res.objects ||
        save_get64(r->totals + 8) != r->res.object_bytes ||
        save_get64(r->totals + 16) != r->res.globals ||
        save_get64(r->totals + 24) != r->data_bytes)
        return fail(r, r->chunk_off, "the END chunk's totals (%llu objects, "
                    "%llu globals) do not match what the file holds (%llu, "
                    "%llu): the file is damaged",
                    (unsigned long long)save_get64(r->totals),
                    (unsigned long long)save_get64(r->totals + 16),
                    (unsigned long long)r->res.objects,
                    (unsigned long long)r->res.globals);
    r->res.file_bytes = r->off;
    return 0;
}

/* Pass 3: every reference the load wrote is 0 or an object it placed. */
static int check_refs(struct reader *r)
{
    struct heap *h = r->h;
    const struct segtab *t = &h->segs;
    struct valid_ref ref;
    for (size_t k = 0; k < r->ntaken; k++) {
        uint32_t i = r->taken[k];
        uint8_t *seg = heap_seg_addr(h, i);
        uint8_t *marks = layout_seg_marks(seg);
        bool large = seg_state(t, i) == SEG_LARGE;
        uint8_t c = t->segs[i].cls;
        uint32_t nb = large ? 1 : t->small_nblocks[c];
        for (uint32_t b = 0; b < nb; b++) {
            if (marks[b] != r->epoch)
                continue;
            uint64_t *obj = (uint64_t *)(seg + (large
                                    ? LAYOUT_LARGE_OBJECT + LAYOUT_WORD
                                    : t->small_first[c] + LAYOUT_WORD +
                                          (uint64_t)b * layout_class_size[c]));
            uint64_t nrefs = layout_header_nrefs(obj[-1]);
            for (uint64_t f = 0; f < nrefs; f++)
                if (obj[f] && !(validate_ref(h, (uintptr_t)obj[f], &ref) &&
                                validate_header(&ref)))
                    return fail(r, 0, "object 0x%lx refers to 0x%llx, "
                                "which the file holds no object at: the "
                                "file is damaged", (unsigned long)obj,
                                (unsigned long long)obj[f]);
        }
    }
    for (unsigned g = 0; g < LAYOUT_MAX_GLOBALS; g++) {
        uintptr_t v = (uintptr_t)atomic_load(&h->control->global_values[g]);
        char shown[4 * LAYOUT_GLOBAL_NAME + 1];
        if (h->globals[g].state == LAYOUT_GLOBAL_SET && v &&
            !(validate_ref(h, v, &ref) && validate_header(&ref)))
            return fail(r, 0, "global '%s' refers to 0x%lx, which the file "
                        "holds no object at: the file is damaged",
                        log_escape(shown, sizeof shown, h->globals[g].name),
                        (unsigned long)v);
    }
    return 0;
}

/* Sort R's map by saved address: a radix sort of 16 bits a pass over the
 * 44 bits an aligned user address has (qsort was 40% of a moving load's
 * time); 0, or -ENOMEM. */
static int sort_moved(struct reader *r)
{
    struct mover *mv = &r->mv;
    struct moved *tmp = malloc((mv->n ? mv->n : 1) * sizeof *tmp);
    size_t *count = malloc(((size_t)1 << 16) * sizeof *count);
    int rc = 0;
    if (!tmp || !count) {
        snprintf(r->why, r->n, "out of memory while loading");
        rc = -ENOMEM;
        goto out;
    }
    struct moved *src = mv->map, *dst = tmp;
    for (unsigned shift = 3; shift < 47; shift += 16) {
        memset(count, 0, ((size_t)1 << 16) * sizeof *count);
        for (size_t k = 0; k < mv->n; k++)
            count[(src[k].from >> shift) & 0xffff]++;
        size_t at = 0;
        for (size_t d = 0; d < ((size_t)1 << 16); d++) {
            size_t c = count[d];
            count[d] = at;
            at += c;
        }
        for (size_t k = 0; k < mv->n; k++)
            dst[count[(src[k].from >> shift) & 0xffff]++] = src[k];
        struct moved *t = src;
        src = dst;
        dst = t;
    }
    if (src != mv->map) /* an odd number of passes */
        memcpy(mv->map, src, mv->n * sizeof *src);
out:
    free(tmp);
    free(count);
    return rc;
}

/* Where the object saved at FROM is now: its address, or 0 if the file
 * held none there (R's map sorted by from). */
static uint64_t moved_to(const struct reader *r, uint64_t from)
{
    size_t lo = 0, hi = r->mv.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->mv.map[mid].from < from)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->mv.n && r->mv.map[lo].from == from ? r->mv.map[lo].to : 0;
}

/* Pass 3 of a load that moved objects: no two of the file's objects
 * overlapped where they were saved, and every reference of every object
 * and every global is 0 or an object of the file, now rewritten to where
 * it is (Note [Loading a heap saved with another layout]). */
static int relink(struct reader *r)
{
    struct heap *h = r->h;
    struct mover *mv = &r->mv;
    int rc = sort_moved(r);
    if (rc < 0)
        return rc;
    for (size_t k = 0; k < mv->n; k++) {
        const uint64_t *obj = (const uint64_t *)(uintptr_t)mv->map[k].to;
        uint64_t end = mv->map[k].from - LAYOUT_WORD +
                       layout_object_size(layout_header_nrefs(obj[-1]),
                                          layout_header_nbytes(obj[-1]));
        if (k + 1 < mv->n && end > mv->map[k + 1].from - LAYOUT_WORD)
            return fail(r, 0, "object 0x%llx overlaps another object of the "
                        "file where it was saved: the file is damaged",
                        (unsigned long long)mv->map[k + 1].from);
    }
    for (size_t k = 0; k < mv->n; k++) {
        uint64_t *obj = (uint64_t *)(uintptr_t)mv->map[k].to;
        uint64_t nrefs = layout_header_nrefs(obj[-1]);
        for (uint64_t f = 0; f < nrefs; f++) {
            uint64_t to = obj[f] ? moved_to(r, obj[f]) : 0;
            if (obj[f] && !to)
                return fail(r, 0, "object 0x%llx refers to 0x%llx, which "
                            "the file holds no object at: the file is "
                            "damaged", (unsigned long long)mv->map[k].from,
                            (unsigned long long)obj[f]);
            obj[f] = to;
        }
    }
    for (unsigned g = 0; g < LAYOUT_MAX_GLOBALS; g++) {
        uint64_t v = (uint64_t)(uintptr_t)atomic_load(
            &h->control->global_values[g]);
        uint64_t to = v ? moved_to(r, v) : 0;
        char shown[4 * LAYOUT_GLOBAL_NAME + 1];
        if (h->globals[g].state != LAYOUT_GLOBAL_SET || !v)
            continue;
        if (!to)
            return fail(r, 0, "global '%s' refers to 0x%llx, which the file "
                        "holds no object at: the file is damaged",
                        log_escape(shown, sizeof shown, h->globals[g].name),
                        (unsigned long long)v);
        atomic_store(&h->control->global_values[g], (void *)(uintptr_t)to);
    }
    r->res.moved = mv->n;
    return 0;
}

static void unload(struct reader *r)
{
    struct heap *h = r->h;
    heap_lock(h);
    for (size_t k = 0; k < r->ntaken; k++)
        seg_unload(h, r->taken[k]);
    for (unsigned g = 0; g < r->nglobals; g++)
        globals_delete(h, r->names[g]);
    heap_unlock(h);
    r->ntaken = 0;
    r->last_seg = 0;
}

/* Pass 2, and 3: in place, or moving; a load in place that finds two of
 * the file's objects on one block of this heapd's layout starts again,
 * moving. */
static int apply(struct reader *r)
{
    int rc;
    r->apply = true;
    if (!r->move) {
        rc = pass(r);
        if (rc == 0 && (rc = check_refs(r)) == 0)
            return 0;
        unload(r);
        if (!r->retry)
            return rc;
        r->move = true;
    }
    struct mover *mv = &r->mv;
    log_info("heap '%s': %s was saved with another layout (%s): its "
             "objects are placed anew and their references rewritten",
             r->h->cfg->name, r->path, mv->first);
    mv->next_seg = 0;
    memset(mv->seg, 0, sizeof mv->seg);
    mv->n = 0;
    if ((rc = pass(r)) < 0 || (rc = relink(r)) < 0)
        unload(r);
    return rc;
}

bool load_heap_empty(struct heap *h, char *why, size_t n)
{
    const struct segtab *t = &h->segs;
    bool empty = true;
    heap_lock(h);
    if (h->clients || h->mutators) {
        snprintf(why, n, "heap '%s' has %u clients connected", h->cfg->name,
                 h->clients);
        empty = false;
    } else if (t->n_free != t->count - t->first) {
        snprintf(why, n, "heap '%s' holds objects (%u segments in use)",
                 h->cfg->name, t->count - t->first - t->n_free);
        empty = false;
    } else {
        for (unsigned g = 0; g < LAYOUT_MAX_GLOBALS && empty; g++)
            if (h->globals[g].state != LAYOUT_GLOBAL_EMPTY) {
                char shown[4 * LAYOUT_GLOBAL_NAME + 1];
                snprintf(why, n, "heap '%s' has global '%s'", h->cfg->name,
                         log_escape(shown, sizeof shown,
                                    h->globals[g].name));
                empty = false;
            }
    }
    heap_unlock(h);
    return empty;
}

int load_open(const char *path, char *why, size_t n)
{
    struct stat st;
    /* O_NONBLOCK: a FIFO named here does not hold heapd up */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        return fd;
    int e = fd < 0 ? errno : EINVAL;
    if (fd >= 0)
        close(fd);
    snprintf(why, n, "%s", e == EINVAL ? "not a regular file"
                                        : strerror(e));
    return -e;
}

int load_heap(struct heap *h, int fd, const char *path,
              struct load_result *out, char *why, size_t n)
{
    uint64_t t0 = monotonic_ns();
    struct reader r = {.h = h, .fd = fd, .path = path, .why = why, .n = n};
    int rc;
    r.buf = malloc(SAVE_CHUNK_MAX);
    if (!r.buf) {
        snprintf(why, n, "out of memory for loading %s", path);
        return -ENOMEM;
    }
    r.epoch = (uint8_t)atomic_load(&h->control->epoch);
    if ((rc = pass(&r)) < 0)
        goto out;
#ifndef NDEBUG
    heap_hold_for_tests(h, "HEAPD_TEST_HOLD_LOAD", "load", &h->load_stop);
#endif
    if ((rc = apply(&r)) < 0)
        goto out;
    r.res.ns = monotonic_ns() - t0;
    *out = r.res;
    log_info("heap '%s': loaded %s: %llu objects (%llu bytes, %llu placed "
             "anew) and %llu globals in %llu ms", h->cfg->name, path,
             (unsigned long long)r.res.objects,
             (unsigned long long)r.res.object_bytes,
             (unsigned long long)r.res.moved,
             (unsigned long long)r.res.globals,
             (unsigned long long)(r.res.ns / 1000000));
out:
    free(r.buf);
    free(r.taken);
    free(r.mv.map);
    return rc;
}

/* ---- heapctl load ---- */

struct load_job {
    uint64_t id;
    int fd;
    char path[4096];
};

int64_t load_request(struct heap *h, int fd, const char *path, char *why,
                     size_t n)
{
    static _Atomic uint64_t ids;
    struct load_job *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(why, n, "out of memory for a load");
        return -ENOMEM;
    }
    j->fd = fd;
    snprintf(j->path, sizeof j->path, "%s", path);
    heap_lock(h);
    /* the outcomes' room first: a load that ran is always answered */
    if (!h->load_last)
        h->load_last = calloc(LOAD_OUTCOMES, sizeof *h->load_last);
    if (!h->load_last) {
        heap_unlock(h);
        free(j);
        snprintf(why, n, "out of memory for a load");
        return -ENOMEM;
    }
    if (h->load_asked) {
        heap_unlock(h);
        free(j);
        snprintf(why, n, "heap '%s' is being loaded already", h->cfg->name);
        return -EBUSY;
    }
    j->id = atomic_fetch_add(&ids, 1) + 1;
    h->load_asked = j;
    heap_unlock(h);
    return (int64_t)j->id;
}

void load_asked_run(struct heap *h)
{
    heap_lock(h);
    struct load_job *j = h->load_asked;
    h->load_asked = NULL;
    heap_unlock(h);
    if (!j)
        return;
    struct load_outcome out = {.id = j->id};
    if (!load_heap_empty(h, out.why, sizeof out.why))
        out.rc = -EBUSY;
    else
        out.rc = load_heap(h, j->fd, j->path, &out.res, out.why,
                           sizeof out.why);
    if (out.rc < 0)
        log_error("heap '%s': not loaded: %s", h->cfg->name, out.why);
    heap_lock(h);
    /* by id: a load answered a cycle late still finds its own outcome */
    h->load_last[j->id % LOAD_OUTCOMES] = out;
    heap_unlock(h);
    close(j->fd);
    free(j);
}

void load_abort(struct heap *h)
{
    atomic_store(&h->load_stop, true);
}

void load_discard(struct heap *h)
{
    if (h->load_asked)
        close(h->load_asked->fd);
    free(h->load_asked);
    h->load_asked = NULL;
    free(h->load_last);
    h->load_last = NULL;
}
