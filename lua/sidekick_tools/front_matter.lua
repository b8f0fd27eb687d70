-- A chat's front matter (DESIGN §10): an optional block at row 0, `---`,
-- `key: value` lines, `---`, before the first message. Read the way the host
-- reads it (chat/conversation.py, read_front_matter), so what :SidekickModel
-- shows is what :SidekickSend uses.
local M = {}

-- The host looks no further: a front matter is short.
local MAX_ROWS = 64

local function is_role_line(line)
  return line:match("^SYSTEM:") or line:match("^USER:") or line:match("^ASSISTANT:")
end

---@class sidekick_tools.FrontMatter
---@field values table<string, string> each key's value (the last one written)
---@field rows table<string, integer[]> 0-based rows of each key's lines
---@field end_row integer 0-based row of the closing ---

--- `s` without its leading and trailing blanks, in time linear in `s`:
--- vim.trim's pattern is quadratic on a line of blanks only (a chat file's
--- line of 40 KB of spaces held the editor 11 s).
local function trim(s)
  local first = s:find("%S")
  if not first then
    return ""
  end
  local _, last = s:find(".*%S", first)
  return s:sub(first, last)
end

--- The front matter of `buf`, or nil when it has none.
---@param buf integer
---@return sidekick_tools.FrontMatter|nil
function M.read(buf)
  local lines = vim.api.nvim_buf_get_lines(buf, 0, MAX_ROWS, false)
  if not lines[1] or trim(lines[1]) ~= "---" or lines[1]:match("^%s") then
    return nil
  end
  local front = { values = {}, rows = {} }
  for i = 2, #lines do
    local line = lines[i]
    if is_role_line(line) then
      return nil -- a message began: that `---` was text
    end
    local trimmed = trim(line)
    if trimmed == "---" and not line:match("^%s") then
      front.end_row = i - 1
      return front
    end
    local key, value = trimmed:match("^([%a_][%w_.-]*)%s*:%s*(.-)$")
    if key then
      local q = value:sub(1, 1)
      if #value >= 2 and (q == '"' or q == "'") and value:sub(-1) == q then
        value = value:sub(2, -2)
      end
      front.values[key] = value
      front.rows[key] = front.rows[key] or {}
      table.insert(front.rows[key], i - 1)
    end
  end
  return nil
end

--- Set `key: value` in the front matter of `buf` (created at row 0 when there
--- is none), in one change: one undo step.
---@param buf integer
---@param key string
---@param value string
function M.set(buf, key, value)
  local line = key .. ": " .. value
  local front = M.read(buf)
  if not front then
    vim.api.nvim_buf_set_lines(buf, 0, 0, false, { "---", line, "---" })
    return
  end
  local rows = front.rows[key] or {}
  if #rows == 1 then
    vim.api.nvim_buf_set_lines(buf, rows[1], rows[1] + 1, false, { line })
  elseif #rows == 0 then
    vim.api.nvim_buf_set_lines(buf, 1, 1, false, { line })
  else -- written more than once: one line in place of the first, the others go
    local lines = vim.api.nvim_buf_get_lines(buf, 0, front.end_row + 1, false)
    local drop = {}
    for i = 2, #rows do
      drop[rows[i] + 1] = true
    end
    lines[rows[1] + 1] = line
    local out = {}
    for i, l in ipairs(lines) do
      if not drop[i] then
        table.insert(out, l)
      end
    end
    vim.api.nvim_buf_set_lines(buf, 0, front.end_row + 1, false, out)
  end
end

return M
