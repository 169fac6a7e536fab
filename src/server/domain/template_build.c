/* One template build (see templates.h): a copy of the cached base (template_base.c, made here
 * when missing: mmdebstrap's essential set), then mmdebstrap again over that copy for the
 * packages, from the host's apt sources with the package cache, the setup in gVisor, the root
 * finished and measured; its output goes to the record's log and progress as it comes. Package names reach mmdebstrap as one argument (validated
 * against Debian's grammar by the API); nothing a client sent is pasted into a shell. */
#include "domain/templates_internal.h"

#include "fs/walk.h"
#include "log/log.h"
#include "sandbox/build.h"
#include "util/sync.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ARGV_MAX 40
/* mmdebstrap's own hook that makes /usr merged with usr-is-merged */
#define MERGED_USR_HOOKS "/usr/share/mmdebstrap/hooks/merged-usr"

/* dpkg syncs every file it unpacks, and a build waits on each; the root is synced once
 * instead, before it is said ready (tpl_build), and a base before it is put in place */
static const char *const DPKG_OPTIONS[] = {
    "--dpkgopt=force-unsafe-io",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
};
#define LINE_MAX_KEPT 512

static const char *const build_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C.UTF-8", "HOME=/root",
                                        NULL};

/* The output reader of one step: whole lines to the progress, every byte to the log. */
typedef struct {
    templates *t;
    tpl *r;
    char line[LINE_MAX_KEPT];
    size_t len;
    bool cut; /* the line went past LINE_MAX_KEPT: the rest of it is dropped */
    bool upgraded_essential; /* mmdebstrap over the base had to install essential packages */
    bool recommends;         /* the recipe's: apt installs what the packages recommend */
} reader;

/* mmdebstrap's line when its essential step has packages to install: over a base, the archive
 * has newer ones than the base holds. */
static const char ESSENTIAL_LINE[] = "I: installing essential packages";

static void take_line(reader *rd)
{
    rd->line[rd->len] = '\0';
    if (strncmp(rd->line, ESSENTIAL_LINE, sizeof ESSENTIAL_LINE - 1) == 0)
        rd->upgraded_essential = true;
    pthread_mutex_lock(&rd->t->mu);
    if (template_progress_line(&rd->r->progress, rd->line, rd->len))
        tpl_event_locked(rd->t, rd->r, rd->line);
    pthread_mutex_unlock(&rd->t->mu);
    rd->len = 0;
    rd->cut = false;
}

static void on_output(void *ctx, int stream, const char *data, size_t len)
{
    reader *rd = ctx;
    if (stream == 0 || len == 0)
        return;
    pthread_mutex_lock(&rd->t->mu);
    tpl_log_append(rd->r, data, len);
    pthread_mutex_unlock(&rd->t->mu);
    for (size_t i = 0; i < len; i++) {
        if (data[i] == '\n') {
            take_line(rd);
        } else if (rd->len + 1 < sizeof rd->line && !rd->cut) {
            rd->line[rd->len++] = data[i] == '\r' ? ' ' : data[i];
        } else {
            rd->cut = true;
        }
    }
}

static bool never_full(void *ctx)
{
    (void)ctx;
    return false;
}

/* Sets r's phase and says so. */
static void phase(templates *t, tpl *r, const char *name)
{
    pthread_mutex_lock(&t->mu);
    if (template_progress_phase(&r->progress, name))
        tpl_event_locked(t, r, NULL);
    pthread_mutex_unlock(&t->mu);
}

int tpl_source_files(const templates *t, glob_t *g)
{
    memset(g, 0, sizeof *g);
    if (t->sources)
        return glob(t->sources, GLOB_NOCHECK, NULL, g) == 0 ? 0 : -1;
    int flags = 0;
    struct stat st;
    if (stat("/etc/apt/sources.list", &st) == 0 && st.st_size > 0 &&
        glob("/etc/apt/sources.list", 0, NULL, g) == 0)
        flags = GLOB_APPEND;
    if (glob("/etc/apt/sources.list.d/*.sources", flags, NULL, g) == 0)
        flags = GLOB_APPEND;
    (void)glob("/etc/apt/sources.list.d/*.list", flags, NULL, g);
    return g->gl_pathc > 0 ? 0 : -1;
}

