# airlock: the Lua SDK (C core on libcurl) and airlockd, the local Airlock server.
# Every path and flag is a variable: `make LUA=luajit LUA_PC=luajit` builds the core for LuaJIT.

LUA        ?= lua5.4
LUA_PC     ?= lua5.4
PKG_CONFIG ?= pkg-config
CC         ?= cc
CFLAGS     ?= -O2 -g
WARN       ?= -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
WERROR     ?=
SANITIZE   ?=
LIBFLAG    ?= -shared

LUA_INCDIR  ?= $(shell $(PKG_CONFIG) --variable=includedir $(LUA_PC) 2>/dev/null)/$(LUA_PC)
LUA_CFLAGS  ?= $(shell $(PKG_CONFIG) --cflags $(LUA_PC) 2>/dev/null || echo -I$(LUA_INCDIR))
CURL_CFLAGS ?= $(shell $(PKG_CONFIG) --cflags libcurl)
CURL_LIBS   ?= $(shell $(PKG_CONFIG) --libs libcurl)
MHD_CFLAGS  ?= $(shell $(PKG_CONFIG) --cflags libmicrohttpd)
MHD_LIBS    ?= $(shell $(PKG_CONFIG) --libs libmicrohttpd)
JSON_CFLAGS ?= $(shell $(PKG_CONFIG) --cflags jansson)
JSON_LIBS   ?= $(shell $(PKG_CONFIG) --libs jansson)
SQLITE_CFLAGS ?= $(shell $(PKG_CONFIG) --cflags sqlite3)
SQLITE_LIBS   ?= $(shell $(PKG_CONFIG) --libs sqlite3)
CRYPTO_CFLAGS ?= $(shell $(PKG_CONFIG) --cflags libcrypto)
CRYPTO_LIBS   ?= $(shell $(PKG_CONFIG) --libs libcrypto)
# egress: rtnetlink for the sandboxes' veth pairs (libmnl), DNS on the proxy's loop (c-ares)
MNL_CFLAGS    ?= $(shell $(PKG_CONFIG) --cflags libmnl)
MNL_LIBS      ?= $(shell $(PKG_CONFIG) --libs libmnl)
CARES_CFLAGS  ?= $(shell $(PKG_CONFIG) --cflags libcares)
CARES_LIBS    ?= $(shell $(PKG_CONFIG) --libs libcares)
# the fleet's shared state (--database): PostgreSQL's client library
PQ_CFLAGS     ?= $(shell $(PKG_CONFIG) --cflags libpq)
PQ_LIBS       ?= $(shell $(PKG_CONFIG) --libs libpq)
# libext2fs reads a workspace disk's block bitmaps (a drain's moves send only used blocks)
EXT2FS_LIBS   ?= $(shell $(PKG_CONFIG) --libs ext2fs com_err)

PREFIX      ?= /usr/local
INST_LIBDIR ?= $(PREFIX)/lib/lua/5.4
INST_LUADIR ?= $(PREFIX)/share/lua/5.4
INST_BINDIR ?= $(PREFIX)/bin

BUILD      ?= build
RUNSC      ?= $(CURDIR)/.deps/runsc/usr/bin/runsc

CORE_SRC   := src/core/core.c
# airlockd's sources live in folders under src/server (http/, api/, domain/, sandbox/, ...);
# every include is spelled from src/server ("http/http.h"), hence -I src/server.
SERVER_SRC := $(sort $(shell find src/server -name '*.c'))
CORE_SO    := $(BUILD)/airlock/core.so
AIRLOCKD   := $(BUILD)/airlockd
# the first process of a sandbox booted ahead of its command (static: the sandbox has no loader
# of its own); airlockd looks for it beside itself
WAITER     := $(BUILD)/airlock-waiter
# the first process of a session's long-lived sandbox (SANDBOX_EXEC_MODE=session): runs each
# command in fresh namespaces; static like the waiter, found beside airlockd
AGENT      := $(BUILD)/airlock-agent
# preloaded into the bash each of the agent's containers execs ahead of its command (not static:
# it is loaded into the root's bash); found beside the agent
BOOTSTRAP  := $(BUILD)/airlock-bootstrap.so
# the Python kernel program, beside the agent (airlockd puts it in sandboxes as /airlock/kernel.py)
KERNEL_PY_SRC := src/kernel/python/airlock_kernel.py
# its launcher (airlock-kernel.py, run as /airlock/kernel.py), the program (kernel-program.py) and
# the program's bytecode compiled by the interpreter sandboxes on the default root run (the
# host's /usr/bin/python3): an idle kernel that compiles nothing keeps ~1 MB less
KERNEL_PY  := $(if $(wildcard $(KERNEL_PY_SRC)),$(BUILD)/airlock-kernel.py $(BUILD)/airlock-kernel-program.py \
              $(BUILD)/airlock-kernel-program.pyc)
