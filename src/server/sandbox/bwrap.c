/* bubblewrap, the weaker fallback when gVisor does not work here: the same layout and limits
 * on the host kernel. */
#include "sandbox/internal.h"

#include "sandbox/netjoin.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where the bwrap child's private mount namespace shows the generated /etc and the workspace,
 * both reachable by uid 1000 (the state dir usually is not). */
#define BWRAP_STAGE "/tmp/.airlock-stage"
#define BWRAP_STAGE_ETC BWRAP_STAGE "/etc"
#define BWRAP_STAGE_WS BWRAP_STAGE "/workspace"
#define BWRAP_STAGE_TMP BWRAP_STAGE "/tmp"

typedef struct {
    const char *etc;
    const char *workspace;
    const char *netns; /* egress: the namespace to run in (bwrap then keeps it: --share-net) */
} bwrap_stage;

/* "/proc/self/fd/<fd>" without stdio (async-signal-safe). */
static void fd_path(char buf[32], int fd)
{
    static const char prefix[] = "/proc/self/fd/";
    char digits[12];
    int n = 0;
    memcpy(buf, prefix, sizeof prefix - 1);
    do {
        digits[n++] = (char)('0' + fd % 10);
        fd /= 10;
    } while (fd > 0 && n < 11);
    size_t at = sizeof prefix - 1;
    while (n > 0)
        buf[at++] = digits[--n];
    buf[at] = '\0';
}

/* In the forked child, as root: a mount namespace of its own with a small tmpfs on /tmp holding
 * bind mounts of /etc and the workspace (opened first: the tmpfs may hide them). Only
 * syscalls (async-signal-safe). */
