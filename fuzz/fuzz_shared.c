/* Fuzz target: a client that writes anything into every word it maps
 * read-write, while another client's data must come through whole.
 *
 * Note [Fuzzing the shared words]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A client maps read-write (a) its own control memory: for each region,
 * the slot words of struct layout_mutator and the root stack after them
 * (Note [Client control memory] in proto/layout.h), and (b) the heap
 * memfd past the daemon's page: global_values[], the rest of the control
 * segments, and every segment -- headers, mark bytes, objects -- its own,
 * free ones and other clients' (Note [Heap mapping]).  What it writes into
 * another client's objects is damage to objects it could reach; anything
 * else must cost the other clients nothing, and must end when it leaves.
 *
 * The daemon runs in this process (fuzz_daemon.c) with one heap, "shared"
 * (verify = true, the smallest mark stack so that marking overflows and
 * remarks).  A bystander connects once per process, through the socket as
 * libheapd would: it attaches a slot, is granted two small segments,
 * fills every block of them with a list of cells (the class into the
 * header, then kind SMALL with release; each block's mark set to the
 * epoch, its header, its fields), roots the head in roots[0] (depth 1),
 * returns the segments (full: FILLED, never partly free, so no grant
 * hands them to the attacker) and stays BLOCKED, so that no stop waits
 * for it; it also claims a global.
 *
 * Each input is an attacker: a mutator connection that attaches slots,
 * then records that write bytes or chosen words (small numbers, heap
 * addresses, its own objects, the bystander's cells) anywhere in (a) and
 * (b) but the bystander's segments, build objects in its own segments,
 * send requests (attach, detach, grants, returns, URS batches, remark
 * answers, collections), run the loop and let cycles run.  Then it leaves
 * (Goodbye, or only a close) and the target checks, with FUZZ_CHECK:
 *   1. the bystander's list is whole: every cell's header, link, magic and
 *      index, its root and depth, and its slot still its own;
 *   2. a fresh connection gets a Welcome, and collections complete;
 *   3. within two cycles every segment but the bystander's is free: a
 *      cycle that starts after the leave frees every block of the
 *      attacker's but those whose mark it forged to that cycle's epoch,
 *      and the next one frees those (no root reaches them: its slots are
 *      free, and the global, everyone's to write, is set back to NULL
 *      first); its blank segments were freed when it left;
 *   4. the cycle after that adds no verifier failure: the verifier reads
 *      the segments that hold objects as they are at its snapshot, and
 *      the objects reachable at its final sync (Note [Heap verifier]),
 *      which are the bystander's alone, and nobody wrote them; and the
 *      damage does not outlive the attacker: no slot of it attached,
 *      segments_orphaned equal to segments_adopted, the memfd holding no
 *      more than the daemon's own count of committed segments (Note [Free
 *      memory stays free]);
 *   5. the counters say what happened: clients_crashed grew by one unless
 *      its Goodbye was answered, and clients_disconnected grew only if
 *      the daemon closed the connection before the attacker left.
 * Waiting for those cycles costs most of an execution; checking less
 * often would make a failure depend on the inputs before it.
 *
 * Input: byte 0 is the mode: bits 0-1 the slots attached at once (0-3),
 * bit 2 a grant of small segments at once, bit 3 leave with Goodbye,
 * bit 4 leave the slots RUNNING (stops wait for the attacker) instead of
 * BLOCKED.  Then records, op % 7:
 *   0: u8 where, u16 which, value: a word or bytes into control memory;
 *   1: u8 where, u32 which, value: the same into the heap memfd;
 *   2: u8 seg, u8 class, u8 n, u8 refs: allocate N objects in a segment
 *      it owns and root them in a slot of its;
 *   3: a request (template per arm);
 *   4: u8 n: run the loop N % 16 times; with bit 7, first a collection,
 *      waited for in a blocking region (at most CYCLES_PER_INPUT);
 *   5: ack every stop on its slots (store BLOCKED with the stop gen);
 *   6: u8 slot: store a status word (the value) into a slot of its.
 * A value is u8 kind, then: raw bytes (u8 len, bytes), a small number, a
 * heap address, the address of an object of its or of a bystander cell.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "futex.h"
#include "fuzz.h"
#include "fuzz_daemon.h"
#include "wire.h"

#define HEAP_NAME "shared"
#define SEG_SIZE (128u << 10)
#define BY_SEGS 2                  /* the bystander's segments */
#define CELL_MAGIC 0x6279737461ull /* "bysta" */
#define MAX_GRANTED 64
#define MAX_SLOTS 8
#define WAIT_TURNS 200000u         /* turn_wait calls before a hang */
#define CYCLES_PER_INPUT 1u        /* collect_meanwhile calls that count */
#define CYCLE_TURNS 50u            /* turn_wait calls collect_meanwhile
                                      waits at most */

