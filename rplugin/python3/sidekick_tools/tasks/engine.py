"""TaskEngine: what runs this host's tasks. The store it writes (through
`BufferedStore`), the settings, the admission queue, one `Supervisor` per task
and the lifecycle behaviours watching them (`progress_poll`, `log_limit`,
`retention`), and the events they emit.

Events (`subscribe`): "queued", "started", "progress" (percent or text of the
last `[PROGRESS]` marker changed), "finished" (terminal), "updated" (anything
else worth redrawing: queue position moved, task adopted during recovery, a
finished task's exact line count filled in, another instance's verdict).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..config import TasksConfig, tasks_config
from .log_limit import LogLimitWatch
from .model import Reason, Task, is_token
from .process import TaskProcess
from .progress_poll import ProgressPoll
from .queue import TaskQueue
from .retention import Retention
from .spawn import lower_own_session
from .store import BufferedStore, StoreError, TaskStore
from .supervisor import Supervisor
from .tuning import EngineTuning

log = logging.getLogger(__name__)

EVENT_KINDS = ("queued", "started", "progress", "finished", "updated")


@dataclass(frozen=True)
class TaskEvent:
    kind: str  # one of EVENT_KINDS
    task: Task  # a snapshot; mutating it changes nothing


class TaskEngine:
    """What runs this host's tasks: the store it writes, the settings, the
    queue, one supervisor per task and the behaviours watching them, events.
    `TaskManager` is the public face on top of it."""

    def __init__(
        self,
        store: TaskStore,
        state_dir: str,
        owner: str,
        config: TasksConfig | None = None,
        *,
        tuning: EngineTuning | None = None,
        on_store_fallback: Callable[[str], None] | None = None,
    ) -> None:
        self.tuning = tuning or EngineTuning()
        if not isinstance(store, BufferedStore):
            store = BufferedStore(store, retry_first=self.tuning.store_retry)
        self.store = store
        self.store.on_fallback = on_store_fallback
        self.store.on_conflict = lambda theirs: self.emit("updated", theirs)
        self.state_dir = os.path.abspath(os.path.expanduser(state_dir))
        self.tasks_dir = os.path.join(self.state_dir, "tasks")
        self.owner = owner
        self.config = config or tasks_config()
        lower_own_session(int(self.config.nice))
        self.queue = TaskQueue(self.config.max_concurrent, self._queue_moved)
        self.progress = ProgressPoll(self)
        self.log_limit = LogLimitWatch(self)
        self.retention = Retention(self)
        self._supervisors: dict[str, Supervisor] = {}
        self._runs: dict[str, asyncio.Future[Any]] = {}  # each supervisor's coroutine
        self._subscribers: list[Callable[[TaskEvent], None]] = []
        self._background: set[asyncio.Future[Any]] = set()
        self._detached: list[TaskProcess] = []  # left running at shutdown: kept referenced
        self.closed = False

    def configure(self, config: TasksConfig) -> None:
        """`setup()` called again: new settings apply at once (a higher
        concurrency limit starts queued tasks)."""
        if int(config.nice) != int(self.config.nice):
            lower_own_session(int(config.nice))
        self.config = config
        self.queue.set_limit(config.max_concurrent)

    def settings(self) -> dict[str, Any]:
        """The engine settings in force."""
        c = self.config
        return {
            "max_concurrent": self.queue.limit,
            "default_timeout": c.default_timeout,
            "halt_grace": float(c.halt_grace),
            "retention": {"completed": c.retention.completed, "failed": c.retention.failed},
            "nice": int(c.nice),
            "max_log_bytes": int(c.max_log_bytes),
        }

    # -- events and the supervisors' engine ---------------------------------------------

    def subscribe(self, callback: Callable[[TaskEvent], None]) -> Callable[[], None]:
        """Call `callback(event)` on every event; returns an unsubscribe function."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def emit(self, kind: str, task: Task) -> None:
        event = TaskEvent(kind, task.copy())
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception:  # a broken subscriber must not break the engine
                log.exception("task event subscriber failed")

    def save(self, task: Task, fields: Iterable[str], expect: dict[str, Any] | None = None) -> bool:
        try:
            return self.store.update(task, list(fields), expect=expect)
        except StoreError:
            log.exception("task %s: could not save", task.id)
            return False

    def watch(self, sup: Supervisor) -> None:
        self.progress.add(sup)
        self.log_limit.add(sup)

    def unwatch(self, sup: Supervisor) -> None:
        self.progress.discard(sup)
        self.log_limit.discard(sup)

    def background(self, work: Awaitable[Any]) -> asyncio.Future[Any]:
        fut = asyncio.ensure_future(work)
        self._background.add(fut)
        fut.add_done_callback(self._background_done)
        return fut

    def _background_done(self, fut: asyncio.Future[Any]) -> None:
        self._background.discard(fut)
        if not fut.cancelled() and fut.exception() is not None:
            log.error("task engine background job failed", exc_info=fut.exception())

    def launch(self, sup: Supervisor) -> None:
        """Run `sup` (its whole task) in the background."""
        token = sup.token
        self._supervisors[token] = sup

        def done(run: asyncio.Future[Any]) -> None:
            if self._supervisors.get(token) is sup:
                del self._supervisors[token]
                del self._runs[token]
                self.store.untrack(token)

        self._runs[token] = self.background(sup.run())
        self._runs[token].add_done_callback(done)

    def _queue_moved(self, waiting: list[str]) -> None:
        for token in waiting:
            sup = self._supervisors.get(token)
            if sup is not None:
                self.emit("updated", sup.task)

    def supervises(self, token: str) -> bool:
        return token in self._supervisors

    def supervisor(self, token: str) -> Supervisor | None:
        return self._supervisors.get(token) if is_token(token) else None

    @property
    def running_count(self) -> int:
        return self.queue.running_count

    @property
    def watched(self) -> frozenset[str]:
        """The tasks whose process or log this host still follows."""
        return frozenset(self._supervisors)

    def adopt(self, task: Task, proc: TaskProcess) -> None:
        """Supervise a running task an earlier host started (recovery)."""
        self.store.track(task)
        self.queue.adopt(task.id)
        self.launch(Supervisor(task, self, proc=proc))

    def log_dir_for(self, token: str) -> str:
        if not is_token(token):
            raise ValueError(f"not a task token: {token!r}")
        return os.path.join(self.tasks_dir, token)

    def ensure_tasks_dir(self) -> None:
        for d in (self.state_dir, self.tasks_dir):
            if not os.path.isdir(d):
                os.makedirs(d, mode=0o700, exist_ok=True)
                os.chmod(d, 0o700)

    async def stop_supervising(
        self, kill: bool | Callable[[Task], bool], owner: str = "Neovim"
    ) -> None:
        """The engine stops: queued tasks are cancelled; running ones halted
        (kill, or the tasks it is true of) with SIGKILL `exit_grace` after
        SIGTERM, or left running."""
        self.closed = True
        self.queue.closed = True
        for token in self.queue.tokens():
            sup = self._supervisors[token]
            self.queue.remove(token)
            sup.end_unstarted(Reason.CANCELLED, f"{owner} exited before the task started")
        halts = kill if callable(kill) else (lambda task: bool(kill))
        running = [s for s in self._supervisors.values() if s.running and halts(s.task)]
        if running:
            grace = min(float(self.config.halt_grace), self.tuning.exit_grace)
            for sup in running:
                sup.request_stop(Reason.CANCELLED, f"halted because {owner} exited")
            await asyncio.gather(
                *(s.proc.terminate(grace) for s in running if s.proc is not None),
                return_exceptions=True,
            )
            await asyncio.wait([s.ended for s in running], timeout=1.0)
        for token, sup in list(self._supervisors.items()):
            if sup.running:  # kill=False, or stuck: stop watching it, leave it running
                if sup.proc is not None:
                    self._detached.append(sup.proc)
                self._runs[token].cancel()
        self.progress.stop()
        self.log_limit.stop()
        pending = [f for f in self._background if not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=1.0)
        if not self.store.flush():
            log.warning("%d task writes never reached the database", self.store.pending_writes)
