"""An awaitable task process: spawn the supervisor wrapper, `await proc.wait()`,
signal or terminate its process group. Processes an earlier host started
(adopted at recovery) sit behind the same interface.

Every task runs as

    /bin/sh -c WRAPPER sidekick-task COMMAND LOG_DIR UMASK [TASK_ID]

in its own process group (pgid == the wrapper's pid), stdin /dev/null, no
controlling terminal. The wrapper (the task's *supervisor*):

- opens `LOG_DIR/stdout` and `LOG_DIR/stderr` for appending under umask 077
  (0600), then gives the command the host's UMASK back. The wrapper creates
  them, not the host, so many tasks starting at once do not queue behind the
  host's one thread; appending, never truncating, spares the command a flush
  of the whole file at its exit (ext4's auto_da_alloc). A log not there yet
  reads as empty. Output never passes through Python.
- traps TERM/HUP/INT with a handler (not `trap ''`, which the command would
  inherit as "ignored"), so it outlives the command and records its exit;
- writes `LOG_DIR/exit` with one builtin `printf` (no extra process per task):
  `code=`, `signal=`, `ended=`. A record without its final `ended=` line and
  newline is still being written and reads as absent. When it cannot be
  written (a full disk) the host still learns the exit as the wrapper's parent.

See bench/ANALYSIS.md for how these choices were measured.
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
from dataclasses import dataclass

from .groups import signal_group, terminate_group
from .identity import is_alive, start_token

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
CHILD_POLL_INTERVAL = 0.1  # waitid poll when pidfds are unavailable
ADOPTED_POLL_INTERVAL = 0.5  # exit record + identity poll of a process we did not spawn


class SpawnError(Exception):
    """The task could not be started; the message says why, for the user."""


# --------------------------------------------------------------------------- exit record


@dataclass(frozen=True)
class ExitRecord:
    """What the supervisor wrote to LOG_DIR/exit."""

    code: int  # the command's exit status (128+N when killed by signal N)
    signal: int  # signal the supervisor itself received (0: none)
    ended_at: float


def read_exit(log_dir: str) -> ExitRecord | None:
    """The supervisor's exit record; None while there is no complete one."""
    try:
        with open(os.path.join(log_dir, "exit")) as f:
            st = os.fstat(f.fileno())
            text = f.read()
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


def find_supervisor(log_dir: str) -> tuple[int, str] | None:
    """The live supervisor wrapper writing into `log_dir` (pid, start token), if any.

    For a task whose start never reached the store (its host was killed between
    spawning the wrapper and saving its pid): the wrapper names its log dir in
    its argv, and only a wrapper of ours has SUPERVISOR_NAME as its $0. Linux
    only (/proc); elsewhere such a task is reported as lost, never run again.
    """
    if not os.path.isdir("/proc/self"):
        return None
    want = os.fsencode(log_dir)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        # /bin/sh -c WRAPPER sidekick-task COMMAND LOG_DIR UMASK [TASK_ID]
        if len(argv) > 5 and argv[3] == SUPERVISOR_NAME.encode() and argv[5] == want:
            token = start_token(int(entry))
            if token:
                return int(entry), token
    return None


@dataclass(frozen=True)
class Outcome:
    """How a task process ended, as far as we can tell."""

    code: int | None  # exit status; 128+N for signal N
    signal: int | None  # signal that killed the supervisor itself (no exit record)
    ended_at: float
    recorded: bool  # True: from the supervisor's exit record


# --------------------------------------------------------------------------- processes


class TaskProcess:
    """A task's supervisor, identified by pid + start token. `await wait()`."""

    is_child = False

    def __init__(self, pid: int, token: str | None, log_dir: str) -> None:
        self.pid = pid
        self.pgid = pid  # group leader: its pid is the group id
        self.start_token = token
        self.log_dir = log_dir
        self.exited = False

    def alive(self) -> bool:
        return not self.exited and is_alive(self.pid, self.start_token)

    def _ours_to_signal(self) -> bool:
        """Signalling the group cannot hit a stranger (its leader is still ours)."""
        return self.alive()

    async def wait(self) -> Outcome:
        raise NotImplementedError

    def outcome(self) -> Outcome:
        raise NotImplementedError

    async def terminate(self, grace: float) -> bool:
        """SIGTERM the group, SIGKILL after `grace`; True when SIGKILL was needed."""
        if self.exited or not self._ours_to_signal():
            return False
        return await terminate_group(self.pgid, grace)

    def kill(self) -> bool:
        """SIGKILL the group now."""
        if self.exited or not self._ours_to_signal():
            return False
        return signal_group(self.pgid, signal.SIGKILL)


