"""MCP progress notifications while a call waits for a task.

While `run`/`ask` wait out their hybrid threshold, or `await` waits, the
client that asked for progress (a ``progressToken`` in the request) hears:
when the task starts, whenever its ``[PROGRESS]`` marker changes (the
engine's "progress" events), and every `HEARTBEAT` seconds otherwise, so a
client that extends its time limit on progress keeps waiting. The progress
value is the seconds waited so far (it must increase); the message says the
task's state, percent and step, e.g. ``task a1b2c3 running 12s, 45% compiling``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..secrets_mask import mask
from ..tools import _tasks

log = logging.getLogger(__name__)

HEARTBEAT = 5.0

# report(progress, total, message): sends one notification.
Report = Callable[[float, Optional[float], Optional[str]], Awaitable[None]]


def describe(task: Any) -> str:
    """One line for a progress message: ``task a1b2c3 running 12s, 45% step``."""
    state = _tasks.status_of(task)
    text = f"task {task.id} {state}"
    if state == "running":
        text += f" {_tasks.age(_tasks.elapsed(task))}"
        if task.progress is not None:
            text += f", {task.progress}%"
        if task.progress_text:
            text += f" {mask(task.progress_text)}"  # the task's output: may hold a key
    return text


@dataclass(eq=False)
class ProgressReporter:
    """Reports on one task (by token, or by the chat and call id that start it)
    for as long as the ``async with`` block lasts. Never raises: a failed
    notification only ends the reports."""

    tasks: Any
    report: Report
    token: str | None = None  # the task, or, until it starts, the chat and call id
    chat: str = ""
    call_id: str = ""
    heartbeat: float = HEARTBEAT
    sent: int = field(default=0, init=False)
    _started: float = field(default_factory=time.monotonic, init=False)
    _last: float = field(default=-1.0, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _unsubscribe: Optional[Callable[[], None]] = field(default=None, init=False)
    _loop: Optional[asyncio.Task[None]] = field(default=None, init=False)
    _closed: bool = field(default=False, init=False)

    def _mine(self, task: Any) -> bool:
        if self.token is not None:
            return bool(task.id == self.token)
        return bool(self.call_id) and task.chat == self.chat and task.call_id == self.call_id

    def _on_event(self, event: Any) -> None:
        if event.kind in ("started", "progress", "queued") and self._mine(event.task):
            self.token = event.task.id
            self._wake.set()

    async def __aenter__(self) -> ProgressReporter:
        self._unsubscribe = self.tasks.subscribe(self._on_event)
        self._loop = asyncio.ensure_future(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        # The flag ends the loop even when the cancellation is lost: one delivered
        # while a notification is being written can be absorbed by the SDK's
        # transport (anyio), and the loop would then report forever, the call
        # never answering (an `async` run answered only when its task ended).
        self._closed = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._loop is not None:
            self._loop.cancel()
            self._wake.set()
            try:
                await self._loop
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        try:
            if self.token is not None:
                await self._send()  # where the awaited task stands now
            while not self._closed:
                try:
                    await asyncio.wait_for(self._wake.wait(), self.heartbeat)
                except asyncio.TimeoutError:
                    pass
                if self._closed:
                    return
                self._wake.clear()
                await self._send()
        except asyncio.CancelledError:
            raise
        except Exception:  # the client went away, or the store failed: stop reporting
            log.debug("progress reports stopped", exc_info=True)

    async def _send(self) -> None:
        task = self.tasks.get(self.token) if self.token else None
        if task is None:
            return
        # The value must grow with each notification: seconds waited, never repeated.
        value = max(round(time.monotonic() - self._started, 3), self._last + 0.001)
        self._last = value
        await self.report(value, None, describe(task))
        self.sent += 1
