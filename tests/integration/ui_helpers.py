"""Helpers shared by the task-view tests (tasks window, output view, events)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.conftest import wait_for


def call_block(tool: str, params: dict, call_id: str = "call_01") -> str:
    return f"```tool {tool} id={call_id}\n{json.dumps(params)}\n```\n"


def chat(*blocks: str) -> str:
    return "USER: please help\n\nASSISTANT: On it.\n\n" + "\n".join(blocks)


HEADER_ROW = 4  # 0-based row of the first call header in chat()


def three_in_a_batch(editor: Any) -> tuple[Path, dict[str, int]]:
    """`:SidekickRunTools!` on three commands `a`, `b`, `c` (printing first,
    second, third); `a` runs until the returned marker exists, so `b` and `c`
    wait their turn in the batch. Their header rows by id."""
    editor.setup()
    marker = editor.workdir / "go"
    wait = f"while [ ! -e {marker} ]; do sleep 0.05; done; echo first"
    cmds = {"a": wait, "b": "echo second", "c": "echo third"}
    editor.open_chat(
        chat(*(call_block("run_terminal_command", {"command": c}, cid) for cid, c in cmds.items()))
    )
    editor.nvim.command("SidekickRunTools!")
    lines = editor.lines()
    return marker, {cid: lines.index(f"```tool run_terminal_command id={cid}") for cid in cmds}


def gated(marker: Path, before: str = "echo '[PROGRESS:50] half'", after: str = "echo done") -> str:
    """A shell command: `before`, wait for `marker` to exist, then `after`."""
    return f"{before}; while [ ! -e {marker} ]; do sleep 0.05; done; {after}"


def start_background(
    editor: Any, command: str, call_id: str = "call_01", name: str = "chat.sidekick.md"
) -> str:
    """Open a chat with one async run_terminal_command call, run it, return its token."""
    editor.open_chat(
        chat(call_block("run_terminal_command", {"command": command, "async": True}, call_id)),
        name=name,
    )
    editor.run_tool(HEADER_ROW + 1)
    pattern = re.compile(rf"```result id={call_id} status=\w+.*task=([0-9a-f]{{6}})")
    m = wait_for(lambda: pattern.search(editor.text()))
    return m.group(1)


def current_buf(editor: Any) -> int:
    return editor.nvim.current.buffer.number


def wait_lines(editor: Any, buf: int, predicate: Any, timeout: float = 20) -> list[str]:
    def check() -> Any:
        lines = editor.lines(buf)
        return lines if predicate(lines) else None

    try:
        return wait_for(check, timeout)
    except AssertionError:
        raise AssertionError(f"buffer {buf} never matched; lines: {editor.lines(buf)}") from None


def row_of(lines: list[str], token: str) -> int:
    """0-based row of the line naming `token`."""
    for i, line in enumerate(lines):
        if token in line:
            return i
    raise AssertionError(f"{token} not in {lines}")


def result_body(editor: Any, call_id: str, buf: int = 0) -> list[str]:
    """The lines of call `call_id`'s result block, between its fences."""
    lines = editor.lines(buf)
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"```result id={call_id} "))
    return lines[start + 1 : lines.index("```", start + 1)]
