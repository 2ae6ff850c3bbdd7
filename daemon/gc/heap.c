/* The daemon's side of a shared heap.  See Note [Heap mapping] in
 * proto/layout.h. */
#include "heap.h"
#include "load.h"
#include "save.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "slotmem.h"
#include "table.h"

int heap_sealed_memfd(const char *name, uint64_t size)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), rc;
    if (fd < 0)
        return -errno;
    /* See Note [Heap mapping]: no client may resize the file under us. */
    if (ftruncate(fd, (off_t)size) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

/* Note [The daemon's page]: its memfd, mapped read-write over the first
 * LAYOUT_DAEMON_BYTES of the heap mapping at BASE, and a read-only
 * descriptor of it for clients. */
static int open_daemon_page(struct heap *h, void *base, int kept)
{
    char name[80], path[64];
    long page = sysconf(_SC_PAGESIZE);
    int rc;

    /* a larger page would map client-writable words read-only too, and
     * past the end of the page's memfd */
    if (page <= 0 || LAYOUT_DAEMON_BYTES % (unsigned long)page != 0) {
        log_error("heap '%s': this machine's pages are %ld bytes, and the "
                  "daemon's page (%u bytes) is not a multiple of them; "
                  "rebuild heapd and libheapd with a LAYOUT_DAEMON_BYTES "
                  "in proto/layout.h that is", h->cfg->name, page,
                  LAYOUT_DAEMON_BYTES);
        return -EINVAL;
    }
    snprintf(name, sizeof name, "heapd:%s:daemon", h->cfg->name);
    if (kept >= 0)
        h->page_fd = kept; /* Note [Heaps across restarts] */
    else if ((h->page_fd = heap_sealed_memfd(name, LAYOUT_DAEMON_BYTES)) < 0)
        return h->page_fd;
    void *p = mmap(base, LAYOUT_DAEMON_BYTES, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, h->page_fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    snprintf(path, sizeof path, "/proc/self/fd/%d", h->page_fd);
    h->page_ro_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (h->page_ro_fd < 0) {
        rc = -errno;
        log_error("heap '%s': cannot open %s read-only: %s; heapd needs "
                  "/proc mounted", h->cfg->name, path, strerror(-rc));
        return rc;
    }
    return 0;
}

/* Is FD a memfd of SIZE bytes sealed as heap_sealed_memfd seals? */
bool heap_sealed_as(int fd, uint64_t size)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    int want = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    return fstat(fd, &st) == 0 && (uint64_t)st.st_size == size &&
           seals >= 0 && (seals & want) == want;
}

/* heap_open failed: say FMT in the log, naming the heap, and keep it in
 * h->why for the caller. */
static void open_failed(struct heap *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void open_failed(struct heap *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->why, sizeof h->why, fmt, ap);
    va_end(ap);
    log_error("heap '%s': %s", h->cfg->name, h->why);
}

int heap_open(struct heap *h, const struct config_heap *cfg, int kept_heap,
              int kept_page, int kept_table)
{
    char name[80];
    void *p = MAP_FAILED;
    int fd = -1, rc = 0;
    bool kept = kept_heap >= 0;

    memset(h, 0, sizeof *h);
    h->fd = h->page_fd = h->page_ro_fd = h->table_fd = -1;
    h->cfg = cfg;

    snprintf(name, sizeof name, "heapd:%s", cfg->name);
    if (kept && (kept_page < 0 || !heap_sealed_as(kept_heap, cfg->max_size) ||
                 !heap_sealed_as(kept_page, LAYOUT_DAEMON_BYTES))) {
        open_failed(h, "the memfds the service manager kept are not a heap "
                    "of max_size %llu as this heapd makes them",
                    (unsigned long long)cfg->max_size);
        close(kept_heap);
        if (kept_page >= 0)
            close(kept_page);
        if (kept_table >= 0)
            close(kept_table);
        return -EINVAL;
    }
    if (!kept && kept_table >= 0) {
        close(kept_table);
        kept_table = -1;
    }
    if (kept) {
        fd = kept_heap;
    } else if ((fd = heap_sealed_memfd(name, cfg->max_size)) < 0) {
        rc = fd;
        open_failed(h, "cannot make a sealed memfd of %llu bytes: %s; "
                  "lower max_size",
                  (unsigned long long)cfg->max_size, strerror(-rc));
        goto out;
    }
    p = mmap((void *)(uintptr_t)cfg->base, cfg->max_size,
             PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_FIXED_NOREPLACE | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED || p != (void *)(uintptr_t)cfg->base) {
        rc = p == MAP_FAILED ? -errno : -EEXIST;
        if (p != MAP_FAILED)    /* an old kernel ignored NOREPLACE */
            munmap(p, cfg->max_size);
        p = MAP_FAILED;
        open_failed(h, "cannot map [0x%llx, 0x%llx): %s; choose another "
                    "'base' in [heap %s]", (unsigned long long)cfg->base,
                    (unsigned long long)(cfg->base + cfg->max_size),
                    rc == -EEXIST ? "the range is already in use"
                                  : strerror(-rc), cfg->name);
        goto out;
    }
    if ((rc = open_daemon_page(h, p, kept ? kept_page : -1)) < 0) {
        open_failed(h, "cannot set up the daemon's page: %s", strerror(-rc));
        munmap(p, cfg->max_size);
        goto out;
    }
    h->fd = fd;
    h->base = p;
    h->control = p;
    h->seg_shift = (unsigned)__builtin_ctzll(cfg->segment_size);
    /* See Note [Heap verifier] and Note [Sweeping]. */
    const char *env = getenv("HEAPD_VERIFY");
    h->verify = cfg->verify || (env && strcmp(env, "1") == 0);
#ifdef NDEBUG
    h->poison = h->verify;
#else
    h->poison = true;
#endif
    hd_mutex_init(&h->lock);
    hd_mutex_init(&h->adoption);
    if (!kept) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        h->stats.created_unix_ns =
            (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
        layout_init_control(h->control, cfg->name, cfg->base, cfg->max_size,
                            cfg->segment_size);
    }
    else if ((rc = layout_check_control(h->control, cfg->base, cfg->max_size,
                                        cfg->segment_size)) < 0) {
        open_failed(h, "the kept heap's control area does not match its "
                    "configuration (%s)", strerror(-rc));
        munmap(p, cfg->max_size);
        h->base = NULL;
        h->control = NULL;
        h->fd = -1;
        goto out;
    }
    if ((rc = seg_init(h)) < 0) {
        open_failed(h, "out of memory for its segment table");
        munmap(p, cfg->max_size);
        h->base = NULL;
        h->control = NULL;
        h->fd = -1;
        goto out;
    }
    if (kept_table >= 0) {
        char why[512];
        rc = table_adopt(h, kept_table, why, sizeof why);
        kept_table = -1; /* taken over */
        if (rc < 0)
            open_failed(h, "%s", why);
    } else if ((rc = table_create(h)) < 0) {
        open_failed(h, "cannot make its table: %s",
                  strerror(-rc));
    } else {
        seg_format(h);
    }
    if (rc == 0 && (rc = slotmem_reserve(h)) < 0)
        open_failed(h, "out of memory for the mutator slots' windows");
    if (rc < 0) {
        table_close(h);
        seg_destroy(h);
        munmap(p, cfg->max_size);
        h->base = NULL;
        h->control = NULL;
        h->fd = -1;
        goto out;
    }
    /* before any client reads it, kept ones included: they fill what a
     * minor collection frees as the sweep does (Note [Sweeping]); not
     * before a kept heap passed its checks (Note [Heaps heapd cannot
     * adopt] in daemon/adopt.c) */
    atomic_store(&h->control->poison, h->poison ? LAYOUT_POISON : 0u);
    /* Note [Saving under the barrier]: a save a kill cut short leaves no
     * save cycle behind */
    atomic_store(&h->control->save_epoch, 0);
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    if (kept_table >= 0)
        close(kept_table);
    if (rc < 0) {
        if (h->page_fd >= 0)
            close(h->page_fd);
        if (h->page_ro_fd >= 0)
            close(h->page_ro_fd);
        h->page_fd = h->page_ro_fd = -1;
    }
    return rc;
}

void heap_close(struct heap *h)
{
    save_discard(h); /* an asked-for save no cycle took */
    load_discard(h);
    slotmem_release(h);
    table_close(h);
    seg_destroy(h);
    if (h->base)
        munmap(h->base, h->cfg->max_size);
    if (h->fd >= 0)
        close(h->fd);
    if (h->page_fd >= 0)
        close(h->page_fd);
    if (h->page_ro_fd >= 0)
        close(h->page_ro_fd);
    h->base = NULL;
    h->control = NULL;
    h->fd = h->page_fd = h->page_ro_fd = -1;
}

static uint64_t fd_committed(int fd)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 ? (uint64_t)st.st_blocks * 512u : 0;
}

