/* The fleet's schema in PostgreSQL: versioned migrations a starting node applies in order. */
#ifndef AIRLOCKD_PG_SCHEMA_H
#define AIRLOCKD_PG_SCHEMA_H

#include "store/pg.h"

/* Brings the database to the newest schema version: under an advisory lock (nodes starting
 * at once wait for each other), each missing migration in its own transaction with its
 * schema_version row. 0, or -1 with a message in err. */
int pg_schema_migrate(pg_pool *p, char *err, size_t errlen);

#endif
