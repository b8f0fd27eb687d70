-- What the host calls in the editor, and nothing else: a buffer's snapshot,
-- edits applied at a known changedtick, the rows of call marks, the user's
-- policy function, the buffers with unsaved changes to a file a tool is
-- about to write, a provider's API key from a Lua function, a streaming
-- reply's region, and the entry of its batched events (handed to the client).
-- Python decides every edit from a snapshot at a known changedtick; `apply`
-- applies it only if the buffer's text is still at that tick, so nothing the
-- user typed meanwhile is ever overwritten.
local marks = require("sidekick_tools.marks")
local undo = require("sidekick_tools.undo")

local M = {}

local function valid(buf)
  return type(buf) == "number" and vim.api.nvim_buf_is_valid(buf)
end

-- The changedtick of each watched buffer's last TEXT change. b:changedtick
-- also moves without any text change (:w, 'modified' reset, 'fileformat'), and
-- Neovim sends no buffer event for that: an edit computed from the host's
-- mirror is safe when no text changed after the tick the mirror is at, whatever
-- b:changedtick says. A reload (:e!, :checktime) detaches the buffer: the next
-- snapshot watches it again, and until then nothing is applied.
local text_tick = {} ---@type table<integer, integer>

local function watch(buf)
  if text_tick[buf] then
    return true
  end
  local ok = vim.api.nvim_buf_attach(buf, false, {
    on_lines = function(_, b, tick, first, last_old, last_new)
      text_tick[b] = tick
      local client = package.loaded["sidekick_tools.client"]
      if client then
        client.lines_moved(b, first, last_old, last_new)
      end
    end,
    on_reload = function(_, b)
      text_tick[b] = vim.api.nvim_buf_get_changedtick(b)
    end,
    on_detach = function(_, b)
      text_tick[b] = nil
    end,
  })
  if ok then
    text_tick[buf] = vim.api.nvim_buf_get_changedtick(buf)
  end
  return ok
end

--- Buffer lines and changedtick, atomically; the buffer is watched from now on.
function M.snapshot(buf)
  if not valid(buf) or not vim.api.nvim_buf_is_loaded(buf) or not watch(buf) then
    return vim.NIL
  end
  return {
    tick = vim.api.nvim_buf_get_changedtick(buf),
    lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false),
    name = vim.api.nvim_buf_get_name(buf),
  }
end

--- Current row of each mark id (-1: deleted or invalidated).
function M.mark_rows(buf, ids)
  local out = {}
  for _, id in ipairs(ids) do
    out[tostring(id)] = valid(buf) and marks.row(buf, id) or -1
  end
  return out
end

--- Apply edits computed from the buffer's text as of changedtick `tick`. Each edit
--- is { start, stop, lines } (0-based, end-exclusive), applied in the order given
--- (callers send them bottom-up). `placed` is a list of { id, row } to place after
--- the edits, `anchors` (same form) before them: marks set again on a call header
--- that saving, reloading or a formatter moved or invalidated.
---@return boolean applied false when the text changed after `tick` or the buffer is gone
function M.apply(buf, tick, edits, placed, anchors)
  if not valid(buf) then
    return false
  end
  local seen = text_tick[buf]
  if seen == nil or seen > tick then
    return false
  end
  for _, m in ipairs(anchors or {}) do
    marks.place(buf, m[1], m[2])
  end
  -- a buffer the host writes into is a chat, whatever its name: nothing
  -- written into it reads as a modeline (shown in a window again, say)
  vim.bo[buf].modeline = false
  -- The user typing in this chat: these lines would join their typing's undo
  -- step (one `u` would take back the results with it, and the calls would
  -- read as never run).
  undo.apart(buf, function()
    local modifiable = vim.bo[buf].modifiable
    vim.bo[buf].modifiable = true
    for _, e in ipairs(edits or {}) do
      vim.api.nvim_buf_set_lines(buf, e[1], e[2], false, e[3])
    end
    vim.bo[buf].modifiable = modifiable
  end)
  for _, m in ipairs(placed or {}) do
    marks.place(buf, m[1], m[2])
  end
  return true
end

--- Ask the user's auto-accept policy function; "approve", "deny" or nil.
function M.policy(tool, params, ctx)
  local fn = require("sidekick_tools.config").current.auto_accept.policy
  if type(fn) ~= "function" then
    return vim.NIL
  end
  local ok, answer = pcall(fn, tool, params, ctx)
  if not ok then
    vim.notify(
      "sidekick_tools: auto_accept.policy raised: " .. tostring(answer),
      vim.log.levels.ERROR
    )
    return vim.NIL
  end
  if answer == "approve" or answer == "deny" then
    return answer
  end
  return vim.NIL
end

--- The buffers holding unsaved changes to file `path`, before a tool writes it.
M.unsaved = require("sidekick_tools.files").unsaved

--- The API key a Lua function in `chat.providers.<name>.api_key` gives (the host
--- asks when it sends; the key is never stored).
function M.api_key(name)
  local providers = (require("sidekick_tools.config").current.chat or {}).providers or {}
  local fn = (providers[name] or {}).api_key
  if type(fn) ~= "function" then
    return vim.NIL
  end
  local ok, key = pcall(fn)
  if not ok then
    return { raised = true } -- the host says so (its error may hold anything: not shown)
  end
  if type(key) ~= "string" or key == "" then
    return vim.NIL -- the host says so
  end
  return key
end

-- A streaming reply's region (reply_region.lua): opened on its ASSISTANT: row,
-- edited as it streams, written whole at its end.
local reply_region = require("sidekick_tools.reply_region")
M.reply_open = reply_region.open
M.reply_edit = reply_region.edit
M.reply_close = reply_region.close

--- The host's batched events (nvim_port.py EVENTS_LUA): the client takes them.
function M.on_events(events)
  require("sidekick_tools.client").receive(events)
end

return M
