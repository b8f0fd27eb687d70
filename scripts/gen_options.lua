-- Writes what is derived from the one declaration of every option
-- (lua/sidekick_tools/config.lua, M.options):
--   rplugin/python3/sidekick_tools/defaults.json  the defaults the Python side reads
--   doc/sidekick_tools.txt, section *sidekick_tools-config*  the option list
--
--   nvim -l scripts/gen_options.lua           write both
--   nvim -l scripts/gen_options.lua --check   exit 1 when either differs from a fresh one
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
vim.opt.runtimepath:prepend(root)
local config = require("sidekick_tools.config")

local JSON_PATH = root .. "/rplugin/python3/sidekick_tools/defaults.json"
local HELP_PATH = root .. "/doc/sidekick_tools.txt"
local WIDTH = 78

-- JSON ---------------------------------------------------------------------------------
-- Written by hand so the bytes are the same on every run and Neovim: object
-- keys sorted (the top level keeps the declaration's order), two-space indent.

local function json_string(s)
  return '"'
    .. s:gsub('[%c"\\]', function(c)
      local named = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t" }
      return named[c] or string.format("\\u%04x", c:byte())
    end)
    .. '"'
end

local function json(value, indent)
  local t = type(value)
  if value == nil or value == vim.NIL or t == "function" then
    return "null"
  elseif t == "boolean" then
    return tostring(value)
  elseif t == "number" then
    if value == math.floor(value) and math.abs(value) < 2 ^ 53 then
      return string.format("%d", value)
    end
    return string.format("%.17g", value)
  elseif t == "string" then
    return json_string(value)
  end
  assert(t == "table", "cannot write a " .. t .. " as JSON")
  local inner = indent .. "  "
  local items = {}
  if #value > 0 then
    for _, v in ipairs(value) do
      table.insert(items, inner .. json(v, inner))
    end
    return "[\n" .. table.concat(items, ",\n") .. "\n" .. indent .. "]"
  end
  local keys = vim.tbl_keys(value)
  if #keys == 0 then
    return "{}"
  end
  table.sort(keys)
  for _, k in ipairs(keys) do
    table.insert(items, inner .. json_string(k) .. ": " .. json(value[k], inner))
  end
  return "{\n" .. table.concat(items, ",\n") .. "\n" .. indent .. "}"
end

local function defaults_json()
  local lines = {
    "{",
    '  "generated_by": "nvim -l scripts/gen_options.lua from lua/sidekick_tools/config.lua",',
    '  "defaults": {',
  }
  for i, opt in ipairs(config.options) do
    local sep = i < #config.options and "," or ""
    table.insert(lines, "    " .. json_string(opt[1]) .. ": " .. json(opt[2], "    ") .. sep)
  end
  vim.list_extend(lines, { "  }", "}" })
  return table.concat(lines, "\n") .. "\n"
end

-- help -----------------------------------------------------------------------------------

--- Words of `text` in lines of at most `width` characters, each after `indent`.
local function wrap(text, indent, width)
  local out, line = {}, ""
  for word in text:gmatch("%S+") do
    if line ~= "" and #indent + #line + 1 + #word > width then
      table.insert(out, indent .. line)
      line = word
    else
      line = line == "" and word or (line .. " " .. word)
    end
  end
  if line ~= "" then
    table.insert(out, indent .. line)
  end
  return out
end

--- `code` (one line of Lua) cut after its ", " into lines of at most `width`;
--- lines after the first are indented two more.
local function wrap_code(code, indent, width)
  local out, line = {}, ""
  for piece in (code .. ", "):gmatch("(.-, )") do
    local lead = #out == 0 and indent or (indent .. "  ")
    if line ~= "" and #lead + #line + #piece - 1 > width then
      table.insert(out, lead .. vim.trim(line))
      line = piece
    else
      line = line .. piece
    end
  end
  local lead = #out == 0 and indent or (indent .. "  ")
  table.insert(out, lead .. line:sub(1, -3))
  return out
end

local function inline(value)
  if value == vim.NIL then
    return "nil"
  end
  return vim.inspect(value, { newline = " ", indent = "" })
end

--- "string or nil", "whole number, at least 1": what the option accepts.
local function types_text(opt)
  local types = opt[3]
  local text = type(types) == "table" and table.concat(types, " or ") or types
  if opt.integer then
    text = text:gsub("number", "whole number")
  end
  if opt.min then
    text = text .. ", at least " .. opt.min
  end
  return text
end

local INTRO = {
  "Options of |sidekick_tools.setup()|, as nested tables: `tasks.max_concurrent`",
  "is `setup({ tasks = { max_concurrent = 3 } })`. Times are in seconds. A",
  "wrong type or value is reported by `setup()` with the option's name, every",
  "wrong one in one error message, and that option keeps its default:",
  "`setup()` never raises for an option, so the rest of your config still",
  "runs. What you leave out keeps its default. A name that is no option (a",
  "typo, an option of another version) is ignored, with one warning naming",
  "it; so is a provider whose `kind` is no protocol the plugin speaks (it is",
  "kept: sending to it fails, the other providers work). Keymap options take",
  "a key, `false` (none), and in the windows also a list of keys",
  "(|sidekick_tools-keymaps|).",
  "",
  "This list is generated from the one declaration of every option",
  "(lua/sidekick_tools/config.lua) by `nvim -l scripts/gen_options.lua`.",
}

local function help_section()
  local lines = vim.deepcopy(INTRO)
  for _, opt in ipairs(config.options) do
    local path, default, types, desc = opt[1], opt[2], opt[3], opt[4]
    desc = desc:gsub(":h ([%w_.-]+)", "|%1|") .. "."
    local head = string.format("`%s` (%s)", path, types_text(opt))
    local shown = inline(default)
    table.insert(lines, "")
    if #head + #shown + 14 <= WIDTH then
      table.insert(lines, string.format("%s default `%s`", head, shown))
      vim.list_extend(lines, wrap(desc, "    ", WIDTH))
    else
      table.insert(lines, head)
      vim.list_extend(lines, wrap(desc, "    ", WIDTH))
      table.insert(lines, "    Default: >lua")
      vim.list_extend(lines, wrap_code(shown, "      ", WIDTH))
      table.insert(lines, "<")
    end
  end
  table.insert(lines, "")
  return lines
end

--- The help file with its configuration section (from the line after its
--- header to the next separator) replaced by `section`.
local function help_text(current, section)
  local lines = vim.split(current, "\n", { plain = true })
  local start
  for i, line in ipairs(lines) do
    if line:find("*sidekick_tools-config*", 1, true) and line:match("^%d+%. ") then
      start = i
    elseif start and line:match("^====") then
      local out = vim.list_slice(lines, 1, start)
      table.insert(out, "")
      vim.list_extend(out, section)
      vim.list_extend(out, lines, i)
      return table.concat(out, "\n")
    end
  end
  error("no *sidekick_tools-config* section followed by a ==== line in " .. HELP_PATH)
end

-- main -----------------------------------------------------------------------------------

local function read(path)
  local f = io.open(path, "rb")
  if not f then
    return ""
  end
  local text = f:read("*a")
  f:close()
  return text
end

local check = vim.tbl_contains(arg or {}, "--check")
local stale = {}
for _, file in ipairs({
  { JSON_PATH, defaults_json },
  {
    HELP_PATH,
    function()
      return help_text(read(HELP_PATH), help_section())
    end,
  },
}) do
  local path, fresh = file[1], file[2]()
  if read(path) ~= fresh then
    table.insert(stale, path)
    if not check then
      local f = assert(io.open(path, "wb"))
      f:write(fresh)
      f:close()
    end
  end
end
for _, path in ipairs(stale) do
  io.stdout:write((check and "stale: " or "wrote: ") .. path .. "\n")
end
if check and #stale > 0 then
  io.stdout:write("run: nvim -l scripts/gen_options.lua\n")
  os.exit(1)
end
