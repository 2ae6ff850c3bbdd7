/* An in-process heap for the collector's tests: see heap_inproc.h. */
#include "heap_inproc.h"

#include <check.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "layout.h"
#include "segment.h"
#include "table.h"

void heap_inproc_open(struct heap *h, struct config_heap *cfg,
                      const char *name, unsigned shift, unsigned segs,
                      uint32_t epoch)
{
    strncpy(cfg->name, name, sizeof cfg->name - 1);
    cfg->segment_size = (uint64_t)1 << shift;
    /* SEGS segments for objects after the control area's */
    cfg->max_size = (uint64_t)(layout_control_segments(cfg->segment_size) +
                               segs) << shift;
    memset(h, 0, sizeof *h);
    h->cfg = cfg;
    h->fd = -1; /* small segments only: nothing is punched */
    h->seg_shift = shift;
    h->poison = true;
    h->base = mmap(NULL, cfg->max_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(h->base != MAP_FAILED);
    h->control = h->base;
    atomic_store(&h->control->epoch, epoch);
    hd_mutex_init(&h->lock);
    hd_mutex_init(&h->adoption);
    ck_assert_int_eq(seg_init(h), 0);
    h->table_fd = -1;
    ck_assert_int_eq(table_create(h), 0); /* Note [The live table] */
    seg_format(h);
}

void heap_inproc_close(struct heap *h, const struct config_heap *cfg)
{
    table_close(h);
    seg_destroy(h);
    munmap(h->base, cfg->max_size);
    hd_mutex_destroy(&h->lock);
    hd_mutex_destroy(&h->adoption);
}
