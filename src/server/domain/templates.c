/* The template registry: records, their ids, persistence (<state>/templates/index.json), the
 * build queue and its threads, the progress events; the build itself is template_build.c. */
#include "domain/templates_internal.h"

#include "disk/mounts.h"
#include "fs/walk.h"
#include "log/log.h"
#include "sandbox/build.h"
#include "sandbox/programs.h"
#include "store/templates_pg.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *tpl_status_name(tpl_status s)
{
    return s == TS_READY ? "ready" : s == TS_FAILED ? "failed" : "building";
}

char *tpl_path(const templates *t, const char *id, const char *leaf)
{
    char *p = NULL;
    if (asprintf(&p, "%s/%s%s%s", t->dir, id, leaf ? "/" : "", leaf ? leaf : "") < 0)
        return NULL;
    return p;
}

/* ---- persistence -------------------------------------------------------------------------- */

static json_t *record_json(const tpl *r, bool with_private)
{
    json_t *o = json_pack("{s:s,s:s,s:O,s:O,s:b,s:s,s:f,s:I,s:s}", "id", r->id, "name", r->name, "packages",
                          r->packages, "setup", r->setup, "recommends", r->recommends, "status",
                          tpl_status_name(r->status), "created", r->created, "size", (json_int_t)r->size, "log_tail",
                          r->log.len ? r->log.data : "");
    if (o && with_private)
        json_object_set_new(o, "owner", json_string(r->owner));
    if (o && !with_private) {
        json_object_set_new(o, "shared", json_boolean(r->owner[0] == '\0'));
        json_t *p = template_progress_json(&r->progress); /* the newest progress, for a poller */
        if (p)
            json_object_set_new(p, "seq", json_integer((json_int_t)r->seq));
        json_object_set_new(o, "progress", p ? p : json_null());
    }
    return o;
}

/* Rewrites the index (aside, then renamed over). Locked. */
void tpl_save_locked(templates *t)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < t->n; i++)
        json_array_append_new(list, record_json(t->v[i], true));
    json_t *doc = list ? json_pack("{s:i,s:o}", "airlockd_templates", 1, "templates", list) : NULL;
    char *path = tpl_path(t, "index.json", NULL), *tmp = tpl_path(t, "index.json.new", NULL);
    if (!doc || !path || !tmp || json_dump_file(doc, tmp, JSON_COMPACT) != 0 || rename(tmp, path) != 0)
        log_error("cannot save the templates' index in %s: %s", t->dir, strerror(errno));
    json_decref(doc);
    free(path);
    free(tmp);
}

static void tpl_free(tpl *r)
{
    if (!r)
        return;
    free(r->owner);
    free(r->name);
    json_decref(r->packages);
    json_decref(r->setup);
    json_decref(r->events);
    buf_free(&r->log);
    free(r);
}

static tpl *tpl_new(const char *id, const char *owner, const char *name, const json_t *packages, const json_t *setup,
                    bool recommends)
{
    tpl *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    snprintf(r->id, sizeof r->id, "%s", id);
    r->owner = strdup(owner);
    r->name = strdup(name);
    r->packages = json_deep_copy(packages);
    r->setup = json_deep_copy(setup);
    r->recommends = recommends;
    r->events = json_array();
    buf_init(&r->log, TPL_LOG_TAIL * 2);
    template_progress_init(&r->progress);
    if (!r->owner || !r->name || !r->packages || !r->setup || !r->events) {
        tpl_free(r);
        return NULL;
    }
    return r;
}

/* Removes whatever a build of id left on disk (mounts first: mmdebstrap's, if killed). */
void tpl_remove_files(templates *t, const char *id)
{
    char *dir = tpl_path(t, id, NULL);
    if (!dir)
        return;
    (void)mounts_unmount_under(dir, NULL, NULL);
    if (fs_rmtree(dir) != 0 && errno != ENOENT)
        log_error("cannot remove template files %s: %s", dir, strerror(errno));
    free(dir);
}

