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

/* Answers a command that did not get one of the server's slots. */
static void send_no_slot(app *a, http_request *r, slot_result sr)
{
    if (sr == SLOT_BUSY) {
        char msg[128];
        snprintf(msg, sizeof msg, "All %d command slots of this server are in use; try again shortly.",
                 slots_max(a->slots));
        http_send_detail(r, 503, msg);
    } else {
        http_send_500(r); /* cancelled: the client is gone */
    }
}

/* Boots the sandbox for the session's next command (unless the session is gone: it would
 * only be forgotten again). */
static void want_next(app *a, session *s, const char *tenant)
{
    if (!registry_removed(a->reg, s))
        warm_want(a->warm, s->id, s->workspace, tenant);
}

/* Runs the command in the session's sandbox booted ahead when it has one, and boots the next
 * one beside it (at a low CPU weight: a command is short next to a boot, and yields nothing);
 * else runs it cold first and boots the next one after, so that a cold command does not share
 * the CPU with a boot. Sessions with egress always run cold. */
static int run_command(app *a, session *s, const sandbox_opts *so, const char *command, int timeout,
                       sandbox_result *res, char *errbuf, size_t errlen)
{
    if (so->network || !a->warm)
        return sandbox_exec(a->sb, so, command, timeout, res, errbuf, errlen);
    sandbox *ready = warm_take(a->warm, s->id, so->cancel_fd);
    if (ready) {
        want_next(a, s, so->tenant);
        sandbox_set_command(ready, so);
        int rc = sandbox_run(ready, command, timeout, res, errbuf, errlen);
        bool retry = rc != 0 && sandbox_retry_cold(ready);
        sandbox_release(ready);
        if (!retry)
            return rc;
        fprintf(stderr, "airlockd: %s; running the command cold\n", errbuf);
    }
    int rc = sandbox_exec(a->sb, so, command, timeout, res, errbuf, errlen);
    if (!ready)
        want_next(a, s, so->tenant);
    return rc;
}

