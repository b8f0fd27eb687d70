"""Background tasks: model, storage, process runner, output parsing, manager.

Plain asyncio; never imports pynvim (see docs/architecture.md).
"""

from __future__ import annotations

from .manager import OutputRead, TaskEvent, TaskManager, TaskNotFound, TaskSpec
from .model import TERMINAL, IllegalTransition, Reason, Task, TaskStatus, transition
from .runner import owner_token
from .store import MemoryStore, SqliteStore, StoreError, TaskStore, open_store

__all__ = [
    "TERMINAL",
    "IllegalTransition",
    "MemoryStore",
    "OutputRead",
    "Reason",
    "SqliteStore",
    "StoreError",
    "Task",
    "TaskEvent",
    "TaskManager",
    "TaskNotFound",
    "TaskSpec",
    "TaskStatus",
    "TaskStore",
    "open_store",
    "owner_token",
    "transition",
]
