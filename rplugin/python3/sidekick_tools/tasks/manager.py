"""TaskManager: queue, run, watch, halt and recover background tasks.

Plain asyncio on the host's single event loop; nothing here blocks it:
spawning is one fork/exec, SQLite calls are short transactions, process exits
arrive through pidfds (or a light timer), and log files are only read in
bounded pieces, large scans in the loop's default executor.

Life cycle (see model.transition): submit() stores a `queued` task and starts
it at once when fewer than `max_concurrent` of this instance's tasks run,
else it waits in a FIFO queue. A started task is `running` until its
supervisor exits: `completed` (exit 0), `failed` (non-zero exit, signal,
timeout, spawn error) or `cancelled` (halt).

Events (`subscribe`): "queued", "started", "progress" (percent or text of the
last `[PROGRESS]` marker changed), "finished" (terminal), "updated" (anything
else worth redrawing: queue position moved, task adopted during recovery, a
finished task's exact line count and last progress filled in).

A running task's log is read live once per `poll_interval`, starting one
interval after the task started: a task shorter than that costs no reading
while it runs (reading competes for the CPU with the task itself), only one
read at its exit.

The exit is reported first: "finished" never waits for reading a large
unread log (see `_summarize_at_exit`); the line count follows in "updated".

Tasks run `nice` (default 10) steps below the host's own priority, so that
floods of output compete less with the editor for the CPU.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..text import decode
from . import runner
from .model import (
    ACTIVE,
    Reason,
    Task,
    TaskStatus,
    is_token,
    transition,
)
from .output import (
    FilterPattern,
    LogFollower,
    compile_filter,
    read_new,
    summarize_file,
    summarize_tail,
    summary_of,
    tail_bytes,
)
from .store import StatusFilter, StoreError, TaskStore, retention_pair

log = logging.getLogger(__name__)

EVENT_KINDS = ("queued", "started", "progress", "finished", "updated")
STDERR_KEY = "\x1fstderr\x1f"  # read-offset key suffix for the stderr stream


@dataclass
class TaskSpec:
    """What to run. `timeout`: None uses the manager's default, <= 0 means none."""

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
    """No task with this token (never existed, or purged)."""

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


@dataclass
class _Active:
    task: Task  # the manager's live view
    proc: runner.TaskProcess
    follower: LogFollower
    timeout_handle: asyncio.TimerHandle | None = None
    halt_reason: str | None = None
    halt_error: str | None = None
    finishing: bool = False
    # When we began watching it: its log is first read live one poll interval
    # later, so a task shorter than that is read once, at its exit.
    watched_since: float = field(default_factory=time.monotonic)


def _due_for_poll(acts: Iterable[_Active], now: float, interval: float) -> list[_Active]:
    """The running tasks whose log the live poll reads now: not finishing,
    watched for at least one interval."""
    return [a for a in acts if not a.finishing and now - a.watched_since >= interval]


# At a task's exit, unread log bytes up to this are read before "finished"
# (exact summary and line count at once); beyond it the summary comes from the tail.
FULL_SCAN_MAX = 8 << 20

# At a task's exit, logs with at most this many unread bytes are read on the event
# loop: for a short task, handing the read to a worker thread (and the result
# back) costs more than the read.
INLINE_READ_MAX = 64 << 10


def _unread_bytes(task: Task, follower: LogFollower) -> int:
    """Bytes of the task's stdout log not read yet (of stderr only a 4 KiB tail
    is ever read at exit)."""
    if not task.log_path:
        return 0
    try:
        return max(0, os.path.getsize(task.log_path) - follower.position)
    except OSError:
        return 0


def _stderr_summary(task: Task) -> str:
    if task.stderr_path:
        data = tail_bytes(task.stderr_path, 4096)
        if data.strip():
            return summary_of(decode(data), max_lines=20, max_bytes=2048)
    return ""


def _scan_for_summary(task: Task, follower: LogFollower) -> tuple[str, str]:
    """(stdout summary, stderr tail), reading the whole unread log. Worker thread."""
    _read_to_end(follower)
    out = summarize_file(task.log_path, follower) if task.log_path else ""
    return out, _stderr_summary(task)


