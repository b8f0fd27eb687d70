-- The transport to the Python host: starts it on first use, sends requests and
-- notifications, reports its death once, restarts it on the next request. The
-- host recovers tasks from the store on its own. What the plugin asks of the
-- host and keeps from its answers is the client's (client.lua).
local config = require("sidekick_tools.config")

local M = {}

local state = {
  chan = nil, ---@type integer|nil
  stderr = {}, ---@type string[] last lines the host wrote to stderr (log lines left out)
  partial = "", -- stderr bytes after the last newline
  python = nil, ---@type string|nil interpreter of the current host
  exiting = false,
  generation = 0,
  failure = nil, ---@type string|nil how the last host ended, when it died on its own
  reported = {}, ---@type table<integer, boolean> generations whose death was told
}

local STDERR_KEEP = 60

--- Folder that holds lua/, plugin/ and rplugin/ of this plugin.
M.root = config.root

local function venv_python()
  local dir = vim.fn.stdpath("data") .. "/sidekick_tools/venv"
  local exe = dir .. "/bin/python"
  if vim.fn.has("win32") == 1 then
    exe = dir .. "/Scripts/python.exe"
  end
  return exe
end
M.venv_python = venv_python

--- The executable `name` in a directory of PATH, as an absolute path, or nil.
--- Only absolute entries count: an empty, "." or relative entry names the
--- working directory (execvp and exepath() take an empty one so), and would
--- run a `python3` that the project holds. An absolute entry is the user's own
--- choice, wherever it lies.
---@param name string
---@return string|nil
function M.search_path(name)
  for entry in (vim.env.PATH or ""):gmatch("[^:]+") do
    if entry:sub(1, 1) == "/" then
      local exe = vim.fs.joinpath(entry, name)
      if vim.fn.executable(exe) == 1 then
        return exe
      end
    end
  end
  return nil
end

--- `prog` as a path to run: a path as given (~ expanded), a bare name looked up
--- by M.search_path; nil when it is not an executable.
local function program(prog)
  if type(prog) ~= "string" or prog == "" then
    return nil
  end
  prog = vim.fn.expand(prog)
  if not prog:find("/", 1, true) then
    return M.search_path(prog)
  end
  return vim.fn.executable(prog) == 1 and prog or nil
end

--- The interpreter to run the host with, and where the choice came from.
---@return string|nil python, string source
function M.find_python()
  local configured = config.current.python
  if configured and configured ~= "" then
    -- an explicit choice: a bare name found nowhere is left to fail as it is
    return program(configured) or vim.fn.expand(configured), "setup({ python = ... })"
  end
  local own = venv_python()
  if vim.fn.executable(own) == 1 then
    return own, ":SidekickInstall venv"
  end
  local prog = program(vim.g.python3_host_prog)
  if prog then
    return prog, "g:python3_host_prog"
  end
  for _, name in ipairs({ "python3", "python" }) do
    local found = M.search_path(name)
    if found then
      return found, "PATH"
    end
  end
  return nil, "none found"
end

-- Python log records at INFO or DEBUG ("INFO:name:msg", or a timestamped
-- "2025-01-02 10:11:12,345 INFO name: msg"): never what explains a crash.
local function log_noise(line)
  return line:match("^INFO:") ~= nil
    or line:match("^DEBUG:") ~= nil
    or line:match("^%d+%-%d+%-%d+[ T][%d:,.]+%s+INFO%s") ~= nil
    or line:match("^%d+%-%d+%-%d+[ T][%d:,.]+%s+DEBUG%s") ~= nil
end

local function keep_stderr(line)
  if line == "" or log_noise(line) then
    return
  end
  table.insert(state.stderr, line)
  while #state.stderr > STDERR_KEEP do
    table.remove(state.stderr, 1)
  end
end

local TRACEBACK_KEEP = 8

