/* heapd daemon configuration: heapd.conf parsed with inih.
 *
 * Note [Config errors]
 * ~~~~~~~~~~~~~~~~~~~~
 * Every problem in a config file is reported as one line
 * "heapd:FILE:LINE: message\n" on the caller's ERR stream, where FILE is the
 * path exactly as given and LINE is 1-based: the line of the offending key,
 * or of the [section] header for section-level problems (a missing required
 * key, an overlap with another heap).  LINE is 0 for problems of the file as
 * a whole: "cannot open", a read error, and "no [heap NAME] section".  Each
 * message says what is wrong and what to write instead.
 *
 * Parsing never stops at the first error (only at a line too long, Note
 * [Config input is bounded]): all errors are collected, sorted by line
 * (ties keep the order they were found in), printed, and then the loader
 * returns -EINVAL.  Section-level checks run when a section ends, and
 * heap overlaps at the end of the file; sorting keeps the report in file
 * order.  To avoid cascades, a rejected value is left out of the cross-key
 * checks, and keys in an unknown section are ignored (its header is the
 * error).  Keys in a rejected heap section (bad or duplicate name, one heap
 * too many) are still checked, against a scratch heap that is not stored.
 *
 * inih calls its handler without a line number, so we drive it with
 * ini_parse_stream and our own reader (read_line), which counts lines and
 * does everything that needs whole, unsplit lines: it rejects a line longer
 * than LINE_MAX_BYTES or holding a NUL byte, parses [section] headers itself
 * (inih truncates section names to 49 bytes, too short for "heap NAME"), and
 * flags lines that are neither a header, a comment nor "key = value".  Those
 * reach inih as blank lines, so inih only ever sees comments and key lines,
 * and its "first bad line" return value is only a safety net.  config_load
 * and config_load_string share all of this and differ only in where the
 * bytes come from.
 *
 * Note [Config input is bounded]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * Reading a config must end after a bounded number of bytes, so config_load
 * accepts only a regular file (opened O_NONBLOCK, so that a FIFO without a
 * writer cannot block the open), and a line without a '\n' within
 * LINE_MAX_BYTES ends the parse at once: that line is the last error
 * reported, and the section and whole-file checks are skipped because the
 * rest of the file was never read (they would only report keys and heaps
 * that may well be there).  A text config has no such line; skipping to the
 * next '\n' instead made `heapd --check-config -c /dev/zero` read forever
 * at 100% CPU without a word.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <ini.h>
#include <netinet/in.h>

#include "layout.h"
#include "young.h"

#define LINE_MAX_BYTES 4096                     /* without the '\n' */
#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

enum kind { K_SOCKET, K_LEVEL, K_UINT, K_SIZE, K_SEGMENT, K_ADDR, K_IDS,
            K_BOOL, K_DURATION, K_TIMEOUT, K_STALL_ACTION, K_LISTEN, K_FILE };

struct key {
    const char *name;
    enum kind kind;
    uint64_t lo, hi;        /* K_UINT, K_SIZE, K_SEGMENT, K_DURATION and
                               K_TIMEOUT (ms; K_TIMEOUT also takes 0) */
    const char *what;       /* K_UINT: unit; K_IDS: "user" or "group" */
};

enum { DK_SOCKET, DK_LOG_LEVEL, DK_GC_THREADS, DK_MAX_CONNECTIONS,
       DK_MAX_CONNECTIONS_PER_USER, DK_MAX_WRITE_QUEUE, DK_CONTROL_RESERVE,
       DK_MAX_UNLISTED_CONNECTIONS, DK_HANDSHAKE_TIMEOUT,
       DK_MAX_MUTATORS_PER_CLIENT, DK_MAX_REQUESTS_PER_CLIENT,
       DK_CLIENT_LOG_RATE, DK_METRICS_LISTEN, DK_COUNT };
static const struct key daemon_keys[DK_COUNT] = {
    { "socket", K_SOCKET, 0, 0, "" },
    { "log_level", K_LEVEL, 0, 0, "" },
    { "gc_threads", K_UINT, 1, 64, "" },
    { "max_connections", K_UINT, 1, 65536, "" },
    { "max_connections_per_user", K_UINT, 1, 65536, "" },
    { "max_write_queue", K_SIZE, 64 * KIB, GIB, "" },
    { "control_reserve", K_UINT, 0, 65535, "" },
    { "max_unlisted_connections", K_UINT, 0, 65536, "" },
    { "handshake_timeout", K_DURATION, 10, 3600 * 1000, "" },
    { "max_mutators_per_client", K_UINT, 1, LAYOUT_MAX_MUTATORS, "" },
    { "max_requests_per_client", K_UINT, 1, 1u << 20, "" },
    { "client_log_rate", K_UINT, 1, 100000, " lines per second" },
    { "metrics_listen", K_LISTEN, 0, 0, "" },
};

enum { HK_BASE, HK_MAX_SIZE, HK_SEGMENT_SIZE, HK_GC_OVERHEAD,
       HK_MARK_STACK_LIMIT, HK_ALLOW_USERS, HK_ALLOW_GROUPS,
       HK_MAX_CLIENT_BYTES, HK_VERIFY, HK_STALL_WARN, HK_STALL_TIMEOUT,
       HK_STALL_ACTION, HK_RECONNECT_TIMEOUT, HK_YOUNG_SIZE, HK_YOUNG_AGE,
       HK_MEMORY_LIMIT, HK_LOAD, HK_COUNT };
static const struct key heap_keys[HK_COUNT] = {
    { "base", K_ADDR, 0, 0, "" },
    { "max_size", K_SIZE, 0, UINT64_C(1) << 40, "" },
    { "segment_size", K_SEGMENT, LAYOUT_MIN_SEGMENT_SIZE,
      LAYOUT_MAX_SEGMENT_SIZE, "" },
    { "gc_overhead", K_UINT, 1, 10000, " percent" },
    { "mark_stack_limit", K_SIZE, 4 * KIB, GIB, "" },
    { "allow_users", K_IDS, 0, 0, "user" },
    { "allow_groups", K_IDS, 0, 0, "group" },
    { "max_client_bytes", K_SIZE, 0, UINT64_MAX, "" },
    { "verify", K_BOOL, 0, 0, "" },
    { "stall_warn", K_DURATION, 10, 3600 * 1000, "" },
    { "stall_timeout", K_TIMEOUT, 10, 86400 * 1000, "" },
    { "stall_action", K_STALL_ACTION, 0, 0, "" },
    { "reconnect_timeout", K_DURATION, 10, 86400 * 1000, "" },
    /* Note [Young budgets] in daemon/gc/heap.h */
    { "young_size", K_SIZE, 64 * KIB, 256 * MIB, "" },
    { "young_age", K_UINT, 1, LAYOUT_YOUNG_AGE_MAX, "" },
    /* Note [Memory limit] in daemon/gc/collector.c */
    { "memory_limit", K_SIZE, 0, UINT64_C(1) << 40, "" },
    /* Note [Loading a saved heap] in daemon/gc/load.c */
    { "load", K_FILE, 0, 0, "" },
};

