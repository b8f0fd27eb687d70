from __future__ import annotations

import asyncio
import os
import re
import signal
import stat
import subprocess
import sys
import time

import pytest
from sidekick_tools.tasks import groups, identity, process, spawn, wrapper

from tests.conftest import until, wait_for

LINUX = sys.platform.startswith("linux")


def read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def exited(pid: int) -> bool:
    """The child has exited (zombie or gone); does not reap it."""
    if not hasattr(os, "waitid"):  # macOS before Python 3.13
        return identity.start_token(pid) is None
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def assert_reaped(pid: int) -> None:
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def live_members(pgid: int) -> list[int]:
    members = groups.group_members(pgid)
    if members is None:  # not Linux: fall back on killpg
        return [pgid] if groups.group_alive(pgid) else []
    return members


# --------------------------------------------------------------------------- identity


def test_start_token_and_is_alive() -> None:
    me = os.getpid()
    token = identity.start_token(me)
    assert token and identity.start_token(me) == token
    assert identity.is_alive(me, token)
    assert not identity.is_alive(me, token + "0")
    assert not identity.is_alive(me, None)
    assert not identity.is_alive(None, token)
    assert identity.start_token(0) is None


def test_dead_and_zombie_processes_are_not_alive() -> None:
    p = subprocess.Popen(["true"])
    token = identity.start_token(p.pid)
    wait_for(lambda: exited(p.pid))  # a zombie now: dead for us
    assert not identity.is_alive(p.pid, token)
    p.wait()
    assert identity.start_token(p.pid) is None
    assert not identity.is_alive(p.pid, token)


def test_owner_token() -> None:
    owner = identity.owner_token(os.getpid())
    assert owner.startswith(f"{os.getpid()}:")
    assert identity.parse_owner(owner) == (os.getpid(), identity.start_token(os.getpid()))
    assert identity.owner_alive(owner)
    assert not identity.owner_alive(f"{os.getpid()}:not-the-start-time")
    assert not identity.owner_alive("garbage")
    assert identity.parse_owner("x:y") is None


# --------------------------------------------------------------------------- files


def test_read_exit(tmp_path) -> None:
    d = str(tmp_path)
    assert wrapper.read_exit(d) is None
    (tmp_path / "exit").write_text("garbage")
    assert wrapper.read_exit(d) is None
    (tmp_path / "exit").write_text("code=7\nsignal=0\nended=\n")
    rec = wrapper.read_exit(d)
    assert rec.code == 7 and rec.signal == 0
    assert rec.ended_at == pytest.approx(os.stat(tmp_path / "exit").st_mtime)
    (tmp_path / "exit").write_text("code=0\nsignal=15\nended=1700000000,25\n")
    assert wrapper.read_exit(d) == wrapper.ExitRecord(0, 15, 1700000000.25)
    # Being written (the supervisor's printf not done yet): not a record yet.
    for partial in ("", "code=1", "code=12\nsignal=0\n", "code=12\nsignal=0\nended=17000"):
        (tmp_path / "exit").write_text(partial)
        assert wrapper.read_exit(d) is None, partial


def test_spawn_errors(tmp_path) -> None:
    log_dir = str(tmp_path / "log")
    with pytest.raises(spawn.SpawnError, match="does not exist"):
        spawn.spawn("true", log_dir, cwd=str(tmp_path / "nope"))
    (tmp_path / "file").write_text("")
    with pytest.raises(spawn.SpawnError, match="not a directory"):
        spawn.spawn("true", log_dir, cwd=str(tmp_path / "file"))
    with pytest.raises(spawn.SpawnError, match="environment variable"):
        spawn.spawn("true", log_dir, cwd=str(tmp_path), env={"A=B": "x"})
    # under the schema's 64 Ki characters, over Linux's 128 KiB for one argument
    # (its bytes, with the check of the halt file before it)
    check = len(wrapper.guarded("", log_dir).encode())
    with pytest.raises(spawn.SpawnError, match=rf"the command is {140005 + check} bytes with"):
        spawn.spawn("echo " + "é" * 70_000, log_dir)


# --------------------------------------------------------------------------- processes


