-- Tokens in and out (and cache reads) of each reply, as virtual text at the end
-- of its ASSISTANT: line; never in the text. A line rewritten (a formatter, a
-- reload) takes its usage with it, rather than leave it on another line.
local client = require("sidekick_tools.client")
local reply_region = require("sidekick_tools.reply_region")

local M = {}

M.ns = vim.api.nvim_create_namespace("sidekick_tools_usage")

local function show(ev)
  local row = reply_region.rows(ev.buf, ev.mark)
  if row then
    vim.api.nvim_buf_set_extmark(ev.buf, M.ns, row, 0, {
      id = ev.mark,
      virt_text = { { ev.text, "Comment" } },
      virt_text_pos = "eol",
      invalidate = true,
      undo_restore = false,
    })
  end
end

function M.register()
  client.on("usage", show)
end

return M
