/* gVisor: every sandbox is an OCI bundle run with `runsc run` inside a host cgroup that
 * airlockd creates under its tenant's group and names in the spec's linux.cgroupsPath. That
 * cgroup bounds memory (the sandbox's size: 256 MB by default, no swap) and CPU for the whole
 * runsc tree, records OOM kills, and lists every host process to kill on timeout; runsc reads
 * its memory limit from it and makes it the sandbox's total memory (/proc/meminfo shows 256 MB,
 * not the host's). The process limit (64 by default) is RLIMIT_NPROC inside the sandbox, which
 * gVisor's sentry enforces on sandboxed tasks only; the host pids limit just stops runaway
 * gVisor stubs. */
#include "sandbox/internal.h"
#include "sandbox/agent_stdio.h"

#include "log/log.h"
#include "sandbox/netjoin.h"
#include "fs/walk.h"
#include "sandbox/oci.h"
#include "sandbox/restore_spare.h"

#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* True when runsc still has state files for container id (a run that did not finish). */
bool sbx_gvisor_state_left(const sandbox_backend *b, const char *id)
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

void sbx_gvisor_delete(const sandbox_backend *b, const char *id)
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

void sbx_gvisor_forget(const sandbox_backend *b, const char *id)
{
    DIR *d = opendir(b->runsc_root);
    if (!d)
        return;
    size_t idlen = strlen(id);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        bool state = strncmp(e->d_name, id, idlen) == 0 && e->d_name[idlen] == '_';
        bool sock = strncmp(e->d_name, "runsc-", 6) == 0 && strncmp(e->d_name + 6, id, idlen) == 0 &&
                    strcmp(e->d_name + 6 + idlen, ".sock") == 0;
        if ((state || sock) && unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT)
            log_warn("cannot remove runsc's %s: %s", e->d_name, strerror(errno));
    }
    closedir(d);
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

static int gvisor_boot(sandbox *s, char *errbuf, size_t errlen);

/* The bundle directory and the host cgroup; the command's config.json comes with the run (or,
 * booted ahead, the waiter's now). */
static int gvisor_prepare(sandbox *s, char *errbuf, size_t errlen)
{
    s->bundle = sbx_path_join(s->b->bundles_dir, s->id);
    if (!s->bundle) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    if (mkdir(s->bundle, 0700) != 0) {
        snprintf(errbuf, errlen, "cannot create bundle %s: %s", s->bundle, strerror(errno));
        free(s->bundle);
        s->bundle = NULL;
        return -1;
    }
    sbx_cg_limits lim = sbx_command_limits(s);
    lim.ahead = s->ahead;
    if (sbx_cg_create(&s->cg, &s->b->cgroups, s->group, s->id, &lim, errbuf, errlen) != 0)
        return -1;
    s->have_cg = true;
    return s->ahead ? gvisor_boot(s, errbuf, errlen) : 0;
}

int sbx_gvisor_hide_proc_sys_net(void *ctx)
{
    (void)ctx;
    return sbx_hide_proc_sys_net();
}

/* runsc's network flags for s: --network=none, or gVisor's stack on the spec's namespace for
 * egress. */
static int network_flags(const sandbox *s, const char *argv[2])
{
    if (!s->network) {
        argv[0] = "--network=none";
        return 1;
    }
    argv[0] = "--network=sandbox";
    /* a checkpoint (pause with memory) cuts the sandbox's connections instead of failing on
     * them (runsc refuses to save a TCP endpoint still connected, even one in TIME_WAIT after
     * its socket closed, and the failed save ends the sandbox) */
    argv[1] = "--net-disconnect-ok";
    return 2;
}

int sbx_gvisor_flags(const sandbox *s, const char *argv[SBX_GVISOR_FLAGS_MAX])
{
    int n = 0;
    argv[n++] = s->b->runsc;
    argv[n++] = "--root";
    argv[n++] = s->b->runsc_root;
    argv[n++] = "--platform=systrap";
    n += network_flags(s, argv + n);
    argv[n++] = "--overlay2=none";
    argv[n++] = "--host-uds=none";
    return n;
}

/* The spec and argv of a run: command is the run's (cold), or NULL for a sandbox booted ahead
 * (the waiter gets the command on fd 3 and says "R" on fd 4, from runsc's fds 4 and 5). */
