-- Public Lua API of sidekick-tools.nvim (:h sidekick_tools-api): setup and
-- what the commands do, each a request through the client.
local config = require("sidekick_tools.config")

local M = {}

local function client()
  return require("sidekick_tools.client")
end

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

--- Does `bufnr` hold a ```tool block anywhere? (A search in C.)
local function has_call(bufnr)
  return vim.api.nvim_buf_call(bufnr, function()
    return vim.fn.search([[^```\+\s*tool\>]], "nw") > 0
  end)
end

--- Call client[name](...); an error is notified and returned as nil, message.
local function ask(name, ...)
  local ok, res = pcall(client()[name], ...)
  if not ok then
    return err(res)
  end
  return res
end

--- Say once that the state_dir cannot be used (`reason`: the OS error), naming
--- the private temporary directory that stands in for it this session: the host
--- keeps the tasks in memory and their logs there, and says nothing more.
local function say_state_dir_unusable(reason)
  local dir = config.state_dir()
  if config.state_fallback and config.state_fallback.dir == dir then
    return -- said by an earlier setup()
  end
  local path = require("sidekick_tools.directory").temporary()
  config.state_fallback = { dir = dir, path = path }
  vim.notify(
    string.format(
      "sidekick_tools: state_dir %s cannot be used: %s. For this session, tasks are kept "
        .. "in memory%s; mcp.json (the MCP server's settings) is not written",
      dir,
      reason,
      path and (" and their logs go to the temporary state directory " .. path) or ""
    ),
    vim.log.levels.WARN
  )
end

--- Ask the host; an answer that is a question (`res.confirm`: a path that
--- leads outside the working directory through a link in the project, a
--- chat going to a server on this machine) is asked of the user, `button` or
--- Cancel (the default): yes gives what `again(res)` gives, no says `note`.
local function ask_asking(button, note, again, method, ...)
  local res, e = ask(method, ...)
  if type(res) ~= "table" or not res.confirm then
    return res, e
  end
  if vim.fn.confirm("sidekick_tools: " .. res.confirm, "&" .. button .. "\n&Cancel", 2) ~= 1 then
    vim.cmd.redraw() -- the question's lines go: the note is no hit-enter prompt
    vim.notify(note, vim.log.levels.INFO)
    return nil, note
  end
  return again(res)
end

--- A run the host may answer with a question: asked for again, confirmed,
--- once the user says yes.
local function run_asking(method, ...)
  local n = select("#", ...)
  local args = { ... }
  args[n + 1] = true
  return ask_asking("Run", "sidekick_tools: nothing was run", function()
    return ask(method, unpack(args, 1, n + 1))
  end, method, ...)
end

--- Configure the plugin. Safe to call again; a running host gets the new settings.
---@param opts table|nil see :h sidekick_tools-config
function M.setup(opts)
  vim.validate({ opts = { opts, "table", true } })
  local _, unknown, problems = config.setup(opts)
  if #problems > 0 then -- never raised: the rest of the user's init.lua runs
    vim.notify(
      "sidekick_tools: setup() kept the default of each wrong option (:h sidekick_tools-config):\n"
        .. table.concat(problems, "\n"),
      vim.log.levels.ERROR
    )
  end
  if #unknown > 0 then -- a warning: a config naming an old option still loads
    vim.notify(
      "sidekick_tools: setup() ignores unknown options: "
        .. table.concat(unknown, ", ")
        .. " (:h sidekick_tools-config)",
      vim.log.levels.WARN
    )
  end
  local kinds = config.unknown_kinds()
  table.insert(kinds, config.model_without_provider())
  if #kinds > 0 then -- a warning: the other providers work
    vim.notify(
      "sidekick_tools: setup(): "
        .. table.concat(kinds, "\n")
        .. " (:h sidekick_tools-chat-providers)",
      vim.log.levels.WARN
    )
  end
  for _, conflict in ipairs(require("sidekick_tools.keymaps").conflicts()) do
    vim.notify(conflict, vim.log.levels.WARN)
  end
  -- the MCP server reads the settings it shares with the editor from this file;
  -- a state_dir that cannot be used is said here, once, and setup() goes on
  local ok, path, write_err = pcall(config.write_mcp_settings)
  if not (ok and path) then
    say_state_dir_unusable(tostring(ok and write_err or path))
  else
    config.state_fallback = nil
  end
  if package.loaded["sidekick_tools.client"] then
    require("sidekick_tools.consumers").configure()
    client().configure()
  end
  require("sidekick_tools.keymaps").apply_to_open_chats()
  if package.loaded["sidekick_tools.folds"] or (config.current.ui or {}).fold_thinking then
    require("sidekick_tools.folds").apply_to_open_chats()
  end
  return M
