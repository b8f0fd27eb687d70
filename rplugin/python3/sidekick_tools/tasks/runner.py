"""Process side of tasks: spawning the supervisor, identity, reaping, killing.

Every task runs as

    /bin/sh -c WRAPPER sidekick-task COMMAND LOG_DIR UMASK [TASK_ID]

in its own process group (pgid == supervisor pid) with stdin from /dev/null,
and with no controlling terminal (see `_detach_kwargs`). The wrapper (the
task's *supervisor*) opens `LOG_DIR/stdout` and `LOG_DIR/stderr` for
appending under umask 077 (so they are created 0600), restores the host's
UMASK, and runs the command with `/bin/sh -c COMMAND`, its stdout and stderr
on those files. The host only creates LOG_DIR (0700): when 200 tasks start
at once, creating files on the host's single thread made every task wait
for the ones before it, and the wrapper creates them in parallel with the
other tasks for free (it opens the files either way). Appending, never
truncating, matters: on ext4 a truncated file is flushed in full when its
writer closes it ("auto_da_alloc"), which cost a 100 MB task a quarter of
its wall time. A reader treats a log that is not there yet as empty. The
wrapper's own stderr (e.g. the shell's "Terminated" report) goes to /dev/null
and never pollutes the task's log. The wrapper records the outcome in
`LOG_DIR/exit` with one builtin `printf` (no extra process: a `mv` per task
was a tenth of the machine's time when 200 tasks start at once), so any later
host can learn how the task ended without having been its parent. The record
ends with its `ended=` line and a newline: a reader that finds less (the file
is being written) treats it as not there yet. Output never
passes through Python.

The wrapper traps TERM/HUP/INT with a handler (not `trap ''`, which children
would inherit as "ignored"): when the group gets SIGTERM the command dies (or
not), the wrapper survives, waits for it, and still records the exit.

Process identity is (pid, start token): on Linux the boot id plus field 22 of
/proc/PID/stat (start time in clock ticks since boot); elsewhere the output of
`ps -o lstart=`. A pid alone is never trusted.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

WRAPPER = r"""trap 'sk_sig=15' TERM
trap 'sk_sig=1' HUP
trap 'sk_sig=2' INT
umask 077
exec 3>>"$2/stdout" 4>>"$2/stderr"
umask "$3"
if [ -n "${4:-}" ]; then export SIDEKICK_TASK_ID="$4"; fi
/bin/sh -c "$1" </dev/null >&3 2>&4 3>&- 4>&-
sk_rc=$?
umask 077
printf 'code=%s\nsignal=%s\nended=%s\n' "$sk_rc" "${sk_sig:-0}" "${EPOCHREALTIME:-}" >"$2/exit"
exit "$sk_rc"
"""

SUPERVISOR_NAME = "sidekick-task"
CHILD_POLL_INTERVAL = 0.1  # waitpid timer when pidfd is unavailable
FOREIGN_POLL_INTERVAL = 0.5  # liveness + exit file poll for tasks we did not spawn
GROUP_POLL_INTERVAL = 0.05  # while waiting for a signalled group to disappear
KILL_WAIT = 2.0  # after SIGKILL, how long to wait for the group to vanish

_IS_LINUX = sys.platform.startswith("linux")
_boot_id: str | None = None


class SpawnError(Exception):
    """The task could not be started; the message says why, for the user."""


# --------------------------------------------------------------------------- identity


def _linux_boot_id() -> str:
    global _boot_id
    if _boot_id is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                _boot_id = f.read().strip()
        except OSError:
            _boot_id = "noboot"
    return _boot_id


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (index 0 is the state), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    close = data.rfind(b")")
    if close < 0:
        return None
    return data[close + 2 :].decode("ascii", "replace").split()


def start_token(pid: int, zombie_ok: bool = False) -> str | None:
    """A token identifying the process `pid` for its whole life, or None if gone.

    A zombie counts as gone, except with `zombie_ok`: our own child that has
    already exited (a short task on a loaded machine) still has its identity."""
    if pid <= 0:
        return None
    if _IS_LINUX and os.path.isdir("/proc/self"):
        fields = _proc_stat(pid)
        dead = ("X",) if zombie_ok else ("Z", "X")
        if fields is None or len(fields) < 20 or fields[0] in dead:
            return None
        return f"{_linux_boot_id()}:{fields[19]}"
    try:
        out = subprocess.run(
            ["ps", "-o", "lstart=", "-p", str(pid)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.decode("utf-8", "replace").strip()
    return f"lstart:{' '.join(text.split())}" if out.returncode == 0 and text else None


def is_alive(pid: int | None, token: str | None) -> bool:
    """True only if `pid` runs and is the very process `token` was taken from."""
    if not pid or not token:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, someone else's: the token decides
    return start_token(pid) == token


def owner_token(pid: int) -> str:
    """Owner string for the Neovim process `pid`: "<pid>:<start token>"."""
    return f"{pid}:{start_token(pid) or 'unknown'}"


def parse_owner(owner: str) -> tuple[int, str] | None:
    pid, sep, token = (owner or "").partition(":")
    if not sep or not pid.isdigit():
        return None
    return int(pid), token


def owner_alive(owner: str) -> bool:
    parsed = parse_owner(owner)
    return parsed is not None and is_alive(parsed[0], parsed[1])


# --------------------------------------------------------------------------- groups


def _group_members_linux(pgid: int) -> list[int] | None:
    """Live (non-zombie) pids whose process group is `pgid`; None if /proc is unusable."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    live = []
    for name in names:
        if not name.isdigit():
            continue
        fields = _proc_stat(int(name))
        if fields is None or len(fields) < 3:
            continue
        if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            live.append(int(name))
    return live


