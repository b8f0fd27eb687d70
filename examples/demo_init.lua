-- Loaded by `make demo`: the plugin from this checkout, nothing else, talking to
-- the demo's scripted model (examples/demo.py serves it on 127.0.0.1 and passes
-- its address in SIDEKICK_DEMO_URL).
vim.opt.runtimepath:prepend(vim.env.SIDEKICK_ROOT)
vim.opt.swapfile = false
vim.g.mapleader = " "

local url = vim.env.SIDEKICK_DEMO_URL
require("sidekick_tools").setup({
  python = vim.env.SIDEKICK_PYTHON,
  state_dir = vim.env.SIDEKICK_STATE_DIR,
  -- Only the scripted model: no provider here can reach the network, and none
  -- has a key.
  chat = {
    model = "demo/scripted",
    providers = url and { demo = { kind = "anthropic", base_url = url } } or {},
  },
})
if not url then
  vim.notify("demo: start it with `make demo` (it serves the scripted model)", vim.log.levels.WARN)
end

-- Until the plugin has its own :SidekickSend and :SidekickStop (and maps their
-- keys in chats), the demo maps the default keys to the Lua API.
local function has(cmd)
  return vim.fn.exists(":" .. cmd) == 2
end
vim.api.nvim_create_autocmd({ "BufReadPost", "BufNewFile" }, {
  pattern = "*.sidekick.md",
  callback = function(ev)
    local api = require("sidekick_tools")
    for lhs, spec in pairs({
      ["<leader>ss"] = { "SidekickSend", api.send, "send the chat to the model" },
      ["<leader>sx"] = { "SidekickStop", api.stop, "stop the reply" },
    }) do
      if not has(spec[1]) then
        vim.keymap.set("n", lhs, function()
          spec[2](ev.buf)
        end, { buffer = ev.buf, desc = "sidekick demo: " .. spec[3] })
      end
    end
  end,
})

-- The hint stays in view: start-up messages would overwrite one echoed earlier.
vim.api.nvim_create_autocmd("VimEnter", {
  once = true,
  callback = function()
    local send = has("SidekickSend") and "<Space>ss (:SidekickSend)" or "<Space>ss"
    local hint = "demo, scripted model (offline): "
      .. send
      .. " sends · a ▶ call waits for you: <Space>sr runs it, <Space>sd denies it"
      .. " · <Space>sx stops · :qa quits"
    vim.wo.winbar = hint:gsub("%%", "%%%%")
    -- windows split from the chat's (the task list, a help window) go without it
    vim.api.nvim_create_autocmd("WinNew", {
      callback = function()
        vim.wo.winbar = ""
      end,
    })
  end,
})
