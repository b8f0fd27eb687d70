-- The plugin's client of the host (neotest's shape): every request the plugin
-- makes, the state of the calls the host follows, and typed events for the
-- consumers. Views read from here and never from the transport (host.lua).
--
-- Events (`M.on(kind, fn)`):
--   "call"   { buf, mark, state, tool, ... }: a followed call's state changed
--   "calls"  { buf, prompt, rewritten }: buf's call states changed; `prompt`: the
--            user just acted on buf, so drawing it should not wait; `rewritten`:
--            an edit went over call rows (a formatter), so marks drawn there moved
--   "answered" { buf }: the user's request on buf returned and the changes its
--            answer carried were handled (draw them before the command ends)
--   "task"   { kind, task, finished }: a task was queued, started, progressed
--            or ended; `task` has list_tasks()'s fields, missing ones nil
--   "notify" { msg, level }: a message of the host's for the user
--   "chat"   { buf }: a chat buffer was opened
--   "host"   { up }: a host started (true) or died (false)
local chats = require("sidekick_tools.chats")
local config = require("sidekick_tools.config")
local constants = require("sidekick_tools.constants")
local host = require("sidekick_tools.host")
local marks = require("sidekick_tools.marks")

local M = {}

---@class sidekick_tools.CallState
---@field state string a key of constants.states
---@field tool string
---@field detail string|nil
---@field started_at number|nil
---@field progress number|nil
---@field progress_text string|nil
---@field ahead number|nil

--- Calls the host follows, per buffer: mark id -> state. Their row is the mark's.
---@type table<integer, table<integer, sidekick_tools.CallState>>
M.tracked = {}
--- The other calls, as the host parsed them from the text: { row, state, ... }.
---@type table<integer, table[]>
M.scanned = {}

-- events -----------------------------------------------------------------------------

local listeners = {} ---@type table<string, function[]>

--- Subscribe to events of one kind (see the top of this file).
---@param kind string
---@param fn fun(ev: table)
---@return fun() unsubscribe
function M.on(kind, fn)
  vim.validate({ kind = { kind, "string" }, fn = { fn, "function" } })
  listeners[kind] = listeners[kind] or {}
  table.insert(listeners[kind], fn)
  return function()
    listeners[kind] = vim.tbl_filter(function(f)
      return f ~= fn
    end, listeners[kind] or {})
  end
end

local function emit(kind, event)
  for _, fn in ipairs(listeners[kind] or {}) do
    local ok, err = pcall(fn, event)
    if not ok then
      vim.notify("sidekick_tools: " .. tostring(err), vim.log.levels.ERROR)
    end
  end
end

local function valid(buf)
  return type(buf) == "number" and vim.api.nvim_buf_is_valid(buf)
end

-- What the user just asked for (:SidekickRunTool, a halt) is drawn at once for
-- PROMPT_MS after the request returns; other changes may be batched.
local PROMPT_MS = 100
local prompt_until = {} ---@type table<integer, number>

local function now_ms()
  return vim.uv.hrtime() / 1e6
end

local function changed(buf, rewritten)
  emit("calls", { buf = buf, prompt = now_ms() < (prompt_until[buf] or 0), rewritten = rewritten })
end

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

local handlers = {}

function handlers.call(ev)
  if not valid(ev.buf) then
    return
  end
  M.tracked[ev.buf] = M.tracked[ev.buf] or {}
  M.tracked[ev.buf][ev.mark] = ev
  changed(ev.buf)
  emit("call", ev)
end

function handlers.forget(ev)
  if M.tracked[ev.buf] then
    M.tracked[ev.buf][ev.mark] = nil
    if valid(ev.buf) then
      marks.delete(ev.buf, ev.mark)
      changed(ev.buf)
    end
  end
end

function handlers.scan(ev)
  if not valid(ev.buf) then
    return
  end
  -- tracked calls' header rows as the text has them: a mark that a reload or a
  -- formatter dropped or moved is set again, so their state stays in view
  for _, a in ipairs(ev.anchors or {}) do
    if marks.row(ev.buf, a[1]) ~= a[2] and a[2] < vim.api.nvim_buf_line_count(ev.buf) then
      marks.place(ev.buf, a[1], a[2])
    end
  end
  M.scanned[ev.buf] = ev.items or {}
  changed(ev.buf, ev.rewritten == true)
end

-- a tool wrote a file: the buffers showing it read it again
function handlers.written(ev)
  require("sidekick_tools.files").reload(ev.path)
end

function handlers.task(ev)
  M.clean(ev.task)
  emit("task", ev)
end

