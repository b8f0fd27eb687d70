-- What an output view's buffer shows (init.lua): the lines read so far that
-- the filter lets through, stderr marked and ANSI colours as extmarks, the
-- winbar, the line saying how the task ended; windows whose cursor is on the
-- last line follow what is added. And the bound on what it keeps.
local constants = require("sidekick_tools.constants")

local M = {}

local ns = vim.api.nvim_create_namespace("sidekick_tools_output")

local STDERR = 2 -- index of the stderr stream

-- The view keeps the last lines of a task's output, not all of it: a task that
-- prints millions of lines must not grow the editor by gigabytes. Past either
-- bound the oldest lines go (down to KEEP of it at once, so a flood redraws the
-- view once per many lines); the logs on disk keep everything.
M.MAX_LINES = 100000
M.MAX_BYTES = 32 * 1024 * 1024
local KEEP = 0.8

local function matches(v, line)
  return not v.rx or v.rx:match_str(line.text) ~= nil
end

local function decorate(v, row, line)
  if line.stream == STDERR then
    vim.api.nvim_buf_set_extmark(v.buf, ns, row, 0, {
      sign_text = "▌",
      sign_hl_group = "SidekickOutputStderr",
      end_col = #line.text,
      hl_group = "SidekickOutputStderr",
      priority = 100,
    })
  end
  for _, s in ipairs(line.spans or {}) do
    vim.api.nvim_buf_set_extmark(v.buf, ns, row, s[1], {
      end_col = s[2],
      hl_group = s[3],
      priority = 110,
    })
  end
end

--- Windows showing the view whose cursor sits on its last line (they follow).
local function followers(v)
  local out = {}
  local last = vim.api.nvim_buf_line_count(v.buf)
  for _, win in ipairs(vim.fn.win_findbuf(v.buf)) do
    if vim.api.nvim_win_get_cursor(win)[1] >= last then
      table.insert(out, win)
    end
  end
  return out
end

local function scroll(v, wins)
  local last = vim.api.nvim_buf_line_count(v.buf)
  for _, win in ipairs(wins) do
    if vim.api.nvim_win_is_valid(win) then
      vim.api.nvim_win_set_cursor(win, { last, 0 })
    end
  end
end

local function set_lines(v, start, stop, lines)
  vim.bo[v.buf].modifiable = true
  vim.api.nvim_buf_set_lines(v.buf, start, stop, false, lines)
  vim.bo[v.buf].modifiable = false
end

local function winbar(v)
  local t = v.task
  local look = constants.states[t.status]
  local parts = {
    "%#SidekickTasksToken#" .. v.token .. "%*",
    ((t.tool or "task"):gsub("%%", "%%%%")),
    "%#" .. (look and look.hl or "Normal") .. "#" .. t.status .. "%*",
  }
  if v.filter then
    table.insert(parts, (("filter /" .. v.filter .. "/"):gsub("%%", "%%%%")))
  end
  local label = (t.label or ""):gsub("\n", " "):gsub("%%", "%%%%")
  return " " .. table.concat(parts, " · ") .. "  %<" .. label
end

function M.update_winbar(v)
  local bar = winbar(v)
  local window = require("sidekick_tools.consumers.window")
  for _, win in ipairs(vim.fn.win_findbuf(v.buf)) do
    window.set_local(win, { winbar = bar })
  end
end

local function mark_end_line(v)
  vim.api.nvim_buf_set_extmark(v.buf, ns, v.shown, 0, {
    end_col = #v.ended,
    hl_group = "SidekickOutputEnd",
  })
end

--- Redraw everything from the lines read so far (the filter changed).
function M.redraw(v)
  local wins = followers(v)
  vim.api.nvim_buf_clear_namespace(v.buf, ns, 0, -1)
  local text, shown = {}, {}
  if v.note and not v.rx then
    table.insert(text, v.note)
  end
  local first = #text
  for _, line in ipairs(v.lines) do
    if matches(v, line) then
      table.insert(text, line.text)
      table.insert(shown, line)
    end
  end
  v.shown = #text
  if v.ended then
    table.insert(text, v.ended)
  end
  set_lines(v, 0, -1, text)
  if v.note and not v.rx then
    vim.api.nvim_buf_set_extmark(
      v.buf,
      ns,
      0,
      0,
      { end_col = #v.note, hl_group = "SidekickOutputEnd" }
    )
  end
  for i, line in ipairs(shown) do
    decorate(v, first + i - 1, line)
  end
  if v.ended then
    mark_end_line(v)
  end
  M.update_winbar(v)
  scroll(v, wins)
end

--- Append newly read lines (those the filter lets through).
function M.append(v, new)
  local add = vim.tbl_filter(function(line)
    return matches(v, line)
  end, new)
  if #add == 0 then
    return
  end
  local wins = followers(v)
  local text = vim.tbl_map(function(line)
    return line.text
  end, add)
  local start = v.shown
  if start == 0 and not v.ended then
    set_lines(v, 0, -1, text) -- replace the empty first line of a new buffer
  else
    set_lines(v, start, start, text)
  end
  for i, line in ipairs(add) do
    decorate(v, start + i - 1, line)
  end
  v.shown = v.shown + #add
  scroll(v, wins)
end

--- Drop the oldest lines when the view holds more than its bounds. Returns
--- the lines dropped (none: nothing to do).
function M.trim(v)
  if #v.lines <= M.MAX_LINES and v.bytes <= M.MAX_BYTES then
    return {}
  end
  local drop, bytes = 0, v.bytes
  while drop < #v.lines and (#v.lines - drop > M.MAX_LINES * KEEP or bytes > M.MAX_BYTES * KEEP) do
    drop = drop + 1
    bytes = bytes - #v.lines[drop].text
  end
  local gone = vim.list_slice(v.lines, 1, drop)
  v.lines = vim.list_slice(v.lines, drop + 1)
  v.bytes, v.dropped = bytes, v.dropped + drop
  v.note = string.format(
    "[… %d earlier lines not shown (the view holds at most %d); full logs in %s]",
    v.dropped,
    M.MAX_LINES,
    v.task.log_dir or "the task's log folder"
  )
  return gone
end

--- Take the rows of the dropped lines off the top of the view, and write the
--- note that counts them: a flood costs one small edit per trim, not a redraw
--- of the lines kept.
function M.cut_top(v, gone, had_note)
  local rows = 0 -- buffer rows the dropped lines were shown on
  for _, line in ipairs(gone) do
    if matches(v, line) then
      rows = rows + 1
    end
  end
  local wins = followers(v)
  local top = had_note and 1 or 0 -- the note row, when there was one
  vim.api.nvim_buf_clear_namespace(v.buf, ns, 0, top + rows)
  if v.rx then -- filtered: no note row
    set_lines(v, 0, rows, {})
    v.shown = v.shown - rows
  else
    -- nothing shown yet: the buffer's one empty line goes too
    local stop = (v.shown == 0 and not v.ended) and -1 or top + rows
    set_lines(v, 0, stop, { v.note })
    vim.api.nvim_buf_set_extmark(
      v.buf,
      ns,
      0,
      0,
      { end_col = #v.note, hl_group = "SidekickOutputEnd" }
    )
    v.shown = v.shown - top - rows + 1
  end
  scroll(v, wins)
end

--- Say how the task ended (`text`), below its last line.
function M.end_line(v, text)
  v.ended = text
  local wins = followers(v)
  set_lines(v, v.shown, -1, { v.ended })
  mark_end_line(v)
  M.update_winbar(v)
  scroll(v, wins)
end

return M