static const char config_text[] =
    "[daemon]\n"
    "gc_threads = 1\n"
    "log_level = error\n"
    "max_mutators_per_client = 3\n"
    "[heap shared]\n"
    "base = 0x7e8000000000\n"
    "max_size = 20M\n"          /* 128 control segments + 32 */
    "segment_size = 128K\n"
    "mark_stack_limit = 4K\n"
    "verify = true\n";

static struct heap *heap;

/* ---- replies ---- */

struct peer {
    struct fuzz_client cl;
    bool welcomed, said_goodbye;
    uint32_t regions;
    unsigned n_errors, n_done;
    uint32_t slots[MAX_SLOTS], regs[MAX_SLOTS];
    unsigned n_slots;
    uint32_t granted[MAX_GRANTED];
    unsigned n_granted;
    bool large[MAX_GRANTED];       /* granted[k] heads a large run */
    int global;                    /* GlobalClaimed index, or -1 */
    bool remark_asked;
    uint8_t *mem;                  /* its control memory, mapped */
    size_t mem_len;
};

static void add_granted(struct peer *p, uint32_t seg, bool large)
{
    for (unsigned k = 0; k < p->n_granted; k++)
        if (p->granted[k] == seg)
            return;
    if (p->n_granted < MAX_GRANTED) {
        p->large[p->n_granted] = large;
        p->granted[p->n_granted++] = seg;
    }
}

static void drop_granted(struct peer *p, uint32_t seg)
{
    for (unsigned k = 0; k < p->n_granted; k++)
        if (p->granted[k] == seg) {
            p->granted[k] = p->granted[--p->n_granted];
            p->large[k] = p->large[p->n_granted];
            return;
        }
}

static void drop_slot(struct peer *p, uint32_t slot)
{
    for (unsigned k = 0; k < p->n_slots; k++)
        if (p->slots[k] == slot) {
            p->n_slots--;
            p->slots[k] = p->slots[p->n_slots];
            p->regs[k] = p->regs[p->n_slots];
            return;
        }
}

static int on_reply(struct fuzz_client *cl, Heapd__Envelope *env)
{
    struct peer *p = cl->arg;
    switch (env->body_case) {
    case HEAPD__ENVELOPE__BODY_WELCOME:
        p->welcomed = true;
        p->regions = env->welcome->regions;
        break;
    case HEAPD__ENVELOPE__BODY_ATTACH_REPLY:
        FUZZ_CHECK(env->attach_reply->slot < LAYOUT_MAX_MUTATORS);
        FUZZ_CHECK(env->attach_reply->region < p->regions);
        if (p->n_slots < MAX_SLOTS) {
            p->regs[p->n_slots] = env->attach_reply->region;
            p->slots[p->n_slots++] = env->attach_reply->slot;
        }
        break;
    case HEAPD__ENVELOPE__BODY_SEGMENT_GRANT: {
        Heapd__SegmentGrant *g = env->segment_grant;
        for (size_t k = 0; k < g->n_segments; k++) {
            FUZZ_CHECK(g->segments[k] >= heap->segs.first &&
                       g->segments[k] < heap->segs.count);
            add_granted(p, g->segments[k],
                        g->kind == HEAPD__SEGMENT_KIND__SEGMENT_LARGE);
        }
        break;
    }
    case HEAPD__ENVELOPE__BODY_COLLECT_DONE:
        p->n_done++;
        break;
    case HEAPD__ENVELOPE__BODY_GLOBAL_CLAIMED:
        p->global = (int)env->global_claimed->index;
        break;
    case HEAPD__ENVELOPE__BODY_GOODBYE:
        p->said_goodbye = true;
        break;
    case HEAPD__ENVELOPE__BODY_REMARK_REQUEST:
        p->remark_asked = true;
        break;
    case HEAPD__ENVELOPE__BODY_ERROR:
        p->n_errors++;
        break;
    default:
        break;
    }
    return 0;
}

