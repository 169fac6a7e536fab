/* The isolation backend of airlockd: one fresh gVisor sandbox (or bubblewrap jail) per command.
 *
 * gVisor: every exec writes an OCI bundle and runs `runsc run` inside a host cgroup that
 * airlockd creates (runsc gets --ignore-cgroups). That cgroup bounds memory (256 MB, no swap)
 * and CPU for the whole runsc tree, records OOM kills, and lists every host process to kill on
 * timeout. The 64-process limit is RLIMIT_NPROC inside the sandbox, which gVisor's sentry
 * enforces on sandboxed tasks only; the host pids limit just stops runaway gVisor stubs. */
#include "sandbox/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/walk.h"
#include "sandbox/cgroup.h"
#include "sandbox/proc.h"
#include "sandbox/rootfs.h"
#include "sandbox/oci.h"

#define MEMORY_LIMIT (256ull * 1024 * 1024)
#define NPROC_LIMIT 64
/* gVisor's sentry, gofer and systrap stubs are host tasks: a fork bomb at the NPROC limit
 * peaked at ~145 of them; this only stops a runaway sentry, not sandboxed processes. */
#define HOST_TASKS_LIMIT 1024
#define TMP_MB 64
#define TMP_SIZE_STR "64m"
#define ID_NAME_MAX 24
#define ID_MAX (ID_NAME_MAX + 1 + 8 + 1 + 8)
#define UNIX_PATH_LIMIT 107

enum backend_kind { BACKEND_GVISOR, BACKEND_BWRAP };

struct sandbox_backend {
    enum backend_kind kind;
    char *rootfs_dir;   /* generated read-only root */
    char *bundles_dir;  /* one OCI bundle per run */
    char *runsc_root;   /* runsc --root */
    char *runsc;        /* absolute path of runsc */
    char *bwrap;        /* absolute path of bwrap (fallback) */
    sbx_rootfs rootfs;
};

/* Makes container ids (and cgroup names, a host-wide namespace) unique within this process,
 * even across several open backends. Atomic, so it needs no lock. */
static atomic_uint run_counter;

/* The sandbox's whole environment; nothing of the server's leaks in. */
static const char *const sandbox_env[] = {
    "HOME=/tmp",
    "PYTHONUSERBASE=/workspace/.local",
    "PIP_USER=1",
    "PIP_NO_CACHE_DIR=1",
    "PIP_DISABLE_PIP_VERSION_CHECK=1",
    "PATH=/workspace/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    NULL,
};

/* Environment of runsc/bwrap themselves on the host. */
static const char *const launcher_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};

static char *path_join(const char *a, const char *b)
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

