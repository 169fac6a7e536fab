/* Host cgroups of one airlockd (private to the sandbox backend), v1 (one directory per
 * hierarchy) or v2 (one unified tree). Layout, per hierarchy:
 *
 *   <mount>/airlockd-<16 hex of SHA-256(realpath(state dir))>/   this server's root
 *           t-<tenant>/                                           one per tenant: its CPU weight
 *               <sandbox id>/                                     one per sandbox run: its limits
 *   <mount>/airlockd-<16 hex>-builds/                             template builds (low weight, beside
 *           builds/<step id>/                                     the root: see SBX_CG_BUILD_SHARES)
 *
 * The whole runsc process tree (runsc, gofer, sentry, systrap stubs) or bubblewrap tree of a
 * run lives in its group, so the group's limits bound the sandbox and its membership tells
 * which host processes to kill.
 *
 * A tenant's CPU weight does not grow with the number of commands it runs: it is
 * SBX_CG_TENANT_SHARES × CPUs / min(its running commands, CPUs). Each command is capped at
 * one CPU, so a tenant running fewer commands than there are CPUs cannot use its equal share
 * of the machine; the kernel spreads a group's weight over the CPUs its tasks run on, which
 * would leave such a tenant's command 2/3 of a CPU beside another tenant's burners on two
 * CPUs. Concentrating the weight on its few commands gives it (nearly) the whole CPU it runs
 * on; tenants running at least one command per CPU weigh the same. The root weighs
 * SBX_CG_TENANT_SHARES × min(commands running, CPUs) against the rest of the host: what that
 * many plain processes would (a fixed weight would shrink each command's share of a busy
 * host as more commands ran). While several tenants run commands, each tenant's group is
 * also capped at CPUs / tenants running (at least one CPU): weights share the CPU on average,
 * but a command woken beside another tenant's busy loops would still wait behind them.
 *
 * Everything under the root and the builds group belongs to this state directory alone:
 * startup removes what a killed predecessor left there, and never touches another server's. */
#ifndef AIRLOCKD_SANDBOX_CGROUP_H
#define AIRLOCKD_SANDBOX_CGROUP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SBX_CG_PATH_MAX 512
#define SBX_CG_HIER_MAX 16
#define SBX_CG_NAME_MAX 64
/* The CPU weight per CPU of a tenant's group (cgroup v1 cpu.shares; v2 cpu.weight 100). */
#define SBX_CG_TENANT_SHARES 1024

/* A tenant with commands running: its group and how many. */
typedef struct {
    char group[SBX_CG_NAME_MAX];
    int runs;
    unsigned cap_cpus; /* the CPU cap written on its group (0: none) */
} sbx_cg_active;

/* What runs' groups use (sandbox/cgroup_usage.c): summed over the groups read, except the
 * peak, which is the highest of one group's. */
typedef struct sbx_cg_usage {
    uint64_t cpu_ns;            /* CPU time used (v1 cpuacct.usage, v2 cpu.stat usage_usec) */
    uint64_t memory_bytes;      /* memory charged now */
    uint64_t memory_peak_bytes; /* the highest memory charged to one group since its command began */
    uint64_t tasks;             /* host tasks now (gVisor's own threads included) */
    unsigned groups;            /* groups read */
} sbx_cg_usage;

/* The hierarchies and this server's root in each; the tenants running commands. */
typedef struct {
    bool v2;
    char root[SBX_CG_NAME_MAX];                     /* "airlockd-<16 hex>" */
    char builds[SBX_CG_NAME_MAX];                   /* "airlockd-<16 hex>-builds" */
    size_t nhier;
    char hier[SBX_CG_HIER_MAX][SBX_CG_PATH_MAX / 4]; /* mount points (v2: the one tree) */
    int memory, pids, cpu;                          /* their index in hier, or -1 */
    unsigned ncpu;                                  /* online CPUs */
    pthread_mutex_t mu;                             /* guards active */
    sbx_cg_active *active;                          /* at most one entry per running command */
    size_t nactive, cap_active;
    int total_runs;                                 /* commands running, all tenants */
    int freezer;                                    /* the freezer's index in hier, or -1 */
    int cpuacct;                                    /* CPU time accounting's index in hier, or -1 */
    /* Told the usage of every run's group just before it is removed (sbx_cg_destroy), so
     * that figures kept per session outlive their sandboxes; set before any run. */
    void (*on_retire)(void *ctx, const char *id, const struct sbx_cg_usage *u);
    void *retire_ctx;
} sbx_cg_tree;

