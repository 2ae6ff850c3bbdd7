/* libheapd's young generation: the sweep of a young segment, which
 * frees the young blocks a minor collection's trace did not reach
 * (client/minor.c runs it, a segment at a time: Note [Minor collections
 * in slices]). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "layout.h"
#include "minor.h"
#include "young.h"

/* Fill young block K of S with POISON, as the daemon's sweep fills what it
 * frees when the heap says so (a heap that verifies: Note [Heap verifier]
 * in daemon/gc/verify.c). */
void minor_poison_block(struct young_seg *s, uint32_t k, uint8_t poison)
{
    memset(s->blocks + (size_t)k * s->block_size, poison, s->block_size);
}

/* Free young block K of S, filled with POISON first if it is not 0. */
void minor_free_block(struct young_seg *s, uint32_t k, uint8_t poison)
{
    if (poison)
        minor_poison_block(s, k, poison);
    __atomic_store_n(&s->marks[k], 0, __ATOMIC_RELEASE);
}

/* Note [Sweeping a young segment eight marks at a time]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A minor collection's sweep reads eight marks in one word, finds the
 * young ones whose `live` bit is clear, and sets them to 0 in one store
 * of the word.  Other processes write marks of this segment too -- the
 * daemon's marker and sweeper, and barriers shading shared objects --
 * but only marks that are neither 0 nor LAYOUT_MARK_YOUNG (Note
 * [Sweeping] in daemon/gc/sweep.c), so a word whose eight marks are all
 * 0 or young is this mutator's alone and is stored plainly; a word with
 * any other mark in it is changed by compare-and-swap, clearing only its
 * dead young bytes, which nobody else writes.  The store releases, after
 * the poison, as a single block's would.  Measured on GCBench young: a
 * minor collection that finds almost nothing alive took 136-147 us with
 * a store per block (and a call to libgcc's popcount per word: no popcnt
 * instruction is assumed), 71 us so; alloc_bench-like 56-byte
 * allocations 7.1 -> 5.8 ns.
 */

/* Note [Sweeping a segment of young blocks only]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A young segment whose marks are all 0 or LAYOUT_MARK_YOUNG, and none
 * of whose blocks the trace reached, is swept by storing 0 over its
 * marks, eight at a time, without reading them.  Such a segment is
 * this mutator's alone: heapd's marker and sweeper and other processes'
 * barriers write only marks that are neither (Note [Sweeping a young
 * segment eight marks at a time]), and those are a promoted block's or
 * a shared one's.  So young_seg.mixed says whether one may be there: set
 * when the segment is tracked with one, when a block of it is promoted
 * (promote_one) and when heapd_alloc_shared takes a block of it
 * (young_took_shared); cleared by a sweep that read every mark and met
 * none.  With poison on (the verifier, debug builds), its young blocks
 * are poisoned first, one by one.
 * Measured (alloc_bench young, ring of 1000, where every segment of the
 * nursery but the newest is dead at a minor collection; 3 runs each,
 * interleaved with the build before): 16 B 6.0-6.2 -> 5.4 ns, 64 B
 * 7.4-7.9 -> 6.8-7.1 ns, 256 B 13.8-14.2 -> 13.4-13.6 ns; GCBench
 * young, median of 5, 144.6 -> 136.6 ms.
 */

#define MARKS_ONES 0x0101010101010101ull
#define MARKS_LOW7 0x7f7f7f7f7f7f7f7full

/* Bit 7 of each byte of W, eight marks, that is 0: a byte of W is 0 iff
 * its bit 7 is clear in ((W & low7) + low7) | W, exactly, with no
 * borrow between bytes. */
static inline uint64_t marks_zero(uint64_t w)
{
    return ~(((w & MARKS_LOW7) + MARKS_LOW7) | w) & ~MARKS_LOW7;
}
/* The same for the marks that are LAYOUT_MARK_YOUNG. */
static inline uint64_t marks_young(uint64_t w)
{
    return marks_zero(w ^ (MARKS_ONES * LAYOUT_MARK_YOUNG));
}

/* Read S's marks now, eight at a time (they start 8-aligned: Note
 * [Segments]): with ONLY, are they all 0 or young; without, is none of
 * them young. */
