/* Generates the OCI runtime spec of one sandbox run with jansson. */
#include "sandbox/oci.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* json_pack's "o" steals a reference; a NULL anywhere makes the whole pack fail cleanly. */
static json_t *mount(const char *dst, const char *type, const char *src, const char *opts[],
                     size_t nopts)
{
    json_t *o = json_array();
    for (size_t i = 0; o && i < nopts; i++)
        if (json_array_append_new(o, json_string(opts[i])) != 0) {
            json_decref(o);
            return NULL;
        }
    if (!o)
        return NULL;
    /* "s" would reject a host path that is not UTF-8. */
    return json_pack("{s:s, s:s, s:o, s:o}", "destination", dst, "type", type, "source",
                     json_string_nocheck(src), "options", o);
}

static json_t *mounts(const sbx_spec *s)
{
    char tmp_size[32];
    snprintf(tmp_size, sizeof tmp_size, "size=%um", s->tmp_mb);
    const char *ro_bind[] = {"rbind", "ro", "nosuid", "nodev"};
    const char *rw_bind[] = {"rbind", "rw", "nosuid", "nodev"};
    const char *tmp[] = {"nosuid", "nodev", "noexec", tmp_size, "mode=1777"};
    const char *proc[] = {"nosuid", "noexec", "nodev"};
    const char *sys[] = {"nosuid", "noexec", "nodev", "ro"};
    const char *dev[] = {"nosuid", "strictatime", "mode=755", "size=65536k"};
    const char *pts[] = {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"};

    json_t *a = json_array();
    if (!a)
        return NULL;
    json_t *items[] = {
        mount("/proc", "proc", "proc", proc, 3),
        mount("/dev", "tmpfs", "tmpfs", dev, 4),
        mount("/dev/pts", "devpts", "devpts", pts, 5),
        mount("/dev/shm", "tmpfs", "shm", tmp, 5),
        mount("/sys", "sysfs", "sysfs", sys, 4),
        mount("/usr", "bind", s->usr_dir, ro_bind, 4),
        mount("/workspace", "bind", s->workspace_dir, rw_bind, 4),
        mount("/tmp", "tmpfs", "tmpfs", tmp, 5),
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++)
        if (!items[i] || json_array_append_new(a, items[i]) != 0)
            bad = 1;
    for (size_t i = 0; i < s->rootfs->nbinds; i++) {
        char dst[64];
        snprintf(dst, sizeof dst, "/%s", s->rootfs->binds[i]);
        json_t *m = mount(dst, "bind", dst, ro_bind, 4);
        if (!m || json_array_append_new(a, m) != 0)
            bad = 1;
    }
    if (bad) {
        json_decref(a);
        return NULL;
    }
    return a;
}

/* _nocheck: a command with invalid UTF-8 still runs (Go's decoder maps it to U+FFFD). */
static json_t *string_array(const char *const *list)
{
    json_t *a = json_array();
    for (size_t i = 0; a && list[i]; i++)
        if (json_array_append_new(a, json_string_nocheck(list[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* The agent's capabilities (bounding, effective, permitted; none inheritable or ambient). */
static json_t *agent_caps(void)
{
    static const char *const names[] = {"CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP",
                                        "CAP_KILL", NULL};
    json_t *c = json_pack("{s:o, s:o, s:o, s:[], s:[]}", "bounding", string_array(names), "effective",
                          string_array(names), "permitted", string_array(names), "inheritable", "ambient");
    return c;
}

int sbx_spec_write(const char *bundle_dir, const sbx_spec *s, char *errbuf, size_t errlen)
{
    const char *args[] = {"/bin/bash", "-c", s->command, NULL};
    const char *waiter_args[] = {s->waiter, NULL};
    json_t *argv = string_array(s->agent_argv ? s->agent_argv : s->waiter ? waiter_args : args);
    json_t *env = string_array(s->env);
    json_t *mnt = mounts(s);
    /* Every capability set empty: the command keeps no privilege at all. The agent keeps
     * what making namespaces and mounts, and dropping to the command's uid, take. */
    json_t *caps = s->agent_argv ? agent_caps()
                                 : json_pack("{s:[], s:[], s:[], s:[], s:[]}", "bounding", "effective",
                                             "inheritable", "permitted", "ambient");
    json_t *rlimits = json_pack(
        "[{s:s, s:I, s:I}, {s:s, s:I, s:I}, {s:s, s:I, s:I}]",
        "type", "RLIMIT_NPROC", "hard", (json_int_t)s->nproc, "soft", (json_int_t)s->nproc,
        "type", "RLIMIT_NOFILE", "hard", (json_int_t)65536, "soft", (json_int_t)65536,
        "type", "RLIMIT_CORE", "hard", (json_int_t)0, "soft", (json_int_t)0);
    json_t *net = s->netns_path ? json_pack("{s:s, s:s}", "type", "network", "path", s->netns_path)
                                : json_pack("{s:s}", "type", "network");
    json_t *ns = json_pack("[{s:s}, o, {s:s}, {s:s}, {s:s}]", "type", "pid", net, "type", "ipc",
                           "type", "uts", "type", "mount");
    if (!argv || !env || !mnt || !caps || !rlimits || !ns) {
        json_decref(argv);
        json_decref(env);
        json_decref(mnt);
        json_decref(caps);
        json_decref(rlimits);
        json_decref(ns);
        snprintf(errbuf, errlen, "cannot build the OCI spec: out of memory");
        return -1;
    }
    /* No linux.resources: the limits are those of the cgroup airlockd made and names in
     * linux.cgroupsPath; runsc reads its memory limit from there and gives the sandbox that
     * total memory (/proc/meminfo), and adds the sandbox to the hierarchies airlockd does
     * not limit. */
    json_t *root = json_pack(
        "{s:s, s:{s:b, s:{s:I, s:I}, s:o, s:o, s:s, s:o, s:o, s:b}, s:{s:s, s:b}, s:s,"
        " s:o, s:{s:o}}",
        "ociVersion", "1.0.2",
        "process",
            "terminal", 0,
            "user", "uid", (json_int_t)(s->agent_argv ? 0 : s->uid),
                    "gid", (json_int_t)(s->agent_argv ? 0 : s->gid),
            "args", argv,
            "env", env,
            "cwd", "/workspace",
            "capabilities", caps,
            "rlimits", rlimits,
            "noNewPrivileges", 1,
        "root", "path", s->rootfs_dir, "readonly", 1,  /* our own ASCII path */
        "hostname", "sandbox",
        "mounts", mnt,
        "linux", "namespaces", ns);
    if (root && s->cgroups_path &&
        json_object_set_new(json_object_get(root, "linux"), "cgroupsPath", json_string(s->cgroups_path)) != 0) {
        json_decref(root);
        root = NULL;
    }
    if (!root) {
        snprintf(errbuf, errlen, "cannot build the OCI spec");
        return -1;
    }
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/config.json", bundle_dir);
    int rc = 0;
    if (n < 0 || (size_t)n >= sizeof path) {
        snprintf(errbuf, errlen, "bundle path too long: %s", bundle_dir);
        rc = -1;
    } else if (json_dump_file(root, path, JSON_COMPACT) != 0) {
        snprintf(errbuf, errlen, "cannot write %s: %s", path, strerror(errno));
        rc = -1;
    }
    json_decref(root);
    return rc;
}

int sbx_spec_set_netns(const char *bundle_dir, const char *netns_path, char *errbuf, size_t errlen)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/config.json", bundle_dir) >= (int)sizeof path ||
        snprintf(tmp, sizeof tmp, "%s/config.json.new", bundle_dir) >= (int)sizeof tmp) {
        snprintf(errbuf, errlen, "bundle path too long: %s", bundle_dir);
        return -1;
    }
    json_t *root = json_load_file(path, 0, NULL);
    json_t *ns = json_object_get(json_object_get(root, "linux"), "namespaces");
    json_t *net = NULL, *v;
    size_t i;
    json_array_foreach(ns, i, v) {
        const char *type = json_string_value(json_object_get(v, "type"));
        if (type && strcmp(type, "network") == 0)
            net = v;
    }
    if (net && !netns_path)
        (void)json_object_del(net, "path"); /* (none there: nothing to do) */
    int rc = -1;
    if (!net)
        snprintf(errbuf, errlen, "the sandbox's spec %s has no network namespace", path);
    else if (netns_path && json_object_set_new(net, "path", json_string(netns_path)) != 0)
        snprintf(errbuf, errlen, "cannot set the network namespace in %s: out of memory", path);
    else if (json_dump_file(root, tmp, JSON_COMPACT) != 0 || rename(tmp, path) != 0)
        snprintf(errbuf, errlen, "cannot write %s: %s", path, strerror(errno));
    else
        rc = 0;
    if (rc != 0)
        (void)unlink(tmp);
    json_decref(root);
    return rc;
}

/* Sets mount dst's source in mounts to src: false when the spec has no such mount. */
static bool set_mount_source(json_t *mounts, const char *dst, const char *src)
{
    size_t i;
    json_t *m;
    json_array_foreach(mounts, i, m) {
        if (json_is_string(json_object_get(m, "destination")) &&
            strcmp(json_string_value(json_object_get(m, "destination")), dst) == 0)
            return json_object_set_new(m, "source", json_string_nocheck(src)) == 0;
    }
    return false;
}

int sbx_spec_rebase(const char *src, const char *bundle_dir, const char *workspace_dir, const char *rootfs_dir,
                    const char *template_usr, const char *cgroups_path, char *errbuf, size_t errlen)
{
    json_error_t je;
    json_t *root = json_load_file(src, JSON_REJECT_DUPLICATES, &je);
    json_t *mounts = json_object_get(root, "mounts");
    json_t *linux_ = json_object_get(root, "linux");
    json_t *rootfs = json_object_get(root, "root");
    if (!json_is_array(mounts) || !json_is_object(linux_) || !json_is_object(rootfs)) {
        snprintf(errbuf, errlen, "the memory image's sandbox spec %s is not whole", src);
        json_decref(root);
        return -1;
    }
    bool ok = set_mount_source(mounts, "/workspace", workspace_dir) &&
              (!template_usr || set_mount_source(mounts, "/usr", template_usr)) &&
              (!rootfs_dir || json_object_set_new(rootfs, "path", json_string_nocheck(rootfs_dir)) == 0) &&
              json_object_set_new(linux_, "cgroupsPath", json_string(cgroups_path)) == 0;
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/config.json", bundle_dir);
    int rc = -1;
    if (!ok)
        snprintf(errbuf, errlen, "the memory image's sandbox spec %s has no workspace mount", src);
    else if (n < 0 || (size_t)n >= sizeof path)
        snprintf(errbuf, errlen, "bundle path too long: %s", bundle_dir);
    else if (json_dump_file(root, path, JSON_COMPACT) != 0)
        snprintf(errbuf, errlen, "cannot write %s: %s", path, strerror(errno));
    else
        rc = 0;
    json_decref(root);
    return rc;
}

/* True when the spec's linux object joins a network namespace by path. */
static bool joins_named_netns(json_t *linux_)
{
    size_t i;
    json_t *ns;
    json_array_foreach(json_object_get(linux_, "namespaces"), i, ns) {
        const char *type = json_string_value(json_object_get(ns, "type"));
        if (type && strcmp(type, "network") == 0 && json_object_get(ns, "path"))
            return true;
    }
    return false;
}

char *sbx_spec_shape(const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    json_t *linux_ = json_object_get(root, "linux");
    char *text = NULL;
    if (json_is_object(linux_) && !joins_named_netns(linux_) &&
        set_mount_source(json_object_get(root, "mounts"), "/workspace", "")) {
        (void)json_object_del(linux_, "cgroupsPath"); /* (none is as good) */
        text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    }
    json_decref(root);
    return text;
}