@pytest.mark.parametrize("use_pidfd", [True, False])
async def test_child_runs_with_output_in_files(tmp_path, monkeypatch, use_pidfd) -> None:
    if not use_pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd on this platform")
    log_dir = str(tmp_path / "tasks" / "abc123")
    (tmp_path / "go").unlink(missing_ok=True)
    cmd = 'echo "out $FOO"; echo err >&2; while [ ! -f go ]; do sleep 0.02; done; exit 3'
    proc = spawn.spawn(cmd, log_dir, cwd=str(tmp_path), env={"FOO": "bar"})
    assert proc.pid == proc.pgid and proc.start_token
    assert os.getpgid(proc.pid) == proc.pid  # its own group...
    # ...in this process's session only when that has no terminal to leak
    in_own_session = spawn._detach_kwargs() == {"start_new_session": True}  # noqa: SLF001
    assert (os.getsid(proc.pid) == proc.pid) == in_own_session
    exited = asyncio.ensure_future(proc.wait())
    stdout, stderr = os.path.join(log_dir, "stdout"), os.path.join(log_dir, "stderr")
    await until(lambda: read(stdout) == "out bar\n" and read(stderr) == "err\n")
    if LINUX:
        # Output goes from the task straight to the files; this process holds no fd on them.
        assert os.readlink(f"/proc/{proc.pid}/fd/1") == stdout
        assert os.readlink(f"/proc/{proc.pid}/fd/2") == stderr
        assert os.readlink(f"/proc/{proc.pid}/fd/0") == "/dev/null"
        mine = {
            os.readlink(f"/proc/self/fd/{fd}")
            for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")
        }
        assert stdout not in mine and stderr not in mine
    assert proc.alive() and not exited.done()
    (tmp_path / "go").write_text("")
    out = await asyncio.wait_for(exited, 10)
    assert out.code == 3 and out.recorded and out.signal is None
    assert proc.exited and not proc.alive()
    assert proc.returncode == 3
    assert wrapper.read_exit(log_dir).code == 3
    assert_reaped(proc.pid)
    assert stat.S_IMODE(os.stat(log_dir).st_mode) == 0o700
    for name in ("stdout", "stderr", "exit"):
        assert stat.S_IMODE(os.stat(os.path.join(log_dir, name)).st_mode) == 0o600
    assert not os.path.exists(os.path.join(log_dir, "exit.tmp"))


def test_supervisor_survives_sigterm_and_records_exit(tmp_path) -> None:
    log_dir = str(tmp_path / "log")
    proc = spawn.spawn("echo ready; sleep 30", log_dir, cwd=str(tmp_path))
    wait_for(lambda: "ready" in read(os.path.join(log_dir, "stdout")))
    os.killpg(proc.pgid, signal.SIGTERM)
    assert proc.popen.wait(timeout=10) == 143
    rec = wrapper.read_exit(log_dir)
    assert rec is not None and rec.code == 143 and rec.signal == 15


def test_a_halted_command_that_had_not_started_never_starts(tmp_path) -> None:
    """A halt right after an MCP `run` sent the group's SIGTERM before the
    command existed (or between its fork and exec, where the wrapper's handler
    took it): the command went on doing its work until the SIGKILL 5 s later.
    A halt writes its file first; the command's own shell looks for it."""
    log_dir = str(tmp_path / "log")
    os.makedirs(log_dir)
    wrapper.mark_halted(log_dir)
    canary = tmp_path / "ran"
    proc = spawn.spawn(f"touch {canary}", log_dir, cwd=str(tmp_path))
    assert proc.popen.wait(timeout=10) == 143
    assert not canary.exists()
    # a command not halted sees its script as before: `$?` is 0, $0 is sh's
    log_dir = str(tmp_path / "log2")
    proc = spawn.spawn('echo "rc=$? $0"', log_dir, cwd=str(tmp_path))
    assert proc.popen.wait(timeout=10) == 0
    assert read(os.path.join(log_dir, "stdout")) == "rc=0 /bin/sh\n"


