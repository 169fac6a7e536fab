/* How a sandbox's launcher enters the network it was given (sandbox_network, made by egress/),
 * in the launcher child before exec: async-signal-safe, 0 or an errno. */
#ifndef AIRLOCKD_SANDBOX_NETJOIN_H
#define AIRLOCKD_SANDBOX_NETJOIN_H

/* For runsc --network=sandbox: a private mount namespace where /proc/sys/net is an empty
 * read-only tmpfs. This runsc's root-namespace check looks for /proc/sys/net/core/rmem_default,
 * which exists in every namespace on Linux >= 6.10 (gVisor issue 10704), so it would refuse to
 * start. It fails closed: if a runsc checks something else, the sandbox does not start. */
int sbx_hide_proc_sys_net(void);

/* For bubblewrap: joins the network namespace at path. */
int sbx_join_netns(const char *path);

#endif
