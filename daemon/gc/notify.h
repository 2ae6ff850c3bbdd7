/* How a collector thread tells the loop thread that there is news, knowing
 * nothing of the loop.  See Note [Collector handoff] in handoff.c. */
#ifndef HEAPD_DAEMON_NOTIFY_H
#define HEAPD_DAEMON_NOTIFY_H

/* FN(ARG) may be called from any thread, never blocks, and coalesces: the
 * loop thread runs its handler at least once after the last call. */
struct notify {
    void (*fn)(void *arg);
    void *arg;
};

static inline void notify_send(const struct notify *n)
{
    if (n->fn)
        n->fn(n->arg);
}

#endif
