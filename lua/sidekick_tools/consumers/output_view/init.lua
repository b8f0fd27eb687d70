-- :SidekickOutput: a read-only buffer that follows a task's log files
-- (follow.lua), coloured as a terminal would show them (ansi.lua), optionally
-- filtered, drawn by render.lua; its arguments are read by args.lua. The client is only asked who the task is and, once, how it ended;
-- its task events say when to read and when it ended.
local client = require("sidekick_tools.client")
local constants = require("sidekick_tools.constants")
local args_of = require("sidekick_tools.consumers.output_view.args")
local follow = require("sidekick_tools.consumers.output_view.follow")
local format = require("sidekick_tools.format")
local render = require("sidekick_tools.consumers.output_view.render")

local M = {}

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
---@field ending boolean|nil the task ended: what is left of its logs is being read
---@field bytes integer text bytes of `lines`
---@field dropped integer lines dropped from the start to keep the view bounded
---@field note string|nil first line when the start of the logs is not shown
---@field watch sidekick_tools.Watch|nil
---@field unsubscribe fun()|nil
---@field reading boolean|nil a read waits for its masking
---@field waiting function[] reads asked for meanwhile, in order
---@field pumping boolean|nil
---@field woken boolean|nil the logs grew while a pump's read was masked
---@field unmasked boolean|nil lines went unshown: no host to mask them

---@type table<integer, sidekick_tools.OutputView>
local views = {}

local function valid(v)
  return v and vim.api.nvim_buf_is_valid(v.buf)
end

-- following -------------------------------------------------------------------------

