-- What the tasks window's keys do (keymaps.tasks_window): open a task's output,
-- halt, rerun, jump to its call, its output to the quickfix list, filter,
-- scope, pages, help. Each acts on the task on the cursor line.
local client = require("sidekick_tools.client")
local constants = require("sidekick_tools.constants")
local format = require("sidekick_tools.format")
local keymaps = require("sidekick_tools.keymaps")

local M = {}

local function window()
  return require("sidekick_tools.consumers.tasks_window")
end

local function need_task()
  local t = window().task_at_cursor()
  if not t then
    vim.notify("sidekick_tools: no task on this line", vim.log.levels.WARN)
  end
  return t
end

-- jump ---------------------------------------------------------------------------------

--- Window to show a chat in: one that shows it already, else the previous
--- window, else a new split above the tasks window.
local function chat_window(buf)
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    if buf and vim.api.nvim_win_get_buf(win) == buf then
      return win
    end
  end
  local prev = vim.fn.win_getid(vim.fn.winnr("#"))
  local cur = vim.api.nvim_get_current_win()
  if prev ~= 0 and prev ~= cur and vim.bo[vim.api.nvim_win_get_buf(prev)].buftype == "" then
    return prev
  end
  vim.cmd("aboveleft split")
  return vim.api.nvim_get_current_win()
end

--- Row (1-based) of the last line of the block whose header is at `row`: its
--- result's closing fence when it has one, else its own.
function M.block_end(buf, row)
  local lines = vim.api.nvim_buf_get_lines(buf, row - 1, -1, false)
  local function closing(from)
    local fence = (lines[from] or ""):match("^(`+)")
    if not fence then
      return from
    end
    for i = from + 1, #lines do
      local run, rest = lines[i]:match("^(`+)(.*)$")
      if run and #run >= #fence and rest:match(constants.closer_rest) then
        return i
      end
    end
    return #lines
  end
  local stop = closing(1)
  if (lines[stop + 1] or ""):match("^`+result%s") then
    stop = closing(stop + 1)
  end
  return row + stop - 1
end

--- Show the block whose header is at `row` in `win`: the header near the top
--- (a line of context above it), as much of the block below it as fits.
function M.show_block(win, row)
  local buf = vim.api.nvim_win_get_buf(win)
  local stop = M.block_end(buf, row)
  local height = vim.api.nvim_win_get_height(win)
  local top = math.max(1, row - 1)
  if stop - top + 1 > height then
    top = row
  end
  vim.api.nvim_win_call(win, function()
    vim.fn.winrestview({ topline = top, lnum = row, col = 0, leftcol = 0 })
  end)
end

--- Row (1-based) of the ```tool header with id=CALL_ID in BUF, or nil.
function M.call_row(buf, call_id)
  for i, line in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if line:match("^`+tool%s") then
      for id in line:gmatch("id=(%S+)") do
        if id == call_id then
          return i
        end
      end
    end
  end
end

--- Open the chat a task came from with the cursor on its tool call.
function M.jump(t)
  t = t or need_task()
  if not t then
    return
  end
  if not t.chat or t.chat == "" then
    vim.notify(
      "sidekick_tools: task " .. t.id .. " was not started from a chat",
      vim.log.levels.WARN
    )
    return
  end
  if require("sidekick_tools.consumers.tasks_window.rows").origin(t) ~= "" then
    vim.notify(
      string.format("sidekick_tools: task %s was started by the MCP client %s", t.id, t.chat),
      vim.log.levels.INFO
    )
    return
  end
  local buf = require("sidekick_tools.chats").buffer_named(t.chat)
  if not buf and vim.fn.filereadable(t.chat) == 0 then
    vim.notify("sidekick_tools: chat " .. t.chat .. " no longer exists", vim.log.levels.WARN)
    return
  end
  local win = chat_window(buf)
  vim.api.nvim_set_current_win(win)
  if buf then
    vim.api.nvim_win_set_buf(win, buf)
  else
    vim.cmd("edit " .. vim.fn.fnameescape(t.chat))
    buf = vim.api.nvim_get_current_buf()
  end
  local row = t.call_id and t.call_id ~= "" and M.call_row(buf, t.call_id)
  if row then
    M.show_block(win, row)
  else
    vim.notify(
      string.format("sidekick_tools: call %s is no longer in %s", t.call_id or "?", t.chat),
      vim.log.levels.WARN
    )
  end
end

-- quickfix -----------------------------------------------------------------------------

local QUICKFIX_BYTES = 1024 * 1024 -- of each log, from its end

--- Run `fn` with the current directory at `dir` (no autocommands), so the
--- relative file names it hands to the quickfix list resolve where the task ran.
local function in_dir(dir, fn)
  if not dir or dir == "" or vim.fn.isdirectory(dir) == 0 then
    return fn()
  end
  local ei = vim.o.eventignore
  vim.o.eventignore = "all"
  local prev = vim.fn.chdir(dir)
  local ok, res = pcall(fn)
  if prev ~= "" then
    vim.fn.chdir(prev)
  end
  vim.o.eventignore = ei
  if not ok then
    error(res, 0)
  end
  return res
end

