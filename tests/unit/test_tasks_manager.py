from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from sidekick_tools.config import Config, tasks_config
from sidekick_tools.tasks import groups, identity, spawn, wrapper
from sidekick_tools.tasks.chat_rename import rename_chat
from sidekick_tools.tasks.manager import TaskEvent, TaskManager, TaskNotFound, TaskSpec
from sidekick_tools.tasks.model import Reason, Task, TaskStatus
from sidekick_tools.tasks.output_reads import STDERR_KEY
from sidekick_tools.tasks.progress_poll import due_for_poll
from sidekick_tools.tasks.store import MemoryStore, SqliteStore, TaskStore
from sidekick_tools.tasks.tuning import EngineTuning

from tests.conftest import live_members, until
from tests.conftest import read_text as read

S = TaskStatus
LINUX = sys.platform.startswith("linux")
ME = identity.owner_token(os.getpid())  # a live owner: this test process


def assert_reaped(pid: int) -> None:
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def reap(*tasks: Task) -> None:
    """A "killed" host's children are still this test process's children: end
    (whatever is left of) them and reap them."""
    for task in tasks:
        groups.signal_group(task.pid, signal.SIGKILL)
        try:
            os.waitpid(task.pid, 0)
        except ChildProcessError:
            pass


TUNING = {f.name for f in dataclasses.fields(EngineTuning)}


def make_manager(store: TaskStore, state_dir: str, owner: str = ME, **kw) -> TaskManager:
    """`kw`: `tasks.*` options and engine knobs, each short enough for a test."""
    kw.setdefault("halt_grace", 0.5)
    kw.setdefault("poll_interval", 0.05)
    kw.setdefault("adopted_poll_interval", 0.05)
    tuning = EngineTuning(**{k: kw.pop(k) for k in list(kw) if k in TUNING})
    if "retention" in kw:
        kw["retention"] = dict(zip(("completed", "failed"), kw["retention"]))
    return TaskManager(store, state_dir, owner, tasks_config(**kw), tuning=tuning)


@pytest.fixture
def tasks_state(tmp_path) -> str:
    return str(tmp_path / "state")


@pytest.fixture
async def tasks_manager(tasks_state):
    store = SqliteStore(os.path.join(tasks_state, "tasks.db"))
    manager = make_manager(store, tasks_state)
    await manager.recover()
    yield manager
    await manager.shutdown(kill=True)
    store.close()


def spec(command: str, cwd: str | None = None, **kw) -> TaskSpec:
    return TaskSpec(tool="run_terminal_command", command=command, cwd=cwd, **kw)


# --------------------------------------------------------------------------- basics


async def test_exit_codes_output_files_and_no_zombies(tasks_manager: TaskManager, tmp_path):
    ok = await tasks_manager.submit(spec("echo hello; echo warn >&2", cwd=str(tmp_path)))
    bad = await tasks_manager.submit(spec("echo partial; exit 3", cwd=str(tmp_path)))
    assert ok.status is S.RUNNING and ok.pid and ok.pid_start and ok.started_at
    ok = await tasks_manager.wait(ok.id, 10)
    bad = await tasks_manager.wait(bad.id, 10)
    assert ok.status is S.COMPLETED and ok.exit_code == 0 and ok.reason == Reason.EXIT
    assert ok.summary == "hello" and ok.lines == 1
    assert ok.ended_at >= ok.started_at
    assert bad.status is S.FAILED and bad.exit_code == 3 and bad.reason == Reason.EXIT
    assert bad.error == "exit 3" and bad.summary == "partial"
    assert read(ok.log_path) == "hello\n"
    assert read(ok.stderr_path) == "warn\n"
    assert ok.log_path == os.path.join(tasks_manager.tasks_dir, ok.id, "stdout")
    assert ok.to_dict()["log_path"] == ok.log_path
    for t in (ok, bad):
        assert_reaped(t.pid)
    stored = tasks_manager.store.get(bad.id)
    assert stored.status is S.FAILED and stored.exit_code == 3


async def test_env_cwd_and_task_id(tasks_manager: TaskManager, tmp_path):
    t = await tasks_manager.submit(
        spec('echo "$PWD $GREETING $SIDEKICK_TASK_ID"', cwd=str(tmp_path), env={"GREETING": "hi"})
    )
    t = await tasks_manager.wait(t.id, 10)
    assert t.summary == f"{tmp_path} hi {t.id}"


async def test_task_id_without_extra_env(tasks_manager: TaskManager, monkeypatch):
    monkeypatch.setenv("SIDEKICK_TASK_ID", "inherited")  # the host's own value never leaks
    t = await tasks_manager.submit(spec('echo "id=$SIDEKICK_TASK_ID home=${HOME:+set}"'))
    t = await tasks_manager.wait(t.id, 10)
    assert t.summary == f"id={t.id} home=set"


async def test_spawn_error(tasks_manager: TaskManager, tmp_path):
    t = await tasks_manager.submit(spec("true", cwd=str(tmp_path / "missing")))
    assert t.status is S.FAILED and t.reason == Reason.SPAWN_ERROR
    assert "does not exist" in t.error
    assert (await tasks_manager.wait(t.id, 1)).status is S.FAILED


async def test_wait_timeout_returns_running_task(tasks_manager: TaskManager, tmp_path):
    t = await tasks_manager.submit(
        spec("while [ ! -f go ]; do sleep 0.02; done", cwd=str(tmp_path))
    )
    still = await tasks_manager.wait(t.id, 0.05)
    assert still.status is S.RUNNING
    (tmp_path / "go").write_text("")
    done = await tasks_manager.wait(t.id, 10)
    assert done.status is S.COMPLETED
    with pytest.raises(TaskNotFound):
        await tasks_manager.wait("000000", 1)
    assert tasks_manager.get("000000") is None


