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

--- Line (1-based) to act on: `lnum`, else the cursor's when `bufnr` is current.
local function line_of(bufnr, lnum, what)
  if lnum ~= nil then
    return lnum
  end
  if vim.api.nvim_get_current_buf() == bufnr then
    return vim.api.nvim_win_get_cursor(0)[1]
  end
  return nil, "sidekick_tools: " .. what .. " needs a line number for a buffer that is not current"
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
  if package.loaded["sidekick_tools.render.diagnostics"] then
    require("sidekick_tools.render.diagnostics").configure()
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
  local line, msg = line_of(bufnr, lnum, "run_tool")
  if not line then
    return err(msg)
  end
  local ok, res = pcall(host.request, "run_tool", bufnr, line - 1, vim.fn.getcwd())
  if not ok then
    return err(res)
  end
  return with_events(bufnr, res)
end

local function plural(n, word)
  return string.format("%d %s%s", n, word, n == 1 and "" or "s")
end

--- The one question :SidekickRunTools asks: the calls the policy would not
--- approve (tool, what they do, their problem), and what happens to the rest.
---@param plan table[] the host's `plan` answer
---@return string message
local function consent_message(plan)
  local ask, denied = {}, {}
  for _, p in ipairs(plan) do
    if p.verdict == "ask" then
      table.insert(ask, p)
    elseif p.verdict == "deny" then
      table.insert(denied, p)
    end
  end
  local lines = {
    string.format(
      "Run %s? %s your consent:",
      plural(#plan, "pending tool call"),
      #ask == 1 and "This one needs" or ("These " .. #ask .. " need")
    ),
  }
  local function describe(p)
    local line = string.format("  %s  %s", p.tool ~= "" and p.tool or "tool", p.what or "")
    if type(p.problem) == "string" and p.problem ~= "" then
      line = line .. "  (problem: " .. p.problem .. ")"
    end
    return line
  end
  for _, p in ipairs(ask) do
    table.insert(lines, describe(p))
  end
  local approved = #plan - #ask - #denied
  if approved > 0 then
    table.insert(
      lines,
      approved == 1 and "1 other runs without asking."
        or string.format("%d others run without asking.", approved)
    )
  end
  if #denied > 0 then
    table.insert(lines, "Denied by your policy (not run):")
    for _, p in ipairs(denied) do
      table.insert(lines, describe(p))
    end
  end
  return table.concat(lines, "\n")
end

--- Run every pending call of the last assistant message, in order. Unless
--- `opts.confirm` is false, the calls the policy would not approve are first
--- listed in one confirmation; declining runs nothing.
---@param bufnr integer|nil
---@param opts table|nil { confirm = true }
---@return table|nil info { count, ids }; nil and a message when nothing ran
function M.run_tools(bufnr, opts)
  vim.validate({ bufnr = { bufnr, "number", true }, opts = { opts, "table", true } })
  bufnr = bufnr_of(bufnr)
  opts = opts or {}
  local cwd = vim.fn.getcwd()
  local ids = vim.NIL -- every pending call, unless the question below named them
  if opts.confirm ~= false then
    local ok, plan = pcall(host.request, "plan", bufnr, cwd)
    if not ok then
      return err(plan)
    end
    if #plan == 0 then
      local msg = "sidekick_tools: no pending tool call in the last assistant message"
      vim.notify(msg, vim.log.levels.WARN)
      return nil, msg
    end
    local asks = vim.tbl_filter(function(p)
      return p.verdict == "ask"
    end, plan)
    if #asks > 0 then
      local choice = vim.fn.confirm(consent_message(plan), "&Run\n&Cancel", 2, "Question")
      pcall(vim.cmd.redraw) -- the question's lines go, so what follows needs no Enter
      if choice ~= 1 then
        local msg = "sidekick_tools: nothing was run ("
          .. plural(#plan, "call")
          .. " still pending)"
        vim.notify(msg, vim.log.levels.INFO)
        return nil, msg
      end
    end
    -- exactly the calls the user was shown (plan gave each an id): one added
    -- while the question was open does not run unasked
    ids = vim.tbl_map(function(p)
      return p.id
    end, plan)
  end
  local ok, res = pcall(host.request, "run_tools", bufnr, cwd, ids)
  if not ok then
    return err(res)
  end
  return with_events(bufnr, res)
end

--- Refuse the pending call at (bufnr, lnum): a `status=denied` result whose
--- body is `reason` (what the model reads; empty: "The user denied this call.").
---@param bufnr integer|nil buffer, default current
---@param lnum integer|nil 1-based line, default cursor line
---@param reason string|nil
---@return table|nil info { id, tool } of the call denied, nil and a message on error
function M.deny(bufnr, lnum, reason)
  vim.validate({
    bufnr = { bufnr, "number", true },
    lnum = { lnum, "number", true },
    reason = { reason, "string", true },
  })
  bufnr = bufnr_of(bufnr)
  local line, msg = line_of(bufnr, lnum, "deny")
  if not line then
    return err(msg)
  end
  local ok, res = pcall(host.request, "deny", bufnr, line - 1, reason or "")
  if not ok then
    return err(res)
  end
  require("sidekick_tools.bridge").prompt(bufnr)
  return res
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

--- Run the tool call of task `token` again: its result block is replaced (the
--- chat is loaded if it is not). A task not started from a chat's tool call
--- (an agent's through MCP) cannot be.
---@param token string
---@return table|nil info { id, tool, row } of the call started, nil and a message on error
function M.rerun(token)
  vim.validate({ token = { token, "string" } })
  local util = require("sidekick_tools.render.util")
  local task = M.get_task(token)
  if not task then
    return err("sidekick_tools: no task " .. token .. " (unknown or expired)")
  end
  util.clean(task)
  if (task.chat or "") == "" or (task.call_id or "") == "" then
    return err(
      string.format(
        "sidekick_tools: task %s was not started from a tool call in a chat; it cannot be rerun",
        token
      )
    )
  end
  local buf = util.buffer_named(task.chat)
  if not buf then
    if vim.fn.filereadable(task.chat) == 0 then
      return err("sidekick_tools: chat " .. task.chat .. " no longer exists")
    end
    buf = vim.fn.bufadd(task.chat)
    vim.bo[buf].buflisted = true
    vim.fn.bufload(buf)
  end
  local ok, res = pcall(host.request, "run_call", buf, task.call_id, vim.fn.getcwd())
  if not ok then
    return err(res)
  end
  if not require("sidekick_tools.events").chat_visible(task.chat) then
    vim.notify(
      string.format(
        "sidekick_tools: call %s runs again in %s",
        task.call_id,
        vim.fn.fnamemodify(task.chat, ":~:.")
      ),
      vim.log.levels.INFO
    )
  end
  return with_events(buf, res)
end

--- Send the chat to its model; the reply streams in, its calls run as the
--- auto-accept policy allows, and the results go back (DESIGN §10).
---@param bufnr integer|nil
function M.send(bufnr)
  vim.validate({ bufnr = { bufnr, "number", true } })
  bufnr = bufnr_of(bufnr)
  local ok, res = pcall(host.request, "send", bufnr, vim.fn.getcwd())
  if not ok then
    return err(res)
  end
  return res
end

--- Stop the reply streaming into the chat, and the loop.
---@param bufnr integer|nil
function M.stop(bufnr)
  vim.validate({ bufnr = { bufnr, "number", true } })
  bufnr = bufnr_of(bufnr)
  local ok, res = pcall(host.request, "stop", bufnr)
  if not ok then
    return err(res)
  end
  if res and res.message then
    vim.notify(res.message, vim.log.levels.INFO)
  end
  return res
end

--- Tasks from the store, newest first: this Neovim's (the ones it started and
--- the ones started from the chats loaded in it), or with `owner = "any"` every
--- Neovim's and agent's.
---@param opts table|nil { status = "running"|"completed"|"failed"|"cancelled"|"queued"|"all", owner = "any"|nil, chats, limit, offset }
function M.list_tasks(opts)
  vim.validate({ opts = { opts, "table", true } })
  opts = vim.deepcopy(opts or {})
  if opts.owner ~= "any" and not opts.all and opts.chats == nil then
    opts.chats = require("sidekick_tools.render.util").chat_names()
  end
  local ok, res = pcall(host.request, "list_tasks", next(opts) and opts or vim.empty_dict())
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
