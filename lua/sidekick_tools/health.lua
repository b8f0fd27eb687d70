-- :checkhealth sidekick_tools
local M = {}

function M.check()
  local h = vim.health
  local host = require("sidekick_tools.host")
  local config = require("sidekick_tools.config")

  h.start("sidekick_tools: Neovim")
  local v = vim.version()
  local version = string.format("%d.%d.%d", v.major, v.minor, v.patch)
  if vim.fn.has("nvim-0.10") == 1 then
    h.ok("Neovim " .. version)
  else
    h.error("Neovim " .. version .. " is too old", { "sidekick_tools needs Neovim 0.10 or later" })
  end

  h.start("sidekick_tools: Python host")
  local python, source = host.find_python()
  local runs = false
  if not python then
    h.error(
      "no Python interpreter found",
      { "set setup({ python = ... })", "or run :SidekickInstall" }
    )
  else
    runs = M.check_python(h, python, source)
  end
  M.check_host(h)

  h.start("sidekick_tools: MCP server (optional)")
  if runs then
    M.check_mcp(h, python)
  else
    h.info("not checked: no interpreter to run it with (see the Python host above)")
  end

  M.check_chat(h, runs and python or nil)
  M.check_storage(h, config)
end

--- The interpreter, its version and pynvim. False when it cannot be run at all
--- (vim.system raises at once for a program that does not exist or cannot be
--- executed: ENOENT, EACCES); the other sections are checked all the same.
---@return boolean runs
function M.check_python(h, python, source)
  local config = require("sidekick_tools.config")
  local started, job = pcall(vim.system, {
    python,
    "-c",
    "import sys; print(sys.version.split()[0])\n"
      .. "try:\n"
      .. "    from importlib.metadata import version; print(version('pynvim'))\n"
      .. "except Exception:\n"
      .. "    import pynvim; print(getattr(pynvim, '__version__', '') or '(version unknown)')",
  }, { text = true })
  if not started then
    -- "…/_system.lua:254: ENOENT: no such file or directory (cmd): '/x'": the OS error
    local why = tostring(job):gsub("^.-:%d+: ", "")
    h.error(
      string.format(
        "interpreter %s (from %s) does not exist or cannot be run: %s",
        python,
        source,
        why
      ),
      config.current.python
          and {
            "set setup({ python = ... }) to an interpreter that has pynvim",
            "or leave python out and run :SidekickInstall (a venv with pynvim)",
          }
        or { ":SidekickInstall creates a venv with pynvim", "or set setup({ python = ... })" }
    )
    return false
  end
  h.ok(string.format("interpreter %s (from %s)", python, source))
  local probe = job:wait(10000)
  local out = vim.split(vim.trim(probe.stdout or ""), "\n")
  if out[1] and out[1] ~= "" then
    h.ok("Python " .. out[1])
  end
  if probe.code == 0 and out[2] then
    h.ok("pynvim " .. out[2])
  else
    h.error("pynvim is not importable by " .. python, {
      ":SidekickInstall creates a venv with it",
      "or: " .. python .. " -m pip install pynvim",
    })
  end
  return true
end

function M.check_host(h)
  local host = require("sidekick_tools.host")
  if host.running() then
    local ok, info = pcall(require("sidekick_tools.client").info)
    if ok then
      h.ok(string.format("host running (pid %s, sidekick_tools %s)", info.pid, info.version))
    else
      h.warn("host running but not answering: " .. tostring(info))
    end
  elseif host.failure() then
    h.error("the host failed: " .. host.failure(), { "the next command starts a new one" })
  else
    h.info("host not started yet (it starts on first use)")
  end
end

function M.check_mcp(h, python)
  local mcp = require("sidekick_tools.mcp")
  local info = mcp.probe(python)
  if not info then
    h.warn("could not ask " .. python .. " for its version and the mcp package")
  elseif not mcp.at_least(info.version, 3, 10) then
    h.info(
      string.format("Python %s: the MCP server needs Python 3.10 or later", info.version),
      { "set setup({ python = ... }) to a newer interpreter to use it" }
    )
  elseif info.mcp then
    h.ok(
      string.format(
        "mcp %s is importable by %s; :SidekickMcp prints how to register the server",
        info.mcp,
        python
      )
    )
  else
    h.warn(
      "the mcp package is not installed for " .. python .. " (needed only for the MCP server)",
      {
        ":SidekickInstall installs it",
        "or: " .. python .. " -m pip install 'mcp>=2.3,<3'",
      }
    )
  end
end

