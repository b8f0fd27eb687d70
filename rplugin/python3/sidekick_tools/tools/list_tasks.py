"""list_tasks: this chat's tasks, grouped: running (queued included),
completed (the most recent), failed (cancelled included).

Scope: the tasks started from this chat (``ctx.chat``), whichever Neovim ran
them; the tasks of other chats, other Neovims and agents are not listed, so
the tool runs without asking and shows the model nothing it did not start
(``:SidekickTasks`` shows the user everything). ``status`` narrows to one
group (``running``, ``completed``, ``failed``; ``queued`` and ``cancelled``
narrow further; ``all``, every status, is the default). Each group lists at
most `PER_GROUP` tasks, newest first, and says how many more exist.

Body (plain text)::

    Running (1):
      a1b2c3  use_agent(reviewer)  "reviewer: check the diff"  running 12s, 40% step
    Completed, newest first (1):
      d4e5f6  run_terminal_command  "make"  ended 3m05s ago, exit 0, took 2s
    Failed (0): none
    Read new output with task_output {"task": "TOKEN"}, wait with await_task, stop a
    running task with halt_task {"task": "TOKEN"}.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from ..tasks.model import NAMES
from . import _tasks
from .base import CHAT_NAMES, ToolContext, ToolNames, ToolResult
from .schema import object_schema, string, validate

PER_GROUP = 20
LABEL_CHARS = 60

GROUPS = (
    ("running", "Running", ("running", "queued")),
    ("completed", "Completed, newest first", ("completed",)),
    ("failed", "Failed or cancelled", ("failed", "cancelled")),
)
NARROW = {"queued": ("running", ("queued",)), "cancelled": ("failed", ("cancelled",))}

# (tasks, total) of one group: at most PER_GROUP tasks with these statuses, newest first.
Fetch = Callable[[set[str]], tuple[list[Any], int]]


def closing(names: ToolNames = CHAT_NAMES) -> str:
    return (
        f'Read a task\'s new output with {names.output} {{"task": "TOKEN"}}, wait for it with '
        f'{names.await_} {{"task": "TOKEN"}}, stop a running one with {names.halt} '
        '{"task": "TOKEN"}.'
    )


CLOSING = closing()


class ListTasks:
    name = "list_tasks"
    description = "This chat's tasks grouped by status, with token, tool or agent, label, age."
    schema = object_schema(
        {
            "status": string(
                "Only this group (default all).",
                enum=["all", *NAMES],
            )
        }
    )

    def auto_accept(self, params: dict[str, Any], ctx: ToolContext) -> bool:
        # a chat without a name shares the name "" with every other such buffer
        # (any Neovim's): their tasks are listed only when the user runs it
        return bool(ctx.chat)

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> ToolResult:
        err = validate(self.schema, params)
        if err:
            return ToolResult.fail(err)
        chats = [ctx.chat]

        def fetch(statuses: set[str]) -> tuple[list[Any], int]:
            tasks = ctx.tasks.list(status=statuses, chats=chats, limit=PER_GROUP)
            return tasks, ctx.tasks.count(status=statuses, chats=chats)

        return listing(ctx, params.get("status") or "all", fetch)


def listing(ctx: Any, wanted: str, fetch: Fetch) -> ToolResult:
    """The grouped list of the tasks `fetch` returns; ``wanted`` narrows to one group."""
    now = time.time()
    groups = []
    for key, title, statuses in GROUPS:
        if wanted in NARROW:
            if NARROW[wanted][0] != key:
                continue
            statuses = NARROW[wanted][1]
        elif wanted not in ("all", key):
            continue
        try:
            tasks, total = fetch(set(statuses))
        except Exception as e:  # store trouble: say so rather than crash
            return ToolResult.fail(f"could not list tasks: {e}")
        groups.append(_group(ctx, title, tasks, total, now))
    lines = [line for group in groups for line in group]
    lines.append(closing(_tasks.names_of(ctx)))
    return ToolResult.ok("\n".join(lines))


def _group(ctx: Any, title: str, tasks: list[Any], total: int, now: float) -> list[str]:
    if not tasks:
        return [f"{title} (0): none"]
    out = [f"{title} ({total}):"]
    for task in tasks:
        out.append("  " + _row(ctx, task, now))
    if total > len(tasks):
        out.append(f"  ... {total - len(tasks)} older not shown")
    return out


def _row(ctx: Any, task: Any, now: float) -> str:
    agent = _tasks.agent_of(task)
    tool = _tool_name(_tasks.names_of(ctx), str(task.tool))
    tool = f"{tool}({agent})" if agent else tool
    label = str(task.label or task.call_command or task.command or "")
    label = _tasks.short_label(label, LABEL_CHARS)
    return f"{task.id}  {tool}  {json.dumps(label, ensure_ascii=False)}  {_state(ctx, task, now)}"


def _tool_name(names: Any, tool: str) -> str:
    """The tool that started a task, by the name its reader calls it (the MCP
    server's `run` and `ask`): a row never names a tool the reader lacks."""
    return {CHAT_NAMES.run: names.run, CHAT_NAMES.ask: names.ask}.get(tool, tool)


def _state(ctx: Any, task: Any, now: float) -> str:
    state = _tasks.status_of(task)
    if state == "queued":
        ahead = ctx.tasks.queue_position(task.id)
        waiting = _tasks.age(now - (task.created_at or now))
        return f"queued {waiting}" + (f" ({ahead} ahead)" if ahead else "")
    if state == "running":
        text = f"running {_tasks.age(_tasks.elapsed(task, now))}"
        if task.progress is not None:
            text += f", {task.progress}%"
        if task.progress_text:
            text += f" {task.progress_text}"
        return text
    ended = task.ended_at or task.created_at or now
    text = f"{state} {_tasks.age(now - ended)} ago"
    if task.exit_code is not None:
        text += f", exit {task.exit_code}"
    if state != "completed" and task.reason and task.reason not in ("exit", state):
        text += f" ({task.reason})"
    if task.started_at is not None:
        text += f", took {_tasks.age(_tasks.elapsed(task))}"
    return text


TOOL = ListTasks()
