/* What the egress service knows of one session (private to egress/): its rules, pass, tenant
 * and log. Shared by request threads and the proxy thread, so it is reference counted; only
 * `revoked` changes after creation (set when the session is deleted or expires). */
#ifndef AIRLOCKD_EGRESS_SESSION_H
#define AIRLOCKD_EGRESS_SESSION_H

#include "egress/log.h"
#include "egress/pass.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct egress_session {
    atomic_int refs;
    atomic_bool revoked;
    char id[17];
    char user[17];                   /* the proxy user its sandboxes are given: id, or the
                                      * session's a restored memory image was saved in */
    char *tenant;
    json_t *rules;                   /* the session's expanded rules */
    char pass[EGRESS_PASS_LEN + 1];  /* the one its sandboxes are given */
    char node_pass[EGRESS_PASS_LEN + 1]; /* in a fleet: the node's own key's, still let out ("": none) */
    egress_log *log;
    int conns;                       /* proxy thread only: its connections open now */
    struct egress_session *next;     /* the service's table */
} egress_session;

static inline egress_session *egress_session_ref(egress_session *s)
{
    atomic_fetch_add(&s->refs, 1);
    return s;
}

/* Drops a reference; the last one closes the log file and frees the session. */
void egress_session_unref(egress_session *s);

#endif
