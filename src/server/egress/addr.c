/* The egress proxy's address checks: IPv4 and IPv6 special-purpose blocks (IANA registries),
 * v4-mapped normalisation, formatting and parsing of IP literals. */
#include "egress/addr.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    uint32_t net; /* host byte order */
    unsigned len;
} v4_block;

/* Everything that is not globally reachable unicast (RFC 6890 and successors). */
static const v4_block v4_denied[] = {
    {0x00000000u, 8},  /* 0.0.0.0/8 "this network" */
    {0x0a000000u, 8},  /* 10/8 private */
    {0x64400000u, 10}, /* 100.64/10 CGNAT */
    {0x7f000000u, 8},  /* 127/8 loopback */
    {0xa9fe0000u, 16}, /* 169.254/16 link-local, cloud metadata */
    {0xac100000u, 12}, /* 172.16/12 private */
    {0xc0000000u, 24}, /* 192.0.0/24 IETF protocol assignments */
    {0xc0000200u, 24}, /* 192.0.2/24 TEST-NET-1 */
    {0xc0586300u, 24}, /* 192.88.99/24 6to4 relay anycast */
    {0xc0a80000u, 16}, /* 192.168/16 private */
    {0xc6120000u, 15}, /* 198.18/15 benchmarking */
    {0xc6336400u, 24}, /* 198.51.100/24 TEST-NET-2 */
    {0xcb007100u, 24}, /* 203.0.113/24 TEST-NET-3 */
    {0xe0000000u, 4},  /* 224/4 multicast */
    {0xf0000000u, 4},  /* 240/4 reserved, 255.255.255.255 broadcast */
};

static bool v4_global(uint32_t a)
{
    for (size_t i = 0; i < sizeof v4_denied / sizeof v4_denied[0]; i++) {
        uint32_t mask = 0xffffffffu << (32 - v4_denied[i].len);
        if ((a & mask) == v4_denied[i].net)
            return false;
    }
    return true;
}

/* Only 2000::/3 is global unicast; inside it these blocks are not. */
static bool v6_global(const uint8_t *b)
{
    if ((b[0] & 0xe0) != 0x20)
        return false;
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] < 0x02) /* 2001::/23 IETF protocol (Teredo...) */
        return false;
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) /* 2001:db8::/32 docs */
        return false;
    if (b[0] == 0x20 && b[1] == 0x02) /* 2002::/16 6to4 */
        return false;
    if (b[0] == 0x3f && b[1] == 0xff && (b[2] & 0xf0) == 0x00) /* 3fff::/20 docs */
        return false;
    return true;
}

bool egress_addr_normalize(struct sockaddr_storage *ss, socklen_t *len)
{
    if (ss->ss_family == AF_INET)
        return true;
    if (ss->ss_family != AF_INET6)
        return false;
    struct sockaddr_in6 s6;
    memcpy(&s6, ss, sizeof s6);
    if (!IN6_IS_ADDR_V4MAPPED(&s6.sin6_addr))
        return true;
    struct sockaddr_in s4;
    memset(&s4, 0, sizeof s4);
    s4.sin_family = AF_INET;
    s4.sin_port = s6.sin6_port;
    memcpy(&s4.sin_addr, s6.sin6_addr.s6_addr + 12, 4);
    memset(ss, 0, sizeof *ss);
    memcpy(ss, &s4, sizeof s4);
    *len = sizeof s4;
    return true;
}

bool egress_addr_is_global(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in s4;
        memcpy(&s4, sa, sizeof s4);
        return v4_global(ntohl(s4.sin_addr.s_addr));
    }
    if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 s6;
        memcpy(&s6, sa, sizeof s6);
        return v6_global(s6.sin6_addr.s6_addr);
    }
    return false;
}

void egress_addr_format(const struct sockaddr *sa, char *buf, size_t len)
{
    const char *ok = NULL;
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in s4;
        memcpy(&s4, sa, sizeof s4);
        ok = inet_ntop(AF_INET, &s4.sin_addr, buf, (socklen_t)len);
    } else if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 s6;
        memcpy(&s6, sa, sizeof s6);
        ok = inet_ntop(AF_INET6, &s6.sin6_addr, buf, (socklen_t)len);
    }
    if (!ok)
        snprintf(buf, len, "?");
}

bool egress_addr_parse(const char *text, unsigned port, struct sockaddr_storage *ss,
                       socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in s4;
    struct sockaddr_in6 s6;
    memset(&s4, 0, sizeof s4);
    memset(&s6, 0, sizeof s6);
    if (inet_pton(AF_INET, text, &s4.sin_addr) == 1) {
        s4.sin_family = AF_INET;
        s4.sin_port = htons((uint16_t)port);
        memcpy(ss, &s4, sizeof s4);
        *len = sizeof s4;
        return true;
    }
    if (inet_pton(AF_INET6, text, &s6.sin6_addr) == 1) {
        s6.sin6_family = AF_INET6;
        s6.sin6_port = htons((uint16_t)port);
        memcpy(ss, &s6, sizeof s6);
        *len = sizeof s6;
        return true;
    }
    return false;
}