int config_parse_listen(const char *v, struct sockaddr_storage *out)
{
    struct sockaddr_storage ss;
    char host[64];
    const char *port;
    memset(&ss, 0, sizeof ss);
    if (v[0] == '[') { /* [IPv6]:PORT */
        const char *end = strchr(v, ']');
        if (!end || end[1] != ':' || (size_t)(end - v - 1) >= sizeof host)
            return -EINVAL;
        memcpy(host, v + 1, (size_t)(end - v - 1));
        host[end - v - 1] = '\0';
        port = end + 2;
    } else {
        const char *colon = strrchr(v, ':');
        if (!colon || (size_t)(colon - v) >= sizeof host)
            return -EINVAL;
        memcpy(host, v, (size_t)(colon - v));
        host[colon - v] = '\0';
        port = colon + 1;
    }
    char *e;
    errno = 0;
    unsigned long n = strtoul(port, &e, 10);
    if (errno || e == port || *e || n == 0 || n > 65535 ||
        !isdigit((unsigned char)port[0]))
        return -EINVAL;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (v[0] != '[' && inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)n);
    } else if (v[0] == '[' && inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)n);
    } else {
        return -EINVAL;
    }
    if (out)
        *out = ss;
    return 0;
}

static const char *const level_names[] = { "error", "warn", "info", "debug" };
/* Indexed by enum config_stall_action. */
static const char *const stall_action_names[] = { "kill", "evict", "wait" };
static const char *const bools[] = { "false", "true", "no", "yes", "off", "on",
                                     "0", "1" };

enum section { SEC_NONE, SEC_DAEMON, SEC_HEAP, SEC_SKIP };

struct diag {
    int line;
    size_t seq;
    char *msg;
};

struct value {
    uint64_t u;
    size_t n;
    uint32_t ids[CONFIG_MAX_IDS];
};

struct parse {
    struct config *c;
    FILE *err;
    FILE *in;                       /* source: a file ... */
    const char *text;               /* ... or a NUL-terminated string */
    size_t pos;
    int line;                       /* current line, 1-based */
    enum section sec;
    struct config_heap *heap;       /* c->heaps[heap_index] or &scratch */
    int heap_index;                 /* -1 for the scratch heap */
    unsigned heap_headers;          /* [heap ...] headers seen */
    struct config_heap scratch;
    int daemon_line[DK_COUNT];      /* line a key was set on, 0 = unset */
    bool daemon_bad[DK_COUNT];      /* value rejected: skip cross checks */
    int key_line[HK_COUNT];         /* same, for the current heap */
    bool key_bad[HK_COUNT];         /* value rejected: skip cross checks */
    bool geom_ok[CONFIG_MAX_HEAPS]; /* geometry valid: check overlaps */
    unsigned n_errors;
    int read_errno;                 /* reading IN failed */
    bool nomem;
    bool stopped;                   /* a line too long ended the parse */
    struct diag *diags;
    size_t n_diags, cap_diags;
    char buf[LINE_MAX_BYTES + 1];
};

enum num_status { NUM_OK, NUM_BAD, NUM_SUFFIX, NUM_RANGE };

struct clipbuf { char s[80]; };
struct numbuf { char s[32]; };

/* A value fit to quote in a message: at most 76 bytes, control bytes shown
 * as '?'. */
