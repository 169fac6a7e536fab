/* FastAPI/pydantic v2 style 422 validation errors: {"detail":[{type,loc,msg,input,ctx}]}
 * plus the lax field validators that produce them. */
#ifndef AIRLOCKD_JSON_ERRORS_H
#define AIRLOCKD_JSON_ERRORS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* One error object. loc and ctx (may be NULL) are stolen; input is borrowed (NULL → null). */
json_t *verr(const char *type, json_t *loc, const char *msg, json_t *input, json_t *ctx);

/* ["body"] / ["body", field] / ["query", field]. */
json_t *loc_of(const char *where, const char *field);

/* Appends the missing-body error ({"type":"missing","loc":["body"],...}). */
void verr_missing_body(json_t *errs);

/* json_invalid error for a body Python's json module rejects at code point pos. */
json_t *verr_json_invalid(size_t pos, const char *python_msg);

/* Field validators over a JSON object body. Each appends to errs on failure.
 * Missing required fields report the whole body as input, like pydantic. */
bool v_string(json_t *errs, json_t *body, const char *field, bool required, size_t max_chars,
              const char **out, size_t *out_len);
bool v_lax_int(json_t *errs, json_t *body, const char *field, long long def, long long ge,
               long long le, long long *out);

/* Ours: a JSON boolean (absent or null: def); anything else is a bool_type error. */
bool v_bool(json_t *errs, json_t *body, const char *field, bool def, bool *out);

/* The same lax int rules for a query parameter (value as a string). */
bool v_query_int(json_t *errs, const char *field, const char *value, size_t len, long long *out);

#endif
