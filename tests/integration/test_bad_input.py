"""Bad input never crashes the host nor corrupts the buffer, and always gets a ✗
diagnostic that says what is wrong."""

from __future__ import annotations

import json

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.integration

HEAD = "USER: go\n\nASSISTANT: Working on it.\n\n"


def assert_host_alive(editor, pid: int) -> None:
    assert editor.lua("return require('sidekick_tools.host').request('ping')") == "pong"
    assert editor.host_pid() == pid


def row_of(editor, prefix: str) -> int:
    return next(i for i, line in enumerate(editor.lines()) if line.startswith(prefix))


@pytest.mark.parametrize(
    ("body", "tool", "expected"),
    [
        ('{"command": "echo hi",}', "run_terminal_command", "JSON"),
        ("[1, 2]", "run_terminal_command", "object"),
        ('{"command": "x"}', "launch_rockets", 'Unknown tool "launch_rockets"'),
        (
            '{"purpose": "no command"}',
            "run_terminal_command",
            'missing required parameter "command"',
        ),
        ('{"paths": "notes.txt"}', "read_files", '"paths"'),
        ('{"command": 42}', "run_terminal_command", '"command"'),
    ],
)
def test_bad_call_gets_a_failed_result_and_an_error_diagnostic(editor, body, tool, expected):
    editor.setup()
    editor.open_chat(HEAD + f"```tool {tool} id=bad\n{body}\n```\n")
    pid_before = None
    editor.run_tool(6)
    pid_before = editor.host_pid()
    text = editor.wait_text("```result id=bad status=failed")
    assert expected in text
    d = editor.wait_diag(4, f"✗ {tool}")
    assert expected in d["message"]
    assert d["severity"] == 1
    assert_host_alive(editor, pid_before)


def test_unclosed_fence_is_reported_and_nothing_is_written(editor):
    editor.setup()
    original = HEAD + '```tool run_terminal_command id=open\n{"command": "echo hi"}\n'
    editor.open_chat(original)
    before = editor.lines()
    editor.run_tool(5)
    d = editor.wait_diag(4, "✗ run_terminal_command")
    assert "Unclosed fence" in d["message"]
    assert editor.lines() == before
    assert_host_alive(editor, editor.host_pid())


def test_duplicate_ids_are_reported(editor):
    editor.setup()
    call = '```tool run_terminal_command id=same\n{"command": "echo one"}\n```\n'
    editor.open_chat(HEAD + call + "\n" + call)
    second = [i for i, line in enumerate(editor.lines()) if line.endswith("id=same")][1]
    editor.run_tool(second + 1)
    d = editor.wait_diag(second, "✗ run_terminal_command")
    assert "Duplicate id same" in d["message"]
    assert "status=" not in editor.text()


def test_ten_megabyte_parameter(editor):
    editor.setup()
    big = json.dumps({"command": "echo " + "x" * (10 * 1024 * 1024)})
    editor.open_chat(HEAD + f"```tool run_terminal_command id=big\n{big}\n```\n")
    editor.run_tool(5)
    d = editor.wait_diag(4, "✗ run_terminal_command", timeout=60)
    assert "large" in d["message"]
    assert_host_alive(editor, editor.host_pid())
    assert len(editor.lines()[5]) == len(big)  # the call itself is untouched


@pytest.mark.parametrize(
    ("command", "check"),
    [
        ("printf 'a\\000b\\001\\002\\003\\004\\005\\006'", lambda t: "[binary output:" in t),
        ("printf 'caf\\351 ok\\n'", lambda t: "caf\ufffd ok" in t),
        ("printf '\\033[31mred\\033[0m plain\\n'", lambda t: "red plain" in t and "\x1b" not in t),
        ("printf 'x\\n```\\n````\\ny\\n'", lambda t: "\n```\n````\ny\n" in t),
    ],
    ids=["binary", "invalid-utf8", "ansi", "fences"],
)
def test_hostile_output_is_rendered_safely(editor, command, check):
    editor.setup()
    call = json.dumps({"command": command})
    editor.open_chat(HEAD + f"```tool run_terminal_command id=out\n{call}\n```\n")
    editor.run_tool(5)
    wait_for(lambda: editor.lines()[-1] == "USER: ")
    text = editor.text()
    assert check(text), text
    # the result block still parses as one block: the diagnostic reads it back as ✓
    editor.wait_diag(4, "✓ run_terminal_command")
    # and the chat after it is intact
    assert editor.lines()[-1] == "USER: "


