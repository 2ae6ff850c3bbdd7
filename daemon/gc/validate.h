/* Validating the references the daemon reads from shared memory.  See
 * Note [Validating references] in validate.c. */
#ifndef HEAPD_DAEMON_VALIDATE_H
#define HEAPD_DAEMON_VALIDATE_H

#include <stdbool.h>
#include <stdint.h>

struct heap;

/* A validated reference: the object, its mark byte, its block. */
struct valid_ref {
    uintptr_t obj;        /* address of the first field */
    uint8_t *mark;
    uint64_t block_size;  /* bytes the object may occupy, header included */
    uint8_t seen;         /* the mark, as validate_ref read it (once) */
    bool young;           /* refused: the first field of a young block
                             (Note [References to young objects]) */
};

/* Fill *out and return true iff R is the first-field address of a block
 * whose mark is an epoch: an allocated shared object.  False with
 * out->young set: R is a young object's, which nothing but its own
 * mutator may reference (Note [References to young objects]).  Any
 * thread. */
bool validate_ref(const struct heap *h, uintptr_t r, struct valid_ref *out);

/* The object's header, or 0 if its sizes do not fit its block (a corrupt
 * header: counted as a bad reference, its fields not traced). */
uint64_t validate_header(const struct valid_ref *ref);

/* Why R is not a reference to an allocated object, for the log. */
const char *validate_diagnose(const struct heap *h, uintptr_t r);

#endif
