#!/usr/bin/env bash
# A whole airlockd fleet on one machine, for specs, benches and demos (docs/fleet.md):
#
#   scripts/fleet.sh up DIR [--nodes N]   a private PostgreSQL 15 cluster (initdb in DIR/pg, run
#                                         as the system user airlock-pg, on a free loopback
#                                         port; the fleet's role `airlock` is no superuser),
#                                         N airlockd nodes on 127.0.0.2 .. 127.0.0.N+1 (state
#                                         in DIR/nodes/<id>), HAProxy on 127.0.0.1 and the
#                                         router program beside it (airlockd router follow);
#                                         writes the fleet's settings to DIR/fleet.env (0600),
#                                         waits until all are healthy, writes DIR/fleet.json
#   scripts/fleet.sh down DIR             stops everything `up` started in DIR, nothing else
#   scripts/fleet.sh router DIR           prints HAProxy's configuration again from the nodes
#                                         table (airlockd router config) and reloads it (after
#                                         a node joined or left); starts HAProxy again on its
#                                         port if it is not running, and the router program
#   scripts/fleet.sh start-node DIR ID    starts node ID again on its state directory, with
#                                         the settings of DIR/fleet.env (its keys, address and
#                                         ports), whatever this shell's environment
#   scripts/fleet.sh drain DIR ID         POST /v1/admin/nodes/ID/drain with the fleet's admin
#                                         key: it takes no new session and its sessions move
#                                         to the other nodes; returns once it is drained
#   scripts/fleet.sh status DIR           the router, the database, each node and the sessions
#                                         by tenant and node, as tables (reads only)
#   scripts/fleet.sh db-stop DIR / db-start DIR
#                                         stops / starts the fleet's PostgreSQL (outage tests)
#   scripts/fleet.sh exec [--nodes N] -- CMD...
#                                         a fresh fleet in a temporary DIR, CMD run with
#                                         SANDBOX_API_URL (the router) and SANDBOX_API_KEY set,
#                                         then the fleet taken down (make fleet)
#
# FLEET_PG_STATEMENTS=1 at `up` loads pg_stat_statements into the fleet's PostgreSQL.
#
# `up` records SANDBOX_API_KEYS, SANDBOX_API_KEY, SANDBOX_ADMIN_KEY, SANDBOX_TENANT_LIMITS (and
# every other SANDBOX_* and AIRLOCK_* setting) of this script's environment in DIR/fleet.env;
# the nodes get those alone (env -i), and PostgreSQL, HAProxy and the router program get none
# of them. The database URL, which holds the password, reaches a node in a file
# (SANDBOX_DATABASE_URL_FILE), never on a command line. The system's own PostgreSQL service is
# neither used nor touched.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
AIRLOCKD=${AIRLOCKD_BIN:-$top/build/airlockd}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
HAPROXY=${HAPROXY:-haproxy}
# the nodes' gVisor: the project's own runsc unless told otherwise
if [ -z "${AIRLOCK_RUNSC:-}" ] && [ -x "$top/.deps/runsc/usr/bin/runsc" ]; then
  export AIRLOCK_RUNSC="$top/.deps/runsc/usr/bin/runsc"
fi
PG_USER=airlock-pg   # the OS user PostgreSQL runs as when this script runs as root
# seconds a node that stopped answering keeps its sessions before they are declared lost
FLEET_LOST_AFTER=${SANDBOX_FLEET_LOST_AFTER:-60}
# what a process that needs none of the fleet's settings is started with (env -i): no key, no
# admin key, no password, no secret
SAFE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CLEAN_ENV=(env -i "PATH=$SAFE_PATH" LC_ALL=C.UTF-8)

die() { echo "fleet.sh: $*" >&2; exit 1; }

# progress of a long step (up, down) on stderr, with the seconds since the script started
step() { echo "fleet.sh: [${SECONDS} s] $*" >&2; }

# A TCP port free on HOST (127.0.0.1) right now (the kernel picks it).
free_port() {
  python3 -c 'import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "${1:-127.0.0.1}"
}

# Runs a command as the PostgreSQL user (ourselves when not root), with a clean environment.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then "${CLEAN_ENV[@]}" runuser -u "$PG_USER" -- "$@"; else "${CLEAN_ENV[@]}" "$@"; fi
}

# psql on the fleet's database as its role `airlock`; the password comes from DIR/pg/pgpass,
# never argv.
fleet_psql() {
  local dir=$1; shift
  "${CLEAN_ENV[@]}" PGPASSFILE="$dir/pg/pgpass" psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 \
    -p "$(cat "$dir/pg/port")" -U airlock -d airlock "$@"
}

# psql as the cluster's superuser, over its unix socket (peer: the OS user PostgreSQL runs as;
# it has no password and cannot log in over TCP). SQL on stdin, so no password is on argv.
super_psql() {
  local dir=$1; shift
  as_pg psql -X -q -v ON_ERROR_STOP=1 -h "$dir/pg/sock" -p "$(cat "$dir/pg/port")" -U "$(pg_superuser)" "$@"
}

