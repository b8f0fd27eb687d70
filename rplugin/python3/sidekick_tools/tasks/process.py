"""An awaitable task process: `await proc.wait()`, signal or terminate its process
group. A process this host spawned (`ChildProcess`, see `spawn`) and one an
earlier host started (`AdoptedProcess`, adopted at recovery) sit behind the
same interface.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from dataclasses import dataclass

from .groups import signal_group, terminate_group
from .identity import is_alive
from .wrapper import mark_halted, read_exit

CHILD_POLL_INTERVAL = 0.1  # waitid poll when pidfds are unavailable
ADOPTED_POLL_INTERVAL = 0.5  # exit record + identity poll of a process we did not spawn


@dataclass(frozen=True)
class Outcome:
    """How a task process ended, as far as we can tell."""

    code: int | None  # exit status; 128+N for signal N
    signal: int | None  # signal that killed the supervisor itself (no exit record)
    ended_at: float
    recorded: bool  # True: from the supervisor's exit record


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
        mark_halted(self.log_dir)  # first: a command not started yet then never starts
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
