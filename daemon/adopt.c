/* Each configured heap at start: taken back from what the service
 * manager kept (Note [Heaps across restarts] in fdstore.c), opened empty,
 * or left unserved; and heapctl drop, which gives an unserved heap up.
 *
 * Note [Heaps heapd cannot adopt]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A heap the service manager kept that this heapd cannot take back --
 * of another layout or table version, memfds that do not fit its [heap]
 * section, a table that fails its checks, verifying cycles that find
 * failures -- is not served, and nothing of it is dropped:
 *   - its descriptors stay in the store under their names (heapd.heap,
 *     .page, .table, .state and .client.NAME.ID), never removed or
 *     renamed, so a heapd that can take it back (the release that wrote
 *     it, or this one with the [heap] section it had) does, after a
 *     restart.  The checks made before heapd writes anything refuse the
 *     version and geometry cases -- another layout (read from the page)
 *     or table version, memfds that do not fit the [heap] section, a
 *     table that is not heapd's or not sealed -- so those heaps are not
 *     written either.  One refused later, by the checks of the table's
 *     records during the take-back or by the verifying cycles, holds
 *     what heapd had repaired by then;
 *   - heapd says why and what to do in its log, in heapctl stats
 *     (StatsReply.unserved) and to every client that names the heap
 *     (HEAPD_ENOHEAP), and serves its other heaps;
 *   - heapctl drop NAME (privileged) gives it up: heapd asks the store to
 *     forget it, then opens and serves the heap empty.
 * A heap whose verifying cycles fail while it is served (they wait for
 * the clients that resume: Note [Recovery cycles] in collector.c) is
 * refused the same way and left in the store under its names; the next
 * heapd's own verifying cycles refuse it at start.  Why: a heapd of a
 * release that changed LAYOUT_VERSION started every kept heap empty, so
 * an upgrade lost every heap it served (tests/test_restart.c keeps a heap
 * of another layout across a restart and serves it again after the next
 * one).
 */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "collector.h"
#include "daemon.h"
#include "fdstore.h"
#include "heapd_build.h"
#include "layout.h"
#include "load.h"
#include "log.h"
#include "resume.h"
#include "table.h"

/* Take back heap H, kept as KH, KP and KT, from its live table, sealed
 * at a clean stop or left by a kill (Note [Heaps across restarts] in
 * fdstore.c).  The descriptors stay the caller's.  Returns true with
 * *CLEAN saying which, or false with WHY saying why not (H closed) and
 * *RELEASE whether another release's heapd could (another layout or
 * table version). */
static bool take_back(struct daemon *d, struct heap *h,
                      const struct config_heap *cfg, int kh, int kp, int kt,
                      bool *clean, bool *release, char *why, size_t n,
                      struct fdstore *fds)
{
    struct resume_client *kept = NULL;
    *release = false;

    if (kh < 0 || kp < 0) {
        snprintf(why, n, "the service manager kept its memfd but not the "
                 "daemon's page");
        return false;
    }
    if (kt < 0) {
        snprintf(why, n, "the service manager kept no table of it (a heapd "
                 "of a release before the live table left it)");
        return false;
    }
    /* the control area's identity is in the daemon's page (Note [The
     * daemon's page]): another layout is said as such, before anything
     * is mapped */
    uint32_t layout = 0;
    if (pread(kp, &layout, sizeof layout,
              offsetof(struct layout_control, layout_version)) ==
            (ssize_t)sizeof layout &&
        layout != LAYOUT_VERSION) {
        snprintf(why, n, "it is of layout version %u, and this heapd (%s) "
                 "reads layout %u only", layout, HEAPD_VERSION,
                 LAYOUT_VERSION);
        *release = true;
        return false;
    }
    /* and the table's version, the word after its magic (Note [The live
     * table]); table_adopt checks the rest */
    uint32_t table = 0;
    if (pread(kt, &table, sizeof table, 8) == (ssize_t)sizeof table &&
        table != 0 && table != TABLE_VERSION)
        *release = true;
    int dh = dup(kh), dp = dup(kp), dt = dup(kt);
    if (dh < 0 || dp < 0 || dt < 0) {
        snprintf(why, n, "heapd cannot duplicate its descriptors (%s); "
                 "raise its LimitNOFILE=", strerror(errno));
        if (dh >= 0)
            close(dh);
        if (dp >= 0)
            close(dp);
        if (dt >= 0)
            close(dt);
        return false;
    }
    if (heap_open(h, cfg, dh, dp, dt) < 0) {
        snprintf(why, n, "%s", h->why);
        return false;
    }
    /* Note [The live table], Note [Resuming clients] */
    if (table_take_back(h, why, n, &kept, clean) < 0)
        goto refused;
    /* Note [Live clients]: no id the heap has listed is given again */
    uint64_t listed = atomic_load(&h->control->live_id_max);
    if (listed > d->next_client_id)
        d->next_client_id = listed;
    resume_adopt(d, h, kept, fds);
    if (*clean)
        return true;
    /* Note [Recovery cycles] */
    if (resume_keeps(d, h)) {
        /* their stacks are roots, their remarks theirs: the verifying
         * cycles wait until they are back (Note [Recovery cycles]) */
        collector_recover_later(h);
        return true;
    }
    if (collector_recover(h, &d->workers) < 0) {
        snprintf(why, n, "the verifying cycles found %llu failures (the "
                 "log names them)",
                 (unsigned long long)h->stats.verify_failures);
        goto refused;
    }
    return true;
refused:
    heap_close(h);
    return false;
}

