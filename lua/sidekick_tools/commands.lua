-- User commands and chat-buffer keymaps. Loaded on first use by plugin/.
local M = {}

local function api()
  return require("sidekick_tools")
end

M.commands = {
  SidekickRunTool = {
    fn = function()
      api().run_tool()
    end,
    opts = { desc = "Run the tool call under the cursor, then chain auto-acceptable calls" },
  },
  SidekickRunTools = {
    fn = function()
      api().run_tools()
    end,
    opts = { desc = "Run every pending tool call of the last assistant message" },
  },
  SidekickHalt = {
    fn = function(a)
      local token = a.fargs[1]
      local res = api().halt(token)
      if res and res.message then
        vim.notify(res.message, vim.log.levels.INFO)
      end
    end,
    opts = { nargs = "?", desc = "Cancel the task under the cursor, or TOKEN" },
  },
  SidekickTasks = {
    fn = function(a)
      require("sidekick_tools.render.tasks").open({ status = a.fargs[1] })
    end,
    opts = {
      nargs = "?",
      complete = function()
        return { "running", "completed", "failed", "all" }
      end,
      desc = "List tasks",
    },
  },
  SidekickOutput = {
    fn = function(a)
      require("sidekick_tools.render.output").open_from_args(a.fargs, a.args)
    end,
    opts = { nargs = "*", desc = "Live view of a task's output: [TOKEN] [/regex/]" },
  },
  SidekickInstall = {
    fn = function()
      require("sidekick_tools.install").run()
    end,
    opts = { desc = "Create the plugin's own Python venv with pynvim" },
  },
}

--- Called by plugin/sidekick_tools.lua for every command.
function M.dispatch(name, a)
  local ok, e = pcall(M.commands[name].fn, a)
  if not ok then
    vim.notify(tostring(e), vim.log.levels.ERROR)
  end
end

local keymap_actions = {
  run_tool = { "<Cmd>SidekickRunTool<CR>", "Run tool call under cursor" },
  run_tools = { "<Cmd>SidekickRunTools<CR>", "Run all pending tool calls" },
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

--- A chat buffer was opened: keymaps, and if the host runs (or the text holds
--- running tasks to follow), let it scan the buffer. Nothing is ever run here.
function M.chat_opened(buf)
  M.apply_keymaps(buf)
  local host = require("sidekick_tools.host")
  local has_running = false
  for _, line in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if line:find("^`+result .*status=running") then
      has_running = true
      break
    end
  end
  if host.running() then
    host.notify("chat_opened", buf)
  elseif has_running then
    vim.schedule(function()
      if vim.api.nvim_buf_is_valid(buf) then
        local ok, e = pcall(host.request, "chat_opened", buf)
        if not ok then
          vim.notify(tostring(e), vim.log.levels.ERROR)
        end
      end
    end)
  end
end

return M
