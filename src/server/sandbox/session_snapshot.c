/* A memory snapshot of a running session sandbox (issue #26: snapshots with kernels): its
 * state saved by `runsc checkpoint --leave-running` while runsc holds it paused, so that the
 * caller's copy of its workspace, made before it goes on, is the one the image saw; the
 * session keeps running after it. A fork restores the image as a sandbox of its own
 * (session_checkpoint.h, sandbox_session_from_image with fork). */
#include "sandbox/session_snapshot.h"

#include "log/log.h"
#include "sandbox/image_login.h"
#include "sandbox/internal.h"
#include "sandbox/session_checkpoint.h"

#include <jansson.h>

#include <limits.h>
#include <stdio.h>
#include <string.h>

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
        if (sbx_runsc_control(s, "pause", NULL, errbuf, errlen) == 0) {
            if (sbx_runsc_control(s, "checkpoint", image_dir, errbuf, errlen) == 0 &&
                keep_spec(s, image_dir, errbuf, errlen) == 0 &&
                sandbox_image_keep_login(s->network, image_dir, errbuf, errlen) == 0) {
                /* (without it a fork's check runs a command, as for an older image) */
                if (sandbox_image_keep_agent_ping(image_dir) != 0)
                    log_warn("cannot mark the memory image %s as one whose agent answers a ping", image_dir);
                rc = still(ctx) == 0 ? 0 : -1;
            }
            if (sbx_resume_or_end(s) != 0) { /* (a snapshot made of it is given up) */
                if (rc == 0 && errlen)
                    errbuf[0] = '\0';
                size_t n = errlen ? strlen(errbuf) : 0;
                snprintf(errbuf + n, errlen - n, "%sits sandbox could not be resumed", n ? "; " : "");
                rc = SANDBOX_SAVE_LOST;
            }
        }
        s->settling = true; /* frozen again by the warm thread once idle */
        s->next_ready = true;
    }
    pthread_mutex_unlock(&s->agent_mu);
    return rc;
}
