/* The sandbox side of a template build: its host program and its setup's gVisor sandbox, each
 * in a cgroup of its own under the "builds" group of low CPU weight (see build.h). */
#include "sandbox/build.h"

#include "fs/walk.h"
#include "sandbox/internal.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BUILDS_GROUP "builds"
/* The setup's /tmp (its own tmpfs, thrown away with the sandbox). */
#define SETUP_TMP "size=512m"

/* Runs each command ("$@") with sh -c, stops at the first failure with its code and says
 * which one it was; the commands are arguments, never part of this text. */
static const char SETUP_SCRIPT[] =
    "for c do printf '+ %s\\n' \"$c\" >&2; sh -c \"$c\" || { s=$?; "
    "printf 'setup command exited with %d: %s\\n' \"$s\" \"$c\" >&2; exit \"$s\"; }; done";

static const char *const setup_env[] = {
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME=/root",
    "DEBIAN_FRONTEND=noninteractive",
    "LC_ALL=C.UTF-8",
    NULL,
};

bool sandbox_backend_has_templates(const sandbox_backend *b)
{
    return b && b->ops == &sandbox_gvisor_ops && b->have_cgroups;
}

/* The step's cgroup under the builds' top group of a low weight, beside this server's root
 * (sandbox/cgroup.h SBX_CG_BUILD_SHARES). */
static int build_group(sandbox_backend *b, const char *id, sbx_cgroup *cg, char *errbuf, size_t errlen)
{
    if (!b->have_cgroups) {
        snprintf(errbuf, errlen, "template builds need cgroups");
        return -1;
    }
    /* ahead: no CPU quota and the low weight of a boot; not counted as a tenant's command */
    sbx_cg_limits lim = {.memory_bytes = SANDBOX_BUILD_MEMORY, .pids = SANDBOX_BUILD_TASKS, .cpu_percent = 100,
                         .ahead = true, .build = true};
    return sbx_cg_create(cg, &b->cgroups, BUILDS_GROUP, id, &lim, errbuf, errlen);
}

/* The result of a step's run (memory included: a build that hit its limit says so). */
static int finish(sbx_cgroup *cg, sbx_proc_result *r, sandbox_result *out, char *errbuf, size_t errlen)
{
    bool oom = false, hit = false;
    sbx_cg_oom_status(cg, &oom, &hit);
    int code = sbx_proc_exit_code(r->status);
    bool oom_killed = oom || (code == 137 && hit);
    if (sbx_finish_result(out, r, oom_killed ? 137 : code, oom_killed) != 0) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    return sbx_result_streams(out, errbuf, errlen);
}

static void proc_opts(sbx_proc_opts *o, const sandbox_build_step *st, const sbx_cgroup *cg)
{
    o->lowest_priority = true;
    o->cg = cg;
    o->tap = st->tap;
    o->timeout_ms = (st->timeout_seconds > 0 ? st->timeout_seconds : 600) * 1000;
    o->grace_ms = 1500;
    o->cancel_fd = st->cancel_fd;
    o->output_limit = 64 * 1024;
}

int sandbox_build_exec(sandbox_backend *b, const sandbox_build_step *st, const char *const *argv,
                       const char *const *envp, sandbox_result *out, char *errbuf, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char id[ID_MAX + 1];
    sbx_make_id(st->name, id, sizeof id);
    sbx_cgroup cg;
    if (build_group(b, id, &cg, errbuf, errlen) != 0)
        return -1;
    sbx_proc_opts o = {.argv = argv, .envp = envp};
    proc_opts(&o, st, &cg);
    sbx_proc_result r;
    int rc = sbx_proc_run(&o, &r, errbuf, errlen);
    if (rc == 0)
        rc = finish(&cg, &r, out, errbuf, errlen);
    sbx_cg_destroy(&cg);
    return rc;
}

/* json_pack's "o" steals; a NULL anywhere fails the whole pack. */
static json_t *mount_of(const char *dst, const char *type, const char *src, const char *opts)
{
    json_t *o = json_array();
    char buf[128];
    snprintf(buf, sizeof buf, "%s", opts);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); o && t; t = strtok_r(NULL, ",", &save))
        if (json_array_append_new(o, json_string(t)) != 0) {
            json_decref(o);
            return NULL;
        }
    return o ? json_pack("{s:s, s:s, s:s, s:o}", "destination", dst, "type", type, "source", src, "options", o)
             : NULL;
}

