-- :SidekickTasks: one page of the task history in a scratch window, kept live
-- by the client's task events while it is open. Only the page shown is ever
-- asked of the host, so it opens as fast over 10,000 stored tasks as over ten.
local client = require("sidekick_tools.client")
local constants = require("sidekick_tools.constants")
local rows = require("sidekick_tools.consumers.tasks_window.rows")

local M = {}

local ns = vim.api.nvim_create_namespace("sidekick_tools_tasks")
local uv = vim.uv or vim.loop

local HEADER = rows.HEADER

---@class sidekick_tools.TasksView
---@field buf integer
---@field win integer
---@field status string "" or one status
---@field all boolean every Neovim's tasks
---@field offset integer
---@field rows table[] tasks on the page shown
---@field total integer
---@field timer uv.uv_timer_t|nil elapsed-time ticks
---@field refresh_timer uv.uv_timer_t|nil debounced reload
---@field unsubscribe fun()[] the client subscriptions of the open view
---@field render_pending boolean

---@type sidekick_tools.TasksView|nil
local view = nil

local function valid(v)
  return v and vim.api.nvim_buf_is_valid(v.buf)
end

local function visible(v)
  return valid(v) and vim.fn.bufwinid(v.buf) ~= -1
end

local function stop_timer(t)
  if t and not t:is_closing() then
    t:stop()
    t:close()
  end
end

--- Tasks per page: the option, or what the window shows (at most 100).
function M.page_size(v)
  local opt = require("sidekick_tools.config").current.tasks_window
  if opt.page_size > 0 then
    return math.floor(opt.page_size)
  end
  local height = 20
  local win = v and vim.fn.bufwinid(v.buf) or -1
  if win ~= -1 then
    height = vim.api.nvim_win_get_height(win)
  end
  return math.max(5, math.min(100, height - HEADER))
end

local function any_running(v)
  for _, t in ipairs(v.rows) do
    if t.status == "running" then
      return true
    end
  end
  return false
end

local render, schedule_refresh

--- Every Neovim's tasks (and MCP clients') change without events reaching this
--- Neovim: that view reloads its page each second; the others redraw the times.
local function ticking(v)
  return visible(v) and (any_running(v) or v.all)
end

local function tick()
  if not ticking(view) then
    if view then
      stop_timer(view.timer)
      view.timer = nil
    end
    return
  end
  if view.all then
    schedule_refresh(view)
  else
    render(view)
  end
end

local function ensure_timer(v)
  if ticking(v) then
    if not v.timer then
      v.timer = uv.new_timer()
      v.timer:start(1000, 1000, vim.schedule_wrap(tick))
    end
  elseif v.timer then
    stop_timer(v.timer)
    v.timer = nil
  end
end

render = function(v)
  if not valid(v) then
    return
  end
  local lines, hls = rows.lines(v, M.page_size(v))
  vim.bo[v.buf].modifiable = true
  vim.api.nvim_buf_set_lines(v.buf, 0, -1, false, lines)
  vim.bo[v.buf].modifiable = false
  vim.api.nvim_buf_clear_namespace(v.buf, ns, 0, -1)
  for _, h in ipairs(hls) do
    local line = lines[h[1] + 1] or ""
    vim.api.nvim_buf_set_extmark(v.buf, ns, h[1], h[2], {
      end_col = h[3] == -1 and #line or h[3],
      hl_group = h[4],
    })
  end
  ensure_timer(v)
end

local function cursor_token(v)
  local win = vim.fn.bufwinid(v.buf)
  if win == -1 then
    return nil
  end
  local t = v.rows[vim.api.nvim_win_get_cursor(win)[1] - HEADER]
  return t and t.id or nil
end

local function place_cursor(v, token)
  local win = vim.fn.bufwinid(v.buf)
  if win == -1 then
    return
  end
  local row = HEADER + 1
  for i, t in ipairs(v.rows) do
    if t.id == token then
      row = HEADER + i
    end
  end
  row = math.min(row, vim.api.nvim_buf_line_count(v.buf))
  vim.api.nvim_win_set_cursor(win, { row, 0 })
end

--- Ask for the page shown and redraw. Keeps the cursor on its task.
function M.refresh()
  local v = view
  if not valid(v) then
    return
  end
  local keep = cursor_token(v)
  local size = M.page_size(v)
  local opts = { limit = size, offset = v.offset }
  if v.all then
    opts.owner = "any"
  else
    opts.chats = require("sidekick_tools.chats").names()
  end
  if v.status ~= "" then
    opts.status = v.status
  end
  local page = client.task_page(opts)
  if v.offset > 0 and #page.tasks == 0 and page.total > 0 then
    v.offset = math.max(0, math.floor((page.total - 1) / size) * size)
    opts.offset = v.offset
    page = client.task_page(opts)
  end
  v.rows = page.tasks
  v.total = page.total
  render(v)
  place_cursor(v, keep)
