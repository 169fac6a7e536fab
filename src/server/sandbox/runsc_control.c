/* `runsc pause`, `checkpoint --leave-running` and `resume` of a running session sandbox
 * (internal.h sbx_runsc_control): what a memory snapshot and a pause with memory share. */
#include "sandbox/internal.h"

#include "log/log.h"
#include "sandbox/session_checkpoint.h"

#include <stdio.h>

/* How long `runsc checkpoint` may take (~1 s per 100 MB of memory, well within). */
#define CHECKPOINT_TIMEOUT_MS 60000
/* `runsc pause` and `runsc resume` answer in ~0.1 s. */
#define CONTROL_TIMEOUT_MS 15000

int sbx_runsc_control(sandbox *s, const char *verb, const char *image_dir, char *errbuf, size_t errlen)
{
    const char *argv[SBX_GVISOR_FLAGS_MAX + 8];
    int n = sbx_gvisor_flags(s, argv);
    argv[n++] = verb;
    if (image_dir) {
        argv[n++] = "--leave-running";
        argv[n++] = "--compression=none";
        argv[n++] = "--image-path";
        argv[n++] = image_dir;
    }
    argv[n++] = sbx_runsc_id(s);
    argv[n] = NULL;
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env,
                       .timeout_ms = image_dir ? CHECKPOINT_TIMEOUT_MS : CONTROL_TIMEOUT_MS};
    sbx_proc_result r;
    if (sbx_proc_run(&o, &r, errbuf, errlen) != 0)
        return -1;
    int rc = sbx_proc_exit_code(r.status) == 0 ? 0 : -1;
    if (rc != 0) {
        char what[40];
        snprintf(what, sizeof what, "runsc %s failed", verb);
        sbx_err_from_capture(&r.err, what, errbuf, errlen);
    }
    sbx_proc_result_free(&r);
    return rc;
}

int sbx_runsc_restore_start(sandbox *s, const sbx_cgroup *cg, const char *image_dir, const char *bundle,
                            const char *id, int stdin_fd, char *errbuf, size_t errlen)
{
    /* the same flags as its `runsc run` (gvisor.c): the image must find the same sandbox */
    const char *argv[SBX_GVISOR_FLAGS_MAX + 12];
    int n = sbx_gvisor_flags(s, argv);
    /* runsc starts in the session's cgroups (sbx_proc_start joins them before the exec), and
     * every process it makes stays there: its own joins of every hierarchy again (the spec's
     * cgroupsPath) are ~15 ms of a resume (the kernel's RCU waits), for nothing a restore needs */
    argv[n++] = "--ignore-cgroups";
    const char *tail[] = {"restore", "--detach=false", "--image-path", image_dir, "--bundle", bundle, id, NULL};
    for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++)
        argv[n++] = tail[i];
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env, .cg = cg, .stdin_fd = stdin_fd,
                       .pre_exec = s->network ? sbx_gvisor_hide_proc_sys_net : NULL};
    return sbx_proc_start(&o, &s->child, errbuf, errlen);
}

int sbx_resume_or_end(sandbox *s)
{
    char eb[300];
    if (sbx_runsc_control(s, "resume", NULL, eb, sizeof eb) == 0)
        return 0;
    /* it cannot go on: ended, its session's next command (and its kernels' next cells) get a
     * new one */
    log_error("sandbox %s stays paused after a failed or finished save (%s): it is ended", s->id, eb);
    (void)sbx_cg_kill_all(&s->cg);
    s->ran = true;
    return SANDBOX_SAVE_LOST;
}
