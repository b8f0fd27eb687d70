-- What :checkhealth asks about the chat loop: the Python side (httpx2), and for
-- each configured provider its kind, base_url, whether its key resolves and
-- whether the base_url answers. A key is never printed, nor any part of it:
-- a `cmd:` key is read by a Python child that says only whether it got one.
-- Only the configured base_urls are contacted, without a key, and only when
-- :checkhealth asks.

local M = {}

-- as the host's llm/settings.py: where a kind goes, and with which key, when
-- the provider names neither
M.DEFAULT_BASE_URLS = {
  anthropic = "https://api.anthropic.com",
  openai = "https://api.openai.com/v1",
}
M.DEFAULT_API_KEYS = { anthropic = "env:ANTHROPIC_API_KEY", openai = "env:OPENAI_API_KEY" }

M.URL_TIMEOUT = 5 -- seconds a base_url has to answer
M.KEY_TIMEOUT = 10 -- seconds a `cmd:` key has (as the host's llm/keys.py)

-- Each script runs as `python -E -c SCRIPT ARGS...` with only absolute
-- sys.path entries: nothing from the working directory is imported.
local PRELUDE = "import sys\nsys.path[:] = [p for p in sys.path if p.startswith('/')]\n"

-- line 1: the Python version; line 2: httpx2's version, or "!" and why it cannot be imported
local INFO = PRELUDE
  .. table.concat({
    "print('%d.%d.%d' % sys.version_info[:3])",
    "try:",
    "    import httpx2",
    "    print(getattr(httpx2, '__version__', '') or '(version unknown)')",
    "except Exception as exc:",
    "    why = str(exc).splitlines()",
    "    print('!' + type(exc).__name__ + (': ' + why[0] if why else ''))",
  }, "\n")

-- argv[1] the URL, argv[2] the timeout: prints "http STATUS" or "fail REASON"
local ANSWERS = PRELUDE
  .. table.concat({
    "import socket, urllib.error, urllib.parse, urllib.request",
    "u = urllib.parse.urlsplit(sys.argv[1])",
    "url = u._replace(netloc=u.netloc.rpartition('@')[2]).geturl()  # never a user:password",
    "req = urllib.request.Request(url, headers={'User-Agent': 'sidekick-tools-checkhealth'})",
    "try:",
    "    with urllib.request.urlopen(req, timeout=float(sys.argv[2])) as r:",
    "        print('http', r.status)",
    "except urllib.error.HTTPError as e:",
    "    print('http', e.code)",
    "except urllib.error.URLError as e:",
    "    r = e.reason",
    "    print('fail', getattr(r, 'strerror', None) or str(r))",
    "except (socket.timeout, TimeoutError):",
    "    print('fail', 'no answer within %s s' % sys.argv[2])",
    "except Exception as e:",
    "    print('fail', type(e).__name__, str(e))",
  }, "\n")

-- argv[1] the command of a `cmd:` key, split as the host splits it (no shell):
-- prints "ok", "empty", "unprintable", "exit N", "timeout" or "cannot start ..."
local KEY_FROM_COMMAND = PRELUDE
  .. table.concat({
    "import shlex, subprocess",
    "try:",
    "    argv = shlex.split(sys.argv[1])",
    "except ValueError as e:",
    "    print('cannot start: ' + str(e)); sys.exit()",
    "if not argv:",
    "    print('cannot start: no command'); sys.exit()",
    -- a bare name on PATH's absolute entries only, as the host (programs.py):
    -- an empty or relative entry names the working directory
    "import os",
    "if '/' not in argv[0]:",
    "    dirs = [d for d in os.environ.get('PATH', os.defpath).split(os.pathsep) if d.startswith('/')]",
    "    found = [os.path.join(d, argv[0]) for d in dirs]",
    "    found = [f for f in found if os.path.isfile(f) and os.access(f, os.X_OK)]",
    "    if not found:",
    "        print('cannot start: ' + argv[0] + ' is not found on PATH (its empty and relative '",
    "              'entries, which name the working directory, are not searched)'); sys.exit()",
    "    argv[0] = found[0]",
    "try:",
    "    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,",
    "                       stderr=subprocess.DEVNULL, timeout=float(sys.argv[2]))",
    "except subprocess.TimeoutExpired:",
    "    print('timeout'); sys.exit()",
    "except OSError as e:",
    "    print('cannot start: ' + (e.strerror or type(e).__name__)); sys.exit()",
    "if p.returncode != 0:",
    "    print('exit %d' % p.returncode); sys.exit()",
    "key = next((l.strip() for l in p.stdout.decode('utf-8', 'replace').splitlines() if l.strip()), '')",
    "print('ok' if key.isascii() and key.isprintable() and key else ('unprintable' if key else 'empty'))",
  }, "\n")

local function run(python, script, args, on_exit)
  local argv = { python, "-E", "-c", script }
  vim.list_extend(argv, args or {})
  local ok, job = pcall(vim.system, argv, { text = true }, on_exit)
  return ok and job or nil
end

--- { python = "3.11.7", httpx2 = "2.16.2" | nil, httpx2_error = string | nil } of
--- an interpreter, or nil when it cannot run.
function M.python_info(python)
  local job = run(python, INFO)
  local res = job and job:wait(10000)
  if not res or res.code ~= 0 then
    return nil
  end
  local lines = vim.split(vim.trim(res.stdout or ""), "\n")
  local second = vim.trim(lines[2] or "")
  local info = { python = vim.trim(lines[1] or "") }
  if second:sub(1, 1) == "!" then
    info.httpx2_error = second:sub(2)
  elseif second ~= "" then
    info.httpx2 = second
  end
  return info
end

--- A base_url as it may be shown: without any user:password part.
function M.shown_url(url)
  return (url:gsub("^(%a[%w+.-]*://)[^/@]*@", "%1…@"))
end

--- How provider `name` of chat.providers resolves, as the host resolves it.
---@return { name: string, kind: string, base_url: string, api_key: any }
function M.describe(name, spec)
  spec = type(spec) == "table" and spec or {}
  local kind = type(spec.kind) == "string" and spec.kind or name
  local default_url = M.DEFAULT_BASE_URLS[kind] or ""
  local base_url = (type(spec.base_url) == "string" and spec.base_url ~= "" and spec.base_url)
    or default_url
  base_url = base_url:gsub("/+$", "")
  local api_key = spec.api_key
  -- the default key only ever goes to the provider's own server
  if api_key == nil and base_url == default_url then
    api_key = M.DEFAULT_API_KEYS[kind]
  end
  return { name = name, kind = kind, base_url = base_url, api_key = api_key }
end

--- The provider kinds the host speaks: its modules in llm/providers/.
---@return string[]
function M.kinds()
  return require("sidekick_tools.config").provider_kinds()
end

local function printable(key)
  return type(key) == "string" and key:match("^[\32-\126]+$") ~= nil
end

--- Start checking key `spec`; returns a function giving { ok, text, advice }
--- (waiting for a `cmd:` key's command at most KEY_TIMEOUT seconds).
function M.check_key(python, spec)
  local function done(ok, text, advice)
    return function()
      return { ok = ok, text = text, advice = advice }
    end
  end
  if spec == nil or spec == "" then
    return done(true, "no api_key: none is sent (fine for a local server)")
  elseif type(spec) == "function" then
    local ok, key = pcall(spec)
    if not ok then
      return done(false, "the api_key function raised an error", { "call it yourself to see why" })
    elseif type(key) ~= "string" or vim.trim(key) == "" then
      return done(false, "the api_key function returned no key", { "it must return a string" })
    elseif not printable(vim.trim(key)) then
      return done(false, "the api_key function returned characters no key has")
    end
    return done(true, "the api_key function returns a key")
  elseif type(spec) ~= "string" then
    return done(
      false,
      "api_key is a " .. type(spec),
      { 'write "env:NAME", "cmd:..." or a function' }
    )
  elseif spec:sub(1, 4) == "env:" then
    local var = vim.trim(spec:sub(5))
    local value = vim.trim(vim.env[var] or "")
    if value == "" then
      return done(
        false,
        "$" .. var .. " is not set",
        { "export " .. var .. "=... where Neovim starts, or change this provider's api_key" }
      )
    elseif not printable(value) then
      return done(false, "$" .. var .. " holds characters no key has (a pasted typographic dash?)")
    end
    return done(true, "key from $" .. var .. " is set")
  elseif spec:sub(1, 4) == "cmd:" then
    local command = spec:sub(5)
    -- its program only: the rest of a command line may hold a secret
    local words = vim.split(vim.trim(command), "%s+")
    local shown = (words[1] or "") .. (#words > 1 and " …" or "")
    local job = run(python, KEY_FROM_COMMAND, { command, tostring(M.KEY_TIMEOUT) })
    return function()
      local res = job and job:wait((M.KEY_TIMEOUT + 5) * 1000)
      local said = vim.trim(res and res.code == 0 and res.stdout or "")
      local what = "the api_key command `" .. shown .. "`"
      if said == "ok" then
        return { ok = true, text = "key from " .. what .. " resolves" }
      elseif said == "empty" then
        return { ok = false, text = what .. " printed nothing" }
      elseif said == "unprintable" then
        return { ok = false, text = what .. " printed characters no key has" }
      elseif said == "timeout" then
        return {
          ok = false,
          text = what .. " did not finish within " .. M.KEY_TIMEOUT .. " s",
          advice = { "does it wait for a passphrase? unlock the store first" },
        }
      elseif said:match("^exit ") then
        return {
          ok = false,
          text = what .. " failed (" .. said .. ")",
          advice = { "run it in a terminal to see why" },
        }
      end
      return { ok = false, text = what .. ": " .. (said ~= "" and said or "could not be run") }
    end
  end
  return done(true, "a key written in the configuration", {
    'an "env:NAME" or "cmd:..." key keeps it out of your configuration files',
  })
end

--- Start asking whether `url` answers; returns a function giving { ok, text }.
--- Any HTTP status is an answer; no key is sent, nor a user:password in the URL.
function M.check_url(python, url)
  local job = run(python, ANSWERS, { url, tostring(M.URL_TIMEOUT) })
  return function()
    local res = job and job:wait((M.URL_TIMEOUT + 5) * 1000)
    local said = vim.trim(res and res.stdout or "")
    local status = said:match("^http (%d+)")
    if status then
      return { ok = true, text = "answers (HTTP " .. status .. ")" }
    end
    local reason = said:match("^fail (.+)") or "no answer"
    return { ok = false, text = "does not answer: " .. reason }
  end
end

return M
