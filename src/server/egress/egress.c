/* The egress service: the sessions' egress state (rules, pass, log), each sandbox run's
 * namespaces and proxy settings, and the proxy's start and stop. */
#include "egress/egress.h"

#include "egress/netns.h"
#include "egress/proxy.h"
#include "egress/session.h"
#include "log/log.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* Descriptors that must stay free beside the proxy's (2 per connection): the HTTP server's
 * connections, running sandboxes, SQLite, tree walks. */
#define FD_HEADROOM 1024

#define ENV_PROXY_MAX 6 /* four proxy variables, the test CA for node, the terminator */

struct egress_service {
    egress_settings cfg_copy;  /* the settings, with the total fitted to RLIMIT_NOFILE */
    const egress_settings *cfg;
    egress_proxy *proxy;
    unsigned char key[EGRESS_SECRET_LEN];
    unsigned char fleet_key[EGRESS_SECRET_LEN]; /* in a fleet: the passes handed out */
    bool fleet;
    int root_ns;               /* airlockd's own network namespace */
    pthread_mutex_t mu;        /* guards sessions */
    egress_session *sessions;  /* live sessions that used egress */
    egress_log_sink sink;      /* told of each event (a fleet's outbox), or NULL */
    void *sink_ctx;
};

struct egress_sandbox {
    egress_pair pair;
    egress_listener *listener;
    char netns_path[64];
    char *env_text[ENV_PROXY_MAX];
    const char *env[ENV_PROXY_MAX];
    sandbox_proxy_login login;
    sandbox_network net;
};

static int make_dir(const char *dir, char *errbuf, size_t errlen)
{
    char *p = strdup(dir);
    if (!p) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    for (char *q = p + 1;; q++) {
        bool last = *q == '\0';
        if (*q != '/' && !last)
            continue;
        *q = '\0';
        if (mkdir(p, 0750) != 0 && errno != EEXIST) {
            snprintf(errbuf, errlen, "SANDBOX_EGRESS_LOG_DIR: cannot create %s: %s", p, strerror(errno));
            free(p);
            return -1;
        }
        if (last)
            break;
        *q = '/';
    }
    free(p);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(errbuf, errlen, "SANDBOX_EGRESS_LOG_DIR: %s is not a directory", dir);
        return -1;
    }
    return 0;
}

egress_service *egress_open(const egress_settings *s, const char *state_dir, const char *fleet_secret, char *errbuf,
                            size_t errlen)
{
    /* every proxy connection holds two descriptors: keep the total under the open-file limit,
     * leaving room for the HTTP server, sandboxes and stores */
    int total = s->max_tunnels_total;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        long limit = (long)rl.rlim_cur;
        long headroom = limit / 2 < FD_HEADROOM ? limit / 2 : FD_HEADROOM;
        long fits = (limit - headroom) / 2;
        if (total > fits) {
            if (s->total_given) {
                snprintf(errbuf, errlen, "SANDBOX_EGRESS_MAX_TUNNELS_TOTAL=%d needs %ld open files, but "
                         "RLIMIT_NOFILE is %ld: lower it or raise the limit", total,
                         2L * total + headroom, limit);
                return NULL;
            }
            total = fits < 1 ? 1 : (int)fits;
            log_warn("egress: RLIMIT_NOFILE %ld allows %d proxy connections "
                     "(SANDBOX_EGRESS_MAX_TUNNELS_TOTAL)", limit, total);
        }
    }
    if (s->log_dir && make_dir(s->log_dir, errbuf, errlen) != 0)
        return NULL;
    egress_service *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    e->cfg_copy = *s;
    e->cfg_copy.max_tunnels_total = total;
    e->cfg = &e->cfg_copy;
    e->root_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (e->root_ns < 0) {
        snprintf(errbuf, errlen, "cannot open /proc/self/ns/net: %s", strerror(errno));
        free(e);
        return NULL;
    }
    pthread_mutex_init(&e->mu, NULL);
    e->fleet = fleet_secret != NULL;
    if (e->fleet && !egress_secret_derive(fleet_secret, e->fleet_key)) {
        snprintf(errbuf, errlen, "cannot derive the egress key from the fleet's secret");
        egress_close(e);
        return NULL;
    }
    if (egress_secret_load(state_dir, e->key, errbuf, errlen) != 0 ||
        !(e->proxy = egress_proxy_start(e->cfg, errbuf, errlen))) {
        egress_close(e);
        return NULL;
    }
    if (s->test)
        log_warn("TEST-ONLY egress settings are on (AIRLOCK_TEST_EGRESS=1): %zu "
                 "host(s) bypass DNS and the address checks%s", s->nmap,
                 s->test_ca ? ", sandboxes trust a test CA" : "");
    return e;
}

