/* The node-to-node routes of a drain (docs/fleet.md "Drain"), served only on the node's own
 * node-to-node listener (api/routes.c, run/fleet.c), never on the address the router forwards
 * to: each needs the fleet's secret as a bearer token. POST /v1/fleet/internal/sessions/{id}: take a session the database says is moving
 * to this node (its archive fetched from the draining node); GET .../{id}/archive: the
 * draining node's tar archive of a session it is moving out. */
#include "api/handlers.h"
#include "domain/session_id.h"
#include "drain/move.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The fleet's secret as "Authorization: Bearer <secret>", compared in constant time; false
 * after answering (404 without a fleet or secret, 401 without the right one). */
static bool internal_caller(app *a, http_request *r)
{
    const char *secret = a->cfg->fleet_secret, *auth = http_header(r, "authorization");
    if (!a->fleet || !secret) {
        http_send_detail(r, 404, "Not Found");
        return false;
    }
    size_t n = strlen(secret);
    if (!auth || strncmp(auth, "Bearer ", 7) != 0 || strlen(auth + 7) != n || CRYPTO_memcmp(auth + 7, secret, n) != 0) {
        http_send_detail(r, 401, "This route is for the fleet's nodes only.");
        return false;
    }
    return true;
}

/* "sbx_" + 12 lowercase hex: the only ids that go into a URL or the database here. */
static bool session_id_shape(http_request *r, const char *id)
{
    bool ok = session_id_valid(id);
    if (!ok)
        http_send_detail(r, 404, "Session not found");
    return ok;
}

void api_fleet_move_in(app *a, http_request *r, const api_call *c)
{
    const char *id = c->param;
    if (!internal_caller(a, r) || !session_id_shape(r, id))
        return;
    json_t *row = fleet_move_incoming(a->fleet, id);
    if (!row) {
        send_detail_with(r, 403, "Session %s is not moving to this node.", id);
        return;
    }
    long tenant = tenants_intern(a->tenants, json_string_value(json_object_get(row, "tenant")));
    session *s = NULL;
    session_result rc = tenant < 0 ? SESSION_ERROR
        : registry_move_in(a->reg, id, (size_t)tenant, json_object_get(row, "egress"),
                           (long long)json_integer_value(json_object_get(row, "quota_mb")) << 20,
                           json_real_value(json_object_get(row, "created_at")),
                           json_real_value(json_object_get(row, "last_used")), &s);
    if (rc != SESSION_OK) {
        json_decref(row);
        http_send_retry(r, 503, "This node cannot make the session's disk now.", 2);
        return;
    }
    if (move_fetch(a, json_string_value(json_object_get(row, "source")), id, s->workspace) != 0) {
        json_decref(row);
        registry_move_in_end(a->reg, s, false);
        http_send_retry(r, 502, "The session's workspace could not be fetched from its node.", 2);
        return;
    }
    json_decref(row);
    if (fleet_move_commit(a->fleet, id) != 0) {
        registry_move_in_end(a->reg, s, false);
        send_detail_with(r, 409, "Session %s is no longer moving to this node.", id);
        return;
    }
    if (!registry_move_in_end(a->reg, s, true))
        fprintf(stderr, "airlockd: moved-in session %s could not be saved in the state file\n", id);
    http_send_json(r, 200, json_pack("{s:s,s:s}", "session_id", id, "node", fleet_node_id(a->fleet)));
}

void api_fleet_move_archive(app *a, http_request *r, const api_call *c)
{
    const char *id = c->param;
    if (!internal_caller(a, r) || !session_id_shape(r, id))
        return;
    char *ws = fleet_move_outgoing(a->fleet, id) ? registry_moving_workspace(a->reg, id) : NULL;
    if (!ws) {
        send_detail_with(r, 403, "Session %s is not moving out of this node.", id);
        return;
    }
    int fd = move_pack(a, ws);
    free(ws);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        http_send_500(r);
        return;
    }
    http_send_file(r, 200, fd, (unsigned long long)st.st_size, "application/x-tar");
}
