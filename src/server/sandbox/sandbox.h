/* The isolation backend of airlockd: commands run in a fresh sandbox (gVisor's runsc, or
 * bubblewrap as the weaker fallback) with the session's workspace mounted at /workspace.
 *
 * A sandbox has three steps: sandbox_prepare makes it ready for a command (everything that
 * does not depend on the command), sandbox_run hands it one command and waits for the
 * result, sandbox_release tears it down. sandbox_exec does the three in a row, which is
 * what every caller does today; a pool of sandboxes prepared ahead, or a network namespace
 * per sandbox (a field of sandbox_opts), fit these steps without changing callers.
 * Thread-safe: several sandboxes may be prepared and run at once from different threads. */
#ifndef AIRLOCKD_SANDBOX_H
#define AIRLOCKD_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>

/* Inside the sandbox commands run as this uid/gid; the server owns workspace files by it. */
#define SANDBOX_UID 1000
#define SANDBOX_GID 1000

/* Bytes of each of a command's stdout and stderr that airlockd keeps by default: the first
 * 2/5 and the last 3/5; the middle of a longer stream is counted and dropped. */
#define SANDBOX_OUTPUT_LIMIT (1024u * 1024u)

typedef struct sandbox_backend sandbox_backend;
typedef struct sandbox sandbox;

typedef struct {
    /* raw stdout bytes, NUL-terminated, caller frees via sandbox_result_free; a stream longer
     * than the output limit is its head, a marker line "... [TRUNCATED: N bytes omitted] ..."
     * and its tail, cut between UTF-8 characters */
    char *out;
    size_t out_len;
    char *err;          /* raw stderr bytes, NUL-terminated, kept the same way */
    size_t err_len;
    unsigned long long out_total, err_total;     /* bytes the command wrote to each */
    unsigned long long out_omitted, err_omitted; /* bytes left out of each (0: complete) */
    int exit_code;      /* bash conventions; 128+N for signal N; -1 on timeout or cancel */
    bool timed_out;     /* wall-clock limit hit: the whole sandbox was killed, streams empty */
    bool oom_killed;    /* the memory limit killed the command */
    bool cancelled;     /* cancel_fd hung up: the whole sandbox was killed, streams empty */
} sandbox_result;

/* The user and pass a session's sandbox processes are given for its egress proxy (in
 * HTTPS_PROXY): a memory image's processes keep them, so a sandbox restored from it (a fork of
 * a memory snapshot, a paused session after a restart) is given the same again. */
#define SANDBOX_PROXY_USER_MAX 17 /* a session id and its NUL */
#define SANDBOX_PROXY_PASS_MAX 33 /* 32 hex characters and the NUL */
typedef struct {
    char user[SANDBOX_PROXY_USER_MAX];
    char pass[SANDBOX_PROXY_PASS_MAX];
} sandbox_proxy_login;

/* The network of a sandbox of a session with egress (egress/egress.h makes it). */
typedef struct {
    const char *netns_path;    /* the network namespace to run in (/proc/<pid>/fd/<n>) */
    const char *const *env;    /* extra "K=V" entries (the proxy settings), NULL-terminated */
    const sandbox_proxy_login *login; /* the proxy's user and pass in env */
} sandbox_network;

/* Ours (streaming exec, spill to a file): who sees a command's output as it is read. The
 * runner calls it on its own thread; the kept result (head + tail) is unchanged by it. */
typedef struct {
    /* Each piece of stdout (stream 1) or stderr (stream 2) as read, in order; and stream 0
     * with no data at least every tick_ms while the command runs (for heartbeats). */
    void (*output)(void *ctx, int stream, const char *data, size_t len);
    /* True while the reader has no room: the runner stops reading the pipes (the command
     * blocks on its writes) and waits for room_fd to turn readable, or tick_ms. */
    bool (*full)(void *ctx);
    int room_fd;  /* -1: none (the runner looks again every tick) */
    int tick_ms;  /* > 0 */
    void *ctx;
} sandbox_tap;

