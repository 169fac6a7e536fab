/* Builds the sandbox's read-only root directory and its generated minimal /etc. */
#include "sandbox/rootfs.h"

#include "fs/walk.h"
#include "util/buf.h"
#include "../../agent/protocol.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Mount points (and the directories /etc needs) inside the root. */
static const char *const root_dirs[] = {
    "usr", "etc", "etc/ssl", "etc/ssl/certs", "etc/alternatives",
    "proc", "dev", "sys", "tmp", "workspace", "var", "run",
};

/* Top-level directories that merged-/usr hosts make symlinks into /usr. */
static const char *const top_links[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};

/* Host files copied verbatim when present: the loader cache and what bash, coreutils,
 * python3 and TLS clients read. Nothing with secrets or host identity. */
static const char *const copied_files[] = {
    "ld.so.cache", "debian_version", "protocols", "services", "mime.types", "shells",
    "ssl/openssl.cnf", "ssl/certs/ca-certificates.crt",
};

/* Host symlinks reproduced as-is (their targets live in /usr or /proc). */
static const char *const copied_links[] = {"localtime", "os-release"};

static const char passwd_text[] =
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    "sandboxuser:x:1000:1000:sandboxuser:/tmp:/bin/bash\n";
static const char group_text[] =
    "root:x:0:\n"
    "nogroup:x:65534:\n"
    "sandboxuser:x:1000:\n";
static const char hosts_text[] =
    "127.0.0.1\tlocalhost sandbox\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n";
static const char nsswitch_text[] =
    "passwd: files\n"
    "group: files\n"
    "shadow: files\n"
    "hosts: files dns\n"
    "networks: files\n"
    "protocols: files\n"
    "services: files\n";
static const char resolv_text[] = "# no network in the sandbox\n";
/* Debian's python is EXTERNALLY-MANAGED (PEP 668): without this `pip install` refuses to run.
 * Packages go to /workspace/.local (PIP_USER=1); /usr is read-only anyway. */
static const char pip_conf_text[] = "[global]\nbreak-system-packages = true\n";

/* The files of /etc written from the texts above, in a session's rootfs and a template's. */
static const struct {
    const char *rel;
    const char *text;
} generated_etc[] = {
    {"etc/passwd", passwd_text},     {"etc/group", group_text},
    {"etc/hosts", hosts_text},       {"etc/nsswitch.conf", nsswitch_text},
    {"etc/resolv.conf", resolv_text}, {"etc/hostname", "sandbox\n"},
    {"etc/pip.conf", pip_conf_text},
};