static const char *clip(const char *s, struct clipbuf *b)
{
    size_t max = sizeof b->s - 4, i;

    for (i = 0; s[i] && i < max; i++)
        b->s[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    if (s[i])
        memcpy(b->s + i, "...", 3), i += 3;
    b->s[i] = '\0';
    return b->s;
}
#define CLIP(s) clip((s), &(struct clipbuf){ { 0 } })

/* A size the way a user would write it: 128K, 4G, or plain bytes. */
static const char *fmt_size(uint64_t v, struct numbuf *b)
{
    static const char units[] = "GMK";
    static const uint64_t mult[] = { GIB, MIB, KIB };

    for (int i = 0; v && i < 3; i++)
        if (v % mult[i] == 0) {
            snprintf(b->s, sizeof b->s, "%" PRIu64 "%c", v / mult[i],
                     units[i]);
            return b->s;
        }
    snprintf(b->s, sizeof b->s, "%" PRIu64, v);
    return b->s;
}
#define SIZE(v) fmt_size((v), &(struct numbuf){ { 0 } })

/* A duration the way a user would write it: 10s, or 1500ms. */
static const char *fmt_ms(uint64_t ms, struct numbuf *b)
{
    if (ms && ms % 1000 == 0)
        snprintf(b->s, sizeof b->s, "%" PRIu64 "s", ms / 1000);
    else
        snprintf(b->s, sizeof b->s, "%" PRIu64 "ms", ms);
    return b->s;
}
#define MS(v) fmt_ms((v), &(struct numbuf){ { 0 } })

__attribute__((format(printf, 3, 0)))
static void vreport(struct parse *p, int line, const char *fmt, va_list ap)
{
    struct diag *d;
    char *msg;

    p->n_errors++;
    if (!p->err || p->nomem)
        return;
    if (p->n_diags == p->cap_diags) {
        size_t cap = p->cap_diags ? 2 * p->cap_diags : 16;
        if (!(d = realloc(p->diags, cap * sizeof *d)))
            goto nomem;
        p->diags = d;
        p->cap_diags = cap;
    }
    if (vasprintf(&msg, fmt, ap) < 0)
        goto nomem;
    p->diags[p->n_diags] = (struct diag){ line, p->n_diags, msg };
    p->n_diags++;
    return;
nomem:
    p->nomem = true;
}

/* An error at line LINE; report() is for the current line. */
__attribute__((format(printf, 3, 4)))
static void report_at(struct parse *p, int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vreport(p, line, fmt, ap);
    va_end(ap);
}

__attribute__((format(printf, 2, 3)))
static void report(struct parse *p, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vreport(p, p->line, fmt, ap);
    va_end(ap);
}

static int diag_cmp(const void *a, const void *b)
{
    const struct diag *x = a, *y = b;

    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void flush_diags(struct parse *p, const char *file)
{
    if (p->n_diags)
        qsort(p->diags, p->n_diags, sizeof *p->diags, diag_cmp);
    for (size_t i = 0; i < p->n_diags; i++) {
        if (p->err)
            fprintf(p->err, "heapd:%s:%d: %s\n", file, p->diags[i].line,
                    p->diags[i].msg);
        free(p->diags[i].msg);
    }
    free(p->diags);
}

static void copy_str(char *dst, size_t size, const char *src)
{
    size_t n = strnlen(src, size - 1);

    memcpy(dst, src, n);
    dst[n] = '\0';
}

static char *lskip(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

static void rstrip(char *s)
{
    size_t n = strlen(s);

    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
}

/* Decimal, or hex with ALLOW_HEX, then a K/M/G suffix with ALLOW_SUFFIX. */
static enum num_status parse_u64(const char *s, bool allow_hex,
                                 bool allow_suffix, uint64_t *out)
{
    unsigned base = 10, shift = 0, d;
    uint64_t v = 0;
    bool any = false, over = false;

    if (allow_hex && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
    }
    for (;; s++, any = true) {
        if (*s >= '0' && *s <= '9')
            d = (unsigned)(*s - '0');
        else if (base == 16 && isxdigit((unsigned char)*s))
            d = (unsigned)(tolower((unsigned char)*s) - 'a' + 10);
        else
            break;
        if (v > (UINT64_MAX - d) / base)
            over = true;
        else
            v = v * base + d;
    }
    if (!any)
        return NUM_BAD;
    if (allow_suffix && *s) {
        static const char suffixes[] = "KkMmGg";
        const char *u = strchr(suffixes, *s);
        if (!u)
            return NUM_SUFFIX;
        shift = 10 * (1 + (unsigned)(u - suffixes) / 2);
        s++;
    }
    if (*s)
        return allow_suffix ? NUM_SUFFIX : NUM_BAD;
    if (over || v > (UINT64_MAX >> shift))
        return NUM_RANGE;
    *out = v << shift;
    return NUM_OK;
}

int config_parse_size(const char *s, uint64_t *out)
{
    uint64_t v;
    enum num_status st = s && out ? parse_u64(s, true, true, &v) : NUM_BAD;

    if (st == NUM_OK)
        *out = v;
    return st == NUM_OK ? 0 : st == NUM_RANGE ? -ERANGE : -EINVAL;
}

/* Resolve a user or group name: 0, -ENOENT (no such entry) or -errno. */
static int lookup_id(const char *name, bool group, uint32_t *id)
{
    struct passwd pw, *pwp = NULL;
    struct group gr, *grp = NULL;
    char *buf = NULL, *nb;
    int r = ERANGE;

    for (size_t size = 4096; r == ERANGE && size <= (1u << 22); size *= 2) {
        if (!(nb = realloc(buf, size))) {
            r = ENOMEM;
            break;
        }
        buf = nb;
        r = group ? getgrnam_r(name, &gr, buf, size, &grp)
                  : getpwnam_r(name, &pw, buf, size, &pwp);
    }
    if (!r && (grp || pwp))
        *id = grp ? grp->gr_gid : pwp->pw_uid;
    else if (!r || r == ESRCH || r == EBADF || r == EPERM)
        r = ENOENT;     /* "not found" per getpwnam_r(3) */
    free(buf);
    return -r;
}

/* allow_users / allow_groups: names or numeric ids separated by commas
 * and/or blanks. */
static bool get_ids(struct parse *p, const struct key *k, const char *v,
                    struct value *out)
{
    const char *seps = ", \t\f\v\r", *what = k->what;
    char tok[256], idc = what[0] == 'g' ? 'g' : 'u';
    size_t count = 0, len;
    bool ok = true;
    uint64_t num;
    int r;

    for (const char *s = v + strspn(v, seps); *s; s += strspn(s, seps))
        s += strcspn(s, seps), count++;
    if (count > CONFIG_MAX_IDS) {
        report(p, "%s lists %zu entries; the limit is %d%s", k->name, count,
               CONFIG_MAX_IDS, idc == 'u' ? " (allow a group instead)" : "");
        return false;
    }
    out->n = 0;
    for (const char *s = v + strspn(v, seps); *s; s += strspn(s, seps)) {
        len = strcspn(s, seps);
        copy_str(tok, len < sizeof tok ? len + 1 : sizeof tok, s);
        s += len;
        if (len >= sizeof tok) {
            report(p, "%s name '%s' in %s is longer than %zu bytes", what,
                   CLIP(tok), k->name, sizeof tok - 1);
            ok = false;
        } else if (isdigit((unsigned char)tok[0])) {
            if (parse_u64(tok, false, false, &num) == NUM_OK &&
                num < UINT32_MAX) {
                out->ids[out->n++] = (uint32_t)num;
                continue;
            }
            report(p, "%s '%s' in %s is not a valid numeric %cid (use "
                   "0..4294967294 or a %s name)", what, CLIP(tok), k->name,
                   idc, what);
            ok = false;
        } else if ((r = lookup_id(tok, idc == 'g', &out->ids[out->n])) == 0) {
            out->n++;
        } else if (r == -ENOENT) {
            report(p, "unknown %s '%s' in %s; create it or give a numeric "
                   "%cid", what, CLIP(tok), k->name, idc);
            ok = false;
        } else {
            report(p, "cannot look up %s '%s': %s", what, CLIP(tok),
                   strerror(-r));
            ok = false;
        }
    }
    return ok;
}

/* A duration: decimal digits and a unit, ms, s or m (a bare number is
 * seconds), into milliseconds.  NUM_SUFFIX: an unknown unit. */
static enum num_status parse_duration(const char *s, uint64_t *ms)
{
    static const struct { const char *name; uint64_t ms; } units[] = {
        { "ms", 1 }, { "s", 1000 }, { "", 1000 }, { "m", 60000 },
    };
    uint64_t v = 0;
    size_t i;

    for (i = 0; s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (UINT64_MAX - 9) / 10)
            return NUM_RANGE;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (i == 0)
        return NUM_BAD;
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++)
        if (strcmp(s + i, units[u].name) == 0) {
            if (v > UINT64_MAX / units[u].ms)
                return NUM_RANGE;
            *ms = v * units[u].ms;
            return NUM_OK;
        }
    return NUM_SUFFIX;
}

/* Parse V for key K into OUT; false after reporting why it is unusable. */
static bool parse_value(struct parse *p, const struct key *k, const char *v,
                        struct value *out)
{
    const char *key = k->name;
    enum num_status st;

    switch (k->kind) {
    case K_SOCKET:
        if (v[0] != '/')
            report(p, "socket path '%s' is relative; use an absolute path "
                   "such as %s", CLIP(v), CONFIG_DEFAULT_SOCKET);
        else if (strlen(v) >= sizeof p->c->socket)
            report(p, "socket path is %zu bytes; the limit is %zu (sun_path)",
                   strlen(v), sizeof p->c->socket - 1);
        return v[0] == '/' && strlen(v) < sizeof p->c->socket;
    case K_FILE:
        if (v[0] != '/')
            report(p, "%s file '%s' is relative; use an absolute path",
                   key, CLIP(v));
        else if (strlen(v) >= CONFIG_PATH_MAX)
            report(p, "%s file is %zu bytes; the limit is %d", key,
                   strlen(v), CONFIG_PATH_MAX - 1);
        return v[0] == '/' && strlen(v) < CONFIG_PATH_MAX;
    case K_LISTEN:
        if (config_parse_listen(v, NULL) == 0)
            return true;
        report(p, "%s '%s' is not an address and port: use ADDRESS:PORT "
               "with a numeric IPv4 address (127.0.0.1:9465) or [IPv6]:PORT "
               "([::1]:9465), port 1 to 65535", key, CLIP(v));
        return false;
    case K_LEVEL:
        for (out->u = 0; out->u < 4; out->u++)
            if (strcasecmp(v, level_names[out->u]) == 0)
                return true;
        report(p, "log_level '%s' is not one of: error, warn, info, debug",
               CLIP(v));
        return false;
    case K_STALL_ACTION:
        for (out->u = 0; out->u < 3; out->u++)
            if (strcasecmp(v, stall_action_names[out->u]) == 0)
                return true;
        report(p, "%s '%s' is not one of: kill, evict, wait", key, CLIP(v));
        return false;
    case K_BOOL:
        for (unsigned i = 0; i < 8; i++)
            if (strcasecmp(v, bools[i]) == 0) {
                out->u = i & 1;     /* odd entries are true */
                return true;
            }
        report(p, "%s '%s' is not a boolean (use true or false)", key,
               CLIP(v));
        return false;
    case K_IDS:
        return get_ids(p, k, v, out);
    case K_ADDR:
        st = parse_u64(v, true, false, &out->u);
        if (st == NUM_BAD)
            report(p, "%s '%s' is not an address (use hex such as "
                   "0x7e8000000000, or decimal)", key, CLIP(v));
        else if (st == NUM_RANGE)
            report(p, "%s '%s' overflows 64 bits; use an address below 0x%"
                   PRIx64, key, CLIP(v), LAYOUT_USER_SPACE_END);
        else if (out->u == 0)
            report(p, "%s must not be 0; choose a fixed address such as "
                   "0x7e8000000000", key);
        else if (out->u >= LAYOUT_USER_SPACE_END)
            report(p, "%s 0x%" PRIx64 " is not below 0x%" PRIx64 " (47-bit "
                   "user address space)", key, out->u, LAYOUT_USER_SPACE_END);
        return st == NUM_OK && out->u && out->u < LAYOUT_USER_SPACE_END;
    case K_DURATION:
        st = parse_duration(v, &out->u);
        if (st == NUM_BAD || st == NUM_SUFFIX)
            report(p, "%s '%s' is not a duration (use a number and ms, s or "
                   "m, e.g. 5s or 500ms)", key, CLIP(v));
        else if (st == NUM_RANGE || out->u < k->lo || out->u > k->hi)
            report(p, "%s %s is out of range (%" PRIu64 "ms..%" PRIu64 "s)",
                   key, CLIP(v), k->lo, k->hi / 1000);
        else
            return true;
        return false;
    case K_TIMEOUT:
        st = parse_duration(v, &out->u);
        if (st == NUM_BAD || st == NUM_SUFFIX)
            report(p, "%s '%s' is not a duration (use a number and ms, s or "
                   "m, e.g. 10s or 500ms, or 0 for never)", key, CLIP(v));
        else if (st == NUM_RANGE ||
                 (out->u && (out->u < k->lo || out->u > k->hi)))
            report(p, "%s %s is out of range (0 = never, or %" PRIu64 "ms..%"
                   PRIu64 "s)", key, CLIP(v), k->lo, k->hi / 1000);
        else
            return true;
        return false;
    case K_UINT:
        st = parse_u64(v, false, false, &out->u);
        if (st == NUM_BAD)
            report(p, "%s '%s' is not a number (use decimal digits)", key,
                   CLIP(v));
        else if (st == NUM_RANGE || out->u < k->lo || out->u > k->hi)
            report(p, "%s %s is out of range (%" PRIu64 "..%" PRIu64 "%s)",
                   key, CLIP(v), k->lo, k->hi, k->what);
        else
            return true;
        return false;
    case K_SEGMENT:
        if (parse_u64(v, true, true, &out->u) == NUM_OK &&
            (out->u & (out->u - 1))) {
            report(p, "%s '%s' is not a power of two (e.g. 64K, 128K, "
                   "256K)", key, CLIP(v));
            return false;
        }
        __attribute__((fallthrough));
    case K_SIZE:
        st = parse_u64(v, true, true, &out->u);
        if (st == NUM_BAD)
            report(p, "%s '%s' is not a size (use a number with an optional "
                   "K, M or G suffix, e.g. 8M)", key, CLIP(v));
        else if (st == NUM_SUFFIX)
            report(p, "%s '%s' has a bad size suffix (use K, M or G, powers "
                   "of 1024, e.g. 8M)", key, CLIP(v));
        else if (st == NUM_RANGE)
            report(p, "%s '%s' overflows 64 bits; use a smaller size",
                   key, CLIP(v));
        else if (out->u < k->lo)
            report(p, "%s %s is too small (at least %s)", key, CLIP(v),
                   SIZE(k->lo));
        else if (out->u > k->hi)
            report(p, "%s %s is too large (at most %s)", key, CLIP(v),
                   SIZE(k->hi));
        else
            return true;
        return false;
    }
    return false;
}

static void store(struct parse *p, int k, const char *v, const struct value *x)
{
    struct config_heap *h = p->heap;

    if (p->sec == SEC_DAEMON) {
        if (k == DK_SOCKET)
            copy_str(p->c->socket, sizeof p->c->socket, v);
        else if (k == DK_LOG_LEVEL)
            p->c->log_level = (enum config_log_level)x->u;
        else if (k == DK_GC_THREADS)
            p->c->gc_threads = (unsigned)x->u;
        else if (k == DK_MAX_CONNECTIONS)
            p->c->max_connections = (unsigned)x->u;
        else if (k == DK_MAX_CONNECTIONS_PER_USER)
            p->c->max_connections_per_user = (unsigned)x->u;
        else if (k == DK_MAX_WRITE_QUEUE)
            p->c->max_write_queue = x->u;
        else if (k == DK_CONTROL_RESERVE)
            p->c->control_reserve = (unsigned)x->u;
        else if (k == DK_MAX_UNLISTED_CONNECTIONS)
            p->c->max_unlisted_connections = (unsigned)x->u;
        else if (k == DK_HANDSHAKE_TIMEOUT)
            p->c->handshake_timeout_ms = x->u;
        else if (k == DK_MAX_MUTATORS_PER_CLIENT)
            p->c->max_mutators_per_client = (unsigned)x->u;
        else if (k == DK_MAX_REQUESTS_PER_CLIENT)
            p->c->max_requests_per_client = (unsigned)x->u;
        else if (k == DK_METRICS_LISTEN)
            copy_str(p->c->metrics_listen, sizeof p->c->metrics_listen, v);
        else
            p->c->client_log_rate = (unsigned)x->u;
        return;
    }
    switch (k) {
    case HK_BASE: h->base = x->u; break;
    case HK_MAX_SIZE: h->max_size = x->u; break;
    case HK_SEGMENT_SIZE: h->segment_size = x->u; break;
    case HK_GC_OVERHEAD: h->gc_overhead = (uint32_t)x->u; break;
    case HK_MARK_STACK_LIMIT: h->mark_stack_limit = x->u; break;
    case HK_MAX_CLIENT_BYTES: h->max_client_bytes = x->u; break;
    case HK_VERIFY: h->verify = x->u != 0; break;
    case HK_STALL_WARN: h->stall_warn_ms = x->u; break;
    case HK_STALL_TIMEOUT: h->stall_timeout_ms = x->u; break;
    case HK_RECONNECT_TIMEOUT: h->reconnect_timeout_ms = x->u; break;
    case HK_YOUNG_SIZE: h->young_size = x->u; break;
    case HK_YOUNG_AGE: h->young_age = (uint32_t)x->u; break;
    case HK_MEMORY_LIMIT: h->memory_limit = x->u; break;
    case HK_LOAD: copy_str(h->load, sizeof h->load, v); break;
    case HK_STALL_ACTION:
        h->stall_action = (enum config_stall_action)x->u;
        break;
    case HK_ALLOW_USERS:
        for (size_t i = 0; i < x->n; i++)
            h->allow_users[i] = (uid_t)x->ids[i];
        h->n_allow_users = x->n;
        break;
    case HK_ALLOW_GROUPS:
        for (size_t i = 0; i < x->n; i++)
            h->allow_groups[i] = (gid_t)x->ids[i];
        h->n_allow_groups = x->n;
        break;
    }
}

/* A key of [daemon] or of the current heap. */
static void set_key(struct parse *p, const char *name, const char *v)
{
    bool heap = p->sec == SEC_HEAP, ok = false;
    const struct key *keys = heap ? heap_keys : daemon_keys;
    int n = heap ? HK_COUNT : DK_COUNT, k;
    int *lines = heap ? p->key_line : p->daemon_line;
    char sect[80] = "[daemon]", list[256] = "";
    struct value x;

    if (heap)
        snprintf(sect, sizeof sect, "[heap %s]", p->heap->name);
    for (k = 0; k < n && strcmp(keys[k].name, name); k++)
        ;
    if (k == n) {
        for (int i = 0; i < n; i++)
            strcat(strcat(list, i ? ", " : ""), keys[i].name);
        report(p, "unknown key '%s' in %s (expected one of: %s)", CLIP(name),
               sect, list);
        return;
    }
    if (lines[k]) {
        report(p, "duplicate key '%s' in %s (first set at line %d); keep "
               "only one", name, sect, lines[k]);
        return;
    }
    lines[k] = p->line;
    if (!*v && keys[k].kind != K_IDS)
        report(p, "empty value for '%s'; set a value or delete the line to "
               "use the default", name);
    else if ((ok = parse_value(p, &keys[k], v, &x)))
        store(p, k, v, &x);
    if (heap)
        p->key_bad[k] = !ok;
    else
        p->daemon_bad[k] = !ok;
}

static int handler(void *user, const char *section, const char *name,
                   const char *value)
{
    struct parse *p = user;

    (void)section;      /* truncated by inih; read_line tracks sections */
    if (!*name)
        report(p, "missing key name before '='; write 'key = value'");
    else if (p->sec == SEC_NONE)
        report(p, "key '%s' is outside any section; put it under [daemon] "
               "or [heap NAME]", CLIP(name));
    else if (p->sec != SEC_SKIP)
        set_key(p, name, value);
    return 1;   /* errors are collected here, never inih's business */
}

/* A stall is named at stall_warn and ended at stall_timeout (Note [Stalls]
 * in daemon/stall.c), so a timeout shorter than the warning would end a
 * mutator the log never named.  The values checked may be defaults; the
 * error goes on the line of the key that was set (stall_timeout's if both
 * were) and says which value is the default. */
static void check_stall(struct parse *p)
{
    const struct config_heap *h = p->heap;
    const int *kl = p->key_line;
    const bool *bad = p->key_bad;
    int wl = kl[HK_STALL_WARN], tl = kl[HK_STALL_TIMEOUT];

    if (bad[HK_STALL_WARN] || bad[HK_STALL_TIMEOUT] ||
        !h->stall_timeout_ms || h->stall_timeout_ms >= h->stall_warn_ms)
        return;
    if (tl)
        report_at(p, tl, "stall_timeout %s is shorter than stall_warn %s%s; "
                  "raise stall_timeout to at least %s, lower stall_warn, or "
                  "use stall_timeout = 0 (never end a stall)",
                  MS(h->stall_timeout_ms), MS(h->stall_warn_ms),
                  wl ? "" : " (the default)", MS(h->stall_warn_ms));
    else
        report_at(p, wl, "stall_warn %s is longer than stall_timeout %s (the "
                  "default); lower stall_warn or set stall_timeout to at "
                  "least %s (or 0 to never end a stall)",
                  MS(h->stall_warn_ms), MS(h->stall_timeout_ms),
                  MS(h->stall_warn_ms));
}

/* Section-level checks of the heap section that just ended. */
static void finish_heap(struct parse *p)
{
    struct config_heap *h = p->heap;
    const int *kl = p->key_line;
    const bool *bad = p->key_bad;
    uint64_t seg = h->segment_size, end;
    uint32_t ctl = layout_control_segments(seg);
    bool ok = true;

    if (!kl[HK_BASE])
        report_at(p, h->line, "heap '%s' has no base; add 'base = 0x...' "
                  "(a segment-aligned address below 0x%" PRIx64 ")", h->name,
                  LAYOUT_USER_SPACE_END);
    if (!kl[HK_MAX_SIZE])
        report_at(p, h->line, "heap '%s' has no max_size; add 'max_size = "
                  "SIZE' (e.g. 4G)", h->name);
    if (kl[HK_MAX_SIZE] && !bad[HK_MAX_SIZE] && kl[HK_MAX_CLIENT_BYTES] &&
        !bad[HK_MAX_CLIENT_BYTES] && h->max_client_bytes > h->max_size)
        report_at(p, kl[HK_MAX_CLIENT_BYTES], "max_client_bytes %s is "
                  "larger than max_size %s; lower it or use 0 (= max_size)",
                  SIZE(h->max_client_bytes), SIZE(h->max_size));
    if (kl[HK_MAX_SIZE] && !bad[HK_MAX_SIZE] && kl[HK_YOUNG_SIZE] &&
        !bad[HK_YOUNG_SIZE] && h->young_size > h->max_size / 4)
        report_at(p, kl[HK_YOUNG_SIZE], "young_size %s is more than a "
                  "quarter of max_size %s; lower it (every young mutator "
                  "that asks for no budget allocates this much between its "
                  "minor collections)", SIZE(h->young_size),
                  SIZE(h->max_size));
    /* the default, where none is set, within a quarter of max_size and of
     * max_client_bytes (Note [Sizing the nursery] in client/minor.c) */
    if (!kl[HK_YOUNG_SIZE]) {
        uint64_t cap = h->max_size / 4;
        if (h->max_client_bytes != 0 && h->max_client_bytes / 4 < cap)
            cap = h->max_client_bytes / 4;
        if (h->young_size > cap)
            h->young_size = cap;
    }
    check_stall(p);
    if (!kl[HK_BASE] || bad[HK_BASE] || !kl[HK_MAX_SIZE] ||
        bad[HK_MAX_SIZE] || bad[HK_SEGMENT_SIZE])
        return;
    if (h->base % seg) {
        report_at(p, kl[HK_BASE], "base 0x%" PRIx64 " is not a multiple "
                  "of segment_size %s", h->base, SIZE(seg));
        ok = false;
    }
    if (h->max_size % seg) {
        report_at(p, kl[HK_MAX_SIZE], "max_size %s is not a multiple of "
                  "segment_size %s", SIZE(h->max_size), SIZE(seg));
        ok = false;
    } else if (h->max_size / seg <= ctl) {
        report_at(p, kl[HK_MAX_SIZE], "max_size %s is too small: with "
                  "segment_size %s it must be at least %s (%u control "
                  "segment%s + 1)", SIZE(h->max_size), SIZE(seg),
                  SIZE((ctl + 1ULL) * seg), ctl, ctl == 1 ? "" : "s");
        ok = false;
    }
    /* Note [Memory limit] in daemon/gc/collector.c: some segments to
     * allocate in, within max_size */
    if (ok && kl[HK_MEMORY_LIMIT] && !bad[HK_MEMORY_LIMIT] &&
        h->memory_limit != 0) {
        uint64_t least = (uint64_t)MEMORY_LIMIT_MIN_SEGS * seg;
        if (h->memory_limit > h->max_size)
            report_at(p, kl[HK_MEMORY_LIMIT], "memory_limit %s is larger "
                      "than max_size %s; lower it, or use 0 (no limit but "
                      "max_size)", SIZE(h->memory_limit), SIZE(h->max_size));
        else if (h->memory_limit < least)
            report_at(p, kl[HK_MEMORY_LIMIT], "memory_limit %s is too "
                      "small: with segment_size %s it must be at least %s "
                      "(%u segments)", SIZE(h->memory_limit), SIZE(seg),
                      SIZE(least), MEMORY_LIMIT_MIN_SEGS);
    }
    if (ok && (__builtin_add_overflow(h->base, h->max_size, &end) ||
               end >= LAYOUT_USER_SPACE_END)) {
        report_at(p, kl[HK_BASE], "heap '%s' would end at or beyond 0x%"
                  PRIx64 " (base 0x%" PRIx64 " + max_size %s, 47-bit user "
                  "address space); lower base or max_size", h->name,
                  LAYOUT_USER_SPACE_END, h->base, SIZE(h->max_size));
        ok = false;
    }
    if (p->heap_index >= 0)
        p->geom_ok[p->heap_index] = ok;
}

static void finish_section(struct parse *p)
{
    if (p->sec == SEC_HEAP)
        finish_heap(p);
    memset(p->key_line, 0, sizeof p->key_line);
    memset(p->key_bad, 0, sizeof p->key_bad);
    p->sec = SEC_SKIP;
}

static void heap_section(struct parse *p, const char *name)
{
    static const char ok_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        "abcdefghijklmnopqrstuvwxyz0123456789_.-";
    struct config *c = p->c;
    struct config_heap *h = &p->scratch;
    const struct config_heap *dup = config_find_heap(c, name);
    size_t len = strlen(name), bad = strspn(name, ok_chars);
    unsigned char ch = (unsigned char)name[bad];

    p->heap_headers++;
    p->heap_index = -1;
    if (len == 0)
        report(p, "heap section has no name; write [heap NAME] (NAME: "
               "1..%d of A-Z a-z 0-9 _ . -)", CONFIG_HEAP_NAME_MAX);
    else if (len > CONFIG_HEAP_NAME_MAX)
        report(p, "heap name '%s' is %zu bytes; the limit is %d", CLIP(name),
               len, CONFIG_HEAP_NAME_MAX);
    else if (bad < len && isprint(ch))
        report(p, "heap name '%s' contains '%c'; use only A-Z a-z 0-9 _ . "
               "-", CLIP(name), ch);
    else if (bad < len)
        report(p, "heap name '%s' contains byte 0x%02x; use only A-Z a-z "
               "0-9 _ . -", CLIP(name), ch);
    else if (dup)
        report(p, "duplicate heap '%s' (first declared at line %d); give "
               "each heap a unique name", name, dup->line);
    else if (c->n_heaps == CONFIG_MAX_HEAPS)
        report(p, "too many heaps: '%s' would be number %d; at most %d "
               "[heap NAME] sections are allowed", name, CONFIG_MAX_HEAPS + 1,
               CONFIG_MAX_HEAPS);
    else
        h = &c->heaps[p->heap_index = (int)c->n_heaps++];
    memset(h, 0, sizeof *h);
    copy_str(h->name, sizeof h->name, name);
    h->line = p->line;
    h->segment_size = 128 * KIB;
    h->gc_overhead = 100;
    h->mark_stack_limit = 8 * MIB;
    h->stall_warn_ms = 1000;
    h->stall_timeout_ms = 10000;
    h->stall_action = CONFIG_STALL_KILL;
    h->reconnect_timeout_ms = 10000;
    h->young_size = 8 * MIB;
    h->young_age = 2;
    p->heap = h;
    p->sec = SEC_HEAP;
}

/* S is a trimmed line starting with '['. */
static void section_line(struct parse *p, char *s)
{
    char *close = strchr(s, ']'), *rest, *name;

    finish_section(p);
    if (!close) {
        report(p, "section header '%s' has no closing ']'; write [daemon] "
               "or [heap NAME]", CLIP(s));
        return;     /* keys up to the next header are skipped */
    }
    *close = '\0';
    rest = lskip(close + 1);
    if (*rest && *rest != ';')
        report(p, "unexpected text '%s' after ']' (comments start with "
               "';')", CLIP(rest));
    name = lskip(s + 1);
    rstrip(name);
    if (strcmp(name, "daemon") == 0)
        p->sec = SEC_DAEMON;
    else if (strncmp(name, "heap", 4) == 0 &&
             (!name[4] || isspace((unsigned char)name[4])))
        heap_section(p, lskip(name + 4));
    else
        report(p, "unknown section '[%s]' (expected [daemon] or [heap "
               "NAME])", CLIP(name));
}

/* inih's find_chars_or_comment(s, "=:"): ';' after a blank starts a
 * comment. */
static bool has_separator(const char *s)
{
    for (bool was_space = false; *s; was_space = isspace((unsigned char)*s++))
        if (*s == '=' || *s == ':')
            return true;
        else if (was_space && *s == ';')
            return false;
    return false;
}

/* Classify one whole line; returns the text inih should see. */
static const char *classify(struct parse *p, char *s)
{
    if (p->line == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
        s += 3;     /* UTF-8 BOM, as inih */
    s = lskip(s);
    rstrip(s);
    if (!*s || *s == ';' || *s == '#')
        return "";
    if (*s == '[') {
        section_line(p, s);
        return "";
    }
    if (has_separator(s))
        return s;
    report(p, "syntax error: '%s' is neither '[section]' nor 'key = "
           "value' (comments start with ';' or '#')", CLIP(s));
    return "";
}

static int src_getc(struct parse *p)
{
    int ch;

    if (!p->in)
        return p->text[p->pos] ? (unsigned char)p->text[p->pos++] : EOF;
    ch = getc_unlocked(p->in);
    if (ch == EOF && ferror(p->in) && !p->read_errno)
        p->read_errno = errno ? errno : EIO;
    return ch;
}

/* ini_reader: hand inih one whole line (or a blank one), counting lines;
 * NULL (the end) after a line too long.  See Note [Config input is
 * bounded]. */
static char *read_line(char *str, int num, void *stream)
{
    struct parse *p = stream;
    const char *out = "";
    size_t len = 0;
    bool nul = false;
    int ch;

    if (p->stopped || num < 2 || (ch = src_getc(p)) == EOF)
        return NULL;
    p->line++;
    for (; ch != EOF && ch != '\n'; ch = src_getc(p)) {
        if (len == LINE_MAX_BYTES) {
            report(p, "line is longer than %d bytes; shorten it (heapd "
                   "stopped reading the file here; is it a text file?)",
                   LINE_MAX_BYTES);
            p->stopped = true;
            return NULL;
        }
        nul |= ch == '\0';
        p->buf[len++] = (char)ch;
    }
    p->buf[len] = '\0';
    if (!nul)
        out = classify(p, p->buf);
    len = strlen(out);
    if (len + 2 > (size_t)num) {    /* cannot happen: num is ini_max_line */
        report(p, "line is longer than %d bytes; shorten it", num - 2);
        out = "";
        len = 0;
    } else if (nul) {
        report(p, "line contains a NUL byte; the file must be text");
    }
    memcpy(str, out, len);
    memcpy(str + len, "\n", 2);
    return str;
}

/* inih's syntax knobs are process globals in Debian's build: set every one
 * we depend on before each parse (not thread-safe, like inih itself). */
static void set_ini_knobs(void)
{
    ini_allow_multiline = false;    /* indented lines must not join values */
    ini_allow_bom = true;
    ini_start_comment_prefixes = (char *)";#";
    ini_allow_inline_comments = true;
    ini_inline_comment_prefixes = (char *)";";
    ini_use_stack = true;
    ini_max_line = LINE_MAX_BYTES + 3;  /* '\r', '\n' and '\0' */
    ini_allow_realloc = false;
    ini_stop_on_first_error = false;
    ini_allow_no_value = false;
}

static void init_defaults(struct config *c, const char *file)
{
    memset(c, 0, sizeof *c);
    copy_str(c->path, sizeof c->path, file);
    copy_str(c->socket, sizeof c->socket, CONFIG_DEFAULT_SOCKET);
    c->log_level = CONFIG_LOG_INFO;
    c->gc_threads = 2;
    c->max_connections = 1024;
    c->max_connections_per_user = 256;
    c->max_write_queue = 4 * MIB;
    c->control_reserve = CONFIG_DEFAULT_CONTROL_RESERVE;
    c->max_unlisted_connections = 16;
    c->handshake_timeout_ms = 5000;
    c->max_mutators_per_client = 64;
    c->max_requests_per_client = 256;
    c->client_log_rate = 10;
}

/* The [daemon] keys that depend on each other, once the file is read.  An
 * unset control_reserve is the default, but never more than a quarter of
 * max_connections; one that is set must leave room for other users. */
static void finish_daemon(struct parse *p)
{
    struct config *c = p->c;
    const int *dl = p->daemon_line;
    const bool *bad = p->daemon_bad;

    if (!dl[DK_CONTROL_RESERVE] || bad[DK_CONTROL_RESERVE]) {
        if (c->control_reserve > c->max_connections / 4)
            c->control_reserve = c->max_connections / 4;
        return;
    }
    if (bad[DK_MAX_CONNECTIONS] || c->control_reserve < c->max_connections)
        return;
    report_at(p, dl[DK_CONTROL_RESERVE], "control_reserve %u leaves none of "
              "max_connections %u to other users; lower it below "
              "max_connections or raise max_connections",
              c->control_reserve, c->max_connections);
}

static void check_overlaps(struct parse *p)
{
    const struct config *c = p->c;

    for (size_t j = 0; j < c->n_heaps; j++) {
        const struct config_heap *b = &c->heaps[j];
        for (size_t i = 0; i < j && p->geom_ok[j]; i++) {
            const struct config_heap *a = &c->heaps[i];
            if (!p->geom_ok[i] || a->base >= b->base + b->max_size ||
                b->base >= a->base + a->max_size)
                continue;
            report_at(p, b->line, "heap '%s' [0x%" PRIx64 ",0x%" PRIx64
                      ") overlaps heap '%s' declared at line %d; change base "
                      "or max_size so they are disjoint", b->name, b->base,
                      b->base + b->max_size, a->name, a->line);
        }
    }
}

static int parse(struct config *c, const char *file, FILE *in,
                 const char *text, FILE *err)
{
    struct parse *p = calloc(1, sizeof *p);
    int rc = -ENOMEM;

    if (!p)
        goto out;
    p->c = c;
    p->err = err;
    p->in = in;
    p->text = text;
    p->sec = SEC_NONE;
    set_ini_knobs();
    rc = ini_parse_stream(read_line, p, handler, p);
    if (!p->stopped)    /* See Note [Config input is bounded] */
        finish_section(p);
    if (rc > 0)     /* safety net: read_line should have caught it */
        report_at(p, rc, "syntax error; expected '[section]' or 'key = "
                  "value'");
    else if (rc < 0)
        p->nomem = true;
    if (p->read_errno)
        report_at(p, 0, "cannot read: %s", strerror(p->read_errno));
    if (!p->heap_headers && !p->stopped)
        report_at(p, 0, "no [heap NAME] section; declare at least one "
                  "heap with base and max_size");
    check_overlaps(p);
    if (!p->stopped)    /* See Note [Config input is bounded] */
        finish_daemon(p);
    flush_diags(p, file);
    rc = p->nomem ? -ENOMEM : p->n_errors ? -EINVAL : 0;
out:
    free(p);
    return rc;
}

/* What a non-regular file is, for the message. */
static const char *file_kind(mode_t mode)
{
    switch (mode & S_IFMT) {
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFIFO: return "a FIFO or pipe";
    case S_IFSOCK: return "a socket";
    default: return "an unknown kind of file";
    }
}

int config_load(struct config *out, const char *file, FILE *err)
{
    struct stat st;
    FILE *f = NULL;
    int fd, rc;

    if (!out || !file)
        return -EINVAL;
    init_defaults(out, file);
    /* O_NONBLOCK: a FIFO must not block the open (Note [Config input is
     * bounded]); it changes nothing for a regular file. */
    fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &st) < 0) {
        rc = -errno;
        goto fail;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = -EISDIR;
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        if (err)
            fprintf(err, "heapd:%s:0: not a regular file (%s); pass -c PATH "
                    "of a config file\n", file, file_kind(st.st_mode));
        goto out;
    }
    if (!(f = fdopen(fd, "r"))) {
        rc = -errno;
        goto fail;
    }
    fd = -1;    /* owned by f */
    rc = parse(out, file, f, NULL, err);
    goto out;
fail:
    if (err)
        fprintf(err, "heapd:%s:0: cannot open: %s; pass -c PATH or create "
                "it\n", file, strerror(-rc));
out:
    if (f)
        fclose(f);
    if (fd >= 0)
        close(fd);
    return rc;
}

int config_load_string(struct config *out, const char *file, const char *text,
                       FILE *err)
{
    if (!out || !text)
        return -EINVAL;
    if (!file)
        file = "<string>";
    init_defaults(out, file);
    return parse(out, file, NULL, text, err);
}

const struct config_heap *config_find_heap(const struct config *c,
                                           const char *name)
{
    for (size_t i = 0; c && name && i < c->n_heaps; i++)
        if (strcmp(c->heaps[i].name, name) == 0)
            return &c->heaps[i];
    return NULL;
}

const char *config_log_level_name(enum config_log_level l)
{
    if ((unsigned)l < sizeof level_names / sizeof *level_names)
        return level_names[l];
    return "unknown";
}
