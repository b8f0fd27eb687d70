-- The host's hands in the editor. Python decides every edit from a snapshot at a
-- known changedtick; these functions apply it only if the buffer is still at that
-- tick, so nothing the user typed meanwhile is ever overwritten.
local M = {}

M.ns = vim.api.nvim_create_namespace("sidekick_tools")

---@class sidekick_tools.CallState
---@field state string pending|queued|running|completed|failed|cancelled|denied
---@field tool string
---@field detail string|nil
---@field started_at number|nil
---@field progress number|nil
---@field progress_text string|nil
---@field ahead number|nil

--- Tracked calls, per buffer: mark id -> state. Their row is the extmark's.
---@type table<integer, table<integer, sidekick_tools.CallState>>
M.tracked = {}
--- Untracked calls as parsed from the text at some tick: { row, state... }.
---@type table<integer, table[]>
M.scanned = {}

local listeners = {}

--- Subscribe to host events of a type ("task", "call", ...). Returns an unsubscribe function.
function M.on(kind, fn)
  listeners[kind] = listeners[kind] or {}
  table.insert(listeners[kind], fn)
  return function()
    listeners[kind] = vim.tbl_filter(function(f)
      return f ~= fn
    end, listeners[kind])
  end
end

local function emit(kind, event)
  for _, fn in ipairs(listeners[kind] or {}) do
    local ok, err = pcall(fn, event)
    if not ok then
      vim.notify("sidekick_tools: " .. tostring(err), vim.log.levels.ERROR)
    end
  end
end

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
    on_lines = function(_, b, tick)
      text_tick[b] = tick
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
    local row = -1
    if valid(buf) then
      local pos = vim.api.nvim_buf_get_extmark_by_id(buf, M.ns, id, { details = true })
      if pos[1] and not (pos[3] and pos[3].invalid) then
        row = pos[1]
      end
    end
    out[tostring(id)] = row
  end
  return out
end

local function place_mark(buf, id, row)
  vim.api.nvim_buf_set_extmark(
    buf,
    M.ns,
    row,
    0,
    { id = id, invalidate = true, undo_restore = false }
  )
end

--- Apply edits computed from the buffer's text as of changedtick `tick`. Each edit
--- is { start, stop, lines } (0-based, end-exclusive), applied in the order given
--- (callers send them bottom-up). `marks` is a list of { id, row } to place after
--- the edits, `anchors` (same form) before them: marks set again on a call header
--- that saving, reloading or a formatter moved or invalidated.
---@return boolean applied false when the text changed after `tick` or the buffer is gone
function M.apply(buf, tick, edits, marks, anchors)
  if not valid(buf) then
    return false
  end
  local seen = text_tick[buf]
  if seen == nil or seen > tick then
    return false
  end
  for _, m in ipairs(anchors or {}) do
    place_mark(buf, m[1], m[2])
  end
  local modifiable = vim.bo[buf].modifiable
  vim.bo[buf].modifiable = true
  for _, e in ipairs(edits or {}) do
    vim.api.nvim_buf_set_lines(buf, e[1], e[2], false, e[3])
  end
  vim.bo[buf].modifiable = modifiable
  for _, m in ipairs(marks or {}) do
    place_mark(buf, m[1], m[2])
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

--- The API key a Lua function in `chat.providers.<name>.api_key` gives (the host
--- asks when it sends; the key is never stored).
function M.api_key(name)
  local providers = (require("sidekick_tools.config").current.chat or {}).providers or {}
  local fn = (providers[name] or {}).api_key
  if type(fn) ~= "function" then
    return vim.NIL
  end
  local ok, key = pcall(fn)
  if not ok or type(key) ~= "string" or key == "" then
    vim.notify(
      "sidekick_tools: chat.providers." .. name .. ".api_key (a function) gave no key",
      vim.log.levels.ERROR
    )
    return vim.NIL
  end
  return key
end

