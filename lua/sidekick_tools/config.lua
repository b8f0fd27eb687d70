-- Every option declared once: default, type and description. Validation and the
-- option list in :h sidekick_tools-config both come from this table.
local M = {}

---@class sidekick_tools.Option
---@field [1] string dotted path
---@field [2] any default
---@field [3] string|string[] accepted type(s)
---@field [4] string description

---@type sidekick_tools.Option[]
M.options = {
  { "python", vim.NIL, { "string", "nil" }, "Python interpreter with pynvim; nil: find one" },
  {
    "state_dir",
    vim.NIL,
    { "string", "nil" },
    'Task store and logs; nil: stdpath("state")/sidekick_tools',
  },
  { "tasks.store", "sqlite", "string", '"sqlite" (history survives restarts) or "memory"' },
  { "tasks.max_concurrent", 5, "number", "Tasks running at once; more wait queued" },
  {
    "tasks.hybrid_threshold",
    10,
    "number",
    "Seconds a call waits before its task goes to the background",
  },
  { "tasks.default_timeout", 1800, "number", "Seconds before a task is killed (reason=timeout)" },
  { "tasks.await_timeout", 55, "number", "Upper bound of one await_task wait, seconds" },
  { "tasks.halt_grace", 5, "number", "Seconds between SIGTERM and SIGKILL when halting" },
  { "tasks.kill_on_exit", true, "boolean", "Halt this Neovim's running tasks when it exits" },
  {
    "tasks.nice",
    10,
    "number",
    "Niceness added to tasks so the editor stays responsive (0: none)",
  },
  {
    "tasks.max_log_bytes",
    1073741824,
    "number",
    "A task whose stdout + stderr pass this many bytes is stopped: failed, reason log_limit (0: no limit)",
  },
  { "tasks.retention.completed", 86400, "number", "Seconds completed tasks are kept" },
  { "tasks.retention.failed", 172800, "number", "Seconds failed and cancelled tasks are kept" },
  {
    "auto_accept.tools",
    {
      "read_files",
      "list_directory",
      "await_task",
      "halt_task",
      "task_status",
      "task_output",
      "list_tasks",
    },
    "table",
    "Tools that run without asking when their own predicate agrees",
  },
  {
    "auto_accept.safe_commands",
    {
      "ls",
      "pwd",
      "cat",
      "echo",
      "head",
      "tail",
      "wc",
      "which",
      "date",
      "whoami",
      "grep",
      "git status",
      "git diff",
      "git log",
      "git show",
      "git branch",
    },
    "table",
    "Commands run_terminal_command may run without asking: names of safe forms "
      .. "(:h sidekick_tools-safe-commands), or exact commands",
  },
  {
    "auto_accept.command_forms",
    {},
    "table",
    "Safe forms you declare: name -> { flags, values, path_values, operands, ... }, or false",
  },
  {
    "auto_accept.timeout",
    120,
    "number",
    "Seconds a command run without asking may last (the smaller of this and its own)",
  },
  {
    "auto_accept.policy",
    vim.NIL,
    { "function", "nil" },
    'function(tool, params, ctx) -> "approve" | "deny" | nil; consulted first',
  },
  { "agents", {}, "table", 'name -> { cmd = { ..., "{message}" }, env = {}, cwd = nil }' },
  {
    "chat",
    {},
    "table",
    "The chat loop (DESIGN §10): model, providers, system, max_tokens, auto_send, max_turns, send_on_notice, dir",
  },
  { "result.max_lines", 200, "number", "Output lines kept in a result block (tail)" },
  {
    "result.notice_lines",
    10,
    "number",
    "Output lines a completion notice carries (tail; the notice names the full log)",
  },
  {
    "mcp.share_editor_tasks",
    false,
    "boolean",
    "MCP clients may await, halt and read this Neovim's own tasks (:h sidekick_tools-mcp)",
  },
  {
    "mcp.await_timeout",
    50,
    "number",
    "Longest wait of one MCP call (await, and run/ask before answering with a token), seconds",
  },
  {
    "mcp.kill_on_exit",
    true,
    "boolean",
    "The MCP server halts the tasks it runs when it exits (false: the next one reattaches them)",
  },
  { "notify", "background", "string", '"always", "never" or "background" (chat not visible)' },
  {
    "ui.virtual_text",
    true,
    { "boolean", "table" },
    "Call states as virtual text, whatever the global diagnostic settings (a table: its options)",
  },
  {
    "ui.signs",
    true,
    { "boolean", "table" },
    "Call states in the sign column (a table: the signs handler's options)",
  },
  {
    "keymaps.run_tool",
    "<leader>sr",
    { "string", "boolean" },
    "Run the call under the cursor (false: none)",
  },
  { "keymaps.run_tools", "<leader>sR", { "string", "boolean" }, "Run every pending call" },
  {
    "keymaps.deny",
    "<leader>sd",
    { "string", "boolean" },
    "Deny the pending call under the cursor (:SidekickDeny)",
  },
  { "keymaps.halt", "<leader>sh", { "string", "boolean" }, "Halt the task under the cursor" },
  { "keymaps.tasks", "<leader>st", { "string", "boolean" }, "Open the task list" },
  {
    "keymaps.output",
    "<leader>so",
    { "string", "boolean" },
    "Open the output of the task under the cursor",
  },
  -- :SidekickTasks window (a key, a list of keys, or false for none)
  {
    "keymaps.tasks_window.output",
    { "<CR>", "o" },
    { "string", "table", "boolean" },
    "Tasks window: open the output of the task on the line",
  },
  { "keymaps.tasks_window.halt", "x", { "string", "table", "boolean" }, "Tasks window: halt" },
  {
    "keymaps.tasks_window.jump",
    { "gd", "<C-]>" },
    { "string", "table", "boolean" },
    "Tasks window: jump to the tool call in its chat",
  },
  {
    "keymaps.tasks_window.filter",
    "f",
    { "string", "table", "boolean" },
    "Tasks window: cycle the status filter (all, running, completed, failed, cancelled)",
  },
  {
    "keymaps.tasks_window.scope",
    "a",
    { "string", "table", "boolean" },
    "Tasks window: toggle this Neovim's tasks / every Neovim's tasks",
  },
  {
    "keymaps.tasks_window.rerun",
    "r",
    { "string", "table", "boolean" },
    "Tasks window: run the task's tool call again (its result block is replaced)",
  },
  {
    "keymaps.tasks_window.quickfix",
    "Q",
    { "string", "table", "boolean" },
    "Tasks window: the task's output to the quickfix list ('errorformat')",
  },
  {
    "keymaps.tasks_window.refresh",
    "R",
    { "string", "table", "boolean" },
    "Tasks window: reload",
  },
  {
    "keymaps.tasks_window.next_page",
    { "]]", "<C-n>" },
    { "string", "table", "boolean" },
    "Tasks window: next (older) page",
  },
  {
    "keymaps.tasks_window.prev_page",
    { "[[", "<C-p>" },
    { "string", "table", "boolean" },
    "Tasks window: previous (newer) page",
  },
  { "keymaps.tasks_window.close", "q", { "string", "table", "boolean" }, "Tasks window: close" },
  {
    "keymaps.tasks_window.help",
    "?",
    { "string", "table", "boolean" },
    "Tasks window: show these keys",
  },
  -- :SidekickOutput view
  {
    "keymaps.output_window.filter",
    "f",
    { "string", "table", "boolean" },
    "Output view: set the regex filter (empty: show everything)",
  },
  {
    "keymaps.output_window.halt",
    "x",
    { "string", "table", "boolean" },
    "Output view: halt the task",
  },
  { "keymaps.output_window.close", "q", { "string", "table", "boolean" }, "Output view: close" },
  {
    "tasks_window.page_size",
    0,
    "number",
    "Tasks per page in :SidekickTasks; 0: the window's height (at most 100)",
  },
  {
    "output.initial_bytes",
    4194304,
    "number",
    "Bytes of each log :SidekickOutput shows when opened (the tail); it then follows",
  },
}