def group_members(pgid: int) -> list[int] | None:
    """Linux: live members of process group `pgid` (zombies excluded); elsewhere None."""
    return _group_members_linux(pgid) if _IS_LINUX else None


def group_alive(pgid: int) -> bool:
    """Does any live (non-zombie) process remain in group `pgid`?"""
    if not pgid or pgid <= 1:
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if _IS_LINUX:
        # Zombies (not yet reaped by their parent, or orphans under an init
        # that does not reap) still answer killpg(0); they are gone for us.
        members = _group_members_linux(pgid)
        if members is not None:
            return bool(members)
    return True


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group; False if the group no longer exists."""
    if not pgid or pgid <= 1:
        return False
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


async def terminate_group(pgid: int, grace: float) -> bool:
    """SIGTERM the group; SIGKILL it if anything is left after `grace` seconds.

    Returns True when SIGKILL was needed. Waits (without blocking the loop)
    until the group is gone or `KILL_WAIT` seconds after SIGKILL.
    """
    loop = asyncio.get_running_loop()
    if not signal_group(pgid, signal.SIGTERM):
        return False
    deadline = loop.time() + max(0.0, grace)
    while loop.time() < deadline:
        if not group_alive(pgid):
            return False
        await asyncio.sleep(GROUP_POLL_INTERVAL)
    if not group_alive(pgid):
        return False
    signal_group(pgid, signal.SIGKILL)
    deadline = loop.time() + KILL_WAIT
    while group_alive(pgid) and loop.time() < deadline:
        await asyncio.sleep(GROUP_POLL_INTERVAL)
    return True


def kill_groups_now(pgids: list[int], grace: float = 0.2) -> None:
    """Synchronous last resort for exit paths without a running loop:
    SIGTERM every group, sleep up to `grace`, SIGKILL whatever is left."""
    live = [p for p in pgids if signal_group(p, signal.SIGTERM)]
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = [p for p in live if group_alive(p)]
    for p in live:
        signal_group(p, signal.SIGKILL)


# --------------------------------------------------------------------------- files


@dataclass(frozen=True)
class ExitRecord:
    """What the supervisor wrote to LOG_DIR/exit."""

    code: int  # the command's exit status (128+N when killed by signal N)
    signal: int  # signal the supervisor itself received (0: none)
    ended_at: float


def read_exit(log_dir: str) -> ExitRecord | None:
    """The supervisor's exit record; None while there is no complete one."""
    path = os.path.join(log_dir, "exit")
    try:
        with open(path) as f:
            st = os.fstat(f.fileno())
            text = f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return None
    if not text.endswith("\n") or not text.splitlines()[-1].startswith("ended="):
        return None  # absent or still being written
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    try:
        code = int(values["code"])
    except (KeyError, ValueError):
        return None
    try:
        sig = int(values.get("signal") or 0)
    except ValueError:
        sig = 0
    try:
        ended = float(values.get("ended", "").replace(",", "."))
    except ValueError:
        ended = st.st_mtime  # the wrapper's shell had no clock: the file's mtime is the end
    return ExitRecord(code, sig, ended)


def prepare_log_dir(log_dir: str) -> None:
    """Create LOG_DIR (0700) unless it is there; the wrapper creates the logs."""
    os.makedirs(log_dir, mode=0o700, exist_ok=True)