static void load_index(templates *t)
{
    char *path = tpl_path(t, "index.json", NULL);
    json_error_t je;
    json_t *doc = path ? json_load_file(path, 0, &je) : NULL;
    free(path);
    json_t *list = json_object_get(doc, "templates");
    size_t i;
    json_t *o;
    json_array_foreach(list, i, o) {
        const char *id = json_string_value(json_object_get(o, "id"));
        const char *owner = json_string_value(json_object_get(o, "owner"));
        const char *name = json_string_value(json_object_get(o, "name"));
        const char *status = json_string_value(json_object_get(o, "status"));
        json_t *pk = json_object_get(o, "packages"), *su = json_object_get(o, "setup");
        if (!id || strlen(id) >= SESSION_TEMPLATE_ID_MAX || !owner || !name || !status || !json_is_array(pk) ||
            !json_is_array(su) || t->n >= TPL_MAX_RECORDS)
            continue;
        /* (an index from before the field: without) */
        tpl *r = tpl_new(id, owner, name, pk, su, json_is_true(json_object_get(o, "recommends")));
        if (!r)
            continue;
        r->created = json_number_value(json_object_get(o, "created"));
        r->size = (long long)json_integer_value(json_object_get(o, "size"));
        const char *tail = json_string_value(json_object_get(o, "log_tail"));
        if (tail)
            tpl_log_append(r, tail, strlen(tail));
        r->status = strcmp(status, "ready") == 0 ? TS_READY : TS_FAILED;
        if (strcmp(status, "building") == 0) {
            static const char why[] = "\nairlockd: the build was interrupted by a restart\n";
            tpl_log_append(r, why, sizeof why - 1);
        }
        template_progress_phase(&r->progress, r->status == TS_READY ? "ready" : "failed");
        if (r->status != TS_READY)
            tpl_remove_files(t, id);
        t->v[t->n++] = r;
    }
    json_decref(doc);
}

/* ---- log and events ----------------------------------------------------------------------- */

void tpl_log_append(tpl *r, const char *data, size_t len)
{
    if (len > TPL_LOG_TAIL) {
        data += len - TPL_LOG_TAIL;
        len = TPL_LOG_TAIL;
    }
    if (r->log.len + len > TPL_LOG_TAIL) { /* keep the newest TPL_LOG_TAIL bytes */
        size_t drop = r->log.len + len - TPL_LOG_TAIL;
        memmove(r->log.data, r->log.data + drop, r->log.len - drop);
        r->log.len -= drop;
    }
    buf_append(&r->log, data, len);
    if (!r->log.err && r->log.data)
        r->log.data[r->log.len] = '\0';
}

/* Adds the progress as an event (the oldest dropped past TPL_EVENTS_MAX). Locked. */
void tpl_event_locked(templates *t, tpl *r, const char *line)
{
    json_t *e = template_progress_json(&r->progress);
    if (!e)
        return;
    json_object_set_new(e, "seq", json_integer((json_int_t)++r->seq));
    json_object_set_new(e, "status", json_string(tpl_status_name(r->status)));
    if (line)
        json_object_set_new(e, "line", json_string(line));
    if (json_array_size(r->events) >= TPL_EVENTS_MAX)
        json_array_remove(r->events, 0);
    json_array_append_new(r->events, e);
    pthread_cond_broadcast(&t->changed);
}

/* ---- lookups ------------------------------------------------------------------------------ */

/* owner's record named name; with shared, the admin's when owner has none. Locked. */
static tpl *find_locked(templates *t, const char *owner, const char *name, bool shared)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i]->owner, owner) == 0 && strcmp(t->v[i]->name, name) == 0)
            return t->v[i];
    if (shared && owner[0])
        return find_locked(t, "", name, false);
    return NULL;
}

/* The recipe as the fleet's database and the content address hold it: "recommends" only when
 * true, so that the ids of recipes from before the field stay the same. */
static json_t *recipe_json(const json_t *packages, const json_t *setup, bool recommends)
{
    json_t *doc = json_pack("{s:O,s:O}", "packages", packages, "setup", setup);
    if (doc && recommends)
        json_object_set_new(doc, "recommends", json_true());
    return doc;
}

