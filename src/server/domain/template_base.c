/* The cached base of template builds (see templates_internal.h): mmdebstrap's essential set,
 * built once per key (suite, architecture, apt sources, variant and options, the base's recipe
 * version) into <state>/templates/bases/<key>, aside first (<key>.new) and renamed in whole, so
 * a build killed halfway leaves nothing that could be taken for a base. One base build at a
 * time: the others wait for it and then copy it. Only the current key's base is kept. */
#include "domain/templates_internal.h"

#include "disk/mounts.h"
#include "fs/walk.h"
#include "log/log.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

void tpl_base_sweep(templates *t, const char *keep)
{
    DIR *d = opendir(t->bases);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && (!keep || strcmp(e->d_name, keep) != 0)) {
            char *p = base_path(t, e->d_name, NULL);
            if (p) {
                remove_tree(p);
                log_info("template base %s removed (not the current one)", e->d_name);
            }
            free(p);
        }
    if (d)
        closedir(d);
}

/* Whether key's base is there and may be used: complete, younger than TPL_BASE_MAX_AGE and not
 * found out of date by a build. Locked. */
static bool base_fresh_locked(const templates *t, const char *key)
{
    char *stamp = base_path(t, key, "ready");
    struct stat st;
    bool ok = stamp && stat(stamp, &st) == 0 && time(NULL) - st.st_mtime < TPL_BASE_MAX_AGE &&
              strcmp(t->base_stale, key) != 0;
    free(stamp);
    return ok;
}

/* Builds key's base aside and puts it in place of any older one; 0 or -1 with why. Called with
 * base_building set by this thread, unlocked. */
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
            FILE *f = fopen(stamp, "we");
            rc = f && fprintf(f, "%lld\n", (long long)time(NULL)) > 0 ? 0 : -1;
            if (f && fclose(f) != 0)
                rc = -1;
            if (rc != 0)
                snprintf(why, whylen, "cannot write %s: %s", stamp, strerror(errno));
        }
    }
    if (rc == 0) { /* in place once no build copies the old one */
        pthread_mutex_lock(&t->mu);
        while (t->base_users > 0)
            pthread_cond_wait(&t->changed, &t->mu);
        pthread_mutex_unlock(&t->mu);
        char old[TPL_BASE_KEY_LEN + 8];
        snprintf(old, sizeof old, "%s.old", key);
        char *aside = base_path(t, old, NULL);
        if (!aside || ((rename(done, aside) != 0 && errno != ENOENT) || rename(dir, done) != 0)) {
            snprintf(why, whylen, "cannot put the base in place at %s: %s", done, strerror(errno));
            rc = -1;
        }
        free(aside);
        tpl_base_sweep(t, key); /* the one before, and other keys' */
    }
    if (rc != 0 && dir)
        remove_tree(dir);
    free(dir);
    free(root);
    free(stamp);
    free(done);
    return rc;
}

int tpl_base_get(templates *t, const char *key, tpl_base_maker make, void *ctx, char **root, char *why,
                 size_t whylen)
{
    *root = NULL;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        if (t->stopping) {
            snprintf(why, whylen, "the build was stopped (the server is stopping)");
            break;
        }
        if (t->base_building) { /* another build makes it: this one waits and uses it */
            pthread_cond_wait(&t->changed, &t->mu);
            continue;
        }
        if (base_fresh_locked(t, key)) {
            *root = base_path(t, key, "root");
            if (*root)
                t->base_users++;
            else
                snprintf(why, whylen, "out of memory");
            break;
        }
        t->base_building = true;
        pthread_mutex_unlock(&t->mu);
        int rc = build_base(t, key, make, ctx, why, whylen);
        pthread_mutex_lock(&t->mu);
        t->base_building = false;
        if (rc == 0 && strcmp(t->base_stale, key) == 0)
            t->base_stale[0] = '\0';
        pthread_cond_broadcast(&t->changed);
        if (rc != 0) /* the next build tries again */
            break;
    }
    pthread_mutex_unlock(&t->mu);
    return *root ? 0 : -1;
}

void tpl_base_put(templates *t)
{
    pthread_mutex_lock(&t->mu);
    if (t->base_users > 0)
        t->base_users--;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mu);
}

void tpl_base_mark_stale(templates *t, const char *key)
{
    pthread_mutex_lock(&t->mu);
    snprintf(t->base_stale, sizeof t->base_stale, "%s", key);
    pthread_mutex_unlock(&t->mu);
    log_info("template base %s is out of date (the archive has newer essential packages): the next build makes it "
             "again", key);
}
