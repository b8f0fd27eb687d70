"""`make demo`: open Neovim on an example chat with the plugin loaded.

The demo works in a temporary directory, removed when Neovim exits; a hint in
the chat window's winbar says what to try. `make demo HEADLESS=1` runs the same
walk-through without a UI, the way a user would (cursor on the first call,
:SidekickRunTool, then consent to the call the chain stopped at) and prints the
resulting chat.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HINT = (
    "demo: cursor on the first ```tool block, <Space>sr runs it (:SidekickRunTool)"
    " · <Space>sd denies · :SidekickTasks · :qa quits"
)
HELLO = '''"""A tiny script for the demo."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--count", type=int, default=1)
args = parser.parse_args()
for i in range(args.count):
    print(f"hello #{i + 1}")
'''


def prepare() -> tuple[Path, Path, dict[str, str]]:
    base = Path(tempfile.mkdtemp(prefix="sidekick-demo-"))
    work = base / "project"
    work.mkdir()
    (work / "hello.py").write_text(HELLO)
    chat = work / "demo.sidekick.md"
    shutil.copy(ROOT / "examples" / "demo.sidekick.md", chat)
    env = dict(os.environ)
    env.update(
        SIDEKICK_ROOT=str(ROOT),
        SIDEKICK_PYTHON=sys.executable,
        SIDEKICK_STATE_DIR=str(base / "state"),
        SIDEKICK_DEMO_HINT=HINT,
    )
    return work, chat, env


def nvim_binary() -> str:
    local = Path(sys.executable).parent / "nvim"
    return str(local) if local.exists() else (shutil.which("nvim") or "nvim")


def wait_for(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit("demo: timed out waiting for the tool calls to finish")


def headless(work: Path, chat: Path, env: dict[str, str]) -> int:
    import pynvim

    os.environ.update(env)
    os.chdir(work)
    argv = [nvim_binary(), "--embed", "--headless", "--clean", "-n", "-u"]
    argv.append(str(ROOT / "examples" / "demo_init.lua"))
    nvim = pynvim.attach("child", argv=argv)
    try:
        nvim.command(f"edit {chat}")
        lines = lambda: nvim.current.buffer[:]  # noqa: E731
        first = lines().index("```tool list_directory id=call_01") + 1
        nvim.command(f"call cursor({first}, 1) | SidekickRunTool")
        # list_directory and read_files are safe: the chain runs them, then stops
        # at the command, which needs the user's consent.
        wait_for(lambda: any("result id=call_02" in line for line in lines()))
        third = lines().index("```tool run_terminal_command id=call_03") + 1
        nvim.command(f"call cursor({third}, 1) | SidekickRunTool")
        wait_for(lambda: lines()[-1].startswith("USER:"))
        print("\n".join(lines()))

        def diagnostics() -> list[str]:
            return nvim.exec_lua(
                "local ns = vim.api.nvim_create_namespace('sidekick_tools')\n"
                "return vim.tbl_map(function(d) return (d.lnum + 1) .. ': ' .. d.message end,"
                " vim.diagnostic.get(0, { namespace = ns }))"
            )

        # Bursts of state changes are drawn at most every 50 ms: wait for the last draw.
        diags = wait_for(
            lambda: (d := diagnostics()) and len(d) == 3 and all("✓" in m for m in d) and d
        )
        print("\n-- diagnostics --")
        print("\n".join(diags))
    finally:
        try:
            nvim.command("qall!")
        except Exception:
            pass
        shutil.rmtree(work.parent, ignore_errors=True)
    return 0


def main() -> int:
    work, chat, env = prepare()
    if os.environ.get("HEADLESS"):
        return headless(work, chat, env)
    print(f"demo chat: {chat}")
    argv = [nvim_binary(), "--clean", "-u", str(ROOT / "examples" / "demo_init.lua"), str(chat)]
    try:
        return subprocess.call(argv, cwd=work, env=env)
    finally:
        shutil.rmtree(work.parent, ignore_errors=True)
        print(f"demo: removed {work.parent}")


if __name__ == "__main__":
    sys.exit(main())
