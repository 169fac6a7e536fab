/* Creating an egress sandbox's namespace pair: unshare/setns in a helper thread, the veth and
 * its addresses over rtnetlink (libmnl), links up with SIOCSIFFLAGS, the proxy's listener. */
#include "egress/netns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define LISTEN_BACKLOG 64

static atomic_uint nl_seq;

typedef struct {
    int root_ns;
    egress_pair out;
    char err[256];
} pair_job;

static int fail(pair_job *j, const char *what)
{
    snprintf(j->err, sizeof j->err, "%s: %s", what, strerror(errno));
    return -1;
}

/* One rtnetlink request, waiting for its acknowledgement. */
static int nl_request(struct mnl_socket *nl, struct nlmsghdr *h)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    unsigned seq = atomic_fetch_add(&nl_seq, 1u) + 1;
    h->nlmsg_flags |= NLM_F_ACK;
    h->nlmsg_seq = seq;
    if (mnl_socket_sendto(nl, h, h->nlmsg_len) < 0)
        return -1;
    ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof buf);
    if (n < 0)
        return -1;
    return mnl_cb_run(buf, (size_t)n, seq, mnl_socket_get_portid(nl), NULL, NULL) < 0 ? -1 : 0;
}

static struct mnl_socket *nl_open(void)
{
    struct mnl_socket *nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
    if (nl && mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
        int saved = errno;
        mnl_socket_close(nl);
        errno = saved;
        return NULL;
    }
    return nl;
}

/* veth `name` in this namespace with its peer `peer` created directly in peer_ns. */
static int veth_add(struct mnl_socket *nl, const char *name, const char *peer, int peer_ns)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *h = mnl_nlmsg_put_header(buf);
    h->nlmsg_type = RTM_NEWLINK;
    h->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL;
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof *ifi);
    ifi->ifi_family = AF_UNSPEC;
    mnl_attr_put_strz(h, IFLA_IFNAME, name);
    struct nlattr *info = mnl_attr_nest_start(h, IFLA_LINKINFO);
    mnl_attr_put_strz(h, IFLA_INFO_KIND, "veth");
    struct nlattr *data = mnl_attr_nest_start(h, IFLA_INFO_DATA);
    struct nlattr *p = mnl_attr_nest_start(h, VETH_INFO_PEER);
    struct ifinfomsg *pifi = mnl_nlmsg_put_extra_header(h, sizeof *pifi);
    pifi->ifi_family = AF_UNSPEC;
    mnl_attr_put_strz(h, IFLA_IFNAME, peer);
    mnl_attr_put_u32(h, IFLA_NET_NS_FD, (uint32_t)peer_ns);
    mnl_attr_nest_end(h, p);
    mnl_attr_nest_end(h, data);
    mnl_attr_nest_end(h, info);
    return nl_request(nl, h);
}

/* ip/31 on the named link of this namespace. */
static int addr_add(struct mnl_socket *nl, const char *link, const char *ip)
{
    unsigned idx = if_nametoindex(link);
    struct in_addr a;
    if (idx == 0 || inet_pton(AF_INET, ip, &a) != 1)
        return -1;
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *h = mnl_nlmsg_put_header(buf);
    h->nlmsg_type = RTM_NEWADDR;
    h->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL;
    struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(h, sizeof *ifa);
    ifa->ifa_family = AF_INET;
    ifa->ifa_prefixlen = 31;
    ifa->ifa_index = idx;
    mnl_attr_put_u32(h, IFA_LOCAL, a.s_addr);
    mnl_attr_put_u32(h, IFA_ADDRESS, a.s_addr);
    return nl_request(nl, h);
}

static int link_up(const char *name)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
    int rc = ioctl(s, SIOCGIFFLAGS, &ifr);
    if (rc == 0) {
        ifr.ifr_flags |= IFF_UP;
        rc = ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    int saved = errno;
    close(s);
    errno = saved;
    return rc;
}

/* A new namespace for this thread whose later links get no IPv6 (runsc would copy fe80::/64
 * into the sandbox and make the peer's link-local address reachable). */