static int bwrap_pre_exec(void *arg)
{
    const bwrap_stage *st = arg;
    if (st->netns) {
        int e = sbx_join_netns(st->netns);
        if (e)
            return e;
    }
    /* The sources are opened inside the new namespace: a bind mount's source must belong to
     * the caller's mount namespace. Slave, not private: the server's unmounts of other
     * sessions' disks still reach this namespace's copies, so a running command never pins
     * another workspace's image (a private copy would, for as long as the command runs). */
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", "none", MS_REC | MS_SLAVE, NULL) != 0)
        return errno;
    int err = 0;
    int efd = open(st->etc, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int wfd = open(st->workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
    char epath[32], wpath[32];
    if (efd < 0 || wfd < 0)
        err = errno;
    if (!err) {
        fd_path(epath, efd);
        fd_path(wpath, wfd);
        if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755") != 0 ||
            mkdir(BWRAP_STAGE, 0755) != 0 || mkdir(BWRAP_STAGE_ETC, 0755) != 0 ||
            mkdir(BWRAP_STAGE_WS, 0755) != 0 || mkdir(BWRAP_STAGE_TMP, 0755) != 0 ||
            /* bwrap's own --tmpfs cannot be noexec; its bind keeps this mount's flags. */
            mount("tmpfs", BWRAP_STAGE_TMP, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "size=" TMP_SIZE_STR ",mode=1777") != 0 ||
            mount(epath, BWRAP_STAGE_ETC, "none", MS_BIND, NULL) != 0 ||
            mount(wpath, BWRAP_STAGE_WS, "none", MS_BIND, NULL) != 0)
            err = errno;
    }
    if (efd >= 0)
        close(efd);
    if (wfd >= 0)
        close(wfd);
    return err;
}

/* The host cgroup: memory, CPU and an exact process count (no gVisor threads here). */
static int bwrap_prepare(sandbox *s, char *errbuf, size_t errlen)
{
    /* Host tasks are exactly the sandboxed processes plus bwrap's two. */
    sbx_cg_limits lim = sbx_command_limits(s);
    lim.pids = (uint64_t)s->nproc + 2;
    if (sbx_cg_create(&s->cg, &s->b->cgroups, s->group, s->id, &lim, errbuf, errlen) != 0)
        return -1;
    s->have_cg = true;
    return 0;
}

/* Weaker than gVisor (the host kernel is shared) but the same layout and limits: bwrap runs
 * unprivileged as uid 1000 in a fresh user namespace (so workspace files get host uid 1000),
 * with every namespace unshared (only loopback), no capabilities, the generated /etc and
 * host /usr read-only, a 64 MB noexec /tmp, and a cgroup for
 * memory, CPU and an exact process count (no gVisor threads here). */
static int bwrap_run(sandbox *s, const char *command, int timeout_seconds, sandbox_result *out,
                     char *errbuf, size_t errlen)
{
    sandbox_backend *b = s->b;
    char etc[PATH_MAX];
    snprintf(etc, sizeof etc, "%s/etc", b->rootfs_dir);
    bwrap_stage stage = {etc, s->workspace_dir, s->network ? s->network->netns_path : NULL};
    char uid[16], gid[16], tmpsize[32];
    snprintf(uid, sizeof uid, "%u", (unsigned)SANDBOX_UID);
    snprintf(gid, sizeof gid, "%u", (unsigned)SANDBOX_GID);
    snprintf(tmpsize, sizeof tmpsize, "%u", TMP_MB * 1024u * 1024u);

    const char *argv[256];
    size_t n = 0;
    const char *head[] = {
        b->bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--uid", uid,
        "--gid", gid, "--hostname", "sandbox", "--cap-drop", "ALL",
        "--ro-bind", "/usr", "/usr", "--ro-bind", BWRAP_STAGE_ETC, "/etc",
        "--proc", "/proc", "--dev", "/dev",
        "--bind", BWRAP_STAGE_TMP, "/tmp", "--size", tmpsize, "--perms", "1777",
        "--tmpfs", "/dev/shm",
        "--symlink", "../tmp", "/var/tmp",
        "--bind", BWRAP_STAGE_WS, "/workspace", "--chdir", "/workspace",
    };
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        argv[n++] = head[i];
    if (s->network)
        argv[n++] = "--share-net";
    /* The root's merged-/usr symlinks (bin -> usr/bin ...), then the host directories the
     * root binds read-only, as gVisor's spec does (sandbox/rootfs.h: a non-merged host's top
     * directories, /etc/alternatives) */
    static const char *const tops[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
    char targets[6][PATH_MAX];
    for (size_t i = 0; i < 6; i++) {
        ssize_t len = readlink(tops[i], targets[i], PATH_MAX - 1);
        if (len > 0) {
            targets[i][len] = '\0';
            argv[n++] = "--symlink";
            argv[n++] = targets[i];
            argv[n++] = tops[i];
        }
    }
    char binds[SBX_ROOTFS_MAX_BINDS][64];
    for (size_t i = 0; i < b->rootfs.nbinds && i < SBX_ROOTFS_MAX_BINDS; i++) {
        snprintf(binds[i], sizeof binds[i], "/%s", b->rootfs.binds[i]);
        argv[n++] = "--ro-bind";
        argv[n++] = binds[i];
        argv[n++] = binds[i];
    }
    argv[n++] = "--remount-ro";
    argv[n++] = "/";
    argv[n++] = "--clearenv";
    const char *env[SBX_ENV_ALL_MAX];
    sbx_env_with_network(s, env);
    char names[SBX_ENV_ALL_MAX][64];
    for (size_t i = 0; env[i]; i++) {
        const char *eq = strchr(env[i], '=');
        snprintf(names[i], sizeof names[i], "%.*s", (int)(eq - env[i]), env[i]);
        argv[n++] = "--setenv";
        argv[n++] = names[i];
        argv[n++] = eq + 1;
    }
    argv[n++] = "/bin/bash";
    argv[n++] = "-c";
    argv[n++] = command;
    argv[n] = NULL;

    static const sbx_rlimit rl[] = {{RLIMIT_NOFILE, 65536}, {RLIMIT_CORE, 0}};
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env, .rlimits = rl,
                       .nrlimits = 2, .pre_exec = bwrap_pre_exec, .pre_exec_ctx = &stage,
                       .drop_privs = true,
                       .uid = SANDBOX_UID, .gid = SANDBOX_GID,
                       .timeout_ms = timeout_seconds * 1000};
    sbx_proc_opts_for(s, &o);
    sbx_proc_result r;
    if (sbx_proc_run(&o, &r, errbuf, errlen) != 0)
        return -1;
    bool oom = false, limit_hit = false;
    sbx_cg_oom_status(&s->cg, &oom, &limit_hit);
    int code = sbx_proc_exit_code(r.status);
    /* bwrap's own failures: exit 1 with "bwrap: ..." before the command ran. */
    if (!r.timed_out && !r.cancelled && code == 1 &&
        strncmp(capture_head(&r.err, NULL), "bwrap: ", 7) == 0) {
        sbx_err_from_capture(&r.err, "bubblewrap could not start the sandbox", errbuf, errlen);
        sbx_proc_result_free(&r);
        return -1;
    }
    if (sbx_finish_result(out, &r, code, oom || (code == 137 && limit_hit)) != 0) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static void bwrap_release(sandbox *s)
{
    if (s->have_cg)
        sbx_cg_destroy(&s->cg);
    s->have_cg = false;
}

const sandbox_ops sandbox_bwrap_ops = {"bubblewrap", bwrap_prepare, bwrap_run, bwrap_release};
