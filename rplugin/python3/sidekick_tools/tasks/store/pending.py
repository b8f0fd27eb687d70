"""The writes a `BufferedStore` keeps while the database is locked: the queue
that applies them in order once it is free, and the circuit that keeps it from
asking a locked database again too soon."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Union

from ..model import Task
from .base import TaskStore, assign, check_fields
from .errors import DuplicateToken, StoreBusy, StoreError
from .memory import MemoryStore
from .query import EVERY_TASK

log = logging.getLogger(__name__)

RETRY_FIRST = 0.1  # seconds before the first retry of a queued write; doubles each time
RETRY_MAX = 2.0


@dataclass
class Insert:
    task: Task

    @property
    def token(self) -> str:
        return self.task.id

    def apply(self, store: TaskStore) -> bool:
        store.insert(self.task)
        return True

    def overlay(self, task: Task) -> None:
        pass


@dataclass
class Update:
    task: Task  # a snapshot of the values to write
    fields: list[str]
    expect: Mapping[str, Any] | None

    @property
    def token(self) -> str:
        return self.task.id

    def apply(self, store: TaskStore) -> bool:
        return store.update(self.task, self.fields, expect=self.expect)

    def overlay(self, task: Task) -> None:
        assign(task, self.task, check_fields(self.fields))


@dataclass
class Flag:
    token: str
    name: str  # "result_read" | "delivered"

    def apply(self, store: TaskStore) -> bool:
        if self.name == "result_read":
            return store.mark_read(self.token) or True
        return store.mark_delivered(self.token) or True

    def overlay(self, task: Task) -> None:
        setattr(task, self.name, True)


@dataclass
class Offset:
    token: str
    key: str
    offset: int

    def apply(self, store: TaskStore) -> bool:
        store.set_read_offset(self.token, self.key, self.offset)
        return True

    def overlay(self, task: Task) -> None:
        task.read_offsets[self.key] = self.offset


Write = Union[Insert, Update, Flag, Offset]
READS = frozenset({"get", "find_by_call", "list", "count", "get_read_offset"})


@dataclass
class Circuit:
    """While open, the database is not asked: it was busy a moment ago."""

    until: float = 0.0
    delay: float = RETRY_FIRST
    first: float = RETRY_FIRST
    longest: float = RETRY_MAX
    message: str = ""

    @property
    def open(self) -> bool:
        return time.monotonic() < self.until

    def trip(self, message: str) -> None:
        self.until = time.monotonic() + self.delay
        self.delay = min(self.delay * 2, self.longest)
        self.message = message

    def reset(self) -> None:
        self.until, self.delay = 0.0, self.first


class WriteQueue:
    """The queued writes, oldest first, and the timer that calls `flush` again
    when the write circuit closes (only inside a running event loop)."""

    def __init__(self, retry_first: float, flush: Callable[[], object]) -> None:
        self.writes: deque[Write] = deque()
        self.circuit = Circuit(delay=retry_first, first=retry_first)
        self._flush = flush
        self._retry: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self.writes)

    def of(self, token: str) -> list[Write]:
        return [w for w in self.writes if w.token == token]

    def add(self, write: Write) -> None:
        self.writes.append(write)
        self.schedule()

    def schedule(self) -> None:
        if self._retry is not None or not self.writes:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a script): the next write tries again
        delay = max(0.0, self.circuit.until - time.monotonic())
        self._retry = loop.call_later(delay, self._retry_flush)

    def _retry_flush(self) -> None:
        self._retry = None
        self._flush()

    def cancel(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def drain(self, store: TaskStore, settle: Callable[[Update], None]) -> bool | StoreError:
        """Apply the writes to `store` in order: True when none is left; False
        when it is busy again (the circuit trips, a retry is timed); any other
        store error is returned, its write still first in line.

        A write whose token the database already holds is dropped with the
        token's later writes; a compare-and-set that changed nothing goes to
        `settle` before the next write is applied.
        """
        self.circuit.until = 0.0
        while self.writes:
            write = self.writes[0]
            try:
                applied = write.apply(store)
            except StoreBusy as exc:
                self.circuit.trip(str(exc))
                self.schedule()
                return False
            except DuplicateToken:
                log.error(
                    "task %s: its token is taken in the database; kept in memory only", write.token
                )
                self.writes = deque(w for w in self.writes if w.token != write.token)
                continue
            except StoreError as exc:
                return exc
            self.writes.popleft()
            if not applied and isinstance(write, Update):
                settle(write)
        self.circuit.reset()
        return True


def copy_into_memory(
    old: TaskStore, held: Mapping[str, Task], pending: Iterable[Write]
) -> MemoryStore:
    """A memory store with every task `old` still lets us read, the host's own
    records on top (queued inserts included), and the other queued writes applied."""
    try:
        known = {t.id: t for t in reversed(old.list(EVERY_TASK, limit=None))}
    except StoreError:
        known = {}
    known.update((token, task.copy()) for token, task in held.items())
    memory = MemoryStore()
    memory.insert_many(known.values())
    for write in pending:
        if not isinstance(write, Insert) and write.token not in held:
            write.apply(memory)
    return memory
