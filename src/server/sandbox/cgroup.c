/* Host cgroups of this server: its root per hierarchy, tenants' weights, runs' limits,
 * membership, OOM evidence, and removal of everything under the root. */
#include "sandbox/cgroup.h"

#include "log/log.h"
#include "util/buf.h"

#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CG_ROOT "/sys/fs/cgroup"
/* Bounds of the removal of a root's tree: groups listed, and kill rounds over them. */
#define TREE_GROUPS_MAX 16384
#define KILL_ROUNDS 200
/* the template builds' top group: this server's root name and this */
#define BUILDS_SUFFIX "-builds"

static bool is_v1(void)
{
    return access(CG_ROOT "/memory/memory.limit_in_bytes", F_OK) == 0;
}

static bool is_v2(void)
{
    return access(CG_ROOT "/cgroup.controllers", F_OK) == 0;
}

#define CONTROL_PATH_MAX (SBX_CG_PATH_MAX + 64)

/* dir/file into path; false when it does not fit. */
static bool control_path(char path[CONTROL_PATH_MAX], const char *dir, const char *file)
{
    int n = snprintf(path, CONTROL_PATH_MAX, "%s/%s", dir, file);
    return n >= 0 && n < CONTROL_PATH_MAX;
}

/* Writes a short string to a control file; returns 0 or an errno value. */
static int write_file(const char *dir, const char *file, const char *value)
{
    char path[CONTROL_PATH_MAX];
    if (!control_path(path, dir, file))
        return ENAMETOOLONG;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    size_t len = strlen(value);
    ssize_t w = write(fd, value, len);
    int err = (w == (ssize_t)len) ? 0 : (w < 0 ? errno : EIO);
    if (close(fd) != 0 && err == 0)
        err = errno;
    return err;
}

/* Reads a whole control file (NUL-terminated, caller frees); NULL on error. */
static char *read_file(const char *dir, const char *file)
{
    char path[CONTROL_PATH_MAX];
    if (!control_path(path, dir, file))
        return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    buffer b;
    buf_init(&b, 16u * 1024u * 1024u); /* a pid list: 4 million pids at most */
    int rc = buf_read_all(&b, fd);
    close(fd);
    if (rc != 0) {
        buf_free(&b);
        return NULL;
    }
    return buf_take(&b, NULL);
}

/* Value of "key N" in a flat-keyed control file (memory.oom_control, memory.events). */
static uint64_t keyed_value(const char *text, const char *key)
{
    size_t klen = strlen(key);
    const char *p = text;
    while (p && *p) {
        if (strncmp(p, key, klen) == 0 && p[klen] == ' ')
            return strtoull(p + klen + 1, NULL, 10);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return 0;
}

static int mkdir_ok(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    return errno;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* path = a + "/" + b (+ "/" + c); false when it does not fit. */
static bool join(char *path, size_t size, const char *a, const char *b, const char *c)
{
    int n = c ? snprintf(path, size, "%s/%s/%s", a, b, c) : snprintf(path, size, "%s/%s", a, b);
    return n >= 0 && (size_t)n < size;
}

/* ---- the hierarchies ---------------------------------------------------------------- */

/* Whether the comma-separated options opts name controller. */
static bool has_option(const char *opts, size_t len, const char *controller)
{
    size_t cl = strlen(controller);
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && opts[j] != ',')
            j++;
        if (j - i == cl && memcmp(opts + i, controller, cl) == 0)
            return true;
        i = j + 1;
    }
    return false;
}

/* Every v1 hierarchy mounted under /sys/fs/cgroup (from /proc/self/mountinfo: one entry per
 * hierarchy, co-mounts once), and which of them limit memory, pids and CPU. */
static int find_v1_hierarchies(sbx_cg_tree *t, char *errbuf, size_t errlen)
{
    int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    buffer b;
    buf_init(&b, 4u * 1024u * 1024u);
    if (fd < 0 || buf_read_all(&b, fd) != 0) {
        snprintf(errbuf, errlen, "cannot read /proc/self/mountinfo: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        buf_free(&b);
        return -1;
    }
    close(fd);
    char seen[SBX_CG_HIER_MAX][32];
    for (char *line = b.data; line && *line && t->nhier < SBX_CG_HIER_MAX;) {
        char *eol = strchr(line, '\n');
        if (eol)
            *eol = '\0';
        /* "<id> <parent> <maj:min> <root> <mount point> <opts> ... - <fstype> <source> <super opts>" */
        char dev[32], point[sizeof t->hier[0]];
        const char *sep = strstr(line, " - ");
        if (sep && sscanf(line, "%*s %*s %31s %*s %127s", dev, point) == 2 && strncmp(sep, " - cgroup ", 10) == 0 &&
            strncmp(point, CG_ROOT "/", sizeof CG_ROOT) == 0 && !strchr(point, '\\')) {
            const char *opts = strrchr(sep, ' ') + 1;
            size_t olen = strlen(opts);
            bool dup = false;
            for (size_t i = 0; i < t->nhier && !dup; i++)
                dup = strcmp(seen[i], dev) == 0;
            if (!dup) {
                int i = (int)t->nhier++;
                memcpy(seen[i], dev, sizeof seen[i]);
                memcpy(t->hier[i], point, strlen(point) + 1);
                if (has_option(opts, olen, "memory"))
                    t->memory = i;
                if (has_option(opts, olen, "pids"))
                    t->pids = i;
                if (has_option(opts, olen, "cpu"))
                    t->cpu = i;
                if (has_option(opts, olen, "freezer"))
                    t->freezer = i;
                if (has_option(opts, olen, "cpuacct"))
                    t->cpuacct = i;
            }
        }
        line = eol ? eol + 1 : NULL;
    }
    buf_free(&b);
    if (t->memory < 0) {
        snprintf(errbuf, errlen, "memory cgroup controller not found under " CG_ROOT);
        return -1;
    }
    return 0;
}

/* ---- removing a tree of groups ------------------------------------------------------ */

/* SIGKILLs every pid listed in dir/cgroup.procs but spare; returns how many were listed
 * (spare not counted). */
static int kill_listed(const char *dir, pid_t spare)
{
    char *list = read_file(dir, "cgroup.procs");
    if (!list)
        return 0;
    int count = 0;
    for (char *p = list; *p;) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 1 && pid != (long)spare) {
            count++;
            /* ESRCH is fine (already gone); any other failure shows up next round. */
            (void)kill((pid_t)pid, SIGKILL);
        }
        p = end;
        while (*p == '\n')
            p++;
    }
    free(list);
    return count;
}