async def test_a_halt_writes_its_file_before_the_sigterm(tmp_path, monkeypatch) -> None:
    """The guard above works only if a halt writes the file first: when the
    group's SIGTERM goes out, the file is there."""
    log_dir = str(tmp_path / "log")
    proc = spawn.spawn("sleep 30", log_dir, cwd=str(tmp_path))
    seen = []
    real = process.terminate_group

    async def looking(pgid, grace):
        seen.append(os.path.exists(os.path.join(log_dir, wrapper.HALT)))
        return await real(pgid, grace)

    monkeypatch.setattr(process, "terminate_group", looking)
    await proc.terminate(0.5)
    await proc.wait()
    assert seen == [True]


@pytest.mark.skipif(not LINUX, reason="Linux's limit on one argument")
def test_a_command_over_the_argument_limit_is_said_with_its_real_size(tmp_path) -> None:
    """The halt file's check goes before the command in one argument: a command
    just under the limit no longer fits, and the error said it was smaller than
    the limit it named."""
    command = "true " + "#" * (spawn.ARG_MAX_BYTES - 10)
    with pytest.raises(spawn.SpawnError) as err:
        spawn.spawn(command, str(tmp_path / "log"), cwd=str(tmp_path))
    size = int(re.search(r"the command is (\d+) bytes", str(err.value)).group(1))
    assert size > spawn.ARG_MAX_BYTES, str(err.value)


async def test_terminate_group_kills_a_tree_that_ignores_sigterm(tmp_path) -> None:
    log_dir = str(tmp_path / "log")
    cmd = "trap '' TERM; sleep 1000 & sleep 1000 & echo ready; wait"
    proc = spawn.spawn(cmd, log_dir, cwd=str(tmp_path))
    exited = asyncio.ensure_future(proc.wait())
    await until(lambda: "ready" in read(os.path.join(log_dir, "stdout")))
    if LINUX:
        assert len(live_members(proc.pgid)) >= 4  # wrapper, sh, 2 x sleep
    killed = await proc.terminate(grace=0.3)
    assert killed  # SIGTERM was not enough
    out = await asyncio.wait_for(exited, 10)
    assert live_members(proc.pgid) == []
    assert not await proc.terminate(grace=0.3)  # reaped: never signalled again
    assert not out.recorded and out.signal == 9 and out.code == 137
    assert_reaped(proc.pid)


async def test_stray_background_processes_get_sigterm_on_exit(tmp_path) -> None:
    log_dir = str(tmp_path / "log")
    proc = spawn.spawn("sleep 1000 & echo started", log_dir, cwd=str(tmp_path))
    assert (await asyncio.wait_for(proc.wait(), 10)).code == 0
    assert proc.stragglers_signalled
    await until(lambda: live_members(proc.pgid) == [])


async def test_adopted_process_is_polled(tmp_path) -> None:
    log_dir = str(tmp_path / "log")
    (tmp_path / "go").unlink(missing_ok=True)
    child = spawn.spawn(
        "while [ ! -f go ]; do sleep 0.02; done; exit 4", log_dir, cwd=str(tmp_path)
    )
    adopted = process.AdoptedProcess(child.pid, child.start_token, log_dir, poll_interval=0.02)
    assert not adopted.is_child and adopted.alive()
    exited = asyncio.ensure_future(adopted.wait())
    (tmp_path / "go").write_text("")
    out = await asyncio.wait_for(exited, 10)
    assert out.code == 4 and out.recorded
    child.popen.wait(timeout=10)
    # Vanished without an exit record: no outcome code.
    gone = process.AdoptedProcess(child.pid, child.start_token, str(tmp_path / "nothing"))
    out = await asyncio.wait_for(gone.wait(), 10)
    assert out.code is None and not out.recorded


async def test_adopted_process_waits_for_a_complete_exit_record(tmp_path) -> None:
    log_dir = tmp_path / "log"
    child = spawn.spawn("sleep 1000", str(log_dir), cwd=str(tmp_path))
    try:
        adopted = process.AdoptedProcess(child.pid, child.start_token, str(log_dir))
        assert adopted.poll() is None  # running, no record
        (log_dir / "exit").write_text("code=3\nsig")  # the writer is mid-printf
        assert adopted.poll() is None and not adopted.exited
        (log_dir / "exit").write_text("code=3\nsignal=0\nended=\n")
        out = adopted.poll()
        assert out is not None and out.code == 3 and adopted.exited
    finally:
        groups.signal_group(child.pgid, signal.SIGKILL)
        child.popen.wait(timeout=10)