static void peer_connect(struct peer *p, bool control)
{
    unsigned spins = 0;
    memset(p, 0, sizeof *p);
    p->global = -1;
    p->cl.fd = -1;
    p->cl.on_reply = on_reply;
    p->cl.arg = p;
    p->cl.keep_fds = !control;
    fuzz_connect(&p->cl);
    fuzz_send_hello(&p->cl, HEAP_NAME, control);
    while (!p->welcomed) {
        FUZZ_CHECK(!p->cl.eof); /* the daemon serves */
        fuzz_turn_wait(&p->cl);
        FUZZ_CHECK(++spins < WAIT_TURNS);
    }
    if (control)
        return;
    /* the heap, the daemon's page, the control memory (Note [Client
     * control memory]); the heap is mapped in this process already */
    FUZZ_CHECK(p->cl.nfds == 3);
    p->mem_len = (size_t)p->regions * LAYOUT_MUTATOR_BYTES;
    void *m = mmap(NULL, p->mem_len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_NORESERVE, p->cl.fds[2], 0);
    FUZZ_CHECK(m != MAP_FAILED);
    p->mem = m;
}

static void peer_close(struct peer *p)
{
    if (p->mem)
        munmap(p->mem, p->mem_len);
    p->mem = NULL;
    fuzz_close(&p->cl);
}

/* Turn the loop until *COUNTER passes WANT, or the connection ends. */
static void wait_for(struct peer *p, const unsigned *counter, unsigned want)
{
    unsigned spins = 0;
    while (*counter < want && !p->cl.eof) {
        fuzz_turn_wait(&p->cl);
        FUZZ_CHECK(++spins < WAIT_TURNS);
    }
}

static struct layout_mutator *slot_words(struct peer *p, unsigned k)
{
    return (struct layout_mutator *)(p->mem +
                                     (size_t)p->regs[k] * LAYOUT_MUTATOR_BYTES);
}

/* Send message MSG in the envelope arm FIELD (body case CASE). */
#define SEND(p, CASE, field, msg)                                            \
    do {                                                                     \
        Heapd__Envelope env_ = HEAPD__ENVELOPE__INIT;                        \
        env_.body_case = HEAPD__ENVELOPE__BODY_##CASE;                       \
        env_.field = (msg);                                                  \
        fuzz_send_envelope(&(p)->cl, &env_);                                 \
    } while (0)

static void request_attach(struct peer *p)
{
    Heapd__AttachRequest a = HEAPD__ATTACH_REQUEST__INIT;
    SEND(p, ATTACH_REQUEST, attach_request, &a);
}

static void request_small(struct peer *p, uint32_t count)
{
    Heapd__SegmentRequest r = HEAPD__SEGMENT_REQUEST__INIT;
    r.kind = HEAPD__SEGMENT_KIND__SEGMENT_SMALL;
    r.count = count;
    SEND(p, SEGMENT_REQUEST, segment_request, &r);
}

static void request_collect(struct peer *p, bool wait)
{
    Heapd__CollectRequest r = HEAPD__COLLECT_REQUEST__INIT;
    r.wait = wait;
    SEND(p, COLLECT_REQUEST, collect_request, &r);
}

static void return_segments(struct peer *p, uint32_t *segs, size_t n)
{
    Heapd__SegmentReturn r = HEAPD__SEGMENT_RETURN__INIT;
    r.n_segments = n;
    r.segments = segs;
    SEND(p, SEGMENT_RETURN, segment_return, &r);
}

/* ---- allocating as libheapd does (Note [Segments], Note [Objects]) ---- */

static uint8_t *seg_addr(uint32_t seg)
{
    return (uint8_t *)heap->base + (size_t)seg * SEG_SIZE;
}

/* Format SEG for class CLS if it is blank: class, then kind with release. */
static void format_segment(uint32_t seg, unsigned cls)
{
    struct layout_segment *hd = (struct layout_segment *)seg_addr(seg);
    if (__atomic_load_n(&hd->kind, __ATOMIC_ACQUIRE) != LAYOUT_SEG_BLANK)
        return;
    hd->size_class = cls;
    __atomic_store_n(&hd->kind, LAYOUT_SEG_SMALL, __ATOMIC_RELEASE);
}

/* Allocate block B of a small segment of class CLS: mark, zero, header.
 * Returns the object (its first field). */
static void **alloc_block(uint32_t seg, unsigned cls, uint32_t b,
                          uint64_t nrefs, uint64_t nbytes)
{
    uint32_t nblocks, first;
    layout_small_geometry(SEG_SIZE, cls, &nblocks, &first);
    uint8_t *s = seg_addr(seg);
    uint32_t bs = layout_class_size[cls];
    uint8_t *blk = s + first + (size_t)b * bs;
    __atomic_store_n(&layout_seg_marks(s)[b],
                     (uint8_t)atomic_load(&heap->control->epoch),
                     __ATOMIC_RELAXED);
    memset(blk, 0, bs);
    __atomic_store_n((uint64_t *)blk, layout_header(nrefs, nbytes),
                     __ATOMIC_RELEASE);
    return (void **)(blk + LAYOUT_WORD);
}

