-- :AirlockRun: runs the current buffer (Python or shell) in a fresh Airlock sandbox and shows
-- the output in a split, while the editor goes on. The work is in lua/airlock_run.lua.
if vim.g.loaded_airlock_run then return end
vim.g.loaded_airlock_run = true

vim.api.nvim_create_user_command("AirlockRun", function()
  require("airlock_run").run()
end, { desc = "Run the current buffer in an Airlock sandbox; output in a split" })

-- sandboxes of runs still in flight are deleted when Neovim quits
vim.api.nvim_create_autocmd("VimLeavePre", {
  callback = function() require("airlock_run").close_all() end,
})
