/* Sandboxes created ahead for resumes (see restore_spare.h): one thread per spare makes it,
 * waits for its take, its idle time or the shutdown, and releases it when untaken. */
#include "sandbox/restore_spare.h"

#include "disk/mounts.h"
#include "fs/walk.h"
#include "log/log.h"
#include "sandbox/agent_stdio.h"
#include "sandbox/internal.h"
#include "sandbox/oci.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SPARES_DIR "restore-spares"
/* `runsc create` takes ~0.15 s; a loaded host, seconds. */
#define CREATE_TIMEOUT_MS 60000
/* The spec a spare is made from, copied into its directory (the image may go meanwhile). */
#define SOURCE_SPEC "source.json"

typedef enum {
    SP_MAKING, /* its thread runs `runsc create` */
    SP_READY,  /* made: a resume may take it */
    SP_TAKEN,  /* a resume took what it holds: its thread frees the rest */
    SP_DROP,   /* replaced or no longer wanted: its thread releases it */
} spare_state;

typedef struct spare {
    struct spare *next;
    sbx_spares *owner;
    spare_state state;
    char id[ID_MAX + 1];         /* runsc's container id; its cgroup's name until taken */
    char group[SBX_CG_NAME_MAX]; /* its tenant's cgroup */
    char *dir;                   /* <spares>/<id>: its bundle, and ws */
    char *shape;                 /* its spec's (sbx_spec_shape) */
    sbx_cgroup cg;
    int in_w, out_r, err_r;      /* its agent's stdin, stdout and stderr, once made */
} spare;

struct sbx_spares {
    sandbox_backend *b;
    char *dir;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a spare was taken or dropped, a thread ended, or the shutdown */
    spare *list;            /* making or ready (or dropped, until its thread takes it out) */
    int threads;            /* spare threads still running */
    int releasing;          /* spares out of the list whose release is under way */
    int max, idle_seconds;
    bool stopping;
};

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

static char *ws_of(const char *dir)
{
    return sbx_path_join(dir, "ws");
}

/* Unmounts whatever is on dir/ws (a session's workspace bound there, then the spare's own
 * shared mount), then removes dir; a mount that stays keeps dir (never a tree removed through
 * a mount: it could hold a session's files). */
