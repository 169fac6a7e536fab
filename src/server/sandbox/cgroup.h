/* Host cgroups for one sandbox run (private to the sandbox backend): cgroup v1 (one directory
 * per controller) or v2 (one unified directory). The whole runsc process tree (runsc, gofer,
 * sentry, systrap stubs) or the bubblewrap tree lives in it, so its limits bound the sandbox
 * and its membership tells which host processes to kill. */
#ifndef AIRLOCKD_SANDBOX_CGROUP_H
#define AIRLOCKD_SANDBOX_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SBX_CG_PATH_MAX 512

typedef struct {
    uint64_t memory_bytes;  /* memory limit, swap forbidden */
    uint64_t pids;          /* host tasks (threads) limit */
    unsigned cpu_percent;   /* 100 = one CPU */
} sbx_cg_limits;

typedef struct {
    bool v2;
    /* v1: memory, pids, cpu directories (empty string when that controller is absent);
     * v2: dirs[0] only. */
    char dirs[3][SBX_CG_PATH_MAX];
    /* Pre-built "cgroup.procs" paths so a freshly forked child can join without formatting. */
    char procs[3][SBX_CG_PATH_MAX];
} sbx_cgroup;

/* Checks that cgroups are usable and creates the parent "airlock" group(s). */
int sbx_cg_probe(char *errbuf, size_t errlen);

/* Creates the groups for one run named id and applies the limits. */
int sbx_cg_create(sbx_cgroup *cg, const char *id, const sbx_cg_limits *lim,
                  char *errbuf, size_t errlen);

/* Moves the calling process into the groups. Async-signal-safe (for a forked child). */
int sbx_cg_join_self(const sbx_cgroup *cg);

/* True when the kernel's OOM killer killed a task of this group; failcnt_hit tells whether
 * the memory limit was reached at all (a weaker hint). */
void sbx_cg_oom_status(const sbx_cgroup *cg, bool *oom_killed, bool *limit_hit);

/* SIGKILLs every process in the groups until none is left (bounded retries). Returns the
 * number of processes still present (0 on success). */
int sbx_cg_kill_all(const sbx_cgroup *cg);

/* Kills what is left and removes the groups. */
void sbx_cg_destroy(sbx_cgroup *cg);

#endif
