/* A memory snapshot of a running session sandbox (issue #26: snapshots with kernels): its
 * state saved by `runsc checkpoint --leave-running` while runsc holds it paused, so that the
 * caller's copy of its workspace, made before it goes on, is the one the image saw; the
 * session keeps running after it. A fork restores the image as a sandbox of its own
 * (session_checkpoint.h, sandbox_session_from_image with fork). */
#include "sandbox/session_snapshot.h"

#include "log/log.h"
#include "sandbox/image_login.h"
#include "sandbox/internal.h"

#include <jansson.h>

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* How long `runsc checkpoint` may take (~1 s per 100 MB of memory, well within). */
#define SNAPSHOT_TIMEOUT_MS 60000
/* `runsc pause` and `runsc resume` answer in ~0.1 s. */
#define CONTROL_TIMEOUT_MS 15000

/* `runsc <verb> [image_dir] <id>` with the flags of s's `runsc run` (--leave-running needs
 * them); 0, or -1 with runsc's message. */
static int runsc_control(sandbox *s, const char *verb, const char *image_dir, char *errbuf, size_t errlen)
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
    argv[n++] = s->id;
    argv[n] = NULL;
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env,
                       .timeout_ms = image_dir ? SNAPSHOT_TIMEOUT_MS : CONTROL_TIMEOUT_MS};
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

/* s's spec kept with its image as sandbox.json (a copy: the snapshot store may be another
 * filesystem), for the forks to rebase. */
static int keep_spec(const sandbox *s, const char *image_dir, char *errbuf, size_t errlen)
{
    char src[PATH_MAX], dst[PATH_MAX];
    if (snprintf(src, sizeof src, "%s/config.json", s->bundle) >= (int)sizeof src ||
        snprintf(dst, sizeof dst, "%s/sandbox.json", image_dir) >= (int)sizeof dst) {
        snprintf(errbuf, errlen, "the sandbox's spec path is too long");
        return -1;
    }
    json_t *spec = json_load_file(src, 0, NULL);
    int rc = spec && json_dump_file(spec, dst, JSON_COMPACT) == 0 ? 0 : -1;
    json_decref(spec);
    if (rc != 0)
        snprintf(errbuf, errlen, "cannot keep the sandbox's spec with its memory image");
    return rc;
}

int sandbox_session_snapshot(sandbox *s, const char *image_dir, sandbox_still_fn still, void *ctx, char *errbuf,
                             size_t errlen)
{
    /* held throughout: no command starts, and the warm thread does not freeze it meanwhile */
    pthread_mutex_lock(&s->agent_mu);
    int rc = -1;
    if (!s->agent || !s->io || s->ran || !s->have_cg || !s->bundle) {
        snprintf(errbuf, errlen, "the session's sandbox is not running");
    } else if (s->running > 0) {
        snprintf(errbuf, errlen, "a command or cell runs in the session's sandbox");
        rc = 1;
    } else {
        (void)sbx_cg_freeze(&s->cg, false); /* runsc talks to its sentry */
        if (runsc_control(s, "pause", NULL, errbuf, errlen) == 0) {
            if (runsc_control(s, "checkpoint", image_dir, errbuf, errlen) == 0 &&
                keep_spec(s, image_dir, errbuf, errlen) == 0 &&
                sandbox_image_keep_login(s->network, image_dir, errbuf, errlen) == 0)
                rc = still(ctx) == 0 ? 0 : -1;
            char eb[300];
            if (runsc_control(s, "resume", NULL, eb, sizeof eb) != 0) {
                /* it cannot go on: ended, its session's next command gets a new one */
                log_error("sandbox %s stays paused after a snapshot (%s): it is ended", s->id, eb);
                (void)sbx_cg_kill_all(&s->cg);
            }
        }
        s->settling = true; /* frozen again by the warm thread once idle */
        s->next_ready = true;
    }
    pthread_mutex_unlock(&s->agent_mu);
    return rc;
}