--- Show lines read (and masked) from the logs.
local function show(v, new)
  local before = #v.lines -- lines shown (or filtered out) already
  vim.list_extend(v.lines, new)
  for _, line in ipairs(new) do
    v.bytes = v.bytes + #line.text
  end
  local had_note = v.note ~= nil and not v.rx
  local gone = render.trim(v)
  if not valid(v) then
    return
  end
  local old = math.min(#gone, before) -- dropped lines that were read before
  if #gone > 0 then
    render.cut_top(v, vim.list_slice(gone, 1, old), had_note)
  end
  render.append(v, vim.list_slice(new, #gone - old + 1))
end

local NO_HOST = "[… output not shown: the host that masks its secrets stopped; "
  .. "open the view again]"

--- Read what the logs gained, have it masked, show it, then `done(more)`
--- (more: more is waiting than one read takes). One read at a time per view:
--- one asked for while another waits for its masking runs after it, in order.
local function read_new(v, final, done)
  if v.reading then
    table.insert(v.waiting, function()
      read_new(v, final, done)
    end)
    return
  end
  local raws, more = follow.read_raw(v.streams, final)
  local any = false
  for _, lines in pairs(raws) do
    any = any or #lines > 0
  end
  if not any then
    return done(more)
  end
  v.reading = true
  local keys = {}
  for i, s in ipairs(v.streams) do
    keys[i] = s.in_key == true
  end
  client.masked(raws, keys, function(safe, ends)
    v.reading = false
    for i, s in ipairs(v.streams) do
      s.in_key = ends and ends[i] == true -- a private key read on into the next piece
    end
    if valid(v) then
      if safe then
        show(v, follow.parse(v.streams, safe))
      elseif not v.unmasked then
        v.unmasked = true
        show(v, { { text = NO_HOST, stream = 1, spans = {} } })
      end
    end
    done(more)
    local next_read = table.remove(v.waiting, 1)
    if next_read then
      next_read()
    end
  end)
end

local function stop_watching(v)
  if v.watch then
    v.watch.stop()
    v.watch = nil
  end
  if v.unsubscribe then
    v.unsubscribe()
    v.unsubscribe = nil
  end
end

--- Read until caught up (a wake-up reads at most a chunk per stream; the rest
--- follows on the next turn of the loop, so the editor never stalls).
local function pump(v)
  if not valid(v) or v.ended or v.ending then
    return
  end
  if v.pumping then -- a wake-up while a read waits for its masking: read again after
    v.woken = true
    return
  end
  v.pumping, v.woken = true, false
  read_new(v, false, function(more)
    v.pumping = false
    if more or v.woken then
      vim.schedule(function()
        pump(v)
      end)
    end
  end)
end

--- The task ended: read what is left of its logs, a chunk per turn of the
--- loop (a flood the view fell behind on must not hold the editor), then say
--- how it ended.
local function finish(v, task)
  if v.ended or v.ending or not valid(v) then
    return
  end
  v.task, v.ending = task, true
  stop_watching(v)
  local function drain()
    if not valid(v) then
      return
    end
    read_new(v, false, function(more)
      if more then
        vim.schedule(drain)
        return
      end
      read_new(v, true, function()
        if valid(v) then
          render.end_line(v, format.end_line(task))
        end
      end)
    end)
  end
  drain()
end

--- The exit file appeared but no event said so (a task of another Neovim, or a
--- host that restarted): ask once how it ended.
local function check_exit(v)
  if not valid(v) or v.ended or v.ending or not v.task.log_dir then
    return
  end
  local uv = vim.uv or vim.loop
  if not uv.fs_stat(v.task.log_dir .. "/exit") and constants.terminal[v.task.status] == nil then
    return
  end
  local ok, task = pcall(client.task, v.token)
  if ok and task and constants.terminal[task.status] then
    finish(v, task)
  end
end

local function on_task(v, ev)
  local t = ev.task
  if type(t) ~= "table" or t.id ~= v.token then
    return
  end
  if constants.terminal[t.status] then
    finish(v, t)
  else
    v.task = t
    if valid(v) then
      render.update_winbar(v)
    end
    if v.watch then
      v.watch.wake()
    end
  end
end

local function watch(v)
  v.watch = follow.watch(v.task.log_dir, {
    changed = function()
      pump(v)
    end,
    exited = function()
      check_exit(v)
    end,
    tick = function()
      if valid(v) and not v.ended then
        pump(v)
        check_exit(v)
      end
    end,
  })
  v.unsubscribe = client.on("task", function(ev)
    on_task(v, ev)
  end)
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
  local rx = pattern and args_of.regex(pattern) -- a bad one keeps the filter shown
  v.filter, v.rx = pattern, rx
  render.redraw(v)
end

local function set_keymaps(v)
  require("sidekick_tools.keymaps").set_window_keys(v.buf, "output_window", {
    filter = function()
      vim.ui.input(
        { prompt = "Filter (Vim regex, empty: none): ", default = v.filter or "" },
        function(input)
          if input ~= nil and valid(v) then
            M.set_filter(v, input)
          end
        end
      )
    end,
    halt = function()
      local res = require("sidekick_tools").halt(v.token)
      if res and res.message then
        vim.notify(res.message, vim.log.levels.INFO)
      end
    end,
    close = function()
      if #vim.api.nvim_tabpage_list_wins(0) > 1 then
        vim.api.nvim_win_close(0, true)
      else
        vim.api.nvim_buf_delete(v.buf, { force = true })
      end
    end,
  })
end

local function is_tasks_buffer()
  return package.loaded["sidekick_tools.consumers.tasks_window"] ~= nil
    and require("sidekick_tools.consumers.tasks_window").is_tasks_buffer()
end

local function open_window(buf)
  local split = is_tasks_buffer() and "rightbelow vsplit" or nil
  return require("sidekick_tools.consumers.window").open(buf, split, { signcolumn = "auto" })
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
  local rx = opts.filter and args_of.regex(opts.filter) -- nothing opened on a bad one
  local task = client.task(opts.token)
  if not task then
    error("sidekick_tools: no task " .. opts.token .. " (unknown or expired)", 0)
  end
  local buf = require("sidekick_tools.consumers.window").scratch(
    "sidekick://output/" .. task.id,
    "sidekick_output"
  )
  local initial = require("sidekick_tools.config").current.output.initial_bytes
  local v = {
    buf = buf,
    token = task.id,
    task = task,
    streams = {
      follow.stream("stdout", task.log_path, initial),
      follow.stream("stderr", task.stderr_path, initial),
    },
    lines = {},
    waiting = {},
    shown = 0,
    bytes = 0,
    dropped = 0,
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
  render.redraw(v)
  if constants.terminal[task.status] then
    finish(v, task)
  else
    pump(v) -- what is there now; a flood goes on over the next turns of the loop
    watch(v)
    check_exit(v) -- it may have ended between the question and the watcher
  end
  return buf
end

--- The token of the task under the cursor: the tasks window's line, or the
--- tool call under the cursor in a chat.
function M.token_under_cursor()
  if is_tasks_buffer() then
    return require("sidekick_tools.consumers.tasks_window").token_at_cursor()
  end
  local row = vim.api.nvim_win_get_cursor(0)[1] - 1
  return client.task_at(vim.api.nvim_get_current_buf(), row)
end

--- The newest of this Neovim's tasks (the ones it started and those of the
--- chats loaded in it), or nil.
function M.latest_token()
  local tasks = client.list_tasks({ limit = 1, chats = require("sidekick_tools.chats").names() })
  return tasks[1] and tasks[1].id or nil
end

--- Split ":SidekickOutput [TOKEN] [/regex/]" arguments: token (or nil), filter (or nil).
M.parse_args = args_of.parse

--- :SidekickOutput [TOKEN] [/regex/]
---@param args string
function M.open_from_args(args)
  local token, filter = M.parse_args(args)
  local current = M.view()
  if not token and current then -- in an output view: change its filter
    M.set_filter(current, filter)
    return current.buf
  end
  if filter then
    args_of.regex(filter) -- said before anything is looked up or opened
  end
  local latest = false
  if not token then
    token = M.token_under_cursor()
    if not token then
      token, latest = M.latest_token(), true
    end
  end
  if not token then
    error("sidekick_tools: no task under the cursor, and none yet in this Neovim", 0)
  end
  if latest and require("sidekick_tools.chats").is_chat(vim.api.nvim_get_current_buf()) then
    -- in a chat, the cursor's line was meant: say whose output this is instead
    vim.notify(
      "sidekick_tools: no task for the line under the cursor; showing the latest, " .. token,
      vim.log.levels.INFO
    )
  end
  return M.open({ token = token, filter = filter })
end

return M
