/* airlockd's settings (src/server/config/): each value parser's accepted and refused texts and
 * its error (naming the setting, never quoting a key), and config_load on a given argv and
 * environment: the defaults, flags over variables, and a bad value stopping the load. */
#include "check.h"
#include "config/config.h"
#include "config/parse.h"

#include <stdlib.h>
#include <string.h>

static char msg[512];
static const config_err E = {msg, sizeof msg};

static void test_whole(void)
{
    long v = -1;
    CHECK(config_whole(E, "X", "42", 1, 100, "things", &v) == 0 && v == 42);
    CHECK(config_whole(E, "X", " 7 ", 1, 100, "things", &v) == 0 && v == 7);
    CHECK(config_whole(E, "X", "0", 1, 100, "things", &v) == -1);
    CHECK(strcmp(msg, "X: must be a whole number of things from 1 to 100, got '0'") == 0);
    CHECK(config_whole(E, "X", "5s", 1, 100, "seconds", &v) == -1);
    CHECK(strstr(msg, "got '5s'") != NULL);
    CHECK(config_whole(E, "X", "", 0, 100, "things", &v) == -1);
    CHECK(config_whole(E, "X", "1.5", 0, 100, "things", &v) == -1);
    CHECK(config_whole(E, "X", "99999999999999999999", 0, 100, "things", &v) == -1);
    long long b = 0;
    CHECK(config_megabytes(E, "M", "3", 0, 10, &b) == 0 && b == 3LL * 1048576);
    CHECK(config_megabytes(E, "M", "11", 0, 10, &b) == -1);
    CHECK(strcmp(msg, "M: must be a whole number of MB from 0 to 10, got '11'") == 0);
}

static void test_positive_and_switch(void)
{
    double d = 0;
    CHECK(config_positive(E, "T", "0.5", &d) == 0 && d == 0.5);
    CHECK(config_positive(E, "T", "0", &d) == -1);
    CHECK(strcmp(msg, "T: must be a positive number, got '0'") == 0);
    CHECK(config_positive(E, "T", "-3", &d) == -1);
    CHECK(config_positive(E, "T", "inf", &d) == -1);
    CHECK(config_positive(E, "T", "nan", &d) == -1);
    CHECK(config_positive(E, "T", "3x", &d) == -1);
    bool on = false;
    CHECK(config_switch(E, "S", "1", NULL, &on) == 0 && on);
    CHECK(config_switch(E, "S", "0", NULL, &on) == 0 && !on);
    CHECK(config_switch(E, "S", "yes", NULL, &on) == -1);
    CHECK(strcmp(msg, "S: must be 1 or 0, got 'yes'") == 0);
    CHECK(config_switch(E, "S", "true", "do it", &on) == -1);
    CHECK(strcmp(msg, "S: must be 1 (do it) or 0, got 'true'") == 0);
    static const char *const kinds[] = {"a", "bb", NULL};
    int k = -1;
    CHECK(config_choice(E, "K", "bb", kinds, &k) == 0 && k == 1);
    CHECK(config_choice(E, "K", "c", kinds, &k) == -1);
    CHECK(strcmp(msg, "K: must be one of a, bb, got 'c'") == 0);
}

static int count_item(void *ctx, const char *s, size_t n)
{
    char *out = ctx;
    strncat(out, s, n);
    strcat(out, "|");
    return 0;
}

static int stop_item(void *ctx, const char *s, size_t n)
{
    (void)ctx;
    return n == 1 && s[0] == 'b' ? 7 : 0;
}

