-- The views' highlight groups: each a default link (constants.highlights), so
-- a colorscheme's own definition wins.
local M = {}

function M.define()
  for name, target in pairs(require("sidekick_tools.constants").highlights) do
    vim.api.nvim_set_hl(0, name, { link = target, default = true })
  end
end

return M
