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

PREFIX      ?= /usr/local
INST_LIBDIR ?= $(PREFIX)/lib/lua/5.4
INST_LUADIR ?= $(PREFIX)/share/lua/5.4
INST_BINDIR ?= $(PREFIX)/bin

BUILD      ?= build
RUNSC      ?= $(CURDIR)/.deps/runsc/usr/bin/runsc

CORE_SRC   := $(wildcard src/core/*.c)
SERVER_SRC := $(wildcard src/server/*.c)
CORE_SO    := $(BUILD)/airlock/core.so
AIRLOCKD   := $(BUILD)/airlockd
LUA_SRC    := $(wildcard lua/airlock/*.lua)

# Lua sees lua/ (the modules) and build/ (airlock/core.so) before anything installed.
export LUA_PATH  := $(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;$(CURDIR)/spec/?.lua;;
export LUA_CPATH := $(CURDIR)/$(BUILD)/?.so;;
export AIRLOCKD_BIN := $(CURDIR)/$(AIRLOCKD)
export AIRLOCK_RUNSC := $(RUNSC)

.PHONY: all build deps run test luajit-core lint sanitize valgrind bench install clean

all: build

build: $(CORE_SO) $(AIRLOCKD)

$(CORE_SO): $(CORE_SRC) $(wildcard src/core/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(WARN) $(WERROR) $(SANITIZE) -fPIC $(LUA_CFLAGS) $(CURL_CFLAGS) \
	  $(LIBFLAG) -o $@ $(CORE_SRC) $(CURL_LIBS) $(SANITIZE)

$(AIRLOCKD): $(SERVER_SRC) $(wildcard src/server/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(WARN) $(WERROR) $(SANITIZE) -D_GNU_SOURCE -pthread $(MHD_CFLAGS) $(JSON_CFLAGS) \
	  $(SQLITE_CFLAGS) $(CRYPTO_CFLAGS) -o $@ $(SERVER_SRC) $(MHD_LIBS) $(JSON_LIBS) \
	  $(SQLITE_LIBS) $(CRYPTO_LIBS) -pthread $(SANITIZE)

deps:
	./scripts/install-deps.sh

# make run: packages, build, a fresh airlockd on loopback, the quick start, airlockd stopped.
run: deps
	$(MAKE) build
	./scripts/with-airlockd.sh $(LUA) examples/quickstart.lua

# make test: the same preparation, then the whole suite under Lua 5.4 and LuaJIT.
test: deps
	$(MAKE) build luajit-core
	LUA=$(LUA) ./scripts/test.sh

# The same C core built against LuaJIT's headers (the module is ABI-specific).
luajit-core:
	$(MAKE) BUILD=build/luajit LUA_PC=luajit build/luajit/airlock/core.so

lint: deps
	cppcheck --std=c11 --enable=warning,portability --error-exitcode=1 --inline-suppr --quiet \
	  -I src/core -I src/server src/core src/server
	luacheck --no-color -q lua spec examples bin/airlock-mcp $(wildcard bench/*.lua)

sanitize:
	$(MAKE) build BUILD=build/asan CFLAGS="-O1 -g -fno-omit-frame-pointer" \
	  SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=undefined"

install: build
	install -d $(DESTDIR)$(INST_LIBDIR)/airlock $(DESTDIR)$(INST_LUADIR)/airlock $(DESTDIR)$(INST_BINDIR)
	install -m 755 $(CORE_SO) $(DESTDIR)$(INST_LIBDIR)/airlock/core.so
	install -m 644 $(LUA_SRC) $(DESTDIR)$(INST_LUADIR)/airlock/
	install -m 755 $(AIRLOCKD) $(DESTDIR)$(INST_BINDIR)/airlockd
	install -m 755 bin/airlock-mcp $(DESTDIR)$(INST_BINDIR)/airlock-mcp

clean:
	rm -rf $(BUILD)
