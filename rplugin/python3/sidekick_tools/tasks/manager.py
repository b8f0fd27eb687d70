"""TaskManager: the task engine's public face (the host, the tools, the MCP face).

It stores new tasks, admits them (`queue.py`), gives each a supervisor
coroutine (`supervisor.py`), and answers questions about tasks. What happens
during a task's life is in the lifecycle behaviours: `progress_poll.py`,
`log_limit.py`, `on_exit_summarize.py`, `recovery.py`, `retention.py`.

Events (`subscribe`): "queued", "started", "progress" (percent or text of the
last `[PROGRESS]` marker changed), "finished" (terminal), "updated" (anything
else worth redrawing: queue position moved, task adopted during recovery, a
finished task's exact line count filled in, another instance's verdict).

Plain asyncio on the host's single loop; nothing here blocks it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..config import TasksConfig
from . import recovery
from .groups import KILL_WAIT
from .log_limit import LogLimitWatch
from .model import ACTIVE, Reason, Task, TaskStatus, is_token
from .output import FilterPattern, compile_filter, read_new
from .output_filter import matching_lines, region_lines
from .process import TaskProcess
from .progress_poll import ProgressPoll
from .queue import TaskQueue
from .remote_halt import halt_unwatched
from .retention import Retention
from .store import BufferedStore, StatusFilter, StoreError, TaskQuery, TaskStore
from .supervisor import Supervisor
from .tuning import EngineTuning

log = logging.getLogger(__name__)

EVENT_KINDS = ("queued", "started", "progress", "finished", "updated")
STDERR_KEY = "\x1fstderr\x1f"  # read-offset key suffix for the stderr stream
OTHER_INSTANCE_POLL = 0.5  # waiting for a task this host does not supervise


@dataclass
class TaskSpec:
    """What to run. `timeout`: None uses `tasks.default_timeout`, <= 0 means none."""

    tool: str
    command: str
    label: str = ""
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    chat: str = ""
    call_id: str = ""


@dataclass(frozen=True)
class TaskEvent:
    kind: str  # one of EVENT_KINDS
    task: Task  # a snapshot; mutating it changes nothing


class TaskNotFound(KeyError):
    """No task with this token (never existed, purged, or not a token at all)."""

    def __str__(self) -> str:
        return f"Task ID not found or expired: {self.args[0] if self.args else '?'}"


@dataclass
class OutputRead:
    """Result of `TaskManager.read_output()`."""

    token: str
    status: str
    text: str  # new output (ANSI stripped), or the matching lines when filtered
    offset: int  # where this read started
    next_offset: int  # where the next unfiltered read will start
    more: bool  # more new output is already waiting (max_bytes reached)
    filtered: bool
    matches: list[str] | None  # matching lines (filtered reads only)
    progress: int | None
    progress_text: str | None
    lines: int  # lines seen so far in the whole log

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class TaskManager:
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
        self.store = store if isinstance(store, BufferedStore) else BufferedStore(store)
        self.store.retry_first = self.tuning.store_retry
        self.store.on_fallback = on_store_fallback
        self.store.on_conflict = lambda theirs: self.emit("updated", theirs)
        self.state_dir = os.path.abspath(os.path.expanduser(state_dir))
        self.tasks_dir = os.path.join(self.state_dir, "tasks")
        self.owner = owner
        self.config = config or TasksConfig()
        self.queue = TaskQueue(self.config.max_concurrent, self._queue_moved)
        self.progress = ProgressPoll(self)
        self.log_limit = LogLimitWatch(self)
        self.retention = Retention(self)
        self._supervisors: dict[str, Supervisor] = {}
        self._runs: dict[str, asyncio.Future[Any]] = {}  # each supervisor's coroutine
        self._subscribers: list[Callable[[TaskEvent], None]] = []
        self._background: set[asyncio.Future[Any]] = set()
        self._detached: list[TaskProcess] = []  # left running at shutdown: kept referenced
        self._closed = False

    def configure(self, config: TasksConfig) -> None:
        """`setup()` called again: new settings apply at once (a higher
        concurrency limit starts queued tasks)."""
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

    def _launch(self, sup: Supervisor) -> None:
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

    def adopt(self, task: Task, proc: TaskProcess) -> None:
        """Supervise a running task an earlier host started (recovery)."""
        self.store.track(task)
        self.queue.adopt(task.id)
        self._launch(Supervisor(task, self, proc=proc))

    def log_dir_for(self, token: str) -> str:
        if not is_token(token):
            raise ValueError(f"not a task token: {token!r}")
        return os.path.join(self.tasks_dir, token)

    def _ensure_tasks_dir(self) -> None:
        for d in (self.state_dir, self.tasks_dir):
            if not os.path.isdir(d):
                os.makedirs(d, mode=0o700, exist_ok=True)
                os.chmod(d, 0o700)

    # -- starting -------------------------------------------------------------------------

    async def submit(self, spec: TaskSpec) -> Task:
        """Store a new task and start it, or queue it when `max_concurrent` run."""
        if self._closed:
            raise RuntimeError("task manager is shut down")
        self._ensure_tasks_dir()
        timeout = self.config.default_timeout if spec.timeout is None else spec.timeout
        task = Task(
            tool=spec.tool,
            label=spec.label or spec.command,
            command=spec.command,
            cwd=os.path.abspath(os.path.expanduser(spec.cwd)) if spec.cwd else os.getcwd(),
            env={str(k): str(v) for k, v in (spec.env or {}).items()},
            status=TaskStatus.QUEUED,
            owner=self.owner,
            chat=spec.chat,
            call_id=spec.call_id,
            created_at=time.time(),
            timeout=float(timeout) if timeout is not None and timeout > 0 else None,
        )
        task = self.store.insert(task, reserve=self._reserve_log_dir)
        self.store.track(task)
        queued = not self.queue.enter_now(task.id)
        sup = Supervisor(task, self, turn=self.queue.wait_turn(task.id) if queued else None)
        self._launch(sup)
        if queued:
            self.emit("queued", task)
        else:
            await asyncio.shield(sup.started)
        return self.get(task.id) or sup.task

    def _reserve_log_dir(self, candidate: Task) -> bool:
        """Claim the token's log directory; an existing one (another host's) means another token."""
        path = self.log_dir_for(candidate.id)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            return False
        candidate.log_dir = path
        return True

    # -- questions ------------------------------------------------------------------------

    def _with_live_lines(self, task: Task | None) -> Task | None:
        sup = self._supervisors.get(task.id) if task is not None else None
        if task is not None and sup is not None:
            task.lines = max(task.lines, sup.follower.lines)
        return task

    def get(self, token: str) -> Task | None:
        """The task, or None (never for a malformed token: no path is built from it)."""
        if not is_token(token):
            return None
        return self._with_live_lines(self.store.get(token))

    def find_by_call(self, chat: str, call_id: str) -> Task | None:
        """The newest task started by call `call_id` of chat `chat` (exactly once after a crash)."""
        return self._with_live_lines(self.store.find_by_call(chat, call_id))

    def list(
        self,
        status: StatusFilter = None,
        owner: str | None = None,
        limit: int | None = 100,
        offset: int = 0,
        chats: Iterable[str] | None = None,
    ) -> list[Task]:
        tasks = self.store.list(TaskQuery.of(status, owner, chats), limit, offset)
        return [t for t in map(self._with_live_lines, tasks) if t is not None]

    def count(
        self,
        status: StatusFilter = None,
        owner: str | None = None,
        chats: Iterable[str] | None = None,
    ) -> int:
        return self.store.count(TaskQuery.of(status, owner, chats))

    def queue_position(self, token: str) -> int | None:
        """How many queued tasks are ahead of `token` (None: not queued here)."""
        return self.queue.position(token)

    def queued_tokens(self) -> list[str]:
        """This instance's queued tasks, first to start first."""
        return self.queue.tokens()

    @property
    def running_count(self) -> int:
        return self.queue.running_count

    @property
    def watched(self) -> frozenset[str]:
        """The tasks whose process or log this host still follows."""
        return frozenset(self._supervisors)

    def mark_read(self, token: str) -> bool:
        """The task's result reached the user/LLM (protects it from early purge)."""
        return is_token(token) and self.store.mark_read(token)

    def mark_delivered(self, token: str) -> bool:
        """The call's result was written into its chat: never run the call again."""
        return is_token(token) and self.store.mark_delivered(token)

    # -- waiting and halting -------------------------------------------------------------------

    async def wait(self, token: str, timeout: float | None) -> Task:
        """The task once terminal, or as it is when `timeout` seconds elapse.
        Tasks of other instances are followed through the store. Raises TaskNotFound."""
        sup = self._supervisors.get(token) if is_token(token) else None
        if sup is not None:
            limit = None if timeout is None else max(0.0, timeout)
            try:
                await asyncio.wait_for(asyncio.shield(sup.ended), limit)
            except asyncio.TimeoutError:
                pass
        task = self.get(token)
        if task is None:
            raise TaskNotFound(token)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while task.status in ACTIVE and sup is None:
            if deadline is not None and loop.time() >= deadline:
                break
            left = OTHER_INSTANCE_POLL if deadline is None else deadline - loop.time()
            await asyncio.sleep(max(0.0, min(OTHER_INSTANCE_POLL, left)))
            task = self.get(token) or task
        return task

    async def halt(self, token: str, reason: str = Reason.CANCELLED) -> Task:
        """Cancel a task: a queued one at once; a running one by SIGTERM to its
        process group, SIGKILL after `halt_grace`. Returns the final task.
        `reason=Reason.TIMEOUT` ends it failed/timeout instead of cancelled.
        Works on tasks of other instances too (through the store)."""
        sup = self._supervisors.get(token) if is_token(token) else None
        if sup is not None and not sup.ended.done():
            if self.queue.remove(token):
                sup.end_unstarted(reason)
                return self.get(token) or sup.task
            sup.stop(reason)
            # Bounded: a process stuck in the kernel (state D) survives SIGKILL.
            limit = float(self.config.halt_grace) + KILL_WAIT + 5.0
            try:
                await asyncio.wait_for(asyncio.shield(sup.ended), limit)
            except asyncio.TimeoutError:
                log.warning("task %s: still not gone %.0fs after halt", token, limit)
            return self.get(token) or sup.task
        task = self.get(token)
        if task is None:
            raise TaskNotFound(token)
        if task.terminal:
            return task
        if await halt_unwatched(self.store, task, reason, float(self.config.halt_grace)):
            self.emit("finished", task)
        return self.get(token) or task

    # -- output ---------------------------------------------------------------------------------

    async def read_output(
        self,
        token: str,
        chat: str,
        filter: FilterPattern | None = None,
        max_bytes: int = 64 * 1024,
        *,
        stream: str = "stdout",
        scan_bytes: int = 8 << 20,
    ) -> OutputRead:
        """Output of `token` that `chat` has not read yet, plus progress.

        Each chat has its own offset (per stream). An unfiltered read returns
        up to `max_bytes` of complete lines after it and advances it. A filtered
        read returns the matching lines of the unread region (scanning at most
        `scan_bytes`, returning at most `max_bytes` of matches) and does NOT
        advance the offset: the filter never consumes the lines it hides. The
        regex runs in a separate process under `tuning.filter_time_limit`.
        Raises TaskNotFound, or ValueError for a bad or too slow regex.
        """
        task = self.get(token)
        if task is None:
            raise TaskNotFound(token)
        rx = compile_filter(filter) if filter is not None else None
        path = task.stderr_path if stream == "stderr" else task.log_path
        key = chat + STDERR_KEY if stream == "stderr" else chat
        start = self.store.get_read_offset(token, key)
        complete = not task.terminal
        loop = asyncio.get_running_loop()
        text, nxt, more, matches = "", start, False, None
        if path is not None and rx is None:
            chunk = await loop.run_in_executor(
                None, lambda: read_new(path, start, max_bytes, complete_lines=complete)
            )
            text, nxt, more = chunk.text, chunk.next_offset, chunk.more
            if nxt != start:
                self.store.set_read_offset(token, key, nxt)
            if task.terminal and not more and stream == "stdout":
                self.store.mark_read(token)
        elif path is not None and rx is not None:
            lines, unread = await loop.run_in_executor(
                None, region_lines, path, start, scan_bytes, complete
            )
            limit = self.tuning.filter_time_limit
            matches, cut = await matching_lines(lines, rx, max_bytes, limit)
            text, more = "\n".join(matches), cut or unread
        live = self._with_live_lines(task)
        return OutputRead(
            token=token,
            status=task.status.value,
            text=text,
            offset=start,
            next_offset=nxt,
            more=more,
            filtered=rx is not None,
            matches=matches,
            progress=task.progress,
            progress_text=task.progress_text,
            lines=live.lines if live is not None else task.lines,
        )

    # -- life of the engine ------------------------------------------------------------------

    async def recover(self) -> None:
        """At host start: take stock of unfinished tasks (`recovery.py`), purge
        old ones, and purge every `purge_interval` from now on."""
        self._ensure_tasks_dir()
        await recovery.recover(self)
        await self.purge()
        self.retention.start()

    async def purge(self, now: float | None = None) -> list[str]:
        """Remove finished tasks past retention: rows and log directories."""
        return await self.retention.purge(now)

    async def shutdown(self, kill: bool) -> None:
        """Stop the engine (Neovim is exiting). Queued tasks are cancelled.

        kill=True: this instance's running tasks are halted, quickly: SIGTERM
        to every group at once, SIGKILL after `exit_grace` seconds.
        kill=False: they keep running; a later host recovers them.
        """
        self._closed = True
        self.queue.closed = True
        self.retention.stop()
        for token in self.queue.tokens():
            sup = self._supervisors[token]
            self.queue.remove(token)
            sup.end_unstarted(Reason.CANCELLED, "Neovim exited before the task started")
        running = [s for s in self._supervisors.values() if s.running]
        if kill and running:
            grace = min(float(self.config.halt_grace), self.tuning.exit_grace)
            for sup in running:
                sup.request_stop(Reason.CANCELLED, "halted because Neovim exited")
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