static void test_list_and_addresses(void)
{
    char out[128] = "";
    CHECK(config_list(" a , ,b\t,c ,", count_item, out) == 0 && strcmp(out, "a|b|c|") == 0);
    out[0] = '\0';
    CHECK(config_list(NULL, count_item, out) == 0 && out[0] == '\0');
    CHECK(config_list("a,b,c", stop_item, NULL) == 7);
    char *host = NULL;
    unsigned port = 0;
    CHECK(config_host_port(E, "--listen", "[::1]:8080", &host, &port) == 0 && strcmp(host, "::1") == 0 && port == 8080);
    free(host);
    CHECK(config_host_port(E, "--listen", ":0", &host, &port) == 0 && strcmp(host, "127.0.0.1") == 0 && port == 0);
    free(host);
    host = NULL;
    CHECK(config_host_port(E, "--listen", "localhost", &host, &port) == -1 && host == NULL);
    CHECK(strcmp(msg, "--listen: expected HOST:PORT, got 'localhost'") == 0);
    CHECK(config_host_port(E, "--listen", "h:65536", &host, &port) == -1);
    CHECK(config_host_port(E, "--listen", "h:", &host, &port) == -1);
    char *path = NULL;
    CHECK(config_sqlite(E, "DB", "sqlite:/tmp/x.db", &path) == 0 && strcmp(path, "/tmp/x.db") == 0);
    free(path);
    CHECK(config_sqlite(E, "DB", "postgres://x", &path) == -1);
    CHECK(strcmp(msg, "DB: expected sqlite:<path> (the only backend airlockd has), got 'postgres://x'") == 0);
    CHECK(config_sqlite(E, "DB", "sqlite:", &path) == -1);
    CHECK(config_http_url(E, "U", "https://example.org") == 0);
    CHECK(config_http_url(E, "U", "ftp://example.org") == -1);
}

/* A key's value is never quoted back, whatever the parser. */
static void test_secrets(void)
{
    CHECK(config_is_secret("SANDBOX_API_KEYS") && config_is_secret("SANDBOX_API_KEY") &&
          config_is_secret("SANDBOX_ADMIN_KEY") && !config_is_secret("SANDBOX_SESSION_TTL"));
    long v;
    CHECK(config_whole(E, "SANDBOX_API_KEY", "hunter2-secret", 1, 2, "x", &v) == -1);
    CHECK(strstr(msg, "SANDBOX_API_KEY: ") == msg && strstr(msg, "hunter2") == NULL);
}

static config_status load(config *c, char **env, int argc, char **argv)
{
    return config_load(c, argc, argv, env, msg, sizeof msg);
}

static void test_load_defaults_and_flags(void)
{
    config c;
    char *env[] = {"PATH=/usr/bin:/bin", "SANDBOX_API_KEYS=acme:k-acme, beta : k-beta", "SANDBOX_API_KEY=k-def",
                   "SANDBOX_SESSION_TTL=", "AIRLOCK_RUNSC=/env/runsc", NULL};
    char *argv[] = {"airlockd", "--listen=[::1]:0", "--runsc", "/flag/runsc", "--state-dir", "/tmp/s", NULL};
    CHECK(load(&c, env, 6, argv) == CONFIG_OK);
    CHECK(strcmp(c.listen_host, "::1") == 0 && c.port == 0 && strcmp(c.state_dir, "/tmp/s") == 0);
    CHECK(c.nkeys == 3 && c.ntenants == 3 && strcmp(c.tenants[1].name, "beta") == 0);
    CHECK(strcmp(c.keys[1].key, "k-beta") == 0 && c.keys[2].tenant == 2);
    CHECK(c.session_ttl == 1800 && c.quota_bytes == 512LL * 1048576); /* empty = the default */
    CHECK(c.paused_ttl == 604800); /* a paused session is kept 7 days */
    CHECK(c.http.max_connections == 4096 && c.http.body_memory == 256u << 20 && c.shutdown_grace == 70);
    CHECK(c.audit_retention_days == 90 && c.import_max_mb == 100 && strcmp(c.import_base_url, "https://github.com") == 0);
    CHECK(c.disk_total_bytes == 0 && c.disk_reserve_bytes == 1024LL * 1048576 && !c.session_state_off);
    CHECK(c.egress.max_tunnels == 32 && c.egress.max_tunnels_total == 1024 && !c.egress.total_given);
    CHECK(c.tenants[0].max_sessions == 10 && c.star.requests_per_minute == 120 && c.star.max_concurrent_exec == 4);
    /* the largest session a tenant may ask for (docs/server.md "Session sizes") */
    CHECK(c.star.max_memory_mb == 2048 && c.star.max_cpu_percent == 200 && c.star.max_disk_mb == 0 &&
          c.star.max_processes == 256 && c.tenants[0].max_memory_mb == 2048);
    CHECK(c.session_size.memory_mb == 256 && c.session_size.cpu_percent == 100 && c.session_size.max_processes == 64);
    CHECK(strcmp(c.sandbox.runsc, "/flag/runsc") == 0); /* the flag wins */
    CHECK(strcmp(c.sandbox.search_path, "/usr/bin:/bin") == 0 && c.sandbox.waiter == NULL);
    config_free(&c);

    char *env2[] = {"SANDBOX_API_KEY=k", "AIRLOCK_RUNSC=/env/runsc", "SANDBOX_SESSION_STATE=off",
                    "SANDBOX_TENANT_LIMITS={\"*\":{\"max_sessions\":3,\"max_cpus\":0.5},\"default\":{\"requests_per_minute\":9,"
                    "\"max_memory_mb\":4096,\"max_cpus\":4,\"max_disk_mb\":100,\"max_processes\":1000}}",
                    "SANDBOX_MAX_CONNECTIONS=100", "SANDBOX_EGRESS_MAX_TUNNELS_TOTAL=50", "SANDBOX_SESSION_MEMORY_MB=512",
                    "SANDBOX_SESSION_CPUS=1.5", "SANDBOX_SESSION_MAX_PROCESSES=100", "SANDBOX_PAUSED_TTL=60", NULL};
    char *argv2[] = {"airlockd", NULL};
    CHECK(load(&c, env2, 1, argv2) == CONFIG_OK);
    CHECK(strcmp(c.listen_host, "127.0.0.1") == 0 && c.port == 8000 && strcmp(c.sandbox.runsc, "/env/runsc") == 0);
    CHECK(c.session_state_off && c.http.max_connections == 100 && c.egress.total_given);
    CHECK(c.paused_ttl == 60);
    CHECK(c.session_size.memory_mb == 512 && c.session_size.cpu_percent == 150 && c.session_size.max_processes == 100);
    CHECK(c.tenants[0].max_sessions == 3 && c.tenants[0].requests_per_minute == 9 && c.star.max_sessions == 3);
    CHECK(c.tenants[0].max_memory_mb == 4096 && c.tenants[0].max_cpu_percent == 400 && c.tenants[0].max_disk_mb == 100 &&
          c.tenants[0].max_processes == 1000 && c.star.max_cpu_percent == 50 && c.star.max_memory_mb == 2048);
    tenant_cfg t;
    CHECK(config_runtime_tenant(&c, "late", &t) && t.max_sessions == 3 && t.requests_per_minute == 120);
    config_tenant_free(&t);
    config_free(&c);
}

