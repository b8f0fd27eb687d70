"""The MCP tools over the task engine: their schemas and what each call does.

Plain asyncio, no SDK: `server` turns MCP requests into `Face.call` and its
`Answer` into a tool result. Each tool reuses the chat's tool of the same job
(run_terminal_command, use_agent, await_task, halt_task, task_status,
task_output, list_tasks), with the MCP names in its hints.

Who may reach what:

- Tasks started through MCP are stored with ``chat = "mcp:<client name>"``
  and ``call_id = "mcp-<8 hex>"``; every MCP client may reach every such task.
- Neovim's own tasks are reached (await, halt, status, output, list) only when
  the user set ``mcp.share_editor_tasks = true``; otherwise a call naming one
  is refused with a message saying so (``is_error``), and `list` leaves them out.
- "New since the last read" (`output`) is kept per client name.
"""

from __future__ import annotations

import copy
import re
import secrets
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..config import MCP_CHAT_PREFIX
from ..tasks.model import is_token
from ..tools import (
    _tasks,
    await_task,
    described,
    halt_task,
    list_tasks,
    run_terminal_command,
    task_output,
    task_status,
    use_agent,
)
from ..tools.base import ToolContext, ToolNames, ToolResult
from ..tools.schema import object_schema, validate
from . import answers
from .answers import Answer
from .progress import ProgressReporter, Report
from .settings import ConfigSource

NAMES = ToolNames(
    run="run", ask="ask", await_="await", halt="halt", status="status", output="output", list="list"
)
CHAT_PREFIX = MCP_CHAT_PREFIX
MAX_COMMAND = 64 * 1024  # a shell command line, in characters
MAX_MESSAGE = 100_000  # one argv item; Linux refuses items over 128 KiB


class UnknownTool(LookupError):
    """A tools/call naming no tool of this server (a protocol error in MCP)."""

    def __init__(self, name: str) -> None:
        known = ", ".join(TOOL_ORDER)
        super().__init__(f"Unknown tool: {name!r}. This server's tools: {known}.")


@dataclass(frozen=True)
class Spec:
    name: str
    describe: Callable[[Any], str]  # config -> description
    schema: dict[str, Any]


def _pick(schema: dict[str, Any], keep: list[str], **changes: dict[str, Any]) -> dict[str, Any]:
    """An object schema with some of ``schema``'s properties, each updated by ``changes``."""
    props = {}
    for name in keep:
        prop = copy.deepcopy(schema["properties"][name])
        prop.update(changes.get(name, {}))
        props[name] = prop
    return object_schema(props, required=[n for n in schema.get("required", []) if n in keep])


# `async` for MCP clients: a call is cut at the client's own time limit (often
# 60 s), and a cut `async: false` call never gives the agent its task's token.
_ASYNC = {
    "description": "true: the task token at once; absent: wait up to "
    "{tasks.hybrid_threshold} s, then the result or the token; false: wait for the end "
    "however long it takes (past your client's time limit for one call the call fails "
    "and the task goes on: find its token with list)."
}


