/* airlockd's parts, each opened by one named step from the settings (run/server.h), and the
 * way they stop and close. */
#include "run/server.h"

#include "api/routes.h"
#include "log/log.h"
#include "run/fleet.h"
#include "run/signals.h"
#include "sandbox/guard.h"
#include "store/state_dir.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* After the grace period (or a second signal) running requests are stopped: this long for
 * their commands to be killed and their answers sent. */
#define CANCEL_WAIT_S 10

static int fail(server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(server *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* First: nothing is created in, or removed from, a directory airlockd does not own. */
static int claim_state_dir(server *s)
{
    if (state_dir_claim(s->cfg->state_dir, &s->state, &s->lock_fd, s->err, sizeof s->err) != 0)
        return -1;
    s->a.state_dir = s->state;
    return 0;
}

/* The isolation backend (said first in the log), and the guard that cleans its cgroups if this
 * process is killed. */
static int open_sandboxes(server *s)
{
    char why[512] = "";
    if (!(s->a.sb = sandbox_backend_open(s->state, &s->cfg->sandbox, why, sizeof why)))
        return fail(s, "no isolation backend: %s", why);
    /* the first line of the log says what the sandboxes run on */
    log_info("isolation: %s", sandbox_backend_summary(s->a.sb));
    log_lines(LV_WARN, sandbox_backend_notes(s->a.sb));
    /* a released sandbox's CPU time and peak stay counted for its session */
    if (!(s->a.figures = figures_new()))
        return fail(s, "out of memory");
    sandbox_backend_on_retire(s->a.sb, figures_retire, s->a.figures);
    const char *cg_root = sandbox_backend_cgroup_root(s->a.sb);
    if (cg_root && sbx_guard_spawn(cg_root, s->lock_fd, why, sizeof why) != 0)
        log_warn("%s (a killed airlockd's sandboxes then wait for the next start)", why);
    if (s->cfg->egress.test_ca && sandbox_backend_trust_ca(s->a.sb, s->cfg->egress.test_ca, why, sizeof why) != 0)
        return fail(s, "AIRLOCK_TEST_EGRESS_CA: %s", why);
    return 0;
}

/* SANDBOX_AUDIT and SANDBOX_KEYSTORE, when set; a fleet node always keeps an audit outbox. */
static int open_stores(server *s)
{
    const config *c = s->cfg;
    const char *audit = c->audit_path;
    if (!audit && c->database_url) {
        if (asprintf(&s->audit_file, "%s/audit.db", s->state) < 0) {
            s->audit_file = NULL;
            return fail(s, "out of memory");
        }
        audit = s->audit_file;
    }
    if (audit && !(s->a.audit = audit_open(audit, c->audit_retention_days, s->err, sizeof s->err)))
        return -1;
    if (c->keystore_path && !(s->a.keys = keystore_open(c->keystore_path, s->err, sizeof s->err)))
        return -1;
    return 0;
}

/* The snapshot store (SANDBOX_SNAPSHOT_DIR, default <state>/snapshots), its bytes counted
 * against the disks' cap before the cap is fixed. Its temporary directories carry this
 * server's name ("local", or a fleet node's id made a safe name): nodes sharing the store
 * each clean only their own. */
static int open_snapshots(server *s)
{
    char owner[41] = "local", *dir = NULL;
    const char *node = s->cfg->database_url ? s->cfg->node_id : NULL;
    char host[256] = "";
    if (s->cfg->database_url && !node && gethostname(host, sizeof host - 1) == 0)
        node = host;
    if (node && node[0]) {
        size_t i = 0;
        for (; i < sizeof owner - 1 && node[i]; i++) {
            char ch = node[i];
            bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
            owner[i] = ok ? ch : '_';
        }
        owner[i] = '\0';
    }
    if (!s->cfg->snapshot_dir && asprintf(&dir, "%s/snapshots", s->state) < 0)
        return fail(s, "out of memory");
    s->a.snapshots = snapshots_open(s->cfg->snapshot_dir ? s->cfg->snapshot_dir : dir, owner, s->disk, s->err,
                                    sizeof s->err);
    free(dir);
    return s->a.snapshots ? 0 : -1;
}

static int open_disks(server *s)
{
    disk_limits dl = {.total_cap = s->cfg->disk_total_bytes, .reserve = s->cfg->disk_reserve_bytes};
    s->disk = disk_pool_open(s->state, &dl, s->err, sizeof s->err);
    s->a.disk = s->disk; /* the status page's budgets */
    return s->disk ? open_snapshots(s) : -1;
}

static int open_egress(server *s)
{
    char why[512] = "";
    if (!(s->a.egress = egress_open(&s->cfg->egress, s->state, s->cfg->fleet_secret, why, sizeof why)))
        return fail(s, "egress: %s", why);
    return 0;
}

/* The tenants, their request limits, and the host-wide command slots. */
static int open_tenants(server *s)
{
    const config *c = s->cfg;
    app *a = &s->a;
    a->tenants = tenants_new(c);
    a->lim = a->tenants ? limits_new(a->tenants) : NULL;
    a->slots = a->tenants ? slots_new(c->max_running, tenants_capacity(a->tenants), 4 * c->max_running,
                                      c->queue_seconds * 1000)
                          : NULL;
    return a->lim && a->slots ? 0 : fail(s, "out of memory");
}

/* A session's own sandbox with egress (domain/warm.h): its network is egress's, for as long as
 * the sandbox lives. */
static void *session_net_open(void *ctx, const char *key, const char *tenant, double created_at, const json_t *rules,
                              const sandbox_proxy_login *as, const sandbox_network **net, char *errbuf, size_t errlen)
{
    egress_sandbox *sb = egress_sandbox_open(ctx, key, tenant, created_at, rules, as, errbuf, errlen);
    if (sb)
        *net = egress_sandbox_network(sb);
    return sb;
}

static void session_net_close(void *ctx, void *handle)
{
    egress_sandbox_close(ctx, handle);
}

/* Spares (domain/warm.h): their disks are the registry's, their sandboxes the warm pool's. */
static int spare_disk_make(void *ctx, char *id, size_t id_len, char **workspace)
{
    app *a = ctx;
    return a->reg ? registry_make_spare_disk(a->reg, id, id_len, workspace) : -1;
}

static void spare_disk_drop(void *ctx, const char *id)
{
    app *a = ctx;
    if (a->reg)
        registry_drop_spare_disk(a->reg, id);
}

static bool spare_adopt(void *ctx, size_t tenant, const char *template_id, char *id, size_t id_len,
                        char **workspace)
{
    app *a = ctx;
    char *root = template_id && template_id[0] ? templates_root(a->templates, template_id) : NULL;
    if (template_id && template_id[0] && !root)
        return false;
    bool ok = warm_adopt_spare(a->warm, tenants_get(a->tenants, tenant)->name, root, id, id_len, workspace);
    free(root);
    return ok;
}

static int template_users(void *ctx, const char *id)
{
    return registry_template_users(ctx, id);
}

/* A deleted template's spares go before its root does (they would be re-wanted for others). */
static void template_deleted(void *ctx, const char *id)
{
    (void)id;
    warm_drop_spares(ctx);
}

/* Templates (ours): their records and build threads, after the sessions (which use them). */
static int open_templates(server *s)
{
    const config *c = s->cfg;
    app *a = &s->a;
    templates_opts to = {.state_dir = s->state, .sb = a->sb, .max_builds = c->template_builds,
                         .build_timeout = c->template_build_timeout, .sources = c->template_sources,
                         .suite = c->template_suite, .bases_dir = c->template_bases, .search_path = c->sandbox.search_path,
                         .users = template_users, .users_ctx = a->reg, .db = a->db};
    if (!(a->templates = templates_open(&to, s->err, sizeof s->err)))
        return -1;
    templates_set_delete_hook(a->templates, template_deleted, a->warm);
    a->pause.templates = a->templates; /* a resumed session boots on its template's root */
    return 0;
}

static void spares_drop_all(void *ctx)
{
    warm_drop_spares(((app *)ctx)->warm);
}

/* A session's kernels end, then its sandbox goes (they borrowed it); its memory image (paused
 * with its memory) goes with it, or stays for a restart when the session is kept. */
static void forget_warm(void *ctx, const char *session_id, bool kept)
{
    app *a = ctx;
    kernels_forget_session(a->kernels, session_id);
    warm_forget(a->warm, session_id);
    if (!kept)
        pause_forget_image(&a->pause, session_id);
}

/* Sandboxes booted ahead; none (NULL without an error) when the backend cannot. */
static int open_warm_pool(server *s)
{
    const config *c = s->cfg;
    warm_settings ws = {.max_ready = c->warm_max, .idle_seconds = c->warm_idle_seconds,
                        .max_booting = c->warm_booting, .spares = c->warm_new, .spare_size = c->session_size,
                        .sessions = c->sandbox.session_mode,
                        .disks = {.make = spare_disk_make, .drop = spare_disk_drop, .ctx = &s->a},
                        .net = {.open = session_net_open, .close = session_net_close, .ctx = s->a.egress}};
    s->err[0] = '\0';
    s->a.warm = warm_new(s->a.sb, &ws, s->err, sizeof s->err);
    if (!s->a.warm && s->err[0])
        return -1;
    /* sandboxes made ahead for resumes: as many as boot at once, within the warm pool's bound */
    if (c->sandbox.session_mode && warm_sessions(s->a.warm) && c->restore_ahead > 0)
        sandbox_backend_restore_ahead(s->a.sb, c->warm_max < c->warm_booting ? c->warm_max : c->warm_booting,
                                      c->warm_idle_seconds);
    if (!(s->a.kernels = kernels_new(s->a.warm))) {
        snprintf(s->err, sizeof s->err, "out of memory");
        return -1;
    }
    if (c->sandbox.session_mode)
        log_info("commands run %s",
                 warm_sessions(s->a.warm) ? "in their session's sandbox (SANDBOX_EXEC_MODE=session)"
                 : "one sandbox each: SANDBOX_EXEC_MODE=session needs gVisor, "
                 "airlock-agent and SANDBOX_WARM_MAX > 0");
    return 0;
}

/* A session left the registry: its proxy pass, listeners and tunnels end, its figures go. */
static void session_removed(void *ctx, const char *session_id)
{
    app *a = ctx;
    egress_forget_session(a->egress, session_id);
    figures_forget(a->figures, session_id);
}

/* The sessions (after the sandbox backend removed the predecessor's sandboxes, which held
 * workspaces), saved where SANDBOX_SESSION_STATE says. */
static int open_sessions(server *s)
{
    const config *c = s->cfg;
    app *a = &s->a;
    if (!c->session_state_off && !c->session_state && asprintf(&s->state_file, "%s/sessions.json", s->state) < 0) {
        s->state_file = NULL;
        return fail(s, "out of memory");
    }
    registry_opts ro = {.state_dir = s->state, .ttl = c->session_ttl, .paused_ttl = c->paused_ttl,
                        .quota_bytes = c->quota_bytes,
                        .size = c->session_size,
                        .state_file = c->session_state_off ? NULL : c->session_state ? c->session_state : s->state_file,
                        .tenants = a->tenants, .disk = s->disk, .id_slot = a->fleet ? fleet_slot(a->fleet) : 0,
                        .shared = a->fleet ? &s->shared : NULL};
    if (!(a->reg = registry_new(&ro, s->err, sizeof s->err)))
        return -1;
    /* a deleted or expired session's proxy pass, listeners and tunnels end with it */
    registry_set_remove_hook(a->reg, session_removed, a);
    /* a session's sandbox booted ahead goes before its disk is unmounted */
    registry_set_destroy_hook(a->reg, forget_warm, a);
    /* {"on_idle": "pause"}: the idle reaper pauses instead of deleting (domain/pause.h) */
    a->pause = (pause_deps){.reg = a->reg, .warm = a->warm, .tenants = a->tenants, .kernels = a->kernels,
                            .sb = a->sb, .state_dir = s->state};
    registry_set_pause_hook(a->reg, pause_idle_session, &a->pause);
    s->spares = (registry_spares){.adopt = spare_adopt, .drop_all = spares_drop_all, .ctx = a};
    if (a->warm)
        registry_set_spares(a->reg, &s->spares);
    /* the sessions a predecessor paused with their memory: each tenant's next resume finds a
     * sandbox made ahead, as it would after a pause in this process */
    for (size_t i = 0; i < tenants_capacity(a->tenants); i++)
        pause_want_restore_ahead(&a->pause, i);
    return 0;
}

int server_open(server *s, const config *cfg)
{
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->lock_fd = -1;
    s->a.cfg = cfg;
    atomic_init(&s->a.exec_seq, 1);
    int (*const steps[])(server *) = {claim_state_dir, open_sandboxes, open_stores,       open_disks,
                                      open_egress,     open_tenants,   server_join_fleet, open_warm_pool,
                                      open_sessions,   open_templates, server_settle_fleet};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (steps[i](s) != 0)
            return -1;
    return 0;
}

/* Written to a temporary name and renamed, so a reader never sees a partial number. */
static int write_port_file(const char *path, unsigned port)
{
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp", path) < 0)
        return -1;
    FILE *f = fopen(tmp, "w");
    int rc = -1;
    if (f) {
        int w = fprintf(f, "%u\n", port);
        if (fclose(f) == 0 && w > 0 && rename(tmp, path) == 0)
            rc = 0;
    }
    if (rc)
        unlink(tmp);
    free(tmp);
    return rc;
}

int server_listen(server *s)
{
    const config *c = s->cfg;
    if (signals_catch() != 0)
        return fail(s, "pipe: %s", strerror(errno));
    api_name_routes();
    http_options ho = {.host = c->listen_host, .port = c->port, .unix_path = c->unix_path,
                       .admit = api_admit, .handler = api_handle, .finished = api_finished, .cls = &s->a,
                       .limits = c->http};
    if (!(s->srv = http_start(&ho, s->err, sizeof s->err)))
        return -1;
    if (registry_start_reaper(s->a.reg) != 0)
        return fail(s, "cannot start the session reaper");
    if (server_start_fleet(s) != 0)
        return -1;
    if (c->port_file && write_port_file(c->port_file, http_port(s->srv)) != 0)
        return fail(s, "--port-file %s: %s", c->port_file, strerror(errno));
    log_info("listening on http://%s:%u%s%s (isolation: %s)", c->listen_host, http_port(s->srv),
             c->unix_path ? " and unix:" : "", c->unix_path ? c->unix_path : "", sandbox_backend_name(s->a.sb));
    return 0;
}

/* Waits until no request is in flight (true), or seconds pass or another signal comes. */
static bool wait_for_requests(http_server *srv, double seconds)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (http_in_flight(srv) == 0)
            return true;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 >= seconds)
            return false;
        if (signals_poll(50))
            return false;
    }
}