# The cluster's superuser: the OS user PostgreSQL runs as (peer authentication).
pg_superuser() {
  if [ "$(id -u)" -eq 0 ]; then echo "$PG_USER"; else id -un; fi
}

# ---- the fleet's settings (DIR/fleet.env, 0600): written by `up`, read by `start-node` ----
# One "NAME=value" line per setting the nodes take (SANDBOX_*, AIRLOCK_*, PATH), and
# "node:ID:WHAT=value" for each node's own address and ports, so a node started again comes
# back as it was whatever the caller's environment.

# Writes DIR/fleet.env from this script's environment (no node lines yet).
write_settings() {
  local dir=$1 name
  (
    umask 077
    {
      printf 'PATH=%s\n' "$PATH"
      printf 'SANDBOX_FLEET_LOST_AFTER=%s\n' "$FLEET_LOST_AFTER"
      while IFS= read -r name; do
        case "$name" in
          SANDBOX_FLEET_LOST_AFTER|SANDBOX_DATABASE_URL|SANDBOX_DATABASE_URL_FILE|SANDBOX_FLEET_SECRET_FILE|\
          SANDBOX_FLEET_AGENT_PORT|SANDBOX_FLEET_INTERNAL_LISTEN|AIRLOCK_FLEET_LOGS) continue ;;
        esac
        case "${!name}" in *$'\n'*) die "$name holds a newline: the fleet's settings file takes one line each" ;; esac
        printf '%s=%s\n' "$name" "${!name}"
      done < <(compgen -e | grep -E '^(SANDBOX|AIRLOCK)_' | sort)
    } > "$dir/fleet.env.new"
  ) || exit 1
  mv "$dir/fleet.env.new" "$dir/fleet.env"
}

# The value of KEY in DIR/fleet.env (empty when it has none).
setting() { # dir key
  local line
  while IFS= read -r line; do
    [ "${line%%=*}" = "$2" ] && { printf '%s\n' "${line#*=}"; return 0; }
  done < "$1/fleet.env"
  return 0
}

# Sets KEY to VALUE in DIR/fleet.env (replacing an earlier value).
set_setting() { # dir key value
  local line
  (
    umask 077
    {
      while IFS= read -r line; do
        [ "${line%%=*}" = "$2" ] || printf '%s\n' "$line"
      done < "$1/fleet.env"
      printf '%s=%s\n' "$2" "$3"
    } > "$1/fleet.env.new"
  )
  mv "$1/fleet.env.new" "$1/fleet.env"
}

# The settings every node takes, one "NAME=value" word each (for env -i).
node_env() { # dir -> array NODE_ENV
  local line
  NODE_ENV=()
  while IFS= read -r line; do
    case "$line" in node:*) ;; *=*) NODE_ENV+=("$line") ;; esac
  done < "$1/fleet.env"
}

# true when pid is alive and its command line mentions needle (a pid reused by another
# program is never signalled).
pid_is() {
  local pid=$1 needle=$2
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF -- "$needle"
}

