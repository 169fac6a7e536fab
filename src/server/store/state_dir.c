/* Claiming the state directory: create or recognise it by its marker, then lock the marker. */
#include "store/state_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MARKER_TEXT_MAX 256
#define LOCK_WAIT_MS 5000
#define LOCK_POLL_MS 100

static int mkdir_parents(const char *dir)
{
    char *p = strdup(dir);
    if (!p)
        return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            free(p);
            return -1;
        }
        *s = '/';
    }
    int rc = mkdir(p, 0700) != 0 && errno != EEXIST ? -1 : 0;
    free(p);
    return rc;
}

/* 1 when dir holds nothing, 0 when it holds something, -1 when it cannot be read. */
static int is_empty(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int empty = 1;
    struct dirent *e;
    while (empty && (e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            empty = 0;
    closedir(d);
    return empty;
}

/* The format number a marker's text names ("format N" on a line of its own), or -1. */
static long marker_format(const char *text)
{
    const char *line = text;
    while (strncmp(line, "format ", 7) != 0) {
        line = strchr(line, '\n');
        if (!line)
            return -1;
        line++;
    }
    char *end;
    long v = strtol(line + 7, &end, 10);
    return (*end == '\n' || *end == '\0') && end != line + 7 ? v : -1;
}

static int lock_marker(int fd, const char *dir, char *err, size_t errlen)
{
    /* A predecessor killed a moment ago may still be exiting (its last threads or a forked
     * child that has not exec'd yet hold the lock): give it a few seconds. */
    int waited = 0;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) {
            snprintf(err, errlen, "--state-dir %s: cannot lock %s: %s", dir, STATE_DIR_MARKER, strerror(errno));
            return -1;
        }
        if (waited >= LOCK_WAIT_MS) {
            snprintf(err, errlen, "--state-dir %s: another airlockd is using it", dir);
            return -1;
        }
        struct timespec nap = {0, LOCK_POLL_MS * 1000000L};
        nanosleep(&nap, NULL);
        waited += LOCK_POLL_MS;
    }
    return 0;
}

/* Opens and locks an existing marker and checks its format. */
static int open_marker(int dirfd, const char *dir, char *err, size_t errlen)
{
    int fd = openat(dirfd, STATE_DIR_MARKER, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "--state-dir %s: cannot open %s: %s", dir, STATE_DIR_MARKER, strerror(errno));
        return -1;
    }
    char text[MARKER_TEXT_MAX + 1];
    ssize_t n = lock_marker(fd, dir, err, errlen) == 0 ? pread(fd, text, MARKER_TEXT_MAX, 0) : -2;
    if (n == -2) {
        close(fd);
        return -1;
    }
    text[n > 0 ? n : 0] = '\0';
    long format = marker_format(text);
    if (format != STATE_DIR_FORMAT) {
        if (format > STATE_DIR_FORMAT)
            snprintf(err, errlen, "--state-dir %s: made by a newer airlockd (state format %ld; this one reads %d)",
                     dir, format, STATE_DIR_FORMAT);
        else
            snprintf(err, errlen, "--state-dir %s: %s does not name a state format this airlockd reads", dir,
                     STATE_DIR_MARKER);
        close(fd);
        return -1;
    }
    return fd;
}

/* Writes the marker of a new state directory (exclusively: a racing server gets EEXIST). */
static int create_marker(int dirfd, const char *dir, char *err, size_t errlen)
{
    int fd = openat(dirfd, STATE_DIR_MARKER, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno == EEXIST ? open_marker(dirfd, dir, err, errlen) : -1;
    char text[MARKER_TEXT_MAX];
    int len = snprintf(text, sizeof text,
                       "airlockd state directory: sessions, workspace images and sandbox state.\n"
                       "format %d\n",
                       STATE_DIR_FORMAT);
    if (lock_marker(fd, dir, err, errlen) != 0) {
        close(fd);
        return -1;
    }
    if (write(fd, text, (size_t)len) != len || fsync(fd) != 0) {
        snprintf(err, errlen, "--state-dir %s: cannot write %s: %s", dir, STATE_DIR_MARKER, strerror(errno));
        close(fd);
        unlinkat(dirfd, STATE_DIR_MARKER, 0);
        return -1;
    }
    return fd;
}

int state_dir_claim(const char *path, char **real, int *lock_fd, char *err, size_t errlen)
{
    *real = NULL;
    *lock_fd = -1;
    if (errlen)
        err[0] = '\0';
    if (mkdir_parents(path) != 0 || !(*real = realpath(path, NULL))) {
        snprintf(err, errlen, "--state-dir %s: %s", path, strerror(errno));
        return -1;
    }
    const char *dir = *real;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        snprintf(err, errlen, "--state-dir %s: %s", dir, strerror(errno));
        goto fail;
    }
    struct stat st;
    bool marked = fstatat(dirfd, STATE_DIR_MARKER, &st, AT_SYMLINK_NOFOLLOW) == 0;
    int empty = marked ? 0 : is_empty(dir);
    int fd = -1;
    if (marked) {
        fd = open_marker(dirfd, dir, err, errlen);
    } else if (empty == 1) {
        fd = create_marker(dirfd, dir, err, errlen);
        if (fd < 0 && !err[0])
            snprintf(err, errlen, "--state-dir %s: cannot create %s: %s", dir, STATE_DIR_MARKER, strerror(errno));
    } else if (empty == 0) {
        snprintf(err, errlen,
                 "--state-dir %s: the directory is not empty and was not made by airlockd (no %s file); "
                 "airlockd never takes over or deletes files it did not create: give an empty or new directory",
                 dir, STATE_DIR_MARKER);
    } else {
        snprintf(err, errlen, "--state-dir %s: %s", dir, strerror(errno));
    }
    close(dirfd);
    if (fd < 0)
        goto fail;
    /* the workspaces of every tenant are below: root only */
    if (chmod(dir, 0700) != 0) {
        snprintf(err, errlen, "--state-dir %s: %s", dir, strerror(errno));
        close(fd);
        goto fail;
    }
    *lock_fd = fd;
    return 0;
fail:
    free(*real);
    *real = NULL;
    return -1;
}
