-- :SidekickChat: a new chat file under chat.dir, named for the minute it was
-- made, with the model in its front matter and an empty USER: line to write in.
local config = require("sidekick_tools.config")
local models = require("sidekick_tools.models")

local M = {}

local uv = vim.uv or vim.loop

--- Where new chats go: chat.dir, else stdpath("data")/sidekick_tools/chats.
---@return string
function M.dir()
  local dir = (config.current.chat or {}).dir
  if type(dir) ~= "string" or dir == "" then
    dir = vim.fn.stdpath("data") .. "/sidekick_tools/chats"
  end
  return vim.fs.normalize(dir)
end

--- The lines of a new chat using model `spec`.
---@return string[]
function M.lines(spec)
  return { "---", "model: " .. spec, "---", "USER: " }
end

--- Create a file that did not exist, named `<stamp>[-N].sidekick.md` in `dir`:
--- an existing file (or a buffer of that name) is never reused.
---@return string|nil path, string|nil err
local function create_unique(dir, stamp, text)
  for n = 1, 1000 do
    local name = n == 1 and stamp or string.format("%s-%d", stamp, n)
    local path = dir .. "/" .. name .. ".sidekick.md"
    if vim.fn.bufexists(path) == 0 then
      -- O_EXCL: the file is ours, or it existed and we try the next name
      local fd, err, code = uv.fs_open(path, "wx", 384)
      if fd then
        local _, write_err = uv.fs_write(fd, text, 0)
        uv.fs_close(fd)
        if write_err then
          return nil, write_err
        end
        return path
      elseif code ~= "EEXIST" then
        return nil, err
      end
    end
  end
  return nil, "no free name in " .. dir
end

--- Open a new chat using model `spec` (default chat.model).
---@param spec string|nil
---@return string path
function M.open(spec)
  spec = spec and vim.trim(spec) or ""
  if spec == "" then
    spec = (config.current.chat or {}).model or ""
  end
  local problem = models.problem(spec)
  if problem then
    error(problem, 0)
  end
  local dir = M.dir()
  local made, dir_err = require("sidekick_tools.directory").make(dir)
  if not made then
    error(string.format("sidekick_tools: chat.dir %s cannot be used: %s", dir, dir_err), 0)
  end
  local lines = M.lines(spec)
  local path, err = create_unique(dir, os.date("%Y-%m-%d-%H%M"), table.concat(lines, "\n") .. "\n")
  if not path then
    error("sidekick_tools: cannot create a chat in " .. dir .. ": " .. tostring(err), 0)
  end
  local ok, edit_err = pcall(vim.cmd.edit, vim.fn.fnameescape(path))
  if not ok then -- the window cannot leave its buffer ('nohidden', unsaved): no chat left behind
    uv.fs_unlink(path)
    error("sidekick_tools: cannot open a new chat here: " .. tostring(edit_err), 0)
  end
  models.choose(vim.api.nvim_get_current_buf(), spec) -- the user's own choice: never asked about
  vim.api.nvim_win_set_cursor(0, { #lines, #lines[#lines] })
  return path
end

return M
