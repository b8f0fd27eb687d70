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
  if not python then
    h.error(
      "no Python interpreter found",
      { "set setup({ python = ... })", "or run :SidekickInstall" }
    )
    return
  end
  h.ok(string.format("interpreter %s (from %s)", python, source))
  local probe = vim
    .system({
      python,
      "-c",
      "import sys; print(sys.version.split()[0])\n"
        .. "try:\n"
        .. "    from importlib.metadata import version; print(version('pynvim'))\n"
        .. "except Exception:\n"
        .. "    import pynvim; print(getattr(pynvim, '__version__', '') or '(version unknown)')",
    }, { text = true })
    :wait(10000)
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

  h.start("sidekick_tools: MCP server (optional)")
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

  h.start("sidekick_tools: storage")
  local dir = config.state_dir()
  h.info("state dir: " .. dir)
  if vim.fn.isdirectory(dir) == 1 then
    if vim.fn.filewritable(dir) == 2 then
      h.ok("state dir is writable")
    else
      h.error(
        "state dir is not writable",
        { "fix its permissions or set setup({ state_dir = ... })" }
      )
    end
  else
    h.info("state dir does not exist yet (created on first use)")
  end
  local store = config.current.tasks.store
  local db = dir .. "/tasks.db"
  if store == "memory" then
    h.info("task store: memory (history is lost when Neovim exits)")
  elseif vim.fn.filereadable(db) == 1 then
    h.ok("task store: sqlite " .. db)
  else
    h.info("task store: sqlite " .. db .. " (created on first use)")
  end
end

return M
