"""`BufferedStore`: the engine's store, which never makes the editor wait on the database.

Rules:

- The host holds the records of the tasks it is responsible for (`track`):
  every write to them is applied to that record too, so the host can always
  answer for its own tasks.
- A write is applied to the backing store at once when it is free. When
  another program holds the database's lock (`StoreBusy`), the write is queued
  and retried in the background, in order, with a growing delay; meanwhile
  reads skip the database and answer from what the host holds (a task it does
  not hold raises `StoreBusy` at once, with a message).
- A compare-and-set write that is queued is checked against the host's
  record; when it lands and the row moved on meanwhile (another instance ended
  the task), the stored verdict wins (`model.keep_their_verdict`) and
  `on_conflict` is told.
- Any other failure (disk full, read-only file, I/O error) switches to a
  `MemoryStore` seeded with everything known so far, and `on_fallback` is told
  once; no task is ever left `running` in the host's view for want of a write.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..model import Task, keep_their_verdict
from . import base
from .base import Expect, Fields, TaskStore, assign
from .errors import DuplicateToken, StoreBusy, StoreError
from .memory import MemoryStore
from .pending import (
    READS,
    RETRY_FIRST,
    Circuit,
    Flag,
    Insert,
    Offset,
    Update,
    Write,
    WriteQueue,
    copy_into_memory,
)
from .query import TaskQuery

log = logging.getLogger(__name__)


@dataclass
class BufferedStore:
    backend: TaskStore
    on_fallback: Callable[[str], None] | None = None
    on_conflict: Callable[[Task], None] | None = None
    retry_first: float = RETRY_FIRST
    fallback_reason: str | None = None
    _held: dict[str, Task] = field(default_factory=dict)
    _tracked: set[str] = field(default_factory=set)
    _reads: Circuit = field(default_factory=Circuit)
    _queue: WriteQueue = field(init=False)

    def __post_init__(self) -> None:
        # Reading is not writing: in WAL mode another program's write lock
        # still lets us read, so each has its own circuit (the queue's for writes).
        self._reads = Circuit(delay=self.retry_first, first=self.retry_first)
        self._queue = WriteQueue(self.retry_first, self.flush)

    # -- what the host holds --------------------------------------------------------

    def track(self, task: Task) -> None:
        """The host is responsible for `task` from now on: keep its record."""
        self._held[task.id] = task.copy()
        self._tracked.add(task.id)

    def untrack(self, token: str) -> None:
        """The host is done with the task; its record goes once its writes landed."""
        self._tracked.discard(token)
        if not self._writes_for(token):
            self._held.pop(token, None)

    @property
    def pending_writes(self) -> int:
        return len(self._queue)

    def _writes_for(self, token: str) -> list[Write]:
        return self._queue.of(token)

    def _view(self, token: str, base: Task) -> Task:
        task = base.copy()
        if token not in self._held:  # held records already carry their queued writes
            for write in self._writes_for(token):
                write.overlay(task)
        return task

    def _ask(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the backend: busy opens the method's circuit (and raises); a
        broken database is replaced by memory and the call made there."""
        circuit = self._reads if method in READS else self._queue.circuit
        if circuit.open:
            raise StoreBusy(circuit.message)
        try:
            result = getattr(self.backend, method)(*args, **kwargs)
        except StoreBusy as exc:
            circuit.trip(str(exc))
            self._queue.schedule()
            raise
        except DuplicateToken:
            raise
        except StoreError as exc:
            self._fall_back(exc)
            return getattr(self.backend, method)(*args, **kwargs)
        if circuit is self._reads or not self._queue:
            circuit.reset()
        return result

    # -- reading ----------------------------------------------------------------------

    def get(self, token: str) -> Task | None:
        held = self._held.get(token)
        if held is not None and self._writes_for(token):
            return held.copy()
        try:
            row = self._ask("get", token)
        except StoreBusy:
            if held is not None:
                return held.copy()
            raise
        return None if row is None else self._view(token, row)

    def find_by_call(self, chat: str, call_id: str) -> Task | None:
        mine = [t for t in self._held.values() if t.chat == chat and t.call_id == call_id]
        if mine:
            return max(mine, key=lambda t: t.created_at).copy()
        row = self._ask("find_by_call", chat, call_id)
        return None if row is None else self._view(row.id, row)

    def _held_matching(self, query: TaskQuery) -> list[Task]:
        found = [t.copy() for t in self._held.values() if query.matches(t)]
        return sorted(found, key=lambda t: t.created_at, reverse=True)

    def list(self, query: TaskQuery, limit: int | None = 100, offset: int = 0) -> list[Task]:
        """`TaskStore.list`; while the database is locked, the host's own tasks only."""
        upto = None if limit is None else offset + limit
        changed = {w.token for w in self._queue.writes if w.token in self._held}
        try:
            if not self._queue:
                return list(self._ask("list", query, limit, offset))
            rows = self._ask("list", query, None if upto is None else upto + len(changed), 0)
        except StoreBusy:
            return self._held_matching(query)[offset:upto]
        tasks = [self._view(t.id, t) for t in rows if t.id not in changed]
        tasks += [self._held[t].copy() for t in changed if query.matches(self._held[t])]
        tasks.sort(key=lambda t: t.created_at, reverse=True)
        return tasks[offset:upto]

    def count(self, query: TaskQuery) -> int:
        try:
            total = self._ask("count", query)
            for token in {w.token for w in self._queue.writes if w.token in self._held}:
                row = self._ask("get", token)
                total -= bool(row is not None and query.matches(row))
                total += query.matches(self._held[token])
            return total
        except StoreBusy:
            return len(self._held_matching(query))

    def get_read_offset(self, token: str, chat: str) -> int:
        for write in reversed(self._writes_for(token)):
            if isinstance(write, Offset) and write.key == chat:
                return write.offset
        held = self._held.get(token)
        try:
            return int(self._ask("get_read_offset", token, chat))
        except StoreBusy:
            if held is not None:
                return int(held.read_offsets.get(chat, 0))
            raise

    # -- writing ----------------------------------------------------------------------

    def insert(self, task: Task, reserve: base.Reserve | None = None) -> Task:
        """Store a new task; while the database is locked its token is allocated
        here (`reserve`, the log directory, keeps tokens apart across hosts)
        and the row follows when the lock is gone."""
        if not self._queue:
            with contextlib.suppress(StoreBusy):
                return self._ask("insert", task, reserve)
        task = task.copy()
        base.allocate_token(task, self._held.__contains__, reserve)
        self._held[task.id] = task.copy()
        self._queue.add(Insert(task.copy()))
        return task

    def insert_many(self, tasks: Iterable[Task]) -> None:
        self._ask("insert_many", tasks)

    def update(self, task: Task, fields: Fields = None, *, expect: Expect = None) -> bool:
        wanted, names = base.fields_to_write(fields)
        held = self._held.get(task.id)
        if not self._writes_for(task.id):
            try:
                changed = bool(self._ask("update", task, wanted, expect=expect))
            except StoreBusy:
                if held is None:
                    raise  # not the host's task: only the database can decide
            else:
                if changed and held is not None:
                    assign(held, task, names)
                    if "read_offsets" in wanted:
                        held.read_offsets = dict(task.read_offsets)
                return changed
        if held is None:
            raise StoreBusy(self._queue.circuit.message)
        if not base.expected(held, expect):
            return False
        assign(held, task, names)
        self._queue.add(Update(task.copy(), wanted, dict(expect) if expect else None))
        return True

    def _set(self, write: Flag | Offset, method: str, *args: Any) -> bool:
        """A write that checks nothing (a flag, a read offset): queued when busy."""
        if not self._writes_for(write.token):
            try:
                result = self._ask(method, *args)
            except StoreBusy:
                pass
            else:
                held = self._held.get(write.token)
                if held is not None:
                    write.overlay(held)
                return result if result is not None else True
        held = self._held.get(write.token)
        if held is not None:
            write.overlay(held)
        self._queue.add(write)
        return True

    def mark_read(self, token: str) -> bool:
        return self._set(Flag(token, "result_read"), "mark_read", token)

    def mark_delivered(self, token: str) -> bool:
        return self._set(Flag(token, "delivered"), "mark_delivered", token)

    def set_read_offset(self, token: str, chat: str, offset: int) -> None:
        self._set(Offset(token, chat, int(offset)), "set_read_offset", token, chat, offset)

    def delete(self, token: str) -> bool:
        return bool(self._ask("delete", token))

    def purge(self, now: float, completed: float, failed: float) -> list[str]:
        return list(self._ask("purge", now, completed, failed))

    def close(self) -> None:
        self._queue.cancel()
        if self._queue and not self.flush():
            log.warning("%d task writes never reached the database", len(self._queue))
        self.backend.close()

    # -- the queue ----------------------------------------------------------------------

    def flush(self) -> bool:
        """Apply the queued writes in order; True when none is left."""
        drained = self._queue.drain(self.backend, self._settle_conflict)
        if isinstance(drained, StoreError):
            self._fall_back(drained)
            return True
        if not drained:
            return False
        for token in [t for t in self._held if t not in self._tracked]:
            self._held.pop(token)
        return True

    def _settle_conflict(self, write: Update) -> None:
        """A queued compare-and-set found the row changed: its stored verdict wins."""
        try:
            theirs = self.backend.get(write.token)
            if theirs is None:
                return
            ours = self._held.get(write.token, write.task)
            changed = keep_their_verdict(theirs, ours)
            if changed:
                self.backend.update(theirs, changed)
        except StoreError:
            log.exception("task %s: cannot settle a conflicting write", write.token)
            return
        if write.token in self._held:
            self._held[write.token] = theirs.copy()
        if self.on_conflict is not None:
            self.on_conflict(theirs)

    def _fall_back(self, exc: StoreError) -> None:
        """The database broke: go on in memory with everything known so far."""
        old = self.backend
        if isinstance(old, MemoryStore):
            raise exc
        self.backend = copy_into_memory(old, self._held, self._queue.writes)
        self._queue.writes.clear()
        self._reads.reset()
        self._queue.circuit.reset()
        self.fallback_reason = str(exc)
        log.error("task store failed, using memory from now on: %s", exc)
        with contextlib.suppress(Exception):
            old.close()
        if self.on_fallback is not None:
            self.on_fallback(
                f"sidekick_tools: {exc}\nTasks are kept in memory for the rest of this "
                "session (the tasks known so far included)."
            )