--- The host's batched events (bridge.on_events, and the replies that carry them).
---@param events table[]
function M.receive(events)
  for _, ev in ipairs(events) do
    local handler = handlers[ev.type]
    local ok, err
    if handler then
      ok, err = pcall(handler, ev)
    else
      ok, err = pcall(emit, ev.type, ev)
    end
    if not ok then
      vim.notify("sidekick_tools: " .. tostring(err), vim.log.levels.ERROR)
    end
  end
end

-- state --------------------------------------------------------------------------------

--- Is the line at a scanned call's row still that call's header? A scan's rows
--- are the text's when it was scanned: an edit since (a result written above)
--- moves the text, not the rows, until the next scan, a moment later.
local function still_at(buf, s)
  local line = vim.api.nvim_buf_get_lines(buf, s.row, s.row + 1, false)[1]
  if not line or not line:find("^```") then
    return false
  end
  return s.id == nil or s.id == "" or line:find(" id=" .. s.id, 1, true) ~= nil
end

--- Rows [first, last_old) of `buf` are now [first, last_new): the scanned
--- calls below them move with the text until the next scan says where they
--- are (a result written above pending calls hid their state until then).
function M.lines_moved(buf, first, last_old, last_new)
  local delta = last_new - last_old
  if delta == 0 then
    return
  end
  for _, s in ipairs(M.scanned[buf] or {}) do
    if s.row >= last_old then
      s.row = s.row + delta
    end
  end
end

--- Every call of `buf` with a state to show, by row: the followed calls whose
--- mark is still valid, then the scanned ones on the other rows (those whose
--- header is still where the scan found it).
---@return { row: integer, st: sidekick_tools.CallState }[]
function M.call_states(buf)
  local out, taken = {}, {}
  for mark, st in pairs(M.tracked[buf] or {}) do
    local row = marks.row(buf, mark)
    if row then
      taken[row] = true
      table.insert(out, { row = row, st = st })
    end
  end
  for _, s in ipairs(M.scanned[buf] or {}) do
    if not taken[s.row] and still_at(buf, s) then
      table.insert(out, { row = s.row, st = s })
    end
  end
  return out
end

--- Does `buf` hold a call whose task runs now?
function M.has_running(buf)
  for _, st in pairs(M.tracked[buf] or {}) do
    if st.state == "running" then
      return true
    end
  end
  return false
end

-- requests -------------------------------------------------------------------------------
-- Each raises a Lua error with a message for the user when the host refuses.

--- A request the user made on `buf`: the state changes it brings are drawn at
--- once, and the events its reply carries (the running state of the calls it
--- started) are handled before it returns.
local function act(buf, method, ...)
  local res = host.request(method, ...)
  prompt_until[buf] = now_ms() + PROMPT_MS
  if type(res) == "table" and res.events then
    local events = res.events
    res.events = nil
    M.receive(events)
  end
  if valid(buf) then
    emit("answered", { buf = buf })
  end
  return res
end

-- The requests the user makes on a buffer, each (buf, ...) -> the host's answer:
--   run_tool(buf, row, cwd)          the call at row, then the chain after it
--   run_tools(buf, cwd, ids)         ids: the calls to run (vim.NIL: every pending one)
--   run_call(buf, call_id, cwd, token) the call with that id (rerun of task token)
--   deny(buf, row, reason, cwd)      a denied result for the call at row, then the chain
for _, method in ipairs({ "run_tool", "run_tools", "run_call", "deny" }) do
  M[method] = function(buf, ...)
    return act(buf, method, buf, ...)
  end
end

--- Send chat `buf` to its model (DESIGN §10); the reply streams in through the
--- bridge. `trusted`: the providers the user chose for it, or true (any).
function M.send(buf, cwd, trusted)
  return act(buf, "send", buf, cwd, trusted)
end

--- Stop the reply streaming into `buf`, and its loop: { stopped, message }.
function M.stop(buf)
  return act(buf, "stop", buf)
end

-- Tasks the user halted here, whose end their halt tells (its answer, and
-- while halting one message once ended): their end notification is not shown.
local halted_here = {}

--- Halt task `token`, or the task of the call at (buf, row).
function M.halt(token, buf, row)
  local res = act(buf, "halt", token or vim.NIL, buf, row)
  if type(res) == "table" and res.halted == true and res.id then
    halted_here[res.id] = true
  end
  return res
end

--- Whether the end of task `id` was told by the user's halt (asked once: forgotten then).
function M.halted_here(id)
  local told = halted_here[id] == true
  halted_here[id] = nil
  return told
end

--- What :SidekickRunTools would do with each pending call: { id, tool, what, verdict, problem }.
function M.plan(buf, cwd)
  return host.request("plan", buf, cwd)
end

