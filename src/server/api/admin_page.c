/* GET /admin/ and /admin/{file}: the operator's status page, served from the copy embedded at
 * build time (api/admin_page.h). The page holds no secret: it asks for the admin key and sends
 * it as a header to the admin JSON routes. Its answers forbid every source but this server
 * (CSP: no inline script, no other origin), framing and type sniffing. */
#include "api/admin_page.h"
#include "api/handlers.h"

#include <string.h>

static const char *const PAGE_HEADERS[] = {
    "content-security-policy",
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-frame-options", "DENY",
    "x-content-type-options", "nosniff",
    "referrer-policy", "no-referrer",
    "cache-control", "no-store",
    NULL,
};

static const char *content_type(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (dot && strcmp(dot, ".html") == 0)
        return "text/html; charset=utf-8";
    if (dot && strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    if (dot && strcmp(dot, ".js") == 0)
        return "text/javascript; charset=utf-8";
    if (dot && strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    return "application/octet-stream";
}

void api_admin_page(app *a, http_request *r, const api_call *c)
{
    (void)a;
    if (strcmp(http_path(r), "/admin") == 0) {
        http_send_redirect(r, "/admin/");
        return;
    }
    const char *name = c->param ? c->param : "index.html";
    for (size_t i = 0; i < admin_page_n_files; i++) {
        const admin_page_file *f = &admin_page_files[i];
        if (strcmp(f->name, name) == 0) {
            http_send_bytes(r, 200, f->data, f->len, content_type(f->name), PAGE_HEADERS);
            return;
        }
    }
    http_send_detail(r, 404, "Not Found");
}
