/* Shared-memory layout checks.  See Note [Heap mapping] in layout.h. */
#include "layout.h"

#include <errno.h>
#include <string.h>

/* See "size classes" in layout.h. */
const uint32_t layout_class_size[LAYOUT_NCLASSES] = {
    16,    24,    32,    40,    48,    56,    64,    72,    80,    88,
    96,    104,   112,   120,   128,
    136,   144,   160,   176,   192,   208,   224,   240,   256,
    264,   288,   320,   352,   384,   416,   448,   480,   512,
    520,   576,   640,   704,   768,   832,   896,   960,   1024,
    1032,  1152,  1280,  1408,  1536,  1664,  1792,  1920,  2048,
    2056,  2304,  2560,  2816,  3072,  3328,  3584,  3840,  4096,
    4104,  4608,  5120,  5632,  6144,  6656,  7168,  7680,  8192,
    8200,  9216,  10240, 11264, 12288, 13312, 14336, 15360, 16384,
    LAYOUT_RUN_GRANULE, /* the run class: Note [Runs] */
};

uint32_t layout_small_max(uint64_t segment_size)
{
    uint32_t best = 0;
    for (unsigned c = 0; c < LAYOUT_CLASS_RUN; c++) {
        uint32_t n, first;
        layout_small_geometry(segment_size, c, &n, &first);
        if (n >= 4)
            best = layout_class_size[c];
    }
    return best;
}

uint32_t layout_run_max(uint64_t segment_size)
{
    uint32_t n, first;
    layout_small_geometry(segment_size, LAYOUT_CLASS_RUN, &n, &first);
    return n * LAYOUT_RUN_GRANULE;
}

void layout_small_geometry(uint64_t segment_size, unsigned cls,
                           uint32_t *nblocks, uint32_t *first_block)
{
    uint64_t bs = layout_class_size[cls];
    /* n marks then n blocks after the header, block 0 16-aligned */
    uint64_t n = (segment_size - LAYOUT_SEG_MARKS - 15) / (bs + 1);
    uint64_t first = (LAYOUT_SEG_MARKS + n + 15) & ~(uint64_t)15;
    while (n > 0 && first + n * bs > segment_size) {
        n--;
        first = (LAYOUT_SEG_MARKS + n + 15) & ~(uint64_t)15;
    }
    *nblocks = (uint32_t)n;
    *first_block = (uint32_t)first;
}

int layout_check_control(const struct layout_control *c, uint64_t base,
                         uint64_t max_size, uint64_t segment_size)
{
    if (c->magic != LAYOUT_MAGIC)
        return -EPROTO;
    if (c->layout_version != LAYOUT_VERSION ||
        c->header_bytes != sizeof(struct layout_control))
        return -EPROTONOSUPPORT;
    if (c->base != base || c->max_size != max_size ||
        c->segment_size != segment_size ||
        c->control_segments != layout_control_segments(segment_size) ||
        c->segment_count != max_size / segment_size)
        return -EINVAL;
    return 0;
}

void layout_init_control(struct layout_control *c, const char *heap_name,
                         uint64_t base, uint64_t max_size,
                         uint64_t segment_size)
{
    /* a fresh memfd reads as zero: only the header is written, so that
     * the slots' pages are committed only when they are used */
    memset(c, 0, offsetof(struct layout_control, epoch));
    c->layout_version = LAYOUT_VERSION;
    c->header_bytes = sizeof *c;
    c->base = base;
    c->max_size = max_size;
    c->segment_size = segment_size;
    c->control_segments = layout_control_segments(segment_size);
    c->segment_count = (uint32_t)(max_size / segment_size);
    strncpy(c->heap_name, heap_name, sizeof c->heap_name - 1);
    c->epoch = 1;
    c->phase = LAYOUT_PHASE_IDLE;
    /* magic last: a reader that sees it sees the rest */
    __atomic_store_n(&c->magic, LAYOUT_MAGIC, __ATOMIC_RELEASE);
}

const char *layout_stall_what(enum layout_stall_on on)
{
    switch (on) {
    case LAYOUT_STALL_SNAPSHOT:
        return "has not acknowledged the snapshot's stop";
    case LAYOUT_STALL_FINAL_SYNC:
        return "has not acknowledged the final sync's stop";
    case LAYOUT_STALL_HANDSHAKE:
        return "has not acknowledged the final sync's stop while it holds "
               "its stack-marking handshake (its roots half logged)";
    case LAYOUT_STALL_REMARK:
        return "has not answered a remark request";
    case LAYOUT_STALL_NONE:
        return "has not stalled";
    }
    return "has not answered the collector"; /* a value nobody wrote */
}
