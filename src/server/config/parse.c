/* The setting value parsers (config/parse.h): one per kind, each naming the setting and what
 * was wrong, never quoting a secret. */
#include "config/parse.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The settings holding keys (or a fleet's database password): their text never appears in
 * an error or a log. */
static const char *const secrets[] = {"SANDBOX_API_KEYS", "SANDBOX_API_KEY", "SANDBOX_ADMIN_KEY",
                                      "SANDBOX_DATABASE_URL", "SANDBOX_DATABASE_URL_FILE", "--database"};

bool config_is_secret(const char *name)
{
    for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
        if (strcmp(name, secrets[i]) == 0)
            return true;
    return false;
}

int config_fail(config_err e, const char *name, const char *text, const char *fmt, ...)
{
    int n = snprintf(e.buf, e.len, "%s: ", name);
    size_t used = n > 0 && (size_t)n < e.len ? (size_t)n : e.len;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(e.buf + used, e.len - used, fmt, ap);
    va_end(ap);
    used = n > 0 && used + (size_t)n < e.len ? used + (size_t)n : e.len;
    if (text && !config_is_secret(name) && used < e.len)
        snprintf(e.buf + used, e.len - used, ", got '%s'", text);
    return -1;
}

static bool only_spaces(const char *s)
{
    while (*s == ' ')
        s++;
    return *s == '\0';
}

int config_whole(config_err e, const char *name, const char *text, long lo, long hi, const char *unit, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || !only_spaces(end) || v < lo || v > hi)
        return config_fail(e, name, text, "must be a whole number of %s from %ld to %ld", unit, lo, hi);
    *out = v;
    return 0;
}

int config_megabytes(config_err e, const char *name, const char *text, long lo, long hi, long long *bytes)
{
    long mb;
    if (config_whole(e, name, text, lo, hi, "MB", &mb))
        return -1;
    *bytes = (long long)mb * 1048576LL;
    return 0;
}

int config_positive(config_err e, const char *name, const char *text, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(text, &end);
    if (errno || end == text || !only_spaces(end) || !(d < 1e300) || d <= 0)
        return config_fail(e, name, text, "must be a positive number");
    *out = d;
    return 0;
}

int config_switch(config_err e, const char *name, const char *text, const char *meaning_of_1, bool *out)
{
    if (strcmp(text, "1") != 0 && strcmp(text, "0") != 0)
        return meaning_of_1 ? config_fail(e, name, text, "must be 1 (%s) or 0", meaning_of_1)
                            : config_fail(e, name, text, "must be 1 or 0");
    *out = text[0] == '1';
    return 0;
}

int config_choice(config_err e, const char *name, const char *text, const char *const *choices, int *out)
{
    char list[256] = "";
    for (int i = 0; choices[i]; i++) {
        if (strcmp(text, choices[i]) == 0) {
            *out = i;
            return 0;
        }
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", choices[i]);
    }
    return config_fail(e, name, text, "must be one of %s", list);
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int config_list(const char *text, int (*item)(void *ctx, const char *s, size_t n), void *ctx)
{
    for (const char *p = text; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        const char *s = p;
        while (n && is_space(*s)) {
            s++;
            n--;
        }
        while (n && is_space(s[n - 1]))
            n--;
        if (n) {
            int rc = item(ctx, s, n);
            if (rc)
                return rc;
        }
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

int config_host_port(config_err e, const char *name, const char *text, char **host, unsigned *port)
{
    const char *colon = strrchr(text, ':');
    char *end;
    errno = 0;
    unsigned long p = colon ? strtoul(colon + 1, &end, 10) : 0;
    if (!colon || errno || *end || colon[1] == '\0' || colon[1] == '-' || p > 65535)
        return config_fail(e, name, NULL, "expected HOST:PORT, got '%s'", text);
    const char *h = text;
    size_t hl = (size_t)(colon - text);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') { /* [::1]:8000 */
        h++;
        hl -= 2;
    }
    *host = hl ? strndup(h, hl) : strdup("127.0.0.1");
    if (!*host)
        return config_fail(e, name, NULL, "out of memory");
    *port = (unsigned)p;
    return 0;
}

int config_sqlite(config_err e, const char *name, const char *text, char **path)
{
    if (strncmp(text, "sqlite:", 7) != 0 || !text[7])
        return config_fail(e, name, text, "expected sqlite:<path> (the only backend airlockd has)");
    *path = strdup(text + 7);
    return *path ? 0 : config_fail(e, name, NULL, "out of memory");
}

int config_http_url(config_err e, const char *name, const char *text)
{
    if (strncmp(text, "http://", 7) != 0 && strncmp(text, "https://", 8) != 0)
        return config_fail(e, name, text, "must be an http:// or https:// URL");
    return 0;
}
