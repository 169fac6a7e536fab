/* The egress section of the settings: SANDBOX_EGRESS_DNS and _LOG_DIR (the contract's), our
 * bounds, and the test-only AIRLOCK_TEST_EGRESS_MAP / _CA, refused unless AIRLOCK_TEST_EGRESS=1. */
#include "config/internal.h"

#include "egress/addr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAP_VAR "AIRLOCK_TEST_EGRESS_MAP"

/* host=ip:port or host=[ip6]:port */
static int parse_map_entry(const char *e, size_t n, egress_test_map *m)
{
    const char *eq = memchr(e, '=', n);
    const char *colon = NULL;
    for (size_t i = 0; i < n; i++)
        if (e[i] == ':')
            colon = e + i;
    if (!eq || eq == e || !colon || colon < eq || (size_t)(eq - e) >= sizeof m->host)
        return -1;
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
        return -1;
    memcpy(ip, ip0, il);
    ip[il] = '\0';
    memcpy(port, colon + 1, pl);
    port[pl] = '\0';
    char *end;
    long p = strtol(port, &end, 10);
    if (*end || p < 1 || p > 65535 || !egress_addr_parse(ip, (unsigned)p, &m->addr, &m->addr_len))
        return -1;
    return 0;
}

typedef struct {
    egress_settings *s;
    config_err err;
} map_ctx;

static int map_item(void *ctx, const char *e, size_t n)
{
    map_ctx *m = ctx;
    if (m->s->nmap == EGRESS_TEST_MAP_MAX)
        return config_fail(m->err, MAP_VAR, NULL, "at most %d entries", EGRESS_TEST_MAP_MAX);
    if (parse_map_entry(e, n, &m->s->map[m->s->nmap]) != 0)
        return config_fail(m->err, MAP_VAR, NULL, "each entry must look like host=ip:port, got '%.*s'", (int)n, e);
    m->s->nmap++;
    return 0;
}

static int load_test(egress_settings *s, const config_src *src)
{
    const char *map = config_var(src, MAP_VAR), *ca = config_var(src, "AIRLOCK_TEST_EGRESS_CA");
    if (config_var_switch(src, "AIRLOCK_TEST_EGRESS", NULL, &s->test))
        return -1;
    const char *used = map ? MAP_VAR : ca ? "AIRLOCK_TEST_EGRESS_CA" : NULL;
    if (used && !s->test) {
        snprintf(src->err.buf, src->err.len, "%s is a test-only setting (it bypasses DNS and the address checks "
                 "and trusts a private CA); refused unless AIRLOCK_TEST_EGRESS=1", used);
        return -1;
    }
    map_ctx m = {.s = s, .err = src->err};
    if (config_list(map, map_item, &m))
        return -1;
    if (ca) {
        struct stat st;
        if (stat(ca, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 1024 * 1024)
            return config_fail(src->err, "AIRLOCK_TEST_EGRESS_CA", NULL, "'%s' is not a readable PEM file of at most 1 MB",
                               ca);
        s->test_ca = ca;
    }
    return 0;
}

int config_load_egress(egress_settings *s, const config_src *src)
{
    memset(s, 0, sizeof *s);
    s->dns = config_var(src, "SANDBOX_EGRESS_DNS");
    s->log_dir = config_var(src, "SANDBOX_EGRESS_LOG_DIR");
    s->total_given = config_var(src, "SANDBOX_EGRESS_MAX_TUNNELS_TOTAL") != NULL;
    if (config_var_int(src, "SANDBOX_EGRESS_MAX_TUNNELS", 32, 1, 100000, "tunnels", &s->max_tunnels) ||
        config_var_int(src, "SANDBOX_EGRESS_MAX_TUNNELS_TOTAL", 1024, 1, 1000000, "tunnels", &s->max_tunnels_total) ||
        config_var_int(src, "SANDBOX_EGRESS_IDLE_SECONDS", 300, 1, 86400, "seconds", &s->idle_seconds))
        return -1;
    return load_test(s, src);
}
