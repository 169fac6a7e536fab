/* Unit test of the egress proxy's pure parts: the address checks (egress/addr), the request
 * head parser (egress/request, also fed 300,000 mutated and random heads), host matching
 * against rules (egress/policy), passes and the secret file (egress/pass), and the log ring
 * and file (egress/log). Built with ASan/UBSan and run by spec/server/units_spec.lua. */
#include "check.h"
#include "egress/addr.h"
#include "egress/log.h"
#include "egress/pass.h"
#include "egress/policy.h"
#include "egress/request.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* ---- addresses ------------------------------------------------------------------------ */

/* 1 global, 0 not; normalised first, as the proxy does */
static int global(const char *ip)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (!egress_addr_parse(ip, 443, &ss, &len) || !egress_addr_normalize(&ss, &len))
        return -1;
    return egress_addr_is_global((struct sockaddr *)&ss) ? 1 : 0;
}

static void test_addresses(void)
{
    static const struct {
        const char *ip;
        int global;
    } cases[] = {
        {"8.8.8.8", 1}, {"1.1.1.1", 1}, {"9.255.255.255", 1}, {"11.0.0.0", 1}, {"223.255.255.255", 1},
        {"0.0.0.0", 0}, {"0.1.2.3", 0}, {"10.0.0.0", 0}, {"10.255.255.255", 0},
        {"100.63.255.255", 1}, {"100.64.0.0", 0}, {"100.127.255.255", 0}, {"100.128.0.0", 1},
        {"127.0.0.1", 0}, {"127.255.255.254", 0}, {"169.254.169.254", 0}, {"169.253.255.255", 1},
        {"172.15.255.255", 1}, {"172.16.0.1", 0}, {"172.31.255.255", 0}, {"172.32.0.0", 1},
        {"192.0.0.1", 0}, {"192.0.2.1", 0}, {"192.88.99.1", 0}, {"192.168.1.1", 0}, {"192.169.0.1", 1},
        {"198.17.255.255", 1}, {"198.18.0.1", 0}, {"198.19.255.255", 0}, {"198.20.0.0", 1},
        {"198.51.100.7", 0}, {"203.0.113.9", 0}, {"224.0.0.1", 0}, {"239.255.255.250", 0},
        {"240.0.0.1", 0}, {"255.255.255.255", 0},
        {"::", 0}, {"::1", 0}, {"fe80::1", 0}, {"fc00::1", 0}, {"fd12:3456::1", 0}, {"ff02::1", 0},
        {"2001:db8::1", 0}, {"2002:c000:0204::1", 0}, {"2001::1", 0}, {"2001:1ff::1", 0},
        {"2001:200::1", 1}, {"2606:4700:4700::1111", 1}, {"2a00:1450:4001::1", 1},
        {"3fff::1", 0}, {"3fff:fff::1", 0}, {"3fff:1000::1", 1}, {"4000::1", 0}, {"64:ff9b::808:808", 0},
        {"::127.0.0.1", 0}, {"::ffff:127.0.0.1", 0}, {"::ffff:169.254.169.254", 0}, {"::ffff:10.1.2.3", 0},
        {"::ffff:8.8.8.8", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int g = global(cases[i].ip);
        if (g != cases[i].global)
            printf("  address %s: %d\n", cases[i].ip, g);
        CHECK(g == cases[i].global);
    }
    /* a v4-mapped address becomes IPv4 (connected to and logged as such) */
    struct sockaddr_storage ss;
    socklen_t len;
    char text[INET6_ADDRSTRLEN];
    CHECK(egress_addr_parse("::ffff:203.0.113.9", 443, &ss, &len) && egress_addr_normalize(&ss, &len));
    CHECK(ss.ss_family == AF_INET && len == sizeof(struct sockaddr_in));
    egress_addr_format((struct sockaddr *)&ss, text, sizeof text);
    CHECK(strcmp(text, "203.0.113.9") == 0);
    CHECK(ntohs(((struct sockaddr_in *)&ss)->sin_port) == 443);
    CHECK(!egress_addr_parse("pypi.org", 443, &ss, &len) && !egress_addr_parse("1.2.3", 443, &ss, &len));
    CHECK(!egress_addr_parse("[::1]", 443, &ss, &len));
}

/* ---- request heads ----------------------------------------------------------------------- */

static int parse(const char *head, egress_request *r)
{
    size_t n = strlen(head), end = egress_head_end(head, n);
    if (end == 0)
        return -2;
    return egress_request_parse(head, end, r);
}

static void test_requests(void)
{
    egress_request r;
    /* "sbx_0123456789ab:secret" */
    CHECK(parse("CONNECT PyPI.Org.:443 HTTP/1.1\r\nHost: pypi.org:443\r\n"
                "Proxy-Authorization: Basic c2J4XzAxMjM0NTY3ODlhYjpzZWNyZXQ=\r\n\r\n", &r) == 0);
    CHECK(r.connect && strcmp(r.host, "pypi.org") == 0 && r.port == 443 && r.auth);
    CHECK(strcmp(r.user, "sbx_0123456789ab") == 0 && strcmp(r.pass, "secret") == 0);
    CHECK(strcmp(r.target, "PyPI.Org.:443") == 0);
    CHECK(parse("CONNECT [::1]:443 HTTP/1.0\n\n", &r) == 0 && strcmp(r.host, "::1") == 0 && !r.auth);
    CHECK(parse("CONNECT 10.0.0.1:22 HTTP/1.1\r\n\r\n", &r) == 0 && r.port == 22);
    CHECK(parse("CONNECT h:0 HTTP/1.1\r\n\r\n", &r) == 0 && r.port == 0);
    CHECK(parse("GET http://x/y HTTP/1.1\r\nProxy-Authorization: Basic c2J4XzAxMjM0NTY3ODlhYjpzZWNyZXQ=\r\n\r\n", &r) == 0);
    CHECK(!r.connect && strcmp(r.method, "GET") == 0 && strcmp(r.target, "http://x/y") == 0 && r.auth);
    CHECK(parse("connect h:443 HTTP/1.1\r\n\r\n", &r) == 0 && !r.connect); /* methods are case-sensitive */
    /* malformed */
    const char *bad[] = {
        "CONNECT h HTTP/1.1\r\n\r\n", "CONNECT h: HTTP/1.1\r\n\r\n", "CONNECT :443 HTTP/1.1\r\n\r\n",
        "CONNECT h:65536 HTTP/1.1\r\n\r\n", "CONNECT h:-1 HTTP/1.1\r\n\r\n", "CONNECT h:4433333 HTTP/1.1\r\n\r\n",
        "CONNECT h:443 HTTP/2\r\n\r\n", "CONNECT h:443\r\n\r\n", "CONNECT  h:443 HTTP/1.1\r\n\r\n",
        "CONNECT h:443 HTTP/1.1 x\r\n\r\n", "CONNECT ::1:443 HTTP/1.1\r\n\r\n", "CONNECT [::1 HTTP/1.1\r\n\r\n",
        "CONNECT [::1]443 HTTP/1.1\r\n\r\n", "CONNECT ...:443 HTTP/1.1\r\n\r\n", " CONNECT h:443 HTTP/1.1\r\n\r\n",
        "CONNECT h:443 HTTP/1.1\r\nNoColon\r\n\r\n", "CONNECT h:443 HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
        "CONNECT h:443 HTTP/1.1\r\nBad Name: x\r\n\r\n", "CONNECT h:443 HTTP/1.1\r\n: empty\r\n\r\n",
        "CONNECT h:443 HTTP/1.1\r\nX: a\x01b\r\n\r\n", "\r\n\r\n", "C\x80NNECT h:443 HTTP/1.1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(bad[i], &r);
        if (rc != -1)
            printf("  accepted: %s\n", bad[i]);
        CHECK(rc == -1);
    }
    char nul[] = "CONNECT h:443 HTTP/1.1\r\nX: a\0b\r\n\r\n";
    CHECK(egress_request_parse(nul, sizeof nul - 1, &r) == -1);
    /* a host of 254 characters is too long, 253 fits */
    char longhost[400];
    snprintf(longhost, sizeof longhost, "CONNECT %.*s:443 HTTP/1.1\r\n\r\n", 254,
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    CHECK(parse(longhost, &r) == -1);
    snprintf(longhost, sizeof longhost, "CONNECT %.*s:443 HTTP/1.1\r\n\r\n", 253,
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    CHECK(parse(longhost, &r) == 0 && strlen(r.host) == 253);
    /* a long target is kept to 200 bytes for the log */
    char longget[600];
    memset(longget, 0, sizeof longget);
    strcpy(longget, "GET /");
    memset(longget + 5, 'x', 400);
    strcat(longget, " HTTP/1.1\r\n\r\n");
    CHECK(parse(longget, &r) == 0 && strlen(r.target) == EGRESS_TARGET_LOG_MAX);
    /* credentials that are not one well-formed Basic pass count as none */
    const char *auths[] = {
        "Proxy-Authorization: Bearer c2J4XzAxMjM0NTY3ODlhYjpzZWNyZXQ=\r\n",
        "Proxy-Authorization: Basic !!!\r\n", "Proxy-Authorization: Basic bm9jb2xvbg==\r\n",
        "Proxy-Authorization: Basic c2J4XzAxMjM0NTY3ODlhYjpzZWNyZXQ\r\n",
        "Proxy-Authorization: Basic c2J4XzAxMjM0NTY3ODlhYjpzZWNyZXQ=\r\nProxy-Authorization: Basic c2J4XzAxMjM0NTY3ODlhYjpzZWNyZXQ=\r\n",
        "Proxy-Authorization: Basic\r\n", "Proxy-Authorization: Basic =c2J4\r\n",
    };
    for (size_t i = 0; i < sizeof auths / sizeof auths[0]; i++) {
        char head[600];
        snprintf(head, sizeof head, "CONNECT h:443 HTTP/1.1\r\n%s\r\n", auths[i]);
        CHECK(parse(head, &r) == 0 && !r.auth && r.user[0] == '\0' && r.pass[0] == '\0');
    }
    CHECK(parse("CONNECT h:443 HTTP/1.1\r\nproxy-authorization:   basic  c2J4XzAxMjM0NTY3ODlhYjpzZWNyZXQ=  \r\n\r\n", &r) == 0 && r.auth);
    /* 64 headers are fine, 65 are not */
    char many[4096] = "CONNECT h:443 HTTP/1.1\r\n";
    for (int i = 0; i < 64; i++)
        strcat(many, "X-A: b\r\n");
    strcat(many, "\r\n");
    CHECK(parse(many, &r) == 0);
    many[strlen(many) - 2] = '\0';
    strcat(many, "X-A: b\r\n\r\n");
    CHECK(parse(many, &r) == -1);
    /* where a head ends */
    CHECK(egress_head_end("GET / HTTP/1.1\r\n", 16) == 0);
    CHECK(egress_head_end("a\r\n\r\nrest", 9) == 5);
    CHECK(egress_head_end("a\n\nrest", 7) == 3);
    CHECK(egress_head_end("a\r\n\n", 4) == 4);
    CHECK(egress_head_end("\n\n", 2) == 2);
    CHECK(egress_head_end("", 0) == 0);
}

/* Mutations of good heads and random bytes: the parser never reads outside what it is given
 * (ASan) and always answers 0 or -1; anything it accepts as CONNECT has a sane host. */
static void test_request_fuzz(void)
{
    static const char *seeds[] = {
        "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\nProxy-Authorization: Basic c2J4XzAxMjM0NTY3ODlhYjpzZWNyZXQ=\r\n\r\n",
        "CONNECT [2001:db8::1]:443 HTTP/1.0\n\n", "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
    };
    unsigned long long state = 88172645463325252ull;
    int accepted = 0, bad_host = 0;
    for (int i = 0; i < 300000; i++) {
        char buf[512];
        size_t n;
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        if (i % 5 == 0) { /* random bytes */
            n = (size_t)(state % sizeof buf);
            for (size_t k = 0; k < n; k++) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                buf[k] = (char)(state & 0xff);
            }
        } else { /* a seed with a few bytes changed, cut somewhere */
            const char *s = seeds[state % 3];
            n = strlen(s);
            memcpy(buf, s, n);
            for (int k = 0; k < 1 + (int)(state >> 60); k++) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                buf[state % n] = (char)((state >> 8) & 0xff);
            }
            n = n - (size_t)((state >> 20) % 4 == 0 ? (state >> 24) % n : 0);
        }
        char *heap = malloc(n ? n : 1); /* exactly n bytes, so ASan sees any overread */
        memcpy(heap, buf, n);
        size_t end = egress_head_end(heap, n);
        egress_request r;
        if (end && egress_request_parse(heap, end, &r) == 0) {
            accepted++;
            if (r.connect && (r.host[0] == '\0' || strlen(r.host) > EGRESS_HOST_MAX || r.port > 65535))
                bad_host++;
        }
        free(heap);
    }
    printf("  request fuzz: 300000 heads, %d accepted\n", accepted);
    CHECK(accepted > 0 && bad_host == 0);
}

/* ---- rules ------------------------------------------------------------------------------- */

static void test_rules(void)
{
    json_t *rules = json_pack("[s,s,s,s]", "pypi.org", "*.hf.co", "*", "*.a.example.com");
    CHECK(egress_host_allowed("pypi.org", rules));
    CHECK(!egress_host_allowed("pypi.org.evil", rules) && !egress_host_allowed("evil.pypi.org", rules));
    CHECK(!egress_host_allowed("xpypi.org", rules));
    CHECK(egress_host_allowed("cdn.hf.co", rules) && egress_host_allowed("a.b.c.hf.co", rules));
    CHECK(!egress_host_allowed("hf.co", rules) && !egress_host_allowed("xhf.co", rules));
    CHECK(!egress_host_allowed("anything", rules) && !egress_host_allowed("*", rules)); /* "*" matches nothing */
    CHECK(egress_host_allowed("b.a.example.com", rules) && !egress_host_allowed("a.example.com", rules));
    CHECK(!egress_host_allowed("b.example.com", rules));
    json_decref(rules);
}

/* ---- passes ------------------------------------------------------------------------------ */

static void test_passes(void)
{
    char dir[] = "/tmp/egress-unit-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    unsigned char k1[EGRESS_SECRET_LEN], k2[EGRESS_SECRET_LEN];
    char err[256] = "", path[256];
    snprintf(path, sizeof path, "%s/egress.key", dir);
    CHECK(egress_secret_load(dir, k1, err, sizeof err) == 0);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600 && st.st_size == EGRESS_SECRET_LEN);
    CHECK(egress_secret_load(dir, k2, err, sizeof err) == 0 && memcmp(k1, k2, sizeof k1) == 0);
    char a[EGRESS_PASS_LEN + 1], b[EGRESS_PASS_LEN + 1], c[EGRESS_PASS_LEN + 1], d[EGRESS_PASS_LEN + 1];
    CHECK(egress_pass_make(k1, "sbx_0123456789ab", 1700000000.123456, a));
    CHECK(egress_pass_make(k1, "sbx_0123456789ab", 1700000000.123456, b));
    CHECK(egress_pass_make(k1, "sbx_0123456789ac", 1700000000.123456, c));
    CHECK(egress_pass_make(k1, "sbx_0123456789ab", 1700000000.123457, d));
    CHECK(strlen(a) == EGRESS_PASS_LEN && strspn(a, "0123456789abcdef") == EGRESS_PASS_LEN);
    CHECK(strcmp(a, b) == 0 && strcmp(a, c) != 0 && strcmp(a, d) != 0);
    CHECK(egress_pass_equal(a, b) && !egress_pass_equal(c, a) && !egress_pass_equal("", a));
    char shorter[EGRESS_PASS_LEN + 1];
    memcpy(shorter, a, sizeof shorter);
    shorter[EGRESS_PASS_LEN - 1] = '\0';
    CHECK(!egress_pass_equal(shorter, a));
    k2[0] ^= 1;
    CHECK(egress_pass_make(k2, "sbx_0123456789ab", 1700000000.123456, b) && strcmp(a, b) != 0);
    /* a fleet's key: the same on every node from one secret, another from another secret */
    unsigned char f1[EGRESS_SECRET_LEN], f2[EGRESS_SECRET_LEN];
    CHECK(egress_secret_derive("fleet-secret-0123456789abcdef0123456789", f1));
    CHECK(egress_secret_derive("fleet-secret-0123456789abcdef0123456789", f2) && memcmp(f1, f2, sizeof f1) == 0);
    CHECK(egress_secret_derive("fleet-secret-0123456789abcdef012345678X", f2) && memcmp(f1, f2, sizeof f1) != 0);
    CHECK(memcmp(f1, k1, sizeof f1) != 0);
    /* a key file anyone else may read, or of the wrong size, is refused */
    CHECK(chmod(path, 0644) == 0);
    CHECK(egress_secret_load(dir, k2, err, sizeof err) == -1 && strstr(err, "mode 0600") != NULL);
    CHECK(chmod(path, 0600) == 0 && truncate(path, 5) == 0);
    CHECK(egress_secret_load(dir, k2, err, sizeof err) == -1);
    unlink(path);
    rmdir(dir);
}