static int write_spec(sandbox *s, const char *command, char *errbuf, size_t errlen)
{
    sandbox_backend *b = s->b;
    const char *env[SBX_ENV_ALL_MAX];
    sbx_env_with_network(s, env);
    const char *agent_argv[SBX_AGENT_ARGV_MAX];
    char bind_dirs[SBX_ROOTFS_MAX_BINDS][64], nproc[16];
    /* a template's root is whole (merged /usr): no host directory besides its own /usr */
    static const sbx_rootfs no_binds;
    const sbx_rootfs *binds = s->root_dir ? &no_binds : &b->rootfs;
    char usr[PATH_MAX];
    if (snprintf(usr, sizeof usr, "%s/usr", s->root_dir ? s->root_dir : "") >= (int)sizeof usr) {
        snprintf(errbuf, errlen, "template root path too long");
        return -1;
    }
    sbx_spec spec = {
        .rootfs_dir = s->root_dir ? s->root_dir : b->rootfs_dir, .usr_dir = usr, .rootfs = binds,
        .workspace_dir = s->workspace_dir,
        .command = command, .env = env, .uid = SANDBOX_UID, .gid = SANDBOX_GID,
        .nproc = s->nproc, .tmp_mb = TMP_MB, .cgroups_path = s->cg.rel,
        .netns_path = s->network ? s->network->netns_path : NULL,
        .waiter = command ? NULL : SBX_WAITER_PATH,
        .agent_argv = s->agent ? sbx_agent_argv(s, agent_argv, bind_dirs, nproc) : NULL,
    };
    return sbx_spec_write(s->bundle, &spec, errbuf, errlen);
}

#define RUNSC_ARGV_MAX 32

/* --overlay2=none: the root stays the read-only host directory and /workspace writes go
 * straight to the host; --network=none leaves only loopback, --network=sandbox is gVisor's
 * own network stack on the namespace of the spec (egress); the cgroup is ours (runsc finds
 * it existing and leaves its limits alone). */
static void runsc_run_argv(const sandbox *s, const char *argv[RUNSC_ARGV_MAX])
{
    int n = sbx_gvisor_flags(s, argv);
    argv[n++] = "run";
    if (s->agent) {
        /* the agent speaks on runsc's stdin and stdout (which `runsc restore` maps again; a
         * passed descriptor it cannot): attached, as runs are; said so, which names a session's
         * sandbox among runsc's processes */
        argv[n++] = "--detach=false";
    } else if (s->ahead) {
        argv[n++] = "--pass-fd";
        argv[n++] = "4:3";
        argv[n++] = "--pass-fd";
        argv[n++] = "5:4";
    }
    argv[n++] = "--bundle";
    argv[n++] = s->bundle;
    argv[n++] = s->id;
    argv[n] = NULL;
}

/* The result of `runsc run` that ran a command, cold or handed over. */
static int finish_run(sandbox *s, sbx_proc_result *r, sandbox_result *out, char *errbuf, size_t errlen)
{
    int code = sbx_proc_exit_code(r->status);
    bool oom = false, limit_hit = false;
    sbx_cg_oom_status(&s->cg, &oom, &limit_hit);
    /* runsc reports its own failures as 128 with a "running container:" message. */
    if (!r->timed_out && !r->cancelled && code == 128 &&
        strncmp(capture_head(&r->err, NULL), "running container:", 18) == 0) {
        sbx_err_from_capture(&r->err, "gVisor could not start the sandbox", errbuf, errlen);
        sbx_proc_result_free(r);
        return -1;
    }
    /* A host OOM kill takes the whole sentry down; the command's status is SIGKILL. A
     * SIGKILL exit at the memory limit without a recorded kill is also the memory. */
    bool oom_killed = oom || (code == 137 && limit_hit);
    if (sbx_finish_result(out, r, oom_killed ? 137 : code, oom_killed) != 0) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static int gvisor_run_cold(sandbox *s, const char *command, int timeout_seconds, sandbox_result *out,
                           char *errbuf, size_t errlen)
{
    sandbox_backend *b = s->b;
    if (write_spec(s, command, errbuf, errlen) != 0)
        return -1;
    const char *argv[RUNSC_ARGV_MAX];
    runsc_run_argv(s, argv);
    kill_ctx kc = {b, s->id};
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env,
                       .timeout_ms = timeout_seconds * 1000, .on_deadline = runsc_kill,
                       .ctx = &kc, .grace_ms = 1500,
                       .pre_exec = s->network ? sbx_gvisor_hide_proc_sys_net : NULL};
    sbx_proc_opts_for(s, &o);
    sbx_proc_result r;
    if (sbx_proc_run(&o, &r, errbuf, errlen) != 0)
        return -1;
    return finish_run(s, &r, out, errbuf, errlen);
}

/* ---- booted ahead ---------------------------------------------------------------------- */

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Starts `runsc run` of the waiter (or the agent) in its cgroup (no CPU quota, low weight while
 * booting); the boot goes on after this returns: gvisor_boot_check tells when it is done. */
