-- A reply streaming into a chat is a region of rows, from its ASSISTANT: line,
-- kept by an extmark range that grows with what is appended at its end. The
-- host sends edits relative to the region's first row. A region whose mark a
-- whole-buffer rewrite swept away is found again by its first row; an edit
-- that still finds the region not as the host left it (the user edited inside
-- the reply) is dropped. When the reply ends, what the user changed in its
-- rows is merged with the rest of the reply (reply_merge.lua).
local constants = require("sidekick_tools.constants")
local merge = require("sidekick_tools.reply_merge")
local undo = require("sidekick_tools.undo")

local M = {}

M.ns = vim.api.nvim_create_namespace("sidekick_tools_reply")
local desynced = {} ---@type table<integer, boolean> reply mark -> edits dropped
-- What each reply's region held after its last edit: its first row (the
-- ASSISTANT: line) and its number of rows. A command that replaces every line
-- (`:%!fmt`, what a formatter does) leaves no extmark where it was; these find
-- the reply again.
local known = {} ---@type table<integer, { header: string, rows: integer }>
-- Each reply's rows as the host left them: every edit that reached the buffer
-- applied to a copy. The first dropped edit freezes it: the user's changes
-- are what differs from it when the reply ends.
local shadow = {} ---@type table<integer, string[]>

--- First and last row of reply `mark`, or nil when it is gone.
---@return integer|nil, integer|nil
function M.rows(buf, mark)
  if not vim.api.nvim_buf_is_valid(buf) then
    return nil
  end
  local pos = vim.api.nvim_buf_get_extmark_by_id(buf, M.ns, mark, { details = true })
  if not pos[1] or not pos[3] or pos[3].end_row == nil then
    return nil
  end
  return pos[1], pos[3].end_row
end

-- Each buffer's changedtick after the reply's last edit in it: the next edit
-- joins that undo step only while nothing else changed the buffer since.
local edited_at = {} ---@type table<integer, integer>

