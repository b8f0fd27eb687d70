"""A chat reading a task's output: what is new since its last read, or the
new lines a filter matches (which never consumes them)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from .model import Task
from .output import FilterPattern, compile_filter, read_new
from .output_filter import matching_lines, region_lines
from .store import BufferedStore

STDERR_KEY = "\x1fstderr\x1f"  # read-offset key suffix for the stderr stream


@dataclass
class OutputRead:
    """Result of `TaskManager.read_output()`."""

    token: str
    status: str
    text: str  # new output (ANSI stripped), or the matching lines when filtered
    offset: int  # where this read started
    next_offset: int  # where the next unfiltered read will start
    more: bool  # more new output is already waiting (max_bytes reached)
    filtered: bool
    matches: list[str] | None  # matching lines (filtered reads only)
    progress: int | None
    progress_text: str | None
    lines: int  # lines seen so far in the whole log

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ReadRequest:
    chat: str
    filter: FilterPattern | None
    max_bytes: int
    stream: str  # "stdout" | "stderr"
    scan_bytes: int  # a filtered read searches at most this much
    time_limit: float  # ... for at most this many seconds


async def read_output(store: BufferedStore, task: Task, ask: ReadRequest) -> OutputRead:
    """See `TaskManager.read_output`."""
    rx = compile_filter(ask.filter) if ask.filter is not None else None
    path = task.stderr_path if ask.stream == "stderr" else task.log_path
    key = ask.chat + STDERR_KEY if ask.stream == "stderr" else ask.chat
    start = store.get_read_offset(task.id, key)
    complete = not task.terminal
    loop = asyncio.get_running_loop()
    text, nxt, more, matches = "", start, False, None
    if path is not None and rx is None:
        chunk = await loop.run_in_executor(
            None, lambda: read_new(path, start, ask.max_bytes, complete_lines=complete)
        )
        text, nxt, more = chunk.text, chunk.next_offset, chunk.more
        if nxt != start:
            store.set_read_offset(task.id, key, nxt)
        if task.terminal and not more and ask.stream == "stdout":
            store.mark_read(task.id)
    elif path is not None and rx is not None:
        lines, unread = await loop.run_in_executor(
            None, region_lines, path, start, ask.scan_bytes, complete
        )
        matches, cut = await matching_lines(lines, rx, ask.max_bytes, ask.time_limit)
        text, more = "\n".join(matches), cut or unread
    return OutputRead(
        token=task.id,
        status=task.status.value,
        text=text,
        offset=start,
        next_offset=nxt,
        more=more,
        filtered=rx is not None,
        matches=matches,
        progress=task.progress,
        progress_text=task.progress_text,
        lines=task.lines,
    )
