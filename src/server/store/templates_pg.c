/* A fleet's template recipes: one row each in PostgreSQL's templates table (migration 6). */
#include "store/templates_pg.h"

#include <stdlib.h>

int templates_pg_save(pg_pool *db, const char *owner, const char *name, const char *id, const json_t *recipe)
{
    char *text = json_dumps(recipe, JSON_COMPACT | JSON_SORT_KEYS);
    const char *p[] = {owner, name, id, text};
    char *v = text ? pg_value(db,
                              "INSERT INTO templates (owner, name, id, recipe) VALUES ($1, $2, $3, $4::jsonb)"
                              " ON CONFLICT (owner, name) DO UPDATE SET id = $3, recipe = $4::jsonb RETURNING id",
                              4, p)
                   : NULL;
    free(text);
    int rc = v ? 0 : -1;
    free(v);
    return rc;
}

int templates_pg_forget(pg_pool *db, const char *owner, const char *name)
{
    const char *p[] = {owner, name};
    char *v = pg_value(db, "WITH d AS (DELETE FROM templates WHERE owner = $1 AND name = $2 RETURNING id)"
                           " SELECT count(*) FROM d", 2, p);
    int rc = v ? 0 : -1;
    free(v);
    return rc;
}

json_t *templates_pg_find(pg_pool *db, const char *owner, const char *name)
{
    const char *p[] = {owner, name};
    char *v = pg_value(db,
                       "SELECT jsonb_build_object('owner', owner, 'id', id) || recipe FROM templates"
                       " WHERE owner IN ($1, '') AND name = $2 ORDER BY owner DESC LIMIT 1",
                       2, p);
    json_t *j = v ? json_loads(v, 0, NULL) : NULL;
    free(v);
    if (!json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}
