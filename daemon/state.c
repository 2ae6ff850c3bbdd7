/* Saving and taking back the daemon's state of a heap.
 *
 * Note [Saved state]
 * ~~~~~~~~~~~~~~~~~~
 * What the heap's memfd and the daemon's page do not hold, and the next
 * heapd needs to trust the heap: the segment table (every segment's
 * state, class, punched flag, charge; the free and reuse bitmaps; the
 * charges of the quota), the globals' records (Note [Global roots]), the
 * counters (with the heap's birth, for its age, and restarts_survived),
 * the static flag and the last stop generation, and the clients kept
 * for resuming with their slots' records (Note [Resuming clients] in
 * resume.c).  It is saved only at a clean exit, when every client has
 * left or is suspended and the collector has finished its cycle: so the
 * only OWNED segments are kept clients', no remark is outstanding, and
 * every other record is the daemon's own.  The memfd holds a header, then the
 * records; the header names STATE_VERSION, the layout version, the heap's
 * geometry and the size of each record, and ends with the body's length,
 * an FNV-1a checksum of it and a completion word written last.  The next
 * heapd takes the state back only if every one of those agrees with
 * itself and its configuration, no segment is OWNED but by a kept
 * client, and the table passes segtab_check; anything else refuses the heap with a sentence
 * naming what disagreed (a newer or older state names both versions).
 * A fenced segment's fence is not kept: it belongs to a process only the
 * heapd that evicted it watched (Note [Evicted clients] in stall.c).
 */
#include "state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "heap.h"
#include "log.h"
#include "resume.h"

#define STATE_MAGIC 0x3174736470616568ull /* "heapdst1", little-endian */

struct state_header {
    uint64_t magic;
    uint32_t version;
    uint32_t layout_version;
    uint64_t base, max_size, segment_size;
    uint32_t seg_bytes, charge_bytes, global_bytes, stats_bytes;
    uint32_t count, first, high, n_charges;
    uint32_t n_free, n_owned, n_filled, n_large, n_reusable;
    uint32_t stop_gen;
    uint64_t orphaned, adopted;
    uint8_t static_flag;
    uint32_t n_clients, client_bytes;
    uint64_t body_bytes;
    uint64_t checksum;
    uint64_t complete;          /* STATE_MAGIC, written last */
};

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

struct part {
    void *p;
    size_t n;
};

/* A kept client (Note [Resuming clients]), with its slots' records. */
struct state_client {
    uint64_t id;
    uint8_t token[RESUME_TOKEN_BYTES];
    int32_t pid;
    uint32_t uid, gid;
    uint64_t start;
    char name[64];
    uint32_t held;
    uint64_t granted;
    uint64_t slots[2];
    uint32_t region[LAYOUT_MAX_MUTATORS];
    uint64_t alloc_bound[LAYOUT_MAX_MUTATORS];
    /* each slot's nursery (Note [A nursery in the segment table]),
     * checked against the saved segment table by resume's young_again */
    uint32_t young_first[LAYOUT_MAX_MUTATORS];
    uint32_t young_segs[LAYOUT_MAX_MUTATORS];
    uint32_t young_age[LAYOUT_MAX_MUTATORS];
};

/* The records, in the body's order. */
static unsigned parts_of(struct heap *h, struct part out[5])
{
    struct segtab *t = &h->segs;
    size_t words = ((size_t)t->count + 63) / 64;
    out[0] = (struct part){t->segs, (size_t)t->count * sizeof *t->segs};
    out[1] = (struct part){t->free_bits, words * sizeof(uint64_t)};
    out[2] = (struct part){t->reuse_bits, words * sizeof(uint64_t)};
    out[3] = (struct part){t->charges,
                           (size_t)t->n_charges * sizeof *t->charges};
    out[4] = (struct part){h->globals,
                           LAYOUT_MAX_GLOBALS * sizeof *h->globals};
    return 5;
}

