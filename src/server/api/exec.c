/* POST /v1/sessions/{id}/exec (contract 1.7), plus ours: a host-wide slot (503 when none
 * frees in time), output kept within a budget (a warning says what was left out), and the
 * command killed when the client hangs up. Also ours, opt-in (docs/api.md "Streaming exec"):
 * "stream": true or Accept: application/x-ndjson answers with NDJSON events as the command
 * runs (api/exec_tap.c) ending in {"type":"result","result":<the plain answer>} or
 * {"type":"error","status":..,"detail":..}; "output_limit_bytes" lowers the kept budget;
 * "spill": true writes each whole stream to a file in the workspace. */
#include "api/handlers.h"

#include "api/exec_tap.h"

#include "domain/quota.h"
#include "log/log.h"
#include "obs/metrics.h"
#include "text/exec_format.h"
#include "text/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OOM_WARNING "Process killed by cgroups (Memory limit exceeded)."
#define KILLED_WARNING "Process was killed (exit 137, SIGKILL), most likely for exceeding the memory limit."
#define CANCEL_DETAIL "cancelled: the client disconnected"

/* Ours, after the contract's warnings: a stream longer than the output budget. */
static char *truncation_warning(const char *stream, unsigned long long total, unsigned long long omitted,
                                size_t limit)
{
    char *w = NULL;
    if (omitted && asprintf(&w, "Output truncated: %s had %llu bytes; %llu bytes from its middle were left out "
                                "(this server keeps %zu bytes of each stream).",
                            stream, total, omitted, limit) < 0)
        w = NULL;
    return w;
}

#define NDJSON "application/x-ndjson"

/* An error answer once the command's turn came: a final error event on a stream, else the
 * plain route's answer (500 plain text, else {"detail": ...}). */
static void send_failure(http_request *r, exec_tap *t, unsigned status, const char *detail)
{
    if (t->stream) {
        exec_tap_event(t, json_pack("{s:s,s:i,s:s}", "type", "error", "status", (int)status, "detail",
                                    detail ? detail : "Internal Server Error"));
    } else if (detail) {
        http_send_detail(r, status, detail);
    } else {
        http_send_500(r);
    }
}

/* Whether the client asked for the streaming form by its Accept header. */
static bool accepts_ndjson(const http_request *r)
{
    const char *accept = http_header(r, "accept");
    return accept && strstr(accept, NDJSON) != NULL;
}

/* Boots the sandbox for the session's next command (unless the session is gone: it would
 * only be forgotten again). */
static void want_next(app *a, session *s, const char *tenant, const char *root)
{
    if (!registry_removed(a->reg, s))
        warm_want(a->warm, s->id, s->workspace, tenant, &s->size, root);
}

/* SANDBOX_EXEC_MODE=session: in the session's own sandbox when it is ready; else (its boot
 * still under way, as after a create) in a sandbox booted ahead for it if there is one (a
 * spare's); else in the session's once booted; else (busy with a parallel command of the
 * session, none to be had) in a sandbox of its own, booted now. */
static int run_in_session(app *a, session *s, const sandbox_opts *so, const char *command, int timeout,
                          sandbox_result *res, char *errbuf, size_t errlen)
{
    int rc = warm_session_run(a->warm, s, so, command, timeout, false, res, errbuf, errlen);
    if (rc != 1)
        return rc;
    sandbox *ready = warm_take(a->warm, s->id, so->cancel_fd);
    if (ready) {
        sandbox_set_command(ready, so);
        rc = sandbox_run(ready, command, timeout, res, errbuf, errlen);
        bool retry = rc != 0 && sandbox_retry_cold(ready);
        sandbox_release(ready);
        if (!retry)
            return rc;
    }
    rc = warm_session_run(a->warm, s, so, command, timeout, true, res, errbuf, errlen);
    if (rc != 1)
        return rc;
    return sandbox_exec(a->sb, so, command, timeout, res, errbuf, errlen);
}

/* Runs the command in the session's sandbox booted ahead when it has one, and boots the next
 * one beside it (at a low CPU weight: a command is short next to a boot, and yields nothing);
 * else runs it cold first and boots the next one after, so that a cold command does not share
 * the CPU with a boot. Sessions with egress always run cold. */
