-- :SidekickTasks: one page of the task history in a scratch window, kept live
-- by the host's task events. Only the page shown is ever asked of the host, so
-- it opens as fast over 10,000 stored tasks as over ten.
local bridge = require("sidekick_tools.bridge")
local util = require("sidekick_tools.render.util")

local M = {}

local ns = vim.api.nvim_create_namespace("sidekick_tools_tasks")
local uv = vim.uv or vim.loop

local HEADER = 1 -- lines above the first task
M.HEADER = HEADER

--- Status filters, in the order the filter key cycles through them ("" = any).
M.filters = { "", "running", "queued", "completed", "failed", "cancelled" }
local FILTER_OK = {
  running = true,
  queued = true,
  completed = true,
  failed = true,
  cancelled = true,
}

---@class sidekick_tools.TasksView
---@field buf integer
---@field win integer
---@field status string "" or one status
---@field all boolean every Neovim's tasks
---@field offset integer
---@field rows table[] tasks on the page shown
---@field total integer
---@field timer uv.uv_timer_t|nil elapsed-time ticks
---@field refresh_timer uv.uv_timer_t|nil debounced reload
---@field unsubscribe fun()|nil
---@field render_pending boolean

---@type sidekick_tools.TasksView|nil
local view = nil

local function host()
  return require("sidekick_tools.host")
end

local function valid(v)
  return v and vim.api.nvim_buf_is_valid(v.buf)
end

local function visible(v)
  return valid(v) and vim.fn.bufwinid(v.buf) ~= -1
end

local function stop_timer(t)
  if t and not t:is_closing() then
    t:stop()
    t:close()
  end
end

--- Tasks per page: the option, or what the window shows (at most 100).
local function page_size(v)
  local opt = require("sidekick_tools.config").current.tasks_window or {}
  if (opt.page_size or 0) > 0 then
    return math.floor(opt.page_size)
  end
  local height = 20
  local win = v and vim.fn.bufwinid(v.buf) or -1
  if win ~= -1 then
    height = vim.api.nvim_win_get_height(win)
  end
  return math.max(5, math.min(100, height - HEADER))
end

local function time_text(t, now)
  if t.status == "queued" then
    return "queued"
  end
  local secs = util.seconds(t, now)
  if not secs then
    return ""
  end
  if t.status == "running" then
    return require("sidekick_tools.render.diagnostics").elapsed(t.started_at, now)
  end
  return util.duration(secs)
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
  if chat:sub(1, 4) == "mcp:" then
    return chat
  end
  return ""
end

local function one_line(s)
  return (s:gsub("\n", " ⏎ "))
end

local WHAT_CHARS = 60 -- a longer command is cut when a purpose or progress follows it

--- What the task runs, and the purpose its call gave (shown dimmed after it):
--- the command; for an agent, the agent and its message.
---@return string what, string purpose
local function what_of(t)
  local command, label = t.command or "", t.label or ""
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

local function pad(s, w)
  return s .. string.rep(" ", math.max(0, w - width(s)))
end

local function lpad(s, w)
  return string.rep(" ", math.max(0, w - width(s))) .. s
end