/* top and every group below it, parents before children (breadth first, no recursion);
 * *n entries, malloc'd strings. */
static char **list_groups(const char *top, size_t *n)
{
    *n = 0;
    size_t cap = 16;
    char **list = malloc(cap * sizeof *list);
    if (!list || !(list[0] = strdup(top))) {
        free(list);
        return NULL;
    }
    *n = 1;
    for (size_t i = 0; i < *n; i++) {
        DIR *d = opendir(list[i]);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d)) != NULL && *n < TREE_GROUPS_MAX) {
            if (e->d_type != DT_DIR || strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char path[SBX_CG_PATH_MAX];
            if (!join(path, sizeof path, list[i], e->d_name, NULL))
                continue;
            if (*n == cap) {
                char **grown = realloc(list, 2 * cap * sizeof *list);
                if (!grown)
                    break;
                list = grown;
                cap *= 2;
            }
            if ((list[*n] = strdup(path)) != NULL)
                (*n)++;
        }
        closedir(d);
    }
    return list;
}

static int rmdir_retrying(const char *dir)
{
    /* rmdir fails with EBUSY until the last killed task is released */
    for (int tries = 0; tries < KILL_ROUNDS; tries++) {
        if (rmdir(dir) == 0 || errno == ENOENT)
            return 0;
        if (errno != EBUSY)
            return -1;
        pause_ms(5);
    }
    return -1;
}

/* Thaws, kills and removes top and everything below it (top itself only when !keep_top).
 * Returns the number of groups left. */
static int clear_tree(const char *top, bool keep_top)
{
    struct stat st;
    if (stat(top, &st) != 0)
        return 0;
    size_t n = 0;
    char **groups = list_groups(top, &n);
    if (!groups)
        return 1;
    /* frozen tasks cannot die: thaw first (v1 freezer; v2 cgroup.freeze) */
    for (size_t i = 0; i < n; i++) {
        (void)write_file(groups[i], "freezer.state", "THAWED");
        (void)write_file(groups[i], "cgroup.freeze", "0");
    }
    for (int round = 0; round < KILL_ROUNDS; round++) {
        int left = 0;
        for (size_t i = 0; i < n; i++) {
            (void)write_file(groups[i], "cgroup.kill", "1"); /* v2, kernel >= 5.14 */
            left += kill_listed(groups[i], 0);
        }
        if (left == 0)
            break;
        pause_ms(5);
    }
    int failed = 0;
    for (size_t i = n; i-- > 0;) { /* children before parents */
        if ((i > 0 || !keep_top) && rmdir_retrying(groups[i]) != 0)
            failed++;
        free(groups[i]);
    }
    free(groups);
    return failed;
}

/* Thaws top and every group below it: a task frozen in one hierarchy cannot die in another. */
static void thaw_tree(const char *top)
{
    size_t n = 0;
    char **groups = list_groups(top, &n);
    for (size_t i = 0; groups && i < n; i++) {
        (void)write_file(groups[i], "freezer.state", "THAWED");
        free(groups[i]);
    }
    free(groups);
}

int sbx_cg_tree_clear(const sbx_cg_tree *t, bool keep_root)
{
    int left = 0;
    char top[SBX_CG_PATH_MAX];
    if (!t->v2 && t->freezer >= 0 && join(top, sizeof top, t->hier[t->freezer], t->root, NULL))
        thaw_tree(top);
    if (!t->v2 && t->freezer >= 0 && join(top, sizeof top, t->hier[t->freezer], t->builds, NULL))
        thaw_tree(top);
    for (size_t i = 0; i < t->nhier; i++) {
        if (join(top, sizeof top, t->hier[i], t->root, NULL))
            left += clear_tree(top, keep_root);
        if (join(top, sizeof top, t->hier[i], t->builds, NULL)) /* made again by the next build */
            left += clear_tree(top, false);
    }
    return left;
}

void sbx_cg_tree_free(sbx_cg_tree *t)
{
    pthread_mutex_destroy(&t->mu);
    free(t->active);
    t->active = NULL;
    t->nactive = t->cap_active = 0;
}

