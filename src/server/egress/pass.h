/* The proxy pass of a session: HMAC-SHA256 over the session id and its creation time with a
 * secret kept in the state directory (0600), so a pass is useless for any other session and
 * for a later session that happens to get the same id, and stays the same across restarts. */
#ifndef AIRLOCKD_EGRESS_PASS_H
#define AIRLOCKD_EGRESS_PASS_H

#include <stdbool.h>
#include <stddef.h>

#define EGRESS_SECRET_LEN 32
#define EGRESS_PASS_LEN 32 /* hex characters */

/* Reads <state_dir>/egress.key, creating it with fresh random bytes when missing. Refuses a
 * key file that is not a regular 0600 file of the right size. */
int egress_secret_load(const char *state_dir, unsigned char key[EGRESS_SECRET_LEN], char *err,
                       size_t errlen);

/* A key every node of a fleet derives alike from the fleet's secret (HMAC-SHA256 of a fixed
 * label): the passes it makes are the same on every node, so a sandbox restored from a memory
 * image on another node than the one that made it (its proxy variables are in its processes'
 * memory) is let out by that node's proxy. false when the HMAC failed. */
bool egress_secret_derive(const char *fleet_secret, unsigned char key[EGRESS_SECRET_LEN]);

/* The pass of a session: 32 lowercase hex characters, NUL-terminated (false if the HMAC
 * failed; out is then unusable). */
bool egress_pass_make(const unsigned char key[EGRESS_SECRET_LEN], const char *session_id,
                      double created_at, char out[EGRESS_PASS_LEN + 1]);

/* Constant-time comparison of a presented pass with the expected one. */
bool egress_pass_equal(const char *presented, const char *expected);

#endif
