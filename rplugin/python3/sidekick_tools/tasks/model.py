"""Task data model: statuses, reasons, the Task record and its legal transitions.

Pure data, no I/O. The store persists `Task` objects; the manager moves them
through `transition()`, which is the only place status rules live.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class TaskStatus(str, Enum):
    # in the order the views and the task tools offer them (Lua's constants.task_statuses)
    RUNNING = "running"
    QUEUED = "queued"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:  # "running", not "TaskStatus.RUNNING"
        return self.value


TERMINAL = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})
ACTIVE = frozenset({TaskStatus.QUEUED, TaskStatus.RUNNING})  # `"running" in ACTIVE` holds too
#: every status by name, in that order (queries, schemas, messages)
NAMES = tuple(status.value for status in TaskStatus)


class Reason:
    """Why a task reached its terminal status (`Task.reason`)."""

    EXIT = "exit"  # the command exited by itself (any code)
    SIGNAL = "signal"  # killed by a signal nobody in the plugin sent (or exit > 128)
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    SPAWN_ERROR = "spawn_error"
    HOST_RESTARTED = "host restarted"
    LOG_LIMIT = "log_limit"  # its stdout + stderr passed tasks.max_log_bytes

    ALL = (EXIT, SIGNAL, TIMEOUT, CANCELLED, SPAWN_ERROR, HOST_RESTARTED, LOG_LIMIT)
    # Stopped by the engine for breaking a limit: the task failed (not cancelled).
    FAILING_STOPS = frozenset({TIMEOUT, LOG_LIMIT})


_LEGAL: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.QUEUED: frozenset({TaskStatus.RUNNING, TaskStatus.CANCELLED, TaskStatus.FAILED}),
    TaskStatus.RUNNING: frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}),
}

TOKEN_RE = re.compile(r"^[0-9a-f]{6}$")


class IllegalTransition(ValueError):
    """A status change the task life cycle does not allow."""


def new_token() -> str:
    """A random task token: 6 lowercase hex characters (uniqueness is the store's job)."""
    return secrets.token_hex(3)


def is_token(value: object) -> bool:
    return isinstance(value, str) and TOKEN_RE.match(value) is not None


def can_transition(old: TaskStatus | str, new: TaskStatus | str) -> bool:
    return TaskStatus(new) in _LEGAL.get(TaskStatus(old), frozenset())


@dataclass
class Task:
    id: str = ""
    tool: str = ""
    label: str = ""  # what lists show: the command or the call's purpose
    command: str = ""  # shell string run by /bin/sh -c
    # the command as the call wrote it, when `command` is another form of it
    # (auto-run: the checked argv, hardened); "" when the call's own text ran
    call_command: str = ""
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict)  # extra variables only
    status: TaskStatus = TaskStatus.QUEUED
    reason: str | None = None
    exit_code: int | None = None
    pid: int | None = None  # the supervisor's pid == the task's process group id
    pid_start: str | None = None  # start-time token of `pid` (see runner.start_token)
    owner: str = ""  # "<nvim pid>:<nvim start token>"
    chat: str = ""  # chat identity that started the task (buffer path)
    call_id: str = ""
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    timeout: float | None = None  # seconds; None or <= 0: none
    progress: int | None = None  # percent
    progress_text: str | None = None
    lines: int = 0  # stdout lines seen so far
    log_dir: str = ""
    summary: str | None = None
    error: str | None = None
    result_read: bool = False
    delivered: bool = False  # its call's result was written into the chat (exactly once)
    read_offsets: dict[str, int] = field(default_factory=dict)  # chat -> byte offset

    def __post_init__(self) -> None:
        self.status = TaskStatus(self.status)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def of_call(self, chat: str | None, call_id: str | None) -> bool:
        """Whether this task is that call's, the one call of that chat it was
        started for: only its own task is followed, halted or marked delivered
        by a call (a block naming another's is text, DESIGN §12)."""
        return (self.chat, self.call_id) == (chat, call_id)

    @property
    def log_path(self) -> str | None:
        return os.path.join(self.log_dir, "stdout") if self.log_dir else None

    @property
    def stderr_path(self) -> str | None:
        return os.path.join(self.log_dir, "stderr") if self.log_dir else None

    def duration(self, now: float | None = None) -> float | None:
        if self.started_at is None:
            return None
        end = self.ended_at if self.ended_at is not None else (now or time.time())
        return max(0.0, end - self.started_at)

    def copy(self) -> Task:
        return dataclasses.replace(self, env=dict(self.env), read_offsets=dict(self.read_offsets))

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        """Plain, msgpack-friendly view for the Lua API (`list_tasks`, `get_task`)."""
        return {
            "id": self.id,
            "status": self.status.value,
            "tool": self.tool,
            "label": self.label,
            "command": self.command,
            "call_command": self.call_command,
            "cwd": self.cwd,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "pid": self.pid,
            "owner": self.owner,
            "chat": self.chat,
            "call_id": self.call_id,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "duration": self.duration(now),
            "timeout": self.timeout,
            "progress": self.progress,
            "progress_text": self.progress_text,
            "lines": self.lines,
            "log_path": self.log_path,
            "stderr_path": self.stderr_path,
            "log_dir": self.log_dir,
            "summary": self.summary,
            "error": self.error,
        }


def keep_their_verdict(theirs: Task, ours: Task) -> list[str]:
    """Another instance ended the task first (its stored status won): add to
    `theirs`, in place, what only we know. Returns the fields that changed."""
    changed = []
    if theirs.exit_code is None and ours.exit_code is not None:
        theirs.exit_code = ours.exit_code
        changed.append("exit_code")
    if not theirs.summary and ours.summary:
        theirs.summary = ours.summary
        changed.append("summary")
    if ours.lines > theirs.lines:
        theirs.lines = ours.lines
        changed.append("lines")
    return changed


def transition(
    task: Task,
    new: TaskStatus | str,
    *,
    reason: str | None = None,
    now: float | None = None,
) -> Task:
    """Move `task` to `new` in place (and return it).

    Legal: queued -> running -> completed | failed | cancelled, and
    queued -> cancelled | failed. Anything else, including any change of a
    terminal status, raises `IllegalTransition`. Entering running stamps
    `started_at`; entering a terminal status stamps `ended_at` (unless set).
    """
    new = TaskStatus(new)
    if not can_transition(task.status, new):
        raise IllegalTransition(f"task {task.id or '?'}: {task.status.value} -> {new.value}")
    stamp = time.time() if now is None else now
    task.status = new
    if new is TaskStatus.RUNNING and task.started_at is None:
        task.started_at = stamp
    if new in TERMINAL:
        if task.ended_at is None:
            task.ended_at = stamp
        if reason is not None:
            task.reason = reason
    return task
