/* airlockd's Prometheus counters: fixed tables of relaxed atomics (requests by route and
 * status, latency histograms, command outcomes, egress decisions, rate-limit refusals by
 * tenant, fleet errors), and their text exposition. */
#include "obs/metrics.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The statuses counted apart; any other is counted as "other". */
static const unsigned STATUSES[] = {0,   200, 201, 204, 206, 304, 307, 400, 401, 403, 404, 405, 408, 409,
                                    410, 411, 413, 414, 415, 416, 422, 429, 431, 500, 501, 502, 503, 504, 507};
#define N_STATUS (sizeof STATUSES / sizeof STATUSES[0] + 1)

/* Upper bounds (seconds) of the latency buckets: an exec takes from tens of milliseconds to
 * its 60 s limit, a file call from a millisecond to seconds. */
static const double BOUNDS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define N_BOUNDS (sizeof BOUNDS / sizeof BOUNDS[0])

static const char *const TIMED_NAMES[METRICS_TIMED_KINDS] = {"", "create", "exec", "file_write", "file_read",
                                                             "file_list"};
static const char *const OUTCOMES[METRICS_EXEC_OUTCOMES] = {"ok", "exit_nonzero", "timed_out", "oom_killed",
                                                            "cancelled", "error"};

typedef struct {
    char method[8];
    char pattern[96];
    metrics_timed timed;
} route_name;

typedef struct {
    atomic_ulong bucket[N_BOUNDS + 1]; /* each bucket's own count; cumulated when written */
    atomic_ulong count;
    atomic_ulong micros;               /* the sum, in microseconds */
} histogram;

/* Row METRICS_ROUTES_MAX: requests that matched no route, or rows past the table. */
static route_name routes[METRICS_ROUTES_MAX];
static unsigned nroutes;
static atomic_ulong requests[METRICS_ROUTES_MAX + 1][N_STATUS];
static histogram latency[METRICS_TIMED_KINDS];
static atomic_ulong exec_outcomes[METRICS_EXEC_OUTCOMES];
static atomic_long commands_running;
static atomic_ulong egress_decisions[2]; /* denied, allowed */
/* [kind][tenant]: kind 0 the request rate, 1 concurrent commands; tenant MAX: the rest */
static atomic_ulong refused[2][METRICS_TENANTS_MAX + 1];
static atomic_ulong db_errors;
static atomic_ulong sandboxes_started[2]; /* failed, started */
static atomic_llong heartbeat_ms; /* CLOCK_MONOTONIC ms of the last good heartbeat; 0: none */
static _Atomic double started_at;  /* epoch seconds */

#define RELAXED memory_order_relaxed

static long long mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void metrics_mark_start(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    atomic_store(&started_at, (double)t.tv_sec + (double)(t.tv_nsec / 1000000) / 1000.0);
}

void metrics_set_route(unsigned i, const char *method, const char *pattern, metrics_timed timed)
{
    if (i >= METRICS_ROUTES_MAX)
        return;
    route_name *r = &routes[i];
    snprintf(r->method, sizeof r->method, "%s", method);
    size_t n = 0;
    for (const char *p = pattern; *p && n + 5 < sizeof r->pattern; p++) {
        if (p[0] == '{' && p[1] == '}') { /* the path parameter: a session or key id */
            memcpy(r->pattern + n, "{id}", 4);
            n += 4;
            p++;
        } else {
            r->pattern[n++] = *p;
        }
    }
    r->pattern[n] = '\0';
    r->timed = timed;
    if (i + 1 > nroutes)
        nroutes = i + 1;
}

static size_t status_index(unsigned status)
{
    for (size_t i = 0; i < N_STATUS - 1; i++)
        if (STATUSES[i] == status)
            return i;
    return N_STATUS - 1;
}

void metrics_request(unsigned route, unsigned status, double seconds)
{
    unsigned row = route < METRICS_ROUTES_MAX ? route : METRICS_ROUTES_MAX;
    atomic_fetch_add_explicit(&requests[row][status_index(status)], 1, RELAXED);
    metrics_timed timed = row < METRICS_ROUTES_MAX ? routes[row].timed : METRICS_TIMED_NONE;
    if (timed == METRICS_TIMED_NONE || !(seconds >= 0))
        return;
    histogram *h = &latency[timed];
    size_t b = 0;
    while (b < N_BOUNDS && seconds > BOUNDS[b])
        b++;
    atomic_fetch_add_explicit(&h->bucket[b], 1, RELAXED);
    atomic_fetch_add_explicit(&h->count, 1, RELAXED);
    atomic_fetch_add_explicit(&h->micros, (unsigned long)llround(seconds * 1e6), RELAXED);
}

