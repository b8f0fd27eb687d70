-- The one question :SidekickRunTools asks: the calls the policy would not
-- approve (tool, what they do, their problem), and what happens to the rest.
local plural = require("sidekick_tools.format").plural

local M = {}

local function describe(p)
  local line = string.format("  %s  %s", p.tool ~= "" and p.tool or "tool", p.what or "")
  if type(p.problem) == "string" and p.problem ~= "" then
    line = line .. "  (problem: " .. p.problem .. ")"
  elseif type(p.why) == "string" and p.why ~= "" then
    line = line .. "  (" .. p.why .. ")" -- why the policy does not run it unasked
  end
  return line
end

--- A call with a problem (malformed, an unknown tool) cannot run: whatever
--- the answer, it gets a failed result saying why, or, when its block itself
--- is broken (a repeated id, a fence never closed), only its ✗. It is no call
--- to consent to.
local function broken(p)
  return type(p.problem) == "string" and p.problem ~= ""
end

local function needs_consent(p)
  return p.verdict == "ask" and not broken(p)
end

--- The question's text for the host's `plan` answer: the runnable calls are
--- counted, those that need consent listed; calls that cannot run are named
--- apart.
---@param plan table[] { id, tool, what, verdict = "approve"|"ask"|"deny", problem, why }
---@return string message
function M.message(plan)
  local ask, denied, invalid = {}, {}, {}
  for _, p in ipairs(plan) do
    if broken(p) then
      table.insert(invalid, p)
    elseif p.verdict == "ask" then
      table.insert(ask, p)
    elseif p.verdict == "deny" then
      table.insert(denied, p)
    end
  end
  local lines = {
    string.format(
      "Run %s? %s your consent:",
      plural(#plan - #invalid, "pending tool call"),
      #ask == 1 and "This one needs" or ("These " .. #ask .. " need")
    ),
  }
  for _, p in ipairs(ask) do
    table.insert(lines, describe(p))
  end
  local approved = #plan - #ask - #denied - #invalid
  if approved > 0 then
    table.insert(
      lines,
      approved == 1 and "1 other runs without asking."
        or string.format("%d others run without asking.", approved)
    )
  end
  for _, part in ipairs({
    { "Denied by your policy (not run):", denied },
    { "Cannot run (each ✗ says why):", invalid },
  }) do
    if #part[2] > 0 then
      table.insert(lines, part[1])
      for _, p in ipairs(part[2]) do
        table.insert(lines, describe(p))
      end
    end
  end
  return table.concat(lines, "\n")
end

--- Ask the user about `plan` when a call in it needs consent. True: run the
--- calls of the plan (nothing needed asking, or the user said run).
---@return boolean
function M.ask(plan)
  local needs = vim.tbl_filter(needs_consent, plan)
  if #needs == 0 then
    return true
  end
  local choice = vim.fn.confirm(M.message(plan), "&Run\n&Cancel", 2, "Question")
  pcall(vim.cmd.redraw) -- the question's lines go, so what follows needs no Enter
  return choice == 1
end

return M
