/* The check macro of airlockd's C unit tests: counts checks and failures, prints each failure
 * with its line; a test ends with printf("%d checks, %d failures\n", checks, failures). */
#ifndef AIRLOCK_SPEC_UNIT_CHECK_H
#define AIRLOCK_SPEC_UNIT_CHECK_H

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

#endif
