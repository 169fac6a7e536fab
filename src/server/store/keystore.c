/* Self-service keys on SQLite. Every operation runs under one mutex, so the
 * "max 10 active keys" and "last active key" checks and their writes are atomic. */
#include "store/keystore.h"
#include "log/log.h"
#include "store/key_material.h"
#include "store/keystore_pg.h"
#include "store/sqlite.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


struct keystore {
    sqlite3 *db;
    pthread_mutex_t mu;
    keystore_pg *pg; /* a fleet's key store in PostgreSQL instead (db NULL) */
};

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS api_keys ("
    " key_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, name TEXT NOT NULL,"
    " key_hash TEXT NOT NULL, created_at REAL NOT NULL, revoked_at REAL);"
    "CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys (tenant_id, created_at);";

static const char COLS[] = "key_id, tenant_id, name, created_at, revoked_at";


keystore *keystore_open_pg(pg_pool *db, double cache_s)
{
    keystore *ks = calloc(1, sizeof *ks);
    if (ks && !(ks->pg = keystore_pg_new(db, cache_s))) {
        free(ks);
        ks = NULL;
    }
    return ks;
}

keystore *keystore_open(const char *path, char *err, size_t errlen)
{
    keystore *ks = calloc(1, sizeof *ks);
    if (!ks) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    ks->db = sqlite_open_store(path, SCHEMA, "SANDBOX_KEYSTORE", err, errlen);
    if (!ks->db) {
        free(ks);
        return NULL;
    }
    pthread_mutex_init(&ks->mu, NULL);
    return ks;
}

void keystore_close(keystore *ks)
{
    if (!ks)
        return;
    if (ks->pg) {
        keystore_pg_free(ks->pg);
        free(ks);
        return;
    }
    sqlite3_close(ks->db);
    pthread_mutex_destroy(&ks->mu);
    free(ks);
}

static double epoch(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long us = (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
    return (double)us / 1e6;
}

/* The public record of the row the statement is on (columns as in COLS). */
static json_t *row_record(sqlite3_stmt *st)
{
    const char *id = (const char *)sqlite3_column_text(st, 0);
    const char *tenant = (const char *)sqlite3_column_text(st, 1);
    const char *name = (const char *)sqlite3_column_text(st, 2);
    bool revoked = sqlite3_column_type(st, 4) != SQLITE_NULL;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "asb_%s_\xE2\x80\xA6", id ? id : "");
    return json_pack("{s:s,s:s,s:s,s:f,s:o,s:b,s:s}", "key_id", id ? id : "", "tenant_id", tenant ? tenant : "",
                     "name", name ? name : "", "created_at", sqlite3_column_double(st, 3), "revoked_at",
                     revoked ? json_real(sqlite3_column_double(st, 4)) : json_null(), "active", !revoked,
                     "prefix", prefix);
}

/* The record of key_id (any tenant), or NULL. Caller holds mu. */
static json_t *get_record(keystore *ks, const char *key_id)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT %s FROM api_keys WHERE key_id = ?", COLS);
    sqlite3_stmt *st = NULL;
    json_t *rec = NULL;
    if (sqlite3_prepare_v2(ks->db, sql, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, key_id, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW)
            rec = row_record(st);
    }
    sqlite3_finalize(st);
    return rec;
}

/* Active keys of tenant, or -1 on error. Caller holds mu. */
static int count_active(keystore *ks, const char *tenant)
{
    sqlite3_stmt *st = NULL;
    int n = -1;
    if (sqlite3_prepare_v2(ks->db, "SELECT COUNT(*) FROM api_keys WHERE tenant_id = ? AND revoked_at IS NULL", -1,
                           &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, tenant, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int(st, 0);
    }
    sqlite3_finalize(st);
    return n;
}

bool keystore_auth(keystore *ks, const char *key, char **tenant, char key_id[KEY_ID_LEN + 1])
{
    *tenant = NULL;
    size_t n = key ? strlen(key) : 0;
    if (!ks || n < 4 + KEY_ID_LEN + 2 || n > 512 || memcmp(key, "asb_", 4) != 0 || key[4 + KEY_ID_LEN] != '_')
        return false;
    for (size_t i = 4; i < 4 + KEY_ID_LEN; i++)
        if (!((key[i] >= 'a' && key[i] <= 'z') || (key[i] >= '2' && key[i] <= '7')))
            return false;
    char given[KEY_HASH_HEX + 1];
    if (!keystore_hash(key, n, given))
        return false;
    memcpy(key_id, key + 4, KEY_ID_LEN);
    key_id[KEY_ID_LEN] = '\0';
    if (ks->pg) {
        bool found = keystore_pg_auth(ks->pg, given, key_id, tenant);
        OPENSSL_cleanse(given, sizeof given);
        return found;
    }
    bool ok = false;
    pthread_mutex_lock(&ks->mu);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(ks->db, "SELECT tenant_id, key_hash FROM api_keys WHERE key_id = ? AND revoked_at IS NULL",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, key_id, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW) {
            const char *t = (const char *)sqlite3_column_text(st, 0);
            const char *h = (const char *)sqlite3_column_text(st, 1);
            if (t && h && strlen(h) == KEY_HASH_HEX && CRYPTO_memcmp(h, given, KEY_HASH_HEX) == 0) {
                *tenant = strdup(t);
                ok = *tenant != NULL;
            }
        }
    } else {
        log_error("keystore: %s", sqlite3_errmsg(ks->db));
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&ks->mu);
    OPENSSL_cleanse(given, sizeof given);
    return ok;
}

