"""task_output: a task's output that this chat has not read yet, plus progress.

Each chat has its own read position per task (kept by the task manager). An
unfiltered read returns what is new (at most `READ_BYTES` per call; the rest
waits for the next call) and moves the position past it. With ``filter`` (a
Python regex, searched in each line; ``/re/`` slashes accepted) only the
matching new lines are returned and the position does NOT move: the filter
never consumes the lines it hides.

Long output is bounded for the chat: the first `HEAD_LINES` and the last
`TAIL_LINES` lines are kept (each side also capped in bytes) and the middle is
replaced by one line counting the elided lines and bytes and naming the log.

The body is a JSON object, then (when there is any) the output itself after a
``--- output ---`` line::

    {"task": "a1b2c3", "status": "running", "log_lines": 120, "new_lines": 20,
     "progress": {"percent": 45, "step": "compiling", "last_update": "2024-05-01T10:00:03"},
     "more": false}
    --- output ---
    ...

Filtered reads say ``"filter"`` and ``"matching_lines"`` instead of ``"new_lines"``;
reads of stderr (``"stream": "stderr"``) have no ``log_lines`` (the count kept is
stdout's).
``progress`` is the latest ``[PROGRESS]`` / ``[PROGRESS:NN]`` marker (null when
the task printed none); ``last_update`` is when the log last grew. ``elided``
(``{"lines", "bytes"}``) appears when the middle was cut; ``message`` explains
an empty read, a finished task, or that more output is waiting.
"""

from __future__ import annotations

import os
from typing import Any

from ..tasks.output import compile_filter, parse_line
from ..text import after_cut, before_cut
from . import _tasks
from .base import CHAT_NAMES, ToolContext, ToolNames, ToolResult
from .schema import object_schema, string

READ_BYTES = 256 * 1024  # new output taken per call
HEAD_LINES = 40
TAIL_LINES = 80
HEAD_BYTES = 6 * 1024
TAIL_BYTES = 10 * 1024
SEPARATOR = "--- output ---"


class TaskOutput(_tasks.TaskTool):
    name = "task_output"
    description = "Output of a task new since this chat's last read (optional regex filter)."
    schema = object_schema(
        {
            "task": _tasks.TOKEN_SCHEMA,
            "filter": string(
                "Regex: only new lines matching it (they stay unread).",
                min_length=1,
                max_length=1000,
            ),
            "stream": string(
                "stdout (default) or stderr: each is read on its own, from where this "
                "reader left it.",
                enum=["stdout", "stderr"],
            ),
        },
        required=["task"],
    )

    def check(self, params: dict[str, Any]) -> ToolResult | None:
        pattern = params.get("filter")
        if pattern is not None:
            try:
                compile_filter(pattern)
            except ValueError as e:
                return ToolResult.fail(f'parameter "filter": {e}', reason="bad_regex")
        return None

    async def act(
        self, params: dict[str, Any], ctx: ToolContext, token: str, task: Any
    ) -> ToolResult:
        pattern = params.get("filter")
        stream = params.get("stream") or "stdout"
        try:
            read = await ctx.tasks.read_output(
                token, ctx.chat, pattern, max_bytes=READ_BYTES, stream=stream
            )
        except KeyError:  # TaskNotFound: purged meanwhile
            return _tasks.not_found(token)
        except ValueError as e:
            return ToolResult.fail(f'parameter "filter": {e}', reason="bad_regex")
        task = ctx.tasks.get(token) or task
        text = render(token, task, read, pattern, _tasks.names_of(ctx), stream)
        return ToolResult.ok(text)


def render(
    token: str,
    task: Any,
    read: Any,
    pattern: str | None,
    names: ToolNames = CHAT_NAMES,
    stream: str = "stdout",
) -> str:
    state = _tasks.status_of(task)
    log_path = task.stderr_path if stream == "stderr" else task.log_path
    if read.filtered:
        lines = list(read.matches or [])
        text = "\n".join(lines)
    else:
        text = read.text.rstrip("\n")
        lines = text.split("\n") if text else []
    payload: dict[str, Any] = {"task": token, "status": state}
    if stream == "stdout":  # the count kept is stdout's: stderr's would be another's
        payload["log_lines"] = int(read.lines or 0)
    if state in _tasks.TERMINAL:
        payload["exit_code"] = task.exit_code
    if read.filtered:
        payload["filter"] = pattern
        payload["matching_lines"] = len(lines)
    else:
        payload["new_lines"] = len(lines)
    if stream == "stderr":
        payload["stream"] = "stderr"
    markers = "" if read.filtered or stream == "stderr" else text  # markers are stdout's
    payload["progress"] = progress_of(task, markers, task.log_path)
    payload["more"] = bool(read.more)

    shown, elided_lines, elided_bytes = bound(text)
    if _ELIDED in shown:
        payload["elided"] = {"lines": elided_lines, "bytes": elided_bytes}
        note = f"[... {elided_lines} lines ({elided_bytes} bytes) elided"
        note += f"; full log: {log_path}]" if log_path else "]"
        shown = shown.replace(_ELIDED, note, 1)

    message = _message(state, task, read, bool(lines), names)
    if message:
        payload["message"] = message
    body = _tasks.answer(payload)
    return f"{body}\n{SEPARATOR}\n{shown}" if shown else body


