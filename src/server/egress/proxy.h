/* The egress proxy: one thread with an epoll loop that accepts on every egress sandbox's
 * listener and relays HTTPS CONNECT tunnels to port 443 of the hosts the session allows, after
 * checking the pass, the rules and every resolved address. Each attempt is one event in the
 * session's log. Bounded: connections per session and in total, head size and time, lookups
 * in flight, idle tunnels. Request threads only hand it listeners and flags (never wait on
 * it), so it cannot block the API. */
#ifndef AIRLOCKD_EGRESS_PROXY_H
#define AIRLOCKD_EGRESS_PROXY_H

#include "egress/session.h"
#include "egress/settings.h"

#include <stddef.h>

typedef struct egress_proxy egress_proxy;
typedef struct egress_listener egress_listener;

egress_proxy *egress_proxy_start(const egress_settings *s, char *errbuf, size_t errlen);

/* Ends every tunnel (logging it), closes every listener, stops the thread. */
void egress_proxy_stop(egress_proxy *p);

/* Hands a sandbox's listening socket to the proxy, which closes it from then on (also when
 * this fails). The returned handle (NULL when out of memory) is for close_listener. */
egress_listener *egress_proxy_add_listener(egress_proxy *p, int fd, egress_session *s);

/* The sandbox is gone: its listener and every connection made through it are closed, and
 * their events logged, before this returns (or after 5 s at most). */
void egress_proxy_close_listener(egress_proxy *p, egress_listener *l);

/* A session was revoked (its flag is set): its listeners and connections are closed. */
void egress_proxy_wake(egress_proxy *p);

#endif
