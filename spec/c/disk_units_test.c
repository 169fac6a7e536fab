/* Unit test of airlockd's workspace disks and state (as root, on the real kernel): a write that
 * runs out of space half-way leaves no file and answers the 413 (domain/quota), images made,
 * mounted, found and released (disk/image, disk/loop), a held image refused, mount points with
 * escaped names (disk/mounts), the state directory's marker and lock (store/state_dir) and the
 * session state file (store/session_state). Everything lives under one temporary directory,
 * unmounted and detached at the end. Built and run by spec/server/disk_units_spec.lua. */
#include "check.h"
#include "disk/image.h"
#include "disk/loop.h"
#include "disk/mounts.h"
#include "domain/quota.h"
#include "store/session_state.h"
#include "store/state_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024 * 1024)

static char base[64];

static char *at(const char *rel)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, 512, "%s/%s", base, rel);
    return b;
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* (up to 30 s: a mount namespace another test's process copied at that moment can hold the
 * filesystem for a while on a loaded machine) */
static void wait_loop_gone(const char *img)
{
    for (int i = 0; i < 600 && loop_serving(img, NULL, 0); i++) {
        struct timespec nap = {0, 50000000L};
        nanosleep(&nap, NULL);
    }
}

/* ---- the write under quota ------------------------------------------------------------- */

static void test_quota_write(void)
{
    /* ws a 64 MB tmpfs (plenty of room, so the precheck passes), its "small" a 1 MB tmpfs: a
     * 2 MB write runs out of space half-way, as when a command fills the disk during the
     * write */
    char ws[512];
    snprintf(ws, sizeof ws, "%s", at("ws"));
    CHECK(mkdir(ws, 0755) == 0 && mount("tmpfs", ws, "tmpfs", 0, "size=64m") == 0);
    CHECK(mkdir(at("ws/small"), 0755) == 0 && mkdir(at("ws/tiny"), 0755) == 0);
    CHECK(mount("tmpfs", at("ws/small"), "tmpfs", 0, "size=1m") == 0);
    CHECK(mount("tmpfs", at("ws/tiny"), "tmpfs", 0, "size=1m,nr_inodes=4") == 0);
    size_t len = 2 * MIB;
    char *data = malloc(len);
    memset(data, 'x', len);
    char *msg = NULL;
    quota_write_result r = quota_write_file(ws, "small/f.bin", "small/f.bin", data, len, 100LL * MIB, &msg);
    CHECK(r == QUOTA_EXCEEDED);
    CHECK(msg && strncmp(msg, "Writing small/f.bin would use ", 30) == 0 &&
          strstr(msg, " MB of the workspace's 100 MB disk quota. Delete files first."));
    CHECK(!exists(at("ws/small/f.bin"))); /* no partial file */
    free(msg);
    /* replacing a file: the same, and the old content is gone too (truncated first) */
    CHECK(quota_write_file(ws, "small/keep.txt", "small/keep.txt", "old", 3, 100LL * MIB, &msg) == QUOTA_WRITTEN);
    free(msg);
    CHECK(quota_write_file(ws, "small/keep.txt", "small/keep.txt", data, len, 100LL * MIB, &msg) == QUOTA_EXCEEDED);
    free(msg);
    CHECK(!exists(at("ws/small/keep.txt")));
    /* over the quota: refused before anything is touched */
    CHECK(quota_write_file(ws, "q.txt", "q.txt", data, len, MIB, &msg) == QUOTA_EXCEEDED);
    CHECK(msg && strstr(msg, "of the workspace's 1 MB disk quota"));
    free(msg);
    CHECK(!exists(at("ws/q.txt")));
    /* out of inodes for the directories or the file: the 413, not a failure */
    int made = 0;
    for (int i = 0; i < 10; i++) {
        char p[32];
        snprintf(p, sizeof p, "tiny/f%d", i);
        if (quota_write_file(ws, p, p, "x", 1, 100LL * MIB, &msg) == QUOTA_WRITTEN)
            made++;
        free(msg);
    }
    CHECK(made >= 1 && made < 10);
    CHECK(quota_write_file(ws, "tiny/d/e/f.txt", "tiny/d/e/f.txt", "x", 1, 100LL * MIB, &msg) == QUOTA_EXCEEDED);
    CHECK(msg && strncmp(msg, "Writing tiny/d/e/f.txt would use", 32) == 0);
    free(msg);
    CHECK(!exists(at("ws/tiny/d")));
    /* usage and free space come from the filesystem */
    CHECK(quota_usage(at("ws/small")) >= 0 && quota_usage(at("ws/small")) < 64 * 1024);
    CHECK(quota_free(at("ws/small"), 100LL * MIB) > 512 * 1024 && quota_free(at("ws/small"), 100LL * MIB) <= MIB);
    CHECK(quota_free(at("ws/small"), 1000) <= 1000);
    CHECK(umount2(at("ws/small"), 0) == 0 && umount2(at("ws/tiny"), 0) == 0 && umount2(ws, 0) == 0);
    free(data);
}

