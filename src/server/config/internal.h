/* Shared by the loaders of config/: where a setting's text comes from (the environment given
 * to config_load), and the "variable or its default" forms of the parsers. */
#ifndef AIRLOCKD_CONFIG_INTERNAL_H
#define AIRLOCKD_CONFIG_INTERNAL_H

#include "config/config.h"
#include "config/parse.h"

typedef struct {
    char *const *envp; /* "NAME=value" entries, NULL-terminated */
    config_err err;
} config_src;

/* The variable's value; NULL when it is unset or empty (both mean "the default"). */
const char *config_var(const config_src *src, const char *name);

/* The variable as a whole number in [lo, hi] of unit; def when unset. */
int config_var_whole(const config_src *src, const char *name, long def, long lo, long hi, const char *unit,
                     long *out);
/* The same as an int. */
int config_var_int(const config_src *src, const char *name, long def, long lo, long hi, const char *unit, int *out);
/* The variable as a whole number of MB in [lo, hi], in bytes; def_bytes when unset. */
int config_var_megabytes(const config_src *src, const char *name, long long def_bytes, long lo, long hi,
                         long long *bytes);
/* The variable as a decimal number > 0; def when unset. */
int config_var_positive(const config_src *src, const char *name, double def, double *out);
/* The variable as 1 or 0 (see config_switch); false when unset. */
int config_var_switch(const config_src *src, const char *name, const char *meaning_of_1, bool *out);

/* The sections, in the order config_load calls them. */
int config_load_flags(config *c, int argc, char **argv, config_err err, config_status *status);
int config_load_logging(config *c, const config_src *src);   /* the log level and format (first: errors use them) */
int config_load_fleet(config *c, const config_src *src);     /* the fleet's database (before the keys) */
int config_load_keys(config *c, const config_src *src);      /* API keys, key store, audit, admin key */
int config_load_server(config *c, const config_src *src);    /* sessions, http, capacity, warm, disk, import */
int config_load_sandbox(config *c, const config_src *src);   /* runsc, the waiter, PATH, gVisor required */
int config_load_policies(config *c, const config_src *src);  /* tenant limits and egress rules (JSON) */
int config_load_egress(egress_settings *s, const config_src *src);

#endif