/* mmdebstrap into root_dir: the base (packages NULL: the essential set into an empty root_dir),
 * or packages over a copy of the base (its essential step then installs nothing unless the
 * archive has moved on since the base was made); 0, or -1 with why. */
static int debootstrap(templates *t, reader *rd, const char *root_dir, const json_t *packages, const char *lists,
                       char *why, size_t whylen)
{
    char *include = NULL, *hook_in = NULL, *hook_out = NULL, *hook_lists = NULL;
    size_t n = packages ? json_array_size(packages) : 0, need = 16;
    for (size_t i = 0; i < n; i++)
        need += strlen(json_string_value(json_array_get(packages, i))) + 1;
    include = malloc(need);
    if (include) {
        strcpy(include, "--include=");
        for (size_t i = 0; i < n; i++) {
            if (i)
                strcat(include, ",");
            strcat(include, json_string_value(json_array_get(packages, i)));
        }
    }
    glob_t g;
    if (tpl_source_files(t, &g) != 0) {
        snprintf(why, whylen, "no apt sources found (%s)", t->sources ? t->sources : "/etc/apt");
        free(include);
        globfree(&g);
        return -1;
    }
    const char *argv[ARGV_MAX + 8];
    size_t a = 0;
    argv[a++] = t->mmdebstrap;
    argv[a++] = "--verbose";
    argv[a++] = "--mode=root";
    argv[a++] = "--format=directory";
    argv[a++] = "--variant=essential";
    /* usr-is-merged instead of usrmerge (which pulls perl), no manuals, docs or translations:
     * a third of the size, as fast or faster (docs/server.md) */
    struct stat hooks; /* the base has them (the hooks would make the links again: they exist) */
    if (!packages && stat(MERGED_USR_HOOKS, &hooks) == 0 && S_ISDIR(hooks.st_mode))
        argv[a++] = "--hook-dir=" MERGED_USR_HOOKS;
    if (packages) /* the copy of the base */
        argv[a++] = "--skip=check/empty";
    for (size_t i = 0; i < sizeof DPKG_OPTIONS / sizeof DPKG_OPTIONS[0]; i++)
        argv[a++] = DPKG_OPTIONS[i];
    argv[a++] = "--aptopt=Acquire::http::Timeout \"30\"";
    argv[a++] = "--aptopt=Acquire::Retries \"1\"";
    if (packages && rd->recommends) /* (mmdebstrap's own default: without) */
        argv[a++] = "--aptopt=APT::Install-Recommends \"true\"";
    if (packages)
        argv[a++] = include;
    /* the package cache and the base's apt lists go in and out as hard links (the same
     * filesystem: nothing is copied; apt and dpkg replace files, never write into them), so a
     * large cache costs no time; copies when links cannot be made. Only the packages and the
     * lists: each build keeps its own lock files (apt locks them by inode). */
    if (t->cache &&
        asprintf(&hook_in, "--setup-hook=find %s/ -maxdepth 1 -type f -name '*.deb' -exec cp -al -t "
                 "\"$1\"/var/cache/apt/archives/ {} + 2>/dev/null || find %s/ -maxdepth 1 -type f -name '*.deb' "
                 "-exec cp -a -t \"$1\"/var/cache/apt/archives/ {} +", t->cache, t->cache) >= 0 &&
        asprintf(&hook_out, "--customize-hook=find \"$1\"/var/cache/apt/archives/ -maxdepth 1 -type f -name '*.deb' "
                 "-exec cp -aln -t %s/ {} + 2>/dev/null || find \"$1\"/var/cache/apt/archives/ -maxdepth 1 "
                 "-type f -name '*.deb' -exec cp -an -t %s/ {} +", t->cache, t->cache) >= 0) {
        argv[a++] = "--skip=essential/unlink";
        argv[a++] = "--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives/";
        argv[a++] = hook_in;
        argv[a++] = hook_out;
        /* the base keeps the apt lists it was made with: a build over it starts from them, and
         * its apt-get update fetches only what changed since */
        int made = !lists ? -1
                   : packages ? asprintf(&hook_lists, "--setup-hook=[ ! -d %s ] || find %s/ -maxdepth 1 -type f "
                                         "! -name lock -exec cp -al -t \"$1\"/var/lib/apt/lists/ {} +", lists, lists)
                              : asprintf(&hook_lists, "--customize-hook=cp -al \"$1\"/var/lib/apt/lists %s", lists);
        if (made >= 0)
            argv[a++] = hook_lists;
    }
    argv[a++] = t->suite;
    argv[a++] = root_dir;
    for (size_t i = 0; i < g.gl_pathc && a < ARGV_MAX; i++)
        argv[a++] = g.gl_pathv[i];
    argv[a] = NULL;
    int rc = -1;
    if (!include || (t->cache && (!hook_in || !hook_out))) {
        snprintf(why, whylen, "out of memory");
    } else {
        sandbox_tap tap = {.output = on_output, .full = never_full, .room_fd = -1, .tick_ms = 1000, .ctx = rd};
        sandbox_build_step st = {.name = "tpl-debootstrap", .tap = &tap, .timeout_seconds = t->build_timeout,
                                 .cancel_fd = t->cancel[0]};
        sandbox_result res;
        if (sandbox_build_exec(t->sb, &st, argv, build_env, &res, why, whylen) == 0) {
            if (res.exit_code == 0)
                rc = 0;
            else if (res.timed_out)
                snprintf(why, whylen, "mmdebstrap took longer than %d s (SANDBOX_TEMPLATE_BUILD_TIMEOUT)",
                         t->build_timeout);
            else if (res.cancelled)
                snprintf(why, whylen, "the build was stopped (the server is stopping)");
            else
                snprintf(why, whylen, "mmdebstrap exited with %d%s", res.exit_code,
                         res.oom_killed ? " (its memory limit)" : "");
            sandbox_result_free(&res);
        }
    }
    globfree(&g);
    free(include);
    free(hook_in);
    free(hook_out);
    free(hook_lists);
    return rc;
}

