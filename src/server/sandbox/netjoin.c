/* Entering a sandbox's network namespace from its launcher child (sandbox/netjoin.h). */
#include "sandbox/netjoin.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

int sbx_hide_proc_sys_net(void)
{
    /* slave, not private: the copies of workspace mounts follow the host's unmounts, so a
     * running sandbox never pins another session's loop device; nothing flows back */
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0 ||
        mount("tmpfs", "/proc/sys/net", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "size=4k,mode=555") != 0)
        return errno ? errno : EIO;
    return 0;
}

int sbx_join_netns(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno ? errno : EIO;
    int rc = setns(fd, CLONE_NEWNET) == 0 ? 0 : (errno ? errno : EIO);
    close(fd);
    return rc;
}
