"""What the MCP tools answer: one text (a JSON object, then the output after a
``--- output ---`` line when there is any) and whether it is an error.

The chat's tools already answer `await`, `halt`, `output`, `status` and `list`
in the shapes of DESIGN §7; their bodies pass through. `run` and `ask` answer
with a JSON head built from the chat's result (exit code, duration, reason,
task token) over the cleaned, tail-truncated output or agent summary.

``is_error`` marks a call that did not do its job (bad arguments, unknown or
malformed token, a refused task, a command that could not start); a task that
ran and failed is an answer, not an error. Every text is masked
(`secrets_mask.mask`, the plugin's one masker).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..chat.render import clean_output, truncate_streams, truncate_tail
from ..secrets_mask import mask
from ..tools import _tasks
from ..tools.base import ToolNames, ToolResult

SEPARATOR = "--- output ---"


@dataclass(frozen=True)
class Answer:
    text: str
    is_error: bool = False


def answer(text: str, is_error: bool = False) -> Answer:
    return Answer(mask(text), is_error)


def error(message: str) -> Answer:
    return answer(message, True)


def is_call_error(result: ToolResult) -> bool:
    """The call itself failed: no task ran (none was made, or it could not
    start: an argument list too long, a NUL byte), or no answer about one."""
    if result.status not in ("failed", "denied"):
        return False
    return "task" not in result.fields or result.fields.get("reason") == "spawn_error"


def from_tool(result: ToolResult) -> Answer:
    """A task tool's answer as it is."""
    return answer(result.body, is_call_error(result))


def payload(data: dict[str, Any], output: str = "") -> Answer:
    body = _tasks.answer(data)
    return answer(f"{body}\n{SEPARATOR}\n{output}" if output else body)


def progress_of(task: Any) -> dict[str, Any] | None:
    if task is None or (task.progress is None and not task.progress_text):
        return None
    return {"percent": task.progress, "step": task.progress_text or None}


def from_task_call(
    result: ToolResult, task: Any, names: ToolNames, max_lines: int, waited: float | None
) -> Answer:
    """`run` / `ask`: the task's result, or where it stands when it outlived the wait."""
    if is_call_error(result):
        why = task.error if task is not None else None
        return answer(f"{result.body}\n{why}" if why else result.body, True)
    token = str(result.fields.get("task", ""))
    if result.status == "running":
        return payload(running(token, task, names, waited))
    head: dict[str, Any] = {"task": token, "status": result.status}
    fields = result.fields
    head["exit_code"] = fields.get("exit")
    if "duration" in fields:
        head["duration_seconds"] = fields["duration"]
    if "reason" in fields:
        head["reason"] = fields["reason"]
    if task is not None and result.status != "completed" and task.error:
        head["error"] = task.error
    progress = progress_of(task)
    if progress is not None:
        head["progress"] = progress
    logs = (task.log_path, task.stderr_path) if task is not None else (None, None)  # purged?
    parts = result.streams
    if parts is None:
        text = truncate_tail(_cleaned(result.body), max_lines, logs[0])
    else:
        out, err, note = (_cleaned(part) for part in (parts.out, parts.err, parts.note))
        text = truncate_streams(out, err, note, max_lines, *logs, parts.out_cut, parts.err_cut)
    return payload(head, text.rstrip("\n"))


def _cleaned(text: str) -> str:
    return clean_output(text.encode("utf-8", "replace"))


def running(token: str, task: Any, names: ToolNames, waited: float | None) -> dict[str, Any]:
    """Where a task stands that a call stopped waiting for."""
    queued = task is not None and _tasks.status_of(task) == "queued"
    head: dict[str, Any] = {"task": token, "status": "running"}
    if queued:
        head["queued"] = True
    head["elapsed_seconds"] = round(_tasks.elapsed(task), 1) if task is not None else 0
    progress = progress_of(task)
    if progress is not None:
        head["progress"] = progress
    state = "queued (the concurrency limit is reached)" if queued else "running"
    lead = (
        f"Started in the background as task {token}, {state}."
        if waited is None
        else f"Still {state} after {waited:g}s, in the background as task {token}."
    )
    head["message"] = (
        f'{lead} Wait for it with {names.await_} {{"task": "{token}"}} (call it again '
        f"while it runs), read its output with {names.output}, stop it with {names.halt}. "
        "It is also listed in Neovim (:SidekickTasks!)."
    )
    return head


def refused(token: str) -> Answer:
    """A Neovim task asked for while the user has not shared them."""
    return error(
        _tasks.answer(
            {
                "task": token,
                "status": "refused",
                "error": f"Task {token} was started in Neovim, and Neovim's tasks are not shared "
                "with MCP clients. The user can allow it with "
                "require('sidekick_tools').setup({ mcp = { share_editor_tasks = true } }).",
            }
        )
    )
