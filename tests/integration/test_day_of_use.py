"""A day of use, the way a new user met it in a terminal Neovim: undoing a
final result, a host that died and came back, a second tab page, the plugin's
windows reused for files, a running call's header edited."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.integration

HEAD = "USER: go\n\nASSISTANT: On it.\n\n"
ROW = 4  # the call header's row in HEAD + call(...)


def call(call_id: str, command: str, **extra) -> str:
    params = {"command": command, **extra}
    return f"```tool run_terminal_command id={call_id}\n{json.dumps(params)}\n```\n"


def gate(marker: Path, then: str = "echo done") -> str:
    return f"while [ ! -e {marker} ]; do sleep 0.05; done; {then}"


def messages_at(editor, row: int) -> list[str]:
    return [d["message"] for d in editor.diagnostics() if d["lnum"] == row]


def test_undoing_a_final_result_shows_the_task_ended_and_the_undo_stands(editor):
    editor.setup(tasks={"hybrid_threshold": 0.2})
    marker = editor.workdir / "release"
    editor.open_chat(HEAD + call("u1", gate(marker, "echo seven")))
    editor.run_tool(ROW + 1)
    text = editor.wait_text("```result id=u1 status=running task=")
    token = re.search(r"task=([0-9a-f]{6})", text).group(1)
    marker.write_text("")
    editor.wait_text("```result id=u1 status=completed")
    editor.nvim.command("write")
    editor.nvim.command("undo")  # the final block (and its notice) go; the running block is back
    undone = editor.text()
    assert "```result id=u1 status=running task=" in undone
    # not shown as running for ever, and not written again (that would undo the undo)
    editor.wait_diag(
        ROW, f"✓ run_terminal_command: task {token} ended completed; its result was undone"
    )
    assert editor.text() == undone
    # reopening the chat writes it, as for a chat closed while its task ran
    editor.nvim.command("write")
    editor.nvim.command("edit")
    editor.wait_text("```result id=u1 status=completed")
    editor.wait_diag(ROW, "✓ run_terminal_command")
    assert editor.text().count("```result id=u1") == 1


def test_a_host_that_died_and_came_back_shows_each_call_once(editor):
    editor.setup(tasks={"hybrid_threshold": 0.2, "kill_on_exit": True})
    marker = editor.workdir / "release"
    editor.open_chat(
        HEAD + call("h0", "echo first") + "\n" + call("h1", gate(marker), **{"async": True})
    )
    editor.run_tool(ROW + 1)  # two calls the host followed
    editor.wait_text("```result id=h0 status=completed")
    row = editor.lines().index("```tool run_terminal_command id=h1")
    editor.run_tool(row + 1)
    editor.wait_text("```result id=h1 status=running task=")
    editor.wait_diag(row, "⟳ run_terminal_command (running")
    editor.kill_host()
    wait_for(lambda: any("host stopped" in m for m in messages_at(editor, row)))
    editor.lua("require('sidekick_tools').list_tasks()")  # any command starts a new host
    wait_for(lambda: messages_at(editor, row) and "host stopped" not in messages_at(editor, row)[0])
    marker.write_text("")
    editor.wait_text("```result id=h1 status=completed")
    wait_for(lambda: messages_at(editor, row) == ["✓ run_terminal_command"])
    assert messages_at(editor, ROW) == ["✓ run_terminal_command"]


def test_elapsed_time_goes_on_after_a_visit_to_another_tab_page(editor):
    editor.setup()
    marker = editor.workdir / "release"
    editor.open_chat(HEAD + call("t1", gate(marker), **{"async": True}))
    editor.run_tool(ROW + 1)
    text = editor.wait_text("```result id=t1 status=running task=")
    token = re.search(r"task=([0-9a-f]{6})", text).group(1)
    editor.wait_diag(ROW, "⟳ run_terminal_command (running")
    editor.nvim.command("tabnew")

    def elapsed() -> float:
        task = editor.lua("return require('sidekick_tools').get_task(...)", token)
        return task["duration"] or 0

    wait_for(lambda: elapsed() >= 3, timeout=20)
    editor.nvim.command("tabprevious")
    seconds = re.compile(r"\(running (\d+)s\)")

    def shown() -> int:
        m = [seconds.search(x) for x in messages_at(editor, ROW)]
        return int(m[0].group(1)) if m and m[0] else 0

    wait_for(lambda: shown() >= 3, timeout=10)
    marker.write_text("")


def test_a_file_opened_in_a_view_window_keeps_the_users_window_options(editor):
    editor.setup()
    editor.open_chat(HEAD + call("o1", "echo out", **{"async": True}))
    editor.run_tool(ROW + 1)
    text = editor.wait_text("```result id=o1 status=completed")
    token = re.search(r"task=([0-9a-f]{6})", text).group(1)
    editor.nvim.command("set number wrap")
    for command in (f"SidekickOutput {token}", "SidekickTasks all"):
        editor.nvim.command(command)
        assert editor.lua("return { vim.wo.number, vim.wo.wrap }") == [False, False]
        editor.nvim.command(f"edit {editor.workdir / 'notes.txt'}")
        assert editor.lua("return { vim.wo.number, vim.wo.wrap, vim.wo.winbar }") == [
            True,
            True,
            "",
        ]
        editor.nvim.command("close")


def test_a_result_not_written_into_an_edited_call_says_why(editor):
    """The call's command was edited while it ran (its id kept): its result
    is not written into a block that asks for something else, and the message
    said "no longer in the chat (deleted, or its id changed)", neither of
    which had happened. It says what did."""
    editor.setup(tasks={"hybrid_threshold": 0.2})
    marker = editor.workdir / "release"
    editor.open_chat(HEAD + call("t4", gate(marker, "echo once")))
    editor.run_tool(ROW + 1)
    editor.wait_text("```result id=t4 status=running task=")
    editor.nvim.command("%s/echo once/echo twice/")
    marker.write_text("")
    note = wait_for(lambda: next((n for n in editor.notifications() if "of call t4" in n), None))
    assert "ended completed, not written" in note, note
    assert "now asks for something else (edited while it ran)" in note, note


def test_editing_a_running_calls_id_says_the_task_runs_on(editor):
    editor.setup(tasks={"hybrid_threshold": 0.5})
    marker = editor.workdir / "release"
    editor.open_chat(HEAD + call("t2", gate(marker, "echo once")))
    editor.lua("vim.defer_fn(function() vim.cmd([[%s/id=t2$/id=t3/]]) end, 50)")
    editor.run_tool(ROW + 1)
    note = wait_for(
        lambda: next((n for n in editor.notifications() if "of call t2" in n), None), timeout=20
    )
    assert "runs on" in note and "no longer in the chat" in note, note
    assert "ended" not in note
    marker.write_text("")


def test_a_completion_notice_shows_both_streams_when_stderr_is_long(editor):
    editor.setup()
    command = "echo out1; echo out2; for i in $(seq 1 40); do echo err$i >&2; done"
    editor.open_chat(HEAD + call("n1", command, **{"async": True}))
    editor.run_tool(ROW + 1)
    lines = editor.wait_text("USER: [sidekick task ").split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("USER: [sidekick task"))
    payload = json.loads("\n".join(lines[start + 2 : lines.index("```", start + 2)]))
    output = payload["output"].split("\n")
    assert output[:3] == ["out1", "out2", "[stderr]"]
    assert output[-1] == "err40"


def test_a_stdout_line_reading_stderr_is_not_taken_for_the_stderr_label(editor):
    """The streams of a cut result were told apart by the first `[stderr]` line:
    one the command printed on stdout made the rest of stdout "stderr"."""
    editor.setup(result={"max_lines": 8})
    command = (
        "printf '%s\\n' out1 '[stderr]'; for i in $(seq 3 40); do echo out$i; done; "
        "echo err1 >&2; echo err2 >&2"
    )
    editor.open_chat(HEAD + call("f1", command, **{"async": True}))
    editor.run_tool(ROW + 1)
    lines = editor.wait_text("USER: [sidekick task ").split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("USER: [sidekick task"))
    payload = json.loads("\n".join(lines[start + 2 : lines.index("```", start + 2)]))
    log = payload["log"]
    assert payload["output"].split("\n") == [
        f"[... 33 earlier lines truncated; full output: {log}]",
        *(f"out{i}" for i in range(34, 41)),
        "[stderr]",
        "err1",
        "err2",
    ]
    head = next(i for i, line in enumerate(lines) if line.startswith("```result id=f1 "))
    assert lines[head + 1 : lines.index("```", head + 1)] == [
        f"[... 35 earlier lines truncated; full output: {log}]",
        *(f"out{i}" for i in range(36, 41)),
        "[stderr]",
        "err1",
        "err2",
    ]


def test_task_tokens_complete_without_starting_a_host(editor):
    editor.setup()
    complete = "return vim.fn.getcompletion(..., 'cmdline')"
    assert editor.lua(complete, "SidekickHalt ") == []
    assert editor.lua("return require('sidekick_tools.host').running()") is False
    marker = editor.workdir / "release"
    editor.open_chat(HEAD + call("k1", gate(marker), **{"async": True}) + "\n" + call("k2", "true"))
    editor.run_tool(ROW + 1)
    running = re.search(r"task=([0-9a-f]{6})", editor.wait_text("id=k1 status=running")).group(1)
    row = editor.lines().index("```tool run_terminal_command id=k2")
    editor.run_tool(row + 1)
    done = re.search(
        r"id=k2 status=completed.*task=([0-9a-f]{6})", editor.wait_text("id=k2 status=completed")
    ).group(1)
    assert editor.lua(complete, "SidekickHalt ") == [running]  # only what can be halted
    assert sorted(editor.lua(complete, "SidekickOutput ")) == sorted([running, done])
    assert editor.lua(complete, f"SidekickOutput {done[:5]}") == [done]
    assert editor.lua(complete, f"SidekickOutput {done} /") == []  # the regex is not a token
    editor.nvim.command(f"SidekickHalt {running.upper()}")  # a token is a token in either case
    editor.wait_text("```result id=k1 status=cancelled")


def test_task_statuses_complete_from_what_is_typed(editor):
    editor.setup()
    complete = "return vim.fn.getcompletion(..., 'cmdline')"
    assert editor.lua(complete, "SidekickTasks fa") == ["failed"]
    assert editor.lua(complete, "SidekickTasks c") == ["completed", "cancelled"]
    assert "all" in editor.lua(complete, "SidekickTasks ")


def test_a_scanned_state_is_never_drawn_on_a_row_its_call_left(editor):
    """The states of calls no host follows come with their rows from a scan; text
    written above them before the next scan (a result) moves the calls, not those
    rows. A state is drawn only where its call's header still stands."""
    editor.setup()
    buf = editor.open_chat(HEAD + call("c4", "ls") + "\n" + call("c5", "ls"))
    lines = editor.lines()
    assert (lines[4], lines[8]) == (  # the rows a scan gives the two calls
        "```tool run_terminal_command id=c4",
        "```tool run_terminal_command id=c5",
    )
    got = editor.lua(
        "local client = require('sidekick_tools.client')\n"
        "local buf = ...\n"
        "client.scanned[buf] = {\n"
        "  { row = 4, tool = 'run_terminal_command', id = 'c4', state = 'pending' },\n"
        "  { row = 8, tool = 'run_terminal_command', id = 'c5', state = 'pending' } }\n"
        "local rows = function() local r = {} for _, s in ipairs(client.call_states(buf)) do\n"
        "  table.insert(r, s.row) end table.sort(r) return r end\n"
        "local before = rows()\n"
        "local block = { '```result id=c4 status=completed', 'x', '```' }\n"
        "vim.api.nvim_buf_set_lines(buf, 7, 7, false, block)\n"
        "return { before, rows() }",
        buf,
    )
    assert got == [[4, 8], [4]]  # c5 moved down three rows: not drawn on the result's row


def test_undo_after_a_reload_shows_a_call_whose_result_went_as_pending(editor):
    """`:e!` then `u` `u`: the result block is gone, and the call is pending again
    (▶), not left with the ✓ it had before. (Neovim stops sending a buffer's
    changes when an undo goes back past a reload, and says so only then.)"""
    editor.setup()
    editor.open_chat(HEAD + call("e1", "echo hi"))
    editor.run_tool(ROW + 1)
    editor.wait_text("```result id=e1 status=completed")
    editor.wait_diag(ROW, "✓ run_terminal_command")
    editor.nvim.command("write")
    editor.nvim.command("edit!")
    editor.wait_diag(ROW, "✓ run_terminal_command")
    editor.nvim.command("undo")
    editor.nvim.command("undo")
    assert "```result id=e1" not in editor.text()
    editor.wait_diag(ROW, "▶ run_terminal_command")
    editor.run_tool(ROW + 1)  # the host sees the text as it is now, and writes to it
    editor.wait_text("```result id=e1 status=completed")
    assert editor.text().count("```result id=e1") == 1