/* The content address: "tpl_" + 16 hex of SHA-256 over owner, suite, base and the recipe. */
static int recipe_id(const templates *t, const char *owner, const json_t *packages, const json_t *setup,
                     bool recommends, char id[SESSION_TEMPLATE_ID_MAX])
{
    json_t *doc = recipe_json(packages, setup, recommends);
    if (doc && (json_object_set_new(doc, "owner", json_string(owner)) != 0 ||
                json_object_set_new(doc, "suite", json_string(t->suite)) != 0 ||
                json_object_set_new(doc, "base", json_string(TPL_BASE)) != 0)) {
        json_decref(doc);
        doc = NULL;
    }
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(doc);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    int rc = text && EVP_Digest(text, strlen(text), md, &mdlen, EVP_sha256(), NULL) == 1 && mdlen >= 8 ? 0 : -1;
    free(text);
    if (rc == 0)
        snprintf(id, SESSION_TEMPLATE_ID_MAX, "tpl_%02x%02x%02x%02x%02x%02x%02x%02x", md[0], md[1], md[2], md[3],
                 md[4], md[5], md[6], md[7]);
    return rc;
}

static json_t *sorted_packages(const json_t *packages)
{
    size_t n = json_array_size(packages);
    const char **v = calloc(n ? n : 1, sizeof *v);
    json_t *out = json_array();
    if (!v || !out) {
        free(v);
        json_decref(out);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = json_string_value(json_array_get(packages, i));
    for (size_t i = 1; i < n; i++) /* a few dozen names at most */
        for (size_t k = i; k > 0 && strcmp(v[k - 1], v[k]) > 0; k--) {
            const char *x = v[k];
            v[k] = v[k - 1];
            v[k - 1] = x;
        }
    for (size_t i = 0; i < n; i++)
        if (i == 0 || strcmp(v[i], v[i - 1]) != 0)
            json_array_append_new(out, json_string(v[i]));
    free(v);
    return out;
}

/* ---- the API ------------------------------------------------------------------------------ */

bool templates_available(const templates *t, const char **why)
{
    *why = t ? t->why_not : "templates are not enabled";
    return t && !t->why_not;
}

templates_result templates_build(templates *t, const char *owner, const templates_quota *q, const char *name,
                                 const templates_recipe *recipe, json_t **answer, char *msg, size_t msglen)
{
    const char *why;
    if (!templates_available(t, &why)) {
        snprintf(msg, msglen, "%s", why);
        return TPL_UNAVAILABLE;
    }
    const json_t *setup = recipe->setup;
    json_t *sorted = sorted_packages(recipe->packages);
    char id[SESSION_TEMPLATE_ID_MAX];
    if (!sorted || recipe_id(t, owner, sorted, setup, recipe->recommends, id) != 0) {
        json_decref(sorted);
        return TPL_ERROR;
    }
    templates_result rc = TPL_BUILDING;
    pthread_mutex_lock(&t->mu);
    tpl *r = find_locked(t, owner, name, false);
    if (r && strcmp(r->id, id) != 0) {
        snprintf(msg, msglen, "Template '%s' exists with another recipe (%s); delete it first.", name, r->id);
        rc = TPL_CONFLICT;
    } else if (r && r->status != TS_FAILED) {
        rc = r->status == TS_READY ? TPL_OK : TPL_BUILDING;
    } else {
        int mine = 0, building = 0;
        for (size_t i = 0; i < t->n; i++)
            if (strcmp(t->v[i]->owner, owner) == 0) {
                mine++;
                building += t->v[i]->status == TS_BUILDING;
            }
        if (!r && mine >= q->max_templates) {
            snprintf(msg, msglen, "Template limit reached: %d of %d templates exist (max_templates). Delete one first.",
                     mine, q->max_templates);
            rc = TPL_LIMIT;
        } else if (building >= q->max_builds) {
            snprintf(msg, msglen, "Build limit reached: %d of %d builds are under way (max_template_builds); "
                     "retry when one ends.", building, q->max_builds);
            rc = TPL_LIMIT;
        } else if (!r && t->n >= TPL_MAX_RECORDS) {
            snprintf(msg, msglen, "This server holds %d templates, its most; delete one first.", TPL_MAX_RECORDS);
            rc = TPL_LIMIT;
        } else if (!r && !(r = tpl_new(id, owner, name, sorted, setup, recipe->recommends))) {
            rc = TPL_ERROR;
        } else {
            if (t->n < TPL_MAX_RECORDS && !find_locked(t, owner, name, false))
                t->v[t->n++] = r;
            r->status = TS_BUILDING;
            r->started = false;
            r->created = epoch_now();
            r->size = 0;
            r->max_bytes = q->max_bytes;
            buf_free(&r->log); /* a failed build's log goes with its new try */
            template_progress_init(&r->progress);
            tpl_event_locked(t, r, NULL);
            tpl_save_locked(t);
            pthread_cond_broadcast(&t->work);
        }
    }
    if (rc == TPL_OK || rc == TPL_BUILDING)
        *answer = record_json(r, false);
    pthread_mutex_unlock(&t->mu);
    if ((rc == TPL_OK || rc == TPL_BUILDING) && t->db) { /* every node of the fleet can build it */
        json_t *shared = recipe_json(sorted, setup, recipe->recommends);
        if (!shared || templates_pg_save(t->db, owner, name, id, shared) != 0)
            log_warn("template %s: its recipe could not be shared with the fleet", name);
        json_decref(shared);
    }
    json_decref(sorted);
    return rc;
}

/* In a fleet: owner's template name (else the admin's) known to the database but not here
 * starts building here (the origin node checked the tenant's limits). True when it did. */
static bool build_from_fleet(templates *t, const char *owner, const char *name)
{
    json_t *rec = t->db ? templates_pg_find(t->db, owner, name) : NULL;
    const char *rec_owner = json_string_value(json_object_get(rec, "owner"));
    json_t *pk = json_object_get(rec, "packages"), *su = json_object_get(rec, "setup");
    bool started = false;
    if (rec_owner && json_is_array(pk) && json_is_array(su)) {
        templates_quota q = {.max_templates = TPL_MAX_RECORDS, .max_builds = TPL_MAX_RECORDS, .max_bytes = 0};
        json_t *answer = NULL;
        char msg[256];
        templates_recipe recipe = {.packages = pk, .setup = su,
                                   .recommends = json_is_true(json_object_get(rec, "recommends"))};
        templates_result rc = templates_build(t, rec_owner, &q, name, &recipe, &answer, msg, sizeof msg);
        json_decref(answer);
        started = rc == TPL_BUILDING || rc == TPL_OK;
        if (started)
            log_info("template %s: built on this node from the fleet's recipe", name);
    }
    json_decref(rec);
    return started;
}

json_t *templates_list(templates *t, const char *owner)
{
    json_t *list = json_array();
    if (!t)
        return list;
    pthread_mutex_lock(&t->mu);
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < t->n; i++)
            if (strcmp(t->v[i]->owner, pass == 0 ? owner : "") == 0 && (pass == 0 || owner[0]))
                json_array_append_new(list, record_json(t->v[i], false));
    pthread_mutex_unlock(&t->mu);
    return list;
}

