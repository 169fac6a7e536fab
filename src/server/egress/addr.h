/* Which IP addresses the egress proxy may connect to: globally routable unicast only. The
 * check runs on the address the proxy actually connects to, so DNS rebinding cannot reach
 * the host, its metadata service or private networks. */
#ifndef AIRLOCKD_EGRESS_ADDR_H
#define AIRLOCKD_EGRESS_ADDR_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* An IPv4-mapped IPv6 address (::ffff:a.b.c.d) becomes the IPv4 address it stands for, so it
 * is judged and connected to as IPv4. false when ss is neither IPv4 nor IPv6. */
bool egress_addr_normalize(struct sockaddr_storage *ss, socklen_t *len);

/* True for a global unicast address: not loopback, private, link-local (169.254.169.254
 * included), CGNAT, multicast, documentation, benchmarking or otherwise reserved. IPv6 must
 * be in 2000::/3 and outside its special blocks. Normalize first. */
bool egress_addr_is_global(const struct sockaddr *sa);

/* The address without port ("10.0.0.1", "2001:db8::1"); "?" for another family. */
void egress_addr_format(const struct sockaddr *sa, char *buf, size_t len);

/* Parses an IP literal (IPv4 dotted quad or IPv6 without brackets) with the given port. */
bool egress_addr_parse(const char *text, unsigned port, struct sockaddr_storage *ss,
                       socklen_t *len);

#endif