@functools.cache
def _umask() -> str:
    """This process's umask in octal, for the wrapper to give back to the command."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return line.split()[1]
    except (OSError, IndexError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it (once, at the first task)
    os.umask(mask)
    return f"{mask:04o}"


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class Outcome:
    """How a task process ended, as far as we can tell."""

    code: int | None  # exit status; 128+N for signal N
    signal: int | None  # signal that killed the supervisor itself (no exit file)
    ended_at: float
    recorded: bool  # True: from the supervisor's exit file


class TaskProcess:
    """A running task's supervisor, watched until it ends."""

    def __init__(self, pid: int, token: str | None, log_dir: str) -> None:
        self.pid = pid
        self.pgid = pid  # group leader: its pid is the group id
        self.start_token = token
        self.log_dir = log_dir
        self.exited = False
        self._on_exit: Callable[[], None] | None = None

    is_child = False

    def alive(self) -> bool:
        return not self.exited and is_alive(self.pid, self.start_token)

    def watch(self, loop: asyncio.AbstractEventLoop, on_exit: Callable[[], None]) -> None:
        raise NotImplementedError

    def unwatch(self) -> None:
        raise NotImplementedError

    def outcome(self) -> Outcome:
        raise NotImplementedError

    def _fire(self) -> None:
        self.exited = True
        cb, self._on_exit = self._on_exit, None
        if cb is not None:
            cb()


class ChildProcess(TaskProcess):
    """A supervisor this host spawned (and must reap).

    Reaping without a thread per child: a pidfd registered with the loop's
    `add_reader` where available (Linux >= 5.3), else a `waitid(WNOHANG)`
    timer every `CHILD_POLL_INTERVAL` seconds. When the supervisor exits its
    group gets SIGTERM *before* the zombie is reaped (so the pgid cannot have
    been reused), which ends stray background processes of the command.
    """

    is_child = True

    def __init__(self, popen: subprocess.Popen, token: str | None, log_dir: str) -> None:
        super().__init__(popen.pid, token, log_dir)
        self.popen = popen
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pidfd: int | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.returncode: int | None = None
        self.stragglers_signalled = False

    def watch(self, loop: asyncio.AbstractEventLoop, on_exit: Callable[[], None]) -> None:
        self._loop = loop
        self._on_exit = on_exit
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            try:
                fd = pidfd_open(self.pid)
            except OSError:
                fd = None
            if fd is not None:
                try:
                    loop.add_reader(fd, self._on_pidfd)
                    self._pidfd = fd
                    return
                except (NotImplementedError, RuntimeError, OSError, ValueError):
                    os.close(fd)
        self._timer = loop.call_later(CHILD_POLL_INTERVAL, self._on_timer)

    def unwatch(self) -> None:
        if self._pidfd is not None and self._loop is not None:
            try:
                self._loop.remove_reader(self._pidfd)
            except (RuntimeError, ValueError, OSError):
                pass
            os.close(self._pidfd)
            self._pidfd = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._on_exit = None

    def _on_pidfd(self) -> None:
        cb = self._on_exit
        self.unwatch()
        self._on_exit = cb
        self._reap()

    def _on_timer(self) -> None:
        self._timer = None
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            info = True  # already reaped elsewhere; let Popen sort it out
        except (AttributeError, OSError):
            info = True if self.popen.poll() is not None else None
        if info is None:
            assert self._loop is not None
            self._timer = self._loop.call_later(CHILD_POLL_INTERVAL, self._on_timer)
            return
        self._reap()

    def _reap(self) -> None:
        # The supervisor is a zombie now: its pid (== pgid) cannot be reused
        # until we reap it, so signalling the group cannot hit a stranger.
        if self.popen.returncode is None:
            self.stragglers_signalled = signal_group(self.pgid, signal.SIGTERM)
        rc = self.popen.poll()
        if rc is None:  # pragma: no cover - pidfd/waitid said it exited
            assert self._loop is not None
            self._timer = self._loop.call_later(CHILD_POLL_INTERVAL, self._on_timer)
            return
        self.returncode = rc
        self._fire()

    def outcome(self) -> Outcome:
        rec = read_exit(self.log_dir)
        if rec is not None:
            # We saw the exit as it happened: our clock beats the file's coarse mtime.
            return Outcome(rec.code, None, time.time(), True)
        rc = self.returncode
        if rc is None:
            return Outcome(None, None, time.time(), False)
        if rc < 0:
            return Outcome(128 - rc, -rc, time.time(), False)
        return Outcome(rc, None, time.time(), False)


