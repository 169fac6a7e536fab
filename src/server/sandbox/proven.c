/* A sandbox backend proven on this host, until the next boot (sandbox/proven.h). */
#include "sandbox/proven.h"

#include "log/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "<dev>:<ino>:<size>:<mtime>" of path (stat: through symlinks) after its tag; false if unreadable. */
static bool add_file(char *text, size_t len, const char *tag, const char *path, bool dev_only)
{
    struct stat st;
    if (!path || stat(path, &st) != 0)
        return false;
    size_t used = strlen(text);
    int n = dev_only ? snprintf(text + used, len - used, " %s=%llu", tag, (unsigned long long)st.st_dev)
                     : snprintf(text + used, len - used, " %s=%s:%llu:%llu:%lld:%lld.%09ld", tag, path,
                                (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
                                (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    return n > 0 && (size_t)n < len - used;
}

/* This boot's id (the kernel makes a new one at every boot) after "boot=". */
static bool add_boot_id(char *text, size_t len)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    char id[64] = "";
    bool ok = f && fgets(id, sizeof id, f) != NULL;
    if (f)
        fclose(f);
    id[strcspn(id, "\n")] = '\0';
    size_t used = strlen(text);
    int n = ok ? snprintf(text + used, len - used, " boot=%s", id) : -1;
    return n > 0 && (size_t)n < len - used && id[0];
}

bool sbx_proven_name(const char *kind, const char *program, const char *state_dir, char *out, size_t len)
{
    char text[4096];
    int n = snprintf(text, sizeof text, "kind=%s", kind);
    if (n < 0 || (size_t)n >= sizeof text || !add_boot_id(text, sizeof text) ||
        !add_file(text, sizeof text, "program", program, false) ||
        !add_file(text, sizeof text, "airlockd", "/proc/self/exe", false) ||
        !add_file(text, sizeof text, "state", state_dir, true))
        return false;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    if (EVP_Digest(text, strlen(text), md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen < 16 || len < 40)
        return false;
    int w = snprintf(out, len, "proven-");
    for (unsigned i = 0; i < 16 && w > 0; i++)
        w += snprintf(out + w, len - (size_t)w, "%02x", md[i]);
    return w > 0 && (size_t)w < len;
}

/* SBX_PROVEN_DIR, made when missing: a directory owned by root, mode 0700; false when it is
 * anything else (someone else's proofs are no proof). */
static bool proven_dir(bool make)
{
    if (make && mkdir(SBX_PROVEN_DIR, 0700) != 0 && errno != EEXIST)
        return false;
    struct stat st;
    return lstat(SBX_PROVEN_DIR, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 && (st.st_mode & 0077) == 0;
}

bool sbx_proven(const char *name)
{
    char path[256];
    struct stat st;
    return proven_dir(false) && snprintf(path, sizeof path, SBX_PROVEN_DIR "/%s", name) < (int)sizeof path &&
           lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0;
}

/* Removes every proof but keep when there are SBX_PROVEN_MAX or more (a host that rebuilds
 * airlockd or swaps runsc often): each costs an inode of tmpfs, and a lost one only a probe. */
static void bound_proofs(const char *keep)
{
    DIR *d = opendir(SBX_PROVEN_DIR);
    if (!d)
        return;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, "proven-", 7) == 0;
    if (n >= SBX_PROVEN_MAX) {
        rewinddir(d);
        while ((e = readdir(d)) != NULL)
            if (strncmp(e->d_name, "proven-", 7) == 0 && strcmp(e->d_name, keep) != 0)
                (void)unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

void sbx_proven_keep(const char *name)
{
    char path[256];
    if (!proven_dir(true) || snprintf(path, sizeof path, SBX_PROVEN_DIR "/%s", name) >= (int)sizeof path) {
        log_debug("cannot keep the sandbox probe's proof in " SBX_PROVEN_DIR ": the next start probes again");
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        log_debug("cannot keep the sandbox probe's proof %s: %s", path, strerror(errno));
    else
        close(fd);
    bound_proofs(name);
}
