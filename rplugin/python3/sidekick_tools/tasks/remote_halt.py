"""Halting tasks that no supervisor of this process watches: another Neovim's
(or MCP server's) task, or, when a Neovim exits after its host died, all of
that Neovim's tasks (`halt_owner_now`, run by `python -m sidekick_tools.reap`).

A process is signalled only while pid + start token still name it, never on a
bare pid; the stored status changes by compare-and-set, so two hosts halting
the same task record it once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from .groups import kill_groups_now, terminate_group
from .identity import is_alive
from .model import ACTIVE, Reason, Task, TaskStatus, transition
from .store import StoreError, TaskQuery, TaskStore
from .wrapper import read_exit

log = logging.getLogger(__name__)

HOST_GONE = "halted because Neovim exited (its host had died first)"


async def halt_unwatched(store: TaskStore, task: Task, reason: str, grace: float) -> bool:
    """Record `task` halted (cancelled; failed for a failing reason) and stop
    its process group if it still runs. False: its stored status had moved on."""
    expect = {"status": task.status.value}
    failed = reason in Reason.FAILING_STOPS
    was_running = task.status is TaskStatus.RUNNING
    transition(task, TaskStatus.FAILED if failed else TaskStatus.CANCELLED, reason=reason)
    if not store.update(task, ("status", "reason", "ended_at"), expect=expect):
        return False
    if was_running and task.pid is not None and is_alive(task.pid, task.pid_start):
        await terminate_group(task.pid, grace)
    return True


@dataclass
class OwnerHalt:
    """What `halt_owner_now` did: tokens by outcome."""

    halted: list[str] = field(default_factory=list)  # were running, now stopped and recorded
    cancelled: list[str] = field(default_factory=list)  # were queued, now recorded cancelled
    unrecorded: list[str] = field(default_factory=list)  # the store refused (locked, moved on)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, list[str]]:
        return dict(self.__dict__)


def halt_owner_now(
    store: TaskStore, owner: str, grace: float, keep: Callable[[Task], bool] | None = None
) -> OwnerHalt:
    """Synchronously halt every queued or running task of `owner` (but those
    `keep` is true of): SIGTERM to each live group at once, SIGKILL after
    `grace`, then record them cancelled. A task whose process is already gone
    is left to the next host's recovery."""
    report = OwnerHalt()
    try:
        tasks = store.list(TaskQuery.of(ACTIVE, owner=owner), limit=None)
    except StoreError as exc:
        report.errors.append(str(exc))
        return report
    if keep is not None:
        tasks = [t for t in tasks if not keep(t)]
    live = [t for t in tasks if t.status is TaskStatus.RUNNING and is_alive(t.pid, t.pid_start)]
    kill_groups_now([t.pid for t in live if t.pid is not None], grace)
    for task in [t for t in tasks if t.status is TaskStatus.QUEUED] + live:
        was = task.status.value
        transition(task, TaskStatus.CANCELLED, reason=Reason.CANCELLED)
        task.error = HOST_GONE if was == "running" else "Neovim exited before the task started"
        record = read_exit(task.log_dir) if task.log_dir and was == "running" else None
        task.exit_code = record.code if record is not None else None
        fields = ("status", "reason", "ended_at", "error", "exit_code")
        try:
            saved = store.update(task, fields, expect={"status": was, "owner": owner})
        except StoreError as exc:
            report.errors.append(f"task {task.id}: {exc}")
            saved = False
        if not saved:
            report.unrecorded.append(task.id)
        else:
            (report.cancelled if was == "queued" else report.halted).append(task.id)
    return report
