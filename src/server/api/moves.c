/* The node-to-node routes of a drain (docs/fleet.md "Drain"), served only on the node's own
 * node-to-node listener (api/routes.c, run/fleet.c), never on the address the router forwards
 * to: each needs the fleet's secret as a bearer token. POST /v1/fleet/internal/sessions/{id}:
 * take a session the database says is moving to this node (its disk fetched from the
 * draining node, once this node has room for it); GET .../{id}/archive: the draining node's
 * stream of the disk of a session it is moving out (drain/extents.h). */
#include "api/handlers.h"
#include "disk/image.h"
#include "domain/session_id.h"
#include "drain/transfer.h"
#include "log/log.h"
#include "fleet/wire.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

/* The size of the disk image the draining node sends (X-Airlock-Image-Bytes), at most the
 * disk the session's quota makes; -1 after answering. */
static long long image_bytes(http_request *r, long long quota_bytes)
{
    const char *h = http_header(r, "x-airlock-image-bytes");
    char *end = NULL;
    long long n = h ? strtoll(h, &end, 10) : -1;
    if (!h || end == h || *end || n <= 0 || n > image_bytes_for(quota_bytes)) {
        http_send_detail(r, 400, "X-Airlock-Image-Bytes must be the size of the session's disk image (at most what "
                                 "its quota makes).");
        return -1;
    }
    return n;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* How long it may take, of the move's bound: a little less than the draining node waits, so
 * this node never takes a session after its old node gave up the move. */
#define SHARE_OF_BOUND 0.8

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
    long long quota = (long long)json_integer_value(json_object_get(row, "quota_mb")) << 20;
    long long bytes = image_bytes(r, quota);
    double bound = a->cfg->fleet_move_timeout_s * SHARE_OF_BOUND, t0 = now_s();
    if (bytes < 0 || !transfer_incoming_take(bound / 4)) {
        if (bytes >= 0)
            http_send_retry(r, 503, "This node takes other moves now; retry shortly.", 2);
        json_decref(row);
        return;
    }
    long tenant = tenants_intern(a->tenants, json_string_value(json_object_get(row, "tenant")));
    transfer_fetch t = {.a = a, .source_url = json_string_value(json_object_get(row, "source")), .id = id,
                        .image_bytes = bytes, .timeout_s = (long)(bound * 3 / 4)};
    session *s = NULL;
    char why[400] = "";
    /* the same template and size on this node as on the one it comes from */
    session_spec spec = fleet_shape_spec(json_object_get(row, "shape"), quota);
    session_result rc = tenant < 0 ? SESSION_ERROR
        : registry_move_in(a->reg, id, (size_t)tenant, json_object_get(row, "egress"), &spec, bytes,
                           transfer_fetch_fill, &t, json_real_value(json_object_get(row, "created_at")),
                           json_real_value(json_object_get(row, "last_used")), &s, why, sizeof why);
    transfer_incoming_give();
    json_decref(row);
    if (rc == SESSION_CAPACITY) {
        log_session(LV_WARN, id, NULL, "drain: no room for this moving session: %s", why);
        char d[600];
        snprintf(d, sizeof d, "%s.", why); /* the draining node's report: "node N has no room for it: ..." */
        http_send_detail(r, 507, d);
        return;
    }
    if (rc != SESSION_OK) {
        log_session(LV_WARN, id, NULL, "drain: this moving session's disk could not be made here: %s%s%s", why,
                    t.why[0] ? ": " : "", t.why);
        char d[900];
        snprintf(d, sizeof d, "The session's disk could not be taken: %s%s%s.", why, t.why[0] ? ": " : "", t.why);
        http_send_detail(r, 502, d);
        return;
    }
    /* past its share of the bound the draining node may be giving up: it keeps the session */
    if (now_s() - t0 > bound || fleet_move_commit(a->fleet, id) != 0) {
        registry_move_in_end(a->reg, s, false);
        send_detail_with(r, 409, "Session %s is no longer moving to this node.", id);
        return;
    }
    if (!registry_move_in_end(a->reg, s, true))
        log_session(LV_ERROR, id, NULL, "moved-in session could not be saved in the state file");
    log_session(LV_INFO, id, NULL, "drain: moved in (%lld bytes of data of a %lld-byte disk)", t.data_bytes, bytes);
    http_send_json(r, 200, json_pack("{s:s,s:s}", "session_id", id, "node", fleet_node_id(a->fleet)));
}

void api_fleet_move_archive(app *a, http_request *r, const api_call *c)
{
    const char *id = c->param;
    if (!internal_caller(a, r) || !session_id_shape(r, id))
        return;
    if (!fleet_move_outgoing(a->fleet, id)) {
        send_detail_with(r, 403, "Session %s is not moving out of this node.", id);
        return;
    }
    transfer_send(a, r, id);
}
