-- The plugin's edits and the user's typing never share an undo step: while
-- the user types in a buffer (Insert or Replace mode), the step the typing is
-- in is closed before the plugin edits it, and again after, so that the next
-- keys start a step of their own.
local M = {}

--- Whether the user is typing in `buf` now.
local function typing(buf)
  local mode = vim.api.nvim_get_mode().mode:sub(1, 1)
  return (mode == "i" or mode == "R") and buf == vim.api.nvim_get_current_buf()
end

--- Close the current buffer's open undo step: setting the global 'undolevels'
--- to itself does (`vim.o` would also drop a buffer-local value), without the
--- OptionSet autocommands a user's plugins may run on it.
local function close_step()
  vim.cmd("noautocmd setglobal undolevels=" .. vim.go.undolevels)
end

--- Run `fn(...)`, the plugin's edit of `buf`, in undo steps apart from the
--- user's typing there; its result.
function M.apart(buf, fn, ...)
  if not typing(buf) then
    return fn(...)
  end
  close_step() -- the step the typing is in
  local result = fn(...)
  close_step() -- the next keys start a step of their own
  return result
end

return M
