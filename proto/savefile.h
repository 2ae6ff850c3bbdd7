/* The saved-heap file: what `heapctl save` writes and `load` reads.  See
 * Note [Saved heap files] in savefile.c, which is also the format's
 * documentation (docs/save-format.md repeats it for users). */
#ifndef HEAPD_PROTO_SAVEFILE_H
#define HEAPD_PROTO_SAVEFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SAVE_MAGIC "HEAPDSV\n"
#define SAVE_FORMAT 1u
#define SAVE_HEADER_BYTES 64u
/* the largest chunk payload: what a writer buffers and a reader holds */
#define SAVE_CHUNK_MAX (1u << 20)
#define SAVE_CHUNK_OVERHEAD 12u /* type, length, checksum */

enum save_chunk_type {
    SAVE_CHUNK_DATA = 1, /* records, which may continue in the next one */
    SAVE_CHUNK_END = 2,  /* the totals; the last chunk */
};
/* a record's first word's low bits (Note [Saved heap files]) */
enum save_record_type {
    SAVE_REC_OBJECT = 1,  /* | the object's address */
    SAVE_REC_GLOBAL = 2,
};
#define SAVE_REC_TYPE_MASK UINT64_C(7)
/* how an object's block is placed (Note [Saved heap files]) */
enum save_block_kind {
    SAVE_BLOCK_SMALL = 0, /* one block of a small size class */
    SAVE_BLOCK_RUN = 1,   /* consecutive blocks of the run class */
    SAVE_BLOCK_LARGE = 2, /* a run of segments of its own */
};
#define SAVE_BLOCK_KIND_SHIFT 56
#define SAVE_BLOCK_BYTES_MASK ((UINT64_C(1) << SAVE_BLOCK_KIND_SHIFT) - 1)

struct save_header {
    uint32_t format;
    uint32_t layout;        /* the saving heapd's layout (informative) */
    uint64_t base;
    uint64_t max_size;      /* informative */
    uint64_t segment_size;  /* informative */
    uint64_t saved_at_ns;   /* CLOCK_REALTIME */
};

struct save_totals {
    uint64_t objects, object_bytes, globals, data_bytes;
};

/* CRC-32C (Castagnoli) of N bytes at P, continuing CRC (0 to start). */
uint32_t save_crc32c(uint32_t crc, const void *p, size_t n);

/* The header's 64 bytes for H. */
void save_header_encode(const struct save_header *h,
                        uint8_t out[SAVE_HEADER_BYTES]);
/* Decode and check 64 header bytes: 0, or -EINVAL with WHY (N bytes)
 * saying what is wrong (not a saved heap, a damaged header, a format
 * this heapd does not know). */
int save_header_decode(const uint8_t in[SAVE_HEADER_BYTES],
                       struct save_header *h, char *why, size_t n);

/* A chunk's 8-byte prefix and the checksum that follows its payload. */
void save_chunk_prefix(uint8_t out[8], uint32_t type, uint32_t len);
uint32_t save_chunk_crc(const uint8_t prefix[8], const void *payload,
                        uint32_t len);

static inline void save_put64(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}
static inline uint64_t save_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}
static inline void save_put32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}
static inline uint32_t save_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

#endif
