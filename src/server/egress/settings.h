/* The egress settings: the contract's SANDBOX_EGRESS_DNS and SANDBOX_EGRESS_LOG_DIR, our
 * bounds (SANDBOX_EGRESS_MAX_TUNNELS, _MAX_TUNNELS_TOTAL, _IDLE_SECONDS), and the test-only
 * AIRLOCK_TEST_EGRESS_MAP / _CA. Loaded once at start by config/egress.c, immutable after. */
#ifndef AIRLOCKD_EGRESS_SETTINGS_H
#define AIRLOCKD_EGRESS_SETTINGS_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#define EGRESS_TEST_MAP_MAX 32

/* Test only: a host name the proxy connects to at a fixed address instead of resolving it
 * (no DNS, no global-address check), e.g. pypi.org -> a loopback stand-in. */
typedef struct {
    char host[254];
    struct sockaddr_storage addr;
    socklen_t addr_len;
} egress_test_map;

typedef struct {
    const char *dns;         /* SANDBOX_EGRESS_DNS, or NULL: the host's resolv.conf */
    const char *log_dir;     /* SANDBOX_EGRESS_LOG_DIR, or NULL: memory only */
    int max_tunnels;         /* per session, connections open at once (32) */
    int max_tunnels_total;   /* the whole proxy (1024, or what RLIMIT_NOFILE allows) */
    bool total_given;        /* SANDBOX_EGRESS_MAX_TUNNELS_TOTAL was set: never lowered */
    int idle_seconds;        /* a tunnel without traffic this long is closed (300) */
    bool test;               /* AIRLOCK_TEST_EGRESS=1 */
    egress_test_map map[EGRESS_TEST_MAP_MAX];
    size_t nmap;
    const char *test_ca;     /* a PEM file trusted inside sandboxes (test only) */
} egress_settings;

#endif
