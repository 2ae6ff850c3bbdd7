/* heapd-share: the smallest multi-process heapd program.
 *
 * Several worker processes connect to heapd, each maps the shared heap at
 * the same fixed address, and each writes a greeting into its own slot of a
 * shared page; then a reader process connects and prints every greeting it
 * finds at those same addresses.  Processes coordinate with pipes only.
 *
 * Until the allocator lands (issue 3) the example writes into the first
 * segment past the control area, which nothing else uses yet.
 *
 *   heapd-share [--socket PATH] [--workers N]
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "heapd.h"

#define SLOT_BYTES 128

static heapd_client *connect_or_die(const char *sock, const char *who)
{
    heapd_connect_opts o = {.socket_path = sock, .client_name = who};
    heapd_client *c;
    int rc = heapd_connect(&c, &o);
    if (rc < 0) {
        fprintf(stderr, "%s: %s\n", who, heapd_last_error());
        exit(1);
    }
    return c;
}

/* The shared page: one segment in (the first is the control area). */
static char *slots(heapd_client *c)
{
    heapd_stats_t st;
    if (heapd_stats(c, &st) < 0 || st.heap_count == 0) {
        fprintf(stderr, "stats: %s\n", heapd_last_error());
        exit(1);
    }
    return (char *)heapd_heap_base(c) + st.heaps[0].segment_size;
}

static void worker(const char *sock, int i, int done_fd)
{
    char name[32];
    snprintf(name, sizeof name, "worker-%d", i);
    heapd_client *c = connect_or_die(sock, name);
    char *slot = slots(c) + i * SLOT_BYTES;
    snprintf(slot, SLOT_BYTES, "hello from %s, pid %d", name, (int)getpid());
    printf("  %s (pid %d) wrote at %p: \"%s\"\n", name, (int)getpid(),
           (void *)slot, slot);
    fflush(stdout);
    heapd_disconnect(c);
    if (write(done_fd, "d", 1) != 1)
        exit(1);
    exit(0);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"workers", required_argument, NULL, 'w'},
        {NULL, 0, NULL, 0},
    };
    const char *sock = NULL;
    int workers = 2, opt, p[2], rc = 0;

    while ((opt = getopt_long(argc, argv, "s:w:", opts, NULL)) != -1) {
        switch (opt) {
        case 's': sock = optarg; break;
        case 'w': workers = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: heapd-share [--socket PATH] "
                            "[--workers N]\n");
            return 2;
        }
    }
    if (workers < 1 || workers > 16) {
        fprintf(stderr, "heapd-share: --workers must be 1..16\n");
        return 2;
    }
    if (pipe(p) < 0)
        return 1;

    printf("%d worker processes write into the shared heap:\n", workers);
    fflush(stdout);
    for (int i = 0; i < workers; i++)
        if (fork() == 0)
            worker(sock, i, p[1]);
    for (int i = 0; i < workers; i++) {
        char d;
        if (read(p[0], &d, 1) != 1)
            return 1;
    }

    pid_t r = fork();
    if (r == 0) {
        heapd_client *c = connect_or_die(sock, "reader");
        char *s = slots(c);
        printf("a reader process (pid %d) maps the heap at %p and finds:\n",
               (int)getpid(), heapd_heap_base(c));
        for (int i = 0; i < workers; i++)
            printf("  at %p: \"%s\"\n", (void *)(s + i * SLOT_BYTES),
                   s + i * SLOT_BYTES);
        int ok = 1;
        for (int i = 0; i < workers; i++)
            ok &= strncmp(s + i * SLOT_BYTES, "hello from worker-", 18) == 0;
        heapd_disconnect(c);
        exit(ok ? 0 : 1);
    }
    for (int i = 0; i < workers + 1; i++) {
        int st;
        if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            rc = 1;
    }
    printf(rc == 0 ? "all %d processes saw the same bytes at the same "
                     "addresses\n"
                   : "FAILED: a process did not see the shared bytes\n",
           workers + 1);
    return rc;
}
