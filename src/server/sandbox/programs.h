/* Where the sandbox backend finds the programs it runs (private to sandbox/): runsc, bwrap, and
 * airlockd's own directory (the waiter and the checkout's fetched runsc are found from it). */
#ifndef AIRLOCKD_SANDBOX_PROGRAMS_H
#define AIRLOCKD_SANDBOX_PROGRAMS_H

#include "sandbox/sandbox.h"

#include <stddef.h>

/* The directory of airlockd's own executable (symlinks resolved), malloc'd; NULL if unknown. */
char *sbx_self_dir(void);

/* An executable: explicit_path when given (NULL when it is not executable), else the first in
 * the directories of path (PATH; NULL or empty: the standard ones). Absolute and resolved,
 * malloc'd; NULL when none. */
char *sbx_find_program(const char *explicit_path, const char *path, const char *name);

/* runsc, in the documented order:
 *   1. the setting (--runsc, else AIRLOCK_RUNSC): that file or nothing;
 *   2. the checkout's fetched runsc, .deps/runsc/usr/bin/runsc, in airlockd's directory or
 *      one or two above it (build/airlockd of a checkout finds ./.deps);
 *   3. each directory of PATH.
 * Malloc'd; NULL with why it was not found in why. */
char *sbx_find_runsc(const sandbox_settings *set, char *why, size_t whylen);

#endif
