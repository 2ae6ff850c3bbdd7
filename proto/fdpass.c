/* SCM_RIGHTS fd passing.  See Note [Passing the heap fd] in fdpass.h. */
#include "fdpass.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

ssize_t fdpass_send(int sock, const void *buf, size_t len, int fd)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = {
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = ctl.buf,
        .msg_controllen = sizeof ctl.buf,
    };
    memset(&ctl, 0, sizeof ctl);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);

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

ssize_t fdpass_recv(int sock, void *buf, size_t len, int *fd_out)
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
    int fd = -1, bad = 0;

    *fd_out = -1;
    do
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;

    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm;
         cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
            if (fd < 0 && cm->cmsg_len == CMSG_LEN(sizeof(int))) {
                memcpy(&fd, CMSG_DATA(cm), sizeof fd);
                continue;
            }
            close_all(cm);
        }
        bad = 1;
    }
    if (msg.msg_flags & MSG_CTRUNC)
        bad = 1;
    if (bad) {
        if (fd >= 0)
            close(fd);
        return -EBADMSG;
    }
    *fd_out = fd;
    return n;
}