class ForeignProcess(TaskProcess):
    """A supervisor started by an earlier host: not our child, so it is polled
    (exit file, then pid + start token) every `FOREIGN_POLL_INTERVAL` seconds."""

    def __init__(self, pid: int, token: str | None, log_dir: str) -> None:
        super().__init__(pid, token, log_dir)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, loop: asyncio.AbstractEventLoop, on_exit: Callable[[], None]) -> None:
        self._loop = loop
        self._on_exit = on_exit
        self._timer = loop.call_later(0, self._check)

    def unwatch(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._on_exit = None

    def _check(self) -> None:
        self._timer = None
        if read_exit(self.log_dir) is not None or not is_alive(self.pid, self.start_token):
            self._fire()
            return
        assert self._loop is not None
        self._timer = self._loop.call_later(FOREIGN_POLL_INTERVAL, self._check)

    def outcome(self) -> Outcome:
        rec = read_exit(self.log_dir)
        if rec is not None:
            return Outcome(rec.code, None, rec.ended_at, True)
        return Outcome(None, None, time.time(), False)


def spawn(
    command: str,
    log_dir: str,
    *,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    nice: int = 0,
    task_id: str | None = None,
) -> ChildProcess:
    """Start `command` under the supervisor wrapper; raise SpawnError with a
    message for the user when that is impossible (bad cwd, bad env, no shell).

    `nice` > 0 lowers the task's CPU priority: its process group runs that many
    steps nicer than this process (like `nice -n`, capped at 19); processes
    it starts later inherit that. Failing to set it is logged, never fatal.

    `task_id` becomes the command's SIDEKICK_TASK_ID. The wrapper exports it,
    so a task without extra `env` runs in the host's environment as it is,
    never copied (building an environment for each of 200 tasks started at
    once was a measurable part of their start-up)."""
    log_dir = os.path.abspath(log_dir)
    if cwd:
        cwd = os.path.abspath(os.path.expanduser(cwd))
        if not os.path.exists(cwd):
            raise SpawnError(f"working directory {cwd} does not exist")
        if not os.path.isdir(cwd):
            raise SpawnError(f"working directory {cwd} is not a directory")
        if not os.access(cwd, os.X_OK):
            raise SpawnError(f"working directory {cwd} is not accessible (permission denied)")
    full_env = None  # None: the host's own environment, without copying it
    if env:
        full_env = dict(os.environ)
        for key, value in env.items():
            if not isinstance(key, str) or not key or "=" in key or "\0" in key:
                raise SpawnError(f"invalid environment variable name {key!r}")
            full_env[key] = "" if value is None else str(value)
    try:
        prepare_log_dir(log_dir)
    except OSError as exc:
        raise SpawnError(f"cannot create the task's log directory {log_dir}: {exc}") from exc
    try:
        popen = subprocess.Popen(
            ["/bin/sh", "-c", WRAPPER, SUPERVISOR_NAME, command, log_dir, _umask()]
            + ([task_id] if task_id else []),
            cwd=cwd or None,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **_detach_kwargs(),
            close_fds=True,
        )
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOENT, errno.ENOTDIR) and cwd:
            reason = f"{reason} (working directory {cwd})"
        raise SpawnError(f"cannot start the task: {reason}") from exc
    if nice > 0:
        set_group_nice(popen.pid, nice)
    return ChildProcess(popen, start_token(popen.pid, zombie_ok=True), log_dir)


@functools.cache
def _detach_kwargs() -> dict[str, int | bool]:
    """How a task leaves the host's process group (Popen keywords).

    Neovim starts the host in a session of its own with no controlling
    terminal. A task then only needs a process group of its own in that
    session: it still cannot open /dev/tty (a password prompt fails instead
    of hanging), and all tasks share the host's CPU group where the kernel
    shares CPU time by session ("autogroup"). A session per task made each
    busy task weigh as much as the editor with everything it runs, and the
    editor's request round-trip p99 during ten floods doubled (about 1.4 ms
    against 2.7 ms in paired bench runs). When this process does have a
    terminal (or Python < 3.11, without `process_group`), each task gets a
    session of its own, as before."""
    if sys.version_info >= (3, 11) and not _has_controlling_terminal():
        return {"process_group": 0}
    return {"start_new_session": True}


def _has_controlling_terminal() -> bool:
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def set_group_nice(pgid: int, increment: int) -> None:
    """Make every process of group `pgid` `increment` steps nicer than this one."""
    try:
        value = min(19, os.getpriority(os.PRIO_PROCESS, 0) + increment)
        os.setpriority(os.PRIO_PGRP, pgid, value)
    except (OSError, AttributeError) as exc:  # PermissionError is an OSError
        log.info("task group %d: cannot lower its priority: %s", pgid, exc)