/* gvisor unless asked otherwise: --isolation over SANDBOX_ISOLATION over SANDBOX_REQUIRE_GVISOR. */
/* SANDBOX_PAUSED_TTL: a positive number of seconds, or the start stops naming it. */
static void test_paused_ttl(void)
{
    config c;
    char *argv[] = {"airlockd", NULL};
    const char *bad[] = {"SANDBOX_PAUSED_TTL=0", "SANDBOX_PAUSED_TTL=-1", "SANDBOX_PAUSED_TTL=week"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *env[] = {"SANDBOX_API_KEY=k", (char *)bad[i], NULL};
        CHECK(load(&c, env, 1, argv) == CONFIG_INVALID);
        CHECK(strstr(msg, "SANDBOX_PAUSED_TTL: must be a positive number") == msg);
        config_free(&c);
    }
}

static void test_isolation(void)
{
    config c;
    char *argv[] = {"airlockd", NULL};
    char *plain[] = {"SANDBOX_API_KEY=k", NULL};
    CHECK(load(&c, plain, 1, argv) == CONFIG_OK);
    CHECK(c.sandbox.isolation == SANDBOX_ISOLATION_GVISOR && c.sandbox.isolation_by == NULL);
    config_free(&c);
    char *bw[] = {"SANDBOX_API_KEY=k", "SANDBOX_ISOLATION=bubblewrap", NULL};
    CHECK(load(&c, bw, 1, argv) == CONFIG_OK && c.sandbox.isolation == SANDBOX_ISOLATION_BUBBLEWRAP);
    CHECK(strcmp(c.sandbox.isolation_by, "SANDBOX_ISOLATION=bubblewrap") == 0);
    config_free(&c);
    char *flag[] = {"airlockd", "--isolation=auto", NULL};
    CHECK(load(&c, bw, 2, flag) == CONFIG_OK && c.sandbox.isolation == SANDBOX_ISOLATION_AUTO);
    CHECK(strcmp(c.sandbox.isolation_by, "--isolation auto") == 0);
    config_free(&c);
    char *old0[] = {"SANDBOX_API_KEY=k", "SANDBOX_REQUIRE_GVISOR=0", NULL};
    CHECK(load(&c, old0, 1, argv) == CONFIG_OK && c.sandbox.isolation == SANDBOX_ISOLATION_AUTO);
    CHECK(strcmp(c.sandbox.isolation_by, "SANDBOX_REQUIRE_GVISOR=0") == 0);
    config_free(&c);
    char *old1[] = {"SANDBOX_API_KEY=k", "SANDBOX_REQUIRE_GVISOR=1", NULL};
    CHECK(load(&c, old1, 1, argv) == CONFIG_OK && c.sandbox.isolation == SANDBOX_ISOLATION_GVISOR);
    config_free(&c);
    char *clash[] = {"SANDBOX_API_KEY=k", "SANDBOX_REQUIRE_GVISOR=1", "SANDBOX_ISOLATION=bubblewrap", NULL};
    CHECK(load(&c, clash, 1, argv) == CONFIG_INVALID);
    CHECK(strcmp(msg, "SANDBOX_REQUIRE_GVISOR: 1 refuses the weaker bubblewrap that SANDBOX_ISOLATION=bubblewrap "
                      "asks for") == 0);
    config_free(&c);
    char *bad[] = {"SANDBOX_API_KEY=k", "SANDBOX_ISOLATION=gVisor", NULL};
    CHECK(load(&c, bad, 1, argv) == CONFIG_INVALID);
    CHECK(strcmp(msg, "SANDBOX_ISOLATION: must be one of gvisor, bubblewrap, auto, got 'gVisor'") == 0);
    config_free(&c);
}

