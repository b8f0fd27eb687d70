-- :SidekickOutput: a read-only buffer that follows a task's log files like
-- `tail -f`. The files are read straight from Lua (vim.uv), each from the offset
-- reached so far, woken by a file-system watcher on the task's log folder (and
-- a slow timer in case the watcher cannot see the writes). The host is only
-- asked who the task is and, once, how it ended.
local bridge = require("sidekick_tools.bridge")
local util = require("sidekick_tools.render.util")

local M = {}

local uv = vim.uv or vim.loop
local ns = vim.api.nvim_create_namespace("sidekick_tools_output")

local CHUNK = 1024 * 1024 -- bytes read per stream per wake-up
local DEBOUNCE = 50 -- ms between a write and the read it triggers
local POLL = 1000 -- ms, fallback when the watcher misses writes

local STDOUT, STDERR = 1, 2

---@class sidekick_tools.OutputStream
---@field name string
---@field path string|nil
---@field offset integer next byte to read
---@field partial string bytes after the last newline read so far
---@field skip_first boolean drop the first (cut) line: the view started mid-file

---@class sidekick_tools.OutputView
---@field buf integer
---@field token string
---@field task table
---@field streams sidekick_tools.OutputStream[]
---@field lines table[] every line read: { text, stream, spans }
---@field shown integer lines in the buffer (the end line excluded)
---@field filter string|nil
---@field rx any vim.regex of the filter
---@field ended string|nil the end line, once the task ended
---@field note string|nil first line when the start of the logs is not shown

---@type table<integer, sidekick_tools.OutputView>
local views = {}

-- ANSI ----------------------------------------------------------------------------

local palette = {
  "#000000",
  "#cd3131",
  "#0dbc79",
  "#e5e510",
  "#2472c8",
  "#bc3fbc",
  "#11a8cd",
  "#e5e5e5",
  "#666666",
  "#f14c4c",
  "#23d18b",
  "#f5f543",
  "#3b8eea",
  "#d670d6",
  "#29b8db",
  "#ffffff",
}

local defined = {}

local function color_of(idx)
  if idx < 16 then
    return vim.g["terminal_color_" .. idx] or palette[idx + 1]
  end
  if idx < 232 then
    local n = idx - 16
    local steps = { 0, 95, 135, 175, 215, 255 }
    return string.format(
      "#%02x%02x%02x",
      steps[math.floor(n / 36) + 1],
      steps[math.floor(n / 6) % 6 + 1],
      steps[n % 6 + 1]
    )
  end
  local v = 8 + (idx - 232) * 10
  return string.format("#%02x%02x%02x", v, v, v)
end

--- Highlight group for an SGR state, defined on first use.
local function ansi_group(fg, bold)
  if not fg and not bold then
    return nil
  end
  local name = "SidekickAnsi"
    .. (fg and tostring(fg):gsub("#", "x") or "")
    .. (bold and "Bold" or "")
  if not defined[name] then
    local spec = { bold = bold or nil }
    if type(fg) == "number" then
      spec.fg = color_of(fg)
      spec.ctermfg = fg
    elseif fg then
      spec.fg = fg
    end
    vim.api.nvim_set_hl(0, name, spec)
    defined[name] = true
  end
  return name
end

local function apply_sgr(params, st)
  local codes = {}
  for _, n in ipairs(vim.split(params, "[;:]")) do
    table.insert(codes, tonumber(n) or 0)
  end
  local i = 1
  while i <= #codes do
    local c = codes[i]
    if c == 0 then
      st.fg, st.bold = nil, false
    elseif c == 1 then
      st.bold = true
    elseif c == 22 then
      st.bold = false
    elseif c >= 30 and c <= 37 then
      st.fg = c - 30
    elseif c >= 90 and c <= 97 then
      st.fg = c - 90 + 8
    elseif c == 39 then
      st.fg = nil
    elseif c == 38 or c == 48 then
      local fg = c == 38
      if codes[i + 1] == 5 then
        if fg then
          st.fg = codes[i + 2]
        end
        i = i + 2
      elseif codes[i + 1] == 2 then
        if fg then
          st.fg =
            string.format("#%02x%02x%02x", codes[i + 2] or 0, codes[i + 3] or 0, codes[i + 4] or 0)
        end
        i = i + 4
      end
    end
    i = i + 1
  end
end

