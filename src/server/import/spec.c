/* Import spec parsing: the repo forms, ref and destination rules of contract 1.8. */
#include "import/spec.h"

#include "text/pystr.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MSG_NOT_GITHUB "Only GitHub repositories can be imported (https://github.com/owner/repo)."
#define MSG_FORM "Give the repository as owner/repo or https://github.com/owner/repo."
#define MSG_TREE "Use https://github.com/owner/repo or https://github.com/owner/repo/tree/<branch>."

#define MAX_SEGMENTS 64

typedef struct {
    const char *p;
    size_t n;
} span;

static bool seg_eq(span s, const char *lit)
{
    return s.n == strlen(lit) && memcmp(s.p, lit, s.n) == 0;
}

static bool seg_ieq(span s, const char *lit)
{
    return s.n == strlen(lit) && strncasecmp(s.p, lit, s.n) == 0;
}

static bool alnum(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* [A-Za-z0-9._-] */
static bool name_char(char c)
{
    return alnum(c) || c == '.' || c == '_' || c == '-';
}

/* ^[A-Za-z0-9][A-Za-z0-9-]{0,38}$ */
static bool valid_owner(span s)
{
    if (s.n < 1 || s.n > 39 || !alnum(s.p[0]))
        return false;
    for (size_t i = 1; i < s.n; i++)
        if (!alnum(s.p[i]) && s.p[i] != '-')
            return false;
    return true;
}

/* ^[A-Za-z0-9._-]{1,100}$, not "." or ".." */
static bool valid_name(span s)
{
    if (s.n < 1 || s.n > 100 || seg_eq(s, ".") || seg_eq(s, ".."))
        return false;
    for (size_t i = 0; i < s.n; i++)
        if (!name_char(s.p[i]))
            return false;
    return true;
}

/* ^[A-Za-z0-9._/-]{1,200}$ without "..", not starting or ending with "/" */
static bool valid_ref(span s)
{
    if (s.n < 1 || s.n > 200 || s.p[0] == '/' || s.p[s.n - 1] == '/')
        return false;
    for (size_t i = 0; i < s.n; i++) {
        if (!name_char(s.p[i]) && s.p[i] != '/')
            return false;
        if (i + 1 < s.n && s.p[i] == '.' && s.p[i + 1] == '.')
            return false;
    }
    return true;
}

/* ^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$ with no "." or ".." component */
static bool valid_dest(span s)
{
    size_t start = 0;
    if (s.n == 0)
        return false;
    for (size_t i = 0; i <= s.n; i++) {
        if (i < s.n && s.p[i] != '/') {
            if (!name_char(s.p[i]))
                return false;
            continue;
        }
        span comp = {s.p + start, i - start};
        if (comp.n == 0 || seg_eq(comp, ".") || seg_eq(comp, ".."))
            return false;
        start = i + 1;
    }
    return true;
}

/* Python's str.strip(). */
static span strip(const char *p, size_t n)
{
    size_t a, b;
    py_strip(p, n, &a, &b);
    span s = {p + a, b - a};
    return s;
}

/* Splits on "/" dropping empty pieces, like [p for p in s.split("/") if p]. Returns the
 * number of segments (capped at max; more than max reports max + 1). */
static size_t split(span s, span *out, size_t max)
{
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= s.n; i++) {
        if (i < s.n && s.p[i] != '/')
            continue;
        if (i > start) {
            if (n == max)
                return max + 1;
            out[n].p = s.p + start;
            out[n].n = i - start;
            n++;
        }
        start = i + 1;
    }
    return n;
}

/* A bare host like "github.com" or "gitlab.com" at the start of a scheme-less spec. */
static bool looks_like_host(span s)
{
    if (s.n < 3 || !memchr(s.p, '.', s.n) || s.p[0] == '.' || s.p[s.n - 1] == '.')
        return false;
    for (size_t i = 0; i < s.n; i++)
        if (!alnum(s.p[i]) && s.p[i] != '.' && s.p[i] != '-')
            return false;
    return true;
}

static bool github_host(span h)
{
    return seg_ieq(h, "github.com") || seg_ieq(h, "www.github.com");
}

/* Host of the authority part of a URL: userinfo and port removed. */
static span url_host(span auth)
{
    for (size_t i = auth.n; i > 0; i--) {
        if (auth.p[i - 1] == '@') {
            auth.p += i;
            auth.n -= i;
            break;
        }
    }
    const char *colon = memchr(auth.p, ':', auth.n);
    if (colon)
        auth.n = (size_t)(colon - auth.p);
    return auth;
}

static char *dup_span(span s)
{
    char *d = malloc(s.n + 1);
    if (d) {
        memcpy(d, s.p, s.n);
        d[s.n] = '\0';
    }
    return d;
}

/* *msg = a + s + b + c + d (s may hold NULs). IMPORT_BAD_REQUEST, or IMPORT_FAILED when out
 * of memory. */
