/* Shared by the fuzz targets: a check that holds in every build type
 * (assert() would vanish under NDEBUG) and says which property broke. */
#ifndef HEAPD_FUZZ_FUZZ_H
#define HEAPD_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Each target defines it; libFuzzer or replay.c calls it once per input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__,      \
                    __LINE__, #cond);                                        \
            abort();                                                         \
        }                                                                    \
    } while (0)

#endif