/* Note [Loading a saved heap] in daemon/gc/load.c: load = FILE, into a
 * heap that starts empty, before anyone can attach.  A file that cannot
 * be loaded leaves the heap empty and served, and says why. */
static void load_at_start(struct heap *h)
{
    const struct config_heap *cfg = h->cfg;
    char why[1024];
    struct load_result res;
    int fd = load_open(cfg->load, why, sizeof why);
    if (fd < 0) {
        log_error("heap '%s': not loaded, the heap starts empty: heapd "
                  "cannot read load = %s: %s", cfg->name, cfg->load, why);
        return;
    }
    if (load_heap(h, fd, cfg->load, &res, why, sizeof why) < 0)
        log_error("heap '%s': not loaded, the heap starts empty: %s",
                  cfg->name, why);
    close(fd);
}

/* Heap CFG into H: the one the service manager kept, if it proves
 * itself, else a new one (Note [Heaps across restarts] in fdstore.c).
 * Returns 0 (H open), 1 (what was kept cannot be taken back: WHY, N
 * bytes, says why, and H is closed) or -errno. */
static int open_heap(struct daemon *d, const struct config_heap *cfg,
                     struct heap *h, struct fdstore *fds, char *unserved,
                     size_t un, bool *release)
{
    int kh = fdstore_take(fds, "heap", cfg->name);
    int kp = fdstore_take(fds, "page", cfg->name);
    int kt = fdstore_take(fds, "table", cfg->name);
    int ks = fdstore_take(fds, "state", cfg->name);
    uint64_t t0 = monotonic_ns();
    char why[512] = "";
    bool clean = false;
    int rc;

    bool back = false;
    *release = false;
    if (kh >= 0 || kp >= 0 || kt >= 0) {
        back = take_back(d, h, cfg, kh, kp, kt, &clean, release, why,
                              sizeof why, fds);
        if (back) {
            h->stats.recovery_ns = monotonic_ns() - t0;
            h->recovery_t0 = t0; /* Note [Recovery cycles], when deferred */
            log_info("heap '%s': recovered from the table %s, in %llu ms "
                     "(%u segments in use)", cfg->name,
                     clean ? "the heapd before sealed at a clean stop"
                           : "as after a kill",
                     (unsigned long long)(h->stats.recovery_ns / 1000000),
                     h->segs.count - h->segs.first - h->segs.n_free);
        } else if (kh >= 0) {
            /* Note [Heaps heapd cannot adopt]: nothing is dropped */
            snprintf(unserved, un, "%s", why);
        } else {
            log_warn("heap '%s': the service manager kept no heap memfd of "
                     "it, only its %s: nothing to take back; the heap "
                     "starts empty", cfg->name,
                     kp >= 0 ? "daemon's page" : "table");
        }
        if (kh >= 0)
            close(kh);
        if (kp >= 0)
            close(kp);
        if (kt >= 0)
            close(kt);
        if (!back && kh >= 0) {
            if (ks >= 0) /* left with the rest (fdstore_leave) */
                close(ks);
            return 1;
        }
    }
    if (ks >= 0) {
        /* Note [The live table]: the release before saved it beside the
         * table; the table alone is read */
        log_warn("heap '%s': the heapd before (an earlier release) saved "
                 "its state as heapd.state.%s, which this heapd does not "
                 "read: dropped", cfg->name, cfg->name);
        fdstore_forget("state", cfg->name);
        close(ks);
    }
    if (back) {
        if (cfg->load[0])
            log_info("heap '%s': taken back from the heapd before, so "
                     "load = %s is not loaded (it loads into a heap that "
                     "starts empty)", cfg->name, cfg->load);
        return 0;
    }
    if ((rc = heap_open(h, cfg, -1, -1, -1)) < 0)
        return rc;
    fdstore_keep("heap", cfg->name, h->fd, true);
    fdstore_keep("page", cfg->name, h->page_fd, true);
    fdstore_keep("table", cfg->name, h->table_fd, true);
    if (cfg->load[0])
        load_at_start(h);
    return 0;
}

