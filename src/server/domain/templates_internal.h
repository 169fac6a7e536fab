/* What templates.c and template_build.c share (private to domain/template*.c): the records,
 * the registry, the build step. */
#ifndef AIRLOCKD_DOMAIN_TEMPLATES_INTERNAL_H
#define AIRLOCKD_DOMAIN_TEMPLATES_INTERNAL_H

#include "domain/template_progress.h"
#include "domain/templates.h"
#include "util/buf.h"

#include <pthread.h>

/* Bytes of a build's output kept (the log's tail). */
#define TPL_LOG_TAIL 8192
/* Progress events kept per template (the oldest go first). */
#define TPL_EVENTS_MAX 512
/* Templates on one server, all tenants. */
#define TPL_MAX_RECORDS 1024
/* What the build starts from (part of the content address): mmdebstrap's variant and options. */
#define TPL_BASE "mmdebstrap:essential,merged-usr,nodoc"
/* The package cache is emptied when it grows past this. */
#define TPL_CACHE_MAX (2048LL * 1024 * 1024)

typedef enum { TS_BUILDING, TS_READY, TS_FAILED } tpl_status;

typedef struct {
    char id[SESSION_TEMPLATE_ID_MAX];
    char *owner;          /* the tenant's name; "": the admin's (every tenant's) */
    char *name;
    json_t *packages;     /* sorted, distinct */
    json_t *setup;
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
};

const char *tpl_status_name(tpl_status s);
/* <dir>/<id>[/<leaf>], malloc'd. */
char *tpl_path(const templates *t, const char *id, const char *leaf);
void tpl_save_locked(templates *t);
void tpl_remove_files(templates *t, const char *id);
void tpl_log_append(tpl *r, const char *data, size_t len);
void tpl_event_locked(templates *t, tpl *r, const char *line);

/* Builds r (status building), locked on entry and exit, the lock dropped while it works; ends
 * with r ready or failed, saved. */
void tpl_build(templates *t, tpl *r);

#endif
