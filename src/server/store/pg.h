/* The PostgreSQL connection pool of a fleet node (--database / SANDBOX_DATABASE_URL[_FILE]):
 * a few libpq connections shared by the request threads, each statement one round trip
 * with its parameters sent apart from the SQL. The URL's password never appears in a
 * message: libpq's errors are passed through pg_redact. */
#ifndef AIRLOCKD_PG_H
#define AIRLOCKD_PG_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct pg_pool pg_pool;

/* Connects once to check the URL; NULL with a message (no password in it) in err. */
pg_pool *pg_open(const char *url, unsigned nconns, char *err, size_t errlen);
void pg_close(pg_pool *p);

/* Runs one statement with text parameters (NULL = SQL NULL); the result when it succeeded
 * (PQclear it), else NULL (the error logged, at most once a second). Each connection prepares
 * a statement (by its text) the first time it runs it, up to a few dozen: build statements
 * whose values vary as parameters, not into the text. */
PGresult *pg_query(pg_pool *p, const char *sql, int nparams, const char *const *params);

/* pg_query for a statement returning one value: a malloc'd copy of row 0 column 0 (NULL on
 * failure, no row or SQL NULL). */
char *pg_value(pg_pool *p, const char *sql, int nparams, const char *const *params);

/* Runs SQL (several statements allowed, no parameters) on one connection held under the
 * advisory lock `lock_key`; 0 or -1 with a message in err. For the schema's migrations. */
int pg_exec_locked(pg_pool *p, long long lock_key, int (*fn)(PGconn *c, void *ctx, char *err, size_t errlen),
                   void *ctx, char *err, size_t errlen);

/* A new connection of its own (not the pool's) to the pool's database, e.g. for LISTEN;
 * check PQstatus, PQfinish it. */
PGconn *pg_connect(pg_pool *p);

/* Whether the last statement reached the database (false after a connection failure). */
bool pg_reachable(pg_pool *p);

/* msg with every occurrence of the URL's password replaced by "***", into out. */
void pg_redact(const pg_pool *p, const char *msg, char *out, size_t outlen);

#endif