async def test_an_adopted_process_is_signalled_only_while_it_is_the_same_process(tmp_path):
    log_dir = tmp_path / "log"
    child = spawn.spawn("echo ready; sleep 1000", str(log_dir), cwd=str(tmp_path))
    try:
        await until(lambda: "ready" in read(str(log_dir / "stdout")))
        stranger = process.AdoptedProcess(child.pid, "not-its-start-token", str(log_dir))
        assert not await stranger.terminate(0.1) and not stranger.kill()
        assert live_members(child.pgid)  # a bare pid is never trusted
        same = process.AdoptedProcess(child.pid, child.start_token, str(log_dir))
        assert same.kill()
        assert child.popen.wait(timeout=10) != 0
    finally:
        groups.signal_group(child.pgid, signal.SIGKILL)


def test_kill_groups_now(tmp_path) -> None:
    procs = [
        spawn.spawn("trap '' TERM; echo ready; sleep 1000", str(tmp_path / f"l{i}"))
        for i in range(2)
    ]
    for i in range(2):
        wait_for(lambda i=i: "ready" in read(str(tmp_path / f"l{i}" / "stdout")))
    groups.kill_groups_now([p.pgid for p in procs], grace=0.1)
    for p in procs:
        p.popen.wait(timeout=10)
        wait_for(lambda p=p: live_members(p.pgid) == [])


def test_tasks_have_no_controlling_terminal(tmp_path) -> None:
    """A command that wants a terminal (a password prompt) fails instead of hanging."""
    log_dir = str(tmp_path / "log")
    proc = spawn.spawn("(exec 3</dev/tty) 2>/dev/null && echo tty || echo no-tty", log_dir)
    proc.popen.wait(timeout=10)
    with open(os.path.join(log_dir, "stdout")) as f:
        assert f.read() == "no-tty\n"


def test_detach_joins_the_host_session_only_without_a_terminal(monkeypatch) -> None:
    detach = spawn._detach_kwargs  # noqa: SLF001
    try:
        detach.cache_clear()
        monkeypatch.setattr(spawn, "_has_controlling_terminal", lambda: True)
        assert detach() == {"start_new_session": True}
        detach.cache_clear()
        monkeypatch.setattr(spawn, "_has_controlling_terminal", lambda: False)
        expected = (
            {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
        )
        assert detach() == expected
    finally:
        detach.cache_clear()  # the next caller sees this process as it is


@pytest.mark.parametrize("mask", [0o000, 0o027])
def test_logs_are_private_and_the_command_keeps_the_hosts_umask(tmp_path, mask) -> None:
    """The wrapper creates the logs 0600 whatever the umask, then gives the
    command this process's umask back."""
    spawn._umask.cache_clear()  # noqa: SLF001
    old = os.umask(mask)
    try:
        log_dir = str(tmp_path / "log")
        proc = spawn.spawn("umask; : > made", log_dir, cwd=str(tmp_path))
    finally:
        os.umask(old)
        spawn._umask.cache_clear()  # noqa: SLF001
    wait_for(lambda: wrapper.read_exit(log_dir) is not None)
    assert wrapper.read_exit(log_dir).code == 0
    assert int(read(os.path.join(log_dir, "stdout")).strip(), 8) == mask
    assert stat.S_IMODE(os.stat(tmp_path / "made").st_mode) == 0o666 & ~mask
    for name in ("stdout", "stderr", "exit"):
        assert stat.S_IMODE(os.stat(os.path.join(log_dir, name)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(log_dir).st_mode) == 0o700 & ~mask
    proc.popen.wait()


def test_start_token_of_an_exited_child_is_kept(tmp_path):
    """A task that exits before its spawn returns still gets its identity."""
    import subprocess as sp

    r = identity
    child = sp.Popen(["true"])
    deadline = time.monotonic() + 10
    while r.proc_stat(child.pid)[0] != "Z":  # exited, not reaped: a zombie
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert r.start_token(child.pid) is None  # gone, for liveness checks
    token = r.start_token(child.pid, zombie_ok=True)
    assert token and token.endswith(":" + r.proc_stat(child.pid)[19])
    child.wait()
