/* The end of an egress session's record (egress/session.h): the last reference, held by the
 * service's table, a sandbox run or a proxy listener, frees it. */
#include "egress/session.h"

#include <openssl/crypto.h>
#include <stdlib.h>

void egress_session_unref(egress_session *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    egress_log_close(s->log);
    json_decref(s->rules);
    free(s->tenant);
    OPENSSL_cleanse(s->pass, sizeof s->pass);
    OPENSSL_cleanse(s->node_pass, sizeof s->node_pass);
    free(s);
}
