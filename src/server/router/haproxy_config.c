/* The HAProxy configuration text (router/haproxy_config.h). The session-id layout comes from
 * domain/session_id.h, so the router reads a slot where airlockd writes it. */
#include "router/haproxy_config.h"

#include <string.h>

/* HAProxy's own answers: airlockd's shape ({"detail": ...}), 503 with Retry-After. */
static const struct {
    int status;
    const char *detail;
    const char *retry_after;
} ANSWERS[] = {
    {400, "The router could not read this request.", NULL},
    {404, "Not Found", NULL},
    {408, "The request did not arrive in time.", NULL},
    {500, "The router failed on this request.", NULL},
    {502, "The node holding this request stopped answering.", NULL},
    {503, "No airlockd node can take this request right now; retry shortly.", "1"},
    {504, "The node holding this request did not answer in time.", NULL},
};

static void print_answers(FILE *out)
{
    fprintf(out, "    # HAProxy's own answers in airlockd's shape ({\"detail\": ...}), never its HTML pages\n");
    for (size_t i = 0; i < sizeof ANSWERS / sizeof ANSWERS[0]; i++) {
        fprintf(out, "    http-error status %d content-type application/json string \"{\\\"detail\\\": \\\"%s\\\"}\"",
                ANSWERS[i].status, ANSWERS[i].detail);
        if (ANSWERS[i].retry_after)
            fprintf(out, " hdr retry-after %s", ANSWERS[i].retry_after);
        fprintf(out, "\n");
    }
}

static void print_frontend(FILE *out, const router_config_opts *o)
{
    fprintf(out,
            "\nfrontend api\n"
            "    bind %s\n"
            "    # the path as the node will read it, before any rule looks at it: %%-encoded letters\n"
            "    # and digits decoded (a malformed %%-escape is refused: 400), '//', '/./' and '/../'\n"
            "    # folded\n"
            "    http-request normalize-uri percent-decode-unreserved strict\n"
            "    http-request normalize-uri path-merge-slashes\n"
            "    http-request normalize-uri path-strip-dot\n"
            "    http-request normalize-uri path-strip-dotdot full\n"
            "    # nothing under /v1/fleet/ is a client's but the accepting check: the node-to-node\n"
            "    # routes are on each node's own listener, and no spelling of them passes here either\n"
            "    http-request deny deny_status 404 if { path,url_dec -m beg /v1/fleet/ } !{ path /v1/fleet/accepting }\n"
            "    # a session's requests go to the node whose slot opens its id\n"
            "    acl session_path path_reg ^/v1/sessions/" SESSION_ID_PREFIX "[0-9a-f]{%d}(/|$)\n"
            "    http-request set-var(txn.slot) path,field(4,/),bytes(%d,%d) if session_path\n"
            "    # a session a drain moved: the map names its new node's backend (airlockd router\n"
            "    # follow keeps it current over the runtime API)\n"
            "    http-request set-var(txn.moved) path,field(4,/),map(%s) if session_path\n"
            "    use_backend %%[var(txn.moved)] if session_path { var(txn.moved) -m found }\n"
            "    use_backend slot_%%[var(txn.slot)] if session_path\n"
            "    acl create method POST\n"
            "    acl sessions_root path /v1/sessions\n"
            "    use_backend create if create sessions_root\n"
            "    default_backend any\n",
            o->bind, SESSION_ID_HEX, SESSION_ID_SLOT_AT, SESSION_ID_SLOT_DIGITS, o->map);
}

int router_print_config(FILE *out, const router_config_opts *o, const router_node *nodes, size_t n)
{
    fprintf(out,
            "# Printed by `airlockd router config` from the nodes table; docs/fleet.md explains each part.\n"
            "global\n"
            "    maxconn 4096\n"
            "    # HAProxy 2.6 counts http-request normalize-uri (below) as experimental\n"
            "    expose-experimental-directives\n"
            "    # expose-fd listeners: a reload (-x) takes the listening sockets over, refusing nothing;\n"
            "    # level admin: airlockd router follow sets map entries and servers through it\n"
            "    stats socket %s mode 600 level admin expose-fd listeners\n"
            "\n"
            "defaults\n"
            "    mode http\n"
            "    timeout connect 2s\n"
            "    timeout check 1s\n"
            "    timeout client 120s\n"
            "    timeout server 120s\n"
            "    timeout http-request 10s\n"
            "    option http-keep-alive\n",
            o->stats_socket);
    print_answers(out);
    print_frontend(out, o);
    fprintf(out,
            "\nbackend create\n"
            "    # a create a node refuses (503: draining, full, no database) or never received (its port\n"
            "    # closed) is retried on another node; never one that may have run. A node is up here\n"
            "    # exactly when its slot's backend routes to it (track); its weight is the share of its\n"
            "    # capacity still free, read from its agent every 500 ms.\n"
            "    balance roundrobin\n"
            "    option http-buffer-request\n"
            "    retry-on 503 conn-failure\n"
            "    retries 3\n"
            "    option redispatch 1\n");
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "    server %s %s weight 100 track slot_%02x/%s", nodes[i].id, nodes[i].addr, nodes[i].slot,
                nodes[i].id);
        if (nodes[i].agent_port > 0)
            fprintf(out, " agent-check agent-port %d agent-inter 500ms", nodes[i].agent_port);
        fprintf(out, "\n");
    }
    fprintf(out,
            "\nbackend any\n"
            "    # tenant-level requests: any live node answers from PostgreSQL (retried only when the\n"
            "    # connection was refused: POST /v1/keys must not run twice)\n"
            "    balance roundrobin\n"
            "    retry-on conn-failure\n"
            "    option redispatch 1\n");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "    server %s %s track slot_%02x/%s\n", nodes[i].id, nodes[i].addr, nodes[i].slot, nodes[i].id);
    for (size_t i = 0; i < n; i++) {
        fprintf(out,
                "\nbackend slot_%02x\n"
                "    # node %s; while it is down another node answers 503 / 410 from the database\n"
                "    option httpchk GET /healthz\n"
                "    default-server inter 500ms fall 2 rise 2\n"
                "    server %s %s check\n",
                nodes[i].slot, nodes[i].id, nodes[i].id, nodes[i].addr);
        for (size_t j = 0; j < n; j++)
            if (j != i)
                fprintf(out, "    server %s %s track slot_%02x/%s backup\n", nodes[j].id, nodes[j].addr,
                        nodes[j].slot, nodes[j].id);
    }
    return fflush(out) == 0 && !ferror(out) ? 0 : -1;
}