templates_result templates_get(templates *t, const char *owner, const char *name, json_t **answer)
{
    if (!t)
        return TPL_NOT_FOUND;
    for (int pass = 0; pass < 2; pass++) {
        pthread_mutex_lock(&t->mu);
        tpl *r = find_locked(t, owner, name, true);
        if (r)
            *answer = record_json(r, false);
        pthread_mutex_unlock(&t->mu);
        if (r)
            return TPL_OK;
        if (pass == 0 && !build_from_fleet(t, owner, name))
            break;
    }
    return TPL_NOT_FOUND;
}

templates_result templates_delete(templates *t, const char *owner, const char *name)
{
    if (!t)
        return TPL_NOT_FOUND;
    pthread_mutex_lock(&t->mu);
    tpl *r = find_locked(t, owner, name, false);
    templates_result rc = TPL_OK;
    if (!r)
        rc = TPL_NOT_FOUND;
    else if (r->status == TS_BUILDING || r->pins > 0 || (t->users && t->users(t->users_ctx, r->id) > 0))
        rc = TPL_IN_USE;
    if (rc != TPL_OK) {
        pthread_mutex_unlock(&t->mu);
        return rc;
    }
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i] == r)
            t->v[i] = t->v[--t->n];
    tpl_save_locked(t);
    pthread_cond_broadcast(&t->changed);
    char id[SESSION_TEMPLATE_ID_MAX];
    memcpy(id, r->id, sizeof id);
    bool was_ready = r->status == TS_READY;
    tpl_free(r);
    pthread_mutex_unlock(&t->mu);
    if (was_ready && t->on_delete)
        t->on_delete(t->on_delete_ctx, id); /* its spares go before its root */
    tpl_remove_files(t, id);
    if (t->db && templates_pg_forget(t->db, owner, name) != 0)
        log_warn("template %s: the fleet's recipe could not be deleted", name);
    return TPL_OK;
}

