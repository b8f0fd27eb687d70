"""While tasks run: stop one whose stdout + stderr pass `tasks.max_log_bytes`
(it ends `failed`, reason `log_limit`); at its exit, cut its logs back to it.

The sizes are `stat`ed, which is cheap, and each task is looked at again
before a flood at `ASSUMED_WRITE_RATE` could fill the room left to it: every
half second while it is far from the limit, every 10 ms near it. A command
that keeps writing after SIGTERM gets SIGKILL once it has written `SLACK`
more. What a flood wrote past the limit before it was stopped (or before its
first look, for one shorter than 10 ms) is cut off at its exit (`cut_at_exit`),
so the logs it leaves stop at the limit. (A file-size rlimit would stop the
logs too, but also every other file the command writes; this limits only the
logs.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING

from .model import Reason, Task

if TYPE_CHECKING:
    from .supervisor import Engine, Supervisor

ASSUMED_WRITE_RATE = 4 << 30  # bytes/s: about what `cat /dev/zero` reaches into the page cache
MIN_CHECK = 0.01  # seconds between two looks at one task, at least...
MAX_CHECK = 0.5  # ...and at most
SLACK = 16 << 20  # written after SIGTERM: then SIGKILL


def log_size(task: Task) -> int:
    """Bytes in the task's stdout and stderr logs now."""
    total = 0
    for path in (task.log_path, task.stderr_path):
        if path:
            with contextlib.suppress(OSError):
                total += os.stat(path).st_size
    return total


LIMIT_ERROR = "its output passed tasks.max_log_bytes ({limit} bytes): stopped"


def cut_at_exit(task: Task, limit: int) -> bool:
    """The task has ended: if its logs pass `limit` bytes together, cut them
    back to it (stdout first, then stderr's share of what is left). True when cut."""
    if limit <= 0 or log_size(task) <= limit:
        return False
    room = limit
    for path in (task.log_path, task.stderr_path):
        if not path:
            continue
        try:
            size = os.stat(path).st_size
            if size > room:
                os.truncate(path, room)
            room -= min(size, room)
        except OSError:
            pass
    return True


def next_look(size: int, limit: int) -> float:
    """Seconds until a task with `size` bytes of logs must be looked at again."""
    room = max(0, limit - size)
    return min(MAX_CHECK, max(MIN_CHECK, room / ASSUMED_WRITE_RATE))


class LogLimitWatch:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._due: dict[Supervisor, float] = {}
        self._stopped_at: dict[Supervisor, int] = {}
        self._wake: asyncio.Event | None = None  # made on the loop (Python 3.9 binds it)
        self._watching: asyncio.Task[None] | None = None

    def add(self, sup: Supervisor) -> None:
        loop = asyncio.get_running_loop()
        self._due[sup] = loop.time() + next_look(0, self._limit() or 1)
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._watching is None or self._watching.done():
            self._watching = asyncio.ensure_future(self._watch())

    def discard(self, sup: Supervisor) -> None:
        self._due.pop(sup, None)
        self._stopped_at.pop(sup, None)

    def stop(self) -> None:
        self._due.clear()
        if self._watching is not None and not self._watching.done():
            self._watching.cancel()

    def _limit(self) -> int:
        return int(self.engine.config.max_log_bytes or 0)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake
        assert wake is not None
        while self._due:
            wake.clear()
            now = loop.time()
            for sup, due in list(self._due.items()):
                if due <= now and sup in self._due:
                    self._due[sup] = now + self._look(sup)
            wait = min(self._due.values(), default=now) - loop.time()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(wake.wait(), max(0.0, wait))

    def _look(self, sup: Supervisor) -> float:
        """Check one task; seconds until the next look."""
        limit = self._limit()
        if limit <= 0:  # no limit (0): look again later, in case one is configured
            return MAX_CHECK
        size = log_size(sup.task)
        if size < limit:
            return next_look(size, limit)
        stopped_at = self._stopped_at.get(sup)
        if stopped_at is None:
            self._stopped_at[sup] = size
            sup.stop(Reason.LOG_LIMIT, LIMIT_ERROR.format(limit=limit))
        elif size > stopped_at + SLACK and sup.proc is not None:
            sup.proc.kill()  # it keeps writing after SIGTERM
        return MIN_CHECK
