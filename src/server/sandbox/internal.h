/* What the sandbox backends share (private to sandbox/): the backend and sandbox records,
 * the operations each backend provides, the limits and environments of every sandbox. */
#ifndef AIRLOCKD_SANDBOX_INTERNAL_H
#define AIRLOCKD_SANDBOX_INTERNAL_H

#include "sandbox/cgroup.h"
#include "sandbox/proc.h"
#include "sandbox/rootfs.h"
#include "sandbox/sandbox.h"
#include "../../agent/protocol.h"

#include <pthread.h>
#include <sys/types.h>
#include <time.h>

/* gVisor's sentry, gofer and systrap stubs are host tasks: a fork bomb at 64 processes
 * peaked at ~145 of them; this only stops a runaway sentry, not sandboxed processes (plus
 * HOST_TASKS_PER_PROCESS for each process a sandbox may have beyond the default 64). */
#define HOST_TASKS_LIMIT 1024
#define HOST_TASKS_PER_PROCESS 4
#define TMP_MB 64
#define TMP_SIZE_STR "64m"
#define ID_NAME_MAX 24
#define ID_MAX (ID_NAME_MAX + 1 + 8 + 1 + 8)
#define SANDBOX_ENV_MAX 16 /* entries of sandbox_env */

/* One backend's steps (see sandbox.h); prepare and run report failures in errbuf. */
typedef struct {
    const char *name; /* sandbox_backend_name */
    int (*prepare)(sandbox *s, char *errbuf, size_t errlen);
    int (*run)(sandbox *s, const char *command, int timeout_seconds, sandbox_result *out,
               char *errbuf, size_t errlen);
    void (*release)(sandbox *s); /* also after a failed prepare */
} sandbox_ops;

extern const sandbox_ops sandbox_gvisor_ops;
extern const sandbox_ops sandbox_bwrap_ops;

struct sandbox_backend {
    bool have_waiter;   /* SBX_WAITER_PATH is in the root: sandboxes can boot ahead */
    bool have_agent;    /* SBX_AGENT_PATH is in the root: sessions can have a sandbox of their own */
    const sandbox_ops *ops;
    char *rootfs_dir;   /* generated read-only root */
    char *bundles_dir;  /* one OCI bundle per gVisor sandbox */
    char *runsc_root;   /* runsc --root */
    char *runsc;        /* absolute path of runsc */
    char *bwrap;        /* absolute path of bwrap (fallback) */
    sbx_rootfs rootfs;
    sbx_cg_tree cgroups; /* this server's cgroup root in each hierarchy */
    bool have_cgroups;
    sandbox_retire_hook on_retire; /* sandbox_backend_on_retire */
    void *retire_ctx;
    /* runsc's version as last read (sandbox_runsc_version) and the binary it was read from:
     * read again only when that file changes (a pause and a resume each need it) */
    pthread_mutex_t version_mu;
    struct {
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtime;
        char text[128]; /* "" until read */
    } runsc_version;
    struct sbx_spares *spares; /* sandboxes made ahead for resumes (restore_spare.h); NULL: none */
    char summary[768];   /* sandbox_backend_summary */
    char notes[1024];    /* sandbox_backend_notes */
};

