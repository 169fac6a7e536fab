/* The network of one egress sandbox: a pair of anonymous network namespaces made per sandbox
 * run. S (the sandbox's) holds eth0 = 10.0.2.1/31 and lo; P (the proxy's) holds the veth peer
 * px0 = 10.0.2.0/31 and one listening socket on 10.0.2.0:3128 that airlockd's proxy accepts
 * from. No default route, no IPv6, no DNS server, nothing in the host's namespace: the proxy
 * is the only endpoint a sandbox can reach, and sandboxes cannot reach each other (every P is
 * private, with the same addresses). airlockd holds S by a descriptor and P only through the
 * listener, so everything goes away with those descriptors, also when airlockd is killed. */
#ifndef AIRLOCKD_EGRESS_NETNS_H
#define AIRLOCKD_EGRESS_NETNS_H

#include <stddef.h>

#define EGRESS_PROXY_IP "10.0.2.0"
#define EGRESS_SANDBOX_IP "10.0.2.1"
#define EGRESS_PROXY_PORT 3128

typedef struct {
    int sandbox_ns; /* S: an nsfs descriptor for runsc's spec (/proc/<pid>/fd/<n>) */
    int listener;   /* non-blocking, listening on 10.0.2.0:3128 inside P */
} egress_pair;

/* Makes a pair from a short-lived helper thread (so no server thread ever changes its
 * namespace). root_ns: a descriptor of airlockd's own network namespace. */
int egress_pair_create(int root_ns, egress_pair *out, char *errbuf, size_t errlen);

/* Closes what egress_pair_create returned (-1 entries are skipped). */
void egress_pair_close(egress_pair *p);

#endif
