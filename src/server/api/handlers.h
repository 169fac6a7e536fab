/* Every route handler, by the file that holds it; the route table (api/routes.c) names them. */
#ifndef AIRLOCKD_API_HANDLERS_H
#define AIRLOCKD_API_HANDLERS_H

#include "api/api.h"

/* health.c */
void api_health(app *a, http_request *r, const api_call *c);
/* sessions.c */
void api_sessions_create(app *a, http_request *r, const api_call *c);
void api_sessions_list(app *a, http_request *r, const api_call *c);
void api_sessions_get(app *a, http_request *r, const api_call *c); /* ours: one session's template and size */
void api_sessions_delete(app *a, http_request *r, const api_call *c);
/* ours: pause a session (nothing of it runs, its files kept) and resume it (api/pause.c) */
void api_sessions_pause(app *a, http_request *r, const api_call *c);
void api_sessions_resume(app *a, http_request *r, const api_call *c);
/* files.c */
void api_files_write(app *a, http_request *r, const api_call *c);
void api_files_read(app *a, http_request *r, const api_call *c);
/* files_raw.c: a raw (application/octet-stream) write, admitted from the headers: the upload
 * (its body sink set in adm), or NULL when an answer was sent; its handler answers once the
 * body is in */
void *api_files_raw_admit(app *a, http_request *r, const api_call *c, http_admission *adm);
void api_files_write_raw(app *a, http_request *r, void *upload);
/* files_list.c */
void api_files_list(app *a, http_request *r, const api_call *c);
/* exec.c */
void api_exec(app *a, http_request *r, const api_call *c);
/* Ours: kernels (api/kernels.c). */
void api_kernels_create(app *a, http_request *r, const api_call *c);
void api_kernels_list(app *a, http_request *r, const api_call *c);
void api_kernels_delete(app *a, http_request *r, const api_call *c);
void api_kernels_execute(app *a, http_request *r, const api_call *c);
void api_kernels_interrupt(app *a, http_request *r, const api_call *c);
/* import.c */
void api_import(app *a, http_request *r, const api_call *c);
/* egress.c */
void api_egress_log(app *a, http_request *r, const api_call *c);
void api_egress_policy(app *a, http_request *r, const api_call *c);
/* usage.c */
void api_usage(app *a, http_request *r, const api_call *c);
/* audit.c */
void api_audit(app *a, http_request *r, const api_call *c);
/* keys.c */
void api_keys_list(app *a, http_request *r, const api_call *c);
void api_keys_create(app *a, http_request *r, const api_call *c);
void api_keys_revoke(app *a, http_request *r, const api_call *c);
/* admin.c */
void api_admin_keys_list(app *a, http_request *r, const api_call *c);
void api_admin_keys_create(app *a, http_request *r, const api_call *c);
void api_admin_keys_revoke(app *a, http_request *r, const api_call *c);
/* metrics.c (ours): GET /metrics, Prometheus */
void api_metrics(app *a, http_request *r, const api_call *c);
/* session_metrics.c (ours) */
void api_session_metrics(app *a, http_request *r, const api_call *c);
void api_admin_sessions(app *a, http_request *r, const api_call *c);
/* templates.c (ours) */
void api_templates_create(app *a, http_request *r, const api_call *c);
void api_templates_list(app *a, http_request *r, const api_call *c);
void api_templates_get(app *a, http_request *r, const api_call *c);
void api_templates_delete(app *a, http_request *r, const api_call *c);
void api_templates_log(app *a, http_request *r, const api_call *c);
void api_admin_templates_create(app *a, http_request *r, const api_call *c);
void api_admin_templates_list(app *a, http_request *r, const api_call *c);
void api_admin_templates_delete(app *a, http_request *r, const api_call *c);
/* snapshots.c (ours) */
void api_snapshots_create(app *a, http_request *r, const api_call *c);
void api_snapshots_list(app *a, http_request *r, const api_call *c);
void api_snapshots_get(app *a, http_request *r, const api_call *c);
void api_snapshots_delete(app *a, http_request *r, const api_call *c);
/* nodes.c: the fleet */
void api_admin_nodes(app *a, http_request *r, const api_call *c);
void api_admin_node_drain(app *a, http_request *r, const api_call *c);
void api_fleet_accepting(app *a, http_request *r, const api_call *c);
void api_fleet_move_in(app *a, http_request *r, const api_call *c);
void api_fleet_move_archive(app *a, http_request *r, const api_call *c);
/* admin_page.c: the status page */
void api_admin_page(app *a, http_request *r, const api_call *c);
/* admin_views.c: what the status page shows besides nodes and sessions */
void api_admin_audit(app *a, http_request *r, const api_call *c);
void api_admin_egress(app *a, http_request *r, const api_call *c);
void api_admin_status(app *a, http_request *r, const api_call *c);
/* A session route's answer when this fleet node does not hold session id: true when a
 * 403/410/503 was sent from the fleet's registry (false: the local 404 stands). */
bool fleet_answer_elsewhere(app *a, http_request *r, const char *id, size_t tenant);
/* In a fleet: a paused session of tenant in the shared store is taken by this node (api/store_take.c);
 * true when it is held here now (the caller looks it up again). */
bool store_take_over(app *a, const char *id, size_t tenant);

#endif
