-- Names and looks declared once: task statuses, call states, their glyphs,
-- diagnostic severities and highlight groups (DESIGN §5, §8). Data only.
local M = {}

--- What may follow a closing fence's backticks on its line (a pattern): spaces,
--- tabs, a CR, a NUL (in Lua "\0", over RPC "\n"), as the host's parser reads them
--- (chat/parser.py FENCE_BLANKS). Lua's `%s` also took "\v" and "\f", the
--- host's `rstrip()` Unicode spaces: a fence the two closed apart let a fold
--- hide a call that then ran.
M.closer_rest = "^[ \t\r\n%z]*$"

--- Task statuses (DESIGN §8), in the order the views offer them
--- (:SidekickTasks completion, the tasks window's filter cycle).
M.task_statuses = { "running", "queued", "completed", "failed", "cancelled" }

--- Statuses a task never leaves.
M.terminal = { completed = true, failed = true, cancelled = true }

--- Statuses of a task that has not ended (a call in one of them is followed).
M.active = { queued = true, running = true }

--- How each state of a call looks: pending (no result yet), its task's status,
--- or denied (the result statuses). `severity` names a vim.diagnostic.severity.
M.states = {
  pending = { glyph = "▶", severity = "HINT", hl = "SidekickStatusPending" },
  queued = { glyph = "⧗", severity = "HINT", hl = "SidekickStatusQueued" },
  running = { glyph = "⟳", severity = "HINT", hl = "SidekickStatusRunning" },
  completed = { glyph = "✓", severity = "INFO", hl = "SidekickStatusCompleted" },
  failed = { glyph = "✗", severity = "ERROR", hl = "SidekickStatusFailed" },
  cancelled = { glyph = "⊘", severity = "WARN", hl = "SidekickStatusCancelled" },
  denied = { glyph = "⊘", severity = "WARN", hl = "SidekickStatusCancelled" },
}

---@param state string
---@return string
function M.glyph(state)
  local look = M.states[state]
  return look and look.glyph or "?"
end

--- Highlight groups the views use, each a default link (:h sidekick_tools-output-view).
M.highlights = {
  SidekickStatusPending = "DiagnosticHint",
  SidekickStatusQueued = "DiagnosticHint",
  SidekickStatusRunning = "DiagnosticHint",
  SidekickStatusCompleted = "DiagnosticOk",
  SidekickStatusFailed = "DiagnosticError",
  SidekickStatusCancelled = "DiagnosticWarn",
  SidekickTasksHeader = "Title",
  SidekickTasksDim = "Comment",
  SidekickTasksToken = "Identifier",
  SidekickTasksTool = "Function",
  SidekickTasksOrigin = "Special",
  SidekickTasksTime = "Number",
  SidekickTasksProgress = "DiagnosticInfo",
  SidekickOutputStderr = "DiagnosticWarn",
  SidekickOutputEnd = "Comment",
}

--- The tools a model may call (DESIGN §7; the host's tools/ REGISTRY, which a
--- unit test holds this list to): what auto_accept.tools may name.
M.tools = {
  "run_terminal_command",
  "read_files",
  "list_directory",
  "write_file",
  "replace_in_file",
  "use_agent",
  "await_task",
  "halt_task",
  "task_status",
  "task_output",
  "list_tasks",
}

--- How the `chat` of a task an MCP client started begins ("mcp:claude-code").
M.mcp_chat_prefix = "mcp:"

--- File names of chat buffers (a Lua pattern).
M.chat_pattern = "%.sidekick%.md$"

return M
