-- A task's life cycle for the user: `User` autocommands (SidekickTaskStarted,
-- SidekickTaskFinished, with the task table as `data`), a notification when a
-- task ends (option `notify`), and the host's own messages.
local chats = require("sidekick_tools.chats")
local format = require("sidekick_tools.format")

local M = {}

--- Whether the end of `task` is worth a notification under option `notify`.
function M.should_notify(task)
  local mode = require("sidekick_tools.config").current.notify
  if mode == "never" then
    return false
  elseif mode == "always" then
    return true
  end
  return not chats.visible(task.chat)
end

--- "sidekick_tools: task abc123 completed, exit 0, 2.3s: pytest -q".
function M.message(task)
  local line = format.end_line(task):gsub("^%[task ", "task "):gsub("%]$", "")
  local label = task.label ~= "" and task.label or task.tool
  if label and label ~= "" then
    line = line .. ": " .. label:gsub("\n", " ")
  end
  return "sidekick_tools: " .. line
end

local LEVEL = {
  completed = vim.log.levels.INFO,
  failed = vim.log.levels.ERROR,
  cancelled = vim.log.levels.WARN,
}

local function fire(pattern, task)
  vim.api.nvim_exec_autocmds("User", { pattern = pattern, modeline = false, data = task })
end

local function on_task(ev)
  local task = ev.task
  if not task then
    return
  end
  if ev.kind == "started" then
    fire("SidekickTaskStarted", task)
  elseif ev.finished then
    fire("SidekickTaskFinished", task)
    local notify = M.should_notify(task)
    -- looked at once the request under way is answered: a halt's answer may
    -- come after the end it caused, and a task the user halted is told by it
    vim.schedule(function()
      if not require("sidekick_tools.client").halted_here(task.id) and notify then
        vim.notify(M.message(task), LEVEL[task.status] or vim.log.levels.INFO)
      end
    end)
  end
end

local function on_notify(ev)
  vim.notify(ev.msg, ev.level or vim.log.levels.INFO)
end

--- Listen to the client's task events and messages (consumers.register).
function M.register()
  local client = require("sidekick_tools.client")
  client.on("task", on_task)
  client.on("notify", on_notify)
end

return M
