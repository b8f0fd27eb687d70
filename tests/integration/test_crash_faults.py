"""The host killed with SIGKILL at the worst moments, in a real headless Neovim
(issue 15, DESIGN §12): no call runs twice, every call ends in a true state,
and tasks die with their Neovim even when the host died first."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from sidekick_tools.tasks.identity import proc_stat

from tests.conftest import wait_for
from tests.integration.conftest import quit_nvim

pytestmark = pytest.mark.integration

HEAD = "USER: go\n\nASSISTANT: On it.\n\n"


def call(call_id: str, command: str) -> str:
    return f"```tool run_terminal_command id={call_id}\n{json.dumps({'command': command})}\n```\n"


def kill_host(editor) -> None:
    """SIGKILL the host, then wait until Neovim knows it is gone."""
    assert editor.host_pid() > 0
    editor.kill_host()
    wait_for(lambda: not editor.lua("return require('sidekick_tools.host').running()"), 10)


def alive(pid: int) -> bool:
    fields = proc_stat(pid)  # state first
    return bool(fields) and fields[0] not in ("Z", "X")


def counts(folder: Path) -> dict[str, int]:
    """How many times each call's command ran, as the commands counted it."""
    return {p.name: len(p.read_text()) for p in folder.iterdir()}


@pytest.mark.slow
def test_kill_9_during_a_burst_of_300_writes_runs_each_call_once(editor):
    """300 calls run with :SidekickRunTools!; the host is killed while their
    running and final blocks are being written. A new host, and the user
    running the pending calls again, leave every call with one final result and
    every command run exactly once."""
    n = 300
    folder = editor.workdir / "counts"
    folder.mkdir()
    editor.setup(tasks={"hybrid_threshold": 0, "max_concurrent": 20})
    ids = [f"c{i:03d}" for i in range(n)]
    text = HEAD + "\n".join(call(i, f"printf x >> counts/{i}") for i in ids)
    buf = editor.open_chat(text)
    editor.lua("return require('sidekick_tools').run_tools(0, { confirm = false })")
    # kill it mid-burst: some commands ran, not every result is written
    wait_for(lambda: len(list(folder.iterdir())) >= n // 3, 60)
    kill_host(editor)
    written = editor.text(buf).count("```result id=")
    assert written < 2 * n, "the burst was over before the kill"

    def final(i: str, body: str | None = None) -> str | None:
        """The call's final result header, once it has one."""
        body = editor.text(buf) if body is None else body
        head = f"```result id={i} status="
        if head not in body:
            return None
        line = head + body.split(head)[1].split("\n")[0]
        return None if "status=running" in line else line

    def settled() -> bool:
        body = editor.text(buf)
        return all(final(i, body) for i in ids)

    # the user runs what is still pending; the new host also takes the running blocks up
    for _ in range(3):
        try:
            editor.lua("return require('sidekick_tools').run_tools(0, { confirm = false })")
        except Exception as exc:  # nothing pending any more: only running blocks were left
            assert "no pending" in str(exc)
        try:
            wait_for(settled, 60)
            break
        except AssertionError:
            continue
    assert settled(), editor.text(buf)
    ran = counts(folder)
    twice = {name: times for name, times in ran.items() if times != 1}
    assert not twice, f"commands run more than once: {twice}"
    # every call's result is true: completed ones ran (once), and a task its
    # host never started (queued when it was killed) says so and did not run
    body = editor.text(buf)
    for i in ids:
        line = final(i, body)
        if "status=completed" in line:
            assert ran.get(i) == 1, line
            continue
        assert "reason=host_restarted" in line, line
        token = line.split("task=")[1].split()[0]
        task = editor.lua("return require('sidekick_tools').get_task(...)", token)
        assert task["error"].startswith("the task never started"), task
        assert i not in ran, f"{i} ran but says it never started"
        # and its result says so (not "its outcome is unknown": it may have run)
        assert f"{line}\n[the task never started: " in body, line
    assert sum(1 for i in ids if "status=completed" in final(i, body)) >= n // 3


def orphan_a_waiting_call(editor) -> tuple[int, Path, Path]:
    """Call w1 runs in the foreground (printing to `once`, then waiting for
    `gate`) when its host is killed: (chat buffer, gate, once)."""
    gate, once = editor.workdir / "gate", editor.workdir / "once"
    editor.setup(tasks={"hybrid_threshold": 30})
    command = f"printf x >> once; while [ ! -e {gate} ]; do sleep 0.05; done; echo finished"
    buf = editor.open_chat(HEAD + call("w1", command))
    editor.run_tool(5)
    wait_for(once.exists, 20)
    kill_host(editor)
    return buf, gate, once


def test_a_call_whose_host_died_while_it_waited_gets_its_own_task(editor):
    """The host dies while a call waits for its task (nothing written yet):
    running the call again follows that task instead of starting it twice."""
    buf, gate, once = orphan_a_waiting_call(editor)
    assert "```result" not in editor.text(buf)  # the call still reads as pending
    editor.run_tool(5)  # a new host: the call's task is found, not started again
    editor.wait_text("```result id=w1 status=running")
    gate.touch()
    body = editor.wait_text("```result id=w1 status=completed", buf)
    assert "finished" in body
    assert once.read_text() == "x"
    # a result the user deletes is delivered: running the call again runs it again
    lines = editor.lines(buf)
    start = next(i for i, line in enumerate(lines) if line.startswith("```result id=w1"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] == "```")
    editor.lua("local s, e = ...; vim.api.nvim_buf_set_lines(0, s, e, false, {})", start, end + 1)
    editor.run_tool(5)
    editor.wait_text("```result id=w1 status=completed", buf)
    assert once.read_text() == "xx"


def test_a_call_that_ran_while_no_host_followed_it_gets_its_result_when_one_is_back(editor):
    """The host dies while a call's task runs in the foreground (nothing written
    yet) and the task ends meanwhile. The next host (started here by a command
    that has nothing to do with the call) writes the task's result into the
    chat: the call read as pending, as if it had never run."""
    buf, gate, once = orphan_a_waiting_call(editor)
    gate.touch()
    wait_for(lambda: _ended(editor.state_dir), 20)  # the task ended, unseen
    assert "```result" not in editor.text(buf)
    editor.lua("return require('sidekick_tools').list_tasks()")  # a new host
    body = editor.wait_text("```result id=w1 status=completed", buf)
    assert "finished" in body.split("```result id=w1", 1)[1]
    assert once.read_text() == "x"  # not run again
    editor.wait_diag(4, "✓ run_terminal_command", buf=buf)


def _ended(state_dir: Path) -> bool:
    """Some task's supervisor has written its exit record."""
    return any(state_dir.rglob("exit"))


def test_tasks_die_with_neovim_when_the_host_died_first(editors):
    """kill_on_exit holds after a host crash: :qa halts the tasks it left."""
    ed = editors()
    ed.setup(tasks={"hybrid_threshold": 0})
    pidfile = ed.workdir / "pid"
    ed.open_chat(HEAD + call("s1", f"sh -c 'echo $$ > {pidfile}; exec sleep 300'"))
    ed.run_tool(5)
    ed.wait_text("```result id=s1 status=running")
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 20)
    sleeper = int(pidfile.read_text())
    assert alive(sleeper)
    kill_host(ed)
    assert alive(sleeper)  # the crash alone leaves it running: its Neovim is still open
    nvim_pid = ed.nvim.eval("getpid()")
    try:
        ed.nvim.command("qa!")
    except Exception:  # the channel closes as Neovim exits
        pass
    wait_for(lambda: not alive(nvim_pid), 20)
    wait_for(lambda: not alive(sleeper), 10)