static int new_netns(pair_job *j, const char *which)
{
    char what[64];
    snprintf(what, sizeof what, "unshare(CLONE_NEWNET) for %s", which);
    if (unshare(CLONE_NEWNET) != 0)
        return fail(j, what);
    int fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(j, "open /proc/thread-self/ns/net");
    int s = open("/proc/sys/net/ipv6/conf/default/disable_ipv6", O_WRONLY | O_CLOEXEC);
    if (s >= 0) { /* absent when the kernel has no IPv6: nothing to disable */
        bool ok = write(s, "1", 1) == 1;
        int saved = errno;
        close(s);
        if (!ok) {
            errno = saved;
            close(fd);
            return fail(j, "disable IPv6");
        }
    }
    return fd;
}

static int make_listener(pair_job *j)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
        return fail(j, "proxy socket");
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons(EGRESS_PROXY_PORT);
    inet_pton(AF_INET, EGRESS_PROXY_IP, &sa.sin_addr);
    if (bind(s, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(s, LISTEN_BACKLOG) != 0) {
        fail(j, "proxy listener " EGRESS_PROXY_IP ":3128");
        close(s);
        return -1;
    }
    return s;
}

/* The steps in the helper thread. Every failure leaves the job's descriptors for the caller
 * to close; the thread ends right after, whatever namespace it is in. */
static int build_pair(pair_job *j)
{
    int p = new_netns(j, "the proxy side");
    if (p < 0)
        return -1;
    int rc = -1;
    struct mnl_socket *nl = NULL;
    /* lo up on the proxy side too: only there can a host tool (bench/egress_tunnel.py) reach
     * the listener; the sandbox never sees this lo */
    if (link_up("lo") != 0) {
        fail(j, "lo up on the proxy side");
        goto out;
    }
    if (setns(j->root_ns, CLONE_NEWNET) != 0) {
        fail(j, "setns back");
        goto out;
    }
    j->out.sandbox_ns = new_netns(j, "the sandbox");
    if (j->out.sandbox_ns < 0)
        goto out;
    if (link_up("lo") != 0) {
        fail(j, "lo up");
        goto out;
    }
    if (!(nl = nl_open()) || veth_add(nl, "eth0", "px0", p) != 0 ||
        addr_add(nl, "eth0", EGRESS_SANDBOX_IP) != 0 || link_up("eth0") != 0) {
        fail(j, "veth eth0 in the sandbox namespace");
        goto out;
    }
    mnl_socket_close(nl);
    nl = NULL;
    if (setns(p, CLONE_NEWNET) != 0) {
        fail(j, "setns to the proxy side");
        goto out;
    }
    if (!(nl = nl_open()) || addr_add(nl, "px0", EGRESS_PROXY_IP) != 0 || link_up("px0") != 0) {
        fail(j, "veth px0 on the proxy side");
        goto out;
    }
    j->out.listener = make_listener(j);
    if (j->out.listener < 0)
        goto out;
    if (setns(j->root_ns, CLONE_NEWNET) != 0) {
        fail(j, "setns back");
        goto out;
    }
    rc = 0;
out:
    if (nl)
        mnl_socket_close(nl);
    close(p); /* the listener keeps P alive */
    return rc;
}

static void *pair_thread(void *arg)
{
    pair_job *j = arg;
    (void)build_pair(j);
    return NULL;
}

void egress_pair_close(egress_pair *p)
{
    if (p->sandbox_ns >= 0)
        close(p->sandbox_ns);
    if (p->listener >= 0)
        close(p->listener);
    p->sandbox_ns = p->listener = -1;
}

int egress_pair_create(int root_ns, egress_pair *out, char *errbuf, size_t errlen)
{
    pair_job j;
    memset(&j, 0, sizeof j);
    j.root_ns = root_ns;
    j.out.sandbox_ns = j.out.listener = -1;
    pthread_t t;
    int e = pthread_create(&t, NULL, pair_thread, &j);
    if (e != 0) {
        snprintf(errbuf, errlen, "cannot start the namespace helper thread: %s", strerror(e));
        return -1;
    }
    pthread_join(t, NULL);
    *out = j.out;
    if (j.err[0] || out->sandbox_ns < 0 || out->listener < 0) {
        snprintf(errbuf, errlen, "cannot make the sandbox network: %s", j.err[0] ? j.err : "unknown");
        egress_pair_close(out);
        return -1;
    }
    /* our own check that the sandbox never gets the host's namespace */
    struct stat a, b;
    if (fstat(out->sandbox_ns, &a) != 0 || fstat(root_ns, &b) != 0 || a.st_ino == b.st_ino) {
        snprintf(errbuf, errlen, "the sandbox network namespace is the host's");
        egress_pair_close(out);
        return -1;
    }
    return 0;
}
