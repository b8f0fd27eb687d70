""":SidekickTasks: the task window read back from a real headless Neovim."""

from __future__ import annotations

import re
import time

import pytest
from sidekick_tools.tasks.model import Task, TaskStatus
from sidekick_tools.tasks.store import SqliteStore

from tests.conftest import wait_for
from tests.integration.ui_helpers import (
    HEADER_ROW,
    call_block,
    chat,
    current_buf,
    gated,
    row_of,
    start_background,
    wait_lines,
)

pytestmark = pytest.mark.integration


def open_tasks(editor, args: str = "") -> int:
    editor.nvim.command(f"SidekickTasks {args}".strip())
    buf = current_buf(editor)
    assert editor.lua("return vim.bo[...].filetype", buf) == "sidekick_tasks"
    return buf


def test_running_task_shows_progress_then_completes_live(editor):
    editor.setup()
    marker = editor.workdir / "release"
    token = start_background(editor, gated(marker))
    buf = open_tasks(editor)
    assert editor.lua("return vim.bo[...].modifiable", buf) is False
    lines = wait_lines(editor, buf, lambda ls: any(token in ln and "50%" in ln for ln in ls))
    assert lines[0].startswith("Tasks · this Neovim · any status · 1-1 of 1 · page 1/1")
    row = lines[row_of(lines, token)]
    assert row.startswith("⟳ " + token)
    assert "run_terminal_command" in row
    assert "█████░░░░░  50%" in row
    assert "half" in row  # progress text
    assert "[PROGRESS:50]" in row  # the label: the command
    marker.write_text("")
    lines = wait_lines(editor, buf, lambda ls: any(ln.startswith("✓ " + token) for ln in ls))
    row = lines[row_of(lines, token)]
    assert "exit 0" in row
    assert "%" not in row  # no progress bar once it ended
    assert re.search(r"\d+\.\ds", row)  # a duration


def test_failed_task_and_status_filters(editor):
    editor.setup()
    editor.open_chat(
        chat(
            call_block("run_terminal_command", {"command": "echo ok"}, "c1"),
            call_block("run_terminal_command", {"command": "echo bad; exit 3"}, "c2"),
        )
    )
    editor.run_tool(HEADER_ROW + 1)
    editor.wait_text("```result id=c1 status=completed")
    editor.run_tool(editor.lines().index("```tool run_terminal_command id=c2") + 1)
    editor.wait_text("```result id=c2 status=failed exit=3")
    buf = open_tasks(editor, "failed")
    lines = editor.lines(buf)
    assert "· failed ·" in lines[0] and "1-1 of 1" in lines[0]
    assert lines[1].startswith("✗ ") and "exit 3" in lines[1] and "echo bad; exit 3" in lines[1]
    open_tasks(editor, "completed")
    lines = editor.lines(buf)
    assert len(lines) == 2 and lines[1].startswith("✓ ") and "echo ok" in lines[1]
    # the filter key cycles: completed -> failed
    editor.nvim.input("f")
    lines = wait_lines(editor, buf, lambda ls: "· failed ·" in ls[0])
    assert lines[1].startswith("✗ ")
    open_tasks(editor, "running")
    assert editor.lines(buf)[1] == "  (no tasks)"
    # only one tasks window, whatever the number of :SidekickTasks
    n = editor.lua(
        "local n = 0 for _, w in ipairs(vim.api.nvim_list_wins()) do "
        "local ft = vim.bo[vim.api.nvim_win_get_buf(w)].filetype "
        "if ft == 'sidekick_tasks' then n = n + 1 end end return n"
    )
    assert n == 1
    editor.nvim.command("messages clear")
    editor.nvim.command("SidekickTasks bogus")
    assert any("unknown status bogus" in n for n in editor.notifications())


def test_halt_from_the_tasks_window_keeps_partial_output(editor):
    editor.setup(tasks={"halt_grace": 1})
    marker = editor.workdir / "never"
    token = start_background(editor, gated(marker, before="echo partial-line"))
    chat_buf = current_buf(editor)
    buf = open_tasks(editor)
    lines = wait_lines(editor, buf, lambda ls: any(ln.startswith("⟳ " + token) for ln in ls))
    editor.nvim.command(f"call cursor({row_of(lines, token) + 1}, 1)")
    editor.nvim.command("SidekickHalt")
    lines = wait_lines(editor, buf, lambda ls: any(ln.startswith("⊘ " + token) for ln in ls))
    assert "cancelled" in lines[row_of(lines, token)]
    # the call's diagnostic turns ⊘ and its partial output is in the result block
    editor.wait_diag(HEADER_ROW, "⊘ run_terminal_command", buf=chat_buf)
    text = editor.wait_text("status=cancelled", buf=chat_buf)
    assert "partial-line" in text
    # and in the output view
    editor.nvim.command(f"call cursor({row_of(lines, token) + 1}, 1)")
    editor.nvim.input("o")
    wait_for(lambda: editor.lua("return vim.bo.filetype") == "sidekick_output")
    out = wait_lines(editor, 0, lambda ls: ls and ls[-1].startswith(f"[task {token} cancelled"))
    assert out[0] == "partial-line"


