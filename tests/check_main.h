/* The main() every check suite shares: run it, let check print its summary
 * line (scripts/test adds those up), exit non-zero on any failure. */
#ifndef HEAPD_TESTS_CHECK_MAIN_H
#define HEAPD_TESTS_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

static inline int check_main(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
