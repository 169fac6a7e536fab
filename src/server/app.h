/* What every request handler needs: the configuration, the session registry, the tenants'
 * runtime limits, the isolation backend and the stores. main.c builds it once. */
#ifndef AIRLOCKD_APP_H
#define AIRLOCKD_APP_H

#include "config/config.h"
#include "domain/figures.h"
#include "domain/kernels.h"
#include "domain/limits.h"
#include "domain/pause.h"
#include "domain/sessions.h"
#include "domain/slots.h"
#include "domain/snapshots.h"
#include "domain/templates.h"
#include "domain/tenants.h"
#include "domain/warm.h"
#include "egress/egress.h"
#include "fleet/fleet.h"
#include "sandbox/sandbox.h"
#include "store/audit.h"
#include "store/keystore.h"

#include <stdatomic.h>

typedef struct app {
    const config *cfg;
    const char *state_dir; /* the claimed state directory (its real path) */
    tenants *tenants;      /* the configuration's tenants and those added at runtime */
    registry *reg;
    limits *lim;
    slots *slots;          /* the host-wide cap on commands running at once */
    sandbox_backend *sb;
    atomic_ulong exec_seq; /* makes sandbox names unique per command */
    audit_store *audit;    /* SANDBOX_AUDIT, or NULL */
    keystore *keys;        /* SANDBOX_KEYSTORE, or NULL */
    egress_service *egress; /* the egress proxy and the sessions' egress state */
    warm_pool *warm;       /* sandboxes booted ahead for sessions; NULL: every command cold */
    pg_pool *db;           /* a fleet's database (--database), or NULL */
    fleet *fleet;          /* this node's place in the fleet, or NULL */
    figures *figures;      /* per-session commands and released sandboxes' usage (ours) */
    disk_pool *disk;       /* the workspace disks (for their figures; the registry uses them) */
    templates *templates;  /* ours: templates built from Debian packages (domain/templates.h) */
    snapshots *snapshots;  /* ours: snapshots of sessions' workspaces (domain/snapshots.h) */
    pause_deps pause;      /* what pausing and resuming sessions use (domain/pause.h) */
    kernels *kernels;      /* ours: sessions' kernels (domain/kernels.h) */
} app;

#endif
