/* Strict request framing (private to http/): the checks libmicrohttpd does not make, run
 * once a request's headers are in and before the application sees it. */
#ifndef AIRLOCKD_HTTP_STRICT_H
#define AIRLOCKD_HTTP_STRICT_H

#include "http/internal.h"

#include <stdbool.h>

/* 0 when the request may go on; else its status (400, 501) with a constant detail. version:
 * the request line's; raw_uri: the request target as sent (before decoding); raw_nul: it
 * held a raw NUL byte. */
unsigned http_strict_check(struct MHD_Connection *c, const char *version, const char *raw_uri, bool raw_nul,
                           const char **detail);

/* Keeps the refusal {"detail": detail} with Connection: close, so MHD closes the connection
 * after it and reads nothing more from it. */
void http_strict_refuse(http_request *r, unsigned status, const char *detail);

#endif