end

--- Run the tool call at (bufnr, lnum), then chain the auto-acceptable calls after it.
---@param bufnr integer|nil buffer, default current
---@param lnum integer|nil 1-based line, default cursor line
--- A call whose path reads as inside the working directory but leads outside
--- it through a link in the project runs only once you say yes to it.
---@return table|nil info { id, tool } of the call started, nil and a message on error
function M.run_tool(bufnr, lnum)
  vim.validate({ bufnr = { bufnr, "number", true }, lnum = { lnum, "number", true } })
  bufnr = bufnr_of(bufnr)
  local line, msg = line_of(bufnr, lnum, "run_tool")
  if not line then
    return err(msg)
  end
  if not require("sidekick_tools.host").running() and not has_call(bufnr) then
    -- no call at all: said as the host would say it, and no host is started
    -- for it (DESIGN §6: an error message, nothing else)
    return err(
      string.format(
        "sidekick_tools: no tool call at line %d. Put the cursor on a ```tool block "
          .. "of an ASSISTANT message.",
        line
      )
    )
  end
  return run_asking("run_tool", bufnr, line - 1, vim.fn.getcwd())
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
    local plan, plan_err = ask("plan", bufnr, cwd)
    if not plan then
      return nil, plan_err
    end
    local format = require("sidekick_tools.format")
    if #plan == 0 then
      local msg = "sidekick_tools: no pending tool call in the last assistant message"
      vim.notify(msg, vim.log.levels.WARN)
      return nil, msg
    end
    local consent = require("sidekick_tools.consent")
    local answer = consent.ask(plan)
    if not answer then
      local msg = "sidekick_tools: nothing was run ("
        .. format.plural(#plan, "call")
        .. " still pending)"
      vim.cmd.redraw() -- the question's lines go: the note is no hit-enter prompt
      vim.notify(msg, vim.log.levels.INFO)
      return nil, msg
    end
    -- exactly the calls the user was shown (plan gave each an id): one added
    -- while the question was open does not run unasked
    ids = {} -- each id with the digest of the text shown: a call changed since does not run
    local held, left = {}, 0 -- "only the others": the ids left pending, how many calls
    for _, p in ipairs(plan) do
      if answer == "others" and consent.needs_consent(p) then
        held[p.id], left = true, left + 1
      elseif ids[p.id] == nil then -- a later block repeating an id is not that call
        ids[p.id] = p.seen
      end
    end
    for id in pairs(held) do
      ids[id] = nil -- not run, whatever else shares its id
    end
    if left > 0 then
      local msg = "sidekick_tools: %s that need%s your consent left pending"
      vim.notify(msg:format(format.plural(left, "call"), left == 1 and "s" or ""))
    end
  end
  return ask("run_tools", bufnr, cwd, ids)
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
  return ask("deny", bufnr, line - 1, reason or "", vim.fn.getcwd())
end

--- Cancel a task. Without a token: the task of the call under the cursor.
---@param token string|nil
function M.halt(token)
  vim.validate({ token = { token, "string", true } })
  local bufnr = vim.api.nvim_get_current_buf()
  return ask("halt", token, bufnr, vim.api.nvim_win_get_cursor(0)[1] - 1)
end

--- Run the tool call of task `token` again: its result block is replaced (the
--- chat is loaded if it is not). A task not started from a chat's tool call
--- (an agent's through MCP) cannot be.
---@param token string
---@return table|nil info { id, tool, row } of the call started, nil and a message on error
function M.rerun(token)
  vim.validate({ token = { token, "string" } })
  local task = ask("task", token)
  if not task then
    return err("sidekick_tools: no task " .. token .. " (unknown or expired)")
  end
  if (task.chat or "") == "" or (task.call_id or "") == "" then
    return err(
      string.format(
        "sidekick_tools: task %s was not started from a tool call in a chat; it cannot be rerun",
        token
      )
    )
  end
  local origin = require("sidekick_tools.consumers.tasks_window.rows").origin(task)
  if origin ~= "" then
    return err(
      string.format(
        "sidekick_tools: task %s was started by the MCP client %s, not by a chat's tool call; it cannot be rerun",
        token,
        origin
      )
    )
  end
  local chats = require("sidekick_tools.chats")
  local buf, load_err = chats.load(task.chat)
  if not buf then
    return err(load_err)
  end
  local res, run_err = run_asking("run_call", buf, task.call_id, vim.fn.getcwd(), token)
  if not res then
    return nil, run_err
  end
  if not chats.visible(task.chat) then
    vim.notify(
      string.format(
        "sidekick_tools: call %s runs again in %s",
        task.call_id,
        vim.fn.fnamemodify(task.chat, ":~:.")
      ),
      vim.log.levels.INFO
    )
  end
  return res
end

--- Send the chat to its model; the reply streams in, its calls run as the
--- auto-accept policy allows, and the results go back (DESIGN §10). A chat
--- whose front matter names a server on this machine other than chat.model's
--- is asked about first: the host answers with the question (`opts.confirm =
--- false`: not asked).
---@param bufnr integer|nil
---@param opts table|nil { confirm = boolean }
function M.send(bufnr, opts)
  vim.validate({ bufnr = { bufnr, "number", true }, opts = { opts, "table", true } })
  bufnr = bufnr_of(bufnr)
  local models = require("sidekick_tools.models")
  local trusted = (opts or {}).confirm == false or models.chosen(bufnr)
  return ask_asking("Send", "sidekick_tools: the chat was not sent", function(res)
    models.choose(bufnr, res.provider)
    return ask("send", bufnr, vim.fn.getcwd(), models.chosen(bufnr))
  end, "send", bufnr, vim.fn.getcwd(), trusted)
end

--- Stop the reply streaming into the chat, and the loop.
---@param bufnr integer|nil
function M.stop(bufnr)
  vim.validate({ bufnr = { bufnr, "number", true } })
  bufnr = bufnr_of(bufnr)
  local res = ask("stop", bufnr)
  if res and res.message then
    vim.notify(res.message, vim.log.levels.INFO)
  end
  return res
end

--- Tasks from the store, newest first: this Neovim's (the ones it started and
--- the ones started from the chats loaded in it), or with `owner = "any"` every
--- Neovim's and agent's.
---@param opts table|nil { status = a task status or "all", owner = "any"|nil, chats, limit, offset }
function M.list_tasks(opts)
  vim.validate({ opts = { opts, "table", true } })
  opts = vim.deepcopy(opts or {})
  if opts.owner ~= "any" and not opts.all and opts.chats == nil then
    opts.chats = require("sidekick_tools.chats").names()
  end
  return ask("list_tasks", opts)
end

--- One task (list_tasks' fields), or nil.
---@param token string
function M.get_task(token)
  vim.validate({ token = { token, "string" } })
  return ask("get_task", token)
end

--- Short status for statuslines: "" when idle.
function M.statusline()
  return require("sidekick_tools.consumers.statusline").text()
end

return M
