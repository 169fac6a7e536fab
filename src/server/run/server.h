/* The parts of a running airlockd, opened in order from its settings and closed in reverse:
 * the state directory, the sandbox backend (and its guard), the stores, the workspace disks,
 * egress, the tenants and their limits, the warm pool, the sessions, and the HTTP server. */
#ifndef AIRLOCKD_RUN_SERVER_H
#define AIRLOCKD_RUN_SERVER_H

#include "app.h"
#include "disk/pool.h"
#include "http/http.h"

typedef struct {
    app a;
    const config *cfg;
    char *state;        /* the claimed state directory's real path */
    int lock_fd;        /* holds the state directory for this server */
    char *state_file;   /* <state>/sessions.json when SANDBOX_SESSION_STATE names none */
    disk_pool *disk;
    registry_spares spares; /* how the sessions take and drop the warm pool's spares */
    registry_shared shared; /* a fleet's session registry (run/fleet.h) */
    struct mover *mover;    /* a fleet node's drain moves (drain/move.h), or NULL */
    char *audit_file;   /* <state>/audit.db: a fleet node's audit outbox when SANDBOX_AUDIT names none */
    http_server *srv;
    http_server *internal; /* a fleet node's node-to-node listener (run/fleet.c), or NULL */
    char err[512];      /* why a step failed */
} server;

/* Opens every part but the HTTP server; -1 with the reason in s->err. */
int server_open(server *s, const config *cfg);

/* Catches the signals (run/signals.h), starts the HTTP server and the session reaper, writes the port file and says where it
 * listens; -1 with the reason in s->err. */
int server_listen(server *s);

/* SIGTERM / SIGINT: stops accepting, lets what runs finish within the grace period (another
 * signal cuts it short), stops what is left, saves the sessions. false when requests still
 * run at the end: then the process must leave without freeing what they use
 * (server_abandon). */
bool server_stop(server *s);
void server_abandon(server *s, int status);

/* Closes what server_open and server_listen opened (any prefix of them). */
void server_close(server *s, int status);

#endif