static int gvisor_boot(sandbox *s, char *errbuf, size_t errlen)
{
    /* pipes[0]: commands; [1]: "R" (the agent: neither passed, its stdin and runsc's stdout) */
    enum { NPIPES = 2 };
    int pipes[NPIPES][2];
    int npipes = s->agent ? 1 : 2;
    for (int i = 0; i < NPIPES; i++)
        pipes[i][0] = pipes[i][1] = -1;
    if (write_spec(s, NULL, errbuf, errlen) != 0)
        return -1;
    for (int i = 0; i < npipes; i++)
        if (pipe2(pipes[i], O_CLOEXEC) != 0) {
            snprintf(errbuf, errlen, "cannot create pipes: %s", strerror(errno));
            for (int j = 0; j < i; j++) {
                close_fd(&pipes[j][0]);
                close_fd(&pipes[j][1]);
            }
            return -1;
        }
    const char *argv[RUNSC_ARGV_MAX];
    runsc_run_argv(s, argv);
    int pass[NPIPES];
    pass[0] = pipes[0][0]; /* the sandbox reads commands, writes the rest */
    for (int i = 1; i < npipes; i++)
        pass[i] = pipes[i][1];
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env, .cg = &s->cg, .pass_fds = pass,
                       .npass_fds = s->agent ? 0 : npipes, .stdin_fd = s->agent ? pass[0] : -1,
                       .pre_exec = s->network ? sbx_gvisor_hide_proc_sys_net : NULL};
    int rc = sbx_proc_start(&o, &s->child, errbuf, errlen);
    for (int i = 0; i < npipes; i++)
        close_fd(&pipes[i][i == 0 ? 0 : 1]);
    if (rc != 0) {
        for (int i = 0; i < npipes; i++)
            close_fd(&pipes[i][i == 0 ? 1 : 0]);
        return -1;
    }
    s->cmd_w = pipes[0][1];
    if (s->agent) { /* its frames come on runsc's stdout */
        s->ready_r = s->child.out;
        s->child.out = -1;
    } else {
        s->ready_r = pipes[1][0];
    }
    return 0;
}

int sbx_gvisor_boot_check(sandbox *s, char *errbuf, size_t errlen)
{
    if (s->booted)
        return 1;
    if (s->ready_r < 0) {
        snprintf(errbuf, errlen, "sandbox %s is not booting", s->id);
        return -1;
    }
    struct pollfd pf = {.fd = s->ready_r, .events = POLLIN};
    if (poll(&pf, 1, 0) == 0)
        return 0;
    char c = 0;
    ssize_t n;
    if (s->agent) { /* FRAME_BOOTED (written whole), then its stdout is every slot's frames */
        frame_head h;
        bool booted = frame_recv(s->ready_r, &h, NULL, 0) == 0 && h.type == FRAME_BOOTED &&
                      (s->io = agent_stdio_new(s->ready_r, &s->agent_mu)) != NULL;
        if (booted)
            s->ready_r = -1;
        n = 1;
        c = booted ? 'R' : 0;
    } else {
        do
            n = read(s->ready_r, &c, 1);
        while (n < 0 && errno == EINTR);
    }
    close_fd(&s->ready_r);
    if (n != 1 || c != 'R') {
        /* runsc gave up: its message is in the stderr pipe nobody reads yet */
        char msg[400] = "";
        ssize_t m = -1; /* never wait here: a straggler may still hold the pipe open */
        if (s->child.err >= 0 && fcntl(s->child.err, F_SETFL, O_NONBLOCK) == 0)
            m = read(s->child.err, msg, sizeof msg - 1);
        msg[m > 0 ? m : 0] = '\0';
        for (char *p = msg; *p; p++)
            if (*p == '\n')
                *p = ' ';
        snprintf(errbuf, errlen, "sandbox %s did not boot%s%s", s->id, msg[0] ? ": " : "", msg);
        return -1;
    }
    s->booted = true;
    /* idle until its command: systrap's stubs would otherwise spin a few % of a CPU each */
    int err = sbx_cg_freeze(&s->cg, true);
    if (err)
        log_warn("cannot freeze idle sandbox %s: %s", s->id, strerror(err));
    return 1;
}

typedef struct {
    sandbox *s;
} stop_ctx;

/* Deadline of a handed-over command: kill the sandbox but not `runsc run`, which then exits at
 * once and clears its own state (no runsc CLI spawned). */
static void stop_ahead(void *arg)
{
    const stop_ctx *k = arg;
    (void)sbx_cg_kill_all_except(&k->s->cg, k->s->child.pid);
}

