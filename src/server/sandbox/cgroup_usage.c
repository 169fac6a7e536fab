/* What runs' cgroups use now: CPU time, memory now and at its peak, host tasks; read from
 * the control files of one run's group or of every group of a session (by name prefix). */
#include "sandbox/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A session has a handful of groups at once (its sandbox, one booted ahead, parallel
 * commands); more than this is not a session's. */
#define GROUPS_READ_MAX 256
#define VALUE_FILE_MAX 4096
/* Groups read in one pass over every run (more sandboxes than a server holds at once). */
#define EACH_READ_MAX 65536

/* The first bytes of dir/file (NUL-terminated) into buf; false when unreadable. */
static bool read_small(const char *dir, const char *file, char *buf, size_t size)
{
    char path[SBX_CG_PATH_MAX + 64];
    int n = snprintf(path, sizeof path, "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= sizeof path)
        return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t got = read(fd, buf, size - 1);
    close(fd);
    if (got < 0)
        return false;
    buf[got] = '\0';
    return true;
}

static uint64_t read_number(const char *dir, const char *file)
{
    char buf[64];
    return read_small(dir, file, buf, sizeof buf) ? strtoull(buf, NULL, 10) : 0;
}

/* "key N" of a flat-keyed file (v2 cpu.stat). */
static uint64_t read_keyed(const char *dir, const char *file, const char *key)
{
    char buf[VALUE_FILE_MAX];
    if (!read_small(dir, file, buf, sizeof buf))
        return 0;
    size_t klen = strlen(key);
    for (const char *p = buf; *p;) {
        if (strncmp(p, key, klen) == 0 && p[klen] == ' ')
            return strtoull(p + klen + 1, NULL, 10);
        const char *eol = strchr(p, '\n');
        if (!eol)
            break;
        p = eol + 1;
    }
    return 0;
}

/* hier/root/rel into dir (rel "": the root itself); false when it does not fit or the
 * hierarchy is absent. */
static bool group_dir(const sbx_cg_tree *t, int hier, const char *rel, char dir[SBX_CG_PATH_MAX])
{
    if (hier < 0)
        return false;
    int n = snprintf(dir, SBX_CG_PATH_MAX, "%s/%s%s%s", t->hier[hier], t->root, rel[0] ? "/" : "", rel);
    return n >= 0 && n < SBX_CG_PATH_MAX;
}

/* Adds the usage of the group at rel (under the root) to *u. */
static void add_dir(const sbx_cg_tree *t, const char *rel, sbx_cg_usage *u)
{
    char dir[SBX_CG_PATH_MAX];
    if (t->v2) {
        if (!group_dir(t, 0, rel, dir))
            return;
        u->cpu_ns += read_keyed(dir, "cpu.stat", "usage_usec") * 1000u;
        uint64_t now = read_number(dir, "memory.current");
        uint64_t peak = read_number(dir, "memory.peak"); /* kernel >= 5.19; else now */
        u->memory_bytes += now;
        u->memory_peak_bytes = peak > u->memory_peak_bytes ? peak : u->memory_peak_bytes;
        u->memory_peak_bytes = now > u->memory_peak_bytes ? now : u->memory_peak_bytes;
        u->tasks += read_number(dir, "pids.current");
        u->groups++;
        return;
    }
    if (group_dir(t, t->cpuacct, rel, dir))
        u->cpu_ns += read_number(dir, "cpuacct.usage");
    if (group_dir(t, t->memory, rel, dir)) {
        uint64_t now = read_number(dir, "memory.usage_in_bytes");
        uint64_t peak = read_number(dir, "memory.max_usage_in_bytes");
        u->memory_bytes += now;
        peak = now > peak ? now : peak;
        u->memory_peak_bytes = peak > u->memory_peak_bytes ? peak : u->memory_peak_bytes;
    }
    if (group_dir(t, t->pids, rel, dir))
        u->tasks += read_number(dir, "pids.current");
    u->groups++;
}

int sbx_cg_usage_of(const sbx_cg_tree *t, const char *group, const char *prefix, sbx_cg_usage *u)
{
    char dir[SBX_CG_PATH_MAX];
    int n = snprintf(dir, sizeof dir, "%s/%s/%s", t->hier[t->memory >= 0 ? t->memory : 0], t->root, group);
    if (n < 0 || (size_t)n >= sizeof dir)
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    size_t plen = strlen(prefix);
    unsigned read_groups = 0;
    struct dirent *e;
    while ((e = readdir(d)) && read_groups < GROUPS_READ_MAX) {
        if (e->d_type != DT_DIR || strncmp(e->d_name, prefix, plen) != 0)
            continue;
        char rel[SBX_CG_PATH_MAX];
        if (snprintf(rel, sizeof rel, "%s/%s", group, e->d_name) < (int)sizeof rel)
            add_dir(t, rel, u);
        read_groups++;
    }
    closedir(d);
    return 0;
}

/* Calls fn with each run's group of the tenant's group dir (at most *budget of them). */
static void each_in_group(const sbx_cg_tree *t, const char *base, const char *group, sbx_cg_usage_fn fn, void *ctx,
                          unsigned *budget)
{
    char dir[SBX_CG_PATH_MAX];
    int n = snprintf(dir, sizeof dir, "%s/%s", base, group);
    DIR *d = n > 0 && n < (int)sizeof dir ? opendir(dir) : NULL;
    if (!d)
        return;
    struct dirent *e;
    while (*budget > 0 && (e = readdir(d))) {
        if (e->d_type != DT_DIR || e->d_name[0] == '.')
            continue;
        char rel[SBX_CG_PATH_MAX];
        if (snprintf(rel, sizeof rel, "%s/%s", group, e->d_name) >= (int)sizeof rel)
            continue;
        sbx_cg_usage u;
        memset(&u, 0, sizeof u);
        add_dir(t, rel, &u);
        fn(ctx, e->d_name, &u);
        (*budget)--;
    }
    closedir(d);
}

int sbx_cg_usage_each(const sbx_cg_tree *t, sbx_cg_usage_fn fn, void *ctx)
{
    char base[SBX_CG_PATH_MAX];
    int n = snprintf(base, sizeof base, "%s/%s", t->hier[t->memory >= 0 ? t->memory : 0], t->root);
    DIR *d = n > 0 && n < (int)sizeof base ? opendir(base) : NULL;
    if (!d)
        return -1;
    unsigned budget = EACH_READ_MAX;
    struct dirent *e;
    while (budget > 0 && (e = readdir(d)))
        if (e->d_type == DT_DIR && e->d_name[0] != '.')
            each_in_group(t, base, e->d_name, fn, ctx, &budget);
    closedir(d);
    return 0;
}

void sbx_cg_run_usage(const sbx_cgroup *cg, sbx_cg_usage *u)
{
    memset(u, 0, sizeof *u);
    /* rel is "/<root>/<group>/<id>" */
    const char *below = cg->tree ? strchr(cg->rel + 1, '/') : NULL;
    if (below)
        add_dir(cg->tree, below + 1, u);
}

void sbx_cg_total_usage(const sbx_cg_tree *t, sbx_cg_usage *u)
{
    memset(u, 0, sizeof *u);
    add_dir(t, "", u);
}
