-- Models as a chat names them, "provider/model" (DESIGN §10): the configured
-- ones (completion), whether one can be used, and a chat's own.
-- :SidekickModel shows or sets a chat's model.
local config = require("sidekick_tools.config")
local front_matter = require("sidekick_tools.front_matter")

local M = {}

local function chat_options()
  return config.current.chat or {}
end

--- Names of the configured providers, sorted.
---@return string[]
function M.providers()
  local names = vim.tbl_keys(chat_options().providers or {})
  table.sort(names)
  return names
end

--- What is wrong with model `spec` ("provider/model"), or nil when a chat can use it.
---@param spec string
---@return string|nil
function M.problem(spec)
  local provider, model = spec:match("^([^/]+)/(.+)$")
  if not provider or spec:find("%s") then
    return string.format(
      'sidekick_tools: "%s" is not provider/model (for example %s)',
      spec,
      chat_options().model
    )
  end
  if not (chat_options().providers or {})[provider] then
    local known = M.providers()
    return string.format(
      'sidekick_tools: no provider "%s" in chat.providers (configured: %s)',
      provider,
      #known > 0 and table.concat(known, ", ") or "none"
    )
  end
  return nil
end

--- The configured models: chat.model, then each provider's `models`, as
--- "provider/model", without repeats.
---@return string[]
function M.configured()
  local out, seen = {}, {}
  local function add(spec)
    if type(spec) == "string" and spec ~= "" and not seen[spec] then
      seen[spec] = true
      table.insert(out, spec)
    end
  end
  add(chat_options().model)
  local providers = chat_options().providers or {}
  for _, name in ipairs(M.providers()) do
    for _, model in ipairs(providers[name].models or {}) do
      add(name .. "/" .. model)
    end
  end
  return out
end

--- Completion of a command's provider/model argument.
function M.complete(arglead)
  return vim.tbl_filter(function(spec)
    return spec:sub(1, #arglead) == arglead
  end, M.configured())
end

--- The model chat `buf` uses and where it comes from: "front matter" or "chat.model".
---@return string spec, string source
function M.of_buffer(buf)
  local front = front_matter.read(buf)
  local spec = front and front.values.model
  if spec and spec ~= "" then
    return spec, "front matter"
  end
  return chat_options().model, "chat.model"
end

-- The providers the user chose for each chat buffer (:SidekickModel,
-- :SidekickChat provider/model, or "Send" to the host's question about a
-- provider on this machine that the chat's front matter names): the host asks
-- about them no more (calls/outbound.py, local_question).
local chosen = {} ---@type table<integer, table<string, boolean>>

local function provider_of(spec)
  return type(spec) == "string" and spec:match("^([^/]+)/") or nil
end

--- The user chose the provider of `spec` ("provider/model"), or `provider`
--- itself, for chat `buf`.
---@param buf integer
---@param spec string
function M.choose(buf, spec)
  local provider = provider_of(spec) or spec
  if type(provider) == "string" and provider ~= "" then
    chosen[buf] = chosen[buf] or {}
    chosen[buf][provider] = true
  end
end

--- The providers the user chose for chat `buf`, sorted.
---@param buf integer
---@return string[]
function M.chosen(buf)
  local names = vim.tbl_keys(chosen[buf] or {})
  table.sort(names)
  return names
end

local NOT_A_CHAT = "sidekick_tools: this buffer is not a chat (a *.sidekick.md file)"

--- Show the model of chat `buf`; of another buffer: that it is no chat, and
--- the model a new one (:SidekickChat) would use.
function M.show(buf)
  if not require("sidekick_tools.chats").is_chat(buf) then
    vim.notify(
      string.format(
        "%s; :SidekickChat opens one using %s (chat.model)",
        NOT_A_CHAT,
        chat_options().model
      ),
      vim.log.levels.WARN
    )
    return
  end
  local spec, source = M.of_buffer(buf)
  local where = source == "front matter" and "from this chat's front matter"
    or "chat.model: this chat's front matter names no model"
  local msg = string.format("sidekick_tools: model %s (%s)", spec, where)
  local problem = M.problem(spec)
  if problem then
    vim.notify(msg .. "\n" .. problem, vim.log.levels.WARN)
  else
    vim.notify(msg, vim.log.levels.INFO)
  end
end

--- Set the model of chat `buf` in its front matter (one undo step). A buffer
--- that is not a chat, or a model that names no configured provider, is
--- refused: an error.
---@param buf integer
---@param spec string
function M.set(buf, spec)
  if not require("sidekick_tools.chats").is_chat(buf) then
    error(NOT_A_CHAT .. ": :SidekickModel sets a chat's model; nothing was changed", 0)
  end
  spec = vim.trim(spec)
  local problem = M.problem(spec)
  if problem then
    error(problem, 0)
  end
  front_matter.set(buf, "model", spec)
  M.choose(buf, spec)
  vim.notify("sidekick_tools: this chat now uses " .. spec, vim.log.levels.INFO)
end

return M
