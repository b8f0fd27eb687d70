"""halt_task: stop a background task (SIGTERM to its process group, SIGKILL
after ``tasks.halt_grace`` seconds; a queued task is cancelled at once).

Answers (JSON object; the call is ``completed`` in both cases)::

    {"task": "a1b2c3", "status": "cancelled", "output": "<last lines>",
     "message": "Task a1b2c3 halted after 12s; ..."}

    {"task": "a1b2c3", "status": "completed", "exit_code": 0, "output": "...",
     "message": "Task a1b2c3 had already ended (completed, exit 0) ...; nothing to halt."}

An unknown token is a ``failed`` call: ``{"task", "status": "not_found", "error"}``.
"""

from __future__ import annotations

from typing import Any

from . import _tasks
from .base import CHAT_NAMES, ToolContext, ToolNames, ToolResult


class HaltTask(_tasks.TaskTool):
    name = "halt_task"
    description = "Stop a background task (its whole process group); returns its last output."

    async def act(
        self, params: dict[str, Any], ctx: ToolContext, token: str, task: Any
    ) -> ToolResult:
        if _tasks.status_of(task) in _tasks.TERMINAL:
            return ToolResult.ok(_tasks.answer(already_ended(token, task, _tasks.names_of(ctx))))
        try:
            final = await ctx.tasks.halt(token)
        except KeyError:  # TaskNotFound: purged meanwhile
            return _tasks.not_found(token)
        except Exception as e:  # the engine could not halt it: say so
            return ToolResult.fail(f"could not halt task {token}: {e}")
        state = _tasks.status_of(final)
        if state != "cancelled":
            # It ended by itself before the signal landed (or another halt won).
            return ToolResult.ok(_tasks.answer(already_ended(token, final, _tasks.names_of(ctx))))
        _tasks.mark_read(ctx, token)
        ran = _tasks.age(_tasks.elapsed(final))
        was_queued = final.started_at is None
        message = (
            f"Task {token} was cancelled before it started (it was queued)."
            if was_queued
            else f"Task {token} halted after {ran}: its process group got SIGTERM "
            "(SIGKILL if it did not exit within the grace period). Partial output is "
            f"kept; {_tasks.names_of(ctx).output} shows what was not read yet."
        )
        payload = {
            "task": token,
            "status": "cancelled",
            "output": _tasks.tail_text(final.log_path),
            "message": message,
        }
        return ToolResult.ok(_tasks.answer(payload))


def already_ended(token: str, task: Any, names: ToolNames = CHAT_NAMES) -> dict[str, Any]:
    state = _tasks.status_of(task)
    exit_code = task.exit_code
    how = state if exit_code is None else f"{state}, exit {exit_code}"
    reason = task.reason
    if reason and reason not in ("exit", state):
        how += f", {reason}"
    ended = _tasks.iso(task.ended_at)
    when = f" at {ended}" if ended else ""
    return {
        "task": token,
        "status": state,
        "exit_code": exit_code,
        "output": _tasks.tail_text(task.log_path),
        "message": f"Task {token} had already ended ({how}){when}; nothing to halt. "
        f'Its result: {names.status} {{"task": "{token}"}}.',
    }


TOOL = HaltTask()
