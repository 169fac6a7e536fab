/* airlockd's Prometheus counters (ours): what the server did since it started, counted where
 * it happens with relaxed atomics (no lock, no allocation: request paths call these), and
 * written in the Prometheus text format (0.0.4) when GET /metrics asks (api/metrics.c adds
 * the gauges it reads at that moment). One set per process. docs/server.md "Metrics" lists
 * every metric. */
#ifndef AIRLOCKD_OBS_METRICS_H
#define AIRLOCKD_OBS_METRICS_H

#include "util/buf.h"

#include <stdbool.h>
#include <stddef.h>

/* Routes counted apart (the route table's rows, api/routes.c); more share "other". */
#define METRICS_ROUTES_MAX 64
/* Tenants whose rate-limit refusals are counted apart; higher indexes share one line. */
#define METRICS_TENANTS_MAX 1024
/* A request that matched no route. */
#define METRICS_NO_ROUTE ((unsigned)-1)

/* The calls whose latency is a histogram. */
typedef enum {
    METRICS_TIMED_NONE = 0,
    METRICS_TIMED_CREATE,
    METRICS_TIMED_EXEC,
    METRICS_TIMED_FILE_WRITE,
    METRICS_TIMED_FILE_READ,
    METRICS_TIMED_FILE_LIST,
    METRICS_TIMED_KINDS
} metrics_timed;

/* How a command (POST .../exec) ended. */
typedef enum {
    METRICS_EXEC_OK,          /* exit code 0 */
    METRICS_EXEC_EXIT_NONZERO, /* ran to its end with another exit code (not the memory limit) */
    METRICS_EXEC_TIMED_OUT,
    METRICS_EXEC_OOM_KILLED,
    METRICS_EXEC_CANCELLED,   /* its client hung up, or the server stopped it */
    METRICS_EXEC_ERROR,       /* it could not be run (a sandbox failure: 500) */
    METRICS_EXEC_OUTCOMES
} metrics_outcome;

/* The server starts serving now (airlockd_start_time_seconds: where its counters began). */
void metrics_mark_start(void);

/* Names the routes once, before serving: method and pattern of row i ("{}" is written
 * "{id}"), and which histogram its latency goes to. */
void metrics_set_route(unsigned i, const char *method, const char *pattern, metrics_timed timed);

/* A request ended with status after seconds (route: its row, or METRICS_NO_ROUTE). */
void metrics_request(unsigned route, unsigned status, double seconds);

void metrics_exec_outcome(metrics_outcome o);
/* A command started (+1) or ended (-1). */
void metrics_commands_running(int delta);
/* An egress attempt was allowed or denied (every event of the sessions' egress logs). */
void metrics_egress(bool allowed);
/* A tenant's request was refused by its request rate (commands: by its concurrent commands). */
void metrics_rate_refused(size_t tenant, bool commands);
/* A sandbox was started (sandbox_prepare: booted, or booting ahead), or failed to start. */
void metrics_sandbox_started(bool ok);
/* A fleet's database statement failed (or the database could not be reached). */
void metrics_db_error(void);
/* This fleet node's heartbeat reached the database now. */
void metrics_heartbeat_ok(void);

/* Database errors so far (written with the fleet's gauges, api/metrics.c). */
unsigned long metrics_db_errors(void);

/* Seconds since the last heartbeat that reached the database; -1 when none yet. */
double metrics_heartbeat_age(void);

/* Appends the counters and histograms in the text format; tenant_name(ctx, i) names tenant
 * index i (NULL: skipped). 0, or -1 when out of memory (b->err). */
int metrics_write_counters(buffer *b, const char *(*tenant_name)(void *ctx, size_t i), void *ctx);

/* One gauge family of one sample: "# HELP", "# TYPE name gauge" and "name{labels} value"
 * (labels may be NULL). For several samples: metrics_write_help once, then metrics_write_sample. */
void metrics_write_gauge(buffer *b, const char *name, const char *help, const char *labels, double value);
void metrics_write_help(buffer *b, const char *name, const char *type, const char *help);
void metrics_write_sample(buffer *b, const char *name, const char *labels, double value);

#endif