/* The size of a sandbox unless its session asks for another (ours: POST /v1/sessions
 * memory_mb, cpus, max_processes; docs/server.md "Session sizes"). */
#define SANDBOX_MEMORY_MB 256
#define SANDBOX_CPU_PERCENT 100 /* one CPU */
#define SANDBOX_MAX_PROCESSES 64

/* A sandbox's size; a 0 field means its default above. Enforced by its host cgroup (memory
 * without swap, the CFS quota over a 100 ms period) and gVisor's RLIMIT_NPROC (processes). */
typedef struct {
    unsigned memory_mb;
    unsigned cpu_percent;   /* 100 = one CPU */
    unsigned max_processes;
} sandbox_size;

/* What a sandbox is made for, known before its command. */
typedef struct {
    const char *workspace_dir; /* absolute host directory, mounted read-write at /workspace */
    const char *name;          /* names it (container id, cgroup); unique among running ones'
                                * prefixes, e.g. the session id and a counter */
    /* The tenant it runs for: its cgroup goes under the tenant's group, whose CPU weight
     * every tenant has equally. NULL: the server's own group. */
    const char *tenant;
    size_t output_limit;       /* bytes kept of each output stream; 0: SANDBOX_OUTPUT_LIMIT */
    /* The client's connection: POLLHUP, POLLERR or POLLRDHUP on it while the command runs
     * kills the whole sandbox at once and the result is marked cancelled. -1 (or 0, what an
     * initializer leaves: airlockd's stdin is never a client) = none. */
    int cancel_fd;
    const sandbox_network *network; /* NULL: no network at all (only loopback); else kept by
                                     * the caller until sandbox_release */
    const sandbox_tap *tap;    /* ours: NULL = output only in the result; else kept by the
                                * caller until sandbox_release */
    /* Boot the sandbox now, ahead of its command (sandbox_can_boot_ahead): sandbox_prepare
     * starts it and returns at once, and the thread that called it must outlive it (the
     * sandbox dies with that thread). It boots with no CPU quota at a low weight, then waits
     * frozen; its command's limits (1 CPU, a fresh memory failure count) and timeout start
     * when sandbox_run hands the command over. false: today's sandbox, booted by its run. */
    bool boot_ahead;
    /* Ours (SANDBOX_EXEC_MODE=session; with boot_ahead): a session's long-lived sandbox whose
     * first process is the agent (src/agent/agent.c); its commands run through
     * sandbox/session_sandbox.h, each in fresh namespaces, never through sandbox_run. */
    bool agent;
    sandbox_size size;         /* fixed at prepare (boot), like the workspace */
    /* Ours: a template's root (domain/templates.h), a whole read-only tree with its own /usr,
     * made usable by sandbox_backend_finish_root; gVisor only. NULL: the generated root over
     * the host's /usr. Kept by the caller until sandbox_release. */
    const char *root_dir;
} sandbox_opts;

/* The isolation a server may run on (--isolation, SANDBOX_ISOLATION). */
typedef enum {
    SANDBOX_ISOLATION_GVISOR,     /* gVisor, or the server does not start (the default) */
    SANDBOX_ISOLATION_BUBBLEWRAP, /* bubblewrap, asked for: the weaker boundary (the host kernel) */
    SANDBOX_ISOLATION_AUTO,       /* gVisor when it works, else bubblewrap */
} sandbox_isolation;

/* Where the backend finds its programs, and which isolation it may run on (config/config.h
 * loads them from the flags and the environment). */
typedef struct {
    const char *runsc;       /* --runsc, else AIRLOCK_RUNSC; NULL: the search (sandbox/programs.h) */
    const char *waiter;      /* AIRLOCK_WAITER; NULL: airlock-waiter beside airlockd */
    const char *agent;       /* AIRLOCK_AGENT; NULL: airlock-agent beside airlockd */
    bool session_mode;       /* SANDBOX_EXEC_MODE=session: say so when the agent is missing */
    const char *search_path; /* PATH, for runsc and bwrap; NULL: the standard directories */
    sandbox_isolation isolation;
    const char *isolation_by; /* the setting that chose it ("SANDBOX_ISOLATION=auto"); NULL: the default */
} sandbox_settings;

