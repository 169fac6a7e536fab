/* The sandbox's read-only root directory (private to the sandbox backend): mount points, the
 * merged-/usr symlinks and a generated minimal /etc. Host /usr and /etc/alternatives (symlinks
 * into /usr) are bind-mounted on top at run time; nothing else of the host (no /root, /home,
 * /etc/shadow, server state) is reachable. */
#ifndef AIRLOCKD_SANDBOX_ROOTFS_H
#define AIRLOCKD_SANDBOX_ROOTFS_H

#include <stddef.h>

#define SBX_ROOTFS_MAX_BINDS 8

/* The host's alternatives (symlinks into /usr), bound read-only at the same path. */
#define SBX_HOST_ALTERNATIVES "/etc/alternatives"

typedef struct {
    /* Host directories bound read-only at the same path (names without the leading "/"):
     * top-level ones that are real directories (not symlinks into /usr) on this host, e.g.
     * "bin" on a non-merged system, and SBX_HOST_ALTERNATIVES's. */
    const char *binds[SBX_ROOTFS_MAX_BINDS];
    size_t nbinds;
} sbx_rootfs;

/* (Re)creates the root directory at dir. */
int sbx_rootfs_build(const char *dir, sbx_rootfs *out, char *errbuf, size_t errlen);

/* Appends the PEM certificates of pem_path to the root's CA bundle (test-only CAs). */
int sbx_rootfs_append_ca(const char *dir, const char *pem_path, char *errbuf, size_t errlen);

/* Where the waiter (airlock-waiter, the first process of a sandbox booted ahead) lies in the
 * root, read-only and owned by root. */
#define SBX_WAITER_PATH "/airlock/waiter"
/* The longest command the waiter takes (src/waiter/waiter.c says the same); longer ones go
 * the cold way. */
#define SBX_WAITER_COMMAND_MAX (1 << 20)

/* Copies the host's waiter binary (waiter_path) into the root at SBX_WAITER_PATH. */
int sbx_rootfs_add_waiter(const char *dir, const char *waiter_path, char *errbuf, size_t errlen);

/* Where the agent (airlock-agent, the first process of a session's long-lived sandbox) lies. */
#define SBX_AGENT_PATH "/airlock/agent"
/* Where the Python kernel's launcher (airlock-kernel.py, beside the agent) lies (domain/kernels.h),
 * and the program it starts: its source (airlock-kernel-program.py) and its bytecode
 * (airlock-kernel-program.pyc, used when the root's python3 can read it). */
#define SBX_KERNEL_PYTHON_PATH "/airlock/kernel.py"
#define SBX_KERNEL_PROGRAM_PATH "/airlock/kernel-program.py"
#define SBX_KERNEL_BYTECODE_PATH "/airlock/kernel-program.pyc"

/* Copies the host's program host_path into the root at in_root ("/airlock/NAME"), read-only
 * and owned by root. */
int sbx_rootfs_add_program(const char *dir, const char *host_path, const char *in_root, char *errbuf,
                           size_t errlen);

/* Makes the tree at dir (a template's root: a Debian system, after its setup ran) a sandbox
 * root: the generated /etc files (users, hosts, resolver, pip) replace the tree's, the mount
 * points exist, and the programs under programs_dir's /airlock (the default root's) are copied
 * in. Refuses a tree whose /etc or /airlock is not a plain directory (a setup's symlink must not
 * lead a write out of the tree). */
int sbx_rootfs_finish_template(const char *dir, const char *programs_dir, char *errbuf, size_t errlen);

#endif