async def test_progress_events(tasks_manager: TaskManager, tmp_path):
    events: list[TaskEvent] = []
    tasks_manager.subscribe(events.append)
    cmd = (
        'echo "[PROGRESS:50] half way"; while [ ! -f go ]; do sleep 0.02; done; echo "[RESULT] ok"'
    )
    t = await tasks_manager.submit(spec(cmd, cwd=str(tmp_path)))
    await until(lambda: any(e.kind == "progress" for e in events))
    prog = [e for e in events if e.kind == "progress"][0]
    assert prog.task.progress == 50 and prog.task.progress_text == "half way"
    assert tasks_manager.get(t.id).progress == 50
    (tmp_path / "go").write_text("")
    done = await tasks_manager.wait(t.id, 10)
    assert done.summary == "ok" and done.progress == 50
    kinds = [e.kind for e in events if e.task.id == t.id]
    assert kinds[0] == "started" and kinds[-1] == "finished"
    assert kinds.count("progress") == 1


async def test_finished_before_counting_a_large_unread_log(tasks_state, tmp_path):
    """A big unread log: "finished" carries status and a tail summary at once;
    the exact line count and last progress follow in "updated"."""
    # The poll loop never runs in time, and any unread byte counts as "large".
    m = make_manager(MemoryStore(), tasks_state, poll_interval=100, full_scan_max=0)
    events: list[TaskEvent] = []
    m.subscribe(events.append)
    cmd = (
        "echo '[RESULT] early'; echo '[PROGRESS:10] ten'; seq 1 50000; "
        "echo '[PROGRESS:90] ninety'; echo '[RESULT] the end'; echo detail; exit 4"
    )
    t = await m.submit(spec(cmd, cwd=str(tmp_path)))
    done = await m.wait(t.id, 10)
    assert done.status is S.FAILED and done.exit_code == 4
    assert done.summary == "the end\ndetail"
    fin = [e for e in events if e.kind == "finished"]
    assert len(fin) == 1 and fin[0].task.summary == "the end\ndetail"
    await until(lambda: any(e.kind == "updated" and e.task.id == t.id for e in events))
    upd = [e for e in events if e.kind == "updated" and e.task.id == t.id][-1]
    assert upd.task.lines == 50005 and upd.task.progress == 90
    assert upd.task.status is S.FAILED and upd.task.summary == "the end\ndetail"
    stored = m.get(t.id)
    assert stored.lines == 50005 and stored.progress_text == "ninety"
    await until(lambda: t.id not in m.watched)  # its log is not followed any more
    await m.shutdown(kill=True)


async def test_finished_small_unread_log_is_exact_at_once(tasks_state, tmp_path):
    m = make_manager(MemoryStore(), tasks_state, poll_interval=100)
    events: list[TaskEvent] = []
    m.subscribe(events.append)
    t = await m.submit(spec("seq 1 1000; echo '[PROGRESS:50] half'", cwd=str(tmp_path)))
    await m.wait(t.id, 10)
    fin = [e for e in events if e.kind == "finished"][0]
    assert fin.task.lines == 1001 and fin.task.progress == 50
    assert fin.task.summary.endswith("1000\n[PROGRESS:50] half")
    # Exact at once: no count after "finished" was scheduled.
    assert t.id not in m.watched
    assert not [e for e in events if e.kind == "updated"]
    await m.shutdown(kill=True)


@pytest.mark.parametrize("count, in_worker", [(1000, False), (50000, True)])
async def test_exit_read_on_the_loop_only_for_small_logs(
    tasks_state, tmp_path, monkeypatch, count, in_worker
):
    """A short task's log is read at exit on the event loop (a worker thread
    would cost more than the read); a larger one in a worker, exact either way."""
    m = make_manager(MemoryStore(), tasks_state, poll_interval=100)
    loop = asyncio.get_running_loop()
    handed: list[str] = []
    real = loop.run_in_executor

    def spy(executor, fn, *args):
        handed.append(getattr(fn, "__name__", ""))
        return real(executor, fn, *args)

    monkeypatch.setattr(loop, "run_in_executor", spy)
    t = await m.submit(spec(f"seq 1 {count}", cwd=str(tmp_path)))
    done = await m.wait(t.id, 10)
    assert done.lines == count and done.summary.endswith(str(count))
    assert ("summarize_at_exit" in handed) is in_worker
    await m.shutdown(kill=True)


def test_live_poll_starts_one_interval_after_a_task_starts():
    """A task shorter than the poll interval is never read while it runs."""

    @dataclasses.dataclass
    class Watched:
        watched_since: float
        finishing: bool = False

    t0 = 1000.0
    new, old, ending = Watched(t0), Watched(t0 - 5), Watched(t0 - 5, finishing=True)
    watched = [new, old, ending]
    assert due_for_poll(watched, t0 + 0.5, 1.0) == [old]
    assert due_for_poll(watched, t0 + 1.0, 1.0) == [new, old]


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="no getpriority")
async def test_tasks_run_nicer_than_the_host(tasks_state, tmp_path):
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    if mine >= 19:
        pytest.skip("already at the lowest priority")
    m = make_manager(MemoryStore(), tasks_state)
    assert m.config.nice == 10
    cmd = "echo $$ > inner.pid; while [ ! -f go ]; do sleep 0.02; done"
    t = await m.submit(spec(cmd, cwd=str(tmp_path)))
    await until(lambda: read(str(tmp_path / "inner.pid")).strip() != "")
    inner = int(read(str(tmp_path / "inner.pid")))
    expected = min(19, mine + 10)
    assert os.getpriority(os.PRIO_PROCESS, t.pid) == expected  # the supervisor
    assert os.getpriority(os.PRIO_PROCESS, inner) == expected > mine  # the command
    (tmp_path / "go").write_text("")
    await m.wait(t.id, 10)
    # Settable later; 0 leaves new tasks at the host's priority.
    m.configure(dataclasses.replace(m.config, nice=0))
    (tmp_path / "inner.pid").unlink()
    (tmp_path / "go").unlink()
    t = await m.submit(spec(cmd, cwd=str(tmp_path)))
    await until(lambda: read(str(tmp_path / "inner.pid")).strip() != "")
    assert os.getpriority(os.PRIO_PROCESS, t.pid) == mine
    (tmp_path / "go").write_text("")
    await m.wait(t.id, 10)
    await m.shutdown(kill=True)


