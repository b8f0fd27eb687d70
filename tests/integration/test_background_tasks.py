"""Background tasks through the chat buffer: hybrid execution, completion notices,
halt, timeout, the concurrency limit, and recovery after the host or Neovim dies."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sidekick_tools.tasks.store import SqliteStore

from tests.conftest import live_members, wait_for
from tests.integration.conftest import quit_nvim

pytestmark = pytest.mark.integration

HEAD = "USER: go\n\nASSISTANT: On it.\n\n"


def call(call_id: str, command: str, **extra) -> str:
    params = {"command": command, **extra}
    return f"```tool run_terminal_command id={call_id}\n{json.dumps(params)}\n```\n"


def wait_cmd(marker: Path, then: str = "echo done") -> str:
    return f"while [ ! -e {marker} ]; do sleep 0.05; done; {then}"


def task_of(editor, call_id: str) -> dict:
    tasks = editor.lua("return require('sidekick_tools').list_tasks({ all = true })")
    return next(t for t in tasks if t["call_id"] == call_id)


def test_task_outliving_the_threshold_goes_background_then_fills_in(editor):
    editor.setup(tasks={"hybrid_threshold": 0.3})
    marker = editor.workdir / "release"
    editor.open_chat(HEAD + call("bg", wait_cmd(marker, "echo '[RESULT] all good'")))
    editor.run_tool(5)
    text = editor.wait_text("```result id=bg status=running task=")
    token = task_of(editor, "bg")["id"]
    assert f"status=running task={token}" in text
    assert "await_task" in text and "halt" in text
    # the user starts typing a reply meanwhile
    editor.wait_diag(4, "⟳ run_terminal_command (running")
    assert editor.lines()[-1] == "USER: "
    editor.lua("vim.api.nvim_buf_set_lines(0, -2, -1, false, {'USER: still typing here'})")
    marker.write_text("")
    out = editor.wait_text("```result id=bg status=completed exit=0")
    lines = out.split("\n")
    # the block was replaced in place (one result block only)
    assert sum(1 for line in lines if line.startswith("```result id=bg")) == 1
    # the notice is a USER message inserted before what the user is typing
    assert lines[-1] == "USER: still typing here"
    notice = next(
        i for i, line in enumerate(lines) if line.startswith(f"USER: [sidekick task {token}")
    )
    assert notice < len(lines) - 1
    body = "\n".join(lines[notice + 2 : lines.index("```", notice + 2)])
    payload = json.loads(body)
    assert payload["id"] == token
    assert payload["status"] == "completed"
    assert payload["exit_code"] == 0
    assert "[RESULT] all good" in payload["output"]
    assert payload["log"].endswith("/stdout")
    for key in ("started_at", "ended_at", "duration_seconds"):
        assert key in payload
    editor.wait_diag(4, "✓ run_terminal_command")


def test_async_true_returns_the_token_at_once(editor):
    editor.setup()
    marker = editor.workdir / "m"
    editor.open_chat(HEAD + call("a", wait_cmd(marker), **{"async": True}))
    editor.run_tool(5)
    editor.wait_text("```result id=a status=running task=")
    marker.write_text("")
    editor.wait_text("```result id=a status=completed exit=0")


def test_halt_kills_a_tree_that_ignores_sigterm(editor):
    editor.setup(tasks={"halt_grace": 0.5, "hybrid_threshold": 0.2})
    script = "trap '' TERM; echo partial; sleep 1000 & sleep 1000 & wait"
    editor.open_chat(HEAD + call("h", script))
    editor.run_tool(5)
    editor.wait_text("```result id=h status=running task=")
    task = task_of(editor, "h")
    pgid = task["pid"]
    wait_for(lambda: len(live_members(pgid)) >= 3)
    res = editor.lua("return require('sidekick_tools').halt(...)", task["id"])
    # the editor is answered at once; the stubborn tree is killed after the grace
    assert res["status"] in ("halting", "cancelled")
    # said as the plugin's other messages are, with its name first
    assert res["message"].startswith(f"sidekick_tools: halting task {task['id']}: SIGTERM sent")
    wait_for(lambda: task_of(editor, "h")["status"] == "cancelled")
    wait_for(lambda: live_members(pgid) == [])
    # and told once it has ended: the SIGKILL the answer spoke of came
    wait_for(lambda: f"sidekick_tools: task {task['id']} cancelled" in editor.notifications())
    out = editor.wait_text("```result id=h status=cancelled")
    assert "partial" in out.split("```result id=h", 1)[1]  # partial output stays readable
    editor.wait_diag(4, "⊘ run_terminal_command")


def test_halting_a_task_whose_chat_is_out_of_view_is_said_once(editor):
    """`:SidekickHalt TOKEN` typed in another buffer: the halt's answer and the
    task's end notification (its chat out of view) both said that the task
    was cancelled. The halt says it; the end is not said again."""
    editor.setup(tasks={"hybrid_threshold": 0.2})
    marker = editor.workdir / "release"
    editor.open_chat(HEAD + call("o", "sleep 1000"))
    editor.run_tool(5)
    editor.wait_text("```result id=o status=running task=")
    token = task_of(editor, "o")["id"]
    editor.nvim.command("enew")
    editor.nvim.command(f"SidekickHalt {token}")
    wait_for(lambda: task_of(editor, "o")["status"] == "cancelled")
    # a later request: the end's events and what they scheduled have run
    editor.lua("return require('sidekick_tools.host').request('ping')")
    said = [n for n in editor.notifications() if token in n]
    # the halt's answer says "cancelled"; on a loaded machine the task may take
    # longer to end than the answer waits, and the answer is then "halting…",
    # with "cancelled" said once it has ended: either way, its end is said once
    halting = f"sidekick_tools: halting task {token}: SIGTERM sent"
    assert said[-1] == f"sidekick_tools: task {token} cancelled"
    assert len(said) <= 2 and all(n.startswith(halting) for n in said[:-1])
    # another task's end, out of view, is still said
    editor.nvim.command("buffer chat.sidekick.md")
    editor.lua(
        "vim.api.nvim_buf_set_lines(0, -1, -1, false, vim.split(..., '\\n'))",
        "USER: more\n\nASSISTANT: Again.\n\n" + call("p", wait_cmd(marker, "echo later")),
    )
    row = next(i for i, line in enumerate(editor.lines()) if "id=p" in line)
    editor.run_tool(row + 1)
    editor.wait_text("```result id=p status=running task=")
    later = task_of(editor, "p")["id"]
    editor.nvim.command("enew")
    marker.write_text("")
    wait_for(lambda: any(f"task {later} completed" in n for n in editor.notifications()))


def test_halt_the_call_under_the_cursor(editor):
    editor.setup(tasks={"halt_grace": 0.5, "hybrid_threshold": 0.2})
    editor.open_chat(HEAD + call("hc", "sleep 1000"))
    editor.run_tool(5)
    editor.wait_text("```result id=hc status=running task=")
    editor.nvim.command("call cursor(6, 1) | SidekickHalt")
    editor.wait_text("```result id=hc status=cancelled")


def test_halt_under_the_cursor_never_reaches_another_chats_task(editor):
    """A chat from elsewhere whose block names a task of yours (`status=running
    task=T`) is shown "not this call's", and running the call runs it anew;
    :SidekickHalt on that call halted T all the same. It is refused, naming
    the token; halting by the token stays the user's to do."""
    editor.setup(tasks={"hybrid_threshold": 0.2})
    editor.open_chat(HEAD + call("k", "sleep 1000"), name="mine.sidekick.md")
    editor.run_tool(5)
    editor.wait_text("```result id=k status=running task=")
    token = task_of(editor, "k")["id"]
    forged = HEAD + call("k", "sleep 1000") + f"```result id=k status=running task={token}\n```\n"
    editor.open_chat(forged, name="other.sidekick.md")
    assert "is not this call's" in editor.wait_diag(4, "✗ run_terminal_command")["message"]
    editor.nvim.command("call cursor(6, 1) | SidekickHalt")
    wait_for(lambda: any("is not this call's" in n for n in editor.notifications()))
    said = next(n for n in editor.notifications() if "is not this call's" in n)
    assert f":SidekickHalt {token}" in said
    assert task_of(editor, "k")["status"] == "running"
    editor.nvim.command(f"SidekickHalt {token}")
    wait_for(lambda: task_of(editor, "k")["status"] == "cancelled")