def _read_to_end(follower: LogFollower) -> None:
    follower.poll()
    follower.finish()


def _summarize_at_exit(
    task: Task, follower: LogFollower, full_scan_max: int = FULL_SCAN_MAX
) -> tuple[str, str, bool]:
    """(stdout summary, stderr tail, exact) of a task whose process just ended.

    Worker thread. The exit must not wait for reading the whole log, so:

    - unread bytes (file size - what the follower read) <= `full_scan_max`:
      the follower reads them now; summary (`summarize_file`), line count and
      progress are exact (`exact` True);
    - more than that: only the file's last 64 KiB is read (`summarize_tail`:
      the last `[RESULT]` there, else the last `[RESULT]` the follower saw,
      else what follows the last `> ` line there, else the tail). `exact` is
      False: the follower's line count and progress are still partial and
      the caller completes them afterwards (`_read_to_end`). The summary is
      final either way: it is what the task's result shows.
    """
    if not task.log_path:
        return "", _stderr_summary(task), True
    if _unread_bytes(task, follower) <= full_scan_max:
        out, err = _scan_for_summary(task, follower)
        return out, err, True
    return summarize_tail(task.log_path, follower), _stderr_summary(task), False


def _combine_summary(status: TaskStatus, out: str, err: str) -> str:
    if not out.strip():
        return err
    if err and status is not TaskStatus.COMPLETED:
        return f"{out}\n\n[stderr]\n{err}"
    return out


def _poll_followers(followers: list[LogFollower], max_bytes: int) -> list[bool]:
    changed = []
    for f in followers:
        try:
            changed.append(f.poll(max_bytes))
        except OSError:
            changed.append(False)
    return changed


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


