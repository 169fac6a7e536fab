-- Tasks and schedulers without a network: a scheduler resumes only its own tasks, a task
-- knows its owner, poll(0) runs what is ready and never waits, and tasks.pcall lets a task
-- wait (yield) through it on every Lua version, PUC 5.1 included.
local tasks = require "airlock.tasks"

-- A waitable that becomes ready when the spec says so.
local function gate()
  return { open = false, ready = function(self) return self.open end }
end

describe("airlock.tasks", function()
  it("a scheduler's poll resumes only its own tasks", function()
    local a, b = tasks.new_scheduler("a"), tasks.new_scheduler("b")
    local wa, wb = gate(), gate()
    local ta = a:spawn(function() tasks.await(wa) return "a" end)
    local tb = b:spawn(function() tasks.await(wb) return "b" end)
    wa.open, wb.open = true, true
    assert.are.equal(0, a:poll(0))
    assert.are.equal("done", ta.status)
    assert.are.equal("running", tb.status)      -- b's task is ready but not a's to resume
    assert.are.equal(1, b:running())
    assert.are.equal(0, b:poll(0))
    assert.are.same({ true, "b" }, { tb:result() })
  end)

  it("a task belongs to the scheduler that spawned it, and so do the tasks it spawns", function()
    local s = tasks.new_scheduler("owner")
    local seen, child
    s:spawn(function()
      seen = tasks.current()
      child = tasks.current():spawn(function() return tasks.current() end)
    end)
    assert.are.equal(s, seen)
    assert.are.equal(s, select(2, child:result()))
    assert.are.equal(tasks.default, tasks.current())    -- outside any task
  end)

  it("a context (an OpenResty request, a libuv host) names the scheduler outside tasks", function()
    local mine = tasks.new_scheduler("request")
    tasks.set_context(function() return mine end)
    finally(function() tasks.set_context(nil) end)
    assert.are.equal(mine, tasks.current())
    tasks.set_context(function() return nil end)
    assert.are.equal(tasks.default, tasks.current())
    assert.has_error(function() tasks.set_context(42) end)
  end)

  it("refuses to resume another scheduler's task", function()
    local a, b = tasks.new_scheduler("a"), tasks.new_scheduler("b")
    local w = gate()
    local t = a:spawn(function() tasks.await(w) end)
    w.open = true
    assert.has_error(function() b:resume_if_ready(t) end, "airlock: a scheduler resumes only its own tasks")
    a:resume_if_ready(t)
    assert.are.equal("done", t.status)
  end)

  it("a notification resumes at once on a scheduler that asks for it", function()
    local s = tasks.new_scheduler("callbacks")
    function s.on_ready(self, task) self:resume_if_ready(task) end
    local w = gate()
    local t = s:spawn(function() tasks.await(w) return 1 end)
    assert.are.equal("running", t.status)
    w.open = true
    tasks.notify(w)
    assert.are.equal("done", t.status)
  end)

  -- A driver whose completions the spec controls.
  local function test_driver()
    local d = { asked = {}, done = 0 }
    d.step = function(ms) d.asked[#d.asked + 1] = ms end
    d.completions = function() return d.done end
    return d
  end

  it("poll(0) steps the tasks' driver without waiting, and a failing task reports its error", function()
    local s = tasks.new_scheduler("p")
    local d = test_driver()
    local w = gate()
    w.driver = d
    local t = s:spawn(function() tasks.await(w) error("boom", 0) end)
    assert.are.equal(1, s:poll(0))
    assert.are.same({ 0 }, d.asked)
    w.open = true
    d.done = d.done + 1
    assert.are.equal(0, s:poll(50))
    assert.are.equal(0, d.asked[2])                  -- something finished: no waiting
    assert.are.same({ false, "boom" }, { t:result() })
    assert.are.equal("failed", t.status)
  end)

  it("poll looks at its tasks only when a driver finished something (or was told)", function()
    local s = tasks.new_scheduler("lazy")
    local d = test_driver()
    local checks = 0
    local w = { driver = d, ready = function() checks = checks + 1 return false end }
    s:spawn(function() tasks.await(w) end)
    s:poll(0)                                          -- a new driver: look once
    local seen = checks
    for _ = 1, 10 do s:poll(0) end
    assert.are.equal(seen, checks)                     -- nothing finished: nothing looked at
    assert.are.same({ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }, d.asked)
    s:poll(25)
    assert.are.equal(25, d.asked[12])                  -- nothing to do: the driver waits
    d.done = 1
    s:poll(25)
    assert.are.equal(0, d.asked[13])
    assert.is_true(checks > seen)
  end)

  it("a scheduler without tasks returns at once", function()
    local s = tasks.new_scheduler("empty")
    assert.are.equal(0, s:poll(1000))
  end)

  it("background tasks run but are not counted", function()
    local s = tasks.new_scheduler("bg")
    local w = gate()
    s:spawn_background(function() tasks.await(w) end)
    assert.are.equal(0, s:poll(0))
    assert.are.equal(1, #s.background)
    w.open = true
    s:poll(0)
    assert.are.equal(0, #s.background)
  end)

  describe("tasks.pcall (coroutine-safe on every Lua version)", function()
    it("lets a task wait inside it, and returns the body's values", function()
      local s = tasks.new_scheduler("pc")
      local w = gate()
      local t = s:spawn(function()
        return tasks.pcall(function(x)
          assert(tasks.current_task(), "the body still counts as the task")
          tasks.await(w)
          return x + 1, "two"
        end, 41)
      end)
      assert.are.equal("running", t.status)
      w.open = true
      s:poll(0)
      assert.are.same({ true, true, 42, "two" }, { t:result() })
    end)

    it("catches the body's error after a wait, with the original error object", function()
      local s = tasks.new_scheduler("pc2")
      local w = gate()
      local boom = setmetatable({}, { __tostring = function() return "boom" end })
      local t = s:spawn(function()
        local ok, err = tasks.pcall(function() tasks.await(w) error(boom) end)
        return ok, err
      end)
      w.open = true
      s:poll(0)
      local ok, a, b = t:result()
      assert.is_true(ok)
      assert.is_false(a)
      assert.are.equal(boom, b)
    end)

    it("nests", function()
      local s = tasks.new_scheduler("pc3")
      local w = gate()
      local t = s:spawn(function()
        return tasks.pcall(function()
          local ok, err = tasks.pcall(function() tasks.await(w) error("inner", 0) end)
          tasks.await(w)
          return ok, err
        end)
      end)
      w.open = true
      s:poll(0)
      assert.are.same({ true, true, false, "inner" }, { t:result() })
    end)

    it("is a plain pcall outside tasks", function()
      assert.are.same({ false, "x" }, { tasks.pcall(error, "x", 0) })
      assert.are.same({ true, 3 }, { tasks.pcall(function() return 3 end) })
    end)
  end)
end)