templates_result templates_resolve(templates *t, const char *owner, const char *name, char *id,
                                   const char **status)
{
    if (!t)
        return TPL_NOT_FOUND;
    pthread_mutex_lock(&t->mu);
    tpl *r = find_locked(t, owner, name, true);
    if (!r && t->db) {
        pthread_mutex_unlock(&t->mu);
        bool started = build_from_fleet(t, owner, name);
        pthread_mutex_lock(&t->mu);
        r = started ? find_locked(t, owner, name, true) : NULL;
    }
    templates_result rc = !r ? TPL_NOT_FOUND : r->status == TS_READY ? TPL_OK : TPL_NOT_READY;
    if (r) {
        memcpy(id, r->id, SESSION_TEMPLATE_ID_MAX);
        *status = tpl_status_name(r->status);
        r->pins += rc == TPL_OK;
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* Whether the client behind fd hung up (or the server is stopping its connections). */
static bool hung_up(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* The failure's words from r's log: its "the build failed" line. Locked. */
static void failure_words(const tpl *r, char *why, size_t whylen)
{
    static const char mark[] = "airlockd: the build failed: ";
    const char *at = r->log.len ? strstr(r->log.data, mark) : NULL;
    if (at)
        snprintf(why, whylen, "%.*s", (int)strcspn(at + sizeof mark - 1, "\n"), at + sizeof mark - 1);
    else
        snprintf(why, whylen, "see its log_tail (GET /v1/templates/%s)", r->name);
}

templates_result templates_await(templates *t, const char *owner, const char *name, int wait_s, int cancel_fd,
                                 char *id, const char **status, char *why, size_t whylen)
{
    why[0] = '\0';
    templates_result rc = templates_resolve(t, owner, name, id, status);
    if (rc != TPL_NOT_READY || strcmp(*status, "building") != 0)
        return rc;
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += wait_s;
    pthread_mutex_lock(&t->mu);
    if (t->waiters >= TEMPLATES_AWAIT_MAX) {
        pthread_mutex_unlock(&t->mu);
        return TPL_NOT_READY;
    }
    t->waiters++;
    tpl *r = find_locked(t, owner, name, true);
    for (;;) {
        struct timespec now, until;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (!r || r->status != TS_BUILDING || t->stopping || now.tv_sec >= end.tv_sec || hung_up(cancel_fd))
            break;
        /* t->changed is signalled on the realtime clock: a quarter second at a time, then the
         * client and the deadline are looked at again */
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 250000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&t->changed, &t->mu, &until);
        r = find_locked(t, owner, name, true); /* deleted meanwhile: NULL */
    }
    t->waiters--;
    rc = !r ? TPL_NOT_FOUND : r->status == TS_READY ? TPL_OK : TPL_NOT_READY;
    if (r) {
        memcpy(id, r->id, SESSION_TEMPLATE_ID_MAX);
        *status = tpl_status_name(r->status);
        r->pins += rc == TPL_OK;
        if (r->status == TS_FAILED)
            failure_words(r, why, whylen);
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

void templates_unpin(templates *t, const char *id)
{
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i]->id, id) == 0 && t->v[i]->pins > 0)
            t->v[i]->pins--;
    pthread_mutex_unlock(&t->mu);
}

char *templates_root(templates *t, const char *id)
{
    if (!t || !id || !id[0])
        return NULL;
    bool ready = false;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->n && !ready; i++)
        ready = t->v[i]->status == TS_READY && strcmp(t->v[i]->id, id) == 0;
    pthread_mutex_unlock(&t->mu);
    return ready ? tpl_path(t, id, "root") : NULL;
}

