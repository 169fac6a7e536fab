/* The fleet's settings (docs/fleet.md): the database URL, which holds a password (from
 * --database, SANDBOX_DATABASE_URL or the file SANDBOX_DATABASE_URL_FILE names, never quoted
 * in a message), how long a silent node keeps its sessions, how long a drain's move may take,
 * how many sessions it holds at most, the port of its load report for HAProxy's agent-check
 * and the address of its node-to-node listener. */
#include "config/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_LOST_AFTER 120
#define DEFAULT_KEY_CACHE_S 2
#define DEFAULT_MOVE_TIMEOUT_S 300
#define MIN_SECRET 32

/* The first line of file, trimmed, allocated into *out. */
static int read_url_file(const config_src *src, const char *var, const char *file, char **out);

/* The fleet's secret for node-to-node moves: a file only its owner may read, of at least
 * MIN_SECRET characters (never quoted in a message). */
static int read_secret(config *c, const config_src *src)
{
    const char *file = config_var(src, "SANDBOX_FLEET_SECRET_FILE");
    if (!file)
        return 0;
    struct stat st;
    if (stat(file, &st) != 0 || (st.st_mode & 077))
        return config_fail(src->err, "SANDBOX_FLEET_SECRET_FILE", file, "must exist with mode 0600 (or stricter)");
    if (read_url_file(src, "SANDBOX_FLEET_SECRET_FILE", file, &c->fleet_secret))
        return -1;
    if (strlen(c->fleet_secret) < MIN_SECRET)
        return config_fail(src->err, "SANDBOX_FLEET_SECRET_FILE", file, "the secret must have at least 32 characters");
    return 0;
}

static int read_url_file(const config_src *src, const char *var, const char *file, char **out)
{
    FILE *f = fopen(file, "r");
    char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    if (n == 0)
        return config_fail(src->err, var, file, "cannot read this file");
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
    const char *internal = config_var(src, "SANDBOX_FLEET_INTERNAL_LISTEN");
    if (internal && config_host_port(src->err, "SANDBOX_FLEET_INTERNAL_LISTEN", internal, &c->fleet_internal_host,
                                     &c->fleet_internal_port))
        return -1;
    return read_secret(c, src) || config_var_positive(src, "SANDBOX_FLEET_LOST_AFTER", DEFAULT_LOST_AFTER, &c->fleet_lost_after) ||
           config_var_positive(src, "SANDBOX_FLEET_KEY_CACHE_S", DEFAULT_KEY_CACHE_S, &c->fleet_key_cache_s) ||
           config_var_int(src, "SANDBOX_FLEET_MOVE_TIMEOUT_S", DEFAULT_MOVE_TIMEOUT_S, 1, 86400, "seconds",
                          &c->fleet_move_timeout_s) ||
           config_var_int(src, "SANDBOX_FLEET_CAPACITY", 0, 0, 1000000, "sessions", &c->fleet_capacity) ||
           config_var_int(src, "SANDBOX_FLEET_AGENT_PORT", 0, 0, 65535, "port", &c->fleet_agent_port);
}
