-- :SidekickInstall: a venv of the plugin's own under stdpath("data") with pynvim,
-- and, when the venv's Python is 3.10 or later, `httpx2` for the chat loop and
-- `mcp` for the MCP server (the specs of pyproject.toml's `chat` and `mcp` extras).
-- Runs asynchronously; the editor stays usable and the result is reported.
local M = {}

-- The python3 the venv is made with: from an absolute PATH entry only, as the
-- host's (host.search_path): exepath() takes an empty or "." entry for the
-- working directory, and would run a python3 the project holds.
local function base_python()
  local host = require("sidekick_tools.host")
  for _, name in ipairs({ "python3", "python" }) do
    local found = host.search_path(name)
    if found then
      return found
    end
  end
end

local function step(cmd, on_done)
  vim.system(cmd, { text = true }, function(res)
    vim.schedule(function()
      on_done(res)
    end)
  end)
end

M.CORE = { "pynvim>=0.5" }
-- Python 3.10+ only: the chat loop's HTTP client, and the MCP server's SDK
M.NEWER = { "httpx2>=2.14,<3", "mcp>=2.3,<3" }

--- What pip installs into a venv whose Python is `version` ("3.11").
function M.packages(version)
  local list = vim.deepcopy(M.CORE)
  if require("sidekick_tools.mcp").at_least(version, 3, 10) then
    vim.list_extend(list, M.NEWER)
  end
  return list
end

--- Create (or update) the venv; `on_done(ok, message)` is called at the end.
function M.run(on_done)
  local host = require("sidekick_tools.host")
  local python = base_python()
  local report = on_done
    or function(ok, msg)
      vim.notify(msg, ok and vim.log.levels.INFO or vim.log.levels.ERROR)
    end
  if not python then
    report(false, "sidekick_tools: :SidekickInstall needs python3 (3.9 or later) on PATH")
    return
  end
  local venv = vim.fn.stdpath("data") .. "/sidekick_tools/venv"
  vim.fn.mkdir(vim.fn.fnamemodify(venv, ":h"), "p")
  vim.notify("sidekick_tools: creating " .. venv .. " …", vim.log.levels.INFO)
  step({ python, "-m", "venv", venv }, function(res)
    if res.code ~= 0 then
      report(false, "sidekick_tools: venv creation failed:\n" .. (res.stderr or ""))
      return
    end
    local info = require("sidekick_tools.mcp").probe(host.venv_python()) or {}
    local packages = M.packages(info.version)
    local cmd = { host.venv_python(), "-m", "pip", "install", "--quiet" }
    step(vim.list_extend(cmd, packages), function(pip)
      if pip.code ~= 0 then
        report(
          false,
          "sidekick_tools: pip install "
            .. table.concat(packages, " ")
            .. " failed:\n"
            .. (pip.stderr or "")
        )
        return
      end
      host.stop()
      local note = #packages > #M.CORE and ""
        or "\n(talking to a model and the MCP server need Python 3.10 or later; this venv has "
          .. tostring(info.version)
          .. ")"
      local python, source = host.find_python()
      local runs = python == host.venv_python()
          and ("the host now runs with " .. host.venv_python())
        or string.format(
          "the host keeps running with %s (%s); leave python out of setup() to use %s",
          tostring(python),
          source,
          host.venv_python()
        )
      -- what it installed, by name ("httpx2>=2.14,<3" -> "httpx2")
      local names = vim.tbl_map(function(spec)
        return spec:match("^[%w._-]+")
      end, packages)
      report(
        true,
        "sidekick_tools: installed " .. table.concat(names, ", ") .. "; " .. runs .. note
      )
    end)
  end)
end

return M