/* The setup commands in gVisor on root_dir; 0, or -1 with why. */
static int run_setup(templates *t, reader *rd, const char *root_dir, const json_t *setup, char *why, size_t whylen)
{
    size_t n = json_array_size(setup);
    const char **cmds = calloc(n ? n : 1, sizeof *cmds);
    if (!cmds) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        cmds[i] = json_string_value(json_array_get(setup, i));
    sandbox_tap tap = {.output = on_output, .full = never_full, .room_fd = -1, .tick_ms = 1000, .ctx = rd};
    sandbox_build_step st = {.name = "tpl-setup", .tap = &tap, .timeout_seconds = t->build_timeout,
                             .cancel_fd = t->cancel[0]};
    sandbox_result res;
    int rc = -1;
    if (sandbox_build_setup(t->sb, &st, root_dir, cmds, n, &res, why, whylen) == 0) {
        if (res.exit_code == 0)
            rc = 0;
        else if (res.timed_out)
            snprintf(why, whylen, "the setup took longer than %d s (SANDBOX_TEMPLATE_BUILD_TIMEOUT)", t->build_timeout);
        else
            snprintf(why, whylen, "the setup exited with %d%s", res.exit_code,
                     res.oom_killed ? " (its memory limit)" : "");
        sandbox_result_free(&res);
    }
    free(cmds);
    return rc;
}

/* Removes every entry of dir (left empty). */
static int empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int rc = d ? 0 : -1;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            char *p = NULL;
            if (asprintf(&p, "%s/%s", dir, e->d_name) < 0 || fs_rmtree(p) != 0)
                rc = -1;
            free(p);
        }
    if (d)
        closedir(d);
    return rc;
}

/* leaf beside path's last component (<dir>/root -> <dir>/leaf), malloc'd. */
static char *sibling(const char *path, const char *leaf)
{
    const char *slash = strrchr(path, '/');
    char *p = NULL;
    if (!slash || asprintf(&p, "%.*s/%s", (int)(slash - path), path, leaf) < 0)
        return NULL;
    return p;
}

/* Removes root/rel, a file the copy of the base brought, when there; 0, or -1 with why. */
static int remove_in_root(const char *root, const char *rel, char *why, size_t whylen)
{
    char *p = NULL;
    if (asprintf(&p, "%s/%s", root, rel) < 0) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    int rc = unlink(p) == 0 || errno == ENOENT ? 0 : -1;
    if (rc != 0)
        snprintf(why, whylen, "cannot remove %s: %s", p, strerror(errno));
    free(p);
    return rc;
}

