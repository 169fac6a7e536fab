-- busted output handler: busted's plain terminal output, then a count line that CI reads.
-- With AIRLOCK_SUMMARY_FILE set, the counts are also appended to that file so that
-- scripts/test.sh can add up several runs (Lua 5.4 and LuaJIT) into one closing line.
return function(options)
  local busted = require "busted"
  local handler = require "busted.outputHandlers.plainTerminal"(options)

  busted.subscribe({ "suite", "end" }, function()
    local passed = handler.successesCount
    local failed = handler.failuresCount + handler.errorsCount
    local skipped = handler.pendingsCount
    io.write(string.format("\n%s run: %d successes, %d failures/errors, %d pending\n",
      _VERSION, passed, failed, skipped))
    local file = os.getenv("AIRLOCK_SUMMARY_FILE")
    if file and file ~= "" then
      local f = assert(io.open(file, "a"))
      f:write(string.format("%d %d %d\n", passed, failed, skipped))
      f:close()
    end
    -- the failing tests' names, so that the closing lines of scripts/test.sh can list them
    local names = os.getenv("AIRLOCK_FAILED_FILE")
    if names and names ~= "" and failed > 0 then
      local f = assert(io.open(names, "a"))
      for _, list in ipairs({ handler.failures, handler.errors }) do
        for _, t in ipairs(list) do
          local where = t.trace and t.trace.short_src and
            (t.trace.short_src .. ":" .. tostring(t.trace.currentline)) or "?"
          f:write(string.format("%s  %s\n", where, t.name or "?"))
          -- and why, briefly: CI's record keeps only the closing lines of the run
          local why = tostring(t.message or ""):sub(1, 600)
          local n = 0
          for line in why:gmatch("[^\n]+") do
            n = n + 1
            if n > 8 then break end
            f:write("    ", line, "\n")
          end
        end
      end
      f:close()
    end
    io.flush()
    return nil, true
  end)

  return handler
end
