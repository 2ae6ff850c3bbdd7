/* libheapd's checked mode (client/checked.c, Note [Checked mode]). */
#ifndef HEAPD_CLIENT_CHECKED_H
#define HEAPD_CLIENT_CHECKED_H

#include <stdatomic.h>
#include <stdbool.h>

#include "client.h"
#include "heapd.h"

extern _Atomic bool checked_any;
bool checked_wanted(const heapd_connect_opts *o);
void checked_register(heapd_client *c);
void checked_forget(heapd_client *c);
/* Abort with a message naming CALL unless REF (NULL if NULL_OK) is a live
 * object of C's heap; WHAT names the argument. */
void checked_object(const heapd_client *c, const void *ref, bool null_ok,
                    const char *call, const char *what);
/* The same for OBJ, and FIELD must be one of its reference fields. */
void checked_field(const heapd_client *c, const void *obj, void *const *field,
                   const char *call);
/* For the accessors, which have no client: OBJ in a checked heap. */
void checked_accessor(const void *obj, const char *call);
/* C is in checked mode (struct heapd_client, client/client.h). */
#define CHECKED(c) __builtin_expect((c)->checked, 0)

#endif