/* H, open and the next of D's heaps, served from now on: its collector
 * and remark threads.  On failure it is closed, not one of D's heaps, and
 * no thread of it runs. */
static int serve(struct daemon *d, struct heap *h)
{
    int rc = 0;
    assert(h == &d->heaps[d->n_heaps]);
    if (handoff_collector_start(h, &d->workers, &d->loop, session_cycle_done,
                                d) < 0) {
        log_error("heap '%s': cannot start its collector thread",
                  h->cfg->name);
        rc = -EAGAIN;
    } else if (handoff_remark_start(h, d) < 0) {
        log_error("heap '%s': out of memory", h->cfg->name);
        rc = -ENOMEM;
    }
    if (rc < 0) {
        handoff_stop(h);
        heap_close(h);
        return rc;
    }
    d->n_heaps++;
    return 0;
}

/* See Note [Heaps heapd cannot adopt]: the words of the log, heapctl stats
 * and a client's refusal; RELEASE: another release's heapd could take the
 * heap back. */
static void leave_unserved(struct daemon *d, const struct config_heap *cfg,
                           const char *why, bool release)
{
    struct unserved_heap *u = &d->unserved[d->n_unserved++];
    u->cfg = cfg;
    snprintf(u->why, sizeof u->why, "%s.  Its memfds stay in the service "
             "manager's store and heapd serves its other heaps; %s, or "
             "'heapctl drop %s' gives it up and serves it empty", why,
             release ? "the heapd release that wrote it (heapd --version "
                       "names the layout and table it reads) serves it "
                       "after a restart"
                     : "a restart tries again",
             cfg->name);
    log_error("heap '%s': not served: %s", cfg->name, u->why);
    fdstore_leave(&d->fds, cfg->name);
}

int adopt_heaps(struct daemon *d)
{
    for (size_t i = 0; i < d->cfg.n_heaps; i++) {
        const struct config_heap *cfg = &d->cfg.heaps[i];
        char why[512];
        bool release;
        int rc = open_heap(d, cfg, &d->heaps[d->n_heaps], &d->fds, why,
                           sizeof why, &release);
        if (rc < 0)
            return rc;
        if (rc == 1)
            leave_unserved(d, cfg, why, release);
        else if ((rc = serve(d, &d->heaps[d->n_heaps])) < 0)
            return rc;
    }
    return 0;
}

const struct unserved_heap *adopt_unserved(const struct daemon *d,
                                           const char *name)
{
    for (size_t i = 0; i < d->n_unserved; i++)
        if (strcmp(d->unserved[i].cfg->name, name) == 0)
            return &d->unserved[i];
    return NULL;
}

int adopt_drop(struct daemon *d, const char *name, char *why, size_t n)
{
    const struct unserved_heap *u = adopt_unserved(d, name);
    if (!u) {
        char shown[4 * CONFIG_HEAP_NAME_MAX + 1];
        const struct heap *h = daemon_find_heap(d, name);
        log_escape(shown, sizeof shown, name);
        snprintf(why, n, "heap '%s' is %s; heapctl drop gives up only a "
                 "heap heapd does not serve (heapctl stats lists them)",
                 shown,
                 !h            ? "not configured"
                 : h->refused ? "refused while served: restart heapd, and "
                                "drop it then"
                              : "served");
        return -ENOENT;
    }
    const struct config_heap *cfg = u->cfg;
    struct heap *h = &d->heaps[d->n_heaps];
    fdstore_forget_heap(&d->fds, cfg->name);
    int rc = heap_open(h, cfg, -1, -1, -1);
    if (rc < 0) {
        snprintf(why, n, "heap '%s': its memfds are forgotten, but a new "
                 "heap cannot be opened (%s; the log says how): restart "
                 "heapd", cfg->name, strerror(-rc));
        return rc;
    }
    fdstore_keep("heap", cfg->name, h->fd, true);
    fdstore_keep("page", cfg->name, h->page_fd, true);
    fdstore_keep("table", cfg->name, h->table_fd, true);
    if ((rc = serve(d, h)) < 0) {
        /* the new, empty heap stays in the store, for the next heapd */
        snprintf(why, n, "heap '%s': given up, but its threads did not "
                 "start (%s): restart heapd to serve it empty", cfg->name,
                 strerror(-rc));
        struct unserved_heap *w = &d->unserved[u - d->unserved];
        snprintf(w->why, sizeof w->why, "%s", why);
        return rc;
    }
    /* the entry goes: the last one takes its place */
    size_t k = (size_t)(u - d->unserved);
    d->unserved[k] = d->unserved[--d->n_unserved];
    log_warn("heap '%s': dropped as heapctl asked: what the service manager "
             "kept of it is forgotten, and the heap is served empty",
             cfg->name);
    return 0;
}
