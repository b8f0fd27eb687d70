"""Helpers shared by the task tools (await_task, halt_task, task_status,
task_output, list_tasks) and use_agent: the TaskTool base, token checks, JSON
answers, log tails.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ..secrets_mask import mask, mask_value
from ..tasks.model import TERMINAL as TERMINAL  # the task tools' `_tasks.TERMINAL`
from ..tasks.model import is_token
from ..tasks.output import summary_of, tail_bytes
from ..text import clean, decode
from .base import CHAT_NAMES, ToolContext, ToolNames, ToolResult
from .schema import object_schema, string, validate

NOT_FOUND = "Task ID not found or expired."

TOKEN_SCHEMA = string(
    "The task's token (6 lowercase hex characters, e.g. a1b2c3).", min_length=1, max_length=64
)


def status_of(task: Any) -> str:
    return task.status.value


def answer(payload: dict[str, Any]) -> str:
    """A JSON object, pretty-printed: the body of every task tool's answer.
    Its strings are masked before they are encoded: a task's output lines are
    joined there by escaped breaks, and a secret form that holds to its line
    (a YAML `password:`) is not found in the encoded text."""
    return json.dumps(mask_value(payload), indent=2, ensure_ascii=False)


def short_label(text: str, limit: int) -> str:
    """`text` on one line, masked, at most `limit` characters (cut with "…").
    Masked before it is cut: a key cut short is no longer known by its form."""
    label = mask(" ".join(text.split()))
    return label if len(label) <= limit else label[: limit - 1] + "…"


def normalize_token(raw: Any) -> str:
    return raw.strip().lower() if isinstance(raw, str) else ""


def bad_token(raw: Any, names: ToolNames = CHAT_NAMES) -> str | None:
    """None when ``raw`` looks like a task token, else the sentence saying why not."""
    token = normalize_token(raw)
    if is_token(token):
        return None
    shown = json.dumps(raw, ensure_ascii=False) if isinstance(raw, str) else repr(raw)
    return (
        f"{NOT_FOUND} {shown} is not a task "
        "token: tokens are 6 lowercase hex characters (e.g. a1b2c3), as given by "
        f"{names.run}, {names.ask} or {names.list}."
    )


def names_of(ctx: Any) -> ToolNames:
    """The tool names the answers given in ``ctx`` use (the chat's by default)."""
    return ctx.names


def not_found(token: str, extra: dict[str, Any] | None = None) -> ToolResult:
    payload: dict[str, Any] = {"task": token, "status": "not_found", "error": NOT_FOUND}
    payload.update(extra or {})
    return ToolResult.fail(answer(payload), reason="not_found")


def lookup(ctx: Any, raw: Any) -> tuple[str, Any, ToolResult | None]:
    """(token, task, None) for a known task, else (token, None, failed result)."""
    token = normalize_token(raw)
    problem = bad_token(raw, names_of(ctx))
    if problem:
        return token, None, ToolResult.fail(problem, reason="not_found")
    task = ctx.tasks.get(token)
    if task is None:
        return token, None, not_found(token)
    return token, task, None


def own_task(ctx: Any, raw: Any) -> bool:
    """Whether the task `raw` names was started from the chat `ctx` is in; a
    token naming no task counts as the chat's own (the answer is "not found")."""
    token = normalize_token(raw)
    if not is_token(token):
        return True
    try:
        task = ctx.tasks.get(token)
    except Exception:
        return False
    return task is None or (bool(ctx.chat) and task.chat == ctx.chat)


class TaskTool:
    """Base of the tools that act on one task named by its token.

    They run without asking only on a task started from the same chat (or a
    token no task has: the answer is "not found"): another chat's, another
    Neovim's or an agent's task is reached only through a call the user runs
    by hand (DESIGN §7, §12). `run` validates the parameters against `schema`, lets `check` refuse
    more, looks the token up, and hands the task to `act`; a malformed or
    unknown token becomes the answer of `unknown`.
    """

    name = ""
    description = ""
    schema = object_schema({"task": TOKEN_SCHEMA}, required=["task"])

    def auto_accept(self, params: dict[str, Any], ctx: ToolContext) -> bool:
        return own_task(ctx, params.get("task"))

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> ToolResult:
        err = validate(self.schema, params)
        if err:
            return ToolResult.fail(err)
        refused = self.check(params)
        if refused is not None:
            return refused
        token, task, problem = lookup(ctx, params["task"])
        if problem is not None:
            return self.unknown(params, ctx, problem)
        return await self.act(params, ctx, token, task)

    def check(self, params: dict[str, Any]) -> ToolResult | None:
        """A failed result for parameters the schema cannot judge, else None."""
        return None

    def unknown(self, params: dict[str, Any], ctx: Any, problem: ToolResult) -> ToolResult:
        """The answer when the token is malformed or names no stored task."""
        return problem

    async def act(
        self, params: dict[str, Any], ctx: ToolContext, token: str, task: Any
    ) -> ToolResult:
        raise NotImplementedError


def summary(task: Any) -> str:
    """What the task produced, for the LLM: the stored summary (the manager's:
    last ``[RESULT]`` section, else what follows the last ``> `` prompt, else the
    tail; ANSI stripped), computed from the log's tail when none is stored."""
    stored = task.summary
    if stored:
        return str(stored)
    path = task.log_path
    if not path:
        return ""
    return summary_of(decode(tail_bytes(path, 64 * 1024)))


def tail_text(path: str | None, max_lines: int = 30, max_bytes: int = 8192) -> str:
    """The last lines of a log (ANSI stripped), bounded in lines and bytes."""
    if not path:
        return ""
    data = tail_bytes(path, max_bytes)
    if not data:
        return ""
    text = clean(data.decode("utf-8", errors="replace"))
    size = _size(path)
    if size > len(data) and "\n" in text:  # cut: drop the partial first line
        text = text.split("\n", 1)[1]
    lines = text.rstrip("\n").split("\n")
    return "\n".join(lines[-max_lines:]).strip("\n")


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))


def age(seconds: float) -> str:
    """Short human age: 42s, 3m12s, 2h05m, 3d04h."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def elapsed(task: Any, now: float | None = None) -> float:
    """Seconds the task has run (0 before it starts): `Task.duration`, never None."""
    return task.duration(now) or 0.0


def mark_read(ctx: Any, token: str) -> None:
    """The task's result reached the LLM (lets retention treat it as read)."""
    try:
        ctx.tasks.mark_read(token)
    except Exception:  # bookkeeping only: never fail the call for it
        pass


def agent_of(task: Any) -> str | None:
    env = task.env
    name = env.get("SIDEKICK_AGENT") if isinstance(env, dict) else None
    return str(name) if name else None