void egress_set_sink(egress_service *e, egress_log_sink sink, void *ctx)
{
    e->sink = sink;
    e->sink_ctx = ctx;
}

void egress_close(egress_service *e)
{
    if (!e)
        return;
    egress_proxy_stop(e->proxy);
    while (e->sessions) {
        egress_session *s = e->sessions;
        e->sessions = s->next;
        egress_session_unref(s);
    }
    OPENSSL_cleanse(e->key, sizeof e->key);
    OPENSSL_cleanse(e->fleet_key, sizeof e->fleet_key);
    close(e->root_ns);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static egress_session *find_locked(egress_service *e, const char *id)
{
    for (egress_session *s = e->sessions; s; s = s->next)
        if (strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

/* The session's egress state with a reference for the caller, made on first use (its proxy
 * login as's, or its own). */
static egress_session *session_get(egress_service *e, const char *id, const char *tenant,
                                   double created_at, const json_t *rules, const sandbox_proxy_login *as,
                                   char *errbuf, size_t errlen)
{
    pthread_mutex_lock(&e->mu);
    egress_session *s = find_locked(e, id);
    if (s) {
        if (as && strcmp(as->user, s->user) != 0) /* (its sandboxes keep the one they were given) */
            log_warn("session %s: its egress proxy login stays its own, not the memory image's", id);
        egress_session_ref(s);
        pthread_mutex_unlock(&e->mu);
        return s;
    }
    s = calloc(1, sizeof *s);
    if (!s || strlen(id) >= sizeof s->id || !(s->tenant = strdup(tenant)) ||
        !(s->rules = json_deep_copy(rules)) ||
        (!as && (!egress_pass_make(e->fleet ? e->fleet_key : e->key, id, created_at, s->pass) ||
                 (e->fleet && !egress_pass_make(e->key, id, created_at, s->node_pass))))) {
        snprintf(errbuf, errlen, "cannot set up egress for %s: out of memory", id);
        goto fail;
    }
    snprintf(s->id, sizeof s->id, "%s", id);
    snprintf(s->user, sizeof s->user, "%s", as ? as->user : id);
    if (as) {
        _Static_assert(sizeof s->pass == sizeof as->pass, "a login's pass is a session's");
        memcpy(s->pass, as->pass, sizeof s->pass);
    }
    s->log = egress_log_open(e->cfg->log_dir, id, errbuf, errlen);
    if (!s->log)
        goto fail;
    if (e->sink)
        egress_log_set_sink(s->log, e->sink, e->sink_ctx);
    atomic_init(&s->refs, 2); /* the table's and the caller's */
    atomic_init(&s->revoked, false);
    s->next = e->sessions;
    e->sessions = s;
    pthread_mutex_unlock(&e->mu);
    return s;
fail:
    pthread_mutex_unlock(&e->mu);
    if (s) {
        json_decref(s->rules);
        free(s->tenant);
        free(s);
    }
    return NULL;
}

static void sandbox_free(egress_sandbox *sb)
{
    egress_pair_close(&sb->pair);
    OPENSSL_cleanse(sb->login.pass, sizeof sb->login.pass);
    for (size_t i = 0; i < ENV_PROXY_MAX; i++) {
        if (sb->env_text[i])
            OPENSSL_cleanse(sb->env_text[i], strlen(sb->env_text[i]));
        free(sb->env_text[i]);
    }
    free(sb);
}

egress_sandbox *egress_sandbox_open(egress_service *e, const char *session_id, const char *tenant,
                                    double created_at, const json_t *rules,
                                    const sandbox_proxy_login *as, char *errbuf, size_t errlen)
{
    egress_session *s = session_get(e, session_id, tenant, created_at, rules, as, errbuf, errlen);
    if (!s)
        return NULL;
    egress_sandbox *sb = calloc(1, sizeof *sb);
    if (!sb) {
        snprintf(errbuf, errlen, "out of memory");
        egress_session_unref(s);
        return NULL;
    }
    sb->pair.sandbox_ns = sb->pair.listener = -1;
    if (egress_pair_create(e->root_ns, &sb->pair, errbuf, errlen) != 0) {
        egress_session_unref(s);
        sandbox_free(sb);
        return NULL;
    }
    /* contract 1.7: http://<session_id>:<signed pass>@<proxy ip>:3128, in four spellings */
    static const char *const names[] = {"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"};
    size_t n = 0;
    bool ok = true;
    for (size_t i = 0; i < 4; i++) {
        char *v = NULL;
        if (asprintf(&v, "%s=http://%s:%s@%s:%d", names[i], s->user, s->pass, EGRESS_PROXY_IP,
                     EGRESS_PROXY_PORT) < 0)
            v = NULL; /* asprintf leaves it undefined on failure */
        ok = ok && v;
        sb->env_text[n++] = v;
    }
    if (e->cfg->test_ca) { /* node builds that keep their own CA list read this too */
        sb->env_text[n] = strdup("NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt");
        ok = ok && sb->env_text[n++];
    }
    snprintf(sb->netns_path, sizeof sb->netns_path, "/proc/%d/fd/%d", (int)getpid(), sb->pair.sandbox_ns);
    if (!ok) {
        snprintf(errbuf, errlen, "out of memory");
        egress_session_unref(s);
        sandbox_free(sb);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        sb->env[i] = sb->env_text[i];
    sb->env[n] = NULL;
    sb->net.netns_path = sb->netns_path;
    sb->net.env = sb->env;
    snprintf(sb->login.user, sizeof sb->login.user, "%s", s->user);
    memcpy(sb->login.pass, s->pass, sizeof sb->login.pass);
    sb->net.login = &sb->login;
    /* the proxy owns the listener from here on */
    sb->listener = egress_proxy_add_listener(e->proxy, sb->pair.listener, s);
    sb->pair.listener = -1;
    egress_session_unref(s);
    if (!sb->listener) {
        snprintf(errbuf, errlen, "out of memory");
        sandbox_free(sb);
        return NULL;
    }
    return sb;
}

const sandbox_network *egress_sandbox_network(const egress_sandbox *sb)
{
    return &sb->net;
}

void egress_sandbox_close(egress_service *e, egress_sandbox *sb)
{
    if (!sb)
        return;
    egress_proxy_close_listener(e->proxy, sb->listener);
    sandbox_free(sb);
}

json_t *egress_events(egress_service *e, const char *session_id, size_t limit)
{
    pthread_mutex_lock(&e->mu);
    egress_session *s = find_locked(e, session_id);
    if (s)
        egress_session_ref(s);
    pthread_mutex_unlock(&e->mu);
    if (!s)
        return json_array();
    json_t *events = egress_log_last(s->log, limit);
    egress_session_unref(s);
    return events;
}

static int newest_first(const void *a, const void *b)
{
    double ta = json_number_value(json_object_get(*(json_t *const *)a, "ts"));
    double tb = json_number_value(json_object_get(*(json_t *const *)b, "ts"));
    return ta < tb ? 1 : ta > tb ? -1 : 0;
}

json_t *egress_denials(egress_service *e, size_t limit)
{
    /* each session's log is read outside the service's lock, held by a reference */
    size_t n = 0, cap = 0;
    egress_session **held = NULL;
    pthread_mutex_lock(&e->mu);
    for (egress_session *s = e->sessions; s; s = s->next)
        cap++;
    held = cap ? calloc(cap, sizeof *held) : NULL;
    for (egress_session *s = e->sessions; s && held; s = s->next)
        held[n++] = egress_session_ref(s);
    pthread_mutex_unlock(&e->mu);
    json_t *all = json_array();
    for (size_t i = 0; i < n; i++) {
        if (all)
            egress_log_denials(held[i]->log, limit, all);
        egress_session_unref(held[i]);
    }
    free(held);
    if (!all)
        return NULL;
    /* merged newest first, cut to limit */
    size_t total = json_array_size(all);
    json_t **items = total ? calloc(total, sizeof *items) : NULL;
    json_t *out = json_array();
    for (size_t i = 0; items && i < total; i++)
        items[i] = json_array_get(all, i);
    if (items)
        qsort(items, total, sizeof *items, newest_first);
    for (size_t i = 0; items && out && i < total && i < limit; i++)
        json_array_append(out, items[i]);
    free(items);
    json_decref(all);
    return out;
}

void egress_forget_session(void *ctx, const char *session_id)
{
    egress_service *e = ctx;
    pthread_mutex_lock(&e->mu);
    egress_session *s = NULL;
    for (egress_session **pp = &e->sessions; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->id, session_id) == 0) {
            s = *pp;
            *pp = s->next;
            break;
        }
    }
    pthread_mutex_unlock(&e->mu);
    if (!s)
        return;
    atomic_store(&s->revoked, true);
    egress_proxy_wake(e->proxy);
    egress_session_unref(s);
}