# true when pid has ended: gone, or a zombie (it has exited; its parent, often PID 1 here,
# reaps it when it gets to it, and kill -0 still reaches a zombie)
pid_gone() {
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  st=${st##*) }
  [ "${st%% *}" = Z ]
}

wait_gone() { # pid seconds
  local pid=$1 i
  for ((i = 0; i < $2 * 10; i++)); do
    pid_gone "$pid" && return 0
    sleep 0.1
  done
  return 1
}

# "pid:start" of each process that pid's node left behind or would: pid itself, its
# descendants (its cgroup guard, sandboxes, helpers) and every process in the cgroups its
# guards clear (their root's name is on each guard's command line). start, the process's
# start time, tells a pid the kernel gave to another program since apart.
node_tree() {
  local pid=$1 p roots="" root
  local pids
  pids=$(ps -e -o pid=,ppid= | awk -v root="$pid" '
    { parent[$1] = $2 }
    END {
      n = 1; want[root] = 1
      while (n) { n = 0; for (p in parent) if (!(p in want) && (parent[p] in want)) { want[p] = 1; n = 1 } }
      for (p in want) print p
    }')
  for p in $pids; do
    root=$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | sed -n 's/.*--cgroup-guard \(airlockd-[0-9a-f]\{16\}\).*/\1/p')
    [ -n "$root" ] && roots="$roots $root"
  done
  for root in $roots; do
    pids="$pids $(grep -l -- "/$root/" /proc/[0-9]*/cgroup 2>/dev/null | cut -d/ -f3)"
  done
  # shellcheck disable=SC2086 # one pid a word
  for p in $(printf '%s\n' $pids | sort -un); do
    echo "$p:$(proc_start "$p")"
  done
}

# The start time of pid (field 22 of /proc/PID/stat), empty when it is gone.
proc_start() {
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  st=${st##*) }
  # shellcheck disable=SC2086 # fields on purpose
  set -- $st
  echo "${20}"
}

# Waits until the process "pid:start" has ended (a zombie, gone, or its pid now another
# program's), SIGKILL after grace seconds.
end_recorded() { # pid:start grace
  local pid=${1%%:*} start=${1#*:} i
  for ((i = 0; i < $2 * 10; i++)); do
    { pid_gone "$pid" || [ "$(proc_start "$pid")" != "$start" ]; } && return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait_gone "$pid" 30
}

# Ends pid (already sent SIGTERM): waits up to grace seconds, then SIGKILL and waits until
# the kernel has ended it; false only when it outlives that too.
end_process() { # pid grace
  wait_gone "$1" "$2" && return 0
  kill -KILL "$1" 2>/dev/null || true
  wait_gone "$1" 30
}

# Starts the cluster of DIR/pg on the port in DIR/pg/port.
pg_start() {
  local dir=$1
  # a test cluster: durability traded for speed on a shared machine (docs/fleet.md)
  as_pg "$PG_BIN/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/postgres.log" -w -t 30 start \
    -o "-c listen_addresses=127.0.0.1 -c port=$(cat "$dir/pg/port") -c unix_socket_directories=$dir/pg/sock \
        -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
        -c shared_buffers=32MB" > /dev/null
}

start_postgres() {
  local dir=$1 port password
  mkdir -p "$dir/pg"
  if [ "$(id -u)" -eq 0 ]; then
    id "$PG_USER" >/dev/null 2>&1 ||
      useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$PG_USER"
    chmod o+x "$dir" # PostgreSQL reaches DIR/pg through DIR; nothing else of DIR is readable
    chown "$PG_USER" "$dir/pg"
    runuser -u "$PG_USER" -- test -w "$dir/pg" ||
      die "$PG_USER cannot reach $dir/pg (a parent directory of $dir is closed to other users)"
  fi
  chmod 700 "$dir/pg"
  password=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  router_password=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  umask 077
  # the superuser is the OS user PostgreSQL runs as, over the unix socket only (peer); the
  # fleet's role `airlock` (below) is no superuser and owns only its database
  as_pg "$PG_BIN/initdb" -D "$dir/pg/data" -U "$(pg_superuser)" --auth-local=peer --auth-host=scram-sha-256 \
    -E UTF8 --locale=C.UTF-8 > "$dir/pg/initdb.log" 2>&1 || { cat "$dir/pg/initdb.log" >&2; die "initdb failed"; }
  mkdir -p "$dir/pg/sock"
  [ "$(id -u)" -eq 0 ] && chown "$PG_USER" "$dir/pg/sock"
  # FLEET_PG_STATEMENTS=1: pg_stat_statements on (bench/fleet_db.lua's CPU per statement)
  if [ "${FLEET_PG_STATEMENTS:-}" = 1 ]; then
    echo "shared_preload_libraries = 'pg_stat_statements'" | as_pg tee -a "$dir/pg/data/postgresql.conf" > /dev/null
  fi
  local tries
  for tries in 1 2 3; do
    port=$(free_port)
    echo "$port" > "$dir/pg/port"
    pg_start "$dir" && break
    [ "$tries" -eq 3 ] && { cat "$dir/pg/postgres.log" >&2; die "PostgreSQL did not start"; }
  done
  printf '127.0.0.1:%s:*:airlock:%s\n' "$port" "$password" > "$dir/pg/pgpass"
  # the roles (passwords on stdin, never argv): `airlock` for the nodes, `airlock_router` for
  # the router program (it reads nodes and sessions: GRANTs once the nodes made the schema)
  super_psql "$dir" -d postgres > /dev/null <<SQL || die "cannot create the fleet's roles"
CREATE ROLE airlock LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD '$password';
CREATE ROLE airlock_router LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD '$router_password';
CREATE DATABASE airlock OWNER airlock;
REVOKE ALL ON DATABASE airlock FROM PUBLIC;
GRANT CONNECT ON DATABASE airlock TO airlock_router;
SQL
  if [ "${FLEET_PG_STATEMENTS:-}" = 1 ]; then
    super_psql "$dir" -d airlock -c "CREATE EXTENSION pg_stat_statements" > /dev/null ||
      die "cannot create pg_stat_statements"
  fi
  printf 'postgresql://airlock:%s@127.0.0.1:%s/airlock\n' "$password" "$port" > "$dir/database.url"
  printf 'postgresql://airlock_router:%s@127.0.0.1:%s/airlock\n' "$router_password" "$port" > "$dir/router.url"
  umask 022
}

# What the router program may read, once the nodes made the schema (docs/fleet.md).
grant_router() {
  fleet_psql "$1" > /dev/null <<'SQL' || die "cannot grant the router's role its tables"
GRANT SELECT ON nodes, sessions TO airlock_router;
SQL
}

# Its address and ports, chosen once and kept in DIR/fleet.env: the router's configuration and
# the other nodes reach it there every time it starts.
node_ports() { # dir id index
  local dir=$1 id=$2 host="127.0.0.$(($3 + 1))" what
  for what in listen internal; do
    [ -n "$(setting "$dir" "node:$id:$what")" ] || set_setting "$dir" "node:$id:$what" "$host:$(free_port "$host")"
  done
  # its load report for HAProxy's agent-check (placement by load)
  [ -n "$(setting "$dir" "node:$id:agent_port")" ] || set_setting "$dir" "node:$id:agent_port" "$(free_port "$host")"
}

start_node() { # dir id index
  local dir=$1 id=$2 i=$3 listen
  local nd="$dir/nodes/$id"
  mkdir -p "$nd"
  node_ports "$dir" "$id" "$i"
  listen=$(setting "$dir" "node:$id:listen")
  rm -f "$nd/port"
  node_env "$dir"
  env -i "${NODE_ENV[@]}" SANDBOX_DATABASE_URL_FILE="$dir/database.url" \
    SANDBOX_FLEET_AGENT_PORT="$(setting "$dir" "node:$id:agent_port")" SANDBOX_FLEET_SECRET_FILE="$dir/fleet.secret" \
    SANDBOX_FLEET_INTERNAL_LISTEN="$(setting "$dir" "node:$id:internal")" \
    setsid "$AIRLOCKD" --listen "$listen" --state-dir "$nd/state" --port-file "$nd/port" \
    --node-id "$id" < /dev/null >> "$nd/log" 2>&1 &
  echo $! > "$nd/pid"
  echo "${listen%:*}" > "$nd/host"
}

wait_node() { # dir id
  local nd="$1/nodes/$2" pid i
  pid=$(cat "$nd/pid")
  for ((i = 0; i < 300; i++)); do
    [ -s "$nd/port" ] && break
    kill -0 "$pid" 2>/dev/null || { tail -20 "$nd/log" >&2; die "node $2 exited at start"; }
    sleep 0.1
  done
  [ -s "$nd/port" ] || { tail -20 "$nd/log" >&2; die "node $2 did not start"; }
  curl -fsS --max-time 5 "http://$(cat "$nd/host"):$(cat "$nd/port")/healthz" > /dev/null ||
    die "node $2 is not healthy"
}

# HAProxy's configuration, printed by the router program from the nodes table (airlockd router
# config, with the role that only reads: docs/fleet.md), checked, then put in place; the map of
# moved sessions it names is written beside it.
write_router_config() {
  local dir=$1 hd="$1/haproxy"
  "${CLEAN_ENV[@]}" "$AIRLOCKD" router config --database-url-file "$dir/router.url" \
    --bind "127.0.0.1:$(cat "$hd/port")" --stats-socket "$hd/admin.sock" --map "$hd/moved.map" \
    > "$hd/haproxy.cfg.new" 2> "$hd/config.log" || { cat "$hd/config.log" >&2; die "airlockd router config failed"; }
  "${CLEAN_ENV[@]}" "$HAPROXY" -c -q -f "$hd/haproxy.cfg.new" || die "the printed HAProxy configuration is invalid"
  mv "$hd/haproxy.cfg.new" "$hd/haproxy.cfg"
}

start_router() { # dir [keep-port]
  local dir=$1 hd="$1/haproxy" i
  mkdir -p "$hd"
  if [ "${2:-}" != keep-port ] || [ ! -s "$hd/port" ]; then free_port > "$hd/port"; fi
  write_router_config "$dir"
  "${CLEAN_ENV[@]}" "$HAPROXY" -D -f "$hd/haproxy.cfg" -p "$hd/haproxy.pid" > "$hd/log" 2>&1 ||
    { cat "$hd/log" >&2; die "HAProxy did not start"; }
  for ((i = 0; i < 100; i++)); do
    curl -fsS --max-time 2 "http://127.0.0.1:$(cat "$hd/port")/healthz" > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "HAProxy does not answer"
}

# The router program beside HAProxy: it follows the fleet (told by the database) and applies
# each change over HAProxy's runtime API; a clean environment, the router's role.
start_follower() {
  local dir=$1 hd="$1/haproxy"
  "${CLEAN_ENV[@]}" setsid "$AIRLOCKD" router follow --database-url-file "$dir/router.url" \
    --stats-socket "$hd/admin.sock" --map "$hd/moved.map" < /dev/null >> "$hd/router.log" 2>&1 &
  echo $! > "$hd/router.pid"
}

stop_follower() {
  local pid
  pid=$(cat "$1/haproxy/router.pid" 2>/dev/null || true)
  pid_is "$pid" "router follow --database-url-file $1/" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  end_process "$pid" 5 || echo "fleet.sh: the router program pid $pid does not end" >&2
}

write_fleet_json() {
  local dir=$1
  DIR="$dir" python3 - <<'EOF'
import json, os
d = os.environ["DIR"]
def read(p):
    with open(os.path.join(d, p)) as f:
        return f.read().strip()
nodes = []
for nid in sorted(os.listdir(os.path.join(d, "nodes")), key=lambda n: int(read(f"nodes/{n}/index"))):
    nodes.append({"id": nid, "url": f"http://{read(f'nodes/{nid}/host')}:{read(f'nodes/{nid}/port')}",
                  "pid": int(read(f"nodes/{nid}/pid")), "state_dir": os.path.join(d, "nodes", nid, "state")})
with open(os.path.join(d, "pg/data/postmaster.pid")) as f:
    pg_pid = int(f.readline())
out = {"router": f"http://127.0.0.1:{read('haproxy/port')}", "database": read("database.url"),
       "postgres": {"data_dir": os.path.join(d, "pg/data"), "pid": pg_pid, "port": int(read("pg/port"))},
       "haproxy": {"pid": int(read("haproxy/haproxy.pid")), "config": os.path.join(d, "haproxy/haproxy.cfg"),
                   "stats_socket": os.path.join(d, "haproxy/admin.sock"),
                   "router_pid": int(read("haproxy/router.pid"))},
       "nodes": nodes}
tmp = os.path.join(d, "fleet.json.tmp")
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # holds the database password
with os.fdopen(fd, "w") as f:
    json.dump(out, f, indent=2)
os.rename(tmp, os.path.join(d, "fleet.json"))
EOF
}

stop_nodes() {
  local dir=$1 nd pid tree="" p
  [ -d "$dir/nodes" ] || return 0
  for nd in "$dir"/nodes/*/; do
    pid=$(cat "$nd/pid" 2>/dev/null || true)
    pid_is "$pid" "$nd" || continue
    tree="$tree $(node_tree "$pid")"
    kill -TERM "$pid" 2>/dev/null || true
  done
  for nd in "$dir"/nodes/*/; do
    pid=$(cat "$nd/pid" 2>/dev/null || true)
    [ -n "$pid" ] || continue
    pid_is "$pid" "$nd" && { end_process "$pid" 90 || echo "fleet.sh: node pid $pid does not end" >&2; }
  done
  # what the nodes leave: each cgroup guard clears its node's sandboxes, then ends
  for p in $tree; do
    end_recorded "$p" 30 || echo "fleet.sh: pid ${p%%:*} of a node does not end" >&2
  done
  return 0
}

# What a killed node left on the host under DIR/nodes (workspace mounts, loop devices): a node
# that runs again takes it over; `down` releases it, deepest mount first.
release_host_objects() {
  local prefix="$1/nodes/" mp dev back i
  for i in 1 2 3 4; do
    local left=0
    while read -r mp; do
      umount -l "$mp" 2>/dev/null || true
      left=1
    done < <(awk -v p="$prefix" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
    for dev in /sys/block/loop*; do
      back=$(cat "$dev/loop/backing_file" 2>/dev/null || true)
      case "$back" in "$prefix"*) losetup -d "/dev/${dev##*/}" 2>/dev/null || true; left=1 ;; esac
    done
    [ "$left" -eq 0 ] && return 0
    sleep 0.1
  done
}

# Every HAProxy of this fleet: the current one and any an earlier reload left finishing its
# connections (each has DIR/haproxy/haproxy.cfg on its command line).
router_pids() {
  local p
  for p in /proc/[0-9]*; do
    pid_is "${p#/proc/}" "$1/haproxy/haproxy.cfg" && echo "${p#/proc/}"
  done
  return 0
}

stop_router() {
  local pids pid
  pids=$(router_pids "$1")
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in $pids; do end_process "$pid" 10 || echo "fleet.sh: HAProxy pid $pid does not end" >&2; done
  return 0
}

# pg_ctl stop returns once postmaster.pid is gone, which the postmaster removes just before
# it exits: its pid is waited for as well.
stop_postgres() {
  local dir=$1 pid
  [ -f "$dir/pg/data/postmaster.pid" ] || return 0
  pid=$(head -1 "$dir/pg/data/postmaster.pid" 2>/dev/null || true)
  as_pg "$PG_BIN/pg_ctl" -D "$dir/pg/data" -m fast -w -t 30 stop > /dev/null 2>&1 ||
    as_pg "$PG_BIN/pg_ctl" -D "$dir/pg/data" -m immediate -w -t 30 stop > /dev/null 2>&1 || true
  if pid_is "$pid" "$dir/pg/data"; then
    end_process "$pid" 30 || echo "fleet.sh: PostgreSQL pid $pid does not end" >&2
  fi
  return 0
}

cmd_down() {
  local dir=$1
  [ -d "$dir" ] || die "no directory $dir"
  dir=$(cd "$dir" && pwd)
  step "stopping the router"
  stop_follower "$dir"
  stop_router "$dir"
  step "stopping the nodes"
  stop_nodes "$dir"
  release_host_objects "$dir"
  step "stopping PostgreSQL"
  stop_postgres "$dir"
  step "down"
}

cmd_up() {
  local dir=$1 n=$2 i
  if ! [[ "$n" =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 200 ]; then die "--nodes: a number from 1 to 200"; fi
  [ -x "$AIRLOCKD" ] || die "no airlockd at $AIRLOCKD (make build)"
  [ -x "$PG_BIN/initdb" ] || die "no PostgreSQL 15 in $PG_BIN (scripts/install-deps.sh)"
  command -v "$HAPROXY" > /dev/null || die "no haproxy (scripts/install-deps.sh)"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/pg/data/postmaster.pid" ] || [ -f "$dir/haproxy/haproxy.pid" ]; then
    die "$dir holds a fleet already (scripts/fleet.sh down $dir first)"
  fi
  rm -rf "$dir/pg" "$dir/nodes" "$dir/haproxy" "$dir/fleet.json" "$dir/fleet.env"
  # a failed start (a failing command or die) leaves nothing running
  up_dir=$dir
  trap 'cmd_down "$up_dir" >/dev/null 2>&1 || true' EXIT
  step "starting PostgreSQL"
  # the nodes of one machine share the cached base of template builds (made once, not per node)
  if [ -z "${SANDBOX_TEMPLATE_BASES:-}" ]; then
    (umask 077; mkdir -p "$dir/template-bases")
    export SANDBOX_TEMPLATE_BASES=$dir/template-bases
  fi
  write_settings "$dir"
  start_postgres "$dir"
  # the fleet's secret for node-to-node moves (a drain), read by each node from this file
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/fleet.secret")
  step "starting $n nodes"
  for ((i = 1; i <= n; i++)); do
    start_node "$dir" "node$i" "$i"
    echo "$i" > "$dir/nodes/node$i/index"
  done
  for ((i = 1; i <= n; i++)); do wait_node "$dir" "node$i"; step "node$i is up"; done
  step "starting the router"
  grant_router "$dir"
  start_router "$dir"
  start_follower "$dir"
  write_fleet_json "$dir"
  trap - EXIT
  echo "fleet.sh: $n nodes up; router $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["router"])' "$dir/fleet.json")"
}

cmd_router() {
  local dir=$1 pid
  dir=$(cd "$dir" && pwd)
  pid=$(cat "$dir/haproxy/haproxy.pid" 2>/dev/null || true)
  if pid_is "$pid" "$dir/haproxy/haproxy.cfg"; then
    write_router_config "$dir"
    # a soft reload: the old process finishes its connections, the new one takes the listener
    "${CLEAN_ENV[@]}" "$HAPROXY" -D -f "$dir/haproxy/haproxy.cfg" -p "$dir/haproxy/haproxy.pid" \
      -x "$dir/haproxy/admin.sock" -sf "$pid"
  else
    # HAProxy is gone (it died or was stopped): a fresh one on the same port and map file
    start_router "$dir" keep-port
  fi
  pid=$(cat "$dir/haproxy/router.pid" 2>/dev/null || true)
  pid_is "$pid" "router follow --database-url-file $dir/" || start_follower "$dir"
  write_fleet_json "$dir"
}

cmd_start_node() {
  local dir=$1 id=$2 pid
  dir=$(cd "$dir" && pwd)
  [ -f "$dir/nodes/$id/index" ] || die "no node $id in $dir"
  [ -f "$dir/fleet.env" ] || die "no settings file $dir/fleet.env (a fleet from scripts/fleet.sh up)"
  pid=$(cat "$dir/nodes/$id/pid")
  pid_is "$pid" "$dir/nodes/$id/" && die "node $id is running"
  start_node "$dir" "$id" "$(cat "$dir/nodes/$id/index")"
  wait_node "$dir" "$id"
  write_fleet_json "$dir"
}

# Drains node ID over the admin API (POST /v1/admin/nodes/ID/drain, the admin key from the
# fleet's settings, sent on stdin, never argv) and waits until the nodes list says it is
# drained; the router program routes each moved session meanwhile. A drain that could not move
# some sessions (they stay on the node, served there) returns once every session left was
# tried, with their list and reasons (exit status 1).
cmd_drain() {
  local dir=$1 id=$2 router code t0 i state="" left=0 unmoved=0 partial=false
  dir=$(cd "$dir" && pwd)
  [ -n "$(setting "$dir" SANDBOX_ADMIN_KEY)" ] || die "the fleet has no admin key (SANDBOX_ADMIN_KEY at up)"
  case "$id" in *[!A-Za-z0-9._-]*|"") die "no node $id" ;; esac
  router="http://127.0.0.1:$(cat "$dir/haproxy/port")"
  t0=$(date +%s%N)
  code=$(admin_curl "$dir" -o /dev/null -w '%{http_code}' -X POST "$router/v1/admin/nodes/$id/drain")
  [ "$code" = 404 ] && die "no node $id"
  [ "$code" = 200 ] || die "the drain of $id was answered $code"
  for ((i = 0; i < 3000; i++)); do
    # "state sessions unmoved" of the node
    read -r state left unmoved < <(admin_curl "$dir" "$router/v1/admin/nodes" | drain_report "$id" count) || true
    [ "$state" = drained ] && break
    if [ "$state" = draining ] && [ "${left:-0}" -gt 0 ] && [ "$left" = "$unmoved" ]; then
      partial=true
      break
    fi
    sleep 0.2
  done
  [ "$state" = drained ] || $partial || die "node $id is not drained yet (${state:-unknown})"
  # the router program applies each move as it is told; one pass here makes sure the last
  # one is in HAProxy before this returns
  "${CLEAN_ENV[@]}" "$AIRLOCKD" router sync --database-url-file "$dir/router.url" \
    --stats-socket "$dir/haproxy/admin.sock" --map "$dir/haproxy/moved.map" 2>> "$dir/haproxy/router.log" ||
    die "the router could not be brought up to date ($dir/haproxy/router.log)"
  if $partial; then
    echo "fleet.sh: node $id is still draining: $left sessions could not move and are served where they were:"
    admin_curl "$dir" "$router/v1/admin/nodes" | drain_report "$id" list
    exit 1
  fi
  echo "fleet.sh: node $id drained in $(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }') s"
}

# Reads GET /v1/admin/nodes on stdin: node $1's "state sessions unmoved" (count), or each
# session it could not move with its reason (list).
drain_report() { # id count|list
  python3 -c '
import json, sys
node = next((n for n in json.load(sys.stdin)["nodes"] if n["id"] == sys.argv[1]), None)
if node is None:
    sys.exit(1)
if sys.argv[2] == "count":
    print(node["state"], node["sessions"], len(node.get("unmoved", [])))
else:
    for u in node.get("unmoved", []):
        print("  %s: %s" % (u["session_id"], u["reason"]))' "$@"
}

# curl with the fleet's admin key as a header read from stdin (never on a command line).
admin_curl() { # dir curl-args...
  local dir=$1; shift
  printf 'X-API-Key: %s\n' "$(setting "$dir" SANDBOX_ADMIN_KEY)" |
    "${CLEAN_ENV[@]}" curl -sS --max-time 10 -H @- "$@"
}

exec_dir=
up_dir=
cmd_exec() {
  local n=$1; shift
  local key
  exec_dir=$(mktemp -d)
  key=${SANDBOX_API_KEY:-alk_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}
  SANDBOX_API_KEYS=${SANDBOX_API_KEYS:-demo:$key} cmd_up "$exec_dir" "$n"
  # the fleet goes down however CMD ends (exec_dir is global: the trap runs after this returns)
  trap 'cmd_down "$exec_dir" >/dev/null 2>&1; rm -rf "$exec_dir"' EXIT
  SANDBOX_API_URL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["router"])' "$exec_dir/fleet.json") \
    SANDBOX_API_KEY=$key LUA_PATH="$top/lua/?.lua;$top/lua/?/init.lua;;" LUA_CPATH="$top/build/?.so;;" "$@"
}

# `status DIR`: the fleet at a glance, as tables: the router (does /healthz answer through it,
# and whose view it gives), the database, each node (its row, its process, its /healthz and
# the router's view of it) and the sessions by tenant and node. Reads only; works while the
# database is down: a node's last view of the nodes table, asked for with the admin key
# (SANDBOX_ADMIN_KEY, else the fleet's from DIR/fleet.env; sent in a header), else each node's
# own answer, marked. Self-contained: the files `up` writes,
# psql (the password from DIR/pg/pgpass), the nodes' HTTP routes and HAProxy's stats socket
# when there is one.
cmd_status() {
  local dir
  dir=$(cd "$1" && pwd) || die "no directory $1"
  [ -f "$dir/fleet.json" ] || die "$dir holds no fleet (no fleet.json)"
  DIR="$dir" python3 - <<'EOF'
import json, os, socket, subprocess, time, urllib.request

d = os.environ["DIR"]
info = json.load(open(os.path.join(d, "fleet.json")))
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only

def get(url, key=None):
    try:
        req = urllib.request.Request(url, headers={"X-API-Key": key} if key else {})
        with direct.open(req, timeout=3) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None
    except Exception:
        return None, None

def psql(query):
    env = dict(os.environ, PGPASSFILE=os.path.join(d, "pg/pgpass"), PGCONNECT_TIMEOUT="3")
    try:
        out = subprocess.run(["psql", "-X", "-q", "-At", "-F", "\t", "-h", "127.0.0.1", "-p", str(info["postgres"]["port"]),
                              "-U", "airlock", "-d", "airlock", "-c", query], env=env, capture_output=True, text=True, timeout=10)
    except Exception:
        return None
    return [l.split("\t") for l in out.stdout.splitlines()] if out.returncode == 0 else None

def alive(pid):
    try:
        os.kill(int(pid), 0)
        return True
    except Exception:
        return False

def router_servers():
    """Each node as HAProxy's checks see it ({"node1": "UP"}): its line in the backend that
    serves tenant-level requests, which tracks the node's one health check."""
    sock = info.get("haproxy", {}).get("stats_socket")
    if not sock or not os.path.exists(sock):
        return {}
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(3)
        s.connect(sock)
        s.sendall(b"show stat\n")
        s.shutdown(socket.SHUT_WR)
        data = s.makefile().read()
        s.close()
    except Exception:
        return {}
    states = {}
    for line in data.splitlines():
        f = line.split(",")  # pxname, svname, ..., status is the 18th field
        if len(f) > 17 and f[0] == "any" and f[1] not in ("BACKEND", "FRONTEND"):
            states[f[1]] = f[17]
    return states

def table(headers, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)] if rows else [len(h) for h in headers]
    for r in [headers] + rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip())

code, health = get(info["router"] + "/healthz")
if code == 200 and health:
    fl = health.get("fleet") or {}
    view = ("fleet-wide: %s nodes (%s active), %s sessions" % (fl.get("nodes"), fl.get("nodes_active"), fl.get("sessions"))
            if health.get("scope") == "fleet" else "node %s's view only: %s sessions" % (health.get("node"), health.get("active_sessions")))
    print("router    %s  answers /healthz (from node %s; %s)" % (info["router"], health.get("node"), view))
else:
    print("router    %s  does not answer /healthz (%s)" % (info["router"], code or "no connection"))
nodes = psql("SELECT id, lpad(to_hex(slot), 2, '0'), state, round(extract(epoch FROM now() - heartbeat)::numeric, 1),"
             " load, capacity, (SELECT count(*) FROM sessions s WHERE s.node = n.id AND s.state = 'active'),"
             " (SELECT count(*) FROM commands c WHERE c.node = n.id) FROM nodes n ORDER BY slot")
def admin_key():
    """SANDBOX_ADMIN_KEY of this environment, else the fleet's (DIR/fleet.env, which `up` writes)."""
    if os.environ.get("SANDBOX_ADMIN_KEY"):
        return os.environ["SANDBOX_ADMIN_KEY"]
    try:
        with open(os.path.join(d, "fleet.env")) as f:
            for line in f:
                if line.startswith("SANDBOX_ADMIN_KEY="):
                    return line.rstrip("\n").split("=", 1)[1]
    except OSError:
        pass
    return None

seen_by = None
key = admin_key() if nodes is None else None
if key:
    # a node's last view of the nodes table (GET /v1/admin/nodes answers it during an outage)
    for n in info["nodes"]:
        c, view = get(n["url"] + "/v1/admin/nodes", key)
        if c == 200 and view:
            seen_by = "node %s's last view, as of %s" % (view["node"], time.strftime("%H:%M:%S", time.localtime(view["as_of"])))
            nodes = [[x["id"], x["slot"], x["state"], "%.1f" % x["heartbeat_age_s"], str(x["load"]), str(x["capacity"]),
                      str(x["sessions"]), str(x["commands_running"])] for x in view["nodes"]]
            break
state = "up" if seen_by is None and nodes is not None else "DOWN: " + (
    "node rows below are " + seen_by + " (stale)" if seen_by else "node rows below are each node's own answer")
print("database  127.0.0.1:%s  %s" % (info["postgres"]["port"], state))
print()
rows_db = {r[0]: r for r in nodes or []}
servers = router_servers()
rows = []
for n in info["nodes"]:
    c, h = get(n["url"] + "/healthz")
    r = rows_db.get(n["id"])
    proc = "running" if alive(n["pid"]) else "gone"
    answer = "ok" if c == 200 else (str(c) if c else "no answer")
    held = h.get("node_sessions", h.get("active_sessions")) if h else "?"
    if r:
        rows.append([n["id"], r[1], r[2], r[3] + "s ago", r[4], r[5] if r[5] != "0" else "-", r[6], held, r[7],
                     proc, answer, servers.get(n["id"], "-"), n["url"]])
    else:
        rows.append([n["id"], "?", "?", "?", "?", "?", "?", held, "?", proc, answer, servers.get(n["id"], "-"), n["url"]])
table(["NODE", "SLOT", "STATE", "HEARTBEAT", "LOAD", "CAPACITY", "SESSIONS", "HELD", "COMMANDS", "PROCESS",
       "HEALTHZ", "ROUTER", "URL"], rows)
print()
sessions = None if seen_by or nodes is None else psql(
    "SELECT tenant, node, state, count(*) FROM sessions GROUP BY tenant, node, state ORDER BY tenant, node, state")
if sessions is None:
    print("sessions: the database cannot be reached (HELD above: each node's own count)")
elif not sessions:
    print("sessions: none")
else:
    table(["TENANT", "NODE", "STATE", "SESSIONS"], sessions)
EOF
}

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
  exit 2
}