def test_a_chat_opened_in_a_second_neovim_gets_no_result_of_a_call_the_first_one_runs(editors):
    """Neovim A runs w1 (waiting for it: no block yet); the same chat opened in
    Neovim B (its host up) must not take A's task as one that ran unseen: B's
    buffer is left as the file is (A writes the result, in its own buffer),
    not modified by opening it, nor given a second copy of A's result."""
    a, b = editors(), editors()
    gate = a.workdir / "gate"
    for ed in (a, b):
        ed.setup(tasks={"hybrid_threshold": 30})
    command = f"printf x >> once; while [ ! -e {gate} ]; do sleep 0.05; done; echo finished"
    a.open_chat(HEAD + call("w1", command))
    a.run_tool(5)
    wait_for((a.workdir / "once").exists, 20)
    b.lua("return require('sidekick_tools').list_tasks()")  # B's host is up
    b.nvim.command(f"edit {a.workdir / 'chat.sidekick.md'}")
    b.wait_diag(4, "▶", timeout=20)  # B looked at the chat and drew its pending call
    assert "```result" not in b.text()
    assert not b.lua("return vim.bo.modified")
    gate.touch()
    a.wait_text("```result id=w1 status=completed")
    assert "```result" not in b.text()


def a_task_seen_from_b(editors, **a_tasks) -> tuple:
    """A runs w1 in the background (until `gate` exists) and saves the chat (its
    running block in the file); B, its host up, opens the same file and shows
    the call ⟳, run by the other Neovim: (a, b, gate, the task's token)."""
    a, b = editors(), editors()
    gate = a.workdir / "gate"
    a.setup(tasks={"hybrid_threshold": 0.2, **a_tasks})
    b.setup(tasks={"hybrid_threshold": 0.2})
    a.open_chat(HEAD + call("w1", f"while [ ! -e {gate} ]; do sleep 0.05; done; echo finished"))
    a.run_tool(5)
    text = a.wait_text("```result id=w1 status=running task=")
    a.nvim.command("write")
    b.lua("return require('sidekick_tools').list_tasks()")  # B's host is up
    b.nvim.command(f"edit {a.workdir / 'chat.sidekick.md'}")
    diag = b.wait_diag(4, "⟳", timeout=20)
    assert "runs in another Neovim" in diag["message"], diag
    return a, b, gate, text.split("task=")[1].split()[0]