KERNEL_PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)
# the raw libcurl keep-alive loop bench/openresty.lua compares the transports with
RAW_CURL_RATE := $(BUILD)/bench/raw_curl_rate
LUA_SRC    := $(shell find lua/airlock -name '*.lua' | sort)
# The version, said once: the engine's (airlock.VERSION); the rockspec and core.c must agree.
VERSION    := $(shell sed -n 's/^M.VERSION = "\(.*\)"$$/\1/p' lua/airlock/internal/version.lua)
ROCKSPEC   := rockspec/airlock-sandbox-$(VERSION)-1.rockspec
DIST_NAME  := airlock-sandbox-$(VERSION)
DIST_DIR   := $(BUILD)/dist

# Lua sees lua/ (the modules) and build/ (airlock/core.so) before anything installed.
export LUA_PATH  := $(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;$(CURDIR)/spec/?.lua;;
export LUA_CPATH := $(CURDIR)/$(BUILD)/?.so;;
export AIRLOCKD_BIN := $(CURDIR)/$(AIRLOCKD)
export AIRLOCK_RUNSC := $(RUNSC)

.PHONY: all build deps run fleet test luajit-core lua51-core lua53-core compat-builds lint sanitize \
        asan-test valgrind-test ci ci-builds bench install dist clean

all: build

build: $(CORE_SO) $(AIRLOCKD) $(WAITER) $(AGENT) $(BOOTSTRAP) $(KERNEL_PY) $(RAW_CURL_RATE)

# Every build variant has its own folder (build/, build/asan, build/luajit, build/lua51, ...)
# with its objects under $(BUILD)/obj, so variants never share an object and `make -j` builds
# them side by side. -MMD writes each object's header dependencies beside it (.d, read back
# below); the flags file makes every object of a variant rebuild when its compile flags change.
OBJ         := $(BUILD)/obj
FLAGS_FILE  := $(OBJ)/flags
COMPILE     := $(CC) $(CFLAGS) $(WARN) $(WERROR) $(SANITIZE)
SERVER_CFLAGS := -D_GNU_SOURCE -pthread -I src/server $(MHD_CFLAGS) $(JSON_CFLAGS) $(SQLITE_CFLAGS) \
  $(CRYPTO_CFLAGS) $(CURL_CFLAGS) $(MNL_CFLAGS) $(CARES_CFLAGS) $(PQ_CFLAGS)
SERVER_LIBS := $(MHD_LIBS) $(JSON_LIBS) $(SQLITE_LIBS) $(CRYPTO_LIBS) $(CURL_LIBS) $(MNL_LIBS) \
  $(CARES_LIBS) $(PQ_LIBS) $(EXT2FS_LIBS) -lm -pthread
SERVER_OBJ  := $(SERVER_SRC:src/server/%.c=$(OBJ)/server/%.o)
# the status page (src/server/admin_page/) inside airlockd, so an installed one needs no files
# beside it: the files' bytes in a C file generated by scripts/embed-files.sh (xxd)
ADMIN_PAGE_FILES := $(sort $(wildcard src/server/admin_page/*))
ADMIN_PAGE_C     := $(OBJ)/gen/admin_page_files.c
ADMIN_PAGE_OBJ   := $(OBJ)/gen/admin_page_files.o
# the core is one translation unit: core.c includes its parts
CORE_OBJ    := $(OBJ)/core/core.o

.PHONY: FORCE
$(FLAGS_FILE): FORCE
	@mkdir -p $(@D)
	@echo '$(COMPILE) $(LUA_CFLAGS)' | cmp -s - $@ || echo '$(COMPILE) $(LUA_CFLAGS)' > $@

$(CORE_OBJ): $(CORE_SRC) $(FLAGS_FILE)
	@mkdir -p $(@D)
	$(COMPILE) -MMD -MP -fPIC $(LUA_CFLAGS) $(CURL_CFLAGS) -c -o $@ $<

$(CORE_SO): $(CORE_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LIBFLAG) $(SANITIZE) -o $@ $< $(CURL_LIBS)

$(OBJ)/server/%.o: src/server/%.c $(FLAGS_FILE)
	@mkdir -p $(@D)
	$(COMPILE) -MMD -MP $(SERVER_CFLAGS) -c -o $@ $<

$(ADMIN_PAGE_C): $(ADMIN_PAGE_FILES) scripts/embed-files.sh
	@mkdir -p $(@D)
	scripts/embed-files.sh $(ADMIN_PAGE_FILES) > $@.tmp && mv $@.tmp $@

$(ADMIN_PAGE_OBJ): $(ADMIN_PAGE_C) src/server/api/admin_page.h $(FLAGS_FILE)
	$(COMPILE) $(SERVER_CFLAGS) -c -o $@ $<

$(AIRLOCKD): $(SERVER_OBJ) $(ADMIN_PAGE_OBJ)
	@mkdir -p $(@D)
	$(CC) $(SANITIZE) -o $@ $(SERVER_OBJ) $(ADMIN_PAGE_OBJ) $(SERVER_LIBS)

$(WAITER): src/waiter/waiter.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(WERROR) -D_GNU_SOURCE -static -o $@ src/waiter/waiter.c

# the agent's parts, one file per process (src/agent/agent.h), and the protocol (protocol.h)
AGENT_SRC  := src/agent/agent.c src/agent/worker.c src/agent/container.c src/agent/out.c
$(AGENT): $(AGENT_SRC) src/agent/agent.h src/agent/protocol.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(WERROR) -D_GNU_SOURCE -static -o $@ $(AGENT_SRC)

$(BOOTSTRAP): src/agent/bootstrap.c src/agent/protocol.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(WERROR) -D_GNU_SOURCE -shared -fPIC -o $@ src/agent/bootstrap.c

$(BUILD)/airlock-kernel.py: src/kernel/python/kernel_start.py
	@mkdir -p $(@D)
	install -m 644 $< $@

$(BUILD)/airlock-kernel-program.py: $(KERNEL_PY_SRC)
	@mkdir -p $(@D)
	install -m 644 $< $@

# (unchecked: the copy in a sandbox's root has another mtime; the launcher compares the magic)
$(BUILD)/airlock-kernel-program.pyc: $(KERNEL_PY_SRC)
	@mkdir -p $(@D)
	$(KERNEL_PYTHON) -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], \
	  dfile="/airlock/kernel-program.py", doraise=True, \
	  invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)' $< $@

-include $(CORE_OBJ:.o=.d) $(SERVER_OBJ:.o=.d)

deps:
	./scripts/install-deps.sh

# make run: packages, build, a fresh airlockd on loopback, the quick start, airlockd stopped.
run: deps
	$(MAKE) build
	./scripts/with-airlockd.sh $(LUA) examples/quickstart.lua

# make fleet: the quick start through the router of a fresh 3-node fleet on this machine
# (scripts/fleet.sh: a private PostgreSQL, HAProxy, airlockd on 127.0.0.2-4), then all stopped.
fleet: deps
	$(MAKE) build
	./scripts/fleet.sh exec --nodes 3 -- $(LUA) examples/quickstart.lua

# make test: the same preparation, then every spec where its result can differ (Lua 5.4,
# LuaJIT, Lua 5.1, Lua 5.3 for the core's ABI; airlockd's specs once), as parallel jobs.
# `make test TEST_MODE=ci` (what .ci/run calls) also builds the ASan/UBSan variant, whose Lua
# 5.4 runs stand in for the plain ones where they can, and adds valgrind over the core.
NPROC := $(shell nproc 2>/dev/null || echo 2)
TEST_MODE ?=
TEST_BUILDS = build luajit-core compat-builds $(if $(filter ci,$(TEST_MODE)),sanitize $(ASAN_HOST))
TEST_FLAGS  = $(if $(filter ci,$(TEST_MODE)),--asan --valgrind)
test: deps
	$(MAKE) -j$(NPROC) $(TEST_BUILDS)
	LUA=$(LUA) ./scripts/test.sh $(TEST_FLAGS)

# The same C core built against LuaJIT's headers (the module is ABI-specific).
luajit-core:
	$(MAKE) BUILD=build/luajit LUA_PC=luajit build/luajit/airlock/core.so

# The core against the Lua 5.1 and 5.3 headers (build/lua51, build/lua53), each loaded by its
# own interpreter with the whole Lua API (scripts/test.sh then runs the specs under them).
COMPAT_CHECK := local c = require "airlock.core"; assert(require("airlock").VERSION == c._VERSION); \
  assert(require("airlock.keys").client); print(_VERSION .. ": airlock.core " .. c._VERSION .. " loads")
lua51-core:
	$(MAKE) BUILD=build/lua51 LUA_PC=lua5.1 build/lua51/airlock/core.so
lua53-core:
	$(MAKE) BUILD=build/lua53 LUA_PC=lua5.3 build/lua53/airlock/core.so
compat-builds: lua51-core lua53-core
	@for v in 5.1 5.3; do \
	  LUA_CPATH="$(CURDIR)/build/lua$$(echo $$v | tr -d .)/?.so;;" lua$$v -e '$(COMPAT_CHECK)' || exit 1; \
	done

lint: deps
	cppcheck --std=c11 --enable=warning,portability --error-exitcode=1 --inline-suppr --quiet \
	  -I src/core -I src/server src/core src/server src/waiter src/agent bench/raw_curl_rate.c
	luacheck --no-color -q lua spec examples bin/airlock-mcp $(wildcard bench/*.lua bench/hosts/*.lua)

sanitize:
	$(MAKE) build BUILD=build/asan CFLAGS="-O1 -g -fno-omit-frame-pointer" \
	  SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=undefined"

# spec/c/lua_host.c: a Lua 5.4 host linked with ASan, so the ASan core loads without LD_PRELOAD
# (which would leak libasan into sh/python3/nginx).
ASAN_HOST := build/asan/lua-host
$(ASAN_HOST): spec/c/lua_host.c
	@mkdir -p $(@D)
	$(CC) -O1 -g -fno-omit-frame-pointer $(WARN) $(WERROR) -fsanitize=address,undefined \
	  -fno-sanitize-recover=undefined $(shell $(PKG_CONFIG) --cflags lua5.4) -o $@ \
	  $< $(shell $(PKG_CONFIG) --libs lua5.4)

# The specs whose Lua 5.4 run goes through the ASan/UBSan build (the core in the ASan host,
# an ASan airlockd) are ASAN_SPECS in scripts/test.sh: spec/unit, every spec/server file (but
# one tagged #noasan) and the integration specs listed there. Every sanitizer report (the
# host's or an airlockd's, leaks included) lands in build/asan/reports; any report fails. In
# `make ci` this is those specs' only Lua 5.4 run.
asan-test: sanitize $(ASAN_HOST)
	./scripts/test.sh --asan --only=asan

# valgrind over the core (Lua 5.4, the regular build): its unit spec, the failure paths
# against the misbehaving server, the host-loop hooks and the libuv transport on them.
# Definite leaks and memory errors fail (exit 99).
valgrind-test: build
	./scripts/test.sh --valgrind --only=valgrind

# make ci: make test as .ci/run runs it (after make lint).
ci:
	$(MAKE) test TEST_MODE=ci

ci-builds: build luajit-core compat-builds sanitize $(ASAN_HOST)

# make bench: every benchmark prints ratios measured side by side in one run (needs root for runsc).
# airlockd_latency: create/write/read/exec p50/p95 and exec vs the bare `runsc run` it wraps.
# poll_frames: airlock.poll(0) per game frame, idle vs 50 requests in flight vs 50 commands;
# love_frames: the same in real LÖVE frames (LuaJIT). nvim_loop: a 10 ms vim.loop timer's
# lateness, idle vs 8 commands in flight, and idle wakeups with the SDK loaded (Neovim).
# call_rate: small calls per second of the curl and uv transports vs raw_curl_rate, a raw
# libcurl keep-alive loop in C (bench/raw_curl_rate.c). call_instructions: the client's
# instructions per small call (callgrind) of the same kinds, which the load does not move.
# workspace_disks: session create/DELETE with a disk image each, restart with 50 sessions.
# openresty: nginx (1 worker) running examples/openresty, 32 concurrent POST /run vs the plain-Lua
# SDK, /ping latency during it, the cosocket transport's small-call rate vs raw_curl_rate, and
# a 1,000-request soak (worker RSS, sessions left, crashes).
# slow_connections: exec `true` and /healthz with 1,000 slowloris connections held vs none.
# output_memory: airlockd's memory above idle while a command writes 1 GB to stdout, and its
#   drain time vs a bare `runsc run | wc -c`.
# warm: exec true / python3 / create + first exec / 20 back to back on the cold path, with
#   sandboxes booted ahead, and under a bare `runsc run`; the host memory of a waiting sandbox.
# fairness: a tenant's exec latency while another tenant runs 4 CPU burners, vs idle.
# egress: exec with egress vs without; one 100 MB HTTPS tunnel through the proxy vs direct.
# fleet: a 3-node fleet (scripts/fleet.sh): router overhead (exec true, a small read) via HAProxy
#   vs straight to the node, the spread of creates, exact max_sessions under 300 parallel creates,
#   what creates see after kill -9 of a node.
# stream_exec: 10 MB of stdout streamed via the SDK vs raw curl + cjson of the plain route (time,
#   SDK peak RSS vs payload); first-piece latency of `echo a; sleep 2; echo b` (command's clock).
# pause: files-only pause, and a paused session's first answer (its resume), vs create + first
#   exec (with and without a spare) and a bare `runsc run true`.
# kernels: a trivial kernel cell vs `python3 -c pass` as a command; a cell using a 1M-entry dict
#   the kernel holds vs a fresh run reloading it; an idle kernel's CPU and memory.
bench: build luajit-core
	$(LUA) bench/airlockd_latency.lua
	$(LUA) bench/warm.lua
	$(LUA) bench/poll_frames.lua
	$(LUA) bench/love_frames.lua
	$(LUA) bench/nvim_loop.lua
	$(LUA) bench/workspace_disks.lua
	RAW_CURL_RATE=$(RAW_CURL_RATE) $(LUA) bench/call_rate.lua
	RAW_CURL_RATE=$(RAW_CURL_RATE) LUA_CPATH="$(CURDIR)/build/luajit/?.so;;" luajit bench/call_rate.lua
	RAW_CURL_RATE=$(RAW_CURL_RATE) $(LUA) bench/call_instructions.lua
	RAW_CURL_RATE=$(RAW_CURL_RATE) $(LUA) bench/openresty.lua
	$(LUA) bench/slow_connections.lua
	$(LUA) bench/output_memory.lua
	$(LUA) bench/stream_exec.lua
	$(LUA) bench/kernels.lua
	$(LUA) bench/fairness.lua
	$(LUA) bench/egress.lua
	$(LUA) bench/files_binary.lua
	$(LUA) bench/fleet.lua
	$(LUA) bench/templates.lua
	$(LUA) bench/pause.lua
	$(LUA) bench/snapshots.lua

$(RAW_CURL_RATE): bench/raw_curl_rate.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(WARN) -Werror $(CURL_CFLAGS) -o $@ $< $(CURL_LIBS)

install: build
	install -d $(DESTDIR)$(INST_LIBDIR)/airlock $(DESTDIR)$(INST_BINDIR)
	install -m 755 $(CORE_SO) $(DESTDIR)$(INST_LIBDIR)/airlock/core.so
	for f in $(LUA_SRC:lua/%=%); do \
	  install -D -m 644 lua/$$f $(DESTDIR)$(INST_LUADIR)/$$f || exit 1; done
	install -m 755 $(AIRLOCKD) $(DESTDIR)$(INST_BINDIR)/airlockd
	install -m 755 $(WAITER) $(DESTDIR)$(INST_BINDIR)/airlock-waiter
	install -m 755 $(AGENT) $(DESTDIR)$(INST_BINDIR)/airlock-agent
	install -m 644 $(BOOTSTRAP) $(DESTDIR)$(INST_BINDIR)/airlock-bootstrap.so
	$(if $(KERNEL_PY),install -m 644 $(KERNEL_PY) $(DESTDIR)$(INST_BINDIR)/)
	install -m 755 bin/airlock-mcp $(DESTDIR)$(INST_BINDIR)/airlock-mcp

# make dist: the release tarball of the SDK (reproducible: sorted, fixed owner and time) and
# the .src.rock, in build/dist/: the rockspec and that tarball (its source), what
# `luarocks pack rockspec/...` then gives too. Works on any copy of the sources, git or not.
# Installs offline:
#   luarocks --lua-version=5.4 install --deps-mode=none ./airlock-sandbox-<v>-1.src.rock
DIST_FILES := Makefile README.md SECURITY.md CONTRIBUTING.md rockspec src/core lua bin docs examples
dist:
	@grep -q '^#define CORE_VERSION *"$(VERSION)"' src/core/internal.h || \
	  { echo "dist: src/core/internal.h's CORE_VERSION is not $(VERSION)"; exit 1; }
	@test -f $(ROCKSPEC) || { echo "dist: no $(ROCKSPEC)"; exit 1; }
	rm -rf $(DIST_DIR) && mkdir -p $(DIST_DIR)/rock
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
	  --transform 's,^,$(DIST_NAME)/,' -czf $(DIST_DIR)/$(DIST_NAME).tar.gz $(DIST_FILES)
	cp $(DIST_DIR)/$(DIST_NAME).tar.gz $(ROCKSPEC) $(DIST_DIR)/rock/
	find $(DIST_DIR)/rock -exec touch -h -d @0 {} +
	cd $(DIST_DIR)/rock && find . -mindepth 1 | LC_ALL=C sort | \
	  zip -q -X -D ../$(DIST_NAME)-1.src.rock -@
	rm -rf $(DIST_DIR)/rock
	@echo "dist: $(DIST_DIR)/$(DIST_NAME)-1.src.rock" 

clean:
	rm -rf $(BUILD)
