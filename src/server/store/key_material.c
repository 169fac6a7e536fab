/* What the key stores (store/keystore.c: SQLite; store/keystore_pg.c: a fleet's PostgreSQL)
 * share about a key itself: a new random key and the SHA-256 that is all either stores. */
#include "store/key_material.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/random.h>

/* Lowercase hex SHA-256 of s. */
bool keystore_hash(const char *s, size_t n, char out[KEY_HASH_HEX + 1])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_Digest(s, n, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
        return false;
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[KEY_HASH_HEX] = '\0';
    OPENSSL_cleanse(md, sizeof md);
    return true;
}

static bool fill_random(unsigned char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(buf + got, n - got, 0);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

/* A new random key "asb_<10 base32>_<43 base64url>" into key. */
bool keystore_new_key(char key[KEYSTORE_KEY_MAX])
{
    static const char b32[] = "abcdefghijklmnopqrstuvwxyz234567";
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned char rnd[KEY_ID_LEN + 32];
    if (!fill_random(rnd, sizeof rnd))
        return false;
    memcpy(key, "asb_", 4);
    for (int i = 0; i < KEY_ID_LEN; i++)
        key[4 + i] = b32[rnd[i] & 31];
    key[4 + KEY_ID_LEN] = '_';
    /* 32 random bytes as unpadded URL-safe base64: 43 characters */
    char *o = key + 4 + KEY_ID_LEN + 1;
    const unsigned char *in = rnd + KEY_ID_LEN;
    for (int i = 0; i < 30; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
        *o++ = b64[v >> 18 & 63];
        *o++ = b64[v >> 12 & 63];
        *o++ = b64[v >> 6 & 63];
        *o++ = b64[v & 63];
    }
    unsigned v = (unsigned)in[30] << 16 | (unsigned)in[31] << 8;
    *o++ = b64[v >> 18 & 63];
    *o++ = b64[v >> 12 & 63];
    *o++ = b64[v >> 6 & 63];
    *o = '\0';
    OPENSSL_cleanse(rnd, sizeof rnd);
    return true;
}