/* Prepares the backend under state_dir (root filesystem, runsc state) on the isolation s
 * asks for, finding runsc as sandbox/programs.h says. Without a working runsc it fails unless
 * s allows bubblewrap.
 * First removes what a killed predecessor on the same state dir left on the host: the
 * processes and cgroups under this server's cgroup root (airlockd-<16 hex of SHA-256 of
 * the state dir's real path>, in every hierarchy), the processes of runsc containers under
 * its runsc root, and that root's state; never another server's.
 * Returns NULL with a message in errbuf on failure. */
sandbox_backend *sandbox_backend_open(const char *state_dir, const sandbox_settings *s, char *errbuf,
                                      size_t errlen);

/* "gvisor" or "bubblewrap". */
const char *sandbox_backend_name(const sandbox_backend *b);

/* The isolation line: which backend runs the sandboxes and why, e.g. "gvisor (runsc /x/runsc)"
 * or "bubblewrap, the weaker sandbox: commands share the host kernel (asked for by
 * SANDBOX_ISOLATION=bubblewrap)". */
const char *sandbox_backend_summary(const sandbox_backend *b);

/* What opening the backend had to say besides (leftovers removed, no waiter), one line each,
 * said after the isolation line; "" when nothing. */
const char *sandbox_backend_notes(const sandbox_backend *b);

/* This server's cgroup root name ("airlockd-<16 hex>", the same in every hierarchy), or NULL
 * when it runs without cgroups. */
const char *sandbox_backend_cgroup_root(const sandbox_backend *b);

/* What sandboxes use, from their host cgroups (sandbox/usage.c). */
typedef struct {
    unsigned long long cpu_ns;            /* CPU time used */
    unsigned long long memory_bytes;      /* memory charged now */
    unsigned long long memory_peak_bytes; /* the highest of one sandbox's since its command began */
    unsigned long long tasks;             /* host tasks now (gVisor's own threads included) */
    unsigned sandboxes;                   /* sandboxes counted */
} sandbox_usage;

/* The usage of tenant's sandboxes whose sandbox_opts.name started with name_prefix, summed
 * (the peak: the highest one's); false when it cannot be read (no cgroups). */
bool sandbox_usage_of(const sandbox_backend *b, const char *tenant, const char *name_prefix, sandbox_usage *out);

/* Calls fn(ctx, id, usage) for every sandbox of this server, each tenant's, in one pass (the
 * id: its sandbox_opts.name, "-" and a suffix); false when it cannot be read (no cgroups). */
typedef void (*sandbox_usage_fn)(void *ctx, const char *id, const sandbox_usage *u);
bool sandbox_usage_each(const sandbox_backend *b, sandbox_usage_fn fn, void *ctx);

/* The usage of every sandbox of this server together (CPU time since it started); false when
 * it cannot be read (no cgroups). */
bool sandbox_total_usage(const sandbox_backend *b, sandbox_usage *out);

/* Called with the container id (its sandbox_opts.name, "-" and a suffix) and final usage of
 * every sandbox as it is released, on the releasing thread: quick, no lock of the caller's
 * held across sandbox calls. Set before any sandbox is made. */
typedef void (*sandbox_retire_hook)(void *ctx, const char *id, const sandbox_usage *u);
void sandbox_backend_on_retire(sandbox_backend *b, sandbox_retire_hook hook, void *ctx);

/* Sandboxes made ahead for the resumes of sessions paused with their memory (issue #26; see
 * sandbox/restore_spare.h): at most max (0: none), one per tenant, each released after
 * idle_seconds untaken. gVisor only. */
void sandbox_backend_restore_ahead(sandbox_backend *b, int max, int idle_seconds);
/* One of those for tenant, of the spec kept with the memory image in image_dir (as a pause
 * with memory wants one), unless one of that spec is there or the bound is reached. */
