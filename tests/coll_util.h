/* Helpers of the collections' test suites (tests/coll_util.c). */
#ifndef HEAPD_TESTS_COLL_UTIL_H
#define HEAPD_TESTS_COLL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"
#include "heapd.h"

/* the heapd of the running test */
extern struct daemon_proc D;

/* Start it: the test, not heapd, ends a stopped kid. */
void coll_start(void);
/* A value string for KEY, generation G: "KEY=G" padded to VAL_LEN bytes
 * with a checksum byte at the end, so a reader can tell a whole value
 * from a torn or foreign one. */
#define VAL_LEN 100
void *make_value(heapd_mutator *m, const char *key, unsigned g);
/* Is V a whole value of KEY?  Its generation in *G. */
bool value_ok(const void *v, const char *key, unsigned *g);
/* "key:" and I in 8 digits. */
void key_name(char *out, size_t n, unsigned i);
/* Set key I of the map rooted in SLOT to generation G. */
int put_key(heapd_mutator *m, size_t slot, unsigned i, unsigned g,
            unsigned flags);
/* A kid that attaches (young if YOUNG) once kid_go(*GO) says so, then
 * runs BODY(m, ARG, FD) and exits with what it returns; *RFD reads FD.
 * STOP_IN: HEAPD_COLL_STOP_IN for it.  Forked before the test process
 * connects (ThreadSanitizer refuses a fork after libheapd's threads). */
pid_t fork_kid(int (*body)(heapd_mutator *m, void *arg, int fd), void *arg,
               bool young, int *rfd, int *go, const char *stop_in);
void kid_go(int go);
/* Kid K exited with 0 (bounded wait), else the test fails naming WHO. */
void expect_exit0(pid_t k, const char *who);
/* Wait (bounded) until kid K has stopped itself at POINT (its
 * HEAPD_COLL_STOP_IN); kill_stopped then SIGKILLs it there. */
void wait_stopped(pid_t k, const char *point);
void kill_stopped(pid_t k, const char *point);
/* A word between a kid and the test. */
void send_u64(int fd, uint64_t v);
uint64_t recv_u64(int fd, const char *what);
/* The map or queue in global NAME, for a kid (exit 92 if none). */
void *global_of(heapd_mutator *m, const char *name);
/* The map of global "t.map", made for CAP keys, in a root slot of M. */
size_t shared_map(heapd_mutator *m, size_t cap);
/* The end of a test: pop ROOTS slots of M, expect heapd healthy, detach
 * and disconnect, stop heapd cleanly. */
void coll_finish(heapd_client *c, heapd_mutator *m, size_t roots);

#endif