typedef struct {
    uint64_t memory_bytes;  /* memory limit, swap forbidden */
    uint64_t pids;          /* host tasks (threads) limit */
    unsigned cpu_percent;   /* 100 = one CPU */
    /* A sandbox booted ahead of its command: no CPU quota and a low weight (SBX_CG_BOOT_SHARES)
     * while it boots, a freezer group, and not counted as a running command of its tenant until
     * sbx_cg_begin_command. false: today's run (limits from the start). */
    bool ahead;
    /* A template build's step (with ahead): its group goes under the builds top group, beside
     * this server's root, not under it (see SBX_CG_BUILD_SHARES). */
    bool build;
} sbx_cg_limits;

/* The CPU weight of a sandbox booting ahead: it yields to running commands. */
#define SBX_CG_BOOT_SHARES 128

/* One run's group. */
typedef struct {
    sbx_cg_tree *tree;
    char group[SBX_CG_NAME_MAX]; /* its tenant's group */
    bool counted;                /* it counts among the tenant's running commands */
    char rel[SBX_CG_PATH_MAX];  /* "/<root>/<tenant group>/<id>": the OCI linux.cgroupsPath */
    /* memory, pids, cpu directories (v2: dirs[0] only; empty string when absent) */
    char dirs[3][SBX_CG_PATH_MAX];
    /* Pre-built "cgroup.procs" paths so a freshly forked child can join without formatting. */
    char procs[3][SBX_CG_PATH_MAX];
    /* v1 freezer directory and its cgroup.procs (ahead only; empty otherwise) */
    char freezer_dir[SBX_CG_PATH_MAX];
    char freezer_procs[SBX_CG_PATH_MAX];
    /* v1 cpuacct directory and its cgroup.procs when CPU accounting is a hierarchy of its own
     * (empty otherwise) */
    char acct_dir[SBX_CG_PATH_MAX];
    char acct_procs[SBX_CG_PATH_MAX];
    bool ahead;                  /* made with sbx_cg_limits.ahead */
} sbx_cgroup;

/* Finds the hierarchies, removes whatever is under this server's root (processes killed,
 * frozen groups thawed first, groups removed: a killed predecessor's leftovers) and creates
 * the root. root_name: "airlockd-<16 hex>". -1 with a message when cgroups are unusable. */
int sbx_cg_tree_open(sbx_cg_tree *t, const char *root_name, char *errbuf, size_t errlen);

/* Frees what sbx_cg_tree_open allocated (the groups stay; see sbx_cg_tree_clear). */
void sbx_cg_tree_free(sbx_cg_tree *t);

/* Kills every process under this server's root and removes its groups, in every hierarchy.
 * Returns how many groups could not be removed (0 on success). */
int sbx_cg_tree_clear(const sbx_cg_tree *t, bool keep_root);

/* The group name of a tenant: "t-<tenant>" when the name is plain ([A-Za-z0-9_.-], starting
 * with a letter or digit, at most 48 bytes), else "t-_<16 hex of FNV-1a>" so that any name maps
 * to one safe directory. NULL tenant: "internal" (the backend's own probe). */
void sbx_cg_group_name(const char *tenant, char out[SBX_CG_NAME_MAX]);

/* The OCI linux.cgroupsPath sbx_cg_create gives a run's group of group and id (not a build's):
 * "/<root>/<group>/<id>". 0, or -1 when it does not fit in len. */
int sbx_cg_rel(const sbx_cg_tree *t, const char *group, const char *id, char *out, size_t len);

/* Creates the run's group <root>/<group>/<id> (and the tenant's group when new), applies
 * the limits and sets the tenant's weight for one more running command. */
int sbx_cg_create(sbx_cgroup *cg, sbx_cg_tree *t, const char *group, const char *id,
                  const sbx_cg_limits *lim, char *errbuf, size_t errlen);

/* A group made ahead (sbx_cg_limits.ahead) becomes its command's: the command's CPU quota and
 * weight, its memory failure count reset, counted as a running command of the tenant (its
 * tenant's weight written), then thawed: it never runs a moment without them. -1 when the
 * boot already hit the memory limit (an OOM kill or a failure that the command's oom_killed
 * would inherit): the caller discards the sandbox. */
int sbx_cg_begin_command(sbx_cgroup *cg, const sbx_cg_limits *lim);

/* Writes lim on an existing group (as sbx_cg_create did): a group made ahead for a sandbox
 * whose size is known only when it is taken (sandbox/restore_spare.h). 0, or -1 with a message. */
int sbx_cg_set_limits(const sbx_cgroup *cg, const sbx_cg_limits *lim, char *errbuf, size_t errlen);