LOWER = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from sidekick_tools.tasks.spawn import lower_own_session; "
    "print(lower_own_session(int(sys.argv[2]))); print(open('/proc/self/autogroup').read(), end='')"
)


@pytest.mark.skipif(not os.path.exists(spawn.AUTOGROUP), reason="no autogroups")
@pytest.mark.parametrize("leader", [True, False])
def test_a_session_leader_lowers_its_session_and_nothing_else_does(leader):
    """The host leads a session of its own (Neovim starts it so): its tasks share
    it, and the session yields as a whole. A process in someone else's session
    (an MCP server an agent started) leaves that session alone."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(spawn.__file__)))
    done = subprocess.run(
        [sys.executable, "-c", LOWER, package, "7"],
        capture_output=True,
        text=True,
        check=True,
        start_new_session=leader,
    )
    lowered, group = done.stdout.split("\n", 1)
    if leader:  # setsid gave it an autogroup of its own: "/autogroup-N nice 7"
        assert (lowered, group.split()[-2:]) == ("True", ["nice", "7"])
    else:  # ours, as it was (the boot session's default group reads empty)
        with open(spawn.AUTOGROUP) as f:
            assert (lowered, group) == ("False", f.read())


def test_spawn_nice_failure_is_not_fatal(tmp_path, monkeypatch, caplog):
    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    caplog.set_level("INFO", logger=spawn.__name__)
    proc = spawn.spawn("true", str(tmp_path / "log"), nice=5)
    assert proc.popen.wait(timeout=10) == 0
    assert "cannot lower its priority" in caplog.text


# --------------------------------------------------------------------------- halt / timeout


async def test_halt_kills_whole_group_even_if_it_ignores_sigterm(tasks_manager, tmp_path):
    cmd = "trap '' TERM; sleep 1000 & sleep 1000 & echo ready; wait"
    t = await tasks_manager.submit(spec(cmd, cwd=str(tmp_path)))
    await until(lambda: "ready" in read(t.log_path))
    pgid = t.pid
    assert os.getpgid(pgid) == pgid
    if LINUX:
        assert len(live_members(pgid)) >= 4
    halted = await tasks_manager.halt(t.id)
    assert halted.status is S.CANCELLED and halted.reason == Reason.CANCELLED
    assert halted.exit_code == 137  # needed SIGKILL
    assert live_members(pgid) == []
    assert_reaped(pgid)
    assert read(halted.log_path) == "ready\n"  # partial output survives
    assert (await tasks_manager.halt(t.id)).status is S.CANCELLED  # idempotent


@pytest.mark.parametrize("how", ["halt", "timeout"])
async def test_a_stopped_task_ends_once_its_whole_group_is_gone(tasks_manager, tmp_path, how):
    # the leader dies at SIGTERM; a member of its group takes a while to follow
    cmd = "(trap 'sleep 0.5; exit 0' TERM; echo ready; while :; do sleep 0.05; done) & wait"
    t = await tasks_manager.submit(
        spec(cmd, cwd=str(tmp_path), timeout=None if how == "halt" else 1)
    )
    await until(lambda: "ready" in read(t.log_path))
    if how == "halt":
        ended = await tasks_manager.halt(t.id)
    else:
        ended = await tasks_manager.wait(t.id, 10)
    assert ended.terminal
    assert live_members(t.pid) == []


async def test_timeout_fails_with_reason_timeout(tasks_manager, tmp_path):
    t = await tasks_manager.submit(spec("echo partial; sleep 100", cwd=str(tmp_path), timeout=0.5))
    assert t.timeout == 0.5
    t = await tasks_manager.wait(t.id, 10)
    assert t.status is S.FAILED and t.reason == Reason.TIMEOUT
    assert "timed out" in t.error
    assert read(t.log_path) == "partial\n"
    assert t.summary.startswith("partial")
    assert live_members(t.pid) == []
    assert_reaped(t.pid)


async def test_default_timeout_and_no_timeout(tasks_state, tmp_path):
    m = make_manager(MemoryStore(), tasks_state, default_timeout=0.3)
    try:
        t = await m.submit(spec("sleep 100", cwd=str(tmp_path)))
        u = await m.submit(spec("true", cwd=str(tmp_path), timeout=0))
        assert u.timeout is None
        t = await m.wait(t.id, 10)
        assert t.status is S.FAILED and t.reason == Reason.TIMEOUT
    finally:
        await m.shutdown(kill=True)


# --------------------------------------------------------------------------- concurrency


async def test_max_concurrent_queue(tasks_state, tmp_path):
    m = make_manager(
        SqliteStore(os.path.join(tasks_state, "tasks.db")), tasks_state, max_concurrent=5
    )
    running: set[str] = set()
    peak = 0
    kinds: list[str] = []

    def on_event(e: TaskEvent) -> None:
        nonlocal peak
        kinds.append(e.kind)
        if e.kind == "started":
            running.add(e.task.id)
            peak = max(peak, len(running))
        elif e.kind == "finished":
            running.discard(e.task.id)

    m.subscribe(on_event)
    try:
        (tmp_path / "gate").unlink(missing_ok=True)
        cmd = "while [ ! -f gate ]; do sleep 0.02; done; sleep 0.05"
        tasks = [await m.submit(spec(cmd, cwd=str(tmp_path))) for _ in range(20)]
        assert [t.status for t in tasks[:5]] == [S.RUNNING] * 5
        assert all(t.status is S.QUEUED for t in tasks[5:])
        assert m.queue_position(tasks[5].id) == 0
        assert m.queue_position(tasks[19].id) == 14
        assert m.queue_position(tasks[0].id) is None
        assert m.count(S.QUEUED) == 15
        (tmp_path / "gate").write_text("")
        done = await asyncio.wait_for(asyncio.gather(*(m.wait(t.id, None) for t in tasks)), 30)
        assert all(t.status is S.COMPLETED for t in done)
        assert peak == 5
        assert kinds.count("queued") == 15 and kinds.count("started") == 20
    finally:
        await m.shutdown(kill=True)
        m.store.close()


async def test_halt_queued_task(tasks_state, tmp_path):
    m = make_manager(MemoryStore(), tasks_state, max_concurrent=1)
    try:
        a = await m.submit(spec("while [ ! -f go ]; do sleep 0.02; done", cwd=str(tmp_path)))
        b = await m.submit(spec("echo never > ran", cwd=str(tmp_path)))
        c = await m.submit(spec("true", cwd=str(tmp_path)))
        assert b.status is S.QUEUED and m.queue_position(c.id) == 1
        b = await m.halt(b.id)
        assert b.status is S.CANCELLED and b.pid is None
        assert m.queue_position(c.id) == 0
        (tmp_path / "go").write_text("")
        assert (await m.wait(c.id, 10)).status is S.COMPLETED
        assert (await m.wait(a.id, 10)).status is S.COMPLETED
        assert not (tmp_path / "ran").exists()
    finally:
        await m.shutdown(kill=True)


async def test_shutdown_kill_halts_running_and_cancels_queued(tasks_state, tmp_path):
    m = make_manager(MemoryStore(), tasks_state, max_concurrent=1, halt_grace=5)
    a = await m.submit(spec("trap '' TERM; echo ready; sleep 1000", cwd=str(tmp_path)))
    b = await m.submit(spec("true", cwd=str(tmp_path)))
    await until(lambda: "ready" in read(a.log_path))
    await asyncio.wait_for(m.shutdown(kill=True), 5)  # exit_grace, not halt_grace
    assert live_members(a.pid) == []
    assert m.get(a.id).status is S.CANCELLED
    assert m.get(b.id).status is S.CANCELLED
    with pytest.raises(RuntimeError):
        await m.submit(spec("true"))


@pytest.mark.parametrize("keep", ["mcp", "editor"])
async def test_shutdown_halts_each_task_by_the_kill_on_exit_of_the_side_that_started_it(
    tasks_state, tmp_path, keep
):
    """A Neovim that took over an MCP client's task halted it on exit by
    tasks.kill_on_exit, though mcp.kill_on_exit = false had kept it running
    (and an MCP server, a Neovim task kept by tasks.kill_on_exit = false)."""
    config = Config.from_dict(
        {"tasks": {"kill_on_exit": keep != "editor"}, "mcp": {"kill_on_exit": keep != "mcp"}}
    )
    m = make_manager(MemoryStore(), tasks_state)
    cmd = "echo ready; sleep 1000"
    agents = await m.submit(spec(cmd, cwd=str(tmp_path), chat="mcp:claude-code"))
    editors = await m.submit(spec(cmd, cwd=str(tmp_path), chat="chat.sidekick.md"))
    try:
        await until(lambda: "ready" in read(agents.log_path) and "ready" in read(editors.log_path))
        await asyncio.wait_for(m.shutdown(kill=config.halts_on_exit), 5)
        kept, halted = (agents, editors) if keep == "mcp" else (editors, agents)
        assert live_members(halted.pid) == [] and m.get(halted.id).status is S.CANCELLED
        assert live_members(kept.pid) and m.get(kept.id).status is S.RUNNING
    finally:
        reap(agents, editors)


# --------------------------------------------------------------------------- output


async def test_read_output_per_chat_and_filter(tasks_manager, tmp_path):
    cmd = (
        "printf 'a1\\nb1\\na2\\n'; while [ ! -f go ]; do sleep 0.02; done; "
        "printf 'b2\\na3\\n'; echo '[PROGRESS:80] late'"
    )
    t = await tasks_manager.submit(spec(cmd, cwd=str(tmp_path)))
    await until(lambda: read(t.log_path) == "a1\nb1\na2\n")
    r = await tasks_manager.read_output(t.id, "chat1", filter="^a")
    assert r.filtered and r.matches == ["a1", "a2"] and r.next_offset == 0
    r = await tasks_manager.read_output(t.id, "chat1", filter="/^a/")
    assert r.matches == ["a1", "a2"]  # the filter consumed nothing
    r = await tasks_manager.read_output(t.id, "chat1")
    assert r.text == "a1\nb1\na2\n" and r.next_offset == 9 and r.status == "running"
    r = await tasks_manager.read_output(t.id, "chat1")
    assert r.text == "" and r.offset == 9
    r = await tasks_manager.read_output(t.id, "chat2")  # another chat: its own offset
    assert r.text == "a1\nb1\na2\n"
    r = await tasks_manager.read_output(t.id, "chat1", filter="^a")
    assert r.matches == []
    (tmp_path / "go").write_text("")
    await tasks_manager.wait(t.id, 10)
    assert not tasks_manager.get(t.id).result_read
    r = await tasks_manager.read_output(t.id, "chat1", filter="^a")
    assert r.matches == ["a3"] and r.progress == 80
    r = await tasks_manager.read_output(t.id, "chat1", max_bytes=3)
    assert r.text == "b2\n" and r.more
    r = await tasks_manager.read_output(t.id, "chat1")
    assert r.text == "a3\n[PROGRESS:80] late\n" and not r.more and r.status == "completed"
    assert tasks_manager.get(t.id).result_read
    with pytest.raises(ValueError):
        await tasks_manager.read_output(t.id, "chat1", filter="(")
    with pytest.raises(TaskNotFound):
        await tasks_manager.read_output("000000", "chat1")


# --------------------------------------------------------------------------- recovery


async def test_restart_recovery(tasks_state, tmp_path):
    db = os.path.join(tasks_state, "tasks.db")
    owner = "999999999:gone"  # the same Neovim as far as A and B are concerned
    store_a = SqliteStore(db)
    a = make_manager(store_a, tasks_state, owner=owner)
    await a.recover()
    gated = "while [ ! -f ended ]; do sleep 0.02; done; "  # they end once A is gone
    seven = await a.submit(spec(gated + "echo seven; exit 7", cwd=str(tmp_path)))
    zero = await a.submit(spec(gated + "echo fine", cwd=str(tmp_path)))
    cmd = "echo waiting; while [ ! -f go ]; do sleep 0.02; done; echo '[RESULT] resumed'; exit 5"
    slow = await a.submit(spec(cmd, cwd=str(tmp_path), timeout=60))
    queued = store_a.insert(Task(tool="x", command="true", owner=owner, created_at=time.time()))
    # Host "killed": A stops watching anything, no status gets written.
    await a.shutdown(kill=False)
    store_a.close()
    (tmp_path / "ended").write_text("")
    await until(lambda: wrapper.read_exit(seven.log_dir) and wrapper.read_exit(zero.log_dir))
    await until(lambda: "waiting" in read(slow.log_path))

    store_b = SqliteStore(db)
    assert store_b.get(seven.id).status is S.RUNNING  # nobody recorded the end
    b = make_manager(store_b, tasks_state, owner=owner)
    events: list[TaskEvent] = []
    b.subscribe(events.append)
    await b.recover()
    try:
        got = store_b.get(seven.id)
        assert got.status is S.FAILED and got.exit_code == 7 and got.reason == Reason.EXIT
        assert got.summary == "seven"
        got = store_b.get(zero.id)
        assert got.status is S.COMPLETED and got.exit_code == 0
        got = store_b.get(queued.id)
        assert got.status is S.FAILED and got.reason == Reason.HOST_RESTARTED
        assert store_b.get(slow.id).status is S.RUNNING
        assert b.running_count == 1  # reattached
        (tmp_path / "go").write_text("")
        got = await b.wait(slow.id, 10)
        assert got.status is S.FAILED and got.exit_code == 5 and got.summary == "resumed"
        assert {e.task.id for e in events if e.kind == "finished"} == {
            seven.id,
            zero.id,
            queued.id,
            slow.id,
        }
    finally:
        await b.shutdown(kill=True)
        store_b.close()
        reap(seven, zero, slow)


async def test_a_start_the_store_never_heard_of_is_taken_up_not_repeated(tasks_state, tmp_path):
    """The host died between spawning a task's wrapper and saving its start:
    the store still says queued. The next host finds the wrapper (alive: adopted;
    ended: its exit record) instead of failing it as never started."""
    db = os.path.join(tasks_state, "tasks.db")
    owner = "999999998:gone"
    store_a = SqliteStore(db)
    a = make_manager(store_a, tasks_state, owner=owner)
    gate = "while [ ! -f go ]; do sleep 0.02; done; "
    live = await a.submit(spec("echo up; " + gate + "echo live", cwd=str(tmp_path)))
    ended = await a.submit(spec("echo ended; exit 3", cwd=str(tmp_path)))
    await until(lambda: "up" in read(live.log_path) and wrapper.read_exit(ended.log_dir))
    await a.shutdown(kill=False)  # "killed": nothing more is written
    store_a.close()
    raw = sqlite3.connect(db)
    with raw:  # as if the save of their start never landed
        raw.execute(
            "UPDATE tasks SET status = 'queued', pid = NULL, pid_start = NULL, started_at = NULL"
        )
    raw.close()

    store_b = SqliteStore(db)
    b = make_manager(store_b, tasks_state, owner=owner)
    await b.recover()
    try:
        got = store_b.get(ended.id)
        assert got.status is S.FAILED and got.exit_code == 3 and got.reason == Reason.EXIT
        assert got.started_at is not None
        got = store_b.get(live.id)
        assert got.status is S.RUNNING and got.pid == live.pid
        assert b.running_count == 1  # adopted, not started again
        (tmp_path / "go").write_text("")
        got = await b.wait(live.id, 10)
        assert got.status is S.COMPLETED
        assert read(live.log_path).count("up") == 1  # the command ran once
    finally:
        await b.shutdown(kill=True)
        store_b.close()
        reap(live, ended)


async def test_recovery_never_trusts_a_bare_pid(tasks_state, tmp_path):
    store = SqliteStore(os.path.join(tasks_state, "tasks.db"))
    stranger = subprocess.Popen(["sleep", "1000"])
    try:
        real = identity.start_token(stranger.pid)
        reused = store.insert(
            Task(
                tool="x",
                command="sleep 1000",
                status=S.RUNNING,
                owner="1:dead-owner",
                pid=stranger.pid,
                pid_start=real + "-but-not-this-one",
                created_at=time.time(),
                started_at=time.time(),
                log_dir=str(tmp_path / "nolog"),
            )
        )
        foreign = store.insert(
            Task(
                tool="x",
                command="elsewhere",
                status=S.RUNNING,
                owner=ME,  # a live Neovim (this process): not ours to touch
                pid=stranger.pid,
                pid_start="whatever",
                created_at=time.time(),
                started_at=time.time(),
            )
        )
        foreign_queued = store.insert(
            Task(tool="x", command="later", owner=ME, created_at=time.time())
        )
        m = make_manager(store, tasks_state, owner="2:another-dead-one")
        await m.recover()
        got = store.get(reused.id)
        assert got.status is S.FAILED and got.reason == Reason.HOST_RESTARTED
        assert got.exit_code is None
        assert stranger.poll() is None  # the unrelated process was left alone
        assert store.get(foreign.id).status is S.RUNNING
        assert store.get(foreign.id).owner == ME
        assert store.get(foreign_queued.id).status is S.QUEUED
        assert m.running_count == 0
        await m.shutdown(kill=True)
    finally:
        stranger.kill()
        stranger.wait()
        store.close()


async def test_halt_from_another_instance(tasks_state, tmp_path):
    db = os.path.join(tasks_state, "tasks.db")
    store_a, store_b = SqliteStore(db), SqliteStore(db)
    # two live instances (a dead owner's task would be taken over by a wait)
    a = make_manager(store_a, tasks_state, owner=ME)
    b = make_manager(store_b, tasks_state, owner=identity.owner_token(os.getppid()))
    try:
        t = await a.submit(spec("echo ready; sleep 1000", cwd=str(tmp_path)))
        await until(lambda: "ready" in read(t.log_path))
        assert (await b.wait(t.id, 0.05)).status is S.RUNNING  # followed via the store
        halted = await b.halt(t.id)
        assert halted.status is S.CANCELLED
        final = await a.wait(t.id, 10)  # A sees the exit but keeps B's verdict
        assert final.status is S.CANCELLED and final.exit_code == 143
        assert final.summary.startswith("ready")
    finally:
        await a.shutdown(kill=True)
        await b.shutdown(kill=True)
        store_a.close()
        store_b.close()


async def test_recovery_applies_remaining_timeout(tasks_state, tmp_path):
    db = os.path.join(tasks_state, "tasks.db")
    store = SqliteStore(db)
    a = make_manager(store, tasks_state, owner="3:x")
    t = await a.submit(spec("echo ready; sleep 100", cwd=str(tmp_path), timeout=0.4))
    await a.shutdown(kill=False)
    await until(lambda: "ready" in read(t.log_path))
    b = make_manager(store, tasks_state, owner="3:x")
    await b.recover()
    try:
        got = await b.wait(t.id, 10)
        assert got.status is S.FAILED and got.reason == Reason.TIMEOUT
        # an adopted task's end is its exit record, which its wrapper writes just
        # before it exits itself (as in the adopted-halt tests below)
        await until(lambda: live_members(t.pid) == [])
    finally:
        await b.shutdown(kill=True)
        reap(t)
        store.close()


# --------------------------------------------------------------------------- retention


async def test_purge_removes_rows_and_logs(tasks_state, tmp_path):
    store = SqliteStore(os.path.join(tasks_state, "tasks.db"))
    m = make_manager(store, tasks_state, retention=(60, 120))
    try:
        t = await m.submit(spec("echo x", cwd=str(tmp_path)))
        t = await m.wait(t.id, 10)
        assert os.path.isdir(t.log_dir)
        assert await m.purge(now=time.time() + 100) == []  # unread: kept 2x retention
        m.mark_read(t.id)
        assert await m.purge(now=time.time() + 100) == [t.id]
        assert m.get(t.id) is None and not os.path.exists(t.log_dir)
    finally:
        await m.shutdown(kill=True)
        store.close()


async def test_a_short_retention_is_purged_without_waiting_for_the_hourly_purge(
    tasks_state, tmp_path
):
    """With `retention = { completed = 1 }` a finished task stayed until the
    next hourly purge (or a host restart): the purge runs as often as a
    quarter of the shortest retention, a second apart at least."""
    store = SqliteStore(os.path.join(tasks_state, "tasks.db"))
    m = make_manager(store, tasks_state, retention=(1, 1))
    try:
        await m.recover()  # starts the purge
        assert m.retention.interval() == 1.0
        t = await m.submit(spec("echo x", cwd=str(tmp_path)))
        t = await m.wait(t.id, 10)
        m.mark_read(t.id)
        # the row goes first, then its folder (in a worker thread)
        await until(lambda: m.get(t.id) is None and not os.path.exists(t.log_dir), 20)
    finally:
        await m.shutdown(kill=True)
        store.close()
    assert make_manager(MemoryStore(), tasks_state).retention.interval() == 3600


# --------------------------------------------------------------------------- limits and faults


def log_bytes(task: Task) -> int:
    return sum(os.path.getsize(p) for p in (task.log_path, task.stderr_path) if os.path.exists(p))


async def test_a_task_whose_logs_pass_max_log_bytes_is_stopped(tasks_state, tmp_path):
    m = make_manager(MemoryStore(), tasks_state, max_log_bytes=256 * 1024)
    try:
        t = await m.submit(spec("echo start; yes", cwd=str(tmp_path)))
        t = await m.wait(t.id, 30)
        assert t.status is S.FAILED and t.reason == Reason.LOG_LIMIT
        assert "max_log_bytes (262144 bytes)" in t.error
        assert log_bytes(t) == 256 * 1024  # what it wrote past the limit was cut off
        await until(lambda: live_members(t.pid) == [])
        quiet = await m.submit(spec("echo small", cwd=str(tmp_path)))
        assert (await m.wait(quiet.id, 10)).status is S.COMPLETED  # a task under it is left alone
    finally:
        await m.shutdown(kill=True)


async def test_a_flood_too_short_for_the_watch_is_cut_at_its_exit(tasks_state, tmp_path):
    m = make_manager(MemoryStore(), tasks_state, max_log_bytes=1 << 20)
    try:
        t = await m.submit(spec("head -c 3000000 /dev/zero; echo oops >&2", cwd=str(tmp_path)))
        t = await m.wait(t.id, 30)
        assert t.status is S.FAILED and t.reason == Reason.LOG_LIMIT
        assert os.path.getsize(t.log_path) == 1 << 20
        assert os.path.getsize(t.stderr_path) == 0  # no room left for it
    finally:
        await m.shutdown(kill=True)


async def test_a_flood_that_ignores_sigterm_is_killed_by_the_log_limit(tasks_state, tmp_path):
    """The halt grace is long, so only the log watch's SIGKILL can end it in time."""
    m = make_manager(MemoryStore(), tasks_state, max_log_bytes=64 * 1024, halt_grace=600)
    try:
        t = await m.submit(spec("trap '' TERM; yes", cwd=str(tmp_path)))
        t = await m.wait(t.id, 30)
        assert t.status is S.FAILED and t.reason == Reason.LOG_LIMIT and t.exit_code == 137
        await until(lambda: live_members(t.pid) == [])
    finally:
        await m.shutdown(kill=True)


