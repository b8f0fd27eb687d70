-- Statusline component: running tasks, and failures since the last look.
local constants = require("sidekick_tools.constants")

local M = {}

local running = {} ---@type table<string, boolean>
local failed_unseen = 0

local function on_task(ev)
  local t = ev.task
  if not t then
    return
  end
  if constants.active[t.status] then
    running[t.id] = true
  else
    running[t.id] = nil
    if t.status == "failed" and ev.finished then
      failed_unseen = failed_unseen + 1
    end
  end
end

--- Listen to the client's task events (consumers.register).
function M.register()
  require("sidekick_tools.client").on("task", on_task)
end

--- Forget the failures counted so far (the tasks window calls this when shown).
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
    table.insert(parts, constants.glyph("running") .. " " .. c.running)
  end
  if c.failed > 0 then
    table.insert(parts, constants.glyph("failed") .. " " .. c.failed)
  end
  return table.concat(parts, " ")
end

return M
