-- Commands and autocommands only. Every command is declared in
-- lua/sidekick_tools/commands.lua (a table, nothing else loaded); the modules
-- behind them load on first use, and the Python host starts when first needed.
if vim.g.loaded_sidekick_tools then
  return
end
vim.g.loaded_sidekick_tools = true

if vim.fn.has("nvim-0.10") == 0 then
  vim.api.nvim_err_writeln("sidekick_tools needs Neovim 0.10 or later")
  return
end

require("sidekick_tools.commands").create()

local group = vim.api.nvim_create_augroup("sidekick_tools", { clear = true })

-- Nothing in a chat (a tool's output, say) may act on the editor: no modelines.
-- Set before the text is read, so `vim: set ...` in a result is never applied.
vim.api.nvim_create_autocmd({ "BufReadPre", "BufNewFile" }, {
  group = group,
  pattern = "*.sidekick.md",
  callback = function(ev)
    vim.bo[ev.buf].modeline = false
  end,
})
-- The commands work in any buffer: a chat under another name gets modelines
-- off when it is read (Neovim reads them after BufReadPost). Nothing is
-- loaded for a buffer whose modelines are off already.
local function guard_modeline(buf)
  if vim.bo[buf].modeline and vim.o.modelines > 0 then
    require("sidekick_tools.chats").guard_modeline(buf)
  end
end
vim.api.nvim_create_autocmd("BufReadPost", {
  group = group,
  callback = function(ev)
    guard_modeline(ev.buf)
  end,
})
-- Loaded lazily (lazy.nvim's `ft = "markdown"`), the plugin comes while the
-- first chat is being read: its BufReadPre and BufReadPost went by, but Neovim
-- reads the modelines only after the filetype is set, so they are still
-- turned off here.
for _, buf in ipairs(vim.api.nvim_list_bufs()) do
  if vim.api.nvim_buf_get_name(buf):match("%.sidekick%.md$") then
    vim.bo[buf].modeline = false
  elseif vim.api.nvim_buf_is_loaded(buf) then
    guard_modeline(buf)
  end
end

-- A chat opened: its keys, and a running host shows its calls' states (nothing runs).
vim.api.nvim_create_autocmd({ "BufReadPost", "BufNewFile" }, {
  group = group,
  pattern = "*.sidekick.md",
  callback = function(ev)
    require("sidekick_tools.keymaps").apply_chat(ev.buf)
    require("sidekick_tools.client").chat_opened(ev.buf)
  end,
})

-- A window shows a chat: its thinking blocks fold (ui.fold_thinking), in that window only.
vim.api.nvim_create_autocmd("BufWinEnter", {
  group = group,
  pattern = "*.sidekick.md",
  callback = function(ev)
    if (require("sidekick_tools.config").current.ui or {}).fold_thinking then
      require("sidekick_tools.folds").apply(vim.api.nvim_get_current_win(), ev.buf)
    end
  end,
})

-- A buffer saved under another name (:saveas, :file): the tasks its calls
-- started belong to the chat of the new name (a running host only: one that
-- starts later reads the name when it first looks at the buffer).
vim.api.nvim_create_autocmd("BufFilePost", {
  group = group,
  callback = function(ev)
    if package.loaded["sidekick_tools.host"] then
      require("sidekick_tools.host").notify(
        "chat_renamed",
        ev.buf,
        vim.api.nvim_buf_get_name(ev.buf)
      )
    end
  end,
})

-- A buffer written to its file: the results in it are on disk, and a reload
-- (or a file replaced outside Neovim) is not to have them written again.
vim.api.nvim_create_autocmd("BufWritePost", {
  group = group,
  callback = function(ev)
    if package.loaded["sidekick_tools.host"] and require("sidekick_tools.host").running() then
      require("sidekick_tools.host").notify("chat_saved", ev.buf)
    end
  end,
})

vim.api.nvim_create_autocmd("VimLeavePre", {
  group = group,
  callback = function()
    if package.loaded["sidekick_tools.host"] then
      require("sidekick_tools.client").shutdown()
    end
  end,
})
