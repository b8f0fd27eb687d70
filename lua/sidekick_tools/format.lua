-- Text shared by every view: durations and how a task ended. Pure functions.
local M = {}

--- "2.3s" (whole: "2s"), "4m05s", "1h02m".
---@param secs number|nil
---@param whole boolean|nil whole seconds under a minute (a running clock)
function M.duration(secs, whole)
  secs = math.max(0, secs or 0)
  if whole then
    secs = math.floor(secs)
  end
  if secs < 60 then
    return whole and string.format("%ds", secs) or string.format("%.1fs", secs)
  end
  secs = math.floor(secs)
  if secs < 3600 then
    return string.format("%dm%02ds", math.floor(secs / 60), secs % 60)
  end
  return string.format("%dh%02dm", math.floor(secs / 3600), math.floor(secs % 3600 / 60))
end

--- Time since `started_at`, in whole seconds: "12s", "4m05s".
---@param started_at number epoch seconds
---@param now number|nil
function M.elapsed(started_at, now)
  return M.duration((now or os.time()) - started_at, true)
end

--- Seconds a task ran (or has been running), nil when it never started.
---@param task table
---@param now number|nil
function M.seconds(task, now)
  if not task.started_at then
    return nil
  end
  local stop = task.ended_at or now or os.time()
  return math.max(0, stop - task.started_at)
end

--- "[task abc123 completed, exit 0, 2.3s]": how a task ended, in one line.
---@param task table
function M.end_line(task)
  local parts = { task.status }
  if task.reason and task.reason ~= "exit" and task.reason ~= task.status then
    parts[1] = string.format("%s (%s)", task.status, task.reason)
  end
  if task.exit_code then
    table.insert(parts, "exit " .. task.exit_code)
  end
  local secs = task.duration or M.seconds(task)
  if secs then
    table.insert(parts, M.duration(secs))
  end
  return string.format("[task %s %s]", task.id, table.concat(parts, ", "))
end

--- "1 call", "3 calls".
function M.plural(n, word)
  return string.format("%d %s%s", n, word, n == 1 and "" or "s")
end

return M
