-- User commands and chat-buffer keymaps. Loaded on first use by plugin/.
local M = {}

local function api()
  return require("sidekick_tools")
end

-- What each command does; plugin/sidekick_tools.lua declares them (nargs, desc).
M.commands = {
  SidekickRunTool = function()
    api().run_tool()
  end,
  SidekickRunTools = function(a)
    api().run_tools(nil, { confirm = not a.bang })
  end,
  SidekickDeny = function(a)
    local reason = vim.trim(a.args or "")
    api().deny(nil, nil, reason ~= "" and reason or nil)
  end,
  SidekickHalt = function(a)
    local token = a.fargs[1]
    if not token and package.loaded["sidekick_tools.render.tasks"] then
      token = require("sidekick_tools.render.tasks").token_at_cursor()
    end
    if not token and package.loaded["sidekick_tools.render.output"] then
      local view = require("sidekick_tools.render.output").view()
      token = view and view.token
    end
    local res = api().halt(token)
    if res and res.message then
      vim.notify(res.message, vim.log.levels.INFO)
    end
  end,
  SidekickTasks = function(a)
    require("sidekick_tools.render.tasks").open({ status = a.fargs[1], all = a.bang })
  end,
  SidekickOutput = function(a)
    require("sidekick_tools.render.output").open_from_args(a.fargs, a.args)
  end,
  SidekickInstall = function()
    require("sidekick_tools.install").run()
  end,
  SidekickMcp = function()
    require("sidekick_tools.mcp").print()
  end,
}

--- Called by plugin/sidekick_tools.lua for every command.
function M.dispatch(name, a)
  local ok, e = pcall(M.commands[name], a)
  if not ok then
    vim.notify(tostring(e), vim.log.levels.ERROR)
  end
end

local keymap_actions = {
  run_tool = { "<Cmd>SidekickRunTool<CR>", "Run tool call under cursor" },
  run_tools = { "<Cmd>SidekickRunTools<CR>", "Run all pending tool calls" },
  deny = { "<Cmd>SidekickDeny<CR>", "Deny the pending call under cursor" },
  halt = { "<Cmd>SidekickHalt<CR>", "Halt task under cursor" },
  tasks = { "<Cmd>SidekickTasks<CR>", "List tasks" },
  output = { "<Cmd>SidekickOutput<CR>", "Output of task under cursor" },
}

--- Buffer-local keymaps for a chat buffer, from config.keymaps (false disables one).
function M.apply_keymaps(buf)
  local maps = require("sidekick_tools.config").current.keymaps or {}
  for name, action in pairs(keymap_actions) do
    local lhs = maps[name]
    if type(lhs) == "string" and lhs ~= "" then
      vim.keymap.set(
        "n",
        lhs,
        action[1],
        { buffer = buf, desc = "sidekick: " .. action[2], silent = true }
      )
    end
  end
end

function M.apply_keymaps_to_open_chats()
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if
      vim.api.nvim_buf_is_loaded(buf) and vim.api.nvim_buf_get_name(buf):match("%.sidekick%.md$")
    then
      M.apply_keymaps(buf)
    end
  end
end

-- A result block a background task still holds: "```result id=X status=running
-- ... task=T", in the order the plugin writes. Searched in C with one anchored
-- pattern (a "\&" branch would make Vim try every column of every line).
local RUNNING_BLOCK = [[\m\C^`\{3,}result\s.*\<status=running\>.*\stask=\x]]

--- Does the chat's text name a running task?
function M.names_running_task(buf)
  return vim.api.nvim_buf_call(buf, function()
    return vim.fn.search(RUNNING_BLOCK, "ncw") > 0
  end)
end

--- A chat buffer was opened: keymaps, and let a running host show each call's
--- state and follow running blocks. The host is started for that only when
--- the chat names a running task; any other chat waits for the first command.
--- Nothing is ever run here.
function M.chat_opened(buf)
  M.apply_keymaps(buf)
  if package.loaded["sidekick_tools.render.tasks"] then
    require("sidekick_tools.render.tasks").chats_changed()
  end
  local host = require("sidekick_tools.host")
  if host.running() then
    host.notify("chat_opened", buf)
    return
  end
  if not M.names_running_task(buf) then
    return
  end
  vim.schedule(function()
    if not vim.api.nvim_buf_is_valid(buf) or host.running() then
      return
    end
    local chan, err = host.ensure() -- host_started() then scans every loaded chat
    if not chan then
      vim.notify(err, vim.log.levels.ERROR)
    end
  end)
end

return M
