-- :SidekickMcp: the exact command that registers the MCP face with an agent
-- (Claude Code's `claude mcp add`, or any MCP client's JSON configuration).
-- See :h sidekick_tools-mcp.
local config = require("sidekick_tools.config")
local host = require("sidekick_tools.host")

local M = {}

M.NAME = "sidekick-tools"

-- Prints "3.11" on one line, the installed mcp version (or nothing) on the next.
-- Like the server (host.command), it ignores PYTHON* variables and keeps only
-- absolute sys.path entries: the project's mcp.py must not answer for the package.
local PROBE = table.concat({
  "import sys",
  "sys.path[:] = [p for p in sys.path if p.startswith('/')]",
  "print('%d.%d' % sys.version_info[:2])",
  "from importlib import metadata",
  "v = ''",
  "try:\n  v = metadata.version('mcp')\nexcept Exception:\n  pass",
  "print(v)",
}, "\n")

--- { version = "3.11", mcp = "2.3.0" | nil } of an interpreter, or nil when it cannot run.
---@param python string
function M.probe(python)
  local ok, res = pcall(function()
    return vim.system({ python, "-E", "-c", PROBE }, { text = true }):wait(10000)
  end)
  if not ok or res.code ~= 0 then
    return nil
  end
  local lines = vim.split(vim.trim(res.stdout or ""), "\n")
  local mcp = lines[2] and vim.trim(lines[2]) or ""
  return { version = vim.trim(lines[1] or ""), mcp = mcp ~= "" and mcp or nil }
end

local function at_least(version, major, minor)
  local a, b = (version or ""):match("^(%d+)%.(%d+)")
  a, b = tonumber(a), tonumber(b)
  return a ~= nil and (a > major or (a == major and b >= minor))
end
M.at_least = at_least

--- The server's command: { argv, python, version, mcp } (nil and a message when
--- there is no interpreter). It starts the way the host does (host.command: `-E`
--- and a bootstrap that keeps the project folder off sys.path), on any Python.
function M.server_command()
  local python, source = host.find_python()
  if not python then
    return nil,
      "sidekick_tools: no Python interpreter found (" .. source .. "); run :SidekickInstall"
  end
  local info = M.probe(python) or {}
  local argv = host.command(python, "sidekick_tools.mcp")
  vim.list_extend(argv, { "--state-dir", config.state_dir() })
  return { argv = argv, python = python, version = info.version, mcp = info.mcp }
end

local function shell_word(word)
  if word:match("^[%w%-%._/=:,+@%%]+$") then
    return word
  end
  return vim.fn.shellescape(word)
end

local function shell_words(words)
  return table.concat(vim.tbl_map(shell_word, words), " ")
end

--- The lines :SidekickMcp prints.
---@return string[]|nil lines, string|nil err
function M.registration()
  local cmd, err = M.server_command()
  if not cmd then
    return nil, err
  end
  local claude = { "claude", "mcp", "add", "--scope", "user", M.NAME, "--" }
  vim.list_extend(claude, cmd.argv)
  local json = vim.json.encode({
    mcpServers = {
      [M.NAME] = { command = cmd.argv[1], args = vim.list_slice(cmd.argv, 2) },
    },
  })
  local lines = {
    "sidekick_tools MCP server (:h sidekick_tools-mcp)",
    "",
    "Claude Code:",
    "  " .. shell_words(claude),
    "",
    "Any MCP client (stdio), JSON configuration:",
    "  " .. json,
  }
  local problem
  if cmd.version and not at_least(cmd.version, 3, 10) then
    problem = "Python " .. cmd.version .. " is too old for the MCP server (3.10 or later)."
  elseif not cmd.mcp then
    problem = "The `mcp` package is not installed for "
      .. cmd.python
      .. ": run :SidekickInstall, or "
      .. cmd.python
      .. " -m pip install 'mcp>=2.3,<3'."
  end
  if problem then
    vim.list_extend(lines, { "", "Warning: " .. problem })
  end
  vim.list_extend(lines, {
    "",
    "Settings shared with the server (agents, task limits, mcp.*): "
      .. config.state_dir()
      .. "/mcp.json",
  })
  return lines
end

--- :SidekickMcp
function M.print()
  local lines, err = M.registration()
  if not lines then
    vim.notify(err, vim.log.levels.ERROR)
    return
  end
  vim.api.nvim_echo({ { table.concat(lines, "\n") } }, true, {})
  return lines
end

return M
