/* Peer credentials and heap ACLs.  See Note [Connection authorisation]. */
#include "auth.h"

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
