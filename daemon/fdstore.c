/* The service manager's file-descriptor store, heapd's side.
 *
 * Note [Heaps across restarts]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A heap is a memfd: it outlives heapd if someone else holds it.  So
 * heapd asks the service manager (systemd's fd store: FDSTORE=1, FDNAME=,
 * sd_pid_notify_with_fds) to keep, for every heap, the heap's memfd, the
 * daemon's page and the daemon's live table as soon as they exist
 * (heapd.heap.NAME, heapd.page.NAME, heapd.table.NAME: Note [The live
 * table] in daemon/gc/table.c); a clean exit stores nothing more, but
 * seals each table.  The next heapd gets them back
 * (sd_listen_fds_with_names, beside a socket-activated listener) and
 * serves the heap again instead of a new one, from its table: as the
 * clean stop sealed it, if it proves so, else as after a kill, after the
 * recovery cycles (Note [Recovery cycles] in collector.c).  The first
 * store the new heapd makes into the table clears the seal, so that a
 * kill later never brings back a table older than the heap.  A heap that
 * cannot be taken back is not served and stays in the store (Note [Heaps
 * heapd cannot adopt] in adopt.c).  A heapd.state.NAME, the saved state
 * of the release before, is dropped unread with a log line once the heap
 * is taken back or started anew (Note [The live table] says what an upgrade
 * does).  Without a service manager none of this happens, and a restart
 * starts every heap empty, as before.  Mutator clients connected at a
 * clean exit are suspended and resume with the next heapd (Note [Resuming
 * clients] in resume.c: their control memory is kept as
 * heapd.client.HEAP.ID from their Welcome on); so do clients connected
 * when heapd is killed, from the same registry in the live table.
 */
#include "fdstore.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "log.h"

int fdstore_collect(struct fdstore *s)
{
    char **names = NULL;
    memset(s, 0, sizeof *s);
    int n = sd_listen_fds_with_names(1, &names);
    if (n < 0)
        return n;
    for (int i = 0; i < n; i++) {
        int fd = SD_LISTEN_FDS_START + i;
        const char *name = names && names[i] ? names[i] : "unknown";
        if (sd_is_socket(fd, AF_UNSPEC, 0, -1) > 0) {
            if (s->n_listeners < sizeof s->listeners / sizeof s->listeners[0])
                s->listeners[s->n_listeners] = fd;
            s->n_listeners++;
        } else if (strncmp(name, "heapd.", 6) == 0 &&
                   s->n_kept < FDSTORE_MAX) {
            snprintf(s->kept[s->n_kept].name, sizeof s->kept[0].name, "%s",
                     name);
            s->kept[s->n_kept++].fd = fd;
        } else {
            log_warn("the service manager passed descriptor %d named '%s', "
                     "which heapd does not know; closed (remove it from the "
                     "store: systemctl clean --what=fdstore heapd)", fd,
                     name);
            close(fd);
        }
    }
    if (names) {
        for (int i = 0; i < n; i++)
            free(names[i]);
        free(names);
    }
    return 0;
}

static void name_of(char *buf, size_t n, const char *kind, const char *heap)
{
    snprintf(buf, n, "heapd.%s.%s", kind, heap);
}

int fdstore_take(struct fdstore *s, const char *kind, const char *heap)
{
    char name[256];
    name_of(name, sizeof name, kind, heap);
    for (unsigned i = 0; i < s->n_kept; i++) {
        if (s->kept[i].fd >= 0 && strcmp(s->kept[i].name, name) == 0) {
            int fd = s->kept[i].fd;
            s->kept[i].fd = -1;
            return fd;
        }
    }
    return -1;
}

void fdstore_forget(const char *kind, const char *heap)
{
    char name[256], msg[300];
    name_of(name, sizeof name, kind, heap);
    snprintf(msg, sizeof msg, "FDSTOREREMOVE=1\nFDNAME=%s", name);
    sd_notify(0, msg);
}

void fdstore_keep(const char *kind, const char *heap, int fd, bool replace)
{
    char name[256], msg[300];
    if (replace)
        fdstore_forget(kind, heap);
    name_of(name, sizeof name, kind, heap);
    snprintf(msg, sizeof msg, "FDSTORE=1\nFDNAME=%s", name);
    int rc = sd_pid_notify_with_fds(0, 0, msg, &fd, 1);
    if (rc < 0)
        log_warn("the service manager did not take %s: %s; a restart "
                 "will start that heap empty (FileDescriptorStoreMax= in "
                 "heapd.service)", name, strerror(-rc));
}

/* Is NAME one of HEAP's: heapd.KIND.HEAP, or heapd.client.HEAP.ID (a
 * heap name may hold dots: the ID is digits only)?  LOST: the
 * heapd.lost-*.HEAP an earlier release kept for an operator too. */
static bool of_heap(const char *name, const char *heap, bool lost)
{
    char prefix[160];
    snprintf(prefix, sizeof prefix, "heapd.client.%s.", heap);
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) == 0) {
        const char *id = name + n;
        return *id && strspn(id, "0123456789") == strlen(id);
    }
    static const char *const kinds[] = {"heap", "page", "table", "state",
                                        "lost-heap", "lost-page",
                                        "lost-table"};
    for (size_t k = 0; k < (lost ? 7u : 4u); k++) {
        char want[192];
        name_of(want, sizeof want, kinds[k], heap);
        if (strcmp(name, want) == 0)
            return true;
    }
    return false;
}

void fdstore_leave(struct fdstore *s, const char *heap)
{
    for (unsigned i = 0; i < s->n_kept; i++) {
        if (s->kept[i].fd >= 0 && of_heap(s->kept[i].name, heap, true)) {
            close(s->kept[i].fd);
            s->kept[i].fd = -1;
        }
    }
}

void fdstore_forget_heap(const struct fdstore *s, const char *heap)
{
    for (unsigned i = 0; i < s->n_kept; i++) {
        if (of_heap(s->kept[i].name, heap, false)) {
            char msg[sizeof s->kept[i].name + 32];
            snprintf(msg, sizeof msg, "FDSTOREREMOVE=1\nFDNAME=%s",
                     s->kept[i].name);
            sd_notify(0, msg);
        }
    }
}

void fdstore_close_rest(struct fdstore *s)
{
    for (unsigned i = 0; i < s->n_kept; i++) {
        if (s->kept[i].fd < 0)
            continue;
        if (strstr(s->kept[i].name, ".lost-")) {
            log_info("the service manager still keeps %s for an operator "
                     "(systemctl clean --what=fdstore heapd drops it)",
                     s->kept[i].name);
        } else if (strncmp(s->kept[i].name, "heapd.client.", 13) == 0) {
            /* a client no heap keeps (Note [Resuming clients]) */
            char msg[sizeof s->kept[i].name + 32];
            snprintf(msg, sizeof msg, "FDSTOREREMOVE=1\nFDNAME=%s",
                     s->kept[i].name);
            sd_notify(0, msg);
        } else
            log_warn("the service manager kept %s, which no configured "
                     "heap uses; closed", s->kept[i].name);
        close(s->kept[i].fd);
        s->kept[i].fd = -1;
    }
}