--- The state dir and the task store. The dir is tried the way setup() tries
--- it (config.write_mcp_settings: made with its parents, mcp.json written,
--- nothing written when it is current), so a dir that cannot be made or
--- written is said here as setup() said it.
function M.check_storage(h, config)
  h.start("sidekick_tools: storage")
  local dir = config.state_dir()
  local store = config.current.tasks.store
  h.info("state dir: " .. dir)
  local ok, path, err = pcall(config.write_mcp_settings)
  local usable = ok and path ~= nil and vim.fn.filewritable(dir) == 2
  if usable then
    h.ok("state dir is writable")
  else
    local why = not ok and tostring(path) or err or "not writable"
    local report = store == "memory" and h.warn or h.error
    report(
      string.format(
        "state dir cannot be used: %s (tasks are kept in memory and their logs in a "
          .. "temporary directory: their history is lost when Neovim exits)",
        why
      ),
      {
        "set setup({ state_dir = ... }) to a directory you can write",
        "or make the directory (or its nearest existing parent) writable",
      }
    )
  end
  local db = dir .. "/tasks.db"
  if store == "memory" then
    h.info("task store: memory (history is lost when Neovim exits)")
  elseif not usable then
    h.info("task store: memory (sqlite " .. db .. " cannot be made)")
  elseif vim.fn.filereadable(db) == 1 then
    h.ok("task store: sqlite " .. db)
  else
    h.info("task store: sqlite " .. db .. " (created on first use)")
  end
end

--- The chat loop (DESIGN §10): httpx2, the model of new chats, and each
--- configured provider (its key resolves, its base_url answers; the key is
--- never shown). `python` nil: there is no interpreter that runs; what needs
--- one is said not to be checked.
function M.check_chat(h, python)
  local config = require("sidekick_tools.config")
  local check = require("sidekick_tools.provider_check")
  local at_least = require("sidekick_tools.mcp").at_least

  h.start("sidekick_tools: chat (talking to a model)")
  local info = python and check.python_info(python)
  if not python then
    h.info("httpx2 not checked: no interpreter to run it with (see the Python host above)")
  elseif not info then
    h.warn("could not ask " .. python .. " for its version and httpx2")
  elseif not at_least(info.python, 3, 10) then
    h.warn(
      string.format("Python %s: the chat loop needs Python 3.10 or later", info.python),
      { "tools and tasks work without it", "set setup({ python = ... }) to a newer interpreter" }
    )
  elseif info.httpx2 then
    h.ok(string.format("httpx2 %s is importable by %s", info.httpx2, python))
  else
    h.warn(
      "httpx2 is not importable by "
        .. python
        .. (info.httpx2_error and " (" .. info.httpx2_error .. ")" or "")
        .. ": the chat loop needs it; tools and tasks work without it",
      { ":SidekickInstall installs it", "or: " .. python .. " -m pip install 'httpx2>=2.14,<3'" }
    )
  end

  local chat = config.current.chat or {}
  local models = require("sidekick_tools.models")
  local problem = models.problem(chat.model or "")
  if problem then
    h.error("chat.model " .. tostring(chat.model) .. ": " .. problem:gsub("^sidekick_tools: ", ""))
  else
    h.ok("chat.model (new chats): " .. chat.model)
  end

  local names = models.providers()
  if #names == 0 then
    h.warn("no provider in chat.providers", { ":h sidekick_tools-chat-providers" })
    return
  end
  if not python then
    h.info("providers not checked: their keys and base_url are checked with the interpreter")
    return
  end
  local kinds = check.kinds()
  local built_in = config.defaults().chat.providers
  -- every key is checked at once, then every base_url whose provider has a key
  -- (or needs none): a provider that cannot be used is not contacted
  local found = {}
  for _, name in ipairs(names) do
    local p = check.describe(name, chat.providers[name])
    found[name] = { p = p, known = vim.tbl_contains(kinds, p.kind) }
    found[name].key = check.check_key(python, p.api_key)
  end
  for _, name in ipairs(names) do
    local f = found[name]
    f.key = f.key()
    if f.known and f.p.base_url ~= "" and f.key.ok then
      f.url = check.check_url(python, f.p.base_url)
    end
  end
  for _, name in ipairs(names) do
    local f = found[name]
    local p, key = f.p, f.key
    local url = check.shown_url(p.base_url)
    if not f.known then
      h.error(
        string.format(
          'provider %s: kind "%s" is not a wire protocol the plugin speaks (%s)',
          name,
          p.kind,
          table.concat(kinds, ", ")
        )
      )
    elseif p.base_url == "" then
      h.error(string.format("provider %s (kind %s): no base_url", name, p.kind))
    else
      h.info(string.format("provider %s: kind %s, base_url %s", name, p.kind, url))
    end
    if key.ok then
      local advice = key.advice and " (" .. key.advice[1] .. ")" or ""
      h.ok(string.format("provider %s: %s%s", name, key.text, advice))
    else
      h.warn(string.format("provider %s: %s", name, key.text), key.advice)
    end
    if f.url then
      local answer = f.url()
      local text = string.format("provider %s: %s %s", name, url, answer.text)
      if answer.ok then
        h.ok(text)
      elseif
        vim.deep_equal(chat.providers[name], built_in[name])
        and p.base_url:find("^http://127%.0%.0%.1")
      then
        -- a local server the defaults name (ollama): most users run none
        h.info(text .. " (a default provider: nothing to do unless you use it)")
      else
        h.warn(text, { "is the server running, and base_url right? (a proxy from $https_proxy?)" })
      end
    elseif f.known and p.base_url ~= "" then
      h.info(string.format("provider %s: %s not contacted (no key)", name, url))
    end
  end
end

return M