templates_result templates_events(templates *t, const char *owner, const char *name, unsigned long long *after,
                                  int wait_ms, json_t **events, bool *done)
{
    *events = NULL;
    *done = false;
    if (!t)
        return TPL_NOT_FOUND;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&t->mu);
    tpl *r = find_locked(t, owner, name, true);
    while (r && r->seq <= *after && r->status == TS_BUILDING && !t->stopping &&
           pthread_cond_timedwait(&t->changed, &t->mu, &until) == 0)
        r = find_locked(t, owner, name, true);
    if (!r) {
        pthread_mutex_unlock(&t->mu);
        return TPL_NOT_FOUND;
    }
    json_t *out = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(r->events, i, e) {
        unsigned long long seq = (unsigned long long)json_integer_value(json_object_get(e, "seq"));
        if (seq > *after) {
            json_array_append(out, e);
            *after = seq;
        }
    }
    *done = r->status != TS_BUILDING || t->stopping;
    pthread_mutex_unlock(&t->mu);
    *events = out;
    return TPL_OK;
}

/* ---- the threads -------------------------------------------------------------------------- */

static void *build_thread(void *arg)
{
    templates *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stopping) {
        tpl *next = NULL;
        for (size_t i = 0; i < t->n && !next; i++)
            if (t->v[i]->status == TS_BUILDING && !t->v[i]->started)
                next = t->v[i];
        if (!next) {
            pthread_cond_wait(&t->work, &t->mu);
            continue;
        }
        next->started = true;
        tpl_build(t, next); /* drops the lock while it works */
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* The host's release codename (VERSION_CODENAME of /etc/os-release), or NULL. */
static char *host_codename(void)
{
    FILE *f = fopen("/etc/os-release", "re");
    char line[256], *name = NULL;
    while (f && !name && fgets(line, sizeof line, f))
        if (strncmp(line, "VERSION_CODENAME=", 17) == 0) {
            line[strcspn(line, "\r\n")] = '\0';
            const char *v = line + 17;
            size_t n = strlen(v);
            if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0]) {
                v++;
                n -= 2;
            }
            name = n ? strndup(v, n) : NULL;
        }
    if (f)
        fclose(f);
    return name;
}

/* Whether path may go into an mmdebstrap hook as it is (no blank, quote or shell character). */
static bool plain_path(const char *path)
{
    for (const char *p = path; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '/' ||
              *p == '_' || *p == '-' || *p == '.'))
            return false;
    return path[0] == '/';
}

/* The bases' directory: dir (created when missing), else <state>/templates/bases. Bases become
 * every template's root, so a directory another user could write to is refused. 0, or -1 with
 * err. */
static int open_bases(templates *t, const char *dir, char *err, size_t errlen)
{
    t->bases = dir ? strdup(dir) : tpl_path(t, "bases", NULL);
    struct stat st, state;
    if (!t->bases || (mkdir(t->bases, 0700) != 0 && errno != EEXIST) || stat(t->bases, &st) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", t->bases ? t->bases : "the template bases",
                 strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
        snprintf(err, errlen, "SANDBOX_TEMPLATE_BASES %s must be a directory of this server's user that no one "
                 "else may write to (it holds the root every template starts from)", t->bases);
        return -1;
    }
    t->bases_linkable = stat(t->dir, &state) == 0 && state.st_dev == st.st_dev;
    return 0;
}

