"""Start-up and the messages around the host's life (DESIGN §3, §8): when the
host starts, what a user is told when it cannot start or crashes, what
:checkhealth says, and what quitting with running tasks says."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys

import pytest

from tests.conftest import wait_for
from tests.integration.ui_helpers import HEADER_ROW, call_block, chat, gated

pytestmark = pytest.mark.integration

RUNNING_BLOCK = (
    "USER: hi\n\nASSISTANT: ok\n\n"
    '```tool run_terminal_command id=r\n{"command": "sleep 100"}\n```\n'
    "```result id=r status=running task=abc123\nThe task continues in the background.\n```\n"
)


def settle(editor) -> None:
    """Let every callback Neovim has scheduled so far run (they run in order)."""
    editor.lua("_G.__settled = false\nvim.schedule(function() _G.__settled = true end)")
    wait_for(lambda: editor.lua("return _G.__settled"))


def host_running(editor) -> bool:
    return editor.lua("return require('sidekick_tools.host').running()")


def test_opening_a_chat_starts_the_host_only_when_it_names_a_running_task(editor):
    editor.setup()
    # pending calls, a finished result, and text that only looks like a running block
    editor.open_chat(
        chat(
            call_block("run_terminal_command", {"command": "echo a"}, "a"),
            "```result id=a status=completed exit=0\n"
            "status=running task=abc123 is not a header\n```\n",
            call_block("run_terminal_command", {"command": "echo b"}, "b"),
            "```result id=b status=running\nno task named\n```\n",
        )
    )
    settle(editor)
    assert host_running(editor) is False
    # a 100,000-line chat whose running block is at its very end starts it
    filler = "\n".join(f"line {i}" for i in range(100_000))
    editor.open_chat(filler + "\n" + RUNNING_BLOCK, name="big.sidekick.md")
    wait_for(lambda: host_running(editor))
    # the host looks at the block: that task is not in the store, which its
    # diagnostic says (DESIGN §12: such a chat is not rewritten)
    row = 100_000 + 4
    editor.wait_diag(row, "✗ run_terminal_command: task abc123 not found", timeout=30)
    assert "status=running task=abc123" in editor.lines()[row + 3]


def test_the_first_command_starts_the_host(editor):
    editor.setup()
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "echo a"}, "a")))
    settle(editor)
    assert host_running(editor) is False
    editor.nvim.command("SidekickTasks")
    assert host_running(editor) is True
    # the host then looks at the open chat: its pending call shows ▶
    chat_buf = editor.lua("return vim.fn.bufnr('chat.sidekick.md')")
    editor.wait_diag(HEADER_ROW, "▶ run_terminal_command", buf=chat_buf)


def no_pynvim_python(tmp_path) -> str:
    venv = tmp_path / "nopynvim"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return str(venv / "bin" / "python")


def test_a_missing_pynvim_is_said_once_with_the_fix(editor, tmp_path):
    python = no_pynvim_python(tmp_path)
    editor.setup(python=python, chat={"providers": {}})  # :checkhealth below contacts none
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "echo a"}, "a")))
    settle(editor)
    assert editor.notifications() == []  # opening it starts nothing, so says nothing
    editor.run_tool(HEADER_ROW + 1)
    settle(editor)
    notes = editor.notifications()
    assert notes == [
        f"sidekick_tools: {python} cannot import pynvim. Run :SidekickInstall, or set "
        "setup({ python = ... }) to an interpreter that has it."
    ]
    # a chat that names a running task starts the host on open: said once more, the same way
    editor.open_chat(RUNNING_BLOCK, name="running.sidekick.md")
    wait_for(lambda: len(editor.notifications()) == 2)
    settle(editor)
    assert editor.notifications() == notes * 2
    assert "status=failed" not in editor.text()
    # :checkhealth says it failed, and why
    editor.nvim.command("checkhealth sidekick_tools")
    health = "\n".join(editor.nvim.current.buffer[:])
    assert "the host failed: sidekick_tools: " + python + " cannot import pynvim" in health
    assert "host not started yet" not in health
    assert "pynvim is not importable by " + python in health
    assert "Python 3." in health


def crashing_python(tmp_path, body: str) -> str:
    """An interpreter stand-in that writes what a crashing host would and exits 1."""
    script = tmp_path / "crashing-python"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -c '{body}'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


NOISE = (
    "import sys\n"
    'for i in range(40): print(f"INFO:sidekick_tools.host:noise {i}", file=sys.stderr)\n'
)


def test_a_crash_shows_the_end_of_its_traceback_not_log_lines(editor, tmp_path):
    body = (
        NOISE
        + 'print("2025-01-02 10:11:12,345 INFO sidekick_tools.calls: noise", file=sys.stderr)\n'
        + "def open_store():\n"
        + '    raise RuntimeError("the store is on fire")\n'
        + "open_store()\n"
    )
    editor.setup(python=crashing_python(tmp_path, body))
    editor.nvim.command("SidekickTasks")
    settle(editor)
    notes = editor.notifications()
    assert len(notes) == 1
    lines = notes[0].split("\n")
    assert lines[0] == (
        "sidekick_tools: the Python host exited (code 1); the next command starts a new one."
    )
    assert lines[1] == "Traceback (most recent call last):"
    assert "in open_store" in notes[0]
    assert lines[-1] == "RuntimeError: the store is on fire"
    assert "INFO" not in notes[0] and "noise" not in notes[0]


def test_a_crash_without_a_traceback_shows_its_last_lines(editor, tmp_path):
    body = NOISE + 'print("fatal: cannot open /dev/tty", file=sys.stderr)\nsys.exit(3)\n'
    editor.setup(python=crashing_python(tmp_path, body))
    editor.nvim.command("SidekickTasks")
    settle(editor)
    notes = editor.notifications()
    assert len(notes) == 1
    assert notes[0].split("\n")[1:] == ["fatal: cannot open /dev/tty"]
    assert "(code 3)" in notes[0]


def record_notes_to(editor, path) -> None:
    """What vim.notify says, appended to a file: readable after Neovim quit."""
    editor.lua(
        "local path = ...\n"
        "vim.notify = function(msg) local f = io.open(path, 'a') f:write(msg, '\\n') f:close() end",
        str(path),
    )


def quit_editor(editor) -> None:
    try:
        editor.nvim.command("qall!")
    except Exception:
        pass  # Neovim is gone before it could answer


def start_background(editor, marker, ids: str = "ab") -> None:
    """Background calls (`a` and `b` by default), running when it returns."""
    calls = [
        call_block("run_terminal_command", {"command": gated(marker), "async": True}, i)
        for i in ids
    ]
    editor.open_chat(chat(*calls))
    editor.nvim.command("SidekickRunTools!")
    wait_for(lambda: editor.text().count("status=running task=") == len(ids))


def test_quitting_says_how_many_running_tasks_are_halted(editor, tmp_path):
    editor.setup()
    start_background(editor, editor.workdir / "never")
    notes = tmp_path / "notes.txt"
    record_notes_to(editor, notes)
    quit_editor(editor)
    wait_for(lambda: notes.exists() and notes.read_text())
    assert notes.read_text() == (
        "sidekick_tools: Neovim is exiting: halting 2 running tasks (tasks.kill_on_exit)\n"
    )

    def statuses():
        db = sqlite3.connect(editor.state_dir / "tasks.db")
        try:
            return sorted(s for (s,) in db.execute("select status from tasks"))
        finally:
            db.close()

    wait_for(lambda: statuses() == ["cancelled", "cancelled"])


FORGETS_THEM = (
    "; the memory store (tasks.store) forgets them: no Neovim will write their results "
    "into their chats"
)
FORGETS_IT = (
    "; the memory store (tasks.store) forgets it: no Neovim will write its result into its chat"
)


@pytest.mark.parametrize("store", ["sqlite", "memory"])
@pytest.mark.parametrize(
    ("ids", "said", "forgotten"),
    [("ab", "2 running tasks go on", FORGETS_THEM), ("a", "1 running task goes on", FORGETS_IT)],
)
def test_quitting_without_kill_on_exit_says_they_go_on(
    editor, tmp_path, ids, said, forgotten, store
):
    """Quitting with tasks.kill_on_exit = false says the running tasks go on. On
    the memory store they are forgotten with the host (a chat reopened later shows
    "task T not found; not followed" and never gets their results): it says so."""
    editor.setup(tasks={"kill_on_exit": False, "store": store})
    marker = editor.workdir / "release"
    start_background(editor, marker, ids)
    notes = tmp_path / "notes.txt"
    record_notes_to(editor, notes)
    try:
        quit_editor(editor)
        wait_for(lambda: notes.exists() and notes.read_text())
        lost = forgotten if store == "memory" else ""
        assert notes.read_text() == (
            f"sidekick_tools: Neovim is exiting: {said} (tasks.kill_on_exit = false){lost}\n"
        )
    finally:
        marker.write_text("")  # let them end


def test_quitting_with_nothing_running_says_nothing(editor, tmp_path):
    editor.setup()
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "echo a"}, "a")))
    editor.run_tool(HEADER_ROW + 1)
    editor.wait_text("```result id=a status=completed")
    notes = tmp_path / "notes.txt"
    record_notes_to(editor, notes)
    pid = editor.lua("return vim.fn.getpid()")
    quit_editor(editor)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"))
    assert not notes.exists()