static int open_tree(sbx_cg_tree *t, const char *root_name, char *errbuf, size_t errlen)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    t->ncpu = cpus > 0 ? (unsigned)cpus : 1;
    t->memory = t->pids = t->cpu = t->freezer = t->cpuacct = -1;
    if (strlen(root_name) + strlen(BUILDS_SUFFIX) >= sizeof t->root) {
        snprintf(errbuf, errlen, "cgroup name too long: %s", root_name);
        return -1;
    }
    memcpy(t->root, root_name, strlen(root_name) + 1);
    snprintf(t->builds, sizeof t->builds, "%s" BUILDS_SUFFIX, root_name);
    if (is_v1()) {
        if (find_v1_hierarchies(t, errbuf, errlen) != 0)
            return -1;
    } else if (is_v2()) {
        t->v2 = true;
        t->nhier = 1;
        memcpy(t->hier[0], CG_ROOT, sizeof CG_ROOT);
        t->memory = t->pids = t->cpu = t->freezer = t->cpuacct = 0;
    } else {
        snprintf(errbuf, errlen, "no usable cgroup hierarchy under " CG_ROOT);
        return -1;
    }
    /* what a killed predecessor on this state dir left: its processes and groups */
    int left = sbx_cg_tree_clear(t, true);
    if (left)
        log_warn("%d cgroup(s) under %s left by a previous run could not be removed",
                 left, t->root);
    /* and the runs' CPU time, and the freezer that holds sandboxes booted ahead (v1) */
    int limited[5] = {t->memory, t->pids, t->cpu, t->v2 ? -1 : t->cpuacct, t->v2 ? -1 : t->freezer};
    for (int k = 0; k < 5; k++) {
        if (limited[k] < 0 || (k > 0 && limited[k] == limited[0] && t->v2))
            continue;
        char dir[SBX_CG_PATH_MAX];
        int err = join(dir, sizeof dir, t->hier[limited[k]], t->root, NULL) ? mkdir_ok(dir) : ENAMETOOLONG;
        if (err) {
            snprintf(errbuf, errlen, "cannot create cgroup %s/%s: %s", t->hier[limited[k]], t->root,
                     strerror(err));
            return -1;
        }
    }
    if (t->v2) {
        /* controllers must be enabled at every level above the runs' groups */
        char dir[SBX_CG_PATH_MAX];
        int err = write_file(CG_ROOT, "cgroup.subtree_control", "+memory +pids +cpu");
        if (!err)
            err = join(dir, sizeof dir, CG_ROOT, t->root, NULL)
                      ? write_file(dir, "cgroup.subtree_control", "+memory +pids +cpu")
                      : ENAMETOOLONG;
        if (err) {
            snprintf(errbuf, errlen, "cannot enable cgroup v2 controllers: %s", strerror(err));
            return -1;
        }
    }
    return 0;
}

int sbx_cg_tree_open(sbx_cg_tree *t, const char *root_name, char *errbuf, size_t errlen)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    if (open_tree(t, root_name, errbuf, errlen) == 0)
        return 0;
    sbx_cg_tree_free(t);
    return -1;
}

/* ---- tenants' groups and runs' groups ----------------------------------------------- */

void sbx_cg_group_name(const char *tenant, char out[SBX_CG_NAME_MAX])
{
    if (!tenant) {
        snprintf(out, SBX_CG_NAME_MAX, "internal");
        return;
    }
    size_t n = strlen(tenant);
    bool plain = n > 0 && n <= 48 &&
                 ((tenant[0] >= 'a' && tenant[0] <= 'z') || (tenant[0] >= 'A' && tenant[0] <= 'Z') ||
                  (tenant[0] >= '0' && tenant[0] <= '9'));
    for (size_t i = 0; plain && i < n; i++) {
        char c = tenant[i];
        plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                c == '-' || c == '.';
    }
    if (plain) {
        snprintf(out, SBX_CG_NAME_MAX, "t-%s", tenant);
        return;
    }
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a: a stable, spread name for any string */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)tenant[i];
        h *= 0x100000001b3ull;
    }
    snprintf(out, SBX_CG_NAME_MAX, "t-_%016" PRIx64, h);
}

/* Writes one limit to dir/file; on failure errbuf says "cannot <what>: <reason>". optional
 * tolerates a missing file: the kernel then lacks that accounting and so the thing it limits. */
static int set_limit(const char *dir, const char *file, const char *value, bool optional,
                     const char *what, char *errbuf, size_t errlen)
{
    int err = write_file(dir, file, value);
    if (!err || (optional && err == ENOENT))
        return 0;
    snprintf(errbuf, errlen, "cannot %s: %s", what, strerror(err));
    return -1;
}

static int apply_v1(const sbx_cgroup *cg, const sbx_cg_limits *lim, char *errbuf, size_t errlen)
{
    char v[64];
    snprintf(v, sizeof v, "%" PRIu64, lim->memory_bytes);
    /* memsw exists only with swap accounting; without it there is no swap to forbid. It is never
     * below the memory limit: a limit that grows (a group made ahead, sbx_cg_set_limits) is
     * refused (EINVAL) until memsw grows first. */
    if (write_file(cg->dirs[0], "memory.limit_in_bytes", v) == EINVAL)
        (void)write_file(cg->dirs[0], "memory.memsw.limit_in_bytes", v);
    if (set_limit(cg->dirs[0], "memory.limit_in_bytes", v, false, "set memory limit", errbuf, errlen) ||
        set_limit(cg->dirs[0], "memory.memsw.limit_in_bytes", v, true, "set memory+swap limit", errbuf,
                  errlen))
        return -1;
    (void)write_file(cg->dirs[0], "memory.swappiness", "0"); /* best effort */
    if (cg->dirs[1][0]) {
        snprintf(v, sizeof v, "%" PRIu64, lim->pids);
        if (set_limit(cg->dirs[1], "pids.max", v, false, "set pids limit", errbuf, errlen))
            return -1;
    }
    if (cg->dirs[2][0]) {
        snprintf(v, sizeof v, "%u", 1000u * lim->cpu_percent);
        if (set_limit(cg->dirs[2], "cpu.cfs_period_us", "100000", false, "set cpu quota", errbuf, errlen) ||
            set_limit(cg->dirs[2], "cpu.cfs_quota_us", lim->ahead ? "-1" : v, false, "set cpu quota", errbuf,
                      errlen))
            return -1;
        if (lim->ahead) {
            snprintf(v, sizeof v, "%d", SBX_CG_BOOT_SHARES);
            if (set_limit(cg->dirs[2], "cpu.shares", v, false, "set cpu weight", errbuf, errlen))
                return -1;
        }
    }
    return 0;
}