def test_a_running_block_opened_in_a_second_neovim_says_which_neovim_writes_it(editors):
    """A runs w1 in the background and saves the chat (its running block in
    the file); B opens the same file. B does not follow A's task as its own,
    showing it ⟳ for ever and writing a second copy of its end: it says the
    other Neovim runs it and writes its result, and leaves its buffer alone."""
    a, b, gate, _ = a_task_seen_from_b(editors)
    gate.touch()
    a.wait_text("```result id=w1 status=completed")
    wait_for(lambda: a.diag_at(4) and a.diag_at(4)["message"].startswith("✓"))
    assert "status=completed" not in b.text() and not b.lua("return vim.bo.modified")


def test_a_host_replaced_by_sidekickinstall_leaves_its_tasks_to_the_next(editor):
    """:SidekickInstall stops the host to start one with its new Python: the
    tasks go on (whatever `kill_on_exit` says, which is for quitting Neovim)
    and the next host follows them; the stop logs no failed shutdown."""
    gate = editor.workdir / "gate"
    editor.setup(tasks={"hybrid_threshold": 0.2})
    editor.open_chat(HEAD + call("w1", f"while [ ! -e {gate} ]; do sleep 0.05; done; echo done"))
    editor.run_tool(5)
    editor.wait_text("```result id=w1 status=running task=")
    (task,) = editor.lua("return require('sidekick_tools').list_tasks()")
    editor.lua("require('sidekick_tools.host').stop()")
    wait_for(lambda: not editor.lua("return require('sidekick_tools.host').running()"), 10)
    assert alive(task["pid"])
    (again,) = editor.lua("return require('sidekick_tools').list_tasks()")  # the next host
    assert (again["id"], again["status"]) == (task["id"], "running")
    gate.touch()
    editor.wait_text("```result id=w1 status=completed")
    assert "shutdown failed" not in (editor.state_dir / "host.log").read_text()


def test_a_second_neovim_reloading_with_checktime_writes_no_second_notice(editors):
    """A runs w1 in the background, writes its end and its notice, and saves;
    B, which had the chat open with the running block, reloads it the way
    'autoread' does (:checktime). B's buffer is the file as A saved it: one
    notice, nothing added, nothing to save."""
    a, b, gate, token = a_task_seen_from_b(editors)
    path = a.workdir / "chat.sidekick.md"
    gate.touch()
    notice = f"USER: [sidekick task {token} completed]"
    a.wait_text(notice)
    a.nvim.command("write")
    saved = path.read_text()
    b.nvim.command("checktime")
    wait_for(lambda: b.text() + "\n" == saved or b.text() == saved)
    b.wait_diag(4, "✓", timeout=20)  # B's host has looked at the reloaded chat
    b.lua("return require('sidekick_tools').list_tasks()")  # and answers
    assert b.text().count(notice) == 1, b.text()
    assert not b.lua("return vim.bo.modified")


