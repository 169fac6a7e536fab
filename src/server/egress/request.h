/* The request head a sandbox sends to the egress proxy: where it ends, and what it says
 * (method, target, the CONNECT host and port, the Basic credentials). Pure parsing, no I/O,
 * so it is unit-tested and fuzzed alone. */
#ifndef AIRLOCKD_EGRESS_REQUEST_H
#define AIRLOCKD_EGRESS_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#define EGRESS_HEAD_MAX 8192      /* a longer head is refused (431) */
#define EGRESS_HEADERS_MAX 64     /* header lines in one head */
#define EGRESS_TARGET_LOG_MAX 200 /* the log keeps this much of a non-CONNECT target */
#define EGRESS_HOST_MAX 253

typedef struct {
    char method[16];
    char target[EGRESS_TARGET_LOG_MAX + 1]; /* the first bytes of the target (NUL-ended) */
    bool connect;                           /* method is CONNECT */
    char host[EGRESS_HOST_MAX + 1];         /* CONNECT: lower-cased, trailing dots and IPv6
                                             * brackets removed */
    unsigned port;                          /* CONNECT: 0..65535 */
    bool auth;                              /* one well-formed Proxy-Authorization: Basic */
    char user[64];
    char pass[128];
} egress_request;

/* Offset just past the empty line that ends the head (CRLF or bare LF line ends), or 0 when
 * buf does not hold a whole head yet. */
size_t egress_head_end(const char *buf, size_t len);

/* Parses a whole head (buf[0..len), len from egress_head_end). 0 when it is a well-formed
 * HTTP/1.x request (out filled; a CONNECT has host and port), -1 when malformed (what was
 * read of the request line, e.g. the target, is still in out). */
int egress_request_parse(const char *buf, size_t len, egress_request *out);

#endif