/* ---- images and loops ----------------------------------------------------------------- */

static void test_image(void)
{
    image_tools t = {0};
    char err[512] = "";
    CHECK(image_tools_find(&t, err, sizeof err) == 0);
    CHECK(image_bytes_for(512LL * MIB) == 546LL * MIB);
    CHECK(image_bytes_for(5LL * MIB) == 8LL * MIB);
    CHECK(mkdir(at("images"), 0700) == 0 && mkdir(at("mnt"), 0755) == 0);
    char *img = realpath(at("images"), NULL);
    char path[600];
    snprintf(path, sizeof path, "%s/a.img", img);
    free(img);
    long long bytes = 0;
    CHECK(image_create(&t, path, 5LL * MIB, &bytes, err, sizeof err) == IMAGE_OK);
    CHECK(bytes > 5LL * MIB && bytes <= image_bytes_for(5LL * MIB)); /* sized for the quota */
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size == bytes && st.st_blocks * 512 >= st.st_size); /* allocated */
    CHECK(image_create(&t, path, MIB, &bytes, err, sizeof err) == IMAGE_FAILED); /* never over an existing one */
    CHECK(image_mount(&t, path, at("mnt"), false, err, sizeof err) == IMAGE_OK);
    CHECK(image_mounted_at(path, at("mnt")));
    CHECK(!image_mounted_at(path, at("images")));
    CHECK(loop_serving(path, NULL, 0));
    CHECK(stat(at("mnt/w"), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 1000);
    long long free_bytes = quota_free(at("mnt/w"), 100LL * MIB);
    CHECK(free_bytes >= 5LL * MIB && free_bytes < 8LL * MIB);
    CHECK(mounts_is_mount_point(at("mnt")) && !mounts_is_mount_point(at("mnt/w")));
    /* mounting a mounted image a second time is refused: two filesystems over one image
     * corrupt it */
    CHECK(mkdir(at("mnt2"), 0755) == 0);
    CHECK(image_mount(&t, path, at("mnt2"), false, err, sizeof err) == IMAGE_HELD);
    CHECK(strstr(err, "still attached") != NULL);
    CHECK(mounts_unmount(at("mnt")) == 0);
    wait_loop_gone(path);
    CHECK(!loop_serving(path, NULL, 0)); /* autoclear released it */
    CHECK(image_check(&t, path, err, sizeof err) == IMAGE_OK);
    CHECK(image_mount(&t, path, at("mnt"), true, err, sizeof err) == IMAGE_OK);
    CHECK(mounts_unmount(at("mnt")) == 0);
    wait_loop_gone(path);
    /* attached but never mounted (a server killed in between): the loop goes with its opener */
    char dev[64];
    int fd = loop_attach(path, dev, sizeof dev);
    CHECK(fd >= 0 && loop_serving(path, NULL, 0));
    close(fd);
    wait_loop_gone(path);
    CHECK(!loop_serving(path, NULL, 0));
    /* a loop without autoclear (losetup by hand) is detached by loop_detach_under */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "losetup -f %s", path);
    CHECK(system(cmd) == 0 && loop_serving(path, NULL, 0));
    char *images = realpath(at("images"), NULL);
    CHECK(loop_detach_under(images, NULL, NULL) == 1);
    free(images);
    wait_loop_gone(path);
    CHECK(!loop_serving(path, NULL, 0));
    image_tools_free(&t);
}

/* ---- mounts ---------------------------------------------------------------------------- */

static void test_mounts(void)
{
    CHECK(mkdir(at("m"), 0755) == 0 && mkdir(at("m/with space"), 0755) == 0 && mkdir(at("m/b"), 0755) == 0);
    CHECK(mount("tmpfs", at("m/with space"), "tmpfs", 0, "size=64k") == 0);
    CHECK(mkdir(at("m/with space/inner"), 0755) == 0);
    CHECK(mount("tmpfs", at("m/with space/inner"), "tmpfs", 0, "size=64k") == 0);
    CHECK(mount("tmpfs", at("m/b"), "tmpfs", 0, "size=64k") == 0);
    char *m = realpath(at("m"), NULL);
    char **v = NULL;
    size_t n = 0;
    CHECK(mounts_under(m, &v, &n) == 0 && n == 3);
    char want[600];
    snprintf(want, sizeof want, "%s/with space", m);
    CHECK(n == 3 && strcmp(v[0], want) == 0); /* mountinfo's \040 decoded */
    mounts_free(v, n);
    CHECK(!mounts_is_mount_point(m) && mounts_is_mount_point(want));
    /* a bind mount of m onto itself would hide those three: they go first */
    CHECK(mounts_make_shared(m) == 0 && mounts_is_mount_point(m));
    CHECK(mounts_under(m, &v, &n) == 0 && n == 0);
    mounts_free(v, n);
    CHECK(mounts_make_shared(m) == 0); /* again: already its own mount */
    snprintf(want, sizeof want, "grep -q ' %s %s .*shared:' /proc/self/mountinfo", m, m);
    CHECK(system(want) == 0);
    CHECK(mount("tmpfs", at("m/b"), "tmpfs", 0, "size=64k") == 0);
    /* listed once: m's peer group is its own, not base's (a copy would show up under base) */
    CHECK(mounts_under(m, &v, &n) == 0 && n == 1);
    mounts_free(v, n);
    CHECK(mounts_unmount_under(m, NULL, NULL) == 1);
    CHECK(mounts_unmount(m) == 0 && !mounts_is_mount_point(m));
    free(m);
}