local function header_text(v)
  local scope = v.all and "every Neovim" or "this Neovim"
  local filter = v.status ~= "" and v.status or "any status"
  local n = #v.rows
  local size = page_size(v)
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
---@return string[] lines, table[] highlights { row, col_start, col_end, group }
function M.lines(v, now)
  now = now or os.time()
  local lines = { header_text(v) }
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
      glyph = require("sidekick_tools.render.diagnostics").glyphs[t.status] or "?",
      id = t.id or "??????",
      tool = t.tool ~= "" and t.tool or "task",
      time = time_text(t, now),
      bar = progress_text(t),
      exit = exit_text(t),
      origin = M.origin(t),
    }
    c.what, c.purpose = what_of(t)
    cells[i] = c
    cols.origin = math.max(cols.origin, width(c.origin))
    cols.tool = math.max(cols.tool, math.min(24, width(c.tool)))
    cols.time = math.max(cols.time, width(c.time))
    cols.bar = math.max(cols.bar, width(c.bar))
    cols.exit = math.max(cols.exit, width(c.exit))
  end
  for i, c in ipairs(cells) do
    local t = v.rows[i]
    local row = HEADER + i - 1
    local segs = {
      { c.glyph, util.status_hl[t.status] },
      { " " },
      { c.id, "SidekickTasksToken" },
      { "  " },
      { pad(c.tool, cols.tool), "SidekickTasksTool" },
    }
    if cols.origin > 0 then
      table.insert(segs, { "  " })
      table.insert(segs, { pad(c.origin, cols.origin), "SidekickTasksOrigin" })
    end
    vim.list_extend(segs, {
      { "  " },
      { lpad(c.time, cols.time), "SidekickTasksTime" },
    })
    if cols.bar > 0 then
      table.insert(segs, { "  " })
      table.insert(segs, { pad(c.bar, cols.bar), "SidekickTasksProgress" })
    end
    if cols.exit > 0 then
      table.insert(segs, { "  " })
      table.insert(segs, { pad(c.exit, cols.exit), util.status_hl[t.status] })
    end
    table.insert(segs, { "  " })
    table.insert(segs, { c.what })
    if c.purpose ~= "" then
      table.insert(segs, { "  " })
      table.insert(segs, { c.purpose, "SidekickTasksDim" })
    end
    local text, col = {}, 0
    for _, s in ipairs(segs) do
      table.insert(text, s[1])
      if s[2] and #s[1] > 0 then
        table.insert(hls, { row, col, col + #s[1], s[2] })
      end
      col = col + #s[1]
    end
    lines[HEADER + i] = table.concat(text)
  end
  return lines, hls
end

local function any_running(v)
  for _, t in ipairs(v.rows) do
    if t.status == "running" then
      return true
    end
  end
  return false
end

local render, schedule_refresh

--- Every Neovim's tasks (and MCP clients') change without events reaching this
--- Neovim: that view reloads its page each second; the others redraw the times.
local function ticking(v)
  return visible(v) and (any_running(v) or v.all)
end

local function tick()
  if not ticking(view) then
    if view then
      stop_timer(view.timer)
      view.timer = nil
    end
    return
  end
  if view.all then
    schedule_refresh(view)
  else
    render(view)
  end
end

local function ensure_timer(v)
  if ticking(v) then
    if not v.timer then
      v.timer = uv.new_timer()
      v.timer:start(1000, 1000, vim.schedule_wrap(tick))
    end
  elseif v.timer then
    stop_timer(v.timer)
    v.timer = nil
  end
end

render = function(v)
  if not valid(v) then
    return
  end
  local lines, hls = M.lines(v)
  vim.bo[v.buf].modifiable = true
  vim.api.nvim_buf_set_lines(v.buf, 0, -1, false, lines)
  vim.bo[v.buf].modifiable = false
  vim.api.nvim_buf_clear_namespace(v.buf, ns, 0, -1)
  for _, h in ipairs(hls) do
    local line = lines[h[1] + 1] or ""
    vim.api.nvim_buf_set_extmark(v.buf, ns, h[1], h[2], {
      end_col = h[3] == -1 and #line or h[3],
      hl_group = h[4],
    })
  end
  ensure_timer(v)
end

local function cursor_token(v)
  local win = vim.fn.bufwinid(v.buf)
  if win == -1 then
    return nil
  end
  local row = vim.api.nvim_win_get_cursor(win)[1] - HEADER
  local t = v.rows[row]
  return t and t.id or nil
end

local function place_cursor(v, token)
  local win = vim.fn.bufwinid(v.buf)
  if win == -1 then
    return
  end
  local row = HEADER + 1
  for i, t in ipairs(v.rows) do
    if t.id == token then
      row = HEADER + i
    end
  end
  row = math.min(row, vim.api.nvim_buf_line_count(v.buf))
  vim.api.nvim_win_set_cursor(win, { row, 0 })
end

--- Ask the host for the page shown and redraw. Keeps the cursor on its task.
function M.refresh()
  local v = view
  if not valid(v) then
    return
  end
  local keep = cursor_token(v)
  local size = page_size(v)
  local opts = { limit = size, offset = v.offset }
  if v.all then
    opts.owner = "any"
  else
    opts.chats = util.chat_names()
  end
  if v.status ~= "" then
    opts.status = v.status
  end
  local page = host().request("task_page", opts)
  if v.offset > 0 and #page.tasks == 0 and page.total > 0 then
    v.offset = math.max(0, math.floor((page.total - 1) / size) * size)
    opts.offset = v.offset
    page = host().request("task_page", opts)
  end
  v.rows = vim.tbl_map(util.clean, page.tasks)
  v.total = page.total
  render(v)
  place_cursor(v, keep)
end

schedule_refresh = function(v)
  if v.refresh_timer then
    return
  end
  v.refresh_timer = uv.new_timer()
  v.refresh_timer:start(
    100,
    0,
    vim.schedule_wrap(function()
      stop_timer(v.refresh_timer)
      v.refresh_timer = nil
      if view == v and valid(v) then
        local ok, err = pcall(M.refresh)
        if not ok then
          vim.notify(tostring(err), vim.log.levels.ERROR)
        end
      end
    end)
  )
end

local function schedule_render(v)
  if v.render_pending then
    return
  end
  v.render_pending = true
  vim.schedule(function()
    v.render_pending = false
    if view == v then
      render(v)
    end
  end)
end

--- A task event from the host: update its row in place, or reload the page
--- when the event changes which tasks the page holds.
local function on_task(ev)
  local v = view
  if not valid(v) then
    return
  end
  local t = util.clean(vim.deepcopy(ev.task))
  if not t then
    return
  end
  for i, row in ipairs(v.rows) do
    if row.id == t.id then
      if v.status ~= "" and t.status ~= v.status then
        schedule_refresh(v)
      else
        v.rows[i] = t
        schedule_render(v)
      end
      return
    end
  end
  if v.status == "" or v.status == t.status then
    schedule_refresh(v)
  end
end

local function close_view(v)
  stop_timer(v.timer)
  stop_timer(v.refresh_timer)
  v.timer, v.refresh_timer = nil, nil
  if v.unsubscribe then
    v.unsubscribe()
    v.unsubscribe = nil
  end
  if view == v then
    view = nil
  end
end

--- The task table on the cursor line of the tasks window, if the current
--- buffer is it.
function M.task_at_cursor()
  local v = view
  if not valid(v) or vim.api.nvim_get_current_buf() ~= v.buf then
    return nil
  end
  local row = vim.api.nvim_win_get_cursor(0)[1] - HEADER
  return v.rows[row]
end

function M.token_at_cursor()
  local t = M.task_at_cursor()
  return t and t.id or nil
end

--- A chat was opened: "this Neovim's tasks" now include its tasks.
function M.chats_changed()
  if visible(view) and not view.all then
    schedule_refresh(view)
  end
end

function M.is_tasks_buffer(buf)
  return view ~= nil and valid(view) and view.buf == (buf or vim.api.nvim_get_current_buf())
end

--- The state of the open view (tests and the statusline use it).
function M.state()
  return view
end

-- actions --------------------------------------------------------------------------

local function need_task()
  local t = M.task_at_cursor()
  if not t then
    vim.notify("sidekick_tools: no task on this line", vim.log.levels.WARN)
  end
  return t
end

--- Window to show a chat in: one that shows it already, else the previous
--- window, else a new split above the tasks window.
local function chat_window(buf)
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    if buf and vim.api.nvim_win_get_buf(win) == buf then
      return win
    end
  end
  local prev = vim.fn.win_getid(vim.fn.winnr("#"))
  local cur = vim.api.nvim_get_current_win()
  if prev ~= 0 and prev ~= cur and vim.bo[vim.api.nvim_win_get_buf(prev)].buftype == "" then
    return prev
  end
  vim.cmd("aboveleft split")
  return vim.api.nvim_get_current_win()
end

--- Row (1-based) of the last line of the block whose header is at `row`: its
--- result's closing fence when it has one, else its own.
function M.block_end(buf, row)
  local lines = vim.api.nvim_buf_get_lines(buf, row - 1, -1, false)
  local function closing(from)
    local fence = (lines[from] or ""):match("^(`+)")
    if not fence then
      return from
    end
    for i = from + 1, #lines do
      local run = lines[i]:match("^(`+)%s*$")
      if run and #run >= #fence then
        return i
      end
    end
    return #lines
  end
  local stop = closing(1)
  if (lines[stop + 1] or ""):match("^`+result%s") then
    stop = closing(stop + 1)
  end
  return row + stop - 1
end

--- Show the block whose header is at `row` in `win`: the header near the top
--- (a line of context above it), as much of the block below it as fits.
function M.show_block(win, row)
  local buf = vim.api.nvim_win_get_buf(win)
  local stop = M.block_end(buf, row)
  local height = vim.api.nvim_win_get_height(win)
  local top = math.max(1, row - 1)
  if stop - top + 1 > height then
    top = row
  end
  vim.api.nvim_win_call(win, function()
    vim.fn.winrestview({ topline = top, lnum = row, col = 0, leftcol = 0 })
  end)
end

--- Row (1-based) of the ```tool header with id=CALL_ID in BUF, or nil.
function M.call_row(buf, call_id)
  for i, line in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if line:match("^`+tool%s") then
      for id in line:gmatch("id=(%S+)") do
        if id == call_id then
          return i
        end
      end
    end
  end
end

--- Open the chat a task came from with the cursor on its tool call.
function M.jump(t)
  t = t or need_task()
  if not t then
    return
  end
  if not t.chat or t.chat == "" then
    vim.notify(
      "sidekick_tools: task " .. t.id .. " was not started from a chat",
      vim.log.levels.WARN
    )
    return
  end
  if M.origin(t) ~= "" then
    vim.notify(
      string.format("sidekick_tools: task %s was started by the MCP client %s", t.id, t.chat),
      vim.log.levels.INFO
    )
    return
  end
  local buf
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_get_name(b) == t.chat then
      buf = b
    end
  end
  if not buf and vim.fn.filereadable(t.chat) == 0 then
    vim.notify("sidekick_tools: chat " .. t.chat .. " no longer exists", vim.log.levels.WARN)
    return
  end
  local win = chat_window(buf)
  vim.api.nvim_set_current_win(win)
  if buf then
    vim.api.nvim_win_set_buf(win, buf)
  else
    vim.cmd("edit " .. vim.fn.fnameescape(t.chat))
    buf = vim.api.nvim_get_current_buf()
  end
  local row = t.call_id and t.call_id ~= "" and M.call_row(buf, t.call_id)
  if row then
    M.show_block(win, row)
  else
    vim.notify(
      string.format("sidekick_tools: call %s is no longer in %s", t.call_id or "?", t.chat),
      vim.log.levels.WARN
    )
  end
end

local actions = {}

function actions.output()
  local t = need_task()
  if t then
    require("sidekick_tools.render.output").open({ token = t.id })
  end
end

function actions.halt()
  local t = need_task()
  if not t then
    return
  end
  local res = require("sidekick_tools").halt(t.id)
  if res and res.message then
    vim.notify(res.message, vim.log.levels.INFO)
  end
  M.refresh()
end

function actions.jump()
  M.jump()
end

function actions.filter()
  local v = view
  local idx = 1
  for i, f in ipairs(M.filters) do
    if f == v.status then
      idx = i
    end
  end
  v.status = M.filters[idx % #M.filters + 1]
  v.offset = 0
  M.refresh()
end

function actions.scope()
  view.all = not view.all
  view.offset = 0
  M.refresh()
end

function actions.refresh()
  M.refresh()
end

function actions.rerun()
  local t = need_task()
  if t then
    require("sidekick_tools").rerun(t.id)
  end
end

local QUICKFIX_BYTES = 1024 * 1024 -- of each log, from its end

--- Run `fn` with the current directory at `dir` (no autocommands), so the
--- relative file names it hands to the quickfix list resolve where the task ran.
local function in_dir(dir, fn)
  if not dir or dir == "" or vim.fn.isdirectory(dir) == 0 then
    return fn()
  end
  local ei = vim.o.eventignore
  vim.o.eventignore = "all"
  local prev = vim.fn.chdir(dir)
  local ok, res = pcall(fn)
  if prev ~= "" then
    vim.fn.chdir(prev)
  end
  vim.o.eventignore = ei
  if not ok then
    error(res, 0)
  end
  return res
end

--- The task's output (stdout, then stderr) in the quickfix list, parsed with
--- 'errorformat', so its file:line entries can be jumped to.
function actions.quickfix()
  local t = need_task()
  if not t then
    return
  end
  local parse = require("sidekick_tools.render.output").parse_line
  local lines = {}
  for _, path in ipairs({ t.log_path, t.stderr_path }) do
    local st = {}
    for _, raw in ipairs(vim.split(util.read_tail(path, QUICKFIX_BYTES), "\n", { plain = true })) do
      table.insert(lines, (parse(raw, st)))
    end
    if lines[#lines] == "" then
      table.remove(lines)
    end
  end
  if #lines == 0 then
    vim.notify("sidekick_tools: task " .. t.id .. " printed nothing", vim.log.levels.WARN)
    return
  end
  local what = what_of(t)
  local title = string.format("sidekick task %s", util.end_line(t):sub(7, -2))
  if what ~= "" then
    title = title .. ": " .. what
  end
  in_dir(t.cwd, function()
    vim.fn.setqflist({}, " ", { title = title, lines = lines, efm = vim.o.errorformat })
  end)
  local valid = 0
  for _, item in ipairs(vim.fn.getqflist()) do
    if item.valid == 1 then
      valid = valid + 1
    end
  end
  -- opened from a window that shows a file, so its entries open there, not
  -- in place of this list
  local prev = vim.fn.win_getid(vim.fn.winnr("#"))
  local wins = vim.list_extend({ prev }, vim.api.nvim_tabpage_list_wins(0))
  for _, win in ipairs(wins) do
    if win ~= 0 and vim.bo[vim.api.nvim_win_get_buf(win)].buftype == "" then
      vim.api.nvim_set_current_win(win)
      break
    end
  end
  vim.cmd("botright copen")
  if valid == 0 then
    vim.notify(
      "sidekick_tools: no file:line in task " .. t.id .. "'s output ('errorformat')",
      vim.log.levels.WARN
    )
  end
end

function actions.next_page()
  local v = view
  local size = page_size(v)
  if v.offset + size < v.total then
    v.offset = v.offset + size
    M.refresh()
  end
end

function actions.prev_page()
  local v = view
  if v.offset > 0 then
    v.offset = math.max(0, v.offset - page_size(v))
    M.refresh()
  end
end

function actions.close()
  local win = vim.fn.bufwinid(view.buf)
  if win ~= -1 then
    if #vim.api.nvim_tabpage_list_wins(0) > 1 then
      vim.api.nvim_win_close(win, true)
    else
      vim.api.nvim_buf_delete(view.buf, { force = true })
    end
  end
end

M.descriptions = {
  output = "open the task's output",
  halt = "halt the task",
  jump = "jump to the tool call in its chat",
  filter = "cycle the status filter",
  scope = "this Neovim's / every Neovim's tasks",
  rerun = "run the task's tool call again",
  quickfix = "its output to the quickfix list",
  refresh = "reload",
  next_page = "next (older) page",
  prev_page = "previous (newer) page",
  close = "close",
  help = "this help",
}
local ORDER = {
  "output",
  "halt",
  "rerun",
  "jump",
  "quickfix",
  "filter",
  "scope",
  "next_page",
  "prev_page",
  "refresh",
  "close",
  "help",
}

--- "key  what it does" lines of the configured keys.
function M.help_lines()
  local maps = (require("sidekick_tools.config").current.keymaps or {}).tasks_window or {}
  local out = {}
  for _, name in ipairs(ORDER) do
    local keys = util.keys(maps[name])
    if #keys > 0 then
      table.insert(out, string.format("%-12s %s", table.concat(keys, " "), M.descriptions[name]))
    end
  end
  return out
end

function actions.help()
  local lines = M.help_lines()
  local w = 0
  for _, l in ipairs(lines) do
    w = math.max(w, width(l))
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = "wipe"
  local win = vim.api.nvim_open_win(buf, true, {
    relative = "win",
    win = vim.api.nvim_get_current_win(),
    row = 1,
    col = 2,
    width = w + 2,
    height = #lines,
    style = "minimal",
    border = "rounded",
    title = " sidekick tasks ",
  })
  for _, key in ipairs({ "q", "?", "<Esc>" }) do
    vim.keymap.set("n", key, function()
      pcall(vim.api.nvim_win_close, win, true)
    end, { buffer = buf, nowait = true })
  end
  vim.api.nvim_create_autocmd("WinLeave", {
    buffer = buf,
    once = true,
    callback = function()
      pcall(vim.api.nvim_win_close, win, true)
    end,
  })
end

M.actions = actions

local function set_keymaps(buf)
  local maps = (require("sidekick_tools.config").current.keymaps or {}).tasks_window or {}
  for name, fn in pairs(actions) do
    for _, lhs in ipairs(util.keys(maps[name])) do
      vim.keymap.set(
        "n",
        lhs,
        function()
          local ok, err = pcall(fn)
          if not ok then
            vim.notify(tostring(err), vim.log.levels.ERROR)
          end
        end,
        { buffer = buf, nowait = true, silent = true, desc = "sidekick: " .. M.descriptions[name] }
      )
    end
  end
end

local function create_view()
  util.define_highlights()
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].swapfile = false
  pcall(vim.api.nvim_buf_set_name, buf, "sidekick://tasks")
  vim.bo[buf].filetype = "sidekick_tasks"
  vim.bo[buf].modifiable = false
  local height = math.max(8, math.min(20, math.floor(vim.o.lines / 3)))
  vim.cmd("botright " .. height .. "split")
  local win = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(win, buf)
  local wo = vim.wo[win]
  wo.wrap = false
  wo.cursorline = true
  wo.number = false
  wo.relativenumber = false
  wo.signcolumn = "no"
  wo.foldcolumn = "0"
  wo.list = false
  wo.spell = false
  wo.winfixheight = true
  local v = {
    buf = buf,
    win = win,
    status = "",
    all = false,
    offset = 0,
    rows = {},
    total = 0,
    render_pending = false,
  }
  v.unsubscribe = bridge.on("task", on_task)
  vim.api.nvim_create_autocmd("BufWipeout", {
    buffer = buf,
    once = true,
    callback = function()
      close_view(v)
    end,
  })
  vim.api.nvim_create_autocmd("BufWinEnter", {
    buffer = buf,
    callback = function()
      if view == v then
        render(v)
      end
    end,
  })
  set_keymaps(buf)
  return v
end

--- Open (or focus) the tasks window.
---@param opts table|nil { status = "running"|"completed"|"failed"|"cancelled"|"queued"|"all"|nil,
---  all = boolean (every Neovim's tasks) }
function M.open(opts)
  opts = opts or {}
  vim.validate({ status = { opts.status, "string", true } })
  local status = opts.status or ""
  if status ~= "" and status ~= "all" and not FILTER_OK[status] then
    error(
      "sidekick_tools: unknown status "
        .. status
        .. "; use running, queued, completed, failed, cancelled or all",
      0
    )
  end
  if not valid(view) then
    view = create_view()
  else
    local win = vim.fn.bufwinid(view.buf)
    if win == -1 then
      vim.cmd("botright split")
      vim.api.nvim_win_set_buf(0, view.buf)
    else
      vim.api.nvim_set_current_win(win)
    end
  end
  view.all = opts.all == true
  view.status = (status == "all") and "" or status
  view.offset = 0
  require("sidekick_tools.render.statusline").seen()
  M.refresh()
  return view.buf
end

return M