async def test_a_hostile_filter_is_stopped_and_never_blocks_the_loop(tasks_state, tmp_path):
    m = make_manager(MemoryStore(), tasks_state, filter_time_limit=0.5)
    try:
        t = await m.submit(
            spec("echo aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab; echo ok", str(tmp_path))
        )
        t = await m.wait(t.id, 10)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticking = asyncio.ensure_future(ticker())
        with pytest.raises(ValueError, match="filter took too long"):
            await m.read_output(t.id, "chat", filter="^(a+)+$")
        ticking.cancel()
        assert ticks > 5  # the loop went on while the regex ran elsewhere
        r = await m.read_output(t.id, "chat", filter="^o")
        assert r.matches == ["ok"] and r.next_offset == 0
    finally:
        await m.shutdown(kill=True)


async def test_a_malformed_token_never_reaches_a_path(tasks_manager, tmp_path):
    for bad in ("../../etc", "", "ABCDEF", "abc12/", "abc1234"):
        assert tasks_manager.get(bad) is None
        assert not tasks_manager.mark_read(bad) and not tasks_manager.mark_delivered(bad)
        with pytest.raises(TaskNotFound):
            await tasks_manager.read_output(bad, "chat")
        with pytest.raises(TaskNotFound):
            await tasks_manager.halt(bad)
        with pytest.raises(TaskNotFound):
            await tasks_manager.wait(bad, 0)
        with pytest.raises(ValueError):
            tasks_manager.log_dir_for(bad)