/* Hands the command to the waiter and collects the result; the timeout counts from here. */
static int gvisor_run_ahead(sandbox *s, const char *command, int timeout_seconds, sandbox_result *out,
                            char *errbuf, size_t errlen)
{
    if (!s->booted || s->cmd_w < 0) {
        snprintf(errbuf, errlen, "sandbox %s has not booted", s->id);
        return -1;
    }
    size_t len = strlen(command);
    /* the whole command must fit the pipe: then one write hands it over without waiting */
    int cap = fcntl(s->cmd_w, F_GETPIPE_SZ);
    if (cap >= 0 && (size_t)cap <= len && len < SBX_WAITER_COMMAND_MAX)
        cap = fcntl(s->cmd_w, F_SETPIPE_SZ, (int)len + 1);
    if (cap < 0 || (size_t)cap <= len || len >= SBX_WAITER_COMMAND_MAX) {
        snprintf(errbuf, errlen, "command of %zu bytes is too long to hand over", len);
        return -1;
    }
    sbx_cg_limits lim = sbx_command_limits(s);
    if (sbx_cg_begin_command(&s->cg, &lim) != 0) {
        snprintf(errbuf, errlen, "sandbox %s hit its memory limit while booting", s->id);
        return -1;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(s->cmd_w, command + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    if (off < len) { /* nobody reads: the sandbox died while it waited, before the command */
        snprintf(errbuf, errlen, "sandbox %s is gone: %s", s->id, strerror(errno));
        return -1;
    }
    s->sent = true;
    close_fd(&s->cmd_w); /* end of file: the waiter execs bash -c with it */
    stop_ctx kc = {s};
    sbx_proc_opts o = {.timeout_ms = timeout_seconds * 1000, .on_deadline = stop_ahead, .ctx = &kc,
                       .grace_ms = 1500};
    sbx_proc_opts_for(s, &o);
    sbx_proc_result r;
    if (sbx_proc_collect(&o, &s->child, &r, errbuf, errlen) != 0)
        return -1;
    return finish_run(s, &r, out, errbuf, errlen);
}

static int gvisor_run(sandbox *s, const char *command, int timeout_seconds, sandbox_result *out,
                      char *errbuf, size_t errlen)
{
    if (s->ahead)
        return gvisor_run_ahead(s, command, timeout_seconds, out, errbuf, errlen);
    return gvisor_run_cold(s, command, timeout_seconds, out, errbuf, errlen);
}

/* A sandbox booted ahead whose `runsc run` was not collected: kill the sandbox, give runsc a
 * moment to clear its own state, then kill and reap it. */
static void stop_uncollected(sandbox *s)
{
    close_fd(&s->cmd_w);
    close_fd(&s->ready_r);
    pid_t pid = s->child.pid;
    if (pid > 0) {
        /* (a restore into a sandbox made ahead is not that sandbox's parent: it would take
         * seconds to see it end, and gvisor_release removes its state anyway) */
        if (s->runsc_id[0])
            (void)sbx_cg_kill_all(&s->cg);
        else
            (void)sbx_cg_kill_all_except(&s->cg, pid);
        int st;
        bool reaped = false;
        for (int i = 0; i < 300 && !reaped; i++) { /* ~1.5 s */
            pid_t w = waitpid(pid, &st, WNOHANG);
            reaped = w == pid || (w < 0 && errno == ECHILD);
            if (!reaped) {
                struct timespec ts = {0, 5 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        if (!reaped) {
            (void)kill(pid, SIGKILL);
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
            }
        }
    }
    s->child.pid = -1;
    close_fd(&s->child.out);
    close_fd(&s->child.err);
}

static void gvisor_release(sandbox *s)
{
    if (s->ahead)
        stop_uncollected(s);
    if (s->have_cg)
        sbx_cg_destroy(&s->cg);
    s->have_cg = false;
    if (s->runsc_id[0] || s->spare_dir) { /* (nothing of it runs: its state files go) */
        sbx_gvisor_forget(s->b, sbx_runsc_id(s));
        sbx_spares_forget(s);
    } else if (sbx_gvisor_state_left(s->b, s->id))
        sbx_gvisor_delete(s->b, s->id);
    if (s->bundle && fs_rmtree(s->bundle) != 0 && errno != ENOENT)
        log_warn("cannot remove sandbox bundle %s: %s", s->bundle,
                 strerror(errno));
    free(s->bundle);
    s->bundle = NULL;
}

const sandbox_ops sandbox_gvisor_ops = {"gvisor", gvisor_prepare, gvisor_run, gvisor_release};