@pytest.mark.parametrize("how", ["quits", "is killed"])
def test_a_second_neovim_writes_the_end_once_the_neovim_that_ran_it_is_gone(editors, how):
    """B shows A's running block as "runs in another Neovim, which writes its
    result". When A is gone (quit: its task halted; killed: the task runs on),
    nobody else will: B takes the task up and writes its end, once, without
    the user reloading the chat."""
    a, b, gate, _ = a_task_seen_from_b(editors, kill_on_exit=how == "quits")
    if how == "quits":
        quit_nvim(a)  # kill_on_exit: its task is halted
        end = "```result id=w1 status=cancelled"
    else:
        pid = a.lua("return vim.fn.getpid()")
        host = a.host_pid()
        os.kill(pid, signal.SIGKILL)
        os.kill(host, signal.SIGKILL)
        gate.touch()  # the task runs on, and ends
        end = "```result id=w1 status=completed"
    text = b.wait_text(end, timeout=30)
    assert text.count("```result id=w1") == 1 and text.count("USER: [sidekick task") == 1, text
    assert b.wait_diag(4, "✓" if how != "quits" else "⊘", timeout=20)


def test_a_second_neovim_leaves_an_end_the_first_wrote_to_the_file(editors):
    """A wrote w1's end and its notice, the user typed on, A saved and quit. B,
    whose buffer still shows the running block, does not write that end again
    into its older text (saving B would have dropped A's new line): it says
    that the other Neovim wrote it, and that reloading shows it."""
    a, b, gate, token = a_task_seen_from_b(editors)
    before = b.text()
    gate.touch()
    a.wait_text(f"USER: [sidekick task {token} completed]")
    a.lua("vim.api.nvim_buf_set_lines(0, -1, -1, false, {'USER: and now the next question'})")
    a.nvim.command("write")
    quit_nvim(a)
    diag = b.wait_diag(4, "✓", timeout=30)
    assert "wrote its result" in diag["message"] and ":e" in diag["message"], diag
    assert b.text() == before and not b.lua("return vim.bo.modified")
    b.nvim.command("edit")  # and reloading shows it, once
    body = b.text()
    assert body.count("```result id=w1") == 1 and "and now the next question" in body


def test_a_takeover_leaves_an_end_the_first_wrote_also_beside_one_it_did_not(editors):
    """A runs w1 and w2; w1 ends and A writes its end; the user types on in A,
    saves, and A is killed with w2 running. B takes w2 up (nobody else will
    write its end) and looks at the chat again to do so: w1's end, which A
    wrote, is still not written into B's older text."""
    a, b = editors(), editors()
    g1, g2 = a.workdir / "g1", a.workdir / "g2"
    for ed in (a, b):
        ed.setup(tasks={"hybrid_threshold": 0.2})
    wait = "while [ ! -e {} ]; do sleep 0.05; done; echo {}"
    a.open_chat(HEAD + call("w1", wait.format(g1, "one")) + call("w2", wait.format(g2, "two")))
    a.run_tool(8)  # w2 first: w1's result block would move it down
    a.wait_text("```result id=w2 status=running task=")
    a.run_tool(5)
    text = a.wait_text("```result id=w1 status=running task=")
    token1 = text.split("id=w1 status=running task=")[1].split()[0]
    a.nvim.command("write")
    b.lua("return require('sidekick_tools').list_tasks()")  # B's host is up
    b.nvim.command(f"edit {a.workdir / 'chat.sidekick.md'}")
    b.wait_diag(4, "⟳", timeout=20)
    g1.touch()
    a.wait_text(f"USER: [sidekick task {token1} completed]")
    a.lua("vim.api.nvim_buf_set_lines(0, -1, -1, false, {'USER: and now the next question'})")
    a.nvim.command("write")
    os.kill(a.host_pid(), signal.SIGKILL)
    os.kill(a.lua("return vim.fn.getpid()"), signal.SIGKILL)
    g2.touch()
    body = b.wait_text("```result id=w2 status=completed", timeout=30)
    assert "```result id=w1 status=completed" not in body, body
    diag = b.wait_diag(4, "✓", timeout=20)
    assert "wrote its result" in diag["message"], diag


def test_an_end_the_gone_neovim_wrote_but_never_saved_is_written_here(editors):
    """A wrote w1's end into its buffer and quit without saving: the file still
    holds the running block, and only B can write the end. (Taken for written,
    B said ":e shows it", and :e showed the running block.)"""
    a, b, gate, token = a_task_seen_from_b(editors)
    gate.touch()
    a.wait_text(f"USER: [sidekick task {token} completed]")
    quit_nvim(a)  # qall!: not saved
    body = b.wait_text("```result id=w1 status=completed", timeout=30)
    assert body.count("```result id=w1") == 1 and body.count("USER: [sidekick task") == 1, body