static void remove_spare_dir(const char *dir)
{
    char *ws = ws_of(dir);
    if (!ws)
        return;
    for (int i = 0; i < 4 && mounts_is_mount_point(ws); i++)
        if (mounts_unmount(ws) != 0)
            log_warn("cannot unmount %s: %s", ws, strerror(errno));
    if (mounts_is_mount_point(ws))
        log_warn("%s stays mounted: %s is kept", ws, dir);
    else if (fs_rmtree(dir) != 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", dir, strerror(errno));
    free(ws);
}

sbx_spares *sbx_spares_open(sandbox_backend *b, const char *state_dir, char *errbuf, size_t errlen)
{
    sbx_spares *sp = calloc(1, sizeof *sp);
    if (!sp || !(sp->dir = sbx_path_join(state_dir, SPARES_DIR))) {
        free(sp);
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    sp->b = b;
    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->changed, NULL);
    /* a killed predecessor's (its processes died with its cgroups) */
    mounts_unmount_under(sp->dir, NULL, NULL);
    char **left = NULL;
    size_t nleft = 0;
    if (mounts_under(sp->dir, &left, &nleft) != 0 || nleft > 0) {
        snprintf(errbuf, errlen, "%s still has mounts after unmounting them", sp->dir);
        mounts_free(left, nleft);
        sbx_spares_close(sp);
        return NULL;
    }
    if ((fs_rmtree(sp->dir) != 0 && errno != ENOENT) || mkdir(sp->dir, 0700) != 0) {
        snprintf(errbuf, errlen, "cannot clean %s: %s", sp->dir, strerror(errno));
        sbx_spares_close(sp);
        return NULL;
    }
    return sp;
}

void sbx_spares_configure(sbx_spares *sp, int max, int idle_seconds)
{
    if (!sp)
        return;
    pthread_mutex_lock(&sp->mu);
    sp->max = max;
    sp->idle_seconds = idle_seconds > 0 ? idle_seconds : 1;
    pthread_mutex_unlock(&sp->mu);
}

int sbx_spares_ready(sbx_spares *sp)
{
    int n = 0;
    if (!sp)
        return 0;
    pthread_mutex_lock(&sp->mu);
    for (const spare *p = sp->list; p; p = p->next)
        n += p->state == SP_READY;
    pthread_mutex_unlock(&sp->mu);
    return n;
}

void sbx_spares_close(sbx_spares *sp)
{
    if (!sp)
        return;
    pthread_mutex_lock(&sp->mu);
    sp->stopping = true;
    for (spare *p = sp->list; p; p = p->next)
        if (p->state == SP_READY)
            p->state = SP_DROP;
    pthread_cond_broadcast(&sp->changed);
    while (sp->threads > 0) /* (a making one ends with its `runsc create`, a minute at most) */
        pthread_cond_wait(&sp->changed, &sp->mu);
    pthread_mutex_unlock(&sp->mu);
    pthread_cond_destroy(&sp->changed);
    pthread_mutex_destroy(&sp->mu);
    free(sp->dir);
    free(sp);
}

/* The size a spare's cgroup is made with (the session's replaces it at the take), and the
 * runsc flags of a sandbox without network, as the session sandboxes it stands for have. */
static sandbox spare_stand_in(sandbox_backend *b)
{
    return (sandbox){.b = b, .memory_bytes = (uint64_t)SANDBOX_MEMORY_MB << 20, .cpu_percent = SANDBOX_CPU_PERCENT,
                     .nproc = SANDBOX_MAX_PROCESSES};
}

/* `runsc create` of p: its mount point, cgroup, bundle and pipes. 0, or -1 with a message (what
 * was made stays in p for release). */
static int make(sbx_spares *sp, spare *p, char *errbuf, size_t errlen)
{
    sandbox stand_in = spare_stand_in(sp->b);
    char *ws = ws_of(p->dir), src[PATH_MAX];
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, rc = -1;
    sbx_cg_limits lim = sbx_command_limits(&stand_in);
    lim.ahead = true; /* a boot's low weight, no CPU quota: it yields to commands */
    if (!ws || snprintf(src, sizeof src, "%s/" SOURCE_SPEC, p->dir) >= (int)sizeof src) {
        snprintf(errbuf, errlen, "out of memory");
        goto out;
    }
    if (mkdir(ws, 0755) != 0 || mounts_make_shared(ws) != 0) {
        snprintf(errbuf, errlen, "cannot make %s a shared mount point: %s", ws, strerror(errno));
        goto out;
    }
    if (sbx_cg_create(&p->cg, &sp->b->cgroups, p->group, p->id, &lim, errbuf, errlen) != 0 ||
        sbx_spec_rebase(src, p->dir, ws, NULL, NULL, p->cg.rel, errbuf, errlen) != 0)
        goto out;
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        snprintf(errbuf, errlen, "cannot create pipes: %s", strerror(errno));
        goto out;
    }
    const char *argv[SBX_GVISOR_FLAGS_MAX + 8];
    int n = sbx_gvisor_flags(&stand_in, argv);
    argv[n++] = "--ignore-cgroups"; /* (it starts in its cgroups: see sandbox_session_restore) */
    argv[n++] = "create";
    argv[n++] = "--bundle";
    argv[n++] = p->dir;
    argv[n++] = p->id;
    argv[n] = NULL;
    /* its stdio, which the sandbox keeps, is its agent's (the restored one's) */
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env, .cg = &p->cg, .stdin_fd = in[0], .stdout_fd = out[1],
                       .stderr_fd = err[1], .timeout_ms = CREATE_TIMEOUT_MS};
    sbx_proc_result r;
    if (sbx_proc_run(&o, &r, errbuf, errlen) != 0)
        goto out;
    int code = sbx_proc_exit_code(r.status);
    sbx_proc_result_free(&r);
    if (code != 0) {
        char msg[300] = "";
        ssize_t m = fcntl(err[0], F_SETFL, O_NONBLOCK) == 0 ? read(err[0], msg, sizeof msg - 1) : -1;
        msg[m > 0 ? m : 0] = '\0';
        msg[strcspn(msg, "\n")] = '\0';
        snprintf(errbuf, errlen, "runsc create exited with %d%s%s", code, msg[0] ? ": " : "", msg);
        goto out;
    }
    p->in_w = in[1];
    p->out_r = out[0];
    p->err_r = err[0];
    in[1] = out[0] = err[0] = -1;
    rc = 0;
