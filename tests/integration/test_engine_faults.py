"""Faults around the task engine, in a real headless Neovim: a locked database,
a read-only state dir, a full disk, a hostile filter regex. The editor keeps
answering and nothing is left `running`."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys

import pytest

from tests.conftest import answers, wait_for

pytestmark = pytest.mark.integration

HEAD = "USER: go\n\nASSISTANT: On it.\n\n"


def call(call_id: str, tool: str = "run_terminal_command", **params) -> str:
    return f"```tool {tool} id={call_id}\n{json.dumps(params)}\n```\n"


def serving(editor) -> bool:
    """The host and Neovim still answer (by the deadline of ``answers``). That
    no wait of the host's holds the editor is test_f4's (a filter) and the
    store's busy timeout's (50 ms, tests/unit/test_tasks_store.py) to show."""
    ping = "return require('sidekick_tools.host').request('ping')"
    return (
        answers(lambda: editor.lua(ping), unblock=editor.kill_host) == "pong"
        and answers(lambda: editor.nvim.eval("1"), unblock=editor.kill_host) == 1
    )


def stored_status(db, token: str) -> str | None:
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = reader.execute("SELECT status FROM tasks WHERE token = ?", (token,)).fetchone()
    finally:
        reader.close()
    return row[0] if row else None


def add_message(editor, call_text: str) -> int:
    """Append an assistant message with one call; the call's 1-based line."""
    lines = ["", "ASSISTANT: And now this.", "", *call_text.splitlines()]
    row = len(editor.lines()) + 4
    editor.nvim.current.buffer.append(lines)
    return row


def test_a_database_locked_mid_session_never_holds_the_editor(editor):
    editor.setup()
    editor.open_chat(HEAD + call("a", command="echo before"))
    editor.run_tool(5)
    editor.wait_text("```result id=a status=completed exit=0")
    row = add_message(editor, call("b", command="echo during-lock"))
    db = editor.state_dir / "tasks.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another program holds the write lock
    try:
        # all of this while the lock is held: nothing waits for it to end
        answers(lambda: editor.run_tool(row), unblock=editor.kill_host)
        text = editor.wait_text("```result id=b status=completed exit=0")
        assert "during-lock" in text.split("```result id=b")[1]
        assert serving(editor)
        tasks = editor.lua("return require('sidekick_tools').list_tasks()")
        token = next(t["id"] for t in tasks if t["call_id"] == "b")
        assert next(t for t in tasks if t["id"] == token)["status"] == "completed"
        assert stored_status(db, token) is None  # its row waits for the lock
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    wait_for(lambda: stored_status(db, token) == "completed")
    assert not [n for n in editor.notifications() if "tasks.db" in n]  # a lock is no failure


def test_a_read_only_state_dir_falls_back_with_one_message(editor, tmpfs):
    state = tmpfs("readonly-state", read_only=True)
    editor.setup(state_dir=str(state))
    editor.open_chat(HEAD + call("r", command="echo works"))
    editor.run_tool(5)
    editor.wait_text("```result id=r status=completed exit=0")
    editor.run_tool(add_message(editor, call("s", command="echo too")))
    editor.wait_text("```result id=s status=completed exit=0")
    notes = [n for n in editor.notifications() if "state directory" in n]
    assert len(notes) == 1, editor.notifications()
    assert str(state) in notes[0] and "memory" in notes[0]
    log_path = editor.lua("return require('sidekick_tools').list_tasks()")[0]["log_path"]
    assert not log_path.startswith(str(state)) and log_path.split("/tasks/")[0] in notes[0]


@pytest.mark.parametrize("given", ["~/sk-state", "rel-state"])
def test_a_state_dir_with_a_tilde_or_relative_is_one_folder_for_editor_and_host(editor, given):
    """`state_dir = "~/..."` made Lua write mcp.json under a folder named "~" in
    the working directory while the host put the tasks under $HOME; a relative
    one followed the working directory of whichever came later. Both sides
    use the folder it names when setup() runs."""
    home = editor.workdir / "home"
    home.mkdir()
    editor.lua("vim.env.HOME = ...", str(home))
    editor.setup(state_dir=given)
    expected = home / "sk-state" if given.startswith("~") else editor.workdir / "rel-state"
    elsewhere = editor.workdir / "elsewhere"
    elsewhere.mkdir()
    editor.nvim.command(f"cd {elsewhere}")  # the host starts after this
    assert (expected / "mcp.json").is_file()
    assert not (editor.workdir / "~").exists()
    assert editor.lua("return require('sidekick_tools.config').state_dir()") == str(expected)
    editor.open_chat(HEAD + call("r", command="echo works"))
    editor.run_tool(5)
    editor.wait_text("```result id=r status=completed exit=0")
    log_path = editor.lua("return require('sidekick_tools').list_tasks()")[0]["log_path"]
    assert log_path.startswith(str(expected) + "/tasks/"), log_path
    assert not (elsewhere / "rel-state").exists()