/* ---- the bystander ---- */

/* A cell: header, next, magic ^ index, index, and the rest of a 2 KiB
 * block: few cells (63 a segment), for every cycle traces them all. */
#define CELL_NREFS 1u
#define CELL_NBYTES (2048u - 16u)

static struct peer by;
static uint32_t by_segs[BY_SEGS];
static unsigned by_cls;
static uint32_t by_nblocks, by_first;
static size_t by_cells;

static void **by_cell(size_t k)
{
    uint32_t seg = by_segs[k / by_nblocks];
    uint32_t b = (uint32_t)(k % by_nblocks);
    return (void **)(seg_addr(seg) + by_first +
                     (size_t)b * layout_class_size[by_cls] + LAYOUT_WORD);
}

static bool in_bystander(uint64_t off, size_t len)
{
    for (unsigned k = 0; k < BY_SEGS; k++) {
        uint64_t lo = (uint64_t)by_segs[k] * SEG_SIZE, hi = lo + SEG_SIZE;
        if (off < hi && off + len > lo)
            return true;
    }
    return false;
}

static void bystander_start(void)
{
    heap = &fuzz_d->heaps[0];
    peer_connect(&by, false);
    request_attach(&by);
    wait_for(&by, &by.n_slots, 1);
    FUZZ_CHECK(by.n_slots == 1);
    while (by.n_granted < BY_SEGS) {
        unsigned had = by.n_granted;
        request_small(&by, BY_SEGS - had);
        wait_for(&by, &by.n_granted, had + 1);
        FUZZ_CHECK(by.n_granted > had);
    }
    memcpy(by_segs, by.granted, sizeof by_segs);
    by_cls = layout_size_class(
        (uint32_t)layout_object_size(CELL_NREFS, CELL_NBYTES));
    layout_small_geometry(SEG_SIZE, by_cls, &by_nblocks, &by_first);
    by_cells = (size_t)BY_SEGS * by_nblocks;

    /* its slot is RUNNING (attach), so no stop passes while it allocates:
     * the epoch its marks take stays the epoch */
    for (unsigned k = 0; k < BY_SEGS; k++)
        format_segment(by_segs[k], by_cls);
    for (size_t k = by_cells; k-- > 0;) {
        void **c = alloc_block(by_segs[k / by_nblocks], by_cls,
                               (uint32_t)(k % by_nblocks), CELL_NREFS,
                               CELL_NBYTES);
        c[0] = k + 1 < by_cells ? (void *)by_cell(k + 1) : NULL;
        c[1] = (void *)(uintptr_t)(CELL_MAGIC ^ k);
        c[2] = (void *)(uintptr_t)k;
    }
    struct layout_mutator *m = slot_words(&by, 0);
    atomic_store(&layout_mutator_roots(m)[0], (void *)by_cell(0));
    atomic_store(&m->root_depth, 1);
    /* full: the heap's from now on, and never partly free */
    return_segments(&by, by_segs, BY_SEGS);
    by.n_granted = 0;
    /* a global of its, whose value anyone may write */
    Heapd__GlobalClaim gc = HEAPD__GLOBAL_CLAIM__INIT;
    gc.name = (char *)"bystander";
    SEND(&by, GLOBAL_CLAIM, global_claim, &gc);
    unsigned spins = 0;
    while (by.global < 0) {
        FUZZ_CHECK(!by.cl.eof);
        fuzz_turn_wait(&by.cl);
        FUZZ_CHECK(++spins < WAIT_TURNS);
    }
    /* a blocking region for the rest of the process */
    uint32_t st = atomic_load(&m->status);
    atomic_store(&m->status,
                 LAYOUT_STATUS(LAYOUT_STATUS_GEN(st), LAYOUT_MUT_BLOCKED));
    futex_wake_all(&m->status);
}

