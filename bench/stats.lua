-- Summaries for the benchmarks: percentiles, medians, means of lists of numbers.
local M = {}

local function sorted_copy(list)
  local s = {}
  for i, v in ipairs(list) do s[i] = v end
  table.sort(s)
  return s
end

-- The p-th percentile (nearest rank) of an already sorted list.
function M.percentile(sorted, p)
  return sorted[math.max(1, math.min(#sorted, math.ceil(p / 100 * #sorted)))]
end

function M.median(list)
  return M.percentile(sorted_copy(list), 50)
end

function M.mean(list)
  local sum = 0
  for _, v in ipairs(list) do sum = sum + v end
  return #list > 0 and sum / #list or 0
end

-- { n, p50, p99, max } of a list (not modified).
function M.summary(list)
  local s = sorted_copy(list)
  return { n = #s, p50 = M.percentile(s, 50), p99 = M.percentile(s, 99), max = s[#s] }
end

-- { p50, p95 } of a list (not modified).
function M.p50_p95(list)
  local s = sorted_copy(list)
  return { p50 = M.percentile(s, 50), p95 = M.percentile(s, 95) }
end

return M
