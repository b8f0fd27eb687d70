-- The buffers that show a file a tool writes (write_file, replace_in_file).
-- The host asks before the write whether any holds unsaved changes (the tool
-- then writes nothing: the user's edits and the model's would not both
-- survive), and says after it that the file changed, so that a buffer
-- showing it reads it again at once rather than at the next :checktime.
local M = {}

-- `name` as a real path (links resolved), as the host names the file it
-- writes (Python's os.path.realpath): a file not on disk yet by its nearest
-- existing folder's real path and the names below it.
local function real(name)
  local path = vim.fs.normalize(name)
  local rest = {}
  while path ~= "" do
    local found = vim.uv.fs_realpath(path)
    if found then
      return #rest == 0 and found or vim.fs.joinpath(found, unpack(rest))
    end
    local parent = vim.fs.dirname(path)
    if parent == path then
      break
    end
    table.insert(rest, 1, vim.fs.basename(path))
    path = parent
  end
  return vim.fs.normalize(name)
end

--- The loaded buffers editing file `path` (a real path).
---@param path string
---@return integer[]
function M.showing(path)
  local out = {}
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.bo[buf].buftype == "" then
      local name = vim.api.nvim_buf_get_name(buf)
      if name ~= "" and real(name) == path then
        table.insert(out, buf)
      end
    end
  end
  return out
end

--- The buffers holding unsaved changes to file `path`.
---@param path string
---@return integer[]
function M.unsaved(path)
  return vim.tbl_filter(function(buf)
    return vim.bo[buf].modified
  end, M.showing(path))
end

--- File `path` was written by a tool: each buffer showing it with no
--- changes of its own, and 'autoread' on, reads it again (its undo history
--- keeps what it held: `u` there takes the tool's change back in the buffer).
---@param path string
function M.reload(path)
  for _, buf in ipairs(M.showing(path)) do
    -- 'autoread' is global-local: a buffer without its own value has nil here
    local autoread = vim.api.nvim_get_option_value("autoread", { buf = buf })
    if autoread == nil then
      autoread = vim.go.autoread
    end
    if autoread and not vim.bo[buf].modified then
      vim.cmd.checktime(buf)
    end
  end
end

return M