async def test_find_by_call_and_delivered_through_the_manager(tasks_manager, tmp_path):
    t = await tasks_manager.submit(spec("echo hi", cwd=str(tmp_path), chat="/c.md", call_id="c9"))
    assert tasks_manager.find_by_call("/c.md", "c9").id == t.id
    assert tasks_manager.find_by_call("/c.md", "c8") is None
    await tasks_manager.wait(t.id, 10)
    assert not tasks_manager.get(t.id).delivered
    assert tasks_manager.mark_delivered(t.id)
    assert tasks_manager.get(t.id).delivered


async def test_a_full_disk_ends_the_task_with_its_status_recorded(tasks_state, tmp_path, tmpfs):
    """The log fills a small disk: the command fails on its write, the wrapper
    cannot write its exit record, and the database stops taking writes; the
    host still knows how its child ended and says so."""
    state = str(tmpfs("state", size="2m"))
    told: list[str] = []
    m = TaskManager(
        SqliteStore(os.path.join(state, "tasks.db")),
        state,
        ME,
        tasks_config(max_log_bytes=0, halt_grace=0.5),
        tuning=EngineTuning(poll_interval=0.05),
        on_store_fallback=told.append,
    )
    try:
        t = await m.submit(spec("cat /dev/zero", cwd=str(tmp_path)))
        t = await m.wait(t.id, 30)
        assert t.status is S.FAILED and t.exit_code == 1 and t.reason == Reason.EXIT
        assert "could not record its exit" in t.error  # no room for the exit record
        assert m.get(t.id).status is S.FAILED  # never left running in the host's view
        # the database could not take the final write either: memory, said once
        assert len(told) == 1 and "disk is full" in told[0] and "memory" in told[0]
        assert isinstance(m.store.backend, MemoryStore)
        later = await m.submit(spec("echo still works", cwd=str(tmp_path)))
        assert (await m.wait(later.id, 10)).status in (S.COMPLETED, S.FAILED)
        assert len(told) == 1
    finally:
        await m.shutdown(kill=True)


