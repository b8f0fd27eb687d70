-- Task life cycle for the user: `User` autocommands (SidekickTaskStarted,
-- SidekickTaskFinished, with the task table as `data`) and a notification when
-- a task ends (option `notify`). Loaded when the host starts; listens to the
-- bridge's task events and nothing else.
local bridge = require("sidekick_tools.bridge")
local util = require("sidekick_tools.render.util")

local M = {}

--- Is the chat a task came from shown in a window of the current tab page?
---@param chat string|nil buffer name
function M.chat_visible(chat)
  if not chat or chat == "" then
    return false
  end
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    if vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(win)) == chat then
      return true
    end
  end
  return false
end

--- Whether the end of `task` is worth a notification under option `notify`.
function M.should_notify(task)
  local mode = require("sidekick_tools.config").current.notify
  if mode == "never" then
    return false
  elseif mode == "always" then
    return true
  end
  return not M.chat_visible(task.chat)
end

--- "sidekick_tools: task abc123 completed, exit 0, 2.3s: pytest -q".
function M.message(task)
  local line = util.end_line(task):gsub("^%[task ", "task "):gsub("%]$", "")
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
  local task = util.clean(vim.deepcopy(ev.task))
  if not task then
    return
  end
  if ev.kind == "started" then
    fire("SidekickTaskStarted", task)
  elseif ev.finished then
    fire("SidekickTaskFinished", task)
    if M.should_notify(task) then
      vim.notify(M.message(task), LEVEL[task.status] or vim.log.levels.INFO)
    end
  end
end

bridge.on("task", on_task)

return M