static int apply_v2(const sbx_cgroup *cg, const sbx_cg_limits *lim, char *errbuf, size_t errlen)
{
    char mem[32], pids[32], cpu[48];
    snprintf(mem, sizeof mem, "%" PRIu64, lim->memory_bytes);
    snprintf(pids, sizeof pids, "%" PRIu64, lim->pids);
    snprintf(cpu, sizeof cpu, "%u 100000", 1000u * lim->cpu_percent);
    const char *dir = cg->dirs[0];
    if (set_limit(dir, "memory.max", mem, false, "set memory limit", errbuf, errlen) ||
        set_limit(dir, "memory.swap.max", "0", true, "forbid swap", errbuf, errlen) ||
        set_limit(dir, "pids.max", pids, false, "set pids limit", errbuf, errlen) ||
        set_limit(dir, "cpu.max", lim->ahead ? "max 100000" : cpu, false, "set cpu quota", errbuf, errlen))
        return -1;
    if (lim->ahead && set_limit(dir, "cpu.weight", "13", false, "set cpu weight", errbuf, errlen))
        return -1; /* ~ SBX_CG_BOOT_SHARES / 1024 of the default 100 */
    return 0;
}

/* The tenant's group under top (this server's root or its builds group) in one hierarchy (v2:
 * with the controllers enabled below it). */
static int ensure_group(const sbx_cg_tree *t, const char *hier, const char *top, const char *group, char *errbuf,
                        size_t errlen)
{
    char dir[SBX_CG_PATH_MAX];
    if (!join(dir, sizeof dir, hier, top, group)) {
        snprintf(errbuf, errlen, "cgroup path too long for %s", group);
        return -1;
    }
    if (mkdir(dir, 0755) != 0) {
        if (errno == EEXIST)
            return 0;
        snprintf(errbuf, errlen, "cannot create cgroup %s: %s", dir, strerror(errno));
        return -1;
    }
    if (t->v2 && set_limit(dir, "cgroup.subtree_control", "+memory +pids +cpu", false,
                           "enable cgroup v2 controllers", errbuf, errlen))
        return -1;
    return 0;
}

/* v1 with CPU accounting in a hierarchy of its own: the run's group there, made (and so
 * owned) by airlockd, not by runsc, which would remove it with the sandbox's last process:
 * the run's CPU time stays readable until sbx_cg_destroy (cgroup_usage.c). */
static int make_acct_group(sbx_cgroup *cg, const sbx_cg_tree *t, const char *top, const char *group, char *errbuf,
                           size_t errlen)
{
    const char *hier = t->hier[t->cpuacct];
    if (ensure_group(t, hier, top, group, errbuf, errlen) != 0)
        return -1;
    int n = snprintf(cg->acct_dir, sizeof cg->acct_dir, "%s%s", hier, cg->rel);
    if (n < 0 || (size_t)n + strlen("/cgroup.procs") >= sizeof cg->acct_dir || mkdir(cg->acct_dir, 0755) != 0) {
        snprintf(errbuf, errlen, "cannot create cgroup %s: %s", cg->acct_dir, n < 0 ? "" : strerror(errno));
        cg->acct_dir[0] = '\0';
        return -1;
    }
    memcpy(cg->acct_procs, cg->acct_dir, (size_t)n);
    memcpy(cg->acct_procs + n, "/cgroup.procs", sizeof "/cgroup.procs");
    return 0;
}

/* The active table with room for one more entry (NULL when out of memory; the old stays). */
static sbx_cg_active *grow_active(sbx_cg_tree *t)
{
    size_t cap = t->cap_active ? 2 * t->cap_active : 8;
    sbx_cg_active *grown = realloc(t->active, cap * sizeof *grown);
    if (grown) {
        t->active = grown;
        t->cap_active = cap;
    }
    return grown;
}

/* Writes cpu weight w to the tenant's group, or to the root when group is NULL (v1
 * cpu.shares; v2 cpu.weight, at most 10000). Best effort: a weight that cannot be written
 * leaves the previous one. */
static void write_weight(const sbx_cg_tree *t, const char *group, unsigned long long w)
{
    if (t->v2 && w > 10000)
        w = 10000;
    char dir[SBX_CG_PATH_MAX], value[24];
    snprintf(value, sizeof value, "%llu", w);
    if (join(dir, sizeof dir, t->hier[t->cpu], t->root, group))
        (void)write_file(dir, t->v2 ? "cpu.weight" : "cpu.shares", value);
}

