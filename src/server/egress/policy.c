/* Egress rules: normalising, expanding presets, checking them against a tenant's policy, and
 * matching a host against a session's rules. */
#include "egress/policy.h"

#include "text/pystr.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char *const PRESETS[][5] = {
    {"pypi", "pypi.org", "files.pythonhosted.org", NULL, NULL},
    {"npm", "registry.npmjs.org", NULL, NULL, NULL},
    {"github", "github.com", "codeload.github.com", "objects.githubusercontent.com", "raw.githubusercontent.com"},
    {"huggingface", "huggingface.co", "*.huggingface.co", "*.hf.co", NULL},
};

static void add_unique(json_t *out, const char *s, size_t n)
{
    size_t i;
    json_t *v;
    json_array_foreach(out, i, v) {
        if (json_string_length(v) == n && memcmp(json_string_value(v), s, n) == 0)
            return;
    }
    json_array_append_new(out, json_stringn(s, n));
}

json_t *egress_expand(const json_t *rules)
{
    json_t *out = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(rules, i, v) {
        if (!json_is_string(v))
            continue;
        size_t a, b;
        py_strip(json_string_value(v), json_string_length(v), &a, &b);
        char *r = strndup(json_string_value(v) + a, b - a);
        if (!r)
            continue;
        size_t n = strlen(r); /* an embedded NUL ends the rule; such a host can't exist */
        for (size_t k = 0; k < n; k++)
            r[k] = (char)tolower((unsigned char)r[k]);
        while (n && r[n - 1] == '.')
            r[--n] = '\0';
        bool preset = false;
        for (size_t p = 0; p < sizeof PRESETS / sizeof PRESETS[0]; p++) {
            if (strcmp(r, PRESETS[p][0]) == 0) {
                preset = true;
                for (size_t k = 1; k < 5 && PRESETS[p][k]; k++)
                    add_unique(out, PRESETS[p][k], strlen(PRESETS[p][k]));
            }
        }
        if (!preset && n)
            add_unique(out, r, n);
        free(r);
    }
    return out;
}

/* "*.example.com" covers strictly deeper names: host must end with ".example.com". */
static bool wildcard_contains(const char *wild, const char *name)
{
    const char *suffix = wild + 1; /* ".example.com" */
    size_t sl = strlen(suffix), nl = strlen(name);
    return nl > sl && strcmp(name + nl - sl, suffix) == 0;
}

bool egress_covered(const char *rule, const json_t *policy)
{
    bool rule_wild = strncmp(rule, "*.", 2) == 0;
    size_t i;
    const json_t *v;
    json_array_foreach(policy, i, v) {
        const char *p = json_string_value(v);
        if (!p)
            continue;
        if (strcmp(p, rule) == 0)
            return true;
        if (strncmp(p, "*.", 2) != 0)
            continue;
        /* a wildcard rule is inside a broader wildcard: compare their ".suffix" parts */
        if (rule_wild ? wildcard_contains(p, rule + 1) : wildcard_contains(p, rule))
            return true;
    }
    return false;
}

bool egress_host_allowed(const char *host, const json_t *rules)
{
    size_t i;
    const json_t *v;
    json_array_foreach(rules, i, v) {
        const char *r = json_string_value(v);
        if (!r || strcmp(r, "*") == 0) /* no allow-all rule: "*" is a literal no host has */
            continue;
        if (strncmp(r, "*.", 2) == 0 ? wildcard_contains(r, host) : strcmp(r, host) == 0)
            return true;
    }
    return false;
}

json_t *egress_refused(const json_t *expanded, const json_t *policy)
{
    json_t *out = json_array();
    size_t i;
    const json_t *v;
    json_array_foreach(expanded, i, v) {
        if (!egress_covered(json_string_value(v), policy))
            json_array_append(out, (json_t *)v);
    }
    return out;
}
