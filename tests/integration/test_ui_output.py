""":SidekickOutput: the live output view read back from a real headless Neovim."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.conftest import answers, wait_for
from tests.integration.ui_helpers import (
    HEADER_ROW,
    current_buf,
    gated,
    start_background,
    wait_lines,
)

pytestmark = pytest.mark.integration


def extmarks(editor, buf: int, row: int) -> list[dict]:
    return editor.lua(
        "local buf, row = ...\n"
        "local ns = vim.api.nvim_create_namespace('sidekick_tools_output')\n"
        "local out = {}\n"
        "for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, {row, 0}, {row, -1}, "
        "{ details = true })) do table.insert(out, m[4]) end\n"
        "return out",
        buf,
        row,
    )


def test_output_follows_the_log_then_says_how_the_task_ended(editor):
    editor.setup()
    marker = editor.workdir / "release"
    before = (
        "printf '\\033[1;31mred\\033[0m plain\\n'; echo err-one >&2; "
        "echo '[PROGRESS:50] half'; printf 'no-newline-yet'"
    )
    after = "echo ' and more'; echo after; echo err-two >&2; printf 'tail-without-newline'"
    token = start_background(editor, gated(marker, before=before, after=after))
    editor.nvim.command(f"SidekickOutput {token}")
    buf = current_buf(editor)
    assert editor.lua("return vim.bo[...].filetype", buf) == "sidekick_output"
    assert editor.lua("return vim.bo[...].modifiable", buf) is False
    lines = wait_lines(editor, buf, lambda ls: "err-one" in ls and "[PROGRESS:50] half" in ls)
    assert "red plain" in lines  # colour codes never shown raw
    assert not any("\x1b" in ln for ln in lines)
    assert "no-newline-yet" not in "\n".join(lines)  # a partial line waits for its end
    red = lines.index("red plain")
    marks = extmarks(editor, buf, red)
    assert any(m.get("hl_group", "").startswith("SidekickAnsi") for m in marks), marks
    assert editor.lua("return vim.api.nvim_get_hl(0, { name = 'SidekickAnsi1Bold' }).bold")
    err = lines.index("err-one")
    marks = extmarks(editor, buf, err)
    assert any(m.get("hl_group") == "SidekickOutputStderr" for m in marks), marks
    assert any((m.get("sign_text") or "").strip() for m in marks), marks
    assert not any(m.get("hl_group") == "SidekickOutputStderr" for m in extmarks(editor, buf, red))
    # the cursor sits on the last line: the view follows as the log grows
    editor.nvim.command("normal! G")
    marker.write_text("")
    lines = wait_lines(editor, buf, lambda ls: ls[-1].startswith(f"[task {token} completed"))
    assert lines[-1].startswith(f"[task {token} completed, exit 0, ")
    assert "no-newline-yet and more" in lines
    assert "after" in lines and "err-two" in lines
    assert "tail-without-newline" in lines  # flushed once the task ended
    assert editor.lua("return vim.api.nvim_win_get_cursor(0)[1]") == len(lines)
    # every line once, nothing read twice
    assert lines.count("red plain") == 1 and lines.count("after") == 1


def test_filter_hides_lines_without_losing_them(editor):
    editor.setup()
    marker = editor.workdir / "release"
    before = "for i in 1 2 3 4 5; do echo line-$i; done; echo warn-a >&2"
    after = "echo line-6; echo warn-b >&2"
    token = start_background(editor, gated(marker, before=before, after=after))
    editor.nvim.command(f"SidekickOutput {token} /warn\\|line-[24]/")
    buf = current_buf(editor)
    wait_lines(editor, buf, lambda ls: ls == ["line-2", "line-4", "warn-a"])
    marker.write_text("")
    lines = wait_lines(editor, buf, lambda ls: ls[-1].startswith(f"[task {token} completed"))
    assert lines[:-1] == ["line-2", "line-4", "warn-a", "warn-b"]
    # clear the filter from inside the view: everything is back
    editor.nvim.command("SidekickOutput")
    lines = editor.lines(buf)
    assert [ln for ln in lines if ln.startswith("line-")] == [f"line-{i}" for i in range(1, 7)]
    assert lines[-1].startswith(f"[task {token} completed")
    # a new filter from inside the view
    editor.nvim.command("SidekickOutput /line-6/")
    assert editor.lines(buf)[0] == "line-6"
    editor.nvim.command("SidekickOutput /[/")
    assert any("bad filter" in n for n in editor.notifications())


def test_output_of_the_call_under_the_cursor(editor):
    editor.setup()
    marker = editor.workdir / "release"
    token = start_background(editor, gated(marker, before="echo from-the-chat"))
    editor.nvim.command(f"call cursor({HEADER_ROW + 2}, 1)")
    editor.nvim.command("SidekickOutput")
    buf = current_buf(editor)
    assert editor.lua("return vim.api.nvim_buf_get_name(0)").endswith("/" + token)
    wait_lines(editor, buf, lambda ls: "from-the-chat" in ls)
    # halting from the output view ends it as cancelled; the partial output stays
    editor.setup(tasks={"halt_grace": 1})
    editor.nvim.command("SidekickHalt")
    lines = wait_lines(editor, buf, lambda ls: ls[-1].startswith(f"[task {token} cancelled"))
    assert "from-the-chat" in lines
    # no call under the cursor: the latest task of this Neovim, in the same view;
    # in a chat the user meant the line they are on, so whose output it is is said
    editor.nvim.command("wincmd p")
    editor.nvim.command("call cursor(1, 1)")
    editor.nvim.command("SidekickOutput")
    assert current_buf(editor) == buf
    assert editor.notifications()[-1] == (
        f"sidekick_tools: no task for the line under the cursor; showing the latest, {token}"
    )


def test_output_without_a_token_and_none_to_show(editor):
    editor.setup()
    # printf is no safe command: the chain does not run b after a (it runs by hand below)
    editor.open_chat(
        "USER: hi\n\nASSISTANT: ok\n\n"
        '```tool run_terminal_command id=a\n{"command": "printf first"}\n```\n\n'
        '```tool run_terminal_command id=b\n{"command": "printf second"}\n```\n'
    )
    wins = len(editor.nvim.windows)
    editor.nvim.command("SidekickOutput")  # nothing has run yet
    assert editor.notifications() == [
        "sidekick_tools: no task under the cursor, and none yet in this Neovim"
    ]
    assert len(editor.nvim.windows) == wins
    editor.run_tool(5)
    editor.wait_text("```result id=a status=completed")
    editor.run_tool(editor.lines().index("```tool run_terminal_command id=b") + 1)
    editor.wait_text("```result id=b status=completed")
    tasks = editor.lua("return require('sidekick_tools').list_tasks()")
    latest, first = tasks[0]["id"], tasks[1]["id"]
    # from a buffer that is not a chat: the latest
    editor.nvim.command("enew")
    editor.nvim.command("SidekickOutput")
    assert editor.lua("return vim.api.nvim_buf_get_name(0)").endswith("/" + latest)
    wait_lines(editor, current_buf(editor), lambda ls: ls[0] == "second")
    # from the tasks window: the task on the cursor line
    editor.nvim.command("SidekickTasks")
    editor.nvim.command("call cursor(3, 1)")  # the older one
    editor.nvim.command("SidekickOutput")
    assert editor.lua("return vim.api.nvim_buf_get_name(0)").endswith("/" + first)
    wait_lines(editor, current_buf(editor), lambda ls: ls[0] == "first")


def test_a_bad_regex_is_said_in_one_readable_line(editor):
    editor.setup()
    token = start_background(editor, "echo some-output")
    wins = len(editor.nvim.windows)
    editor.nvim.command(f"SidekickOutput {token} /a[/")
    editor.nvim.command("SidekickOutput /x\\(/")  # no token: said before looking for one
    assert editor.notifications() == [
        "sidekick_tools: bad filter /a[/: a [ is never closed by ] (E769)",
        "sidekick_tools: bad filter /x\\(/: Unmatched \\( (E54)",
    ]
    assert len(editor.nvim.windows) == wins  # nothing opened
    # inside a view, a bad filter leaves the one shown
    editor.nvim.command(f"SidekickOutput {token} /some/")
    buf = current_buf(editor)
    wait_lines(editor, buf, lambda ls: ls[0] == "some-output")
    editor.nvim.command("SidekickOutput /(\\)/")
    assert "bad filter /(\\)/: Unmatched \\) (E55)" in editor.notifications()[-1]
    assert editor.lines(buf)[0] == "some-output"
    assert "filter /some/" in editor.lua("return vim.wo.winbar")


def test_finished_task_and_bad_arguments(editor):
    editor.setup()
    token = start_background(editor, "echo done-already; exit 2")
    wait_for(
        lambda: (
            editor.lua("return require('sidekick_tools').get_task(...).status", token) == "failed"
        )
    )
    editor.nvim.command(f"SidekickOutput {token}")
    buf = current_buf(editor)  # its lines come once the host has masked them
    lines = wait_for(lambda: (got := editor.lines(buf))[-1].startswith("[task") and got)
    assert lines[0] == "done-already"
    assert lines[-1].startswith(f"[task {token} failed, exit 2, ")
    editor.nvim.command("SidekickOutput zzz")
    assert any("not a task token" in n for n in editor.notifications())
    editor.nvim.command(f"SidekickOutput {token} /done/ extra")
    assert "trailing characters after /done/: extra" in editor.notifications()[-1]
    parse = "return { require('sidekick_tools.consumers.output_view').parse_args(...) }"
    assert editor.lua(parse, "ABCDEF /a\\/b/ ") == ["abcdef", "a\\/b"]
    assert editor.lua(parse, "/no close") == [None, "no close"]
    editor.nvim.command(f"SidekickHalt {token} extra")
    assert f"{token} extra is not a task token" in editor.notifications()[-1]
    editor.nvim.command("SidekickOutput 000000")
    assert any("no task 000000" in n for n in editor.notifications())


def test_parse_line_strips_escapes(editor):
    editor.setup()
    got = editor.lua(
        "local out = require('sidekick_tools.consumers.output_view.ansi')\n"
        "local res = {}\n"
        "for _, raw in ipairs(...) do local t, spans = out.parse_line(raw, {}) "
        "table.insert(res, { t, spans and #spans or 0 }) end\n"
        "return res",
        [
            "\x1b[32mgreen\x1b[0m",
            "progress 10%\rprogress 90%",
            "\x1b]0;title\x07visible",
            "crlf\r",
            "\x1b[38;2;10;20;30mrgb\x1b[m \x1b[38;5;200mx",
            "\x1b[2Kcleared\x01",
            "\x1b[38;5;256mbad index\x1b[38;2;1;2;300m bad rgb",
            "\x1b]0;a\x1b\\b\x1b]0;c\x1b[1md",  # an OSC ends at ESC + backslash, or at another ESC
        ],
    )
    assert got == [
        ["green", 1],
        ["progress 90%", 0],
        ["visible", 0],
        ["crlf", 0],
        ["rgb x", 2],
        ["cleared", 0],
        ["bad index bad rgb", 0],
        ["bd", 1],
    ]


# What a task prints is chosen by the command, the repository it reads, or the
# model that wrote the call: the view shows any of it without holding the editor,
# losing lines, or touching anything outside the view.


def finished(editor, command: str) -> str:
    """The token of a task run by the user from a chat, once it completed."""
    token = start_background(editor, command)
    status = "return require('sidekick_tools').get_task(...).status"
    wait_for(lambda: editor.lua(status, token) == "completed")
    return token


def test_a_long_line_redrawn_with_carriage_returns_never_holds_the_editor(editor):
    editor.setup()
    # a progress bar's redraws in one line: 400 KB before the last carriage return
    (editor.workdir / "progress.log").write_bytes(b"x" * 400_000 + b"\rdone\n")
    token = finished(editor, "cat progress.log")
    pid = editor.nvim.eval("getpid()")
    editor.nvim.command(f"SidekickOutput {token}", async_=True)
    answers(lambda: editor.nvim.eval("1"), unblock=lambda: os.kill(pid, signal.SIGKILL))
    lines = wait_lines(editor, current_buf(editor), lambda ls: ls[0] == "done")
    assert lines[-1].startswith(f"[task {token} completed")


def test_output_in_thousands_of_colours_leaves_highlight_groups_to_everyone_else(editor):
    editor.setup()
    rows = [f"\x1b[38;2;{i % 256};{i // 256 % 256};9mrow{i}\x1b[0m" for i in range(21_000)]
    (editor.workdir / "colors.txt").write_text("\n".join(rows) + "\n")
    token = finished(editor, "cat colors.txt")
    editor.nvim.command(f"SidekickOutput {token}")
    lines = wait_lines(editor, current_buf(editor), lambda ls: "row20999" in ls)
    assert lines[:2] == ["row0", "row1"]
    groups = editor.lua("return vim.fn.getcompletion('SidekickAnsi', 'highlight')")
    assert 0 < len(groups) <= 2 * 256  # the palette's colours, bold or not
    # another plugin can still define its groups
    assert editor.lua(
        "return pcall(vim.api.nvim_set_hl, 0, 'OtherPluginGroup', { fg = '#ff0000' })"
    )


def test_colour_codes_out_of_range_are_ignored_and_every_line_shown(editor):
    editor.setup()
    (editor.workdir / "c.txt").write_text(
        "before\n\x1b[38;5;300mhello\n\x1b[38;2;99999999999999999999999;0;0mthere\nafter\n"
    )
    token = finished(editor, "cat c.txt")
    editor.nvim.command(f"SidekickOutput {token}")
    lines = wait_lines(editor, current_buf(editor), lambda ls: "after" in ls)
    assert lines[:4] == ["before", "hello", "there", "after"]
    assert editor.notifications() == []


def test_a_flood_of_short_lines_keeps_the_view_and_the_editor_bounded(editor):
    """The view kept every line a task printed, and read what was left when it
    ended in one go: 60 MB of "y" lines grew the editor to 5.8 GB and held it for
    a minute. It keeps the last lines (the logs keep all) and reads on over the
    turns of the loop."""
    editor.setup()
    marker = editor.workdir / "release"
    (editor.workdir / "flood.py").write_text(
        "import sys\nfor _ in range(3):\n    sys.stdout.write('y\\n' * 100000)\n"
    )
    flood = "python3 flood.py"
    token = start_background(editor, gated(marker, before=flood, after=f"{flood}; echo last"))
    pid = editor.nvim.eval("getpid()")
    editor.nvim.command(f"SidekickOutput {token}")
    buf = current_buf(editor)
    marker.write_text("")
    answers(lambda: editor.nvim.eval("1"), unblock=lambda: os.kill(pid, signal.SIGKILL))
    tail = "return vim.api.nvim_buf_get_lines(..., -3, -1, false)"
    end = wait_for(lambda: (t := editor.lua(tail, buf))[-1].startswith(f"[task {token} ") and t)
    assert end[0] == "last" and end[1].startswith(f"[task {token} completed")
    count = editor.lua("return vim.api.nvim_buf_line_count(...)", buf)
    assert count <= 100_000 + 2  # the lines kept, the note and the end line
    first = editor.lua("return vim.api.nvim_buf_get_lines(..., 0, 1, false)[1]", buf)
    assert first.startswith("[… ") and "earlier lines not shown" in first
    # every line the task printed is either counted in the note or shown, once
    dropped = int(first.removeprefix("[… ").split(" ", 1)[0])
    assert dropped + (count - 2) == 600_000 + 1
    body = "return vim.api.nvim_buf_get_lines(..., 1, -3, false)"
    assert set(editor.lua(body, buf)) == {"y"}


@pytest.mark.parametrize("per_read", [3, 30])
@pytest.mark.parametrize("shown", ["all", "filtered"])
def test_a_bounded_view_drops_its_oldest_lines_in_order(editor, shown, per_read):
    """Past its bounds (made small here) the view drops its oldest lines from
    the top, a few lines a read, or more in one read than it keeps: what it
    shows while the task runs is the last lines read, in order, each once;
    unfiltered, the note counts those dropped."""
    editor.setup()
    editor.lua(
        "local view = require('sidekick_tools.consumers.output_view.render')\n"
        "view.MAX_LINES = 10\n"
        "require('sidekick_tools.consumers.output_view.follow').LINES = ...",
        per_read,
    )
    marker, done = editor.workdir / "release", editor.workdir / "done"
    token = start_background(editor, gated(marker, before="true", after=gated(done, "seq 1 50")))
    extra = " /[02468]$/" if shown == "filtered" else ""
    editor.nvim.command(f"SidekickOutput {token}{extra}")
    buf = current_buf(editor)
    marker.write_text("")
    lines = wait_lines(editor, buf, lambda ls: ls[-1] == "50")
    done.write_text("")  # the task ends
    if shown == "all":
        note, body = lines[0], lines[1:]
        dropped = int(note.removeprefix("[… ").split(" ", 1)[0])
        assert body == [str(n) for n in range(dropped + 1, 51)]
        assert len(body) <= 10
    else:
        numbers = [int(n) for n in lines]
        assert numbers == list(range(numbers[0], 51, 2))  # every even line since the first
        assert numbers[0] % 2 == 0 and len(numbers) <= 5


def test_the_output_view_shows_secrets_masked(editor):
    """DESIGN §12: secrets are masked in everything the plugin shows; the view
    showed the raw log (keys, `password=` values, a private key's body). The
    log on disk keeps them."""
    editor.setup()
    key = "sk-ant-api03-" + "Zx9Qw8" * 8
    pem = [
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAA" * 2,
        "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY",
        "-----END OPENSSH PRIVATE KEY-----",
    ]
    out = [f"key {key}", "password=hunter2 token=abc123def", *pem]
    command = "printf '%s\\n' " + " ".join(f"'{line}'" for line in out)
    command += f"; printf '\\033[31mred ghp_{'a1B2' * 9}\\033[0m\\n' >&2"
    token = start_background(editor, command)
    editor.nvim.command(f"SidekickOutput {token}")
    buf = current_buf(editor)
    lines = wait_lines(editor, buf, lambda ls: ls[-1].startswith(f"[task {token} "))
    text = "\n".join(lines)
    assert "key sk-ant-***" in lines and "password=*** token=***" in lines
    assert "-----BEGIN OPENSSH PRIVATE KEY-----" in lines and "b3BlbnNzaC1rZXkt" not in text
    assert "red ghp_***" in lines  # stderr, its colour kept
    assert key not in text and "hunter2" not in text and "abc123def" not in text
    log = editor.lua("return require('sidekick_tools').get_task(...).log_path", token)
    assert key in Path(log).read_text()  # the raw log on disk, as it was


def test_masking_asked_of_a_host_that_goes_is_given_up(editor):
    """The output view waits for the host to mask what it read: a host that
    died (host_lost raised a Lua error there, the view waited for good) or was
    stopped for another (:SidekickInstall) answers nothing, and the wait ends."""
    editor.setup()
    editor.lua("return require('sidekick_tools').list_tasks()")  # a host
    got = editor.lua(
        """
        local client, host = require("sidekick_tools.client"), require("sidekick_tools.host")
        local got = {}
        local function note(r) table.insert(got, r == nil and "none" or "lines") end
        client.masked({ { "a" } }, nil, note)
        client.host_lost()
        require("sidekick_tools").list_tasks() -- a new host
        client.masked({ { "b" } }, nil, note)
        host.stop()
        return got
        """
    )
    assert got == ["none", "none"]
    assert not [n for n in editor.notifications() if "attempt to call" in n]


def test_the_output_view_goes_on_after_its_host_died(editor):
    editor.setup()
    marker = editor.workdir / "release"
    flood = "for i in $(seq 1 200); do seq 1 2000; done"
    token = start_background(editor, gated(marker, before=flood, after="echo after-the-host"))
    editor.nvim.command(f"SidekickOutput {token}")
    buf = current_buf(editor)
    wait_lines(editor, buf, lambda ls: len(ls) > 1000)
    editor.kill_host()
    wait_for(lambda: [n for n in editor.notifications() if "host exited" in n])
    editor.lua("return require('sidekick_tools').list_tasks()")  # a new host
    marker.write_text("")
    lines = wait_lines(editor, buf, lambda ls: ls[-1].startswith(f"[task {token} "))
    assert "after-the-host" in lines
    assert not [n for n in editor.notifications() if "attempt to call" in n]


def test_the_output_view_masks_keys_across_reads_and_colour_codes(editor):
    """A private key printed a line at a time, its body lines read apart from
    its BEGIN and END lines, showed its body; a key right after a colour code
    (`grep --color`) showed whole."""
    editor.setup()
    ghp = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123"
    steps = [
        f"printf '\\033[32m{ghp}\\033[0m\\n'",
        "echo '-----BEGIN OPENSSH PRIVATE KEY-----'",
        "echo b3BlbnNzaC1rZXktdjEAAAAA",
        "echo QUJDREVGR0hJSktMTU5PUFFSU1RVVldY",
        "echo '-----END OPENSSH PRIVATE KEY-----'",
    ]
    gates = [editor.workdir / f"gate{i}" for i in range(len(steps))]
    command = "; ".join(
        f"while [ ! -e {gate} ]; do sleep 0.05; done; {step}" for gate, step in zip(gates, steps)
    )
    token = start_background(editor, command)
    editor.nvim.command(f"SidekickOutput {token}")
    buf = current_buf(editor)
    for i, gate in enumerate(gates):  # each step read apart from the others
        gate.write_text("")
        wait_lines(editor, buf, lambda ls, n=i + 1: len([x for x in ls if x]) >= n)
    lines = wait_lines(editor, buf, lambda ls: ls[-1].startswith(f"[task {token} "))
    text = "\n".join(lines)
    assert "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY" not in text and "b3BlbnNzaC1rZXkt" not in text
    assert "-----END OPENSSH PRIVATE KEY-----" in lines and ghp not in text
