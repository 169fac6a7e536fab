-- CommandResult parity (contract 3.5): structured and text-only responses, ok, check().
local result = require "airlock.result"
local airlock = require "airlock"

describe("airlock.result", function()
  describe("text-only responses (old servers)", function()
    it("parses stdout and stderr sections with an exit code", function()
      local r = result.from_response({ command = "x",
        output = "[STDOUT]:\nline 1\nline 2\n[STDERR]:\nwarn\n[EXIT CODE]: 2" })
      assert.are.equal("line 1\nline 2\n", r.stdout)
      assert.are.equal("warn\n", r.stderr)
      assert.are.equal(2, r.exit_code)
      assert.is_false(r.ok)
      assert.is_false(r.timed_out)
      assert.is_false(r.oom_killed)
      assert.are.same({}, r.warnings)
    end)

    it("parses an exit code alone", function()
      local r = result.from_response({ command = "true", output = "[EXIT CODE]: 0" })
      assert.are.equal("", r.stdout)
      assert.are.equal("", r.stderr)
      assert.are.equal(0, r.exit_code)
      assert.are.same({}, r.warnings)
      assert.is_true(r.ok)
    end)

    it("parses a timeout", function()
      local r = result.from_response({ command = "sleep 9",
        output = "[TIMEOUT]: Execution exceeded 3s limit.\n[EXIT CODE]: -1" })
      assert.is_true(r.timed_out)
      assert.are.same({ "Execution exceeded 3s limit." }, r.warnings)
      assert.are.equal(-1, r.exit_code)
      assert.is_false(r.ok)
    end)

    it("parses an out-of-memory kill", function()
      local r = result.from_response({ command = "hog",
        output = "[STDERR]:\nKilled\n[WARNING]: Process killed by cgroups (Memory limit exceeded).\n[EXIT CODE]: 137" })
      assert.are.equal("Killed\n", r.stderr)
      assert.are.equal(137, r.exit_code)
      assert.is_true(r.oom_killed)
      assert.are.same({ "Process killed by cgroups (Memory limit exceeded)." }, r.warnings)
    end)

    it("does not treat the exit-137 'memory limit' warning as an OOM kill (case-sensitive)", function()
      local r = result.parse_text("x", "[WARNING]: Process was killed (exit 137, SIGKILL), most likely "
        .. "for exceeding the memory limit.\n[EXIT CODE]: 137")
      assert.is_false(r.oom_killed)
      assert.are.equal(137, r.exit_code)
    end)

    it("parses the offline-test example: stdout hi, ok", function()
      local r = result.from_response({ command = "x", output = "[STDOUT]:\nhi\n[EXIT CODE]: 0" })
      assert.is_true(r.ok)
      assert.are.equal("hi\n", r.stdout)
    end)

    it("keeps -1 for a missing or non-numeric exit code", function()
      assert.are.equal(-1, result.parse_text("x", "[STDOUT]:\nhi").exit_code)
      assert.are.equal(-1, result.parse_text("x", "[EXIT CODE]: abc").exit_code)
      assert.are.equal(-7, result.parse_text("x", "[EXIT CODE]:  -7 ").exit_code)
    end)

    it("ignores text after a STDOUT marker on the same line and ends sections at markers", function()
      local r = result.parse_text("x", "[STDOUT]: ignored\na\n[WARNING]: w\nstray\n[EXIT CODE]: 0")
      assert.are.equal("a\n", r.stdout)
      assert.are.same({ "w" }, r.warnings)
    end)

    it("keeps the original text as output and tostring", function()
      local text = "[STDOUT]:\nhi\n[EXIT CODE]: 0"
      local r = result.from_response({ command = "x", output = text })
      assert.are.equal(text, r.output)
      assert.are.equal(text, tostring(r))
    end)
  end)

  describe("structured responses", function()
    it("takes the fields and defaults the optional ones", function()
      local r = result.from_response({ command = "c", stdout = "a\n", exit_code = 1, output = "o" })
      assert.is_false(r.ok)
      assert.are.equal("a\n", r.stdout)
      assert.are.equal("", r.stderr)
      assert.is_false(r.timed_out)
      assert.is_false(r.oom_killed)
      assert.are.same({}, r.warnings)
      assert.has_error(function() r:check() end)
    end)

    it("ok needs exit 0, no timeout and no OOM kill", function()
      assert.is_true(result.from_response({ exit_code = 0 }).ok)
      assert.is_false(result.from_response({ exit_code = 0, oom_killed = true }).ok)
      assert.is_false(result.from_response({ exit_code = 0, timed_out = true }).ok)
    end)
  end)

  describe("check()", function()
    local function check_error(fields)
      local r = result.new(fields)
      local ok, err = pcall(r.check, r)
      assert.is_false(ok)
      return err, r
    end

    it("returns the result itself when ok", function()
      local r = result.new({ command = "true", exit_code = 0, output = "[EXIT CODE]: 0" })
      assert.are.equal(r, r:check())
    end)

    it("raises CommandError with the exit code and output, .result attached", function()
      local err, r = check_error({ command = "fail now", exit_code = 3, output = "[EXIT CODE]: 3" })
      assert.is_true(airlock.is(err, "CommandError"))
      assert.is_true(airlock.is(err, "SandboxError"))
      assert.are.equal("Command 'fail now' exited with code 3.\n[EXIT CODE]: 3", err.message)
      assert.are.equal(r, err.result)
    end)

    it("reports a timeout first, then memory", function()
      local err = check_error({ command = "x", exit_code = -1, timed_out = true, oom_killed = true, output = "o" })
      assert.are.equal("Command 'x' timed out.\no", err.message)
      err = check_error({ command = "x", exit_code = 137, oom_killed = true, output = "o" })
      assert.are.equal("Command 'x' was killed for using too much memory.\no", err.message)
    end)

    it("quotes the command like Python's repr", function()
      assert.are.equal("'a b'", result.python_repr("a b"))
      assert.are.equal([["it's"]], result.python_repr("it's"))
      assert.are.equal([['say "it\'s"']], result.python_repr([[say "it's"]]))
      assert.are.equal([['a\nb\\c\t']], result.python_repr("a\nb\\c\t"))
      assert.are.equal([['\x01']], result.python_repr("\1"))
    end)
  end)
end)
