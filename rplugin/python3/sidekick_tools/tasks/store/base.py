"""What every task store shares: the protocol and the rules each backend applies
the same way (retention, updatable fields, compare-and-set)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional, Protocol

from ..model import TERMINAL, Task, TaskStatus, new_token
from .errors import StoreError
from .query import TaskQuery

# Called with the task about to be inserted (its token set): claims what is
# named after the token (the log directory); False means "try another token".
Reserve = Callable[[Task], bool]

# `Task` fields a store writes (every field but the token and the read offsets,
# which have their own methods).
UPDATABLE_FIELDS = frozenset(
    name for name in Task.__dataclass_fields__ if name not in ("id", "read_offsets")
)
MAX_ALLOC_ATTEMPTS = 64
Fields = Optional[Iterable[str]]  # the fields an update writes; None: all of them
# compare-and-set: field -> the value the stored task must still have
Expect = Optional[Mapping[str, Any]]


class TaskStore(Protocol):
    def insert(self, task: Task, reserve: Reserve | None = None) -> Task: ...
    def insert_many(self, tasks: Iterable[Task]) -> None: ...
    def update(self, task: Task, fields: Fields = None, *, expect: Expect = None) -> bool: ...
    def get(self, token: str) -> Task | None: ...
    def find_by_call(self, chat: str, call_id: str) -> Task | None: ...
    def list(self, query: TaskQuery, limit: int | None = 100, offset: int = 0) -> list[Task]: ...
    def count(self, query: TaskQuery) -> int: ...
    def delete(self, token: str) -> bool: ...
    def purge(self, now: float, completed: float, failed: float) -> list[str]: ...
    def mark_read(self, token: str) -> bool: ...
    def mark_delivered(self, token: str) -> bool: ...
    def get_read_offset(self, token: str, chat: str) -> int: ...
    def set_read_offset(self, token: str, chat: str, offset: int) -> None: ...
    def close(self) -> None: ...


def purgeable(task: Task, now: float, completed: float, failed: float) -> bool:
    """Past retention: completed after `completed` seconds, failed and cancelled
    after `failed`; a result nobody read is kept twice as long."""
    if task.status not in TERMINAL:
        return False
    keep = completed if task.status is TaskStatus.COMPLETED else failed
    ended = task.ended_at if task.ended_at is not None else task.created_at
    if ended >= now - keep:
        return False
    return task.result_read or ended < now - 2 * keep


def allocate_token(task: Task, taken: Callable[[str], bool], reserve: Reserve | None) -> None:
    """Give `task` a fresh random token that is not `taken` and that `reserve`
    accepts (StoreError after `MAX_ALLOC_ATTEMPTS` tries)."""
    for _ in range(MAX_ALLOC_ATTEMPTS):
        task.id = new_token()
        if not taken(task.id) and (reserve is None or reserve(task)):
            return
    raise StoreError("could not allocate a free task token")


def fields_to_write(fields: Fields) -> tuple[list[str], list[str]]:
    """(the fields asked for, `read_offsets` included; the store fields among them)."""
    wanted = list(UPDATABLE_FIELDS if fields is None else fields)
    return wanted, check_fields(wanted)


def check_fields(fields: Iterable[str]) -> list[str]:
    """The fields, each one a store writes (ValueError otherwise); `read_offsets` dropped."""
    names = []
    for name in fields:
        if name == "read_offsets":
            continue
        if name not in UPDATABLE_FIELDS:
            raise ValueError(f"unknown or read-only task field: {name!r}")
        names.append(name)
    return names


def expected(task: Task, expect: Mapping[str, Any] | None) -> bool:
    """Does `task` hold the values of a compare-and-set `expect`?"""
    for name, value in (expect or {}).items():
        check_fields([name])
        current = getattr(task, name)
        if name == "status":
            if value is None or current is not TaskStatus(value):
                return False
        elif current != value:
            return False
    return True


def assign(task: Task, source: Task, fields: Iterable[str]) -> None:
    """Copy `fields` of `source` into `task`, normalised as a store keeps them."""
    for name in fields:
        value = getattr(source, name)
        if name == "env":
            value = dict(value or {})
        elif name == "status":
            value = TaskStatus(value)
        elif name in ("result_read", "delivered"):
            value = bool(value)
        setattr(task, name, value)
