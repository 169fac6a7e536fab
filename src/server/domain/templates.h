/* Ours: templates, read-only roots built from Debian packages that sessions run on (docs/api.md
 * "Templates"). A template is a recipe (suite, sorted packages, setup commands) owned by a
 * tenant, or by the admin ("": every tenant may use it); its id is a hash of owner and recipe,
 * so the same request again finds the same template. Builds run on a few threads of their own
 * (SANDBOX_TEMPLATE_BUILDS): mmdebstrap (variant essential plus the packages) from the host's
 * apt sources with a package cache kept between builds, then the setup in a gVisor sandbox
 * without network, then the tree made a sandbox root (sandbox/build.h). A failed build leaves
 * its record (status failed, the tool's own words in its log) and nothing on disk. The records
 * persist in <state>/templates/index.json; a build a restart interrupted is failed. */
#ifndef AIRLOCKD_DOMAIN_TEMPLATES_H
#define AIRLOCKD_DOMAIN_TEMPLATES_H

#include "domain/sessions.h"
#include "sandbox/sandbox.h"
#include "store/pg.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct templates templates;

typedef struct {
    const char *state_dir;     /* absolute, symlink-free */
    sandbox_backend *sb;
    int max_builds;            /* SANDBOX_TEMPLATE_BUILDS: builds at once, all tenants */
    int build_timeout;         /* SANDBOX_TEMPLATE_BUILD_TIMEOUT: seconds per build step */
    const char *sources;       /* SANDBOX_TEMPLATE_SOURCES: an apt sources file; NULL: the host's */
    const char *suite;         /* SANDBOX_TEMPLATE_SUITE; NULL: the host's codename */
    /* SANDBOX_TEMPLATE_BASES: the cached bases, which the servers of one machine may share;
     * NULL: <state_dir>/templates/bases */
    const char *bases_dir;
    const char *search_path;   /* PATH, for mmdebstrap */
    /* A fleet's database (NULL: none): recipes are shared there, and a node builds a template
     * built elsewhere on its first use here (store/templates_pg.h). */
    pg_pool *db;
    /* How many sessions run on template id (DELETE is refused while any does). */
    int (*users)(void *ctx, const char *id);
    void *users_ctx;
} templates_opts;

/* Loads the records (a build a restart interrupted becomes failed, its files removed) and starts
 * the build threads. NULL with a message on failure. */
templates *templates_open(const templates_opts *o, char *err, size_t errlen);
/* Stops the threads (a build under way is killed and failed) and frees. NULL is a no-op. */
void templates_free(templates *t);

/* Whether templates can be built and used here (gVisor, cgroups, mmdebstrap found), and why not. */
bool templates_available(const templates *t, const char **why);

/* A tenant's template limits (SANDBOX_TENANT_LIMITS). */
typedef struct {
    int max_templates;
    int max_builds;
    long long max_bytes;
} templates_quota;

typedef enum {
    TPL_OK,          /* found / ready / deleted */
    TPL_BUILDING,    /* a build was started, or one is under way */
    TPL_NOT_FOUND,
    TPL_NOT_READY,   /* building or failed: *answer says which */
    TPL_CONFLICT,    /* the name has another recipe */
    TPL_IN_USE,      /* sessions run on it, or its build is under way */
    TPL_LIMIT,       /* max_templates or max_template_builds: msg says which */
    TPL_UNAVAILABLE, /* no builds here (templates_available) */
    TPL_ERROR,
} templates_result;

/* What a template is built from (with its owner, the suite and the base: its content address). */
typedef struct {
    const json_t *packages; /* array of valid package names */
    const json_t *setup;    /* array of commands */
    bool recommends;        /* apt installs what the packages recommend too (mmdebstrap does not) */
} templates_recipe;

/* Starts the build of owner's ("" : the admin's) template name from recipe, or finds the same
 * one: TPL_BUILDING (a new build, or one under way) or TPL_OK (built), with the record in
 * *answer; TPL_CONFLICT, TPL_LIMIT (msg), TPL_UNAVAILABLE. A failed build of the same recipe is
 * built again. */
templates_result templates_build(templates *t, const char *owner, const templates_quota *q, const char *name,
                                 const templates_recipe *recipe, json_t **answer, char *msg, size_t msglen);

/* The templates owner may use (its own, then the admin's), each as GET shows it. */
json_t *templates_list(templates *t, const char *owner);

/* owner's template name (else the admin's): TPL_OK with *answer; TPL_NOT_FOUND. */
templates_result templates_get(templates *t, const char *owner, const char *name, json_t **answer);

/* Deletes owner's template name (its record and root): TPL_OK, TPL_NOT_FOUND, TPL_IN_USE. */
templates_result templates_delete(templates *t, const char *owner, const char *name);

/* For a new session of owner on template name: its id (SESSION_TEMPLATE_ID_MAX) when ready;
 * TPL_NOT_FOUND, TPL_NOT_READY (status in *status). In a fleet, a template this node does not
 * have but the database does starts building here: TPL_NOT_READY, status "building". */
templates_result templates_resolve(templates *t, const char *owner, const char *name, char *id,
                                   const char **status);

/* Creates that may wait for a build at once (each holds an HTTP worker thread); past it
 * templates_await answers at once. */
#define TEMPLATES_AWAIT_MAX 4
/* The longest a create waits for a build: below the router's server timeout (120 s), so a
 * create through HAProxy is answered by the node, not cut. */
#define TEMPLATES_AWAIT_S 100

/* templates_resolve, but a template building on this node is waited for, up to wait_s seconds,
 * until cancel_fd (the client's socket; -1: none) hangs up, or the server stops: TPL_OK (as
 * templates_resolve's) once it is ready; TPL_NOT_READY with *status "failed" and the failure's
 * words in why, or "building" when the wait ended first (or TEMPLATES_AWAIT_MAX creates wait
 * already). */
templates_result templates_await(templates *t, const char *owner, const char *name, int wait_s, int cancel_fd,
                                 char *id, const char **status, char *why, size_t whylen);

/* After templates_resolve's TPL_OK: the session is made (or not); until then DELETE is refused. */
void templates_unpin(templates *t, const char *id);

/* Called with a ready template's id when it is deleted, before its root is removed (its spare
 * sandboxes go first). */
void templates_set_delete_hook(templates *t, void (*hook)(void *ctx, const char *id), void *ctx);

/* The root directory of template id (malloc'd), NULL when id names no ready template. */
char *templates_root(templates *t, const char *id);

/* The progress events of owner's template name after sequence number *after (a JSON array,
 * each with its "seq"), waiting up to wait_ms for one; *after moves past them; *done once the
 * build has ended and every event was given. TPL_OK or TPL_NOT_FOUND. */
templates_result templates_events(templates *t, const char *owner, const char *name, unsigned long long *after,
                                  int wait_ms, json_t **events, bool *done);

#endif
