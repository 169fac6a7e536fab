/* Ours: a fleet's template recipes in PostgreSQL (the templates table), so that a template built
 * through any node can be built again on every other one (domain/templates.h). */
#ifndef AIRLOCKD_STORE_TEMPLATES_PG_H
#define AIRLOCKD_STORE_TEMPLATES_PG_H

#include "store/pg.h"

#include <jansson.h>

/* Records owner's template name with its id and recipe ({"packages", "setup"}): 0, or -1 (the
 * database could not be reached; logged). */
int templates_pg_save(pg_pool *db, const char *owner, const char *name, const char *id, const json_t *recipe);

/* Forgets owner's template name: 0, or -1. */
int templates_pg_forget(pg_pool *db, const char *owner, const char *name);

/* The recipe of owner's template name, else of the admin's (""): {"owner", "id", "packages",
 * "setup"} (a new reference), or NULL when there is none (or the database cannot be reached). */
json_t *templates_pg_find(pg_pool *db, const char *owner, const char *name);

#endif