/* Check 1: the list and what roots it. */
static void bystander_check(void)
{
    struct layout_mutator *m = slot_words(&by, 0);
    FUZZ_CHECK(fuzz_conn(&by.cl) && !by.cl.eof);
    FUZZ_CHECK(!by.remark_asked); /* it owns no segment */
    FUZZ_CHECK(atomic_load(&heap->owners[by.slots[0]].client_id) ==
               by.cl.id);
    FUZZ_CHECK(atomic_load(&m->root_depth) == 1);
    FUZZ_CHECK(atomic_load(&layout_mutator_roots(m)[0]) == by_cell(0));
    FUZZ_CHECK(LAYOUT_STATUS_STATE(atomic_load(&m->status)) ==
               LAYOUT_MUT_BLOCKED);
    for (size_t k = 0; k < by_cells; k++) {
        void **c = by_cell(k);
        uint64_t hdr = __atomic_load_n((uint64_t *)c - 1, __ATOMIC_RELAXED);
        uint32_t b = (uint32_t)(k % by_nblocks);
        FUZZ_CHECK(layout_seg_marks(seg_addr(by_segs[k / by_nblocks]))[b]
                   != 0);
        FUZZ_CHECK(layout_header_with_tag(hdr, 0) ==
                   layout_header(CELL_NREFS, CELL_NBYTES));
        FUZZ_CHECK(c[0] == (k + 1 < by_cells ? (void *)by_cell(k + 1)
                                             : NULL));
        FUZZ_CHECK((uintptr_t)c[1] == (CELL_MAGIC ^ k));
        FUZZ_CHECK((uintptr_t)c[2] == k);
    }
}

/* ---- the attacker's values and places ---- */

/* A word chosen by the input: see the header. */
static uint64_t take_value(struct peer *p, struct fuzz_input *in,
                           uint8_t bytes[8])
{
    uint64_t v;
    switch (fuzz_take(in, 1) % 6) {
    case 0:
        v = fuzz_take(in, 8);
        break;
    case 1:
        v = fuzz_take(in, 1);
        break;
    case 2: /* anywhere in the heap, 8-aligned */
        v = (uintptr_t)heap->base +
            (fuzz_take(in, 4) % heap->cfg->max_size & ~(uint64_t)7);
        break;
    case 3: { /* a block's object in a segment of its */
        uint64_t s = fuzz_take(in, 1), b = fuzz_take(in, 2);
        unsigned cls = (unsigned)fuzz_take(in, 1) % LAYOUT_NCLASSES;
        uint32_t nblocks, first;
        v = 0;
        if (p->n_granted == 0)
            break;
        layout_small_geometry(SEG_SIZE, cls, &nblocks, &first);
        uint32_t seg = p->granted[s % p->n_granted];
        v = (uintptr_t)seg_addr(seg) +
            (p->large[s % p->n_granted]
                 ? LAYOUT_LARGE_OBJECT + LAYOUT_WORD
                 : first + (b % (nblocks ? nblocks : 1)) *
                                   layout_class_size[cls] + LAYOUT_WORD);
        break;
    }
    case 4: /* a bystander's cell: keeping it alive costs it nothing */
        v = (uintptr_t)by_cell(fuzz_take(in, 2) % by_cells);
        break;
    default:
        v = atomic_load(&heap->control->epoch) + fuzz_take(in, 1) % 3;
        break;
    }
    memcpy(bytes, &v, 8);
    return v;
}

/* Bytes to write: a value, or up to 32 raw bytes of the input. */
static size_t take_write(struct peer *p, struct fuzz_input *in,
                         uint8_t buf[32])
{
    uint8_t kind = (uint8_t)fuzz_take(in, 1);
    if (kind & 1) {
        const uint8_t *b;
        size_t len;
        fuzz_take_bytes(in, 1 + kind / 2 % 32, &b, &len);
        memcpy(buf, b, len);
        return len;
    }
    take_value(p, in, buf);
    return 1u << (kind / 2 % 4); /* 1, 2, 4 or 8 bytes of it */
}

/* op 0: into its control memory: a word of a slot's head, of its ring,
 * of its root stack, or any byte of any region. */
static void write_control(struct peer *p, struct fuzz_input *in)
{
    uint8_t where = (uint8_t)fuzz_take(in, 1);
    uint64_t which = fuzz_take(in, 2);
    uint8_t buf[32];
    size_t len = take_write(p, in, buf);
    uint32_t region;
    size_t off;

    if (p->n_slots && !(where & 0x80))
        region = p->regs[where % p->n_slots];
    else
        region = where % p->regions;
    switch (where >> 5 & 3) {
    case 0:
        off = which % 32 * 8; /* status .. urs_wake */
        break;
    case 1:
        off = offsetof(struct layout_mutator, urs) +
              which % LAYOUT_URS_SIZE * 8;
        break;
    case 2:
        off = LAYOUT_MUTATOR_ROOTS + which % 4096 * 8;
        break;
    default:
        off = (which << 8 | fuzz_take(in, 1)) % LAYOUT_MUTATOR_BYTES;
        break;
    }
    if (off + len > LAYOUT_MUTATOR_BYTES)
        len = LAYOUT_MUTATOR_BYTES - off;
    memcpy(p->mem + (size_t)region * LAYOUT_MUTATOR_BYTES + off, buf, len);
}