struct sandbox {
    sandbox_backend *b;
    char id[ID_MAX + 1];  /* container id and cgroup name: unique on this host */
    /* Restored into a sandbox created ahead (sandbox/restore_spare.h): runsc's container id for
     * it (its cgroup was renamed to id) and its directory (the /workspace mount point its gofer
     * sees), removed with it; "" and NULL otherwise. */
    char runsc_id[ID_MAX + 1];
    char *spare_dir;
    char *workspace_dir;
    char *root_dir;       /* a copy of sandbox_opts.root_dir (NULL: the generated root) */
    char *bundle;         /* gVisor: its OCI bundle directory */
    char group[SBX_CG_NAME_MAX]; /* its tenant's cgroup (sbx_cg_group_name) */
    size_t output_limit;  /* bytes kept per output stream (never 0) */
    int cancel_fd;        /* watched while it runs; <= 0: none */
    const sandbox_network *network; /* sandbox_opts.network (NULL: none) */
    sbx_cgroup cg;        /* its host cgroup, when have_cg */
    bool have_cg;
    bool ran;             /* sandbox_run was called */
    const sandbox_tap *tap; /* sandbox_opts.tap (NULL: none) */
    /* Its size (sandbox_opts.size with the defaults filled in): */
    uint64_t memory_bytes;
    unsigned cpu_percent;
    unsigned nproc;
    /* Booted ahead of its command (sandbox_opts.boot_ahead; gVisor only): */
    bool ahead;
    sbx_proc_child child; /* `runsc run` of the waiter, started by sandbox_prepare */
    int cmd_w;            /* the waiter's command pipe; -1 once handed over (or none) */
    int ready_r;          /* the waiter's "R" (the agent's FRAME_BOOTED) once booted; -1 when none */
    bool booted;          /* "R" arrived (and the sandbox was frozen) */
    bool sent;            /* the command was handed over: no cold retry any more */
    /* A session's long-lived sandbox (sandbox_opts.agent): cmd_w (the agent's stdin) carries
     * requests to the agent; its stdout (ready_r until FRAME_BOOTED, then io's) every slot's
     * frames back (sandbox/session_sandbox.c, agent_stdio.h); commands run there at once up to
     * AGENT_SLOTS. agent_mu guards io, the slots, running and the thaw/freeze they decide;
     * cmd_mu the frames on cmd_w (a thread that reads the agent's stdout never waits for it:
     * the agent may be waiting for that stdout to be read before it reads its stdin). */
    bool agent;
    struct agent_stdio *io;
    unsigned slots_busy;  /* bit i: slot i has a command */
    int running;          /* commands under way (the sandbox is thawed while > 0) */
    bool settling;        /* no command runs, not frozen yet: waits for FRAME_IDLE and THAWED_MS, or SETTLE_MS */
    bool next_ready;      /* FRAME_IDLE said so since the last command */
    int64_t idle_since;   /* when the last command ended */
    pthread_mutex_t agent_mu;
    pthread_mutex_t cmd_mu;
    uint32_t proc_taken[AGENT_SLOTS]; /* a long-lived process's output since its last FRAME_CREDIT */
};

/* runsc's container id for s: its id, or the one of the sandbox created ahead it was restored into. */
static inline const char *sbx_runsc_id(const sandbox *s)
{
    return s->runsc_id[0] ? s->runsc_id : s->id;
}

/* A sandbox booted ahead (gVisor): 1 when its waiter said "R" (the sandbox is then frozen until
 * its command), 0 while it boots, -1 when the boot failed (message in errbuf). */
int sbx_gvisor_boot_check(sandbox *s, char *errbuf, size_t errlen);

/* True when runsc still has state for container id (a run that did not finish); removing it
 * (`runsc delete --force`). */
bool sbx_gvisor_state_left(const sandbox_backend *b, const char *id);
void sbx_gvisor_delete(const sandbox_backend *b, const char *id);
/* runsc's files of container id under its root (its state, lock and socket), once nothing of
 * it runs any more: `runsc delete --force` would take a second or more to find that out. */
void sbx_gvisor_forget(const sandbox_backend *b, const char *id);

/* runsc and its global flags for every call about s (run, restore, pause, checkpoint,
 * resume: they must be the run's, its network's included; see gvisor.c) into argv; returns
 * how many (at most SBX_GVISOR_FLAGS_MAX). */
#define SBX_GVISOR_FLAGS_MAX 8
int sbx_gvisor_flags(const sandbox *s, const char *argv[SBX_GVISOR_FLAGS_MAX]);

/* `runsc <verb> <id>` of running session sandbox s with the flags of its `runsc run`
 * (--leave-running needs them): "pause", "resume", or with image_dir "checkpoint
 * --leave-running --compression=none --image-path image_dir" (runsc_control.c: a sandbox
 * paused before stays paused after it, saved or not). 0, or -1 with runsc's message. */