def test_engine_knobs_from_the_environment(caplog):
    env = {"SIDEKICK_TOOLS_TUNING": '{"poll_interval": 0.2, "full_scan_max": 10, "nope": 1}'}
    tuning = EngineTuning.from_env(env)
    assert tuning.poll_interval == 0.2 and tuning.full_scan_max == 10
    assert isinstance(tuning.full_scan_max, int)
    assert tuning.busy_timeout == EngineTuning().busy_timeout
    assert EngineTuning.from_env({}) == EngineTuning()
    assert EngineTuning.from_env({"SIDEKICK_TOOLS_TUNING": "[1"}) == EngineTuning()
    assert "ignoring SIDEKICK_TOOLS_TUNING" in caplog.text


async def test_a_database_locked_by_another_program_holds_no_task_back(tasks_state, tmp_path):
    import sqlite3

    db = os.path.join(tasks_state, "tasks.db")
    m = make_manager(SqliteStore(db, busy_timeout=0.01), tasks_state, store_retry=0.01)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        t = await m.submit(spec("echo hi", cwd=str(tmp_path), chat="/c.md", call_id="c1"))
        t = await m.wait(t.id, 10)
        assert t.status is S.COMPLETED and t.summary == "hi"  # what the host holds
        assert [x.id for x in m.list()] == [t.id] and m.count(S.COMPLETED) == 1
        assert m.find_by_call("/c.md", "c1").id == t.id
        assert m.store.pending_writes > 0  # nothing reached the file yet
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    await until(lambda: m.store.pending_writes == 0)
    reader = SqliteStore(db)
    landed = reader.get(t.id)
    reader.close()
    assert landed.status is S.COMPLETED and landed.summary == "hi" and landed.exit_code == 0
    await m.shutdown(kill=True)