/* Each refusal names the setting; statuses tell main what to print. */
static void test_load_errors(void)
{
    config c;
    char *ok_env[] = {"SANDBOX_API_KEY=k", NULL};
    char *help[] = {"airlockd", "--help", NULL};
    CHECK(load(&c, ok_env, 2, help) == CONFIG_HELP);
    config_free(&c);
    char *unknown[] = {"airlockd", "--lisen", "x", NULL};
    CHECK(load(&c, ok_env, 3, unknown) == CONFIG_UNKNOWN_FLAG && strcmp(msg, "unknown option '--lisen'") == 0);
    config_free(&c);
    char *novalue[] = {"airlockd", "--unix", NULL};
    CHECK(load(&c, ok_env, 2, novalue) == CONFIG_BAD_FLAG && strcmp(msg, "--unix needs a value") == 0);
    config_free(&c);
    char *argv[] = {"airlockd", NULL};
    char *nokey[] = {"PATH=/bin", NULL};
    CHECK(load(&c, nokey, 1, argv) == CONFIG_INVALID && strstr(msg, "no API key configured") != NULL);
    config_free(&c);
    char *dup[] = {"SANDBOX_API_KEYS=a:very-secret-1,b:very-secret-1", NULL};
    CHECK(load(&c, dup, 1, argv) == CONFIG_INVALID && strstr(msg, "SANDBOX_API_KEYS: the same API key") == msg);
    CHECK(strstr(msg, "very-secret") == NULL);
    config_free(&c);
    char *badkey[] = {"SANDBOX_API_KEYS=no-colon-secret", NULL};
    CHECK(load(&c, badkey, 1, argv) == CONFIG_INVALID && strstr(msg, "no-colon-secret") == NULL);
    config_free(&c);
    char *admin[] = {"SANDBOX_API_KEY=k", "SANDBOX_ADMIN_KEY=short-admin-secret", NULL};
    CHECK(load(&c, admin, 1, argv) == CONFIG_INVALID);
    CHECK(strcmp(msg, "SANDBOX_ADMIN_KEY: must be at least 32 characters long") == 0);
    config_free(&c);
    char *gvisor[] = {"SANDBOX_API_KEY=k", "SANDBOX_REQUIRE_GVISOR=yes", NULL};
    CHECK(load(&c, gvisor, 1, argv) == CONFIG_INVALID);
    CHECK(strcmp(msg, "SANDBOX_REQUIRE_GVISOR: must be 1 (refuse to run without gVisor) or 0, got 'yes'") == 0);
    config_free(&c);
    char *mode[] = {"SANDBOX_API_KEY=k", "SANDBOX_EXEC_MODE=sessions", NULL};
    CHECK(load(&c, mode, 1, argv) == CONFIG_INVALID);
    CHECK(strcmp(msg, "SANDBOX_EXEC_MODE: must be session or command, got 'sessions'") == 0);
    config_free(&c);
    char *by_default[] = {"SANDBOX_API_KEY=k", NULL};
    CHECK(load(&c, by_default, 1, argv) == CONFIG_OK && c.sandbox.session_mode);
    config_free(&c);
    char *session[] = {"SANDBOX_API_KEY=k", "SANDBOX_EXEC_MODE=session", NULL};
    CHECK(load(&c, session, 1, argv) == CONFIG_OK && c.sandbox.session_mode);
    config_free(&c);
    char *command[] = {"SANDBOX_API_KEY=k", "SANDBOX_EXEC_MODE=command", NULL};
    CHECK(load(&c, command, 1, argv) == CONFIG_OK && !c.sandbox.session_mode);
    config_free(&c);
    char *tunnels[] = {"SANDBOX_API_KEY=k", "SANDBOX_EGRESS_IDLE_SECONDS=5s", NULL};
    CHECK(load(&c, tunnels, 1, argv) == CONFIG_INVALID);
    CHECK(strcmp(msg, "SANDBOX_EGRESS_IDLE_SECONDS: must be a whole number of seconds from 1 to 86400, got '5s'") == 0);
    config_free(&c);
    char *map[] = {"SANDBOX_API_KEY=k", "AIRLOCK_TEST_EGRESS_MAP=a=127.0.0.1:1", NULL};
    CHECK(load(&c, map, 1, argv) == CONFIG_INVALID && strstr(msg, "AIRLOCK_TEST_EGRESS_MAP is a test-only") == msg);
    config_free(&c);
    char *cpus[] = {"SANDBOX_API_KEY=k", "SANDBOX_SESSION_CPUS=0.25", NULL};
    CHECK(load(&c, cpus, 1, argv) == CONFIG_INVALID);
    CHECK(strcmp(msg, "SANDBOX_SESSION_CPUS: must be a number of CPUs from 0.1 to 1024 in steps of 0.1") == 0);
    config_free(&c);
    char *memory[] = {"SANDBOX_API_KEY=k", "SANDBOX_SESSION_MEMORY_MB=64", NULL};
    CHECK(load(&c, memory, 1, argv) == CONFIG_INVALID && strstr(msg, "SANDBOX_SESSION_MEMORY_MB") == msg);
    config_free(&c);
    char *limits[] = {"SANDBOX_API_KEY=k", "SANDBOX_TENANT_LIMITS={\"*\":{\"max_sessions\":true}}", NULL};
    CHECK(load(&c, limits, 1, argv) == CONFIG_INVALID);
    CHECK(strcmp(msg, "SANDBOX_TENANT_LIMITS: max_sessions for '*' must be a positive integer") == 0);
    config_free(&c);
    const char *bad_sizes[] = {"{\"*\":{\"max_memory_mb\":1.5}}", "{\"*\":{\"max_processes\":0}}",
                               "{\"*\":{\"max_cpus\":0.25}}", "{\"*\":{\"max_cpus\":\"2\"}}",
                               "{\"*\":{\"max_cpus\":0}}", "{\"*\":{\"max_disk_mb\":true}}"};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
        char var[128];
        snprintf(var, sizeof var, "SANDBOX_TENANT_LIMITS=%s", bad_sizes[i]);
        char *sized[] = {"SANDBOX_API_KEY=k", var, NULL};
        CHECK(load(&c, sized, 1, argv) == CONFIG_INVALID && strstr(msg, "SANDBOX_TENANT_LIMITS: max_") == msg);
        config_free(&c);
    }
    CHECK(strcmp(msg, "SANDBOX_TENANT_LIMITS: max_disk_mb for '*' must be a positive integer") == 0);
    char *url[] = {"SANDBOX_API_KEY=k", NULL};
    char *urlflag[] = {"airlockd", "--import-base-url=file:///x", NULL};
    CHECK(load(&c, url, 2, urlflag) == CONFIG_INVALID && strstr(msg, "--import-base-url: must be an http") != NULL);
    config_free(&c);
}

int main(void)
{
    test_whole();
    test_positive_and_switch();
    test_list_and_addresses();
    test_secrets();
    test_load_defaults_and_flags();
    test_load_errors();
    test_isolation();
    test_paused_ttl();
    return CHECK_SUMMARY();
}
