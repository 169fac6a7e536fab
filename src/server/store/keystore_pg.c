/* Self-service keys on a fleet's PostgreSQL, and the short cache of successful lookups. */
#include "store/keystore_pg.h"

#include "store/pg_listen.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CACHE_SLOTS 256

typedef struct {
    char hash[65];            /* "" when free */
    char key_id[KEY_ID_LEN + 1];
    char *tenant;
    double until;             /* monotonic seconds */
} cache_entry;

struct keystore_pg {
    pg_pool *db;
    pthread_mutex_t mu;
    double cache_s;
    cache_entry cache[CACHE_SLOTS];
    pg_listener *revoked; /* the fleet's revocations (NOTIFY airlock_keys, payload the key id) */
};

#define REVOKED_CHANNEL "airlock_keys"

static const char COLS[] = "key_id, tenant_id, name, created_at, revoked_at";

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Drops the cached lookups of key_id, or of every key (NULL). */
static void forget(keystore_pg *k, const char *key_id)
{
    pthread_mutex_lock(&k->mu);
    for (size_t i = 0; i < CACHE_SLOTS; i++) {
        if (k->cache[i].tenant && (!key_id || strcmp(k->cache[i].key_id, key_id) == 0)) {
            free(k->cache[i].tenant);
            k->cache[i].tenant = NULL;
        }
    }
    pthread_mutex_unlock(&k->mu);
}

/* A revocation on any node (or, NULL, revocations the listener may have missed). */
static void on_revoked(void *ctx, const char *key_id)
{
    forget(ctx, key_id);
}

keystore_pg *keystore_pg_new(pg_pool *db, double cache_s)
{
    keystore_pg *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->db = db;
    k->cache_s = cache_s;
    pthread_mutex_init(&k->mu, NULL);
    /* without the listener (no thread), the cache's time bound still holds */
    k->revoked = pg_listen_start(db, REVOKED_CHANNEL, on_revoked, k);
    return k;
}

void keystore_pg_free(keystore_pg *k)
{
    if (!k)
        return;
    pg_listen_stop(k->revoked);
    for (size_t i = 0; i < CACHE_SLOTS; i++)
        free(k->cache[i].tenant);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* The cache slot of a hash: its first two hex digits. */
static cache_entry *slot_of(keystore_pg *k, const char *hash)
{
    static const char hex[] = "0123456789abcdef";
    const char *a = strchr(hex, hash[0]), *b = strchr(hex, hash[1]);
    return &k->cache[a && b ? (size_t)((a - hex) * 16 + (b - hex)) % CACHE_SLOTS : 0];
}

bool keystore_pg_auth(keystore_pg *k, const char *hash, const char *key_id, char **tenant)
{
    *tenant = NULL;
    double now = mono();
    pthread_mutex_lock(&k->mu);
    cache_entry *e = slot_of(k, hash);
    if (e->tenant && e->until > now && CRYPTO_memcmp(e->hash, hash, 64) == 0 && strcmp(e->key_id, key_id) == 0)
        *tenant = strdup(e->tenant);
    pthread_mutex_unlock(&k->mu);
    if (*tenant)
        return true;
    const char *p[] = {key_id};
    PGresult *res = pg_query(k->db, "SELECT tenant_id, key_hash FROM api_keys WHERE key_id = $1 AND revoked_at IS NULL",
                             1, p);
    if (res && PQntuples(res) == 1 && strlen(PQgetvalue(res, 0, 1)) == 64 &&
        CRYPTO_memcmp(PQgetvalue(res, 0, 1), hash, 64) == 0)
        *tenant = strdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    if (!*tenant)
        return false;
    pthread_mutex_lock(&k->mu);
    free(e->tenant);
    e->tenant = strdup(*tenant);
    memcpy(e->hash, hash, 65);
    snprintf(e->key_id, sizeof e->key_id, "%s", key_id);
    e->until = now + k->cache_s;
    pthread_mutex_unlock(&k->mu);
    return true;
}

static json_t *row_record(PGresult *res, int i)
{
    bool revoked = !PQgetisnull(res, i, 4);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "asb_%s_\xE2\x80\xA6", PQgetvalue(res, i, 0));
    return json_pack("{s:s,s:s,s:s,s:f,s:o,s:b,s:s}", "key_id", PQgetvalue(res, i, 0), "tenant_id",
                     PQgetvalue(res, i, 1), "name", PQgetvalue(res, i, 2), "created_at", atof(PQgetvalue(res, i, 3)),
                     "revoked_at", revoked ? json_real(atof(PQgetvalue(res, i, 4))) : json_null(), "active", !revoked,
                     "prefix", prefix);
}

