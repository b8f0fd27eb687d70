-- Every option declared once: path, default, accepted types, description, and
-- optionally the values it may take (`one_of`), the least number (`min`), that
-- a number is whole (`integer`), or a `check` of its value. A wrong value keeps
-- the option's default and is said, never raised (setup() reports them all at
-- once). A name setup() is
-- given that is neither an option nor a table of options is warned about; an
-- option of type table (agents, chat.providers, ...) holds the user's own names.
-- Validation, the option list in :h sidekick_tools-config and the Python host's
-- defaults (rplugin/python3/sidekick_tools/defaults.json) all come from this
-- table; `nvim -l scripts/gen_options.lua` writes the last two.
local M = {}

---@class sidekick_tools.Option
---@field [1] string dotted path
---@field [2] any default (vim.NIL: nil)
---@field [3] string|string[] accepted type(s)
---@field [4] string description
---@field one_of string[]|nil the values accepted
---@field min number|nil the least value accepted (a number)
---@field integer boolean|nil a number must be whole
---@field check (fun(value: any): string|nil)|nil what is wrong with a value, nil when fine

local function agents_check(agents)
  for name, agent in pairs(agents) do
    if type(agent) ~= "table" or type(agent.cmd) ~= "table" or #agent.cmd == 0 then
      return string.format("agents.%s.cmd must be a non-empty list", name)
    end
  end
end

local function strings_check(list)
  for _, entry in ipairs(list) do
    if type(entry) ~= "string" then
      return 'auto_accept.safe_commands holds strings such as "git status"'
    end
  end
end

-- Tools whose auto-acceptance another option decides: listing them in
-- auto_accept.tools would change nothing.
local DECIDED_ELSEWHERE = {
  run_terminal_command = "auto_accept.safe_commands and auto_accept.policy are",
  use_agent = "agents.NAME.auto_accept and auto_accept.policy are",
}

local function tools_check(list)
  local known = require("sidekick_tools.constants").tools
  for _, name in ipairs(list) do
    if DECIDED_ELSEWHERE[name] then
      return string.format(
        "option auto_accept.tools: %s is not decided by this list (%s)",
        name,
        DECIDED_ELSEWHERE[name]
      )
    end
    if not vim.tbl_contains(known, name) then
      local sorted = vim.deepcopy(known)
      table.sort(sorted)
      return string.format(
        "option auto_accept.tools: %s is no tool (tools: %s)",
        vim.inspect(name),
        table.concat(sorted, ", ")
      )
    end
  end
end

--- Whether `value` is a list of non-empty strings (model names, keys).
local function names_list(value)
  if type(value) ~= "table" or not vim.islist(value) then
    return false
  end
  for _, item in ipairs(value) do
    if type(item) ~= "string" or item == "" then
      return false
    end
  end
  return true
end

local function forms_check(forms)
  for name, form in pairs(forms) do
    if type(name) ~= "string" or (form ~= false and type(form) ~= "table") then
      return string.format(
        "auto_accept.command_forms[%s] must be a form table or false",
        vim.inspect(name)
      )
    end
  end
end

local function providers_check(providers)
  for name, p in pairs(providers) do
    local key = type(p) == "table" and type(p.api_key) or nil
    if type(p) ~= "table" or (key ~= "nil" and key ~= "string" and key ~= "function") then
      return string.format(
        "chat.providers.%s must be a table { kind, base_url, api_key, models } "
          .. "(api_key: a string or a function)",
        tostring(name)
      )
    end
    local url = p.base_url
    if url ~= nil and (type(url) ~= "string" or not url:lower():match("^https?://[^/%s]")) then
      return string.format(
        'chat.providers.%s.base_url must be an http:// or https:// URL, such as "%s", got %s',
        tostring(name),
        "http://127.0.0.1:8080/v1",
        vim.inspect(url)
      )
    end
    if p.models ~= nil and not names_list(p.models) then
      return string.format(
        'chat.providers.%s.models must be a list of model names, such as { "gpt-4.1" }',
        tostring(name)
      )
    end
  end
end

local function model_check(spec)
  if not spec:match("^[^/%s]+/%S+$") then
    return string.format(
      'chat.model must be provider/model, such as "anthropic/claude-sonnet-4-5", got %s',
      vim.inspect(spec)
    )
  end
