"""`MemoryStore`: the tasks of this process only (`tasks.store = "memory"`, and
the fallback when the database cannot be used). Same behaviour as `SqliteStore`."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable

from ..model import Task, is_token
from . import base
from .base import Expect, Fields
from .errors import DuplicateToken
from .query import TaskQuery


class MemoryStore:
    """Tasks in a dict; hands out copies, like the database does."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._seq: dict[str, int] = {}
        self._offsets: dict[str, dict[str, int]] = {}
        self._counter = itertools.count(1)
        self._lock = threading.RLock()

    def _out(self, token: str) -> Task:
        task = self._tasks[token].copy()
        task.read_offsets = dict(self._offsets.get(token, {}))
        return task

    def _put(self, task: Task) -> None:
        stored = task.copy()
        self._offsets[task.id] = dict(stored.read_offsets)
        stored.read_offsets = {}
        self._tasks[task.id] = stored
        self._seq[task.id] = next(self._counter)

    def insert(self, task: Task, reserve: base.Reserve | None = None) -> Task:
        with self._lock:
            task = task.copy()
            if task.id:
                if not is_token(task.id):
                    raise ValueError(f"invalid task token {task.id!r}")
                if task.id in self._tasks or (reserve is not None and not reserve(task)):
                    raise DuplicateToken(f"task token {task.id} is already in use")
            else:
                base.allocate_token(task, self._tasks.__contains__, reserve)
            self._put(task)
            return self._out(task.id)

    def insert_many(self, tasks: Iterable[Task]) -> None:
        with self._lock:
            batch = [t.copy() for t in tasks]
            tokens = [t.id for t in batch]
            if len(set(tokens)) != len(tokens) or any(t in self._tasks for t in tokens):
                raise DuplicateToken("in-memory task store: duplicate task token in batch")
            for t in batch:
                if not is_token(t.id):
                    raise ValueError(f"invalid task token {t.id!r}")
            for t in batch:
                self._put(t)

    def update(self, task: Task, fields: Fields = None, *, expect: Expect = None) -> bool:
        with self._lock:
            wanted, names = base.fields_to_write(fields)
            stored = self._tasks.get(task.id)
            if stored is None or not base.expected(stored, expect):
                return False
            base.assign(stored, task, names)
            if "read_offsets" in wanted:
                self._offsets[task.id] = dict(task.read_offsets)
            return True

    def get(self, token: str) -> Task | None:
        with self._lock:
            return self._out(token) if token in self._tasks else None

    def find_by_call(self, chat: str, call_id: str) -> Task | None:
        """The newest task started by call `call_id` of `chat`, if any."""
        with self._lock:
            found = [
                tok for tok, t in self._tasks.items() if t.chat == chat and t.call_id == call_id
            ]
            if not found:
                return None
            return self._out(max(found, key=self._order))

    def _order(self, token: str) -> tuple[float, int]:
        return self._tasks[token].created_at, self._seq[token]

    def list(self, query: TaskQuery, limit: int | None = 100, offset: int = 0) -> list[Task]:
        with self._lock:
            tokens = [tok for tok, t in self._tasks.items() if query.matches(t)]
            tokens.sort(key=self._order, reverse=True)
            end = None if limit is None else offset + limit
            return [self._out(tok) for tok in tokens[offset:end]]

    def count(self, query: TaskQuery) -> int:
        with self._lock:
            return sum(1 for t in self._tasks.values() if query.matches(t))

    def delete(self, token: str) -> bool:
        with self._lock:
            self._offsets.pop(token, None)
            self._seq.pop(token, None)
            return self._tasks.pop(token, None) is not None

    def purge(self, now: float, completed: float, failed: float) -> list[str]:
        with self._lock:
            gone = [
                tok for tok, t in self._tasks.items() if base.purgeable(t, now, completed, failed)
            ]
            for tok in gone:
                self.delete(tok)
            return gone

    def _flag(self, token: str, name: str) -> bool:
        with self._lock:
            task = self._tasks.get(token)
            if task is None:
                return False
            setattr(task, name, True)
            return True

    def mark_read(self, token: str) -> bool:
        return self._flag(token, "result_read")

    def mark_delivered(self, token: str) -> bool:
        return self._flag(token, "delivered")

    def get_read_offset(self, token: str, chat: str) -> int:
        with self._lock:
            return int(self._offsets.get(token, {}).get(chat, 0))

    def set_read_offset(self, token: str, chat: str, offset: int) -> None:
        with self._lock:
            self._offsets.setdefault(token, {})[chat] = int(offset)

    def close(self) -> None:
        pass