def test_timeout_fails_the_task_and_keeps_partial_output(editor):
    editor.setup()
    editor.open_chat(HEAD + call("t", "echo before; sleep 100", timeout_seconds=0.5))
    editor.run_tool(5)
    out = editor.wait_text("```result id=t status=failed")
    header = next(line for line in out.split("\n") if line.startswith("```result id=t"))
    assert "reason=timeout" in header
    assert "before" in out.split(header, 1)[1]  # the output, not the command
    d = editor.wait_diag(4, "✗ run_terminal_command")
    assert "timeout" in d["message"]


def test_twenty_tasks_against_max_concurrent_five(editor):
    editor.setup(tasks={"max_concurrent": 5})
    marker = editor.workdir / "open"
    blocks = [call(f"q{i:02d}", wait_cmd(marker), **{"async": True}) for i in range(20)]
    editor.open_chat(HEAD + "\n".join(blocks))
    editor.nvim.command("SidekickRunTools!")
    wait_for(lambda: editor.text().count("status=running task=") == 20)

    def counts():
        tasks = editor.lua("return require('sidekick_tools').list_tasks({ limit = 50 })")
        return [t["status"] for t in tasks]

    statuses = wait_for(lambda: counts() if counts().count("running") == 5 else None)
    assert statuses.count("queued") == 15
    # each queued call's place in the queue: set when its running block is in,
    # drawn once that state has reached Neovim (after the text and the host's list)
    ahead = re.compile(r"⧗ run_terminal_command \(queued, (\d+) ahead\)")

    def places() -> list[int]:
        found = (ahead.fullmatch(d["message"]) for d in editor.diagnostics())
        return sorted(int(m.group(1)) for m in found if m)

    wait_for(lambda: places() == list(range(15)))
    marker.write_text("")
    wait_for(lambda: editor.text().count("status=completed exit=0") == 20, timeout=60)
    assert max_running_seen(editor) <= 5