static int run_command(app *a, session *s, const sandbox_opts *so, const char *command, int timeout,
                       sandbox_result *res, char *errbuf, size_t errlen)
{
    if (warm_sessions(a->warm) && !so->network)
        return run_in_session(a, s, so, command, timeout, res, errbuf, errlen);
    if (so->network || !a->warm)
        return sandbox_exec(a->sb, so, command, timeout, res, errbuf, errlen);
    sandbox *ready = warm_take(a->warm, s->id, so->cancel_fd);
    if (ready) {
        want_next(a, s, so->tenant, so->root_dir);
        sandbox_set_command(ready, so);
        int rc = sandbox_run(ready, command, timeout, res, errbuf, errlen);
        bool retry = rc != 0 && sandbox_retry_cold(ready);
        sandbox_release(ready);
        if (!retry)
            return rc;
        log_session(LV_WARN, s->id, so->tenant, "%s; running the command cold", errbuf);
    }
    int rc = sandbox_exec(a->sb, so, command, timeout, res, errbuf, errlen);
    if (!ready)
        want_next(a, s, so->tenant, so->root_dir);
    return rc;
}

/* What the body asks: the contract's command and timeout, and ours (streaming, the output
 * budget, spill files). */
typedef struct {
    const char *command;
    size_t command_len;
    long long timeout, output_limit;
    bool streamed, spill;
} exec_request;

/* How the exec ends, answered once the session is released: result (200), or status with
 * detail (NULL: the plain 500); exec_limit > 0 marks the tenant's concurrency refusal. */
typedef struct {
    unsigned status;
    const char *detail;
    char text[200];
    int exec_limit;
    json_t *result;
    bool recorded; /* its audit record was made (in a fleet: with its command's end) */
} exec_answer;

/* The body's fields into q; false when invalid (answered). */
static bool read_request(app *a, http_request *r, json_t *body, exec_request *q)
{
    json_t *errs = json_array();
    *q = (exec_request){.timeout = 15, .output_limit = (long long)a->cfg->output_limit};
    if (body_is_object(errs, body)) {
        v_string(errs, body, "command", true, 0, &q->command, &q->command_len);
        v_lax_int(errs, body, "timeout_seconds", 15, 1, 60, &q->timeout);
        /* ours */
        v_bool(errs, body, "stream", false, &q->streamed);
        v_lax_int(errs, body, "output_limit_bytes", q->output_limit, 16, q->output_limit, &q->output_limit);
        v_bool(errs, body, "spill", false, &q->spill);
    }
    if (send_if_invalid(r, errs))
        return false;
    q->streamed = q->streamed || accepts_ndjson(r);
    return true;
}

static void answer_error(exec_answer *ans, unsigned status, const char *detail)
{
    ans->status = status;
    ans->detail = detail;
}

/* The command's turn: one of the tenant's concurrent commands, then one of the server's
 * slots (waiting for one up to the queue time; a client hanging up gives up). false with
 * the refusal in ans and nothing held. */
static bool take_turn(app *a, size_t tenant, const exec_request *q, int cancel_fd, exec_answer *ans)
{
    if (!limits_exec_begin(a->lim, tenant)) {
        metrics_rate_refused(tenant, true);
        ans->exec_limit = tenants_get(a->tenants, tenant)->max_concurrent_exec;
        answer_error(ans, 429, NULL);
        return false;
    }
    if (memchr(q->command, '\0', q->command_len)) {
        /* a NUL can't be passed to bash -c; the reference fails in Docker the same way */
        limits_exec_end(a->lim, tenant);
        answer_error(ans, 500, NULL);
        return false;
    }
    slot_result sr = slots_acquire(a->slots, tenant, cancel_fd);
    if (sr == SLOT_OK)
        return true;
    limits_exec_end(a->lim, tenant);
    if (sr == SLOT_BUSY) {
        snprintf(ans->text, sizeof ans->text, "All %d command slots of this server are in use; try again shortly.",
                 slots_max(a->slots));
        answer_error(ans, 503, ans->text);
    } else {
        answer_error(ans, 500, NULL); /* cancelled: the client is gone */
    }
    return false;
}

