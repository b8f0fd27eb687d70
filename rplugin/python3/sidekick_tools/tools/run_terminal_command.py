"""run_terminal_command: a shell command run as a background task, hybrid wait.

``async`` absent: wait up to config.tasks.hybrid_threshold seconds, then either
the result or a ``running`` block naming the task. ``async: true``: the token at
once. ``async: false``: wait for the end. See DESIGN §7.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from typing import Any

from ..chat.render import join_streams
from ..tasks.manager import TaskSpec
from ..text import after_cut, is_binary
from . import _fs, _tasks, command_policy, command_table
from ._tasks import TERMINAL
from .base import Streams, ToolContext, ToolResult
from .schema import boolean, number, object_schema, string, validate

TAIL_BYTES = 256 * 1024  # at most this much of each of stdout/stderr goes into a body
# The lines of a log before its tail are counted up to this size (a few ms);
# past it, the note of what the tail leaves out gives its bytes only.
COUNT_LINES_BYTES = 32 * 1024 * 1024
_COUNT_CHUNK = 1024 * 1024

_REASONS = {
    "timeout": "timed out; the process group was killed",
    "cancelled": "cancelled",
    "signal": "killed by a signal",
    "spawn_error": "could not start the command",
    "host restarted": "the host restarted while it ran; its outcome is unknown",
}

# The hybrid execution of a task-starting tool (this one and use_agent).
ASYNC_SCHEMA = boolean(
    "true: return the task id at once; false: wait for the end; "
    "absent: wait up to {tasks.hybrid_threshold} s."
)


class RunTerminalCommand:
    name = "run_terminal_command"
    description = "Run a shell command in the background as a task; wait briefly for its result."
    schema = object_schema(
        {
            "command": string("Shell command line (run with /bin/sh -c).", min_length=1),
            "purpose": string("Why it runs; used as the task's label."),
            "cwd": string(
                "Working directory, relative to the chat's; default the chat's.", min_length=1
            ),
            "timeout_seconds": number(
                "Kill the command after this many seconds (default {tasks.default_timeout}).",
                exclusive_minimum=0,
            ),
            "async": ASYNC_SCHEMA,
        },
        required=["command"],
    )

    def auto_accept(self, params: dict[str, Any], ctx: ToolContext) -> bool:
        return auto_verdict(params, ctx).approved

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> ToolResult:
        err = validate(self.schema, params)
        if err:
            return ToolResult.fail(err)
        command: str = params["command"]
        purpose = (params.get("purpose") or "").strip()
        timeout = params.get("timeout_seconds")
        mode = params.get("async")  # True | False | None
        to_run = command
        if ctx.auto:
            # Run what the policy checked, checked again now (the text may have
            # changed since), under the auto-run time limit.
            verdict = await asyncio.to_thread(auto_verdict, params, ctx)  # see policy.judge
            if verdict.plan is not None:
                to_run = verdict.plan.shell
            elif not ctx.config.auto_accept.has_policy:
                return ToolResult.fail(
                    f"Not run: the command is no longer safe to run unasked ({verdict.reason}). "
                    "Run it with :SidekickRunTool if it should run."
                )
            limit = float(ctx.config.auto_accept.timeout)
            if limit > 0:
                timeout = min(float(timeout), limit) if timeout else limit

        shown_cwd = params.get("cwd")
        try:
            cwd = _fs.resolve(shown_cwd, ctx.cwd) if shown_cwd else os.path.abspath(ctx.cwd)
        except _fs.PathError as e:
            return ToolResult.fail(f'parameter "cwd": {e}')
        if not os.path.isdir(cwd):
            what = "is not a directory" if os.path.exists(cwd) else "does not exist"
            return ToolResult.fail(f"working directory {shown_cwd or cwd} {what}")

        spec = TaskSpec(
            tool=self.name,
            label=purpose or command,
            command=to_run,
            call_command=command,  # what lists show; `to_run` is what runs
            cwd=cwd,
            env={},
            timeout=float(timeout) if timeout else None,
            chat=ctx.chat,
            call_id=ctx.call_id,
        )
        return await run_as_task(ctx, spec, mode, result_from_task, "could not start the command")


async def run_as_task(
    ctx: ToolContext,
    spec: TaskSpec,
    mode: bool | None,
    final: Callable[[Any], ToolResult],
    cannot_start: str,
) -> ToolResult:
    """Submit `spec` and wait for it as the call's ``async`` parameter says:
    True returns the ``running`` block at once, False waits for the end, absent
    waits up to ``tasks.hybrid_threshold`` seconds. A task that ended in time
    gives `final(task)`, and its result counts as read by the LLM."""
    try:
        task = await ctx.tasks.submit(spec)
    except Exception as e:  # the manager refused: report, don't crash the call
        return ToolResult.fail(f"{cannot_start}: {e}", reason="spawn_error")
    if _tasks.status_of(task) not in TERMINAL:
        if mode is True:
            return running_result(task)
        threshold = None if mode is False else float(ctx.config.tasks.hybrid_threshold)
        task = await ctx.tasks.wait(str(task.id), threshold)
        if _tasks.status_of(task) not in TERMINAL:
            return running_result(task, waited=threshold)
    _tasks.mark_read(ctx, str(task.id))
    return final(task)


def auto_verdict(params: dict[str, Any], ctx: ToolContext) -> command_policy.Verdict:
    """The auto-accept verdict on a call (DESIGN §12), with the plan that runs it."""
    command = params.get("command")
    if not isinstance(command, str):
        return command_policy.Verdict(False, "the command is not a string")
    cwd = params.get("cwd")
    auto = ctx.config.auto_accept
    table = command_table.table_for(auto.safe_commands, auto.command_forms)
    return command_policy.check(command, cwd if isinstance(cwd, str) else None, ctx.cwd, table)


def running_result(task: Any, waited: float | None = None) -> ToolResult:
    """The ``status=running task=TOKEN`` block for a task that is not done yet."""
    token = str(task.id)
    queued = _tasks.status_of(task) == "queued"
    state = "queued (the concurrency limit is reached)" if queued else "running"
    if waited is None:
        lead = f"Started in the background as task {token}, {state}."
    elif queued:
        lead = (
            f"Still queued after {_secs(waited)} as task {token} "
            "(the concurrency limit is reached)."
        )
    else:
        lead = f"Still running after {_secs(waited)} as task {token}."
    body = (
        f"{lead} It continues in the background; its result will replace this block "
        f'when it ends. Await it with await_task {{"task": "{token}"}} or stop it with '
        f"halt_task (or :SidekickHalt {token})."
    )
    return ToolResult.running(body, task=token)


def result_from_task(task: Any, tail_bytes: int = TAIL_BYTES) -> ToolResult:
    """The result block of a task; the host also calls it when a background task ends.

    Body: the tail of stdout, then the tail of stderr under a ``[stderr]`` line
    (bytes decoded as UTF-8 with replacement; ANSI cleaning and line truncation
    are the renderer's job), then why it ended when it did not simply exit;
    the same parts in ``streams``.
    Status and fields: see `final_status`.
    """
    if _tasks.status_of(task) not in TERMINAL:
        return running_result(task)
    status, reason, fields = final_status(task)

    log_dir = task.log_dir
    out, out_cut = _tail(log_dir, "stdout", tail_bytes)
    err, err_cut = _tail(log_dir, "stderr", tail_bytes)
    note = _end_note(status, reason, task.error or "", task.started_at is not None)
    if not (out or err or note):
        return ToolResult(status, "(no output)", fields)
    streams = Streams(out, err, note, out_cut, err_cut)
    return ToolResult(status, join_streams(out, err, note), fields, streams=streams)


def _end_note(status: str, reason: str, error: str, started: bool = True) -> str:
    """The last line of a result that did not simply exit: why it ended. A task
    stopped by the plugin itself says who stopped it and why (Neovim exiting
    halted it, its log passed the limit), which `[cancelled]` alone does not:
    the user and the model would think someone halted it by hand. One that
    never started says so: "its outcome is unknown" would have it maybe run."""
    if status == "completed":
        return ""
    if reason == "cancelled" and error:
        return f"[cancelled: {error}]"
    if (reason == "log_limit" or (reason == "host restarted" and not started)) and error:
        return f"[{error}]"
    if reason in _REASONS:
        return f"[{_REASONS[reason]}]"
    if reason and reason != "exit":
        return f"[{reason}]"
    return ""


def final_status(task: Any) -> tuple[str, str, dict[str, Any]]:
    """(status, reason, fields) of the result block of a task that has ended.

    Status ``completed`` when the task completed with exit 0 (or no code),
    ``cancelled`` when cancelled, else ``failed``. Fields, in order: ``exit``
    (when known), ``duration`` (float seconds, 2 decimals), ``reason`` (when
    the task did not simply exit; spaces become underscores), ``task``.
    """
    state = _tasks.status_of(task)
    exit_code = task.exit_code
    reason = str(task.reason or "")
    if state == "cancelled":
        status = "cancelled"
    elif state == "completed" and exit_code in (0, None):
        status = "completed"
    else:
        status = "failed"
    fields: dict[str, Any] = {}
    if exit_code is not None:
        fields["exit"] = int(exit_code)
    duration = _duration(task)
    if duration is not None:
        fields["duration"] = round(duration, 2)  # seconds; the renderer writes "2.31s"
    if status != "completed" and reason and reason != "exit":
        fields["reason"] = re.sub(r"\s+", "_", reason.strip())
    fields["task"] = str(task.id)
    return status, reason, fields


def _tail(log_dir: Any, name: str, limit: int) -> tuple[str, bool]:
    """The end of log `name`, and whether its first line is a note of what was
    left out before it."""
    if not log_dir:
        return "", False
    path = os.path.join(str(log_dir), name)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - limit)
            f.seek(start)
            data = f.read(limit)
    except OSError:
        return "", False
    note = ""
    if start:
        # Drop the partial first line (or at least a cut UTF-8 sequence).
        nl = data.find(b"\n")
        cut_line = 0 <= nl < 4096
        if cut_line:
            data = data[nl + 1 :]
        elif not is_binary(data):
            data = after_cut(data).lstrip(bytes(range(0x80, 0xC0)))
        skipped = size - len(data)
        lines = _count_lines(path, skipped)
        if lines is None or (lines == 0 and not cut_line):  # not "0 earlier lines":
            # the start of one long line was left out
            note = f"[... {skipped} earlier bytes not shown; full log: {path}]\n"
        else:
            note = f"[... {lines} earlier lines ({skipped} bytes) not shown; full log: {path}]\n"
    if is_binary(data):  # named by the log's own size, before any decoding
        return f"[binary output: {size} bytes not shown; full log: {path}]", False
    text = data.decode("utf-8", errors="replace")
    if text.endswith("\n"):
        text = text[:-1]
    return note + text, bool(note)


def _count_lines(path: str, end: int) -> int | None:
    """Newlines in the first `end` bytes of `path`; None past COUNT_LINES_BYTES
    or when the file cannot be read."""
    if end > COUNT_LINES_BYTES:
        return None
    count = 0
    try:
        with open(path, "rb") as f:
            while end > 0:
                chunk = f.read(min(_COUNT_CHUNK, end))
                if not chunk:
                    break
                count += chunk.count(b"\n")
                end -= len(chunk)
    except OSError:
        return None
    return count


def _duration(task: Any) -> float | None:
    if task.started_at is None or task.ended_at is None:
        return None
    return task.duration()


def _secs(seconds: float) -> str:
    return f"{seconds:g}s"


TOOL = RunTerminalCommand()
