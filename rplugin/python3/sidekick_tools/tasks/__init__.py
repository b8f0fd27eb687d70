"""Background tasks: model, store, awaitable processes, one supervisor per task,
its lifecycle behaviours, and the manager in front of them.

Plain asyncio; never imports pynvim (see docs/architecture.md).
"""

from __future__ import annotations

from .identity import owner_token
from .manager import OutputRead, TaskEvent, TaskManager, TaskNotFound, TaskSpec
from .model import TERMINAL, IllegalTransition, Reason, Task, TaskStatus, transition
from .store import BufferedStore, MemoryStore, SqliteStore, StoreError, TaskStore, open_store
from .tuning import EngineTuning

__all__ = [
    "TERMINAL",
    "BufferedStore",
    "EngineTuning",
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