static void give_turn_back(app *a, size_t tenant)
{
    slots_release(a->slots, tenant);
    limits_exec_end(a->lim, tenant);
}

static int run_on_root(app *a, session *s, const tenant_cfg *t, const exec_request *q, sandbox_opts *so_in,
                       sandbox_result *res, char *errbuf, size_t errlen);

/* The command in a sandbox of the session: its spill files, its network (a session with
 * egress rules gets one whose only endpoint is the proxy), the run. 0, or -1 with errbuf. */
static int run_in_sandbox(app *a, session *s, const tenant_cfg *t, const exec_request *q, exec_tap *tap,
                          const char *name, const char *spill_id, int cancel_fd, sandbox_result *res, char *errbuf,
                          size_t errlen)
{
    if (q->spill && exec_tap_spill(tap, s->workspace, spill_id, s->quota_bytes, errbuf, errlen) != 0)
        return -1;
    /* ours: a session on a template runs on its root (kept while the session lives) */
    char *root = s->template_id[0] ? templates_root(a->templates, s->template_id) : NULL;
    if (s->template_id[0] && !root) {
        snprintf(errbuf, errlen, "the session's template %s is not there any more", s->template_id);
        return -1;
    }
    sandbox_opts so = {.workspace_dir = s->workspace, .name = name, .tenant = t->name,
                       .output_limit = (size_t)q->output_limit, .cancel_fd = cancel_fd,
                       .tap = tap->stream || q->spill ? &tap->tap : NULL, .size = s->size, .root_dir = root};
    int rc = run_on_root(a, s, t, q, &so, res, errbuf, errlen);
    free(root);
    return rc;
}

/* run_in_sandbox's run with the options so (its root chosen). */
static int run_on_root(app *a, session *s, const tenant_cfg *t, const exec_request *q, sandbox_opts *so_in,
                       sandbox_result *res, char *errbuf, size_t errlen)
{
    sandbox_opts so = *so_in;
    /* SANDBOX_EXEC_MODE=session with egress: in the session's own sandbox, which has the
     * session's network; else in a sandbox of its own with a network made for it */
    if (json_array_size(s->egress) > 0 && warm_sessions(a->warm)) {
        int rc = warm_session_run(a->warm, s, &so, q->command, (int)q->timeout, true, res, errbuf, errlen);
        if (rc != 1)
            return rc;
    }
    egress_sandbox *net = NULL;
    if (json_array_size(s->egress) > 0 &&
        !(net = egress_sandbox_open(a->egress, s->id, t->name, s->created_at, s->egress, NULL, errbuf, errlen)))
        return -1;
    if (net && registry_removed(a->reg, s)) /* deleted meanwhile: its egress ends now */
        egress_forget_session(a->egress, s->id);
    so.network = net ? egress_sandbox_network(net) : NULL;
    int rc = run_command(a, s, &so, q->command, (int)q->timeout, res, errbuf, errlen);
    egress_sandbox_close(a->egress, net);
    return rc;
}

/* The kept output of a finished command, decoded, and the warnings the contract gives (and
 * ours: output left out, a spill file stopped short). */
typedef struct {
    char *out, *err;
    size_t out_len, err_len;
    const char *warnings[6];
    size_t nw;
    char timeout_warn[64];
    char *quota_warn, *out_warn, *err_warn;
    int exit_code;
    bool timed_out, oom;
} exec_output;