static int join(char *buf, size_t len, const char *a, const char *b)
{
    int n = snprintf(buf, len, "%s/%s", a, b);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

static int write_text(const char *root, const char *rel, const char *data, size_t len,
                      char *errbuf, size_t errlen)
{
    char path[PATH_MAX];
    if (join(path, sizeof path, root, rel) != 0) {
        snprintf(errbuf, errlen, "path too long: %s/%s", root, rel);
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(errbuf, errlen, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            snprintf(errbuf, errlen, "cannot write %s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    /* fchmod: the umask must not make the generated files unreadable for uid 1000. */
    if (fchmod(fd, 0644) != 0 || close(fd) != 0) {
        snprintf(errbuf, errlen, "cannot finish %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Copies host file src to root/rel; a missing source is skipped. */
static int copy_file(const char *src, const char *root, const char *rel, char *errbuf,
                     size_t errlen)
{
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 64 * 1024 * 1024) {
        close(fd);
        return 0;
    }
    size_t size = (size_t)st.st_size;
    buffer b;
    buf_init(&b, size); /* what the file held when looked at; a read error ends the copy */
    while (b.len < size && buf_read(&b, fd, size - b.len) > 0) {
    }
    close(fd);
    if (b.err) {
        buf_free(&b);
        snprintf(errbuf, errlen, "out of memory copying %s", src);
        return -1;
    }
    int rc = write_text(root, rel, b.data ? b.data : "", b.len, errbuf, errlen);
    buf_free(&b);
    return rc;
}

/* Recreates host symlink src at root/rel; a missing source is skipped. */
static int copy_link(const char *src, const char *root, const char *rel, char *errbuf,
                     size_t errlen)
{
    char target[PATH_MAX], path[PATH_MAX];
    ssize_t n = readlink(src, target, sizeof target - 1);
    if (n < 0)
        return 0;
    target[n] = '\0';
    if (join(path, sizeof path, root, rel) != 0 || symlink(target, path) != 0) {
        snprintf(errbuf, errlen, "cannot create symlink %s/%s: %s", root, rel, strerror(errno));
        return -1;
    }
    return 0;
}

/* /etc/python3 and /etc/python3.X hold Debian's sitecustomize and install-scheme config. */
static int copy_python_dirs(const char *root, char *errbuf, size_t errlen)
{
    glob_t g;
    if (glob("/etc/python3*", GLOB_ONLYDIR, NULL, &g) != 0)
        return 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
        const char *base = g.gl_pathv[i] + strlen("/etc/");
        char rel[PATH_MAX], dst[PATH_MAX];
        if (join(rel, sizeof rel, "etc", base) != 0 || join(dst, sizeof dst, root, rel) != 0)
            continue;
        /* chmod: airlockd's umask (077) must not hide the directory from uid 1000 */
        if ((mkdir(dst, 0755) != 0 && errno != EEXIST) || chmod(dst, 0755) != 0) {
            snprintf(errbuf, errlen, "cannot create %s: %s", dst, strerror(errno));
            rc = -1;
            break;
        }
        DIR *d = opendir(g.gl_pathv[i]);
        if (!d)
            continue;
        struct dirent *e;
        while (rc == 0 && (e = readdir(d)) != NULL) {
            char src[PATH_MAX], frel[PATH_MAX];
            struct stat st;
            if (e->d_name[0] == '.' || join(src, sizeof src, g.gl_pathv[i], e->d_name) != 0 ||
                join(frel, sizeof frel, rel, e->d_name) != 0 || lstat(src, &st) != 0)
                continue;
            if (S_ISREG(st.st_mode))
                rc = copy_file(src, root, frel, errbuf, errlen);
            else if (S_ISLNK(st.st_mode))
                rc = copy_link(src, root, frel, errbuf, errlen);
        }
        closedir(d);
    }
    globfree(&g);
    return rc;
}

/* copy_file or copy_link: host src to root/rel, a missing source skipped. */
typedef int (*copy_fn)(const char *src, const char *root, const char *rel, char *errbuf, size_t errlen);

/* Copies each /etc/<name> to root/etc/<name> with copy. */
static int copy_from_etc(const char *root, const char *const *names, size_t count, copy_fn copy,
                         char *errbuf, size_t errlen)
{
    for (size_t i = 0; i < count; i++) {
        char src[PATH_MAX], rel[PATH_MAX];
        if (join(src, sizeof src, "/etc", names[i]) != 0 || join(rel, sizeof rel, "etc", names[i]) != 0)
            continue;
        if (copy(src, root, rel, errbuf, errlen) != 0)
            return -1;
    }
    return 0;
}

static int build_etc(const char *root, char *errbuf, size_t errlen)
{
    for (size_t i = 0; i < sizeof generated_etc / sizeof generated_etc[0]; i++) {
        const char *text = generated_etc[i].text;
        if (write_text(root, generated_etc[i].rel, text, strlen(text), errbuf, errlen))
            return -1;
    }
    if (copy_from_etc(root, copied_files, sizeof copied_files / sizeof copied_files[0], copy_file,
                      errbuf, errlen) != 0 ||
        copy_from_etc(root, copied_links, sizeof copied_links / sizeof copied_links[0], copy_link,
                      errbuf, errlen) != 0)
        return -1;
    char mtab[PATH_MAX];
    if (join(mtab, sizeof mtab, root, "etc/mtab") != 0 || symlink("../proc/self/mounts", mtab)) {
        snprintf(errbuf, errlen, "cannot create %s/etc/mtab: %s", root, strerror(errno));
        return -1;
    }
    return copy_python_dirs(root, errbuf, errlen);
}

int sbx_rootfs_build(const char *dir, sbx_rootfs *out, char *errbuf, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (fs_rmtree(dir) != 0) {
        snprintf(errbuf, errlen, "cannot remove old sandbox root %s: %s", dir, strerror(errno));
        return -1;
    }
    if (mkdir(dir, 0755) != 0 || chmod(dir, 0755) != 0) {
        snprintf(errbuf, errlen, "cannot create sandbox root %s: %s", dir, strerror(errno));
        return -1;
    }
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof root_dirs / sizeof root_dirs[0]; i++) {
        if (join(path, sizeof path, dir, root_dirs[i]) != 0 || mkdir(path, 0755) != 0 ||
            chmod(path, 0755) != 0) {
            snprintf(errbuf, errlen, "cannot create %s/%s: %s", dir, root_dirs[i],
                     strerror(errno));
            return -1;
        }
    }
    /* Programs that use /var/tmp get the tmpfs too. */
    if (join(path, sizeof path, dir, "var/tmp") != 0 || symlink("../tmp", path) != 0) {
        snprintf(errbuf, errlen, "cannot create %s/var/tmp: %s", dir, strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < sizeof top_links / sizeof top_links[0]; i++) {
        char host[64];
        struct stat st;
        snprintf(host, sizeof host, "/%s", top_links[i]);
        if (lstat(host, &st) != 0)
            continue;
        if (join(path, sizeof path, dir, top_links[i]) != 0) {
            snprintf(errbuf, errlen, "path too long: %s", dir);
            return -1;
        }
        if (S_ISLNK(st.st_mode)) {
            if (copy_link(host, dir, top_links[i], errbuf, errlen) != 0)
                return -1;
        } else if (S_ISDIR(st.st_mode) && out->nbinds < SBX_ROOTFS_MAX_BINDS) {
            /* Non-merged host: a mount point for a read-only bind of the host directory. */
            if (mkdir(path, 0755) != 0 || chmod(path, 0755) != 0) {
                snprintf(errbuf, errlen, "cannot create %s: %s", path, strerror(errno));
                return -1;
            }
            out->binds[out->nbinds++] = top_links[i];
        }
    }
    /* /etc/alternatives (awk -> mawk...: hundreds of symlinks, an inode each) is the host's,
     * bound read-only: one mount per sandbox instead of copies made at every start */
    struct stat alt;
    if (stat(SBX_HOST_ALTERNATIVES, &alt) == 0 && S_ISDIR(alt.st_mode) && out->nbinds < SBX_ROOTFS_MAX_BINDS)
        out->binds[out->nbinds++] = SBX_HOST_ALTERNATIVES + 1;
    return build_etc(dir, errbuf, errlen);
}

int sbx_rootfs_add_waiter(const char *dir, const char *waiter_path, char *errbuf, size_t errlen)
{
    return sbx_rootfs_add_program(dir, waiter_path, SBX_WAITER_PATH, errbuf, errlen);
}

int sbx_rootfs_add_program(const char *dir, const char *host_path, const char *in_root, char *errbuf,
                           size_t errlen)
{
    char path[PATH_MAX];
    struct stat st;
    if (stat(host_path, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(errbuf, errlen, "no program at %s", host_path);
        return -1;
    }
    if (join(path, sizeof path, dir, "airlock") != 0 || (mkdir(path, 0755) != 0 && errno != EEXIST) ||
        chmod(path, 0755) != 0) {
        snprintf(errbuf, errlen, "cannot create %s/airlock: %s", dir, strerror(errno));
        return -1;
    }
    if (copy_file(host_path, dir, in_root + 1, errbuf, errlen) != 0)
        return -1;
    if (join(path, sizeof path, dir, in_root + 1) != 0 || chmod(path, 0555) != 0) {
        snprintf(errbuf, errlen, "cannot make %s%s executable: %s", dir, in_root, strerror(errno));
        return -1;
    }
    return 0;
}

int sbx_rootfs_append_ca(const char *dir, const char *pem_path, char *errbuf, size_t errlen)
{
    int in = open(pem_path, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        snprintf(errbuf, errlen, "cannot open %s: %s", pem_path, strerror(errno));
        return -1;
    }
    buffer pem;
    buf_init(&pem, 1024 * 1024);
    ssize_t r;
    while ((r = buf_read(&pem, in, 65536)) > 0) {
    }
    close(in);
    if (r < 0 || pem.err || !pem.data || !strstr(pem.data, "-----BEGIN CERTIFICATE-----")) {
        snprintf(errbuf, errlen, "%s: not a PEM certificate file of at most 1 MB", pem_path);
        buf_free(&pem);
        return -1;
    }
    char path[PATH_MAX];
    int fd = -1;
    if (join(path, sizeof path, dir, "etc/ssl/certs/ca-certificates.crt") == 0)
        fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && write(fd, "\n", 1) == 1 && write(fd, pem.data, pem.len) == (ssize_t)pem.len;
    if (!ok)
        snprintf(errbuf, errlen, "cannot add %s to the sandbox CA bundle: %s", pem_path, strerror(errno));
    if (fd >= 0 && (close(fd) != 0 || chmod(path, 0644) != 0) && ok) {
        snprintf(errbuf, errlen, "cannot finish the sandbox CA bundle: %s", strerror(errno));
        ok = false;
    }
    buf_free(&pem);
    return ok ? 0 : -1;
}

/* dir/rel is a directory of its own (made when missing), never a symlink. */
static int plain_dir(const char *dir, const char *rel, char *errbuf, size_t errlen)
{
    char path[PATH_MAX];
    struct stat st;
    if (join(path, sizeof path, dir, rel) != 0) {
        snprintf(errbuf, errlen, "path too long: %s/%s", dir, rel);
        return -1;
    }
    if (lstat(path, &st) != 0 && errno == ENOENT && mkdir(path, 0755) == 0 && chmod(path, 0755) == 0)
        return 0;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(errbuf, errlen, "the template's /%s is not a directory", rel);
        return -1;
    }
    return 0;
}

int sbx_rootfs_finish_template(const char *dir, const char *programs_dir, char *errbuf, size_t errlen)
{
    static const char *const mount_points[] = {"etc", "proc", "dev", "sys", "tmp", "workspace", "run", "usr"};
    static const char *const programs[] = {SBX_WAITER_PATH,        SBX_AGENT_PATH,          AGENT_BOOTSTRAP_PATH,
                                           SBX_KERNEL_PYTHON_PATH, SBX_KERNEL_PROGRAM_PATH, SBX_KERNEL_BYTECODE_PATH};
    if (errlen)
        errbuf[0] = '\0';
    for (size_t i = 0; i < sizeof mount_points / sizeof mount_points[0]; i++)
        if (plain_dir(dir, mount_points[i], errbuf, errlen) != 0)
            return -1;
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof generated_etc / sizeof generated_etc[0]; i++) {
        const char *rel = generated_etc[i].rel, *text = generated_etc[i].text;
        /* unlink: whatever the setup left there (a symlink included) goes; the write is O_EXCL */
        if (join(path, sizeof path, dir, rel) != 0 || (unlink(path) != 0 && errno != ENOENT) ||
            write_text(dir, rel, text, strlen(text), errbuf, errlen) != 0) {
            if (!errbuf[0])
                snprintf(errbuf, errlen, "cannot replace %s/%s: %s", dir, rel, strerror(errno));
            return -1;
        }
    }
    if (join(path, sizeof path, dir, "airlock") != 0 || fs_rmtree(path) != 0) {
        snprintf(errbuf, errlen, "cannot clear %s/airlock: %s", dir, strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < sizeof programs / sizeof programs[0]; i++) {
        char src[PATH_MAX];
        int n = snprintf(src, sizeof src, "%s%s", programs_dir, programs[i]);
        struct stat st;
        if (n < 0 || (size_t)n >= sizeof src || stat(src, &st) != 0)
            continue; /* a program the default root lacks: this server does without it too */
        if (sbx_rootfs_add_program(dir, src, programs[i], errbuf, errlen) != 0)
            return -1;
    }
    return 0;
}
