/* A key's own material (store/key_material.c), shared by both key stores:
 * "asb_<key_id>_<secret>", of which only the SHA-256 of the whole key is stored. */
#ifndef AIRLOCKD_KEY_MATERIAL_H
#define AIRLOCKD_KEY_MATERIAL_H

#include <stdbool.h>
#include <stddef.h>

#define KEY_ID_LEN 10
#define KEYSTORE_KEY_MAX (4 + KEY_ID_LEN + 1 + 43 + 1)
#define KEY_HASH_HEX 64

/* The lowercase hex SHA-256 of s. */
bool keystore_hash(const char *s, size_t n, char out[KEY_HASH_HEX + 1]);
/* A new random key "asb_<10 base32>_<43 base64url>". */
bool keystore_new_key(char key[KEYSTORE_KEY_MAX]);

#endif