static void collect_output(const session *s, const exec_request *q, const exec_tap *tap, const sandbox_result *res,
                           exec_output *o)
{
    memset(o, 0, sizeof *o);
    o->exit_code = res->exit_code;
    o->timed_out = res->timed_out;
    if (o->timed_out) {
        /* the reference discards output produced before the timeout */
        o->out = strdup("");
        o->err = strdup("");
        o->exit_code = -1;
        snprintf(o->timeout_warn, sizeof o->timeout_warn, "Execution exceeded %llds limit.", q->timeout);
        o->warnings[o->nw++] = o->timeout_warn;
    } else {
        o->out = utf8_replace(res->out ? res->out : "", res->out ? res->out_len : 0, &o->out_len);
        o->err = utf8_replace(res->err ? res->err : "", res->err ? res->err_len : 0, &o->err_len);
        o->oom = res->oom_killed;
        if (o->oom)
            o->warnings[o->nw++] = OOM_WARNING;
        else if (o->exit_code == 137)
            o->warnings[o->nw++] = KILLED_WARNING;
        char *extra[] = {o->quota_warn = quota_exec_warning(s->workspace, s->quota_bytes),
                         o->out_warn = truncation_warning("stdout", res->out_total, res->out_omitted,
                                                          (size_t)q->output_limit),
                         o->err_warn = truncation_warning("stderr", res->err_total, res->err_omitted,
                                                          (size_t)q->output_limit)};
        for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
            if (extra[i])
                o->warnings[o->nw++] = extra[i];
    }
    if (tap->spill_warning)
        o->warnings[o->nw++] = tap->spill_warning;
}

static void free_output(exec_output *o)
{
    free(o->out);
    free(o->err);
    free(o->quota_warn);
    free(o->out_warn);
    free(o->err_warn);
}