uint64_t heap_committed_bytes(const struct heap *h)
{
    /* the daemon's page backs the heap too (Note [The daemon's page]) */
    return fd_committed(h->fd) + fd_committed(h->page_fd);
}

#ifndef NDEBUG
/* Note [Holding a save or a load for tests]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Debug builds only: while the file HEAPD_TEST_HOLD_SAVE names exists, the
 * saver waits before its first object, and while the one
 * HEAPD_TEST_HOLD_LOAD names exists, a load waits after its first pass;
 * each logs that it waits, and stops waiting when heapd stops (or after
 * HOLD_FOR_TESTS_MS, past the tests' own bounds).  So a test can stop
 * heapd in the middle of a save or a load (test_save's
 * a_stop_ends_a_save_under_way, a_stop_ends_a_load_under_way). */
#define HOLD_FOR_TESTS_MS 120000
void heap_hold_for_tests(const struct heap *h, const char *env,
                         const char *what, const _Atomic bool *unless)
{
    const char *path = getenv(env);
    if (!path || access(path, F_OK) != 0)
        return;
    log_debug("heap '%s': the %s waits while %s exists", h->cfg->name, what,
              path);
    for (unsigned ms = 0; ms < HOLD_FOR_TESTS_MS &&
                          access(path, F_OK) == 0 && !atomic_load(unless);
         ms++)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
}
#endif
