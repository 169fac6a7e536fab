/* OCI runtime spec (config.json) for one gVisor run (private to the sandbox backend). */
#ifndef AIRLOCKD_SANDBOX_SPEC_H
#define AIRLOCKD_SANDBOX_SPEC_H

#include <stddef.h>

#include "sandbox/rootfs.h"

typedef struct {
    const char *rootfs_dir;     /* the generated read-only root, or a template's */
    const char *usr_dir;        /* host directory bound read-only at /usr */
    const sbx_rootfs *rootfs;   /* extra top-level host dirs to bind read-only */
    const char *workspace_dir;  /* host dir mounted read-write at /workspace */
    const char *command;        /* run as /bin/bash -c command */
    const char *const *env;     /* NULL-terminated "K=V" list */
    unsigned uid, gid;
    unsigned nproc;             /* RLIMIT_NPROC, enforced by gVisor's sentry */
    unsigned tmp_mb;            /* size of the /tmp tmpfs */
    const char *cgroups_path;   /* linux.cgroupsPath (the run's existing cgroup), or NULL */
    const char *netns_path;     /* the network namespace to join, or NULL: a new empty one */
    /* Booted ahead of its command: the process is this path in the root (the waiter, which
     * execs bash -c with the command it is handed later); command is then unused. NULL: bash. */
    const char *waiter;
    /* A session's long-lived sandbox: the process is this argv (the agent and its mounts),
     * run as root with the capabilities it needs to make each command's namespaces (the
     * commands themselves get none: the agent drops them); waiter and uid are then unused. */
    const char *const *agent_argv;
} sbx_spec;

/* Writes bundle_dir/config.json. */
int sbx_spec_write(const char *bundle_dir, const sbx_spec *s, char *errbuf, size_t errlen);

/* Sets the network namespace of bundle_dir/config.json to netns_path (NULL: a new empty one),
 * written aside and renamed over it: a hard link to the old file (a memory image's
 * sandbox.json) keeps the old. 0, or -1 with a message. */
int sbx_spec_set_netns(const char *bundle_dir, const char *netns_path, char *errbuf, size_t errlen);

/* A memory snapshot's spec (src, kept with its image) for a sandbox restored from it as
 * another one: the same shape (runsc restore wants the mounts it saved) with this sandbox's
 * workspace at /workspace, its root (NULL: src's) (and a template's /usr), and its cgroup;
 * written to bundle_dir/config.json. 0, or -1 with a message. */
int sbx_spec_rebase(const char *src, const char *bundle_dir, const char *workspace_dir, const char *rootfs_dir,
                    const char *template_usr, const char *cgroups_path, char *errbuf, size_t errlen);

/* The spec at path as one text with its workspace's source and its cgroup left out (what two
 * sandboxes' specs must share for an image of one to be restored into the other), malloc'd;
 * NULL when it cannot be read, has no workspace mount, or joins a network namespace by path
 * (egress: one made anew at each restore, never the same spec). */
char *sbx_spec_shape(const char *path);

#endif
