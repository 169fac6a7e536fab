/* The fleet's settings (docs/fleet.md): the database URL, which holds a password (from
 * --database, SANDBOX_DATABASE_URL or the file SANDBOX_DATABASE_URL_FILE names, never quoted
 * in a message), and how long a silent node keeps its sessions. */
#include "config/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_LOST_AFTER 120

/* The first line of file, trimmed, allocated into *out. */
static int read_url_file(const config_src *src, const char *var, const char *file, char **out)
{
    FILE *f = fopen(file, "r");
    char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    if (n == 0)
        return config_fail(src->err, var, file, "cannot read the database URL from this file");
    buf[n] = '\0';
    size_t start = 0;
    while (start < n && (buf[start] == ' ' || buf[start] == '\t'))
        start++;
    size_t end = start;
    while (end < n && buf[end] != '\n' && buf[end] != '\r' && buf[end] != ' ')
        end++;
    *out = strndup(buf + start, end - start);
    memset(buf, 0, sizeof buf);
    return *out ? 0 : config_fail(src->err, var, NULL, "out of memory");
}

int config_load_fleet(config *c, const config_src *src)
{
    const char *url = config_var(src, "SANDBOX_DATABASE_URL"), *file = config_var(src, "SANDBOX_DATABASE_URL_FILE");
    if (!c->database_url && url && !(c->database_url = strdup(url)))
        return config_fail(src->err, "SANDBOX_DATABASE_URL", NULL, "out of memory");
    if (!c->database_url && file && read_url_file(src, "SANDBOX_DATABASE_URL_FILE", file, &c->database_url))
        return -1;
    if (c->database_url && strncmp(c->database_url, "postgresql://", 13) != 0 &&
        strncmp(c->database_url, "postgres://", 11) != 0)
        return config_fail(src->err, "SANDBOX_DATABASE_URL", NULL, "must be a postgresql:// URL");
    return config_var_positive(src, "SANDBOX_FLEET_LOST_AFTER", DEFAULT_LOST_AFTER, &c->fleet_lost_after);
}
