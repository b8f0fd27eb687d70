"""While tasks run: read their new output once per tick, save a changed line
count, and report a changed `[PROGRESS]` marker ("progress" event, saved).

A task's log is first read one tick after it started, so a task shorter than
that costs no reading while it runs (reading competes with the task for the
CPU), only one read at its exit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from .log_follower import LogFollower
from .model import TaskStatus

if TYPE_CHECKING:
    from .supervisor import Engine, Supervisor

log = logging.getLogger(__name__)


class Watched(Protocol):
    finishing: bool
    watched_since: float


def due_for_poll(watched: Iterable[Watched], now: float, interval: float) -> list[Watched]:
    """The running tasks whose log a tick reads now: not finishing, watched for
    at least one interval."""
    return [w for w in watched if not w.finishing and now - w.watched_since >= interval]


def _poll_followers(followers: list[LogFollower], max_bytes: int) -> list[bool]:
    changed = []
    for f in followers:
        try:
            changed.append(f.poll(max_bytes))
        except OSError:
            changed.append(False)
    return changed


class ProgressPoll:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._watched: dict[str, Supervisor] = {}
        self._ticking: asyncio.Task[None] | None = None

    def add(self, sup: Supervisor) -> None:
        self._watched[sup.token] = sup
        if self._ticking is None or self._ticking.done():
            self._ticking = asyncio.ensure_future(self._tick())

    def discard(self, sup: Supervisor) -> None:
        if self._watched.get(sup.token) is sup:
            del self._watched[sup.token]

    def stop(self) -> None:
        self._watched.clear()
        if self._ticking is not None and not self._ticking.done():
            self._ticking.cancel()

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        tuning = self.engine.tuning
        while self._watched:
            await asyncio.sleep(tuning.poll_interval)
            due = due_for_poll(self._watched.values(), time.monotonic(), tuning.poll_interval)
            if not due:
                continue
            sups: list[Supervisor] = due  # type: ignore[assignment]
            changed = await loop.run_in_executor(
                None, _poll_followers, [s.follower for s in sups], tuning.poll_max_bytes
            )
            for sup, did in zip(sups, changed):
                if sup.finishing or self._watched.get(sup.token) is not sup:
                    continue
                task, progress, lines = sup.task, sup.follower.progress, sup.follower.lines
                moved = did and progress is not None
                if not moved and lines == task.lines:
                    continue
                # the line count too: other processes (an MCP server, another
                # Neovim) read a running task's `log_lines` from the store
                fields: tuple[str, ...] = ("lines",)
                task.lines = lines
                if moved:
                    task.progress, task.progress_text = progress.percent, progress.text
                    fields += ("progress", "progress_text")
                self.engine.save(task, fields, expect={"status": TaskStatus.RUNNING.value})
                if moved:
                    self.engine.emit("progress", task)