bool server_stop(server *s)
{
    const config *c = s->cfg;
    http_server *srv = s->srv;
    s->srv = NULL;
    http_quiesce(srv);
    if (c->unix_path)
        unlink(c->unix_path);
    unsigned running = http_in_flight(srv);
    if (running)
        log_info("waiting up to %.0f s for %u running requests (a second signal stops them now)",
                 c->shutdown_grace, running);
    if (!wait_for_requests(srv, c->shutdown_grace)) {
        log_info("stopping %u running requests", http_in_flight(srv));
        http_cancel(srv);
        wait_for_requests(srv, CANCEL_WAIT_S);
    }
    bool stopped = http_stop(srv);
    /* spares are no session's: their sandboxes and disks go; sessions are saved and their
     * disks unmounted (those still in use once their request ends) */
    warm_drop_spares(s->a.warm);
    server_stop_fleet(s);
    registry_shutdown(s->a.reg);
    return stopped;
}

void server_abandon(server *s, int status)
{
    /* a handler is still inside a command or a download: freeing what it uses would be
     * worse than leaving; its sandbox dies with this process (PR_SET_PDEATHSIG) */
    log_error("requests did not end in time; exiting without cleanup");
    warm_abandon(s->a.warm); /* frozen, they would outlive this process */
    if (s->cfg->port_file)
        unlink(s->cfg->port_file);
    _exit(status);
}