/* ---- the state directory --------------------------------------------------------------- */

static void test_state_dir(void)
{
    char *real = NULL, err[512];
    int fd = -1, fd2 = -1;
    /* new (and its parents): made, marked and locked */
    CHECK(state_dir_claim(at("sd/new/state"), &real, &fd, err, sizeof err) == 0);
    CHECK(fd >= 0 && real && exists(at("sd/new/state/" STATE_DIR_MARKER)));
    free(real);
    /* a second server on it is refused while the first holds it */
    CHECK(state_dir_claim(at("sd/new/state"), &real, &fd2, err, sizeof err) == -1 && !real);
    CHECK(strstr(err, "another airlockd is using it") != NULL);
    close(fd);
    CHECK(state_dir_claim(at("sd/new/state"), &real, &fd, err, sizeof err) == 0);
    free(real);
    close(fd);
    /* someone else's directory: refused, untouched */
    CHECK(mkdir(at("sd/theirs"), 0755) == 0);
    FILE *f = fopen(at("sd/theirs/notes.txt"), "w");
    fputs("mine", f);
    fclose(f);
    CHECK(state_dir_claim(at("sd/theirs"), &real, &fd, err, sizeof err) == -1);
    CHECK(strstr(err, "not empty and was not made by airlockd") != NULL);
    CHECK(!exists(at("sd/theirs/" STATE_DIR_MARKER)) && exists(at("sd/theirs/notes.txt")));
    struct stat st;
    CHECK(stat(at("sd/theirs"), &st) == 0 && (st.st_mode & 0777) == 0755);
    /* empty: taken */
    CHECK(mkdir(at("sd/empty"), 0755) == 0);
    CHECK(state_dir_claim(at("sd/empty"), &real, &fd, err, sizeof err) == 0);
    free(real);
    close(fd);
    /* a newer format: refused */
    f = fopen(at("sd/empty/" STATE_DIR_MARKER), "w");
    fputs("airlockd state directory\nformat 99\n", f);
    fclose(f);
    CHECK(state_dir_claim(at("sd/empty"), &real, &fd, err, sizeof err) == -1);
    CHECK(strstr(err, "made by a newer airlockd (state format 99") != NULL);
}

/* ---- the session state file ------------------------------------------------------------ */

