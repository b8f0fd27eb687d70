"""task_status: how a task stands, at once (no waiting). The four shapes of DESIGN §7::

    {"status": "running", "elapsed_seconds": 12.3}
    {"status": "running", "elapsed_seconds": 0, "queued": true}     # queued
    {"status": "completed", "result": "<summary>"}
    {"status": "failed", "error": "exit 2: <summary>"}
    {"status": "not_found", "error": "Task ID not found or expired."}

A cancelled (halted) task answers the ``failed`` shape with an error starting
``cancelled``: the four shapes are the contract, and for the caller a halted
task is one that did not produce its result. The call is ``completed`` for the
first three shapes and ``failed`` for ``not_found`` (and for malformed tokens).
"""

from __future__ import annotations

from typing import Any

from . import _tasks
from .base import ToolContext, ToolResult


class TaskStatusTool(_tasks.TaskTool):
    name = "task_status"
    description = "Status of a background task: running, completed (result) or failed (error)."

    def unknown(self, params: dict[str, Any], ctx: Any, problem: ToolResult) -> ToolResult:
        # A malformed token gets the same shape, its error saying what is wrong.
        error = _tasks.bad_token(params["task"], _tasks.names_of(ctx)) or _tasks.NOT_FOUND
        body = _tasks.answer({"status": "not_found", "error": error})
        return ToolResult.fail(body, reason="not_found")

    async def act(
        self, params: dict[str, Any], ctx: ToolContext, token: str, task: Any
    ) -> ToolResult:
        return ToolResult.ok(_tasks.answer(shape(ctx, token, task)))


def shape(ctx: Any, token: str, task: Any) -> dict[str, Any]:
    state = _tasks.status_of(task)
    if state == "queued":
        return {"status": "running", "elapsed_seconds": 0, "queued": True}
    if state == "running":
        return {"status": "running", "elapsed_seconds": round(_tasks.elapsed(task), 1)}
    _tasks.mark_read(ctx, token)
    summary = _tasks.summary(task).strip("\n")
    if state == "completed":
        return {"status": "completed", "result": summary}
    reason = task.reason
    error = task.error
    if state == "cancelled":  # who halted it, when the plugin did: else a person
        why = error if error and error != "cancelled" else "halted"
        head = f"cancelled before it finished ({why})"
    else:
        head = str(error or reason or "failed")
        if reason == "timeout" and "time" not in head:
            head = f"timed out: {head}"
    return {"status": "failed", "error": f"{head}: {summary}" if summary else head}


TOOL = TaskStatusTool()
