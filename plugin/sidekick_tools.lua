-- Commands and autocommands only. Every module loads on first use, so start-up
-- costs a handful of definitions and the Python host starts when first needed.
if vim.g.loaded_sidekick_tools then
  return
end
vim.g.loaded_sidekick_tools = true

if vim.fn.has("nvim-0.10") == 0 then
  vim.api.nvim_err_writeln("sidekick_tools needs Neovim 0.10 or later")
  return
end

local names = {
  SidekickRunTool = {
    nargs = 0,
    desc = "Run the tool call under the cursor, then chain auto-acceptable calls",
  },
  SidekickRunTools = {
    nargs = 0,
    bang = true,
    desc = "Run every pending tool call of the last assistant message (!: without asking)",
  },
  SidekickDeny = {
    nargs = "*",
    desc = "Deny the pending tool call under the cursor: [reason] is what the model reads",
  },
  SidekickHalt = { nargs = "?", desc = "Cancel the task under the cursor, or TOKEN" },
  SidekickTasks = {
    nargs = "?",
    bang = true,
    desc = "List this Neovim's tasks (!: every Neovim's and MCP client's): [running|completed|failed|all]",
    complete = function()
      return { "running", "queued", "completed", "failed", "cancelled", "all" }
    end,
  },
  SidekickOutput = { nargs = "*", desc = "Live view of a task's output: [TOKEN] [/regex/]" },
  SidekickInstall = {
    nargs = 0,
    desc = "Create the plugin's own Python venv with pynvim (and mcp on Python 3.10+)",
  },
  SidekickMcp = { nargs = 0, desc = "Print the command that registers the MCP server" },
}

for name, opts in pairs(names) do
  vim.api.nvim_create_user_command(name, function(a)
    require("sidekick_tools.commands").dispatch(name, a)
  end, opts)
end

local group = vim.api.nvim_create_augroup("sidekick_tools", { clear = true })

-- Nothing in a chat (a tool's output, say) may act on the editor: no modelines.
-- Set before the text is read, so `vim: set ...` in a result is never applied.
vim.api.nvim_create_autocmd({ "BufReadPre", "BufNewFile" }, {
  group = group,
  pattern = "*.sidekick.md",
  callback = function(ev)
    vim.bo[ev.buf].modeline = false
  end,
})

vim.api.nvim_create_autocmd({ "BufReadPost", "BufNewFile" }, {
  group = group,
  pattern = "*.sidekick.md",
  callback = function(ev)
    require("sidekick_tools.commands").chat_opened(ev.buf)
  end,
})

vim.api.nvim_create_autocmd("VimLeavePre", {
  group = group,
  callback = function()
    if package.loaded["sidekick_tools.host"] then
      require("sidekick_tools.host").shutdown()
    end
  end,
})
