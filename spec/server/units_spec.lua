-- airlockd's C units, tested alone: the growable buffer (src/server/util/buf.c), the tree
-- walker (src/server/fs/walk.c) and the moves of files and directories across filesystems
-- (src/server/util/move_file.c) in spec/c/server_units_test.c; the output capture, the
-- launcher's output budget and cancel descriptor, and the host-wide command slots
-- (src/server/sandbox/capture.c, sandbox/proc.c, domain/slots.c) in
-- spec/c/sandbox_units_test.c; the egress proxy's pure parts in spec/c/egress_units_test.c;
-- the settings' parsers and loader (src/server/config/) in spec/c/config_units_test.c; the
-- leases of a fleet's request tokens and exec slots (src/server/domain/limits.c) in spec/c/limits_units_test.c.
-- The agent protocol's frames (src/agent/protocol.h) in spec/c/agent_protocol_test.c. The
-- per-session figures and the Prometheus counters (domain/figures.c, obs/metrics.c) in
-- spec/c/obs_units_test.c. The OCI spec's network namespace set for a restore
-- (src/server/sandbox/oci.c) in spec/c/oci_units_test.c.
-- Lua 5.1-compatible (no <close>).
local c_unit = require "support.c_unit"

describe("airlockd C units", function()
  it("util/buf, fs/walk and util/move_file pass their checks", function()
    local out, ok = c_unit.run({ "spec/c/server_units_test.c", "src/server/fs/walk.c", "src/server/util/buf.c",
      "src/server/util/move_file.c", "src/server/util/sync.c" })
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)

  it("sandbox/capture, sandbox/proc (budget, cancel_fd) and domain/slots pass their checks", function()
    local out, ok = c_unit.run({ "spec/c/sandbox_units_test.c", "src/server/sandbox/capture.c",
      "src/server/sandbox/proc.c", "src/server/sandbox/cgroup.c", "src/server/sandbox/cgroup_usage.c",
      "src/server/domain/slots.c",
      "src/server/text/utf8.c", "src/server/util/buf.c" })
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)

describe("airlockd OCI spec C units (sandbox/oci)", function()
  it("set a restore's network namespace in the bundle's spec, the image's linked copy kept (ASan/UBSan)", function()
    local out, ok = c_unit.run({ "spec/c/oci_units_test.c", "src/server/sandbox/oci.c" },
      "-fsanitize=address,undefined -fno-sanitize-recover=undefined -ljansson")
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)

describe("airlockd limits C units (domain/limits)", function()
  it("lease a fleet's tokens and exec slots: spent locally, given back, asked for, bounded, alone", function()
    local out, ok = c_unit.run({ "spec/c/limits_units_test.c", "src/server/domain/limits.c",
      "src/server/domain/tenants.c" },
      "-fsanitize=address,undefined -fno-sanitize-recover=undefined -ljansson -pthread")
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)

describe("airlockd observability C units (domain/figures, obs/metrics)", function()
  it("keep each session's commands and released sandboxes' usage, write the Prometheus text (ASan/UBSan)", function()
    local out, ok = c_unit.run({ "spec/c/obs_units_test.c", "src/server/domain/figures.c", "src/server/obs/metrics.c",
      "src/server/util/buf.c" }, "-fsanitize=address,undefined -fno-sanitize-recover=undefined -lm -pthread")
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)

describe("airlockd egress C units (addr, request, policy, pass, log)", function()
  it("pass their checks, the request parser under 300,000 mutated heads, all with ASan/UBSan", function()
    local out, ok = c_unit.run({ "spec/c/egress_units_test.c", "src/server/egress/addr.c",
      "src/server/egress/request.c", "src/server/egress/policy.c", "src/server/egress/pass.c",
      "src/server/egress/log.c", "src/server/text/pyjson.c", "src/server/text/pystr.c", "src/server/text/utf8.c" },
      "-fsanitize=address,undefined -fno-sanitize-recover=undefined -ljansson -lcrypto")
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)

describe("airlockd settings C units (config/)", function()
  it("parse every kind of value, name the setting in each error, never quote a key, load argv and env", function()
    local sources = { "spec/c/config_units_test.c" }
    for _, dir in ipairs({ "config", "http", "text" }) do
      local p = assert(io.popen("ls src/server/" .. dir .. "/*.c"))
      for f in p:lines() do sources[#sources + 1] = f end
      p:close()
    end
    for _, f in ipairs({ "src/server/egress/policy.c", "src/server/egress/addr.c", "src/server/util/buf.c" }) do
      sources[#sources + 1] = f
    end
    local out, ok = c_unit.run(sources,
      "-fsanitize=address,undefined -fno-sanitize-recover=undefined -ljansson -lmicrohttpd -pthread")
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)

describe("the agent protocol (src/agent/protocol.h)", function()
  it("round-trips every frame on every slot and refuses one past every bound, with ASan/UBSan", function()
    local out, ok = c_unit.run({ "spec/c/agent_protocol_test.c" },
      "-fsanitize=address,undefined -fno-sanitize-recover=undefined")
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)