static bool marks_scan(const struct young_seg *s, bool only)
{
    uint32_t b = 0;
    for (; b + 8 <= s->nblocks; b += 8) {
        uint64_t w = __atomic_load_n((const uint64_t *)(s->marks + b),
                                     __ATOMIC_RELAXED);
        uint64_t young = marks_young(w);
        if (only ? (marks_zero(w) | young) != ~MARKS_LOW7 : young != 0)
            return false;
    }
    for (; b < s->nblocks; b++) {
        uint8_t mk = __atomic_load_n(&s->marks[b], __ATOMIC_RELAXED);
        if (only ? mk != 0 && mk != LAYOUT_MARK_YOUNG
                 : mk == LAYOUT_MARK_YOUNG)
            return false;
    }
    return true;
}

bool minor_young_only(const struct young_seg *s)
{
    return marks_scan(s, true);
}

bool minor_no_young(const struct young_seg *s)
{
    return marks_scan(s, false);
}

/* No live bit of S is set. */
static bool none_live(const struct young_seg *s)
{
    for (uint32_t w = 0; w < young_bitmap_words(s); w++)
        if (s->live[w])
            return false;
    return true;
}


/* How many bytes of X have bit 7 set, X having no other bit set (one
 * multiply: no popcnt instruction is assumed). */
static inline uint32_t bytes_flagged(uint64_t x)
{
    return (uint32_t)(((x >> 7) * 0x0101010101010101ull) >> 56);
}

/* Free the young blocks of S the trace did not reach; returns its free
 * blocks. */
uint32_t minor_sweep_seg(struct young_seg *s, uint8_t poison)
{
    const uint64_t ones = MARKS_ONES, low7 = MARKS_LOW7;
    uint32_t young = 0, free_blocks = 0, b = 0;
    /* Note [Sweeping a segment of young blocks only] */
    if (!s->mixed && none_live(s)) {
        for (uint32_t k = 0; poison && k < s->nblocks; k++)
            if (__atomic_load_n(&s->marks[k], __ATOMIC_RELAXED) ==
                LAYOUT_MARK_YOUNG)
                minor_poison_block(s, k, poison);
        for (; b + 8 <= s->nblocks; b += 8)
            __atomic_store_n((uint64_t *)(s->marks + b), 0, __ATOMIC_RELEASE);
        for (; b < s->nblocks; b++)
            __atomic_store_n(&s->marks[b], 0, __ATOMIC_RELEASE);
        s->young = 0;
        return s->nblocks;
    }
    uint64_t other = 0; /* a mark neither 0 nor young, as bit 7 */
    /* eight marks at a time (they start 8-aligned: Note [Segments]) */
    for (; b + 8 <= s->nblocks; b += 8) {
        uint64_t *word = (uint64_t *)(s->marks + b);
        uint64_t w = __atomic_load_n(word, __ATOMIC_RELAXED);
        uint64_t zero = marks_zero(w), yng = marks_young(w);
        other |= ~(zero | yng) & ~low7;
        free_blocks += bytes_flagged(zero);
        if (!yng)
            continue;
        /* the eight `live` bits as bit 7 of each byte: bit i of the
         * multiply's byte i is bit i of the eight */
        uint64_t bits = (s->live[b >> 6] >> (b & 63)) & 0xff;
        uint64_t live = (((bits * ones) & 0x8040201008040201ull) + low7) &
                        ~low7;
        uint64_t dead = yng & ~live;
        young += bytes_flagged(yng & live);
        if (!dead)
            continue;
        free_blocks += bytes_flagged(dead);
        if (poison)
            for (uint64_t d = dead; d; d &= d - 1)
                minor_poison_block(
                    s, b + ((uint32_t)__builtin_ctzll(d) >> 3), poison);
        /* Note [Sweeping a young segment eight marks at a time] */
        uint64_t clear = (dead >> 7) * 0xff;
        if ((zero | yng) == ~low7)
            __atomic_store_n(word, w & ~clear, __ATOMIC_RELEASE);
        else
            while (!__atomic_compare_exchange_n(word, &w, w & ~clear, true,
                                                __ATOMIC_RELEASE,
                                                __ATOMIC_RELAXED))
                ;
    }
    for (; b < s->nblocks; b++) {
        uint8_t mk = __atomic_load_n(&s->marks[b], __ATOMIC_RELAXED);
        if (mk == LAYOUT_MARK_YOUNG) {
            if (s->live[b >> 6] & ((uint64_t)1 << (b & 63))) {
                young++;
                continue;
            }
            minor_free_block(s, b, poison);
            mk = 0;
        }
        free_blocks += mk == 0;
        other |= mk != 0 && mk != LAYOUT_MARK_YOUNG;
    }
    s->young = young;
    s->mixed = other != 0;
    return free_blocks;
}