static int mkdir_mode(const char *path, mode_t mode, char *errbuf, size_t errlen)
{
    if ((mkdir(path, mode) != 0 && errno != EEXIST) || chmod(path, mode) != 0) {
        snprintf(errbuf, errlen, "cannot create directory %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Finds an executable: an explicit path, else each directory of $PATH. */
static char *find_program(const char *explicit_path, const char *name)
{
    if (explicit_path && *explicit_path) {
        if (access(explicit_path, X_OK) != 0)
            return NULL;
        return realpath(explicit_path, NULL);
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    char *copy = strdup(path);
    if (!copy)
        return NULL;
    char *found = NULL, *save = NULL;
    for (char *dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
        char *cand = path_join(*dir ? dir : ".", name);
        if (cand && access(cand, X_OK) == 0)
            found = realpath(cand, NULL);
        free(cand);
    }
    free(copy);
    return found;
}

/* Container ids: name (restricted to [A-Za-z0-9_.-], truncated) plus pid and a counter, so
 * several servers sharing a machine and concurrent runs never collide. */
static void make_id(const char *name, char *id, size_t idlen)
{
    char clean[ID_NAME_MAX + 1];
    size_t n = 0;
    for (const char *p = name ? name : ""; *p && n < ID_NAME_MAX; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.';
        clean[n++] = ok ? c : '_';
    }
    if (n == 0)
        clean[n++] = 's';
    else if (clean[0] == '.' || clean[0] == '-') /* runsc wants a word character first */
        clean[0] = 's';
    clean[n] = '\0';
    unsigned k = atomic_fetch_add(&run_counter, 1u);
    snprintf(id, idlen, "%s-%x-%x", clean, (unsigned)getpid() & 0xffffffffu, k);
}

static void set_err_from_output(const buffer *err, const char *prefix, char *errbuf,
                                size_t errlen)
{
    const char *text = err->data ? err->data : "";
    size_t len = err->len;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
        len--;
    snprintf(errbuf, errlen, "%s%s%.*s", prefix, len ? ": " : "", (int)(len > 400 ? 400 : len),
             text);
}

/* ---- gVisor ---------------------------------------------------------------------------- */

/* A finished command's exit code and output; out takes over r's buffers. */
static void finish_result(sandbox_result *out, int code, sbx_proc_result *r)
{
    out->exit_code = code;
    out->out = buf_take(&r->out, &out->out_len);
    out->err = buf_take(&r->err, &out->err_len);
}

/* True when runsc still has state files for container id (a run that did not finish). */
static bool runsc_state_left(const sandbox_backend *b, const char *id)
{
    DIR *d = opendir(b->runsc_root);
    if (!d)
        return false;
    size_t idlen = strlen(id);
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL)
        found = strncmp(e->d_name, id, idlen) == 0 && e->d_name[idlen] == '_';
    closedir(d);
    return found;
}

static void runsc_delete(const sandbox_backend *b, const char *id)
{
    const char *argv[] = {b->runsc, "--root", b->runsc_root, "--platform=systrap",
                          "--network=none", "--overlay2=none", "--ignore-cgroups",
                          "delete", "--force", id, NULL};
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env, .timeout_ms = 15000};
    sbx_proc_result r;
    char eb[256];
    if (sbx_proc_run(&o, &r, eb, sizeof eb) == 0)
        sbx_proc_result_free(&r);
}

typedef struct {
    const sandbox_backend *b;
    const char *id;
} kill_ctx;

/* Deadline: `runsc kill` stops the sandbox in ~0.1 s and lets `runsc run` clean its own
 * state; killing the host processes first would leave state that only the slow
 * (1.5-5 s) `runsc delete --force` removes. */
static void runsc_kill(void *arg)
{
    const kill_ctx *k = arg;
    const char *argv[] = {k->b->runsc, "--root", k->b->runsc_root, "--platform=systrap",
                          "--network=none", "--overlay2=none", "--ignore-cgroups",
                          "kill", k->id, "KILL", NULL};
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env, .timeout_ms = 3000};
    sbx_proc_result r;
    char eb[256];
    if (sbx_proc_run(&o, &r, eb, sizeof eb) == 0)
        sbx_proc_result_free(&r);
}

static int exec_gvisor(sandbox_backend *b, const char *workspace_dir, const char *id,
                       const char *command, int timeout_seconds, sandbox_result *out,
                       char *errbuf, size_t errlen)
{
    int rc = -1;
    char *bundle = path_join(b->bundles_dir, id);
    if (!bundle) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    if (mkdir(bundle, 0700) != 0) {
        snprintf(errbuf, errlen, "cannot create bundle %s: %s", bundle, strerror(errno));
        free(bundle);
        return -1;
    }
    sbx_cgroup cg;
    bool have_cg = false;
    sbx_spec spec = {
        .rootfs_dir = b->rootfs_dir, .rootfs = &b->rootfs, .workspace_dir = workspace_dir,
        .command = command, .env = sandbox_env, .uid = SANDBOX_UID, .gid = SANDBOX_GID,
        .nproc = NPROC_LIMIT, .tmp_mb = TMP_MB,
    };
    if (sbx_spec_write(bundle, &spec, errbuf, errlen) != 0)
        goto done;
    sbx_cg_limits lim = {.memory_bytes = MEMORY_LIMIT, .pids = HOST_TASKS_LIMIT,
                         .cpu_percent = 100};
    if (sbx_cg_create(&cg, id, &lim, errbuf, errlen) != 0)
        goto done;
    have_cg = true;

    /* --overlay2=none: the root stays the read-only host directory and /workspace writes go
     * straight to the host; --network=none leaves only loopback; cgroups are ours. */
    const char *argv[] = {b->runsc, "--root", b->runsc_root, "--platform=systrap",
                          "--network=none", "--overlay2=none", "--ignore-cgroups",
                          "--host-uds=none", "run", "--bundle", bundle, id, NULL};
    kill_ctx kc = {b, id};
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env, .cg = &cg,
                       .timeout_ms = timeout_seconds * 1000, .on_deadline = runsc_kill,
                       .ctx = &kc, .grace_ms = 1500};
    sbx_proc_result r;
    if (sbx_proc_run(&o, &r, errbuf, errlen) != 0)
        goto done;
    int code = sbx_proc_exit_code(r.status);
    bool oom = false, limit_hit = false;
    sbx_cg_oom_status(&cg, &oom, &limit_hit);
    /* runsc reports its own failures as 128 with a "running container:" message. */
    if (!r.timed_out && code == 128 && r.err.data &&
        strncmp(r.err.data, "running container:", 18) == 0) {
        set_err_from_output(&r.err, "gVisor could not start the sandbox", errbuf, errlen);
        sbx_proc_result_free(&r);
        goto done;
    }
    memset(out, 0, sizeof *out);
    if (r.timed_out) {
        sbx_proc_result_free(&r); /* output produced before the timeout is discarded */
        out->timed_out = true;
        out->exit_code = -1;
    } else {
        /* A host OOM kill takes the whole sentry down; the command's status is SIGKILL. A
         * SIGKILL exit at the memory limit without a recorded kill is also the memory. */
        if (oom || (code == 137 && limit_hit)) {
            out->oom_killed = true;
            code = 137;
        }
        finish_result(out, code, &r);
    }
    rc = 0;
done:
    if (have_cg)
        sbx_cg_destroy(&cg);
    if (runsc_state_left(b, id))
        runsc_delete(b, id);
    if (fs_rmtree(bundle) != 0 && errno != ENOENT)
        fprintf(stderr, "airlockd: cannot remove sandbox bundle %s: %s\n", bundle,
                strerror(errno));
    free(bundle);
    return rc;
}

