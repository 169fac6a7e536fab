/* What templates.c and template_build.c share (private to domain/template*.c): the records,
 * the registry, the build step. */
#ifndef AIRLOCKD_DOMAIN_TEMPLATES_INTERNAL_H
#define AIRLOCKD_DOMAIN_TEMPLATES_INTERNAL_H

#include "domain/template_progress.h"
#include "domain/templates.h"
#include "util/buf.h"

#include <glob.h>
#include <pthread.h>

/* Bytes of a build's output kept (the log's tail). */
#define TPL_LOG_TAIL 8192
/* Progress events kept per template (the oldest go first). */
#define TPL_EVENTS_MAX 512
/* Templates on one server, all tenants. */
#define TPL_MAX_RECORDS 1024
/* What the build starts from (part of the content address): mmdebstrap's variant and options. */
#define TPL_BASE "mmdebstrap:essential,merged-usr,nodoc"
/* What the cached base holds beyond mmdebstrap's variant and options (part of its key): bump it
 * when that changes (template_base.c). */
#define TPL_BASE_RECIPE 1
/* A base older than this is built again (the archive moves on: security updates). */
#define TPL_BASE_MAX_AGE (24 * 3600)
/* 16 hex of the base's key and a NUL */
#define TPL_BASE_KEY_LEN 17
/* The package cache is emptied when it grows past this. */
#define TPL_CACHE_MAX (2048LL * 1024 * 1024)

typedef enum { TS_BUILDING, TS_READY, TS_FAILED } tpl_status;

typedef struct {
    char id[SESSION_TEMPLATE_ID_MAX];
    char *owner;          /* the tenant's name; "": the admin's (every tenant's) */
    char *name;
    json_t *packages;     /* sorted, distinct */
    json_t *setup;
    bool recommends;      /* the packages' recommends installed too */
    tpl_status status;
    bool started;         /* a build thread took it */
    double created;
    long long size;       /* bytes of its root */
    long long max_bytes;  /* its owner's max_template_mb when the build began (0: none) */
    int pins;             /* sessions being created on it */
    buffer log;           /* the newest TPL_LOG_TAIL bytes of its build's output, NUL-terminated */
    template_progress progress;
    json_t *events;       /* the newest progress events */
    unsigned long long seq;
} tpl;

struct templates {
    pthread_mutex_t mu;
    pthread_cond_t changed; /* an event, a status */
    pthread_cond_t work;    /* a build wanted, or stopping */
    tpl *v[TPL_MAX_RECORDS];
    size_t n;
    char *dir;              /* <state>/templates */
    char *cache;            /* <state>/templates/apt-cache, or NULL: no cache */
    char *suite;
    char *sources;          /* NULL: the host's */
    char *mmdebstrap;
    char *cp;               /* copies the base into a new build */
    char *bases;            /* SANDBOX_TEMPLATE_BASES or <state>/templates/bases (template_base.c) */
    bool bases_linkable;    /* on the file system of dir: the base's apt lists are hard-linked */
    const char *why_not;    /* NULL: templates work here */
    sandbox_backend *sb;
    pg_pool *db;            /* a fleet's (NULL: none) */
    int build_timeout;
    int (*users)(void *ctx, const char *id);
    void *users_ctx;
    void (*on_delete)(void *ctx, const char *id);
    void *on_delete_ctx;
    int cancel[2];          /* the read end hangs up when the server stops: builds are killed */
    pthread_t *threads;
    int nthreads;
    bool stopping;
    int waiters;            /* creates waiting for a build here (templates_await) */
};

const char *tpl_status_name(tpl_status s);
/* <dir>/<id>[/<leaf>], malloc'd. */
char *tpl_path(const templates *t, const char *id, const char *leaf);
void tpl_save_locked(templates *t);
void tpl_remove_files(templates *t, const char *id);
void tpl_log_append(tpl *r, const char *data, size_t len);
void tpl_event_locked(templates *t, tpl *r, const char *line);

/* The apt sources files to build from: SANDBOX_TEMPLATE_SOURCES, else the host's (globfree g
 * either way). */
int tpl_source_files(const templates *t, glob_t *g);

/* ---- the cached base (template_base.c) ----
 * Every build starts from a copy of one base: mmdebstrap's essential set with the options every
 * template gets, built once per key and kept in t->bases, which the servers of one machine may
 * share (a file lock, not the server's mutex, orders them). */

/* Makes a base into root (mmdebstrap); 0 or -1 with why. */
typedef int (*tpl_base_maker)(void *ctx, const char *root, char *why, size_t whylen);
/* The base's key: a hash of the suite, the architecture, the apt sources (names and contents),
 * TPL_BASE and TPL_BASE_RECIPE. 0, or -1 when the sources cannot be read. */
int tpl_base_key(const templates *t, char key[TPL_BASE_KEY_LEN]);
/* key's base, ready to copy: 0 with *root (malloc'd) and *hold, which keeps it from being
 * replaced until tpl_base_put(*hold); when it is missing, older than TPL_BASE_MAX_AGE or found
 * out of date, this build makes it with make (one base build at a time in the directory: the
 * others, of any server sharing it, wait for it). -1 with why when it cannot be made (the next
 * build tries again) or the server is stopping. Unlocked. */
int tpl_base_get(templates *t, const char *key, tpl_base_maker make, void *ctx, char **root, int *hold, char *why,
                 size_t whylen);
void tpl_base_put(int hold);
/* A build found key's base behind the archive (it had to upgrade essential packages). */
void tpl_base_mark_stale(templates *t, const char *key);
/* Removes half-made bases and those not fresh (any key's). Unlocked. */
void tpl_base_sweep(templates *t);

/* Builds r (status building), locked on entry and exit, the lock dropped while it works; ends
 * with r ready or failed, saved. */
void tpl_build(templates *t, tpl *r);

#endif
