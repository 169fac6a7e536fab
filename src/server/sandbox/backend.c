/* The sandbox backend's public side: opening the backend (gVisor, else bubblewrap, each proven
 * by a probe), and each sandbox's prepare / run / release through the backend's operations. */
#include "sandbox/internal.h"

#include "sandbox/agent_stdio.h"

#include "fs/walk.h"
#include "log/log.h"
#include "obs/metrics.h"
#include "sandbox/leftovers.h"
#include "sandbox/restore_spare.h"
#include "sandbox/programs.h"
#include "sandbox/proven.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* runsc puts "runsc-<id>.sock" under its root, within a unix socket path */
#define UNIX_PATH_LIMIT 107

/* Makes container ids (and cgroup names, a host-wide namespace) unique within this process,
 * even across several open backends. Atomic, so it needs no lock. */
static atomic_uint run_counter;

static int mkdir_mode(const char *path, mode_t mode, char *errbuf, size_t errlen)
{
    if ((mkdir(path, mode) != 0 && errno != EEXIST) || chmod(path, mode) != 0) {
        snprintf(errbuf, errlen, "cannot create directory %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Something the open has to say: kept for after the isolation line (sandbox_backend_notes). */
static void note(sandbox_backend *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(sandbox_backend *b, const char *fmt, ...)
{
    size_t used = strlen(b->notes);
    va_list ap;
    va_start(ap, fmt);
    int n = used < sizeof b->notes ? vsnprintf(b->notes + used, sizeof b->notes - used, fmt, ap) : -1;
    va_end(ap);
    if (n > 0 && used + (size_t)n + 1 < sizeof b->notes)
        strcat(b->notes, "\n");
}

/* The host path of one of our programs: env (its variable), else name beside airlockd's own
 * executable; NULL when out of memory. */
static char *program_path(const char *env, const char *name)
{
    if (env && *env)
        return strdup(env);
    char *self = sbx_self_dir();
    char *path = self ? sbx_path_join(self, name) : NULL;
    free(self);
    return path;
}

/* The program at path (NULL: out of memory) into the root at in_root, path freed. 0, or -1
 * with the reason in why. */
static int add_program(sandbox_backend *b, char *path, const char *in_root, char *why, size_t whylen)
{
    snprintf(why, whylen, "out of memory");
    int rc = path ? sbx_rootfs_add_program(b->rootfs_dir, path, in_root, why, whylen) : -1;
    free(path);
    return rc;
}

/* A file beside the agent at agent_path: its bootstrap (airlock-bootstrap.so), the kernel's
 * files (airlock-kernel*.py, .pyc). */
static char *beside_agent(const char *agent_path, const char *name)
{
    const char *slash = agent_path ? strrchr(agent_path, '/') : NULL;
    char *dir = slash ? strndup(agent_path, (size_t)(slash - agent_path) + 1) : strdup("./");
    char *path = dir ? sbx_path_join(dir, name) : NULL;
    free(dir);
    return path;
}

/* The waiter (airlock-waiter): without it every sandbox boots with its command (said once).
 * The agent (airlock-agent, with airlock-bootstrap.so beside it): without them sessions get no
 * sandbox of their own (said once when SANDBOX_EXEC_MODE=session asks for them). */
static void add_programs(sandbox_backend *b, const sandbox_settings *set)
{
    char why[512];
    if (add_program(b, program_path(set->waiter, "airlock-waiter"), SBX_WAITER_PATH, why, sizeof why) == 0)
        b->have_waiter = true;
    else
        note(b, "sandboxes boot with their command (no warm sandboxes): %s", why);
    char *agent = program_path(set->agent, "airlock-agent");
    char *bootstrap = beside_agent(agent, "airlock-bootstrap.so");
    /* without the launcher or the program sessions run no kernels (their start fails, saying
     * so); without the bytecode kernels compile the program at their start */
    if ((add_program(b, beside_agent(agent, "airlock-kernel.py"), SBX_KERNEL_PYTHON_PATH, why, sizeof why) != 0 ||
         add_program(b, beside_agent(agent, "airlock-kernel-program.py"), SBX_KERNEL_PROGRAM_PATH, why, sizeof why) !=
             0) &&
        set->session_mode)
        note(b, "sessions have no Python kernels: %s", why);
    (void)add_program(b, beside_agent(agent, "airlock-kernel-program.pyc"), SBX_KERNEL_BYTECODE_PATH, why, sizeof why);
    int rc = add_program(b, agent, SBX_AGENT_PATH, why, sizeof why);
    if (rc == 0)
        rc = add_program(b, bootstrap, AGENT_BOOTSTRAP_PATH, why, sizeof why);
    else
        free(bootstrap);
    if (rc == 0)
        b->have_agent = true;
    else if (set->session_mode)
        note(b, "commands run one sandbox each (no agent for SANDBOX_EXEC_MODE=session): %s", why);
}

/* Container ids: name (restricted to [A-Za-z0-9_.-], truncated) plus pid and a counter, so
 * several servers sharing a machine and concurrent runs never collide. */
void sbx_make_id(const char *name, char *id, size_t idlen)
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

const char *sandbox_backend_summary(const sandbox_backend *b)
{
    return b->summary;
}

const char *sandbox_backend_notes(const sandbox_backend *b)
{
    return b->notes;
}

const char *sandbox_backend_name(const sandbox_backend *b)
{
    return b->ops->name;
}

const char *sandbox_backend_cgroup_root(const sandbox_backend *b)
{
    return b->have_cgroups ? b->cgroups.root : NULL;
}

sbx_cg_limits sbx_command_limits(const sandbox *s)
{
    return (sbx_cg_limits){.memory_bytes = s->memory_bytes,
                           .pids = HOST_TASKS_LIMIT + (uint64_t)HOST_TASKS_PER_PROCESS *
                                                          (s->nproc > SANDBOX_MAX_PROCESSES ? s->nproc - SANDBOX_MAX_PROCESSES : 0),
                           .cpu_percent = s->cpu_percent};
}

sandbox *sandbox_prepare(sandbox_backend *b, const sandbox_opts *o, char *errbuf, size_t errlen)
{
    if (errlen)
        errbuf[0] = '\0';
    struct stat st;
    const char *ws = o->workspace_dir;
    if (!ws || ws[0] != '/' || stat(ws, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(errbuf, errlen, "workspace %s is not an absolute path to a directory",
                 ws ? ws : "(null)");
        return NULL;
    }
    sandbox *s = calloc(1, sizeof *s);
    if (s)
        s->workspace_dir = strdup(ws);
    if (!s || !s->workspace_dir) {
        free(s);
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    s->b = b;
    s->network = o->network;
    if (o->root_dir && (b->ops != &sandbox_gvisor_ops || !(s->root_dir = strdup(o->root_dir)))) {
        snprintf(errbuf, errlen, "templates need gVisor; this server runs %s", b->ops->name);
        free(s->workspace_dir);
        free(s);
        return NULL;
    }
    s->memory_bytes = (uint64_t)(o->size.memory_mb ? o->size.memory_mb : SANDBOX_MEMORY_MB) << 20;
    s->cpu_percent = o->size.cpu_percent ? o->size.cpu_percent : SANDBOX_CPU_PERCENT;
    s->nproc = o->size.max_processes ? o->size.max_processes : SANDBOX_MAX_PROCESSES;
    sbx_make_id(o->name, s->id, sizeof s->id);
    sbx_cg_group_name(o->tenant, s->group);
    sandbox_set_command(s, o);
    s->cmd_w = s->ready_r = -1;
    pthread_mutex_init(&s->agent_mu, NULL);
    pthread_mutex_init(&s->cmd_mu, NULL);
    s->child.pid = -1;
    s->child.out = s->child.err = -1;
    if (o->boot_ahead) {
        if (!sandbox_can_boot_ahead(b)) {
            snprintf(errbuf, errlen, "sandboxes cannot boot ahead with %s here", b->ops->name);
            sandbox_release(s);
            return NULL;
        }
        s->ahead = true;
        if (o->agent && !sandbox_can_host_session(b)) {
            snprintf(errbuf, errlen, "sessions cannot have a sandbox of their own here (no agent)");
            sandbox_release(s);
            return NULL;
        }
        s->agent = o->agent;
    }
    if (b->ops->prepare(s, errbuf, errlen) != 0) {
        metrics_sandbox_started(false);
        sandbox_release(s);
        return NULL;
    }
    metrics_sandbox_started(true);
    return s;
}

int sandbox_run(sandbox *s, const char *command, int timeout_seconds, sandbox_result *out,
                char *errbuf, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (errlen)
        errbuf[0] = '\0';
    if (s->ran) {
        snprintf(errbuf, errlen, "sandbox %s already ran its command", s->id);
        return -1;
    }
    s->ran = true;
    if (!command)
        command = "";
    if (timeout_seconds < 1)
        timeout_seconds = 1;
    if (timeout_seconds > 86400) /* keeps the millisecond deadline within an int */
        timeout_seconds = 86400;
    if (s->b->ops->run(s, command, timeout_seconds, out, errbuf, errlen) != 0)
        return -1;
    return sbx_result_streams(out, errbuf, errlen);
}

int sbx_result_streams(sandbox_result *out, char *errbuf, size_t errlen)
{
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

void sandbox_release(sandbox *s)
{
    if (!s)
        return;
    agent_stdio_free(s->io);
    s->b->ops->release(s);
    pthread_mutex_destroy(&s->agent_mu);
    pthread_mutex_destroy(&s->cmd_mu);
    free(s->workspace_dir);
    free(s->root_dir);
    free(s);
}

bool sandbox_can_host_session(const sandbox_backend *b)
{
    return b->have_agent && sandbox_can_boot_ahead(b);
}

bool sandbox_can_boot_ahead(const sandbox_backend *b)
{
    return b->have_waiter && b->ops == &sandbox_gvisor_ops;
}

int sandbox_boot_fd(const sandbox *s)
{
    return s->ready_r;
}

int sandbox_boot_check(sandbox *s, char *errbuf, size_t errlen)
{
    if (!s->ahead) {
        snprintf(errbuf, errlen, "sandbox %s was not booted ahead", s->id);
        return -1;
    }
    return sbx_gvisor_boot_check(s, errbuf, errlen);
}

void sandbox_boot_hurry(sandbox *s)
{
    if (s->ahead && s->have_cg)
        sbx_cg_hurry(&s->cg);
}

void sandbox_set_command(sandbox *s, const sandbox_opts *o)
{
    s->output_limit = o->output_limit ? o->output_limit : SANDBOX_OUTPUT_LIMIT;
    s->cancel_fd = o->cancel_fd;
    s->tap = o->tap;
}

void sandbox_prime_cgroup_join(sandbox_backend *b)
{
    if (b && b->have_cgroups)
        sbx_cg_prime_join(&b->cgroups);
}

void sandbox_abandon(sandbox *s)
{
    if (s && s->have_cg)
        (void)sbx_cg_kill_all(&s->cg);
}

bool sandbox_retry_cold(const sandbox *s)
{
    return s->ahead && !s->sent;
}

int sandbox_exec(sandbox_backend *b, const sandbox_opts *o, const char *command,
                 int timeout_seconds, sandbox_result *out, char *errbuf, size_t errlen)
{
    memset(out, 0, sizeof *out);
    sandbox *s = sandbox_prepare(b, o, errbuf, errlen);
    if (!s)
        return -1;
    int rc = sandbox_run(s, command, timeout_seconds, out, errbuf, errlen);
    sandbox_release(s);
    return rc;
}

int sandbox_backend_trust_ca(sandbox_backend *b, const char *pem_path, char *errbuf, size_t errlen)
{
    return sbx_rootfs_append_ca(b->rootfs_dir, pem_path, errbuf, errlen);
}


/* Runs `true` in a scratch workspace to prove the backend works here. */
static int probe_backend(sandbox_backend *b, const char *state_dir, char *errbuf, size_t errlen)
{
    char *ws = sbx_path_join(state_dir, "sandbox-probe");
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
            sandbox_opts o = {.workspace_dir = ws, .name = "probe", .cancel_fd = -1};
            if (sandbox_exec(b, &o, "true", 30, &r, errbuf, errlen) == 0) {
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

/* The probe, unless this boot already proved the same backend (sandbox/proven.h): kind and
 * program name it ("gvisor" and runsc, "bubblewrap" and bwrap). */
static int prove_backend(sandbox_backend *b, const char *kind, const char *program, const char *state_dir,
                         char *errbuf, size_t errlen)
{
    char name[SBX_PROVEN_NAME_MAX];
    bool named = sbx_proven_name(kind, program, state_dir, name, sizeof name);
    if (named && sbx_proven(name)) {
        log_debug("isolation: %s proven earlier on this boot (" SBX_PROVEN_DIR "/%s): no probe", kind, name);
        return 0;
    }
    int rc = probe_backend(b, state_dir, errbuf, errlen);
    if (rc == 0 && named)
        sbx_proven_keep(name);
    return rc;
}

void sandbox_backend_restore_ahead(sandbox_backend *b, int max, int idle_seconds)
{
    /* (cgroup v2 cannot rename a spare's group to its session's: none are made there) */
    if (b && b->ops == &sandbox_gvisor_ops && b->have_cgroups && !b->cgroups.v2)
        sbx_spares_configure(b->spares, max, idle_seconds);
}

void sandbox_restore_ahead_want(sandbox_backend *b, const char *tenant, const char *image_dir)
{
    char group[SBX_CG_NAME_MAX];
    if (b) {
        sbx_cg_group_name(tenant, group);
        sbx_spares_want(b->spares, group, image_dir);
    }
}

void sandbox_restore_ahead_drop(sandbox_backend *b, const char *tenant)
{
    char group[SBX_CG_NAME_MAX];
    if (b) {
        sbx_cg_group_name(tenant, group);
        sbx_spares_drop(b->spares, group);
    }
}

int sandbox_restore_ahead_count(const sandbox_backend *b)
{
    return b ? sbx_spares_ready(b->spares) : 0;
}

void sandbox_backend_close(sandbox_backend *b)
{
    if (!b)
        return;
    sbx_spares_close(b->spares);
    /* Everything this backend made under the state dir (runs must have finished). */
    if (b->bundles_dir)
        (void)fs_rmtree(b->bundles_dir);
    if (b->runsc_root)
        (void)fs_rmtree(b->runsc_root);
    if (b->rootfs_dir)
        (void)fs_rmtree(b->rootfs_dir);
    if (b->have_cgroups) {
        if (sbx_cg_tree_clear(&b->cgroups, false) != 0)
            log_warn("some cgroups under %s could not be removed", b->cgroups.root);
        sbx_cg_tree_free(&b->cgroups);
    }
    free(b->rootfs_dir);
    free(b->bundles_dir);
    free(b->runsc_root);
    free(b->runsc);
    free(b->bwrap);
    pthread_mutex_destroy(&b->version_mu);
    free(b);
}

int sbx_hashed_name(const char *prefix, const char *text, char *out, size_t outlen)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    if (EVP_Digest(text, strlen(text), md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen < 8)
        return -1;
    int n = snprintf(out, outlen, "%s%02x%02x%02x%02x%02x%02x%02x%02x", prefix, md[0], md[1], md[2],
                     md[3], md[4], md[5], md[6], md[7]);
    return n > 0 && (size_t)n < outlen ? 0 : -1;
}

/* The runsc root when <state>/runsc would make its control socket paths too long: a
 * directory under /tmp named after the state dir, so a restart finds its predecessor's.
 * Refused unless it is a directory of ours (root, not a symlink). */
static char *runsc_root_in_tmp(const char *state_dir, char *errbuf, size_t errlen)
{
    char name[64];
    if (sbx_hashed_name("/tmp/airlockd-runsc-", state_dir, name, sizeof name) != 0) {
        snprintf(errbuf, errlen, "cannot name a runsc root: SHA-256 failed");
        return NULL;
    }
    struct stat st;
    if (mkdir(name, 0700) != 0 && errno != EEXIST) {
        snprintf(errbuf, errlen, "cannot create the runsc root %s: %s", name, strerror(errno));
        return NULL;
    }
    if (lstat(name, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || chmod(name, 0700) != 0) {
        snprintf(errbuf, errlen, "%s is not airlockd's runsc root (a directory owned by root)", name);
        return NULL;
    }
    return strdup(name);
}

#define WEAKER "bubblewrap, the weaker sandbox: commands share the host kernel"

/* bubblewrap, proven by a probe; why_not_gvisor: what made it the choice. */
static int open_bwrap(sandbox_backend *b, const sandbox_settings *set, const char *state_dir,
                      const char *why_not_gvisor, char *errbuf, size_t errlen)
{
    b->bwrap = sbx_find_program(NULL, set->search_path, "bwrap");
    if (!b->bwrap) {
        snprintf(errbuf, errlen, "no sandbox available: %s; bubblewrap (bwrap) not found", why_not_gvisor);
        return -1;
    }
    b->ops = &sandbox_bwrap_ops;
    char why[512] = "";
    if (prove_backend(b, "bubblewrap", b->bwrap, state_dir, why, sizeof why) != 0) {
        snprintf(errbuf, errlen, "no sandbox available: %s; bubblewrap: %s", why_not_gvisor, why);
        return -1;
    }
    return 0;
}

/* The isolation the settings ask for: bubblewrap when asked for; else gVisor (runsc found as
 * sandbox/programs.h says, proven by a probe), falling back to bubblewrap only with
 * SANDBOX_ISOLATION=auto (or SANDBOX_REQUIRE_GVISOR=0). */
static int choose_isolation(sandbox_backend *b, const sandbox_settings *set, const char *state_dir, char *errbuf,
                            size_t errlen)
{
    const char *by = set->isolation_by;
    if (set->isolation == SANDBOX_ISOLATION_BUBBLEWRAP) {
        snprintf(b->summary, sizeof b->summary, WEAKER " (asked for by %s)", by ? by : "the settings");
        return open_bwrap(b, set, state_dir, "bubblewrap asked for", errbuf, errlen);
    }
    char why[512] = "";
    if ((b->runsc = sbx_find_runsc(set, why, sizeof why))) {
        b->ops = &sandbox_gvisor_ops;
        if (prove_backend(b, "gvisor", b->runsc, state_dir, why, sizeof why) == 0) {
            snprintf(b->summary, sizeof b->summary, "gvisor (runsc %s)", b->runsc);
            return 0;
        }
    }
    if (set->isolation == SANDBOX_ISOLATION_GVISOR) {
        snprintf(errbuf, errlen, "gVisor is required (%s) but does not work: %s; refusing the weaker bubblewrap fallback",
                 by ? by : "the default; SANDBOX_ISOLATION=bubblewrap runs on bubblewrap instead", why);
        return -1;
    }
    snprintf(b->summary, sizeof b->summary, WEAKER " (%s: gVisor unavailable: %s)", by ? by : "auto", why);
    return open_bwrap(b, set, state_dir, why, errbuf, errlen);
}

sandbox_backend *sandbox_backend_open(const char *state_dir, const sandbox_settings *set, char *errbuf,
                                      size_t errlen)
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
    pthread_mutex_init(&b->version_mu, NULL);
    b->rootfs_dir = sbx_path_join(state_dir, "sandbox-root");
    b->bundles_dir = sbx_path_join(state_dir, "sandbox-bundles");
    b->runsc_root = sbx_path_join(state_dir, "runsc");
    if (!b->rootfs_dir || !b->bundles_dir || !b->runsc_root) {
        snprintf(errbuf, errlen, "out of memory");
        goto fail;
    }
    /* The server may have made state_dir already: create it if missing, keep its mode. */
    if (mkdir(state_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(errbuf, errlen, "cannot create state dir %s: %s", state_dir, strerror(errno));
        goto fail;
    }
    /* runsc puts "runsc-<id>.sock" under its root: keep that within a unix socket path. */
    if (strlen(b->runsc_root) + strlen("/runsc-.sock") + ID_MAX > UNIX_PATH_LIMIT) {
        free(b->runsc_root);
        if (!(b->runsc_root = runsc_root_in_tmp(state_dir, errbuf, errlen)))
            goto fail;
    }
    /* What a killed predecessor on this state dir left: processes and groups under our
     * cgroup root, then runsc processes of our runsc root that escaped them, then the
     * containers' state. Only this state dir's names are touched. */
    char cg_root[SBX_CG_NAME_MAX];
    if (sbx_hashed_name("airlockd-", state_dir, cg_root, sizeof cg_root) != 0) {
        snprintf(errbuf, errlen, "cannot name the cgroup root: SHA-256 failed");
        goto fail;
    }
    if (sbx_cg_tree_open(&b->cgroups, cg_root, errbuf, errlen) != 0)
        goto fail;
    b->have_cgroups = true;
    int stray = sbx_kill_runsc_leftovers(b->runsc_root);
    if (stray > 0)
        note(b, "killed %d process(es) of runsc containers left under %s", stray, b->runsc_root);
    if (fs_rmtree(b->runsc_root) != 0 || mkdir_mode(b->runsc_root, 0700, errbuf, errlen) != 0) {
        if (!errbuf[0])
            snprintf(errbuf, errlen, "cannot clean %s: %s", b->runsc_root, strerror(errno));
        goto fail;
    }
    if (sbx_rootfs_build(b->rootfs_dir, &b->rootfs, errbuf, errlen) != 0)
        goto fail;
    add_programs(b, set);
    if (fs_rmtree(b->bundles_dir) != 0 || mkdir_mode(b->bundles_dir, 0700, errbuf, errlen)) {
        if (!errbuf[0])
            snprintf(errbuf, errlen, "cannot clean %s: %s", b->bundles_dir, strerror(errno));
        goto fail;
    }

    if (!(b->spares = sbx_spares_open(b, state_dir, errbuf, errlen)))
        goto fail;

    if (choose_isolation(b, set, state_dir, errbuf, errlen) == 0)
        return b;
fail:
    log_lines(LV_WARN, b->notes); /* the error comes next */
    sandbox_backend_close(b);
    return NULL;
}