/* ---- bubblewrap (fallback) ------------------------------------------------------------- */

/* Where the bwrap child's private mount namespace shows the generated /etc and the workspace,
 * both reachable by uid 1000 (the state dir usually is not). */
#define BWRAP_STAGE "/tmp/.airlock-stage"
#define BWRAP_STAGE_ETC BWRAP_STAGE "/etc"
#define BWRAP_STAGE_WS BWRAP_STAGE "/workspace"
#define BWRAP_STAGE_TMP BWRAP_STAGE "/tmp"

typedef struct {
    const char *etc;
    const char *workspace;
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

/* In the forked child, as root: a private mount namespace with a small tmpfs on /tmp holding
 * bind mounts of /etc and the workspace (opened first: the tmpfs may hide them). Only
 * syscalls (async-signal-safe). */
static int bwrap_pre_exec(void *arg)
{
    const bwrap_stage *st = arg;
    /* The sources are opened inside the new namespace: a bind mount's source must belong to
     * the caller's mount namespace. */
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0)
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

/* Weaker than gVisor (the host kernel is shared) but the same layout and limits: bwrap runs
 * unprivileged as uid 1000 in a fresh user namespace (so workspace files get host uid 1000),
 * with every namespace unshared (only loopback), no capabilities, the generated /etc and
 * host /usr read-only, a 64 MB noexec /tmp, and a cgroup for
 * memory, CPU and an exact process count (no gVisor threads here). */
static int exec_bwrap(sandbox_backend *b, const char *workspace_dir, const char *id,
                      const char *command, int timeout_seconds, sandbox_result *out,
                      char *errbuf, size_t errlen)
{
    int rc = -1;
    char etc[PATH_MAX];
    snprintf(etc, sizeof etc, "%s/etc", b->rootfs_dir);
    bwrap_stage stage = {etc, workspace_dir};
    char uid[16], gid[16], tmpsize[32];
    snprintf(uid, sizeof uid, "%u", (unsigned)SANDBOX_UID);
    snprintf(gid, sizeof gid, "%u", (unsigned)SANDBOX_GID);
    snprintf(tmpsize, sizeof tmpsize, "%u", TMP_MB * 1024u * 1024u);

    const char *argv[128];
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
    /* The root's merged-/usr symlinks (bin -> usr/bin ...) or read-only binds. */
    static const char *const tops[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
    char targets[6][PATH_MAX];
    for (size_t i = 0; i < 6; i++) {
        ssize_t len = readlink(tops[i], targets[i], PATH_MAX - 1);
        if (len > 0) {
            targets[i][len] = '\0';
            argv[n++] = "--symlink";
            argv[n++] = targets[i];
            argv[n++] = tops[i];
        } else if (access(tops[i], F_OK) == 0) {
            argv[n++] = "--ro-bind";
            argv[n++] = tops[i];
            argv[n++] = tops[i];
        }
    }
    argv[n++] = "--remount-ro";
    argv[n++] = "/";
    argv[n++] = "--clearenv";
    char names[sizeof sandbox_env / sizeof sandbox_env[0]][64];
    for (size_t i = 0; sandbox_env[i]; i++) {
        const char *eq = strchr(sandbox_env[i], '=');
        snprintf(names[i], sizeof names[i], "%.*s", (int)(eq - sandbox_env[i]), sandbox_env[i]);
        argv[n++] = "--setenv";
        argv[n++] = names[i];
        argv[n++] = eq + 1;
    }
    argv[n++] = "/bin/bash";
    argv[n++] = "-c";
    argv[n++] = command;
    argv[n] = NULL;

    sbx_cgroup cg;
    /* Host tasks are exactly the sandboxed processes plus bwrap's two. */
    sbx_cg_limits lim = {.memory_bytes = MEMORY_LIMIT, .pids = NPROC_LIMIT + 2,
                         .cpu_percent = 100};
    if (sbx_cg_create(&cg, id, &lim, errbuf, errlen) != 0)
        return -1;
    static const sbx_rlimit rl[] = {{RLIMIT_NOFILE, 65536}, {RLIMIT_CORE, 0}};
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env, .cg = &cg, .rlimits = rl,
                       .nrlimits = 2, .pre_exec = bwrap_pre_exec, .pre_exec_ctx = &stage,
                       .drop_privs = true,
                       .uid = SANDBOX_UID, .gid = SANDBOX_GID,
                       .timeout_ms = timeout_seconds * 1000};
    sbx_proc_result r;
    if (sbx_proc_run(&o, &r, errbuf, errlen) == 0) {
        bool oom = false, limit_hit = false;
        sbx_cg_oom_status(&cg, &oom, &limit_hit);
        int code = sbx_proc_exit_code(r.status);
        /* bwrap's own failures: exit 1 with "bwrap: ..." before the command ran. */
        if (!r.timed_out && code == 1 && r.err.data && strncmp(r.err.data, "bwrap: ", 7) == 0) {
            set_err_from_output(&r.err, "bubblewrap could not start the sandbox", errbuf,
                                errlen);
            sbx_proc_result_free(&r);
        } else {
            memset(out, 0, sizeof *out);
            if (r.timed_out) {
                sbx_proc_result_free(&r);
                out->timed_out = true;
                out->exit_code = -1;
            } else {
                out->oom_killed = oom || (code == 137 && limit_hit);
                finish_result(out, code, &r);
            }
            rc = 0;
        }
    }
    sbx_cg_destroy(&cg);
    return rc;
}

/* ---- public API ------------------------------------------------------------------------ */

const char *sandbox_backend_name(const sandbox_backend *b)
{
    return b->kind == BACKEND_GVISOR ? "gvisor" : "bubblewrap";
}

int sandbox_exec(sandbox_backend *b, const char *workspace_dir, const char *name,
                 const char *command, int timeout_seconds, sandbox_result *out,
                 char *errbuf, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (errlen)
        errbuf[0] = '\0';
    struct stat st;
    if (!workspace_dir || workspace_dir[0] != '/' || stat(workspace_dir, &st) != 0 ||
        !S_ISDIR(st.st_mode)) {
        snprintf(errbuf, errlen, "workspace %s is not an absolute path to a directory",
                 workspace_dir ? workspace_dir : "(null)");
        return -1;
    }
    if (!command)
        command = "";
    if (timeout_seconds < 1)
        timeout_seconds = 1;
    if (timeout_seconds > 86400) /* keeps the millisecond deadline within an int */
        timeout_seconds = 86400;
    char id[ID_MAX + 1];
    make_id(name, id, sizeof id);
    int rc = b->kind == BACKEND_GVISOR
                 ? exec_gvisor(b, workspace_dir, id, command, timeout_seconds, out, errbuf, errlen)
                 : exec_bwrap(b, workspace_dir, id, command, timeout_seconds, out, errbuf, errlen);
    if (rc != 0)
        return -1;
    /* Callers get NUL-terminated streams even when empty. */
    if (!out->out)
        out->out = calloc(1, 1);
    if (!out->err)
        out->err = calloc(1, 1);
    if (!out->out || !out->err) {
        sandbox_result_free(out);
        snprintf(errbuf, errlen, "out of memory");
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

/* Runs `true` in a scratch workspace to prove the backend works here. */
static int probe_backend(sandbox_backend *b, const char *state_dir, char *errbuf, size_t errlen)
{
    char *ws = path_join(state_dir, "sandbox-probe");
    if (!ws) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    int rc = -1;
    if (mkdir_mode(ws, 0755, errbuf, errlen) == 0) {
        if (chown(ws, SANDBOX_UID, SANDBOX_GID) != 0) {
            snprintf(errbuf, errlen, "cannot chown %s: %s", ws, strerror(errno));
        } else {
            sandbox_result r;
            if (sandbox_exec(b, ws, "probe", "true", 30, &r, errbuf, errlen) == 0) {
                if (r.exit_code == 0)
                    rc = 0;
                else
                    snprintf(errbuf, errlen, "`true` exited with %d%s%.300s", r.exit_code,
                             r.err_len ? ": " : "", r.err);
                sandbox_result_free(&r);
            }
        }
    }
    (void)fs_rmtree(ws);
    free(ws);
    return rc;
}

void sandbox_backend_close(sandbox_backend *b)
{
    if (!b)
        return;
    /* Everything this backend made under the state dir (runs must have finished). */
    if (b->bundles_dir)
        (void)fs_rmtree(b->bundles_dir);
    if (b->runsc_root)
        (void)fs_rmtree(b->runsc_root);
    if (b->rootfs_dir)
        (void)fs_rmtree(b->rootfs_dir);
    free(b->rootfs_dir);
    free(b->bundles_dir);
    free(b->runsc_root);
    free(b->runsc);
    free(b->bwrap);
    free(b);
}

sandbox_backend *sandbox_backend_open(const char *state_dir, const char *runsc_path,
                                      bool require_gvisor, char *errbuf, size_t errlen)
{
    if (errlen)
        errbuf[0] = '\0';
    if (geteuid() != 0) {
        snprintf(errbuf, errlen, "the sandbox backend needs root (cgroups, runsc)");
        return NULL;
    }
    if (!state_dir || state_dir[0] != '/') {
        snprintf(errbuf, errlen, "state dir must be an absolute path");
        return NULL;
    }
    sandbox_backend *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    b->rootfs_dir = path_join(state_dir, "sandbox-root");
    b->bundles_dir = path_join(state_dir, "sandbox-bundles");
    b->runsc_root = path_join(state_dir, "runsc");
    if (!b->rootfs_dir || !b->bundles_dir || !b->runsc_root) {
        snprintf(errbuf, errlen, "out of memory");
        goto fail;
    }
    /* The server may have made state_dir already: create it if missing, keep its mode. */
    if (mkdir(state_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(errbuf, errlen, "cannot create state dir %s: %s", state_dir, strerror(errno));
        goto fail;
    }
    if (sbx_rootfs_build(b->rootfs_dir, &b->rootfs, errbuf, errlen) != 0)
        goto fail;
    if (fs_rmtree(b->bundles_dir) != 0 || mkdir_mode(b->bundles_dir, 0700, errbuf, errlen)) {
        if (!errbuf[0])
            snprintf(errbuf, errlen, "cannot clean %s: %s", b->bundles_dir, strerror(errno));
        goto fail;
    }
    if (sbx_cg_probe(errbuf, errlen) != 0)
        goto fail;

    /* runsc puts "runsc-<id>.sock" under its root: keep that within a unix socket path. */
    if (strlen(b->runsc_root) + strlen("/runsc-.sock") + ID_MAX > UNIX_PATH_LIMIT) {
        free(b->runsc_root);
        b->runsc_root = strdup("/tmp/airlockd-runsc-XXXXXX");
        if (!b->runsc_root || !mkdtemp(b->runsc_root)) {
            snprintf(errbuf, errlen, "cannot create a runsc root under /tmp: %s",
                     strerror(errno));
            goto fail;
        }
    } else if (fs_rmtree(b->runsc_root) != 0 ||
               mkdir_mode(b->runsc_root, 0700, errbuf, errlen) != 0) {
        if (!errbuf[0])
            snprintf(errbuf, errlen, "cannot clean %s: %s", b->runsc_root, strerror(errno));
        goto fail;
    }

    const char *want = runsc_path && *runsc_path ? runsc_path : getenv("AIRLOCK_RUNSC");
    b->runsc = find_program(want, "runsc");
    char why[512] = "";
    if (!b->runsc) {
        snprintf(why, sizeof why, "runsc not found (%s)",
                 want && *want ? want : "not on PATH; set AIRLOCK_RUNSC");
    } else {
        b->kind = BACKEND_GVISOR;
        if (probe_backend(b, state_dir, why, sizeof why) == 0)
            return b;
    }
    if (require_gvisor) {
        snprintf(errbuf, errlen,
                 "gVisor is required (SANDBOX_REQUIRE_GVISOR=1) but does not work: %s; "
                 "refusing the weaker bubblewrap fallback", why);
        goto fail;
    }
    b->bwrap = find_program(NULL, "bwrap");
    if (!b->bwrap) {
        snprintf(errbuf, errlen, "no sandbox available: %s; bubblewrap (bwrap) not found", why);
        goto fail;
    }
    b->kind = BACKEND_BWRAP;
    char bwhy[512] = "";
    if (probe_backend(b, state_dir, bwhy, sizeof bwhy) != 0) {
        snprintf(errbuf, errlen, "no sandbox available: %s; bubblewrap: %s", why, bwhy);
        goto fail;
    }
    fprintf(stderr, "airlockd: gVisor unavailable (%s); using the weaker bubblewrap sandbox\n",
            why);
    return b;
fail:
    sandbox_backend_close(b);
    return NULL;
}
