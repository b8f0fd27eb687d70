-- Each call's state as a diagnostic on its header line (DESIGN §5). A draw is
-- a pure function of the client's call states: the buffer's full list is set
-- again, and only when a message changed.
local client = require("sidekick_tools.client")
local constants = require("sidekick_tools.constants")
local format = require("sidekick_tools.format")
local marks = require("sidekick_tools.marks")

local M = {}

--- Configure the plugin's own namespace from option `ui`, so the states show
--- whatever the user's global diagnostic settings are (Neovim 0.11 turned
--- virtual text off by default). A call's diagnostic marks its whole block, so
--- it has no range worth underlining; the underline handler would only cost
--- time (it re-lays its extmarks on every edit of the chat).
function M.configure()
  local ui = require("sidekick_tools.config").current.ui
  vim.diagnostic.config({
    virtual_text = ui.virtual_text,
    signs = ui.signs,
    underline = false,
  }, marks.ns)
end

local DENIED_BY = { user = "denied by you", policy = "denied by the policy" }

--- The diagnostic message for one call state (DESIGN §5 table).
---@param st sidekick_tools.CallState
---@param now number|nil epoch seconds, for the running time
function M.message(st, now)
  local glyph = constants.glyph(st.state)
  local tool = st.tool ~= "" and st.tool or "tool"
  if st.state == "pending" then
    return string.format("%s %s (%s)", glyph, tool, st.detail or ":SidekickRunTool")
  elseif st.state == "queued" and st.ahead == nil then -- in a :SidekickRunTools batch
    return string.format("%s %s (queued, runs after the calls above)", glyph, tool)
  elseif st.state == "queued" then
    return string.format("%s %s (queued, %d ahead)", glyph, tool, st.ahead)
  elseif st.state == "running" then
    -- `(running 12s, 45%)` as DESIGN §5 has it; the progress text and any
    -- detail after it
    local head = st.started_at and ("running " .. format.elapsed(st.started_at, now)) or "running"
    if st.progress then
      head = string.format("%s, %d%%", head, st.progress)
    end
    local tail = {}
    if st.progress_text and st.progress_text ~= "" then
      table.insert(tail, st.progress_text)
    end
    if st.detail then
      table.insert(tail, st.detail)
    end
    local msg = string.format("%s %s (%s)", glyph, tool, head)
    return #tail > 0 and (msg .. ": " .. table.concat(tail, "; ")) or msg
  elseif st.state == "completed" then
    if st.detail and st.detail ~= "" then
      return string.format("%s %s: %s", glyph, tool, st.detail)
    end
    return string.format("%s %s", glyph, tool)
  end
  local detail = st.detail
  if not detail or detail == "" then
    detail = st.state
  end
  if st.state == "denied" then -- detail: who denied it (the result's reason=)
    detail = DENIED_BY[detail] or (detail ~= "denied" and ("denied, " .. detail)) or "denied"
  end
  return string.format("%s %s: %s", glyph, tool, detail)
end

local function severity(state)
  local look = constants.states[state]
  return vim.diagnostic.severity[look and look.severity or "HINT"]
end

--- The diagnostics of `buf`, by row.
function M.items(buf, now)
  local line_count = vim.api.nvim_buf_line_count(buf)
  local diags = {}
  for _, it in ipairs(client.call_states(buf)) do
    if it.row < line_count then
      table.insert(diags, {
        lnum = it.row,
        col = 0,
        severity = severity(it.st.state),
        message = M.message(it.st, now),
        source = "sidekick_tools",
        user_data = { state = it.st.state, tool = it.st.tool },
      })
    end
  end
  table.sort(diags, function(a, b)
    return a.lnum < b.lnum
  end)
  return diags
end

-- What was last set per buffer, so unchanged messages are not set again.
local drawn = {} ---@type table<integer, string>

local function signature(diags)
  local parts = {}
  for _, d in ipairs(diags) do
    table.insert(parts, d.lnum .. "\31" .. d.severity .. "\31" .. d.message)
  end
  return table.concat(parts, "\30")
end

local uv = vim.uv or vim.loop
local timer = nil ---@type uv.uv_timer_t|nil

local function stop_timer()
  if timer then
    timer:stop()
    timer:close()
    timer = nil
  end
end

--- Once a second while a visible buffer has a running call: redraw those
--- buffers (only the ones whose messages changed are set again).
local function tick()
  local any = false
  local seen = {}
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    local buf = vim.api.nvim_win_get_buf(win)
    if not seen[buf] and client.has_running(buf) then
      seen[buf] = true
      any = true
      M.draw(buf)
    end
  end
  if not any then
    stop_timer()
  end
end

local function ensure_timer()
  if timer then
    return
  end
  timer = uv.new_timer()
  timer:start(1000, 1000, vim.schedule_wrap(tick))
end

function M.draw(buf)
  if not vim.api.nvim_buf_is_valid(buf) then
    drawn[buf] = nil
    return
  end
  local diags = M.items(buf)
  local sig = signature(diags)
  local current = #vim.diagnostic.get(buf, { namespace = marks.ns })
  if drawn[buf] ~= sig or current ~= #diags then
    vim.diagnostic.set(marks.ns, buf, diags)
    drawn[buf] = sig
  end
  if client.has_running(buf) and vim.fn.bufwinid(buf) ~= -1 then
    ensure_timer()
  end
end

-- Several changes of one buffer in one loop turn cost one draw, and a burst
-- of them (hundreds of tasks ending) costs at most one draw per DRAW_GAP_MS:
-- the first change after a quiet spell is drawn on the next loop turn, later
-- ones wait for the gap. Each draw is a vim.diagnostic.set, which re-runs every
-- handler and the statusline for the whole buffer. What the user just asked
-- for (the client's `prompt`) is drawn at once, gap or not, and what the
-- answer to their request carried before the request returns ("answered"):
-- their command ends with its calls' states set, not a loop turn later, after
-- whatever else the editor had queued.
local DRAW_GAP_MS = 50
local draw_pending = {} ---@type table<integer, boolean>
local last_draw = {} ---@type table<integer, number>

local function now_ms()
  return uv.hrtime() / 1e6
end

--- Draw `buf` if a draw is pending for it (a scheduled one then finds none).
local function flush(buf)
  if not draw_pending[buf] then
    return
  end
  draw_pending[buf] = nil
  last_draw[buf] = now_ms()
  M.draw(buf) -- the buffer may be gone by now: draw checks
end

local function on_calls(ev)
  local buf = ev.buf
  if ev.rewritten then
    -- the edit moved the diagnostics' own marks (a formatter rewriting every
    -- line puts them all on the first): set them again, same text or not
    drawn[buf] = nil
  end
  if draw_pending[buf] then
    return
  end
  draw_pending[buf] = true
  local function run()
    flush(buf)
  end
  local wait = last_draw[buf] and (last_draw[buf] + DRAW_GAP_MS - now_ms()) or 0
  if ev.prompt then
    wait = 0
  end
  if wait > 0 then
    vim.defer_fn(run, math.ceil(wait))
  else
    vim.schedule(run)
  end
end

local function on_answered(ev)
  flush(ev.buf)
end

--- Listen to the client's call states (consumers.register).
function M.register()
  M.configure()
  client.on("calls", on_calls)
  client.on("answered", on_answered)
  local group = vim.api.nvim_create_augroup("sidekick_tools_diagnostics", { clear = true })
  -- A buffer with running calls shown again: bring its elapsed times up to date.
  vim.api.nvim_create_autocmd("BufWinEnter", {
    group = group,
    callback = function(ev)
      if client.tracked[ev.buf] then
        M.draw(ev.buf)
      end
    end,
  })
  -- The timer ticks for the tab page in view; back on another, bring its up to date.
  vim.api.nvim_create_autocmd("TabEnter", {
    group = group,
    callback = function()
      for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
        local buf = vim.api.nvim_win_get_buf(win)
        if client.tracked[buf] then
          M.draw(buf)
        end
      end
    end,
  })
  vim.api.nvim_create_autocmd("BufWipeout", {
    group = group,
    callback = function(ev)
      drawn[ev.buf] = nil
      last_draw[ev.buf] = nil
    end,
  })
end

return M