-- A reply streaming into a chat is a region of rows, from its ASSISTANT: line,
-- kept by an extmark range that grows with what is appended at its end. The
-- host sends edits relative to the region's first row; one that finds the region
-- not as the host left it (the user edited inside the reply) is dropped, and
-- the region is written whole when the reply ends.
M.reply_ns = vim.api.nvim_create_namespace("sidekick_tools_reply")
local desynced = {} ---@type table<integer, boolean> reply mark -> edits dropped

local function reply_region(buf, mark)
  if not valid(buf) then
    return nil
  end
  local pos = vim.api.nvim_buf_get_extmark_by_id(buf, M.reply_ns, mark, { details = true })
  if not pos[1] or not pos[3] or pos[3].end_row == nil then
    return nil
  end
  return pos[1], pos[3].end_row
end

function M.reply_open(buf, mark, row)
  local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ""
  vim.api.nvim_buf_set_extmark(buf, M.reply_ns, row, 0, {
    id = mark,
    end_row = row,
    end_col = #line,
    right_gravity = false,
    end_right_gravity = true,
    undo_restore = false,
  })
  desynced[mark] = nil
end

--- One streamed edit { start_row, start_col, end_row, end_col, lines } relative
--- to the region; `expect` is what its first row held, `rows` the region's size.
function M.reply_edit(buf, mark, e, expect, rows)
  if desynced[mark] then
    return
  end
  local first, last = reply_region(buf, mark)
  local ok = first ~= nil and last - first + 1 == rows
  if ok then
    local row = first + e[1]
    ok = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1] == expect
  end
  if ok then
    local modifiable = vim.bo[buf].modifiable
    vim.bo[buf].modifiable = true
    if vim.api.nvim_get_current_buf() == buf then
      pcall(vim.cmd.undojoin) -- the whole reply is one undo step
    end
    ok = pcall(vim.api.nvim_buf_set_text, buf, first + e[1], e[2], first + e[3], e[4], e[5])
    vim.bo[buf].modifiable = modifiable
  end
  if not ok then
    desynced[mark] = true
  end
end

--- The reply ended: its region becomes exactly `lines`. False when the region is gone.
function M.reply_close(buf, mark, lines)
  local first, last = reply_region(buf, mark)
  desynced[mark] = nil
  if not first then
    return false
  end
  local current = vim.api.nvim_buf_get_lines(buf, first, last + 1, false)
  if not vim.deep_equal(current, lines) then
    local modifiable = vim.bo[buf].modifiable
    vim.bo[buf].modifiable = true
    if vim.api.nvim_get_current_buf() == buf then
      pcall(vim.cmd.undojoin)
    end
    vim.api.nvim_buf_set_lines(buf, first, last + 1, false, lines)
    vim.bo[buf].modifiable = modifiable
  end
  return true
end

-- Several events for one buffer in one loop turn cost one draw, and a burst
-- of events (hundreds of tasks ending) costs at most one draw per
-- DRAW_GAP_MS: the first change after a quiet spell is drawn on the next loop
-- turn, later ones wait for the gap. Each draw is a vim.diagnostic.set, which
-- re-runs every handler and the statusline for the whole buffer.
-- What the user just asked for (:SidekickRunTool, a halt) is drawn at once,
-- gap or not, for PROMPT_MS after the request returns (see M.prompt).
local DRAW_GAP_MS = 50
local PROMPT_MS = 100
local draw_pending = {} ---@type table<integer, boolean>
local last_draw = {} ---@type table<integer, number>
local prompt_until = {} ---@type table<integer, number>

local function now_ms()
  return vim.uv.hrtime() / 1e6
end

--- The user acted on `buf`: its next state changes are drawn without delay.
---@param buf integer
function M.prompt(buf)
  prompt_until[buf] = now_ms() + PROMPT_MS
end

