/* The cached base of template builds (see templates_internal.h): mmdebstrap's essential set,
 * built once per key (suite, architecture, apt sources, variant and options, the base's recipe
 * version) into <bases>/<key> (SANDBOX_TEMPLATE_BASES, default <state>/templates/bases), aside
 * first (<key>.new) and renamed in whole, so a build killed halfway leaves nothing that could be
 * taken for a base. The directory may be shared by the servers of one machine, so the lock is
 * the file system's: <bases>/.lock, taken shared while a build copies a base and exclusive while
 * one makes, replaces or removes one (each user opens the file itself: threads of one server
 * exclude one another as other servers do). */
#include "domain/templates_internal.h"

#include "disk/mounts.h"
#include "fs/walk.h"
#include "log/log.h"
#include "util/sync.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* An apt sources file read for the key: its first bytes (a sources file is a few lines). */
#define SOURCES_READ_MAX (256 * 1024)

static char *base_path(const templates *t, const char *name, const char *leaf)
{
    char *p = NULL;
    if (asprintf(&p, "%s/%s%s%s", t->bases, name, leaf ? "/" : "", leaf ? leaf : "") < 0)
        return NULL;
    return p;
}

/* Feeds s and its terminating NUL (so fields cannot run into one another). */
static int feed(EVP_MD_CTX *c, const char *s)
{
    return EVP_DigestUpdate(c, s, strlen(s) + 1) == 1 ? 0 : -1;
}

/* Feeds the file's name, length and contents. */
static int feed_file(EVP_MD_CTX *c, const char *path)
{
    FILE *f = fopen(path, "re");
    char *data = malloc(SOURCES_READ_MAX);
    size_t n = f && data ? fread(data, 1, SOURCES_READ_MAX, f) : 0;
    char len[32];
    snprintf(len, sizeof len, "%zu", n);
    int rc = f && data && !ferror(f) && feed(c, path) == 0 && feed(c, len) == 0 &&
             EVP_DigestUpdate(c, data, n) == 1 ? 0 : -1;
    if (f)
        fclose(f);
    free(data);
    return rc;
}

int tpl_base_key(const templates *t, char key[TPL_BASE_KEY_LEN])
{
    glob_t g;
    memset(&g, 0, sizeof g);
    struct utsname u;
    char recipe[16];
    snprintf(recipe, sizeof recipe, "%d", TPL_BASE_RECIPE);
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int rc = c && tpl_source_files(t, &g) == 0 && uname(&u) == 0 && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1 &&
             feed(c, t->suite) == 0 && feed(c, u.machine) == 0 && feed(c, TPL_BASE) == 0 && feed(c, recipe) == 0
                 ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
        rc = feed_file(c, g.gl_pathv[i]);
    globfree(&g);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    if (rc == 0 && (EVP_DigestFinal_ex(c, md, &mdlen) != 1 || mdlen < 8))
        rc = -1;
    EVP_MD_CTX_free(c);
    for (int i = 0; rc == 0 && i < 8; i++)
        snprintf(key + 2 * i, 3, "%02x", md[i]);
    return rc;
}

/* Removes a tree (its mounts first: mmdebstrap's, when it was killed). */
static void remove_tree(const char *dir)
{
    (void)mounts_unmount_under(dir, NULL, NULL);
    if (fs_rmtree(dir) != 0 && errno != ENOENT)
        log_error("cannot remove %s: %s", dir, strerror(errno));
}

/* Whether name's base may be used: complete (its ready stamp) and younger than
 * TPL_BASE_MAX_AGE (a build that finds it behind the archive removes the stamp). */
static bool base_fresh(const templates *t, const char *name)
{
    char *stamp = base_path(t, name, "ready");
    struct stat st;
    bool ok = stamp && stat(stamp, &st) == 0 && time(NULL) - st.st_mtime < TPL_BASE_MAX_AGE;
    free(stamp);
    return ok;
}

static bool stopping(templates *t)
{
    pthread_mutex_lock(&t->mu);
    bool stop = t->stopping;
    pthread_mutex_unlock(&t->mu);
    return stop;
}

/* The lock file opened and locked (how: LOCK_SH or LOCK_EX), waiting for other holders while
 * the server runs; the descriptor, or -1 with why. */
static int lock_bases(templates *t, int how, char *why, size_t whylen)
{
    char *path = base_path(t, ".lock", NULL);
    int fd = path ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
    if (fd < 0)
        snprintf(why, whylen, "cannot open %s: %s", path ? path : "the bases' lock", strerror(errno));
    free(path);
    while (fd >= 0 && flock(fd, how | LOCK_NB) != 0) {
        if ((errno != EWOULDBLOCK && errno != EINTR) || stopping(t)) {
            snprintf(why, whylen, errno == EWOULDBLOCK || errno == EINTR
                                      ? "the build was stopped (the server is stopping)"
                                      : "cannot lock the template bases: %s", strerror(errno));
            close(fd);
            return -1;
        }
        (void)poll(NULL, 0, 100); /* another build (of this server or another) holds it */
    }
    return fd;
}