void metrics_exec_outcome(metrics_outcome o)
{
    if (o < METRICS_EXEC_OUTCOMES)
        atomic_fetch_add_explicit(&exec_outcomes[o], 1, RELAXED);
}

void metrics_commands_running(int delta)
{
    atomic_fetch_add_explicit(&commands_running, delta, RELAXED);
}

void metrics_egress(bool allowed)
{
    atomic_fetch_add_explicit(&egress_decisions[allowed ? 1 : 0], 1, RELAXED);
}

void metrics_rate_refused(size_t tenant, bool commands)
{
    size_t col = tenant < METRICS_TENANTS_MAX ? tenant : METRICS_TENANTS_MAX;
    atomic_fetch_add_explicit(&refused[commands ? 1 : 0][col], 1, RELAXED);
}

void metrics_sandbox_started(bool ok)
{
    atomic_fetch_add_explicit(&sandboxes_started[ok ? 1 : 0], 1, RELAXED);
}

void metrics_db_error(void)
{
    atomic_fetch_add_explicit(&db_errors, 1, RELAXED);
}

void metrics_heartbeat_ok(void)
{
    atomic_store_explicit(&heartbeat_ms, mono_ms(), RELAXED);
}

double metrics_heartbeat_age(void)
{
    long long at = atomic_load_explicit(&heartbeat_ms, RELAXED);
    return at ? (double)(mono_ms() - at) / 1000.0 : -1;
}

/* ---- the text format ----------------------------------------------------------------- */

