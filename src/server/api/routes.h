/* The entry points the HTTP layer calls: the admission (route, key and body cap from the
 * headers) and the dispatcher (the check order, the route's handler). */
#ifndef AIRLOCKD_API_ROUTES_H
#define AIRLOCKD_API_ROUTES_H

#include "http/http.h"

/* An http_admit (cls is the app): 404/405/307 for unknown routes, the key checked (401 at
 * once unless the reference's order needs a small body first), the route's cap and pool. */
void api_admit(void *cls, http_request *r, http_admission *adm);

/* An http_handler (cls is the app): body parsing, 401, the rate limit, the route's handler. */
void api_handle(void *cls, http_request *r);

/* Names the routes to the metrics (obs/metrics.h) and marks their start, once before serving. */
void api_name_routes(void);

/* An http_finished: the request counted by its route and status (obs/metrics.h). */
void api_finished(void *cls, http_request *r, unsigned status, double seconds);

/* The same pair for a fleet node's internal listener: the node-to-node routes alone (every
 * other path 404). */
void api_admit_internal(void *cls, http_request *r, http_admission *adm);
void api_handle_internal(void *cls, http_request *r);

#endif
