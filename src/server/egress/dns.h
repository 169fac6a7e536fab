/* Name lookups for the egress proxy: c-ares on the proxy's epoll loop (no resolver threads),
 * DNS only (never /etc/hosts, no search domains), with its own timeouts and a cap on the
 * lookups in flight. Used from the proxy thread only. */
#ifndef AIRLOCKD_EGRESS_DNS_H
#define AIRLOCKD_EGRESS_DNS_H

#include <ares.h>
#include <stddef.h>
#include <stdint.h>

#define EGRESS_DNS_MAX_PENDING 256

typedef struct egress_dns egress_dns;

/* Called once per lookup: status ARES_SUCCESS with res (freed by the caller after), or a
 * failure (ARES_EDESTRUCTION when the resolver is freed first) with res NULL. */
typedef void (*egress_dns_cb)(void *arg, int status, struct ares_addrinfo *res);

/* servers: SANDBOX_EGRESS_DNS ("ip[:port][,ip[:port]...]", IPv6 as [addr]:port), or NULL for
 * the host's resolv.conf servers. */
egress_dns *egress_dns_new(int epfd, const char *servers, char *errbuf, size_t errlen);

/* Starts a lookup of host's A and AAAA records; -1 when EGRESS_DNS_MAX_PENDING are already
 * in flight (cb is then never called). */
int egress_dns_resolve(egress_dns *d, const char *host, egress_dns_cb cb, void *arg);

/* The loop saw events on one of the resolver's descriptors. */
void egress_dns_on_event(egress_dns *d, int fd, uint32_t events);

/* Called every loop turn: lookups past their timeouts fail. */
void egress_dns_tick(egress_dns *d);

/* Every pending callback runs with ARES_EDESTRUCTION, then everything is freed. */
void egress_dns_free(egress_dns *d);

#endif
