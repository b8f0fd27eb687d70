-- In-editor side of the streaming rows (DESIGN §9): a watcher that times each
-- stamped delta from the wire into the buffer, and the Lua baseline, streaming
-- the way most Neovim chat plugins do: the chat read into messages in Lua, the
-- request body written to a file, `curl -N` under `jobstart`, and one
-- `nvim_buf_set_text` at the end of the buffer per SSE text delta.
-- Times are vim.uv.hrtime() (CLOCK_MONOTONIC, the clock the fake provider
-- stamps deltas with).
local M = {}

local uv = vim.uv or vim.loop

-- Stamps ----------------------------------------------------------------------

--- Watch `buf`: each "[digits]" stamp (the fake provider's monotonic clock in
--- µs when it wrote the delta) seen in a changed line for the first time adds
--- (now − stamp) to M.watch_state.lat (ms); t_first is when the first stamp
--- was seen, t_end when a line holding `done_text` was.
function M.watch(buf, done_text)
  local st = { lat = {}, seen = {}, t_first = vim.NIL, t_end = vim.NIL, edits = 0 }
  M.watch_state = st
  vim.api.nvim_buf_attach(buf, false, {
    on_lines = function(_, b, _, first, _, new_last)
      if M.watch_state ~= st then
        return true -- a newer watch replaced this one: detach
      end
      local now = uv.hrtime()
      st.edits = st.edits + 1
      for _, line in ipairs(vim.api.nvim_buf_get_lines(b, first, new_last, false)) do
        for stamp in line:gmatch("%[(%d+)%]") do
          if not st.seen[stamp] then
            st.seen[stamp] = true
            if st.t_first == vim.NIL then
              st.t_first = now
            end
            st.lat[#st.lat + 1] = (now / 1e3 - tonumber(stamp)) / 1e3
          end
        end
        if st.t_end == vim.NIL and line:find(done_text, 1, true) then
          st.t_end = now
        end
      end
    end,
  })
  return true
end

--- { lat = {ms...}, t_first, t_end (hrtime or nil), edits = n } of the current watch.
function M.watched()
  local st = M.watch_state or { lat = {}, edits = 0, t_first = vim.NIL, t_end = vim.NIL }
  return { lat = st.lat, t_first = st.t_first, t_end = st.t_end, edits = st.edits }
end

-- The baseline ------------------------------------------------------------------

local ROLES = { SYSTEM = "system", USER = "user", ASSISTANT = "assistant" }

--- The Anthropic request for chat `buf`, built as simple chat plugins build it:
--- messages split at the role markers, everything else their text.
function M.request_body(buf, model)
  local system, messages = nil, {}
  local role, acc = nil, {}
  local function flush()
    local text = vim.trim(table.concat(acc, "\n"))
    if not role or text == "" then
      return
    end
    if role == "system" then
      system = text
      return
    end
    local last = messages[#messages]
    if last and last.role == role then
      last.content = last.content .. "\n\n" .. text
    else
      messages[#messages + 1] = { role = role, content = text }
    end
  end
  for _, line in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    local marker, rest = line:match("^(%u+):%s?(.*)$")
    if marker and ROLES[marker] then
      flush()
      role, acc = ROLES[marker], { rest }
    else
      acc[#acc + 1] = line
    end
  end
  flush()
  return vim.json.encode({
    model = model,
    max_tokens = 8192,
    stream = true,
    system = system,
    messages = messages,
  })
end

local function append(buf, text)
  local last = vim.api.nvim_buf_line_count(buf) - 1
  local col = #vim.api.nvim_buf_get_lines(buf, last, last + 1, false)[1]
  vim.api.nvim_buf_set_text(buf, last, col, last, col, vim.split(text, "\n", { plain = true }))
end

--- Send chat `buf` to the Anthropic endpoint at `url` and stream the reply
--- into the end of the buffer. M.curl_state: t0 (the call), t_exit, deltas.
function M.curl_send(buf, url, model)
  local st = { t0 = uv.hrtime(), t_exit = vim.NIL, deltas = 0, exit = vim.NIL }
  M.curl_state = st
  local body = M.request_body(buf, model)
  local path = vim.fn.tempname()
  local f = assert(io.open(path, "wb"))
  f:write(body)
  f:close()
  append(buf, "\n\nASSISTANT: ")
  local partial = ""
  st.job = vim.fn.jobstart({
    "curl",
    "-sS",
    "-N",
    url .. "/v1/messages",
    "-H",
    "content-type: application/json",
    "-H",
    "anthropic-version: 2023-06-01",
    "--data-binary",
    "@" .. path,
  }, {
    on_stdout = function(_, data)
      data[1] = partial .. data[1]
      partial = data[#data]
      for i = 1, #data - 1 do
        local line = data[i]
        if line:sub(1, 6) == "data: " then
          local ok, ev = pcall(vim.json.decode, line:sub(7))
          if ok and ev.type == "content_block_delta" and ev.delta.type == "text_delta" then
            st.deltas = st.deltas + 1
            append(buf, ev.delta.text)
          end
        end
      end
    end,
    on_exit = function(_, code)
      st.t_exit, st.exit = uv.hrtime(), code
      os.remove(path)
      append(buf, "\n\nUSER: ")
    end,
  })
  return st.t0
end

--- { t0, t_exit|nil, deltas, exit|nil } of the last M.curl_send.
function M.curl_result()
  local st = M.curl_state or {}
  return { t0 = st.t0, t_exit = st.t_exit, deltas = st.deltas, exit = st.exit }
end

-- Ours ----------------------------------------------------------------------------

--- :SidekickSend's Lua API on the current chat, the clock read just before.
function M.plugin_send()
  local t0 = uv.hrtime()
  local res, err = require("sidekick_tools").send()
  return { t0 = t0, t_return = uv.hrtime(), ok = res ~= nil, err = err or vim.NIL }
end

--- Replies whose usage is shown (one per finished reply) in the current buffer.
function M.replies_done()
  local ns = vim.api.nvim_create_namespace("sidekick_tools_usage")
  return #vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, {})
end

--- Make the last line "USER: text" (the next question).
function M.ask(text)
  local n = vim.api.nvim_buf_line_count(0)
  vim.api.nvim_buf_set_lines(0, n - 1, n, false, { "USER: " .. text })
  return true
end

return M
