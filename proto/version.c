/* Versions across releases: the one rule for whether a client and heapd
 * of different releases work together, and the one message when not.
 *
 * Note [Versions across releases]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A libheapd and a heapd of different releases work together when they
 * speak the same PROTOCOL_VERSION (proto/wire.h) and, for a mutator
 * client, which maps the heap, the same LAYOUT_VERSION (proto/layout.h);
 * heapctl's control connection maps nothing and needs the protocol only.
 * A release that changes neither is compatible both ways: an old program
 * runs against a new heapd and a new one against an old heapd.
 *
 * Otherwise the connection fails at its handshake with HEAPD_EVERSION,
 * whichever side sees it first: heapd at the Hello (the Hello carries
 * libheapd's release, protocol and layout), libheapd at the Welcome (heapd's
 * release, protocol and layout).  The message names both releases and
 * what to upgrade: the side whose (protocol, layout) is lower is the
 * older one.  A release before 0.2.0 sends no release string (it is
 * "a libheapd that does not name its release"), and a field it does not
 * send reads 0, older than any.  Tests (tests/test_versions.c) run 0.1.0, built
 * from its commit, against this release both ways; why the message names
 * both: the old one said "use matching versions" and left the operator to
 * find out which two they were.
 */
#include <stdio.h>

#include "version.h"

int version_compatible(const struct version_side *lib,
                       const struct version_side *daemon, int maps)
{
    return lib->protocol == daemon->protocol &&
           (!maps || lib->layout == daemon->layout);
}

static int side_older(const struct version_side *a,
                      const struct version_side *b)
{
    return a->protocol != b->protocol ? a->protocol < b->protocol
                                      : a->layout < b->layout;
}

static void side_name(char *buf, size_t n, const char *what,
                      const struct version_side *s)
{
    if (s->release && s->release[0])
        snprintf(buf, n, "%s %s (protocol %u, layout %u)", what, s->release,
                 s->protocol, s->layout);
    else
        snprintf(buf, n, "a %s that does not name its release (protocol "
                 "%u, layout %u)", what, s->protocol, s->layout);
}

void version_mismatch(char *buf, size_t n, const struct version_side *lib,
                      const struct version_side *daemon)
{
    char l[96], d[96], to[64] = "";
    side_name(l, sizeof l, "libheapd", lib);
    side_name(d, sizeof d, "heapd", daemon);
    const int lib_older = side_older(lib, daemon);
    const struct version_side *newer = lib_older ? daemon : lib;
    if (newer->release && newer->release[0])
        snprintf(to, sizeof to, " to %s", newer->release);
    if (lib_older)
        snprintf(buf, n, "%s cannot use %s: upgrade the program's "
                 "libheapd%s, heapd's release", l, d, to);
    else
        snprintf(buf, n, "%s cannot use %s: upgrade heapd%s, the "
                 "program's libheapd's release", l, d, to);
}