/* ---- the log ----------------------------------------------------------------------------- */

static void test_log(void)
{
    char dir[] = "/tmp/egress-log-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char err[256] = "", path[300];
    egress_log *l = egress_log_open(dir, "sbx_000000000001", err, sizeof err);
    CHECK(l != NULL);
    for (int i = 1; i <= EGRESS_LOG_RING + 5; i++)
        egress_log_add(l, json_pack("{s:i,s:s}", "n", i, "host", "h\xc3\xa9"));
    CHECK(egress_log_count(l) == EGRESS_LOG_RING + 5);
    json_t *all = egress_log_last(l, 5000);
    CHECK(json_array_size(all) == EGRESS_LOG_RING);
    CHECK(json_integer_value(json_object_get(json_array_get(all, 0), "n")) == 6);
    CHECK(json_integer_value(json_object_get(json_array_get(all, EGRESS_LOG_RING - 1), "n")) == EGRESS_LOG_RING + 5);
    json_decref(all);
    json_t *three = egress_log_last(l, 3);
    CHECK(json_array_size(three) == 3 && json_integer_value(json_object_get(json_array_get(three, 0), "n")) == EGRESS_LOG_RING + 3);
    json_decref(three);
    snprintf(path, sizeof path, "%s/sbx_000000000001.jsonl", dir);
    FILE *f = fopen(path, "r");
    int lines = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        lines++;
    CHECK(lines == EGRESS_LOG_RING + 5);
    CHECK(f && strcmp(line, "{\"n\":1005,\"host\":\"h\xc3\xa9\"}\n") == 0);
    if (f)
        fclose(f);
    egress_log_close_file(l);
    egress_log_add(l, json_pack("{s:i}", "n", 0)); /* memory only now */
    struct stat st;
    CHECK(stat(path, &st) == 0);
    long long size = (long long)st.st_size;
    CHECK(egress_log_count(l) == EGRESS_LOG_RING + 6 && stat(path, &st) == 0 && st.st_size == size);
    egress_log_close(l);
    unlink(path);
    /* memory only from the start; a directory that is not there fails with its name */
    l = egress_log_open(NULL, "sbx_x", err, sizeof err);
    CHECK(l != NULL);
    egress_log_close(l);
    CHECK(egress_log_open("/nonexistent/dir", "sbx_x", err, sizeof err) == NULL && strstr(err, "/nonexistent/dir") != NULL);
    rmdir(dir);
}

int main(void)
{
    test_addresses();
    test_requests();
    test_request_fuzz();
    test_rules();
    test_passes();
    test_log();
    return CHECK_SUMMARY();
}
