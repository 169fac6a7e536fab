-- Text helpers of the agent surface (airlock.tools and the MCP server): counting and cutting
-- UTF-8 text for a model, naming an error for it, shell quoting, digit grouping.
local M = {}

M.MAX_TOOL_OUTPUT_CHARS = 8000

-- A character starts at every byte that is not a continuation byte (0x80-0xBF); a stray
-- continuation byte belongs to the character before it (or starts the text). Invalid UTF-8
-- is therefore never split further than it already is.
local function is_start(text, i)
  if i == 1 then return true end
  local b = text:byte(i)
  return b < 0x80 or b > 0xBF
end

--- Number of characters (UTF-8 code points) in `text`.
function M.char_count(text)
  local n = 0
  for i = 1, #text do
    if is_start(text, i) then n = n + 1 end
  end
  return n
end

-- Byte position where character number `k` (1-based) starts; #text + 1 past the end.
local function char_offset(text, k)
  local n = 0
  for i = 1, #text do
    if is_start(text, i) then
      n = n + 1
      if n == k then return i end
    end
  end
  return #text + 1
end

--- Shortens `text` to `limit` characters (default 8000) keeping the head (2/5) and the tail
-- (3/5) around a marker that says how many characters were left out. Counts code points and
-- never cuts a multi-byte character. Text within the limit is returned unchanged.
function M.truncate(text, limit)
  if type(text) == "number" then text = tostring(text) end
  if type(text) ~= "string" then
    error("airlock.tools.truncate: text must be a string, got " .. type(text), 2)
  end
  if limit == nil then limit = M.MAX_TOOL_OUTPUT_CHARS end
  if type(limit) ~= "number" or limit < 0 or limit ~= math.floor(limit) then
    error("airlock.tools.truncate: limit must be a non-negative integer, got " .. tostring(limit), 2)
  end
  -- Fast path: a byte count within the limit means the character count is too.
  if #text <= limit then return text end
  local n = M.char_count(text)
  if n <= limit then return text end
  local head = math.floor(limit * 2 / 5)
  local tail = limit - head
  local head_end = char_offset(text, head + 1) - 1
  local tail_start = char_offset(text, n - tail + 1)
  return text:sub(1, head_end)
    .. string.format("\n\n... [TRUNCATED: %d characters omitted] ...\n\n", n - limit)
    .. text:sub(tail_start)
end

-- Error objects from the SDK are tables; their class name and class test, without depending
-- on how errors.lua spells it internally.
local errors_ok, errors = pcall(require, "airlock.errors")
if not errors_ok or type(errors) ~= "table" then errors = nil end

-- The class name of an error object (its name, class or metatable __name), or nil.
function M.error_class(err)
  if type(err) == "table" then
    local mt = getmetatable(err)
    local candidates = { err.name, err.class, mt and mt.__name }
    for i = 1, 3 do
      local v = candidates[i]
      if type(v) == "string" and v ~= "" then return v end
    end
  end
  return nil
end

-- The SDK's error classes (all SandboxError), for when airlock.errors cannot say.
local SANDBOX_CLASSES = {
  SandboxError = true, APIConnectionError = true, AuthenticationError = true,
  PermissionDeniedError = true, NotFoundError = true, QuotaExceededError = true,
  ValidationError = true, RateLimitError = true, CapacityError = true, CommandError = true,
  FileNotFoundError = true,
}

-- Whether err is an SDK error of class ("SandboxError" matches every SDK error class).
function M.is_error(err, class)
  if type(err) ~= "table" then return false end
  if errors and type(errors.is) == "function" then
    local ok, yes = pcall(errors.is, err, class)
    if ok and yes then return true end
  end
  local name = M.error_class(err)
  if class == "SandboxError" then return SANDBOX_CLASSES[name] == true end
  return name == class
end

-- The message of an error object or value.
function M.message_of(err)
  if type(err) == "table" then
    if err.message ~= nil then return tostring(err.message) end
    local ok, s = pcall(tostring, err)
    if ok then return s end
  end
  return tostring(err)
end

-- Python's shlex.quote: safe words unchanged, anything else in single quotes.
function M.shell_quote(s)
  if s == "" then return "''" end
  if not s:find("[^%w_@%%%+=:,%./%-]") then return s end
  return "'" .. s:gsub("'", "'\"'\"'") .. "'"
end

-- 1234567 -> "1,234,567"
function M.group_digits(n)
  local s = string.format("%d", n)
  local sign, digits = s:match("^(%-?)(%d+)$")
  digits = digits:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "")
  return sign .. digits
end

-- Kinds of binary files recognised by their first bytes (magic numbers), for the text a model
-- gets instead of the bytes.
local MAGIC = {
  { "\137PNG\r\n\26\n", "PNG image" }, { "\255\216\255", "JPEG image" }, { "GIF8", "GIF image" },
  { "%PDF-", "PDF document" }, { "PK\3\4", "ZIP archive" }, { "\31\139", "gzip data" },
  { "\127ELF", "ELF executable" }, { "BZh", "bzip2 data" }, { "\253\55zXZ\0", "xz data" },
  { "\40\181\47\253", "zstd data" }, { "SQLite format 3\0", "SQLite database" },
  { "\0asm", "WebAssembly module" }, { "RIFF", "RIFF data (WAV/AVI/WebP)" },
}

--- The kind of a binary file from its first bytes ("PNG image", ...), or nil.
function M.binary_kind(head)
  if type(head) ~= "string" then return nil end
  for _, m in ipairs(MAGIC) do
    if head:sub(1, #m[1]) == m[1] then return m[2] end
  end
  if #head >= 262 and head:sub(258, 262) == "ustar" then return "tar archive" end
  return nil
end

--- What read_file answers for a file that is not text: "binary file, 12,345 bytes (PNG
-- image); not shown. ..." (kind optional).
function M.binary_file(size, kind)
  return string.format("binary file, %s bytes%s; not shown. Inspect it with run_command "
    .. "(e.g. xxd FILE | head, or file FILE).", M.group_digits(size), kind and (" (" .. kind .. ")") or "")
end

return M