static import_result fail(char **msg, size_t *msg_len, const char *a, span s, const char *b, span t, const char *c)
{
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    size_t total = la + s.n + lb + t.n + lc;
    char *m = malloc(total + 1);
    if (!m)
        return IMPORT_FAILED;
    char *w = m;
    memcpy(w, a, la);
    w += la;
    memcpy(w, s.p, s.n);
    w += s.n;
    memcpy(w, b, lb);
    w += lb;
    memcpy(w, t.p, t.n);
    w += t.n;
    memcpy(w, c, lc);
    m[total] = '\0';
    *msg = m;
    *msg_len = total;
    return IMPORT_BAD_REQUEST;
}

static import_result fail_text(char **msg, size_t *msg_len, const char *text)
{
    span none = {"", 0};
    return fail(msg, msg_len, text, none, "", none, "");
}

void import_spec_free(import_spec *s)
{
    free(s->owner);
    free(s->name);
    free(s->ref);
    free(s->dest);
    memset(s, 0, sizeof *s);
}

import_result import_spec_parse(const char *repo, size_t repo_len, const char *ref, size_t ref_len,
                                const char *path, size_t path_len, import_spec *out, char **msg,
                                size_t *msg_len)
{
    span none = {"", 0}, segs[MAX_SEGMENTS];
    span s = strip(repo, repo_len), rest = s;
    memset(out, 0, sizeof *out);
    *msg = NULL;
    *msg_len = 0;

    const char *sep = memmem(s.p, s.n, "://", 3);
    size_t nseg;
    if (sep) {
        span scheme = {s.p, (size_t)(sep - s.p)};
        span after = {sep + 3, s.n - (size_t)(sep + 3 - s.p)};
        size_t auth_len = 0;
        while (auth_len < after.n && after.p[auth_len] != '/' && after.p[auth_len] != '?' &&
               after.p[auth_len] != '#')
            auth_len++;
        span auth = {after.p, auth_len};
        if ((!seg_ieq(scheme, "https") && !seg_ieq(scheme, "http")) || !github_host(url_host(auth)))
            return fail_text(msg, msg_len, MSG_NOT_GITHUB);
        rest.p = after.p + auth_len;
        rest.n = after.n - auth_len;
        for (size_t i = 0; i < rest.n; i++) /* the query and fragment are not part of the path */
            if (rest.p[i] == '?' || rest.p[i] == '#') {
                rest.n = i;
                break;
            }
        nseg = split(rest, segs, MAX_SEGMENTS);
    } else {
        nseg = split(rest, segs, MAX_SEGMENTS);
        if (nseg >= 2 && looks_like_host(segs[0])) {
            if (!github_host(segs[0]))
                return fail_text(msg, msg_len, MSG_NOT_GITHUB);
            rest.p = segs[1].p;
            rest.n = s.n - (size_t)(segs[1].p - s.p);
            nseg = split(rest, segs, MAX_SEGMENTS);
        }
    }
    if (nseg < 2)
        return fail_text(msg, msg_len, MSG_FORM);
    span owner = segs[0], name = segs[1], url_ref = none;
    if (nseg > 2) {
        if (nseg < 4 || !seg_eq(segs[2], "tree"))
            return fail_text(msg, msg_len, MSG_TREE);
        /* everything after /tree/, slashes included (the segments were split on them) */
        url_ref.p = segs[3].p;
        url_ref.n = rest.n - (size_t)(segs[3].p - rest.p);
        while (url_ref.n && url_ref.p[url_ref.n - 1] == '/')
            url_ref.n--;
    }
    if (name.n >= 4 && memcmp(name.p + name.n - 4, ".git", 4) == 0)
        name.n -= 4;
    if (!valid_owner(owner) || !valid_name(name))
        return fail(msg, msg_len, "'", owner, "/", name, "' isn't a valid GitHub repository name.");

    span r = ref ? strip(ref, ref_len) : none;
    if (r.n == 0)
        r = url_ref;
    if (r.n == 0) {
        r.p = "HEAD";
        r.n = 4;
    }
    if (!valid_ref(r))
        return fail(msg, msg_len, "'", r, "' isn't a valid branch, tag or commit.", none, "");

    span d = path ? strip(path, path_len) : none;
    while (d.n && d.p[0] == '/') {
        d.p++;
        d.n--;
    }
    while (d.n && d.p[d.n - 1] == '/')
        d.n--;
    if (d.n == 0)
        d = name;
    if (!valid_dest(d))
        return fail(msg, msg_len, "'", d, "' isn't a valid folder name inside the workspace.", none, "");

    out->owner = dup_span(owner);
    out->name = dup_span(name);
    out->ref = dup_span(r);
    out->dest = dup_span(d);
    if (!out->owner || !out->name || !out->ref || !out->dest) {
        import_spec_free(out);
        return IMPORT_FAILED;
    }
    return IMPORT_OK;
}
