/* Unit test of the per-session figures (src/server/domain/figures.c: running commands, their
 * count and last one, released sandboxes' usage by name) and of the Prometheus counters'
 * text (src/server/obs/metrics.c: routes, statuses, histograms, escaping). Built and run with
 * ASan/UBSan by spec/server/units_spec.lua. */
#include "domain/figures.h"
#include "obs/metrics.h"

#include "check.h"

#include <stdlib.h>
#include <string.h>

/* figures.c's clock (domain/sessions.c's in airlockd) */
double epoch_now(void);
double epoch_now(void)
{
    return 1000.5;
}

#define SID "sbx_0123456789ab"

static void test_commands(void)
{
    figures *f = figures_new();
    CHECK(figures_command_begin(f, "not-a-session", "true", 4) == 0);
    unsigned long a = figures_command_begin(f, SID, "sleep 1", 7);
    unsigned long b = figures_command_begin(f, SID, "sleep 2", 7);
    CHECK(a != 0 && b != 0 && a != b);
    figures_session s;
    figures_get(f, SID, &s);
    CHECK(s.running == 2 && s.commands_run == 0 && !s.has_last);
    CHECK(strcmp(s.run[0].command, "sleep 1") == 0 && strcmp(s.run[1].command, "sleep 2") == 0); /* oldest first */
    CHECK(s.run[0].started_at == 1000.5);
    figures_command_end(f, SID, a, 0);
    figures_command_end(f, SID, a, 5); /* ended already: nothing */
    figures_command_end(f, SID, 12345, 5);
    figures_get(f, SID, &s);
    CHECK(s.running == 1 && s.commands_run == 1 && s.has_last);
    CHECK(strcmp(s.last_command, "sleep 1") == 0 && s.last_exit_code == 0 && s.last_ended_at == 1000.5);
    figures_command_end(f, SID, b, -1);
    figures_get(f, SID, &s);
    CHECK(s.running == 0 && s.commands_run == 2 && s.last_exit_code == -1);
    /* more running than shown: the oldest FIGURES_RUNNING_MAX, oldest first */
    unsigned long t[FIGURES_RUNNING_MAX + 4];
    for (int i = 0; i < FIGURES_RUNNING_MAX + 4; i++) {
        char cmd[16];
        snprintf(cmd, sizeof cmd, "c%d", i);
        t[i] = figures_command_begin(f, SID, cmd, strlen(cmd));
    }
    figures_get(f, SID, &s);
    CHECK(s.running == FIGURES_RUNNING_MAX + 4);
    CHECK(strcmp(s.run[0].command, "c0") == 0);
    CHECK(strcmp(s.run[FIGURES_RUNNING_MAX - 1].command, "c15") == 0);
    for (int i = 0; i < FIGURES_RUNNING_MAX + 4; i++)
        figures_command_end(f, SID, t[i], 0);
    figures_get(f, SID, &s);
    CHECK(s.running == 0 && s.commands_run == 2 + FIGURES_RUNNING_MAX + 4);
    figures_free(f);
}

static void test_truncation(void)
{
    figures *f = figures_new();
    char cmd[600];
    for (size_t i = 0; i + 1 < sizeof cmd; i += 2)
        memcpy(cmd + i, "\xc3\xa9", 2); /* é */
    unsigned long t = figures_command_begin(f, SID, cmd, sizeof cmd - 1);
    figures_session s;
    figures_get(f, SID, &s);
    size_t n = strlen(s.run[0].command);
    CHECK(n < FIGURES_COMMAND_MAX && n % 2 == 0 && n >= FIGURES_COMMAND_MAX - 2); /* whole characters */
    figures_command_end(f, SID, t, 0);
    figures_free(f);
}

static void test_retire(void)
{
    figures *f = figures_new();
    sandbox_usage u = {.cpu_ns = 1500000000ull, .memory_peak_bytes = 50u << 20};
    figures_retire(f, SID "-7-1f-2", &u); /* no entry yet: a session that ran nothing */
    figures_session s;
    figures_get(f, SID, &s);
    CHECK(s.retired_cpu_ns == 0);
    figures_command_end(f, SID, figures_command_begin(f, SID, "x", 1), 0);
    figures_retire(f, SID "-7-1f-2", &u);
    u.memory_peak_bytes = 10u << 20;
    figures_retire(f, SID "-s-1f-3", &u);
    figures_retire(f, SID "X7", &u);          /* not "<id>-": another name */
    figures_retire(f, "sbx_0123456789", &u);  /* too short */
    figures_retire(f, "probe-1f-0", &u);
    figures_get(f, SID, &s);
    CHECK(s.retired_cpu_ns == 3000000000ull);
    CHECK(s.retired_peak_bytes == 50u << 20); /* the highest one, not a sum */
    figures_forget(f, SID);
    figures_get(f, SID, &s);
    CHECK(s.commands_run == 0 && s.retired_cpu_ns == 0);
    figures_forget(f, SID); /* twice: nothing */
    figures_free(f);
}

