-- Minimal config for integration tests: the plugin from this checkout, nothing else.
vim.opt.runtimepath:prepend(vim.env.SIDEKICK_ROOT)
vim.opt.swapfile = false
vim.opt.shadafile = "NONE"