out:
    for (int i = 0; i < 2; i++) {
        close_fd(&in[i]);
        close_fd(&out[i]);
        close_fd(&err[i]);
    }
    free(ws);
    return rc;
}

/* Everything p holds, ended: its processes (all in its cgroup), runsc's state, its mounts and
 * directory, its cgroup. */
static void release(sbx_spares *sp, spare *p)
{
    if (p->cg.tree)
        (void)sbx_cg_kill_all(&p->cg);
    sbx_gvisor_forget(sp->b, p->id);
    close_fd(&p->in_w);
    close_fd(&p->out_r);
    close_fd(&p->err_r);
    if (p->dir)
        remove_spare_dir(p->dir);
    if (p->cg.tree)
        sbx_cg_destroy(&p->cg);
}

static void spare_free(spare *p)
{
    free(p->dir);
    free(p->shape);
    free(p);
}

static void unlink_locked(sbx_spares *sp, spare *p)
{
    for (spare **at = &sp->list; *at; at = &(*at)->next)
        if (*at == p) {
            *at = p->next;
            return;
        }
}

static int listed_locked(const sbx_spares *sp)
{
    int n = 0;
    for (const spare *p = sp->list; p; p = p->next)
        n++;
    return n;
}

static void *spare_thread(void *arg)
{
    spare *p = arg;
    sbx_spares *sp = p->owner;
    char eb[300];
    int rc = make(sp, p, eb, sizeof eb);
    /* frozen while it waits: an idle sentry still wakes (~5% of a CPU, measured) */
    int err = rc == 0 ? sbx_cg_freeze(&p->cg, true) : 0;
    if (err != 0) {
        snprintf(eb, sizeof eb, "cannot freeze it: %s", strerror(err));
        rc = -1;
    }
    pthread_mutex_lock(&sp->mu);
    if (rc != 0)
        log_warn("cannot make a sandbox ahead for resumes (%s): %s", p->group, eb);
    else if (p->state == SP_MAKING) {
        p->state = SP_READY;
        log_debug("sandbox %s made ahead for the resumes of %s", p->id, p->group);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += sp->idle_seconds;
    while (rc == 0 && p->state == SP_READY && !sp->stopping)
        if (pthread_cond_timedwait(&sp->changed, &sp->mu, &until) == ETIMEDOUT)
            break;
    bool taken = p->state == SP_TAKEN;
    if (!taken) {
        unlink_locked(sp, p);
        sp->releasing++;
    }
    pthread_mutex_unlock(&sp->mu);
    if (!taken)
        release(sp, p);
    spare_free(p); /* (a take moved what it holds out) */
    pthread_mutex_lock(&sp->mu);
    if (!taken)
        sp->releasing--;
    sp->threads--;
    pthread_cond_broadcast(&sp->changed);
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

/* Copies the file at from to to (a spec: kilobytes). 0, or -1. */
static int copy_small_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "re"), *out = in ? fopen(to, "we") : NULL;
    char buf[8192];
    size_t n;
    bool ok = in && out;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        ok = false;
    return ok ? 0 : -1;
}