async def test_a_chat_saved_under_another_name_takes_its_tasks_along(
    tasks_manager: TaskManager, tmp_path
):
    """chat_rename.rename_chat: every task naming the old chat, running or ended, names the
    new one, in the store and in the running task's own events; an unnamed
    chat ("") moves only the tasks it is given, since every unnamed buffer's
    tasks name ""; another chat's tasks stay."""
    m = tasks_manager
    done = await m.wait((await m.submit(spec("true", chat="/c/old.md", call_id="a"))).id, 10)
    running = await m.submit(spec("sleep 30", chat="/c/old.md", call_id="b"))
    other = await m.submit(spec("true", chat="/c/other.md", call_id="a"))
    unnamed = [await m.submit(spec("true", chat="", call_id=f"u{i}")) for i in range(2)]
    events: list[TaskEvent] = []
    m.subscribe(events.append)
    assert rename_chat(m, "/c/old.md", "/c/new.md") == 2
    assert {t.id for t in m.list(chats=["/c/new.md"], limit=None)} == {done.id, running.id}
    assert m.get(other.id).chat == "/c/other.md"
    assert rename_chat(m, "", "/c/named.md", [unnamed[0].id]) == 1
    assert [m.get(t.id).chat for t in unnamed] == ["/c/named.md", ""]
    await m.halt(running.id)
    ended = [e.task for e in events if e.task.id == running.id and e.kind == "finished"]
    assert ended and ended[-1].chat == "/c/new.md"
    assert m.store.get(running.id).chat == "/c/new.md"


