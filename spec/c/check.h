/* The C unit tests' one assertion: CHECK counts a check and prints the failing condition;
 * a test's main ends with CHECK_SUMMARY(), which prints "N checks, M failures" (what
 * spec/support/c_unit.lua looks for) and gives the exit status. One test program each. */
#ifndef AIRLOCK_SPEC_CHECK_H
#define AIRLOCK_SPEC_CHECK_H

#include <stdio.h>

static int failures, checks;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        checks++;                                                                    \
        if (!(cond)) {                                                               \
            failures++;                                                              \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                   \
        }                                                                            \
    } while (0)

#define CHECK_SUMMARY() (printf("%d checks, %d failures\n", checks, failures), failures ? 1 : 0)

#endif
