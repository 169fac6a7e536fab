/* One parser per kind of setting value (whole number in bounds, megabytes, positive number,
 * 0/1 switch, choice, comma list, HOST:PORT, sqlite:<path>, http(s) URL). Each takes the setting's
 * name (a variable or a flag) and its text, and on a bad value writes "NAME: what was wrong"
 * to err and returns -1; the text is quoted back unless the setting is a secret (a key). No
 * parser reads the environment: config/env.c hands them the text. */
#ifndef AIRLOCKD_CONFIG_PARSE_H
#define AIRLOCKD_CONFIG_PARSE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *buf;
    size_t len;
} config_err;

/* true for settings whose value is never quoted in an error (API and admin keys) */
bool config_is_secret(const char *name);

/* Writes "NAME: <what>" (and ", got '<text>'" when text is given and name not a secret);
 * returns -1. */
int config_fail(config_err e, const char *name, const char *text, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A whole number in [lo, hi], spaces around it allowed; unit names what it counts in the
 * message ("whole number of <unit> from lo to hi"). */
int config_whole(config_err e, const char *name, const char *text, long lo, long hi, const char *unit, long *out);

/* A whole number of MB in [lo, hi], as bytes. */
int config_megabytes(config_err e, const char *name, const char *text, long lo, long hi, long long *bytes);

/* A decimal number > 0 (e.g. seconds, or MB of a quota). */
int config_positive(config_err e, const char *name, const char *text, double *out);

/* "1" or "0"; meaning_of_1 says what 1 does ("must be 1 (<meaning>) or 0"); NULL: plain. */
int config_switch(config_err e, const char *name, const char *text, const char *meaning_of_1, bool *out);

/* One of choices (NULL-terminated): *out is its index. */
int config_choice(config_err e, const char *name, const char *text, const char *const *choices, int *out);

/* Calls item(ctx, start, len) for each comma-separated entry with the spaces around it
 * trimmed and empty entries skipped; stops at the first item returning non-zero. */
int config_list(const char *text, int (*item)(void *ctx, const char *s, size_t n), void *ctx);

/* HOST:PORT ("[v6]:PORT" too; an empty host is 127.0.0.1; port 0-65535). *host is
 * allocated. */
int config_host_port(config_err e, const char *name, const char *text, char **host, unsigned *port);

/* "sqlite:<path>" -> an allocated copy of the path. */
int config_sqlite(config_err e, const char *name, const char *text, char **path);

/* An http:// or https:// URL. */
int config_http_url(config_err e, const char *name, const char *text);

#endif
