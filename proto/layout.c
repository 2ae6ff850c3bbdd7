/* Shared-memory layout checks.  See Note [Heap mapping] in layout.h. */
#include "layout.h"

#include <errno.h>
#include <string.h>

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
    memset(c, 0, sizeof *c);
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
