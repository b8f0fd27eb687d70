"""Task persistence: `SqliteStore` (default, shared by every Neovim), `MemoryStore`,
and `BufferedStore`, the engine's view over either (see its module).

Stores hand out copies: mutating a returned `Task` has no effect until it is
passed back to `update()`.
"""

from __future__ import annotations

from .base import TaskStore
from .buffered import BufferedStore
from .errors import DuplicateToken, StoreBusy, StoreError
from .memory import MemoryStore
from .query import EVERY_TASK, StatusFilter, TaskQuery, normalize_status
from .schema import SCHEMA_VERSION
from .sqlite import SqliteStore
from .sqlite_connection import DEFAULT_BUSY_TIMEOUT


def open_store(
    kind: str, path: str | None, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
) -> tuple[TaskStore, str | None]:
    """The configured store, falling back to memory: (store, warning or None)."""
    if kind == "memory" or not path:
        return MemoryStore(), None
    try:
        return SqliteStore(path, busy_timeout), None
    except StoreError as exc:
        return MemoryStore(), str(exc)


__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "SCHEMA_VERSION",
    "EVERY_TASK",
    "BufferedStore",
    "DuplicateToken",
    "MemoryStore",
    "SqliteStore",
    "StatusFilter",
    "StoreBusy",
    "StoreError",
    "TaskQuery",
    "TaskStore",
    "normalize_status",
    "open_store",
]
