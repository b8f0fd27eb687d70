-- What the plugin's own windows (tasks window, output view) share: a scratch
-- buffer, a split to show it in, and their highlight groups.
local M = {}

--- Define the views' highlight groups: each a default link
--- (constants.highlights), so a colorscheme's own definition wins.
function M.define_highlights()
  for name, target in pairs(require("sidekick_tools.constants").highlights) do
    vim.api.nvim_set_hl(0, name, { link = target, default = true })
  end
end

--- A buffer for a view: no file, no swap, wiped when hidden, read-only.
---@param name string e.g. "sidekick://tasks"
---@param filetype string
---@return integer buf
function M.scratch(name, filetype)
  M.define_highlights()
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].swapfile = false
  vim.bo[buf].undolevels = -1 -- redrawn by the plugin: no history of every redraw
  pcall(vim.api.nvim_buf_set_name, buf, name)
  vim.bo[buf].filetype = filetype
  vim.bo[buf].modifiable = false
  return buf
end

--- Show `buf` in a new window: `split` (default: at the bottom, a third of the
--- screen between 8 and 20 lines), with no wrap, numbers, list or spell, and
--- the window options `wo`.
---@param buf integer
---@param split string|nil an Ex command that splits, e.g. "rightbelow vsplit"
---@param wo table|nil
---@return integer win
function M.open(buf, split, wo)
  local height = math.max(8, math.min(20, math.floor(vim.o.lines / 3)))
  vim.cmd(split or ("botright " .. height .. "split"))
  local win = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(win, buf)
  local base = { wrap = false, number = false, relativenumber = false, list = false, spell = false }
  M.set_local(win, vim.tbl_extend("force", base, wo or {}))
  return win
end

--- Set window options of `win` for the buffer it shows only (as :setlocal): a
--- buffer opened in that window later gets the user's own values back.
---@param win integer
---@param wo table<string, any>
function M.set_local(win, wo)
  for k, v in pairs(wo) do
    vim.api.nvim_set_option_value(k, v, { scope = "local", win = win })
  end
end

return M