/* op 1: into the heap memfd past the daemon's page, never into the
 * bystander's segments. */
static void write_heap(struct peer *p, struct fuzz_input *in)
{
    uint8_t where = (uint8_t)fuzz_take(in, 1);
    uint64_t which = fuzz_take(in, 4);
    uint8_t buf[32];
    size_t len = take_write(p, in, buf);
    const struct segtab *t = &heap->segs;
    uint64_t off, seg;

    switch (where % 4) {
    case 0: /* global_values[] and the rest of the control area */
        off = LAYOUT_DAEMON_BYTES +
              (where & 4 ? which % LAYOUT_MAX_GLOBALS * 8
                         : which % ((uint64_t)t->first * SEG_SIZE -
                                    LAYOUT_DAEMON_BYTES));
        break;
    case 1: /* a segment of its */
        if (p->n_granted == 0)
            return;
        seg = p->granted[which % p->n_granted];
        goto in_segment;
    default: /* any data segment: free, the attacker's, orphaned */
        seg = t->first + which % (t->count - t->first);
    in_segment:
        which >>= 8;
        switch (where >> 2 & 3) {
        case 0: /* header words */
            off = which % 8 * 8;
            break;
        case 1: /* marks */
            off = LAYOUT_SEG_MARKS + which % 4096;
            break;
        case 2: /* a large object's header and first fields */
            off = LAYOUT_LARGE_OBJECT + which % 8 * 8;
            break;
        default:
            off = which % SEG_SIZE;
            break;
        }
        off += seg * SEG_SIZE;
        break;
    }
    if (off + len > heap->cfg->max_size)
        len = heap->cfg->max_size - off;
    if (in_bystander(off, len))
        return;
    memcpy((uint8_t *)heap->base + off, buf, len);
}

/* op 2: N objects of class CLS in a segment of its, as libheapd allocates
 * (first free blocks), their fields NULL, its objects or bystander cells;
 * the last one pushed on the root stack of a slot of its. */
static void allocate(struct peer *p, struct fuzz_input *in)
{
    uint8_t s = (uint8_t)fuzz_take(in, 1);
    unsigned cls = (unsigned)fuzz_take(in, 1) % 16;
    unsigned n = (unsigned)fuzz_take(in, 1) % 64;
    unsigned nrefs = (unsigned)fuzz_take(in, 1) % 4;
    uint32_t nblocks, first;
    void **last = NULL;

    if (p->n_granted == 0 || p->large[s % p->n_granted])
        return;
    uint32_t seg = p->granted[s % p->n_granted];
    struct layout_segment *hd = (struct layout_segment *)seg_addr(seg);
    format_segment(seg, cls);
    cls = hd->size_class; /* what it was formatted for, or scribbled */
    if (hd->kind != LAYOUT_SEG_SMALL || cls >= LAYOUT_NCLASSES)
        return;
    layout_small_geometry(SEG_SIZE, cls, &nblocks, &first);
    uint32_t bs = layout_class_size[cls];
    if (nrefs * 8 + 8 > bs)
        nrefs = (bs - 8) / 8;
    uint8_t *marks = layout_seg_marks(seg_addr(seg));
    for (uint32_t b = 0; b < nblocks && n > 0; b++) {
        if (__atomic_load_n(&marks[b], __ATOMIC_ACQUIRE) != 0)
            continue;
        void **o = alloc_block(seg, cls, b, nrefs, 0);
        for (unsigned k = 0; k < nrefs; k++) {
            uint8_t bytes[8];
            uint64_t v = fuzz_take(in, 1) & 1 ? take_value(p, in, bytes) : 0;
            o[k] = k == 0 && last ? (void *)last : (void *)(uintptr_t)v;
        }
        last = o;
        n--;
    }
    if (!last || p->n_slots == 0)
        return;
    struct layout_mutator *m = slot_words(p, s % p->n_slots);
    uint64_t depth = atomic_load(&m->root_depth);
    if (depth < 4096) {
        atomic_store(&layout_mutator_roots(m)[depth], (void *)last);
        atomic_store(&m->root_depth, depth + 1);
    }
}

