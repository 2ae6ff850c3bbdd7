/* The saved-heap file format.
 *
 * Note [Saved heap files]
 * ~~~~~~~~~~~~~~~~~~~~~~~
 * A saved heap is the objects the globals reached at one cycle's snapshot,
 * each at its address, and the globals, in a file of its own format: no
 * segment, size class, mark byte or table of the heap is in it, so a heapd
 * of another layout reads it.  All integers are little-endian.
 *
 *   header, 64 bytes:
 *     0  "HEAPDSV\n"          8  u32 format (1)     12 u32 layout of saver
 *     16 u64 base             24 u64 max_size       32 u64 segment_size
 *     40 u64 saved at (ns since 1970)               48..59 zero
 *     60 u32 CRC-32C of bytes 0..59
 *   then chunks, each: u32 type, u32 payload length (at most 1 MiB),
 *     the payload, u32 CRC-32C of type, length and payload.
 *     DATA (1): records, back to back; a record may go on in the next
 *       DATA chunk (a large object spans many).
 *     END (2), the last chunk, 32 bytes: u64 objects, u64 their bytes
 *       (headers included), u64 globals, u64 DATA payload bytes in all.
 *       Nothing follows it.
 *   records, each a multiple of 8 bytes, the first word's low 3 bits
 *   its type:
 *     object: u64 address (of its first field) | 1, u64 block (bytes its
 *       block spans, header included, in bits 0..55; in bits 56..63 0 = a
 *       block of a small class, 1 = blocks of the run class, 2 = a run of
 *       segments of its own), u64 header (nrefs and nbytes, tag 0), nrefs
 *       u64 references (0 or an object's address in the file), nbytes raw
 *       bytes padded with zeroes to 8: 32 bytes and the object's own;
 *     global: u64 2, u64 value (0 or an object's address), u64 name
 *       length (1..63), the name padded with zeroes to 8.
 *
 * A loader takes nothing it has not checked: every chunk's checksum, the
 * END totals against what it read, every record's fields and every
 * reference against the objects of the file.  The block kind and size are
 * what let a loader put every object back at its address, which is what
 * keeps references valid: a heapd whose geometry cannot (another segment
 * size, another size class table) refuses the file naming the first
 * object it cannot place.  CRC-32C, in hardware where the CPU has it, runs
 * at about 20 GB/s here (SSE 4.2), a table at about 0.4: a save writes at
 * disk speed either way, but the table would cost a 1.9 GB load 5 s.
 */
#include "savefile.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static uint32_t crc_table[256];

static void crc_table_fill(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc_soft(uint32_t c, const uint8_t *p, size_t n)
{
    if (crc_table[1] == 0)
        crc_table_fill(); /* idempotent: a race writes the same words */
    while (n--)
        c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t
crc_hard(uint32_t c, const uint8_t *p, size_t n)
{
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

uint32_t save_crc32c(uint32_t crc, const void *p, size_t n)
{
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2"))
        return ~crc_hard(c, p, n);
#endif
    return ~crc_soft(c, p, n);
}

void save_header_encode(const struct save_header *h,
                        uint8_t out[SAVE_HEADER_BYTES])
{
    memset(out, 0, SAVE_HEADER_BYTES);
    memcpy(out, SAVE_MAGIC, 8);
    save_put32(out + 8, h->format);
    save_put32(out + 12, h->layout);
    save_put64(out + 16, h->base);
    save_put64(out + 24, h->max_size);
    save_put64(out + 32, h->segment_size);
    save_put64(out + 40, h->saved_at_ns);
    save_put32(out + 60, save_crc32c(0, out, 60));
}

int save_header_decode(const uint8_t in[SAVE_HEADER_BYTES],
                       struct save_header *h, char *why, size_t n)
{
    if (memcmp(in, SAVE_MAGIC, 8) != 0) {
        snprintf(why, n, "at offset 0: not a saved heap (no \"HEAPDSV\" "
                 "magic)");
        return -EINVAL;
    }
    if (save_get32(in + 60) != save_crc32c(0, in, 60)) {
        snprintf(why, n, "at offset 60: the header's checksum does not "
                 "match: the file is damaged");
        return -EINVAL;
    }
    h->format = save_get32(in + 8);
    h->layout = save_get32(in + 12);
    h->base = save_get64(in + 16);
    h->max_size = save_get64(in + 24);
    h->segment_size = save_get64(in + 32);
    h->saved_at_ns = save_get64(in + 40);
    if (h->format != SAVE_FORMAT) {
        snprintf(why, n, "at offset 8: the file is of save format %u and "
                 "this heapd reads format %u%s", h->format, SAVE_FORMAT,
                 h->format > SAVE_FORMAT ? ": load it with the heapd that "
                 "saved it, or a newer one" : "");
        return -EINVAL;
    }
    return 0;
}

void save_chunk_prefix(uint8_t out[8], uint32_t type, uint32_t len)
{
    save_put32(out, type);
    save_put32(out + 4, len);
}

uint32_t save_chunk_crc(const uint8_t prefix[8], const void *payload,
                        uint32_t len)
{
    return save_crc32c(save_crc32c(0, prefix, 8), payload, len);
}