--- Tasks as the host answers them (missing values are vim.NIL): the public API's shape.
function M.list_tasks(opts)
  return host.request("list_tasks", next(opts) and opts or vim.empty_dict())
end

--- One task as the host answers it, or nil.
function M.get_task(token)
  local res = host.request("get_task", token)
  if res == vim.NIL then
    return nil
  end
  return res
end

--- One task for a view (missing values nil), or nil.
function M.task(token)
  return M.clean(M.get_task(token))
end

--- One page of tasks for a view: { tasks, total }.
function M.task_page(opts)
  local page = host.request("task_page", opts)
  page.tasks = vim.tbl_map(M.clean, page.tasks)
  return page
end

--- A task token the user typed, as the host takes it (lowercase); nil for nil.
--- Raises an error for the user when `text` is no token.
---@param text string|nil
---@return string|nil
function M.token(text)
  if text and not text:match("^%x%x%x%x%x%x$") then
    error("sidekick_tools: " .. text .. " is not a task token (6 hex characters)", 0)
  end
  return text and text:lower()
end

--- The token of the task of the call at (buf, row), or nil.
function M.task_at(buf, row)
  local token = host.request("task_at", buf, row)
  return token ~= vim.NIL and token or nil
end

--- The host's version and pid (:checkhealth); starts it when needed.
function M.info()
  return host.request("init", config.for_host(), { nvim_pid = vim.fn.getpid() })
end

--- setup() ran again: a running host gets the new settings.
function M.configure()
  if host.running() then
    pcall(
      host.request,
      "init",
      config.for_host(),
      { nvim_pid = vim.fn.getpid(), version = vim.version() }
    )
  end
end

-- life cycle -------------------------------------------------------------------------------

--- A chat buffer was opened: let a running host show each call's state and
--- follow running blocks. The host is started for that only when the chat names
--- a running task; any other chat waits for the first command. Nothing is ever run.
function M.chat_opened(buf)
  emit("chat", { buf = buf })
  if host.running() then
    -- scheduled: a reload by :checktime ('autoread') reads the file, and only
    -- then stops the buffer's updates to the host; told at once, the host
    -- looked at the text from before the reload (a running block ended since)
    -- and wrote that task's end a second time
    vim.schedule(function()
      if vim.api.nvim_buf_is_loaded(buf) and host.running() then
        host.notify("chat_opened", buf)
      end
    end)
    return
  end
  if not chats.names_running_task(buf) then
    return
  end
  vim.schedule(function()
    if not vim.api.nvim_buf_is_valid(buf) or host.running() then
      return
    end
    local chan, err = host.ensure() -- host_started() then shows every loaded chat
    if not chan then
      vim.notify(err, vim.log.levels.ERROR)
    end
  end)
end

-- masking ----------------------------------------------------------------------------

local asked = {} ---@type table<integer, fun(raws: table|nil)>
local asked_seq = 0

--- Raw lines of task output by stream ({ { line, ... }, { line, ... } }) with
--- every secret masked, given to `done` when the host answers: the one masker
--- (secrets_mask.py), as for everything else the plugin shows, its work off
--- the editor's loop (the output view, the tasks window's quickfix list).
--- `keys`: whether each stream ended its last piece inside a private key
--- (what `done` gets back as its second argument, for the next piece). nil
--- when there is no host to ask: such lines are not to be shown.
---@param raws string[][]
---@param keys boolean[]|nil
---@param done fun(raws: string[][]|nil, keys: boolean[]|nil)
function M.masked(raws, keys, done)
  if not host.running() then
    return done(nil)
  end
  -- each stream's lines as one string (false: none): one string crosses the
  -- channel for a fraction of what thousands of short ones cost
  local texts = {}
  for i, lines in ipairs(raws) do
    texts[i] = #lines > 0 and table.concat(lines, "\n")
  end
  asked_seq = asked_seq + 1
  asked[asked_seq] = function(safe, ends)
    if not safe then
      return done(nil)
    end
    local out = {}
    for i, text in ipairs(safe) do
      out[i] = type(text) == "string" and vim.split(text, "\n", { plain = true }) or {}
    end
    done(out, ends)
  end
  host.notify("mask_output", asked_seq, texts, keys or {})
end

handlers.masked = function(ev)
  local done = asked[ev.seq]
  asked[ev.seq] = nil
  if done then
    local texts = ev.raws ~= vim.NIL and ev.raws or nil
    done(texts, texts and ev.keys ~= vim.NIL and ev.keys or nil)
  end
end

--- The host that was asked to mask is gone (died, stopped for another, or a
--- new one is up): its answers will not come, and nobody waits for them.
function M.masking_lost()
  local waiting = asked
  asked = {}
  for _, done in pairs(waiting) do
    done(nil)
  end
end