/* Removes what no build may use: half-made or replaced bases (a dot in the name) and any
 * base not fresh (another key's included: the servers sharing the directory keep theirs fresh
 * by using it). Called holding the bases' lock exclusively. */
static void sweep_locked(templates *t)
{
    DIR *d = opendir(t->bases);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' && (strchr(e->d_name, '.') || !base_fresh(t, e->d_name))) {
            char *p = base_path(t, e->d_name, NULL);
            if (p) {
                remove_tree(p);
                log_info("template base %s removed (half-made, replaced or out of date)", e->d_name);
            }
            free(p);
        }
    if (d)
        closedir(d);
}

/* At start, only when no other server of the directory holds the lock: a start must not wait
 * for another server's base build (minutes); the next build that makes a base sweeps too. */
void tpl_base_sweep(templates *t)
{
    char *path = base_path(t, ".lock", NULL);
    int fd = path ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
    if (fd < 0)
        log_warn("template bases not swept: cannot open %s: %s", path ? path : "their lock", strerror(errno));
    else if (flock(fd, LOCK_EX | LOCK_NB) != 0)
        log_info("template bases not swept at start: another server is using them");
    else
        sweep_locked(t);
    if (fd >= 0)
        close(fd);
    free(path);
}

/* Builds key's base aside and puts it in place of any older one; 0 or -1 with why. Called
 * holding the bases' lock exclusively (no copy of the old one is under way). */
static int build_base(templates *t, const char *key, tpl_base_maker make, void *ctx, char *why, size_t whylen)
{
    char name[TPL_BASE_KEY_LEN + 8];
    snprintf(name, sizeof name, "%s.new", key);
    char *dir = base_path(t, name, NULL), *root = base_path(t, name, "root"), *stamp = base_path(t, name, "ready");
    char *done = base_path(t, key, NULL);
    int rc = -1;
    if (!dir || !root || !stamp || !done) {
        snprintf(why, whylen, "out of memory");
    } else {
        remove_tree(dir);
        if (mkdir(dir, 0755) != 0) {
            snprintf(why, whylen, "cannot create %s: %s", dir, strerror(errno));
        } else if (make(ctx, root, why, whylen) == 0) {
            if (sync_filesystem(root) != 0) { /* on disk before it is put in place */
                snprintf(why, whylen, "cannot sync %s: %s", root, strerror(errno));
            } else {
                FILE *f = fopen(stamp, "we");
                rc = f && fprintf(f, "%lld\n", (long long)time(NULL)) > 0 ? 0 : -1;
                if (f && fclose(f) != 0)
                    rc = -1;
                if (rc != 0)
                    snprintf(why, whylen, "cannot write %s: %s", stamp, strerror(errno));
            }
        }
    }
    if (rc == 0) {
        char old[TPL_BASE_KEY_LEN + 8];
        snprintf(old, sizeof old, "%s.old", key);
        char *aside = base_path(t, old, NULL);
        if (!aside || ((rename(done, aside) != 0 && errno != ENOENT) || rename(dir, done) != 0)) {
            snprintf(why, whylen, "cannot put the base in place at %s: %s", done, strerror(errno));
            rc = -1;
        }
        free(aside);
        sweep_locked(t); /* the one before, and what aged meanwhile */
    }
    if (rc != 0 && dir)
        remove_tree(dir);
    free(dir);
    free(root);
    free(stamp);
    free(done);
    return rc;
}

int tpl_base_get(templates *t, const char *key, tpl_base_maker make, void *ctx, char **root, int *hold, char *why,
                 size_t whylen)
{
    *root = NULL;
    *hold = -1;
    for (;;) {
        int fd = lock_bases(t, LOCK_SH, why, whylen);
        if (fd < 0)
            return -1;
        if (base_fresh(t, key)) {
            if (!(*root = base_path(t, key, "root"))) {
                snprintf(why, whylen, "out of memory");
                close(fd);
                return -1;
            }
            *hold = fd; /* shared until tpl_base_put: no one replaces it while it is copied */
            return 0;
        }
        close(fd);
        if ((fd = lock_bases(t, LOCK_EX, why, whylen)) < 0)
            return -1;
        /* another build may have made it while this one waited for the lock */
        int rc = base_fresh(t, key) ? 0 : build_base(t, key, make, ctx, why, whylen);
        close(fd);
        if (rc != 0) /* the next build tries again */
            return -1;
    }
}

void tpl_base_put(int hold)
{
    if (hold >= 0)
        close(hold); /* releases the shared lock */
}

void tpl_base_mark_stale(templates *t, const char *key)
{
    char why[256], *stamp = base_path(t, key, "ready");
    int fd = lock_bases(t, LOCK_EX, why, sizeof why);
    if (fd >= 0 && stamp && unlink(stamp) != 0 && errno != ENOENT)
        snprintf(why, sizeof why, "cannot remove %s: %s", stamp, strerror(errno));
    else if (fd >= 0)
        why[0] = '\0';
    if (fd >= 0)
        close(fd);
    free(stamp);
    if (why[0])
        log_warn("template base %s is out of date but stays: %s", key, why);
    else
        log_info("template base %s is out of date (the archive has newer essential packages): the next build makes "
                 "it again", key);
}
