/* The environment given to config_load, read by name, and each parser's "the variable, or its
 * default when unset" form (config/internal.h). */
#include "config/internal.h"

#include <string.h>

const char *config_var(const config_src *src, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = src->envp; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return (*e)[n + 1] ? *e + n + 1 : NULL; /* the first, as getenv */
    return NULL;
}

int config_var_whole(const config_src *src, const char *name, long def, long lo, long hi, const char *unit,
                     long *out)
{
    const char *s = config_var(src, name);
    *out = def;
    return s ? config_whole(src->err, name, s, lo, hi, unit, out) : 0;
}

int config_var_int(const config_src *src, const char *name, long def, long lo, long hi, const char *unit, int *out)
{
    long v;
    if (config_var_whole(src, name, def, lo, hi, unit, &v))
        return -1;
    *out = (int)v;
    return 0;
}

int config_var_megabytes(const config_src *src, const char *name, long long def_bytes, long lo, long hi,
                         long long *bytes)
{
    const char *s = config_var(src, name);
    *bytes = def_bytes;
    return s ? config_megabytes(src->err, name, s, lo, hi, bytes) : 0;
}

int config_var_positive(const config_src *src, const char *name, double def, double *out)
{
    const char *s = config_var(src, name);
    *out = def;
    return s ? config_positive(src->err, name, s, out) : 0;
}

int config_var_switch(const config_src *src, const char *name, const char *meaning_of_1, bool *out)
{
    const char *s = config_var(src, name);
    *out = false;
    return s ? config_switch(src->err, name, s, meaning_of_1, out) : 0;
}
