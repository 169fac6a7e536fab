/* The entry points the HTTP layer calls: the dispatcher and the per-route body cap. */
#ifndef AIRLOCKD_API_ROUTES_H
#define AIRLOCKD_API_ROUTES_H

#include "http/http.h"

#include <stddef.h>

/* An http_handler (cls is the app): routing, the check order, the route's handler. */
void api_handle(void *cls, http_request *r);

/* An http_body_limit (cls is the app): the matching route's max_body, else HTTP_MAX_BODY. */
size_t api_body_limit(void *cls, const char *method, const char *path);

#endif