--- The stderr lines that explain how the host ended: the end of its last
--- traceback (the innermost frames and the exception), else its last lines.
local function stderr_tail()
  local lines = state.stderr
  local from = nil
  for i = #lines, 1, -1 do
    if lines[i]:match("^Traceback %(most recent call last%)") then
      from = i
      break
    end
  end
  if from then
    local first = math.max(from + 1, #lines - TRACEBACK_KEEP + 1)
    local out = { lines[from] .. (first > from + 1 and " …" or "") }
    vim.list_extend(out, lines, first, #lines)
    return table.concat(out, "\n")
  end
  return table.concat(lines, "\n", math.max(1, #lines - 9))
end

--- What to tell the user about a host that ended with `code`, in one message.
local function exit_message(code)
  local tail = stderr_tail()
  if
    tail:find("No module named 'pynvim'", 1, true) or tail:find("No module named pynvim", 1, true)
  then
    return string.format(
      "sidekick_tools: %s cannot import pynvim. Run :SidekickInstall, or set "
        .. "setup({ python = ... }) to an interpreter that has it.",
      state.python or "the Python interpreter"
    )
  end
  return string.format(
    "sidekick_tools: the Python host exited (code %d); the next command starts a new one.%s",
    code,
    tail ~= "" and ("\n" .. tail) or ""
  )
end

--- Tell the user once how host `generation` ended.
local function report(generation, msg)
  if state.reported[generation] then
    return
  end
  state.reported[generation] = true
  vim.notify(msg, vim.log.levels.ERROR)
end

local function on_exit(generation, code)
  if generation ~= state.generation then
    return
  end
  state.chan = nil
  if state.exiting then
    return
  end
  keep_stderr(state.partial)
  state.partial = ""
  local msg = exit_message(code)
  state.failure = msg
  vim.schedule(function()
    report(generation, msg)
    require("sidekick_tools.client").host_lost()
  end)
end

-- The host imports only the plugin and the interpreter's own packages: `-E`
-- ignores PYTHON* variables (PYTHONPATH, PYTHONSTARTUP...), and the bootstrap
-- drops the working directory (and any relative entry) from sys.path before
-- anything is imported, so a logging.py, secrets.py or sqlite3/ in the project
-- folder is never run.
local BOOT = table.concat({
  "import sys",
  "sys.path[:] = [p for p in sys.path if p.startswith('/')]",
  "sys.path.insert(0, sys.argv.pop(1))",
  "import runpy",
  "runpy.run_module('sidekick_tools', run_name='__main__', alter_sys=True)",
}, "; ")

--- The argv that starts the host (and, with `module`, another of the plugin's
--- entry points such as the MCP face) with `python`.
---@param python string
---@param module string|nil default "sidekick_tools"
function M.command(python, module)
  local boot = BOOT
  if module then
    boot = boot:gsub("'sidekick_tools'", "'" .. module .. "'")
  end
  return { python, "-E", "-c", boot, M.root() .. "/rplugin/python3" }
end

--- Channel of the running host, starting it when needed.
---@return integer|nil chan, string|nil err
function M.ensure()
  if state.chan then
    return state.chan
  end
  local python, source = M.find_python()
  if not python then
    return nil,
      "sidekick_tools: no Python interpreter found; set setup({ python = ... }) or run :SidekickInstall"
  end
  state.stderr, state.partial = {}, ""
  state.python, state.failure = python, nil
  state.generation = state.generation + 1
  local generation = state.generation
  local ok, job = pcall(vim.fn.jobstart, M.command(python), {
    rpc = true,
    on_stderr = function(_, data)
      if generation ~= state.generation or not data or #data == 0 then
        return
      end
      data[1] = state.partial .. data[1]
      state.partial = table.remove(data) -- the last item is an unfinished line
      for _, line in ipairs(data) do
        keep_stderr(line)
      end
    end,
    on_exit = function(_, code)
      on_exit(generation, code)
    end,
  })
  if not ok or job <= 0 then
    state.failure = string.format(
      "sidekick_tools: could not start %s (from %s): %s",
      python,
      source,
      tostring(job)
    )
    return nil, state.failure
  end
  state.chan = job
  -- init goes as a notification: the editor does not wait for Python to start.
  -- Requests sent after it are answered once init is done (the host orders them).
  local info = { nvim_pid = vim.fn.getpid(), version = vim.version() }
  vim.rpcnotify(job, "init", config.for_host(), info)
  require("sidekick_tools.client").host_started()
  return job
end

function M.running()
  return state.chan ~= nil
end

function M.channel()
  return state.chan
end

--- Synchronous request to the host, starting it if needed. Errors are raised
--- as Lua errors with a message meant for the user.
function M.request(method, ...)
  local chan, err = M.ensure()
  if not chan then
    error(err, 0)
  end
  local generation = state.generation
  local ok, res = pcall(vim.rpcrequest, chan, method, ...)
  if not ok then
    local died = M.death_of(chan, generation, res)
    if died then
      error(died, 0)
    end
    error(M.clean_error(res), 0)
  end
  return res
end

--- When a request failed because the host is gone (a missing pynvim, a crash):
--- how it ended, told by this error instead of a second notification.
---@return string|nil
function M.death_of(chan, generation, err)
  -- the channel closes before the process is reaped: wait for its exit then
  local closed = tostring(err):find("Invalid channel", 1, true) or tostring(err):find("closed")
  if vim.fn.jobwait({ chan }, closed and 2000 or 0)[1] == -1 then
    return nil -- alive: an ordinary error answer
  end
  -- jobwait ran its on_exit, which says how it ended
  if generation ~= state.generation or state.chan ~= nil then
    return nil
  end
  state.reported[generation] = true
  return state.failure
    or "sidekick_tools: the Python host exited; the next command starts a new one."
end

--- How the last host ended when it died on its own or could not start (for
--- :checkhealth); nil while one runs or none has failed.
function M.failure()
  if state.chan then
    return nil
  end
  return state.failure
end

--- Fire-and-forget notification; does nothing when the host is not running.
function M.notify(method, ...)
  if state.chan then
    vim.rpcnotify(state.chan, method, ...)
  end
end

--- Strip pynvim's traceback wrapping from an error raised by the host.
function M.clean_error(err)
  local msg = tostring(err)
  if type(err) == "table" then
    msg = tostring(err[2] or vim.inspect(err))
  end
  msg = msg:gsub("^.-Vim:Error invoking '[^']*' on channel %d+[^:]*:\n?", "")
  return msg
end

-- The host died before Neovim exits: its tasks are halted all the same
-- (`tasks.kill_on_exit`; an MCP client's task it took over, `mcp.kill_on_exit`)
-- by the reap entry point, which finds this Neovim's tasks in the store by its
-- pid. Returns what it reported, or nil.
local REAP_WAIT_MS = 3000

local function reap_dead_host()
  local tasks = config.current.tasks
  local mcp_kill = config.current.mcp.kill_on_exit
  if state.generation == 0 or not state.python or not (tasks.kill_on_exit or mcp_kill) then
    return nil
  end
  if tasks.store == "memory" then
    return nil -- nothing of a dead host's memory store is left to read
  end
  local argv = M.command(state.python, "sidekick_tools.reap")
  vim.list_extend(argv, {
    "--neovim-pid",
    tostring(vim.fn.getpid()),
    "--state-dir",
    config.state_dir(),
    "--grace",
    tostring(math.min(tasks.halt_grace, 1)),
  })
  if not tasks.kill_on_exit then
    table.insert(argv, "--keep-editor-tasks")
  end
  if not mcp_kill then
    table.insert(argv, "--keep-mcp-tasks")
  end
  local ok, proc = pcall(vim.system, argv, { text = true })
  if not ok then
    return nil
  end
  local res = proc:wait(REAP_WAIT_MS)
  local decoded = res.code == 0 and pcall(vim.json.decode, res.stdout or "")
  return decoded and vim.json.decode(res.stdout) or nil
end

--- Called on VimLeavePre (after the client said what happens to the tasks):
--- let the host halt this instance's tasks if configured; a host that died
--- first leaves that to the reap entry point.
---@return table|nil report the reap's report, when it ran
function M.shutdown()
  state.exiting = true
  if state.chan then
    pcall(vim.rpcrequest, state.chan, "shutdown")
    return nil
  end
  return reap_dead_host()
end

--- Stop the host to start another (:SidekickInstall): its tasks go on, and the
--- next host takes them over.
function M.stop()
  if state.chan then
    local chan = state.chan
    state.chan = nil
    state.generation = state.generation + 1 -- its on_exit is expected, not reported
    pcall(vim.rpcnotify, chan, "detach") -- before its stdin closes: it is read first
    pcall(vim.fn.jobstop, chan)
    local client = package.loaded["sidekick_tools.client"]
    if client then
      client.masking_lost() -- what it was asked to mask it will not answer
    end
  end
end

function M.stderr_tail()
  return stderr_tail()
end

return M