local function get_path(tbl, path)
  local node = tbl
  for key in path:gmatch("[^.]+") do
    if type(node) ~= "table" then
      return nil
    end
    node = node[key]
  end
  return node
end

local function set_path(tbl, path, value)
  local keys = vim.split(path, ".", { plain = true })
  local node = tbl
  for i = 1, #keys - 1 do
    node[keys[i]] = node[keys[i]] or {}
    node = node[keys[i]]
  end
  node[keys[#keys]] = value
end

local function defaults()
  local out = {}
  for _, opt in ipairs(M.options) do
    local value = opt[2]
    if value == vim.NIL then
      value = nil
    end
    set_path(out, opt[1], vim.deepcopy(value))
  end
  return out
end

---@type table the merged configuration in force
M.current = defaults()

--- Merge user options over the defaults, validating each declared option.
---@param user table|nil
---@return table
function M.resolve(user)
  user = user or {}
  vim.validate({ opts = { user, "table" } })
  local merged = defaults()
  for _, opt in ipairs(M.options) do
    local path, types = opt[1], opt[3]
    local value = get_path(user, path)
    if value ~= nil then
      local accepted = type(types) == "table" and types or { types }
      local ok = vim.tbl_contains(accepted, type(value))
      if not ok then
        error(
          string.format(
            "sidekick_tools: option %s must be %s, got %s",
            path,
            table.concat(accepted, " or "),
            type(value)
          ),
          0
        )
      end
      set_path(merged, path, value)
    end
  end
  for name, agent in pairs(merged.agents or {}) do
    if type(agent) ~= "table" or type(agent.cmd) ~= "table" or #agent.cmd == 0 then
      error(string.format("sidekick_tools: agents.%s.cmd must be a non-empty list", name), 0)
    end
  end
  for _, entry in ipairs(merged.auto_accept.safe_commands) do
    if type(entry) ~= "string" then
      error('sidekick_tools: auto_accept.safe_commands holds strings such as "git status"', 0)
    end
  end
  for name, form in pairs(merged.auto_accept.command_forms) do
    if type(name) ~= "string" or (form ~= false and type(form) ~= "table") then
      error(
        string.format(
          "sidekick_tools: auto_accept.command_forms[%s] must be a form table or false",
          vim.inspect(name)
        ),
        0
      )
    end
  end
  if merged.tasks.store ~= "sqlite" and merged.tasks.store ~= "memory" then
    error('sidekick_tools: tasks.store must be "sqlite" or "memory"', 0)
  end
  return merged
end

function M.setup(user)
  M.current = M.resolve(user)
  return M.current
end

function M.state_dir()
  return M.current.state_dir or (vim.fn.stdpath("state") .. "/sidekick_tools")
end

--- What the MCP server reads from <state_dir>/mcp.json: agents, task limits,
--- result size and the mcp options. Never keys, policies or the chat settings.
function M.mcp_settings()
  local c = M.current
  local agents = vim.empty_dict()
  for name, agent in pairs(c.agents or {}) do
    agents[name] = { cmd = agent.cmd, env = agent.env or vim.empty_dict(), cwd = agent.cwd }
  end
  return {
    state_dir = M.state_dir(),
    tasks = c.tasks,
    agents = agents,
    result = c.result,
    mcp = c.mcp,
  }
end

--- Write mcp.json (dir 0700, file 0600) when its content changed. Returns the
--- path, or nil and the reason it could not be written.
---@return string|nil path, string|nil err
function M.write_mcp_settings()
  local uv = vim.uv or vim.loop
  local dir = M.state_dir()
  local path = dir .. "/mcp.json"
  local text = vim.json.encode(M.mcp_settings())
  local fd = uv.fs_open(path, "r", 384)
  if fd then
    local stat = uv.fs_fstat(fd)
    local old = stat and stat.size == #text and uv.fs_read(fd, stat.size, 0)
    uv.fs_close(fd)
    if old == text then
      return path
    end
  end
  if vim.fn.isdirectory(dir) == 0 and vim.fn.mkdir(dir, "p", 448) == 0 then
    return nil, "cannot create " .. dir
  end
  local tmp = string.format("%s.%d.tmp", path, vim.fn.getpid())
  local out, err = uv.fs_open(tmp, "w", 384)
  if not out then
    return nil, err
  end
  uv.fs_write(out, text, 0)
  uv.fs_close(out)
  uv.fs_chmod(tmp, 384)
  local ok, rename_err = uv.fs_rename(tmp, path)
  if not ok then
    uv.fs_unlink(tmp)
    return nil, rename_err
  end
  return path
end

--- The serialisable part sent to the host (functions stay in Lua: a provider's
--- api_key function becomes "lua:", and the host asks Lua for the key when it sends).
function M.for_host()
  local c = vim.deepcopy(M.current)
  for _, provider in pairs((c.chat or {}).providers or {}) do
    if type(provider) == "table" and type(provider.api_key) == "function" then
      provider.api_key = "lua:"
    end
  end
  c.python = nil
  c.state_dir = M.state_dir()
  c.auto_accept.has_policy = type(c.auto_accept.policy) == "function"
  c.auto_accept.policy = nil
  c.keymaps = nil
  c.ui = nil -- may hold functions (a virtual_text format); the host has no use for it
  return c
end

return M
