/* The session registry: ids, owners, timestamps, workspaces, the idle-TTL reaper.
 * Sessions are reference counted so a DELETE or reap during a running command wipes the
 * workspace only when that command is done. */
#ifndef AIRLOCKD_SESSIONS_H
#define AIRLOCKD_SESSIONS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct session {
    char id[17];            /* "sbx_" + 12 lowercase hex */
    size_t tenant;
    json_t *egress;         /* expanded rules */
    double created_at;
    double last_accessed_at;
    char *workspace;        /* absolute, symlink-free host directory */
    int refs;               /* the registry's own reference + one per request using it */
    bool removed;
    struct session *next;
} session;

typedef struct registry registry;

/* Workspaces go under <state_dir>/workspaces (mode 0700; leftovers of an earlier run are
 * wiped). NULL with a message on failure. */
registry *registry_new(const char *state_dir, double ttl, char *err, size_t errlen);

/* Stops the reaper and removes every session; workspaces not in use are wiped at once,
 * the others when their last request finishes. The registry stays usable. */
void registry_remove_all(registry *r);

/* registry_remove_all, then frees (no request may be running any more). */
void registry_free(registry *r);

/* Starts the idle reaper thread (sweeps every min(60, ttl/4) s, at least 1 s). */
int registry_start_reaper(registry *r);

enum { REG_OK = 0, REG_LIMIT, REG_ERROR };

/* Creates a session (checked against max_sessions atomically). egress is copied.
 * On REG_LIMIT *open_now is the tenant's session count. On REG_OK *out holds a reference. */
int registry_create(registry *r, size_t tenant, int max_sessions, const json_t *egress,
                    session **out, int *open_now);

/* get_authorized_session: 0 with a reference in *out (and last_accessed_at refreshed when
 * touch), 404 unknown/expired, 403 other tenant's. */
int registry_acquire(registry *r, const char *id, size_t tenant, bool touch, session **out);
void registry_release(registry *r, session *s);

/* DELETE: 200, 404 or 403. */
int registry_delete(registry *r, const char *id, size_t tenant);

/* {"tenant_id":..., "sessions":[...]} items newest first. */
json_t *registry_list(registry *r, size_t tenant, const char *tenant_name, long long disk_quota_mb);

size_t registry_count(registry *r);
size_t registry_count_tenant(registry *r, size_t tenant);

/* Current wall-clock time as float seconds, rounded to microseconds like time.time(). */
double epoch_now(void);

#endif
