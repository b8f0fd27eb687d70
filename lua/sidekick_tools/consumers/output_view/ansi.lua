-- ANSI in a task's output: the text a terminal would show (escape sequences
-- and control characters removed, a carriage return keeping what follows it)
-- and the colour spans its SGR sequences ask for, as highlight groups of the
-- 256-colour palette.
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

-- the levels of the 6x6x6 colour cube (indices 16-231)
local CUBE = { 0, 95, 135, 175, 215, 255 }

--- The colour of palette index `idx` (0-255).
local function color_of(idx)
  if idx < 16 then
    return vim.g["terminal_color_" .. idx] or palette[idx + 1]
  end
  if idx < 232 then
    local n = idx - 16
    return string.format(
      "#%02x%02x%02x",
      CUBE[math.floor(n / 36) + 1],
      CUBE[math.floor(n / 6) % 6 + 1],
      CUBE[n % 6 + 1]
    )
  end
  local v = 8 + (idx - 232) * 10
  return string.format("#%02x%02x%02x", v, v, v)
end

--- The nearest cube level's position (0-5) for a channel value (0-255).
local function cube_step(v)
  local best = 0
  for i = 2, #CUBE do
    if math.abs(CUBE[i] - v) < math.abs(CUBE[best + 1] - v) then
      best = i - 1
    end
  end
  return best
end

--- The palette index (16-255) nearest to a 24-bit colour. Output chooses its
--- colours: each distinct one would be a highlight group, and Neovim has room
--- for about 20,000 of those for every plugin together, so colours are kept
--- to the 256 of the palette.
local function nearest_index(r, g, b)
  local ri, gi, bi = cube_step(r), cube_step(g), cube_step(b)
  local cube = 16 + 36 * ri + 6 * gi + bi
  local cube_err = (CUBE[ri + 1] - r) ^ 2 + (CUBE[gi + 1] - g) ^ 2 + (CUBE[bi + 1] - b) ^ 2
  local gray = math.min(23, math.max(0, math.floor(((r + g + b) / 3 - 8) / 10 + 0.5)))
  local v = 8 + gray * 10
  local gray_err = (v - r) ^ 2 + (v - g) ^ 2 + (v - b) ^ 2
  return gray_err < cube_err and 232 + gray or cube
end

--- Highlight group for an SGR state (`fg` a palette index), defined on first use.
local function ansi_group(fg, bold)
  if not fg and not bold then
    return nil
  end
  local name = "SidekickAnsi" .. (fg or "") .. (bold and "Bold" or "")
  if not defined[name] then
    local spec = { bold = bold or nil }
    if fg then
      spec.fg = color_of(fg)
      spec.ctermfg = fg
    end
    vim.api.nvim_set_hl(0, name, spec)
    defined[name] = true
  end
  return name
end

--- A colour parameter as a whole number in 0..255 (nil when absent or out of range).
local function byte(n)
  return n and n >= 0 and n <= 255 and n == math.floor(n) and n or nil
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
          st.fg = byte(codes[i + 2]) -- out of range: no colour
        end
        i = i + 2
      elseif codes[i + 1] == 2 then
        local r, g, b = byte(codes[i + 2] or 0), byte(codes[i + 3] or 0), byte(codes[i + 4] or 0)
        if fg then
          st.fg = r and g and b and nearest_index(r, g, b) or nil
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
  local cr = raw:find("\r", 1, true)
  if cr then -- a terminal would have overwritten: keep the last part
    local last = cr
    while cr do -- plain finds: a pattern match from each position is quadratic on long lines
      last, cr = cr, raw:find("\r", cr + 1, true)
    end
    raw = raw:sub(last + 1)
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
    elseif nxt == "]" then -- OSC, ended by BEL or ESC \ (another ESC starts a new sequence)
      local stop = raw:find("[\7\27]", esc + 2)
      if not stop then
        pos = #raw + 1
      elseif raw:byte(stop) == 7 then
        pos = stop + 1
      elseif raw:sub(stop + 1, stop + 1) == "\\" then
        pos = stop + 2
      else
        pos = stop
      end
    else
      pos = esc + 2
    end
  end
  return table.concat(out), #spans > 0 and spans or nil
end

return M
