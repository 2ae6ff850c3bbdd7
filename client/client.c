/* libheapd: connecting, the handshake, mapping the heap, stats (errors:
 * client/errors.c).
 * See Note [Handshake] in daemon/session.c for the daemon's side. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent.h"
#include "alloc.h"
#include "checked.h"
#include "client.h"
#include "errors.h"
#include "fdpass.h"
#include "frame.h"
#include "heapd.h"
#include "heapd_build.h"
#include "layout.h"
#include "mutator.h"
#include "remark.h"
#include "reserve.h"
#include "version.h"
#include "wire.h"

/* How long connect waits for the daemon's Welcome before giving up: a bound
 * on a wedged daemon, not a performance expectation. */
#define HANDSHAKE_TIMEOUT_S 30

/* ---- the handshake, on a blocking socket ---- */

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Descriptors that came with a frame: the heap's memfd, the daemon's
 * page (Note [The daemon's page] in proto/layout.h) and the client's
 * control memory (Note [Client control memory]). */
struct frame_fds {
    int fd[FDPASS_MAX];
    unsigned n;
};

static void frame_fds_close(struct frame_fds *f)
{
    for (unsigned i = 0; i < f->n; i++)
        close(f->fd[i]);
    f->n = 0;
}

/* Read exactly N bytes; one read may carry descriptors (kept in F). */
static int read_exact(int sock, uint8_t *p, size_t n, struct frame_fds *f)
{
    while (n > 0) {
        int got[FDPASS_MAX];
        unsigned ngot = 0;
        ssize_t r = fdpass_recv(sock, p, n, got, &ngot);
        if (ngot > 0) {
            if (f->n > 0) { /* a second message of fds: never expected */
                for (unsigned i = 0; i < ngot; i++)
                    close(got[i]);
                return -EBADMSG;
            }
            memcpy(f->fd, got, ngot * sizeof got[0]);
            f->n = ngot;
        }
        if (r < 0)
            return (int)r;
        if (r == 0)
            return -ECONNRESET;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Read one frame; F receives the descriptors that came with it. */
static int read_frame(int sock, Heapd__Envelope **env, struct frame_fds *f)
{
    uint8_t hdr[FRAME_HEADER_SIZE];
    uint8_t *payload = NULL;
    uint32_t len;
    int rc;

    *env = NULL;
    f->n = 0;
    if ((rc = read_exact(sock, hdr, sizeof hdr, f)) < 0)
        goto out;
    len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
          (uint32_t)hdr[2] << 8 | hdr[3];
    if (len == 0 || len > FRAME_MAX_PAYLOAD) {
        rc = -EMSGSIZE;
        goto out;
    }
    payload = malloc(len);
    if (!payload) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = read_exact(sock, payload, len, f)) < 0)
        goto out;
    *env = frame_decode(payload, len);
    rc = *env ? 0 : -EBADMSG;
out:
    free(payload);
    if (rc < 0)
        frame_fds_close(f);
    return rc;
}

static const char *resolve_socket(const heapd_connect_opts *o)
{
    if (o && o->socket_path && o->socket_path[0])
        return o->socket_path;
    const char *env = getenv("HEAPD_SOCKET");
    if (env && env[0])
        return env;
    return HEAPD_DEFAULT_SOCKET;
}

static int open_socket(const char *path, int *out)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct timeval tv = {.tv_sec = HANDSHAKE_TIMEOUT_S};
    int fd, rc;

    *out = -1;
    if (strlen(path) >= sizeof sa.sun_path)
        return client_set_error(HEAPD_ESOCKPATH,
                                "socket path %s is %zu bytes; the limit is %zu: "
                                "use a shorter path", path, strlen(path),
                                sizeof sa.sun_path - 1);
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return client_set_error(-errno, "socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        rc = -errno;
        close(fd);
        if (rc == -ENOENT || rc == -ECONNREFUSED || rc == -ENOTSOCK)
            return client_set_error(HEAPD_ENODAEMON,
                                    "no heapd is listening on %s (%s): start "
                                    "heapd (systemctl start heapd) or point "
                                    "HEAPD_SOCKET at its socket", path,
                                    strerror(-rc));
        return client_set_error(rc, "cannot connect to %s: %s", path,
                                strerror(-rc));
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    *out = fd;
    return 0;
}

/* Hello for heap HEAP as CLIENT_NAME; RESUMING: as client C again (Note
 * [Reconnecting] in client/agent.c). */
static int send_hello_as(int sock, const char *heap, const char *client_name,
                         bool control, const heapd_client *resuming)
{
    Heapd__Hello h = HEAPD__HELLO__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    uint8_t *buf;
    size_t len;
    int rc;

    h.protocol_version = PROTOCOL_VERSION;
    h.library_version = (char *)HEAPD_VERSION;
    h.layout_version = LAYOUT_VERSION;
    h.heap = (char *)heap;
    h.client_name = (char *)client_name;
    if (resuming) {
        h.resume_client = resuming->client_id;
        h.resume_token.data = (uint8_t *)resuming->token;
        h.resume_token.len = resuming->token_len;
    }
    h.pid = getpid();
    h.kind = control ? HEAPD__CLIENT_KIND__CLIENT_CONTROL
                     : HEAPD__CLIENT_KIND__CLIENT_MUTATOR;
    env.body_case = HEAPD__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    if ((rc = frame_pack(&env, &buf, &len)) < 0)
        return client_set_error(rc, "cannot encode hello: %s", strerror(-rc));
    rc = write_all(sock, buf, len);
    free(buf);
    if (rc < 0)
        return client_set_error(HEAPD_ECLOSED, "cannot send hello: %s",
                                strerror(-rc));
    return 0;
}

static int send_hello(int sock, const heapd_connect_opts *o, bool control)
{
    return send_hello_as(sock, o && o->heap ? o->heap : DEFAULT_HEAP_NAME,
                         o && o->client_name ? o->client_name
                                             : program_invocation_short_name,
                         control, NULL);
}

/* Note [One mapping per process]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A heap can be mapped only once per process: at its fixed base.  So
 * several clients of the same heap in one process (two libraries, or a
 * child of fork() that inherited its parent's mapping and connects anew)
 * share one mapping, counted in this registry and keyed by the base and the
 * memfd's identity (st_dev, st_ino).  A different file at the same base is
 * a taken range (HEAPD_EADDRTAKEN).  The registry's lock is held across
 * fork() so that a child never inherits it locked.
 */
struct mapping {
    struct mapping *next;
    uintptr_t base;
    size_t size;
    dev_t dev;
    ino_t ino;
    unsigned refs;
};

static struct hd_mutex maps_mu = HD_MUTEX_INITIALIZER;
static struct mapping *maps;
static pthread_once_t maps_once = PTHREAD_ONCE_INIT;

static void maps_lock(void) { hd_mutex_lock(&maps_mu); }
static void maps_unlock(void) { hd_mutex_unlock(&maps_mu); }
static void maps_init(void) { pthread_atfork(maps_lock, maps_unlock, maps_unlock); }

/* Map FD at BASE, with the daemon's page PAGE_FD read-only over its first
 * LAYOUT_DAEMON_BYTES (Note [The daemon's page]), or share this process's
 * existing mapping of it. */
static int map_shared(int fd, int page_fd, uintptr_t base, size_t size,
                      void **out)
{
    struct stat st;
    struct mapping *m;
    void *p;
    int rc = 0;

    pthread_once(&maps_once, maps_init);
    if (fstat(fd, &st) < 0)
        return -errno;
    maps_lock();
    for (m = maps; m; m = m->next) {
        if (m->base != base)
            continue;
        if (m->dev == st.st_dev && m->ino == st.st_ino && m->size == size) {
            m->refs++;
            *out = (void *)base;
        } else {
            rc = -EEXIST;
        }
        goto out;
    }
    if (!(m = calloc(1, sizeof *m))) {
        rc = -ENOMEM;
        goto out;
    }
    p = mmap((void *)base, size, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_FIXED_NOREPLACE | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED || p != (void *)base) {
        rc = p == MAP_FAILED ? -errno : -EEXIST;
        if (p != MAP_FAILED) /* an old kernel ignored NOREPLACE */
            munmap(p, size);
        free(m);
        goto out;
    }
    if (mmap(p, LAYOUT_DAEMON_BYTES, PROT_READ, MAP_SHARED | MAP_FIXED,
             page_fd, 0) == MAP_FAILED) {
        rc = -errno;
        munmap(p, size);
        free(m);
        goto out;
    }
    *m = (struct mapping){maps, base, size, st.st_dev, st.st_ino, 1};
    maps = m;
    *out = p;
out:
    maps_unlock();
    return rc;
}

static void unmap_shared(void *base)
{
    maps_lock();
    for (struct mapping **pp = &maps; *pp; pp = &(*pp)->next) {
        struct mapping *m = *pp;
        if (m->base == (uintptr_t)base) {
            if (--m->refs == 0) {
                munmap(base, m->size);
                *pp = m->next;
                free(m);
            }
            break;
        }
    }
    maps_unlock();
}

/* Map the heap the Welcome describes.  See Note [Heap mapping]. */
static int map_heap(heapd_client *c, const Heapd__Welcome *w, int fd,
                    int page_fd)
{
    struct stat st;
    void *p = NULL;
    int rc;

    if (w->max_size == 0 || w->segment_size == 0 ||
        w->heap_base % w->segment_size != 0 || fstat(fd, &st) < 0 ||
        (uint64_t)st.st_size != w->max_size)
        return client_set_error(HEAPD_EPROTO,
                                "heap '%s': the daemon's geometry does not "
                                "match its memfd; restart heapd", w->heap);
    /* mapped over the first LAYOUT_DAEMON_BYTES: a shorter file would
     * fault past its end (Note [The daemon's page]) */
    if (fstat(page_fd, &st) < 0 || st.st_size != (off_t)LAYOUT_DAEMON_BYTES)
        return client_set_error(HEAPD_EVERSION,
                                "heap '%s': the daemon's page is not %u "
                                "bytes; use a libheapd built with the "
                                "daemon's proto/", w->heap,
                                LAYOUT_DAEMON_BYTES);
    rc = map_shared(fd, page_fd, w->heap_base, w->max_size, &p);
    if (rc < 0)
        return client_set_error(
            rc == -EEXIST ? HEAPD_EADDRTAKEN : rc,
            "heap '%s' must be mapped at [0x%llx, 0x%llx) but %s in this "
            "process; choose another 'base' in [heap %s] of heapd.conf and "
            "restart heapd", w->heap, (unsigned long long)w->heap_base,
            (unsigned long long)(w->heap_base + w->max_size),
            rc == -EEXIST ? "that range is already in use" : strerror(-rc),
            w->heap);
    rc = layout_check_control(p, w->heap_base, w->max_size, w->segment_size);
    if (rc < 0) {
        unmap_shared(p);
        return client_set_error(
            rc == -EPROTONOSUPPORT ? HEAPD_EVERSION : HEAPD_EPROTO,
            "heap '%s': %s; use a libheapd built with the daemon's proto/",
            w->heap,
            rc == -EPROTO ? "the control area has a bad magic number"
            : rc == -EPROTONOSUPPORT
                ? "the control area has another layout version"
                : "the control area's geometry disagrees with the welcome");
    }
    c->base = p;
    c->size = w->max_size;
    c->ctl = p;
    c->memory_limit = w->memory_limit; /* Note [Reserve sizing] */
    alloc_client_init(c);
    return 0;
}

/* Map this client's control memory (Note [Client control memory]): only
 * the daemon and this process map it, anywhere. */
static int map_control_memory(heapd_client *c, const Heapd__Welcome *w,
                              int fd)
{
    struct stat st;
    size_t len = (size_t)w->regions * LAYOUT_MUTATOR_BYTES;
    if (w->regions == 0 || w->regions > LAYOUT_MAX_MUTATORS ||
        fstat(fd, &st) < 0 || (uint64_t)st.st_size != len)
        return client_set_error(HEAPD_EPROTO, "heap '%s': the daemon's "
                                "control memory does not match its welcome; "
                                "restart heapd", w->heap);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED)
        return client_set_error(-errno, "cannot map this client's control "
                                "memory (%zu bytes): %s", len,
                                strerror(errno));
    c->mem = p;
    c->mem_regions = w->regions;
    return 0;
}

static int handshake(heapd_client *c, int sock, const heapd_connect_opts *o,
                     bool control, int *heap_fd)
{
    Heapd__Envelope *env = NULL;
    struct frame_fds f = {.n = 0};
    int rc;

    *heap_fd = -1;
    /* a daemon that refuses the connection at once (too many connections,
     * shutting down) may have sent its Error and closed before the hello
     * went out: read it anyway, it says why */
    int hello_rc = send_hello(sock, o, control);
    if ((rc = read_frame(sock, &env, &f)) < 0 && hello_rc < 0) {
        rc = hello_rc;
        goto out;
    }
    if (rc < 0) {
        if (rc == -EAGAIN)
            rc = client_set_error(HEAPD_EPROTO, "heapd did not answer the "
                                  "hello within %d s; check that it is "
                                  "healthy", HANDSHAKE_TIMEOUT_S);
        else
            rc = client_set_error(HEAPD_ECLOSED, "the handshake with heapd "
                                  "failed: %s", strerror(-rc));
        goto out;
    }
    if (env->body_case == HEAPD__ENVELOPE__BODY_ERROR) {
        /* a heapd before 0.2.0 does not name this release (Note
         * [Versions across releases]) */
        bool named = strstr(env->error->message, "libheapd " HEAPD_VERSION);
        rc = client_set_error(client_error_code(env->error->code),
                              "heapd: %s%s", env->error->message,
                              env->error->code ==
                                          HEAPD__ERROR_CODE__ERROR_VERSION &&
                                      !named
                                  ? " (this is libheapd " HEAPD_VERSION ")"
                                  : "");
        goto out;
    }
    if (env->body_case != HEAPD__ENVELOPE__BODY_WELCOME) {
        rc = client_bad_reply("hello", env, NULL);
        goto out;
    }
    const Heapd__Welcome *w = env->welcome;
    const struct version_side us = {HEAPD_VERSION, PROTOCOL_VERSION,
                                    LAYOUT_VERSION},
                              them = {w->daemon_version, w->protocol_version,
                                      w->layout_version};
    if (!version_compatible(&us, &them, !control)) {
        char why[320];
        version_mismatch(why, sizeof why, &us, &them);
        rc = client_set_error(HEAPD_EVERSION, "%s", why);
        goto out;
    }
    /* a mutator client gets the heap, the daemon's page and its control
     * memory, a control client nothing (Note [The daemon's page]) */
    if (f.n != (control ? 0u : 3u) || control == w->has_fd) {
        rc = client_bad_reply("hello", env, "%u descriptors, not %u", f.n,
                              control ? 0 : 3);
        goto out;
    }
    c->client_id = w->client_id;
    snprintf(c->heap_name, sizeof c->heap_name, "%s", w->heap);
    if (!control && w->token.len > 0 && w->token.len <= sizeof c->token) {
        memcpy(c->token, w->token.data, w->token.len);
        c->token_len = w->token.len;
    }
    c->heap_base = w->heap_base;
    c->heap_max_size = w->max_size;
    if (!control && (rc = map_control_memory(c, w, f.fd[2])) < 0)
        goto out;
    if (!control && (rc = map_heap(c, w, f.fd[0], f.fd[1])) < 0)
        goto out;
    if (!control) {
        *heap_fd = f.fd[0];
        close(f.fd[1]); /* the mappings hold the page and the memory */
        close(f.fd[2]);
        f.n = 0;
    }
    rc = 0;
out:
    frame_fds_close(&f);
    if (env)
        heapd__envelope__free_unpacked(env, NULL);
    return rc;
}

/* Note [Reconnecting] in client/agent.c, on the agent thread: a new
 * connection that resumes C, checked to be the same heap (the same memfd
 * at the same place). */
static int reconnect(void *arg, int *out, char *why, size_t n)
{
    heapd_client *c = arg;
    Heapd__Envelope *env = NULL;
    struct frame_fds f = {.n = 0};
    struct stat mine, theirs;
    int sock = -1, rc;

    *out = -1;
    if (open_socket(c->socket_path, &sock) < 0) {
        snprintf(why, n, "%s", heapd_last_error());
        return -EAGAIN; /* not back yet */
    }
    if (send_hello_as(sock, c->heap_name, c->client_name, false, c) < 0 ||
        read_frame(sock, &env, &f) < 0) {
        snprintf(why, n, "the handshake with the new heapd failed");
        rc = -EAGAIN;
        goto out;
    }
    if (env->body_case == HEAPD__ENVELOPE__BODY_ERROR) {
        snprintf(why, n, "heapd: %s", env->error->message);
        /* a heapd that is stopping again may take it back later */
        rc = env->error->code == HEAPD__ERROR_CODE__ERROR_SHUTTING_DOWN ||
                     env->error->code ==
                         HEAPD__ERROR_CODE__ERROR_TOO_MANY_CONNECTIONS
                 ? -EAGAIN
                 : -ESRCH;
        goto out;
    }
    const Heapd__Welcome *w =
        env->body_case == HEAPD__ENVELOPE__BODY_WELCOME ? env->welcome : NULL;
    if (!w || !w->resumed || w->client_id != c->client_id || f.n != 3 ||
        w->heap_base != c->heap_base || w->max_size != c->heap_max_size ||
        fstat(c->heap_fd, &mine) < 0 || fstat(f.fd[0], &theirs) < 0 ||
        mine.st_dev != theirs.st_dev || mine.st_ino != theirs.st_ino) {
        snprintf(why, n, "heapd came back with another heap, or did not "
                 "resume this client: connect anew");
        rc = -ESRCH;
        goto out;
    }
    struct timeval tv = {0};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    *out = sock;
    sock = -1;
    rc = 0;
out:
    frame_fds_close(&f);
    if (env)
        heapd__envelope__free_unpacked(env, NULL);
    if (sock >= 0)
        close(sock);
    return rc;
}

/* What a client holds besides its agent and its mutators. */
static void client_free(heapd_client *c)
{
    remark_client_free(c);
    checked_forget(c);
    free(c->ranges);
    if (c->base)
        unmap_shared(c->base);
    if (c->mem)
        munmap(c->mem, (size_t)c->mem_regions * LAYOUT_MUTATOR_BYTES);
    if (c->heap_fd >= 0)
        close(c->heap_fd);
    free(c);
}

/* The connection's end, on the agent thread: an evicted process aborts
 * here even if none of its mutators makes a call (Note [Evicted clients,
 * client side] in client/mutator.c); otherwise the mutators drop their
 * segments (remark_closed). */
static void connection_closed(void *arg)
{
    mutator_check_evicted_all(arg);
    remark_closed(arg);
}

/* The connection ended and the agent reconnects (Note [Reconnecting] in
 * client/agent.c): an evicted process aborts now all the same. */
static void connection_lost(void *arg)
{
    mutator_check_evicted_all(arg);
}

static int connect_with(heapd_client **out, const heapd_connect_opts *opts);

/* See Note [Structs that grow] in client/abi.c. */
int heapd_connect_sized(heapd_client **out, const heapd_connect_opts *opts,
                        size_t size)
{
    heapd_connect_opts own;
    int rc;

    client_clear_error();
    if (opts) {
        rc = abi_in(&own, sizeof own, opts, size, ABI_0_1_CONNECT_OPTS,
                    "heapd_connect");
        if (rc < 0) {
            if (out)
                *out = NULL;
            return rc;
        }
        opts = &own;
    }
    return connect_with(out, opts);
}

static int connect_with(heapd_client **out, const heapd_connect_opts *opts)
{
    bool control = opts && (opts->flags & HEAPD_CONNECT_CONTROL);
    const char *path = resolve_socket(opts);
    heapd_client *c = NULL;
    struct timeval tv = {0};
    int sock = -1, rc;

    client_clear_error();
    if (!out)
        return client_set_error(-EINVAL, "heapd_connect: out is NULL");
    *out = NULL;
    const unsigned known = HEAPD_CONNECT_CONTROL | HEAPD_CONNECT_CHECKED |
                           HEAPD_CONNECT_NO_RECONNECT;
    if (opts && (opts->flags & ~known))
        return client_set_error(-EINVAL, "heapd_connect: unknown flags 0x%x",
                                opts->flags & ~known);
    c = calloc(1, sizeof *c);
    if (!c)
        return client_set_error(-ENOMEM, "out of memory");
    c->heap_fd = -1;
    if ((rc = open_socket(path, &sock)) < 0)
        goto fail;
    if ((rc = handshake(c, sock, opts, control, &c->heap_fd)) < 0)
        goto fail;
    if (c->base && remark_client_init(c) < 0) {
        rc = client_set_error(-ENOMEM, "out of memory");
        goto fail;
    }
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    /* Note [Reconnecting] in client/agent.c */
    snprintf(c->socket_path, sizeof c->socket_path, "%s", path);
    snprintf(c->client_name, sizeof c->client_name, "%s",
             opts && opts->client_name ? opts->client_name
                                       : program_invocation_short_name);
    struct agent_reconnect re = {
        .fn = reconnect,
        .arg = c,
        .ms = opts && opts->reconnect_ms ? opts->reconnect_ms
                                         : HEAPD_RECONNECT_MS_DEFAULT,
    };
    bool resumable = c->base && c->token_len > 0 &&
                     !(opts && (opts->flags & HEAPD_CONNECT_NO_RECONNECT));
    rc = agent_start(&c->agent, sock, resumable ? &re : NULL);
    sock = -1; /* taken over */
    if (rc < 0) {
        client_set_error(rc, "cannot start the agent thread: %s",
                         strerror(-rc));
        goto fail;
    }
    if (c->base) {
        /* before any segment is ours, so before any remark request */
        hd_mutex_lock(&c->agent.mu);
        c->agent.hook_arg = c;
        c->agent.on_remark = remark_request;
        c->agent.on_grant = remark_granted;
        c->agent.on_closed = connection_closed;
        c->agent.on_lost = connection_lost;
        hd_mutex_unlock(&c->agent.mu);
        if (checked_wanted(opts))
            checked_register(c);
    }
    *out = c;
    return 0;
fail:
    if (sock >= 0)
        close(sock);
    client_free(c);
    return rc;
}

/* A graceful disconnect (Note [Client lifecycle] in daemon/session.c):
 * detach the mutators the application left attached (their threads are
 * done with them), give every segment back -- which answers every remark
 * request (Note [Remark requests] in client/remark.c) -- and say Goodbye,
 * waiting for the daemon's answer, so that when this returns the daemon
 * has taken back everything this client held. */
static void say_goodbye(heapd_client *c)
{
    Heapd__Goodbye gb = HEAPD__GOODBYE__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT, *rep = NULL;

    for (;;) {
        hd_mutex_lock(&c->mutators_mu);
        heapd_mutator *m = c->mutators;
        hd_mutex_unlock(&c->mutators_mu);
        if (!m)
            break;
        heapd_detach(m);
    }
    reserve_drain(c);
    reserve_flush_returns(c);
    remark_service(c, NULL); /* nothing is ours: all answered released */
    req.body_case = HEAPD__ENVELOPE__BODY_GOODBYE;
    req.goodbye = &gb;
    if (agent_call(&c->agent, &req, &rep) == 0)
        heapd__envelope__free_unpacked(rep, NULL);
}

void heapd_disconnect(heapd_client *c)
{
    if (!c)
        return;
    if (agent_forked(&c->agent)) {
        /* Note [Clients and fork] in client/agent.c: the parent's client
         * goes on; the child closes its copies and frees its memory */
        agent_forget(&c->agent);
    } else {
        if (c->base && !agent_is_closed(&c->agent))
            say_goodbye(c);
        agent_stop(&c->agent);
        if (c->base)
            reserve_stop(c);
    }
    mutator_free_all(c); /* the daemon frees their slots */
    client_free(c);
}

void *heapd_heap_base(const heapd_client *c)
{
    return c ? c->base : NULL;
}

size_t heapd_heap_size(const heapd_client *c)
{
    return c ? c->size : 0;
}

int client_stats_call(heapd_client *c, Heapd__Envelope **rep)
{
    Heapd__StatsRequest sr = HEAPD__STATS_REQUEST__INIT;
    Heapd__Envelope req = HEAPD__ENVELOPE__INIT;
    int rc;

    *rep = NULL;
    req.body_case = HEAPD__ENVELOPE__BODY_STATS_REQUEST;
    req.stats_request = &sr;
    if ((rc = agent_call(&c->agent, &req, rep)) < 0)
        return rc;
    if ((*rep)->body_case != HEAPD__ENVELOPE__BODY_STATS_REPLY)
        return client_bad_reply(frame_body_name(&req), *rep, NULL);
    return 0;
}

/* See Note [Structs that grow] in client/abi.c: the reply is read into
 * libheapd's own struct, then placed in the caller's. */
int heapd_stats_sized(heapd_client *c, heapd_stats_t *caller, size_t size,
                      size_t heap_size)
{
    Heapd__Envelope *rep = NULL;
    heapd_stats_t *out = NULL;
    int rc;

    if (!c || !caller)
        return client_set_error(-EINVAL, "heapd_stats: NULL argument");
    out = calloc(1, sizeof *out);
    if (!out)
        return client_set_error(-ENOMEM, "heapd_stats: out of memory");
    if ((rc = client_stats_call(c, &rep)) < 0)
        goto out;
    const Heapd__StatsReply *r = rep->stats_reply;
    memset(out, 0, sizeof *out);
    snprintf(out->version, sizeof out->version, "%s", r->version);
    out->uptime_ns = r->uptime_ns;
    out->clients_connected = r->clients_connected;
    out->connections_total = r->connections_total;
    out->frames_rejected = r->frames_rejected;
    out->connections_refused = r->connections_refused;
    out->connections_throttled = r->connections_throttled;
    out->connections_timed_out = r->connections_timed_out;
    out->requests_refused = r->requests_refused;
    out->log_lines_suppressed = r->log_lines_suppressed;
    out->heap_count = r->n_heaps < HEAPD_STATS_MAX_HEAPS ? r->n_heaps
                                                         : HEAPD_STATS_MAX_HEAPS;
    for (size_t i = 0; i < out->heap_count; i++) {
        const Heapd__HeapStats *h = r->heaps[i];
        heapd_heap_stats *o = &out->heaps[i];
        snprintf(o->name, sizeof o->name, "%s", h->name);
        o->base = h->heap_base;
        o->reserved_bytes = h->reserved_bytes;
        o->committed_bytes = h->committed_bytes;
        o->segment_size = h->segment_size;
        o->clients = h->clients;
        o->phase = h->phase;
        /* See Note [Counter table]: as many as both sides know, the
         * others 0 (the memset) */
#define COPY_FROM_WIRE_(name, type, kind, unit, source, help) \
    if ((size_t)HEAPD_HEAP_COUNTER_##name < h->n_counters) \
        o->name = (type)h->counters[HEAPD_HEAP_COUNTER_##name];
        HEAPD_HEAP_COUNTERS(COPY_FROM_WIRE_)
#undef COPY_FROM_WIRE_
    }
    /* the daemon lists the client's own heap first */
    if (out->heap_count > 0) {
        const heapd_heap_stats *o = &out->heaps[0];
        out->heap_committed_bytes = o->committed_bytes;
        out->phase = o->phase;
#define COPY_TOP_(name, type, kind, unit, source, help) out->name = o->name;
        HEAPD_HEAP_COUNTERS(COPY_TOP_)
#undef COPY_TOP_
    }
    rc = abi_stats_place(caller, size, heap_size, out);
out:
    heapd__envelope__free_unpacked(rep, NULL);
    free(out);
    return rc;
}
