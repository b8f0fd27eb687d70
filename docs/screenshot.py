"""Regenerate docs/screenshot.png: the real Neovim under tmux, rendered with Pillow.

    .venv/bin/python docs/screenshot.py

Needs tmux, Pillow and fontTools (both come with the dev venv's dependencies or
`pip install pillow fonttools`) and the DejaVu fonts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fontTools.ttLib import TTFont
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parents[1]
COLS, ROWS = 150, 44
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
SIZE = 15

INIT = """
vim.opt.runtimepath:prepend(vim.env.SIDEKICK_ROOT)
vim.opt.swapfile = false
vim.opt.termguicolors = true
vim.opt.laststatus = 2
vim.opt.statusline = " %f %= %{v:lua.require'sidekick_tools'.statusline()} "
require("sidekick_tools").setup({
  python = vim.env.SIDEKICK_PYTHON,
  state_dir = vim.env.SIDEKICK_STATE_DIR,
  tasks = { hybrid_threshold = 1 },
})
vim.diagnostic.config({ virtual_text = true, underline = false, signs = false })
"""

SCRIPT = r"""
printf '\033[1;34m==>\033[0m collecting tests\n'
for d in api auth billing; do
  printf '\033[32mPASS\033[0m tests/%s/test_models.py (12 tests)\n' "$d"
done
echo '[PROGRESS:20] Scanning api/'
echo 'warning: deprecated fixture "db_session" in tests/conftest.py' >&2
sleep 2
printf '\033[32mPASS\033[0m tests/auth/test_login.py (31 tests)\n'
printf '\033[31mFAIL\033[0m tests/auth/test_tokens.py::test_refresh_expired\n'
echo '[PROGRESS:45] Scanning auth/'
printf '\033[32mPASS\033[0m tests/auth/test_sessions.py (8 tests)\n'
while [ ! -e release ]; do sleep 0.1; done
"""

CHAT = """USER: The auth tests are flaky. Can you run the whole suite and the linter?

ASSISTANT: I'll run both; the suite takes a while, so it goes to the background.

```tool run_terminal_command id=call_01
{"command": "sh suite.sh", "purpose": "Run the full test suite"}
```