void sbx_spares_want(sbx_spares *sp, const char *group, const char *image_dir)
{
    char spec_path[PATH_MAX];
    char *shape = sp && snprintf(spec_path, sizeof spec_path, "%s/sandbox.json", image_dir) < (int)sizeof spec_path
                      ? sbx_spec_shape(spec_path)
                      : NULL;
    if (!shape)
        return;
    pthread_mutex_lock(&sp->mu);
    spare *p = NULL;
    for (spare *q = sp->list; q; q = q->next)
        if (strcmp(q->group, group) == 0 && (q->state == SP_MAKING || q->state == SP_READY)) {
            if (strcmp(q->shape, shape) == 0)
                goto done; /* one of that spec is there */
            q->state = SP_DROP; /* one spare per tenant: the latest spec's */
            pthread_cond_broadcast(&sp->changed);
        }
    if (sp->stopping || listed_locked(sp) >= sp->max)
        goto done;
    char src[PATH_MAX];
    if (!(p = calloc(1, sizeof *p)))
        goto done;
    p->owner = sp;
    p->in_w = p->out_r = p->err_r = -1;
    sbx_make_id("spare", p->id, sizeof p->id);
    snprintf(p->group, sizeof p->group, "%s", group);
    if (!(p->dir = sbx_path_join(sp->dir, p->id)) || mkdir(p->dir, 0700) != 0 ||
        snprintf(src, sizeof src, "%s/" SOURCE_SPEC, p->dir) >= (int)sizeof src || copy_small_file(spec_path, src) != 0) {
        log_warn("cannot prepare a sandbox ahead for resumes in %s: %s", p->dir ? p->dir : sp->dir, strerror(errno));
        if (p->dir)
            (void)fs_rmtree(p->dir);
        spare_free(p);
        goto done;
    }
    p->shape = shape;
    shape = NULL;
    p->state = SP_MAKING;
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, spare_thread, p) != 0) {
        (void)fs_rmtree(p->dir);
        spare_free(p);
    } else {
        p->next = sp->list;
        sp->list = p;
        sp->threads++;
    }
    pthread_attr_destroy(&attr);
done:
    pthread_mutex_unlock(&sp->mu);
    free(shape);
}

/* Whether a spare of group is listed (made, being made, or dropped and not yet taken out). */
static bool group_listed_locked(const sbx_spares *sp, const char *group)
{
    for (const spare *p = sp->list; p; p = p->next)
        if (strcmp(p->group, group) == 0)
            return true;
    return false;
}

void sbx_spares_drop(sbx_spares *sp, const char *group)
{
    if (!sp)
        return;
    pthread_mutex_lock(&sp->mu);
    bool any = false;
    for (spare *p = sp->list; p; p = p->next)
        if (strcmp(p->group, group) == 0 && (p->state == SP_MAKING || p->state == SP_READY)) {
            p->state = SP_DROP;
            any = true;
        }
    if (any) {
        pthread_cond_broadcast(&sp->changed);
        /* gone when this returns (a making one after its `runsc create`) */
        while (group_listed_locked(sp, group) || sp->releasing > 0)
            pthread_cond_wait(&sp->changed, &sp->mu);
    }
    pthread_mutex_unlock(&sp->mu);
}

/* What a take moves out of a spare into the sandbox restored there. */
typedef struct {
    char id[ID_MAX + 1];
    char *dir;
    sbx_cgroup cg;
    int in_w, out_r, err_r;
} taken_spare;

/* A ready spare of group and shape, its holdings moved into *t (its thread frees the rest);
 * false when there is none. */
static bool take(sbx_spares *sp, const char *group, const char *shape, taken_spare *t)
{
    bool found = false;
    pthread_mutex_lock(&sp->mu);
    for (spare *p = sp->list; p && !found; p = p->next) {
        if (p->state != SP_READY || strcmp(p->group, group) != 0 || strcmp(p->shape, shape) != 0)
            continue;
        memcpy(t->id, p->id, sizeof t->id);
        t->dir = p->dir;
        t->cg = p->cg;
        t->in_w = p->in_w;
        t->out_r = p->out_r;
        t->err_r = p->err_r;
        p->dir = NULL;
        memset(&p->cg, 0, sizeof p->cg);
        p->in_w = p->out_r = p->err_r = -1;
        p->state = SP_TAKEN;
        unlink_locked(sp, p);
        pthread_cond_broadcast(&sp->changed);
        found = true;
    }
    pthread_mutex_unlock(&sp->mu);
    return found;
}