SPECS: dict[str, Spec] = {
    s.name: s
    for s in (
        Spec(
            "run",
            lambda c: (
                "Run a shell command (/bin/sh -c) as a background task of the task engine "
                f"shared with Neovim. Waits up to {c.tasks.hybrid_threshold:g}s for the result "
                "(exit code, output tail); a longer task answers with its token for await, output "
                "and halt. Output lines [PROGRESS:NN] text report progress."
            ),
            _pick(
                run_terminal_command.TOOL.schema,
                ["command", "cwd", "async", "timeout_seconds"],
                command={"maxLength": MAX_COMMAND},
                **{"async": _ASYNC},
                cwd={
                    "maxLength": 4096,
                    "description": "Working directory (default: the server's).",
                },
            ),
        ),
        Spec(
            "ask",
            lambda c: (
                "Delegate a message to a configured agent CLI (Neovim's `agents` setting: "
                + (", ".join(sorted(c.agents)) or "none configured")
                + f"), run as a background task. Waits up to {c.tasks.hybrid_threshold:g}s; "
                "answers with the agent's summary, or its task token for await."
            ),
            _pick(
                use_agent.TOOL.schema,
                ["agent", "message", "async"],
                message={"maxLength": MAX_MESSAGE},
                **{"async": _ASYNC},
            ),
        ),
        Spec(
            "await",
            lambda c: (
                f"Wait up to {c.tasks.await_timeout:g}s for a task (also the maximum); "
                "its summary when it is done, else 'still running': call await again."
            ),
            _pick(
                await_task.TOOL.schema,
                ["task", "timeout_seconds"],
                timeout_seconds={"description": "Seconds to wait at most (capped; 0: only look)."},
            ),
        ),
        Spec(
            "halt",
            lambda c: (
                "Stop a task: SIGTERM to its whole process group, SIGKILL after "
                f"{c.tasks.halt_grace:g}s; answers with its last output."
            ),
            _pick(halt_task.TOOL.schema, ["task"]),
        ),
        Spec(
            "status",
            lambda c: (
                "A task's status at once: running (elapsed, progress), completed (result), "
                "failed (error), cancelled, or not_found."
            ),
            _pick(task_status.TOOL.schema, ["task"]),
        ),
        Spec(
            "output",
            lambda c: (
                "A task's output that this client has not read yet, with its progress. "
                "With filter (a regex), only the matching new lines; a filtered read marks "
                "nothing as read. stream: stdout (default) or stderr, each read on its own."
            ),
            _pick(task_output.TOOL.schema, ["task", "filter", "stream"]),
        ),
        Spec(
            "list",
            lambda c: (
                "Tasks started by MCP clients"
                + (" and by Neovim" if c.mcp.share_editor_tasks else "")
                + ", grouped by status, newest first, with token, label and state."
            ),
            _pick(list_tasks.TOOL.schema, ["status"]),
        ),
    )
}
TOOL_ORDER = tuple(SPECS)


def client_chat(name: str | None) -> str:
    """The chat identity of an MCP client: ``mcp:<name>`` (name cleaned, bounded)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name or "").strip("-")[:40]
    return CHAT_PREFIX + (cleaned or "client")


def is_mcp_task(task: Any) -> bool:
    return task.chat.startswith(CHAT_PREFIX)


Handler = Callable[["Face", dict[str, Any], ToolContext, Optional[Report]], Awaitable[Answer]]


class Face:
    """The seven MCP tools over one TaskManager."""

    def __init__(self, tasks: Any, source: ConfigSource, cwd: str) -> None:
        self.tasks = tasks
        self.source = source
        self.cwd = cwd

    def tools(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(name, description, input schema) of each tool, in a stable order; the
        schemas' descriptions carry the configured values (tools/described.py)."""
        config = self.source.current()
        return [
            (s.name, s.describe(config), described.schema(s.schema, config)) for s in SPECS.values()
        ]

    async def call(
        self, name: str, args: Any, client: str | None, report: Report | None = None
    ) -> Answer:
        """Run tool ``name``. Raises `UnknownTool`; every other problem is an error Answer."""
        spec = SPECS.get(name)
        if spec is None:
            raise UnknownTool(name)
        args = {} if args is None else args
        problem = validate(spec.schema, args)
        if problem:
            return answers.error(f"{name}: {problem}")
        ctx = ToolContext(
            cwd=self.cwd,
            tasks=self.tasks,
            config=self.source.current(),
            chat=client_chat(client),
            call_id="mcp-" + secrets.token_hex(4),
            names=NAMES,
        )
        return await _HANDLERS[name](self, args, ctx, report)

    def refusal(self, ctx: ToolContext, raw: Any) -> Answer | None:
        """The refusal when ``raw`` names a Neovim task that is not shared, else None
        (a malformed or unknown token is the tool's own answer)."""
        token = _tasks.normalize_token(raw)
        if ctx.config.mcp.share_editor_tasks or not is_token(token):
            return None
        task = self.tasks.get(token)
        if task is None or is_mcp_task(task):
            return None
        return answers.refused(token)

    def reporter(self, report: Report | None, **which: Any) -> Any:
        return _Reporting(self.tasks, report, which)

    def fetch_for(self, ctx: ToolContext) -> list_tasks.Fetch:
        """What `list` shows: every task when Neovim's are shared, else the MCP ones."""
        if ctx.config.mcp.share_editor_tasks:

            def every(statuses: set[str]) -> tuple[list[Any], int]:
                found = self.tasks.list(status=statuses, limit=list_tasks.PER_GROUP)
                return found, self.tasks.count(status=statuses)

            return every

        def mcp_only(statuses: set[str]) -> tuple[list[Any], int]:
            # selected by the store (an index range on the chat name): however
            # many tasks Neovims keep there, none is read, and none of the
            # MCP clients' is missed
            shown = self.tasks.list(
                status=statuses, limit=list_tasks.PER_GROUP, chat_prefix=CHAT_PREFIX
            )
            return shown, self.tasks.count(status=statuses, chat_prefix=CHAT_PREFIX)

        return mcp_only


