-- Diagnostics are a pure function of the call states the bridge holds: every
-- draw clears the namespace for the buffer and sets the full list again.
local bridge = require("sidekick_tools.bridge")

local M = {}

local S = vim.diagnostic.severity

--- Configure the plugin's own namespace from option `ui`, so the states show
--- whatever the user's global diagnostic settings are (Neovim 0.11 turned
--- virtual text off by default). A call's diagnostic marks its whole block, so
--- it has no range worth underlining; the underline handler would only cost
--- time (it re-lays its extmarks on every edit of the chat).
function M.configure()
  local ui = require("sidekick_tools.config").current.ui or {}
  local function handler(value)
    if value == nil then
      return true
    end
    return value
  end
  vim.diagnostic.config({
    virtual_text = handler(ui.virtual_text),
    signs = handler(ui.signs),
    underline = false,
  }, bridge.ns)
end

M.configure()

M.glyphs = {
  pending = "▶",
  queued = "⧗",
  running = "⟳",
  completed = "✓",
  failed = "✗",
  cancelled = "⊘",
  denied = "⊘",
}

M.severity = {
  pending = S.HINT,
  queued = S.HINT,
  running = S.HINT,
  completed = S.INFO,
  failed = S.ERROR,
  cancelled = S.WARN,
  denied = S.WARN,
}

local function elapsed(started_at, now)
  local secs = math.max(0, math.floor((now or os.time()) - started_at))
  if secs < 60 then
    return secs .. "s"
  elseif secs < 3600 then
    return string.format("%dm%02ds", math.floor(secs / 60), secs % 60)
  end
  return string.format("%dh%02dm", math.floor(secs / 3600), math.floor(secs % 3600 / 60))
end
M.elapsed = elapsed

local DENIED_BY = { user = "denied by you", policy = "denied by the policy" }

--- The diagnostic message for one call state (DESIGN §5 table).
---@param st sidekick_tools.CallState
---@param now number|nil epoch seconds, for the running time
function M.message(st, now)
  local glyph = M.glyphs[st.state] or "?"
  local tool = st.tool ~= "" and st.tool or "tool"
  if st.state == "pending" then
    return string.format("%s %s (%s)", glyph, tool, st.detail or ":SidekickRunTool")
  elseif st.state == "queued" then
    return string.format("%s %s (queued, %d ahead)", glyph, tool, st.ahead or 0)
  elseif st.state == "running" then
    local parts = { "running" }
    if st.started_at then
      parts[1] = "running " .. elapsed(st.started_at, now)
    end
    if st.progress then
      local pct = string.format("%d%%", st.progress)
      if st.progress_text and st.progress_text ~= "" then
        pct = pct .. ": " .. st.progress_text
      end
      table.insert(parts, pct)
    elseif st.progress_text and st.progress_text ~= "" then
      table.insert(parts, st.progress_text)
    end
    if st.detail then
      table.insert(parts, st.detail)
    end
    return string.format("%s %s (%s)", glyph, tool, table.concat(parts, ", "))
  elseif st.state == "completed" then
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

--- Rows of tracked calls whose extmark is still valid.
local function tracked_rows(buf)
  local out = {}
  for mark, st in pairs(bridge.tracked[buf] or {}) do
    local pos = vim.api.nvim_buf_get_extmark_by_id(buf, bridge.ns, mark, { details = true })
    if pos[1] and not (pos[3] and pos[3].invalid) then
      table.insert(out, { row = pos[1], st = st })
    end
  end
  return out
end

function M.items(buf, now)
  local items, taken = {}, {}
  for _, t in ipairs(tracked_rows(buf)) do
    taken[t.row] = true
    table.insert(items, { row = t.row, st = t.st })
  end
  for _, s in ipairs(bridge.scanned[buf] or {}) do
    if not taken[s.row] then
      table.insert(items, { row = s.row, st = s })
    end
  end
  local line_count = vim.api.nvim_buf_line_count(buf)
  local diags = {}
  for _, it in ipairs(items) do
    if it.row < line_count then
      table.insert(diags, {
        lnum = it.row,
        col = 0,
        severity = M.severity[it.st.state] or S.HINT,
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

local function has_running(buf)
  for _, st in pairs(bridge.tracked[buf] or {}) do
    if st.state == "running" then
      return true
    end
  end
  return false
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
    if not seen[buf] and has_running(buf) then
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
  local current = #vim.diagnostic.get(buf, { namespace = bridge.ns })
  if drawn[buf] ~= sig or current ~= #diags then
    vim.diagnostic.set(bridge.ns, buf, diags)
    drawn[buf] = sig
  end
  if has_running(buf) and vim.fn.bufwinid(buf) ~= -1 then
    ensure_timer()
  end
end

-- A buffer with running calls shown again: bring its elapsed times up to date.
vim.api.nvim_create_autocmd("BufWinEnter", {
  group = vim.api.nvim_create_augroup("sidekick_tools_diagnostics", { clear = true }),
  callback = function(ev)
    if bridge.tracked[ev.buf] then
      M.draw(ev.buf)
    end
  end,
})
vim.api.nvim_create_autocmd("BufWipeout", {
  group = "sidekick_tools_diagnostics",
  callback = function(ev)
    drawn[ev.buf] = nil
  end,
})

return M