void metrics_write_help(buffer *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void metrics_write_sample(buffer *b, const char *name, const char *labels, double value)
{
    if (value == floor(value) && fabs(value) < 1e15)
        buf_printf(b, "%s%s%s%s %lld\n", name, labels ? "{" : "", labels ? labels : "", labels ? "}" : "",
                   (long long)value);
    else
        buf_printf(b, "%s%s%s%s %.6f\n", name, labels ? "{" : "", labels ? labels : "", labels ? "}" : "", value);
}

void metrics_write_gauge(buffer *b, const char *name, const char *help, const char *labels, double value)
{
    metrics_write_help(b, name, "gauge", help);
    metrics_write_sample(b, name, labels, value);
}

/* A label value as the format wants it: backslash, double quote and newline escaped. */
static void escaped(char *out, size_t size, const char *s)
{
    size_t n = 0;
    for (; *s && n + 3 < size; s++) {
        if (*s == '\\' || *s == '"') {
            out[n++] = '\\';
            out[n++] = *s;
        } else if (*s == '\n') {
            out[n++] = '\\';
            out[n++] = 'n';
        } else {
            out[n++] = *s;
        }
    }
    out[n] = '\0';
}

static void write_requests(buffer *b)
{
    metrics_write_help(b, "airlockd_http_requests_total", "counter",
                       "HTTP requests answered, by method and route pattern (ids as {id}) and status code "
                       "(0: the client left before an answer)");
    for (unsigned row = 0; row <= METRICS_ROUTES_MAX; row++) {
        if (row < METRICS_ROUTES_MAX && row >= nroutes)
            continue;
        for (size_t st = 0; st < N_STATUS; st++) {
            unsigned long v = atomic_load_explicit(&requests[row][st], RELAXED);
            if (!v)
                continue;
            char code[16];
            if (st < N_STATUS - 1)
                snprintf(code, sizeof code, "%u", STATUSES[st]);
            else
                snprintf(code, sizeof code, "other");
            const route_name *rn = row < METRICS_ROUTES_MAX ? &routes[row] : NULL;
            buf_printf(b, "airlockd_http_requests_total{method=\"%s\",route=\"%s\",code=\"%s\"} %lu\n",
                       rn ? rn->method : "", rn ? rn->pattern : "unmatched", code, v);
        }
    }
}

static void write_latency(buffer *b)
{
    metrics_write_help(b, "airlockd_request_duration_seconds", "histogram",
                       "Time from a request's headers to the end of its answer, by call");
    for (int k = METRICS_TIMED_NONE + 1; k < METRICS_TIMED_KINDS; k++) {
        const histogram *h = &latency[k];
        unsigned long cum = 0;
        char labels[96];
        for (size_t i = 0; i <= N_BOUNDS; i++) {
            cum += atomic_load_explicit(&h->bucket[i], RELAXED);
            if (i < N_BOUNDS)
                snprintf(labels, sizeof labels, "call=\"%s\",le=\"%g\"", TIMED_NAMES[k], BOUNDS[i]);
            else
                snprintf(labels, sizeof labels, "call=\"%s\",le=\"+Inf\"", TIMED_NAMES[k]);
            metrics_write_sample(b, "airlockd_request_duration_seconds_bucket", labels, (double)cum);
        }
        snprintf(labels, sizeof labels, "call=\"%s\"", TIMED_NAMES[k]);
        /* the count is the +Inf bucket's: read once, so a scrape never shows them apart */
        metrics_write_sample(b, "airlockd_request_duration_seconds_sum", labels,
                             (double)atomic_load_explicit(&h->micros, RELAXED) / 1e6);
        metrics_write_sample(b, "airlockd_request_duration_seconds_count", labels, (double)cum);
    }
}

static void write_refusals(buffer *b, const char *(*tenant_name)(void *ctx, size_t i), void *ctx)
{
    metrics_write_help(b, "airlockd_rate_limit_refusals_total", "counter",
                       "Requests refused with 429, by tenant and limit (requests: the request rate; "
                       "commands: the concurrent commands)");
    for (int kind = 0; kind < 2; kind++) {
        for (size_t t = 0; t <= METRICS_TENANTS_MAX; t++) {
            unsigned long v = atomic_load_explicit(&refused[kind][t], RELAXED);
            if (!v)
                continue;
            const char *name = t < METRICS_TENANTS_MAX ? tenant_name(ctx, t) : "(other tenants)";
            if (!name)
                continue;
            char tenant[160], labels[224];
            escaped(tenant, sizeof tenant, name);
            snprintf(labels, sizeof labels, "tenant=\"%s\",limit=\"%s\"", tenant, kind ? "commands" : "requests");
            metrics_write_sample(b, "airlockd_rate_limit_refusals_total", labels, (double)v);
        }
    }
}

int metrics_write_counters(buffer *b, const char *(*tenant_name)(void *ctx, size_t i), void *ctx)
{
    metrics_write_gauge(b, "airlockd_start_time_seconds", "When this airlockd started serving (epoch seconds): its "
                        "counters count from then", NULL, atomic_load(&started_at));
    write_requests(b);
    write_latency(b);
    metrics_write_help(b, "airlockd_exec_total", "counter", "Commands (POST .../exec) ended, by outcome");
    for (int o = 0; o < METRICS_EXEC_OUTCOMES; o++) {
        char labels[48];
        snprintf(labels, sizeof labels, "outcome=\"%s\"", OUTCOMES[o]);
        metrics_write_sample(b, "airlockd_exec_total", labels, (double)atomic_load_explicit(&exec_outcomes[o], RELAXED));
    }
    metrics_write_gauge(b, "airlockd_commands_running", "Commands running now (POST .../exec)", NULL,
                        (double)atomic_load_explicit(&commands_running, RELAXED));
    metrics_write_help(b, "airlockd_egress_connections_total", "counter",
                       "Egress attempts through the sessions' proxies, by decision");
    metrics_write_sample(b, "airlockd_egress_connections_total", "decision=\"allow\"",
                         (double)atomic_load_explicit(&egress_decisions[1], RELAXED));
    metrics_write_sample(b, "airlockd_egress_connections_total", "decision=\"deny\"",
                         (double)atomic_load_explicit(&egress_decisions[0], RELAXED));
    metrics_write_help(b, "airlockd_sandboxes_started_total", "counter",
                       "Sandboxes started (a command's own, booted ahead, sessions' own), by result");
    metrics_write_sample(b, "airlockd_sandboxes_started_total", "result=\"ok\"",
                         (double)atomic_load_explicit(&sandboxes_started[1], RELAXED));
    metrics_write_sample(b, "airlockd_sandboxes_started_total", "result=\"failed\"",
                         (double)atomic_load_explicit(&sandboxes_started[0], RELAXED));
    write_refusals(b, tenant_name, ctx);
    return b->err ? -1 : 0;
}

unsigned long metrics_db_errors(void)
{
    return atomic_load_explicit(&db_errors, RELAXED);
}
