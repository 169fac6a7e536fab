/* `airlockd router`: the fleet's router program beside HAProxy (docs/fleet.md "The router").
 * `router config` prints HAProxy's configuration from the nodes table (and writes the map of
 * moved sessions it names); `router follow` keeps the running HAProxy current over its
 * runtime API, told by the database's notices (channel airlock_router) and re-reading every
 * few seconds in case one was missed; `router sync` is one such pass. It reads the database,
 * never writes it. */
#ifndef AIRLOCKD_ROUTER_H
#define AIRLOCKD_ROUTER_H

/* argv[0] is "router"; the exit status (2: a bad flag, said on stderr). */
int router_main(int argc, char **argv);

#endif