/* tpl_base_maker: the essential set into root, its /dev emptied (mmdebstrap fills it again over
 * each copy, and refuses to find it filled). */
static int make_base(void *ctx, const char *root, char *why, size_t whylen)
{
    static const char say[] = "airlockd: making the base every template starts from (once per apt sources)\n";
    reader *rd = ctx;
    log_info("template %s: making the base every template starts from, in %s", rd->r->name, root);
    pthread_mutex_lock(&rd->t->mu);
    tpl_log_append(rd->r, say, sizeof say - 1);
    pthread_mutex_unlock(&rd->t->mu);
    char *lists = sibling(root, "lists"), *dev = NULL;
    if (debootstrap(rd->t, rd, root, NULL, lists, why, whylen) != 0) {
        free(lists);
        return -1;
    }
    free(lists);
    int rc = asprintf(&dev, "%s/dev", root) >= 0 && empty_dir(dev) == 0 ? 0 : -1;
    if (rc != 0)
        snprintf(why, whylen, "cannot empty %s/dev: %s", root, strerror(errno));
    free(dev);
    return rc;
}

/* Runs cp with args in the build group as every step; 0, or -1 with why. */
static int run_cp(templates *t, const char *a1, const char *a2, const char *from, const char *to, char *why,
                  size_t whylen)
{
    const char *argv[] = {t->cp, a1, a2, "--", from, to, NULL};
    sandbox_build_step st = {.name = "tpl-copy", .timeout_seconds = t->build_timeout, .cancel_fd = t->cancel[0]};
    sandbox_result res;
    if (sandbox_build_exec(t->sb, &st, argv, build_env, &res, why, whylen) != 0)
        return -1;
    int rc = res.exit_code == 0 ? 0 : -1;
    if (rc != 0)
        snprintf(why, whylen, "copying the base failed (cp exited with %d): %.200s", res.exit_code,
                 res.err ? res.err : "");
    sandbox_result_free(&res);
    return rc;
}

/* The base's root copied to root_dir (reflinks where the filesystem has them) and its apt lists
 * linked beside it (lists_dir; copied when the bases are on another file system); 0, or -1 with why. */
static int copy_base(templates *t, const char *base, const char *root_dir, const char *lists_dir, char *why,
                     size_t whylen)
{
    char *lists = sibling(base, "lists");
    struct stat st;
    int rc = lists ? run_cp(t, "-a", "--reflink=auto", base, root_dir, why, whylen) : -1;
    if (rc == 0 && stat(lists, &st) == 0) /* a base without lists: the build fetches them all */
        rc = run_cp(t, t->bases_linkable ? "-al" : "-a", "--no-target-directory", lists, lists_dir, why, whylen);
    if (!lists)
        snprintf(why, whylen, "out of memory");
    free(lists);
    return rc;
}

/* The packages over a copy of the base (made first when missing); 0, or -1 with why. */
static int install(templates *t, reader *rd, const char *root_dir, const json_t *packages, char *why, size_t whylen)
{
    char key[TPL_BASE_KEY_LEN], *base = NULL, *lists = sibling(root_dir, "lists");
    int hold = -1;
    if (!lists) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    if (tpl_base_key(t, key) != 0) {
        snprintf(why, whylen, "no apt sources could be read (%s)", t->sources ? t->sources : "/etc/apt");
        free(lists);
        return -1;
    }
    if (tpl_base_get(t, key, make_base, rd, &base, &hold, why, whylen) != 0) {
        free(lists);
        return -1;
    }
    int rc = copy_base(t, base, root_dir, lists, why, whylen);
    tpl_base_put(hold);
    free(base);
    /* mmdebstrap writes its --aptopt file only where there is none: the base's would hide this
     * build's (Install-Recommends) */
    if (rc == 0 && remove_in_root(root_dir, "etc/apt/apt.conf.d/99mmdebstrap", why, whylen) != 0)
        rc = -1;
    rd->upgraded_essential = false;
    if (rc == 0)
        rc = debootstrap(t, rd, root_dir, packages, lists, why, whylen);
    if (rc == 0 && rd->upgraded_essential)
        tpl_base_mark_stale(t, key);
    if (fs_rmtree(lists) != 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", lists, strerror(errno));
    free(lists);
    return rc;
}

/* Bytes the owner's other ready templates take. Locked. */
static long long owner_bytes_locked(const templates *t, const tpl *r)
{
    long long sum = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i] != r && t->v[i]->status == TS_READY && strcmp(t->v[i]->owner, r->owner) == 0)
            sum += t->v[i]->size;
    return sum;
}

