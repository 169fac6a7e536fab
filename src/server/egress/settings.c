/* Reading and checking the egress variables of the environment. */
#include "egress/settings.h"

#include "egress/addr.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int whole_number(const char *var, long def, long lo, long hi, int *out, char *errbuf,
                        size_t errlen)
{
    const char *s = getenv(var);
    *out = (int)def;
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        snprintf(errbuf, errlen, "%s: must be a whole number from %ld to %ld, got '%s'", var, lo,
                 hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* host=ip:port or host=[ip6]:port */
static int parse_map_entry(const char *e, size_t n, egress_test_map *m, char *errbuf, size_t errlen)
{
    const char *eq = memchr(e, '=', n);
    const char *colon = NULL;
    for (size_t i = 0; i < n; i++)
        if (e[i] == ':')
            colon = e + i;
    if (!eq || eq == e || !colon || colon < eq || (size_t)(eq - e) >= sizeof m->host)
        goto bad;
    size_t hl = (size_t)(eq - e);
    for (size_t i = 0; i < hl; i++) {
        char c = e[i];
        m->host[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    while (hl && m->host[hl - 1] == '.')
        hl--;
    m->host[hl] = '\0';
    char ip[64], port[8];
    const char *ip0 = eq + 1, *ip1 = colon;
    if (*ip0 == '[' && ip1 > ip0 + 1 && ip1[-1] == ']') {
        ip0++;
        ip1--;
    }
    size_t il = (size_t)(ip1 - ip0), pl = (size_t)(e + n - colon - 1);
    if (hl == 0 || il == 0 || il >= sizeof ip || pl == 0 || pl >= sizeof port)
        goto bad;
    memcpy(ip, ip0, il);
    ip[il] = '\0';
    memcpy(port, colon + 1, pl);
    port[pl] = '\0';
    char *end;
    long p = strtol(port, &end, 10);
    if (*end || p < 1 || p > 65535 || !egress_addr_parse(ip, (unsigned)p, &m->addr, &m->addr_len))
        goto bad;
    return 0;
bad:
    snprintf(errbuf, errlen, "AIRLOCK_TEST_EGRESS_MAP: each entry must look like host=ip:port, got '%.*s'",
             (int)n, e);
    return -1;
}

static int load_test(egress_settings *s, char *errbuf, size_t errlen)
{
    const char *gate = getenv("AIRLOCK_TEST_EGRESS");
    const char *map = getenv("AIRLOCK_TEST_EGRESS_MAP");
    const char *ca = getenv("AIRLOCK_TEST_EGRESS_CA");
    if (gate && *gate && strcmp(gate, "1") != 0 && strcmp(gate, "0") != 0) {
        snprintf(errbuf, errlen, "AIRLOCK_TEST_EGRESS: must be 1 or 0, got '%s'", gate);
        return -1;
    }
    s->test = gate && strcmp(gate, "1") == 0;
    const char *used = map && *map ? "AIRLOCK_TEST_EGRESS_MAP" : ca && *ca ? "AIRLOCK_TEST_EGRESS_CA" : NULL;
    if (used && !s->test) {
        snprintf(errbuf, errlen, "%s is a test-only setting (it bypasses DNS and the address checks "
                 "and trusts a private CA); refused unless AIRLOCK_TEST_EGRESS=1", used);
        return -1;
    }
    for (const char *p = map; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n) {
            if (s->nmap == EGRESS_TEST_MAP_MAX) {
                snprintf(errbuf, errlen, "AIRLOCK_TEST_EGRESS_MAP: at most %d entries", EGRESS_TEST_MAP_MAX);
                return -1;
            }
            if (parse_map_entry(p, n, &s->map[s->nmap], errbuf, errlen) != 0)
                return -1;
            s->nmap++;
        }
        p = comma ? comma + 1 : p + n;
    }
    if (ca && *ca) {
        struct stat st;
        if (stat(ca, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 1024 * 1024) {
            snprintf(errbuf, errlen, "AIRLOCK_TEST_EGRESS_CA: '%s' is not a readable PEM file of at most 1 MB", ca);
            return -1;
        }
        s->test_ca = ca;
    }
    return 0;
}

int egress_settings_load(egress_settings *s, char *errbuf, size_t errlen)
{
    memset(s, 0, sizeof *s);
    const char *dns = getenv("SANDBOX_EGRESS_DNS"), *dir = getenv("SANDBOX_EGRESS_LOG_DIR");
    s->dns = dns && *dns ? dns : NULL;
    s->log_dir = dir && *dir ? dir : NULL;
    if (whole_number("SANDBOX_EGRESS_MAX_TUNNELS", 32, 1, 100000, &s->max_tunnels, errbuf, errlen) ||
        whole_number("SANDBOX_EGRESS_MAX_TUNNELS_TOTAL", 1024, 1, 1000000, &s->max_tunnels_total,
                     errbuf, errlen) ||
        whole_number("SANDBOX_EGRESS_IDLE_SECONDS", 300, 1, 86400, &s->idle_seconds, errbuf, errlen))
        return -1;
    const char *total = getenv("SANDBOX_EGRESS_MAX_TUNNELS_TOTAL");
    s->total_given = total && *total;
    return load_test(s, errbuf, errlen);
}
