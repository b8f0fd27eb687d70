-- The extmarks that track tool-call headers through edits (DESIGN §5), in the
-- plugin's namespace: the host names them by id, Lua keeps them in place.
local M = {}

M.ns = vim.api.nvim_create_namespace("sidekick_tools")

--- Set mark `id` on `row` (again: a saved, reloaded or reformatted header).
function M.place(buf, id, row)
  vim.api.nvim_buf_set_extmark(
    buf,
    M.ns,
    row,
    0,
    { id = id, invalidate = true, undo_restore = false }
  )
end

--- Row of mark `id`, nil when it was deleted or invalidated.
---@return integer|nil
function M.row(buf, id)
  local pos = vim.api.nvim_buf_get_extmark_by_id(buf, M.ns, id, { details = true })
  if pos[1] and not (pos[3] and pos[3].invalid) then
    return pos[1]
  end
  return nil
end

function M.delete(buf, id)
  pcall(vim.api.nvim_buf_del_extmark, buf, M.ns, id)
end

return M
