-- The one question :SidekickRunTools asks: the calls the policy would not
-- approve (tool, what they do, their problem), and what happens to the rest.
local plural = require("sidekick_tools.format").plural

local M = {}

local function describe(p)
  -- its line first: calls alike (one command written three times) are told apart
  local at = type(p.row) == "number" and string.format("line %d: ", p.row + 1) or ""
  local line = string.format("  %s%s  %s", at, p.tool ~= "" and p.tool or "tool", p.what or "")
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

--- Whether plan entry `p` runs only with the user's consent.
function M.needs_consent(p)
  return p.verdict == "ask" and not broken(p)
end
local needs_consent = M.needs_consent

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

--- Ask the user about `plan` when a call in it needs consent. "all": run
--- every call of the plan (nothing needed asking, or the user said run);
--- "others": all but those that need consent (the user said "only the
--- others", offered when some call runs without asking); nil: run nothing.
---@return "all"|"others"|nil
function M.ask(plan)
  local needs, approved = 0, 0
  for _, p in ipairs(plan) do
    if needs_consent(p) then
      needs = needs + 1
    elseif p.verdict == "approve" and not broken(p) then
      approved = approved + 1
    end
  end
  if needs == 0 then
    return "all"
  end
  local choices = approved > 0 and "&Run\n&Only the others\n&Cancel" or "&Run\n&Cancel"
  local cancel = approved > 0 and 3 or 2
  local choice = vim.fn.confirm(M.message(plan), choices, cancel, "Question")
  pcall(vim.cmd.redraw) -- the question's lines go, so what follows needs no Enter
  if choice == 1 then
    return "all"
  end
  return (choice == 2 and cancel == 3) and "others" or nil
end

return M
