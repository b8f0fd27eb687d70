-- Chat buffers (*.sidekick.md): which are loaded, by name, in view, and
-- whether one's text names a running task. Reads the editor only.
local constants = require("sidekick_tools.constants")

local M = {}

---@param buf integer
function M.is_chat(buf)
  return vim.api.nvim_buf_is_loaded(buf)
    and vim.api.nvim_buf_get_name(buf):match(constants.chat_pattern) ~= nil
end

--- The loaded chat buffers.
---@return integer[]
function M.loaded()
  return vim.tbl_filter(M.is_chat, vim.api.nvim_list_bufs())
end

--- Names of the loaded chat buffers: what a task list passes as `chats`, so
--- that "this Neovim's tasks" include those of the chats open in it (after a
--- restart, their tasks belong to the Neovim that ran them).
---@return string[]
function M.names()
  return vim.tbl_map(vim.api.nvim_buf_get_name, M.loaded())
end

--- The loaded buffer named `name` (a full path), if any.
---@return integer|nil
function M.buffer_named(name)
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.api.nvim_buf_get_name(buf) == name then
      return buf
    end
  end
end

--- The buffer of chat file `name`, loaded (and listed) if it was not.
---@return integer|nil buf, string|nil err
function M.load(name)
  local buf = M.buffer_named(name)
  if buf then
    return buf
  end
  if vim.fn.filereadable(name) == 0 then
    return nil, "sidekick_tools: chat " .. name .. " no longer exists"
  end
  buf = vim.fn.bufadd(name)
  vim.bo[buf].buflisted = true
  vim.fn.bufload(buf)
  return buf
end

--- Is chat `name` shown in a window of the current tab page?
---@param name string|nil buffer name
function M.visible(name)
  if not name or name == "" then
    return false
  end
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    if vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(win)) == name then
      return true
    end
  end
  return false
end

-- A result block a background task still holds: "```result id=X status=running
-- ... task=T", in the order the plugin writes. Searched in C with one anchored
-- pattern (a "\&" branch would make Vim try every column of every line), in
-- time linear in the line: the backtracking engine (\%#=1; the NFA one is ten
-- times slower here), and the last "status=running" taken for good (\@>), as
-- trying each in turn against the rest of the line made a chat file of one
-- 240 KB line of them freeze the editor for two minutes when opened.
local RUNNING_BLOCK = [[\%#=1\m\C^`\{3,}result\s\%(.*\<status=running\>\)\@>.*\stask=\x]]

-- A line only a chat has: a tool call's or a result's fence, an ASSISTANT: line.
local CHAT_LINE = [[\%#=1\m\C^\%(`\{3,}\%(result\|tool\)\s\|ASSISTANT:\)]]

-- Whether a line Neovim reads modelines from (the first and last 'modelines')
-- looks like one ("vi:", "vim:", "Vim:", "ex:"; more often than Neovim does).
local function modeline_lines(buf)
  local n, count = vim.o.modelines, vim.api.nvim_buf_line_count(buf)
  local lines = vim.api.nvim_buf_get_lines(buf, 0, math.min(n, count), false)
  if count > n then
    vim.list_extend(lines, vim.api.nvim_buf_get_lines(buf, math.max(n, count - n), count, false))
  end
  for _, line in ipairs(lines) do
    if line:find("[vV]im?[<=>]?%d*:") or line:find("ex:") then
      return true
    end
  end
  return false
end

--- A chat under another name than *.sidekick.md (the commands work in any
--- buffer) gets 'modeline' off: what a model or a tool wrote into it must not
--- act on the editor. Looked at only when a modeline could apply: modelines
--- on, and a line they are read from that looks like one (a large file is not
--- searched for nothing).
---@param buf integer
function M.guard_modeline(buf)
  if not vim.bo[buf].modeline or vim.o.modelines <= 0 or not modeline_lines(buf) then
    return
  end
  local chat = vim.api.nvim_buf_call(buf, function()
    return vim.fn.search(CHAT_LINE, "ncw") > 0
  end)
  if chat then
    vim.bo[buf].modeline = false
  end
end

--- Does the chat's text name a running task?
---@param buf integer
function M.names_running_task(buf)
  return vim.api.nvim_buf_call(buf, function()
    return vim.fn.search(RUNNING_BLOCK, "ncw") > 0
  end)
end

return M
