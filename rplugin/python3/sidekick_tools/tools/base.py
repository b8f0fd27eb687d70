"""The seam between the host and every tool: context in, result out.

A tool is any object with ``name``, ``schema``, ``description``, an
``auto_accept(params, ctx)`` predicate and a coroutine ``run(params, ctx)``.
Tools never talk to Neovim; they get everything they need from `ToolContext`
and answer with a `ToolResult` that the host renders into a result block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Union, runtime_checkable

if TYPE_CHECKING:
    from ..config import Config
    from ..tasks.manager import TaskManager

FieldValue = Union[str, int, float]
Fields = dict[str, FieldValue]


@dataclass(frozen=True)
class ToolNames:
    """What answers call the task tools when they say what to call next.

    The chat's tools by default; another face of the same engine (the MCP
    server) passes its own names, so a hint never names a tool its caller lacks.
    """

    run: str = "run_terminal_command"
    ask: str = "use_agent"
    await_: str = "await_task"
    halt: str = "halt_task"
    status: str = "task_status"
    output: str = "task_output"
    list: str = "list_tasks"


CHAT_NAMES = ToolNames()


@dataclass
class ToolContext:
    """What a tool may use while it runs.

    ``cwd`` is the chat's working directory (absolute); relative paths in
    parameters are taken relative to it. ``tasks`` is the host's task manager,
    ``chat`` the chat identity (buffer name) and ``call_id`` the id of the call
    being run; both are handed on to tasks so completions find their way back.
    ``names`` is how answers name the task tools (see `ToolNames`).
    ``auto`` is true when the call runs because the policy approved it (chained
    or by the chat loop), not because the user ran it: such a command runs as
    the policy checked it and under ``auto_accept.timeout``.
    """

    cwd: str
    tasks: TaskManager
    config: Config
    chat: str = ""
    call_id: str = ""
    names: ToolNames = CHAT_NAMES
    auto: bool = False


@dataclass(frozen=True)
class Streams:
    """A task result's body in its parts: the tail of stdout, the tail of
    stderr, and a note on why the task ended ("" for none). The body joins them
    (`chat.render.join_streams`); whatever labels or cuts the streams takes
    them from here, never from the body's text, which the command wrote."""

    out: str = ""
    err: str = ""
    note: str = ""
    # the stream's first line is the tail read's note of what it left out
    # (not a line the command wrote, which may look the same)
    out_cut: bool = False
    err_cut: bool = False


@dataclass
class ToolResult:
    """The outcome of one call: what the host writes into the result block.

    ``fields`` become ``key=value`` pairs in the block's info string
    (``exit=``, ``task=``, ``duration=``, ``reason=``); values never contain
    whitespace. ``detail``, never written, is what a failed call's diagnostic
    says when the body's first line would not (read_files: the first file that
    failed and why, which no file's own text can forge). ``streams``: the
    body's parts, for a task's output (see `Streams`).
    """

    status: str  # one of chat/states.py RESULT_STATUSES
    body: str = ""
    fields: Fields = field(default_factory=dict)
    detail: str | None = None
    streams: Streams | None = None

    @classmethod
    def ok(cls, body: str = "", **fields: FieldValue) -> ToolResult:
        return cls("completed", body, dict(fields))

    @classmethod
    def fail(cls, body: str, **fields: FieldValue) -> ToolResult:
        return cls("failed", body, dict(fields))

    @classmethod
    def running(cls, body: str, **fields: FieldValue) -> ToolResult:
        return cls("running", body, dict(fields))

    @classmethod
    def cancelled(cls, body: str, **fields: FieldValue) -> ToolResult:
        return cls("cancelled", body, dict(fields))

    @classmethod
    def denied(cls, reason: str) -> ToolResult:
        return cls("denied", reason, {})


@runtime_checkable
class Tool(Protocol):
    """Interface every entry of ``tools.REGISTRY`` satisfies."""

    name: str
    schema: dict[str, Any]  # JSON schema of the parameters (see tools/schema.py)
    description: str  # one line, for docs and prompts

    def auto_accept(self, params: dict[str, Any], ctx: ToolContext) -> bool:
        """The tool's own condition for running without asking.

        Only `tools.policy.decide` combines it with the user's configuration;
        the host must ask `decide`, never this predicate alone.
        """
        ...

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> ToolResult: ...
