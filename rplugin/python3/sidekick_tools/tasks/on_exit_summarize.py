"""When a task's process ends: its summary, line count and last progress.

The exit is reported first: "finished" never waits for reading a large unread
log. Up to `full_scan_max` unread bytes are read at once (summary, line count
and progress exact); beyond that the summary comes from the log's tail (it is
final either way: it is what the task's result shows), and the exact line
count follows in an "updated" event (`count_rest`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass

from ..text import decode
from .log_follower import LogFollower, summarize_file, summarize_tail
from .model import Task, TaskStatus
from .output import summary_of, tail_bytes
from .tuning import EngineTuning

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExitSummary:
    out: str  # summary of stdout
    err: str  # tail of stderr
    exact: bool  # False: the follower's line count and progress are still partial


def unread_bytes(task: Task, follower: LogFollower) -> int:
    """Bytes of the task's stdout not read yet (of stderr only a tail is ever read)."""
    if not task.log_path:
        return 0
    try:
        return max(0, os.path.getsize(task.log_path) - follower.position)
    except OSError:
        return 0


def stderr_summary(task: Task) -> str:
    if task.stderr_path:
        data = tail_bytes(task.stderr_path, 4096)
        if data.strip():
            return summary_of(decode(data), max_lines=20, max_bytes=2048)
    return ""


def read_to_end(follower: LogFollower) -> None:
    follower.poll()
    follower.finish()


def scan_for_summary(task: Task, follower: LogFollower) -> tuple[str, str]:
    """(stdout summary, stderr tail), reading the whole unread log. Worker thread."""
    read_to_end(follower)
    out = summarize_file(task.log_path, follower) if task.log_path else ""
    return out, stderr_summary(task)


def summarize_at_exit(task: Task, follower: LogFollower, full_scan_max: int) -> ExitSummary:
    """The summary of a task whose process just ended (safe in a worker thread).

    Unread bytes <= `full_scan_max`: the follower reads them now and all is
    exact. More: only the file's last 64 KiB is read (`summarize_tail`: its
    last `[RESULT]`, else the last one the follower saw, else what follows the
    last `> ` line, else the tail)."""
    if not task.log_path:
        return ExitSummary("", stderr_summary(task), True)
    if unread_bytes(task, follower) <= full_scan_max:
        return ExitSummary(*scan_for_summary(task, follower), True)
    return ExitSummary(summarize_tail(task.log_path, follower), stderr_summary(task), False)


async def summarize(task: Task, follower: LogFollower, tuning: EngineTuning) -> ExitSummary:
    """`summarize_at_exit`, on the loop for a small log, else in a worker thread.
    An unreadable log gives an empty summary: the task still ends."""
    try:
        if unread_bytes(task, follower) <= tuning.inline_read_max:
            return summarize_at_exit(task, follower, tuning.full_scan_max)
        return await asyncio.get_running_loop().run_in_executor(
            None, summarize_at_exit, task, follower, tuning.full_scan_max
        )
    except Exception:
        log.exception("task %s: cannot read its log", task.id)
        return ExitSummary("", "", True)


_STDERR_PART = "\n[stderr]\n"  # what joins stderr's tail to a summary, after a blank line


def combine_summary(status: TaskStatus, out: str, err: str) -> str:
    """stdout's summary, with stderr's tail under `[stderr]` when the task did not complete."""
    if not out.strip():
        return err
    if err and status is not TaskStatus.COMPLETED:
        return f"{out}\n{_STDERR_PART}{err}"
    return out


def split_summary(summary: str, err: str) -> tuple[str, str]:
    """(stdout's part, stderr's tail) of a `combine_summary` whose stderr tail
    was ``err`` (`stderr_summary` of the same task, read again): told apart by
    ``err`` itself, never by a `[stderr]` line, which stdout can print. stdout's
    part keeps the blank line before the marker; (summary, "") when the
    summary holds no such tail."""
    if err and summary.endswith(_STDERR_PART + err):
        out = summary[: -len(_STDERR_PART + err)]
        if out.endswith("\n") and out.strip():
            return out, err
    return summary, ""


def take_counts(task: Task, follower: LogFollower) -> None:
    """The follower's line count and last progress, into `task`."""
    task.lines = follower.lines
    if follower.progress is not None:
        task.progress = follower.progress.percent
        task.progress_text = follower.progress.text


async def count_rest(task: Task, follower: LogFollower) -> Task | None:
    """After "finished" for an inexact summary: read the rest of the log; a copy
    of `task` with the exact line count and last progress (None: unreadable)."""
    try:
        await asyncio.get_running_loop().run_in_executor(None, read_to_end, follower)
    except Exception:
        log.exception("task %s: cannot read its log", task.id)
        return None
    counted = task.copy()
    take_counts(counted, follower)
    return counted
