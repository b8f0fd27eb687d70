-- The rows of a streaming reply as three versions: as the host left them (the
-- base), as the buffer has them (the user's changes on the base) and as the
-- reply ended. Pure functions on lists of lines; reply_region.lua uses them.
local M = {}

local diff = vim.text and vim.text.diff or vim.diff

--- Apply one streamed edit { start_row, start_col, end_row, end_col, lines }
--- (what nvim_buf_set_text does) to `rows`, in place. A reply grows at its
--- end: only the rows from the edit's first one are moved.
---@param rows string[]
---@param e table
function M.apply(rows, e)
  local first, last, new = e[1] + 1, e[3] + 1, e[5]
  local head = (rows[first] or ""):sub(1, e[2])
  local tail = (rows[last] or ""):sub(e[4] + 1)
  local after = {}
  for i = last + 1, #rows do
    after[#after + 1] = rows[i]
  end
  for i = #rows, first, -1 do
    rows[i] = nil
  end
  for i, line in ipairs(new) do
    rows[#rows + 1] = (i == 1 and head or "") .. line .. (i == #new and tail or "")
  end
  if #new == 0 then
    rows[#rows + 1] = head .. tail
  end
  vim.list_extend(rows, after)
end

-- The changes from `a` to `b` as { from, to, rows }: rows [from, to) of `a`
-- (0-based, `to` exclusive; from == to inserts there) become `rows`. Nil for
-- rows that a line-based diff cannot take: a line holding "\n" (how the host
-- gives a NUL, which the buffer then holds as "\0").
local function hunks(a, b)
  for _, list in ipairs({ a, b }) do
    for _, line in ipairs(list) do
      if line:find("\n", 1, true) then
        return nil
      end
    end
  end
  local found = diff(
    #a > 0 and table.concat(a, "\n") .. "\n" or "",
    #b > 0 and table.concat(b, "\n") .. "\n" or "",
    { result_type = "indices" }
  )
  local out = {}
  for _, h in ipairs(found) do
    local from = h[2] == 0 and h[1] or h[1] - 1
    local at = h[4] == 0 and h[3] or h[3] - 1
    out[#out + 1] = { from = from, to = from + h[2], rows = vim.list_slice(b, at + 1, at + h[4]) }
  end
  return out
end

--- The changes that make `a` into `b`, each { from, to, rows } on `a`'s rows.
---@return table[]
function M.changes(a, b)
  if vim.deep_equal(a, b) then
    return {} -- the end of most replies: nothing to write
  end
  return hunks(a, b) or { { from = 0, to = #a, rows = b } }
end

-- Whether two changes touch the same rows of the base. A change that inserts
-- touches the rows on both sides of where it inserts: its place among the
-- other's rows would be a guess.
local function overlap(x, y)
  if x.from == x.to or y.from == y.to then
    return x.from <= y.to and y.from <= x.to
  end
  return x.from < y.to and y.from < x.to
end

--- `text` with its blanks made single spaces and trimmed: what wrapping it
--- anew (`:%!fmt`) leaves as it was.
function M.words(text)
  return vim.trim((text:gsub("%s+", " ")))
end

-- Whether `text` is `from` with characters taken away (blanks aside): an
-- undo of the reply's last step, `x` in a word, a word deleted.
local function only_taken_away(from, text)
  local had, left = from:gsub("%s+", ""), text:gsub("%s+", "")
  local at = 1
  for i = 1, #left do
    at = had:find(left:sub(i, i), at, true)
    if not at then
      return false
    end
    at = at + 1
  end
  return true
end

--- Whether the user's changes in `ours` to `base` bring text of their own:
--- not only blanks changed, rows or characters taken away (what writing the
--- reply over them would lose).
---@return boolean
function M.adds_words(base, ours)
  local found = hunks(base, ours)
  if not found then
    return true
  end
  for _, h in ipairs(found) do
    local before = table.concat(vim.list_slice(base, h.from + 1, h.to), "\n")
    if not only_taken_away(before, table.concat(h.rows, "\n")) then
      return true
    end
  end
  return false
end

--- `theirs` (the reply as it ended) with the user's changes in `ours` (the
--- buffer's rows of the reply) to `base` (the rows as the host left them)
--- kept. Nil when they cannot both be kept:
--- - the user took away rows of the reply (an undo or `:e!` takes the reply
---   away: it is written again elsewhere, never merged into what is left);
--- - the user changed rows that the reply went on writing, beyond their
---   blanks (a formatter that stripped a trailing blank from the line being
---   written is not a change of the user's: that line is the reply's).
---@return string[]|nil
function M.three_way(base, ours, theirs)
  if vim.deep_equal(base, ours) then
    return theirs
  end
  local mine, reply = hunks(base, ours), hunks(base, theirs)
  if not mine or not reply then
    return nil
  end
  local kept = {}
  for _, h in ipairs(mine) do
    if h.to - h.from > #h.rows then
      return nil
    end
    local clash = false
    for _, r in ipairs(reply) do
      clash = clash or overlap(h, r)
    end
    if not clash then
      kept[#kept + 1] = h
    elseif
      M.words(table.concat(base, " ", h.from + 1, h.to)) ~= M.words(table.concat(h.rows, " "))
    then
      return nil
    end
  end
  local all = vim.list_extend(kept, reply)
  table.sort(all, function(x, y)
    return x.from < y.from
  end)
  local out, at = {}, 0
  for _, h in ipairs(all) do
    vim.list_extend(out, base, at + 1, h.from)
    vim.list_extend(out, h.rows)
    at = h.to
  end
  return vim.list_extend(out, base, at + 1, #base)
end

return M
