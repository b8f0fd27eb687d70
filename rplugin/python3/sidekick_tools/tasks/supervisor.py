"""One coroutine per task: its whole life, top to bottom (`Supervisor.run`).

queued -> admitted -> spawned (running) -> exit awaited under the timeout ->
status settled through the model's transitions -> summarized -> saved ->
"finished" -> (the rest of a large log counted -> "updated").

Anything may ask a running task to stop (`stop`: halt, timeout, log limit,
Neovim exiting): its process group gets SIGTERM, then SIGKILL after the grace,
and the first reason given is the one the task ends with.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from ..config import TasksConfig
from .groups import group_alive, terminate_group
from .log_follower import LogFollower
from .log_limit import LIMIT_ERROR, cut_at_exit
from .model import Reason, Task, TaskStatus, keep_their_verdict, transition
from .on_exit_summarize import combine_summary, count_rest, summarize, take_counts
from .process import Outcome, TaskProcess
from .queue import TaskQueue
from .spawn import SpawnError, spawn
from .store import BufferedStore
from .tuning import EngineTuning

log = logging.getLogger(__name__)

FINAL_FIELDS = (
    "status",
    "reason",
    "exit_code",
    "ended_at",
    "error",
    "summary",
    "lines",
    "progress",
    "progress_text",
)


class Engine(Protocol):
    """What a supervisor uses of the engine around it (the TaskManager)."""

    store: BufferedStore
    config: TasksConfig
    tuning: EngineTuning
    queue: TaskQueue

    def emit(self, kind: str, task: Task) -> None: ...
    def save(self, task: Task, fields: Any, expect: dict[str, Any] | None = None) -> bool: ...
    def watch(self, sup: Supervisor) -> None: ...
    def unwatch(self, sup: Supervisor) -> None: ...
    def background(self, work: Awaitable[Any]) -> asyncio.Future[Any]: ...


@dataclass(frozen=True)
class StopRequest:
    reason: str  # Reason.*; Reason.FAILING_STOPS end `failed`, the others `cancelled`
    error: str | None


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def settle(task: Task, outcome: Outcome, stop: StopRequest | None) -> None:
    """The terminal status, reason, exit code and error of a task whose process ended."""
    task.exit_code = outcome.code
    # File timestamps are coarse: never end before the start.
    ended = outcome.ended_at
    if task.started_at is not None and ended < task.started_at:
        ended = task.started_at
    if stop is not None:
        failed = stop.reason in Reason.FAILING_STOPS
        status = TaskStatus.FAILED if failed else TaskStatus.CANCELLED
        transition(task, status, reason=stop.reason, now=ended)
        default = "timed out" if stop.reason == Reason.TIMEOUT else None
        task.error = stop.error or default
        return
    code = outcome.code
    if code is None:
        reason, error = Reason.SIGNAL, "the task's process ended without recording an exit status"
    elif outcome.signal:
        reason, error = Reason.SIGNAL, f"killed by {_signal_name(outcome.signal)}"
    elif code == 0:
        transition(task, TaskStatus.COMPLETED, reason=Reason.EXIT, now=ended)
        task.error = None
        return
    elif 128 < code <= 128 + 64:
        reason, error = Reason.SIGNAL, f"exit {code} ({_signal_name(code - 128)})"
    else:
        reason, error = Reason.EXIT, f"exit {code}"
        if not outcome.recorded:
            error += " (the task's supervisor could not record its exit)"
    transition(task, TaskStatus.FAILED, reason=reason, now=ended)
    task.error = error


class Supervisor:
    """Runs one task of this host, from its admission to its saved end."""

    def __init__(
        self,
        task: Task,
        engine: Engine,
        proc: TaskProcess | None = None,
        turn: asyncio.Future[bool] | None = None,
    ) -> None:
        self.task = task  # the engine's live view of the task
        self.engine = engine
        self.proc = proc  # given when adopted; else spawned by `run`
        self.turn = turn  # when queued: resolves once it may start (False: removed)
        self.follower = LogFollower(task.log_path or os.devnull)
        self.stop_request: StopRequest | None = None
        self.stopping: asyncio.Future[Any] | None = None  # `stop`'s SIGTERM/SIGKILL, under way
        self.finishing = False
        self.watched_since = time.monotonic()  # the progress poll's first read waits an interval
        loop = asyncio.get_running_loop()
        self.started: asyncio.Future[None] = loop.create_future()  # running, or ended before
        self.ended: asyncio.Future[Task] = loop.create_future()

    @property
    def token(self) -> str:
        return self.task.id

    @property
    def running(self) -> bool:
        return self.proc is not None and not self.ended.done()

    async def run(self) -> None:
        try:
            if self.proc is None and not await self._admitted():
                return
            if self.proc is None and not self._spawn():
                return
            self.engine.watch(self)
            outcome = await self._wait_for_exit()
            await self._finish(outcome)
        finally:
            self.engine.unwatch(self)
            if not self.started.done():
                self.started.set_result(None)
            if not self.ended.done():  # stopped watching (the host is leaving)
                self.ended.set_result(self.task)

    # -- starting ---------------------------------------------------------------------

    async def _admitted(self) -> bool:
        if self.turn is not None and not await self.turn:
            return False  # halted while queued: `end_unstarted` already ended it
        if self.stop_request is not None:  # halted between its turn and its start
            self.end_unstarted(self.stop_request.reason, self.stop_request.error)
            self.engine.queue.leave(self.token)
            return False
        if self.turn is not None:
            fresh = self.engine.store.get(self.token)
            if fresh is None or fresh.status is not TaskStatus.QUEUED:
                # Halted (or purged) meanwhile, possibly by another Neovim.
                if fresh is not None:
                    self.task = fresh
                    self.engine.emit("finished", fresh)
                self.ended.set_result(self.task)
                self.engine.queue.leave(self.token)
                return False
        return True

    def _spawn(self) -> bool:
        task, engine = self.task, self.engine
        try:
            proc = spawn(
                task.command,
                task.log_dir,
                cwd=task.cwd,
                env=task.env,
                nice=int(engine.config.nice),
                task_id=task.id,
            )
        except SpawnError as exc:
            transition(task, TaskStatus.FAILED, reason=Reason.SPAWN_ERROR)
            task.error = task.summary = str(exc)
            engine.save(task, ("status", "reason", "ended_at", "error", "summary"))
            self._ended("finished")
            engine.queue.leave(task.id)
            return False
        transition(task, TaskStatus.RUNNING)
        task.pid, task.pid_start = proc.pid, proc.start_token
        self.proc = proc
        self.watched_since = time.monotonic()
        engine.save(task, ("status", "started_at", "pid", "pid_start"))
        engine.emit("started", task)
        self.started.set_result(None)
        return True

    def end_unstarted(self, reason: str, error: str | None = None) -> None:
        """A queued task that will never start: cancelled (or failed, for a
        failing reason), saved, "finished"."""
        status = TaskStatus.FAILED if reason in Reason.FAILING_STOPS else TaskStatus.CANCELLED
        transition(self.task, status, reason=reason)
        self.task.error = error
        self.engine.save(
            self.task, ("status", "reason", "ended_at", "error"), expect={"status": "queued"}
        )
        self._ended("finished")

    def _ended(self, kind: str) -> None:
        self.engine.emit(kind, self.task)
        if not self.started.done():
            self.started.set_result(None)
        if not self.ended.done():
            self.ended.set_result(self.task)

    # -- running ----------------------------------------------------------------------

    def _time_left(self) -> float | None:
        if not self.task.timeout:
            return None
        elapsed = time.time() - (self.task.started_at or time.time())
        return max(0.0, self.task.timeout - elapsed)

    async def _wait_for_exit(self) -> Outcome:
        assert self.proc is not None
        exited = asyncio.ensure_future(self.proc.wait())
        try:
            try:
                return await asyncio.wait_for(asyncio.shield(exited), self._time_left())
            except asyncio.TimeoutError:
                self.stop(Reason.TIMEOUT, f"timed out after {self.task.timeout:g}s")
                return await exited
        finally:
            if not exited.done():
                exited.cancel()  # the host stops watching; the process runs on

    def request_stop(self, reason: str, error: str | None = None) -> bool:
        """Record why the task is being stopped (the first reason wins)."""
        if self.stop_request is not None or self.finishing:
            return False
        self.stop_request = StopRequest(reason, error)
        return True

    def stop(self, reason: str, error: str | None = None) -> None:
        """Stop the task: SIGTERM its group, SIGKILL after `halt_grace`."""
        if self.request_stop(reason, error) and self.proc is not None:
            grace = float(self.engine.config.halt_grace)
            self.stopping = self.engine.background(self.proc.terminate(grace))

    # -- ending -----------------------------------------------------------------------

    async def _finish(self, outcome: Outcome) -> None:
        self.finishing = True
        self.engine.unwatch(self)
        proc, engine = self.proc, self.engine
        assert proc is not None
        if self.stopping is not None:
            # a stopped task ends once its whole group is gone, not only its leader
            await asyncio.wait([self.stopping])
        # Stray background processes of the command ("no orphans"): a child's
        # group got SIGTERM when it was reaped; finish the job off in the background.
        if proc.is_child and group_alive(proc.pgid):
            engine.background(terminate_group(proc.pgid, float(engine.config.halt_grace)))
        limit = int(engine.config.max_log_bytes or 0)
        if cut_at_exit(self.task, limit) and self.stop_request is None:
            # a flood that ended before the watch's first look
            self.stop_request = StopRequest(Reason.LOG_LIMIT, LIMIT_ERROR.format(limit=limit))
        summary = await summarize(self.task, self.follower, engine.tuning)
        task = self.task
        settle(task, outcome, self.stop_request)
        task.summary = combine_summary(task.status, summary.out, summary.err)
        take_counts(task, self.follower)
        if not engine.save(task, FINAL_FIELDS, expect={"status": TaskStatus.RUNNING.value}):
            # Another instance already decided (e.g. halted it from its Neovim):
            # keep its status, add what only we know.
            theirs = engine.store.get(task.id)
            if theirs is not None:
                changed = keep_their_verdict(theirs, task)
                if changed:
                    engine.save(theirs, changed)
                self.task = task = theirs
        self._ended("finished")
        engine.queue.leave(task.id)
        if not summary.exact:
            counted = await count_rest(task, self.follower)
            if counted is not None and engine.save(counted, ("lines", "progress", "progress_text")):
                engine.emit("updated", counted)
