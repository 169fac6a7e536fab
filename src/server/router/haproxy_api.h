/* HAProxy's runtime API on its stats socket (a unix socket): one connection per batch of
 * commands, no process forked. */
#ifndef AIRLOCKD_ROUTER_HAPROXY_API_H
#define AIRLOCKD_ROUTER_HAPROXY_API_H

#include <stddef.h>

/* The most an answer may weigh (a `show map` of every moved session fits many times). */
#define HAPROXY_API_MAX_ANSWER (64u * 1024u * 1024u)

/* Sends commands (one line; several are separated by ';') and reads HAProxy's whole answer
 * into *answer (malloc'd, NUL-terminated; NULL to discard it), within 10 s. 0, or -1 with a
 * message in err. */
int haproxy_api(const char *socket_path, const char *commands, char **answer, char *err, size_t errlen);

#endif
