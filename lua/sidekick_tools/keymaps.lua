-- Keys, each declared as an option in config.lua: the chat buffers' keys (one
-- per command that names its `key`, described by that command) and the keys of
-- the plugin's windows (each described by its own option).
local config = require("sidekick_tools.config")

local M = {}

-- What every key's description starts with (which-key shows it): the plugin's
-- own name, as its messages say it; "sidekick" alone is another plugin's.
local PREFIX = "sidekick_tools: "

--- Keys of a keymap option: a string, a list of strings, or false/"" for none.
---@return string[]
function M.keys(value)
  if type(value) == "string" then
    return value ~= "" and { value } or {}
  elseif type(value) == "table" then
    return vim.tbl_filter(function(k)
      return type(k) == "string" and k ~= ""
    end, value)
  end
  return {}
end

--- The configured keys of window `group` ("tasks_window", "output_window"), by action.
---@return table<string, any>
function M.of(group)
  return (config.current.keymaps or {})[group] or {}
end

--- What key `name` of window `group` does: its option's description without
--- the window's name ("Tasks window: halt the task" -> "halt the task").
---@param group string "tasks_window" | "output_window"
function M.describe(group, name)
  local desc = config.description("keymaps." .. group .. "." .. name) or name
  return (desc:gsub("^[^:]*: ", "", 1))
end

--- The actions of window `group`, in the order their options are declared.
---@return string[]
function M.actions(group)
  return config.children("keymaps." .. group)
end

--- Map the keys of window `group` in `buf` to `actions` (name -> function); an
--- action's error is said in one message.
function M.set_window_keys(buf, group, actions)
  local maps = M.of(group)
  for _, name in ipairs(M.actions(group)) do
    local fn = actions[name]
    for _, lhs in ipairs(fn and M.keys(maps[name]) or {}) do
      vim.keymap.set("n", lhs, function()
        local ok, err = pcall(fn)
        if not ok then
          vim.notify(tostring(err), vim.log.levels.ERROR)
        end
      end, {
        buffer = buf,
        nowait = true,
        silent = true,
        desc = PREFIX .. M.describe(group, name),
      })
    end
  end
end

--- "keys  what they do" of each configured key of window `group`.
---@return string[]
function M.help_lines(group)
  local maps = M.of(group)
  local out = {}
  for _, name in ipairs(M.actions(group)) do
    local keys = M.keys(maps[name])
    if #keys > 0 then
      table.insert(out, string.format("%-12s %s", table.concat(keys, " "), M.describe(group, name)))
    end
  end
  return out
end

--- Keys the configuration gives to two actions of the same place (the chat
--- buffers, a window): one of the two mappings would silently replace the other.
---@return string[] one message per such key
function M.conflicts()
  local maps = config.current.keymaps or {}
  local out = {}
  local function check(entries) -- { option path, its keys } in the order they are mapped
    local seen = {}
    for _, entry in ipairs(entries) do
      for _, lhs in ipairs(entry[2]) do
        local code = vim.api.nvim_replace_termcodes(lhs, true, true, true)
        local first = seen[code]
        if first and first ~= entry[1] then
          table.insert(
            out,
            string.format(
              "sidekick_tools: %s and %s are both %s; only %s works",
              first,
              entry[1],
              lhs,
              entry[1]
            )
          )
        end
        seen[code] = entry[1]
      end
    end
  end
  local chat = {}
  for _, cmd in ipairs(require("sidekick_tools.commands").list) do
    if cmd.key then
      table.insert(chat, { "keymaps." .. cmd.key, M.keys(maps[cmd.key]) })
    end
  end
  check(chat)
  for _, group in ipairs({ "tasks_window", "output_window" }) do
    local entries = {}
    for _, name in ipairs(M.actions(group)) do
      local path = "keymaps." .. group .. "." .. name
      table.insert(entries, { path, M.keys(M.of(group)[name]) })
    end
    check(entries)
  end
  return out
end

--- Is the buffer-local normal-mode mapping of `lhs` in `buf` the one
--- apply_chat() made for `rhs`? (not one the user has put over it since)
local function ours(buf, lhs, rhs)
  for _, m in ipairs(vim.api.nvim_buf_get_keymap(buf, "n")) do
    if m.lhs == lhs then
      return m.rhs == rhs and vim.startswith(m.desc or "", PREFIX)
    end
  end
  return false
end

--- Buffer-local keymaps of a chat buffer: the key of each command that names
--- one (false or "" in the option: none). The keys an earlier call mapped and
--- the configuration no longer gives (setup() again) are taken back, unless
--- the user mapped something else there meanwhile.
function M.apply_chat(buf)
  local maps = config.current.keymaps or {}
  local before = vim.b[buf].sidekick_tools_keys or {}
  for lhs, rhs in pairs(before) do
    if ours(buf, lhs, rhs) then
      vim.api.nvim_buf_del_keymap(buf, "n", lhs)
    end
  end
  local mapped = vim.empty_dict()
  for _, cmd in ipairs(require("sidekick_tools.commands").list) do
    local lhs = cmd.key and maps[cmd.key]
    if type(lhs) == "string" and lhs ~= "" then
      local rhs = "<Cmd>" .. cmd.name .. "<CR>"
      vim.keymap.set("n", lhs, rhs, { buffer = buf, desc = PREFIX .. cmd.desc, silent = true })
      -- by the key as Neovim holds it (<leader> expanded): a leader changed
      -- since does not make it another key
      local held = vim.api.nvim_buf_call(buf, function()
        return vim.fn.maparg(lhs, "n", false, true)
      end)
      if held.lhs then
        mapped[held.lhs] = rhs
      end
    end
  end
  vim.b[buf].sidekick_tools_keys = mapped
end

--- setup() ran (again): every loaded chat gets the configured keys.
function M.apply_to_open_chats()
  for _, buf in ipairs(require("sidekick_tools.chats").loaded()) do
    M.apply_chat(buf)
  end
end

return M
