/* SCM_RIGHTS fd passing.  See Note [Passing the heap fd] in fdpass.h. */
#include "fdpass.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

ssize_t fdpass_send(int sock, const void *buf, size_t len, const int *fds,
                    unsigned nfds)
{
    union {
        char buf[CMSG_SPACE(FDPASS_MAX * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = {
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = ctl.buf,
        .msg_controllen = CMSG_SPACE(nfds * sizeof(int)),
    };
    if (nfds == 0 || nfds > FDPASS_MAX)
        return -EINVAL;
    memset(&ctl, 0, sizeof ctl);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));

    ssize_t n;
    do
        n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n;
}

/* Close every fd carried by one SCM_RIGHTS message. */
static void close_all(struct cmsghdr *cm)
{
    size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < nfd; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
        close(fd);
    }
}

ssize_t fdpass_recv(int sock, void *buf, size_t len, int fds[FDPASS_MAX],
                    unsigned *nfds)
{
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))]; /* room to see extras */
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = ctl.buf,
        .msg_controllen = sizeof ctl.buf,
    };
    ssize_t n;
    unsigned got = 0;
    int bad = 0;

    *nfds = 0;
    for (unsigned i = 0; i < FDPASS_MAX; i++)
        fds[i] = -1;
    do
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;

    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm;
         cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            if (got == 0 && k >= 1 && k <= FDPASS_MAX &&
                cm->cmsg_len == CMSG_LEN(k * sizeof(int))) {
                memcpy(fds, CMSG_DATA(cm), k * sizeof(int));
                got = (unsigned)k;
                continue;
            }
            close_all(cm);
        }
        bad = 1;
    }
    if (msg.msg_flags & MSG_CTRUNC)
        bad = 1;
    if (bad) {
        for (unsigned i = 0; i < got; i++) {
            close(fds[i]);
            fds[i] = -1;
        }
        return -EBADMSG;
    }
    *nfds = got;
    return n;
}
