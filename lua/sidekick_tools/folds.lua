-- Thinking blocks fold closed (ui.fold_thinking): a window-local 'foldexpr'
-- on the windows showing a chat, whose only folds are the ```thinking blocks
-- of ASSISTANT messages, found by the chat parser's rules (chat/parser.py): a
-- fence opens at column 0 with 3+ backticks and an info string without one,
-- closes on a line of at least as many backticks; role markers inside a fence
-- are text.
--
-- A window gets the 'foldexpr' only once its chat holds a thinking block (on
-- entering it, or when a reply with thinking is written): a chat without one
-- pays nothing while a reply streams.
--
-- Each buffer's blocks are found by one scan that goes no further than the
-- rows 'foldexpr' asks about, and an edit rewinds it to the edited row only
-- (nvim_buf_attach): a reply streaming at the end of a long chat rescans only
-- its own rows.
local config = require("sidekick_tools.config")
local constants = require("sidekick_tools.constants")

local M = {}

local BACKTICK = 96
local CHUNK = 1000 -- rows read per nvim_buf_get_lines while scanning

M.EXPR = "v:lua.require'sidekick_tools.folds'.expr()"
M.TEXT = "v:lua.require'sidekick_tools.folds'.text()"

---@class sidekick_tools.Fence
---@field open integer 0-based row of the opening fence
---@field close integer|nil 0-based row of the closing fence; nil while open
---@field len integer backticks of the opening fence
---@field thinking boolean a thinking block of an ASSISTANT message

---@class sidekick_tools.FoldScan
---@field scanned integer rows [0, scanned) are scanned
---@field fences sidekick_tools.Fence[] every fenced block, in order
---@field roles { row: integer, role: string }[] role markers outside fences, in order
---@field dirty integer|nil lowest row changed since the scan went past it

local scans = {} ---@type table<integer, sidekick_tools.FoldScan>

local function fresh()
  return { scanned = 0, fences = {}, roles = {} }
end

local ROLES = { S = "SYSTEM:", U = "USER:", A = "ASSISTANT:" }

--- The role a line starting a message names, or nil.
local function role_of(line)
  local marker = ROLES[line:sub(1, 1)]
  if marker and line:sub(1, #marker) == marker then
    return marker:sub(1, -2)
  end
end

--- Count of the backticks starting `line`.
local function backticks(line)
  local n = 0
  while line:byte(n + 1) == BACKTICK do
    n = n + 1
  end
  return n
end

--- Forget what the scan found at `row` and after: the scan resumes there.
local function rewind(scan, row)
  if row >= scan.scanned then
    return
  end
  local fences, roles = scan.fences, scan.roles
  while #roles > 0 and roles[#roles].row >= row do
    table.remove(roles)
  end
  while #fences > 0 and fences[#fences].open >= row do
    table.remove(fences)
  end
  local last = fences[#fences]
  if last and last.close and last.close >= row then
    last.close = nil -- open again: its closing row is to be found anew
  end
  scan.scanned = row
end

-- first bytes of the role markers (ROLES' keys)
local MAY_START =
  { [string.byte("S")] = true, [string.byte("U")] = true, [string.byte("A")] = true }

-- first bytes of the role markers (ROLES' keys)
local MAY_START =
  { [string.byte("S")] = true, [string.byte("U")] = true, [string.byte("A")] = true }

--- Move `st` ({ len, thinking, role }: where `line` stands) to where the row
--- after `line` stands, and say what `line` did: "open", "close", "role" or
--- nil. The one statement of which lines open and close fences and start
--- messages (scan_to, pairs_anew).
local function step(st, line)
  if line:byte(1) == BACKTICK then
    local n = backticks(line)
    if st.len > 0 then
      if n >= st.len and line:sub(n + 1):match(constants.closer_rest) then
        st.len, st.thinking = 0, false
        return "close"
      end
    elseif n >= 3 and not line:find("`", n + 1, true) then
      local word = line:sub(n + 1):match("^%s*(%S+)")
      st.len, st.thinking = n, word == "thinking" and st.role == "ASSISTANT"
      return "open"
    end
  elseif st.len == 0 then
    local r = role_of(line)
    if r then
      st.role = r
      return "role"
    end
  end
end