class ChildProcess(TaskProcess):
    """A supervisor this host spawned (and must reap).

    The exit is awaited through a pidfd read by the loop (Linux >= 5.3), else
    by `waitid(WNOHANG)` every `CHILD_POLL_INTERVAL` seconds. When the
    supervisor has exited its group gets SIGTERM *before* the zombie is reaped
    (so the pgid cannot have been reused), which ends stray background
    processes of the command ("no orphans").
    """

    is_child = True

    def __init__(self, popen: subprocess.Popen, token: str | None, log_dir: str) -> None:
        super().__init__(popen.pid, token, log_dir)
        self.popen = popen
        self.returncode: int | None = None
        self.stragglers_signalled = False

    def _ours_to_signal(self) -> bool:
        return self.returncode is None  # not reaped: the pid cannot have been reused

    async def wait(self) -> Outcome:
        if self.returncode is None:
            await self._until_exit()
            if self.popen.returncode is None:
                self.stragglers_signalled = signal_group(self.pgid, signal.SIGTERM)
            rc = self.popen.poll()
            while rc is None:  # pragma: no cover - pidfd/waitid said it exited
                await asyncio.sleep(CHILD_POLL_INTERVAL)
                rc = self.popen.poll()
            self.returncode = rc
            self.exited = True
        return self.outcome()

    async def _until_exit(self) -> None:
        loop = asyncio.get_running_loop()
        fd = _pidfd(self.pid)
        if fd is not None:
            exited = loop.create_future()
            try:
                loop.add_reader(fd, _resolve, exited)
            except (NotImplementedError, RuntimeError, OSError, ValueError):
                os.close(fd)
            else:
                try:
                    await exited
                finally:
                    loop.remove_reader(fd)
                    os.close(fd)
                return
        while not self._exited_now():
            await asyncio.sleep(CHILD_POLL_INTERVAL)

    def _exited_now(self) -> bool:
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True  # already reaped elsewhere; Popen sorts it out
        except (AttributeError, OSError):
            return self.popen.poll() is not None
        return info is not None

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


class AdoptedProcess(TaskProcess):
    """A supervisor started by an earlier host: not our child, so its end is
    polled (exit record first, then pid + start token)."""

    def __init__(
        self,
        pid: int,
        token: str | None,
        log_dir: str,
        poll_interval: float = ADOPTED_POLL_INTERVAL,
    ) -> None:
        super().__init__(pid, token, log_dir)
        self.poll_interval = poll_interval

    def poll(self) -> Outcome | None:
        """One look: the outcome once the process has ended, else None."""
        if read_exit(self.log_dir) is not None or not is_alive(self.pid, self.start_token):
            self.exited = True
            return self.outcome()
        return None

    async def wait(self) -> Outcome:
        outcome = self.poll()
        while outcome is None:
            await asyncio.sleep(self.poll_interval)
            outcome = self.poll()
        return outcome

    def outcome(self) -> Outcome:
        rec = read_exit(self.log_dir)
        if rec is not None:
            return Outcome(rec.code, None, rec.ended_at, True)
        return Outcome(None, None, time.time(), False)


def _pidfd(pid: int) -> int | None:
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        return pidfd_open(pid)
    except OSError:
        return None


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


# --------------------------------------------------------------------------- spawning


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
    steps nicer than this process (like `nice -n`, capped at 19). Failing to
    set it is logged, never fatal.

    `task_id` becomes the command's SIDEKICK_TASK_ID; the wrapper exports it,
    so a task without extra `env` runs in the host's environment as it is,
    never copied."""
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
        os.makedirs(log_dir, mode=0o700, exist_ok=True)
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


@functools.cache
def _detach_kwargs() -> dict[str, int | bool]:
    """How a task leaves the host's process group (Popen keywords).

    Neovim starts the host in a session of its own without a controlling
    terminal; a task then only needs a group of its own in that session: it
    still cannot open /dev/tty (a password prompt fails instead of hanging),
    and the tasks share the host's CPU group where the kernel shares CPU time
    by session, so a busy task does not weigh as much as the editor. With a
    terminal (or on Python < 3.11, without `process_group`) each task gets a
    session of its own."""
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
