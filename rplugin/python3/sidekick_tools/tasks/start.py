"""The task manager a process starts over its state directory (the editor's
host and the MCP server alike): the store its settings ask for, in memory, with
one message, when the state directory or its database cannot be used."""

from __future__ import annotations

import logging
import os
from typing import Callable

from ..config import TasksConfig
from ..statedir import StateDir
from .manager import TaskManager
from .store import MemoryStore, TaskStore, open_store
from .tuning import EngineTuning

log = logging.getLogger(__name__)

FALLBACK = "memory (fallback)"


def start_manager(
    settings: TasksConfig, state: StateDir, owner: str, on_problem: Callable[[str], None]
) -> tuple[TaskManager, str]:
    """The manager and its store's kind ("sqlite", "memory" or FALLBACK).
    ``on_problem(message)`` hears why the store is in memory: at once, or when
    the database fails later on."""
    tuning = EngineTuning.from_env()
    store: TaskStore
    kind = "sqlite"
    if settings.store == "memory":
        store, kind = MemoryStore(), "memory"  # no task history kept: none shared either
    elif state.problem is not None:
        if state.told:  # setup() said it, naming the same directory: no second message
            log.warning("%s", state.explain())
        else:
            on_problem(state.explain())
        store, kind = MemoryStore(), FALLBACK
    else:
        store, problem = open_store(
            "sqlite", os.path.join(state.path, "tasks.db"), tuning.busy_timeout
        )
        if problem is not None:
            on_problem(f"sidekick_tools: {problem}\nTasks are kept in memory for this session.")
            kind = FALLBACK
    manager = TaskManager(
        store, state.path, owner, settings, tuning=tuning, on_store_fallback=on_problem
    )
    return manager, kind
