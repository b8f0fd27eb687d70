-- Every user command, declared once: its name, arguments, description, what it
-- runs, and the chat-buffer key that runs it (`key`, an option of config.lua's
-- `keymaps`). plugin/sidekick_tools.lua creates them from this table at
-- start-up, so nothing here is required until a command runs.
local M = {}

local function api()
  return require("sidekick_tools")
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

---@class sidekick_tools.Command
---@field name string
---@field desc string
---@field nargs integer|string
---@field bang boolean|nil
---@field complete function|nil
---@field key string|nil the keymaps option of its chat-buffer key
---@field run fun(args: table)

---@type sidekick_tools.Command[]
M.list = {
  {
    name = "SidekickRunTool",
    nargs = 0,
    key = "run_tool",
    desc = "Run the tool call under the cursor, then chain auto-acceptable calls",
    run = function()
      api().run_tool()
    end,
  },
  {
    name = "SidekickRunTools",
    nargs = 0,
    bang = true,
    key = "run_tools",
    desc = "Run every pending tool call of the last assistant message (!: without asking)",
    run = function(a)
      api().run_tools(nil, { confirm = not a.bang })
    end,
  },
  {
    name = "SidekickDeny",
    nargs = "*",
    key = "deny",
    desc = "Deny the pending tool call under the cursor: [reason] is what the model reads",
    run = function(a)
      local reason = vim.trim(a.args or "")
      api().deny(nil, nil, reason ~= "" and reason or nil)
    end,
  },
  {
    name = "SidekickHalt",
    nargs = "?",
    key = "halt",
    desc = "Cancel the task under the cursor, or TOKEN",
    run = function(a)
      local res = api().halt(a.fargs[1] or token_in_view())
      if res and res.message then
        vim.notify(res.message, vim.log.levels.INFO)
      end
    end,
  },
  {
    name = "SidekickTasks",
    nargs = "?",
    bang = true,
    key = "tasks",
    desc = "List this Neovim's tasks (!: every Neovim's and MCP client's): [running|completed|failed|all]",
    complete = function()
      local statuses = vim.deepcopy(require("sidekick_tools.constants").task_statuses)
      return vim.list_extend(statuses, { "all" })
    end,
    run = function(a)
      require("sidekick_tools.consumers.tasks_window").open({ status = a.fargs[1], all = a.bang })
    end,
  },
  {
    name = "SidekickOutput",
    nargs = "*",
    key = "output",
    desc = "Live view of a task's output: [TOKEN] [/regex/]",
    run = function(a)
      require("sidekick_tools.consumers.output_view").open_from_args(a.args)
    end,
  },
  {
    name = "SidekickInstall",
    nargs = 0,
    desc = "Create the plugin's own Python venv with pynvim (and mcp on Python 3.10+)",
    run = function()
      require("sidekick_tools.install").run()
    end,
  },
  {
    name = "SidekickMcp",
    nargs = 0,
    desc = "Print the command that registers the MCP server",
    run = function()
      require("sidekick_tools.mcp").print()
    end,
  },
}

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
