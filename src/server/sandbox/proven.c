/* A sandbox backend proven on this host, until the next boot (sandbox/proven.h). */
#include "sandbox/proven.h"

#include "log/log.h"
#include "sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* This boot's id into id (the kernel makes a new one at every boot); false when unreadable. */
static bool boot_id(char *id, size_t len)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    bool ok = f && fgets(id, (int)len, f) != NULL;
    if (f)
        fclose(f);
    if (ok)
        id[strcspn(id, "\n")] = '\0';
    return ok && id[0];
}

bool sbx_proven_name(const char *kind, const char *program, const char *state_dir, char *out, size_t len)
{
    char boot[64], text[PATH_MAX + 512];
    struct stat prog, self, state;
    if (!program || !boot_id(boot, sizeof boot) || stat(program, &prog) != 0 || stat("/proc/self/exe", &self) != 0 ||
        stat(state_dir, &state) != 0)
        return false;
    /* each file by path, device, inode, size and time: a replaced one is another */
    int n = snprintf(text, sizeof text, "kind=%s boot=%s program=%s:%llu:%llu:%lld:%lld.%09ld "
                     "airlockd=%llu:%llu:%lld:%lld.%09ld state=%llu", kind, boot, program,
                     (unsigned long long)prog.st_dev, (unsigned long long)prog.st_ino, (long long)prog.st_size,
                     (long long)prog.st_mtim.tv_sec, prog.st_mtim.tv_nsec, (unsigned long long)self.st_dev,
                     (unsigned long long)self.st_ino, (long long)self.st_size, (long long)self.st_mtim.tv_sec,
                     self.st_mtim.tv_nsec, (unsigned long long)state.st_dev);
    return n > 0 && (size_t)n < sizeof text && sbx_hashed_name("proven-", text, out, len) == 0;
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