-- Edit buf with 'modifiable' on, the reply one undo step. An undo step never
-- holds both the reply and the user's changes: typed while the reply streams,
-- those are steps of their own (the reply's edits after them another), so that
-- `u` takes back either, never the reply with the typing.
local function edit(buf, fn, ...)
  local modifiable = vim.bo[buf].modifiable
  vim.bo[buf].modifiable = true
  local current = vim.api.nvim_get_current_buf() == buf
  local ok = undo.apart(buf, function(...)
    if current and edited_at[buf] == vim.api.nvim_buf_get_changedtick(buf) then
      pcall(vim.cmd.undojoin)
    end
    return pcall(fn, ...)
  end, ...)
  vim.bo[buf].modifiable = modifiable
  edited_at[buf] = vim.api.nvim_buf_get_changedtick(buf)
  return ok
end

local ROLE = { "^USER:", "^ASSISTANT:", "^SYSTEM:" }

local function starts_message(line)
  for _, pattern in ipairs(ROLE) do
    if line:match(pattern) then
      return true
    end
  end
  return false
end

-- Whether a message starts in rows [first, last): read a few rows at a time, so
-- a cursor far above the reply costs what it takes to find the next message,
-- not a copy of every row in between.
local function message_between(buf, first, last)
  local step = 64
  for from = first, last - 1, step do
    for _, line in ipairs(vim.api.nvim_buf_get_lines(buf, from, math.min(from + step, last), false)) do
      if starts_message(line) then
        return true
      end
    end
  end
  return false
end

-- A window whose cursor is in the message just sent (no other message between
-- it and the reply) moves to the empty USER: line below the reply: the window
-- follows the reply as it streams, and the next message is typed there. A
-- cursor elsewhere, or the user typing in the current window, stays put.
local function follow(buf, row)
  local last = vim.api.nvim_buf_line_count(buf) - 1
  local current = vim.api.nvim_get_current_win()
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    local cur = vim.api.nvim_win_get_cursor(win)[1] - 1
    local idle = win ~= current or vim.api.nvim_get_mode().mode == "n"
    if idle and cur <= row and cur < last then
      if not message_between(buf, cur + 1, row) then
        local text = vim.api.nvim_buf_get_lines(buf, last, last + 1, false)[1] or ""
        vim.api.nvim_win_set_cursor(win, { last + 1, #text })
      end
    end
  end
end

-- Put reply `mark`'s region on rows [first, last].
local function place(buf, mark, first, last)
  local line = vim.api.nvim_buf_get_lines(buf, last, last + 1, false)[1] or ""
  vim.api.nvim_buf_set_extmark(buf, M.ns, first, 0, {
    id = mark,
    end_row = last,
    end_col = #line,
    right_gravity = false,
    end_right_gravity = true,
    undo_restore = false,
  })
end

-- Remember what the region of `mark` now holds.
local function note_region(buf, mark)
  local first, last = M.rows(buf, mark)
  if first then
    local header = vim.api.nvim_buf_get_lines(buf, first, first + 1, false)[1] or ""
    known[mark] = { header = header, rows = last - first + 1 }
  end
end

--- The rows (1-based) of `all` that start a message: a role line outside
--- any code fence (a reply may quote "ASSISTANT: ..." inside one).
local function message_starts(all)
  local starts, fence = {}, nil
  for i, line in ipairs(all) do
    if fence then
      if line:sub(1, #fence) == fence and line:match("^`*(.*)$"):match(constants.closer_rest) then
        fence = nil
      end
    elseif line:match("^```") and not line:find("`", #line:match("^(`+)") + 1, true) then
      fence = line:match("^(`+)") -- (an info string with a backtick opens none)
    elseif starts_message(line) then
      table.insert(starts, i)
    end
  end
  return starts
end

--- Find reply `mark` again after a rewrite of every line (`:%!cat`, a
--- formatter), which leaves its mark on the first row: the last message that
--- starts with the line its region started with, whose rows, as many as the
--- region had, hold no other message, becomes its region. Nothing else moves
--- a region (an undo that took its rows away must not make an earlier message
--- reading alike its place). False when it is not found.
local function relocate(buf, mark)
  local k = known[mark]
  local first = M.rows(buf, mark)
  if not k or first ~= 0 or not k.header:match("^ASSISTANT:") then
    return false
  end
  local all = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  if all[1] == k.header then
    return false -- it starts where it should: what differs is the user's edit
  end
  local starts = message_starts(all)
  for n = #starts, 1, -1 do
    local row = starts[n]
    if all[row] == k.header then
      local after = starts[n + 1]
      if row + k.rows - 1 <= #all and (after == nil or after > row + k.rows - 1) then
        place(buf, mark, row - 1, row + k.rows - 2)
        return true
      end
      return false
    end
  end
  return false
end

-- How far down a region's ASSISTANT: line is looked for when its first row
-- is no longer it.
local SLIP_ROWS = 16

--- Lines opened above the reply's ASSISTANT: line (`O` on it) land inside its
--- region, whose mark stays at the start of the row it was on. The region
--- starts again at its ASSISTANT: line when that line, as the host left it,
--- is a little further down (rows of the reply may have been deleted too).
local function slipped(buf, mark)
  local k = known[mark]
  local first, last = M.rows(buf, mark)
  if not k or not first or last == first then
    return false
  end
  local top = vim.api.nvim_buf_get_lines(buf, first, math.min(last, first + SLIP_ROWS) + 1, false)
  if top[1] == k.header then
    return false
  end
  for i = 2, #top do
    if top[i] == k.header then
      -- no further than the rows the region had: a whole buffer set anew
      -- (a Lua formatter) leaves its end on the buffer's last row
      place(buf, mark, first + i - 1, math.min(last, first + i - 2 + k.rows))
      return true
    end
  end
  return false
end

function M.open(buf, mark, row)
  vim.bo[buf].modeline = false -- what the model writes must not act on the editor
  -- the send has just written the ASSISTANT: line: the reply's text joins that step
  edited_at[buf] = vim.api.nvim_buf_get_changedtick(buf)
  place(buf, mark, row, row)
  desynced[mark] = nil
  shadow[mark] = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)
  note_region(buf, mark)
  follow(buf, row)
end

-- Whether the region of `mark` is as the host left it: `rows` rows, `expect`
-- on row `at` of it, and the rows after it up to `to` (an edit over several
-- rows: a fence that grew) as the copy of the host's rows has them.
local function as_left(buf, mark, at, expect, rows, to)
  local first, last = M.rows(buf, mark)
  if first == nil or last - first + 1 ~= rows then
    return nil
  end
  local held = vim.api.nvim_buf_get_lines(buf, first + at, first + math.max(at, to) + 1, false)
  if held[1] ~= expect then
    return nil
  end
  local copy = shadow[mark]
  for i = 2, copy and #held or 0 do
    if held[i] ~= copy[at + i] then
      return nil
    end
  end
  return first
end

--- One streamed edit { start_row, start_col, end_row, end_col, lines } relative
--- to the region; `expect` is what its first row held, `rows` the region's size.
function M.edit(buf, mark, e, expect, rows)
  if desynced[mark] then
    return
  end
  local first = as_left(buf, mark, e[1], expect, rows, e[3])
  if not first and (relocate(buf, mark) or slipped(buf, mark)) then
    first = as_left(buf, mark, e[1], expect, rows, e[3])
  end
  local ok = first ~= nil
    and edit(buf, vim.api.nvim_buf_set_text, buf, first + e[1], e[2], first + e[3], e[4], e[5])
  if ok then
    if shadow[mark] then
      merge.apply(shadow[mark], e)
    end
    if e[1] == 0 or known[mark] == nil then
      note_region(buf, mark)
    else
      known[mark].rows = rows + #e[5] - 1 - (e[3] - e[1])
    end
  else
    desynced[mark] = true
    -- nothing more shows until the reply ends: say so once
    vim.notify(
      "sidekick_tools: the reply's lines changed while it streams; "
        .. "the rest of it is written when it ends",
      vim.log.levels.INFO
    )
  end
end

-- The reply goes at the end of the chat (its region lost its rows, or what
-- the user wrote in them stays), as a send opens it: in place of an empty last
-- USER: message, or after a blank line, with an empty USER: line below; the
-- region is set again over it.
local function place_at_end(buf, mark, lines)
  local n = vim.api.nvim_buf_line_count(buf)
  local row = n - 1
  while
    row >= 0 and (vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ""):match("^%s*$")
  do
    row = row - 1
  end
  local at, pad = n, {}
  local line = row >= 0 and vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ""
  if row >= 0 and line:match("^USER:%s*$") then
    at = row
  elseif n > 0 and (vim.api.nvim_buf_get_lines(buf, n - 1, n, false)[1] or "") ~= "" then
    pad = { "" }
  elseif n == 1 then
    at = 0 -- an empty buffer's one empty line
  end
  local new = vim.list_extend(vim.list_extend(vim.deepcopy(pad), lines), { "", "USER: " })
  if not edit(buf, vim.api.nvim_buf_set_lines, buf, at, n, false, new) then
    return
  end
  local first = at + #pad
  place(buf, mark, first, first + #lines - 1)
end

--- The rows of a reply that a rewrite of the whole buffer changed (`:%!fmt`
--- wraps it anew): the last ASSISTANT: message, if its words so far begin the
--- words of `lines` (an earlier message is never taken for it). Its first and
--- last row, or nil.
local function rewritten(buf, lines)
  local whole = merge.words(table.concat(lines, "\n"))
  local all = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  local starts = message_starts(all)
  for n = #starts, 1, -1 do
    local i = starts[n]
    if all[i]:match("^ASSISTANT:") then
      local last = (starts[n + 1] or (#all + 1)) - 1
      while last > i and all[last]:match("^%s*$") do
        last = last - 1
      end
      local said = merge.words(table.concat(all, "\n", i, last))
      if vim.startswith(whole, said) then
        return i - 1, last - 1
      end
      return nil
    end
  end
end

--- The reply ended: its region becomes `lines`, with what the user changed in
--- it while it streamed kept. False when the region is gone.
function M.close(buf, mark, lines)
  local k, base = known[mark], shadow[mark]
  local _ = relocate(buf, mark) or slipped(buf, mark)
  local first, last = M.rows(buf, mark)
  desynced[mark] = nil
  known[mark] = nil
  shadow[mark] = nil
  if not first then
    return false
  end
  local current = vim.api.nvim_buf_get_lines(buf, first, last + 1, false)
  -- A rewrite of every line left the region's mark on the first row alone.
  local swept = #current == 1 and k ~= nil and k.rows > 1 and current[1] ~= k.header
  -- The user's changes to the rows the reply had written (a word typed, a row
  -- of their own, its ASSISTANT: line edited) stay; the rest of the reply is
  -- written around them.
  local merged = not swept and base and merge.three_way(base, current, lines)
  if merged then
    local changes = merge.changes(current, merged)
    if #changes > 0 then
      edit(buf, function()
        for i = #changes, 1, -1 do
          local c = changes[i]
          vim.api.nvim_buf_set_lines(buf, first + c.from, first + c.to, false, c.rows)
        end
      end)
      place(buf, mark, first, first + #merged - 1)
    end
    lines = merged
  elseif swept or not (current[1] or ""):match("^ASSISTANT:") then
    -- The region lost its place: an undo or `:e!` took its rows away, or a
    -- rewrite of every line swept its mark. What is there is the user's: the
    -- reply is written where the rewrite put it (only then: after an undo the
    -- last ASSISTANT: message is an earlier reply), else at the end of the chat.
    local from, to
    if first == 0 then
      from, to = rewritten(buf, lines)
    end
    if from then
      edit(buf, vim.api.nvim_buf_set_lines, buf, from, to + 1, false, lines)
      place(buf, mark, from, from + #lines - 1)
    else
      place_at_end(buf, mark, lines)
    end
  elseif base and merge.adds_words(base, current) then
    -- Words of the user's where the reply went on writing: they stay as they
    -- are, and the reply is written whole below.
    place_at_end(buf, mark, lines)
  elseif not vim.deep_equal(current, lines) then
    -- Only blanks changed, or rows taken away: the reply is written over them.
    edit(buf, vim.api.nvim_buf_set_lines, buf, first, last + 1, false, lines)
  end
  require("sidekick_tools.folds").reply_written(buf, lines)
  return true
end

return M
