/* HAProxy's agent-check listener (fleet/agent.c): a thread answering each connection with the
 * line its reply function writes. It knows nothing of the fleet: nodes.c gives it the reply. */
#ifndef AIRLOCKD_FLEET_AGENT_H
#define AIRLOCKD_FLEET_AGENT_H

#include <stddef.h>

/* Writes the one line (with its newline) that HAProxy reads. */
typedef void (*fleet_agent_reply_fn)(void *ctx, char *out, size_t outlen);

struct fleet_agent;

/* Listens on host:port: the listener, or NULL with a message in err. */
struct fleet_agent *fleet_agent_start(fleet_agent_reply_fn reply, void *ctx, const char *host, int port, char *err,
                                     size_t errlen);
void fleet_agent_stop(struct fleet_agent *ag);

#endif