end

local KEY = { "string", "boolean" } -- a key, or false for none
local KEYS = { "string", "table", "boolean" } -- a key, a list of keys, or false

---@type sidekick_tools.Option[]
M.options = {
  {
    "python",
    vim.NIL,
    { "string", "nil" },
    "Python interpreter with pynvim; nil: the venv of :SidekickInstall, then "
      .. "g:python3_host_prog, then python3 on PATH (its absolute entries only)",
  },
  {
    "state_dir",
    vim.NIL,
    { "string", "nil" },
    'Task store and logs; nil: stdpath("state")/sidekick_tools. "~" is expanded and a relative '
      .. "path taken from the working directory when setup() runs. One that cannot be created "
      .. "or written is said once by setup(), and tasks are kept in memory, their logs in "
      .. "the temporary directory it names",
  },
  {
    "tasks.store",
    "sqlite",
    "string",
    '"sqlite" (history survives restarts) or "memory"; a database that cannot be opened '
      .. "is said, and the memory store used",
    one_of = { "sqlite", "memory" },
  },
  {
    "tasks.max_concurrent",
    5,
    "number",
    "Tasks running at once in this Neovim; more wait queued",
    min = 1,
    integer = true,
  },
  {
    "tasks.hybrid_threshold",
    10,
    "number",
    "Seconds a call waits before its task goes to the background",
    min = 0,
  },
  {
    "tasks.default_timeout",
    1800,
    "number",
    "Seconds before a task is killed (reason=timeout); 0: never",
    min = 0,
  },
  {
    "tasks.await_timeout",
    55,
    "number",
    "Upper bound of one await_task wait, seconds",
    min = 0,
  },
  {
    "tasks.halt_grace",
    5,
    "number",
    "Seconds between SIGTERM and SIGKILL when halting",
    min = 0,
  },
  {
    "tasks.kill_on_exit",
    true,
    "boolean",
    "Halt this Neovim's running tasks when it exits (the ones an MCP client started follow mcp.kill_on_exit)",
  },
  {
    "tasks.nice",
    10,
    "number",
    "Niceness added to tasks so the editor stays responsive (0: none); on Linux the host's session, which its tasks share, takes it too",
    min = 0,
    integer = true,
  },
  {
    "tasks.max_log_bytes",
    1073741824,
    "number",
    "A task whose stdout + stderr pass this many bytes is stopped: failed, reason log_limit (0: no limit)",
    min = 0,
    integer = true,
  },
  {
    "tasks.retention.completed",
    86400,
    "number",
    "Seconds completed tasks are kept",
    min = 0,
  },
  {
    "tasks.retention.failed",
    172800,
    "number",
    "Seconds failed and cancelled tasks are kept",
    min = 0,
  },
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
    "Tools that run without asking when their own predicate agrees (run_terminal_command "
      .. "and use_agent are not decided here: safe_commands and each agent's auto_accept are)",
    check = tools_check,
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
    check = strings_check,
  },
  {
    "auto_accept.command_forms",
    {},
    "table",
    "Safe forms you declare: name -> { flags, values, path_values, operands, ... }, or false "
      .. "(:h sidekick_tools-command-forms)",
    check = forms_check,
  },
  {
    "auto_accept.timeout",
    120,
    "number",
    "Seconds a command run without asking may last (the smaller of this and its own); "
      .. "0: only tasks.default_timeout",
    min = 0,
  },
  {
    "auto_accept.policy",
    vim.NIL,
    { "function", "nil" },
    'function(tool, params, ctx) -> "approve" | "deny" | nil; consulted first',
  },
  {
    "agents",
    {},
    "table",
    'Agent CLIs by name: { cmd = { ..., "{message}" }, env = {}, cwd = nil, '
      .. "auto_accept = false }",
    check = agents_check,
  },
  {
    "result.max_lines",
    200,
    "number",
    "Output lines kept in a result block (tail)",
    min = 1,
    integer = true,
  },
  {
    "result.notice_lines",
    10,
    "number",
    "Output lines a completion notice carries (tail; the notice names the full log)",
    min = 0,
    integer = true,
  },
  {
    "chat.model",
    "anthropic/claude-sonnet-4-5",
    "string",
    "Model of new chats, as provider/model (a chat's front matter may name another)",
    check = model_check,
  },
  {
    "chat.providers",
    {
      anthropic = { kind = "anthropic", api_key = "env:ANTHROPIC_API_KEY" },
      openai = { kind = "openai", api_key = "env:OPENAI_API_KEY" },
      ollama = { kind = "openai", base_url = "http://127.0.0.1:11434/v1" },
    },
    "table",
    'Providers by name: { kind = "anthropic" | "openai", base_url = nil, api_key = "env:NAME" | '
      .. '"cmd:..." | function, models = { "model", ... } (offered by :SidekickChat and '
      .. ":SidekickModel completion) }; setting it replaces these",
    check = providers_check,
  },
  {
    "chat.system",
    vim.NIL,
    { "string", "nil" },
    "Default system prompt (the tools' schemas are sent as native tools)",
  },
  { "chat.max_tokens", 8192, "number", "Longest reply, in tokens", min = 1, integer = true },
  {
    "chat.temperature",
    vim.NIL,
    { "number", "nil" },
    "Sampling temperature; nil: the provider's default",
    min = 0,
  },
  {
    "chat.thinking",
    vim.NIL,
    { "number", "string", "boolean", "nil" },
    'Thinking: a token budget, "adaptive", or nil/false (off)',
  },
  {
    "chat.max_attempts",
    4,
    "number",
    "Tries per request when the provider is rate limited or overloaded",
    min = 1,
    integer = true,
  },
  {
    "chat.timeouts.connect",
    10,
    "number",
    "Seconds to connect to the provider",
    min = 1,
  },
  {
    "chat.timeouts.read",
    120,
    "number",
    "Longest silence inside a streamed reply, seconds; keep-alive pings, usage counts and empty deltas are silence too; the answer's headers must be whole within connect + read",
    min = 1,
  },
  {
    "chat.auto_send",
    true,
    "boolean",
    "Send the results back when every call of the reply has one",
  },
  {
    "chat.max_turns",
    25,
    "number",
    "Model replies per user message, then the loop stops for the user",
    min = 1,
    integer = true,
  },
  {
    "chat.send_on_notice",
    true,
    "boolean",
    "A completion notice in an idle chat is sent to the model",
  },
  {
    "chat.dir",
    vim.NIL,
    { "string", "nil" },
    'Where :SidekickChat puts new chats; nil: stdpath("data")/sidekick_tools/chats',
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
    min = 0,
  },
  {
    "mcp.kill_on_exit",
    true,
    "boolean",
    "The MCP server halts the tasks it runs when it exits (false: the next one reattaches them); so does a Neovim that took one over",
  },
  {
    "notify",
    "background",
    "string",
    'When a finished task is notified: "always", "never" or "background" (its chat not in view)',
    one_of = { "always", "never", "background" },
  },
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
    "ui.fold_thinking",
    true,
    "boolean",
    "Thinking blocks of replies fold, closed, in the windows showing a chat (a window-local "
      .. "'foldexpr'; false: your own fold settings there)",
  },
  -- chat buffers: each the key of a command (commands.lua names it), or false
  { "keymaps.run_tool", "<leader>sr", KEY, "Chat buffers: key of :SidekickRunTool" },
  { "keymaps.run_tools", "<leader>sR", KEY, "Chat buffers: key of :SidekickRunTools" },
  { "keymaps.deny", "<leader>sd", KEY, "Chat buffers: key of :SidekickDeny" },
  { "keymaps.halt", "<leader>sh", KEY, "Chat buffers: key of :SidekickHalt" },
  { "keymaps.tasks", "<leader>st", KEY, "Chat buffers: key of :SidekickTasks" },
  { "keymaps.output", "<leader>so", KEY, "Chat buffers: key of :SidekickOutput" },
  { "keymaps.send", "<leader>ss", KEY, "Chat buffers: key of :SidekickSend" },
  { "keymaps.stop", "<leader>sx", KEY, "Chat buffers: key of :SidekickStop" },
  -- :SidekickTasks window, in the order its help lists them
  {
    "keymaps.tasks_window.output",
    { "<CR>", "o" },
    KEYS,
    "Tasks window: open the task's output (:SidekickOutput)",
  },
  { "keymaps.tasks_window.halt", "x", KEYS, "Tasks window: halt the task (:SidekickHalt)" },
  {
    "keymaps.tasks_window.rerun",
    "r",
    KEYS,
    "Tasks window: run the task's tool call again (its result block is replaced)",
  },
  {
    "keymaps.tasks_window.jump",
    { "gd", "<C-]>" },
    KEYS,
    "Tasks window: jump to the tool call in its chat",
  },
  {
    "keymaps.tasks_window.quickfix",
    "Q",
    KEYS,
    "Tasks window: the task's output to the quickfix list ('errorformat')",
  },
  {
    "keymaps.tasks_window.filter",
    "f",
    KEYS,
    "Tasks window: cycle the status filter (any, running, queued, completed, failed, cancelled)",
  },
  {
    "keymaps.tasks_window.scope",
    "a",
    KEYS,
    "Tasks window: this Neovim's tasks / every Neovim's tasks",
  },
  {
    "keymaps.tasks_window.next_page",
    { "]]", "<C-n>" },
    KEYS,
    "Tasks window: next (older) page",
  },
  {
    "keymaps.tasks_window.prev_page",
    { "[[", "<C-p>" },
    KEYS,
    "Tasks window: previous (newer) page",
  },
  { "keymaps.tasks_window.refresh", "R", KEYS, "Tasks window: reload the page" },
  { "keymaps.tasks_window.close", "q", KEYS, "Tasks window: close" },
  { "keymaps.tasks_window.help", "?", KEYS, "Tasks window: show these keys" },
  -- :SidekickOutput view
  {
    "keymaps.output_window.filter",
    "f",
    KEYS,
    "Output view: set the regex filter (empty: show everything)",
  },
  { "keymaps.output_window.halt", "x", KEYS, "Output view: halt the task" },
  { "keymaps.output_window.close", "q", KEYS, "Output view: close" },
  {
    "tasks_window.page_size",
    0,
    "number",
    "Tasks per page in :SidekickTasks; 0: the window's height (at most 100)",
    min = 0,
    integer = true,
  },
  {
    "output.initial_bytes",
    4194304,
    "number",
    "Bytes of each log :SidekickOutput shows when opened (the tail); it then follows",
    min = 0,
    integer = true,
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

--- Every option's default, as the nested table setup() takes.
---@return table
function M.defaults()
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
M.current = M.defaults()

local by_path = nil ---@type table<string, sidekick_tools.Option>|nil

--- The declaration of option `path`, or nil.
---@return sidekick_tools.Option|nil
function M.declared(path)
  if not by_path then
    by_path = {}
    for _, opt in ipairs(M.options) do
      by_path[opt[1]] = opt
    end
  end
  return by_path[path]
end

---@return string|nil
function M.description(path)
  local opt = M.declared(path)
  return opt and opt[4]
end

--- Names of the options right under `prefix` ("keymaps.tasks_window" ->
--- { "output", "halt", ... }), in the order they are declared.
---@return string[]
function M.children(prefix)
  local out = {}
  local lead = prefix .. "."
  for _, opt in ipairs(M.options) do
    local rest = opt[1]:sub(1, #lead) == lead and opt[1]:sub(#lead + 1)
    if rest and not rest:find(".", 1, true) then
      table.insert(out, rest)
    end
  end
  return out
end

--- What is wrong with `value` for option `opt`, or nil.
local function problem(opt, value)
  local path, types = opt[1], opt[3]
  local accepted = type(types) == "table" and types or { types }
  if not vim.tbl_contains(accepted, type(value)) then
    return string.format(
      "option %s must be %s, got %s",
      path,
      table.concat(accepted, " or "),
      type(value)
    )
  end
  if type(value) == "number" and opt.integer and value % 1 ~= 0 then
    return string.format("option %s must be a whole number, got %s", path, tostring(value))
  end
  if type(value) == "number" and opt.min and not (value >= opt.min) then
    return string.format("option %s must be at least %s, got %s", path, opt.min, tostring(value))
  end
  if opt.one_of and not vim.tbl_contains(opt.one_of, value) then
    local quoted = vim.tbl_map(function(v)
      return '"' .. v .. '"'
    end, opt.one_of)
    return string.format(
      "option %s must be %s or %s, got %s",
      path,
      table.concat(quoted, ", ", 1, #quoted - 1),
      quoted[#quoted],
      vim.inspect(value)
    )
  end
  -- a list of keys: each a string (a number or a table maps nothing)
  if types == KEYS and type(value) == "table" and not names_list(value) then
    return string.format(
      'option %s must be a key, a list of keys such as { "x", "<C-x>" }, or false, got %s',
      path,
      vim.inspect(value)
    )
  end
  return opt.check and opt.check(value)
end

--- Does a declared option's path start with `path`."."? (a table of options)
local function is_group(path)
  local lead = path .. "."
  for _, opt in ipairs(M.options) do
    if opt[1]:sub(1, #lead) == lead then
      return true
    end
  end
  return false
end

--- The names in `user` that are neither an option nor a table of options
--- (a typo, or an option this version does not have), as dotted paths, sorted.
--- An option's own value is not looked into: agents, chat.providers and the
--- like hold the user's names.
---@param user table
---@return string[]
function M.unknown(user)
  local out = {}
  local function walk(tbl, prefix)
    for key, value in pairs(tbl) do
      local path = prefix .. tostring(key)
      if not M.declared(path) then
        if type(key) == "string" and type(value) == "table" and is_group(path) then
          walk(value, path .. ".")
        elseif not (type(key) == "string" and is_group(path)) then
          table.insert(out, path)
        end
      end
    end
  end
  walk(user, "")
  table.sort(out)
  return out
end

--- A table of options (`tasks`, `chat.timeouts`) given something else: what
--- is wrong, or nil. `path` is an option's; each table on the way is looked at.
local function group_problem(user, path)
  local node, walked = user, nil
  for key in path:gmatch("[^.]+") do
    if node == nil then
      return nil
    elseif type(node) ~= "table" then
      return walked, string.format("option %s must be a table, got %s", walked, type(node))
    end
    node = node[key]
    walked = walked and (walked .. "." .. key) or key
  end
end

--- Merge user options over the defaults, validating each declared option: a
--- wrong value keeps the option's default, and what is wrong is returned, never
--- raised (a user's init.lua goes on after setup()).
---@param user table|nil
---@return table merged, string[] problems one per wrong option, in declaration order
function M.resolve(user)
  user = user or {}
  vim.validate({ opts = { user, "table" } })
  if user.keymaps == false then
    -- no chat keys at all; the plugin's own windows keep theirs (they are only there)
    user = vim.tbl_extend("force", {}, user, { keymaps = {} })
    for _, opt in ipairs(M.options) do
      local key = opt[1]:match("^keymaps%.([^.]+)$")
      if key then
        user.keymaps[key] = false
      end
    end
  end
  local merged = M.defaults()
  local problems, said = {}, {}
  for _, opt in ipairs(M.options) do
    local group, wrong_group = group_problem(user, opt[1])
    if wrong_group then
      if not said[group] then
        said[group] = true
        table.insert(problems, wrong_group)
      end
    else
      local value = get_path(user, opt[1])
      if value ~= nil then
        local err = problem(opt, value)
        if err then
          table.insert(problems, err)
        else
          set_path(merged, opt[1], value)
        end
      end
    end
  end
  return merged, problems
end

--- The plugin's root folder (the checkout, or where the plugin manager put it).
---@return string
function M.root()
  return vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h:h")
end

--- The provider kinds the host speaks: its modules in llm/providers/ (read
--- here, not through the host module, whose loading means a host to stop).
---@return string[]
function M.provider_kinds()
  local out = {}
  for name, type_ in vim.fs.dir(M.root() .. "/rplugin/python3/sidekick_tools/llm/providers") do
    local kind = type_ == "file" and name:match("^([a-z][a-z0-9_]*)%.py$")
    if kind and kind ~= "__init__" then
      table.insert(out, kind)
    end
  end
  table.sort(out)
  return out
end

--- The providers of `chat.providers` whose `kind` (without one: their name)
--- is no wire protocol the host speaks, one line each. Said by setup() as a
--- warning, as an unknown option is: such a provider fails when a chat sends
--- to it, the others work.
---@return string[]
function M.unknown_kinds(current)
  local out = {}
  local providers = ((current or M.current).chat or {}).providers or {}
  local kinds = M.provider_kinds()
  local names = vim.tbl_keys(providers)
  table.sort(names, function(a, b)
    return tostring(a) < tostring(b)
  end)
  for _, name in ipairs(names) do
    local p = providers[name]
    local kind = type(p) == "table" and p.kind
    if kind == nil then
      kind = name -- `anthropic = { ... }`
    end
    if not vim.tbl_contains(kinds, kind) then
      table.insert(
        out,
        string.format(
          "chat.providers.%s.kind is %s, not a protocol the plugin speaks (%s)",
          tostring(name),
          vim.inspect(type(p) == "table" and p.kind or nil),
          table.concat(
            vim.tbl_map(function(k)
              return '"' .. k .. '"'
            end, kinds),
            " or "
          )
        )
      )
    end
  end
  return out
end

--- chat.model when it names a provider chat.providers does not have (the
--- providers were configured, the default model left): one line, or nil.
--- Said by setup() as a warning: a chat's front matter may name another model.
--- No providers at all is no chat, not a mistake.
---@return string|nil
function M.model_without_provider(current)
  local chat = (current or M.current).chat or {}
  local provider = type(chat.model) == "string" and chat.model:match("^([^/]+)/")
  local providers = chat.providers
  if not provider or type(providers) ~= "table" or next(providers) == nil then
    return nil
  end
  if providers[provider] ~= nil then
    return nil
  end
  local names = vim.tbl_map(tostring, vim.tbl_keys(chat.providers))
  table.sort(names)
  return string.format(
    'chat.model is "%s", but chat.providers has no "%s" (configured: %s): '
      .. "new chats and chats without a model in their front matter cannot send",
    chat.model,
    provider,
    table.concat(names, ", ")
  )
end

--- Put `user` options in force. Returns them, the unknown names in `user`
--- (M.unknown), which are left out, and what is wrong with the options given
--- a wrong value (M.resolve), which keep their defaults.
---@return table current, string[] unknown, string[] problems
function M.setup(user)
  local merged, problems = M.resolve(user)
  if merged.state_dir then
    -- one folder for the editor and the host, whatever the working directory
    -- when each looks: "~" expanded, a relative path made absolute now
    -- (not expand(): a "%" or "*" in a folder's name is that character)
    local dir = vim.fs.normalize(merged.state_dir)
    merged.state_dir = vim.fs.normalize(vim.fn.fnamemodify(dir, ":p"))
  end
  M.current = merged
  return M.current, M.unknown(user or {}), problems
end

function M.state_dir()
  return M.current.state_dir or (vim.fn.stdpath("state") .. "/sidekick_tools")
end

-- A state_dir setup() found unusable and said so, and the private temporary
-- directory it named for this session's logs: { dir = ..., path = ... }.
M.state_fallback = nil

--- The temporary directory standing in for the state_dir in force, or nil.
---@return string|nil
function M.state_fallback_path()
  local fallback = M.state_fallback
  return fallback and fallback.dir == M.state_dir() and fallback.path or nil
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
--- path, or nil and the reason it could not be written (the OS error); never
--- an error.
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
  local made, dir_err = require("sidekick_tools.directory").make(dir)
  if not made then
    return nil, dir_err
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

-- Functions (a policy, an API key from a function) stay in Lua: the host is
-- sent a copy without them.
local function drop_functions(tbl)
  for k, v in pairs(tbl) do
    if type(v) == "function" then
      tbl[k] = nil
    elseif type(v) == "table" then
      drop_functions(v)
    end
  end
  return tbl
end

--- The serialisable part sent to the host: every option but the editor's own
--- (python, keymaps, ui), `state_dir` resolved, `state_fallback` (the directory
--- setup() named for an unusable one) and `auto_accept.has_policy`.
function M.for_host()
  local c = vim.deepcopy(M.current)
  for _, provider in pairs((c.chat or {}).providers or {}) do
    if type(provider) == "table" and type(provider.api_key) == "function" then
      provider.api_key = "lua:"
    end
  end
  c.python = nil
  c.state_dir = M.state_dir()
  c.state_fallback = M.state_fallback_path() -- the host uses it, and says nothing more
  c.auto_accept.has_policy = type(c.auto_accept.policy) == "function"
  c.keymaps = nil
  c.ui = nil -- may hold functions (a virtual_text format); the host has no use for it
  return drop_functions(c)
end

return M