/* The package cache stays bounded: emptied when past TPL_CACHE_MAX. */
static void trim_cache(const templates *t)
{
    if (!t->cache || fs_tree_usage(t->cache) <= TPL_CACHE_MAX)
        return;
    if (fs_rmtree(t->cache) != 0 || mkdir(t->cache, 0700) != 0)
        log_warn("cannot empty the template package cache %s: %s", t->cache, strerror(errno));
}

void tpl_build(templates *t, tpl *r)
{
    char id[SESSION_TEMPLATE_ID_MAX];
    memcpy(id, r->id, sizeof id);
    json_t *packages = json_incref(r->packages), *setup = json_incref(r->setup);
    bool recommends = r->recommends;
    long long max_bytes = r->max_bytes;
    pthread_mutex_unlock(&t->mu);

    char why[512] = "";
    reader *rd = calloc(1, sizeof *rd);
    char *dir = tpl_path(t, id, NULL), *root = tpl_path(t, id, "root");
    long long size = -1;
    int rc = -1;
    if (!rd || !dir || !root) {
        snprintf(why, sizeof why, "out of memory");
    } else {
        rd->t = t;
        rd->r = r;
        rd->recommends = recommends;
        tpl_remove_files(t, id);
        if (mkdir(dir, 0755) != 0 || chmod(dir, 0755) != 0)
            snprintf(why, sizeof why, "cannot create %s: %s", dir, strerror(errno));
        else
            rc = install(t, rd, root, packages, why, sizeof why);
        if (rc == 0 && json_array_size(setup) > 0) {
            phase(t, r, "setup");
            rc = run_setup(t, rd, root, setup, why, sizeof why);
        }
        if (rc == 0) {
            phase(t, r, "finish");
            rc = sandbox_backend_finish_root(t->sb, root, why, sizeof why);
        }
        if (rc == 0 && (size = fs_tree_usage(root)) < 0) {
            snprintf(why, sizeof why, "cannot measure %s", root);
            rc = -1;
        }
        if (rc == 0 && sync_filesystem(root) != 0) { /* ready is said once it is on disk */
            snprintf(why, sizeof why, "cannot sync %s: %s", root, strerror(errno));
            rc = -1;
        }
        if (rd->len)
            take_line(rd);
        trim_cache(t);
    }
    pthread_mutex_lock(&t->mu);
    if (rc == 0 && max_bytes > 0 && owner_bytes_locked(t, r) + size > max_bytes) {
        snprintf(why, sizeof why, "the template takes %lld MB; with the others it would pass max_template_mb (%lld)",
                 size >> 20, max_bytes >> 20);
        rc = -1;
    }
    if (rc != 0) { /* nothing of a failed build stays, before anyone is told it failed */
        pthread_mutex_unlock(&t->mu);
        tpl_remove_files(t, id);
        pthread_mutex_lock(&t->mu);
    }
    if (rc == 0) {
        r->status = TS_READY;
        r->size = size;
        template_progress_phase(&r->progress, "ready");
        log_info("template %s (%s) built: %lld MB", r->name, id, size >> 20);
    } else {
        char line[600];
        int n = snprintf(line, sizeof line, "\nairlockd: the build failed: %s\n", why);
        tpl_log_append(r, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        r->status = TS_FAILED;
        template_progress_phase(&r->progress, "failed");
        log_warn("template %s (%s) failed: %s", r->name, id, why);
    }
    tpl_event_locked(t, r, rc == 0 ? NULL : why);
    tpl_save_locked(t);
    json_decref(packages);
    json_decref(setup);
    free(rd);
    free(dir);
    free(root);
}
