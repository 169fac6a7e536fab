/* A session sandbox saved with its memory and brought back (issue #26: pause with kernels):
 * `runsc checkpoint` writes its whole state (the sentry, the agent, every kernel's process)
 * into an image directory and ends it; `runsc restore` boots it again from that image under
 * the same container id, bundle and cgroup name, with new stdin and stdout for the agent. The
 * sandbox struct stays the same in between (its slots, its kernels' slots), so those who
 * borrowed it find it again. */
#include "sandbox/session_checkpoint.h"

#include "log/log.h"
#include "sandbox/internal.h"
#include "sandbox/agent_stdio.h"
#include "sandbox/image_login.h"
#include "sandbox/oci.h"
#include "sandbox/restore_spare.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* `runsc run` (or restore) of s, which the checkpoint ended: reaped, waiting at most ~5 s. */
static void reap_runsc(sandbox *s)
{
    pid_t pid = s->child.pid;
    for (int i = 0; pid > 0 && i < 1000; i++) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            pid = -1;
        else {
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (pid > 0) {
        (void)kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    s->child.pid = -1;
    close_fd(&s->child.out);
    close_fd(&s->child.err);
}

/* The mark beside an image whose agent answers FRAME_PING (this build's: one made by an older
 * build has none, and its agent would end on a ping). */
#define PING_MARK "agent_pings"

int sandbox_image_keep_agent_ping(const char *image_dir)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/" PING_MARK, image_dir) >= (int)sizeof p)
        return -1;
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    return close(fd);
}

bool sandbox_image_agent_pings(const char *image_dir)
{
    char p[PATH_MAX];
    return snprintf(p, sizeof p, "%s/" PING_MARK, image_dir) < (int)sizeof p && access(p, F_OK) == 0;
}

/* s's OCI spec (its root, mounts, cgroup path, the agent's argv) linked beside its image as
 * sandbox.json: the bundles are cleared when airlockd starts, and a restore by another
 * airlockd process needs the same spec (runsc restore takes the bundle of the checkpointed
 * sandbox). A failure is logged; the image is whole without it. */
static void keep_spec_with_image(const sandbox *s, const char *image_dir)
{
    char src[PATH_MAX], dst[PATH_MAX];
    if (snprintf(src, sizeof src, "%s/config.json", s->bundle) >= (int)sizeof src ||
        snprintf(dst, sizeof dst, "%s/sandbox.json", image_dir) >= (int)sizeof dst) {
        log_warn("the sandbox's spec path is too long to keep with its image");
        return;
    }
    if (link(src, dst) != 0)
        log_warn("cannot keep %s with the memory image: %s", src, strerror(errno));
    /* and its container id, which the restore takes again */
    if (snprintf(dst, sizeof dst, "%s/container_id", image_dir) >= (int)sizeof dst)
        return;
    FILE *f = fopen(dst, "we");
    bool ok = f && fprintf(f, "%s\n", s->id) > 0;
    if ((f && fclose(f) != 0) || !ok)
        log_warn("cannot keep the container id with the memory image %s", image_dir);
    /* (without it the restore's check runs a command, as for an older image) */
    if (sandbox_image_keep_agent_ping(image_dir) != 0)
        log_warn("cannot mark the memory image %s as one whose agent answers a ping", image_dir);
    /* and, with egress, the proxy login its processes hold (the restore's network takes it) */
    char eb[200];
    if (sandbox_image_keep_login(s->network, image_dir, eb, sizeof eb) != 0)
        log_warn("%s (%s)", eb, image_dir);
}

int sandbox_session_checkpoint(sandbox *s, const char *image_dir, char *errbuf, size_t errlen)
{
    pthread_mutex_lock(&s->agent_mu);
    int rc = -1;
    if (!s->agent || !s->io || s->ran || !s->have_cg) {
        snprintf(errbuf, errlen, "the session's sandbox is not running");
    } else if (s->running > 0) {
        snprintf(errbuf, errlen, "a command or cell runs in the session's sandbox");
        rc = 1;
    } else {
        (void)sbx_cg_freeze(&s->cg, false); /* a frozen sandbox cannot be saved */
        /* saved paused and left so (--leave-running): a save that fails leaves it whole, and
         * it is resumed; nothing runs in it between the save and its end */
        if (sbx_runsc_control(s, "pause", NULL, errbuf, errlen) == 0) {
            if (sbx_runsc_control(s, "checkpoint", image_dir, errbuf, errlen) == 0)
                rc = 0;
            else if (sbx_resume_or_end(s) != 0)
                rc = SANDBOX_SAVE_LOST;
        }
        if (rc != 0) {
            s->settling = true; /* still running (unless lost): frozen again by the warm thread */
            s->next_ready = true;
        } else {
            /* the sandbox ends: its runsc (whose gofer would hold the workspace's mount), stdio
             * and cgroup go; the struct waits for restore */
            keep_spec_with_image(s, image_dir);
            sbx_spares_want(s->b->spares, s->group, image_dir); /* for its tenant's next resume */
            (void)sbx_cg_kill_all(&s->cg);
            reap_runsc(s);
            close_fd(&s->cmd_w);
            agent_stdio_free(s->io);
            s->io = NULL;
            sbx_cg_destroy(&s->cg);
            sbx_gvisor_forget(s->b, sbx_runsc_id(s));
            sbx_spares_forget(s);
            s->settling = false;
        }
    }
    pthread_mutex_unlock(&s->agent_mu);
    return rc;
}

int sandbox_session_restore(sandbox *s, const char *image_dir, char *errbuf, size_t errlen)
{
    pthread_mutex_lock(&s->agent_mu);
    int rc = -1;
    int in[2] = {-1, -1};
    if (!s->agent || s->io || s->ran || !s->bundle) {
        snprintf(errbuf, errlen, "the session's sandbox is not checkpointed");
        goto out;
    }
    /* into a sandbox made ahead when one of its spec waits (about half the time: runsc made it) */
    int ahead = sbx_spares_restore(s->b->spares, s, image_dir, errbuf, errlen);
    if (ahead == 1) {
        s->sent = false;
        s->settling = false;
        rc = 0;
        goto out;
    }
    if (ahead < 0)
        log_warn("sandbox %s: the sandbox made ahead could not take its restore (%s): restored the usual way", s->id,
                 errbuf);
    sbx_cg_limits lim = sbx_command_limits(s);
    lim.ahead = true;
    if (!s->cg.tree && sbx_cg_create(&s->cg, &s->b->cgroups, s->group, s->id, &lim, errbuf, errlen) != 0)
        goto out;
    /* booted like one ahead of its command (its own freezer group), but a caller waits for it:
     * at a command's CPU weight, not a boot ahead's low one (on a busy host that is most of
     * the restore) */
    sbx_cg_hurry(&s->cg);
    /* its network (egress) is made anew for the restore: the spec names the new namespace,
     * where gVisor's restored stack finds the same addresses (egress/netns.h) */
    if (sbx_spec_set_netns(s->bundle, s->network ? s->network->netns_path : NULL, errbuf, errlen) != 0)
        goto out;
    if (pipe2(in, O_CLOEXEC) != 0) {
        snprintf(errbuf, errlen, "cannot create pipes: %s", strerror(errno));
        goto out;
    }
    if (sbx_runsc_restore_start(s, &s->cg, image_dir, s->bundle, s->id, in[0], errbuf, errlen) != 0)
        goto out;
    close_fd(&in[0]);
    s->cmd_w = in[1];
    in[1] = -1;
    s->io = agent_stdio_new(s->child.out, &s->agent_mu);
    if (!s->io) {
        snprintf(errbuf, errlen, "out of memory");
        s->ran = true;
        goto out;
    }
    s->child.out = -1;
    s->sent = false; /* the next command's limits again (sbx_cg_begin_command) */
    s->settling = false; /* thawed until its first command (the resume's check) ends */
    rc = 0;
out:
    if (rc != 0 && s->cg.tree && !s->io) {
        if (s->child.pid > 0)
            reap_runsc(s);
        sbx_cg_destroy(&s->cg);
        if (sbx_gvisor_state_left(s->b, s->id))
            sbx_gvisor_delete(s->b, s->id);
    }
    close_fd(&in[0]);
    close_fd(&in[1]);
    pthread_mutex_unlock(&s->agent_mu);
    return rc;
}

bool sandbox_session_restored_ahead(sandbox *s)
{
    pthread_mutex_lock(&s->agent_mu);
    bool ahead = s->runsc_id[0] != '\0';
    pthread_mutex_unlock(&s->agent_mu);
    return ahead;
}

void sandbox_session_set_network(sandbox *s, const sandbox_network *net)
{
    pthread_mutex_lock(&s->agent_mu);
    s->network = net;
    pthread_mutex_unlock(&s->agent_mu);
}

/* The container id kept with image_dir (keep_spec_with_image) into id; false when none. */
static bool kept_container_id(const char *image_dir, char *id, size_t len)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/container_id", image_dir) >= (int)sizeof p)
        return false;
    FILE *f = fopen(p, "re");
    bool ok = f && fgets(id, (int)len, f) != NULL;
    if (f)
        fclose(f);
    size_t n = ok ? strcspn(id, "\n") : 0;
    if (ok)
        id[n] = '\0';
    for (size_t i = 0; ok && i < n; i++) /* what sbx_make_id makes */
        ok = (id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') || (id[i] >= '0' && id[i] <= '9') ||
             id[i] == '_' || id[i] == '-' || id[i] == '.';
    return ok && n > 0;
}

/* A fork's bundle (sandbox_session_from_image): the image's spec rebased on its workspace,
 * root and cgroup (made by the restore, or the renamed one of a sandbox made ahead: the same
 * path). 0, or -1 with a message. */
static int fork_bundle(sandbox *s, const sandbox_opts *o, const char *image_dir, char *errbuf, size_t errlen)
{
    char src[PATH_MAX], usr[PATH_MAX], rel[SBX_CG_PATH_MAX];
    if (snprintf(src, sizeof src, "%s/sandbox.json", image_dir) >= (int)sizeof src ||
        (o->root_dir && snprintf(usr, sizeof usr, "%s/usr", o->root_dir) >= (int)sizeof usr)) {
        snprintf(errbuf, errlen, "the memory image's path is too long");
        return -1;
    }
    if (sbx_cg_rel(&s->b->cgroups, s->group, s->id, rel, sizeof rel) != 0) {
        snprintf(errbuf, errlen, "cgroup path too long for id %s", s->id);
        return -1;
    }
    return sbx_spec_rebase(src, s->bundle, s->workspace_dir, o->root_dir ? o->root_dir : s->b->rootfs_dir,
                           o->root_dir ? usr : NULL, rel, errbuf, errlen);
}

sandbox *sandbox_session_from_image(sandbox_backend *b, const sandbox_opts *o, const char *image_dir,
                                    unsigned slots_busy, bool fork, char *errbuf, size_t errlen)
{
    sandbox *s = calloc(1, sizeof *s);
    if (!s || !(s->workspace_dir = strdup(o->workspace_dir))) {
        free(s);
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    s->b = b;
    s->network = o->network;
    s->memory_bytes = (uint64_t)(o->size.memory_mb ? o->size.memory_mb : SANDBOX_MEMORY_MB) << 20;
    s->cpu_percent = o->size.cpu_percent ? o->size.cpu_percent : SANDBOX_CPU_PERCENT;
    s->nproc = o->size.max_processes ? o->size.max_processes : SANDBOX_MAX_PROCESSES;
    sbx_cg_group_name(o->tenant, s->group);
    sandbox_set_command(s, o);
    s->cmd_w = s->ready_r = -1;
    pthread_mutex_init(&s->agent_mu, NULL);
    pthread_mutex_init(&s->cmd_mu, NULL);
    s->child.pid = -1;
    s->child.out = s->child.err = -1;
    s->ahead = s->agent = s->booted = true;
    s->slots_busy = slots_busy; /* its kernels' processes, alive in the image */
    char src[PATH_MAX], dst[PATH_MAX];
    if (fork) {
        sbx_make_id(o->name ? o->name : "fork", s->id, sizeof s->id); /* a sandbox of its own */
    } else if (!kept_container_id(image_dir, s->id, sizeof s->id)) {
        snprintf(errbuf, errlen, "the memory image has no container id");
        sandbox_release(s);
        return NULL;
    }
    if (!(s->bundle = sbx_path_join(b->bundles_dir, s->id)) || mkdir(s->bundle, 0700) != 0 ||
        (!fork && (snprintf(src, sizeof src, "%s/sandbox.json", image_dir) >= (int)sizeof src ||
                   snprintf(dst, sizeof dst, "%s/config.json", s->bundle) >= (int)sizeof dst || link(src, dst) != 0))) {
        snprintf(errbuf, errlen, "cannot make the restored sandbox's bundle from %s: %s", image_dir, strerror(errno));
        sandbox_release(s);
        return NULL;
    }
    if (fork && fork_bundle(s, o, image_dir, errbuf, errlen) != 0) {
        sbx_cg_destroy(&s->cg);
        sandbox_release(s);
        return NULL;
    }
    if (sandbox_session_restore(s, image_dir, errbuf, errlen) != 0) {
        sandbox_release(s);
        return NULL;
    }
    s->have_cg = true;
    return s;
}

/* The first line of `runsc --version` into out (a Go binary's start: tens of ms, more under
 * load). 0, or -1. */
static int read_runsc_version(const sandbox_backend *b, char *out, size_t len)
{
    const char *argv[] = {b->runsc, "--version", NULL};
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env, .timeout_ms = 10000};
    sbx_proc_result r;
    char eb[200];
    if (sbx_proc_run(&o, &r, eb, sizeof eb) != 0)
        return -1;
    size_t n = 0;
    const char *text = capture_head(&r.out, &n);
    size_t line = 0;
    while (line < n && text[line] != '\n')
        line++;
    int rc = sbx_proc_exit_code(r.status) == 0 && line > 0 && line < len ? 0 : -1;
    if (rc == 0)
        snprintf(out, len, "%.*s", (int)line, text);
    sbx_proc_result_free(&r);
    return rc;
}

int sandbox_runsc_version(sandbox_backend *b, char *out, size_t len)
{
    struct stat st;
    if (!b || !b->runsc || stat(b->runsc, &st) != 0)
        return -1;
    pthread_mutex_lock(&b->version_mu);
    bool same = b->runsc_version.text[0] && b->runsc_version.dev == st.st_dev && b->runsc_version.ino == st.st_ino &&
                b->runsc_version.size == st.st_size && b->runsc_version.mtime.tv_sec == st.st_mtim.tv_sec &&
                b->runsc_version.mtime.tv_nsec == st.st_mtim.tv_nsec;
    int rc = 0;
    if (!same) { /* first use, or runsc was replaced: asked again */
        b->runsc_version.text[0] = '\0';
        rc = read_runsc_version(b, b->runsc_version.text, sizeof b->runsc_version.text);
        if (rc == 0) {
            b->runsc_version.dev = st.st_dev;
            b->runsc_version.ino = st.st_ino;
            b->runsc_version.size = st.st_size;
            b->runsc_version.mtime = st.st_mtim;
        } else {
            b->runsc_version.text[0] = '\0';
        }
    }
    if (rc == 0 && strlen(b->runsc_version.text) >= len)
        rc = -1;
    if (rc == 0)
        snprintf(out, len, "%s", b->runsc_version.text);
    pthread_mutex_unlock(&b->version_mu);
    return rc;
}