static json_t *strings(const char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_string_nocheck(v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* The setup sandbox's config.json: the root writable, root inside with the capabilities of a
 * package's maintainer scripts, no network (a namespace of its own with loopback only). */
static int write_setup_spec(const char *bundle, const char *root_dir, const char *cgroups_path,
                            const char *const *commands, size_t n, char *errbuf, size_t errlen)
{
    static const char *const caps[] = {"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID",
                                       "CAP_SETUID", "CAP_SETGID", "CAP_KILL"};
    size_t ncaps = sizeof caps / sizeof caps[0];
    const char **argv = calloc(n + 5, sizeof *argv);
    if (!argv) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    argv[0] = "/bin/sh";
    argv[1] = "-c";
    argv[2] = SETUP_SCRIPT;
    argv[3] = "setup";
    for (size_t i = 0; i < n; i++)
        argv[4 + i] = commands[i];
    json_t *mounts = json_pack("[o, o, o]", mount_of("/proc", "proc", "proc", "nosuid,noexec,nodev"),
                               mount_of("/dev", "tmpfs", "tmpfs", "nosuid,strictatime,mode=755,size=65536k"),
                               mount_of("/tmp", "tmpfs", "tmpfs", "nosuid,nodev,mode=1777," SETUP_TMP));
    json_t *root = json_pack(
        "{s:s, s:{s:b, s:{s:i, s:i}, s:o, s:o, s:s, s:{s:o, s:o, s:o, s:[], s:[]}, s:b},"
        " s:{s:s, s:b}, s:s, s:o, s:{s:[{s:s}, {s:s}, {s:s}, {s:s}, {s:s}], s:s}}",
        "ociVersion", "1.0.2",
        "process", "terminal", 0, "user", "uid", 0, "gid", 0, "args", strings(argv, n + 4),
        "env", strings(setup_env, sizeof setup_env / sizeof setup_env[0] - 1), "cwd", "/",
        "capabilities", "bounding", strings(caps, ncaps), "effective", strings(caps, ncaps), "permitted",
        strings(caps, ncaps), "inheritable", "ambient", "noNewPrivileges", 1,
        "root", "path", root_dir, "readonly", 0,
        "hostname", "build",
        "mounts", mounts,
        "linux", "namespaces", "type", "pid", "type", "network", "type", "ipc", "type", "uts", "type", "mount",
        "cgroupsPath", cgroups_path);
    free(argv);
    if (!root) {
        snprintf(errbuf, errlen, "cannot build the setup's OCI spec");
        return -1;
    }
    char path[PATH_MAX];
    int rc = 0;
    if (snprintf(path, sizeof path, "%s/config.json", bundle) >= (int)sizeof path ||
        json_dump_file(root, path, JSON_COMPACT) != 0) {
        snprintf(errbuf, errlen, "cannot write the setup's OCI spec in %s", bundle);
        rc = -1;
    }
    json_decref(root);
    return rc;
}

int sandbox_build_setup(sandbox_backend *b, const sandbox_build_step *st, const char *root_dir,
                        const char *const *commands, size_t n, sandbox_result *out, char *errbuf,
                        size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!sandbox_backend_has_templates(b)) {
        snprintf(errbuf, errlen, "a template's setup needs gVisor");
        return -1;
    }
    char id[ID_MAX + 1];
    sbx_make_id(st->name, id, sizeof id);
    char *bundle = sbx_path_join(b->bundles_dir, id);
    if (!bundle || mkdir(bundle, 0700) != 0) {
        snprintf(errbuf, errlen, "cannot create the setup's bundle: %s", bundle ? strerror(errno) : "out of memory");
        free(bundle);
        return -1;
    }
    sbx_cgroup cg;
    int rc = build_group(b, id, &cg, errbuf, errlen);
    if (rc == 0) {
        rc = write_setup_spec(bundle, root_dir, cg.rel, commands, n, errbuf, errlen);
        if (rc == 0) {
            const char *argv[] = {b->runsc, "--root", b->runsc_root, "--platform=systrap", "--network=none",
                                  "--overlay2=none", "--host-uds=none", "run", "--bundle", bundle, id, NULL};
            sbx_proc_opts o = {.argv = argv, .envp = launcher_env};
            proc_opts(&o, st, &cg);
            sbx_proc_result r;
            rc = sbx_proc_run(&o, &r, errbuf, errlen);
            if (rc == 0)
                rc = finish(&cg, &r, out, errbuf, errlen);
        }
        sbx_cg_destroy(&cg);
    }
    if (sbx_gvisor_state_left(b, id))
        sbx_gvisor_delete(b, id);
    (void)fs_rmtree(bundle);
    free(bundle);
    return rc;
}

int sandbox_backend_finish_root(sandbox_backend *b, const char *dir, char *errbuf, size_t errlen)
{
    return sbx_rootfs_finish_template(dir, b->rootfs_dir, errbuf, errlen);
}
