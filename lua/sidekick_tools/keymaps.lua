-- Keys, each declared as an option in config.lua: the chat buffers' keys (one
-- per command that names its `key`, described by that command) and the keys of
-- the plugin's windows (each described by its own option).
local config = require("sidekick_tools.config")

local M = {}

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
  local maps = (config.current.keymaps or {})[group] or {}
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
        desc = "sidekick: " .. M.describe(group, name),
      })
    end
  end
end

--- "keys  what they do" of each configured key of window `group`.
---@return string[]
function M.help_lines(group)
  local maps = (config.current.keymaps or {})[group] or {}
  local out = {}
  for _, name in ipairs(M.actions(group)) do
    local keys = M.keys(maps[name])
    if #keys > 0 then
      table.insert(out, string.format("%-12s %s", table.concat(keys, " "), M.describe(group, name)))
    end
  end
  return out
end

--- Buffer-local keymaps of a chat buffer: the key of each command that names
--- one (false or "" in the option: none).
function M.apply_chat(buf)
  local maps = config.current.keymaps or {}
  for _, cmd in ipairs(require("sidekick_tools.commands").list) do
    local lhs = cmd.key and maps[cmd.key]
    if type(lhs) == "string" and lhs ~= "" then
      vim.keymap.set(
        "n",
        lhs,
        "<Cmd>" .. cmd.name .. "<CR>",
        { buffer = buf, desc = "sidekick: " .. cmd.desc, silent = true }
      )
    end
  end
end

--- setup() ran (again): every loaded chat gets the configured keys.
function M.apply_to_open_chats()
  for _, buf in ipairs(require("sidekick_tools.chats").loaded()) do
    M.apply_chat(buf)
  end
end

return M
