-- Loaded by `make demo`: the plugin from this checkout, nothing else, talking to
-- the demo's scripted model (examples/demo.py serves it on 127.0.0.1 and passes
-- its address in SIDEKICK_DEMO_URL).
vim.opt.runtimepath:prepend(vim.env.SIDEKICK_ROOT)
vim.opt.swapfile = false
-- :qa saves the chat (a copy in the demo's temporary folder) instead of refusing
vim.opt.autowriteall = true
vim.g.mapleader = " "

local url = vim.env.SIDEKICK_DEMO_URL
require("sidekick_tools").setup({
  python = vim.env.SIDEKICK_PYTHON,
  state_dir = vim.env.SIDEKICK_STATE_DIR,
  -- Only the scripted model: no provider here can reach the network, and none
  -- has a key.
  chat = {
    model = "demo/scripted",
    providers = url and { demo = { kind = "anthropic", base_url = url } } or {},
  },
})
if not url then
  vim.notify("demo: start it with `make demo` (it serves the scripted model)", vim.log.levels.WARN)
end

-- The hint stays in view: start-up messages would overwrite one echoed earlier.
vim.api.nvim_create_autocmd("VimEnter", {
  once = true,
  callback = function()
    local hint = "demo, scripted model (offline): <Space>ss sends · a ▶ call waits:"
      .. " <Space>sR asks to run it, on it <Space>sr runs it, <Space>sd denies · :qa quits"
    vim.wo.winbar = hint:gsub("%%", "%%%%")
    -- windows split from the chat's (the task list, a help window) go without it
    vim.api.nvim_create_autocmd("WinNew", {
      callback = function()
        vim.wo.winbar = ""
      end,
    })
  end,
})