/* Renames the run's group to id in every hierarchy, its processes in it (cgroup v1 renames a
 * group in place; v2 cannot: -1): a sandbox made ahead under a name of its own becomes a
 * session's, named as the session's sandboxes are (its usage and figures are found by that
 * name). On failure nothing is renamed. 0, or -1 with a message. */
int sbx_cg_rename(sbx_cgroup *cg, const char *id, char *errbuf, size_t errlen);

/* A group made ahead whose boot a command now waits for: the full CPU weight from now on. */
void sbx_cg_hurry(const sbx_cgroup *cg);

/* Freezes (true) or thaws (false) every task of a group made ahead (v1 freezer, v2
 * cgroup.freeze): an idle sandbox burns no CPU. 0, or an errno value. */
int sbx_cg_freeze(const sbx_cgroup *cg, bool frozen);

/* A later command of a session's long-lived sandbox (after sbx_cg_begin_command for its
 * first): forgets the memory failure count of the commands before (cgroup v1; v2's cannot be
 * reset), counts a running command of its tenant again, then thaws it. 0, or -1. */
int sbx_cg_next_command(sbx_cgroup *cg);

/* A command of a session's long-lived sandbox ended: its tenant has one running command fewer
 * (the sandbox, idle now, does not weigh in the tenant's CPU share). */
void sbx_cg_end_command(sbx_cgroup *cg);

/* The CPU weight of the template builds' top group (v1 cpu.shares; v2 SBX_CG_BUILD_WEIGHT, the
 * same eighth of a default group): a build yields to the host's other work but always
 * progresses (an idle group, cpu.idle, starved builds to their timeout on a busy host). It sits
 * beside this server's root, not in it: under the root it weighed as much as the root against
 * the host's other tasks, airlockd itself and its clients among them, whenever the sessions'
 * sandboxes were idle between commands (8 busy sessions kept 0.48-0.75 of their commands/s;
 * beside the root at this weight 0.80-1.10, median 1.03; bench/templates.lua). */
#define SBX_CG_BUILD_SHARES 128
#define SBX_CG_BUILD_WEIGHT 12
/* Moves the calling process into the groups. Async-signal-safe (for a forked child). */
int sbx_cg_join_self(const sbx_cgroup *cg);

/* Starts, in a thread of its own, what the next join (sbx_cg_join_self) would wait for: on
 * cgroup v1 the first move of a process after a quiet while waits ~15 ms for an RCU grace
 * period (the global lock every move takes), and moves right after it do not. The thread moves
 * this server's process into the memory group it is in already (nothing changes). v1 only. */
void sbx_cg_prime_join(const sbx_cg_tree *t);

/* True when the kernel's OOM killer killed a task of this group; failcnt_hit tells whether
 * the memory limit was reached at all (a weaker hint). */
void sbx_cg_oom_status(const sbx_cgroup *cg, bool *oom_killed, bool *limit_hit);

/* Adds to *u the usage of every run's group under the tenant's group whose id starts with
 * prefix (a session's sandboxes are named "<session id>-..."); at most a few hundred groups
 * are read. 0, or -1 when the tenant's group cannot be listed (none yet: nothing added). */
int sbx_cg_usage_of(const sbx_cg_tree *t, const char *group, const char *prefix, sbx_cg_usage *u);

/* Calls fn(ctx, id, usage) for every run's group under this server's root, every tenant's,
 * in one pass (at most 65,536). 0, or -1 when the root cannot be listed. */
typedef void (*sbx_cg_usage_fn)(void *ctx, const char *id, const sbx_cg_usage *u);
int sbx_cg_usage_each(const sbx_cg_tree *t, sbx_cg_usage_fn fn, void *ctx);

/* The usage of one run's group (zeros for what cannot be read). */
void sbx_cg_run_usage(const sbx_cgroup *cg, sbx_cg_usage *u);

/* The usage of this server's root: every sandbox together (the peak: the root's own). */
void sbx_cg_total_usage(const sbx_cg_tree *t, sbx_cg_usage *u);

/* SIGKILLs every process in the groups until none is left (bounded retries). Returns the
 * number of processes still present (0 on success). */
int sbx_cg_kill_all(const sbx_cgroup *cg);

/* The same, sparing one process (the launcher, to let it clear its own state). */
int sbx_cg_kill_all_except(const sbx_cgroup *cg, pid_t spare);

/* Kills what is left and removes the run's group from every hierarchy (runsc adds it to
 * those airlockd does not limit); the tenant's weight follows its running commands. */
void sbx_cg_destroy(sbx_cgroup *cg);

#endif
