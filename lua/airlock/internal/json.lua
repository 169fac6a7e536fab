-- JSON for the whole SDK: the one module that knows lua-cjson 2.1.0's quirks. Everyone else
-- encodes and decodes through it:
--   * an empty Lua table encodes as {}: arrays are marked (json.array) where [] must go out;
--   * every number decodes as a float: integral values come back as integers on Lua 5.3+
--     (an exit code prints as 3, not 3.0), and integers encode exactly (cjson writes 1e+15);
--   * null decodes as a sentinel (json.null): the API's answers drop null object members
--     (missing == null, as the contract says); other JSON (an LLM's) keeps them.
local cjson = require "cjson"
local cjson_safe = require "cjson.safe"

local M = {}

local null = cjson.null
M.null = null

local floor = math.floor
local tointeger = math.tointeger
local EXACT = 2 ^ 53   -- integers a double holds exactly

local function is_integer(v)
  return type(v) == "number" and v == floor(v) and v > -EXACT and v < EXACT
end
M.is_integer = is_integer

---------------------------------------------------------------- arrays

local ARRAY = {}

-- json.array(list) → a copy encoded as a JSON array, even when empty.
function M.array(t)
  local a = {}
  for i, v in ipairs(t or {}) do a[i] = v end
  return setmetatable(a, ARRAY)
end

-- Whether a decoded value (or a caller's table) is a JSON array rather than an object: a
-- marked array, a table with a first element, or (builds that have it) cjson's array_mt.
function M.is_array(t)
  if type(t) ~= "table" then return false end
  local mt = getmetatable(t)
  return t[1] ~= nil or mt == ARRAY or (cjson_safe.array_mt ~= nil and mt == cjson_safe.array_mt)
end

---------------------------------------------------------------- encoding

local function integer_text(v)
  return string.format("%d", v)
end

-- Encodes a request body: obj is a list of {key, value} pairs (the key order is kept);
-- values: strings, numbers, booleans, json.null, json.array(...) lists, nested pair lists.
local function encode_pairs(v)
  if v == null then return "null" end
  local t = type(v)
  if t == "string" or t == "boolean" then return cjson.encode(v) end
  if t == "number" then
    if is_integer(v) then return integer_text(v) end
    return cjson.encode(v)
  end
  if t == "table" and getmetatable(v) == ARRAY then
    local parts = {}
    for i, item in ipairs(v) do parts[i] = encode_pairs(item) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  if t == "table" then
    local parts = {}
    for i, kv in ipairs(v) do parts[i] = cjson.encode(kv[1]) .. ":" .. encode_pairs(kv[2]) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  error("cannot encode a " .. t .. " as JSON")
end
M.encode_pairs = encode_pairs

-- The exact text of a number that cjson's 14 significant digits would change (1e+15 for
-- 10^15, a rounded fraction), else nil.
local function exact_text(v)
  if v ~= v or v == math.huge or v == -math.huge then return nil end   -- cjson refuses those
  if is_integer(v) then
    if v > -1e14 and v < 1e14 then return nil end   -- cjson writes these as digits too
    return integer_text(v)
  end
  for digits = 14, 17 do   -- the shortest text that reads back as v
    local text = string.format("%." .. digits .. "g", v)
    if tonumber(text) == v then return digits > 14 and text or nil end
  end
end

local function mark(marks, exact)
  marks.n = marks.n + 1
  local text = "\1airlock-json-" .. marks.n .. "\1"
  marks[cjson.encode(text)] = exact
  return text
end

-- A copy of v with each such number, and each empty marked array, replaced by a unique mark
-- (marks[text] = what to write instead), or v itself when it holds none. Depth is bounded by
-- cjson's own nesting limit.
local function mark_exact(v, marks, depth)
  if type(v) == "number" then
    local exact = exact_text(v)
    return exact and mark(marks, exact) or v
  end
  if type(v) ~= "table" or depth > 1000 then return v end
  if next(v) == nil and getmetatable(v) == ARRAY then return mark(marks, "[]") end
  local copy
  for k, x in pairs(v) do
    local y = mark_exact(x, marks, depth + 1)
    if y ~= x then
      copy = copy or {}
      copy[k] = y
    end
  end
  if not copy then return v end
  for k, x in pairs(v) do
    if copy[k] == nil then copy[k] = x end
  end
  return setmetatable(copy, getmetatable(v))
end

-- json.encode(value) → text | nil, message: any Lua value cjson encodes, with numbers
-- written exactly (an MCP id of 10^15 stays 1000000000000000, not 1e+15) and marked arrays
-- as arrays even when empty.
function M.encode(v)
  local marks = { n = 0 }
  local ok, text = pcall(cjson.encode, mark_exact(v, marks, 0))
  if not ok then return nil, tostring(text) end
  if marks.n > 0 then
    marks.n = nil
    for marked, exact in pairs(marks) do
      local s, e = text:find(marked, 1, true)
      text = text:sub(1, s - 1) .. exact .. text:sub(e + 1)
    end
  end
  return text
end

---------------------------------------------------------------- decoding

-- The walk done in C by airlock.core's strip_nulls (set by the transports that load the
-- core: this module never loads C). fn(t, null_or_nil) → true after the walk over t in place
-- (false: not done, the Lua walk runs).
local native_walk

function M.set_native_walk(fn)
  native_walk = fn
end

-- One pass over the tables, in place: integral numbers become integers (Lua 5.3+), and, when
-- drop is the null sentinel, null object members are removed. Called on every answer, so
-- numbers that are already right are left alone. Depth is bounded by cjson's decoder.
local function walk_table(t, drop)
  for k, x in next, t do
    local kind = type(x)
    if kind == "number" then
      if tointeger and x % 1 == 0 and x >= -EXACT and x <= EXACT then t[k] = tointeger(x) end
    elseif kind == "table" then
      walk_table(x, drop)
    elseif drop ~= nil and x == drop and type(k) == "string" then
      t[k] = nil
    end
  end
end

local function fix(v, drop)
  local kind = type(v)
  if kind == "table" then
    if not (native_walk and native_walk(v, drop)) then walk_table(v, drop) end
  elseif kind == "number" and tointeger and v == floor(v) and v >= -EXACT and v <= EXACT then
    return tointeger(v)
  end
  return v
end

-- json.strip(value) → value with null object members removed and integers as integers.
function M.strip(v)
  return fix(v, null)
end

-- json.decode(text) → value (nulls kept as json.null, integers as integers) | nil, message.
function M.decode(text)
  local v, err = cjson_safe.decode(text)
  if v == nil then return nil, err end
  return fix(v, nil)
end

-- json.decode_answer(text) → true, value (nulls dropped: the API's answers) | false.
function M.decode_answer(text)
  if text == nil or text == "" then return false end
  local v = cjson_safe.decode(text)
  if v == nil then return false end
  return true, fix(v, null)
end

return M
