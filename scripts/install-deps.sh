#!/usr/bin/env bash
# Installs what airlock needs on Debian 12: the Debian packages that are missing, and
# Debian 13's runsc (gVisor) unpacked into .deps/ (Debian 12's runsc fails statx on
# current kernels). Idempotent: a second run installs nothing.
#
# LuaJIT is OpenResty's luajit2 (`luajit` binary, `pkg-config luajit`, the same 5.1 ABI), the
# one Debian's nginx Lua module is built for. It conflicts with Debian's `luajit` packages: on
# a machine that has them, apt replaces them in the same install. Never name `luajit` or
# `libluajit-5.1-*` here, or each run would swap the two back and forth.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential pkg-config
  lua5.4 liblua5.4-dev lua-cjson lua-busted lua-check lua-socket luarocks
  luajit2 libluajit2-5.1-dev
  libcurl4-openssl-dev libmicrohttpd-dev libjansson-dev libsqlite3-dev sqlite3 libssl-dev
  bubblewrap e2fsprogs python3 ca-certificates curl jq cppcheck valgrind
  # templates (docs/server.md): Debian roots built from the host's apt sources; mmdebstrap's
  # recommends named (this script installs none), as on the machines its specs ran on
  mmdebstrap arch-test fakechroot uidmap gpg libdistro-info-perl libdpkg-perl
  # egress: rtnetlink for the sandboxes' veth pairs, DNS on the proxy's event loop; `ip` for the specs
  libmnl-dev libc-ares-dev iproute2
  nginx openssl lua5.1 liblua5.1-0-dev lua5.3 liblua5.3-dev
  # the SDK's hosts, driven by spec/hosts: nginx's Lua module, Neovim, LÖVE
  libnginx-mod-http-lua libnginx-mod-http-ndk lua-resty-core neovim love lua-luv
  # GET /metrics: promtool checks a scrape, a real Prometheus scrapes airlockd (spec/server/prometheus_spec.lua)
  prometheus
  # the fleet (scripts/fleet.sh, docs/fleet.md): PostgreSQL 15 and its client library, HAProxy;
  # libext2fs reads a workspace disk's used blocks for a drain's moves
  postgresql libpq-dev haproxy libext2fs-dev
  # the status page: embedded into airlockd with xxd; driven in headless Chromium by Selenium
  # (spec/server/status_page_spec.lua), with a font for its screenshot
  xxd chromium chromium-driver python3-selenium fonts-dejavu-core
  # the Python kernel's charts (spec/python): sandboxes built from the host's /usr get it too
  python3-matplotlib
)

# The egress specs run npm inside sandboxes, whose root is built from the host's /usr. A
# machine that already has node with npm (e.g. NodeSource's nodejs, which bundles npm and
# conflicts with Debian's npm package) keeps it; otherwise Debian's nodejs and npm.
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

RUNSC_DIR=.deps/runsc
if [ ! -x "$RUNSC_DIR/usr/bin/runsc" ]; then
  echo "install-deps: fetching runsc from Debian 13 (trixie)"
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=http://deb.debian.org/debian
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/lists/partial" "$work/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri trixie main" > "$work/sources.list"
  opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives"
        -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq
  (cd "$work" && apt-get "${opts[@]}" download runsc >/dev/null)
  mkdir -p "$RUNSC_DIR"
  dpkg -x "$work"/runsc_*.deb "$RUNSC_DIR"
  # sed reads all of it: head would close the pipe early, and SIGPIPE fails this script (pipefail)
  "$RUNSC_DIR/usr/bin/runsc" --version | sed -n 1p
fi
