/* The egress proxy login kept beside a memory image (image_login.h). */
#include "sandbox/image_login.h"

#include <jansson.h>
#include <openssl/crypto.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool login_path(const char *image_dir, char out[PATH_MAX])
{
    int n = snprintf(out, PATH_MAX, "%s/" SANDBOX_IMAGE_LOGIN, image_dir);
    return n > 0 && n < PATH_MAX;
}

int sandbox_image_keep_login(const sandbox_network *net, const char *image_dir, char *errbuf, size_t errlen)
{
    if (!net || !net->login)
        return 0;
    char path[PATH_MAX];
    if (!login_path(image_dir, path)) {
        snprintf(errbuf, errlen, "the memory image's path is too long");
        return -1;
    }
    json_t *o = json_pack("{s:s,s:s}", "user", net->login->user, "pass", net->login->pass);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    int fd = text ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
    size_t len = text ? strlen(text) : 0;
    bool ok = fd >= 0 && write(fd, text, len) == (ssize_t)len;
    int err = errno;
    if (fd >= 0 && close(fd) != 0)
        ok = false;
    if (text) {
        OPENSSL_cleanse(text, len);
        free(text);
    }
    if (!ok) {
        snprintf(errbuf, errlen, "cannot keep the egress login with the memory image: %s",
                 text ? strerror(err) : "out of memory");
        (void)unlink(path);
        return -1;
    }
    return 0;
}

/* s is n characters of set (and nothing else). */
static bool only(const char *s, size_t n, const char *set)
{
    return s && strlen(s) == n && strspn(s, set) == n;
}

int sandbox_image_login(const char *image_dir, sandbox_proxy_login *out)
{
    char path[PATH_MAX];
    memset(out, 0, sizeof *out);
    if (!login_path(image_dir, path))
        return -1;
    if (access(path, F_OK) != 0)
        return errno == ENOENT ? 0 : -1;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
    const char *user = json_string_value(json_object_get(o, "user"));
    const char *pass = json_string_value(json_object_get(o, "pass"));
    size_t ulen = user ? strlen(user) : 0;
    /* what session ids are (sbx_ and hex) and what passes are (egress/pass.h) */
    bool ok = ulen > 0 && ulen < sizeof out->user && strspn(user, "abcdefghijklmnopqrstuvwxyz0123456789_") == ulen &&
              only(pass, sizeof out->pass - 1, "0123456789abcdef");
    if (ok) {
        memcpy(out->user, user, ulen + 1);
        memcpy(out->pass, pass, sizeof out->pass);
    }
    json_decref(o); /* (jansson does not wipe the pass it read: it is in the image's pages too) */
    return ok ? 1 : -1;
}
