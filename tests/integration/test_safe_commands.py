"""The auto-accept policy of run_terminal_command in a real Neovim (DESIGN §12).

A chat chains calls after the one the user runs; only calls the policy
approves run on their own, exactly as checked, under auto_accept.timeout.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import wait_for
from tests.integration.conftest import setup_errors
from tests.integration.git_helpers import git_repo

pytestmark = pytest.mark.integration


def call(command: str, call_id: str) -> str:
    params = json.dumps({"command": command})
    return f"```tool run_terminal_command id={call_id}\n{params}\n```\n"


def chat(*blocks: str) -> str:
    return "USER: look around\n\nASSISTANT: Sure.\n\n" + "\n".join(blocks)


def header(editor, call_id: str) -> int:
    return editor.lines().index(f"```tool run_terminal_command id={call_id}")


def test_a_chained_git_log_output_never_rewrites_the_config(editor, tmp_path):
    """git log --output=.git/config writing a core.fsmonitor setting, then git status
    running it: the first is not auto-run, it waits with ▶, and nothing executes. Run
    by the user's hand it does write the config; the chained git status then still
    waits, since the repository now names a program; run by hand it starts it."""
    editor.setup()
    work = editor.workdir
    git_repo(work)
    sentinel = tmp_path / "fsmonitor-ran"
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {sentinel}\n")
    evil.chmod(0o755)
    config_before = (work / ".git" / "config").read_bytes()
    payload = f"git log --output=.git/config -1 '--format=[core]%n%x09fsmonitor=%x20{evil}'"
    editor.open_chat(chat(call("echo start", "c1"), call(payload, "c2"), call("git status", "c3")))
    editor.run_tool(header(editor, "c1") + 1)
    editor.wait_text("```result id=c1 status=completed")
    d = editor.wait_diag(header(editor, "c2"), "▶ run_terminal_command")
    assert d["severity"] == 4  # HINT
    assert "id=c2 status" not in editor.text()
    assert "id=c3 status" not in editor.text()
    assert (work / ".git" / "config").read_bytes() == config_before
    assert not sentinel.exists()

    # The user runs it: it writes the config (their consent) ...
    editor.run_tool(header(editor, "c2") + 1)
    editor.wait_text("```result id=c2 status=completed")
    assert b"fsmonitor" in (work / ".git" / "config").read_bytes()
    # ... and the chain stops again before git status, which the policy now refuses.
    editor.wait_diag(header(editor, "c3"), "▶ run_terminal_command")
    assert "id=c3 status" not in editor.text()
    assert not sentinel.exists()

    # The control: run by hand, git status does start the program.
    editor.run_tool(header(editor, "c3") + 1)
    editor.wait_text("```result id=c3 status=")
    wait_for(sentinel.exists)


def test_chained_safe_git_runs_hardened_and_reads_stay_inside(editor, tmp_path):
    editor.setup()
    work = editor.workdir
    git_repo(work)
    (tmp_path / "outside.txt").write_text("OUTSIDE\n")
    editor.open_chat(
        chat(
            call("echo start", "c1"),
            call("git log --oneline", "c2"),
            call("cat a.txt", "c3"),
            call("cat ../outside.txt", "c4"),
            call("echo never", "c5"),
        )
    )
    editor.run_tool(header(editor, "c1") + 1)
    text = editor.wait_text("```result id=c3 status=completed")
    assert "first" in text  # git log ran
    editor.wait_diag(header(editor, "c4"), "▶ run_terminal_command")
    assert "OUTSIDE" not in editor.text()
    assert "id=c4 status" not in editor.text() and "id=c5 status" not in editor.text()
    tasks = editor.lua("return require('sidekick_tools').list_tasks()")
    git_task = next(t for t in tasks if t["label"] == "git log --oneline")
    assert git_task["status"] == "completed"
    # what ran is the hardened command line, not the text of the call
    assert "GIT_CONFIG_GLOBAL=/dev/null" in git_task["command"]
    assert "--no-ext-diff --no-textconv" in git_task["command"]
    assert git_task["timeout"] == 120


def test_an_auto_run_command_stops_at_the_auto_timeout(editor):
    """tail -f chained after the user's call ends at auto_accept.timeout, not after 30 min."""
    editor.setup(auto_accept={"timeout": 1})
    (editor.workdir / "log.txt").write_text("first line\n")
    editor.open_chat(chat(call("echo start", "c1"), call("tail -f log.txt", "c2")))
    editor.run_tool(header(editor, "c1") + 1)
    text = editor.wait_text("```result id=c2 status=failed", timeout=30)
    line = next(x for x in text.split("\n") if x.startswith("```result id=c2"))
    assert "reason=timeout" in line
    assert "first line" in text


def test_forms_are_checked_by_setup_and_by_the_host(editor):
    said = setup_errors(editor, {"auto_accept": {"command_forms": {"rg": "x"}}})
    assert any(
        'auto_accept.command_forms["rg"] must be a form table or false' in x for x in said
    ), said
    said = setup_errors(editor, {"auto_accept": {"safe_commands": [3]}})
    assert any("auto_accept.safe_commands holds strings" in x for x in said), said

    editor.setup(
        auto_accept={
            "safe_commands": ["echo", "true"],
            "command_forms": {
                "uname": {"flags": ["-s", "-r"], "operands": "none"},
                "sh": {"operands": "none"},
            },
        }
    )
    editor.open_chat(
        chat(
            call("echo start", "c1"),
            call("true", "c2"),
            call("uname -s", "c3"),
            call("uname -a", "c4"),
        )
    )
    editor.run_tool(header(editor, "c1") + 1)
    editor.wait_text("```result id=c3 status=completed")
    editor.wait_diag(header(editor, "c4"), "▶ run_terminal_command")
    assert "```result id=c2 status=completed" in editor.text()
    wait_for(lambda: any("sh runs other programs" in n for n in editor.notifications()))
