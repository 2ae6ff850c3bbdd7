/* libheapd's word to ThreadSanitizer about block reuse.
 *
 * Note [Reuse and ThreadSanitizer]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * A block one thread of a process read may be freed by heapd's sweep and
 * allocated again by another thread of the process.  That is safe: a
 * block is freed only in a cycle whose snapshot every mutator passed
 * after its last use of the object, at a stop it acknowledged or in a
 * blocking region it entered (Note [Client GC discipline] in heapd.h).
 * But the chain that orders the two -- the first thread's acknowledgement,
 * the daemon's marking and sweep in another process, the second thread's
 * load of a free mark byte -- runs through a process ThreadSanitizer does
 * not see, so it took the new owner's zeroing for a race with the old
 * reader (test_young's shared map, under TSan).  So, in TSan builds only,
 * every acknowledgement of a stop and every entry into a blocking region
 * releases, and every block allocation acquires, one address of the
 * client: the order the collector guarantees, said to the tool.  Other
 * builds compile it out.
 */
#ifndef HEAPD_CLIENT_TSAN_H
#define HEAPD_CLIENT_TSAN_H

#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define TSAN_REUSE_RELEASE(addr) __tsan_release(addr)
#define TSAN_REUSE_ACQUIRE(addr) __tsan_acquire(addr)
#else
#define TSAN_REUSE_RELEASE(addr) ((void)(addr))
#define TSAN_REUSE_ACQUIRE(addr) ((void)(addr))
#endif

#endif
