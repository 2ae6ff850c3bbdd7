/* Peer credentials and heap ACLs.  See Note [Connection authorisation]. */
#include "auth.h"

#include <poll.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

int auth_read_peer(int sock, struct auth_peer *out)
{
    struct ucred cred;
    socklen_t len = sizeof cred;

    memset(out, 0, sizeof *out);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    out->pid = cred.pid;
    out->uid = cred.uid;
    out->gid = cred.gid;

    len = sizeof out->groups;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERGROUPS, out->groups, &len) < 0) {
        /* ERANGE: more groups than we keep.  The primary group still
         * counts; the peer can only lose access, never gain it. */
        if (errno != ERANGE)
            return -errno;
        len = 0;
    }
    out->n_groups = len / sizeof(gid_t);
    return 0;
}

/* Note [Pidfd guard]
 * ~~~~~~~~~~~~~~~~~~~
 * The stall policy may kill a client (Note [Stalls] in stall.c).  It
 * signals through a pidfd taken when the client connected, never through
 * a pid: a pidfd names one process, and once that process is gone a
 * signal through it fails with ESRCH, whoever has the pid by then.  The
 * pidfd must name the peer itself.  SO_PEERPIDFD (Linux 6.5) gives the
 * one the kernel took at connect(), so nothing can come between.  Older
 * kernels get pidfd_open(peer pid), which would name another process if
 * the peer died and its pid was reused before the daemon accepted; so the
 * process it names is then checked to be alive with the peer's uid and
 * the peer's end of the socket still open (a peer that died closed it,
 * unless it passed the socket on); otherwise there is no pidfd, and a
 * stall is ended by eviction instead of a signal.
 */
/* the generic value, which x86 and ARM use; elsewhere only the headers'
 * (older ones lack it: pidfd_open then) */
#if !defined(SO_PEERPIDFD) &&                                              \
    (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) ||   \
     defined(__arm__) || defined(__riscv))
#define SO_PEERPIDFD 77
#endif

static int pidfd_of(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Is the process of PIDFD, pid PID, alive with uid UID? */
static bool pidfd_is(int pidfd, pid_t pid, uid_t uid)
{
    char path[64], line[256];
    bool ok = false;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    while (fgets(line, sizeof line, f)) {
        unsigned real;
        if (sscanf(line, "Uid: %u", &real) == 1) {
            ok = real == uid;
            break;
        }
    }
    fclose(f);
    /* alive after the read: the file was this process's */
    return ok && syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
}

int auth_peer_pidfd(int sock, const struct auth_peer *peer)
{
    int fd = -1;
#ifdef SO_PEERPIDFD
    socklen_t len = sizeof fd;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0 &&
        fd >= 0)
        return fd;
#endif
    if (peer->pid <= 0)
        return -ESRCH;
    fd = pidfd_of(peer->pid);
    if (fd < 0)
        return -errno;
    struct pollfd p = {.fd = sock, .events = POLLRDHUP};
    if (!pidfd_is(fd, peer->pid, peer->uid) || poll(&p, 1, 0) != 0) {
        close(fd);
        return -ESRCH;
    }
    return fd;
}

uint64_t auth_process_start(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long long start = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* the command may hold spaces and parentheses: count from the last ')' */
    char *p = strrchr(buf, ')');
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                     "%*u %*u %*d %*d %*d %*d %*d %*d %llu", &start) != 1)
        return 0;
    return start;
}

int auth_process_pidfd(pid_t pid, uid_t uid, uint64_t start)
{
    if (pid <= 0 || start == 0)
        return -ESRCH;
    int fd = pidfd_of(pid);
    if (fd < 0)
        return -errno;
    /* Note [Pidfd guard]: the pidfd is taken first, then the process it
     * names is checked to be the one that connected */
    if (!pidfd_is(fd, pid, uid) || auth_process_start(pid) != start) {
        close(fd);
        return -ESRCH;
    }
    return fd;
}

static bool group_listed(const struct config_heap *h, gid_t g)
{
    for (size_t i = 0; i < h->n_allow_groups; i++)
        if (h->allow_groups[i] == g)
            return true;
    return false;
}

bool auth_allowed(const struct config_heap *h, const struct auth_peer *p,
                  uid_t daemon_uid)
{
    if (p->uid == 0 || p->uid == daemon_uid)
        return true;
    for (size_t i = 0; i < h->n_allow_users; i++)
        if (h->allow_users[i] == p->uid)
            return true;
    if (group_listed(h, p->gid))
        return true;
    for (size_t i = 0; i < p->n_groups; i++)
        if (group_listed(h, p->groups[i]))
            return true;
    return false;
}

bool auth_listed(const struct config *cfg, const struct auth_peer *p,
                 uid_t daemon_uid)
{
    for (size_t i = 0; i < cfg->n_heaps; i++)
        if (auth_allowed(&cfg->heaps[i], p, daemon_uid))
            return true;
    return false;
}