--- Text of one raw line without escape sequences and control characters, and
--- the colour spans the SGR sequences asked for: { col_start, col_end, group }.
--- `st` carries the SGR state from line to line.
function M.parse_line(raw, st)
  st = st or {}
  raw = raw:gsub("\r$", "")
  if raw:find("\r", 1, true) then -- a terminal would have overwritten: keep the last part
    raw = raw:match("([^\r]*)$")
  end
  if not raw:find("\27", 1, true) then
    local text = raw:gsub("[%z\1-\8\11-\31\127]", "")
    local group = ansi_group(st.fg, st.bold)
    return text, group and #text > 0 and { { 0, #text, group } } or nil
  end
  local out, spans, pos, col = {}, {}, 1, 0
  local function emit(s)
    s = s:gsub("[%z\1-\8\11-\31\127]", "")
    if s == "" then
      return
    end
    local group = ansi_group(st.fg, st.bold)
    if group then
      table.insert(spans, { col, col + #s, group })
    end
    table.insert(out, s)
    col = col + #s
  end
  while pos <= #raw do
    local esc = raw:find("\27", pos, true)
    if not esc then
      emit(raw:sub(pos))
      break
    end
    emit(raw:sub(pos, esc - 1))
    local nxt = raw:sub(esc + 1, esc + 1)
    if nxt == "[" then
      local params, final, stop = raw:match("^%[([%d;:?<=>]*)[ -/]*([@-~])()", esc + 1)
      if stop then
        if final == "m" then
          apply_sgr(params, st)
        end
        pos = stop
      else
        pos = #raw + 1 -- unterminated sequence: drop the rest
      end
    elseif nxt == "]" then -- OSC, ended by BEL or ESC \
      local stop = raw:find("\7", esc, true)
      local st_end = raw:find("\27\\", esc + 1, true)
      if st_end and (not stop or st_end < stop) then
        pos = st_end + 2
      elseif stop then
        pos = stop + 1
      else
        pos = #raw + 1
      end
    else
      pos = esc + 2
    end
  end
  return table.concat(out), #spans > 0 and spans or nil
end

-- rendering -------------------------------------------------------------------------

local function valid(v)
  return v and vim.api.nvim_buf_is_valid(v.buf)
end

local function matches(v, line)
  return not v.rx or v.rx:match_str(line.text) ~= nil
end

local function decorate(v, row, line)
  if line.stream == STDERR then
    vim.api.nvim_buf_set_extmark(v.buf, ns, row, 0, {
      sign_text = "▌",
      sign_hl_group = "SidekickOutputStderr",
      end_col = #line.text,
      hl_group = "SidekickOutputStderr",
      priority = 100,
    })
  end
  for _, s in ipairs(line.spans or {}) do
    vim.api.nvim_buf_set_extmark(v.buf, ns, row, s[1], {
      end_col = s[2],
      hl_group = s[3],
      priority = 110,
    })
  end
end

--- Windows showing the view whose cursor sits on its last line (they follow).
local function followers(v)
  local out = {}
  local last = vim.api.nvim_buf_line_count(v.buf)
  for _, win in ipairs(vim.fn.win_findbuf(v.buf)) do
    if vim.api.nvim_win_get_cursor(win)[1] >= last then
      table.insert(out, win)
    end
  end
  return out
end

local function scroll(v, wins)
  local last = vim.api.nvim_buf_line_count(v.buf)
  for _, win in ipairs(wins) do
    if vim.api.nvim_win_is_valid(win) then
      vim.api.nvim_win_set_cursor(win, { last, 0 })
    end
  end
end

local function set_lines(v, start, stop, lines)
  vim.bo[v.buf].modifiable = true
  vim.api.nvim_buf_set_lines(v.buf, start, stop, false, lines)
  vim.bo[v.buf].modifiable = false
end

local function winbar(v)
  local t = v.task
  local parts = {
    "%#SidekickTasksToken#" .. v.token .. "%*",
    ((t.tool or "task"):gsub("%%", "%%%%")),
    "%#" .. (util.status_hl[t.status] or "Normal") .. "#" .. t.status .. "%*",
  }
  if v.filter then
    table.insert(parts, (("filter /" .. v.filter .. "/"):gsub("%%", "%%%%")))
  end
  local label = (t.label or ""):gsub("\n", " "):gsub("%%", "%%%%")
  return " " .. table.concat(parts, " · ") .. "  %<" .. label
end

local function update_winbar(v)
  local bar = winbar(v)
  for _, win in ipairs(vim.fn.win_findbuf(v.buf)) do
    vim.wo[win].winbar = bar
  end
end

--- Redraw everything from the lines read so far (the filter changed).
local function redraw(v)
  local wins = followers(v)
  vim.api.nvim_buf_clear_namespace(v.buf, ns, 0, -1)
  local text, shown = {}, {}
  if v.note and not v.rx then
    table.insert(text, v.note)
  end
  local first = #text
  for _, line in ipairs(v.lines) do
    if matches(v, line) then
      table.insert(text, line.text)
      table.insert(shown, line)
    end
  end
  v.shown = #text
  if v.ended then
    table.insert(text, v.ended)
  end
  set_lines(v, 0, -1, text)
  if v.note and not v.rx then
    vim.api.nvim_buf_set_extmark(
      v.buf,
      ns,
      0,
      0,
      { end_col = #v.note, hl_group = "SidekickOutputEnd" }
    )
  end
  for i, line in ipairs(shown) do
    decorate(v, first + i - 1, line)
  end
  if v.ended then
    vim.api.nvim_buf_set_extmark(v.buf, ns, v.shown, 0, {
      end_col = #v.ended,
      hl_group = "SidekickOutputEnd",
    })
  end
  update_winbar(v)
  scroll(v, wins)
end

--- Append newly read lines (those the filter lets through).
local function append(v, new)
  local add = {}
  for _, line in ipairs(new) do
    if matches(v, line) then
      table.insert(add, line)
    end
  end
  if #add == 0 then
    return
  end
  local wins = followers(v)
  local text = {}
  for _, line in ipairs(add) do
    table.insert(text, line.text)
  end
  local start = v.shown
  if start == 0 and not v.ended then
    set_lines(v, 0, -1, text) -- replace the empty first line of a new buffer
  else
    set_lines(v, start, start, text)
  end
  for i, line in ipairs(add) do
    decorate(v, start + i - 1, line)
  end
  v.shown = v.shown + #add
  scroll(v, wins)
end

-- reading ---------------------------------------------------------------------------

--- Up to `max` bytes of `path` from `offset`; nil when the file is not there yet.
local function read_from(path, offset, max)
  local fd = uv.fs_open(path, "r", 0)
  if not fd then
    return nil
  end
  local stat = uv.fs_fstat(fd)
  local size = stat and stat.size or 0
  local data = ""
  if size > offset then
    data = uv.fs_read(fd, math.min(max, size - offset), offset) or ""
  end
  uv.fs_close(fd)
  return data, size
end

--- Read what each stream gained since the last read. `final`: the task ended,
--- so a last line without a newline is complete too. Returns true when more
--- is waiting than one read takes.
local function read_new(v, final)
  local new, more = {}, false
  for idx, s in ipairs(v.streams) do
    if s.path then
      local data, size = read_from(s.path, s.offset, CHUNK)
      if data and #data > 0 then
        s.offset = s.offset + #data
        more = more or s.offset < size
        local parts = vim.split(s.partial .. data, "\n", { plain = true })
        s.partial = table.remove(parts)
        for _, raw in ipairs(parts) do
          if s.skip_first then
            s.skip_first = false
          else
            local text, spans = M.parse_line(raw, s.sgr)
            table.insert(new, { text = text, stream = idx, spans = spans })
          end
        end
      end
      if final and not more and s.partial ~= "" then
        local text, spans = M.parse_line(s.partial, s.sgr)
        s.partial = ""
        table.insert(new, { text = text, stream = idx, spans = spans })
      end
    end
  end
  for _, line in ipairs(new) do
    table.insert(v.lines, line)
  end
  if valid(v) then
    append(v, new)
  end
  return more
end

local function stop_watching(v)
  for _, h in ipairs({ v.watcher, v.poller, v.debounce }) do
    if h and not h:is_closing() then
      h:stop()
      h:close()
    end
  end
  v.watcher, v.poller, v.debounce = nil, nil, nil
  if v.unsubscribe then
    v.unsubscribe()
    v.unsubscribe = nil
  end
end

local finish

--- Read until caught up (a wake-up reads at most CHUNK per stream; the rest
--- follows on the next turn of the loop, so the editor never stalls).
local function pump(v)
  if not valid(v) or v.ended then
    return
  end
  if read_new(v, false) then
    vim.schedule(function()
      pump(v)
    end)
  end
end

local function wake(v)
  if v.debounce or v.ended then
    return
  end
  v.debounce = uv.new_timer()
  v.debounce:start(DEBOUNCE, 0, function()
    if v.debounce then
      v.debounce:close()
      v.debounce = nil
    end
    vim.schedule(function()
      pump(v)
    end)
  end)
end

--- The task ended: read to the end, then say how it ended.
finish = function(v, task)
  if v.ended or not valid(v) then
    return
  end
  v.task = task
  stop_watching(v)
  while read_new(v, false) do
  end
  read_new(v, true)
  v.ended = util.end_line(task)
  local wins = followers(v)
  set_lines(v, v.shown, -1, { v.ended })
  vim.api.nvim_buf_set_extmark(v.buf, ns, v.shown, 0, {
    end_col = #v.ended,
    hl_group = "SidekickOutputEnd",
  })
  update_winbar(v)
  scroll(v, wins)
end

local TERMINAL = { completed = true, failed = true, cancelled = true }

--- The exit file appeared but no event said so (a task of another Neovim, or a
--- host that restarted): ask the host once how it ended.
local function check_exit(v)
  if v.ended or not v.task.log_dir then
    return
  end
  if not uv.fs_stat(v.task.log_dir .. "/exit") and TERMINAL[v.task.status] == nil then
    return
  end
  local ok, task = pcall(require("sidekick_tools.host").request, "get_task", v.token)
  task = ok and util.clean(task) or nil
  if task and TERMINAL[task.status] then
    finish(v, task)
  end
end

local function watch(v)
  local dir = v.task.log_dir
  if dir and uv.fs_stat(dir) then
    local w = uv.new_fs_event()
    if w then
      local ok = w:start(dir, {}, function(err, fname)
        if err then
          return
        end
        if fname == "exit" then
          vim.schedule(function()
            check_exit(v)
          end)
        else
          wake(v)
        end
      end)
      if ok then
        v.watcher = w
      else
        w:close()
      end
    end
  end
  v.poller = uv.new_timer()
  v.poller:start(
    POLL,
    POLL,
    vim.schedule_wrap(function()
      if valid(v) and not v.ended then
        pump(v)
        check_exit(v)
      end
    end)
  )
  v.unsubscribe = bridge.on("task", function(ev)
    local t = ev.task
    if type(t) ~= "table" or t.id ~= v.token then
      return
    end
    t = util.clean(vim.deepcopy(t))
    if TERMINAL[t.status] then
      finish(v, t)
    else
      v.task = t
      if valid(v) then
        update_winbar(v)
      end
      wake(v)
    end
  end)
end

--- Where to start reading a log: its last `initial_bytes`, so a huge log opens fast.
local function start_stream(name, path)
  local s = { name = name, path = path, offset = 0, partial = "", skip_first = false, sgr = {} }
  local limit = (require("sidekick_tools.config").current.output or {}).initial_bytes or 4194304
  local stat = path and uv.fs_stat(path)
  if stat and limit > 0 and stat.size > limit then
    s.offset = stat.size - limit
    s.skip_first = true
  end
  return s
end

-- public ----------------------------------------------------------------------------

--- The view shown in `buf` (default: the current buffer), if it is one.
function M.view(buf)
  return views[buf or vim.api.nvim_get_current_buf()]
end

--- Set (or with nil/"" clear) the filter of a view: only matching lines are
--- shown; every line read stays, so clearing it shows everything again.
function M.set_filter(v, pattern)
  if pattern == "" then
    pattern = nil
  end
  local rx = pattern and util.regex(pattern, "filter") -- a bad one keeps the filter shown
  v.filter, v.rx = pattern, rx
  redraw(v)
end

local function set_keymaps(v)
  local maps = (require("sidekick_tools.config").current.keymaps or {}).output_window or {}
  local acts = {
    filter = {
      function()
        vim.ui.input(
          { prompt = "Filter (Vim regex, empty: none): ", default = v.filter or "" },
          function(input)
            if input ~= nil and valid(v) then
              M.set_filter(v, input)
            end
          end
        )
      end,
      "filter the output",
    },
    halt = {
      function()
        local res = require("sidekick_tools").halt(v.token)
        if res and res.message then
          vim.notify(res.message, vim.log.levels.INFO)
        end
      end,
      "halt the task",
    },
    close = {
      function()
        if #vim.api.nvim_tabpage_list_wins(0) > 1 then
          vim.api.nvim_win_close(0, true)
        else
          vim.api.nvim_buf_delete(v.buf, { force = true })
        end
      end,
      "close",
    },
  }
  for name, act in pairs(acts) do
    for _, lhs in ipairs(util.keys(maps[name])) do
      vim.keymap.set("n", lhs, function()
        local ok, err = pcall(act[1])
        if not ok then
          vim.notify(tostring(err), vim.log.levels.ERROR)
        end
      end, { buffer = v.buf, nowait = true, silent = true, desc = "sidekick: " .. act[2] })
    end
  end
end

local function open_window(buf)
  local tasks = require("sidekick_tools.render.tasks")
  if tasks.is_tasks_buffer() then
    vim.cmd("rightbelow vsplit")
  else
    local height = math.max(8, math.min(20, math.floor(vim.o.lines / 3)))
    vim.cmd("botright " .. height .. "split")
  end
  local win = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(win, buf)
  local wo = vim.wo[win]
  wo.wrap = false
  wo.number = false
  wo.relativenumber = false
  wo.signcolumn = "auto"
  wo.list = false
  wo.spell = false
  return win
end

--- Open (or focus) the live view of a task's output.
---@param opts { token: string, filter: string|nil }
---@return integer buf
function M.open(opts)
  vim.validate({ token = { opts.token, "string" }, filter = { opts.filter, "string", true } })
  for buf, v in pairs(views) do
    if v.token == opts.token and valid(v) then
      local win = vim.fn.bufwinid(buf)
      if win == -1 then
        open_window(buf)
      else
        vim.api.nvim_set_current_win(win)
      end
      if opts.filter then
        M.set_filter(v, opts.filter)
      end
      return buf
    end
  end
  local rx = opts.filter and util.regex(opts.filter, "filter") -- nothing opened on a bad one
  local task = util.clean(require("sidekick_tools.host").request("get_task", opts.token))
  if not task then
    error("sidekick_tools: no task " .. opts.token .. " (unknown or expired)", 0)
  end
  util.define_highlights()
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].swapfile = false
  pcall(vim.api.nvim_buf_set_name, buf, "sidekick://output/" .. task.id)
  vim.bo[buf].filetype = "sidekick_output"
  vim.bo[buf].modifiable = false
  local v = {
    buf = buf,
    token = task.id,
    task = task,
    streams = {
      start_stream("stdout", task.log_path),
      start_stream("stderr", task.stderr_path),
    },
    lines = {},
    shown = 0,
  }
  local skipped = 0
  for _, s in ipairs(v.streams) do
    skipped = skipped + s.offset
  end
  if skipped > 0 then
    v.note =
      string.format("[… %d earlier bytes not shown; full logs in %s]", skipped, task.log_dir)
  end
  views[buf] = v
  vim.api.nvim_create_autocmd("BufWipeout", {
    buffer = buf,
    once = true,
    callback = function()
      stop_watching(v)
      views[buf] = nil
    end,
  })
  open_window(buf)
  set_keymaps(v)
  if rx then
    v.filter, v.rx = opts.filter, rx
  end
  redraw(v)
  if TERMINAL[task.status] then
    finish(v, task)
  else
    while read_new(v, false) do
    end
    watch(v)
    check_exit(v) -- it may have ended between get_task and the watcher
  end
  return buf
end

--- Split ":SidekickOutput [TOKEN] [/regex/]" arguments: token (or nil), filter (or nil).
function M.parse_args(args)
  args = vim.trim(args or "")
  local token, rest = args:match("^([^/%s]+)%s*(.*)$")
  if not token then
    rest = args
  end
  local filter
  if rest ~= "" then
    filter = rest:match("^/(.*)/$") or rest:match("^/(.*)$")
    if not filter then
      error("sidekick_tools: expected :SidekickOutput [TOKEN] [/regex/], got " .. args, 0)
    end
  end
  if token and not token:match("^%x%x%x%x%x%x$") then
    error("sidekick_tools: " .. token .. " is not a task token (6 hex characters)", 0)
  end
  return token and token:lower() or nil, filter
end

--- The token of the task under the cursor: the tasks window's line, or the
--- tool call under the cursor in a chat.
function M.token_under_cursor()
  local tasks = require("sidekick_tools.render.tasks")
  if tasks.is_tasks_buffer() then
    return tasks.token_at_cursor()
  end
  local buf = vim.api.nvim_get_current_buf()
  local row = vim.api.nvim_win_get_cursor(0)[1] - 1
  local token = require("sidekick_tools.host").request("task_at", buf, row)
  if token == vim.NIL then
    return nil
  end
  return token
end

--- The newest of this Neovim's tasks (the ones it started and those of the
--- chats loaded in it), or nil.
function M.latest_token()
  local tasks =
    require("sidekick_tools.host").request("list_tasks", { limit = 1, chats = util.chat_names() })
  return tasks[1] and tasks[1].id or nil
end

--- :SidekickOutput [TOKEN] [/regex/]
function M.open_from_args(_, args)
  local token, filter = M.parse_args(args)
  local current = M.view()
  if not token and current then -- in an output view: change its filter
    M.set_filter(current, filter)
    return current.buf
  end
  if filter then
    util.regex(filter, "filter") -- said before anything is looked up or opened
  end
  token = token or M.token_under_cursor() or M.latest_token()
  if not token then
    error("sidekick_tools: no task under the cursor, and none yet in this Neovim", 0)
  end
  return M.open({ token = token, filter = filter })
end

return M