class _Reporting:
    """`ProgressReporter` when the client asked for progress, else nothing."""

    def __init__(self, tasks: Any, report: Report | None, which: dict[str, Any]) -> None:
        self.inner = ProgressReporter(tasks, report, **which) if report is not None else None

    async def __aenter__(self) -> None:
        if self.inner is not None:
            await self.inner.__aenter__()

    async def __aexit__(self, *exc: object) -> None:
        if self.inner is not None:
            await self.inner.__aexit__(*exc)


async def _run_task_tool(face: Face, tool: Any, args: dict[str, Any], ctx: ToolContext, report):
    async with face.reporter(report, chat=ctx.chat, call_id=ctx.call_id):
        result: ToolResult = await tool.run(args, ctx)
    token = result.fields.get("task")
    task = face.tasks.get(str(token)) if token else None
    mode = args.get("async")
    waited = None if mode is True else ctx.config.tasks.hybrid_threshold
    return answers.from_task_call(result, task, NAMES, ctx.config.result_max_lines, waited)


async def _run(face: Face, args: dict[str, Any], ctx: ToolContext, report) -> Answer:
    return await _run_task_tool(face, run_terminal_command.TOOL, args, ctx, report)


async def _ask(face: Face, args: dict[str, Any], ctx: ToolContext, report) -> Answer:
    return await _run_task_tool(face, use_agent.TOOL, args, ctx, report)


def _on_task(tool: Any, waits: bool = False) -> Handler:
    """A handler that runs the chat's ``tool`` on the task named by ``args["task"]``."""

    async def handle(face: Face, args: dict[str, Any], ctx: ToolContext, report) -> Answer:
        refused = face.refusal(ctx, args["task"])
        if refused is not None:
            return refused
        if waits and is_token(_tasks.normalize_token(args["task"])):
            token = _tasks.normalize_token(args["task"])
            async with face.reporter(report, token=token):
                return answers.from_tool(await tool.run(args, ctx))
        return answers.from_tool(await tool.run(args, ctx))

    return handle


async def _status(face: Face, args: dict[str, Any], ctx: ToolContext, report) -> Answer:
    refused = face.refusal(ctx, args["task"])
    if refused is not None:
        return refused
    token, task, problem = _tasks.lookup(ctx, args["task"])
    if problem is not None:
        return answers.from_tool(task_status.TOOL.unknown(args, ctx, problem))
    data = task_status.shape(ctx, token, task)
    state = _tasks.status_of(task)
    if state == "cancelled":  # MCP has a cancelled shape of its own (DESIGN §11)
        data["status"] = "cancelled"
    elif data["status"] == "running":
        progress = answers.progress_of(task)
        if progress is not None:
            data["progress"] = progress
    return answers.payload({"task": token, **data})


async def _list(face: Face, args: dict[str, Any], ctx: ToolContext, report) -> Answer:
    result = list_tasks.listing(ctx, args.get("status") or "all", face.fetch_for(ctx))
    return answers.from_tool(result)


_HANDLERS: dict[str, Handler] = {
    "run": _run,
    "ask": _ask,
    "await": _on_task(await_task.TOOL, waits=True),
    "halt": _on_task(halt_task.TOOL),
    "status": _status,
    "output": _on_task(task_output.TOOL),
    "list": _list,
}
