-- Every user command, declared once: its row in M.list (name, arguments,
-- description, and `key`: the keymaps option of the chat-buffer key that runs
-- it), and what it runs (`run`, under its name; each row gets it below).
-- plugin/sidekick_tools.lua creates the commands from M.list at start-up;
-- nothing else is required until a command runs.
local M = {}

local function api()
  return require("sidekick_tools")
end

--- A command's `run` that calls function `fn` of `module` with no arguments.
local function calls(module, fn)
  return function()
    require(module)[fn]()
  end
end

--- The task of the line under the cursor in the tasks window, or of the output view shown.
local function token_in_view()
  local token
  if package.loaded["sidekick_tools.consumers.tasks_window"] then
    token = require("sidekick_tools.consumers.tasks_window").token_at_cursor()
  end
  if not token and package.loaded["sidekick_tools.consumers.output_view"] then
    local view = require("sidekick_tools.consumers.output_view").view()
    token = view and view.token
  end
  return token
end

-- What each command does, given its arguments (:h nvim_create_user_command()).
local run = {}

run.SidekickRunTool = calls("sidekick_tools", "run_tool")

function run.SidekickRunTools(a)
  api().run_tools(nil, { confirm = not a.bang })
end

function run.SidekickDeny(a)
  local reason = vim.trim(a.args or "")
  api().deny(nil, nil, reason ~= "" and reason or nil)
end

function run.SidekickHalt(a)
  local token = require("sidekick_tools.client").token(a.fargs[1])
  local res = api().halt(token or token_in_view())
  if res and res.message then
    vim.notify(res.message, vim.log.levels.INFO)
  end
end

function run.SidekickTasks(a)
  require("sidekick_tools.consumers.tasks_window").open({ status = a.fargs[1], all = a.bang })
end

function run.SidekickOutput(a)
  require("sidekick_tools.consumers.output_view").open_from_args(a.args)
end

run.SidekickSend = calls("sidekick_tools", "send")
run.SidekickStop = calls("sidekick_tools", "stop")

function run.SidekickChat(a)
  require("sidekick_tools.new_chat").open(a.args)
end

function run.SidekickModel(a)
  local models = require("sidekick_tools.models")
  local buf = vim.api.nvim_get_current_buf()
  if vim.trim(a.args or "") == "" then
    models.show(buf)
  else
    models.set(buf, a.args)
  end
end

run.SidekickInstall = calls("sidekick_tools.install", "run")
run.SidekickMcp = calls("sidekick_tools.mcp", "print")

local function model_specs(arglead)
  return require("sidekick_tools.models").complete(arglead)
end

--- Completion of task tokens: this Neovim's tasks, newest first (`active`: the
--- running and queued ones only). Nothing while no host runs: completing never
--- starts one.
local function tokens(active)
  return function(arglead, cmdline)
    if not require("sidekick_tools.host").running() or #vim.split(cmdline, "%s+") > 2 then
      return {}
    end
    local found = {}
    -- every running and queued task (a long one may be older than the newest
    -- hundred), or the newest hundred of any status
    local queries = active and { { status = "running" }, { status = "queued" } }
      or { { limit = 100 } }
    for _, opts in ipairs(queries) do
      local ok, tasks = pcall(api().list_tasks, opts)
      vim.list_extend(found, ok and type(tasks) == "table" and tasks or {})
    end
    local out = {}
    for _, t in ipairs(found) do
      if vim.startswith(t.id, arglead:lower()) then
        table.insert(out, t.id)
      end
    end
    return out
  end
end

-- the statuses :SidekickTasks takes, those starting with what is typed
local function statuses(arglead)
  local all =
    vim.list_extend(vim.deepcopy(require("sidekick_tools.constants").task_statuses), { "all" })
  return vim.tbl_filter(function(status)
    return vim.startswith(status, arglead or "")
  end, all)
end

---@class sidekick_tools.Command
---@field name string
---@field desc string
---@field nargs integer|string
---@field bang boolean|nil
---@field complete function|nil
---@field key string|nil the keymaps option of its chat-buffer key
---@field run fun(args: table)

--- Every command, in the order :h sidekick_tools-commands documents them.
---@type sidekick_tools.Command[]
M.list = {
  {
    name = "SidekickRunTool",
    nargs = 0,
    key = "run_tool",
    desc = "Run the tool call under the cursor, then chain auto-acceptable calls",
  },
  {
    name = "SidekickRunTools",
    nargs = 0,
    bang = true,
    key = "run_tools",
    desc = "Run every pending tool call of the last assistant message (!: without asking)",
  },
  {
    name = "SidekickDeny",
    nargs = "*",
    key = "deny",
    desc = "Deny the pending tool call under the cursor: [reason] is what the model reads",
  },
  {
    name = "SidekickHalt",
    nargs = "?",
    key = "halt",
    complete = tokens(true),
    desc = "Cancel the task under the cursor, or TOKEN",
  },
  {
    name = "SidekickTasks",
    nargs = "?",
    bang = true,
    key = "tasks",
    complete = statuses,
    desc = "List this Neovim's tasks (!: every Neovim's and MCP client's): [status|all]",
  },
  {
    name = "SidekickOutput",
    nargs = "*",
    key = "output",
    complete = tokens(false),
    desc = "Live view of a task's output: [TOKEN] [/regex/]",
  },
  {
    name = "SidekickSend",
    nargs = 0,
    key = "send",
    desc = "Send the chat to its model; the reply streams in and its tool calls run",
  },
  {
    name = "SidekickStop",
    nargs = 0,
    key = "stop",
    desc = "Stop the reply streaming into the chat, and the loop (tasks keep running)",
  },
  {
    name = "SidekickChat",
    nargs = "?",
    complete = model_specs,
    desc = "Open a new chat file under chat.dir: [provider/model] (default chat.model)",
  },
  {
    name = "SidekickModel",
    nargs = "?",
    complete = model_specs,
    desc = "Show the chat's model, or set it in its front matter: [provider/model]",
  },
  {
    name = "SidekickInstall",
    nargs = 0,
    desc = "Create the plugin's Python venv: pynvim (and httpx2, mcp on Python 3.10+)",
  },
  { name = "SidekickMcp", nargs = 0, desc = "Print the command that registers the MCP server" },
}

for _, cmd in ipairs(M.list) do
  cmd.run = run[cmd.name]
end

--- Run a command; its error is said in one message.
---@param cmd sidekick_tools.Command
function M.dispatch(cmd, a)
  local ok, e = pcall(cmd.run, a)
  if not ok then
    vim.notify(tostring(e), vim.log.levels.ERROR)
  end
end

--- Create every command (plugin/sidekick_tools.lua).
function M.create()
  for _, cmd in ipairs(M.list) do
    vim.api.nvim_create_user_command(cmd.name, function(a)
      M.dispatch(cmd, a)
    end, { nargs = cmd.nargs, bang = cmd.bang, complete = cmd.complete, desc = cmd.desc })
  end
end

return M
