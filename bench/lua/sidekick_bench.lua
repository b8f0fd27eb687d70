-- In-editor side of the benchmarks: the Lua baselines (jobstart collector in
-- the style of plenary jobs, vim.system with a stdout callback) and the timing
-- hooks around the plugin. Every time here is vim.uv.hrtime(), in nanoseconds.
local M = {}

local uv = vim.uv or vim.loop

M.state = {}

function M.reset()
  M.state = { started = 0, done = 0, t0 = nil, t_done = nil, lines = 0, bytes = 0 }
  M.sink = {}
  return true
end
M.reset()

local function finished_one()
  local st = M.state
  st.done = st.done + 1
  if st.done >= st.started then
    st.t_done = uv.hrtime()
  end
end

--- Baseline (a): jobstart with an on_stdout collector like plenary's Job:
--- complete lines are appended to a Lua table, the partial last line is kept.
local function start_jobstart(argv, sink)
  local partial = ""
  return vim.fn.jobstart(argv, {
    on_stdout = function(_, data)
      if not data then
        return
      end
      local n = #data
      if n == 0 then
        return
      end
      data[1] = partial .. data[1]
      for i = 1, n - 1 do
        sink[#sink + 1] = data[i]
      end
      partial = data[n]
    end,
    on_exit = function()
      if partial ~= "" then
        sink[#sink + 1] = partial
      end
      finished_one()
    end,
  })
end

--- Baseline (b): vim.system with a stdout callback appending chunks to a table.
local function start_system(argv, sink)
  return vim.system(argv, {
    stdout = function(_, data)
      if data then
        sink[#sink + 1] = data
      end
    end,
  }, function()
    finished_one()
  end)
end

M.starters = { jobstart = start_jobstart, system = start_system }

--- Start `n` copies of `sh -c cmd` with a baseline; completion is counted in M.state.
---@param kind "jobstart"|"system"
function M.spawn(kind, cmd, n)
  M.reset()
  local start = M.starters[kind]
  local handles = {}
  M.state.t0 = uv.hrtime()
  M.state.started = n
  -- a plain command runs without a shell, so that stopping the job stops it
  local argv = cmd:find("[|;&<>$`\"']") and { "/bin/sh", "-c", cmd } or vim.split(cmd, " ")
  for i = 1, n do
    local sink = {}
    M.sink[i] = sink
    handles[i] = start(argv, sink)
  end
  M.handles = handles
  return true
end

--- Control for the wall-time row: `sh -c cmd` started by Neovim itself with
--- its stdout on the file `path`, so none of its output passes through the
--- editor. Its end is counted in M.state like the baselines'.
function M.spawn_to_file(cmd, path)
  M.reset()
  local fd = assert(uv.fs_open(path, "a", 420))
  M.state.started = 1
  M.state.t0 = uv.hrtime()
  local handle
  handle = uv.spawn("/bin/sh", { args = { "-c", cmd }, stdio = { nil, fd, nil } }, function()
    finished_one()
    handle:close()
  end)
  uv.fs_close(fd)
  return handle ~= nil
end

--- (seconds since the epoch, uv.hrtime()) read together: maps this editor's
--- hrtime stamps onto the wall clock that commands stamp themselves with.
function M.clocks()
  local sec, usec = uv.gettimeofday()
  return { sec + usec / 1e6, uv.hrtime() }
end

--- Stop what M.spawn started (used for the long `sleep` jobs).
function M.stop_all(kind)
  for _, h in ipairs(M.handles or {}) do
    if kind == "jobstart" then
      pcall(vim.fn.jobstop, h)
    else
      pcall(function()
        h:kill(9)
      end)
    end
  end
  M.handles = {}
  M.sink = {}
  collectgarbage()
  -- The Vimscript lists jobstart handed to on_stdout are freed once the
  -- editor next idles for 'updatetime' (4 s), 30-100 ms of CPU in the middle
  -- of whatever runs then (every other wall-time round): free them now.
  local testing = vim.v.testing
  vim.v.testing = 1
  pcall(vim.fn.test_garbagecollect_now)
  vim.v.testing = testing
  return true
end

local UNSETTLED = { pending = true, queued = true, running = true }

--- Follow the plugin's task events: count "finished" ones. Follow its call
--- events too: `t_written` is when the last call got its final state, which
--- the host sends once the call's result block is in the buffer.
function M.track_plugin(expected)
  M.reset()
  M.state.started = expected
  M.state.written = 0
  M.settled = {}
  if not M._unsub then
    local client = require("sidekick_tools.client")
    M._unsub = client.on("task", function(ev)
      if ev.finished then
        finished_one()
      elseif ev.kind == "started" then
        M.state.running = (M.state.running or 0) + 1
      end
    end)
    client.on("call", function(ev)
      local st = M.state
      if UNSETTLED[ev.state] or M.settled[ev.mark] or not st.written then
        return
      end
      M.settled[ev.mark] = true
      st.written = st.written + 1
      if st.written >= st.started then
        st.t_written = uv.hrtime()
      end
    end)
  end
  M.state.t0 = uv.hrtime()
  return true
end

--- Run the plugin's `run_tools` on the current buffer with the clock started.
function M.plugin_run_tools(expected)
  M.track_plugin(expected)
  local res = require("sidekick_tools").run_tools(0, { confirm = false })
  M.state.t_returned = uv.hrtime()
  return res
end

-- :SidekickRunTool -> running diagnostic ------------------------------------

local ns
local diag_wait -- { row, prefix, t0, t1 }

local function on_diag(ev)
  local w = diag_wait
  if not w or w.t1 or ev.buf ~= w.buf then
    return
  end
  for _, d in ipairs(vim.diagnostic.get(ev.buf, { namespace = ns, lnum = w.row })) do
    if d.message:sub(1, #w.prefix) == w.prefix then
      w.t1 = uv.hrtime()
      return
    end
  end
end

--- Put the cursor on 1-based line `lnum` and run `cmd` (an Ex command) with the
--- clock started; the time until a diagnostic starting with `prefix` appears on
--- that line is recorded by a DiagnosticChanged autocmd (see M.diag_result).
function M.time_command(lnum, cmd, prefix)
  ns = ns or vim.api.nvim_create_namespace("sidekick_tools")
  if not M._diag_au then
    M._diag_au = vim.api.nvim_create_autocmd("DiagnosticChanged", { callback = on_diag })
  end
  vim.api.nvim_win_set_cursor(0, { lnum, 0 })
  diag_wait = { buf = vim.api.nvim_get_current_buf(), row = lnum - 1, prefix = prefix }
  diag_wait.t0 = uv.hrtime()
  vim.cmd(cmd)
  diag_wait.t_cmd = uv.hrtime()
  return (diag_wait.t_cmd - diag_wait.t0) / 1e6
end

--- { cmd_ms, diag_ms|nil } of the last M.time_command.
function M.diag_result()
  local w = diag_wait or {}
  return {
    cmd_ms = w.t_cmd and (w.t_cmd - w.t0) / 1e6 or vim.NIL,
    diag_ms = w.t1 and (w.t1 - w.t0) / 1e6 or vim.NIL,
  }
end

-- Baseline ":RunTool": the same job done in Lua only -------------------------

local base_ns = vim.api.nvim_create_namespace("sidekick_bench_baseline")

--- Find the ```tool block around 1-based `lnum`, decode its JSON, start its
--- command with `kind` and show a running diagnostic. Returns the elapsed ms.
function M.baseline_run_tool(kind, lnum)
  local t0 = uv.hrtime()
  local buf = vim.api.nvim_get_current_buf()
  local row = lnum - 1
  local header
  for r = row, math.max(0, row - 200), -1 do
    local line = vim.api.nvim_buf_get_lines(buf, r, r + 1, false)[1]
    if line:match("^```+tool ") then
      header = r
      break
    end
  end
  if not header then
    return vim.NIL
  end
  local body = {}
  local fence = vim.api.nvim_buf_get_lines(buf, header, header + 1, false)[1]:match("^(`+)")
  local last = vim.api.nvim_buf_line_count(buf)
  local r = header + 1
  while r < last do
    local line = vim.api.nvim_buf_get_lines(buf, r, r + 1, false)[1]
    if line:sub(1, #fence) == fence and line:match("^`+%s*$") then
      break
    end
    body[#body + 1] = line
    r = r + 1
  end
  local params = vim.json.decode(table.concat(body, "\n"))
  local sink = {}
  M.starters[kind]({ "/bin/sh", "-c", params.command }, sink)
  vim.diagnostic.set(base_ns, buf, {
    { lnum = header, col = 0, severity = vim.diagnostic.severity.HINT, message = "⟳ running" },
  })
  return (uv.hrtime() - t0) / 1e6
end

-- Where the editor's time goes: every batch of host events and every
-- synchronous request to the host, with its start (hrtime, ns) and duration.

function M.instrument()
  if M._instrumented then
    M.spans = {}
    return true
  end
  M._instrumented = true
  M.spans = {}
  local client = require("sidekick_tools.client")
  local receive = client.receive
  client.receive = function(events)
    local t0 = uv.hrtime()
    receive(events)
    local kinds = {}
    for _, ev in ipairs(events) do
      kinds[ev.type] = (kinds[ev.type] or 0) + 1
    end
    local desc = {}
    for k, c in pairs(kinds) do
      desc[#desc + 1] = k .. "=" .. c
    end
    table.insert(M.spans, { t0, uv.hrtime() - t0, "events " .. table.concat(desc, ",") })
  end
  local bridge = require("sidekick_tools.bridge")
  local apply = bridge.apply
  bridge.apply = function(...)
    local t0 = uv.hrtime()
    local ok = apply(...)
    table.insert(M.spans, { t0, uv.hrtime() - t0, "apply" })
    return ok
  end
  local rpcrequest = vim.rpcrequest
  vim.rpcrequest = function(chan, method, ...)
    local t0 = uv.hrtime()
    local res = { rpcrequest(chan, method, ...) }
    table.insert(M.spans, { t0, uv.hrtime() - t0, "rpcrequest " .. tostring(method) })
    return unpack(res)
  end
  return true
end

return M