def test_halt_key_in_the_tasks_window(editor):
    editor.setup(tasks={"halt_grace": 1})
    token = start_background(editor, gated(editor.workdir / "never"))
    buf = open_tasks(editor)
    lines = wait_lines(editor, buf, lambda ls: any(ln.startswith("⟳ " + token) for ln in ls))
    editor.nvim.command(f"call cursor({row_of(lines, token) + 1}, 1)")
    editor.nvim.input("x")
    wait_lines(editor, buf, lambda ls: any(ln.startswith("⊘ " + token) for ln in ls))


def test_jump_to_the_call_in_its_chat(editor):
    editor.setup()
    editor.open_chat(
        chat(
            call_block("run_terminal_command", {"command": "echo one"}, "c1"),
            call_block("run_terminal_command", {"command": "echo two"}, "c2"),
        )
    )
    chat_buf = current_buf(editor)
    c2 = editor.lines().index("```tool run_terminal_command id=c2")
    editor.run_tool(c2 + 1)
    editor.wait_text("```result id=c2 status=completed")
    buf = open_tasks(editor)
    # move the chat's cursor away, then jump back from the list
    editor.lua("vim.api.nvim_win_set_cursor(vim.fn.bufwinid(...), {1, 0})", chat_buf)
    editor.nvim.command("call cursor(2, 1)")
    editor.nvim.input("gd")
    wait_for(lambda: current_buf(editor) == chat_buf)
    row = editor.lua("return vim.api.nvim_win_get_cursor(0)[1]")
    assert editor.lines(chat_buf)[row - 1] == "```tool run_terminal_command id=c2"
    assert editor.lua("return vim.fn.bufwinid(...)", buf) != -1  # list stays open


def test_ten_thousand_stored_tasks_open_one_page(editors, tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    store = SqliteStore(str(state / "tasks.db"))
    now = time.time()
    tasks = []
    for i in range(10_000):
        created = now - 10_000 + i
        tasks.append(
            Task(
                id=f"{i:06x}",
                tool="run_terminal_command",
                label=f"echo {i}",
                command=f"echo {i}",
                status=TaskStatus.COMPLETED if i % 3 else TaskStatus.FAILED,
                exit_code=0 if i % 3 else 1,
                owner="4242:elsewhere",
                created_at=created,
                started_at=created,
                ended_at=created + 1.5,
            )
        )
    store.insert_many(tasks)
    store.close()
    editor = editors()
    editor.setup(tasks_window={"page_size": 50})
    buf = open_tasks(editor, "all")
    lines = editor.lines(buf)
    assert len(lines) == 1 + 50
    assert lines[0] == "Tasks · every Neovim · any status · 1-50 of 10000 · page 1/200 · ? help"
    assert lines[1].startswith("✗ 00270f")  # newest first (9999 = 0x270f)
    assert "echo 9999" in lines[1]
    editor.nvim.input("]]")
    lines = wait_lines(editor, buf, lambda ls: "51-100 of 10000" in ls[0])
    assert "page 2/200" in lines[0]
    assert lines[1].startswith("✓ 0026dd")  # 9949
    editor.nvim.input("[[")
    wait_lines(editor, buf, lambda ls: "1-50 of 10000" in ls[0])
    # this Neovim's own tasks: none of those
    editor.nvim.input("a")
    lines = wait_lines(editor, buf, lambda ls: "this Neovim" in ls[0])
    assert "0 of 0" in lines[0]
    # page size follows the window when not configured
    editor.setup()
    open_tasks(editor, "all")
    height = editor.lua("return vim.api.nvim_win_get_height(0)")
    assert len(editor.lines(buf)) == min(100, height - 1) + 1


def test_help_lists_the_configured_keys(editor):
    editor.setup(keymaps={"tasks_window": {"halt": "X", "jump": False}})
    open_tasks(editor)
    help_lines = editor.lua("return require('sidekick_tools.render.tasks').help_lines()")
    text = "\n".join(help_lines)
    assert "<CR> o" in text and "open the task's output" in text
    assert re.search(r"^X\s+halt the task", text, re.M)
    assert "jump to the tool call" not in text
    editor.nvim.input("?")
    wait_for(lambda: editor.lua("return vim.api.nvim_win_get_config(0).relative") != "")
    assert any("halt the task" in ln for ln in editor.lines(0))
    editor.nvim.input("q")
    wait_for(lambda: editor.lua("return vim.bo.filetype") == "sidekick_tasks")


def test_statusline_counts_running_and_unseen_failures(editor):
    editor.setup()
    marker = editor.workdir / "release"
    start_background(editor, gated(marker, after="exit 4"))
    wait_for(lambda: editor.lua("return require('sidekick_tools').statusline()") == "⟳ 1")
    marker.write_text("")
    wait_for(lambda: editor.lua("return require('sidekick_tools').statusline()") == "✗ 1")
    editor.nvim.command("SidekickTasks")
    assert editor.lua("return require('sidekick_tools').statusline()") == ""
