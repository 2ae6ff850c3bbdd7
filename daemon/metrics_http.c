/* heapd's Prometheus scrape endpoint (metrics_listen in heapd.conf).
 *
 * Note [Metrics endpoint]
 * ~~~~~~~~~~~~~~~~~~~~~~~
 * With metrics_listen = ADDRESS:PORT, heapd serves GET /metrics there in
 * Prometheus' text format (proto/metrics.c, the same writer as heapctl
 * stats --prometheus), with libmicrohttpd: no HTTP is parsed here.  It is
 * off by default, and listens only on the address given (127.0.0.1 in
 * the shipped example): the statistics name heaps and count clients, so
 * exposing them is the operator's choice.
 *   - libmicrohttpd answers on a thread of its own, with at most
 *     METRICS_CONNECTIONS connections (METRICS_PER_IP from one address)
 *     and a METRICS_TIMEOUT_S idle timeout; anything but GET or HEAD of
 *     /metrics is answered 405 or 404;
 *   - the statistics belong to the loop thread (its counters, the heaps'
 *     tables under heap->lock): the HTTP thread asks for them with a
 *     uv_async_t and waits, at most METRICS_WAIT_S, for the loop thread
 *     to write the text (session_stats_snapshot, metrics_write); scrapes
 *     that wait together share one answer.  A loop thread that does not
 *     answer in time gets a 503, never a hung scrape;
 *   - at shutdown the waiters are released (503) before libmicrohttpd's
 *     thread is joined.
 * A bad metrics_listen is a config error; an address heapd cannot bind
 * (taken, not local) stops start-up with a message naming it.
 */
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "log.h"
#include "metrics.h"

#define METRICS_CONNECTIONS 16
#define METRICS_PER_IP 4
#define METRICS_TIMEOUT_S 10
#define METRICS_WAIT_S 5

struct metrics_http {
    struct daemon *d;
    struct MHD_Daemon *mhd;
    uv_async_t async;
    struct hd_mutex mu;
    pthread_cond_t cv;          /* CLOCK_MONOTONIC */
    uint64_t asked, answered;   /* generations, under mu */
    char *text;                 /* the last answer, under mu */
    size_t len;
    bool stopping;
};

/* Loop thread: write the text every waiting scrape asked for. */
static void on_async(uv_async_t *a)
{
    struct metrics_http *m = a->data;
    static struct stats_snapshot s;
    char *buf = NULL;
    size_t len = 0;
    hd_mutex_lock(&m->mu);
    uint64_t gen = m->asked;
    hd_mutex_unlock(&m->mu);
    session_stats_snapshot(m->d, &s);
    struct metrics_heap h[CONFIG_MAX_HEAPS];
    for (size_t i = 0; i < s.n; i++)
        h[i] = s.h[i].m;
    FILE *f = open_memstream(&buf, &len);
    if (f) {
        int rc = metrics_write(f, &s.d, h, s.n);
        if (fclose(f) != 0 || rc < 0) {
            free(buf);
            buf = NULL;
        }
    }
    hd_mutex_lock(&m->mu);
    free(m->text);
    m->text = buf;
    m->len = buf ? len : 0;
    m->answered = gen;
    pthread_cond_broadcast(&m->cv);
    hd_mutex_unlock(&m->mu);
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status,
                             const char *type, const char *body, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body,
                                        MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **state)
{
    struct metrics_http *m = cls;
    static const char text_type[] = "text/plain; charset=utf-8";
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)state;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, text_type,
                     "only GET /metrics\n", 18);
    if (strcmp(url, "/metrics") != 0)
        return reply(conn, MHD_HTTP_NOT_FOUND, text_type,
                     "heapd serves /metrics only\n", 27);
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += METRICS_WAIT_S;
    hd_mutex_lock(&m->mu);
    uint64_t gen = ++m->asked;
    uv_async_send(&m->async);
    int rc = 0;
    while (m->answered < gen && !m->stopping && rc != ETIMEDOUT)
        rc = hd_cond_timedwait(&m->cv, &m->mu, &deadline);
    if (m->answered < gen || !m->text) {
        hd_mutex_unlock(&m->mu);
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, text_type,
                     "heapd did not produce its statistics in time\n", 45);
    }
    enum MHD_Result ret =
        reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
              m->text, m->len);
    hd_mutex_unlock(&m->mu);
    return ret;
}

int metrics_http_start(struct daemon *d)
{
    const char *where = d->cfg.metrics_listen;
    struct sockaddr_storage ss;
    if (!where[0])
        return 0;
    if (config_parse_listen(where, &ss) < 0) { /* config_load checked it */
        log_error("metrics_listen '%s' is not ADDRESS:PORT", where);
        return -EINVAL;
    }
    struct metrics_http *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    hd_mutex_init(&m->mu);
    m->d = d;
    if (uv_async_init(&d->loop, &m->async, on_async) != 0) {
        free(m);
        return -ENOMEM;
    }
    m->async.data = m;
    /* the loop ends when its listener and connections are gone, not
     * when the endpoint is: shutdown does not wait for it */
    uv_unref((uv_handle_t *)&m->async);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    m->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, m, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)METRICS_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)METRICS_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)METRICS_TIMEOUT_S, MHD_OPTION_END);
    d->metrics = m;
    if (!m->mhd) {
        log_error("metrics_listen %s: cannot listen there (taken, or not an "
                  "address of this machine): change metrics_listen in %s, "
                  "or remove it", where, d->cfg.path);
        return -EADDRINUSE;
    }
    log_info("metrics: http://%s/metrics", where);
    return 0;
}

void metrics_http_stop(struct daemon *d)
{
    struct metrics_http *m = d->metrics;
    if (!m)
        return;
    hd_mutex_lock(&m->mu);
    m->stopping = true;
    pthread_cond_broadcast(&m->cv);
    hd_mutex_unlock(&m->mu);
    if (m->mhd)
        MHD_stop_daemon(m->mhd);
    m->mhd = NULL;
    /* the async handle is closed with the loop's other handles; the
     * struct goes after them (metrics_http_free) */
}

void metrics_http_free(struct daemon *d)
{
    struct metrics_http *m = d->metrics;
    if (!m)
        return;
    free(m->text);
    pthread_cond_destroy(&m->cv);
    hd_mutex_destroy(&m->mu);
    free(m);
    d->metrics = NULL;
}
