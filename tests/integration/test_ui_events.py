"""Task life cycle for the user: User autocmds, notifications, running diagnostics."""

from __future__ import annotations

import re

import pytest

from tests.conftest import wait_for
from tests.integration.ui_helpers import HEADER_ROW, call_block, chat, gated, start_background

pytestmark = pytest.mark.integration

RECORD_AUTOCMDS = """
_G.__events = {}
for _, pattern in ipairs({ "SidekickTaskStarted", "SidekickTaskFinished" }) do
  vim.api.nvim_create_autocmd("User", {
    pattern = pattern,
    callback = function(ev)
      table.insert(_G.__events, { pattern = ev.match, data = ev.data })
    end,
  })
end
"""


def events(editor) -> list[dict]:
    return editor.lua("return _G.__events")


def test_user_autocmds_and_notification_carry_the_task(editor):
    editor.setup(notify="always")
    editor.lua(RECORD_AUTOCMDS)
    marker = editor.workdir / "release"
    token = start_background(editor, gated(marker, after="echo bye; exit 5"))
    started = wait_for(lambda: [e for e in events(editor) if e["pattern"] == "SidekickTaskStarted"])
    assert started[0]["data"]["id"] == token
    assert started[0]["data"]["status"] == "running"
    assert started[0]["data"]["tool"] == "run_terminal_command"
    marker.write_text("")
    finished = wait_for(
        lambda: [e for e in events(editor) if e["pattern"] == "SidekickTaskFinished"]
    )
    data = finished[0]["data"]
    assert data["id"] == token and data["status"] == "failed" and data["exit_code"] == 5
    assert data["log_path"].endswith(f"/{token}/stdout")
    note = wait_for(lambda: [n for n in editor.notifications() if f"task {token}" in n])
    assert re.match(rf"sidekick_tools: task {token} failed, exit 5, [\d.]+s: ", note[0]), note


def test_background_notifies_only_when_the_chat_is_not_visible(editor):
    editor.setup()  # notify = "background"
    editor.lua(RECORD_AUTOCMDS)
    first = editor.workdir / "first"
    token = start_background(editor, gated(first))
    first.write_text("")
    wait_for(
        lambda: any(e["data"]["id"] == token for e in events(editor) if "Finished" in e["pattern"])
    )
    assert not any(f"task {token}" in n for n in editor.notifications())
    # the chat is hidden when the next one ends: notified
    second = editor.workdir / "second"
    token2 = start_background(editor, gated(second), name="other.sidekick.md")
    editor.nvim.command("enew")
    second.write_text("")
    wait_for(lambda: [n for n in editor.notifications() if f"task {token2} completed" in n])


def test_never_notifies(editor):
    editor.setup(notify="never")
    editor.lua(RECORD_AUTOCMDS)
    marker = editor.workdir / "release"
    token = start_background(editor, gated(marker))
    editor.nvim.command("enew")
    marker.write_text("")
    wait_for(lambda: any("Finished" in e["pattern"] for e in events(editor)))
    assert not any(f"task {token}" in n for n in editor.notifications())


@pytest.mark.slow
def test_running_diagnostic_shows_progress_and_ticks(editor):
    editor.setup()
    marker = editor.workdir / "release"
    start_background(editor, gated(marker, before="echo '[PROGRESS:45] Scanning auth/'"))
    d = editor.wait_diag(HEADER_ROW, "⟳ run_terminal_command (running")
    d = wait_for(
        lambda: re.fullmatch(
            r"⟳ run_terminal_command \(running ([1-9]\d*)s, 45%\): Scanning auth/",
            editor.diag_at(HEADER_ROW)["message"],
        )
    )
    first = int(d.group(1))
    # no new event from the host, yet the elapsed time moves on
    wait_for(
        lambda: (
            int(re.search(r"running (\d+)s", editor.diag_at(HEADER_ROW)["message"]).group(1))
            > first
        )
    )
    marker.write_text("")
    editor.wait_diag(HEADER_ROW, "✓ run_terminal_command")


