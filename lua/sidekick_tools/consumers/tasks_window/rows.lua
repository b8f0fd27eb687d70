-- The tasks window's text: a pure function of the view's state (its page of
-- tasks, filter, scope) and the time. No editor state is read here.
local constants = require("sidekick_tools.constants")
local format = require("sidekick_tools.format")

local M = {}

M.HEADER = 1 -- lines above the first task

local function time_text(t, now)
  if t.status == "queued" then
    return "queued"
  end
  local secs = format.seconds(t, now)
  if not secs then
    return ""
  end
  if t.status == "running" then
    return format.elapsed(t.started_at, now)
  end
  return format.duration(secs)
end

local BAR = 10

local function progress_text(t)
  if t.status ~= "running" or not t.progress then
    return ""
  end
  local pct = math.max(0, math.min(100, math.floor(t.progress)))
  local filled = math.floor(pct * BAR / 100 + 0.5)
  return string.rep("█", filled)
    .. string.rep("░", BAR - filled)
    .. string.format(" %3d%%", pct)
end

local function exit_text(t)
  local parts = {}
  if t.exit_code then
    table.insert(parts, "exit " .. t.exit_code)
  end
  if t.reason and t.reason ~= "exit" then
    table.insert(parts, t.reason)
  end
  return table.concat(parts, " ")
end

--- Who started a task when it was not a chat: "mcp:claude-code" for an MCP client.
function M.origin(t)
  local chat = t.chat or ""
  if vim.startswith(chat, constants.mcp_chat_prefix) then
    return chat
  end
  return ""
end

local function one_line(s)
  return (s:gsub("\n", " ⏎ "))
end

local WHAT_CHARS = 60 -- a longer command is cut when a purpose or progress follows it

--- What the task runs, and the purpose its call gave (shown dimmed after it):
--- the command as its call wrote it (an auto-run command runs in a checked,
--- hardened form: `command`); for an agent, the agent and its message.
---@return string what, string purpose
function M.what_of(t)
  local command = (t.call_command or "") ~= "" and t.call_command or t.command or ""
  local label = t.label or ""
  local what, purpose = command, ""
  if t.tool == "use_agent" or command == "" then
    what = label ~= "" and label or command
  elseif label ~= command then
    purpose = label
  end
  what = one_line(what)
  local progress = t.status == "running" and t.progress_text or ""
  if (purpose ~= "" or progress ~= "") and vim.fn.strchars(what) > WHAT_CHARS then
    what = vim.fn.strcharpart(what, 0, WHAT_CHARS - 1) .. "…" -- what follows stays in view
  end
  if progress ~= "" then
    what = what .. "  · " .. one_line(progress)
  end
  return what, one_line(purpose)
end

local function width(s)
  return vim.api.nvim_strwidth(s)
end
M.width = width

local function pad(s, w)
  return s .. string.rep(" ", math.max(0, w - width(s)))
end

local function lpad(s, w)
  return string.rep(" ", math.max(0, w - width(s))) .. s
end

---@param v sidekick_tools.TasksView
---@param size integer tasks per page
local function header_text(v, size)
  local scope = v.all and "every Neovim" or "this Neovim"
  local filter = v.status ~= "" and v.status or "any status"
  local n = #v.rows
  local range = n > 0 and string.format("%d-%d of %d", v.offset + 1, v.offset + n, v.total)
    or string.format("0 of %d", v.total)
  local pages = math.max(1, math.ceil(v.total / size))
  local page = math.floor(v.offset / size) + 1
  return string.format(
    "Tasks · %s · %s · %s · page %d/%d · ? help",
    scope,
    filter,
    range,
    page,
    pages
  )
end

--- Lines and highlights of the view: a pure function of its state and `now`.
---@param v sidekick_tools.TasksView
---@param size integer tasks per page
---@param now number|nil
---@return string[] lines, table[] highlights { row, col_start, col_end, group }
function M.lines(v, size, now)
  now = now or os.time()
  local lines = { header_text(v, size) }
  local hls = { { 0, 0, -1, "SidekickTasksHeader" } }
  if #v.rows == 0 then
    table.insert(lines, "  (no tasks)")
    table.insert(hls, { 1, 0, -1, "SidekickTasksDim" })
    return lines, hls
  end
  local cols = { tool = 4, time = 4, bar = 0, exit = 0, origin = 0 }
  local cells = {}
  for i, t in ipairs(v.rows) do
    local c = {
      glyph = constants.glyph(t.status),
      id = t.id or "??????",
      tool = t.tool ~= "" and t.tool or "task",
      time = time_text(t, now),
      bar = progress_text(t),
      exit = exit_text(t),
      origin = M.origin(t),
    }
    c.what, c.purpose = M.what_of(t)
    cells[i] = c
    cols.origin = math.max(cols.origin, width(c.origin))
    cols.tool = math.max(cols.tool, math.min(24, width(c.tool)))
    cols.time = math.max(cols.time, width(c.time))
    cols.bar = math.max(cols.bar, width(c.bar))
    cols.exit = math.max(cols.exit, width(c.exit))
  end
  for i, c in ipairs(cells) do
    local status_hl = (constants.states[v.rows[i].status] or {}).hl
    local row = M.HEADER + i - 1
    local segs = { { c.glyph, status_hl }, { " " }, { c.id, "SidekickTasksToken" } }
    local function add(text, hl) -- the next column, two spaces after the last
      table.insert(segs, { "  " })
      table.insert(segs, { text, hl })
    end
    add(pad(c.tool, cols.tool), "SidekickTasksTool")
    if cols.origin > 0 then
      add(pad(c.origin, cols.origin), "SidekickTasksOrigin")
    end
    add(lpad(c.time, cols.time), "SidekickTasksTime")
    if cols.bar > 0 then
      add(pad(c.bar, cols.bar), "SidekickTasksProgress")
    end
    if cols.exit > 0 then
      add(pad(c.exit, cols.exit), status_hl)
    end
    add(c.what)
    if c.purpose ~= "" then
      add(c.purpose, "SidekickTasksDim")
    end
    local text, col = {}, 0
    for _, s in ipairs(segs) do
      table.insert(text, s[1])
      if s[2] and #s[1] > 0 then
        table.insert(hls, { row, col, col + #s[1], s[2] })
      end
      col = col + #s[1]
    end
    lines[M.HEADER + i] = table.concat(text)
  end
  return lines, hls
end

return M
