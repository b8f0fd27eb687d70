-- What :SidekickOutput is given: its arguments, and a filter's regex with
-- an error that says what is wrong with it.
local client = require("sidekick_tools.client")

local M = {}

--- vim.regex(pattern), or an error in one line that says which pattern and
--- why (Vim's own text, without the "couldn't parse regex: Vim:" wrapping).
---@param pattern string
function M.regex(pattern)
  local ok, rx = pcall(vim.regex, pattern)
  if ok then
    return rx
  end
  local raw = tostring(rx)
  local code, text = raw:match("(E%d+): (.*)$")
  text = (text or raw:gsub("^.-regex: ", ""):gsub("^Vim:", "")):gsub("%%s", "")
  if code == "E769" then
    text = "a [ is never closed by ]"
  end
  error(
    string.format(
      "sidekick_tools: bad filter /%s/: %s%s",
      pattern,
      text,
      code and (" (" .. code .. ")") or ""
    ),
    0
  )
end

--- Split ":SidekickOutput [TOKEN] [/regex/]" arguments: token (or nil), filter (or nil).
function M.parse(args)
  args = vim.trim(args or "")
  local token, rest = args:match("^([^/%s]+)%s*(.*)$")
  if not token then
    rest = args
  end
  local filter
  if rest ~= "" then
    if rest:sub(1, 1) ~= "/" then
      error("sidekick_tools: expected :SidekickOutput [TOKEN] [/regex/], got " .. args, 0)
    end
    -- as for :s, the regex ends at the first / not escaped (\/ is a slash), or
    -- at the end of the line
    local i, close = 2, nil
    while i <= #rest and not close do
      local c = rest:sub(i, i)
      if c == "\\" then
        i = i + 2
      elseif c == "/" then
        close = i
      else
        i = i + 1
      end
    end
    filter = rest:sub(2, (close or #rest + 1) - 1)
    local trailing = close and vim.trim(rest:sub(close + 1)) or ""
    if trailing ~= "" then
      error("sidekick_tools: trailing characters after /" .. filter .. "/: " .. trailing, 0)
    end
  end
  return client.token(token), filter
end

return M