/* op 3: one request. */
static void request(struct peer *p, struct fuzz_input *in)
{
    Heapd__DetachRequest detach = HEAPD__DETACH_REQUEST__INIT;
    Heapd__SegmentRequest segreq = HEAPD__SEGMENT_REQUEST__INIT;
    Heapd__UrsBatch urs = HEAPD__URS_BATCH__INIT;
    Heapd__RemarkDone rdone = HEAPD__REMARK_DONE__INIT;
    Heapd__StatsRequest stats = HEAPD__STATS_REQUEST__INIT;
    uint32_t segs[8], classes[2];
    uint8_t arm = (uint8_t)fuzz_take(in, 1);
    uint8_t arg = (uint8_t)fuzz_take(in, 1);

    switch (arm % 9) {
    case 0:
        request_attach(p);
        break;
    case 1: /* a slot of its (and forget it), or any */
        detach.slot = p->n_slots && !(arg & 0x80)
                          ? p->slots[arg % p->n_slots]
                          : arg % LAYOUT_MAX_MUTATORS;
        drop_slot(p, detach.slot);
        SEND(p, DETACH_REQUEST, detach_request, &detach);
        break;
    case 2:
        request_small(p, 1 + arg % 4);
        break;
    case 3: /* a large run, or a partly free segment of a class */
        if (arg & 1) {
            segreq.kind = HEAPD__SEGMENT_KIND__SEGMENT_LARGE;
            segreq.bytes = (uint64_t)(arg >> 1) << 14;
        } else {
            segreq.count = 1;
            classes[0] = arg >> 1 & 15;
            segreq.n_classes = 1;
            segreq.classes = classes;
        }
        SEND(p, SEGMENT_REQUEST, segment_request, &segreq);
        break;
    case 4: /* segments of its, or any */
        if (p->n_granted == 0 || arg & 0x80) {
            segs[0] = heap->segs.first + arg % (heap->segs.count -
                                                heap->segs.first);
        } else {
            segs[0] = p->granted[arg % p->n_granted];
            drop_granted(p, segs[0]);
        }
        return_segments(p, segs, 1);
        break;
    case 5:
        request_collect(p, arg & 1);
        break;
    case 6:
        urs.slot = p->n_slots ? p->slots[arg % p->n_slots] : arg;
        urs.head = fuzz_take(in, 2);
        SEND(p, URS_BATCH, urs_batch, &urs);
        break;
    case 7: /* remark answers, asked for or not */
        rdone.n_rescanned = p->n_granted < 4 ? p->n_granted : 4;
        memcpy(segs, p->granted, rdone.n_rescanned * sizeof *segs);
        rdone.rescanned = segs;
        if (arg & 1) {
            rdone.released = segs;
            rdone.n_released = rdone.n_rescanned;
            rdone.n_rescanned = 0;
        }
        SEND(p, REMARK_DONE, remark_done, &rdone);
        break;
    default:
        SEND(p, STATS_REQUEST, stats_request, &stats);
        break;
    }
}

/* Store STATE with the stop generation being asked for into every slot
 * of its: what a mutator does at a safepoint. */
static void set_states(struct peer *p, uint32_t state)
{
    for (unsigned k = 0; k < p->n_slots; k++) {
        struct layout_mutator *m = slot_words(p, k);
        uint32_t gen = atomic_load(&m->stop_request);
        atomic_store(&m->status, LAYOUT_STATUS(gen, state));
        futex_wake_all(&m->status);
    }
}

/* op 4 with bit 7: a cycle while it is connected, so that marking, the
 * sweep and the verifier read what it wrote.  It asks for a collection
 * and waits in a blocking region, as heapd_collect does; but it may hold
 * the cycle up itself (a RUNNING status it stores later, remark requests
 * it does not answer), so the wait is bounded and its end is no check. */
static void collect_meanwhile(struct peer *p)
{
    unsigned want = p->n_done + 1;
    request_collect(p, true);
    set_states(p, LAYOUT_MUT_BLOCKED);
    for (unsigned k = 0; k < CYCLE_TURNS && p->n_done < want && !p->cl.eof;
         k++)
        fuzz_turn_wait(&p->cl);
}

/* ---- the checks after it left ---- */

/* The bytes the daemon counts as committed: the control area and every
 * segment not punched (Note [Free memory stays free]). */
static uint64_t accounted_bytes(void)
{
    const struct segtab *t = &heap->segs;
    uint64_t n = t->first;
    heap_lock(heap);
    for (uint32_t i = t->first; i < t->high; i++)
        n += !t->segs[i].punched;
    heap_unlock(heap);
    return n * SEG_SIZE;
}

static uint64_t stat_locked(const uint64_t *field)
{
    heap_lock(heap);
    uint64_t v = *field;
    heap_unlock(heap);
    return v;
}

/* Every segment but the bystander's is free. */
static bool attacker_segments_gone(void)
{
    const struct segtab *t = &heap->segs;
    bool gone = true;
    heap_lock(heap);
    for (uint32_t i = t->first; i < t->count && gone; i++)
        gone = t->segs[i].state == SEG_FREE ||
               in_bystander((uint64_t)i * SEG_SIZE, 1);
    heap_unlock(heap);
    return gone;
}

