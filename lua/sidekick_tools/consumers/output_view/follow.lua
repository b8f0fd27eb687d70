-- Following a task's log files like `tail -f`, straight from Lua (vim.uv):
-- each stream is read from the offset reached so far, woken by a file-system
-- watcher on the task's log folder (and a slow timer in case the watcher cannot
-- see the writes). Output never passes through the host.
local ansi = require("sidekick_tools.consumers.output_view.ansi")

local M = {}

local uv = vim.uv or vim.loop

local CHUNK = 1024 * 1024 -- bytes read per stream per wake-up
-- lines taken per stream per wake-up: a flood of short lines is shown over
-- several turns of the loop, so the editor answers in between
M.LINES = 20000
-- a line longer than this (no newline yet) is shown in pieces of this size
M.MAX_LINE = 1024 * 1024
local DEBOUNCE = 50 -- ms between a write and the read it triggers
local POLL = 1000 -- ms, fallback when the watcher misses writes

---@class sidekick_tools.OutputStream
---@field name string
---@field path string|nil
---@field offset integer next byte to read
---@field partial string bytes after the last newline read so far
---@field skip_first boolean drop the first (cut) line: the view started mid-file
---@field sgr table the ANSI colour state carried from line to line
---@field in_key boolean|nil its last piece ended inside a private key (masked to its END)

--- A stream of log `path` that starts at its last `initial_bytes`, so a huge
--- log opens fast (0: from its start).
---@return sidekick_tools.OutputStream
function M.stream(name, path, initial_bytes)
  local s = { name = name, path = path, offset = 0, partial = "", skip_first = false, sgr = {} }
  local stat = path and uv.fs_stat(path)
  if stat and initial_bytes > 0 and stat.size > initial_bytes then
    s.offset = stat.size - initial_bytes
    s.skip_first = true
  end
  return s
end

--- Up to `max` bytes of `path` from `offset`; nil when the file is not there yet.
local function read_from(path, offset, max)
  local fd = uv.fs_open(path, "r", 0)
  if not fd then
    return nil
  end
  local stat = uv.fs_fstat(fd)
  local size = stat and stat.size or 0
  local data = ""
  if size > offset then
    data = uv.fs_read(fd, math.min(max, size - offset), offset) or ""
  end
  uv.fs_close(fd)
  return data, size
end

--- `data` up to and including its `n`-th newline (all of it when it has fewer).
local function through_line(data, n)
  local pos = 0
  for _ = 1, n do
    pos = data:find("\n", pos + 1, true)
    if not pos then
      return data
    end
  end
  return data:sub(1, pos)
end

--- The raw lines each stream gained since the last read, by stream: { [idx] =
--- { raw, ... } }, idx being the index in `streams` (`parse` makes them lines).
--- `final`: the task ended, so a last line without a newline is complete too.
--- `more`: more is waiting than one read takes.
---@param streams sidekick_tools.OutputStream[]
---@return table<integer, string[]> raws, boolean more
function M.read_raw(streams, final)
  local raws, more = {}, false
  for idx, s in ipairs(streams) do
    local new = {}
    raws[idx] = new
    if s.path then
      local data, size = read_from(s.path, s.offset, CHUNK)
      if data and #data > 0 then
        data = through_line(data, M.LINES)
        s.offset = s.offset + #data
        more = more or s.offset < size
        local parts = vim.split(s.partial .. data, "\n", { plain = true })
        s.partial = table.remove(parts)
        if #s.partial >= M.MAX_LINE then
          table.insert(parts, s.partial)
          s.partial = ""
        end
        for _, raw in ipairs(parts) do
          if s.skip_first then
            s.skip_first = false
          else
            table.insert(new, raw)
          end
        end
      end
      if final and not more and s.partial ~= "" then
        table.insert(new, s.partial)
        s.partial = ""
      end
    end
  end
  return raws, more
end

--- Raw lines (`read_raw`'s, masked) as the view's lines { text, stream, spans },
--- coloured in each stream's order.
---@param streams sidekick_tools.OutputStream[]
---@param raws table<integer, string[]>
---@return table[]
function M.parse(streams, raws)
  local new = {}
  for idx, s in ipairs(streams) do
    for _, raw in ipairs(raws[idx] or {}) do
      local text, spans = ansi.parse_line(raw, s.sgr)
      table.insert(new, { text = text, stream = idx, spans = spans })
    end
  end
  return new
end

--- Up to `max` bytes from the end of file `path`, cut at a line start; "" when
--- the file is missing or empty.
---@param path string|nil
---@param max integer
---@return string
function M.read_tail(path, max)
  if not path then
    return ""
  end
  local fd = uv.fs_open(path, "r", 384)
  if not fd then
    return ""
  end
  local stat = uv.fs_fstat(fd)
  local size = stat and stat.size or 0
  local offset = math.max(0, size - max)
  local data = size > 0 and uv.fs_read(fd, size - offset, offset) or ""
  uv.fs_close(fd)
  if offset > 0 then
    data = data:gsub("^[^\n]*\n", "", 1)
  end
  return data or ""
end

---@class sidekick_tools.Watch
---@field wake fun() ask for a read soon (debounced)
---@field stop fun()

--- Watch log folder `dir`: `on.changed` runs (on the main loop, debounced) after
--- a write, `on.exited` when the exit record appears, `on.tick` once a second.
---@param dir string|nil
---@param on { changed: fun(), exited: fun(), tick: fun() }
---@return sidekick_tools.Watch
function M.watch(dir, on)
  local w = { stopped = false }
  local watcher, poller, debounce

  function w.wake()
    if debounce or w.stopped then
      return
    end
    debounce = uv.new_timer()
    debounce:start(DEBOUNCE, 0, function()
      if debounce then
        debounce:close()
        debounce = nil
      end
      vim.schedule(on.changed)
    end)
  end

  function w.stop()
    w.stopped = true
    for _, h in ipairs({ watcher, poller, debounce }) do
      if h and not h:is_closing() then
        h:stop()
        h:close()
      end
    end
    watcher, poller, debounce = nil, nil, nil
  end

  if dir and uv.fs_stat(dir) then
    local fs = uv.new_fs_event()
    if fs then
      local ok = fs:start(dir, {}, function(err, fname)
        if err then
          return
        end
        if fname == "exit" then
          vim.schedule(on.exited)
        else
          w.wake()
        end
      end)
      if ok then
        watcher = fs
      else
        fs:close()
      end
    end
  end
  poller = uv.new_timer()
  poller:start(POLL, POLL, vim.schedule_wrap(on.tick))
  return w
end

return M
