-- Loaded by `make demo`: the plugin from this checkout, nothing else.
vim.opt.runtimepath:prepend(vim.env.SIDEKICK_ROOT)
vim.opt.swapfile = false
vim.g.mapleader = " "
require("sidekick_tools").setup({
  python = vim.env.SIDEKICK_PYTHON,
  state_dir = vim.env.SIDEKICK_STATE_DIR,
  tasks = { hybrid_threshold = 3 },
})

-- The hint stays in view: start-up messages would overwrite one echoed earlier.
if vim.env.SIDEKICK_DEMO_HINT then
  vim.api.nvim_create_autocmd("VimEnter", {
    once = true,
    callback = function()
      vim.wo.winbar = vim.env.SIDEKICK_DEMO_HINT:gsub("%%", "%%%%")
      -- windows split from the chat's (the task list, a help window) go without it
      vim.api.nvim_create_autocmd("WinNew", {
        callback = function()
          vim.wo.winbar = ""
        end,
      })
    end,
  })
end
