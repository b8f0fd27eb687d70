-- Neovim config for the benchmarks: this checkout's plugin (unless
-- SIDEKICK_BENCH_PLUGIN=0) and the bench helpers, nothing else.
local root = vim.env.SIDEKICK_ROOT
if root and vim.env.SIDEKICK_BENCH_PLUGIN ~= "0" then
  vim.opt.runtimepath:prepend(root)
end
if root and vim.env.SIDEKICK_BENCH_HELPERS ~= "0" then
  vim.opt.runtimepath:append(root .. "/bench")
end
vim.opt.swapfile = false
vim.opt.shadafile = "NONE"
