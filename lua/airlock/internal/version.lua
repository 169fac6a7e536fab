-- The SDK's version (the rock's, without its revision; `make dist` checks the C core's).
local M = {}

M.VERSION = "0.1.0"
M.USER_AGENT = "airlock-sandbox-lua/" .. M.VERSION

return M