/* Writes a CPU cap on the tenant's group: cpus whole CPUs, or none (0). */
static void write_cap(const sbx_cg_tree *t, const char *group, unsigned cpus)
{
    char dir[SBX_CG_PATH_MAX], value[48];
    if (!join(dir, sizeof dir, t->hier[t->cpu], t->root, group))
        return;
    if (t->v2) {
        if (cpus)
            snprintf(value, sizeof value, "%u 100000", cpus * 100000u);
        else
            snprintf(value, sizeof value, "max 100000");
        (void)write_file(dir, "cpu.max", value);
    } else {
        snprintf(value, sizeof value, "%lld", cpus ? (long long)cpus * 100000 : -1LL);
        (void)write_file(dir, "cpu.cfs_quota_us", value);
    }
}

/* While several tenants run commands, each tenant's group is capped at its part of the CPUs
 * (at least one: every command has one), so that one tenant's busy loops leave the CPU time
 * another's command needs free at once, not only on average: weights alone still make a
 * woken command wait behind the loops. Alone, a tenant has no cap. Under t->mu. */
static void cap_tenants_locked(sbx_cg_tree *t)
{
    unsigned n = (unsigned)t->nactive, cpus = 0;
    if (n > 1) {
        cpus = t->ncpu / n;
        if (cpus < 1)
            cpus = 1;
        if (cpus >= t->ncpu)
            cpus = 0;
    }
    for (size_t i = 0; i < t->nactive; i++) {
        if (t->active[i].cap_cpus != cpus)
            write_cap(t, t->active[i].group, cpus);
        t->active[i].cap_cpus = cpus;
    }
}

/* Counts one more (delta 1) or one fewer (-1) running command for the tenant's group and
 * writes the weights that follow (see cgroup.h): the tenant's, and the root's, which weighs
 * against the rest of the host what min(commands, CPUs) plain processes would. */
static void tenant_runs(sbx_cg_tree *t, const char *group, int delta)
{
    pthread_mutex_lock(&t->mu);
    size_t i = 0;
    while (i < t->nactive && strcmp(t->active[i].group, group) != 0)
        i++;
    if (i == t->nactive) {
        if (delta < 0 || (t->nactive == t->cap_active && !grow_active(t))) {
            pthread_mutex_unlock(&t->mu);
            return;
        }
        snprintf(t->active[i].group, sizeof t->active[i].group, "%s", group);
        t->active[i].runs = 0;
        t->active[i].cap_cpus = 0; /* an idle tenant's group has no cap (see below) */
        t->nactive++;
    }
    int runs = t->active[i].runs += delta;
    t->total_runs += delta;
    if (t->cpu >= 0) {
        unsigned long long unit = t->v2 ? 100 : SBX_CG_TENANT_SHARES;
        if (runs > 0)
            write_weight(t, group, unit * t->ncpu / ((unsigned)runs < t->ncpu ? (unsigned)runs : t->ncpu));
        if (t->total_runs > 0)
            write_weight(t, NULL, unit * ((unsigned)t->total_runs < t->ncpu ? (unsigned)t->total_runs : t->ncpu));
    }
    if (runs <= 0) { /* idle: its weight matters to nobody until its next command */
        if (t->cpu >= 0 && t->active[i].cap_cpus)
            write_cap(t, group, 0); /* its boots ahead are not held back */
        t->active[i] = t->active[--t->nactive];
    }
    if (t->cpu >= 0)
        cap_tenants_locked(t);
    pthread_mutex_unlock(&t->mu);
}

/* The builds' top group in every hierarchy (made when missing; v2: with the controllers enabled
 * below it); in the CPU's, a low weight (SBX_CG_BUILD_SHARES), not idle (cpu.idle, Linux 5.15+,
 * cleared: a group left idle by an older airlockd would ignore its weight). */
static int ensure_builds_top(const sbx_cg_tree *t, char *errbuf, size_t errlen)
{
    for (size_t i = 0; i < t->nhier; i++) {
        char dir[SBX_CG_PATH_MAX];
        int err = join(dir, sizeof dir, t->hier[i], t->builds, NULL) ? mkdir_ok(dir) : ENAMETOOLONG;
        if (!err && t->v2)
            err = write_file(dir, "cgroup.subtree_control", "+memory +pids +cpu");
        if (err) {
            snprintf(errbuf, errlen, "cannot create cgroup %s/%s: %s", t->hier[i], t->builds, strerror(err));
            return -1;
        }
        if ((int)i == t->cpu) {
            char w[24];
            snprintf(w, sizeof w, "%d", t->v2 ? SBX_CG_BUILD_WEIGHT : SBX_CG_BUILD_SHARES);
            (void)write_file(dir, "cpu.idle", "0");
            (void)write_file(dir, t->v2 ? "cpu.weight" : "cpu.shares", w);
        }
    }
    return 0;
}

static int rel_under(const char *top, const char *group, const char *id, char *out, size_t len)
{
    int n = snprintf(out, len, "/%s/%s/%s", top, group, id);
    return n < 0 || (size_t)n >= len ? -1 : n;
}

int sbx_cg_rel(const sbx_cg_tree *t, const char *group, const char *id, char *out, size_t len)
{
    return rel_under(t->root, group, id, out, len) < 0 ? -1 : 0;
}

