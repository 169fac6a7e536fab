/* What every backend's run shares (sandbox/internal.h): the sandbox's and the launcher's
 * environments, the launcher's options, an error from the launcher's stderr, and the result of
 * a run that happened. */
#include "sandbox/internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const sandbox_env[] = {
    "HOME=/tmp",
    "PYTHONUSERBASE=/workspace/.local",
    "PIP_USER=1",
    "PIP_NO_CACHE_DIR=1",
    "PIP_DISABLE_PIP_VERSION_CHECK=1",
    "PATH=/workspace/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    NULL,
};

const char *const launcher_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};

_Static_assert(sizeof sandbox_env / sizeof sandbox_env[0] <= SANDBOX_ENV_MAX + 1, "SANDBOX_ENV_MAX");

void sbx_env_with_network(const sandbox *s, const char **out)
{
    size_t n = 0;
    for (size_t i = 0; sandbox_env[i]; i++)
        out[n++] = sandbox_env[i];
    for (size_t i = 0; s->network && s->network->env && s->network->env[i] && n < SBX_ENV_ALL_MAX - 1; i++)
        out[n++] = s->network->env[i];
    out[n] = NULL;
}

char *sbx_path_join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + 1 + lb + 1);
    if (p) {
        memcpy(p, a, la);
        p[la] = '/';
        memcpy(p + la + 1, b, lb + 1);
    }
    return p;
}

void sbx_err_from_capture(const capture *err, const char *prefix, char *errbuf, size_t errlen)
{
    size_t len;
    const char *text = capture_head(err, &len);
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
        len--;
    snprintf(errbuf, errlen, "%s%s%.*s", prefix, len ? ": " : "", (int)(len > 400 ? 400 : len),
             text);
}

void sbx_proc_opts_for(const sandbox *s, sbx_proc_opts *o)
{
    o->cg = s->have_cg ? &s->cg : NULL;
    o->output_limit = s->output_limit;
    o->cancel_fd = s->cancel_fd;
    o->tap = s->tap;
}

int sbx_finish_result(sandbox_result *out, sbx_proc_result *r, int code, bool oom_killed)
{
    memset(out, 0, sizeof *out);
    if (r->timed_out || r->cancelled) {
        sbx_proc_result_free(r);
        out->timed_out = r->timed_out && !r->cancelled;
        out->cancelled = r->cancelled;
        out->exit_code = -1;
        return 0;
    }
    out->exit_code = code;
    out->oom_killed = oom_killed;
    out->out_total = r->out.total;
    out->err_total = r->err.total;
    uint64_t out_omitted, err_omitted;
    out->out = capture_take(&r->out, &out->out_len, &out_omitted);
    out->err = capture_take(&r->err, &out->err_len, &err_omitted);
    out->out_omitted = out_omitted;
    out->err_omitted = err_omitted;
    if (!out->out || !out->err) {
        sandbox_result_free(out);
        return -1;
    }
    return 0;
}

void sandbox_result_free(sandbox_result *r)
{
    if (!r)
        return;
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
    r->out_len = r->err_len = 0;
}