void server_close(server *s, int status)
{
    app *a = &s->a;
    if (s->srv && s->cfg->unix_path)
        unlink(s->cfg->unix_path);
    if (s->srv && !http_stop(s->srv))
        _exit(status);
    warm_drop_spares(a->warm); /* their disks are the registry's */
    templates_free(a->templates); /* its builds stop before the sandbox backend goes */
    a->templates = NULL;
    server_stop_fleet(s);
    registry_free(a->reg);     /* before egress: removing sessions tells egress */
    a->reg = NULL;
    kernels_free(a->kernels);  /* after the sessions (which end theirs), before their sandboxes */
    a->kernels = NULL;
    warm_free(a->warm);        /* after the sessions, whose removal forgets their sandboxes */
    snapshots_close(a->snapshots);
    a->snapshots = NULL;
    disk_pool_close(s->disk);
    egress_close(a->egress);
    limits_free(a->lim);
    slots_free(a->slots);
    tenants_free(a->tenants);
    audit_close(a->audit);
    keystore_close(a->keys);
    server_close_fleet(s);     /* after the sessions, which release their rows in it */
    if (a->sb)
        sandbox_backend_close(a->sb);
    figures_free(a->figures); /* after every sandbox, whose release reports to it */
    if (s->cfg->port_file && status == 0)
        unlink(s->cfg->port_file);
    free(s->state);
    free(s->state_file);
    free(s->audit_file);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* the state directory is free for the next server */
}