int sbx_cg_create(sbx_cgroup *cg, sbx_cg_tree *t, const char *group, const char *id,
                  const sbx_cg_limits *lim, char *errbuf, size_t errlen)
{
    memset(cg, 0, sizeof *cg);
    cg->tree = t;
    snprintf(cg->group, sizeof cg->group, "%s", group);
    const char *top = lim->build ? t->builds : t->root;
    int n = rel_under(top, group, id, cg->rel, sizeof cg->rel);
    if (n < 0) {
        snprintf(errbuf, errlen, "cgroup path too long for id %s", id);
        return -1;
    }
    if (lim->build && ensure_builds_top(t, errbuf, errlen) != 0)
        return -1;
    int limited[3] = {t->memory, t->pids, t->cpu};
    for (int i = 0; i < 3; i++) {
        if (limited[i] < 0 || (t->v2 && i > 0))
            continue;
        const char *hier = t->hier[limited[i]];
        if (ensure_group(t, hier, top, group, errbuf, errlen) != 0)
            goto fail;
        char dir[SBX_CG_PATH_MAX];
        n = snprintf(dir, sizeof dir, "%s%s", hier, cg->rel);
        if (n < 0 || (size_t)n + strlen("/cgroup.procs") >= sizeof dir) {
            snprintf(errbuf, errlen, "cgroup path too long for id %s", id);
            goto fail;
        }
        /* ids are unique per server run; a leftover of a previous one was cleared at start */
        if (mkdir(dir, 0755) != 0) {
            snprintf(errbuf, errlen, "cannot create cgroup %s: %s", dir, strerror(errno));
            goto fail;
        }
        memcpy(cg->dirs[i], dir, (size_t)n + 1);
        memcpy(cg->procs[i], dir, (size_t)n);
        memcpy(cg->procs[i] + n, "/cgroup.procs", sizeof "/cgroup.procs");
    }
    if (lim->ahead && !t->v2 && t->freezer >= 0) {
        /* its own freezer group, joined with the others before runsc starts */
        const char *hier = t->hier[t->freezer];
        if (ensure_group(t, hier, top, group, errbuf, errlen) != 0)
            goto fail;
        n = snprintf(cg->freezer_dir, sizeof cg->freezer_dir, "%s%s", hier, cg->rel);
        if (n < 0 || (size_t)n + strlen("/cgroup.procs") >= sizeof cg->freezer_dir) {
            snprintf(errbuf, errlen, "cgroup path too long for id %s", id);
            cg->freezer_dir[0] = '\0';
            goto fail;
        }
        if (mkdir(cg->freezer_dir, 0755) != 0) {
            snprintf(errbuf, errlen, "cannot create cgroup %s: %s", cg->freezer_dir, strerror(errno));
            cg->freezer_dir[0] = '\0';
            goto fail;
        }
        memcpy(cg->freezer_procs, cg->freezer_dir, (size_t)n);
        memcpy(cg->freezer_procs + n, "/cgroup.procs", sizeof "/cgroup.procs");
    }
    if (!t->v2 && t->cpuacct >= 0 && t->cpuacct != t->cpu && make_acct_group(cg, t, top, group, errbuf, errlen) != 0)
        goto fail;
    if ((t->v2 ? apply_v2(cg, lim, errbuf, errlen) : apply_v1(cg, lim, errbuf, errlen)) != 0)
        goto fail;
    cg->ahead = lim->ahead;
    if (!lim->ahead) {
        tenant_runs(t, group, 1);
        cg->counted = true;
    }
    return 0;
fail:
    sbx_cg_destroy(cg);
    return -1;
}

int sbx_cg_join_self(const sbx_cgroup *cg)
{
    /* Only async-signal-safe calls: this runs in a child forked from a threaded server. */
    char num[24];
    int len = 0;
    pid_t pid = getpid();
    char rev[24];
    do {
        rev[len++] = (char)('0' + pid % 10);
        pid /= 10;
    } while (pid > 0);
    for (int i = 0; i < len; i++)
        num[i] = rev[len - 1 - i];
    for (int i = 0; i < 5; i++) {
        const char *procs = i < 3 ? cg->procs[i] : i == 3 ? cg->freezer_procs : cg->acct_procs;
        if (!procs[0])
            continue;
        int fd = open(procs, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            return -1;
        ssize_t w = write(fd, num, (size_t)len);
        close(fd);
        if (w != len)
            return -1;
    }
    return 0;
}

/* sbx_cg_prime_join's thread: arg (freed here) is the cgroup.procs file to write its pid to. */
static void *prime_join(void *arg)
{
    char pid[24];
    int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
    int fd = open(arg, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)!write(fd, pid, (size_t)n);
        close(fd);
    }
    free(arg);
    return NULL;
}

void sbx_cg_prime_join(const sbx_cg_tree *t)
{
    if (t->v2 || t->memory < 0)
        return;
    /* this process's memory group: the line "<n>:<controllers>:<path>" naming memory (read
     * each time: an operator may have moved airlockd since) */
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[SBX_CG_PATH_MAX], *procs = NULL;
    while (f && !procs && fgets(line, sizeof line, f)) {
        char *ctl = strchr(line, ':');
        char *path = ctl ? strchr(ctl + 1, ':') : NULL;
        if (!path)
            continue;
        *path++ = '\0';
        path[strcspn(path, "\n")] = '\0';
        bool memory = false;
        char *save = NULL; /* (strtok_r: resumes run on several threads at once) */
        for (char *tok = strtok_r(ctl + 1, ",", &save); tok && !memory; tok = strtok_r(NULL, ",", &save))
            memory = strcmp(tok, "memory") == 0;
        if (memory && asprintf(&procs, "%s%s/cgroup.procs", t->hier[t->memory], strcmp(path, "/") == 0 ? "" : path) < 0)
            procs = NULL; /* (asprintf leaves it undefined on failure) */
    }
    if (f)
        fclose(f);
    pthread_attr_t a;
    pthread_t th;
    if (!procs || pthread_attr_init(&a) != 0) {
        free(procs);
        return;
    }
    (void)pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &a, prime_join, procs) != 0)
        free(procs);
    pthread_attr_destroy(&a);
}