void sandbox_restore_ahead_want(sandbox_backend *b, const char *tenant, const char *image_dir);
/* Those of tenant released, gone when this returns. */
void sandbox_restore_ahead_drop(sandbox_backend *b, const char *tenant);
/* How many of those are made and wait now. */
int sandbox_restore_ahead_count(const sandbox_backend *b);

/* Test only (AIRLOCK_TEST_EGRESS_CA): sandboxes also trust the CA certificates of pem_path
 * (appended to the generated root's CA bundle). */
int sandbox_backend_trust_ca(sandbox_backend *b, const char *pem_path, char *errbuf, size_t errlen);

/* Removes everything the backend made under the state dir and its cgroups; no sandbox may
 * be left. */
void sandbox_backend_close(sandbox_backend *b);

/* A sandbox ready for one command: read-only root, /tmp tmpfs 64 MB noexec, uid SANDBOX_UID,
 * no capabilities, no network unless o->network, o->size (by default 256 MB memory without
 * swap, 64 processes, 1 CPU). NULL with a
 * message in errbuf when it cannot be made. */
sandbox *sandbox_prepare(sandbox_backend *b, const sandbox_opts *o, char *errbuf, size_t errlen);

/* Runs `/bin/bash -c command` in s with cwd /workspace and a wall clock of timeout_seconds
 * (clamped to 1..86400). 0 when the command ran (whatever its exit status, timeout
 * included), -1 when it could not be started (message in errbuf). Once per sandbox. */
int sandbox_run(sandbox *s, const char *command, int timeout_seconds, sandbox_result *out,
                char *errbuf, size_t errlen);

/* Kills whatever is left in s and removes its state; s is freed. NULL is a no-op. */
void sandbox_release(sandbox *s);

/* Whether sessions can have a long-lived sandbox of their own (sandbox_opts.agent) here:
 * gVisor, with the airlock-agent and airlock-waiter programs found. */
bool sandbox_can_host_session(const sandbox_backend *b);

/* Whether sandboxes can boot ahead here (gVisor, with the airlock-waiter program found). */
bool sandbox_can_boot_ahead(const sandbox_backend *b);

/* A sandbox booted ahead: a descriptor that turns readable when its boot ends (either way), and
 * the check to make then: 1 booted (now frozen, ready for sandbox_run), 0 still booting, -1 the
 * boot failed (message in errbuf; release it). */
int sandbox_boot_fd(const sandbox *s);
int sandbox_boot_check(sandbox *s, char *errbuf, size_t errlen);

/* A command waits for this boot now: it gets the full CPU weight instead of the low one. */
void sandbox_boot_hurry(sandbox *s);

/* Sets the per-command options of a sandbox booted ahead before its sandbox_run: the output
 * budget, the cancel descriptor and the tap of o (the rest of o was fixed at its boot). */
void sandbox_set_command(sandbox *s, const sandbox_opts *o);

/* A sandbox of the caller's is about to be restored (a resume): the kernel's wait its cgroup
 * join would pay starts now, beside what comes first (sbx_cg_prime_join). */
void sandbox_prime_cgroup_join(sandbox_backend *b);

/* For a server exiting without cleanup: kills s's processes at once (thawed first: a frozen
 * task cannot die) and leaves the rest (cgroups, state) to the next start. s stays allocated. */
void sandbox_abandon(sandbox *s);

/* After a failed sandbox_run of a sandbox booted ahead: true when the command never reached it
 * (too long to hand over, the boot hit its memory limit), so running it cold is safe. */
bool sandbox_retry_cold(const sandbox *s);

/* sandbox_prepare, sandbox_run and sandbox_release in a row. */
int sandbox_exec(sandbox_backend *b, const sandbox_opts *o, const char *command,
                 int timeout_seconds, sandbox_result *out, char *errbuf, size_t errlen);

void sandbox_result_free(sandbox_result *r);

#endif