/* s (checkpointed) moves into t: the session's workspace bound on the spare's mount point,
 * the spare's cgroup renamed to s's id with s's limits, then `runsc restore` of the image into
 * the spare's container, attached, in that cgroup. 0, or -1 with a message (s as before). */
static int restore_into(sandbox *s, taken_spare *t, const char *image_dir, char *errbuf, size_t errlen)
{
    char *ws = ws_of(t->dir);
    int rc = -1;
    if (!ws) {
        snprintf(errbuf, errlen, "out of memory");
        goto out;
    }
    if (mount(s->workspace_dir, ws, NULL, MS_BIND, NULL) != 0) {
        snprintf(errbuf, errlen, "cannot bind the workspace on %s: %s", ws, strerror(errno));
        goto out;
    }
    sbx_cg_limits lim = sbx_command_limits(s);
    lim.ahead = true;
    if (sbx_cg_rename(&t->cg, s->id, errbuf, errlen) != 0 || sbx_cg_set_limits(&t->cg, &lim, errbuf, errlen) != 0)
        goto out;
    sbx_cg_hurry(&t->cg); /* a caller waits for it */
    int err = sbx_cg_freeze(&t->cg, false);
    if (err != 0) {
        snprintf(errbuf, errlen, "cannot thaw it: %s", strerror(err));
        goto out;
    }
    if (sbx_runsc_restore_start(s, &t->cg, image_dir, t->dir, t->id, -1, errbuf, errlen) != 0)
        goto out;
    if (!(s->io = agent_stdio_new(t->out_r, &s->agent_mu))) {
        snprintf(errbuf, errlen, "out of memory");
        (void)sbx_cg_kill_all(&t->cg);
        while (waitpid(s->child.pid, NULL, 0) < 0 && errno == EINTR) {
        }
        s->child.pid = -1;
        close_fd(&s->child.out);
        close_fd(&s->child.err);
        goto out;
    }
    /* the restore's own stderr aside, the sandbox's (its agent's) until it ends */
    close_fd(&s->child.err);
    s->child.err = t->err_r;
    s->cmd_w = t->in_w;
    t->out_r = t->err_r = t->in_w = -1;
    s->cg = t->cg;
    memset(&t->cg, 0, sizeof t->cg);
    memcpy(s->runsc_id, t->id, sizeof s->runsc_id);
    s->spare_dir = t->dir;
    t->dir = NULL;
    rc = 0;
out:
    free(ws);
    return rc;
}

int sbx_spares_restore(sbx_spares *sp, sandbox *s, const char *image_dir, char *errbuf, size_t errlen)
{
    if (!sp || s->network || !s->bundle || s->cg.tree) /* (a cgroup made: not a checkpointed sandbox's) */
        return 0;
    char spec[PATH_MAX];
    if (snprintf(spec, sizeof spec, "%s/config.json", s->bundle) >= (int)sizeof spec)
        return 0;
    char *shape = sbx_spec_shape(spec);
    taken_spare t = {.in_w = -1, .out_r = -1, .err_r = -1};
    bool found = shape && take(sp, s->group, shape, &t);
    free(shape);
    if (!found)
        return 0;
    if (restore_into(s, &t, image_dir, errbuf, errlen) == 0) {
        log_debug("sandbox %s restored into %s, made ahead", s->id, t.id);
        return 1;
    }
    /* what is left of the spare goes */
    spare left = {.cg = t.cg, .in_w = t.in_w, .out_r = t.out_r, .err_r = t.err_r, .dir = t.dir};
    memcpy(left.id, t.id, sizeof left.id);
    release(sp, &left);
    free(left.dir);
    return -1;
}

void sbx_spares_forget(sandbox *s)
{
    if (s->spare_dir)
        remove_spare_dir(s->spare_dir);
    free(s->spare_dir);
    s->spare_dir = NULL;
    s->runsc_id[0] = '\0';
}