static const char *name_of(void *ctx, size_t i)
{
    (void)ctx;
    return i == 0 ? "acme" : i == 1 ? "we\"ird\\" : NULL;
}

static bool has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)); p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return true;
    return false;
}

static void test_metrics(void)
{
    metrics_set_route(0, "GET", "/healthz", METRICS_TIMED_NONE);
    metrics_set_route(1, "POST", "/v1/sessions/{}/exec", METRICS_TIMED_EXEC);
    metrics_request(0, 200, 0.001);
    metrics_request(0, 200, 0.001);
    metrics_request(1, 200, 0.02);
    metrics_request(1, 200, 3.0);
    metrics_request(1, 599, 100.0);
    metrics_request(METRICS_NO_ROUTE, 404, 0.001);
    metrics_exec_outcome(METRICS_EXEC_OK);
    metrics_exec_outcome(METRICS_EXEC_TIMED_OUT);
    metrics_commands_running(1);
    metrics_egress(false);
    metrics_rate_refused(0, false);
    metrics_rate_refused(1, true);
    metrics_rate_refused(1, true);
    metrics_rate_refused(2, false); /* unnamed: not written */
    CHECK(metrics_heartbeat_age() == -1);
    metrics_heartbeat_ok();
    CHECK(metrics_heartbeat_age() >= 0 && metrics_heartbeat_age() < 5);
    buffer b;
    buf_init(&b, 0);
    CHECK(metrics_write_counters(&b, name_of, NULL) == 0);
    metrics_write_gauge(&b, "airlockd_test", "A test", "a=\"b\"", 2.5);
    char *text = buf_take(&b, NULL);
    CHECK(text != NULL);
    if (!text)
        return;
    CHECK(has_line(text, "airlockd_http_requests_total{method=\"GET\",route=\"/healthz\",code=\"200\"} 2"));
    CHECK(has_line(text, "airlockd_http_requests_total{method=\"POST\",route=\"/v1/sessions/{id}/exec\",code=\"200\"} 2"));
    CHECK(has_line(text, "airlockd_http_requests_total{method=\"POST\",route=\"/v1/sessions/{id}/exec\",code=\"other\"} 1"));
    CHECK(has_line(text, "airlockd_http_requests_total{method=\"\",route=\"unmatched\",code=\"404\"} 1"));
    CHECK(has_line(text, "airlockd_request_duration_seconds_bucket{call=\"exec\",le=\"0.025\"} 1"));
    CHECK(has_line(text, "airlockd_request_duration_seconds_bucket{call=\"exec\",le=\"5\"} 2"));
    CHECK(has_line(text, "airlockd_request_duration_seconds_bucket{call=\"exec\",le=\"60\"} 2"));
    CHECK(has_line(text, "airlockd_request_duration_seconds_bucket{call=\"exec\",le=\"+Inf\"} 3"));
    CHECK(has_line(text, "airlockd_request_duration_seconds_count{call=\"exec\"} 3"));
    CHECK(has_line(text, "airlockd_request_duration_seconds_sum{call=\"exec\"} 103.020000"));
    CHECK(has_line(text, "airlockd_request_duration_seconds_count{call=\"create\"} 0"));
    CHECK(has_line(text, "airlockd_exec_total{outcome=\"ok\"} 1"));
    CHECK(has_line(text, "airlockd_exec_total{outcome=\"timed_out\"} 1"));
    CHECK(has_line(text, "airlockd_commands_running 1"));
    CHECK(has_line(text, "airlockd_egress_connections_total{decision=\"deny\"} 1"));
    CHECK(has_line(text, "airlockd_rate_limit_refusals_total{tenant=\"acme\",limit=\"requests\"} 1"));
    CHECK(has_line(text, "airlockd_rate_limit_refusals_total{tenant=\"we\\\"ird\\\\\",limit=\"commands\"} 2"));
    int refusal_lines = 0; /* the unnamed tenant's refusal is not written */
    for (const char *p = text; (p = strstr(p, "\nairlockd_rate_limit_refusals_total{")); p++)
        refusal_lines++;
    CHECK(refusal_lines == 2);
    CHECK(has_line(text, "# TYPE airlockd_request_duration_seconds histogram"));
    CHECK(has_line(text, "airlockd_test{a=\"b\"} 2.500000"));
    free(text);
}

int main(void)
{
    test_commands();
    test_truncation();
    test_retire();
    test_metrics();
    return CHECK_SUMMARY();
}