def test_crlf_chat(editor):
    editor.setup()
    path = editor.workdir / "crlf.sidekick.md"
    text = HEAD + '```tool run_terminal_command id=crlf\n{"command": "echo fine"}\n```\n'
    path.write_bytes(text.replace("\n", "\r\n").encode())
    # read it as a unix file so every line really ends in \r
    editor.nvim.command(f"edit ++ff=unix {path}")
    assert editor.lines()[4].endswith("\r")
    editor.run_tool(5)
    out = editor.wait_text("```result id=crlf status=completed exit=0")
    assert "fine" in out
    editor.wait_diag(4, "✓ run_terminal_command")


def test_crlf_file_keeps_its_line_ends(editor):
    editor.setup()
    path = editor.workdir / "dos.sidekick.md"
    text = HEAD + '```tool run_terminal_command id=dos\n{"command": "echo dos"}\n```\n'
    path.write_bytes(text.replace("\n", "\r\n").encode())
    editor.nvim.command(f"edit {path}")
    editor.run_tool(5)
    editor.wait_text("```result id=dos status=completed exit=0")
    editor.nvim.command("write")
    data = path.read_bytes()
    assert b"```result id=dos status=completed exit=0" in data
    assert data.count(b"\n") == data.count(b"\r\n")


def test_pending_calls_show_their_state_when_a_chat_is_opened(editor):
    editor.setup()
    # a chat without running tasks starts no host; once one runs (any command
    # started it), every chat opened shows its calls' state at once
    editor.nvim.command("SidekickTasks")
    editor.nvim.command("only")
    text = (
        HEAD + '```tool run_terminal_command id=p1\n{"command": "echo later"}\n```\n\n'
        "```tool read_files id=p2\nnot json\n```\n"
    )
    editor.open_chat(text)
    d = editor.wait_diag(4, "▶ run_terminal_command (:SidekickRunTool)")
    assert d["severity"] == 4
    bad = row_of(editor, "```tool read_files")
    d = editor.wait_diag(bad, "✗ read_files")
    assert "JSON" in d["message"]
    # opening ran nothing
    assert "status=" not in editor.text()
    assert editor.lua("return #require('sidekick_tools').list_tasks()") == 0


def test_edits_around_a_running_call_are_kept(editor):
    editor.setup()
    marker = editor.workdir / "go"
    cmd = f"while [ ! -e {marker} ]; do sleep 0.05; done; echo finished"
    editor.open_chat(
        HEAD + f"```tool run_terminal_command id=r\n{json.dumps({'command': cmd})}\n```\n"
    )
    editor.run_tool(5)
    editor.wait_diag(4, "⟳")
    # the user types above the call, inside the assistant text, and at the end
    editor.lua("vim.api.nvim_buf_set_lines(0, 2, 3, false, {'ASSISTANT: Working on it, really.'})")
    editor.lua("vim.api.nvim_buf_set_lines(0, 0, 0, false, {'SYSTEM: terse', ''})")
    editor.lua("vim.api.nvim_buf_set_lines(0, -1, -1, false, {'', 'USER: while you wait'})")
    marker.write_text("")
    text = editor.wait_text("```result id=r status=completed exit=0")
    lines = text.split("\n")
    assert lines[0] == "SYSTEM: terse"
    assert "ASSISTANT: Working on it, really." in lines
    header = lines.index("```tool run_terminal_command id=r")
    assert lines[header + 3].startswith("```result id=r status=completed")
    assert lines[header + 4] == "finished"
    assert lines[-1] == "USER: while you wait"
    wait_for(lambda: editor.diag_at(header) and editor.diag_at(header)["message"].startswith("✓"))
