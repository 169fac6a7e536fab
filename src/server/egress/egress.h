/* Egress for airlockd (contract 1.2, 1.9, 2.8): the service that starts and stops with the
 * server. Sessions with egress rules get, for each sandbox run, a private network whose only
 * endpoint is the proxy (egress/netns.c), proxy settings with the session's signed pass in
 * the sandbox's environment, and an event per connection attempt in the session's log.
 * Sessions without rules never touch it: their sandboxes have no network at all. */
#ifndef AIRLOCKD_EGRESS_EGRESS_H
#define AIRLOCKD_EGRESS_EGRESS_H

#include "egress/log.h"
#include "egress/settings.h"
#include "sandbox/sandbox.h"

#include <jansson.h>
#include <stddef.h>

typedef struct egress_service egress_service;
typedef struct egress_sandbox egress_sandbox;

/* Starts the proxy thread; loads (or creates) the pass secret <state_dir>/egress.key; makes
 * SANDBOX_EGRESS_LOG_DIR. fleet_secret (a fleet node's; NULL: none): sessions' passes are made
 * from a key derived from it, the same on every node (egress/pass.h), and those of the node's
 * own key are still let out (sandboxes started before). NULL with a message when anything is
 * wrong. */
egress_service *egress_open(const egress_settings *s, const char *state_dir, const char *fleet_secret, char *errbuf,
                            size_t errlen);

/* Every session's log from now on also tells sink (egress/log.h); set before serving. */
void egress_set_sink(egress_service *e, egress_log_sink sink, void *ctx);

/* Stops the proxy (ending every tunnel) and forgets every session. NULL is a no-op. */
void egress_close(egress_service *e);

/* The network of one sandbox run of a session with rules (its egress state is made on first
 * use). as: the proxy login the session's sandboxes are given, when its state is made now
 * (NULL: its own, the pass derived from its id and creation time; a sandbox restored from a
 * memory image: the login kept with the image, which its processes hold). NULL with a message
 * when the namespaces or the listener cannot be made. */
egress_sandbox *egress_sandbox_open(egress_service *e, const char *session_id, const char *tenant,
                                    double created_at, const json_t *rules,
                                    const sandbox_proxy_login *as, char *errbuf, size_t errlen);

/* What the sandbox backend needs (valid until egress_sandbox_close). */
const sandbox_network *egress_sandbox_network(const egress_sandbox *sb);

/* The run is over: the namespace goes, the listener and its tunnels are closed. NULL no-op. */
void egress_sandbox_close(egress_service *e, egress_sandbox *sb);

/* The last `limit` events of a session, oldest first (a new array; [] when it has none). */
json_t *egress_events(egress_service *e, const char *session_id, size_t limit);

/* The status page: the newest denied attempts of every live session, newest first, at most
 * limit (a new array), each event with its "session_id". */
json_t *egress_denials(egress_service *e, size_t limit);

/* The session is deleted or expired: its pass stops working at once, its listeners, tunnels
 * and log file are closed. Safe to call under the registry's lock (it only takes egress's own
 * lock and wakes the proxy). ctx is the egress service. */
void egress_forget_session(void *ctx, const char *session_id);

#endif
