-- The consumers that listen to the client from the host's first event on:
-- diagnostics, the statusline, autocmds (User events, notifications) and the
-- token usage of replies. The
-- tasks window and the output view listen only while they are open.
local M = {}

local ALWAYS = { "diagnostics", "statusline", "autocmds", "usage" }

local registered = false

--- Subscribe every always-on consumer to the client (once).
function M.register()
  if registered then
    return
  end
  registered = true
  for _, name in ipairs(ALWAYS) do
    require("sidekick_tools.consumers." .. name).register()
  end
end

--- setup() ran (again): consumers that read options take the new ones.
function M.configure()
  if registered or package.loaded["sidekick_tools.consumers.diagnostics"] then
    require("sidekick_tools.consumers.diagnostics").configure()
  end
end

return M
