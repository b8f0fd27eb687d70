-- Diagnostics are a pure function of the call states the bridge holds: every
-- draw clears the namespace for the buffer and sets the full list again.
local bridge = require("sidekick_tools.bridge")

local M = {}

local S = vim.diagnostic.severity

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

function M.draw(buf)
  if not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  vim.diagnostic.set(bridge.ns, buf, M.items(buf))
end

return M