def _message(state: str, task: Any, read: Any, any_lines: bool, names: ToolNames) -> str | None:
    if read.more:
        if read.filtered:
            return "Only part of the unread output was searched; read it (unfiltered) to go on."
        return f"More new output is waiting: call {names.output} again to read it."
    if read.filtered:
        return (
            "Filtered read: nothing was marked as read; a later read without filter "
            "returns every new line, matching or not."
            if any_lines
            else "No new line matches the filter (nothing was marked as read)."
        )
    if state in _tasks.TERMINAL:
        exit_code = task.exit_code
        how = state if exit_code is None else f"{state}, exit {exit_code}"
        tail = "this is the rest of its output." if any_lines else "all its output was read."
        return f"The task has ended ({how}); {tail}"
    if not any_lines:
        return "No new output since the last read."
    return None


# How much of the end of stdout's log is looked at for the latest progress marker.
PROGRESS_TAIL = 16 * 1024


def _last_progress(text: str) -> Any:
    for line in reversed(text.split("\n")) if text else ():
        marker = parse_line(line)
        if marker is not None and marker.kind == "progress":
            return marker
    return None


def progress_of(task: Any, text: str, log_path: str | None) -> dict[str, Any] | None:
    """The latest progress marker: the last in the end of stdout's log, else
    the task's recorded progress, else the last in the text just read. The
    record is the engine's periodic scan, a tick behind: a read of stdout that
    found a newer marker, then a read of stderr, said two progresses, the later
    one older; and a reader far behind has only old markers in what it read."""
    percent = task.progress
    step = task.progress_text
    tail = _tasks.tail_text(log_path, max_lines=10_000, max_bytes=PROGRESS_TAIL)
    marker = _last_progress(tail)
    if marker is None and percent is None and not step:
        marker = _last_progress(text)
    if marker is not None:
        percent, step = marker.percent, marker.text
    if percent is None and not step:
        return None
    try:
        updated = _tasks.iso(os.path.getmtime(log_path)) if log_path else None
    except OSError:
        updated = None
    return {"percent": percent, "step": step or None, "last_update": updated}


_ELIDED = "\x00elided\x00"


def bound(
    text: str,
    head_lines: int = HEAD_LINES,
    tail_lines: int = TAIL_LINES,
    head_bytes: int = HEAD_BYTES,
    tail_bytes: int = TAIL_BYTES,
) -> tuple[str, int, int]:
    """(shown text, elided lines, elided bytes): the head and the tail of ``text``
    with the middle replaced by a placeholder line when it is too long."""
    total = len(text.encode("utf-8"))
    lines = text.split("\n") if text else []
    if len(lines) <= head_lines + tail_lines and total <= head_bytes + tail_bytes:
        return text, 0, 0
    head = _take(lines, head_lines, head_bytes)
    rest = lines[len(head) :]
    tail = list(reversed(_take(list(reversed(rest)), tail_lines, tail_bytes, from_end=True)))
    kept_whole = len(head) + len(tail)
    elided_lines = max(0, len(lines) - kept_whole)
    shown_parts = head + [_ELIDED] + tail
    shown_bytes = sum(len(x.encode("utf-8")) + 1 for x in head + tail)
    elided_bytes = max(0, total - shown_bytes + 1)
    return "\n".join(shown_parts), elided_lines, elided_bytes


def _take(lines: list[str], max_lines: int, max_bytes: int, from_end: bool = False) -> list[str]:
    """Lines from the start of ``lines`` within both limits; a first line longer
    than ``max_bytes`` is cut (from its end when ``from_end``)."""
    out: list[str] = []
    used = 0
    for line in lines[:max_lines]:
        size = len(line.encode("utf-8")) + 1
        if used + size > max_bytes:
            if not out:
                raw = line.encode("utf-8")
                if from_end:
                    out.append("…" + after_cut(raw[-max_bytes:].decode("utf-8", "ignore")))
                else:
                    out.append(before_cut(raw[:max_bytes].decode("utf-8", "ignore")) + "…")
            break
        out.append(line)
        used += size
    return out


TOOL = TaskOutput()