static int write_all(int fd, const void *p, size_t n, off_t at)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = pwrite(fd, b, n, at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        b += w;
        n -= (size_t)w;
        at += w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n, off_t at)
{
    uint8_t *b = p;
    while (n > 0) {
        ssize_t r = pread(fd, b, n, at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EIO;
        b += r;
        n -= (size_t)r;
        at += r;
    }
    return 0;
}

int state_save(struct heap *h, const struct resume_client *kept)
{
    char name[96];
    struct part parts[5];
    struct state_header hd = {0};
    struct segtab *t = &h->segs;
    struct state_client *clients = NULL;
    uint32_t nc = 0;
    int fd, rc;

    for (const struct resume_client *r = kept; r; r = r->next)
        nc += r->heap == h;
    if (nc && !(clients = calloc(nc, sizeof *clients)))
        return -ENOMEM;
    nc = 0;
    for (const struct resume_client *r = kept; r; r = r->next) {
        if (r->heap != h)
            continue;
        struct state_client *sc = &clients[nc++];
        sc->id = r->id;
        memcpy(sc->token, r->token, sizeof sc->token);
        sc->pid = r->pid;
        sc->uid = r->uid;
        sc->gid = r->gid;
        sc->start = r->start;
        snprintf(sc->name, sizeof sc->name, "%s", r->name);
        sc->held = r->held;
        sc->granted = r->granted;
        sc->slots[0] = r->slots[0];
        sc->slots[1] = r->slots[1];
        for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
            if (!(r->slots[i / 64] >> (i % 64) & 1))
                continue;
            sc->region[i] = h->owners[i].region;
            sc->alloc_bound[i] = atomic_load(&h->owners[i].alloc_bound);
            sc->young_first[i] = h->owners[i].young_first;
            sc->young_segs[i] = h->owners[i].young_segs;
            sc->young_age[i] = h->owners[i].young_age;
        }
    }

    snprintf(name, sizeof name, "heapd:%s:state", h->cfg->name);
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) {
        free(clients);
        return -errno;
    }
    pthread_mutex_lock(&h->lock);
    /* Note [Saved state]: fences belong to this heapd's watch (the flag
     * fenced: See Note [Segment lifecycle] in segment.c) */
    for (uint32_t i = t->first; i < t->high; i++)
        t->segs[i].fenced = 0;
    t->n_fenced = 0;
    unsigned np = parts_of(h, parts);
    hd.magic = STATE_MAGIC;
    hd.version = STATE_VERSION;
    hd.layout_version = LAYOUT_VERSION;
    hd.base = h->cfg->base;
    hd.max_size = h->cfg->max_size;
    hd.segment_size = h->cfg->segment_size;
    hd.seg_bytes = sizeof(struct seg);
    hd.charge_bytes = sizeof(struct seg_charge);
    hd.global_bytes = sizeof(struct heap_global);
    hd.stats_bytes = sizeof(struct heap_stats);
    hd.count = t->count;
    hd.first = t->first;
    hd.high = t->high;
    hd.n_charges = t->n_charges;
    hd.n_free = t->n_free;
    hd.n_owned = t->n_owned;
    hd.n_filled = t->n_filled;
    hd.n_large = t->n_large;
    hd.n_reusable = t->n_reusable;
    hd.orphaned = t->orphaned;
    hd.adopted = t->adopted;
    hd.stop_gen = h->stop_gen;
    hd.static_flag = h->static_flag;
    hd.n_clients = nc;
    hd.client_bytes = sizeof(struct state_client);
    off_t at = sizeof hd;
    uint64_t sum = 0xcbf29ce484222325ull;
    rc = 0;
    for (unsigned k = 0; k < np && rc == 0; k++) {
        sum = fnv1a(sum, parts[k].p, parts[k].n);
        rc = write_all(fd, parts[k].p, parts[k].n, at);
        at += (off_t)parts[k].n;
    }
    struct heap_stats stats = h->stats;
    pthread_mutex_unlock(&h->lock);
    if (rc == 0) {
        sum = fnv1a(sum, &stats, sizeof stats);
        rc = write_all(fd, &stats, sizeof stats, at);
        at += (off_t)sizeof stats;
    }
    if (rc == 0 && nc) {
        sum = fnv1a(sum, clients, nc * sizeof *clients);
        rc = write_all(fd, clients, nc * sizeof *clients, at);
        at += (off_t)(nc * sizeof *clients);
    }
    free(clients);
    hd.body_bytes = (uint64_t)at - sizeof hd;
    hd.checksum = sum;
    /* the header, then its completion word last */
    if (rc == 0)
        rc = write_all(fd, &hd, offsetof(struct state_header, complete), 0);
    if (rc == 0) {
        uint64_t done = STATE_MAGIC;
        rc = write_all(fd, &done, sizeof done,
                       offsetof(struct state_header, complete));
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

#define REFUSE(...)                                                          \
    do {                                                                     \
        snprintf(why, n, __VA_ARGS__);                                       \
        rc = -EINVAL;                                                        \
        goto out;                                                            \
    } while (0)

/* Is client ID one of the N kept ones? */
static bool kept_client(const struct state_client *c, uint32_t n, uint64_t id)
{
    for (uint32_t k = 0; k < n; k++)
        if (c[k].id == id)
            return true;
    return false;
}

int state_restore(struct heap *h, int fd, char *why, size_t n,
                  struct resume_client **kept)
{
    struct state_header hd;
    struct part parts[5];
    struct segtab *t = &h->segs;
    struct stat st;
    struct seg_charge *charges = NULL;
    struct state_client *clients = NULL;
    int rc = 0;

    *kept = NULL;

    if (fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof hd)
        REFUSE("the saved state is %lld bytes, shorter than its header",
               (long long)st.st_size);
    if ((rc = read_all(fd, &hd, sizeof hd, 0)) < 0)
        REFUSE("the saved state cannot be read: %s", strerror(-rc));
    if (hd.magic != STATE_MAGIC)
        REFUSE("the saved state is not heapd's (magic %#llx)",
               (unsigned long long)hd.magic);
    if (hd.version != STATE_VERSION)
        REFUSE("the saved state is of version %u, and this heapd reads "
               "version %u only", hd.version, STATE_VERSION);
    if (hd.complete != STATE_MAGIC)
        REFUSE("the saved state was never completed (heapd died while "
               "saving it)");
    if (hd.layout_version != LAYOUT_VERSION)
        REFUSE("the heap is of layout version %u, and this heapd's is %u",
               hd.layout_version, LAYOUT_VERSION);
    if (hd.base != h->cfg->base || hd.max_size != h->cfg->max_size ||
        hd.segment_size != h->cfg->segment_size)
        REFUSE("the heap was base 0x%llx, max_size %llu, segment_size %llu, "
               "and [heap %s] now says 0x%llx, %llu, %llu; put the old "
               "values back to recover it", (unsigned long long)hd.base,
               (unsigned long long)hd.max_size,
               (unsigned long long)hd.segment_size, h->cfg->name,
               (unsigned long long)h->cfg->base,
               (unsigned long long)h->cfg->max_size,
               (unsigned long long)h->cfg->segment_size);
    if (hd.seg_bytes != sizeof(struct seg) ||
        hd.charge_bytes != sizeof(struct seg_charge) ||
        hd.global_bytes != sizeof(struct heap_global) ||
        hd.stats_bytes != sizeof(struct heap_stats) ||
        hd.client_bytes != sizeof(struct state_client) ||
        hd.n_clients > LAYOUT_MAX_MUTATORS * 64u)
        REFUSE("the saved state's records are of another build of heapd");
    if (hd.count != t->count || hd.first != t->first ||
        hd.high < hd.first || hd.high > hd.count ||
        hd.n_charges > SEG_CHARGES_MAX)
        REFUSE("the saved segment table does not fit the heap (%u segments "
               "from %u, high %u)", hd.count, hd.first, hd.high);
    if ((uint64_t)st.st_size != sizeof hd + hd.body_bytes)
        REFUSE("the saved state is %lld bytes, and its header says %llu",
               (long long)st.st_size,
               (unsigned long long)(sizeof hd + hd.body_bytes));
    if (hd.n_charges) {
        charges = calloc(hd.n_charges, sizeof *charges);
        if (!charges) {
            rc = -ENOMEM;
            snprintf(why, n, "out of memory");
            goto out;
        }
    }
    free(t->charges);
    t->charges = charges;
    t->n_charges = hd.n_charges;
    charges = NULL;
    unsigned np = parts_of(h, parts);
    size_t body = sizeof(struct heap_stats) +
                  (size_t)hd.n_clients * sizeof(struct state_client);
    for (unsigned k = 0; k < np; k++)
        body += parts[k].n;
    if (body != hd.body_bytes)
        REFUSE("the saved state's body is %llu bytes, and this heap's "
               "records take %zu", (unsigned long long)hd.body_bytes, body);
    off_t at = sizeof hd;
    uint64_t sum = 0xcbf29ce484222325ull;
    for (unsigned k = 0; k < np; k++) {
        if ((rc = read_all(fd, parts[k].p, parts[k].n, at)) < 0)
            REFUSE("the saved state cannot be read: %s", strerror(-rc));
        sum = fnv1a(sum, parts[k].p, parts[k].n);
        at += (off_t)parts[k].n;
    }
    struct heap_stats stats;
    if ((rc = read_all(fd, &stats, sizeof stats, at)) < 0)
        REFUSE("the saved state cannot be read: %s", strerror(-rc));
    sum = fnv1a(sum, &stats, sizeof stats);
    at += (off_t)sizeof stats;
    if (hd.n_clients) {
        size_t cb = (size_t)hd.n_clients * sizeof *clients;
        if (!(clients = malloc(cb))) {
            rc = -ENOMEM;
            snprintf(why, n, "out of memory");
            goto out;
        }
        if ((rc = read_all(fd, clients, cb, at)) < 0)
            REFUSE("the saved state cannot be read: %s", strerror(-rc));
        sum = fnv1a(sum, clients, cb);
    }
    if (sum != hd.checksum)
        REFUSE("the saved state's checksum does not match: it was changed "
               "or damaged");
    t->high = hd.high;
    t->n_free = hd.n_free;
    t->n_owned = hd.n_owned;
    t->n_filled = hd.n_filled;
    t->n_large = hd.n_large;
    t->n_reusable = hd.n_reusable;
    t->n_fenced = 0;
    t->n_young = 0; /* counted below: the saved header has no field */
    t->orphaned = hd.orphaned;
    t->adopted = hd.adopted;
    for (uint32_t i = t->first; i < t->count; i++) {
        struct seg *s = &t->segs[i];
        bool ours = kept_client(clients, hd.n_clients, s->owner);
        bool young = s->state == SEG_YOUNG || s->state == SEG_YOUNG_TAIL;
        if (((s->state == SEG_OWNED || young) && !ours) || s->fenced ||
            s->remark || s->state > SEG_STATE_MAX ||
            (i >= t->high && s->state != SEG_FREE))
            REFUSE("segment %u of the saved table is in state %u (fence %u, "
                   "remark %u): a clean exit leaves none such", i, s->state,
                   s->fenced, s->remark);
        s->remark_next = 0;
        s->remark_to = 0;
        t->n_young += young;
        /* See Note [Segment lifecycle] in segment.c: an owner changes */
        if ((s->state == SEG_LARGE || s->state == SEG_LARGE_TAIL) && !ours)
            s->owner = 0;
    }
    for (uint32_t c = 0; c < t->n_charges; c++)
        t->charges[c] = (struct seg_charge){0}; /* no client is connected */
    for (uint32_t i = t->first; i < t->count; i++)
        t->segs[i].charge = 0;
    seg_recount_memory(t); /* Note [Purging free memory] in purge.c */
    if (!segtab_check(t))
        REFUSE("the saved segment table disagrees with itself (the log "
               "says how)");
    if (atomic_load(&h->control->phase) != LAYOUT_PHASE_IDLE)
        REFUSE("the heap was saved in the middle of a cycle (phase %u)",
               atomic_load(&h->control->phase));
    for (uint32_t k = 0; k < hd.n_clients; k++) {
        const struct state_client *sc = &clients[k];
        if (sc->id == 0 || (sc->slots[0] | sc->slots[1]) == 0 ||
            memchr(sc->name, 0, sizeof sc->name) == NULL)
            REFUSE("kept client %u of the saved state is not one heapd "
                   "writes", k);
        for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
            if (!(sc->slots[i / 64] >> (i % 64) & 1))
                continue;
            if (sc->region[i] >= LAYOUT_MAX_MUTATORS)
                REFUSE("kept client %llu of the saved state has slot %u in "
                       "region %u", (unsigned long long)sc->id, i,
                       sc->region[i]);
            for (uint32_t j = 0; j < k; j++)
                if (clients[j].slots[i / 64] >> (i % 64) & 1)
                    REFUSE("slot %u of the saved state is kept for two "
                           "clients", i);
        }
    }
    for (uint32_t k = hd.n_clients; k-- > 0;) {
        const struct state_client *sc = &clients[k];
        struct resume_client *r = calloc(1, sizeof *r);
        if (!r) {
            rc = -ENOMEM;
            snprintf(why, n, "out of memory");
            goto out;
        }
        r->id = sc->id;
        memcpy(r->token, sc->token, sizeof r->token);
        r->pid = sc->pid;
        r->uid = sc->uid;
        r->gid = sc->gid;
        r->start = sc->start;
        memcpy(r->name, sc->name, sizeof r->name);
        r->held = sc->held;
        r->granted = sc->granted;
        r->slots[0] = sc->slots[0];
        r->slots[1] = sc->slots[1];
        r->mem_fd = r->pidfd = -1;
        for (unsigned i = 0; i < LAYOUT_MAX_MUTATORS; i++) {
            if (!(sc->slots[i / 64] >> (i % 64) & 1))
                continue;
            h->owners[i].region = sc->region[i];
            atomic_store(&h->owners[i].alloc_bound, sc->alloc_bound[i]);
            h->owners[i].young_first = sc->young_first[i];
            h->owners[i].young_segs = sc->young_segs[i];
            h->owners[i].young_age = sc->young_age[i];
            h->owners[i].young_tracer = NULL;
        }
        r->next = *kept;
        *kept = r;
    }
    h->stats = stats;
    h->stats.restarts_survived++;
    h->stop_gen = hd.stop_gen;
    h->static_flag = hd.static_flag;
out:
    /* refused: the caller closes H, whose table is then half read */
    if (rc < 0) {
        while (*kept) {
            struct resume_client *r = *kept;
            *kept = r->next;
            free(r);
        }
    }
    free(clients);
    free(charges);
    return rc;
}