static json_t *get_record(keystore_pg *k, const char *key_id)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT %s FROM api_keys WHERE key_id = $1", COLS);
    const char *p[] = {key_id};
    PGresult *res = pg_query(k->db, sql, 1, p);
    json_t *rec = res && PQntuples(res) == 1 ? row_record(res, 0) : NULL;
    PQclear(res);
    return rec;
}

int keystore_pg_create(keystore_pg *k, const char *tenant, const char *name, json_t **record, int *active)
{
    char max[16];
    snprintf(max, sizeof max, "%d", KEYSTORE_MAX_ACTIVE);
    for (int attempt = 0; attempt < 5; attempt++) {
        char key[KEYSTORE_KEY_MAX], hash[65], key_id[KEY_ID_LEN + 1];
        if (!keystore_new_key(key) || !keystore_hash(key, strlen(key), hash)) {
            OPENSSL_cleanse(key, sizeof key);
            return KS_ERROR;
        }
        memcpy(key_id, key + 4, KEY_ID_LEN);
        key_id[KEY_ID_LEN] = '\0';
        const char *p[] = {key_id, tenant, name, hash, max};
        char *v = pg_value(k->db, "SELECT airlock_key_insert($1, $2, $3, $4, $5::integer)", 5, p);
        OPENSSL_cleanse(hash, sizeof hash);
        int n = v ? atoi(v) : -3;
        free(v);
        if (n == -1) {
            json_t *rec = get_record(k, key_id);
            if (rec) {
                json_object_set_new(rec, "api_key", json_string(key));
                json_object_set_new(rec, "note", json_string(KEYSTORE_NOTE));
            }
            OPENSSL_cleanse(key, sizeof key);
            *record = rec;
            return rec ? KS_OK : KS_ERROR;
        }
        OPENSSL_cleanse(key, sizeof key);
        if (n >= 0) {
            *active = n;
            return KS_LIMIT;
        }
        if (n != -2) /* -2: a key id clash, tried again with a new key */
            return KS_ERROR;
    }
    return KS_ERROR;
}

json_t *keystore_pg_list(keystore_pg *k, const char *tenant)
{
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT %s FROM api_keys%s ORDER BY created_at, key_id", COLS,
             tenant ? " WHERE tenant_id = $1" : "");
    const char *p[] = {tenant};
    PGresult *res = pg_query(k->db, sql, tenant ? 1 : 0, tenant ? p : NULL);
    if (!res)
        return NULL;
    json_t *arr = json_array();
    for (int i = 0; i < PQntuples(res); i++)
        json_array_append_new(arr, row_record(res, i));
    PQclear(res);
    return arr;
}

int keystore_pg_revoke(keystore_pg *k, const char *tenant, const char *key_id, bool keep_last, json_t **record)
{
    const char *p[] = {key_id, tenant, keep_last ? "true" : "false"};
    char *v = pg_value(k->db, "SELECT airlock_key_revoke($1, $2, $3::boolean)", 3, p);
    int n = v ? atoi(v) : -1;
    free(v);
    if (n == 1)
        return KS_NOT_FOUND;
    if (n == 2)
        return KS_LAST_KEY;
    if (n != 0)
        return KS_ERROR;
    /* this node forgets it at once, the others when the notification reaches them
     * (milliseconds), at the latest after cache_s */
    forget(k, key_id);
    const char *np[] = {REVOKED_CHANNEL, key_id};
    PQclear(pg_query(k->db, "SELECT pg_notify($1, $2)", 2, np));
    *record = get_record(k, key_id);
    return *record ? KS_OK : KS_ERROR;
}
