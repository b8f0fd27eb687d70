-- Directories the plugin creates (the state dir, chat.dir): made with their
-- parents, 0700, and the reason when that cannot be done, never an error.
local M = {}

local uv = vim.uv or vim.loop

--- Make directory `dir` and its missing parents (mode 0700).
---@param dir string
---@return boolean|nil ok, string|nil err the OS error ("ENOENT: no such file or directory: /x")
function M.make(dir)
  local stat = uv.fs_stat(dir)
  if stat then
    if stat.type == "directory" then
      return true
    end
    return nil, "ENOTDIR: not a directory: " .. dir
  end
  local parent = vim.fs.dirname(dir)
  if parent and parent ~= dir then
    local ok, err = M.make(parent)
    if not ok then
      return nil, err
    end
  end
  local ok, err, code = uv.fs_mkdir(dir, 448)
  if not ok and code ~= "EEXIST" then
    return nil, err
  end
  return true
end

--- A new private directory (0700) under the temporary directory, or nil and
--- the reason.
---@return string|nil path, string|nil err
function M.temporary()
  local base = vim.env.TMPDIR
  if not base or base == "" or vim.fn.isdirectory(base) == 0 then
    base = "/tmp"
  end
  return uv.fs_mkdtemp(vim.fs.joinpath(base, "sidekick_tools-XXXXXX"))
end

return M