class TaskManager:
    def __init__(
        self,
        store: TaskStore,
        state_dir: str,
        owner: str,
        *,
        max_concurrent: int = 5,
        default_timeout: float | None = 1800,
        halt_grace: float = 5,
        retention: Any = (86400, 172800),
        poll_interval: float = 1.0,
        poll_max_bytes: int = 64 << 20,
        exit_grace: float = 0.5,
        purge_interval: float = 3600.0,
        nice: int = 10,
        full_scan_max: int = FULL_SCAN_MAX,
    ) -> None:
        self.store = store
        self.state_dir = os.path.abspath(os.path.expanduser(state_dir))
        self.tasks_dir = os.path.join(self.state_dir, "tasks")
        self.owner = owner
        self.configure(
            max_concurrent=max_concurrent,
            default_timeout=default_timeout,
            halt_grace=halt_grace,
            retention=retention,
            nice=nice,
        )
        self.poll_interval = poll_interval
        self.poll_max_bytes = poll_max_bytes
        self.exit_grace = exit_grace
        self.purge_interval = purge_interval
        self.full_scan_max = full_scan_max
        self._subscribers: list[Callable[[TaskEvent], None]] = []
        self._active: dict[str, _Active] = {}
        # Finished tasks whose log is still being counted (after "finished").
        self._counting: dict[str, LogFollower] = {}
        self._queue: collections.deque[str] = collections.deque()
        self._queued: dict[str, Task] = {}
        self._done: dict[str, asyncio.Future[None]] = {}
        self._bg: set[asyncio.Future[Any]] = set()
        self._poller: asyncio.Task[None] | None = None
        self._purge_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._detached: list[runner.TaskProcess] = []

    def configure(
        self,
        *,
        max_concurrent: int,
        default_timeout: float | None,
        halt_grace: float,
        retention: Any,
        nice: int,
    ) -> None:
        """The user's task settings; `setup()` called again changes them live.
        A higher concurrency limit starts queued tasks at once."""
        self.max_concurrent = max(1, int(max_concurrent))
        self.default_timeout = default_timeout
        self.halt_grace = float(halt_grace)
        self.retention = retention_pair(retention)
        # Niceness increment of new tasks (0: the host's own priority).
        self.nice = int(nice)
        if getattr(self, "_queue", None):
            self._pump()

    def settings(self) -> dict[str, Any]:
        """The settings in force (what `configure` was given, normalised)."""
        return {
            "max_concurrent": self.max_concurrent,
            "default_timeout": self.default_timeout,
            "halt_grace": self.halt_grace,
            "retention": {"completed": self.retention[0], "failed": self.retention[1]},
            "nice": self.nice,
        }

    # ------------------------------------------------------------------ events

    def subscribe(self, callback: Callable[[TaskEvent], None]) -> Callable[[], None]:
        """Call `callback(event)` on every event; returns an unsubscribe function."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def _emit(self, kind: str, task: Task) -> None:
        event = TaskEvent(kind, task.copy())
        for cb in list(self._subscribers):
            try:
                cb(event)
            except Exception:  # a broken subscriber must not break the engine
                log.exception("task event subscriber failed")

    # ------------------------------------------------------------------ helpers

    def _loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def _background(self, coro: Any) -> asyncio.Future[Any]:
        fut = asyncio.ensure_future(coro)
        self._bg.add(fut)

        def done(f: asyncio.Future[Any]) -> None:
            self._bg.discard(f)
            if not f.cancelled() and f.exception() is not None:
                log.error("task manager background job failed", exc_info=f.exception())

        fut.add_done_callback(done)
        return fut

    def _save(self, task: Task, fields: Iterable[str], expect: dict | None = None) -> bool:
        try:
            return self.store.update(task, list(fields), expect=expect)
        except StoreError:
            log.exception("task %s: could not save", task.id)
            return False

    def _resolve(self, token: str) -> None:
        fut = self._done.pop(token, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _future(self, token: str) -> asyncio.Future[None]:
        fut = self._done.get(token)
        if fut is None:
            fut = self._loop().create_future()
            self._done[token] = fut
        return fut

    def _timeout_for(self, spec: TaskSpec) -> float | None:
        value = self.default_timeout if spec.timeout is None else spec.timeout
        return float(value) if value is not None and value > 0 else None

    def log_dir_for(self, token: str) -> str:
        return os.path.join(self.tasks_dir, token)

    def _ensure_tasks_dir(self) -> None:
        for d in (self.state_dir, self.tasks_dir):
            if not os.path.isdir(d):
                os.makedirs(d, mode=0o700, exist_ok=True)
                os.chmod(d, 0o700)

    # ------------------------------------------------------------------ queries

    def _live_follower(self, token: str) -> LogFollower | None:
        act = self._active.get(token)
        return act.follower if act is not None else self._counting.get(token)

    def get(self, token: str) -> Task | None:
        task = self.store.get(token)
        follower = self._live_follower(token)
        if task is not None and follower is not None:
            task.lines = max(task.lines, follower.lines)
        return task

    def list(
        self,
        status: StatusFilter = None,
        owner: str | None = None,
        limit: int | None = 100,
        offset: int = 0,
        chats: Iterable[str] | None = None,
    ) -> list[Task]:
        tasks = self.store.list(status=status, owner=owner, limit=limit, offset=offset, chats=chats)
        for t in tasks:
            follower = self._live_follower(t.id)
            if follower is not None:
                t.lines = max(t.lines, follower.lines)
        return tasks

    def count(
        self,
        status: StatusFilter = None,
        owner: str | None = None,
        chats: Iterable[str] | None = None,
    ) -> int:
        return self.store.count(status=status, owner=owner, chats=chats)

    def queue_position(self, token: str) -> int | None:
        """How many queued tasks are ahead of `token` (None: not queued here)."""
        try:
            return self._queue.index(token)
        except ValueError:
            return None

    def queued_tokens(self) -> list[str]:
        """This instance's queued tasks, first to start first."""
        return list(self._queue)

    @property
    def running_count(self) -> int:
        return len(self._active)

    def mark_read(self, token: str) -> bool:
        """The task's result reached the user/LLM (protects it from early purge)."""
        return self.store.mark_read(token)

    # ------------------------------------------------------------------ submit / start

    async def submit(self, spec: TaskSpec) -> Task:
        """Store a new task and start it, or queue it when `max_concurrent` run."""
        if self._closed:
            raise RuntimeError("task manager is shut down")
        self._ensure_tasks_dir()
        cwd = os.path.abspath(os.path.expanduser(spec.cwd)) if spec.cwd else os.getcwd()
        task = Task(
            tool=spec.tool,
            label=spec.label or spec.command,
            command=spec.command,
            cwd=cwd,
            env={str(k): str(v) for k, v in (spec.env or {}).items()},
            status=TaskStatus.QUEUED,
            owner=self.owner,
            chat=spec.chat,
            call_id=spec.call_id,
            created_at=time.time(),
            timeout=self._timeout_for(spec),
        )

        def reserve(candidate: Task) -> bool:
            path = self.log_dir_for(candidate.id)
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                return False  # leftover (or another instance's) directory: other token
            candidate.log_dir = path
            return True

        task = self.store.insert(task, reserve=reserve)
        self._future(task.id)
        if len(self._active) < self.max_concurrent and not self._queue:
            self._start(task)
        else:
            self._queue.append(task.id)
            self._queued[task.id] = task
            self._emit("queued", task)
        return self.get(task.id) or task

    def _pump(self) -> None:
        """Start queued tasks while there is room."""
        moved = False
        while self._queue and len(self._active) < self.max_concurrent and not self._closed:
            token = self._queue.popleft()
            task = self._queued.pop(token)
            moved = True
            fresh = self.store.get(token)
            if fresh is None or fresh.status is not TaskStatus.QUEUED:
                # Halted (or purged) meanwhile, possibly by another Neovim.
                if fresh is not None:
                    self._emit("finished", fresh)
                self._resolve(token)
                continue
            self._start(task)
        if moved:
            for token in self._queue:
                task = self._queued.get(token)
                if task is not None:
                    self._emit("updated", task)

    def _start(self, task: Task) -> None:
        try:
            proc = runner.spawn(
                task.command,
                task.log_dir,
                cwd=task.cwd,
                env=task.env,
                nice=self.nice,
                task_id=task.id,
            )
        except runner.SpawnError as exc:
            transition(task, TaskStatus.FAILED, reason=Reason.SPAWN_ERROR)
            task.error = str(exc)
            task.summary = str(exc)
            self._save(task, ("status", "reason", "ended_at", "error", "summary"))
            self._emit("finished", task)
            self._resolve(task.id)
            return
        transition(task, TaskStatus.RUNNING)
        task.pid = proc.pid
        task.pid_start = proc.start_token
        self._save(task, ("status", "started_at", "pid", "pid_start"))
        self._attach(task, proc)
        self._emit("started", task)

    def _attach(self, task: Task, proc: runner.TaskProcess) -> None:
        """Watch a running task's process (ours or adopted) until it ends."""
        loop = self._loop()
        act = _Active(task, proc, LogFollower(task.log_path or os.devnull))
        self._active[task.id] = act
        self._future(task.id)
        proc.watch(loop, lambda: self._background(self._finish(task.id)))
        if task.timeout:
            elapsed = time.time() - (task.started_at or time.time())
            remaining = max(0.0, task.timeout - elapsed)
            act.timeout_handle = loop.call_later(remaining, self._on_timeout, task.id)
        if self._poller is None or self._poller.done():
            self._poller = loop.create_task(self._poll_loop())

    # ------------------------------------------------------------------ finishing

    def _on_timeout(self, token: str) -> None:
        act = self._active.get(token)
        if act is None or act.finishing or act.halt_reason is not None:
            return
        act.timeout_handle = None
        act.halt_reason = Reason.TIMEOUT
        act.halt_error = f"timed out after {act.task.timeout:g}s"
        self._background(self._kill(act, self.halt_grace))

    async def _kill(self, act: _Active, grace: float) -> None:
        proc = act.proc
        if proc.exited:
            return
        if not proc.is_child and not proc.alive():
            return  # adopted process already gone: its watcher will notice
        await runner.terminate_group(proc.pgid, grace)

    def _decide(
        self,
        act_or_task: Task,
        outcome: runner.Outcome,
        halt_reason: str | None,
        halt_error: str | None,
    ) -> None:
        """Set the terminal status, reason, exit code and error of a running task."""
        task = act_or_task
        task.exit_code = outcome.code
        # File timestamps are coarse: never end before the start.
        if task.started_at is not None and outcome.ended_at < task.started_at:
            outcome = dataclasses.replace(outcome, ended_at=task.started_at)
        if halt_reason == Reason.TIMEOUT:
            transition(task, TaskStatus.FAILED, reason=Reason.TIMEOUT, now=outcome.ended_at)
            task.error = halt_error or "timed out"
        elif halt_reason is not None:
            transition(task, TaskStatus.CANCELLED, reason=halt_reason, now=outcome.ended_at)
            task.error = halt_error
        elif outcome.code is None:
            transition(task, TaskStatus.FAILED, reason=Reason.SIGNAL, now=outcome.ended_at)
            task.error = "the task's process ended without recording an exit status"
        elif outcome.signal:
            transition(task, TaskStatus.FAILED, reason=Reason.SIGNAL, now=outcome.ended_at)
            task.error = f"killed by {_signal_name(outcome.signal)}"
        elif outcome.code == 0:
            transition(task, TaskStatus.COMPLETED, reason=Reason.EXIT, now=outcome.ended_at)
            task.error = None
        elif 128 < outcome.code <= 128 + 64:
            transition(task, TaskStatus.FAILED, reason=Reason.SIGNAL, now=outcome.ended_at)
            task.error = f"exit {outcome.code} ({_signal_name(outcome.code - 128)})"
        else:
            transition(task, TaskStatus.FAILED, reason=Reason.EXIT, now=outcome.ended_at)
            task.error = f"exit {outcome.code}"
            if not outcome.recorded:
                task.error += " (the task's supervisor could not record its exit)"

    async def _finish(self, token: str) -> None:
        act = self._active.get(token)
        if act is None or act.finishing:
            return
        act.finishing = True
        if act.timeout_handle is not None:
            act.timeout_handle.cancel()
            act.timeout_handle = None
        proc = act.proc
        proc.unwatch()
        outcome = proc.outcome()
        # Stray background processes of the command ("no orphans"): a child's
        # group already got SIGTERM at reaping; finish the job off in the background.
        if runner.group_alive(proc.pgid) and (proc.is_child or proc.alive()):
            self._background(runner.terminate_group(proc.pgid, self.halt_grace))
        task = act.task
        exact = True
        try:
            if _unread_bytes(task, act.follower) <= INLINE_READ_MAX:
                out, err, exact = _summarize_at_exit(task, act.follower, self.full_scan_max)
            else:
                out, err, exact = await self._loop().run_in_executor(
                    None, _summarize_at_exit, task, act.follower, self.full_scan_max
                )
        except Exception:  # unreadable log: still finish the task
            log.exception("task %s: cannot read its log", token)
            out, err = "", ""
        self._decide(task, outcome, act.halt_reason, act.halt_error)
        task.summary = _combine_summary(task.status, out, err)
        task.lines = act.follower.lines
        if act.follower.progress is not None:
            task.progress = act.follower.progress.percent
            task.progress_text = act.follower.progress.text
        fields = (
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
        if not self._save(task, fields, expect={"status": TaskStatus.RUNNING.value}):
            # Another instance already decided (e.g. halted it from its Neovim):
            # keep its status, add what only we know.
            fresh = self.store.get(token)
            if fresh is not None:
                if fresh.exit_code is None:
                    fresh.exit_code = task.exit_code
                fresh.summary = fresh.summary or task.summary
                fresh.lines = task.lines
                self._save(fresh, ("exit_code", "summary", "lines"))
                task = fresh
        if not exact:
            self._counting[token] = act.follower
        self._active.pop(token, None)
        self._emit("finished", task)
        self._resolve(token)
        self._pump()
        if not exact:
            self._background(self._count_rest(task, act.follower))

    async def _count_rest(self, task: Task, follower: LogFollower) -> None:
        """After "finished": read the rest of the log for the exact line count
        and last progress; save them and emit "updated"."""
        try:
            await self._loop().run_in_executor(None, _read_to_end, follower)
        except Exception:
            log.exception("task %s: cannot read its log", task.id)
            return
        finally:
            self._counting.pop(task.id, None)
        task = task.copy()
        task.lines = follower.lines
        if follower.progress is not None:
            task.progress = follower.progress.percent
            task.progress_text = follower.progress.text
        if self._save(task, ("lines", "progress", "progress_text")):
            self._emit("updated", task)

    # ------------------------------------------------------------------ progress

    async def _poll_loop(self) -> None:
        loop = self._loop()
        while self._active and not self._closed:
            await asyncio.sleep(self.poll_interval)
            acts = _due_for_poll(self._active.values(), time.monotonic(), self.poll_interval)
            if not acts:
                continue
            changed = await loop.run_in_executor(
                None, _poll_followers, [a.follower for a in acts], self.poll_max_bytes
            )
            for act, did in zip(acts, changed):
                if not did or act.finishing or act.task.id not in self._active:
                    continue
                prog = act.follower.progress
                if prog is None:
                    continue
                act.task.progress = prog.percent
                act.task.progress_text = prog.text
                act.task.lines = act.follower.lines
                self._save(
                    act.task,
                    ("progress", "progress_text", "lines"),
                    expect={"status": TaskStatus.RUNNING.value},
                )
                self._emit("progress", act.task)

    # ------------------------------------------------------------------ wait / halt

    async def wait(self, token: str, timeout: float | None) -> Task:
        """The task once terminal, or as it is when `timeout` seconds elapse.

        Tasks of other Neovim instances are followed through the store.
        Raises TaskNotFound.
        """
        fut = self._done.get(token)
        if fut is not None:
            try:
                if timeout is None:
                    await asyncio.shield(fut)
                else:
                    await asyncio.wait_for(asyncio.shield(fut), max(0.0, timeout))
            except asyncio.TimeoutError:
                pass
            task = self.get(token)
            if task is None:
                raise TaskNotFound(token)
            return task
        task = self.get(token)
        if task is None:
            raise TaskNotFound(token)
        loop = self._loop()
        deadline = None if timeout is None else loop.time() + timeout
        while task.status in ACTIVE:
            if deadline is not None and loop.time() >= deadline:
                break
            delay = 0.5 if deadline is None else min(0.5, max(0.0, deadline - loop.time()))
            await asyncio.sleep(delay)
            task = self.get(token) or task
        return task

    async def halt(self, token: str, reason: str = Reason.CANCELLED) -> Task:
        """Cancel a task: a queued one at once; a running one by SIGTERM to its
        process group, SIGKILL after `halt_grace`. Returns the final task.

        `reason=Reason.TIMEOUT` ends it as failed/timeout instead of cancelled.
        Works on tasks of other Neovim instances too (through the store).
        """
        act = self._active.get(token)
        if act is not None:
            if act.halt_reason is None and not act.finishing:
                act.halt_reason = reason
                self._background(self._kill(act, self.halt_grace))
            fut = self._done.get(token)
            if fut is not None:
                # Bounded: a process stuck in the kernel (state D) survives SIGKILL.
                limit = self.halt_grace + runner.KILL_WAIT + 5.0
                try:
                    await asyncio.wait_for(asyncio.shield(fut), limit)
                except asyncio.TimeoutError:
                    log.warning("task %s: still not gone %.0fs after halt", token, limit)
            return self.get(token) or act.task
        if token in self._queued:
            task = self._queued.pop(token)
            self._queue.remove(token)
            self._end_queued(task, reason)
            self._pump()
            return self.get(token) or task
        task = self.get(token)
        if task is None:
            raise TaskNotFound(token)
        if task.terminal:
            return task
        return await self._halt_elsewhere(task, reason)

    def _end_queued(self, task: Task, reason: str, error: str | None = None) -> None:
        if reason == Reason.CANCELLED:
            transition(task, TaskStatus.CANCELLED, reason=reason)
        else:
            transition(task, TaskStatus.FAILED, reason=reason)
        task.error = error
        self._save(task, ("status", "reason", "ended_at", "error"), expect={"status": "queued"})
        self._emit("finished", task)
        self._resolve(task.id)

    async def _halt_elsewhere(self, task: Task, reason: str) -> Task:
        """Halt a task this manager does not watch (another instance's, or stale)."""
        expect = {"status": task.status.value}
        status = TaskStatus.FAILED if reason == Reason.TIMEOUT else TaskStatus.CANCELLED
        was_running = task.status is TaskStatus.RUNNING
        transition(task, status, reason=reason)
        if not self._save(task, ("status", "reason", "ended_at"), expect=expect):
            return self.get(task.id) or task
        if was_running and runner.is_alive(task.pid, task.pid_start):
            assert task.pid is not None
            await runner.terminate_group(task.pid, self.halt_grace)
        self._emit("finished", task)
        return self.get(task.id) or task

    # ------------------------------------------------------------------ output

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
        advance the offset: the filter never consumes the lines it hides, so a
        later unfiltered read still returns everything new. Raises TaskNotFound,
        or ValueError for a bad regex.
        """
        task = self.get(token)
        if task is None:
            raise TaskNotFound(token)
        rx = compile_filter(filter) if filter is not None else None
        path = task.stderr_path if stream == "stderr" else task.log_path
        key = chat + STDERR_KEY if stream == "stderr" else chat
        start = self.store.get_read_offset(token, key)
        complete = not task.terminal
        loop = self._loop()
        if path is None:
            chunk_text, nxt, more, matches = "", start, False, None
        elif rx is None:
            chunk = await loop.run_in_executor(
                None, lambda: read_new(path, start, max_bytes, complete_lines=complete)
            )
            chunk_text, nxt, more, matches = chunk.text, chunk.next_offset, chunk.more, None
            if nxt != start:
                self.store.set_read_offset(token, key, nxt)
            if task.terminal and not more and stream == "stdout":
                self.store.mark_read(token)
        else:
            matches, more = await loop.run_in_executor(
                None, _filter_region, path, start, rx, scan_bytes, max_bytes, complete
            )
            chunk_text, nxt = "\n".join(matches), start
        follower = self._live_follower(token)
        lines = max(task.lines, follower.lines) if follower is not None else task.lines
        return OutputRead(
            token=token,
            status=task.status.value,
            text=chunk_text,
            offset=start,
            next_offset=nxt,
            more=more,
            filtered=rx is not None,
            matches=matches,
            progress=task.progress,
            progress_text=task.progress_text,
            lines=lines,
        )

    # ------------------------------------------------------------------ recovery

    async def recover(self) -> None:
        """Take stock of the store after (re)start, then purge old tasks.

        For every queued/running task not owned by another *live* Neovim:
        queued -> failed "host restarted"; running with an exit file -> the
        recorded exit; running with its process alive (pid + start token) ->
        adopted and watched again (remaining timeout applies); otherwise ->
        failed "host restarted". Also starts the hourly purge.
        """
        self._ensure_tasks_dir()
        candidates = self.store.list(status={TaskStatus.QUEUED, TaskStatus.RUNNING}, limit=None)
        owners_alive: dict[str, bool] = {}
        for task in candidates:
            if task.id in self._active or task.id in self._queued:
                continue
            if task.owner != self.owner:
                alive = owners_alive.get(task.owner)
                if alive is None:
                    alive = owners_alive[task.owner] = runner.owner_alive(task.owner)
                if alive:
                    continue
            try:
                await self._recover_one(task)
            except StoreError:
                log.exception("task %s: recovery failed", task.id)
        self._pump()
        await self.purge()
        self._schedule_purge()

    async def _recover_one(self, task: Task) -> None:
        old_owner = task.owner
        expect = {"status": task.status.value, "owner": old_owner}
        if task.status is TaskStatus.QUEUED:
            transition(task, TaskStatus.FAILED, reason=Reason.HOST_RESTARTED)
            task.error = "the task never started: its Neovim or host exited first"
            if self._save(task, ("status", "reason", "ended_at", "error"), expect=expect):
                self._emit("finished", task)
            return
        record = runner.read_exit(task.log_dir) if task.log_dir else None
        if record is None and runner.is_alive(task.pid, task.pid_start):
            task.owner = self.owner
            if not self._save(task, ("owner",), expect=expect):
                return  # another instance adopted it first
            assert task.pid is not None
            self._attach(task, runner.ForeignProcess(task.pid, task.pid_start, task.log_dir))
            self._emit("updated", task)
            return
        follower = LogFollower(task.log_path or os.devnull)
        out, err = await self._loop().run_in_executor(None, _scan_for_summary, task, follower)
        if record is not None:
            outcome = runner.Outcome(record.code, None, record.ended_at, True)
            self._decide(task, outcome, None, None)
        else:
            transition(task, TaskStatus.FAILED, reason=Reason.HOST_RESTARTED)
            task.error = "the host restarted and the task's process is gone"
        task.summary = _combine_summary(task.status, out, err)
        task.lines = follower.lines
        if follower.progress is not None:
            task.progress = follower.progress.percent
            task.progress_text = follower.progress.text
        fields = ("status", "reason", "exit_code", "ended_at", "error", "summary", "lines")
        if self._save(task, fields + ("progress", "progress_text"), expect=expect):
            self._emit("finished", task)

    # ------------------------------------------------------------------ retention

    async def purge(self, now: float | None = None) -> list[str]:
        """Remove finished tasks past retention: rows and log directories."""
        try:
            tokens = self.store.purge(time.time() if now is None else now, self.retention)
        except StoreError:
            log.exception("task purge failed")
            return []
        dirs = [self.log_dir_for(t) for t in tokens if is_token(t)]
        if dirs:
            await self._loop().run_in_executor(None, _remove_dirs, dirs)
        return tokens

    def _schedule_purge(self) -> None:
        if self._closed or self.purge_interval <= 0:
            return
        if self._purge_timer is not None:
            self._purge_timer.cancel()

        def fire() -> None:
            self._purge_timer = None
            self._background(self.purge())
            self._schedule_purge()

        self._purge_timer = self._loop().call_later(self.purge_interval, fire)

    # ------------------------------------------------------------------ shutdown

    async def shutdown(self, kill: bool) -> None:
        """Stop the engine (Neovim is exiting). Queued tasks are cancelled.

        kill=True: this instance's running tasks are halted, quickly: SIGTERM
        to every group at once, SIGKILL after `exit_grace` seconds.
        kill=False: they keep running; a later host recovers them.
        """
        self._closed = True
        if self._purge_timer is not None:
            self._purge_timer.cancel()
            self._purge_timer = None
        while self._queue:
            token = self._queue.popleft()
            task = self._queued.pop(token)
            self._end_queued(task, Reason.CANCELLED, "Neovim exited before the task started")
        acts = list(self._active.values())
        if kill and acts:
            for act in acts:
                if act.halt_reason is None and not act.finishing:
                    act.halt_reason = Reason.CANCELLED
                    act.halt_error = "halted because Neovim exited"
            await asyncio.gather(
                *(self._kill(a, min(self.halt_grace, self.exit_grace)) for a in acts),
                return_exceptions=True,
            )
            pending = [self._done[a.task.id] for a in acts if a.task.id in self._done]
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        for act in list(self._active.values()):
            act.proc.unwatch()
            if act.timeout_handle is not None:
                act.timeout_handle.cancel()
        if not kill:
            # Keep the Popen objects referenced: dropping a running one makes
            # `subprocess` reap it behind our back (and warn). The processes
            # keep running; a later host recovers them.
            self._detached.extend(a.proc for a in self._active.values())
            self._active.clear()
        if self._poller is not None and not self._poller.done():
            self._poller.cancel()
        if self._bg:
            await asyncio.wait(list(self._bg), timeout=1.0)

    def kill_all_now(self) -> None:
        """Synchronous last resort (no running loop, e.g. atexit): SIGTERM and
        then SIGKILL every running task of this instance."""
        pgids = [a.proc.pgid for a in self._active.values() if a.proc.is_child or a.proc.alive()]
        runner.kill_groups_now(pgids)


def _filter_region(
    path: str,
    start: int,
    rx: Any,
    scan_bytes: int,
    max_bytes: int,
    complete: bool,
) -> tuple[list[str], bool]:
    """Matching lines in [start, start+scan_bytes) of `path`; (matches, more)."""
    matches: list[str] = []
    size = 0
    offset = start
    scanned = 0
    more = False
    while scanned < scan_bytes:
        chunk = read_new(path, offset, min(1 << 20, scan_bytes - scanned), complete_lines=complete)
        if not chunk.data:
            more = chunk.more
            break
        for line in chunk.text.split("\n"):
            if rx.search(line):
                size += len(line) + 1
                if size > max_bytes:
                    return matches, True
                matches.append(line)
        scanned += len(chunk.data)
        offset = chunk.next_offset
        more = chunk.more
        if not more:
            break
    return matches, more


def _remove_dirs(dirs: list[str]) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
