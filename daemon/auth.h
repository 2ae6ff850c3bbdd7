/* Who is on the other end of a connection, and may they use a heap.
 *
 * Note [Connection authorisation]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Identity comes from the kernel, never from the client's words: the uid,
 * gid and pid from SO_PEERCRED and the supplementary groups from
 * SO_PEERGROUPS, read at accept (the pid in Hello is for logs
 * only).  A mutator client may map heap H iff its uid is root, is the
 * daemon's own uid, is listed in H's allow_users, or its primary or any
 * supplementary group is listed in H's allow_groups.  The memfd of H is sent
 * only after that check passes (Note [Passing the heap fd]), so a refused
 * peer never holds the heap.  A control client (heapctl) may do anything a
 * control connection does if it would be allowed on at least one heap; a
 * peer on no heap's ACL ("unlisted") may open a control connection that
 * reads stats and nothing else, under its own connection cap (Note
 * [Admission] in server.c).  The credentials are read at accept, so the
 * limits apply before a byte is parsed.  The socket itself is mode 0666: a
 * refused peer gets a clear ERROR_DENIED instead of EACCES from connect().
 */
#ifndef HEAPD_DAEMON_AUTH_H
#define HEAPD_DAEMON_AUTH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"

#define AUTH_MAX_GROUPS 256

struct auth_peer {
    pid_t pid;
    uid_t uid;
    gid_t gid;
    size_t n_groups;
    gid_t groups[AUTH_MAX_GROUPS];
};

/* Read the peer's credentials from a connected Unix socket.  Returns 0 or a
 * negative errno. */
int auth_read_peer(int sock, struct auth_peer *out);

/* A pidfd of the process at the other end of SOCK, whose credentials are
 * PEER (Note [Pidfd guard] in auth.c), or a negative errno. */
int auth_peer_pidfd(int sock, const struct auth_peer *peer);
/* When process PID started (/proc/PID/stat's starttime, clock ticks since
 * boot), or 0 if it is gone: with the pid, it names one process. */
uint64_t auth_process_start(pid_t pid);
/* A pidfd of process PID if it is still the one that started at START
 * with uid UID (Note [Pidfd guard]), else -ESRCH. */
int auth_process_pidfd(pid_t pid, uid_t uid, uint64_t start);

/* Note [Connection authorisation] for one heap. */
bool auth_allowed(const struct config_heap *h, const struct auth_peer *p,
                  uid_t daemon_uid);
/* True if P may use at least one heap of CFG. */
bool auth_listed(const struct config *cfg, const struct auth_peer *p,
                 uid_t daemon_uid);

#endif
