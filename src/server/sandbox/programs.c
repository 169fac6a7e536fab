/* Finding runsc, bwrap and airlockd's own directory (sandbox/programs.h). */
#include "sandbox/programs.h"

#include "sandbox/internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The checkout's fetched runsc (make deps), relative to a directory of the checkout. */
#define DEPS_RUNSC ".deps/runsc/usr/bin/runsc"
/* airlockd's directory and the two above it are searched for DEPS_RUNSC. */
static const char *const deps_levels[] = {"", "../", "../../"};

char *sbx_self_dir(void)
{
    char *self = realpath("/proc/self/exe", NULL);
    char *slash = self ? strrchr(self, '/') : NULL;
    if (!slash) {
        free(self);
        return NULL;
    }
    slash[slash == self ? 1 : 0] = '\0'; /* "/airlockd": the root itself */
    return self;
}

char *sbx_find_program(const char *explicit_path, const char *path, const char *name)
{
    if (explicit_path && *explicit_path)
        return access(explicit_path, X_OK) == 0 ? realpath(explicit_path, NULL) : NULL;
    if (!path || !*path)
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    char *copy = strdup(path);
    if (!copy)
        return NULL;
    char *found = NULL, *save = NULL;
    for (char *dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
        char *cand = sbx_path_join(*dir ? dir : ".", name);
        if (cand && access(cand, X_OK) == 0)
            found = realpath(cand, NULL);
        free(cand);
    }
    free(copy);
    return found;
}

/* DEPS_RUNSC in dir or one of the two directories above it. */
static char *find_deps_runsc(const char *dir)
{
    char cand[PATH_MAX];
    for (size_t i = 0; i < sizeof deps_levels / sizeof deps_levels[0]; i++) {
        int n = snprintf(cand, sizeof cand, "%s/%s%s", dir, deps_levels[i], DEPS_RUNSC);
        if (n > 0 && (size_t)n < sizeof cand && access(cand, X_OK) == 0)
            return realpath(cand, NULL);
    }
    return NULL;
}

char *sbx_find_runsc(const sandbox_settings *set, char *why, size_t whylen)
{
    if (set->runsc && *set->runsc) {
        char *found = sbx_find_program(set->runsc, NULL, "runsc");
        if (!found)
            snprintf(why, whylen, "runsc not found (%s)", set->runsc);
        return found;
    }
    char *self = sbx_self_dir();
    char *found = self ? find_deps_runsc(self) : NULL;
    free(self);
    if (!found)
        found = sbx_find_program(NULL, set->search_path, "runsc");
    if (!found)
        snprintf(why, whylen, "runsc not found (no " DEPS_RUNSC " beside airlockd, none on PATH; "
                              "run make deps, or set AIRLOCK_RUNSC or --runsc)");
    return found;
}
