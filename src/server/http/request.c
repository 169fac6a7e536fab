/* What a handler reads of its request: method, decoded path, query, headers, body, the
 * client's socket, and the application's own record. */
#include "http/internal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

const char *http_method(const http_request *r) { return r->method; }
const char *http_path(const http_request *r) { return r->url; }

const char *http_raw_query(const http_request *r)
{
    const char *q = strchr(r->raw_uri, '?');
    return q ? q + 1 : NULL;
}

const char *http_body(const http_request *r, size_t *len)
{
    *len = r->body.len;
    return r->body.data ? r->body.data : "";
}

const char *http_header(const http_request *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

unsigned long long http_declared_length(const http_request *r, bool *chunked)
{
    *chunked = r->chunked;
    return r->declared;
}

void *http_app_data(http_request *r)
{
    return r->app;
}

void http_body_budget(const http_request *r, size_t *used, size_t *total)
{
    body_budget *b = &r->server->budget;
    pthread_mutex_lock(&b->mu);
    *used = b->used;
    *total = b->total;
    pthread_mutex_unlock(&b->mu);
}

int http_client_fd(const http_request *r)
{
    return r->slot ? r->slot->fd : -1;
}

typedef struct {
    const char *name;
    const char *val;
    size_t len;
    bool found;
} query_find;

static enum MHD_Result query_iter(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                  const char *value, size_t value_size)
{
    (void)kind;
    query_find *f = cls;
    if (key && key_size == strlen(f->name) && memcmp(key, f->name, key_size) == 0) {
        f->val = value ? value : ""; /* Starlette keeps the last occurrence */
        f->len = value ? value_size : 0;
        f->found = true;
    }
    return MHD_YES;
}

char *http_query(const http_request *r, const char *name, size_t *len)
{
    query_find f = {name, NULL, 0, false};
    MHD_get_connection_values_n(r->conn, MHD_GET_ARGUMENT_KIND, query_iter, &f);
    if (!f.found)
        return NULL;
    char *out = malloc(f.len + 1);
    if (!out)
        return NULL;
    memcpy(out, f.val, f.len);
    out[f.len] = '\0';
    *len = f.len;
    return out;
}