static void test_session_state(void)
{
    CHECK(session_id_valid("sbx_0123456789ab") && !session_id_valid("sbx_0123456789aB") &&
          !session_id_valid("sbx_../../etc/pa") && !session_id_valid("sbx_0123456789abc"));
    char err[512];
    const char *file = at("sessions.json");
    session_record *v = NULL;
    size_t n = 9;
    CHECK(session_state_load(file, "/st", &v, &n, err, sizeof err) == 0 && n == 0 && !v); /* none yet */
    session_record recs[2] = {
        {"sbx_000000000001", "acme", json_pack("[s,s]", "pypi.org", "files.pythonhosted.org"), 1.5, 1796000000.123456,
         5 * MIB, "python:3.11-slim", 1024, 150, 100, "", false, {0}},
        {"sbx_000000000002", "t\"x", json_array(), 2.25, 3.75, 512LL * MIB, "", 0, 0, 0, "", false, {0}},
    };
    CHECK(session_state_save(file, "/st", recs, 2, err, sizeof err) == 0);
    CHECK(session_state_load(file, "/st", &v, &n, err, sizeof err) == 0 && n == 2);
    CHECK(n == 2 && strcmp(v[0].id, recs[0].id) == 0 && strcmp(v[0].tenant, "acme") == 0 &&
          json_equal(v[0].egress, recs[0].egress) && v[0].created_at == 1.5 &&
          v[0].last_accessed_at == 1796000000.123456 && v[0].quota_bytes == 5 * MIB);
    CHECK(n == 2 && strcmp(v[1].tenant, "t\"x") == 0 && v[1].quota_bytes == 512LL * MIB);
    /* the template and size (issue #24); a record without them keeps 0: the defaults */
    CHECK(n == 2 && strcmp(v[0].template_name, "python:3.11-slim") == 0 && v[0].memory_mb == 1024 &&
          v[0].cpu_percent == 150 && v[0].max_processes == 100);
    CHECK(n == 2 && v[1].template_name[0] == '\0' && v[1].memory_mb == 0 && v[1].cpu_percent == 0 &&
          v[1].max_processes == 0);
    /* a paused record (issue #26) keeps its pause, on_idle and memory image; one without is active */
    recs[0].on_idle_pause = true;
    recs[0].pause = (session_pause_state){.paused = true, .paused_at = 1796000100.5, .image_dir = "/snap/x",
                                          .image_bytes = 4096, .runsc_version = "release-20250512.0"};
    session_records_free(v, n);
    CHECK(session_state_save(file, "/st", recs, 2, err, sizeof err) == 0);
    CHECK(session_state_load(file, "/st", &v, &n, err, sizeof err) == 0 && n == 2);
    CHECK(n == 2 && v[0].on_idle_pause && v[0].pause.paused && v[0].pause.paused_at == 1796000100.5 &&
          strcmp(v[0].pause.image_dir, "/snap/x") == 0 && v[0].pause.image_bytes == 4096 &&
          strcmp(v[0].pause.runsc_version, "release-20250512.0") == 0);
    CHECK(n == 2 && !v[1].on_idle_pause && !v[1].pause.paused);
    session_records_free(v, n);
    /* another state directory's file, or not a state file: refused (nothing is deleted) */
    CHECK(session_state_load(file, "/other", &v, &n, err, sizeof err) == -1 && strstr(err, "state directory /st"));
    FILE *f = fopen(file, "w");
    fputs("{\"airlockd_sessions\":1,\"state_dir\":\"/st\",\"sessions\":[{\"session_id\":\"../x\"},"
          "{\"session_id\":\"sbx_000000000003\",\"tenant_id\":\"a\",\"egress\":[],\"created_at\":1,"
          "\"last_accessed_at\":2,\"disk_quota_bytes\":1048576},"
          "{\"session_id\":\"sbx_000000000004\",\"tenant_id\":\"a\",\"egress\":[],\"created_at\":1,"
          "\"last_accessed_at\":2,\"disk_quota_bytes\":1048576,\"memory_mb\":0},"
          "{\"session_id\":\"sbx_000000000005\",\"tenant_id\":\"a\",\"egress\":[],\"created_at\":1,"
          "\"last_accessed_at\":2,\"disk_quota_bytes\":1048576,\"template\":7},"
          "{\"session_id\":\"sbx_000000000006\",\"tenant_id\":\"a\",\"egress\":[],\"created_at\":1,"
          "\"last_accessed_at\":2,\"disk_quota_bytes\":1048576,\"pause\":{\"paused_at\":\"soon\"}}]}",
          f);
    fclose(f);
    CHECK(session_state_load(file, "/st", &v, &n, err, sizeof err) == 0 && n == 1 &&
          strcmp(v[0].id, "sbx_000000000003") == 0); /* the malformed record is skipped */
    session_records_free(v, n);
    f = fopen(file, "w");
    fputs("{not json", f);
    fclose(f);
    CHECK(session_state_load(file, "/st", &v, &n, err, sizeof err) == -1 && strstr(err, "is not a session state file"));
    json_decref(recs[0].egress);
    json_decref(recs[1].egress);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("needs root (mounts and loop devices)\n");
        return 1;
    }
    snprintf(base, sizeof base, "/tmp/airlockd-disk-units-XXXXXX");
    if (!mkdtemp(base))
        return 1;
    /* as airlockd does with its workspaces: unmounts below must reach the copies that other
     * programs' new mount namespaces make meanwhile, or those keep a loop (and its image) busy */
    CHECK(mounts_make_shared(base) == 0);
    test_quota_write();
    test_image();
    test_mounts();
    test_state_dir();
    test_session_state();
    /* nothing may stay mounted or attached under base (and if a check failed, it goes now) */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "grep -q ' %s/' /proc/self/mountinfo", base);
    CHECK(system(cmd) != 0);
    CHECK(mounts_unmount(base) == 0);
    snprintf(cmd, sizeof cmd, "losetup -a | grep -q '%s/'", base);
    CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "grep -o ' %s/[^ ]*' /proc/self/mountinfo | sort -r | xargs -r umount -l; "
                              "rm -rf --one-file-system %s", base, base);
    if (system(cmd) != 0)
        printf("could not remove %s\n", base);
    return CHECK_SUMMARY();
}
