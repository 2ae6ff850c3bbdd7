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
    const uint64_t ones = 0x0101010101010101ull, low7 = 0x7f7f7f7f7f7f7f7full;
    uint32_t young = 0, free_blocks = 0, b = 0;
    /* eight marks at a time (they start 8-aligned: Note [Segments]); a
     * byte of W is 0 iff its bit 7 is clear in ((W & low7) + low7) | W,
     * exactly, with no borrow between bytes */
    for (; b + 8 <= s->nblocks; b += 8) {
        uint64_t *word = (uint64_t *)(s->marks + b);
        uint64_t w = __atomic_load_n(word, __ATOMIC_RELAXED);
        uint64_t x = w ^ (ones * LAYOUT_MARK_YOUNG);
        uint64_t zero = ~(((w & low7) + low7) | w) & ~low7;
        uint64_t yng = ~(((x & low7) + low7) | x) & ~low7;
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
    }
    s->young = young;
    return free_blocks;
}
