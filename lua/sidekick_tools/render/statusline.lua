-- Statusline component: running tasks, and failures since the last look.
local bridge = require("sidekick_tools.bridge")

local M = {}

local running = {} ---@type table<string, boolean>
local failed_unseen = 0

bridge.on("task", function(ev)
  local t = ev.task
  if not t then
    return
  end
  if t.status == "running" or t.status == "queued" then
    running[t.id] = true
  else
    running[t.id] = nil
    if t.status == "failed" and ev.finished then
      failed_unseen = failed_unseen + 1
    end
  end
end)

--- Forget the failures counted so far (the task list calls this when shown).
function M.seen()
  failed_unseen = 0
end

function M.counts()
  return { running = vim.tbl_count(running), failed = failed_unseen }
end

function M.text()
  local c = M.counts()
  local parts = {}
  if c.running > 0 then
    table.insert(parts, "⟳ " .. c.running)
  end
  if c.failed > 0 then
    table.insert(parts, "✗ " .. c.failed)
  end
  return table.concat(parts, " ")
end

return M