int keystore_create(keystore *ks, const char *tenant, const char *name, json_t **record, int *active)
{
    *record = NULL;
    *active = 0;
    if (ks->pg)
        return keystore_pg_create(ks->pg, tenant, name, record, active);
    pthread_mutex_lock(&ks->mu);
    int rc = KS_ERROR;
    int n = count_active(ks, tenant);
    if (n < 0)
        goto out;
    if (n >= KEYSTORE_MAX_ACTIVE) {
        *active = n;
        rc = KS_LIMIT;
        goto out;
    }
    for (int attempt = 0; attempt < 5 && rc == KS_ERROR; attempt++) {
        char key[KEYSTORE_KEY_MAX], hash[KEY_HASH_HEX + 1];
        if (!keystore_new_key(key))
            break;
        char key_id[KEY_ID_LEN + 1];
        memcpy(key_id, key + 4, KEY_ID_LEN);
        key_id[KEY_ID_LEN] = '\0';
        if (!keystore_hash(key, strlen(key), hash)) {
            OPENSSL_cleanse(key, sizeof key);
            break;
        }
        sqlite3_stmt *st = NULL;
        int src = sqlite3_prepare_v2(ks->db, "INSERT INTO api_keys (key_id, tenant_id, name, key_hash, created_at)"
                                             " VALUES (?,?,?,?,?)", -1, &st, NULL);
        if (src == SQLITE_OK) {
            sqlite3_bind_text(st, 1, key_id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(st, 2, tenant, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(st, 3, name, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(st, 4, hash, -1, SQLITE_TRANSIENT);
            sqlite3_bind_double(st, 5, epoch());
            src = sqlite3_step(st);
        }
        sqlite3_finalize(st);
        OPENSSL_cleanse(hash, sizeof hash);
        if (src == SQLITE_DONE) {
            json_t *rec = get_record(ks, key_id);
            if (rec) {
                json_object_set_new(rec, "api_key", json_string(key));
                json_object_set_new(rec, "note", json_string(KEYSTORE_NOTE));
                *record = rec;
                rc = KS_OK;
            }
        } else if (src != SQLITE_CONSTRAINT) { /* a key id clash is retried with new ids */
            log_error("keystore: cannot store a key: %s", sqlite3_errmsg(ks->db));
            rc = KS_STORAGE;
        }
        OPENSSL_cleanse(key, sizeof key);
    }
out:
    pthread_mutex_unlock(&ks->mu);
    return rc;
}

json_t *keystore_list(keystore *ks, const char *tenant)
{
    if (ks->pg)
        return keystore_pg_list(ks->pg, tenant);
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT %s FROM api_keys%s ORDER BY created_at, key_id", COLS,
             tenant ? " WHERE tenant_id = ?" : "");
    json_t *arr = json_array();
    pthread_mutex_lock(&ks->mu);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(ks->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        if (tenant)
            sqlite3_bind_text(st, 1, tenant, -1, SQLITE_TRANSIENT);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW)
            json_array_append_new(arr, row_record(st));
    }
    if (rc != SQLITE_DONE) {
        log_error("keystore: cannot list keys: %s", sqlite3_errmsg(ks->db));
        json_decref(arr);
        arr = NULL;
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&ks->mu);
    return arr;
}

int keystore_revoke(keystore *ks, const char *tenant, const char *key_id, bool keep_last, json_t **record)
{
    *record = NULL;
    if (ks->pg)
        return keystore_pg_revoke(ks->pg, tenant, key_id, keep_last, record);
    pthread_mutex_lock(&ks->mu);
    int rc = KS_ERROR;
    json_t *rec = get_record(ks, key_id);
    if (!rec || (tenant && strcmp(json_string_value(json_object_get(rec, "tenant_id")), tenant) != 0)) {
        rc = KS_NOT_FOUND;
        goto out;
    }
    if (!json_is_true(json_object_get(rec, "active"))) {
        *record = rec; /* already revoked: unchanged */
        rec = NULL;
        rc = KS_OK;
        goto out;
    }
    if (keep_last) {
        int n = count_active(ks, json_string_value(json_object_get(rec, "tenant_id")));
        if (n < 0)
            goto out;
        if (n <= 1) {
            rc = KS_LAST_KEY;
            goto out;
        }
    }
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(ks->db, "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
                                 -1, &st, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_double(st, 1, epoch());
        sqlite3_bind_text(st, 2, key_id, -1, SQLITE_TRANSIENT);
        src = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    if (src != SQLITE_DONE) {
        log_error("keystore: cannot revoke a key: %s", sqlite3_errmsg(ks->db));
        rc = KS_STORAGE;
        goto out;
    }
    *record = get_record(ks, key_id);
    rc = *record ? KS_OK : KS_ERROR;
out:
    json_decref(rec);
    pthread_mutex_unlock(&ks->mu);
    return rc;
}
