"""A chat saved under another name (`:saveas`, `:file`) takes its tasks along:
a task names the chat it was started from, and a chat opened again follows
only its own tasks. Where the chat had read each task's output to goes too."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .output_reads import STDERR_KEY
from .store import TaskQuery

if TYPE_CHECKING:
    from .manager import TaskManager


def rename_chat(manager: TaskManager, old: str, new: str, tokens: Iterable[str] = ()) -> int:
    """Chat `old` was saved as `new`: its tasks (every task naming `old`, and
    the tasks `tokens` of its followed calls, whatever chat they name) are
    `new`'s from now on. An unnamed chat (`old` empty) moves only `tokens`:
    other unnamed buffers' tasks name "" too. How many moved."""
    moved, tasks = 0, {}
    if old:
        for task in manager.store.list(TaskQuery.of(None, None, [old]), None, 0):
            if task.chat == old:
                tasks[task.id] = task
    for token in tokens:
        task = tasks.get(token) or manager.store.get(token)
        if task is not None and task.chat == old:
            tasks[token] = task
    for task in tasks.values():
        task.chat = new
        if manager.save(task, ("chat",), expect={"chat": old}):
            moved += 1
            _move_read_offsets(manager, task.id, old, new)
        sup = manager.supervisor(task.id)
        if sup is not None:
            sup.task.chat = new  # its events name the chat it is in now
    return moved


def _move_read_offsets(manager: TaskManager, token: str, old: str, new: str) -> None:
    """`task_output` reads on from where chat `old` had read, per stream."""
    for suffix in ("", STDERR_KEY):
        offset = manager.store.get_read_offset(token, old + suffix)
        if offset:
            manager.store.set_read_offset(token, new + suffix, offset)
