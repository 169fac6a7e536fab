-- A kernel cell's result (airlock.cell_result) from execute answers: its fields, ok, text,
-- images, check, and the LLM-ready text form; and the streamed execute's display events
-- (airlock.internal.exec_stream). No server: decoded answers as airlockd sends them.
local cell_result = require "airlock.cell_result"
local exec_stream = require "airlock.internal.exec_stream"
local airlock = require "airlock"
local cjson = require "cjson"

-- 1,000 bytes of PNG-looking data, base64 (the text form counts decoded bytes)
local PNG = "iVBORw0KGgo" .. string.rep("A", 1323) .. "=="

local function answer(fields)
  local a = { stdout = "", stderr = "", results = {}, error = cjson.null, execution_count = 3,
    timed_out = false, oom_killed = false, kernel_restarted = false, duration_ms = 12 }
  for k, v in pairs(fields or {}) do a[k] = v end
  return a
end

describe("airlock.cell_result", function()
  it("takes the answer's fields; text is the last result's text/plain", function()
    local r = cell_result.from_response("print('hi')\nx", answer({
      stdout = "hi\n", results = { { ["text/plain"] = "1" }, { ["text/plain"] = "41", ["text/html"] = "<b>41</b>" } },
    }))
    assert.are.equal("print('hi')\nx", r.code)
    assert.are.equal("41", r.text)
    assert.are.equal(2, #r.results)
    assert.is_nil(r.error)
    assert.is_true(r.ok)
    assert.are.equal(3, r.execution_count)
    assert.are.equal(12, r.duration_ms)
    assert.are.same({}, r.warnings)
    assert.are.equal("[STDOUT]:\nhi\n[RESULT]:\n1\n[RESULT]:\n41\n[EXECUTION COUNT]: 3", tostring(r))
    assert.are.equal(r, r:check())
  end)

  it("has no text without results, and a bare count as its text form", function()
    local r = cell_result.from_response("x = 1", answer())
    assert.is_nil(r.text)
    assert.are.equal("[EXECUTION COUNT]: 3", tostring(r))
  end)

  it("shows images by kind and size, and returns them with images()", function()
    local r = cell_result.from_response("plt.show()", answer({
      results = { { ["image/png"] = PNG, ["text/plain"] = "<Figure size 640x480 with 1 Axes>" },
        { ["image/jpeg"] = "/9j/4AAQ", ["text/plain"] = "<Image>" },
        { ["application/json"] = '{"a": 1}' } },
    }))
    assert.are.equal("[RESULT]:\n[image/png: 1000 bytes]\n[RESULT]:\n[image/jpeg: 6 bytes]\n"
      .. "[RESULT]:\n[application/json: 8 bytes]\n[EXECUTION COUNT]: 3", tostring(r))
    assert.are.same({ { mime = "image/png", base64 = PNG } }, r:images())
    assert.are.same({ { mime = "image/png", base64 = PNG }, { mime = "image/jpeg", base64 = "/9j/4AAQ" } },
      r:images("*"))
    assert.are.same({ { mime = "image/jpeg", base64 = "/9j/4AAQ" } }, r:images("image/jpeg"))
  end)

  it("reports an exception with its traceback, and check raises CommandError", function()
    local tb = "Traceback (most recent call last):\n  File \"<cell-3>\", line 1, in <module>\n"
      .. "    1/0\nZeroDivisionError: division by zero\n"
    local r = cell_result.from_response("1/0", answer({ stderr = "note\n",
      error = { name = "ZeroDivisionError", value = "division by zero", traceback = tb } }))
    assert.is_false(r.ok)
    assert.are.equal("ZeroDivisionError", r.error.name)
    assert.are.equal("[STDERR]:\nnote\n[ERROR]:\n" .. tb:gsub("\n$", "") .. "\n[EXECUTION COUNT]: 3", tostring(r))
    local ok, err = pcall(r.check, r)
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "CommandError"))
    assert.are.equal(r, err.result)
    assert.are.equal("Cell 3 raised ZeroDivisionError: division by zero.\n" .. tostring(r), err.message)
  end)

  it("says what a timeout, a restart and the memory limit did to the state", function()
    local timeout = cell_result.from_response("loop", answer({ timed_out = true,
      error = { name = "KeyboardInterrupt", value = "", traceback = "KeyboardInterrupt\n" } }))
    assert.is_false(timeout.ok)
    assert.are.equal("[ERROR]:\nKeyboardInterrupt\n[TIMEOUT]: The cell was interrupted at its time limit; the "
      .. "kernel's state is kept.\n[EXECUTION COUNT]: 3", tostring(timeout))
    local killed = cell_result.from_response("stubborn", answer({ timed_out = true, kernel_restarted = true }))
    assert.truthy(tostring(killed):find("[TIMEOUT]: The cell did not stop when interrupted; the kernel was "
      .. "restarted and its state is gone.", 1, true), tostring(killed))
    assert.falsy(tostring(killed):find("[KERNEL RESTARTED]", 1, true))
    local oom = cell_result.from_response("hog", answer({ oom_killed = true, kernel_restarted = true,
      warnings = { "Out of memory." } }))
    assert.is_false(oom.ok)
    assert.are.equal("[WARNING]: Out of memory.\n[OUT OF MEMORY]: The kernel ran out of memory and was "
      .. "restarted; its state is gone.\n[EXECUTION COUNT]: 3", tostring(oom))
    local after = cell_result.from_response("x", answer({ kernel_restarted = true, execution_count = 1 }))
    assert.is_true(after.ok)
    assert.are.equal("[KERNEL RESTARTED]: The kernel was restarted before this cell; earlier state is gone.\n"
      .. "[EXECUTION COUNT]: 1", tostring(after))
  end)
end)

describe("the streamed execute's events", function()
  it("calls on_result with each display event's data, in order with the output", function()
    local seen = {}
    local d = exec_stream.new(function(s) seen[#seen + 1] = "out:" .. s end, nil,
      function(data) seen[#seen + 1] = "result:" .. data["text/plain"] end)
    local final = { stdout = "a\n", results = { { ["text/plain"] = "2" } }, execution_count = 1 }
    local body = table.concat({
      cjson.encode({ type = "stdout", data = "a\n" }),
      cjson.encode({ type = "heartbeat" }),
      cjson.encode({ type = "display", data = { ["text/plain"] = "2" } }),
      cjson.encode({ type = "exception", error = { name = "E" } }),
      cjson.encode({ type = "result", result = final }),
    }, "\n") .. "\n"
    d:feed(body:sub(1, 17), 200)
    d:feed(body:sub(18), 200)
    local res = d:finish({ status = 200, headers = {} })
    assert.are.same({ "out:a\n", "result:2" }, seen)
    assert.are.same(final, cjson.decode(res.body))
  end)
end)
