-- Loaded by `make demo`: the plugin from this checkout, nothing else.
vim.opt.runtimepath:prepend(vim.env.SIDEKICK_ROOT)
vim.opt.swapfile = false
vim.g.mapleader = " "
require("sidekick_tools").setup({
  python = vim.env.SIDEKICK_PYTHON,
  state_dir = vim.env.SIDEKICK_STATE_DIR,
  tasks = { hybrid_threshold = 3 },
})