void api_exec(app *a, http_request *r, const api_call *c)
{
    size_t tenant = c->tenant;
    json_t *body = c->body;
    json_t *errs = json_array();
    const char *command = NULL;
    size_t command_len = 0;
    long long timeout = 15, output_limit = (long long)a->cfg->output_limit;
    bool streamed = false, spill = false;
    if (body_is_object(errs, body)) {
        v_string(errs, body, "command", true, 0, &command, &command_len);
        v_lax_int(errs, body, "timeout_seconds", 15, 1, 60, &timeout);
        /* ours */
        v_bool(errs, body, "stream", false, &streamed);
        v_lax_int(errs, body, "output_limit_bytes", output_limit, 16, output_limit, &output_limit);
        v_bool(errs, body, "spill", false, &spill);
    }
    if (send_if_invalid(r, errs))
        return;
    streamed = streamed || accepts_ndjson(r);
    session *s = acquire_session(a, r, c);
    if (!s)
        return;
    const tenant_cfg *t = tenants_get(a->tenants, tenant);
    if (!limits_exec_begin(a->lim, tenant)) {
        char msg[128], limit[16];
        snprintf(msg, sizeof msg, "Too many commands running at once: %d allowed. Wait for one to finish.",
                 t->max_concurrent_exec);
        snprintf(limit, sizeof limit, "%d", t->max_concurrent_exec);   /* the SDK reads the number here */
        http_send_json_header(r, 429, json_pack("{s:s}", "detail", msg), "x-airlock-exec-limit", limit);
        registry_release(a->reg, s);
        return;
    }
    if (memchr(command, '\0', command_len)) {
        /* a NUL can't be passed to bash -c; the reference fails in Docker the same way */
        limits_exec_end(a->lim, tenant);
        registry_release(a->reg, s);
        http_send_500(r);
        return;
    }
    /* the command dies as soon as its client hangs up: its slot is free for the next one */
    int cancel_fd = http_client_fd(r);
    slot_result sr = slots_acquire(a->slots, tenant, cancel_fd);
    if (sr != SLOT_OK) {
        limits_exec_end(a->lim, tenant);
        registry_release(a->reg, s);
        send_no_slot(a, r, sr);
        return;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char name[64], errbuf[512] = "";
    unsigned long seq = (unsigned long)atomic_fetch_add(&a->exec_seq, 1);
    snprintf(name, sizeof name, "%s-%lu", s->id, seq);
    /* the streamed answer starts once the command has its turn: earlier refusals are plain */
    exec_tap tap;
    exec_tap_init(&tap, streamed ? http_stream_begin(r, NDJSON, EXEC_STREAM_QUEUE, (unsigned)timeout + 60) : NULL);
    if (tap.stream)
        cancel_fd = http_stream_cancel_fd(tap.stream);
    char spill_id[48];
    snprintf(spill_id, sizeof spill_id, "%lld-%lu", (long long)time(NULL), seq);
    int rc = -1; /* no network when one was due, no spill file: errbuf says why */
    bool spill_ok = !spill || exec_tap_spill(&tap, s->workspace, spill_id, s->quota_bytes, errbuf, sizeof errbuf) == 0;
    sandbox_result res;
    memset(&res, 0, sizeof res);
    /* a session with egress rules gets a network whose only endpoint is the proxy */
    bool wants_net = json_array_size(s->egress) > 0;
    egress_sandbox *net = NULL;
    if (wants_net && spill_ok)
        net = egress_sandbox_open(a->egress, s->id, t->name, s->created_at, s->egress, errbuf, sizeof errbuf);
    if (spill_ok && (net || !wants_net)) {
        if (net && registry_removed(a->reg, s)) /* deleted meanwhile: its egress ends now */
            egress_forget_session(a->egress, s->id);
        sandbox_opts so = {.workspace_dir = s->workspace, .name = name, .tenant = t->name,
                           .output_limit = (size_t)output_limit, .cancel_fd = cancel_fd,
                           .network = net ? egress_sandbox_network(net) : NULL,
                           .tap = tap.stream || spill ? &tap.tap : NULL};
        rc = run_command(a, s, &so, command, (int)timeout, &res, errbuf, sizeof errbuf);
    }
    egress_sandbox_close(a->egress, net);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    slots_release(a->slots, tenant);
    limits_exec_end(a->lim, tenant);
    if (rc != 0) {
        fprintf(stderr, "airlockd: exec in %s failed: %s\n", s->id, errbuf);
        sandbox_result_free(&res);
        registry_release(a->reg, s);
        send_failure(r, &tap, 500, NULL);
        exec_tap_close(&tap);
        return;
    }
    double duration = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    double duration_s = (double)(long long)(duration * 1000.0 + 0.5) / 1000.0;
    if (res.cancelled) {
        /* the client hung up (nobody reads this answer) or the server is stopping (503) */
        fprintf(stderr, "airlockd: exec in %s stopped: its client hung up or the server is stopping\n", s->id);
        audit_entry ce = {.tenant = t->name, .session_id = s->id, .actor = c->actor, .kind = "exec",
                          .command = command, .has_duration = true, .duration_s = duration_s,
                          .detail = CANCEL_DETAIL};
        audit_record(a->audit, &ce);
        sandbox_result_free(&res);
        registry_release(a->reg, s);
        send_failure(r, &tap, 503, "The command was stopped before it finished.");
        exec_tap_close(&tap);
        return;
    }
    char *out = NULL, *err = NULL, *quota_warn = NULL, *out_warn = NULL, *err_warn = NULL;
    size_t out_len = 0, err_len = 0, nw = 0;
    const char *warnings[6];
    char timeout_warn[64];
    int exit_code = res.exit_code;
    bool timed_out = res.timed_out;
    bool oom = false;
    if (timed_out) {
        /* the reference discards output produced before the timeout */
        out = strdup("");
        err = strdup("");
        exit_code = -1;
        snprintf(timeout_warn, sizeof timeout_warn, "Execution exceeded %llds limit.", timeout);
        warnings[nw++] = timeout_warn;
    } else {
        out = utf8_replace(res.out ? res.out : "", res.out ? res.out_len : 0, &out_len);
        err = utf8_replace(res.err ? res.err : "", res.err ? res.err_len : 0, &err_len);
        oom = res.oom_killed;
        if (oom)
            warnings[nw++] = OOM_WARNING;
        else if (exit_code == 137)
            warnings[nw++] = KILLED_WARNING;
        quota_warn = quota_exec_warning(s->workspace, s->quota_bytes);
        if (quota_warn)
            warnings[nw++] = quota_warn;
        out_warn = truncation_warning("stdout", res.out_total, res.out_omitted, (size_t)output_limit);
        if (out_warn)
            warnings[nw++] = out_warn;
        err_warn = truncation_warning("stderr", res.err_total, res.err_omitted, (size_t)output_limit);
        if (err_warn)
            warnings[nw++] = err_warn;
    }
    if (tap.spill_warning)
        warnings[nw++] = tap.spill_warning;
    audit_entry ae = {.tenant = t->name, .session_id = s->id, .actor = c->actor, .kind = "exec",
                      .command = command, .has_exit_code = true, .exit_code = exit_code,
                      .has_duration = true, .duration_s = duration_s,
                      .timed_out = timed_out, .oom_killed = oom, .detail = NULL};
    audit_record(a->audit, &ae);
    sandbox_result_free(&res);
    registry_release(a->reg, s);
    size_t output_len = 0;
    char *output = out && err ? exec_format_output(out, out_len, err, err_len, warnings, nw, exit_code,
                                                   timed_out, &output_len)
                              : NULL;
    if (!output) {
        send_failure(r, &tap, 500, NULL);
    } else {
        json_t *w = json_array();
        for (size_t i = 0; i < nw; i++)
            json_array_append_new(w, json_string(warnings[i]));
        json_t *result = json_pack("{s:s%,s:o,s:o,s:o,s:i,s:b,s:b,s:o}",
                                   "command", command, command_len,
                                   "output", json_stringn_nocheck(output, output_len),
                                   "stdout", json_stringn_nocheck(out, out_len),
                                   "stderr", json_stringn_nocheck(err, err_len),
                                   "exit_code", exit_code, "timed_out", timed_out,
                                   "oom_killed", oom, "warnings", w);
        if (result && spill) { /* ours, after the contract's fields */
            json_object_set_new(result, "stdout_file", json_string(tap.spill_path[1]));
            json_object_set_new(result, "stderr_file", json_string(tap.spill_path[2]));
        }
        if (tap.stream && !result) {
            send_failure(r, &tap, 500, NULL);
        } else if (tap.stream) {
            exec_tap_flush(&tap);
            exec_tap_event(&tap, json_pack("{s:s,s:o}", "type", "result", "result", result));
        } else {
            http_send_json(r, 200, result);
        }
    }
    exec_tap_close(&tap);
    free(output);
    free(out);
    free(err);
    free(quota_warn);
    free(out_warn);
    free(err_warn);
}