def test_unchanged_diagnostics_are_not_set_again(editor):
    editor.setup()
    editor.open_chat("USER: hi\n\nASSISTANT: ok\n\n```tool run_terminal_command id=c1\n{}\n```\n")
    counted = editor.lua(
        """
        local client = require("sidekick_tools.client")
        local diag = require("sidekick_tools.consumers.diagnostics")
        local buf = vim.api.nvim_get_current_buf()
        local set, calls = vim.diagnostic.set, 0
        vim.diagnostic.set = function(...) calls = calls + 1 return set(...) end
        client.scanned[buf] = { { row = 4, state = "pending", tool = "x" } }
        diag.draw(buf)
        diag.draw(buf)
        client.scanned[buf] = { { row = 4, state = "completed", tool = "x" } }
        diag.draw(buf)
        vim.diagnostic.set = set
        return calls
        """
    )
    assert counted == 2


@pytest.mark.slow
def test_progress_reported_before_going_background_stays_in_the_diagnostic(editor):
    editor.setup(tasks={"hybrid_threshold": 2})
    marker = editor.workdir / "release"
    cmd = gated(marker, before="echo '[PROGRESS:45] Scanning auth/'")
    editor.open_chat(
        "USER: hi\n\nASSISTANT: ok\n\n"
        f'```tool run_terminal_command id=c1\n{{"command": "{cmd}"}}\n```\n'
    )
    editor.run_tool(HEADER_ROW + 1)
    editor.wait_text("```result id=c1 status=running")
    try:
        wait_for(lambda: "45%" in editor.diag_at(HEADER_ROW)["message"], timeout=4)
    finally:
        marker.write_text("")


def test_the_running_diagnostic_is_set_before_the_command_returns(editor, tmp_path):
    """What the user's command started shows with the command, not a loop turn
    later behind whatever else the editor had queued: read in the same Lua
    chunk as the command, with no turn of the loop between them."""
    editor.setup()
    marker = tmp_path / "release"
    editor.open_chat(chat(call_block("run_terminal_command", {"command": gated(marker)})))
    seen = editor.lua(
        "local row = ...\n"
        "vim.api.nvim_win_set_cursor(0, { row + 1, 0 })\n"
        "vim.cmd('SidekickRunTool')\n"
        "local ns = vim.api.nvim_create_namespace('sidekick_tools')\n"
        "local got = vim.diagnostic.get(0, { namespace = ns, lnum = row })\n"
        "return got[1] and got[1].message or vim.NIL",
        HEADER_ROW,
    )
    assert seen is not None and seen.startswith("⟳ run_terminal_command"), seen
    marker.write_text("")
    editor.wait_text("```result id=call_01 status=completed exit=0")


def test_pending_calls_keep_their_state_when_lines_are_written_above_them(editor):
    """A background result written above pending calls moved them down; their
    ▶ states, found at the rows of the last scan, went out of view until the
    next scan (about half a second). The scanned rows move with the text."""
    editor.setup()
    blocks = [call_block("run_terminal_command", {"command": f"echo {i}"}, f"p{i}") for i in (1, 2)]
    editor.open_chat(chat(*blocks))
    editor.lua("return require('sidekick_tools').list_tasks()")  # the host, which scans it
    row = editor.text().split("\n").index("```tool run_terminal_command id=p2")
    editor.wait_diag(row, "▶ run_terminal_command")
    rows = editor.lua(
        """
        vim.api.nvim_buf_set_lines(0, 3, 3, false, { "a", "b", "c" })
        local out = {}
        local buf = vim.api.nvim_get_current_buf()
        for _, c in ipairs(require("sidekick_tools.client").call_states(buf)) do
          table.insert(out, c.row)
        end
        table.sort(out)
        return out
        """
    )
    assert row + 3 in rows and HEADER_ROW + 3 in rows, rows
