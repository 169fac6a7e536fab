/* pydantic v2's error objects and the lax field validators behind FastAPI's 422 answers. */
#include "api/validate.h"

#include "text/pystr.h"
#include "text/utf8.h"

#include <limits.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

json_t *verr(const char *type, json_t *loc, const char *msg, json_t *input, json_t *ctx)
{
    json_t *e = json_object();
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "loc", loc);
    json_object_set_new(e, "msg", json_string(msg));
    json_object_set(e, "input", input ? input : json_null());
    if (ctx)
        json_object_set_new(e, "ctx", ctx);
    return e;
}

json_t *loc_of(const char *where, const char *field)
{
    json_t *l = json_array();
    json_array_append_new(l, json_string(where));
    if (field)
        json_array_append_new(l, json_string(field));
    return l;
}

void verr_missing_body(json_t *errs)
{
    json_array_append_new(errs, verr("missing", loc_of("body", NULL), "Field required", NULL, NULL));
}

json_t *verr_json_invalid(size_t pos, const char *python_msg)
{
    json_t *loc = loc_of("body", NULL);
    json_array_append_new(loc, json_integer((json_int_t)pos));
    json_t *in = json_object();
    json_t *e = verr("json_invalid", loc, "JSON decode error", in, json_pack("{s:s}", "error", python_msg));
    json_decref(in);
    return e;
}

bool v_string(json_t *errs, json_t *body, const char *field, bool required, size_t max_chars,
              const char **out, size_t *out_len)
{
    json_t *v = json_object_get(body, field);
    *out = NULL;
    *out_len = 0;
    if (!v) {
        if (required)
            json_array_append_new(errs, verr("missing", loc_of("body", field), "Field required", body, NULL));
        return !required;
    }
    if (!json_is_string(v)) {
        json_array_append_new(errs, verr("string_type", loc_of("body", field),
                                         "Input should be a valid string", v, NULL));
        return false;
    }
    if (max_chars && utf8_count(json_string_value(v), json_string_length(v)) > max_chars) {
        char msg[96];
        snprintf(msg, sizeof msg, "String should have at most %zu characters", max_chars);
        json_array_append_new(errs, verr("string_too_long", loc_of("body", field), msg, v,
                                         json_pack("{s:I}", "max_length", (json_int_t)max_chars)));
        return false;
    }
    *out = json_string_value(v);
    *out_len = json_string_length(v);
    return true;
}

/* pydantic-core's str→int: trimmed, optional sign, digits (single underscores between
 * digits allowed), optionally a ".000" tail. Saturates instead of overflowing. */
static bool parse_int_str(const char *s, size_t n, long long *out)
{
    size_t a, b;
    py_strip(s, n, &a, &b);
    const char *dot = memchr(s + a, '.', b - a);
    if (dot) {
        for (const char *p = dot + 1; p < s + b; p++)
            if (*p != '0')
                return false;
        b = (size_t)(dot - s);
    }
    bool neg = false;
    if (a < b && (s[a] == '+' || s[a] == '-'))
        neg = s[a++] == '-';
    if (a >= b)
        return false;
    long long v = 0;
    bool prev_digit = false;
    for (size_t i = a; i < b; i++) {
        if (s[i] == '_') {
            if (!prev_digit || i + 1 >= b || s[i + 1] < '0' || s[i + 1] > '9')
                return false;
            prev_digit = false;
            continue;
        }
        if (s[i] < '0' || s[i] > '9')
            return false;
        prev_digit = true;
        if (v > (LLONG_MAX - 9) / 10)
            v = LLONG_MAX / 2; /* far out of any range we check */
        else
            v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return true;
}

static bool range_check(json_t *errs, json_t *loc, json_t *input, long long v, long long ge, long long le)
{
    char msg[96];
    if (v < ge) {
        snprintf(msg, sizeof msg, "Input should be greater than or equal to %lld", ge);
        json_array_append_new(errs, verr("greater_than_equal", loc, msg, input,
                                         json_pack("{s:I}", "ge", (json_int_t)ge)));
        return false;
    }
    if (v > le) {
        snprintf(msg, sizeof msg, "Input should be less than or equal to %lld", le);
        json_array_append_new(errs, verr("less_than_equal", loc, msg, input,
                                         json_pack("{s:I}", "le", (json_int_t)le)));
        return false;
    }
    json_decref(loc);
    return true;
}

static bool lax_int_value(json_t *errs, json_t *loc, json_t *v, long long *out)
{
    if (json_is_integer(v)) {
        *out = (long long)json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        /* beyond ±9e18 every double is a whole number */
        if (d > -9e18 && d < 9e18 && d != (double)(long long)d) {
            json_array_append_new(errs, verr("int_from_float", loc,
                "Input should be a valid integer, got a number with a fractional part", v, NULL));
            return false;
        }
        *out = d > 9e18 ? LLONG_MAX / 2 : d < -9e18 ? LLONG_MIN / 2 : (long long)d;
    } else if (json_is_boolean(v)) {
        *out = json_is_true(v) ? 1 : 0;
    } else if (json_is_string(v)) {
        if (!parse_int_str(json_string_value(v), json_string_length(v), out)) {
            json_array_append_new(errs, verr("int_parsing", loc,
                "Input should be a valid integer, unable to parse string as an integer", v, NULL));
            return false;
        }
    } else {
        json_array_append_new(errs, verr("int_type", loc, "Input should be a valid integer", v, NULL));
        return false;
    }
    json_decref(loc); /* only errors keep their loc */
    return true;
}

bool v_lax_int(json_t *errs, json_t *body, const char *field, long long def, long long ge,
               long long le, long long *out)
{
    json_t *v = json_object_get(body, field);
    if (!v) {
        *out = def;
        return true;
    }
    if (!lax_int_value(errs, loc_of("body", field), v, out))
        return false;
    return range_check(errs, loc_of("body", field), v, *out, ge, le);
}

bool v_query_int(json_t *errs, const char *field, const char *value, size_t len, long long *out)
{
    json_t *v = json_stringn(value, len);
    if (!v)
        v = json_string("");
    bool ok = lax_int_value(errs, loc_of("query", field), v, out);
    json_decref(v);
    return ok;
}

bool v_bool(json_t *errs, json_t *body, const char *field, bool def, bool *out)
{
    json_t *v = json_object_get(body, field);
    *out = def;
    if (!v || json_is_null(v))
        return true;
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return true;
    }
    json_array_append_new(errs, verr("bool_type", loc_of("body", field), "Input should be a valid boolean", v, NULL));
    return false;
}
