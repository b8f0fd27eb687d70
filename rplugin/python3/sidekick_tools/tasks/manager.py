"""TaskManager: the task engine's public face (the host, the tools, the MCP face).

It stores new tasks and hands each to a supervisor (`engine.py`,
`supervisor.py`); it answers questions about tasks, waits for them, halts
them and reads their output. What happens during a task's life is in the
lifecycle behaviours: `progress_poll.py`, `log_limit.py`,
`on_exit_summarize.py`, `recovery.py`, `retention.py`.

Plain asyncio on the host's single loop; nothing here blocks it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from . import recovery
from .engine import EVENT_KINDS, TaskEngine, TaskEvent
from .groups import KILL_WAIT
from .identity import owner_gone
from .model import ACTIVE, Reason, Task, TaskStatus, is_token
from .output import FilterPattern
from .output_reads import STDERR_KEY, OutputRead, ReadRequest, read_output
from .remote_halt import halt_unwatched
from .store import StatusFilter, TaskQuery
from .supervisor import Supervisor

log = logging.getLogger(__name__)

__all__ = [
    "EVENT_KINDS",
    "STDERR_KEY",
    "OutputRead",
    "TaskEvent",
    "TaskManager",
    "TaskNotFound",
    "TaskSpec",
]

OTHER_INSTANCE_POLL = 0.5  # waiting for a task this host does not supervise


@dataclass
class TaskSpec:
    """What to run. `timeout`: None uses `tasks.default_timeout`, <= 0 means none."""

    tool: str
    command: str
    label: str = ""
    call_command: str = ""  # the call's own text when `command` is a checked, hardened form
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    chat: str = ""
    call_id: str = ""


class TaskNotFound(KeyError):
    """No task with this token (never existed, purged, or not a token at all)."""

    def __str__(self) -> str:
        return f"Task ID not found or expired: {self.args[0] if self.args else '?'}"


class TaskManager(TaskEngine):
    """The public API: submit, get/list/count, wait, halt, read_output, recover,
    purge, shutdown (and, from the engine, subscribe, configure, settings)."""

    _adopting: asyncio.Future[None] | None = None  # recovery run for a listed orphan
    _stocktaking: asyncio.Lock | None = None  # one recovery at a time

    async def _take_stock(self) -> None:
        """`recovery.recover`, never two at once: the start-up's and a list's or a
        wait's would both adopt the same dead owner's task."""
        if self._stocktaking is None:
            self._stocktaking = asyncio.Lock()
        async with self._stocktaking:
            await recovery.recover(self)

    # -- starting -------------------------------------------------------------------------

    async def submit(self, spec: TaskSpec) -> Task:
        """Store a new task and start it, or queue it when `max_concurrent` run."""
        if self.closed:
            raise RuntimeError("task manager is shut down")
        self.ensure_tasks_dir()
        timeout = self.config.default_timeout if spec.timeout is None else spec.timeout
        task = Task(
            tool=spec.tool,
            label=spec.label or spec.call_command or spec.command,
            command=spec.command,
            call_command=spec.call_command if spec.call_command != spec.command else "",
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
        self.launch(sup)
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
        sup = self.supervisor(task.id) if task is not None else None
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
        chat_prefix: str | None = None,
    ) -> list[Task]:
        query = TaskQuery.of(status, owner, chats, chat_prefix)
        tasks = self.store.list(query, limit, offset)
        return [t for t in map(self._with_live_lines, tasks) if t is not None]

    def count(
        self,
        status: StatusFilter = None,
        owner: str | None = None,
        chats: Iterable[str] | None = None,
        chat_prefix: str | None = None,
    ) -> int:
        return self.store.count(TaskQuery.of(status, owner, chats, chat_prefix))

    def queue_position(self, token: str) -> int | None:
        """How many queued tasks are ahead of `token` (None: not queued here)."""
        return self.queue.position(token)

    def queued_tokens(self) -> list[str]:
        """This instance's queued tasks, first to start first."""
        return self.queue.tokens()

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
        sup = self.supervisor(token)
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
        looked = False  # for an owner that died (once a call: recovery is not free)
        while task.status in ACTIVE and sup is None:
            if not looked and await self.adopt_if_orphaned(task):
                task, sup = self.get(token) or task, self.supervisor(token)
                if sup is not None:  # adopted: followed as this instance's own
                    left = None if deadline is None else max(0.0, deadline - loop.time())
                    return await self.wait(token, left)
                looked = True
                continue
            if deadline is not None and loop.time() >= deadline:
                break
            left = OTHER_INSTANCE_POLL if deadline is None else deadline - loop.time()
            await asyncio.sleep(max(0.0, min(OTHER_INSTANCE_POLL, left)))
            task = self.get(token) or task
        return task

    def adopt_orphans_among(self, tasks: list[Task]) -> None:
        """Tasks just listed (the tasks window asks every few seconds): when one
        of another instance has lost its owner, recovery runs soon, one at a
        time, so that the list shows it go on under this instance, or end,
        instead of `running` for ever."""
        if self._adopting is not None and not self._adopting.done():
            return
        if self._stocktaking is not None and self._stocktaking.locked():
            return  # stock is being taken (at start-up): it sees them
        gone: dict[str, bool] = {}  # each owner looked at once
        if any(self._orphaned(task, gone) for task in tasks):
            self._adopting = asyncio.ensure_future(self._take_stock())

    async def adopt_if_orphaned(self, task: Task) -> bool:
        """A task of another instance whose owner died (a server killed with -9)
        stays `running` in the store until someone takes stock: when its owner is
        gone, recovery runs here now (the task is adopted, or its recorded end
        written), as at start-up. True when it ran."""
        if not self._orphaned(task, {}):
            return False
        await self._take_stock()
        return True

    def _orphaned(self, task: Task, gone: dict[str, bool]) -> bool:
        """`task` is unfinished, another instance's, and that owner is gone."""
        return task.status in ACTIVE and task.owner != self.owner and owner_gone(task.owner, gone)

    async def halt(self, token: str, reason: str = Reason.CANCELLED) -> Task:
        """Cancel a task: a queued one at once; a running one by SIGTERM to its
        process group, SIGKILL after `halt_grace`. Returns the final task.
        `reason=Reason.TIMEOUT` ends it failed/timeout instead of cancelled.
        Works on tasks of other instances too (through the store)."""
        sup = self.supervisor(token)
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
        limit = self.tuning.filter_time_limit
        ask = ReadRequest(chat, filter, max_bytes, stream, scan_bytes, limit)
        return await read_output(self.store, task, ask)

    # -- life of the engine ------------------------------------------------------------------

    async def recover(self) -> None:
        """At host start: take stock of unfinished tasks (`recovery.py`), purge
        old ones, and purge every `purge_interval` from now on."""
        self.ensure_tasks_dir()
        await self._take_stock()
        await self.purge()
        self.retention.start()

    async def purge(self, now: float | None = None) -> list[str]:
        """Remove finished tasks past retention: rows and log directories."""
        return await self.retention.purge(now)

    async def shutdown(self, kill: bool | Callable[[Task], bool], owner: str = "Neovim") -> None:
        """Stop the engine (its `owner`, Neovim or the MCP server, is exiting).
        Queued tasks are cancelled.

        kill=True: this instance's running tasks are halted, quickly: SIGTERM
        to every group at once, SIGKILL after `exit_grace` seconds.
        kill=False: they keep running; a later host recovers them.
        A function: the running tasks it is true of are halted
        (`Config.halts_on_exit`), the others keep running.
        """
        self.retention.stop()
        await self.stop_supervising(kill, owner)