end

schedule_refresh = function(v)
  if v.refresh_timer then
    return
  end
  v.refresh_timer = uv.new_timer()
  v.refresh_timer:start(
    100,
    0,
    vim.schedule_wrap(function()
      stop_timer(v.refresh_timer)
      v.refresh_timer = nil
      if view == v and valid(v) then
        local ok, err = pcall(M.refresh)
        if not ok then
          vim.notify(tostring(err), vim.log.levels.ERROR)
        end
      end
    end)
  )
end

local function schedule_render(v)
  if v.render_pending then
    return
  end
  v.render_pending = true
  vim.schedule(function()
    v.render_pending = false
    if view == v then
      render(v) -- checks the buffer is still there
    end
  end)
end

--- A task event: update its row in place, or reload the page when the event
--- changes which tasks the page holds.
local function on_task(v, ev)
  local t = ev.task
  if not valid(v) or not t then
    return
  end
  for i, row in ipairs(v.rows) do
    if row.id == t.id then
      if v.status ~= "" and t.status ~= v.status then
        schedule_refresh(v)
      else
        v.rows[i] = t
        schedule_render(v)
      end
      return
    end
  end
  if v.status == "" or v.status == t.status then
    schedule_refresh(v)
  end
end

--- A chat was opened: "this Neovim's tasks" now include its tasks.
local function on_chat(v)
  if visible(v) and not v.all then
    schedule_refresh(v)
  end
end

local function close_view(v)
  stop_timer(v.timer)
  stop_timer(v.refresh_timer)
  v.timer, v.refresh_timer = nil, nil
  for _, unsubscribe in ipairs(v.unsubscribe) do
    unsubscribe()
  end
  v.unsubscribe = {}
  if view == v then
    view = nil
  end
end

--- The task table on the cursor line of the tasks window, if the current
--- buffer is it.
function M.task_at_cursor()
  local v = view
  if not valid(v) or vim.api.nvim_get_current_buf() ~= v.buf then
    return nil
  end
  return v.rows[vim.api.nvim_win_get_cursor(0)[1] - HEADER]
end

function M.token_at_cursor()
  local t = M.task_at_cursor()
  return t and t.id or nil
end

function M.is_tasks_buffer(buf)
  return view ~= nil and valid(view) and view.buf == (buf or vim.api.nvim_get_current_buf())
end

--- The state of the open view (tests use it).
function M.state()
  return view
end

--- "key  what it does" lines of the configured keys.
function M.help_lines()
  return require("sidekick_tools.consumers.tasks_window.actions").help_lines()
end

local function create_view()
  local window = require("sidekick_tools.consumers.window")
  local buf = window.scratch("sidekick://tasks", "sidekick_tasks")
  local win = window.open(buf, nil, {
    cursorline = true,
    signcolumn = "no",
    foldcolumn = "0",
    winfixheight = true,
  })
  ---@type sidekick_tools.TasksView
  local v = {
    buf = buf,
    win = win,
    status = "",
    all = false,
    offset = 0,
    rows = {},
    total = 0,
    render_pending = false,
    unsubscribe = {},
  }
  v.unsubscribe = {
    client.on("task", function(ev)
      on_task(v, ev)
    end),
    client.on("chat", function()
      on_chat(v)
    end),
  }
  vim.api.nvim_create_autocmd("BufWipeout", {
    buffer = buf,
    once = true,
    callback = function()
      close_view(v)
    end,
  })
  vim.api.nvim_create_autocmd("BufWinEnter", {
    buffer = buf,
    callback = function()
      if view == v then
        render(v)
      end
    end,
  })
  local actions = require("sidekick_tools.consumers.tasks_window.actions").for_view(v)
  require("sidekick_tools.keymaps").set_window_keys(buf, "tasks_window", actions)
  return v
end

--- Open (or focus) the tasks window.
---@param opts table|nil { status = a status of constants.task_statuses, "all" or nil,
---  all = boolean (every Neovim's tasks) }
---@return integer buf
function M.open(opts)
  opts = opts or {}
  vim.validate({ status = { opts.status, "string", true } })
  local status = opts.status or ""
  if status ~= "" and status ~= "all" and not vim.tbl_contains(constants.task_statuses, status) then
    error(
      "sidekick_tools: unknown status "
        .. status
        .. "; use "
        .. table.concat(constants.task_statuses, ", ")
        .. " or all",
      0
    )
  end
  if not valid(view) then
    view = create_view()
  else
    local win = vim.fn.bufwinid(view.buf)
    if win == -1 then
      vim.cmd("botright split")
      vim.api.nvim_win_set_buf(0, view.buf)
    else
      vim.api.nvim_set_current_win(win)
    end
  end
  view.all = opts.all == true
  view.status = (status == "all") and "" or status
  view.offset = 0
  require("sidekick_tools.consumers.statusline").seen()
  M.refresh()
  return view.buf
end

return M
