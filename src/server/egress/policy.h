/* Egress rules (contract 2.8): normalisation, preset expansion, policy coverage and host
 * matching. */
#ifndef AIRLOCKD_EGRESS_H
#define AIRLOCKD_EGRESS_H

#include <jansson.h>
#include <stdbool.h>

/* Normalises and expands a list of rule strings (non-strings must be rejected before).
 * Returns a new array: presets expanded in order, duplicates removed keeping the first. */
json_t *egress_expand(const json_t *rules);

/* True when the (normalised) rule is covered by the expanded policy. */
bool egress_covered(const char *rule, const json_t *policy);

/* True when a concrete host name (lower-case, no trailing dot) matches one of the expanded
 * rules: equal to an exact rule, or strictly below a "*.example.com" rule (any depth, never
 * the apex "example.com"). A rule "*" matches nothing. */
bool egress_host_allowed(const char *host, const json_t *rules);

/* New array of the rules of `expanded` that the policy does not cover. */
json_t *egress_refused(const json_t *expanded, const json_t *policy);

#endif
