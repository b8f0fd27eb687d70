-- Public Lua API of sidekick-tools.nvim. See :h sidekick_tools-api.
local config = require("sidekick_tools.config")
local host = require("sidekick_tools.host")

local M = {}

local function bufnr_of(bufnr)
  if bufnr == nil or bufnr == 0 then
    return vim.api.nvim_get_current_buf()
  end
  return bufnr
end

local function err(msg)
  vim.notify(msg, vim.log.levels.ERROR)
  return nil, msg
end

--- A run request's reply carries the events of the calls it started (their
--- running state): show them at once, drawn without the burst throttle.
local function with_events(bufnr, res)
  local bridge = require("sidekick_tools.bridge")
  bridge.prompt(bufnr)
  if type(res) == "table" and res.events then
    local events = res.events
    res.events = nil
    bridge.on_events(events)
  end
  return res
end

--- Configure the plugin. Safe to call again; a running host gets the new settings.
---@param opts table|nil see :h sidekick_tools-config
function M.setup(opts)
  config.setup(opts)
  -- the MCP server reads the settings it shares with the editor from this file
  local _, write_err = config.write_mcp_settings()
  if write_err then
    vim.notify("sidekick_tools: cannot write mcp.json: " .. write_err, vim.log.levels.WARN)
  end
  if host.running() then
    pcall(
      host.request,
      "init",
      config.for_host(),
      { nvim_pid = vim.fn.getpid(), version = vim.version() }
    )
  end
  require("sidekick_tools.commands").apply_keymaps_to_open_chats()
  return M
end

--- Run the tool call at (bufnr, lnum), then chain the auto-acceptable calls after it.
---@param bufnr integer|nil buffer, default current
---@param lnum integer|nil 1-based line, default cursor line
---@return table|nil info { id, tool } of the call started, nil and a message on error
function M.run_tool(bufnr, lnum)
  vim.validate({ bufnr = { bufnr, "number", true }, lnum = { lnum, "number", true } })
  bufnr = bufnr_of(bufnr)
  if lnum == nil then
    if vim.api.nvim_get_current_buf() == bufnr then
      lnum = vim.api.nvim_win_get_cursor(0)[1]
    else
      return err("sidekick_tools: run_tool needs a line number for a buffer that is not current")
    end
  end
  local ok, res = pcall(host.request, "run_tool", bufnr, lnum - 1, vim.fn.getcwd())
  if not ok then
    return err(res)
  end
  return with_events(bufnr, res)
end

--- Run every pending call of the last assistant message, in order.
---@param bufnr integer|nil
---@return table|nil info { count }
function M.run_tools(bufnr)
  vim.validate({ bufnr = { bufnr, "number", true } })
  bufnr = bufnr_of(bufnr)
  local ok, res = pcall(host.request, "run_tools", bufnr, vim.fn.getcwd())
  if not ok then
    return err(res)
  end
  return with_events(bufnr, res)
end

--- Cancel a task. Without a token: the task of the call under the cursor.
---@param token string|nil
function M.halt(token)
  vim.validate({ token = { token, "string", true } })
  local bufnr = vim.api.nvim_get_current_buf()
  local row = vim.api.nvim_win_get_cursor(0)[1] - 1
  local ok, res = pcall(host.request, "halt", token or vim.NIL, bufnr, row)
  if not ok then
    return err(res)
  end
  require("sidekick_tools.bridge").prompt(bufnr)
  return res
end

--- Tasks from the store, newest first.
---@param opts table|nil { status = "running"|"completed"|"failed"|"cancelled"|"queued"|"all", all = boolean, owner = "any", limit, offset }
function M.list_tasks(opts)
  vim.validate({ opts = { opts, "table", true } })
  local ok, res = pcall(host.request, "list_tasks", opts or vim.empty_dict())
  if not ok then
    return err(res)
  end
  return res
end

---@param token string
function M.get_task(token)
  vim.validate({ token = { token, "string" } })
  local ok, res = pcall(host.request, "get_task", token)
  if not ok then
    return err(res)
  end
  if res == vim.NIL then
    return nil
  end
  return res
end

--- Short status for statuslines: "" when idle.
function M.statusline()
  return require("sidekick_tools.render.statusline").text()
end

return M
