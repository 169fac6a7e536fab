/* Proxy passes: the per-server secret file and the HMAC that signs a session's pass. */
#include "egress/pass.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static int read_key(int fd, const char *path, unsigned char key[EGRESS_SECRET_LEN], char *err,
                    size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != EGRESS_SECRET_LEN ||
        (st.st_mode & 077) != 0 || st.st_uid != geteuid()) {
        snprintf(err, errlen, "%s: must be a %d-byte file of this user with mode 0600 (remove it "
                 "to make a new one)", path, EGRESS_SECRET_LEN);
        return -1;
    }
    size_t got = 0;
    while (got < EGRESS_SECRET_LEN) {
        ssize_t n = read(fd, key + got, EGRESS_SECRET_LEN - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(err, errlen, "cannot read %s: %s", path, n ? strerror(errno) : "short file");
            return -1;
        }
        got += (size_t)n;
    }
    return 0;
}

static int make_key(const char *path, unsigned char key[EGRESS_SECRET_LEN], char *err, size_t errlen)
{
    size_t got = 0;
    while (got < EGRESS_SECRET_LEN) {
        ssize_t n = getrandom(key + got, EGRESS_SECRET_LEN - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "getrandom: %s", strerror(errno));
            return -1;
        }
        got += (size_t)n;
    }
    /* written under a temporary name and linked in place, so a crash never leaves a short key */
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        snprintf(err, errlen, "state dir path too long");
        return -1;
    }
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    bool ok = write(fd, key, EGRESS_SECRET_LEN) == EGRESS_SECRET_LEN && fsync(fd) == 0;
    int saved = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (ok && link(tmp, path) != 0) {
        ok = false;
        saved = errno;
    }
    unlink(tmp);
    if (!ok) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(saved));
        return saved == EEXIST ? 1 : -1;
    }
    return 0;
}

int egress_secret_load(const char *state_dir, unsigned char key[EGRESS_SECRET_LEN], char *err,
                       size_t errlen)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/egress.key", state_dir) >= sizeof path) {
        snprintf(err, errlen, "state dir path too long");
        return -1;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            int rc = read_key(fd, path, key, err, errlen);
            close(fd);
            return rc;
        }
        if (errno != ENOENT) {
            snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
            return -1;
        }
        int rc = make_key(path, key, err, errlen);
        if (rc <= 0)
            return rc;
        /* another process made it meanwhile: read theirs */
    }
    return -1;
}

bool egress_secret_derive(const char *fleet_secret, unsigned char key[EGRESS_SECRET_LEN])
{
    static const char label[] = "airlock-egress-key";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    bool ok = HMAC(EVP_sha256(), fleet_secret, (int)strlen(fleet_secret), (const unsigned char *)label,
                   sizeof label - 1, md, &mdlen) &&
              mdlen >= EGRESS_SECRET_LEN;
    if (ok)
        memcpy(key, md, EGRESS_SECRET_LEN);
    OPENSSL_cleanse(md, sizeof md);
    return ok;
}

bool egress_pass_make(const unsigned char key[EGRESS_SECRET_LEN], const char *session_id,
                      double created_at, char out[EGRESS_PASS_LEN + 1])
{
    char msg[96];
    int n = snprintf(msg, sizeof msg, "airlock-egress-pass\n%s\n%.6f", session_id, created_at);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (n < 0 || (size_t)n >= sizeof msg ||
        !HMAC(EVP_sha256(), key, EGRESS_SECRET_LEN, (const unsigned char *)msg, (size_t)n, md, &mdlen) ||
        mdlen < EGRESS_PASS_LEN / 2)
        return false;
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < EGRESS_PASS_LEN / 2; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[EGRESS_PASS_LEN] = '\0';
    OPENSSL_cleanse(md, sizeof md);
    return true;
}

bool egress_pass_equal(const char *presented, const char *expected)
{
    size_t n = strlen(expected);
    if (strlen(presented) != n)
        return false;
    return CRYPTO_memcmp(presented, expected, n) == 0;
}