void sbx_cg_oom_status(const sbx_cgroup *cg, bool *oom_killed, bool *limit_hit)
{
    *oom_killed = false;
    *limit_hit = false;
    if (!cg->dirs[0][0])
        return;
    if (cg->tree && cg->tree->v2) {
        char *ev = read_file(cg->dirs[0], "memory.events");
        if (ev) {
            *oom_killed = keyed_value(ev, "oom_kill") > 0;
            *limit_hit = keyed_value(ev, "max") > 0;
            free(ev);
        }
        return;
    }
    char *oc = read_file(cg->dirs[0], "memory.oom_control");
    if (oc) {
        *oom_killed = keyed_value(oc, "oom_kill") > 0;
        free(oc);
    }
    char *fc = read_file(cg->dirs[0], "memory.failcnt");
    if (fc) {
        *limit_hit = strtoull(fc, NULL, 10) > 0;
        free(fc);
    }
}

int sbx_cg_freeze(const sbx_cgroup *cg, bool frozen)
{
    if (!cg->ahead)
        return 0;
    if (cg->tree && cg->tree->v2)
        return cg->dirs[0][0] ? write_file(cg->dirs[0], "cgroup.freeze", frozen ? "1" : "0") : ENOENT;
    return cg->freezer_dir[0] ? write_file(cg->freezer_dir, "freezer.state", frozen ? "FROZEN" : "THAWED")
                              : ENOENT;
}

int sbx_cg_set_limits(const sbx_cgroup *cg, const sbx_cg_limits *lim, char *errbuf, size_t errlen)
{
    if (!cg->tree) {
        snprintf(errbuf, errlen, "no cgroup to limit");
        return -1;
    }
    return cg->tree->v2 ? apply_v2(cg, lim, errbuf, errlen) : apply_v1(cg, lim, errbuf, errlen);
}

/* path (a directory of the group or one of its files: <hierarchy><from>[/file]) with from
 * replaced by to; false when it does not fit. */
static bool swap_rel(char path[SBX_CG_PATH_MAX], const char *from, const char *to)
{
    if (!path[0])
        return true;
    char *at = strstr(path, from);
    if (!at)
        return false;
    char out[SBX_CG_PATH_MAX];
    int n = snprintf(out, sizeof out, "%.*s%s%s", (int)(at - path), path, to, at + strlen(from));
    if (n < 0 || (size_t)n >= sizeof out)
        return false;
    memcpy(path, out, (size_t)n + 1);
    return true;
}

int sbx_cg_rename(sbx_cgroup *cg, const char *id, char *errbuf, size_t errlen)
{
    sbx_cg_tree *t = cg->tree;
    if (!t || t->v2) {
        snprintf(errbuf, errlen, "cgroup v2 groups cannot be renamed");
        return -1;
    }
    const char *last = strrchr(cg->rel, '/');
    char rel[SBX_CG_PATH_MAX];
    int n = last ? snprintf(rel, sizeof rel, "%.*s/%s", (int)(last - cg->rel), cg->rel, id) : -1;
    if (n < 0 || (size_t)n >= sizeof rel - strlen("/cgroup.procs")) {
        snprintf(errbuf, errlen, "cgroup path too long for id %s", id);
        return -1;
    }
    bool renamed[SBX_CG_HIER_MAX] = {false};
    size_t i;
    for (i = 0; i < t->nhier; i++) {
        char from[SBX_CG_PATH_MAX], to[SBX_CG_PATH_MAX];
        int a = snprintf(from, sizeof from, "%s%s", t->hier[i], cg->rel);
        int b = snprintf(to, sizeof to, "%s%s", t->hier[i], rel);
        if (a < 0 || (size_t)a >= sizeof from || b < 0 || (size_t)b + strlen("/cgroup.procs") >= sizeof to) {
            snprintf(errbuf, errlen, "cgroup path too long for id %s", id);
            break;
        }
        if (rename(from, to) == 0)
            renamed[i] = true;
        else if (errno != ENOENT) { /* (a hierarchy runsc did not add it to) */
            snprintf(errbuf, errlen, "cannot rename cgroup %s to %s: %s", from, to, strerror(errno));
            break;
        }
    }
    if (i < t->nhier) { /* put back what moved */
        for (size_t j = 0; j < i; j++) {
            char from[SBX_CG_PATH_MAX], to[SBX_CG_PATH_MAX];
            if (renamed[j] && snprintf(from, sizeof from, "%s%s", t->hier[j], rel) < (int)sizeof from &&
                snprintf(to, sizeof to, "%s%s", t->hier[j], cg->rel) < (int)sizeof to && rename(from, to) != 0)
                log_warn("cannot rename cgroup %s back to %s: %s", from, to, strerror(errno));
        }
        return -1;
    }
    char old[SBX_CG_PATH_MAX];
    memcpy(old, cg->rel, sizeof old);
    bool fits = true;
    for (int k = 0; k < 3; k++)
        fits = swap_rel(cg->dirs[k], old, rel) && swap_rel(cg->procs[k], old, rel) && fits;
    fits = swap_rel(cg->freezer_dir, old, rel) && swap_rel(cg->freezer_procs, old, rel) && fits;
    fits = swap_rel(cg->acct_dir, old, rel) && swap_rel(cg->acct_procs, old, rel) && fits;
    memcpy(cg->rel, rel, (size_t)n + 1);
    if (!fits) { /* (cannot happen: each path is its hierarchy's mount point and rel, checked above) */
        snprintf(errbuf, errlen, "cgroup paths too long for id %s", id);
        return -1;
    }
    return 0;
}