[ $# -ge 1 ] || usage
cmd=$1; shift
case "$cmd" in
  up)
    [ $# -ge 1 ] || usage
    dir=$1; shift; nodes=3
    while [ $# -gt 0 ]; do
      case "$1" in
        --nodes) nodes=${2:-}; shift 2 || usage ;;
        --nodes=*) nodes=${1#--nodes=}; shift ;;
        *) usage ;;
      esac
    done
    cmd_up "$dir" "$nodes" ;;
  down) [ $# -eq 1 ] || usage; cmd_down "$1" ;;
  router) [ $# -eq 1 ] || usage; cmd_router "$1" ;;
  start-node) [ $# -eq 2 ] || usage; cmd_start_node "$1" "$2" ;;
  drain) [ $# -eq 2 ] || usage; cmd_drain "$1" "$2" ;;
  status) [ $# -eq 1 ] || usage; cmd_status "$1" ;;
  db-stop) [ $# -eq 1 ] || usage; stop_postgres "$(cd "$1" && pwd)" ;;
  db-start)
    [ $# -eq 1 ] || usage
    d=$(cd "$1" && pwd)
    pg_start "$d" || die "PostgreSQL did not start"
    write_fleet_json "$d" ;;
  exec)
    nodes=3
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
      case "$1" in
        --nodes) nodes=${2:-}; shift 2 || usage ;;
        *) usage ;;
      esac
    done
    [ "${1:-}" = "--" ] && shift
    [ $# -ge 1 ] || usage
    cmd_exec "$nodes" "$@" ;;
  *) usage ;;
esac