--- `lines` of task `t`'s output in the quickfix list.
local function show_quickfix(t, lines)
  if #lines == 0 then
    vim.notify("sidekick_tools: task " .. t.id .. " printed nothing", vim.log.levels.WARN)
    return
  end
  local what = require("sidekick_tools.consumers.tasks_window.rows").what_of(t)
  local title = string.format("sidekick task %s", format.end_line(t):sub(7, -2))
  if what ~= "" then
    title = title .. ": " .. what
  end
  in_dir(t.cwd, function()
    vim.fn.setqflist({}, " ", { title = title, lines = lines, efm = vim.o.errorformat })
  end)
  local valid = 0
  for _, item in ipairs(vim.fn.getqflist()) do
    if item.valid == 1 then
      valid = valid + 1
    end
  end
  -- opened from a window that shows a file, so its entries open there, not
  -- in place of this list
  local prev = vim.fn.win_getid(vim.fn.winnr("#"))
  local wins = vim.list_extend({ prev }, vim.api.nvim_tabpage_list_wins(0))
  for _, win in ipairs(wins) do
    if win ~= 0 and vim.bo[vim.api.nvim_win_get_buf(win)].buftype == "" then
      vim.api.nvim_set_current_win(win)
      break
    end
  end
  vim.cmd("botright copen")
  if valid == 0 then
    vim.notify(
      "sidekick_tools: no file:line in task " .. t.id .. "'s output ('errorformat')",
      vim.log.levels.WARN
    )
  end
end

--- The task's output (stdout, then stderr, its secrets masked) in the
--- quickfix list, parsed with 'errorformat', so its file:line entries can be
--- jumped to.
local function quickfix()
  local t = need_task()
  if not t then
    return
  end
  local read_tail = require("sidekick_tools.consumers.output_view.follow").read_tail
  local raws = {}
  for i, path in ipairs({ t.log_path, t.stderr_path }) do
    raws[i] = vim.split(read_tail(path, QUICKFIX_BYTES), "\n", { plain = true })
  end
  client.masked(raws, nil, function(safe)
    if not safe then
      vim.notify(
        "sidekick_tools: no host to mask task " .. t.id .. "'s output",
        vim.log.levels.WARN
      )
      return
    end
    local parse = require("sidekick_tools.consumers.output_view.ansi").parse_line
    local lines = {}
    for _, stream in ipairs(safe) do
      local st = {}
      for _, raw in ipairs(stream) do
        table.insert(lines, (parse(raw, st)))
      end
      if lines[#lines] == "" then
        table.remove(lines)
      end
    end
    show_quickfix(t, lines)
  end)
end

-- help ---------------------------------------------------------------------------------

--- "key  what it does" lines of the configured keys.
function M.help_lines()
  return keymaps.help_lines("tasks_window")
end

local function help()
  local lines = M.help_lines()
  local w = 0
  for _, l in ipairs(lines) do
    w = math.max(w, vim.api.nvim_strwidth(l))
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = "wipe"
  local win = vim.api.nvim_open_win(buf, true, {
    relative = "win",
    win = vim.api.nvim_get_current_win(),
    row = 1,
    col = 2,
    width = w + 2,
    height = #lines,
    style = "minimal",
    border = "rounded",
    title = " sidekick tasks ",
  })
  -- closed by <Esc> and by the keys that close the window and show this help
  local maps = keymaps.of("tasks_window")
  local closers = vim.list_extend({ "<Esc>" }, keymaps.keys(maps.close))
  vim.list_extend(closers, keymaps.keys(maps.help))
  for _, key in ipairs(closers) do
    vim.keymap.set("n", key, function()
      pcall(vim.api.nvim_win_close, win, true)
    end, { buffer = buf, nowait = true })
  end
  vim.api.nvim_create_autocmd("WinLeave", {
    buffer = buf,
    once = true,
    callback = function()
      pcall(vim.api.nvim_win_close, win, true)
    end,
  })
end

-- the actions, by the name of their keymaps option --------------------------------------

--- Status filters, in the order the filter key cycles through them ("" = any).
local FILTERS = { "" }
vim.list_extend(FILTERS, require("sidekick_tools.constants").task_statuses)

---@param v sidekick_tools.TasksView
---@return table<string, fun()>
function M.for_view(v)
  local tw = window()
  local acts = {}

  function acts.output()
    local t = need_task()
    if t then
      require("sidekick_tools.consumers.output_view").open({ token = t.id })
    end
  end

  function acts.halt()
    local t = need_task()
    if not t then
      return
    end
    local res = require("sidekick_tools").halt(t.id)
    if res and res.message then
      vim.notify(res.message, vim.log.levels.INFO)
    end
    tw.refresh()
  end

  function acts.rerun()
    local t = need_task()
    if t then
      require("sidekick_tools").rerun(t.id)
    end
  end

  acts.jump = function()
    M.jump()
  end
  acts.quickfix = quickfix

  function acts.filter()
    local idx = 1
    for i, f in ipairs(FILTERS) do
      if f == v.status then
        idx = i
      end
    end
    v.status = FILTERS[idx % #FILTERS + 1]
    v.offset = 0
    tw.refresh()
  end

  function acts.scope()
    v.all = not v.all
    v.offset = 0
    tw.refresh()
  end

  function acts.next_page()
    local size = tw.page_size(v)
    if v.offset + size < v.total then
      v.offset = v.offset + size
      tw.refresh()
    end
  end

  function acts.prev_page()
    if v.offset > 0 then
      v.offset = math.max(0, v.offset - tw.page_size(v))
      tw.refresh()
    end
  end

  acts.refresh = tw.refresh

  function acts.close()
    local win = vim.fn.bufwinid(v.buf)
    if win ~= -1 then
      if #vim.api.nvim_tabpage_list_wins(0) > 1 then
        vim.api.nvim_win_close(win, true)
      else
        vim.api.nvim_buf_delete(v.buf, { force = true })
      end
    end
  end

  acts.help = help
  return acts
end

return M