templates *templates_open(const templates_opts *o, char *err, size_t errlen)
{
    templates *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->changed, NULL);
    pthread_cond_init(&t->work, NULL);
    t->cancel[0] = t->cancel[1] = -1;
    if (pipe2(t->cancel, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot create a pipe: %s", strerror(errno));
        templates_free(t);
        return NULL;
    }
    t->sb = o->sb;
    t->db = o->db;
    t->build_timeout = o->build_timeout > 0 ? o->build_timeout : 900;
    t->users = o->users;
    t->users_ctx = o->users_ctx;
    t->suite = o->suite ? strdup(o->suite) : host_codename();
    t->sources = o->sources ? strdup(o->sources) : NULL;
    t->mmdebstrap = sbx_find_program(NULL, o->search_path, "mmdebstrap");
    t->cp = sbx_find_program(NULL, o->search_path, "cp");
    if (asprintf(&t->dir, "%s/templates", o->state_dir) < 0)
        t->dir = NULL;
    /* private as the rest of the state directory: the roots in it are mounted by runsc as
     * root, so no one else needs to reach them through it */
    if (!t->dir || (mkdir(t->dir, 0700) != 0 && errno != EEXIST) || chmod(t->dir, 0700) != 0) {
        snprintf(err, errlen, "cannot create %s/templates: %s", o->state_dir, strerror(errno));
        templates_free(t);
        return NULL;
    }
    t->cache = tpl_path(t, "apt-cache", NULL);
    if (t->cache && (!plain_path(t->cache) || (mkdir(t->cache, 0700) != 0 && errno != EEXIST))) {
        free(t->cache); /* builds fetch every package (the cache path cannot go into a hook) */
        t->cache = NULL;
    }
    if (open_bases(t, o->bases_dir, err, errlen) != 0) {
        templates_free(t);
        return NULL;
    }
    if (!sandbox_backend_has_templates(o->sb))
        t->why_not = "templates need gVisor with cgroups (this server cannot run them)";
    else if (!t->mmdebstrap)
        t->why_not = "templates need mmdebstrap (the Debian package), which is not installed here";
    else if (!t->suite)
        t->why_not = "templates need SANDBOX_TEMPLATE_SUITE (the host's release has no codename)";
    else if (!t->cp)
        t->why_not = "templates need cp (coreutils), which is not found here";
    tpl_base_sweep(t); /* a half-made base, and those out of date */
    load_index(t);
    int n = o->max_builds > 0 ? o->max_builds : 1;
    t->threads = calloc((size_t)n, sizeof *t->threads);
    for (int i = 0; t->threads && i < n; i++)
        if (pthread_create(&t->threads[i], NULL, build_thread, t) == 0)
            t->nthreads++;
    if (t->nthreads == 0) {
        snprintf(err, errlen, "cannot start the template build threads");
        templates_free(t);
        return NULL;
    }
    return t;
}

void templates_set_delete_hook(templates *t, void (*hook)(void *ctx, const char *id), void *ctx)
{
    t->on_delete = hook;
    t->on_delete_ctx = ctx;
}

void templates_free(templates *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stopping = true;
    pthread_cond_broadcast(&t->work);
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mu);
    if (t->cancel[1] >= 0) /* a build under way is killed */
        close(t->cancel[1]);
    for (int i = 0; i < t->nthreads; i++)
        pthread_join(t->threads[i], NULL);
    for (size_t i = 0; i < t->n; i++)
        tpl_free(t->v[i]);
    free(t->threads);
    free(t->dir);
    free(t->cache);
    free(t->suite);
    free(t->sources);
    free(t->mmdebstrap);
    free(t->cp);
    free(t->bases);
    if (t->cancel[0] >= 0)
        close(t->cancel[0]);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->changed);
    pthread_cond_destroy(&t->work);
    free(t);
}
