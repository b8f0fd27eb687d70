-- ANSI in a task's output: the text a terminal would show (escape sequences
-- and control characters removed, a carriage return keeping what follows it)
-- and the colour spans its SGR sequences ask for, as highlight groups.
local M = {}

local palette = {
  "#000000",
  "#cd3131",
  "#0dbc79",
  "#e5e510",
  "#2472c8",
  "#bc3fbc",
  "#11a8cd",
  "#e5e5e5",
  "#666666",
  "#f14c4c",
  "#23d18b",
  "#f5f543",
  "#3b8eea",
  "#d670d6",
  "#29b8db",
  "#ffffff",
}

local defined = {}

local function color_of(idx)
  if idx < 16 then
    return vim.g["terminal_color_" .. idx] or palette[idx + 1]
  end
  if idx < 232 then
    local n = idx - 16
    local steps = { 0, 95, 135, 175, 215, 255 }
    return string.format(
      "#%02x%02x%02x",
      steps[math.floor(n / 36) + 1],
      steps[math.floor(n / 6) % 6 + 1],
      steps[n % 6 + 1]
    )
  end
  local v = 8 + (idx - 232) * 10
  return string.format("#%02x%02x%02x", v, v, v)
end

--- Highlight group for an SGR state, defined on first use.
local function ansi_group(fg, bold)
  if not fg and not bold then
    return nil
  end
  local name = "SidekickAnsi"
    .. (fg and tostring(fg):gsub("#", "x") or "")
    .. (bold and "Bold" or "")
  if not defined[name] then
    local spec = { bold = bold or nil }
    if type(fg) == "number" then
      spec.fg = color_of(fg)
      spec.ctermfg = fg
    elseif fg then
      spec.fg = fg
    end
    vim.api.nvim_set_hl(0, name, spec)
    defined[name] = true
  end
  return name
end

local function apply_sgr(params, st)
  local codes = {}
  for _, n in ipairs(vim.split(params, "[;:]")) do
    table.insert(codes, tonumber(n) or 0)
  end
  local i = 1
  while i <= #codes do
    local c = codes[i]
    if c == 0 then
      st.fg, st.bold = nil, false
    elseif c == 1 then
      st.bold = true
    elseif c == 22 then
      st.bold = false
    elseif c >= 30 and c <= 37 then
      st.fg = c - 30
    elseif c >= 90 and c <= 97 then
      st.fg = c - 90 + 8
    elseif c == 39 then
      st.fg = nil
    elseif c == 38 or c == 48 then
      local fg = c == 38
      if codes[i + 1] == 5 then
        if fg then
          st.fg = codes[i + 2]
        end
        i = i + 2
      elseif codes[i + 1] == 2 then
        if fg then
          st.fg =
            string.format("#%02x%02x%02x", codes[i + 2] or 0, codes[i + 3] or 0, codes[i + 4] or 0)
        end
        i = i + 4
      end
    end
    i = i + 1
  end
end

--- Text of one raw line without escape sequences and control characters, and
--- the colour spans the SGR sequences asked for: { col_start, col_end, group }.
--- `st` carries the SGR state from line to line.
function M.parse_line(raw, st)
  st = st or {}
  raw = raw:gsub("\r$", "")
  if raw:find("\r", 1, true) then -- a terminal would have overwritten: keep the last part
    raw = raw:match("([^\r]*)$")
  end
  if not raw:find("\27", 1, true) then
    local text = raw:gsub("[%z\1-\8\11-\31\127]", "")
    local group = ansi_group(st.fg, st.bold)
    return text, group and #text > 0 and { { 0, #text, group } } or nil
  end
  local out, spans, pos, col = {}, {}, 1, 0
  local function emit(s)
    s = s:gsub("[%z\1-\8\11-\31\127]", "")
    if s == "" then
      return
    end
    local group = ansi_group(st.fg, st.bold)
    if group then
      table.insert(spans, { col, col + #s, group })
    end
    table.insert(out, s)
    col = col + #s
  end
  while pos <= #raw do
    local esc = raw:find("\27", pos, true)
    if not esc then
      emit(raw:sub(pos))
      break
    end
    emit(raw:sub(pos, esc - 1))
    local nxt = raw:sub(esc + 1, esc + 1)
    if nxt == "[" then
      local params, final, stop = raw:match("^%[([%d;:?<=>]*)[ -/]*([@-~])()", esc + 1)
      if stop then
        if final == "m" then
          apply_sgr(params, st)
        end
        pos = stop
      else
        pos = #raw + 1 -- unterminated sequence: drop the rest
      end
    elseif nxt == "]" then -- OSC, ended by BEL or ESC \
      local stop = raw:find("\7", esc, true)
      local st_end = raw:find("\27\\", esc + 1, true)
      if st_end and (not stop or st_end < stop) then
        pos = st_end + 2
      elseif stop then
        pos = stop + 1
      else
        pos = #raw + 1
      end
    else
      pos = esc + 2
    end
  end
  return table.concat(out), #spans > 0 and spans or nil
end

return M