local function redraw(buf)
  if draw_pending[buf] then
    return
  end
  draw_pending[buf] = true
  local function run()
    draw_pending[buf] = nil
    last_draw[buf] = now_ms()
    require("sidekick_tools.render.diagnostics").draw(buf)
  end
  local now = now_ms()
  local wait = last_draw[buf] and (last_draw[buf] + DRAW_GAP_MS - now) or 0
  if now < (prompt_until[buf] or 0) then
    wait = 0
  end
  if wait > 0 then
    vim.defer_fn(run, math.ceil(wait))
  else
    vim.schedule(run)
  end
end

local handlers = {}

function handlers.call(ev)
  if not valid(ev.buf) then
    return
  end
  M.tracked[ev.buf] = M.tracked[ev.buf] or {}
  M.tracked[ev.buf][ev.mark] = ev
  redraw(ev.buf)
  emit("call", ev)
end

function handlers.forget(ev)
  if M.tracked[ev.buf] then
    M.tracked[ev.buf][ev.mark] = nil
    if valid(ev.buf) then
      pcall(vim.api.nvim_buf_del_extmark, ev.buf, M.ns, ev.mark)
      redraw(ev.buf)
    end
  end
end

function handlers.scan(ev)
  if not valid(ev.buf) then
    return
  end
  -- tracked calls' header rows as the text has them: a mark that a reload or a
  -- formatter dropped or moved is set again, so their state stays in view
  for _, a in ipairs(ev.anchors or {}) do
    local pos = vim.api.nvim_buf_get_extmark_by_id(ev.buf, M.ns, a[1], { details = true })
    if
      (not pos[1] or pos[1] ~= a[2] or (pos[3] and pos[3].invalid))
      and a[2] < vim.api.nvim_buf_line_count(ev.buf)
    then
      place_mark(ev.buf, a[1], a[2])
    end
  end
  M.scanned[ev.buf] = ev.items or {}
  redraw(ev.buf)
end

--- Tokens in/out and cache reads of a reply, as virtual text on its ASSISTANT:
--- line (not in the text).
M.usage_ns = vim.api.nvim_create_namespace("sidekick_tools_usage")
function handlers.usage(ev)
  local row = reply_region(ev.buf, ev.mark)
  if row then
    vim.api.nvim_buf_set_extmark(ev.buf, M.usage_ns, row, 0, {
      id = ev.mark,
      virt_text = { { ev.text, "Comment" } },
      virt_text_pos = "eol",
      undo_restore = false,
    })
  end
end

function handlers.notify(ev)
  vim.notify(ev.msg, ev.level or vim.log.levels.INFO)
end

function handlers.task(ev)
  emit("task", ev)
end

--- Entry point for the host's batched events.
function M.on_events(events)
  for _, ev in ipairs(events) do
    local handler = handlers[ev.type]
    if handler then
      local ok, err = pcall(handler, ev)
      if not ok then
        vim.notify("sidekick_tools: " .. tostring(err), vim.log.levels.ERROR)
      end
    else
      emit(ev.type, ev)
    end
  end
end

--- A (new) host is up: let it look at every loaded chat, so that pending calls
--- show their state and running blocks are followed again after a restart.
function M.host_started()
  -- consumers that must see task events from the first one on
  require("sidekick_tools.events")
  require("sidekick_tools.render.statusline")
  local host = require("sidekick_tools.host")
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if
      vim.api.nvim_buf_is_loaded(buf) and vim.api.nvim_buf_get_name(buf):match("%.sidekick%.md$")
    then
      host.notify("chat_opened", buf)
    end
  end
  emit("host", { up = true })
end

--- The host died: running calls can no longer be followed by this process; the
--- next host recovers their tasks. Show that honestly instead of a stale spinner.
function M.host_lost()
  for buf, calls in pairs(M.tracked) do
    local changed = false
    for _, st in pairs(calls) do
      if st.state == "running" or st.state == "queued" then
        st.detail = "host stopped; run any command to reconnect"
        changed = true
      end
    end
    if changed and valid(buf) then
      redraw(buf)
    end
  end
  emit("host", { up = false })
end

return M