--- Scan `buf` up to and including row `upto` (0-based).
local function scan_to(buf, scan, upto)
  if scan.scanned > upto then
    return
  end
  local total = vim.api.nvim_buf_line_count(buf)
  local fences, roles = scan.fences, scan.roles
  local last = fences[#fences]
  local open = last and last.close == nil and last or nil
  local st = {
    len = open and open.len or 0,
    thinking = open and open.thinking or false,
    role = roles[#roles] and roles[#roles].role,
  }
  while scan.scanned <= upto and scan.scanned < total do
    local from = scan.scanned
    local to = math.min(total, math.max(upto + 1, from + CHUNK))
    local lines = vim.api.nvim_buf_get_lines(buf, from, to, false)
    for i, line in ipairs(lines) do
      -- most lines can change nothing: only a backtick, or a role's letter
      -- outside a fence, is worth a call (a whole chat is scanned after an
      -- edit at its top)
      local b = line:byte(1)
      local did = (b == BACKTICK or (st.len == 0 and MAY_START[b])) and step(st, line)
      if did == "open" then
        open = { open = from + i - 1, len = st.len, thinking = st.thinking }
        table.insert(fences, open)
      elseif did == "close" then
        open.close = from + i - 1
        open = nil
      elseif did == "role" then
        table.insert(roles, { row = from + i - 1, role = st.role })
      end
    end
    scan.scanned = from + #lines
  end
end

--- Where row `row` stands in the scan (rows before it scanned): the fence it
--- is in ({ len, thinking }, or nil) and the role of its message.
local function state_at(scan, row)
  local fence, role
  for i = #scan.fences, 1, -1 do
    local f = scan.fences[i]
    if f.open < row then
      if f.close == nil or f.close >= row then
        fence = f
      end
      break
    end
  end
  for i = #scan.roles, 1, -1 do
    if scan.roles[i].row < row then
      role = scan.roles[i].role
      break
    end
  end
  return {
    len = fence and fence.len or 0,
    thinking = fence and fence.thinking or false,
    role = role,
  }
end

--- Did an edit of rows [first, last_old) (now [first, last_new)) leave the rows
--- below it standing elsewhere (in another fence, or none, or another role)?
--- Then the fences below pair anew, and Neovim, which evaluates 'foldexpr'
--- again only near the edit, keeps folds that are no longer there. A block
--- written whole (a result) leaves them where they stood.
local function pairs_anew(buf, scan, first, last_old, last_new)
  if scan.scanned <= first or last_new >= vim.api.nvim_buf_line_count(buf) then
    return false -- nothing below (a reply streaming at the end), or none scanned
  end
  if scan.scanned < last_old or (scan.dirty and scan.dirty < last_old) then
    return true -- what stood there is not known: say it changed
  end
  local before = state_at(scan, last_old)
  local st = state_at(scan, first)
  for _, line in ipairs(vim.api.nvim_buf_get_lines(buf, first, last_new, false)) do
    step(st, line)
  end
  return st.len ~= before.len or st.thinking ~= before.thinking or st.role ~= before.role
end

local THINKING_LINE = [[^```\+\s*thinking\>]]

--- Is there a line below row `from` (0-based) of the buffer `win` shows that
--- may open a thinking block? (A search in C; the cursor and view are kept.)
local function thinking_below(win, from)
  return vim.api.nvim_win_call(win, function()
    local view = vim.fn.winsaveview()
    local rows = vim.api.nvim_buf_line_count(0)
    vim.api.nvim_win_set_cursor(0, { math.min(from + 1, rows), 0 })
    local found = vim.fn.search(THINKING_LINE, "nWc") > 0
    vim.fn.winrestview(view)
    return found
  end)
end

--- The folds of the windows showing `buf`, evaluated again on every row, when
--- a thinking block may stand below the edits (from row `from` on): Neovim
--- evaluates 'foldexpr' again only near the rows an edit changed, and a fence
--- line edited pairs the fences below anew (a thinking fold kept closed over
--- what had become a call). Every row costs: with no thinking below (a block
--- appended, a fence edited under the chat's only thinking), none is
--- evaluated. Folds the user opened stay open.
local function refresh(buf)
  local scan = scans[buf]
  local from = scan and scan.refresh_from or 0
  if scan then
    scan.refresh, scan.refresh_from = nil, nil
  end
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    if vim.wo[win].foldexpr == M.EXPR and thinking_below(win, from) then
      vim.api.nvim_win_call(win, function()
        vim.opt_local.foldexpr = M.EXPR
      end)
    end
  end
end

--- The scan of `buf`, following its edits from now on.
local function scan_of(buf)
  local scan = scans[buf]
  if scan then
    return scan
  end
  scan = fresh()
  scans[buf] = scan
  vim.api.nvim_buf_attach(buf, false, {
    on_lines = function(_, b, _, first, last_old, last_new)
      local s = scans[b]
      if not s then
        return true -- no longer followed: detach
      end
      if pairs_anew(b, s, first, last_old, last_new) then
        -- the thinking that matters is below the edit: its own rows Neovim
        -- evaluates (a reply streaming its thinking costs no refresh)
        s.refresh_from = math.min(s.refresh_from or last_new, last_new)
        if not s.refresh then
          s.refresh = true
          vim.schedule(function()
            refresh(b)
          end)
        end
      end
      s.dirty = math.min(s.dirty or first, first)
    end,
    on_reload = function(_, b)
      if scans[b] then
        scans[b] = fresh()
      end
    end,
    on_detach = function(_, b)
      scans[b] = nil
    end,
  })
  return scan
end

--- The thinking block holding row `row` (0-based) of `buf`, or nil.
---@return sidekick_tools.Fence|nil
function M.block_at(buf, row)
  local scan = scan_of(buf)
  if scan.dirty then
    rewind(scan, scan.dirty)
    scan.dirty = nil
  end
  scan_to(buf, scan, row)
  -- the last fence opened at or before `row`
  local fences = scan.fences
  local lo, hi = 1, #fences
  local found
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    if fences[mid].open <= row then
      found, lo = fences[mid], mid + 1
    else
      hi = mid - 1
    end
  end
  if found and found.thinking and (found.close == nil or found.close >= row) then
    return found
  end
end

--- 'foldexpr' of a chat window: level 1 on a thinking block, a new fold at
--- each block's first row, 0 elsewhere. Absolute levels: a line's level never
--- depends on the one above, so an edit re-evaluates only the rows it changed.
function M.expr()
  local row = vim.v.lnum - 1
  local block = M.block_at(vim.api.nvim_get_current_buf(), row)
  if not block then
    return "0"
  end
  return block.open == row and ">1" or "1"
end

--- 'foldtext' of a chat window: what is folded, never the signature.
function M.text()
  local first = vim.fn.getline(vim.v.foldstart)
  local rows = vim.v.foldend - vim.v.foldstart - 1
  if first:match("^`+%s*thinking%s.*redacted=") then
    return "▸ thinking (redacted)"
  end
  return string.format("▸ thinking (%d line%s)", rows, rows == 1 and "" or "s")
end

local OPTIONS = { "foldmethod", "foldexpr", "foldtext", "foldlevel" }

local THINKING_FENCE = [[^```\+\s*thinking\>]]

--- Does `buf` hold a thinking block? (A search in C: cheap on a long chat.)
function M.has_thinking(buf)
  return vim.api.nvim_buf_call(buf, function()
    return vim.fn.search(THINKING_FENCE, "nw") > 0
  end)
end

--- A reply was written into `buf`: when it holds thinking, the windows showing
--- `buf` fold it (a chat without thinking gets no 'foldexpr' until then).
---@param lines string[] the reply's lines
function M.reply_written(buf, lines)
  if not (config.current.ui or {}).fold_thinking then
    return
  end
  for _, line in ipairs(lines) do
    if line:match("^```+%s*thinking") then
      for _, win in ipairs(vim.fn.win_findbuf(buf)) do
        M.apply(win, buf)
      end
      return
    end
  end
end

--- Window `win` shows chat `buf`: with ui.fold_thinking, its thinking blocks
--- fold, closed. Only this buffer in this window is changed (as :setlocal).
function M.apply(win, buf)
  if not (vim.api.nvim_win_is_valid(win) and vim.api.nvim_win_get_buf(win) == buf) then
    return
  end
  local ui = config.current.ui or {}
  local ours = vim.wo[win].foldexpr == M.EXPR
  if ui.fold_thinking then
    if ours then
      return -- set already: folds the user opened (zR, a foldlevel) stay open
    end
    if not M.has_thinking(buf) then
      return -- nothing to fold: 'foldexpr' would cost a streaming reply for nothing
    end
    scan_of(buf)
    vim.api.nvim_win_call(win, function()
      local wo = vim.opt_local -- :setlocal: this buffer in this window
      wo.foldmethod = "expr"
      wo.foldexpr = M.EXPR
      wo.foldtext = M.TEXT
      wo.foldlevel = 0
    end)
  elseif ours then
    -- turned off: the window takes the global fold settings back, and the
    -- folds made here do not stay behind as manual ones
    vim.api.nvim_win_call(win, function()
      vim.cmd("setlocal " .. table.concat(OPTIONS, "< ") .. "<")
      if vim.wo.foldmethod == "manual" then
        vim.cmd("normal! zE")
      end
    end)
    scans[buf] = nil
  end
end

--- setup() ran (again): every window showing a chat follows ui.fold_thinking.
function M.apply_to_open_chats()
  local chats = require("sidekick_tools.chats")
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    local buf = vim.api.nvim_win_get_buf(win)
    if chats.is_chat(buf) then
      M.apply(win, buf)
    end
  end
end

return M
