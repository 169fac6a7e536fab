/* gVisor: every sandbox is an OCI bundle run with `runsc run` inside a host cgroup that
 * airlockd creates under its tenant's group and names in the spec's linux.cgroupsPath. That
 * cgroup bounds memory (256 MB, no swap) and CPU for the whole runsc tree, records OOM kills,
 * and lists every host process to kill on timeout; runsc reads its memory limit from it and
 * makes it the sandbox's total memory (/proc/meminfo shows 256 MB, not the host's). The 64-process limit is RLIMIT_NPROC inside the sandbox, which gVisor's sentry
 * enforces on sandboxed tasks only; the host pids limit just stops runaway gVisor stubs. */
#include "sandbox/internal.h"

#include "egress/netns.h"
#include "fs/walk.h"
#include "sandbox/oci.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* The bundle directory and the host cgroup; the command's config.json comes with the run. */
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
    sbx_cg_limits lim = {.memory_bytes = MEMORY_LIMIT, .pids = HOST_TASKS_LIMIT,
                         .cpu_percent = 100};
    if (sbx_cg_create(&s->cg, &s->b->cgroups, s->group, s->id, &lim, errbuf, errlen) != 0)
        return -1;
    s->have_cg = true;
    return 0;
}

/* runsc's pre-exec step for a sandbox with network (see egress_hide_proc_sys_net). */
static int hide_proc_sys_net(void *ctx)
{
    (void)ctx;
    return egress_hide_proc_sys_net();
}

static int gvisor_run(sandbox *s, const char *command, int timeout_seconds, sandbox_result *out,
                      char *errbuf, size_t errlen)
{
    sandbox_backend *b = s->b;
    const char *env[SBX_ENV_ALL_MAX];
    sbx_env_with_network(s, env);
    sbx_spec spec = {
        .rootfs_dir = b->rootfs_dir, .rootfs = &b->rootfs, .workspace_dir = s->workspace_dir,
        .command = command, .env = env, .uid = SANDBOX_UID, .gid = SANDBOX_GID,
        .nproc = NPROC_LIMIT, .tmp_mb = TMP_MB, .cgroups_path = s->cg.rel,
        .netns_path = s->network ? s->network->netns_path : NULL,
    };
    if (sbx_spec_write(s->bundle, &spec, errbuf, errlen) != 0)
        return -1;
    /* --overlay2=none: the root stays the read-only host directory and /workspace writes go
     * straight to the host; --network=none leaves only loopback, --network=sandbox is gVisor's
     * own network stack on the namespace of the spec (egress); the cgroup is ours (runsc finds
     * it existing and leaves its limits alone). */
    const char *argv[] = {b->runsc, "--root", b->runsc_root, "--platform=systrap",
                          s->network ? "--network=sandbox" : "--network=none", "--overlay2=none",
                          "--host-uds=none", "run", "--bundle", s->bundle, s->id, NULL};
    kill_ctx kc = {b, s->id};
    sbx_proc_opts o = {.argv = argv, .envp = launcher_env,
                       .timeout_ms = timeout_seconds * 1000, .on_deadline = runsc_kill,
                       .ctx = &kc, .grace_ms = 1500,
                       .pre_exec = s->network ? hide_proc_sys_net : NULL};
    sbx_proc_opts_for(s, &o);
    sbx_proc_result r;
    if (sbx_proc_run(&o, &r, errbuf, errlen) != 0)
        return -1;
    int code = sbx_proc_exit_code(r.status);
    bool oom = false, limit_hit = false;
    sbx_cg_oom_status(&s->cg, &oom, &limit_hit);
    /* runsc reports its own failures as 128 with a "running container:" message. */
    if (!r.timed_out && !r.cancelled && code == 128 &&
        strncmp(capture_head(&r.err, NULL), "running container:", 18) == 0) {
        sbx_err_from_capture(&r.err, "gVisor could not start the sandbox", errbuf, errlen);
        sbx_proc_result_free(&r);
        return -1;
    }
    /* A host OOM kill takes the whole sentry down; the command's status is SIGKILL. A
     * SIGKILL exit at the memory limit without a recorded kill is also the memory. */
    bool oom_killed = oom || (code == 137 && limit_hit);
    if (sbx_finish_result(out, &r, oom_killed ? 137 : code, oom_killed) != 0) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static void gvisor_release(sandbox *s)
{
    if (s->have_cg)
        sbx_cg_destroy(&s->cg);
    s->have_cg = false;
    if (runsc_state_left(s->b, s->id))
        runsc_delete(s->b, s->id);
    if (s->bundle && fs_rmtree(s->bundle) != 0 && errno != ENOENT)
        fprintf(stderr, "airlockd: cannot remove sandbox bundle %s: %s\n", s->bundle,
                strerror(errno));
    free(s->bundle);
    s->bundle = NULL;
}

const sandbox_ops sandbox_gvisor_ops = {"gvisor", gvisor_prepare, gvisor_run, gvisor_release};