/* The contract's result object (and ours: the spill files); NULL when out of memory. */
static json_t *result_json(const exec_request *q, const exec_tap *tap, const exec_output *o)
{
    size_t output_len = 0;
    char *output = o->out && o->err ? exec_format_output(o->out, o->out_len, o->err, o->err_len, o->warnings, o->nw,
                                                         o->exit_code, o->timed_out, &output_len)
                                    : NULL;
    if (!output)
        return NULL;
    json_t *w = json_array();
    for (size_t i = 0; i < o->nw; i++)
        json_array_append_new(w, json_string(o->warnings[i]));
    json_t *result = json_pack("{s:s%,s:o,s:o,s:o,s:i,s:b,s:b,s:o}",
                               "command", q->command, q->command_len,
                               "output", json_stringn_nocheck(output, output_len),
                               "stdout", json_stringn_nocheck(o->out, o->out_len),
                               "stderr", json_stringn_nocheck(o->err, o->err_len),
                               "exit_code", o->exit_code, "timed_out", o->timed_out,
                               "oom_killed", o->oom, "warnings", w);
    free(output);
    if (result && q->spill) { /* ours, after the contract's fields */
        json_object_set_new(result, "stdout_file", json_string(tap->spill_path[1]));
        json_object_set_new(result, "stderr_file", json_string(tap->spill_path[2]));
    }
    return result;
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double d = (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
    return (double)(long long)(d * 1000.0 + 0.5) / 1000.0; /* to the millisecond */
}

/* A finished (or stopped) command: its audit record and its answer. */
static void finish(app *a, const api_call *c, session *s, const exec_request *q, const exec_tap *tap,
                   const sandbox_result *res, double duration_s, exec_answer *ans)
{
    const tenant_cfg *t = tenants_get(a->tenants, c->tenant);
    audit_entry ae = {.tenant = t->name, .session_id = s->id, .actor = c->actor, .kind = "exec",
                      .command = q->command, .has_duration = true, .duration_s = duration_s};
    if (res->cancelled) {
        /* the client hung up (nobody reads this answer) or the server is stopping (503) */
        log_session(LV_INFO, s->id, t->name, "exec in %s stopped: its client hung up or the server is stopping", s->id);
        ae.detail = CANCEL_DETAIL;
        (void)api_audit_record(a, &ae); /* nobody reads the answer (or it is a 503) */
        ans->recorded = true;
        answer_error(ans, 503, "The command was stopped before it finished.");
        return;
    }
    exec_output o;
    collect_output(s, q, tap, res, &o);
    ae.has_exit_code = true;
    ae.exit_code = o.exit_code;
    ae.timed_out = o.timed_out;
    ae.oom_killed = o.oom;
    ans->recorded = true;
    if (api_audit_record(a, &ae) != 0) { /* never acknowledged without its record */
        snprintf(ans->text, sizeof ans->text, "The command ran (exit code %d) but its audit record could not be "
                                              "saved: the server's storage is full or failing.", o.exit_code);
        answer_error(ans, 507, ans->text);
    } else if (!(ans->result = result_json(q, tap, &o))) {
        answer_error(ans, 500, NULL);
    }
    free_output(&o);
}

/* How a command ended, for the metrics. */
static metrics_outcome outcome_of(int rc, const sandbox_result *res)
{
    if (rc != 0)
        return METRICS_EXEC_ERROR;
    if (res->cancelled)
        return METRICS_EXEC_CANCELLED;
    if (res->timed_out)
        return METRICS_EXEC_TIMED_OUT;
    if (res->oom_killed)
        return METRICS_EXEC_OOM_KILLED;
    return res->exit_code == 0 ? METRICS_EXEC_OK : METRICS_EXEC_EXIT_NONZERO;
}

/* Everything that needs the session: the turn, the run, the audit record. The streamed answer
 * starts once the command has its turn: earlier refusals are plain. */
static void exec_in_session(app *a, http_request *r, const api_call *c, session *s, const exec_request *q,
                            exec_tap *tap, exec_answer *ans)
{
    /* the command dies as soon as its client hangs up: its slot is free for the next one */
    int cancel_fd = http_client_fd(r);
    if (!take_turn(a, c->tenant, q, cancel_fd, ans))
        return;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long seq = (unsigned long)atomic_fetch_add(&a->exec_seq, 1);
    char name[64], spill_id[48], errbuf[512] = "";
    snprintf(name, sizeof name, "%s-%lu", s->id, seq);
    snprintf(spill_id, sizeof spill_id, "%lld-%lu", (long long)time(NULL), seq);
    if (q->streamed)
        exec_tap_init(tap, http_stream_begin(r, NDJSON, EXEC_STREAM_QUEUE, (unsigned)q->timeout + 60));
    if (tap->stream)
        cancel_fd = http_stream_cancel_fd(tap->stream);
    sandbox_result res;
    memset(&res, 0, sizeof res);
    unsigned long shown = figures_command_begin(a->figures, s->id, q->command, q->command_len);
    metrics_commands_running(1);
    int rc = run_in_sandbox(a, s, tenants_get(a->tenants, c->tenant), q, tap, name, spill_id, cancel_fd, &res,
                            errbuf, sizeof errbuf);
    double duration_s = seconds_since(&t0);
    metrics_commands_running(-1);
    metrics_exec_outcome(outcome_of(rc, &res));
    give_turn_back(a, c->tenant);
    figures_command_end(a->figures, s->id, shown, rc != 0 || res.timed_out || res.cancelled ? -1 : res.exit_code);
    if (registry_removed(a->reg, s)) /* deleted meanwhile: its figures went before this command's */
        figures_forget(a->figures, s->id);
    if (rc != 0) {
        log_session(LV_ERROR, s->id, tenants_get(a->tenants, c->tenant)->name, "exec in %s failed: %s", s->id, errbuf);
        answer_error(ans, 500, NULL);
    } else {
        finish(a, c, s, q, tap, &res, duration_s, ans);
    }
    sandbox_result_free(&res);
}

static void send_answer(http_request *r, exec_tap *tap, exec_answer *ans)
{
    if (ans->exec_limit > 0) {
        api_send_exec_limit(r, ans->exec_limit);
    } else if (!ans->result) {
        send_failure(r, tap, ans->status, ans->detail);
    } else if (tap->stream) {
        exec_tap_flush(tap);
        exec_tap_event(tap, json_pack("{s:s,s:o}", "type", "result", "result", ans->result));
    } else {
        http_send_json(r, 200, ans->result);
    }
}

void api_exec(app *a, http_request *r, const api_call *c)
{
    exec_request q;
    if (!read_request(a, r, c->body, &q))
        return;
    session *s = acquire_audited_session(a, r, c, "The command's audit record"); /* no command runs unaudited */
    if (!s)
        return;
    exec_tap tap;
    exec_tap_init(&tap, NULL);
    exec_answer ans = {.status = 500};
    exec_in_session(a, r, c, s, &q, &tap, &ans);
    if (!ans.recorded) /* a command that took its turn and ran not: its end is shipped alone */
        api_commands_ended(a);
    registry_release(a->reg, s); /* the one release, before the answer */
    send_answer(r, &tap, &ans);
    exec_tap_close(&tap);
}