async def test_a_renamed_chat_reads_its_tasks_output_on_from_where_it_was(
    tasks_manager: TaskManager,
):
    """task_output reads what is new since the chat's last read (per chat, per
    stream): after a rename, the chat goes on from there, not from the start."""
    m = tasks_manager
    task = await m.wait((await m.submit(spec("true", chat="/c/old.md", call_id="a"))).id, 10)
    m.store.set_read_offset(task.id, "/c/old.md", 7)
    m.store.set_read_offset(task.id, "/c/old.md" + STDERR_KEY, 3)
    assert rename_chat(m, "/c/old.md", "/c/new.md") == 1
    assert m.store.get_read_offset(task.id, "/c/new.md") == 7
    assert m.store.get_read_offset(task.id, "/c/new.md" + STDERR_KEY) == 3


def test_without_proc_the_start_token_comes_from_the_systems_ps(tmp_path, monkeypatch):
    """Where there is no /proc (macOS), a process's start is read from `ps`: the
    system's, never a `ps` the project holds that an empty PATH entry (the
    working directory) would find first."""
    marker = tmp_path / "ran"
    fake = tmp_path / "ps"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\necho 'Mon Jan  1 00:00:00 2001'\n")
    fake.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", ":" + os.environ["PATH"])
    monkeypatch.setattr(identity, "IS_LINUX", False)
    token = identity.start_token(os.getpid())
    assert not marker.exists()
    assert token is not None and token.startswith("lstart:") and "2001" not in token


async def test_the_line_count_reaches_the_store_while_a_task_runs(
    tasks_manager, tasks_state, tmp_path
):
    """Another process (an MCP server, another Neovim) reads a running task's
    `log_lines` from the store: it was saved only when a [PROGRESS] marker
    changed, so a task without one read 0 lines there until it ended."""
    cmd = "seq 1 7; while [ ! -f go ]; do sleep 0.02; done"
    t = await tasks_manager.submit(spec(cmd, cwd=str(tmp_path)))
    stored = SqliteStore(os.path.join(tasks_state, "tasks.db"))  # as another process reads it
    try:
        await until(lambda: stored.get(t.id).lines == 7)
    finally:
        (tmp_path / "go").write_text("")
        stored.close()
    done = await tasks_manager.wait(t.id, 10)
    assert done.lines == 7