def max_running_seen(editor) -> int:
    # every task's [started_at, ended_at] interval: the overlap never exceeds 5
    tasks = editor.lua("return require('sidekick_tools').list_tasks({ limit = 50 })")
    events = []
    for t in tasks:
        events.append((t["started_at"], 1))
        events.append((t["ended_at"], -1))
    level = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        level += step
        peak = max(peak, level)
    return peak


def test_host_killed_while_five_tasks_run_nothing_is_lost(editor):
    editor.setup(tasks={"hybrid_threshold": 0.2})
    early, late = editor.workdir / "early", editor.workdir / "late"
    blocks = [
        call(f"k{i}", wait_cmd(early if i < 2 else late, f"exit {i + 3}"), **{"async": True})
        for i in range(5)
    ]
    editor.open_chat(HEAD + "\n".join(blocks))
    editor.nvim.command("SidekickRunTools!")
    wait_for(lambda: editor.text().count("status=running task=") == 5)
    editor.kill_host()
    wait_for(lambda: editor.lua("return require('sidekick_tools.host').running()") is False)
    # two tasks end while no host runs: their wrappers record the exit on disk
    early.write_text("")
    log_dirs = [Path(p) for p in editor.state_dir.glob("tasks/*")]
    wait_for(lambda: sum((d / "exit").exists() for d in log_dirs) == 2)
    # any command starts a new host; it applies recorded exits and reattaches the rest
    editor.lua("return require('sidekick_tools').list_tasks()")
    for i in range(2):
        editor.wait_text(f"```result id=k{i} status=failed exit={i + 3}", timeout=30)
    assert [t["status"] for t in editor.lua("return require('sidekick_tools').list_tasks()")].count(
        "running"
    ) == 3
    late.write_text("")
    for i in range(2, 5):
        editor.wait_text(f"```result id=k{i} status=failed exit={i + 3}", timeout=30)
    tasks = editor.lua("return require('sidekick_tools').list_tasks({ limit = 10 })")
    assert sorted(t["exit_code"] for t in tasks) == [3, 4, 5, 6, 7]
    assert all(t["status"] == "failed" and t["reason"] == "exit" for t in tasks)