/* Checks 2 to 4 (see the Note): one to three cycles. */
static void damage_check(void)
{
    struct peer ck;
    peer_connect(&ck, true); /* the daemon serves: a Welcome */
    /* the global is everyone's: set back, as its owner may */
    atomic_store(&heap->control->global_values[by.global], NULL);
    unsigned want = 1;
    while (!attacker_segments_gone()) {
        /* a block's mark forged to the first cycle's epoch outlives it */
        FUZZ_CHECK(want <= 2);
        request_collect(&ck, true);
        wait_for(&ck, &ck.n_done, want++);
    }
    uint64_t vf = stat_locked(&heap->stats.verify_failures);
    request_collect(&ck, true);
    wait_for(&ck, &ck.n_done, want);
    FUZZ_CHECK(ck.n_done == want && ck.n_errors == 0);
    FUZZ_CHECK(stat_locked(&heap->stats.verify_failures) == vf);

    heap_lock(heap);
    FUZZ_CHECK(heap->mutators == 1 && heap->clients == 1);
    FUZZ_CHECK(heap->segs.orphaned == heap->segs.adopted);
    heap_unlock(heap);
    FUZZ_CHECK(heap_committed_bytes(heap) <= accounted_bytes());
    peer_close(&ck);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_input in = {data, size};
    struct peer at;
    unsigned cycles = 0;

    if (!fuzz_d) {
        fuzz_daemon_start("fuzz_shared", config_text);
        bystander_start();
    }
    FUZZ_CHECK(fuzz_d->n_conns == 1);
    uint64_t crashed = stat_locked(&heap->stats.clients_crashed);
    uint64_t disconnected = stat_locked(&heap->stats.clients_disconnected);

    uint8_t mode = (uint8_t)fuzz_take(&in, 1);
    peer_connect(&at, false);
    for (unsigned k = 0; k < (mode & 3u); k++)
        request_attach(&at);
    wait_for(&at, &at.cl.n_replies, 1 + (mode & 3u)); /* Welcome first */
    if (!(mode & 16))
        set_states(&at, LAYOUT_MUT_BLOCKED);
    if (mode & 4) {
        /* a grant may wait for a cycle, which waits for RUNNING slots */
        unsigned had = at.cl.n_replies;
        request_small(&at, 2);
        if (!(mode & 16))
            wait_for(&at, &at.cl.n_replies, had + 1);
    }
    while (in.n > 0 && fuzz_conn(&at.cl)) {
        switch (fuzz_take(&in, 1) % 7) {
        case 0:
            write_control(&at, &in);
            break;
        case 1:
            write_heap(&at, &in);
            break;
        case 2:
            allocate(&at, &in);
            break;
        case 3:
            request(&at, &in);
            break;
        case 4: {
            unsigned n = (unsigned)fuzz_take(&in, 1);
            if (n & 0x80 && cycles++ < CYCLES_PER_INPUT)
                collect_meanwhile(&at);
            /* the collector runs meanwhile, on its own thread */
            for (n %= 16; n > 0; n--)
                fuzz_turn(&at.cl);
            break;
        }
        case 5:
            set_states(&at, LAYOUT_MUT_BLOCKED);
            break;
        default: {
            uint8_t bytes[8];
            unsigned k = (unsigned)fuzz_take(&in, 1);
            uint32_t st = (uint32_t)take_value(&at, &in, bytes);
            if (at.n_slots) {
                struct layout_mutator *m = slot_words(&at, k % at.n_slots);
                atomic_store(&m->status, st);
                futex_wake_all(&m->status);
            }
            break;
        }
        }
    }

    /* it leaves, or the daemon has disconnected it */
    if (mode & 8 && fuzz_conn(&at.cl)) {
        Heapd__Goodbye gb = HEAPD__GOODBYE__INIT;
        SEND(&at, GOODBYE, goodbye, &gb);
    }
    peer_close(&at);
    FUZZ_CHECK(fuzz_d->n_conns == 1);

    bystander_check();
    damage_check();
    bystander_check();
    FUZZ_CHECK(stat_locked(&heap->stats.clients_crashed) ==
               crashed + !at.said_goodbye);
    /* disconnected once at most, and never after its Goodbye was taken */
    uint64_t dis = stat_locked(&heap->stats.clients_disconnected);
    FUZZ_CHECK(dis == disconnected || (!at.said_goodbye &&
                                       dis == disconnected + 1));
    fuzz_turn(&by.cl);
    return 0;
}
