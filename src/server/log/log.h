/* airlockd's one logger: every line goes through alog() with a level, and is written once, whole,
 * with its time, level, the node id (in a fleet) and the session/tenant it concerns. Text lines
 * by default, JSON lines with SANDBOX_LOG_FORMAT=json; lines below SANDBOX_LOG_LEVEL (default
 * info) are dropped before their arguments are evaluated (the macro tests the level first).
 * Never pass a secret (a key, a password, the fleet secret) to it. */
#ifndef AIRLOCKD_LOG_LOG_H
#define AIRLOCKD_LOG_LOG_H

#include <stdbool.h>

typedef enum { LV_ERROR = 0, LV_WARN = 1, LV_INFO = 2, LV_DEBUG = 3 } log_level;

typedef struct log_ctx {
    const char *session; /* a session id, or NULL */
    const char *tenant;  /* a tenant's name, or NULL */
} log_ctx;

/* Set once at start, before any thread logs. node_id may be NULL (one airlockd, no fleet);
 * the string must outlive the logger. */
void log_setup(log_level level, bool json, const char *node_id);

/* The level from its name ("error", "warn", "info", "debug"): 0, or -1 for another name. */
int log_level_parse(const char *name, log_level *out);

/* Whether a line at lvl is written now. */
bool log_enabled(log_level lvl);

/* Writes one line (use the macros below, which test the level first). */
void log_write(log_level lvl, const log_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes each line of text (lines separated by '\n', empty ones skipped) as a line of its own. */
void log_lines(log_level lvl, const char *text);

#define ALOG(lvl, ctx, ...)                                                                       \
    do {                                                                                          \
        if (log_enabled(lvl))                                                                     \
            log_write((lvl), (ctx), __VA_ARGS__);                                                 \
    } while (0)

/* The common forms: no session, or one session (and its tenant when known). */
#define log_error(...) ALOG(LV_ERROR, NULL, __VA_ARGS__)
#define log_warn(...) ALOG(LV_WARN, NULL, __VA_ARGS__)
#define log_info(...) ALOG(LV_INFO, NULL, __VA_ARGS__)
#define log_debug(...) ALOG(LV_DEBUG, NULL, __VA_ARGS__)
#define log_session(lvl, sid, tenant_name, ...)                                                   \
    ALOG((lvl), (&(log_ctx){.session = (sid), .tenant = (tenant_name)}), __VA_ARGS__)

#endif