def test_a_neovim_whose_host_died_still_halts_its_tasks(editor):
    """kill_on_exit without a host: the reap entry point, started the way Lua
    starts the host (host.command), halts the dead host's tasks at once."""
    editor.setup(tasks={"hybrid_threshold": 0.2})
    editor.open_chat(HEAD + call("r", "trap '' TERM; echo ready; sleep 1000", **{"async": True}))
    editor.run_tool(5)
    editor.wait_text("```result id=r status=running task=")
    task = task_of(editor, "r")
    wait_for(lambda: "ready" in Path(task["log_path"]).read_text())
    editor.kill_host()
    wait_for(lambda: editor.lua("return require('sidekick_tools.host').running()") is False)
    argv = editor.lua(
        "return require('sidekick_tools.host').command(...)", sys.executable, "sidekick_tools.reap"
    )
    args = ["--halt-owner", task["owner"], "--state-dir", str(editor.state_dir)]
    done = subprocess.run(
        argv + args, capture_output=True, text=True, timeout=30, cwd=editor.workdir, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["halted"] == [task["id"]]
    wait_for(lambda: live_members(task["pid"]) == [])
    store = SqliteStore(str(editor.state_dir / "tasks.db"))
    stored = store.get(task["id"])
    store.close()
    assert stored.status.value == "cancelled" and "its host had died" in stored.error


def test_reopened_chat_is_filled_in_when_its_task_ends(editors):
    first = editors()
    first.setup(tasks={"kill_on_exit": False, "hybrid_threshold": 0.2})
    marker = first.workdir / "later"
    path = first.workdir / "chat.sidekick.md"
    first.open_chat(HEAD + call("r", wait_cmd(marker, "echo came back")))
    first.run_tool(5)
    first.wait_text("```result id=r status=running task=")
    first.nvim.command("write")
    token = task_of(first, "r")["id"]
    quit_nvim(first)
    # the task survived Neovim (kill_on_exit = false)
    second = editors()
    second.setup(tasks={"kill_on_exit": False})
    second.nvim.command(f"edit {path}")
    assert f"status=running task={token}" in second.text()
    marker.write_text("")
    out = second.wait_text("```result id=r status=completed exit=0")
    assert "came back" in out
    assert f"USER: [sidekick task {token} completed]" in out


def test_task_that_ended_while_neovim_was_closed(editors):
    first = editors()
    first.setup(tasks={"kill_on_exit": False, "hybrid_threshold": 0.2})
    marker = first.workdir / "x"
    path = first.workdir / "chat.sidekick.md"
    first.open_chat(HEAD + call("c", wait_cmd(marker, "echo while-closed")))
    first.run_tool(5)
    first.wait_text("```result id=c status=running task=")
    first.nvim.command("write")
    log_dir = Path(task_of(first, "c")["log_dir"])
    quit_nvim(first)
    marker.write_text("")
    wait_for(lambda: (log_dir / "exit").exists())
    second = editors()
    second.setup()
    second.nvim.command(f"edit {path}")
    out = second.wait_text("```result id=c status=completed exit=0")
    assert "while-closed" in out


def test_kill_on_exit_leaves_no_orphans(editors):
    ed = editors()
    ed.setup(tasks={"hybrid_threshold": 0.2})
    ed.open_chat(HEAD + call("o", "sleep 1000 & sleep 1000; wait"))
    ed.run_tool(5)
    ed.wait_text("```result id=o status=running task=")
    pgid = task_of(ed, "o")["pid"]
    wait_for(lambda: len(live_members(pgid)) >= 2)
    quit_nvim(ed)
    wait_for(lambda: live_members(pgid) == [])
    db = sqlite3.connect(ed.state_dir / "tasks.db")
    (status,) = db.execute("select status from tasks").fetchone()
    assert status == "cancelled"


def test_two_neovims_share_one_database(editors):
    a = editors()
    a.setup(tasks={"hybrid_threshold": 0.2})
    marker = a.workdir / "go"
    a.open_chat(HEAD + call("a1", wait_cmd(marker)), name="a.sidekick.md")
    a.run_tool(5)
    a.wait_text("```result id=a1 status=running task=")
    b = editors()
    b.setup(tasks={"hybrid_threshold": 0.2})
    b.open_chat(HEAD + call("b1", "echo from-b"), name="b.sidekick.md")
    b.run_tool(5)
    b.wait_text("```result id=b1 status=completed exit=0")
    # each sees its own tasks; `all` shows both; b's host left a's running task alone
    assert [t["call_id"] for t in b.lua("return require('sidekick_tools').list_tasks()")] == ["b1"]
    everyone = b.lua("return require('sidekick_tools').list_tasks({ all = true })")
    assert {t["call_id"] for t in everyone} == {"a1", "b1"}
    assert task_of(a, "a1")["status"] == "running"
    marker.write_text("")
    a.wait_text("```result id=a1 status=completed exit=0")


def test_corrupt_database_falls_back_to_memory(editor):
    editor.state_dir.mkdir(parents=True)
    (editor.state_dir / "tasks.db").write_bytes(b"this is not a database" * 100)
    editor.setup()
    editor.open_chat(HEAD + call("m", "echo still-works"))
    editor.run_tool(5)
    editor.wait_text("```result id=m status=completed exit=0")
    notes = wait_for(lambda: [n for n in editor.notifications() if "tasks.db" in n])
    assert "memory" in notes[0]


def test_memory_store_option(editor):
    editor.setup(tasks={"store": "memory"})
    editor.open_chat(HEAD + call("mm", "echo mem"))
    editor.run_tool(5)
    editor.wait_text("```result id=mm status=completed exit=0")
    assert not (editor.state_dir / "tasks.db").exists()


def test_locked_database_falls_back_to_memory(editor):
    editor.state_dir.mkdir(parents=True)
    holder = sqlite3.connect(editor.state_dir / "tasks.db", isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")
    holder.execute("CREATE TABLE squatter (x)")
    holder.execute("BEGIN EXCLUSIVE")  # another program holds the database
    try:
        editor.setup()
        editor.open_chat(HEAD + call("l", "echo despite-the-lock"))
        editor.run_tool(5)
        editor.wait_text("```result id=l status=completed exit=0", timeout=30)
        notes = wait_for(lambda: [n for n in editor.notifications() if "tasks.db" in n])
        assert "locked" in notes[0]
        assert "memory" in notes[0]
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_tasks_run_niced_below_the_editor_and_it_is_configurable(editor):
    editor.setup(tasks={"hybrid_threshold": 0.2, "nice": 5})
    editor.open_chat(HEAD + call("n", "sleep 1000"))
    editor.run_tool(5)
    editor.wait_text("```result id=n status=running task=")
    pid = task_of(editor, "n")["pid"]
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 5)
    editor.lua("return require('sidekick_tools').halt(...)", task_of(editor, "n")["id"])


@pytest.mark.parametrize("resolve", ["run", "deny", "delete"])
def test_a_notice_waits_for_a_pending_call_after_it(editor, resolve):
    """Outside the chat loop (no model, :SidekickRunTool) a task that ended put its
    notice at the end of the chat at once, under a call of the same reply still
    waiting for the user: the pending call then sat above a USER message. The
    notice waits until every call of the last reply has its result (DESIGN §10,
    steering), then comes after them."""
    editor.setup()
    marker = editor.workdir / "release"
    editor.open_chat(
        HEAD
        + call("bg", wait_cmd(marker), **{"async": True})
        + "\n"
        + call("p2", "touch made-by-p2")  # writes: the chain stops before it (▶)
    )
    editor.run_tool(5)
    editor.wait_text("```result id=bg status=running task=")
    p2 = editor.lines().index("```tool run_terminal_command id=p2")
    editor.wait_diag(p2, "▶ run_terminal_command")
    token = task_of(editor, "bg")["id"]
    marker.write_text("")
    text = editor.wait_text("```result id=bg status=completed exit=0")
    assert "USER: [sidekick task" not in text  # it waits: p2 has no result yet
    if resolve == "run":
        editor.run_tool(p2 + 1)
    elif resolve == "deny":
        editor.nvim.command(f"call cursor({p2 + 1}, 1)")
        editor.nvim.command("SidekickDeny not now")
    else:  # the user deletes the call: nothing is left to wait for
        editor.lua("vim.api.nvim_buf_set_lines(0, ..., ... + 3, false, {})", p2, p2)
    lines = editor.wait_text(f"USER: [sidekick task {token} completed]").split("\n")
    notice = lines.index(f"USER: [sidekick task {token} completed]")
    assert sum(1 for line in lines if line.startswith("USER: [sidekick task")) == 1
    bg_result = next(i for i, line in enumerate(lines) if line.startswith("```result id=bg "))
    assert bg_result < notice
    if resolve != "delete":
        p2_result = next(i for i, line in enumerate(lines) if line.startswith("```result id=p2 "))
        assert p2 < p2_result < notice
        assert lines[-1] == "USER: "  # the line for the user's reply stays last


def test_a_call_whose_task_was_stopped_at_quit_runs_again_when_asked(editors):
    """kill_on_exit stopped the task when Neovim quit with the chat unsaved: the
    reopened chat's call is pending, and :SidekickRunTool runs it (the stopped
    task did not do its work), instead of writing the stopped task's result."""
    first = editors()
    first.setup(tasks={"hybrid_threshold": 0.2})
    marker = first.workdir / "go"
    path = first.workdir / "chat.sidekick.md"
    first.open_chat(HEAD + call("r0", wait_cmd(marker, "echo ran-again")))
    first.run_tool(5)
    first.wait_text("```result id=r0 status=running task=")
    stopped = task_of(first, "r0")["id"]
    quit_nvim(first)  # unsaved: the file on disk has no result
    second = editors()
    second.setup(tasks={"hybrid_threshold": 0.2})
    second.nvim.command(f"edit {path}")
    assert "```result" not in second.text()
    wait_for(lambda: task_of(second, "r0")["status"] == "cancelled")
    marker.write_text("")
    second.run_tool(5)
    out = second.wait_text("```result id=r0 status=completed exit=0")
    assert "ran-again" in out and f"task={stopped}" not in out


def test_a_chat_saved_under_another_name_keeps_its_running_task(editors):
    """`:saveas other.sidekick.md` while a task ran: the task still named the
    old file, so the chat, closed and opened again under its new name, showed
    "task T is not this call's; not followed" and never got the result the
    closing message promised. A call run after the rename named the old file
    too. Its tasks now go with it, in the store, across a restart."""
    first = editors()
    first.setup(tasks={"kill_on_exit": False, "hybrid_threshold": 0.2})
    marker = first.workdir / "release"
    first.open_chat(HEAD + call("r", wait_cmd(marker, "echo renamed-ok")), name="old.sidekick.md")
    first.run_tool(5)
    try:
        first.wait_text("```result id=r status=running task=")
        new = first.workdir / "new.sidekick.md"
        first.nvim.command(f"saveas {new}")
        # a call run after the rename is the new chat's
        first.lua(
            "vim.api.nvim_buf_set_lines(0, -1, -1, false, vim.split(..., '\\n'))",
            "USER: more\n\nASSISTANT: Again.\n\n" + call("s", "echo after"),
        )
        row = next(i for i, line in enumerate(first.lines()) if "id=s" in line)
        first.run_tool(row + 1)
        first.wait_text("```result id=s status=completed exit=0")
        first.nvim.command("write")
        tasks = first.lua("return require('sidekick_tools').list_tasks()")
        assert {t["call_id"]: t["chat"] for t in tasks} == {"r": str(new), "s": str(new)}
        quit_nvim(first)
        # a new Neovim opens the chat by its new name: its running block is followed
        second = editors()
        second.setup()
        second.nvim.command(f"edit {new}")
        marker.write_text("")
        out = second.wait_text("```result id=r status=completed exit=0")
        assert "renamed-ok" in out
        assert not any("not this call's" in d["message"] for d in second.diagnostics())
    finally:
        marker.touch()  # the task outlives its Neovim (kill_on_exit off): it ends


def test_a_chat_saved_under_another_name_gets_its_result_when_reopened(editor):
    """The same within one Neovim: :saveas, :bdelete, the task ends, :edit."""
    editor.setup(tasks={"hybrid_threshold": 0.2})
    marker = editor.workdir / "release"
    editor.open_chat(HEAD + call("r", wait_cmd(marker, "echo reopened-ok")), name="a.sidekick.md")
    editor.run_tool(5)
    editor.wait_text("```result id=r status=running task=")
    new = editor.workdir / "b.sidekick.md"
    editor.nvim.command(f"saveas {new}")
    editor.nvim.command("bdelete")
    token = task_of(editor, "r")["id"]
    marker.write_text("")
    wait_for(
        lambda: (
            editor.lua("return require('sidekick_tools').get_task(...)", token)["status"]
            == "completed"
        )
    )
    editor.nvim.command(f"edit {new}")
    out = editor.wait_text("```result id=r status=completed exit=0")
    assert "reopened-ok" in out


def test_a_wiped_chat_gets_its_result_when_reopened_and_is_said_once(editor):
    """:bwipeout of a chat whose task runs: the result could not be written
    (the buffer is gone), and that was said as "an internal error (see the
    host log)". It is said once, as a chat no longer loaded, and the saved chat
    gets the result when opened again, as after :bdelete."""
    editor.setup(tasks={"hybrid_threshold": 0.2})
    marker = editor.workdir / "release"
    path = editor.workdir / "w.sidekick.md"
    editor.open_chat(HEAD + call("r", wait_cmd(marker, "echo wiped-ok")), name=path.name)
    editor.run_tool(5)
    editor.wait_text("```result id=r status=running task=")
    editor.nvim.command("write")
    editor.nvim.command("enew | bwipeout #")
    token = task_of(editor, "r")["id"]
    marker.write_text("")
    said = wait_for(lambda: [n for n in editor.notifications() if "not written" in n] or None)
    wait_for(
        lambda: (
            editor.lua("return require('sidekick_tools').get_task(...)", token)["status"]
            == "completed"
        )
    )
    # a later request: what the host had to say about the task has reached Neovim
    editor.lua("return require('sidekick_tools.host').request('ping')")
    said = [n for n in editor.notifications() if "not written" in n]
    assert len(said) == 1, said
    assert "internal error" not in said[0] and "no longer loaded" in said[0], said
    editor.nvim.command(f"edit {path}")
    out = editor.wait_text("```result id=r status=completed exit=0")
    assert "wiped-ok" in out