@pytest.mark.parametrize("kind", ["cannot be created", "is a file"])
def test_an_unusable_state_dir_is_said_by_setup_which_goes_on(editor, kind):
    if kind == "is a file":
        state = editor.workdir / "state-file"
        state.write_text("not a directory\n")
        reason = "ENOTDIR: not a directory"
    else:
        state = "/proc/sidekick_state"  # no directory can be made under /proc, even by root
        reason = "ENOENT: no such file or directory"
    # as in an init.lua: what follows setup() runs
    editor.lua(
        "require('sidekick_tools').setup(...)\n_G.__after_setup = true",
        {"python": sys.executable, "state_dir": str(state)},
    )
    assert editor.lua("return _G.__after_setup") is True
    notes = editor.notifications()
    assert len(notes) == 1, notes
    assert notes[0].startswith(f"sidekick_tools: state_dir {state} cannot be used: {reason}")
    assert "memory" in notes[0]
    # commands work, with the tasks in memory
    editor.open_chat(HEAD + call("r", command="echo works"))
    editor.run_tool(5)
    editor.wait_text("```result id=r status=completed exit=0")


def test_an_unusable_state_dir_is_one_message_from_setup_to_the_tasks(editor):
    """setup() said the state_dir could not be used, then the host said it again
    when it started: two messages for one problem. setup() names the temporary
    directory the logs go to; the host uses it and says nothing more."""
    state = editor.workdir / "state-file" / "state"  # a path under a regular file
    state.parent.write_text("not a directory\n")
    editor.setup(state_dir=str(state))
    notes = editor.notifications()
    assert len(notes) == 1, notes
    said = notes[0]
    assert said.startswith(f"sidekick_tools: state_dir {state} cannot be used: ENOTDIR"), said
    editor.open_chat(HEAD + call("r", command="echo works"))
    editor.run_tool(5)
    editor.wait_text("```result id=r status=completed exit=0")
    # a second call: whatever the host said when it started has reached Neovim by its end
    editor.run_tool(add_message(editor, call("s", command="echo too")))
    editor.wait_text("```result id=s status=completed exit=0")
    assert editor.notifications() == [said]
    fallback = re.search(r"temporary state directory (\S+);", said).group(1)
    assert "kept in memory" in said and os.path.isdir(fallback)
    log_path = editor.lua("return require('sidekick_tools').list_tasks()")[0]["log_path"]
    assert log_path.startswith(fallback + "/tasks/")
    editor.setup(state_dir=str(state))  # again (a config reloaded): nothing new to say
    assert editor.notifications() == [said]


def test_a_full_disk_ends_the_task_with_its_status(editor, tmpfs):
    state = tmpfs("small-state", size="2m")
    editor.setup(state_dir=str(state), tasks={"max_log_bytes": 0})
    editor.open_chat(HEAD + call("f", command="cat /dev/zero"))
    editor.run_tool(5)
    editor.wait_text("```result id=f status=failed exit=1", timeout=30)
    task = editor.lua("return require('sidekick_tools').list_tasks()")[0]
    assert task["status"] == "failed" and task["exit_code"] == 1
    assert serving(editor)
    notes = [n for n in editor.notifications() if "disk is full" in n]
    assert len(notes) == 1 and "memory" in notes[0]


def test_a_hostile_filter_never_holds_the_editor(editor):
    editor.setup()
    evil = "a" * 40 + "b"  # ^(a+)+$ backtracks 2^40 ways on it
    editor.open_chat(HEAD + call("p", command=f"echo {evil}", **{"async": False}))
    editor.run_tool(5)
    editor.wait_text("```result id=p status=completed exit=0")
    token = editor.lua("return require('sidekick_tools').list_tasks()")[0]["id"]
    row = add_message(editor, call("q", "task_output", task=token, filter="^(a+)+$"))
    answers(lambda: editor.run_tool(row), unblock=editor.kill_host)
    assert serving(editor)  # the regex runs in its own process (test_f4 shows it)
    text = editor.wait_text("```result id=q status=failed", timeout=30)
    assert "filter took too long" in text