```tool run_terminal_command id=call_02
{"command": "echo 'ruff: All checks passed!'", "purpose": "Lint"}
```
"""


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def keys(session: str, *seq: str, pause: float = 0.6) -> None:
    for s in seq:
        tmux("send-keys", "-t", session, s)
        time.sleep(pause)


def capture(workdir: Path) -> str:
    session = "sidekick-shot"
    nvim = ROOT / ".venv" / "bin" / "nvim"
    (workdir / "init.lua").write_text(INIT)
    (workdir / "suite.sh").write_text(SCRIPT)
    (workdir / "flaky.sidekick.md").write_text(CHAT)
    env = {
        "SIDEKICK_ROOT": str(ROOT),
        "SIDEKICK_PYTHON": str(ROOT / ".venv" / "bin" / "python"),
        "SIDEKICK_STATE_DIR": str(workdir / "state"),
        "COLORTERM": "truecolor",
        "TERM": "tmux-256color",
    }
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    cmd = f"cd {workdir} && env {exports} {nvim} -u init.lua flaky.sidekick.md"
    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    tmux(
        "-f", "/dev/null", "new-session", "-d", "-s", session, "-x", str(COLS), "-y", str(ROWS), cmd
    )
    tmux("set-option", "-t", session, "-g", "default-terminal", "tmux-256color")
    tmux("set-option", "-t", session, "-ga", "terminal-overrides", ",*:RGB")
    try:
        time.sleep(1.5)
        keys(session, ":7", "Enter", ":SidekickRunTool", "Enter", pause=1.0)
        time.sleep(2.5)  # past the hybrid threshold: the call goes to the background
        keys(session, ":11", "Enter", ":SidekickRunTool", "Enter", pause=1.0)
        keys(session, ":SidekickTasks", "Enter", pause=1.0)
        keys(session, "G", pause=0.3)  # the oldest: the suite
        keys(session, "o", pause=2.5)
        keys(session, ":vertical resize 58", "Enter", "G", pause=0.5)
        return tmux("capture-pane", "-t", session, "-e", "-p")
    finally:
        (workdir / "release").write_text("")
        time.sleep(0.5)
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


PALETTE = [
    (0x1E, 0x1E, 0x1E),
    (0xCD, 0x31, 0x31),
    (0x0D, 0xBC, 0x79),
    (0xE5, 0xE5, 0x10),
    (0x24, 0x72, 0xC8),
    (0xBC, 0x3F, 0xBC),
    (0x11, 0xA8, 0xCD),
    (0xE5, 0xE5, 0xE5),
    (0x66, 0x66, 0x66),
    (0xF1, 0x4C, 0x4C),
    (0x23, 0xD1, 0x8B),
    (0xF5, 0xF5, 0x43),
    (0x3B, 0x8E, 0xEA),
    (0xD6, 0x70, 0xD6),
    (0x29, 0xB8, 0xDB),
    (0xFF, 0xFF, 0xFF),
]
DEFAULT_FG, DEFAULT_BG = (0xE0, 0xE2, 0xEA), (0x14, 0x16, 0x1B)


def color256(n: int) -> tuple[int, int, int]:
    if n < 16:
        return PALETTE[n]
    if n < 232:
        n -= 16
        steps = (0, 95, 135, 175, 215, 255)
        return steps[n // 36], steps[n // 6 % 6], steps[n % 6]
    v = 8 + (n - 232) * 10
    return v, v, v


SGR = re.compile(r"\x1b\[([0-9;:]*)m")


def cells(text: str) -> list[list[tuple[str, dict]]]:
    rows = []
    for line in text.split("\n")[:ROWS]:
        st: dict = {}
        row = []
        pos = 0
        for m in SGR.finditer(line):
            row += [(ch, dict(st)) for ch in line[pos : m.start()]]
            pos = m.end()
            codes = [int(c) if c else 0 for c in re.split("[;:]", m.group(1))] or [0]
            i = 0
            while i < len(codes):
                c = codes[i]
                if c == 0:
                    st = {}
                elif c == 1:
                    st["bold"] = True
                elif c == 7:
                    st["reverse"] = True
                elif 30 <= c <= 37 or 90 <= c <= 97:
                    st["fg"] = PALETTE[c - 30 if c < 90 else c - 82]
                elif 40 <= c <= 47 or 100 <= c <= 107:
                    st["bg"] = PALETTE[c - 40 if c < 100 else c - 92]
                elif c == 39:
                    st.pop("fg", None)
                elif c == 49:
                    st.pop("bg", None)
                elif c in (38, 48) and i + 1 < len(codes):
                    key = "fg" if c == 38 else "bg"
                    if codes[i + 1] == 5:
                        st[key] = color256(codes[i + 2])
                        i += 2
                    elif codes[i + 1] == 2:
                        st[key] = tuple(codes[i + 2 : i + 5])
                        i += 4
                i += 1
        row += [(ch, dict(st)) for ch in line[pos:]]
        rows.append(row)
    return rows


def render(text: str, out: Path) -> None:
    regular = ImageFont.truetype(str(FONT_DIR / "DejaVuSansMono.ttf"), SIZE)
    bold = ImageFont.truetype(str(FONT_DIR / "DejaVuSansMono-Bold.ttf"), SIZE)
    fallback = ImageFont.truetype(str(FONT_DIR / "DejaVuSans.ttf"), SIZE)
    mono_cmap = TTFont(str(FONT_DIR / "DejaVuSansMono.ttf")).getBestCmap()
    cw = round(regular.getlength("M"))
    ch = SIZE + 5
    img = Image.new("RGB", (cw * COLS + 16, ch * ROWS + 16), DEFAULT_BG)
    draw = ImageDraw.Draw(img)
    for y, row in enumerate(cells(text)):
        for x, (char, st) in enumerate(row):
            fg, bg = st.get("fg", DEFAULT_FG), st.get("bg", DEFAULT_BG)
            if st.get("reverse"):
                fg, bg = bg, fg
            px, py = 8 + x * cw, 8 + y * ch
            draw.rectangle([px, py, px + cw - 1, py + ch - 1], fill=bg)
            if char.strip():
                font = bold if st.get("bold") else regular
                if ord(char) not in mono_cmap:
                    font = fallback
                draw.text((px, py + 2), char, font=font, fill=fg)
    img.save(out)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        text = capture(Path(tmp))
    if os.environ.get("SHOT_DUMP"):
        Path(os.environ["SHOT_DUMP"]).write_text(text)
    render(text, ROOT / "docs" / "screenshot.png")
    print("wrote docs/screenshot.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
