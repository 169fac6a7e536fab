/* The one logger (log.h): formats a whole line in memory, then writes it with one write(2) so
 * lines from several threads never interleave. */
#include "log/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 4096

static atomic_int current_level = LV_INFO;
static bool as_json;
static const char *node;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void log_setup(log_level level, bool json, const char *node_id)
{
    atomic_store(&current_level, (int)level);
    as_json = json;
    node = node_id && *node_id ? node_id : NULL;
}

int log_level_parse(const char *name, log_level *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (log_level)i;
            return 0;
        }
    }
    return -1;
}

bool log_enabled(log_level lvl)
{
    return (int)lvl <= atomic_load_explicit(&current_level, memory_order_relaxed);
}

/* The length of the valid UTF-8 sequence at s (1-4), or 0 when it is not one (a stray
 * continuation byte, an overlong form, a surrogate, past U+10FFFF, or cut short). */
static size_t utf8_seq(const unsigned char *s)
{
    unsigned c = s[0];
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (len == 0 || c < 0xC2 || c > 0xF4)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

/* Appends s to out[*n..cap) as a JSON string's content: quotes and controls escaped, a byte
 * that is not valid UTF-8 written as U+FFFD, so every line is valid JSON; stops before a
 * character that would not fit whole. */
static void put_json(char *out, size_t cap, size_t *n, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p && *n + 7 < cap) {
        unsigned char c = *p;
        if (c == '"' || c == '\\') {
            out[(*n)++] = '\\';
            out[(*n)++] = (char)c;
            p++;
        } else if (c < 0x20) {
            *n += (size_t)snprintf(out + *n, cap - *n, "\\u%04x", c);
            p++;
        } else if (c < 0x80) {
            out[(*n)++] = (char)c;
            p++;
        } else {
            size_t len = utf8_seq(p);
            if (len == 0) {
                memcpy(out + *n, "\\ufffd", 6);
                *n += 6;
                p++;
            } else {
                memcpy(out + *n, p, len);
                *n += len;
                p += len;
            }
        }
    }
}

/* Appends printf-formatted text, clamped to the buffer. */
static void put_fmt(char *out, size_t cap, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put_fmt(char *out, size_t cap, size_t *n, const char *fmt, ...)
{
    if (*n >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(out + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (w > 0)
        *n += (size_t)w < cap - *n ? (size_t)w : cap - *n - 1;
}

void log_write(log_level lvl, const log_ctx *ctx, const char *fmt, ...)
{
    char msg[LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t m = strlen(msg);
    while (m && msg[m - 1] == '\n') /* callers' own newlines: the line gets exactly one */
        msg[--m] = '\0';

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    size_t w = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + w, sizeof when - w, ".%03ldZ", ts.tv_nsec / 1000000);

    const char *lname = level_names[lvl <= LV_DEBUG ? lvl : LV_DEBUG];
    const char *sid = ctx ? ctx->session : NULL;
    const char *tenant = ctx ? ctx->tenant : NULL;
    char line[LOG_LINE_MAX + 512];
    size_t n = 0, cap = sizeof line - 2; /* room for the newline */
    if (as_json) {
        put_fmt(line, cap, &n, "{\"time\":\"%s\",\"level\":\"%s\"", when, lname);
        const char *keys[] = {"node", "session", "tenant", "msg"};
        const char *vals[] = {node, sid, tenant, msg};
        for (int i = 0; i < 4; i++) {
            if (!vals[i])
                continue;
            put_fmt(line, cap, &n, ",\"%s\":\"", keys[i]);
            put_json(line, cap, &n, vals[i]);
            put_fmt(line, cap, &n, "\"");
        }
        put_fmt(line, cap, &n, "}");
    } else {
        put_fmt(line, cap, &n, "%s %-5s airlockd", when, lname);
        if (node)
            put_fmt(line, cap, &n, " node=%s", node);
        if (tenant)
            put_fmt(line, cap, &n, " tenant=%s", tenant);
        if (sid)
            put_fmt(line, cap, &n, " session=%s", sid);
        put_fmt(line, cap, &n, ": %s", msg);
    }
    line[n++] = '\n';
    ssize_t done = 0;
    while ((size_t)done < n) {
        ssize_t k = write(STDERR_FILENO, line + done, n - (size_t)done);
        if (k <= 0)
            break;
        done += k;
    }
}

void log_lines(log_level lvl, const char *text)
{
    if (!text || !log_enabled(lvl))
        return;
    while (*text) {
        const char *end = strchr(text, '\n');
        size_t n = end ? (size_t)(end - text) : strlen(text);
        if (n > 0)
            log_write(lvl, NULL, "%.*s", n > LOG_LINE_MAX ? LOG_LINE_MAX : (int)n, text);
        text += n + (end ? 1 : 0);
    }
}