void sbx_cg_hurry(const sbx_cgroup *cg)
{
    if (!cg->ahead || !cg->tree)
        return;
    if (cg->tree->v2)
        (void)write_file(cg->dirs[0], "cpu.weight", "100");
    else if (cg->dirs[2][0])
        (void)write_file(cg->dirs[2], "cpu.shares", "1024");
}

/* A command's group counted as a running command of its tenant (unless it is already), then
 * thawed: counted first, so it never runs a moment outside its tenant's weight; a thaw that
 * fails uncounts what it counted. 0, or -1. */
static int count_and_thaw(sbx_cgroup *cg)
{
    bool counted_now = cg->tree && !cg->counted;
    if (counted_now) {
        tenant_runs(cg->tree, cg->group, 1);
        cg->counted = true;
    }
    if (sbx_cg_freeze(cg, false) != 0) {
        if (counted_now)
            sbx_cg_end_command(cg);
        return -1;
    }
    return 0;
}

int sbx_cg_begin_command(sbx_cgroup *cg, const sbx_cg_limits *lim)
{
    if (!cg->ahead || !cg->tree)
        return 0;
    bool oom = false, hit = false;
    sbx_cg_oom_status(cg, &oom, &hit);
    if (oom || (hit && cg->tree->v2)) /* v2's "max" count cannot be reset */
        return -1;
    /* the command's limits are in place before it thaws: it never runs a moment without them */
    char v[32];
    if (cg->tree->v2) {
        snprintf(v, sizeof v, "%u 100000", 1000u * lim->cpu_percent);
        if (write_file(cg->dirs[0], "cpu.weight", "100") != 0 || write_file(cg->dirs[0], "cpu.max", v) != 0)
            return -1;
    } else {
        /* the command's own count of hitting the limit: the boot's is forgotten */
        if (write_file(cg->dirs[0], "memory.failcnt", "0") != 0)
            return -1;
        (void)write_file(cg->dirs[0], "memory.max_usage_in_bytes", "0");
        if (cg->dirs[2][0]) {
            snprintf(v, sizeof v, "%u", 1000u * lim->cpu_percent);
            if (write_file(cg->dirs[2], "cpu.shares", "1024") != 0 ||
                write_file(cg->dirs[2], "cpu.cfs_quota_us", v) != 0)
                return -1;
        }
    }
    return count_and_thaw(cg);
}

int sbx_cg_next_command(sbx_cgroup *cg)
{
    if (cg->tree && !cg->tree->v2 && cg->dirs[0][0] && write_file(cg->dirs[0], "memory.failcnt", "0") != 0)
        return -1;
    return count_and_thaw(cg);
}

void sbx_cg_end_command(sbx_cgroup *cg)
{
    if (cg->counted)
        tenant_runs(cg->tree, cg->group, -1);
    cg->counted = false;
}

int sbx_cg_kill_all_except(const sbx_cgroup *cg, pid_t spare)
{
    (void)sbx_cg_freeze(cg, false); /* frozen tasks cannot die */
    if (spare <= 0 && cg->tree && cg->tree->v2 && cg->dirs[0][0])
        (void)write_file(cg->dirs[0], "cgroup.kill", "1"); /* kernel >= 5.14; else loop below */
    int left = 0;
    /* Killed tasks leave the group asynchronously; a fork racing with the kill shows up in
     * the next round. The rounds of 5 ms bound this at about a second. */
    for (int round = 0; round < KILL_ROUNDS; round++) {
        left = 0;
        for (int i = 0; i < 3; i++)
            if (cg->dirs[i][0])
                left += kill_listed(cg->dirs[i], spare);
        if (left == 0)
            break;
        pause_ms(5);
    }
    return left;
}

int sbx_cg_kill_all(const sbx_cgroup *cg)
{
    return sbx_cg_kill_all_except(cg, 0);
}

void sbx_cg_destroy(sbx_cgroup *cg)
{
    if (!cg->tree)
        return;
    (void)sbx_cg_kill_all(cg);
    if (cg->tree->on_retire) { /* its processes are gone: its CPU time and peak are final */
        sbx_cg_usage u;
        sbx_cg_run_usage(cg, &u);
        const char *id = strrchr(cg->rel, '/');
        cg->tree->on_retire(cg->tree->retire_ctx, id ? id + 1 : cg->rel, &u);
    }
    for (size_t i = 0; i < cg->tree->nhier; i++) {
        char dir[SBX_CG_PATH_MAX];
        int n = snprintf(dir, sizeof dir, "%s%s", cg->tree->hier[i], cg->rel);
        if (n > 0 && (size_t)n < sizeof dir && rmdir_retrying(dir) != 0)
            log_warn("cannot remove cgroup %s: %s", dir, strerror(errno));
    }
    if (cg->counted)
        tenant_runs(cg->tree, cg->group, -1);
    cg->counted = false;
    for (int i = 0; i < 3; i++)
        cg->dirs[i][0] = cg->procs[i][0] = '\0';
    cg->freezer_dir[0] = cg->freezer_procs[0] = '\0';
    cg->acct_dir[0] = cg->acct_procs[0] = '\0';
    cg->tree = NULL;
}
