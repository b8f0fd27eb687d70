"""await_task: wait (bounded) for a background task and say how it stands.

Waits up to ``timeout_seconds`` (default and cap: ``config.tasks.await_timeout``;
a larger value is capped, ``0`` only looks without waiting). The answer
is a JSON object::

    {"task": "a1b2c3", "status": "running|completed|failed|cancelled",
     "log_lines": 12, "timed_out": true, "waited_seconds": 55,
     "progress": {"percent": 40, "step": "..."},            # when known, running
     "message": "Task still running. Call await_task again to continue waiting."}

    {"task": ..., "status": "completed", "log_lines": 40, "timed_out": false,
     "waited_seconds": 3.2, "exit_code": 0, "summary": "...",
     "error": "exit 2"}                                     # error: failed/cancelled only

A queued task reports ``"status": "running", "queued": true``. The call itself
is ``completed`` whenever it produced an answer (also when the awaited task
failed: the answer says so); an unknown token is a ``failed`` call.
"""

from __future__ import annotations

import time
from typing import Any

from . import _tasks
from .base import CHAT_NAMES, ToolContext, ToolNames, ToolResult
from .schema import number, object_schema


def still_running(names: ToolNames = CHAT_NAMES) -> str:
    return f"Task still running. Call {names.await_} again to continue waiting."


STILL_RUNNING = still_running()


class AwaitTask(_tasks.TaskTool):
    name = "await_task"
    description = (
        "Wait up to {tasks.await_timeout} s for a background task; its summary when it is done."
    )
    schema = object_schema(
        {
            "task": _tasks.TOKEN_SCHEMA,
            "timeout_seconds": number(
                "Seconds to wait at most (capped at {tasks.await_timeout}).", minimum=0
            ),
        },
        required=["task"],
    )

    async def act(
        self, params: dict[str, Any], ctx: ToolContext, token: str, task: Any
    ) -> ToolResult:
        cap = max(0.0, float(ctx.config.tasks.await_timeout))
        wanted = params.get("timeout_seconds")
        limit = cap if wanted is None else min(float(wanted), cap)

        started = time.monotonic()
        if _tasks.status_of(task) not in _tasks.TERMINAL and limit > 0:
            try:
                task = await ctx.tasks.wait(token, limit)
            except KeyError:  # TaskNotFound: purged while we waited
                return _tasks.not_found(token)
        waited = round(time.monotonic() - started, 2)
        return ToolResult.ok(_tasks.answer(describe(ctx, token, task, waited)))


def describe(ctx: Any, token: str, task: Any, waited: float) -> dict[str, Any]:
    state = _tasks.status_of(task)
    done = state in _tasks.TERMINAL
    payload: dict[str, Any] = {
        "task": token,
        "status": state if done else "running",
        "log_lines": task.lines,
        "timed_out": not done,
        "waited_seconds": waited,
    }
    if state == "queued":
        payload["queued"] = True
        ahead = ctx.tasks.queue_position(token)
        if ahead is not None:
            payload["queued_behind"] = ahead
    if done:
        payload["exit_code"] = task.exit_code
        payload["summary"] = _tasks.summary(task)
        if state != "completed":
            reason = task.reason
            payload["error"] = task.error or reason or state
        _tasks.mark_read(ctx, token)
    else:
        percent = task.progress
        step = task.progress_text
        if percent is not None or step:
            payload["progress"] = {"percent": percent, "step": step}
        payload["message"] = still_running(_tasks.names_of(ctx))
    return payload


TOOL = AwaitTask()