--- A (new) host is up: the consumers listen from its first event on, and it
--- looks at every loaded chat, so that pending calls show their state and
--- running blocks are followed again after a restart.
function M.host_started()
  M.masking_lost()
  -- what an earlier host followed is its own (marks it chose, states it sent):
  -- dropped, so that a call is never shown twice; this host follows it again
  local shown = {}
  for buf, calls in pairs(M.tracked) do
    if valid(buf) then
      for mark in pairs(calls) do
        marks.delete(buf, mark)
      end
      table.insert(shown, buf)
    end
  end
  M.tracked, M.scanned = {}, {}
  for _, buf in ipairs(shown) do
    changed(buf)
  end
  require("sidekick_tools.consumers").register()
  for _, buf in ipairs(chats.loaded()) do
    host.notify("chat_opened", buf)
  end
  emit("host", { up = true })
end

--- The host died: running calls can no longer be followed by this process; the
--- next host recovers their tasks. Show that honestly instead of a stale spinner.
function M.host_lost()
  for buf, calls in pairs(M.tracked) do
    local any = false
    for _, st in pairs(calls) do
      if constants.active[st.state] then
        st.detail = "host stopped; run any command to reconnect"
        any = true
      end
    end
    if any and valid(buf) then
      changed(buf)
    end
  end
  M.masking_lost()
  emit("host", { up = false })
end

local function count_tasks(status)
  local ok, n = pcall(host.request, "count_tasks", { status = status })
  return ok and tonumber(n) or 0
end

--- How many of this instance's running tasks an MCP client started (taken
--- over from a server that exited): they follow mcp.kill_on_exit.
local function count_agents_tasks(running)
  if running == 0 then
    return 0
  end
  local ok, rows = pcall(host.request, "list_tasks", { status = "running", limit = running })
  local n = 0
  for _, task in ipairs(ok and type(rows) == "table" and rows or {}) do
    if vim.startswith(tostring(task.chat or ""), constants.mcp_chat_prefix) then
      n = n + 1
    end
  end
  return n
end

--- Before Neovim exits: say what happens to this instance's tasks, and show it
--- at once (Neovim is about to stop drawing).
local function say_exit()
  local running, queued = count_tasks("running"), count_tasks("queued")
  if running + queued == 0 then
    return
  end
  local plural = require("sidekick_tools.format").plural
  local parts = {}
  local agents = count_agents_tasks(running)
  running = running - agents
  if running > 0 then
    if config.current.tasks.kill_on_exit then
      table.insert(parts, "halting " .. plural(running, "running task") .. " (tasks.kill_on_exit)")
    else
      local one = running == 1
      local text = plural(running, "running task")
        .. (one and " goes on" or " go on")
        .. " (tasks.kill_on_exit = false)"
      -- a memory store goes with the host: no later one can follow them
      local ok, settings = pcall(host.request, "settings")
      if ok and type(settings) == "table" and tostring(settings.store):match("^memory") then
        text = text
          .. (
            one
              and "; the memory store (tasks.store) forgets it: no Neovim will write its result into its chat"
            or "; the memory store (tasks.store) forgets them: no Neovim will write their results into their chats"
          )
      end
      table.insert(parts, text)
    end
  end
  if agents > 0 then
    local what = plural(agents, "running MCP client task")
    if config.current.mcp.kill_on_exit then
      table.insert(parts, "halting " .. what .. " (mcp.kill_on_exit)")
    else
      table.insert(
        parts,
        what .. (agents == 1 and " goes on" or " go on") .. " (mcp.kill_on_exit = false)"
      )
    end
  end
  if queued > 0 then
    table.insert(parts, "cancelling " .. plural(queued, "queued task"))
  end
  -- a redraw first clears what :wqa printed (a message after those waits for a
  -- prompt that never comes); the one after puts this one on screen at once
  pcall(vim.cmd.redraw)
  vim.notify(
    "sidekick_tools: Neovim is exiting: " .. table.concat(parts, "; "),
    vim.log.levels.WARN
  )
  pcall(vim.cmd.redraw)
end

local exiting = false

--- VimLeavePre: say what happens to this instance's tasks, then let the host
--- halt them if configured.
function M.shutdown()
  if host.running() and not exiting then
    pcall(say_exit)
  end
  exiting = true
  local reaped = host.shutdown()
  local halted = reaped and #(reaped.halted or {}) + #(reaped.cancelled or {}) or 0
  if halted > 0 then
    vim.notify(
      "sidekick_tools: Neovim is exiting: the host had died; halted "
        .. require("sidekick_tools.format").plural(halted, "task")
        .. " it left (tasks.kill_on_exit)",
      vim.log.levels.WARN
    )
  end
end

return M
