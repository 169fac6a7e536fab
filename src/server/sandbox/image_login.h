/* The egress proxy login kept beside a memory image (image_login.c): the image's processes hold
 * it in HTTPS_PROXY, so the network a sandbox restored from the image runs on (a fork of a
 * memory snapshot, a paused session resumed by another airlockd process) must take it. */
#ifndef AIRLOCKD_SANDBOX_IMAGE_LOGIN_H
#define AIRLOCKD_SANDBOX_IMAGE_LOGIN_H

#include "sandbox/sandbox.h"

#include <stddef.h>

#define SANDBOX_IMAGE_LOGIN "proxy_login.json"

/* Writes net's login as image_dir's SANDBOX_IMAGE_LOGIN (0600); nothing when net is NULL (no
 * egress). 0, or -1 with a message. */
int sandbox_image_keep_login(const sandbox_network *net, const char *image_dir, char *errbuf, size_t errlen);

/* The login kept beside image_dir into *out: 1, 0 when there is none (no egress), -1 when it is
 * unreadable or malformed (a user that is no session id, a pass that is not 32 hex digits). */
int sandbox_image_login(const char *image_dir, sandbox_proxy_login *out);

#endif
