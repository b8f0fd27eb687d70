"""Which tasks a listing selects (`TaskQuery`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional, Union

from ..model import Task, TaskStatus

StatusFilter = Union[None, str, TaskStatus, Iterable[Union[str, TaskStatus]]]
Owner = Optional[str]
Chats = Optional[Iterable[str]]


def normalize_status(status: StatusFilter) -> frozenset[str] | None:
    """None/"all" -> None (no filter); a status or an iterable of them -> set of values."""
    if status is None:
        return None
    if isinstance(status, (str, TaskStatus)):
        if status == "all":
            return None
        return frozenset({TaskStatus(status).value})
    values = frozenset(TaskStatus(s).value for s in status)
    return None if len(values) == len(TaskStatus) else values


@dataclass(frozen=True)
class TaskQuery:
    """Which tasks `list()` and `count()` select: those with one of `statuses`
    (None: any) that belong to `owner` OR were started from one of `chats` OR
    from a chat whose name starts with `chat_prefix` (none given: every task)."""

    statuses: frozenset[str] | None = None
    owner: str | None = None
    chats: frozenset[str] = frozenset()
    chat_prefix: str | None = None  # non-empty: the MCP face's "mcp:" chats

    @classmethod
    def of(
        cls,
        status: StatusFilter = None,
        owner: Owner = None,
        chats: Chats = None,
        chat_prefix: str | None = None,
    ) -> TaskQuery:
        return cls(normalize_status(status), owner, frozenset(chats or ()), chat_prefix or None)

    def matches(self, task: Task) -> bool:
        if self.statuses is not None and task.status.value not in self.statuses:
            return False
        if self.owner is None and not self.chats and self.chat_prefix is None:
            return True
        if self.chat_prefix is not None and task.chat.startswith(self.chat_prefix):
            return True
        return task.owner == self.owner or task.chat in self.chats


def prefix_bounds(prefix: str) -> tuple[str, str]:
    """The range [low, high) of the strings starting with non-empty `prefix`
    (an index range scan, where LIKE would read every row)."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


EVERY_TASK = TaskQuery()
