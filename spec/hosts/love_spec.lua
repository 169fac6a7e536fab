-- examples/love driven in a real LÖVE 11 (headless, spec/support/hosts/love.lua) against a
-- real airlockd: five commands in flight from one game, each result printed the frame it
-- arrives while the frames keep going, no session left; and quitting the game with commands
-- still running deletes their sandboxes. Also the example as a user starts it, `love
-- examples/love`, with no display: its own conf.lua makes it headless.
local airlockd = require "support.airlockd"
local common = require "support.hosts.common"
local love = require "support.hosts.love"

local EXAMPLE = common.top() .. "/examples/love/main.lua"
local proc = require "support.proc"
local q = proc.shell_quote

local function sessions_left(server)
  local airlock = require "airlock"
  return #airlock.list_sessions({ base_url = server.url, api_key = server.tenants.acme })
end

-- "frame N: label: text" lines → { label = { frame = N, text = text } }, and the final frame.
local function arrivals(stdout)
  local seen = {}
  for frame, label, text in stdout:gmatch("frame (%d+): (%w+): ([^\n]*)") do
    seen[label] = { frame = tonumber(frame), text = text }
  end
  return seen, tonumber(stdout:match("all 5 results in by frame (%d+)"))
end

describe("examples/love", function()
  local server, env
  setup(function()
    server = airlockd.start()
    env = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = server.tenants.acme }
  end)
  teardown(function() if server then airlockd.stop(server) end end)

  it("shows each result as it arrives while the frames go on", function()
    env.AIRLOCK_LOVE_QUIT_WHEN_DONE = "1"
    local run = love.run({ script = EXAMPLE, env = env, timeout = 90 })
    env.AIRLOCK_LOVE_QUIT_WHEN_DONE = nil
    assert.are.equal(0, run.code, run.stdout .. run.stderr)
    local seen, last = arrivals(run.stdout)
    assert.are.same({
      python = "exit 0  499999500000",
      shell = "exit 0  hello from Linux",
      slow = "exit 0  slept 1 s",
      fails = "exit 3  oops",
    }, {
      python = seen.python and seen.python.text, shell = seen.shell and seen.shell.text,
      slow = seen.slow and seen.slow.text, fails = seen.fails and seen.fails.text,
    })
    assert.matches("^exit 0  %d+$", seen.files.text)
    -- the frames went on while the commands ran: the slow one (at least 1 s: the commands
    -- start before frame 1) arrived many frames in (LÖVE runs hundreds of frames a second
    -- headless; a poll that waited for results would have used one frame per result). Not
    -- its order against the quick ones: under load a quick one's session may come later.
    assert.is_true(seen.slow.frame >= 10, "the slow command arrived at frame " .. seen.slow.frame)
    assert.are.equal(last, math.max(seen.python.frame, seen.shell.frame, seen.slow.frame, seen.fails.frame,
      seen.files.frame))
    assert.are.equal(0, sessions_left(server))
  end)

  it("deletes the sandboxes of commands still running when the game quits", function()
    -- the harness quits after 40 frames: the commands (one sleeps 1 s) are still in flight
    local run = love.run({ script = EXAMPLE, env = env, timeout = 60, frames = 40 })
    assert.are.equal(0, run.code, run.stdout .. run.stderr)
    assert.is_nil(run.stdout:match("all 5 results in"))
    assert.are.equal(0, sessions_left(server))
  end)

  for _, how in ipairs({ "with no display", "with AIRLOCK_LOVE_HEADLESS=1" }) do
    it("starts as `love examples/love` headless, " .. how .. ", and shows every result", function()
      local run_env = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = server.tenants.acme,
                        AIRLOCK_LOVE_QUIT_WHEN_DONE = "1", LUA_PATH = common.lua_path(),
                        LUA_CPATH = common.lua_cpath(), XDG_DATA_HOME = proc.make_temp_dir() }
      -- a display that does not exist: only the flag may make it headless then
      local display = how:find("HEADLESS") and "env DISPLAY=:99 AIRLOCK_LOVE_HEADLESS=1"
        or "env -u DISPLAY -u WAYLAND_DISPLAY"
      local run = common.run_bounded(display .. " love " .. q(common.top() .. "/examples/love"), 90, run_env)
      proc.remove_tree(run_env.XDG_DATA_HOME)
      assert.are.equal(0, run.code, run.stdout .. run.stderr)
      -- no window (nor graphics, audio, input) module was loaded
      assert.matches("^headless: no window, results on stdout\n", run.stdout)
      local seen, last = arrivals(run.stdout)
      assert.are.equal("exit 0  hello from Linux", seen.shell and seen.shell.text, run.stdout)
      assert.are.equal("exit 3  oops", seen.fails and seen.fails.text)
      assert.is_number(last)
      assert.are.equal(0, sessions_left(server))
    end)
  end
end)