int sbx_runsc_control(sandbox *s, const char *verb, const char *image_dir, char *errbuf, size_t errlen);
/* `runsc restore --detach=false` of image_dir into container id (bundle: its OCI bundle) as
 * s->child, started in cg, its stdin stdin_fd (<= 0: /dev/null); attached, as a session's
 * `runsc run` is. 0, or -1 with a message. */
int sbx_runsc_restore_start(sandbox *s, const sbx_cgroup *cg, const char *image_dir, const char *bundle,
                            const char *id, int stdin_fd, char *errbuf, size_t errlen);
/* `runsc resume` of s paused by sbx_runsc_control: 0; or, when it cannot be resumed, s's
 * processes are killed and s takes nothing more (its memory is lost): SANDBOX_SAVE_LOST.
 * Under s->agent_mu. */
int sbx_resume_or_end(sandbox *s);
/* runsc's pre-exec step for a sandbox with network (sbx_proc_opts.pre_exec; see
 * sbx_hide_proc_sys_net). */
int sbx_gvisor_hide_proc_sys_net(void *ctx);

/* A unique container id and cgroup name from name (backend.c). */
void sbx_make_id(const char *name, char *id, size_t idlen);

/* The agent's argv (sandbox_opts.agent): SBX_AGENT_PATH and the sandbox's bind mounts to place
 * again in each command's root; dirs holds the bind paths. Returns argv (NULL-terminated). */
#define SBX_AGENT_ARGV_MAX (1 + 8 + 2 * SBX_ROOTFS_MAX_BINDS + 2 + 1)
const char **sbx_agent_argv(const sandbox *s, const char *argv[SBX_AGENT_ARGV_MAX],
                            char dirs[SBX_ROOTFS_MAX_BINDS][64], char nproc[16]);

/* The cgroup limits of s's command (booted ahead: what sbx_cg_begin_command applies). */
sbx_cg_limits sbx_command_limits(const sandbox *s);

/* The sandbox's whole environment; nothing of the server's leaks in. NULL-terminated. */
extern const char *const sandbox_env[];
/* sandbox_env followed by the network's entries, in out (room for SANDBOX_ENV_MAX * 2 + 1). */
void sbx_env_with_network(const sandbox *s, const char **out);
#define SBX_ENV_ALL_MAX (SANDBOX_ENV_MAX * 2 + 1)

/* Environment of runsc/bwrap themselves on the host. */
extern const char *const launcher_env[];

/* a + "/" + b, malloc'd. */
char *sbx_path_join(const char *a, const char *b);
/* "<prefix><16 hex of SHA-256(text)>" into out: names host objects that belong to one state
 * directory (cgroups, a runsc root outside it) or one proven backend (sandbox/proven.h).
 * 0, or -1 (SHA-256 failed, or out too small). */
int sbx_hashed_name(const char *prefix, const char *text, char *out, size_t outlen);

/* errbuf = prefix + ": " + the launcher's stderr (trimmed, at most 400 bytes). */
void sbx_err_from_capture(const capture *err, const char *prefix, char *errbuf, size_t errlen);

/* The launcher options every run shares: its cgroup, output budget and cancel descriptor. */
void sbx_proc_opts_for(const sandbox *s, sbx_proc_opts *o);

/* The result of a run that happened: on a timeout or cancel exit code -1 and no output (the
 * reference discards what came before), else code, oom_killed and r's output (out takes
 * over r's captures). -1 when out of memory. */
int sbx_finish_result(sandbox_result *out, sbx_proc_result *r, int code, bool oom_killed);

/* Gives out an empty NUL-terminated stream where it has none (callers get both streams even
 * when empty). -1 when out of memory: out is freed and errbuf says so. */
int sbx_result_streams(sandbox_result *out, char *errbuf, size_t errlen);

#endif
