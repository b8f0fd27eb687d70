"""`python -m sidekick_tools.reap`: a Neovim whose host died still halts its tasks."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from sidekick_tools import reap
from sidekick_tools.config import tasks_config
from sidekick_tools.tasks import groups, spawn
from sidekick_tools.tasks.manager import TaskManager, TaskSpec
from sidekick_tools.tasks.model import Reason, Task, TaskStatus
from sidekick_tools.tasks.remote_halt import HOST_GONE
from sidekick_tools.tasks.store import SqliteStore, TaskQuery

from tests.conftest import live_members, until
from tests.conftest import read_text as read

S = TaskStatus
DEAD_NEOVIM = "999999999:gone"  # the owner whose host died


def spec(command: str, cwd: str) -> TaskSpec:
    return TaskSpec(tool="run_terminal_command", command=command, cwd=cwd)


async def test_the_dead_hosts_tasks_are_halted_and_recorded(tmp_path, capsys) -> None:
    state = str(tmp_path / "state")
    db = os.path.join(state, "tasks.db")
    host = TaskManager(SqliteStore(db), state, DEAD_NEOVIM, tasks_config(halt_grace=0.5))
    stubborn = await host.submit(spec("trap '' TERM; echo ready; sleep 1000", str(tmp_path)))
    polite = await host.submit(spec("echo ready; sleep 1000", str(tmp_path)))
    other = TaskManager(SqliteStore(db), state, "1:someone-else", tasks_config(halt_grace=0.5))
    theirs = await other.submit(spec("sleep 1000", str(tmp_path)))
    await until(lambda: "ready" in read(stubborn.log_path) and "ready" in read(polite.log_path))
    await host.shutdown(kill=False)  # the host "dies": nothing is halted, nothing recorded
    never = SqliteStore(db).insert(Task(tool="x", command="true", owner=DEAD_NEOVIM))
    try:
        code = reap.main(["--halt-owner", DEAD_NEOVIM, "--state-dir", state, "--grace", "0.3"])
        assert code == 0
        report = json.loads(capsys.readouterr().out)
        assert sorted(report["halted"]) == sorted([stubborn.id, polite.id])
        assert report["cancelled"] == [never.id]
        assert report["unrecorded"] == [] and report["errors"] == []
        for task in (stubborn, polite):
            await until(lambda t=task: live_members(t.pid) == [])
        store = SqliteStore(db)
        for token in (stubborn.id, polite.id):
            got = store.get(token)
            assert got.status is S.CANCELLED and got.reason == Reason.CANCELLED
            assert got.error == HOST_GONE and got.ended_at is not None
        assert store.get(polite.id).exit_code == 143  # its wrapper recorded the SIGTERM
        assert store.get(never.id).status is S.CANCELLED
        assert store.get(theirs.id).status is S.RUNNING  # another Neovim's: untouched
        assert live_members(theirs.pid)
        store.close()
    finally:
        await other.shutdown(kill=True)
        for task in (stubborn, polite):  # still this test process's children
            groups.signal_group(task.pid, signal.SIGKILL)
            os.waitpid(task.pid, 0)


@pytest.mark.parametrize("keep", ["mcp", "editor"])
async def test_the_tasks_a_side_keeps_on_exit_are_left_running(tmp_path, capsys, keep) -> None:
    """A Neovim whose host died halted on exit an MCP client's task it had taken
    over, though mcp.kill_on_exit = false kept it: Lua says which side keeps its
    tasks (--keep-mcp-tasks, --keep-editor-tasks), as the host does itself."""
    state = str(tmp_path / "state")
    db = os.path.join(state, "tasks.db")
    host = TaskManager(SqliteStore(db), state, DEAD_NEOVIM, tasks_config(halt_grace=0.5))
    cmd = "echo ready; sleep 1000"
    agents = await host.submit(
        TaskSpec("run_terminal_command", cmd, cwd=str(tmp_path), chat="mcp:a")
    )
    editors = await host.submit(
        TaskSpec("run_terminal_command", cmd, cwd=str(tmp_path), chat="c.md")
    )
    await until(lambda: "ready" in read(agents.log_path) and "ready" in read(editors.log_path))
    await host.shutdown(kill=False)  # the host "dies"
    kept, halted = (agents, editors) if keep == "mcp" else (editors, agents)
    try:
        argv = ["--halt-owner", DEAD_NEOVIM, "--state-dir", state, "--grace", "0.3"]
        assert reap.main([*argv, f"--keep-{keep}-tasks"]) == 0
        assert json.loads(capsys.readouterr().out)["halted"] == [halted.id]
        await until(lambda: live_members(halted.pid) == [])
        assert live_members(kept.pid)
        store = SqliteStore(db)
        assert store.get(kept.id).status is S.RUNNING
        assert store.get(halted.id).status is S.CANCELLED
        store.close()
    finally:
        for task in (agents, editors):  # still this test process's children
            groups.signal_group(task.pid, signal.SIGKILL)
            os.waitpid(task.pid, 0)


async def test_a_task_whose_process_is_gone_is_left_to_recovery(tmp_path, capsys) -> None:
    state = str(tmp_path / "state")
    store = SqliteStore(os.path.join(state, "tasks.db"))
    child = spawn.spawn("exit 0", str(tmp_path / "log"))
    child.popen.wait(timeout=10)
    store.insert(
        Task(
            tool="x",
            command="exit 0",
            status=S.RUNNING,
            owner=DEAD_NEOVIM,
            pid=child.pid,
            pid_start=child.start_token,
            created_at=time.time(),
            log_dir=str(tmp_path / "log"),
        )
    )
    assert reap.main(["--halt-owner", DEAD_NEOVIM, "--state-dir", state]) == 0
    assert json.loads(capsys.readouterr().out)["halted"] == []
    assert store.list(TaskQuery.of(owner=DEAD_NEOVIM), limit=None)[0].status is S.RUNNING
    store.close()


def test_bad_arguments_and_no_database(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        reap.main(["--halt-owner", "../../etc", "--state-dir", str(tmp_path)])
    assert info.value.code == 2
    assert "--halt-owner" in capsys.readouterr().err
    empty = tmp_path / "empty"
    assert reap.main(["--halt-owner", DEAD_NEOVIM, "--state-dir", str(empty)]) == 0
    assert json.loads(capsys.readouterr().out)["halted"] == []
    assert not empty.exists()  # nothing is created


def test_an_unusable_database_is_reported(tmp_path, capsys) -> None:
    (tmp_path / "tasks.db").write_bytes(b"not a database" * 100)
    assert reap.main(["--halt-owner", DEAD_NEOVIM, "--state-dir", str(tmp_path)]) == 1
    assert "tasks.db" in capsys.readouterr().err


def test_a_neovim_pid_names_its_owner(tmp_path, capsys) -> None:
    """Lua names the owner by its own pid: the start token is read while it lives."""
    empty = tmp_path / "state"
    empty.mkdir()
    assert reap.main(["--neovim-pid", str(os.getpid()), "--state-dir", str(empty)]) == 0
    assert json.loads(capsys.readouterr().out)["halted"] == []
    with pytest.raises(SystemExit):
        reap.main(["--neovim-pid", "999999999", "--state-dir", str(empty)])
    with pytest.raises(SystemExit):  # one way of naming the owner, not both
        reap.main(["--neovim-pid", "1", "--halt-owner", DEAD_NEOVIM, "--state-dir", str(empty)])
