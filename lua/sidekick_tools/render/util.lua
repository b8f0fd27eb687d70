-- Small helpers shared by the task views: task tables as the host sends them,
-- durations, status glyphs and their highlight groups.
local M = {}

--- Task tables arrive with vim.NIL for missing values; turn those into nil (in place).
---@param task table|nil
---@return table|nil
function M.clean(task)
  if type(task) ~= "table" then
    return nil
  end
  for k, v in pairs(task) do
    if v == vim.NIL then
      task[k] = nil
    end
  end
  return task
end

--- "2.3s", "4m05s", "1h02m".
---@param secs number
function M.duration(secs)
  secs = math.max(0, secs or 0)
  if secs < 60 then
    return string.format("%.1fs", secs)
  end
  secs = math.floor(secs)
  if secs < 3600 then
    return string.format("%dm%02ds", math.floor(secs / 60), secs % 60)
  end
  return string.format("%dh%02dm", math.floor(secs / 3600), math.floor(secs % 3600 / 60))
end

--- Seconds a task ran (or has been running), nil when it never started.
---@param task table
---@param now number|nil
function M.seconds(task, now)
  if not task.started_at then
    return nil
  end
  local stop = task.ended_at or now or os.time()
  return math.max(0, stop - task.started_at)
end

--- Highlight group of each status (defined as default links in M.define_highlights).
M.status_hl = {
  pending = "SidekickStatusPending",
  queued = "SidekickStatusQueued",
  running = "SidekickStatusRunning",
  completed = "SidekickStatusCompleted",
  failed = "SidekickStatusFailed",
  cancelled = "SidekickStatusCancelled",
  denied = "SidekickStatusCancelled",
}

local links = {
  SidekickStatusPending = "DiagnosticHint",
  SidekickStatusQueued = "DiagnosticHint",
  SidekickStatusRunning = "DiagnosticHint",
  SidekickStatusCompleted = "DiagnosticOk",
  SidekickStatusFailed = "DiagnosticError",
  SidekickStatusCancelled = "DiagnosticWarn",
  SidekickTasksHeader = "Title",
  SidekickTasksDim = "Comment",
  SidekickTasksToken = "Identifier",
  SidekickTasksTool = "Function",
  SidekickTasksOrigin = "Special",
  SidekickTasksTime = "Number",
  SidekickTasksProgress = "DiagnosticInfo",
  SidekickOutputStderr = "DiagnosticWarn",
  SidekickOutputEnd = "Comment",
}

function M.define_highlights()
  for name, target in pairs(links) do
    vim.api.nvim_set_hl(0, name, { link = target, default = true })
  end
end

--- "[task abc123 completed, exit 0, 2.3s]": how a task ended, in one line.
---@param task table
function M.end_line(task)
  local parts = { task.status }
  if task.reason and task.reason ~= "exit" and task.reason ~= task.status then
    parts[1] = string.format("%s (%s)", task.status, task.reason)
  end
  if task.exit_code then
    table.insert(parts, "exit " .. task.exit_code)
  end
  local secs = task.duration or M.seconds(task)
  if secs then
    table.insert(parts, M.duration(secs))
  end
  return string.format("[task %s %s]", task.id, table.concat(parts, ", "))
end

--- Names of the loaded chat buffers: what a task list passes as `chats`, so
--- that "this Neovim's tasks" include those of the chats open in it (after a
--- restart, their tasks belong to the Neovim that ran them).
---@return string[]
function M.chat_names()
  local out = {}
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    local name = vim.api.nvim_buf_get_name(buf)
    if vim.api.nvim_buf_is_loaded(buf) and name:match("%.sidekick%.md$") then
      table.insert(out, name)
    end
  end
  return out
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

--- Up to `max` bytes from the end of file `path`, cut at a line start; "" when
--- the file is missing or empty.
---@param path string|nil
---@param max integer
---@return string
function M.read_tail(path, max)
  local uv = vim.uv or vim.loop
  if not path then
    return ""
  end
  local fd = uv.fs_open(path, "r", 384)
  if not fd then
    return ""
  end
  local stat = uv.fs_fstat(fd)
  local size = stat and stat.size or 0
  local offset = math.max(0, size - max)
  local data = size > 0 and uv.fs_read(fd, size - offset, offset) or ""
  uv.fs_close(fd)
  if offset > 0 then
    data = data:gsub("^[^\n]*\n", "", 1)
  end
  return data or ""
end

--- vim.regex(pattern), or an error in one line that says which pattern and
--- why (Vim's own text, without the "couldn't parse regex: Vim:" wrapping).
---@param pattern string
---@param what string|nil what the pattern is for, e.g. "filter"
function M.regex(pattern, what)
  local ok, rx = pcall(vim.regex, pattern)
  if ok then
    return rx
  end
  local raw = tostring(rx)
  local code, text = raw:match("(E%d+): (.*)$")
  text = (text or raw:gsub("^.-regex: ", ""):gsub("^Vim:", "")):gsub("%%s", "")
  if code == "E769" then
    text = "a [ is never closed by ]"
  end
  error(
    string.format(
      "sidekick_tools: bad %s /%s/: %s%s",
      what or "regex",
      pattern,
      text,
      code and (" (" .. code .. ")") or ""
    ),
    0
  )
end

--- Keys of a keymap option: a string, a list of strings, or false/"" for none.
---@return string[]
function M.keys(value)
  if type(value) == "string" then
    return value ~= "" and { value } or {}
  elseif type(value) == "table" then
    return vim.tbl_filter(function(k)
      return type(k) == "string" and k ~= ""
    end, value)
  end
  return {}
end

return M
